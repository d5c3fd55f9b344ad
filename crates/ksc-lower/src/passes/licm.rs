//! Loop-invariant code motion (`licm`), innermost loops first.
//!
//! A statement of a loop body whose operands are all defined outside the
//! loop (and are not mutable variables) computes the same value in every
//! iteration. If it is pure and cannot fail it moves before the loop (it
//! may then run when the loop does not). If it may fail (a load, a check,
//! checked arithmetic, a call of a function that does not print) it moves
//! into the loop's preheader, which runs once, only when the loop runs at
//! least once, and only if nothing that fails or acts precedes it in the
//! body: the same failure then happens at the same point. A pure
//! statement reading such a guarded value goes to the preheader too,
//! after it, even where a barrier precedes the statement in the body
//! (it has no effect to reorder): in a checked build, the camera's angle
//! in every point's projection came after a check of the point's index.
//!
//! Assumes: variables are defined once (SSA) except mutable ones, which
//! are never invariant; tensors written in place (stores, `+=`) are
//! not loaded outside the loop; allocations, copies, marks, tape pushes
//! and calls of printing functions stay (their place in the arena or the
//! output matters).

use ksc_ir::pass::Pass;
use rustc_hash::FxHashSet;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{defined_in, stmt_operands, written_arrays};

/// The `licm` pass.
pub struct Licm;

impl Pass<Func, LoopCx<'_>> for Licm {
    fn name(&self) -> &'static str {
        "licm"
    }

    /// Whether a statement moved.
    fn run(&self, f: &mut Func, lcx: &LoopCx<'_>) -> bool {
        let written = written_arrays(&f.body);
        let cx = Cx { effectful: lcx.effectful, written: &written, vars: &f.vars };
        let body = std::mem::take(&mut f.body);
        let mut moved = false;
        f.body = licm_block(body, &cx, &mut moved);
        moved
    }
}

struct Cx<'a> {
    effectful: &'a [bool],
    written: &'a FxHashSet<VarId>,
    vars: &'a [VarInfo],
}

impl Cx<'_> {
    fn mutable(&self, o: &Op) -> bool {
        matches!(o, Op::Var(v) if self.vars[v.0 as usize].mutable)
    }
}

/// How a statement may be moved out of a loop.
enum Motion {
    /// Pure and cannot fail: may run whether or not the loop does.
    Free,
    /// May fail (a checked operation, a load, a check, a call): may run
    /// once before the loop, only if the loop runs at least once, and only
    /// if nothing observable or failing precedes it in the loop body.
    Guarded,
    Stay,
}

fn motion(s: &Stmt, cx: &Cx) -> Motion {
    match s {
        Stmt::Let(_, r) => match r {
            Rhs::Alloc { .. } | Rhs::DeepCopy(_) | Rhs::Mark | Rhs::TapePush { .. } => Motion::Stay,
            Rhs::Call { func, .. } => {
                if cx.effectful[func.0 as usize] {
                    Motion::Stay
                } else {
                    Motion::Guarded
                }
            }
            Rhs::Load { arr, .. } => match arr {
                Op::Var(a) if cx.written.contains(a) => Motion::Stay,
                _ => Motion::Guarded,
            },
            r if r.can_fail() => Motion::Guarded,
            _ => Motion::Free,
        },
        Stmt::Check { .. } => Motion::Guarded,
        _ => Motion::Stay,
    }
}

/// Can this statement fail or have an observable effect (a barrier for
/// guarded hoisting)? A load is not: its range is checked by a `check`
/// before it (a barrier), or known, or the build is `--unchecked`.
fn is_barrier(s: &Stmt) -> bool {
    match s {
        Stmt::Let(_, r) => r.can_fail(),
        Stmt::Check { .. } | Stmt::Fail { .. } | Stmt::Print { .. } | Stmt::Accum { .. } => true,
        Stmt::For { pre, body, .. } => pre.iter().chain(body).any(is_barrier),
        Stmt::If { then, els, .. } => then.iter().chain(els).any(is_barrier),
        _ => false,
    }
}

