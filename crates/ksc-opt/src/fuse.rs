//! Two loops over the same range in one chain of lets, fused into one loop
//! of pairs.
//!
//! Forward mode makes this pattern at every loop: `[fwdt f]` returns the
//! pair of f's value and tangent, and a loop of f gives one loop for the
//! value (calling `g a`) and one for the tangent (calling `[fwdt g] (a,
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
//! The sums are summed in the same order, so the results are the same to
//! the bit. The second loop may also be forward mode's guarded tangent, `if
//! (eq n 0) z (sumbuild n ..)`: the first loop's `sumbuild` fails on an
//! empty range (knossos-reference.md 10), so the guard never gives `z` once
//! the first has run, and the fused loop fails where the first did.
//!
//! Two `build`s are fused the same way, as `unzip (build n (lam i1 ..))`
//! (lowering writes the two vectors in one loop), but only when one body
//! calls `[fwdt g]` and the other `g` itself: a `build` read only by a
//! later loop is fused into that loop by lowering and never stored, which
//! the `unzip` would undo, so builds are fused only where that saves a
//! call.
//!
//! The body that calls `[fwdt g]` comes first in the fused lambda (its
//! pairs give the values the other one computes); otherwise `B1` does.

use ksc_ir::{Body, Callee, Derivation, Expr, ExprId, FunName, Pat, Prim, Type, Var};
use ksc_linmap::builder::Builder;
use rustc_hash::FxHashSet;

use crate::globals::Globals;
use crate::share::{chain, chain_heads, same_size};
use crate::term::Cache;

/// Fuses the pairs of loops of the A-normal-form tree at `root` (see the
/// module), inner loops of fused bodies included; returns how many it
/// fused. Nodes are changed in place.
pub fn fuse_loops(b: &mut Builder, globals: &Globals, root: ExprId) -> usize {
    // Each fusion leaves one loop fewer, so this ends.
    let mut fused = 0;
    while chain_heads(b.body, root).into_iter().any(|head| fuse_in_chain(b, globals, head)) {
        fused += 1;
    }
    fused
}

/// A `sumbuild` or `build` (`p`): its size, index and lambda body.
fn loop_parts(body: &Body, e: ExprId, p: Prim) -> Option<(ExprId, Var, ExprId)> {
    let [size, lam] = ksc_linmap::builder::call_of(body, e, p)?[..] else { return None };
    match &body.exprs[lam] {
        Expr::Lam(i, Type::Integer, b) => Some((size, i.clone(), *b)),
        _ => None,
    }
}

/// [`loop_parts`] of `e`, or, for a `sumbuild`, of the loop of `if (eq n
/// 0) z (sumbuild n ..)` (with `lets` the chain, where the condition may be
/// bound): (the loop, its size, index and body).
fn guarded_parts(body: &Body, lets: &[(ExprId, Pat, ExprId)], e: ExprId, p: Prim) -> Option<(ExprId, ExprId, Var, ExprId)> {
    if let Some((n, i, b)) = loop_parts(body, e, p) {
        return Some((e, n, i, b));
    }
    let Expr::If(c, _, f) = &body.exprs[e] else { return None };
    let (n, i, b) = loop_parts(body, *f, p).filter(|_| p == Prim::Sumbuild)?;
    let test = match &body.exprs[*c] {
        Expr::Var(v) => lets.iter().find(|(_, p, _)| matches!(p, Pat::Var(x) if x == v)).map(|(_, _, r)| *r)?,
        _ => *c,
    };
    let [x, zero] = ksc_linmap::builder::call_of(body, test, Prim::Eq)?[..] else { return None };
    let zero = matches!(body.exprs[zero], Expr::Lit(ksc_ir::Lit::Integer(0)));
    (zero && same_size(body, x, n)).then_some((*f, n, i, b))
}

/// The functions the tree at `e` calls, and the `g` of the `[fwdt g]` it
/// calls (whose pairs give `g`'s values).
fn calls(body: &Body, e: ExprId) -> (FxHashSet<FunName>, FxHashSet<FunName>) {
    let (mut called, mut paired) = (FxHashSet::default(), FxHashSet::default());
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        let node = &body.exprs[x];
        if let Expr::Call(Callee::Fun(h), _) = node {
            match h.inner() {
                Some((Derivation::FwdT, g)) => {
                    paired.insert(g);
                }
                _ => {
                    called.insert(h.clone());
                }
            }
        }
        stack.extend(crate::term::children(node));
    }
    (called, paired)
}

