//! Loop versioning for range guards (`version-range-guards`).
//!
//! Reverse mode adds into a vector at an index it cannot prove in range
//! (`deltaVec`'s "out of range adds nothing"), so a loop `for i < n { x =
//! a + i; if (x >= 0 && x < m) { .. } }` (with `a` and `m` invariant)
//! tests every iteration, and the C compiler does not vectorise it. Such a
//! loop becomes `if (a >= 0 && m >= 0 && n <= m - a) { the loop without
//! the test } else { the loop }`: the test is made once, and in range the
//! loop is straight. The copy's variables are renamed. When the loop's
//! preheader computes `a` or `m`, the preheader runs first (under `n > 0`,
//! as it would) and the test after it.
//!
//! A check `x <= m` with `x = idx + x0`, x0 >= 1 a constant (`$concatN`'s
//! counter, read as the index by `scalar-small-tensors`), is versioned the
//! same way, with `a = x0 - 1`: in range, the loop runs without it; else
//! the loop with it fails where it did.
//!
//! Assumes: `a` and `m` are defined neither in the body nor assigned in
//! it; `n <= m - a` cannot overflow once `a >= 0` and `m >= 0`. Only
//! innermost loops, with bodies of at most [`VERSIONED_BODY`] statements
//! (the body is copied).

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{count_stmts, defined_in, fresh_let, lets_of, rename_in, walk};

/// The `version-range-guards` pass.
pub struct VersionRangeGuards;

impl Pass<Func, LoopCx<'_>> for VersionRangeGuards {
    fn name(&self) -> &'static str {
        "version-range-guards"
    }

    /// Whether a loop was versioned.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let body = std::mem::take(&mut f.body);
        let mut changed = false;
        f.body = version_block(body, &mut f.vars, &mut changed);
        changed
    }
}

/// The most statements of a loop body that the pass copies.
const VERSIONED_BODY: usize = 40;

/// Versions the loops of `block` (see the module's doc); sets `changed`
/// when it versions one.
fn version_block(block: Block, vars: &mut Vec<VarInfo>, changed: &mut bool) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let body = version_block(body, vars, changed);
                let pre = version_block(pre, vars, changed);
                let inner_loop = body.iter().any(|s| matches!(s, Stmt::For { .. }));
                // A guard whose offset or size the preheader computes is
                // tested after the preheader, which then runs before both
                // loops (under the loop's own `n > 0`).
                let guard = if inner_loop || count_stmts(&body) > VERSIONED_BODY {
                    None
                } else if let Some(g) = range_guard(&body, &pre, idx) {
                    Some((g, false))
                } else if !pre.is_empty() {
                    range_guard(&body, &[], idx).map(|g| (g, true))
                } else {
                    // (Reached without a preheader only.)
                    bound_check(&body, idx).map(|g| (g, false))
                };
                match guard {
                    Some(((straight, a, m), lifted)) => {
                        *changed = true;
                        // ok = a >= 0 && m >= 0 && n <= m - a (no overflow when both are >= 0).
                        let mut test = Vec::new();
                        let let_ = |rhs: Rhs, ty: ksc_ir::Type, test: &mut Block, vars: &mut Vec<VarInfo>| {
                            let (s, v) = fresh_let(vars, rhs, ty);
                            test.push(s);
                            v
                        };
                        let a_ok =
                            let_(Rhs::Bin(BinOp::IGe, a.clone(), Op::Int(0)), ksc_ir::Type::Bool, &mut test, vars);
                        let m_ok =
                            let_(Rhs::Bin(BinOp::IGe, m.clone(), Op::Int(0)), ksc_ir::Type::Bool, &mut test, vars);
                        let room = let_(
                            Rhs::IChecked(IOp::Sub, m.clone(), a.clone(), SiteId::UNCHECKED),
                            ksc_ir::Type::Integer,
                            &mut test,
                            vars,
                        );
                        let fits = let_(Rhs::Bin(BinOp::ILe, n.clone(), room), ksc_ir::Type::Bool, &mut test, vars);
                        let both = let_(Rhs::Bin(BinOp::And, a_ok, m_ok), ksc_ir::Type::Bool, &mut test, vars);
                        let ok = let_(Rhs::Bin(BinOp::And, both, fits), ksc_ir::Type::Bool, &mut test, vars);
                        let (pre, lifted_pre) = if lifted { (Vec::new(), pre) } else { (pre, Vec::new()) };
                        let fast =
                            renamed(Stmt::For { idx, n: n.clone(), pre: pre.clone(), body: straight, reset }, vars);
                        let nonempty = lifted
                            .then(|| fresh_let(vars, Rhs::Bin(BinOp::IGt, n.clone(), Op::Int(0)), ksc_ir::Type::Bool));
                        let versioned =
                            Stmt::If { cond: ok, then: vec![fast], els: vec![Stmt::For { idx, n, pre, body, reset }] };
                        match nonempty {
                            Some((ne, cond)) => {
                                let mut then = lifted_pre;
                                then.extend(test);
                                then.push(versioned);
                                out.push(ne);
                                out.push(Stmt::If { cond, then, els: vec![] });
                            }
                            None => {
                                out.extend(test);
                                out.push(versioned);
                            }
                        }
                    }
                    None => out.push(Stmt::For { idx, n, pre, body, reset }),
                }
            }
            Stmt::If { cond, then, els } => {
                let then = version_block(then, vars, changed);
                let els = version_block(els, vars, changed);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// In a loop body over `idx`: a statement `if (x >= 0 && x < m) { .. }`
/// with no else (at the top of the body or in its branches), where `x = a +
/// idx` (or `idx`) is defined next to it and `a`, `m` are defined neither in
/// the body nor in the loop's preheader `pre` (the test goes before the
/// loop): the body with that statement replaced by its branch, `a` and `m`.
fn range_guard(body: &Block, pre: &[Stmt], idx: VarId) -> Option<(Block, Op, Op)> {
    strip_guard(body, idx, &variant(body, pre))
}

/// What is not invariant in a loop: the variables its body and preheader
/// define, and the mutable variables its body assigns.
fn variant(body: &Block, pre: &[Stmt]) -> FxHashSet<VarId> {
    let mut inside = defined_in(body);
    inside.extend(defined_in(pre));
    walk(body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            inside.insert(*v);
        }
    });
    inside
}

