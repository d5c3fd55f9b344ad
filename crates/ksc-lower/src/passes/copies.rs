//! A loop that only copies a vector that dies into a fresh one is removed
//! (`elide-vector-copies`).
//!
//! `d = alloc [n]; for i < n { x = load s[i]; store d[i] = x }` (`x`
//! possibly passed through `let`s that copy it), where `s`
//! is allocated in the same block with the same size `n` and the same
//! element type, becomes `d = s` when nothing after the loop mentions `s`:
//! the copy's values are `s`'s, and `s` is written no more. Reverse mode
//! makes such copies where a vector of tuples is read back component by
//! component (after `split-tuple-vectors`, `soa.rs`: the cotangent of `a`
//! in a `scan` over `build n (lam i (tuple a[i] b[i]))`).
//!
//! The same loop over `m` elements reading `s` (of `n_s`) only under a
//! test `i < n_s`, a constant past it (the cotangent of `b` in that `scan`,
//! of `b`'s size, zero past `a`'s), is a copy when `m = n_s`: it becomes
//! `if m == n_s { d := s } else { d0 = alloc [m]; the loop into d0; d :=
//! d0 }`, `d` read from that mutable variable.
//!
//! A check `i < m` first in the loop, `m` the loop's bound itself or a
//! copy of it made before the loop, cannot fail and does not stop a loop
//! from being a copy (the lowering leaves one where the bound is a copy
//! of the size: reverse mode's cotangent of `a` in that `scan`).
//!
//! Assumes, and checks: `s` has no other name (it is mentioned only by
//! stores, loads and `dim`s), so no value holding its memory outlives the
//! loop; nothing between `d`'s allocation and the loop mentions `d`; the
//! loop's body is exactly the load, the copies and the store, at the
//! loop's index.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashSet;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{mentions, nested_blocks, only_stored_loaded_measured, push_var, walk, walk_mut};

/// The `elide-vector-copies` pass.
pub struct ElideVectorCopies;

impl Pass<Func, LoopCx<'_>> for ElideVectorCopies {
    fn name(&self) -> &'static str {
        "elide-vector-copies"
    }

    /// Whether a copy was removed.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let owned = owned_vectors(f);
        elide_in(&mut f.body, &owned, &mut f.vars)
    }
}

/// The vectors of numbers allocated in the function and mentioned only as
/// the tensor of stores, loads and `dim`s.
fn owned_vectors(f: &Func) -> FxHashSet<VarId> {
    let only = only_stored_loaded_measured(&f.body);
    let mut out = FxHashSet::default();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(v, Rhs::Alloc { dims, elem }) = s {
            if dims.len() == 1 && !needs_heap(elem) && only.contains(v) {
                out.insert(*v);
            }
        }
    });
    out
}

/// Removes the copies of `b` and of the blocks nested in it; whether it
/// removed any.
fn elide_in(b: &mut Block, owned: &FxHashSet<VarId>, vars: &mut Vec<VarInfo>) -> bool {
    let mut changed = false;
    nested_blocks(b, &mut |inner| changed |= elide_in(inner, owned, vars));
    let mut j = 0;
    while j < b.len() {
        let Some(Copy { alloc, d, s, guard }) = copy_at(b, j, owned) else {
            j += 1;
            continue;
        };
        changed = true;
        let Some(n_s) = guard else {
            b[j] = Stmt::Let(d, Rhs::Copy(Op::Var(s)));
            b.remove(alloc);
            continue;
        };
        // `if m == n_s { d := s } else { d0 = alloc [m]; the loop into d0;
        // d := d0 }`.
        let Stmt::Let(_, Rhs::Alloc { dims, elem }) = b.remove(alloc) else { continue };
        j -= 1;
        let ty = vars[d.0 as usize].clone();
        let (held, d0) = (push_var(vars, VarInfo { mutable: true, ..ty.clone() }), push_var(vars, ty));
        let same = push_var(vars, VarInfo { ty: ksc_ir::Type::Bool, name: None, mutable: false });
        let mut copy = std::mem::replace(&mut b[j], Stmt::DeclMut(held, None));
        walk_mut(std::slice::from_mut(&mut copy), &mut |st| {
            if let Stmt::Store { arr, .. } = st {
                if *arr == Op::Var(d) {
                    *arr = Op::Var(d0);
                }
            }
        });
        let m = dims[0].clone();
        let version = Stmt::If {
            cond: Op::Var(same),
            then: vec![Stmt::Set(held, Op::Var(s))],
            els: vec![Stmt::Let(d0, Rhs::Alloc { dims, elem }), copy, Stmt::Set(held, Op::Var(d0))],
        };
        let tail = [Stmt::Let(same, Rhs::Bin(BinOp::IEq, m, n_s)), version, Stmt::Let(d, Rhs::Copy(Op::Var(held)))];
        b.splice(j + 1..j + 1, tail);
        j += 4;
    }
    changed
}

