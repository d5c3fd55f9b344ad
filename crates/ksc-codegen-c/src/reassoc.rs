//! Sums and maxima whose terms `ksc build --reassociate` lets the C
//! compiler combine in any order; and the maxima that every build
//! computes in lanes, exactly ([`plain_maximum`]).
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
use ksc_lower::visit::{count_stmts, defined_in, stmt_operands, walk};
use rustc_hash::{FxHashMap, FxHashSet};

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
    let uses = Uses::new(body);
    let reads_of = |v: &VarId| uses.reads(*v);
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
        let is_s = |o: &Op| uses.is(o, s);
        // The update, at the top of the body; its value read only there.
        let update = body.iter().find_map(|st| match st {
            Stmt::Set(x, Op::Var(t)) if *x == s && reads_of(t) == 1 => match uses.def(*t) {
                Some(Rhs::Bin(BinOp::FAdd, a, b)) if is_s(a) != is_s(b) => Some(true),
                Some(Rhs::Bin(BinOp::FMax, a, b)) if is_s(a) && !is_s(b) => Some(false),
                _ => None,
            },
            // `if t > m { m := t }`.
            Stmt::If { cond: Op::Var(c), then, els } if els.is_empty() => match &then[..] {
                [Stmt::Set(x, t)] if *x == s && uses.tests_greater(*c, t, s) => Some(false),
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

/// A loop body's top-level definitions, and how many times each variable
/// is read anywhere in it.
struct Uses<'b> {
    defs: FxHashMap<VarId, &'b Rhs>,
    reads: FxHashMap<VarId, usize>,
}

impl<'b> Uses<'b> {
    fn new(body: &'b Block) -> Uses<'b> {
        let defs = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let(v, rhs) => Some((*v, rhs)),
                _ => None,
            })
            .collect();
        let mut reads: FxHashMap<VarId, usize> = FxHashMap::default();
        walk(body, &mut |s| {
            for o in stmt_operands(s) {
                if let Op::Var(v) = o {
                    *reads.entry(*v).or_default() += 1;
                }
            }
        });
        Uses { defs, reads }
    }

    fn reads(&self, v: VarId) -> usize {
        self.reads.get(&v).copied().unwrap_or(0)
    }

    fn def(&self, v: VarId) -> Option<&'b Rhs> {
        self.defs.get(&v).copied()
    }

    /// Is `o` the variable `s`, or a copy of it read only once?
    fn is(&self, o: &Op, s: VarId) -> bool {
        match o {
            Op::Var(x) => {
                *x == s || matches!(self.def(*x), Some(Rhs::Copy(Op::Var(y))) if *y == s && self.reads(*x) == 1)
            }
            _ => false,
        }
    }

    /// Is `c`, read once, `t > s` or `s < t` (`s` as [`Uses::is`] reads it)?
    fn tests_greater(&self, c: VarId, t: &Op, s: VarId) -> bool {
        self.reads(c) == 1
            && match self.def(c) {
                Some(Rhs::Bin(BinOp::FGt, a, b)) => a == t && self.is(b, s),
                Some(Rhs::Bin(BinOp::FLt, a, b)) => b == t && self.is(a, s),
                _ => false,
            }
    }
}

/// The most statements of a loop body that [`plain_maximum`] accepts: the
/// emitter writes the body three times.
const PLAIN_MAX_STMTS: usize = 32;

/// A loop that only keeps the largest of its terms (see [`plain_maximum`]).
#[derive(Debug, PartialEq)]
pub struct PlainMax {
    /// The maximum, a Float of the loop's surroundings.
    pub m: VarId,
    /// The iteration's term.
    pub t: Op,
    /// With the maximum, the index of the iteration that gave it, an
    /// Integer of the surroundings (`imax`: `if t > m { m := t; at := i }`).
    pub at: Option<VarId>,
    /// The position in the body of the statement that updates `m`; every
    /// other statement computes.
    pub update: usize,
}

