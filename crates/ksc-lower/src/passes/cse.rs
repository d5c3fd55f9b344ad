//! Common subexpressions (`cse`): a pure computation equal to one that
//! dominates it (earlier in its block or an enclosing one) is replaced by
//! that one's variable, and a copy `let x = y` by `y` itself.
//!
//! Lowering hash-conses as it builds (`builder.rs`); this second round
//! runs after LICM, which moves computations from different loops next
//! to each other before them.
//!
//! Assumes: SSA (a `let` defines its variable once); loads of tensors
//! written in place and computations reading mutable variables are not
//! shared (their values change), nor are copies of mutable variables
//! propagated.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{stmt_operands_mut, written_arrays};

/// The `cse` pass.
pub struct Cse;

impl Pass<Func, LoopCx<'_>> for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    /// Whether a computation or copy was replaced.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        cse(f)
    }
}

/// Replaces the common subexpressions; whether there were any (each
/// replacement drops a `let`).
fn cse(f: &mut Func) -> bool {
    let written = written_arrays(&f.body);
    let mut subst: FxHashMap<VarId, Op> = FxHashMap::default();
    let mut scopes: Vec<FxHashMap<Rhs, VarId>> = vec![FxHashMap::default()];
    let body = std::mem::take(&mut f.body);
    f.body = cse_block(body, &f.vars, &written, &mut subst, &mut scopes);
    !subst.is_empty()
}

fn cse_block(
    block: Block,
    vars: &[VarInfo],
    written: &FxHashSet<VarId>,
    subst: &mut FxHashMap<VarId, Op>,
    scopes: &mut Vec<FxHashMap<Rhs, VarId>>,
) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for mut s in block {
        for o in stmt_operands_mut(&mut s) {
            if let Op::Var(v) = o {
                if let Some(r) = subst.get(v) {
                    *o = r.clone();
                }
            }
        }
        match s {
            Stmt::Let(v, rhs) => {
                let shareable = rhs.is_pure()
                    && !matches!(&rhs, Rhs::Load { arr: Op::Var(a), .. } if written.contains(a))
                    && rhs.operands().iter().all(|o| !matches!(o, Op::Var(w) if vars[w.0 as usize].mutable));
                if let Rhs::Copy(o) = &rhs {
                    if !matches!(o, Op::Var(w) if vars[w.0 as usize].mutable) {
                        subst.insert(v, o.clone());
                        continue;
                    }
                }
                if shareable {
                    if let Some(&w) = scopes.iter().rev().find_map(|t| t.get(&rhs)) {
                        subst.insert(v, Op::Var(w));
                        continue;
                    }
                    scopes.last_mut().expect("a scope").insert(rhs.clone(), v);
                }
                out.push(Stmt::Let(v, rhs));
            }
            Stmt::For { idx, n, pre, body, reset } => {
                scopes.push(FxHashMap::default());
                let pre = cse_block(pre, vars, written, subst, scopes);
                scopes.push(FxHashMap::default());
                let body = cse_block(body, vars, written, subst, scopes);
                scopes.pop();
                scopes.pop();
                out.push(Stmt::For { idx, n, pre, body, reset });
            }
            Stmt::If { cond, then, els } => {
                scopes.push(FxHashMap::default());
                let then = cse_block(then, vars, written, subst, scopes);
                scopes.pop();
                scopes.push(FxHashMap::default());
                let els = cse_block(els, vars, written, subst, scopes);
                scopes.pop();
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}
