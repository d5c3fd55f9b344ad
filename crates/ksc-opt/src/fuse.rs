//! Two `sumbuild`s over the same range in one chain of lets, fused into one
//! `sumbuild` of pairs.
//!
//! Forward mode makes this pattern at every loop: `[fwdt f]` returns the
//! pair of f's value and tangent, and a loop of f gives one `sumbuild` for
//! the value (calling `g a`) and one for the tangent (calling `[fwdt g] (a,
//! da)`, whose first component is `g a`). Fused, the two bodies are in one
//! lambda, and CSE reads the value from the pair ([`crate::cse`]), at any
//! depth of loops: two loops in two loops become two loops in one loop,
//! which are fused in turn.
//!
//! In A-normal form, for `let x1 = sumbuild n (lam i1 B1)` and a later `let
//! x2 = sumbuild n (lam i2 B2)` of the same chain (n the same variable or
//! literal), neither with an effect, nothing with an effect in between and
//! nothing `B2` reads bound in between (nor by `x1`'s let):
//!
//! ```text
//! let s  = sumbuild n (lam i1 (let ((i2 i1) (y2 B2) (y1 B1)) (tuple y1 y2)))
//!     x1 = get$1$2 s
//! ..
//! let x2 = get$2$2 s
//! ```
//!
//! The body that calls a forward derivative comes first (its pairs give the
//! values the other one computes); otherwise `B1` does. The sums are summed
//! in the same order, so the results are the same to the bit. The second
//! loop may also be forward mode's guarded tangent, `if (eq n 0) z
//! (sumbuild n ..)`: the first loop's `sumbuild` fails on an empty range
//! (knossos-reference.md 10), so the guard never gives `z` once the first
//! has run, and the fused loop fails where the first did.

use ksc_ir::{Body, Callee, Derivation, Expr, ExprId, Pat, Prim, Type, Var};
use ksc_linmap::builder::Builder;

use crate::globals::Globals;
use crate::share::{chain, chain_heads};
use crate::term::Cache;

/// Fuses the pairs of `sumbuild`s of the A-normal-form tree at `root` (see
/// the module), inner loops of fused bodies included; returns how many it
/// fused. Nodes are changed in place.
pub fn fuse_sumbuilds(b: &mut Builder, globals: &Globals, root: ExprId) -> usize {
    // Each fusion leaves one `sumbuild` fewer, so this ends.
    let mut fused = 0;
    while chain_heads(b.body, root).into_iter().any(|head| fuse_in_chain(b, globals, head)) {
        fused += 1;
    }
    fused
}

/// A `sumbuild`'s size, index and lambda body.
fn sumbuild_parts(body: &Body, e: ExprId) -> Option<(ExprId, Var, ExprId)> {
    let [size, lam] = ksc_linmap::builder::call_of(body, e, Prim::Sumbuild)?[..] else { return None };
    match &body.exprs[lam] {
        Expr::Lam(i, Type::Integer, b) => Some((size, i.clone(), *b)),
        _ => None,
    }
}

/// [`sumbuild_parts`] of `e`, or of the `sumbuild` of `if (eq n 0) z
/// (sumbuild n ..)` (with `lets` the chain, where the condition may be
/// bound): (size, index, body, whether guarded).
fn guarded_parts(body: &Body, lets: &[(ExprId, Pat, ExprId)], e: ExprId) -> Option<(ExprId, Var, ExprId, bool)> {
    if let Some((n, i, b)) = sumbuild_parts(body, e) {
        return Some((n, i, b, false));
    }
    let Expr::If(c, _, f) = &body.exprs[e] else { return None };
    let (n, i, b) = sumbuild_parts(body, *f)?;
    let test = match &body.exprs[*c] {
        Expr::Var(v) => lets.iter().find(|(_, p, _)| matches!(p, Pat::Var(x) if x == v)).map(|(_, _, r)| *r)?,
        _ => *c,
    };
    let [x, zero] = ksc_linmap::builder::call_of(body, test, Prim::Eq)?[..] else { return None };
    let zero = matches!(body.exprs[zero], Expr::Lit(ksc_ir::Lit::Integer(0)));
    (zero && same_atom(body, x, n)).then_some((n, i, b, true))
}

/// Are two atoms the same variable or literal?
fn same_atom(body: &Body, a: ExprId, b: ExprId) -> bool {
    match (&body.exprs[a], &body.exprs[b]) {
        (Expr::Var(u), Expr::Var(v)) => u == v,
        (Expr::Lit(l), Expr::Lit(m)) => l == m,
        _ => false,
    }
}

