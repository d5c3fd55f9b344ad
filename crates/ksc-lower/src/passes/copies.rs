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
//! Assumes, and checks: `s` has no other name (it is mentioned only by
//! stores, loads and `dim`s), so no value holding its memory outlives the
//! loop; nothing between `d`'s allocation and the loop mentions `d`; the
//! loop's body is exactly the load, the copies and the store, at the
//! loop's index.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashSet;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{mentions, nested_blocks, only_stored_loaded_measured, walk};

/// The `elide-vector-copies` pass.
pub struct ElideVectorCopies;

impl Pass<Func, LoopCx<'_>> for ElideVectorCopies {
    fn name(&self) -> &'static str {
        "elide-vector-copies"
    }

    /// Whether a copy was removed.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let owned = owned_vectors(f);
        elide_in(&mut f.body, &owned)
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
fn elide_in(b: &mut Block, owned: &FxHashSet<VarId>) -> bool {
    let mut changed = false;
    nested_blocks(b, &mut |inner| changed |= elide_in(inner, owned));
    let mut j = 0;
    while j < b.len() {
        if let Some((alloc, d, s)) = copy_at(b, j, owned) {
            b[j] = Stmt::Let(d, Rhs::Copy(Op::Var(s)));
            b.remove(alloc);
            changed = true;
        } else {
            j += 1;
        }
    }
    changed
}

/// If statement `j` of `b` is a copy loop the module's doc describes: the
/// position of `d`'s allocation, `d` and `s`.
fn copy_at(b: &Block, j: usize, owned: &FxHashSet<VarId>) -> Option<(usize, VarId, VarId)> {
    let Stmt::For { idx, n, pre, body, .. } = &b[j] else { return None };
    let [Stmt::Let(x, Rhs::Load { arr: Op::Var(s), idx: Op::Var(i) }), copies @ .., Stmt::Store { arr: Op::Var(d), idx: Op::Var(i2), val: Op::Var(y) }] =
        &body[..]
    else {
        return None;
    };
    // The loaded value, through `let`s that copy it.
    let mut held = *x;
    for c in copies {
        match c {
            Stmt::Let(v, Rhs::Copy(Op::Var(w))) if *w == held => held = *v,
            _ => return None,
        }
    }
    if !pre.is_empty() || i != idx || i2 != idx || held != *y || s == d || !owned.contains(s) {
        return None;
    }
    let alloc_of = |v: VarId| {
        b[..j].iter().enumerate().find_map(|(p, st)| match st {
            Stmt::Let(w, Rhs::Alloc { dims, elem }) if *w == v => Some((p, dims, elem)),
            _ => None,
        })
    };
    let (pd, dims_d, elem_d) = alloc_of(*d)?;
    let (_, dims_s, elem_s) = alloc_of(*s)?;
    let same_size = dims_d.len() == 1 && dims_s.len() == 1 && dims_d[0] == *n && dims_s[0] == *n;
    if !same_size || elem_d != elem_s || needs_heap(elem_d) {
        return None;
    }
    let quiet_between = b[pd + 1..j].iter().all(|st| !mentions(st, *d));
    let s_dead_after = b[j + 1..].iter().all(|st| !mentions(st, *s));
    (quiet_between && s_dead_after).then_some((pd, *d, *s))
}
