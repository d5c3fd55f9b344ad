//! Common subexpressions (`cse`): a pure computation equal to one that
//! dominates it (earlier in its block or an enclosing one) is replaced by
//! that one's variable, and a copy `let x = y` by `y` itself.
//!
//! Comparisons of an integer with itself are folded (`x == x`, `x <= x`
//! and `x >= x` are true; `x < x` and `x > x` false), as are a loop's
//! index compared with 0 (`i >= 0`) and with the loop's bound (`i < n`);
//! in a branch of an `if`, its condition is known; then a `check` of a
//! true condition goes, an `if` on a constant is its branch and a `select`
//! on one its operand. They come from the lowering's
//! size checks once `fold-alloc-dims` has read a fresh tensor's size as
//! the size it was allocated with (`ts_add` of two tensors tests `dim a ==
//! dim b`, a copy of the same size: 52 of gmm.ks's 317 checks in an
//! unchecked build, some in the gradient's loop over a component's rows),
//! and from index checks whose size CSE found to be the loop's bound (with
//! the former, 162 of the checked build's 495). So this pass also runs
//! after that one.
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

/// Replaces the common subexpressions and folds what is known; whether
/// anything changed.
fn cse(f: &mut Func) -> bool {
    let written = written_arrays(&f.body);
    let mut subst: FxHashMap<VarId, Op> = FxHashMap::default();
    let mut scopes: Vec<FxHashMap<Rhs, VarId>> = vec![FxHashMap::default()];
    let body = std::mem::take(&mut f.body);
    let mut dropped = false;
    let mut bounds = FxHashMap::default();
    f.body = cse_block(body, &f.vars, &written, &mut subst, &mut scopes, &mut bounds, &mut dropped);
    !subst.is_empty() || dropped
}

fn cse_block(
    block: Block,
    vars: &[VarInfo],
    written: &FxHashSet<VarId>,
    subst: &mut FxHashMap<VarId, Op>,
    scopes: &mut Vec<FxHashMap<Rhs, VarId>>,
    bounds: &mut FxHashMap<VarId, Op>,
    dropped: &mut bool,
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
            Stmt::Check { cond: Op::Bool(true), .. } => *dropped = true,
            Stmt::If { cond: Op::Bool(c), then, els } => {
                // The branch taken, in this block (its variables are
                // defined once: nothing after the `if` reads them).
                *dropped = true;
                let taken = cse_block(if c { then } else { els }, vars, written, subst, scopes, bounds, dropped);
                out.extend(taken);
            }
            Stmt::Let(v, rhs) => {
                // What is known is not computed: its value is read instead
                // (a mutable variable's, through a copy).
                let rhs = match folded(&rhs, bounds) {
                    Some(o @ Op::Var(w)) if vars[w.0 as usize].mutable => Rhs::Copy(o),
                    Some(o) => {
                        subst.insert(v, o);
                        continue;
                    }
                    None => rhs,
                };
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
                if !matches!(n, Op::Var(w) if vars[w.0 as usize].mutable) {
                    bounds.insert(idx, n.clone());
                }
                scopes.push(FxHashMap::default());
                let pre = cse_block(pre, vars, written, subst, scopes, bounds, dropped);
                scopes.push(FxHashMap::default());
                let body = cse_block(body, vars, written, subst, scopes, bounds, dropped);
                scopes.pop();
                scopes.pop();
                out.push(Stmt::For { idx, n, pre, body, reset });
            }
            Stmt::If { cond, then, els } => {
                // In each branch the condition is known (a test of it
                // there again, as reverse mode's copies of a branch make).
                let known = match &cond {
                    Op::Var(c) if !vars[c.0 as usize].mutable => Some(*c),
                    _ => None,
                };
                let mut branch = |block: Block, value: bool, subst: &mut FxHashMap<VarId, Op>| {
                    if let Some(c) = known {
                        subst.insert(c, Op::Bool(value));
                    }
                    scopes.push(FxHashMap::default());
                    let block = cse_block(block, vars, written, subst, scopes, bounds, dropped);
                    scopes.pop();
                    if let Some(c) = known {
                        subst.remove(&c);
                    }
                    block
                };
                let then = branch(then, true, subst);
                let els = branch(els, false, subst);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// What `rhs` is without computing it, if known: a comparison of an
/// integer with itself, or of a loop's index with 0 or with the loop's
/// bound (`bounds`), a conjunction with a constant, a `select` on one.
fn folded(rhs: &Rhs, bounds: &FxHashMap<VarId, Op>) -> Option<Op> {
    match rhs {
        Rhs::Bin(BinOp::ILt, Op::Var(i), n) if bounds.get(i) == Some(n) => Some(Op::Bool(true)),
        Rhs::Bin(BinOp::IGe, Op::Var(i), Op::Int(0)) if bounds.contains_key(i) => Some(Op::Bool(true)),
        Rhs::Bin(BinOp::IEq | BinOp::ILe | BinOp::IGe, a, b) if a == b => Some(Op::Bool(true)),
        Rhs::Bin(BinOp::ILt | BinOp::IGt, a, b) if a == b => Some(Op::Bool(false)),
        Rhs::Bin(BinOp::And, Op::Bool(true), x) | Rhs::Bin(BinOp::And, x, Op::Bool(true)) => Some(x.clone()),
        Rhs::Bin(BinOp::And, Op::Bool(false), _) | Rhs::Bin(BinOp::And, _, Op::Bool(false)) => Some(Op::Bool(false)),
        Rhs::Select(Op::Bool(c), a, b) => Some(if *c { a.clone() } else { b.clone() }),
        _ => None,
    }
}