/// Loop-invariant code motion, innermost loops first; sets `moved` when
/// a statement leaves a loop body.
fn licm_block(block: Block, cx: &Cx, moved: &mut bool) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let body = licm_block(body, cx, moved);
                let mut inside = defined_in(&body);
                inside.insert(idx);
                let mut free = Vec::new();
                let mut guarded = pre;
                let pre_len = guarded.len();
                let mut rest = Vec::new();
                let mut barrier = false;
                let mut guarded_defs: FxHashSet<VarId> = FxHashSet::default();
                for s in body {
                    let invariant = stmt_operands(&s).iter().all(|o| match o {
                        Op::Var(v) => !inside.contains(v) && !cx.mutable(o),
                        _ => true,
                    });
                    let after_guarded =
                        stmt_operands(&s).iter().any(|o| matches!(o, Op::Var(v) if guarded_defs.contains(v)));
                    let m = match (invariant, motion(&s, cx)) {
                        (false, _) => Motion::Stay,
                        // Pure: into the preheader after the values it
                        // reads, whether or not a barrier came first (it
                        // has no effect to reorder).
                        (true, Motion::Free) if after_guarded => Motion::Guarded,
                        (true, Motion::Guarded) if barrier => Motion::Stay,
                        (true, m) => m,
                    };
                    match m {
                        Motion::Free => {
                            if let Stmt::Let(v, _) = &s {
                                inside.remove(v);
                            }
                            free.push(s);
                        }
                        Motion::Guarded => {
                            if let Stmt::Let(v, _) = &s {
                                inside.remove(v);
                                guarded_defs.insert(*v);
                            }
                            guarded.push(s);
                        }
                        _ => {
                            let mut s = s;
                            if let Stmt::If { then, els, .. } = &mut s {
                                let mut out = Hoisted { free: &mut free, guarded: &mut guarded };
                                for branch in [then, els] {
                                    let b = std::mem::take(branch);
                                    *branch = speculate(b, cx, &mut inside, &mut guarded_defs, &mut out);
                                }
                            }
                            barrier |= is_barrier(&s);
                            rest.push(s);
                        }
                    }
                }
                *moved |= !free.is_empty() || guarded.len() > pre_len;
                out.extend(free);
                out.push(Stmt::For { idx, n, pre: guarded, body: rest, reset });
            }
            Stmt::If { cond, then, els } => {
                out.push(Stmt::If { cond, then: licm_block(then, cx, moved), els: licm_block(els, cx, moved) });
            }
            s => out.push(s),
        }
    }
    out
}

/// Where statements taken out of a branch go: before the loop, or into its
/// preheader (after the guarded statements they read).
struct Hoisted<'a> {
    free: &'a mut Vec<Stmt>,
    guarded: &'a mut Vec<Stmt>,
}

/// Takes out of a branch of an `if` in a loop body (and the `if`s nested
/// in it) the invariant statements that are pure and cannot fail: run
/// before the loop whether or not the branch would have run (speculated:
/// a scalar operation, once, instead of once per iteration), as the
/// camera's sine and cosine under a test of its angle in every point's
/// projection. Statements that may fail stay where they are.
fn speculate(
    block: Block,
    cx: &Cx,
    inside: &mut FxHashSet<VarId>,
    guarded_defs: &mut FxHashSet<VarId>,
    out: &mut Hoisted,
) -> Block {
    let mut kept = Vec::with_capacity(block.len());
    for mut s in block {
        let invariant = || {
            stmt_operands(&s).iter().all(|o| match o {
                Op::Var(v) => !inside.contains(v) && !cx.mutable(o),
                _ => true,
            })
        };
        if matches!(s, Stmt::Let(..)) && matches!(motion(&s, cx), Motion::Free) && invariant() {
            // Pure: into the preheader if it reads a value computed there
            // (a barrier before it does not matter), else before the loop.
            let reads_guarded = stmt_operands(&s).iter().any(|o| matches!(o, Op::Var(v) if guarded_defs.contains(v)));
            if let Stmt::Let(v, _) = &s {
                inside.remove(v);
                if reads_guarded {
                    guarded_defs.insert(*v);
                }
            }
            if reads_guarded {
                out.guarded.push(s)
            } else {
                out.free.push(s)
            }
            continue;
        }
        if let Stmt::If { then, els, .. } = &mut s {
            for branch in [then, els] {
                *branch = speculate(std::mem::take(branch), cx, inside, guarded_defs, out);
            }
        }
        kept.push(s);
    }
    kept
}
