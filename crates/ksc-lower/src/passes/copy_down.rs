//! Copy-downs with nothing to free are removed (`elide-copy-downs`).
//!
//! A loop iteration that takes a mark and copies the values it keeps down
//! to it (a `build` of tensors, each element copied down so that the
//! iteration's temporaries can be freed) but allocates nothing other than
//! those values (fresh tensors of numbers, allocated once per iteration,
//! outside any nested loop, and tuples of them) has no temporaries to
//! free: the copy-down, which copies every kept tensor twice, and the mark
//! are removed. A `build` of vectors each built afresh is the common case.
//!
//! Assumes: the copy-down is the only use of its mark besides the `let
//! mark = mark` (the mark is removed only if nothing else mentions it);
//! calls, deep copies, tape pushes and other copy-downs or resets in the
//! iteration count as allocating.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{drop_unused_mark, walk, walk_mut};

/// The `elide-copy-downs` pass.
pub struct ElideCopyDowns;

impl Pass<Func, LoopCx<'_>> for ElideCopyDowns {
    fn name(&self) -> &'static str {
        "elide-copy-downs"
    }

    /// Whether a copy-down was removed.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let mut changed = false;
        walk_mut(&mut f.body, &mut |s| {
            if let Stmt::For { body, .. } = s {
                changed |= elide_copy_down(body);
            }
        });
        changed
    }
}

/// Removes the copy-down of a loop's body (and its mark) if the body
/// allocates nothing but what it keeps; whether it did.
fn elide_copy_down(body: &mut Block) -> bool {
    let Some(cd) = body.iter().position(|s| matches!(s, Stmt::CopyDown { .. })) else { return false };
    let Stmt::CopyDown { mark, vars } = &body[cd] else { return false };
    let (mark, vars) = (*mark, vars.clone());
    let Some(start) = body[..cd].iter().position(|s| matches!(s, Stmt::Let(v, Rhs::Mark) if *v == mark)) else {
        return false;
    };
    let range = &body[start + 1..cd];
    // What the kept variables hold: their values, and the components of
    // the tuples and copies among them.
    let mut parts: FxHashMap<VarId, Vec<VarId>> = FxHashMap::default();
    let mut work: Vec<VarId> = Vec::new();
    let var = |o: &Op| if let Op::Var(w) = o { Some(*w) } else { None };
    walk(range, &mut |s| match s {
        Stmt::Let(v, Rhs::Pack(ops, _)) => {
            parts.insert(*v, ops.iter().filter_map(var).collect());
        }
        Stmt::Let(v, Rhs::Copy(o)) => {
            parts.insert(*v, var(o).into_iter().collect());
        }
        Stmt::DeclMut(k, Some(Op::Var(v))) | Stmt::Set(k, Op::Var(v)) if vars.contains(k) => work.push(*v),
        _ => {}
    });
    let mut kept: FxHashSet<VarId> = FxHashSet::default();
    while let Some(v) = work.pop() {
        if kept.insert(v) {
            work.extend(parts.get(&v).into_iter().flatten());
        }
    }
    fn only_kept(b: &[Stmt], kept: &FxHashSet<VarId>, in_loop: bool) -> bool {
        b.iter().all(|s| match s {
            Stmt::Let(v, Rhs::Alloc { elem, .. }) => !in_loop && kept.contains(v) && !needs_heap(elem),
            Stmt::Let(_, Rhs::DeepCopy(_) | Rhs::TapePush { .. } | Rhs::Call { .. }) => false,
            Stmt::For { pre, body, .. } => only_kept(pre, kept, true) && only_kept(body, kept, true),
            Stmt::If { then, els, .. } => only_kept(then, kept, in_loop) && only_kept(els, kept, in_loop),
            Stmt::CopyDown { .. } | Stmt::Reset(_) => false,
            _ => true,
        })
    }
    if !only_kept(range, &kept, false) {
        return false;
    }
    body.remove(cd);
    drop_unused_mark(body, mark);
    true
}
