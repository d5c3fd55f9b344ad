//! One `exp` for a maximum's two differences (`share-max-exps`).
//!
//! Combining two elements of the log-sum-exp monoid (seed 002's example of
//! `reduce`; softmax's running form) computes `m = max a b`, then `exp (a
//! - m)` and `exp (b - m)`: two exponentials, one of which is always of a
//! variable minus itself. With `c = a < b` (`max a b` is `c ? b : a`):
//!
//! - `exp (a - m)` is `exp (a - b)` if c, else `exp (a - a)`;
//! - `exp (b - m)` is `exp (b - b)` if c, else `exp (b - a)`;
//!
//! so both are read from one `e = exp (c ? a - b : b - a)`, and `exp (x -
//! x)` is `(x - x) + 1.0`, the same bits: 1.0 for a finite x (`exp` of a
//! zero is exactly 1), and x - x's NaN otherwise (the runtime's `exp`
//! returns a NaN argument as `x + x`, and `NaN + 1.0` is that NaN). The
//! differences that are read are the ones written, so every result keeps
//! its bits, NaN and infinities included.
//!
//! Only a maximum whose two differences and their `exp`s are all in its
//! own block counts: `e` is computed where the maximum is, and used by
//! both. The log-sum-exp objective of the `scan` workload (n = 10^6, one
//! thread) takes 0.75 of its time with it, its gradient 0.90 (interleaved
//! A/B).

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::FxHashMap;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{fresh_let, nested_blocks};

/// The `share-max-exps` pass.
pub struct ShareMaxExps;

impl Pass<Func, LoopCx<'_>> for ShareMaxExps {
    fn name(&self) -> &'static str {
        "share-max-exps"
    }

    /// Whether a pair of `exp`s became one.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let mut body = std::mem::take(&mut f.body);
        let changed = block(&mut body, &mut f.vars);
        f.body = body;
        changed
    }
}

/// Rewrites the pairs of `b` and of the blocks in it; whether it did.
fn block(b: &mut Block, vars: &mut Vec<VarInfo>) -> bool {
    let mut changed = false;
    nested_blocks(b, &mut |inner| changed |= block(inner, vars));
    // The block's differences from a variable (`d = x - m`, by m) and the
    // statements taking an `exp` of a variable (by that variable).
    let mut differences: FxHashMap<VarId, Vec<(&Op, VarId)>> = FxHashMap::default();
    let mut exps: FxHashMap<VarId, usize> = FxHashMap::default();
    let mut maxima = Vec::new();
    for (k, s) in b.iter().enumerate() {
        match s {
            Stmt::Let(d, Rhs::Bin(BinOp::FSub, x, Op::Var(m))) => differences.entry(*m).or_default().push((x, *d)),
            Stmt::Let(_, Rhs::Un(UnOp::Math(MathFn::Exp), Op::Var(d), _)) => {
                exps.entry(*d).or_insert(k);
            }
            Stmt::Let(m, Rhs::Bin(BinOp::FMax, x, y)) if x != y => maxima.push((k, *m, x.clone(), y.clone())),
            _ => {}
        }
    }
    // Each maximum's two `exp`s, after it (its differences read it).
    let exp_of = |m: VarId, x: &Op| {
        let ds = differences.get(&m)?;
        ds.iter().filter(|(y, _)| *y == x).find_map(|(_, d)| exps.get(d).copied())
    };
    let pairs: Vec<(usize, Op, Op, usize, usize)> = maxima
        .into_iter()
        .filter_map(|(k, m, x, y)| {
            let (ex, ey) = (exp_of(m, &x)?, exp_of(m, &y)?);
            Some((k, x, y, ex, ey))
        })
        .collect();
    // The `exp`s are rewritten first, then the new statements inserted
    // after their maxima from the last, so that no index still to be used
    // has moved.
    let mut inserts = Vec::new();
    for (k, x, y, ex, ey) in pairs {
        let mut new = Vec::new();
        let mut let_ = |rhs: Rhs, ty: Type| {
            let (s, v) = fresh_let(vars, rhs, ty);
            new.push(s);
            v
        };
        let c = let_(Rhs::Bin(BinOp::FLt, x.clone(), y.clone()), Type::Bool);
        let xy = let_(Rhs::Bin(BinOp::FSub, x.clone(), y.clone()), Type::Float);
        let yx = let_(Rhs::Bin(BinOp::FSub, y.clone(), x.clone()), Type::Float);
        let d = let_(Rhs::Select(c.clone(), xy, yx), Type::Float);
        let e = let_(Rhs::Un(UnOp::Math(MathFn::Exp), d, None), Type::Float);
        let mut exp_zero = |z: &Op| {
            let zero = let_(Rhs::Bin(BinOp::FSub, z.clone(), z.clone()), Type::Float);
            let_(Rhs::Bin(BinOp::FAdd, zero, Op::Float(1.0)), Type::Float)
        };
        let (one_x, one_y) = (exp_zero(&x), exp_zero(&y));
        set_rhs(&mut b[ex], Rhs::Select(c.clone(), e.clone(), one_x));
        set_rhs(&mut b[ey], Rhs::Select(c, one_y, e));
        inserts.push((k, new));
    }
    for (k, new) in inserts.into_iter().rev() {
        b.splice(k + 1..k + 1, new);
        changed = true;
    }
    changed
}

fn set_rhs(s: &mut Stmt, rhs: Rhs) {
    if let Stmt::Let(_, r) = s {
        *r = rhs;
    }
}
