//! Sums and maxima whose terms `ksc build --reassociate` lets the C
//! compiler combine in any order.
//!
//! By default native code adds the terms of a Float sum in the program's
//! order, as the interpreter does, so the two give the same bits; but then
//! each addition waits for the one before, and the C compiler may not
//! vectorise the loop. With `--reassociate` (the C macro
//! `KSC_REASSOCIATE`), a loop whose only effect is to add into Float
//! variables of its surroundings is marked `omp simd reduction(+: ..)`: the
//! compiler keeps several partial sums (one per vector lane) and adds them
//! at the end. The result differs from the ordered sum by rounding only:
//! for n terms, by at most about n ε Σ|term| (ε = 2^-53). A loop that only
//! keeps a maximum is marked `omp simd reduction(max: ..)`: the same value,
//! but for which of two equal zeros, or whether a NaN that the variable
//! held before the loop, is kept.
//!
//! A loop `for i < n { body }` qualifies when, wherever in its body:
//! - the only statements are lets of pure values (no call, allocation or
//!   copy), checks, `if`s and loops of the same kind, assignments, and
//!   stores into element `i` of tensors the body does not otherwise use;
//! - every mutable variable assigned is the body's own, or a Float `s` of
//!   the surroundings assigned once per iteration, at the top of the body,
//!   `s := s + t` (`t` computed in the iteration without `s`), and read
//!   nowhere else in the body; or a Float `m` kept as a maximum, `if t > m
//!   { m := t }` or `m := fmax m t`, likewise.
//!
//! Which of the loops that qualify are marked is the emitter's choice
//! (`emit.rs`: loops over data, in no other loop).
//!
//! So iterations are independent but for their additions into the sums,
//! and what each iteration adds does not depend on the order. Nothing is
//! printed or allocated, and each iteration stores only its own element,
//! so a loop that stops at a failing check has no other effect to
//! reorder.

use ksc_ir::Type;
use ksc_lower::ir::*;
use ksc_lower::visit::{defined_in, stmt_operands, walk};
use rustc_hash::FxHashMap;

/// The variables of the surroundings that a loop only combines into, by
/// kind.
#[derive(Debug, Default, PartialEq)]
pub struct Reductions {
    /// `s := s + t`.
    pub sums: Vec<VarId>,
    /// `if t > m { m := t }` or `m := fmax m t` (`m < t ? t : m`).
    pub maxima: Vec<VarId>,
}

