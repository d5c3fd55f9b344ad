//! Sizes of allocations read as the sizes allocated (`fold-alloc-dims`).
//!
//! `dim t.k` of a tensor `t = alloc [n0, n1, ..]` becomes a copy of `nk`;
//! `dim t.k` of a copy `t = deepcopy u` becomes `dim u.k` (through chains
//! of copies). So a size check does not keep alive a tensor that nothing
//! else reads (an accumulator copied from a fresh tensor, whose sizes
//! `ts_add` checks), and DCE can remove it. The pipeline runs it before
//! DCE and again after, when DCE has removed what hid more of them.
//!
//! Assumes: a tensor's sizes never change after its allocation; `nk` is
//! used only when it is a number or an immutable variable, and `u` only
//! when it is immutable (so it still names the tensor copied).

use ksc_ir::pass::Pass;
use rustc_hash::FxHashMap;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{walk, walk_mut};

/// The `fold-alloc-dims` pass.
pub struct FoldAllocDims;

impl Pass<Func, LoopCx<'_>> for FoldAllocDims {
    fn name(&self) -> &'static str {
        "fold-alloc-dims"
    }

    /// Whether a `dim` was rewritten.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        fold_alloc_dims(f)
    }
}

/// Rewrites the `dim`s of allocations and copies; whether there were any.
fn fold_alloc_dims(f: &mut Func) -> bool {
    let mut dims: FxHashMap<VarId, Vec<Op>> = FxHashMap::default();
    let mut copies: FxHashMap<VarId, VarId> = FxHashMap::default();
    let vars = &f.vars;
    let immutable = |v: &VarId| !vars[v.0 as usize].mutable;
    walk(&f.body, &mut |s| match s {
        Stmt::Let(v, Rhs::Alloc { dims: d, .. }) => {
            dims.insert(*v, d.clone());
        }
        Stmt::Let(v, Rhs::DeepCopy(Op::Var(u))) if immutable(u) => {
            copies.insert(*v, *u);
        }
        _ => {}
    });
    let mut changed = false;
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::Let(_, r @ Rhs::Dim { .. }) = s {
            let Rhs::Dim { arr: Op::Var(a), dim } = r else { return };
            let dim = *dim;
            let mut src = *a;
            while let Some(u) = copies.get(&src) {
                src = *u;
            }
            match dims.get(&src).and_then(|d| d.get(dim)) {
                Some(o) if !matches!(o, Op::Var(v) if !immutable(v)) => {
                    *r = Rhs::Copy(o.clone());
                    changed = true;
                }
                _ if src != *a => {
                    *r = Rhs::Dim { arr: Op::Var(src), dim };
                    changed = true;
                }
                _ => {}
            }
        }
    });
    changed
}
