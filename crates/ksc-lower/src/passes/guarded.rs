//! Values shared between branches of `if`s on the same condition
//! (`share-guarded`).
//!
//! A reverse pass recomputes the primal values of a branch: `if c` in the
//! primal, `if c` again where its cotangents are computed, often in a loop
//! over rows. CSE cannot share such a value, since the earlier one is
//! local to its branch; this pass makes the earlier branch store it in a
//! mutable variable declared before its `if`, and the later computation
//! read that variable (`tests/snapshots/share_guarded.ks`).
//!
//! Assumes: the condition is an immutable variable, so both `if`s take the
//! same branch; the earlier `if` dominates the later computation (it is
//! before it in its block or an enclosing one). Only scalars, computations
//! that are pure and cannot fail (no loads or copies), and operands that
//! are not mutable are shared. It runs first, before LICM and CSE move
//! and share the rest.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashMap;

use super::LoopCx;
use crate::ir::*;

/// The `share-guarded` pass.
pub struct ShareGuarded;

impl Pass<Func, LoopCx<'_>> for ShareGuarded {
    fn name(&self) -> &'static str {
        "share-guarded"
    }

    /// Whether a value was shared.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        share_guarded(f)
    }
}

/// Shares the values the module's doc describes; whether there were any.
fn share_guarded(f: &mut Func) -> bool {
    let mut plan = GuardPlan::default();
    let mut visible: Vec<(VarId, bool, Rhs, VarId)> = Vec::new();
    plan_guarded(&f.body, &f.vars, &mut visible, &mut plan);
    if plan.replace.is_empty() {
        return false;
    }
    // A mutable variable for each value read later.
    let mut exports: FxHashMap<VarId, VarId> = FxHashMap::default();
    let mut sources: Vec<VarId> = plan.replace.values().copied().collect();
    sources.sort();
    sources.dedup();
    for v in sources {
        let ty = f.vars[v.0 as usize].ty.clone();
        let name = f.vars[v.0 as usize].name.clone();
        exports.insert(v, VarId(f.vars.len() as u32));
        f.vars.push(VarInfo { ty, name, mutable: true });
    }
    let body = std::mem::take(&mut f.body);
    f.body = rewrite_guarded(body, &f.vars, &plan, &exports);
    true
}

#[derive(Default)]
struct GuardPlan {
    /// A later computation -> the earlier value it reads.
    replace: FxHashMap<VarId, VarId>,
}

/// The zero of a scalar type (the initial value of an export).
fn scalar_zero(t: &ksc_ir::Type) -> Option<Op> {
    match t {
        ksc_ir::Type::Float => Some(Op::Float(0.0)),
        ksc_ir::Type::Integer => Some(Op::Int(0)),
        ksc_ir::Type::Bool => Some(Op::Bool(false)),
        _ => None,
    }
}

/// Finds the shared values: `visible` holds (condition, branch, the
/// computation with operands renamed to the values they share, its value)
/// for the branches of `if`s that dominate the current statement.
fn plan_guarded(block: &Block, vars: &[VarInfo], visible: &mut Vec<(VarId, bool, Rhs, VarId)>, plan: &mut GuardPlan) {
    let depth = visible.len();
    for s in block {
        match s {
            Stmt::For { pre, body, .. } => {
                plan_guarded(pre, vars, visible, plan);
                plan_guarded(body, vars, visible, plan);
            }
            Stmt::If { cond: Op::Var(c), then, els } if !vars[c.0 as usize].mutable => {
                let mut added = Vec::new();
                for (branch, b) in [(true, then), (false, els)] {
                    for t in b {
                        let Stmt::Let(x, rhs) = t else { continue };
                        if scalar_zero(&vars[x.0 as usize].ty).is_none()
                            || !rhs.is_pure()
                            || rhs.can_fail()
                            || matches!(rhs, Rhs::Load { .. } | Rhs::Copy(_))
                            || rhs.operands().iter().any(|o| matches!(o, Op::Var(w) if vars[w.0 as usize].mutable))
                        {
                            continue;
                        }
                        // Operands renamed to the earlier values they read.
                        let mut key = rhs.clone();
                        for o in key.operands_mut() {
                            if let Op::Var(w) = o {
                                if let Some(&e) = plan.replace.get(w) {
                                    *o = Op::Var(e);
                                }
                            }
                        }
                        let earlier = visible
                            .iter()
                            .find(|(c2, b2, k, _)| c2 == c && *b2 == branch && *k == key)
                            .map(|(_, _, _, v)| *v);
                        match earlier {
                            Some(v) => {
                                plan.replace.insert(*x, v);
                            }
                            None => added.push((*c, branch, key, *x)),
                        }
                    }
                    // `if`s nested in the branch see what dominates it.
                    plan_guarded(b, vars, visible, plan);
                }
                visible.extend(added);
            }
            Stmt::If { then, els, .. } => {
                plan_guarded(then, vars, visible, plan);
                plan_guarded(els, vars, visible, plan);
            }
            _ => {}
        }
    }
    visible.truncate(depth);
}

/// Applies the plan: exports declared before their `if` and set after
/// their definition; later computations read them.
fn rewrite_guarded(block: Block, vars: &[VarInfo], plan: &GuardPlan, exports: &FxHashMap<VarId, VarId>) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::Let(x, _) if plan.replace.contains_key(&x) => {
                out.push(Stmt::Let(x, Rhs::Copy(Op::Var(exports[&plan.replace[&x]]))));
            }
            Stmt::Let(x, rhs) => {
                out.push(Stmt::Let(x, rhs));
                if let Some(&m) = exports.get(&x) {
                    out.push(Stmt::Set(m, Op::Var(x)));
                }
            }
            Stmt::For { idx, n, pre, body, reset } => out.push(Stmt::For {
                idx,
                n,
                pre: rewrite_guarded(pre, vars, plan, exports),
                body: rewrite_guarded(body, vars, plan, exports),
                reset,
            }),
            Stmt::If { cond, then, els } => {
                for b in [&then, &els] {
                    for t in b {
                        if let Stmt::Let(x, _) = t {
                            if let Some(&m) = exports.get(x) {
                                let zero = scalar_zero(&vars[x.0 as usize].ty);
                                out.push(Stmt::DeclMut(m, zero));
                            }
                        }
                    }
                }
                let then = rewrite_guarded(then, vars, plan, exports);
                let els = rewrite_guarded(els, vars, plan, exports);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}
