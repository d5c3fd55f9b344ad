//! Dead code, by liveness (`dce`).
//!
//! A statement is needed if it has an effect (returns, prints, checks,
//! calls a printing function, writes a tensor it did not allocate or
//! copy, manages the arena) or defines or writes a variable a needed
//! statement reads; a loop or branch is needed if a statement in it is,
//! and then its size or condition is read. Everything else goes: unused
//! pure values, mutable variables assigned only from themselves, tensors
//! allocated and written but never read (a reverse pass whose caller
//! keeps one cotangent builds the others so), copy-downs of variables
//! never read again, loops of no iterations (a constant count of 0), and
//! loops and branches left empty. Liveness is computed to a fixed point and
//! the removal repeated until nothing more goes.
//!
//! Assumes: a tensor allocated or deep-copied in the function (*fresh*)
//! is written through no other name, since any alias would be made by a
//! statement that reads it and so keeps it live; `effectful[k]` says
//! whether function `k` may print, directly or through calls.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashSet;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{count_stmts, stmt_defines, stmt_operands, walk};

/// The `dce` pass.
pub struct Dce;

impl Pass<Func, LoopCx<'_>> for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    /// Whether a statement, or a variable of a copy-down, was removed.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        dce(f, cx.effectful)
    }
}

/// Removes the dead code; whether there was any.
pub(crate) fn dce(f: &mut Func, effectful: &[bool]) -> bool {
    // Fresh tensors: allocated or copied here, so written through no other
    // name (an alias would be made by a statement reading the tensor).
    let mut fresh: FxHashSet<VarId> = FxHashSet::default();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(v, Rhs::Alloc { .. } | Rhs::DeepCopy(_)) = s {
            fresh.insert(*v);
        }
    });
    let mut changed = false;
    loop {
        let mut live: FxHashSet<VarId> = FxHashSet::default();
        loop {
            let before = live.len();
            mark_needed(&f.body, &mut live, &fresh, &f.vars, effectful);
            if live.len() == before {
                break;
            }
        }
        let used = |v: &VarId| live.contains(v);
        let before = count_stmts(&f.body);
        let body = std::mem::take(&mut f.body);
        f.body = dce_block(body, &used, &fresh, &f.vars, effectful, &mut changed);
        if count_stmts(&f.body) == before {
            return changed;
        }
        changed = true;
    }
}

/// Is the statement (not a loop or branch) needed whatever is live?
fn is_root(s: &Stmt, fresh: &FxHashSet<VarId>, vars: &[VarInfo], effectful: &[bool]) -> bool {
    match s {
        Stmt::Let(_, Rhs::Call { func, .. }) => effectful[func.0 as usize],
        Stmt::Let(..) | Stmt::DeclMut(..) => false,
        Stmt::Set(v, _) => !vars[v.0 as usize].mutable,
        Stmt::Store { arr, .. } | Stmt::Accum { arr, .. } => !matches!(arr, Op::Var(a) if fresh.contains(a)),
        _ => true,
    }
}

/// Marks live the variables that the needed statements of `b` read;
/// returns whether `b` has a needed statement. The statements are visited
/// last first, so that a use marks what it reads before the definition is
/// visited: straight-line code is done in one pass (visited first first, a
/// chain of L statements took L passes, and the pass was most of ks to C
/// for a large reverse pass: 41% of building the 41k-line `[rev f_13]` of
/// `f_k x = f_(k-1) (f_(k-1) x)`). Loops still need the fixed point of the
/// caller (a variable read in an iteration before it is assigned).
fn mark_needed(
    b: &Block,
    live: &mut FxHashSet<VarId>,
    fresh: &FxHashSet<VarId>,
    vars: &[VarInfo],
    effectful: &[bool],
) -> bool {
    let mut any = false;
    for s in b.iter().rev() {
        let needed = match s {
            Stmt::For { n, pre, body, .. } => {
                let inner =
                    mark_needed(body, live, fresh, vars, effectful) | mark_needed(pre, live, fresh, vars, effectful);
                if inner {
                    if let Op::Var(v) = n {
                        live.insert(*v);
                    }
                }
                inner
            }
            Stmt::If { cond, then, els } => {
                let inner =
                    mark_needed(then, live, fresh, vars, effectful) | mark_needed(els, live, fresh, vars, effectful);
                if inner {
                    if let Op::Var(v) = cond {
                        live.insert(*v);
                    }
                }
                inner
            }
            _ => {
                let needed = is_root(s, fresh, vars, effectful) || stmt_defines(s).is_some_and(|v| live.contains(&v));
                if needed {
                    for o in stmt_operands(s) {
                        if let Op::Var(v) = o {
                            live.insert(*v);
                        }
                    }
                    match s {
                        Stmt::CopyDown { mark, .. } | Stmt::Reset(mark) => {
                            live.insert(*mark);
                        }
                        _ => {}
                    }
                }
                needed
            }
        };
        any |= needed;
    }
    any
}

fn dce_block(
    block: Block,
    used: &dyn Fn(&VarId) -> bool,
    fresh: &FxHashSet<VarId>,
    vars: &[VarInfo],
    effectful: &[bool],
    dropped: &mut bool,
) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::Let(v, rhs) if !used(&v) => {
                let removable = match &rhs {
                    Rhs::Call { func, .. } => !effectful[func.0 as usize],
                    _ => true,
                };
                if !removable {
                    out.push(Stmt::Let(v, rhs));
                }
            }
            Stmt::DeclMut(v, o) => {
                if used(&v) {
                    out.push(Stmt::DeclMut(v, o));
                }
            }
            Stmt::Set(v, o) => {
                if used(&v) || !vars[v.0 as usize].mutable {
                    out.push(Stmt::Set(v, o));
                }
            }
            // A loop of no iterations (a constant count, as a derivative's
            // build of zero columns): neither its preheader nor its body runs.
            Stmt::For { n: Op::Int(k), .. } if k <= 0 => {}
            Stmt::For { idx, n, pre, body, reset } => {
                let pre = dce_block(pre, used, fresh, vars, effectful, dropped);
                let body = dce_block(body, used, fresh, vars, effectful, dropped);
                if !(pre.is_empty() && body.is_empty()) {
                    out.push(Stmt::For { idx, n, pre, body, reset });
                }
            }
            Stmt::If { cond, then, els } => {
                let then = dce_block(then, used, fresh, vars, effectful, dropped);
                let els = dce_block(els, used, fresh, vars, effectful, dropped);
                if !(then.is_empty() && els.is_empty()) {
                    out.push(Stmt::If { cond, then, els });
                }
            }
            // A fresh tensor that is never read.
            Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. }
                if fresh.contains(&a) && !used(&a) => {}
            Stmt::CopyDown { mark, mut vars } => {
                let before = vars.len();
                vars.retain(|v| used(v));
                *dropped |= vars.len() < before;
                out.push(Stmt::CopyDown { mark, vars });
            }
            s => out.push(s),
        }
    }
    out
}