/// Does the tree at `e` call `[fwdt g]` (whose pair gives `g`'s value)?
fn calls_forward(body: &Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        let node = &body.exprs[x];
        if let Expr::Call(Callee::Fun(h), _) = node {
            if h.derivs.first() == Some(&Derivation::FwdT) {
                return true;
            }
        }
        stack.extend(crate::term::children(node));
    }
    false
}

/// Fuses one pair of the chain at `head`; whether there was one.
fn fuse_in_chain(b: &mut Builder, globals: &Globals, head: ExprId) -> bool {
    let (lets, _) = chain(b.body, head);
    let mut cache = Cache::new();
    for (k1, (node1, p1, r1)) in lets.iter().enumerate() {
        let Pat::Var(x1) = p1 else { continue };
        let Some((n1, i1, body1)) = sumbuild_parts(b.body, *r1) else { continue };
        if cache.has_effect(b.body, globals, *r1) {
            continue;
        }
        let free1 = cache.free_vars(b.body, *r1);
        let mut bound: Vec<&Var> = vec![x1];
        for (node2, p2, r2) in &lets[k1 + 1..] {
            if cache.has_effect(b.body, globals, *r2) {
                break;
            }
            let candidate = match (p2, guarded_parts(b.body, &lets, *r2)) {
                (Pat::Var(x2), Some((n2, i2, body2, _))) if same_atom(b.body, n1, n2) => Some((x2, i2, body2)),
                _ => None,
            };
            if let Some((x2, i2, body2)) = candidate {
                let loop2 = match &b.body.exprs[*r2] {
                    Expr::If(_, _, f) => *f,
                    _ => *r2,
                };
                let free2 = cache.free_vars(b.body, loop2);
                // What B2 reads is in scope at x1's let, and the names the
                // fused lambda binds around each body capture nothing.
                let reads_bound = bound.iter().any(|v| free2.contains(*v));
                let captured = free2.contains(&i1) || (i2 != i1 && free1.contains(&i2));
                if !reads_bound && !captured {
                    fuse(b, (*node1, x1, &i1, body1), (*node2, x2, &i2, body2));
                    return true;
                }
            }
            bound.extend(p2.vars());
        }
    }
    false
}

/// Fuses the loops of the lets `node1` and `node2` (see the module).
fn fuse(b: &mut Builder, (node1, x1, i1, body1): (ExprId, &Var, &Var, ExprId), (node2, x2, i2, body2): (ExprId, &Var, &Var, ExprId)) {
    let (t1, t2) = (b.ty(body1), b.ty(body2));
    let (y1, y2) = (b.fresh_name("sum"), b.fresh_name("sum"));
    let v1 = b.var(&y1, t1.clone());
    let v2 = b.var(&y2, t2.clone());
    let pair = b.tuple(vec![v1, v2]);
    let fused_body = if calls_forward(b.body, body2) && !calls_forward(b.body, body1) {
        let inner = b.let_(&y1, body1, pair);
        b.let_(&y2, body2, inner)
    } else {
        let inner = b.let_(&y2, body2, pair);
        b.let_(&y1, body1, inner)
    };
    let fused_body = if i2 == i1 {
        fused_body
    } else {
        let i = b.var(i1, Type::Integer);
        b.let_(i2, i, fused_body)
    };
    let lam = b.lam(i1, Type::Integer, fused_body);
    let Expr::Let(_, r1, next1) = b.body.exprs[node1].clone() else { unreachable!("a let") };
    let Some((size, _, _)) = sumbuild_parts(b.body, r1) else { unreachable!("a sumbuild") };
    let size = b.copy(size);
    let sum = b.prim(Prim::Sumbuild, vec![size, lam]);
    let s = b.fresh_name("sums");
    let pair_ty = Type::Tuple(vec![t1.clone(), t2.clone()]);
    let sv = b.var(&s, pair_ty.clone());
    let first = b.prim(Prim::Get { index: 1, arity: 2 }, vec![sv]);
    let sv = b.var(&s, pair_ty);
    let second = b.prim(Prim::Get { index: 2, arity: 2 }, vec![sv]);
    let ty1 = b.ty(node1);
    let rest = b.body.alloc_typed(Expr::Let(Pat::Var(x1.clone()), first, next1), ty1.clone());
    b.body.exprs[node1] = Expr::Let(Pat::Var(s), sum, rest);
    let Expr::Let(_, _, next2) = b.body.exprs[node2].clone() else { unreachable!("a let") };
    b.body.exprs[node2] = Expr::Let(Pat::Var(x2.clone()), second, next2);
}
