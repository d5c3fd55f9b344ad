//! The arena's stack discipline (`place-arena-scopes`).
//!
//! A loop whose iterations allocate from the arena and let nothing they
//! allocate escape resets the arena after each iteration (`reset` of its
//! `for`); a function that allocates and whose result holds no tensor (or
//! that loops by self tail calls) takes an entry mark, to which it resets
//! the arena before returning (or, for a loop by tail calls, before each
//! iteration, copying its tensor parameters down). The C emitter turns
//! these flags into marks, resets and copy-downs.
//!
//! Assumes: every other pass has run (it decides from what the function
//! allocates at the end); `heap_ret[k]` says whether function `k`'s
//! result holds tensors (its call allocates). Memory escapes a loop body
//! through a store or assignment of a value holding tensors to something
//! declared outside it, a copy-down or a tape push.

use ksc_ir::pass::Pass;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{defined_in, walk, walk_mut};

/// The `place-arena-scopes` pass.
pub struct PlaceArenaScopes;

impl Pass<Func, LoopCx<'_>> for PlaceArenaScopes {
    fn name(&self) -> &'static str {
        "place-arena-scopes"
    }

    /// Whether a loop's reset changed or the function took an entry mark.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        place_arena_scopes(f, cx.heap_ret)
    }
}

/// Does running this block allocate from the arena?
fn allocates(b: &Block, heap_ret: &[bool]) -> bool {
    let mut a = false;
    walk(b, &mut |s| match s {
        Stmt::Let(_, Rhs::Alloc { .. } | Rhs::Reuse { .. } | Rhs::DeepCopy(_) | Rhs::TapePush { .. }) => a = true,
        Stmt::Let(_, Rhs::Call { func, .. }) if heap_ret[func.0 as usize] => a = true,
        Stmt::Print { .. } => {}
        _ => {}
    });
    a
}

/// Can memory allocated while running this block be reachable after it?
fn escapes(b: &Block, vars: &[VarInfo]) -> bool {
    let local = defined_in(b);
    let mut e = false;
    walk(b, &mut |s| match s {
        // A mutable variable declared inside the block dies with it.
        Stmt::Set(k, _) if local.contains(k) => {}
        Stmt::Store { val: Op::Var(v), .. } | Stmt::Set(_, Op::Var(v)) if needs_heap(&vars[v.0 as usize].ty) => {
            e = true
        }
        // A copy down to a mark taken inside the block stays above the
        // block's start (the copied value escapes only if a store or an
        // assignment above lets it).
        Stmt::CopyDown { mark, .. } if !local.contains(mark) => e = true,
        // A record written into a tape that may outlive the block.
        Stmt::Let(_, Rhs::TapePush { .. }) => e = true,
        _ => {}
    });
    e
}

/// Sets every loop's `reset` and the function's entry mark; whether one
/// of them changed.
fn place_arena_scopes(f: &mut Func, heap_ret: &[bool]) -> bool {
    let vars = f.vars.clone();
    let mut changed = false;
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::For { body, reset, .. } = s {
            let r = allocates(body, heap_ret) && !escapes(body, &vars);
            changed |= *reset != r;
            *reset = r;
        }
    });
    if allocates(&f.body, heap_ret) && (!needs_heap(&f.ret) || f.loops) {
        let m = VarId(f.vars.len() as u32);
        f.vars.push(VarInfo { ty: ksc_ir::Type::Integer, name: Some("entry".into()), mutable: false });
        f.entry_mark = Some(m);
        changed = true;
    }
    changed
}