/// A loop `for idx < n { body }` whose body only computes (pure lets,
/// branches that choose values, its own mutable variables) and then keeps
/// the largest term in a Float `m` of its surroundings, `if t > m { m := t
/// }` or `m := fmax m t` (a maximum of [`reductions`]), with nothing else
/// assigned, stored, checked or looped over: the loops of `max v` and
/// log-sum-exp's maximum; or with `at := idx` beside `m := t` (`imax`),
/// `at` an Integer of the surroundings the body does not read.
///
/// Its value is the same whatever the order in which it compares terms
/// (the emitter keeps eight running maxima, vectorised), but for the sign
/// of a zero: a term replaces `m` only if it is greater, so NaN terms
/// never count, a NaN `m` stays, and among equal terms the first one is
/// kept. Equal Floats other than zeros have the same bits; the result is
/// a zero only if the largest term is, and (when m started below zero)
/// it is then the first term equal to zero, which the emitter finds again
/// (`emit.rs`'s `lanes_maximum`).
pub fn plain_maximum(f: &Func, idx: VarId, body: &Block) -> Option<PlainMax> {
    if count_stmts(body) > PLAIN_MAX_STMTS {
        return None;
    }
    let own = defined_in(body);
    let (m, at) = match reductions(f, idx, body) {
        Reductions { sums, maxima } if sums.is_empty() && maxima.len() == 1 => (maxima[0], None),
        _ => arg_maximum(f, idx, body, &own)?,
    };
    fn computes(s: &Stmt, own: &FxHashSet<VarId>) -> bool {
        match s {
            Stmt::Let(_, rhs) => rhs.is_pure(),
            Stmt::DeclMut(..) => true,
            Stmt::Set(v, _) => own.contains(v),
            Stmt::If { then, els, .. } => then.iter().chain(els).all(|s| computes(s, own)),
            _ => false,
        }
    }
    let mut found = None;
    for (k, s) in body.iter().enumerate() {
        let t = match s {
            _ if computes(s, &own) => continue,
            // `reductions` checked the condition: `t > m` or `m < t`.
            Stmt::If { then, els, .. } if els.is_empty() => match (&then[..], at) {
                ([Stmt::Set(x, t)], None) if *x == m => t.clone(),
                ([Stmt::Set(x, t), Stmt::Set(k, Op::Var(j))], Some(a)) if *x == m && *k == a && *j == idx => t.clone(),
                _ => return None,
            },
            // `m := u` with `u = fmax c t` (c is m).
            Stmt::Set(x, Op::Var(u)) if *x == m && at.is_none() => body.iter().find_map(|d| match d {
                Stmt::Let(v, Rhs::Bin(BinOp::FMax, _, t)) if v == u => Some(t.clone()),
                _ => None,
            })?,
            _ => return None,
        };
        // The term is read after the loop's statements, so it must not be
        // one of those a branch defines.
        let top = |v: &VarId| body.iter().any(|s| matches!(s, Stmt::Let(x, _) | Stmt::DeclMut(x, _) if x == v));
        if found.is_some() || matches!(&t, Op::Var(v) if own.contains(v) && !top(v)) {
            return None;
        }
        found = Some(PlainMax { m, t, at, update: k });
    }
    found
}

/// The maximum `m` and its index `at` of a body whose one update of its
/// surroundings is `if c { m := t; at := idx }`, `c = t > m` or `m < t`
/// (with `m` read there only, perhaps through a copy read only there),
/// `m` a Float and `at` an Integer that the body does not read. What
/// else the body may do is [`plain_maximum`]'s to check.
fn arg_maximum(f: &Func, idx: VarId, body: &Block, own: &FxHashSet<VarId>) -> Option<(VarId, Option<VarId>)> {
    let uses = Uses::new(body);
    body.iter().find_map(|s| {
        let Stmt::If { cond: Op::Var(c), then, els } = s else { return None };
        let [Stmt::Set(m, t), Stmt::Set(at, Op::Var(j))] = &then[..] else { return None };
        if !els.is_empty() || *j != idx || own.contains(m) || own.contains(at) {
            return None;
        }
        if f.ty(*m) != &Type::Float || f.ty(*at) != &Type::Integer || uses.reads(*at) != 0 {
            return None;
        }
        (uses.tests_greater(*c, t, *m) && uses.reads(*m) == 1).then_some((*m, Some(*at)))
    })
}