/// The Float variables that `for idx < n { body }` of `f` only adds into or
/// takes the maximum into, if the loop qualifies (see the module's
/// documentation).
pub fn reductions(f: &Func, idx: VarId, body: &Block) -> Reductions {
    let own = defined_in(body);
    let mut ok = true;
    let mut assigned = Vec::new();
    let mut stored = Vec::new();
    walk(body, &mut |s| match s {
        Stmt::Let(_, rhs) => ok &= rhs.is_pure(),
        Stmt::DeclMut(..) | Stmt::Check { .. } | Stmt::If { .. } | Stmt::For { .. } => {}
        Stmt::Set(v, _) => {
            if !own.contains(v) {
                assigned.push(*v);
            }
        }
        // Each iteration's own element (`$buildSum`'s loop stores its terms).
        Stmt::Store { arr: Op::Var(a), idx: Op::Var(i), .. } if *i == idx => stored.push(*a),
        _ => ok = false,
    });
    let mut out = Reductions::default();
    if !ok {
        return out;
    }
    // The top-level definitions of the body, to follow `s := t` back to
    // `t = s + u` (through a copy of `s`).
    let defs: FxHashMap<VarId, &Rhs> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(v, rhs) => Some((*v, rhs)),
            _ => None,
        })
        .collect();
    // Reads of each variable anywhere in the body.
    let mut reads: FxHashMap<VarId, usize> = FxHashMap::default();
    walk(body, &mut |s| {
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                *reads.entry(*v).or_default() += 1;
            }
        }
    });
    let reads_of = |v: &VarId| reads.get(v).copied().unwrap_or(0);
    // A tensor stored into is used only by those stores: no iteration
    // reads what another writes.
    if stored.iter().any(|a| reads_of(a) != stored.iter().filter(|&b| b == a).count()) {
        return out;
    }
    for &s in &assigned {
        // A Float assigned once per iteration and read once, in its own
        // update: directly, or through a copy read only there.
        if f.ty(s) != &Type::Float || assigned.iter().filter(|&&x| x == s).count() != 1 || reads_of(&s) != 1 {
            return Reductions::default();
        }
        let is_s = |o: &Op| match o {
            Op::Var(x) => *x == s || matches!(defs.get(x), Some(Rhs::Copy(Op::Var(y))) if *y == s && reads_of(x) == 1),
            _ => false,
        };
        // The update, at the top of the body; its value read only there.
        let update = body.iter().find_map(|st| match st {
            Stmt::Set(x, Op::Var(t)) if *x == s && reads_of(t) == 1 => match defs.get(t) {
                Some(Rhs::Bin(BinOp::FAdd, a, b)) if is_s(a) != is_s(b) => Some(true),
                Some(Rhs::Bin(BinOp::FMax, a, b)) if is_s(a) && !is_s(b) => Some(false),
                _ => None,
            },
            // `if t > m { m := t }` (`c = t > m` or `m < t`).
            Stmt::If { cond: Op::Var(c), then, els } if els.is_empty() && reads_of(c) == 1 => match &then[..] {
                [Stmt::Set(x, t)] if *x == s => match defs.get(c) {
                    Some(Rhs::Bin(BinOp::FGt, a, b)) if a == t && is_s(b) => Some(false),
                    Some(Rhs::Bin(BinOp::FLt, a, b)) if b == t && is_s(a) => Some(false),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        });
        match update {
            Some(true) => out.sums.push(s),
            Some(false) => out.maxima.push(s),
            None => return Reductions::default(),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: VarId = VarId(0);
    const I: VarId = VarId(1);
    const S: VarId = VarId(2);
    const M: VarId = VarId(3);
    const T: VarId = VarId(4);
    const C: VarId = VarId(5);
    const U: VarId = VarId(6);

    fn func() -> Func {
        let f = Type::Float;
        Func::for_tests(
            vec![Type::vec(f.clone()), Type::Integer, f.clone(), f.clone(), f.clone(), f.clone(), f],
            vec![],
        )
    }

    /// `t = x[i]; c = s; u = c + t; s := u`.
    fn sum_body() -> Block {
        vec![
            Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
            Stmt::Let(C, Rhs::Copy(Op::Var(S))),
            Stmt::Let(U, Rhs::Bin(BinOp::FAdd, Op::Var(C), Op::Var(T))),
            Stmt::Set(S, Op::Var(U)),
        ]
    }

    #[test]
    fn a_loop_adding_into_a_float_is_a_sum() {
        assert_eq!(reductions(&func(), I, &sum_body()).sums, vec![S]);
        // The operands the other way round, and `s` read directly.
        let body = vec![
            Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
            Stmt::Let(U, Rhs::Bin(BinOp::FAdd, Op::Var(T), Op::Var(S))),
            Stmt::Set(S, Op::Var(U)),
        ];
        assert_eq!(reductions(&func(), I, &body).sums, vec![S]);
    }

    #[test]
    fn a_loop_keeping_the_largest_float_takes_a_maximum() {
        let body = vec![
            Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
            Stmt::Let(C, Rhs::Bin(BinOp::FGt, Op::Var(T), Op::Var(M))),
            Stmt::If { cond: Op::Var(C), then: vec![Stmt::Set(M, Op::Var(T))], els: vec![] },
        ];
        assert_eq!(reductions(&func(), I, &body), Reductions { sums: vec![], maxima: vec![M] });
        let fmax = vec![
            Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
            Stmt::Let(U, Rhs::Bin(BinOp::FMax, Op::Var(M), Op::Var(T))),
            Stmt::Set(M, Op::Var(U)),
        ];
        assert_eq!(reductions(&func(), I, &fmax).maxima, vec![M]);
    }

    #[test]
    fn a_sum_may_store_its_terms_each_in_its_own_element() {
        // `$buildSum`: store t at i and add it.
        let mut body = sum_body();
        body.push(Stmt::Store { arr: Op::Var(M), idx: Op::Var(I), val: Op::Var(T) });
        assert_eq!(reductions(&func(), I, &body).sums, vec![S]);
        // Not at another element, nor into a tensor the loop reads.
        let none = Reductions::default();
        let mut other = sum_body();
        other.push(Stmt::Store { arr: Op::Var(M), idx: Op::Int(0), val: Op::Var(T) });
        assert_eq!(reductions(&func(), I, &other), none);
        let mut read = sum_body();
        read.push(Stmt::Store { arr: Op::Var(X), idx: Op::Var(I), val: Op::Var(T) });
        assert_eq!(reductions(&func(), I, &read), none);
    }

    #[test]
    fn partial_sums_read_or_other_effects_keep_the_order() {
        let none = Reductions::default();
        // The partial sum stored, or read by the next term.
        let mut stored = sum_body();
        stored.push(Stmt::Store { arr: Op::Var(M), idx: Op::Var(I), val: Op::Var(U) });
        assert_eq!(reductions(&func(), I, &stored), none);
        let mut read = sum_body();
        read.insert(0, Stmt::Let(T, Rhs::Bin(BinOp::FMul, Op::Var(S), Op::Float(2.0))));
        read.remove(1);
        assert_eq!(reductions(&func(), I, &read), none);
        // A product, a subtraction, a print, a call.
        for op in [BinOp::FMul, BinOp::FSub] {
            let mut b = sum_body();
            b[2] = Stmt::Let(U, Rhs::Bin(op, Op::Var(C), Op::Var(T)));
            assert_eq!(reductions(&func(), I, &b), none);
        }
        let mut print = sum_body();
        print.push(Stmt::Print { val: Op::Var(T), ty: Type::Float });
        assert_eq!(reductions(&func(), I, &print), none);
        let mut call = sum_body();
        call[0] = Stmt::Let(T, Rhs::Call { func: FuncId(0), args: vec![], frame: None });
        assert_eq!(reductions(&func(), I, &call), none);
        // Assigned only under a condition: not once per iteration.
        let mut cond = sum_body();
        let set = cond.pop().unwrap_or(Stmt::Reset(S));
        cond.push(Stmt::If { cond: Op::Bool(true), then: vec![set], els: vec![] });
        assert_eq!(reductions(&func(), I, &cond), none);
    }
}