/// Fuses one pair of the chain at `head`; whether there was one.
fn fuse_in_chain(b: &mut Builder, globals: &Globals, head: ExprId) -> bool {
    let (lets, _) = chain(b.body, head);
    let mut cache = Cache::new();
    for (k1, (node1, p1, r1)) in lets.iter().enumerate() {
        let Pat::Var(x1) = p1 else { continue };
        let Some((kind, (n1, i1, body1))) =
            [Prim::Sumbuild, Prim::Build].into_iter().find_map(|p| Some((p, loop_parts(b.body, *r1, p)?)))
        else {
            continue;
        };
        if cache.has_effect(b.body, globals, *r1) {
            continue;
        }
        let free1 = cache.free_vars(b.body, *r1);
        // The calls of B1, once a candidate needs them.
        let mut calls1 = None;
        let mut bound: Vec<&Var> = vec![x1];
        for (node2, p2, r2) in &lets[k1 + 1..] {
            if cache.has_effect(b.body, globals, *r2) {
                break;
            }
            let candidate = match (p2, guarded_parts(b.body, &lets, *r2, kind)) {
                (Pat::Var(x2), Some((loop2, n2, i2, body2))) if same_size(b.body, n1, n2) => Some((x2, loop2, i2, body2)),
                _ => None,
            };
            if let Some((x2, loop2, i2, body2)) = candidate {
                let free2 = cache.free_vars(b.body, loop2);
                // What B2 reads is in scope at x1's let, and the names the
                // fused lambda binds around each body capture nothing.
                let reads_bound = bound.iter().any(|v| free2.contains(*v));
                let captured = free2.contains(&i1) || (i2 != i1 && free1.contains(&i2));
                let (called1, paired1) = calls1.get_or_insert_with(|| calls(b.body, body1));
                let (called2, paired2) = calls(b.body, body2);
                let shares_a_call =
                    paired2.iter().any(|g| called1.contains(g)) || paired1.iter().any(|g| called2.contains(g));
                if !reads_bound && !captured && (kind == Prim::Sumbuild || shares_a_call) {
                    let pairs_first = !paired2.is_empty() && paired1.is_empty();
                    fuse(b, kind, pairs_first, (*node1, x1, &i1, body1), (*node2, x2, &i2, body2));
                    return true;
                }
            }
            bound.extend(p2.vars());
        }
    }
    false
}

/// Fuses the loops (`kind`) of the lets `node1` and `node2` (see the
/// module), the second body first if `second_first`.
fn fuse(
    b: &mut Builder,
    kind: Prim,
    second_first: bool,
    (node1, x1, i1, body1): (ExprId, &Var, &Var, ExprId),
    (node2, x2, i2, body2): (ExprId, &Var, &Var, ExprId),
) {
    let (t1, t2) = (b.ty(body1), b.ty(body2));
    let (y1, y2) = (b.fresh_name("part"), b.fresh_name("part"));
    let v1 = b.var(&y1, t1.clone());
    let v2 = b.var(&y2, t2.clone());
    let pair = b.tuple(vec![v1, v2]);
    let fused_body = if second_first {
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
    let Some((size, _, _)) = loop_parts(b.body, r1, kind) else { unreachable!("a loop") };
    let size = b.copy(size);
    let fused = b.prim(kind, vec![size, lam]);
    let fused = if kind == Prim::Build { b.prim(Prim::Unzip, vec![fused]) } else { fused };
    let s = b.fresh_name("parts");
    let pair_ty = b.ty(fused);
    let sv = b.var(&s, pair_ty.clone());
    let first = b.prim(Prim::Get { index: 1, arity: 2 }, vec![sv]);
    let sv = b.var(&s, pair_ty);
    let second = b.prim(Prim::Get { index: 2, arity: 2 }, vec![sv]);
    let ty1 = b.ty(node1);
    let rest = b.body.alloc_typed(Expr::Let(Pat::Var(x1.clone()), first, next1), ty1);
    b.body.exprs[node1] = Expr::Let(Pat::Var(s), fused, rest);
    let Expr::Let(_, _, next2) = b.body.exprs[node2].clone() else { unreachable!("a let") };
    b.body.exprs[node2] = Expr::Let(Pat::Var(x2.clone()), second, next2);
}