fn strip_guard(block: &Block, idx: VarId, inside: &FxHashSet<VarId>) -> Option<(Block, Op, Op)> {
    let defs = lets_of(block);
    let invariant = |o: &Op| match o {
        Op::Var(v) => !inside.contains(v) && *v != idx,
        _ => true,
    };
    let def = |o: &Op| match o {
        Op::Var(v) => defs.get(v).copied(),
        _ => None,
    };
    let guard = |s: &Stmt| -> Option<(Op, Op)> {
        let Stmt::If { cond, els, .. } = s else { return None };
        if !els.is_empty() {
            return None;
        }
        let Rhs::Bin(BinOp::And, p, q) = def(cond)? else { return None };
        let (Rhs::Bin(BinOp::IGe, x, Op::Int(0)), Rhs::Bin(BinOp::ILt, x2, m)) = (def(p)?, def(q)?) else {
            return None;
        };
        if x != x2 || !invariant(m) {
            return None;
        }
        let a = match x {
            Op::Var(v) if *v == idx => Op::Int(0),
            _ => match def(x)? {
                Rhs::IChecked(IOp::Add, a, Op::Var(i), _)
                | Rhs::IChecked(IOp::Add, Op::Var(i), a, _)
                | Rhs::Bin(BinOp::IAddNoCheck, a, Op::Var(i))
                | Rhs::Bin(BinOp::IAddNoCheck, Op::Var(i), a)
                    if *i == idx && invariant(a) =>
                {
                    a.clone()
                }
                _ => return None,
            },
        };
        Some((a, m.clone()))
    };
    for (at, s) in block.iter().enumerate() {
        if let Some((a, m)) = guard(s) {
            let Stmt::If { then, .. } = s else { unreachable!("the guard is an if") };
            let mut out = block[..at].to_vec();
            out.extend(then.iter().cloned());
            out.extend(block[at + 1..].iter().cloned());
            return Some((out, a, m));
        }
    }
    // In a branch.
    for (at, s) in block.iter().enumerate() {
        let Stmt::If { cond, then, els } = s else { continue };
        let (then, els, a, m) = match (strip_guard(then, idx, inside), strip_guard(els, idx, inside)) {
            (Some((t, a, m)), _) => (t, els.clone(), a, m),
            (None, Some((e, a, m))) => (then.clone(), e, a, m),
            (None, None) => continue,
        };
        let mut out = block.clone();
        out[at] = Stmt::If { cond: cond.clone(), then, els };
        return Some((out, a, m));
    }
    None
}

/// In a loop body over `idx` (without a preheader): a check `x <= m`
/// directly in it (a `$concatN`'s "more elements than its size", once its
/// counter is read as `idx + k0`: `scalar-small-tensors`), where `x = idx
/// + x0` through lets adding constants, `x0 >= 1`, and `m` is defined
/// neither in the body nor assigned in it: it holds in every iteration
/// when `n <= m - (x0 - 1)` (and `m >= 0`), the test of a range guard
/// with `a = x0 - 1`. The body without the check, a and m.
fn bound_check(body: &Block, idx: VarId) -> Option<(Block, Op, Op)> {
    let inside = variant(body, &[]);
    let defs = lets_of(body);
    // x as idx + x0.
    let offset = |x: &Op| -> Option<i64> {
        let mut x = x.clone();
        let mut x0: i64 = 0;
        loop {
            let Op::Var(v) = &x else { return None };
            if *v == idx {
                return Some(x0);
            }
            match defs.get(v)? {
                Rhs::Bin(BinOp::IAddNoCheck, y, Op::Int(d)) | Rhs::Bin(BinOp::IAddNoCheck, Op::Int(d), y) => {
                    x0 = x0.checked_add(*d)?;
                    x = y.clone();
                }
                _ => return None,
            }
        }
    };
    let (at, x0, m) = body.iter().enumerate().find_map(|(at, s)| {
        let Stmt::Check { cond: Op::Var(c), .. } = s else { return None };
        let Some(Rhs::Bin(BinOp::ILe, x, m)) = defs.get(c) else { return None };
        let x0 = offset(x).filter(|&x0| x0 >= 1)?;
        (!matches!(m, Op::Var(v) if inside.contains(v) || *v == idx)).then(|| (at, x0, m.clone()))
    })?;
    let mut out = body.clone();
    out.remove(at);
    Some((out, Op::Int(x0 - 1), m))
}

/// The statement with every variable it defines renamed to a fresh one.
fn renamed(mut s: Stmt, vars: &mut Vec<VarInfo>) -> Stmt {
    rename_in(std::slice::from_mut(&mut s), vars, FxHashMap::default());
    s
}