/// A copy loop the module's doc describes: the position of `d`'s
/// allocation, `d`, `s`, and for a loop whose loads are guarded by `i <
/// n_s`, `n_s`.
struct Copy {
    alloc: usize,
    d: VarId,
    s: VarId,
    guard: Option<Op>,
}

/// `stmts` as a load of `s` at index `i`, `let`s that copy the loaded
/// value, and a last statement: the variable holding the value after the
/// copies, `s`, `i` and the last statement.
fn loaded(stmts: &[Stmt]) -> Option<(VarId, VarId, VarId, &Stmt)> {
    let [Stmt::Let(x, Rhs::Load { arr: Op::Var(s), idx: Op::Var(i) }), copies @ .., last] = stmts else {
        return None;
    };
    let mut held = *x;
    for c in copies {
        match c {
            Stmt::Let(v, Rhs::Copy(Op::Var(w))) if *w == held => held = *v,
            _ => return None,
        }
    }
    Some((held, *s, *i, last))
}

/// A loop body over `idx < n` without its first two statements when they
/// check `idx < m` with `m` the bound `n` (itself or through copies made
/// in `before`, the statements ahead of the loop): a check that cannot
/// fail, which the lowering leaves where the bound is a copy of the size.
fn without_true_check<'b>(body: &'b [Stmt], idx: VarId, n: &Op, before: &[Stmt]) -> &'b [Stmt] {
    let root = |o: &Op| {
        let mut o = o.clone();
        while let Op::Var(v) = o {
            match before.iter().find_map(|s| match s {
                Stmt::Let(w, Rhs::Copy(x)) if *w == v => Some(x.clone()),
                _ => None,
            }) {
                Some(x) => o = x,
                None => break,
            }
        }
        o
    };
    match body {
        [Stmt::Let(c, Rhs::Bin(BinOp::ILt, Op::Var(i), m)), Stmt::Check { cond: Op::Var(c2), .. }, rest @ ..]
            if *i == idx && c == c2 && root(m) == root(n) && !rest.iter().any(|s| mentions(s, *c)) =>
        {
            rest
        }
        _ => body,
    }
}

/// If statement `j` of `b` is a copy loop the module's doc describes, which.
fn copy_at(b: &Block, j: usize, owned: &FxHashSet<VarId>) -> Option<Copy> {
    let Stmt::For { idx, n, pre, body, .. } = &b[j] else { return None };
    if !pre.is_empty() {
        return None;
    }
    let body = without_true_check(body, *idx, n, &b[..j]);
    // The stored value: loaded directly, or under `i < n_s` (else a
    // constant) through a mutable variable.
    let (s, d, guard) = match body {
        [.., Stmt::Store { arr: Op::Var(d), idx: Op::Var(i), val: Op::Var(y) }] if i == idx => {
            match loaded(body).filter(|(held, _, at, _)| held == y && at == idx) {
                Some((_, s, ..)) => (s, *d, None),
                None => {
                    let [Stmt::Let(c, Rhs::Bin(BinOp::ILt, Op::Var(at), n_s)), Stmt::DeclMut(v, None), Stmt::If { cond: Op::Var(c2), then, els }, Stmt::Let(w, Rhs::Copy(Op::Var(v2))), _] =
                        body
                    else {
                        return None;
                    };
                    let (held, s, at2, last) = loaded(then)?;
                    let set_held = matches!(last, Stmt::Set(k, Op::Var(h)) if k == v && *h == held);
                    let else_const = matches!(&els[..], [Stmt::Set(k, o)] if k == v && o.var().is_none());
                    let ok = at == idx && at2 == *idx && c == c2 && v == v2 && w == y && set_held && else_const;
                    if !ok {
                        return None;
                    }
                    (s, *d, Some(n_s.clone()))
                }
            }
        }
        _ => return None,
    };
    if s == d || !owned.contains(&s) {
        return None;
    }
    let alloc_of = |v: VarId| {
        b[..j].iter().enumerate().find_map(|(p, st)| match st {
            Stmt::Let(w, Rhs::Alloc { dims, elem }) if *w == v => Some((p, dims, elem)),
            _ => None,
        })
    };
    let (pd, dims_d, elem_d) = alloc_of(d)?;
    let (_, dims_s, elem_s) = alloc_of(s)?;
    let size_s = guard.as_ref().unwrap_or(n);
    let sizes = dims_d.len() == 1 && dims_s.len() == 1 && dims_d[0] == *n && dims_s[0] == *size_s;
    if !sizes || elem_d != elem_s || needs_heap(elem_d) {
        return None;
    }
    let quiet_between = b[pd + 1..j].iter().all(|st| !mentions(st, d));
    let s_dead_after = b[j + 1..].iter().all(|st| !mentions(st, s));
    (quiet_between && s_dead_after).then_some(Copy { alloc: pd, d, s, guard })
}
