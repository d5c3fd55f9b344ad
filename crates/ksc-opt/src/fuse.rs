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
//! `B2` not reading `x1` (the lets in between whose variables `B2` reads
//! move above `x1`'s, when none reads `x1` and no name changes meaning:
//! [`lets_to_move`]):
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
//! Two `fold`s over the same vector (variable or literal) are fused the
//! same way, into a fold whose accumulator is the pair of theirs, under
//! the same condition as `build`s: forward mode folds a step of values and
//! a step of pairs (value, tangent), and a loop or call in one has its
//! counterpart in the other.
//!
//! ```text
//! let s  = fold (lam w (let ((y2 (let (t2 (tuple (get$2$2 (get$1$2 w)) (get$2$2 w))) B2))
//!                           (y1 (let (t1 (tuple (get$1$2 (get$1$2 w)) (get$2$2 w))) B1)))
//!                       (tuple y1 y2)))
//!               (tuple a1 a2) v
//! ```
//!
//! The body that calls `[fwdt g]` comes first in the fused lambda (its
//! pairs give the values the other one computes); otherwise `B1` does.

use ksc_ir::builder::Builder;
use ksc_ir::term::{same_size, Cache};
use ksc_ir::{Body, Callee, Derivation, Expr, ExprId, FunName, Pat, Prim, Type, Var};
use rustc_hash::FxHashSet;

use crate::globals::Globals;
use crate::share::{chain, chain_heads};

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

/// A `sumbuild` or `build` (`p`): its size, index and lambda body; for a
/// `fold`, its vector, the step's parameter and body.
fn loop_parts(body: &Body, e: ExprId, p: Prim) -> Option<(ExprId, Var, ExprId)> {
    if p == Prim::Fold {
        let [lam, _, v] = ksc_ir::builder::call_of(body, e, p)?[..] else { return None };
        return match &body.exprs[lam] {
            Expr::Lam(t, Type::Tuple(ab), b) if ab.len() == 2 => Some((v, t.clone(), *b)),
            _ => None,
        };
    }
    let [size, lam] = ksc_ir::builder::call_of(body, e, p)?[..] else { return None };
    match &body.exprs[lam] {
        Expr::Lam(i, Type::Integer, b) => Some((size, i.clone(), *b)),
        _ => None,
    }
}

/// [`loop_parts`] of `e`, or, for a `sumbuild`, of the loop of `if (eq n
/// 0) z (sumbuild n ..)` (with `lets` the chain, where the condition may be
/// bound): (the loop, its size, index and body).
fn guarded_parts(
    body: &Body,
    lets: &[(ExprId, Pat, ExprId)],
    e: ExprId,
    p: Prim,
) -> Option<(ExprId, ExprId, Var, ExprId)> {
    if let Some((n, i, b)) = loop_parts(body, e, p) {
        return Some((e, n, i, b));
    }
    let Expr::If(c, _, f) = &body.exprs[e] else { return None };
    let (n, i, b) = loop_parts(body, *f, p).filter(|_| p == Prim::Sumbuild)?;
    let test = match &body.exprs[*c] {
        Expr::Var(v) => lets.iter().find(|(_, p, _)| matches!(p, Pat::Var(x) if x == v)).map(|(_, _, r)| *r)?,
        _ => *c,
    };
    let [x, zero] = ksc_ir::builder::call_of(body, test, Prim::Eq)?[..] else { return None };
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
        stack.extend(ksc_ir::term::children(node));
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
            [Prim::Sumbuild, Prim::Build, Prim::Fold].into_iter().find_map(|p| Some((p, loop_parts(b.body, *r1, p)?)))
        else {
            continue;
        };
        if cache.has_effect(b.body, globals, *r1) {
            continue;
        }
        let free1 = cache.free_vars(b.body, *r1);
        // The calls of B1, once a candidate needs them.
        let mut calls1 = None;
        for (k2, (node2, p2, r2)) in lets.iter().enumerate().skip(k1 + 1) {
            if cache.has_effect(b.body, globals, *r2) {
                break;
            }
            let candidate = match (p2, guarded_parts(b.body, &lets, *r2, kind)) {
                (Pat::Var(x2), Some((loop2, n2, i2, body2))) if same_size(b.body, n1, n2) => {
                    Some((x2, loop2, i2, body2))
                }
                _ => None,
            };
            let Some((x2, loop2, i2, body2)) = candidate else { continue };
            let free2 = cache.free_vars(b.body, loop2);
            // The names the fused lambda binds around each body capture
            // nothing. (A fold's step binds each parameter around its own
            // body.)
            let captured = kind != Prim::Fold && (free2.contains(&i1) || (i2 != i1 && free1.contains(&i2)));
            let (called1, paired1) = calls1.get_or_insert_with(|| calls(b.body, body1));
            let (called2, paired2) = calls(b.body, body2);
            let shares_a_call =
                paired2.iter().any(|g| called1.contains(g)) || paired1.iter().any(|g| called2.contains(g));
            if captured || !(kind == Prim::Sumbuild || shares_a_call) {
                continue;
            }
            // What B2 reads must be in scope at x1's let: the lets in
            // between that it needs move above it.
            let Some(up) = lets_to_move(b.body, &mut cache, &lets[k1..=k2], &free2) else { continue };
            let (node1, node2) = if up.iter().any(|&u| u) { reorder(b, &lets[k1..=k2], &up) } else { (*node1, *node2) };
            let pairs_first = !paired2.is_empty() && paired1.is_empty();
            fuse(b, kind, n1, pairs_first, (node1, x1, &i1, body1), (node2, x2, &i2, body2));
            return true;
        }
    }
    false
}

/// For the lets `segment`, from the first loop's to the second's, whose
/// loop reads `free2`: the lets in between (by position in the segment)
/// that the second loop needs, directly or through others, to move above
/// the first one (none has an effect: the scan stops at one). None if one
/// of them reads the first loop's variable, or if moving them could change
/// what a name means: the names bound in the segment must differ, and no
/// let may read a name that a moved let after it binds (it meant an outer
/// one).
fn lets_to_move(body: &Body, cache: &mut Cache, segment: &[(ExprId, Pat, ExprId)], free2: &[Var]) -> Option<Vec<bool>> {
    let last = segment.len() - 1;
    let mut needed: FxHashSet<Var> = free2.iter().cloned().collect();
    let mut up = vec![false; segment.len()];
    for k in (1..last).rev() {
        let (_, p, r) = &segment[k];
        if p.vars().iter().any(|v| needed.contains(v)) {
            up[k] = true;
            needed.extend(cache.free_vars(body, *r).iter().cloned());
        }
    }
    if segment[0].1.vars().iter().any(|v| needed.contains(v)) {
        return None;
    }
    if !up.contains(&true) {
        return Some(up);
    }
    let mut names = FxHashSet::default();
    if segment.iter().flat_map(|(_, p, _)| p.vars()).any(|v| !names.insert(v.clone())) {
        return None;
    }
    for (j, (_, _, r)) in segment[..last].iter().enumerate().filter(|(j, _)| !up[*j]) {
        let reads = cache.free_vars(body, *r);
        let later_moved = (j + 1..last).filter(|&m| up[m]).flat_map(|m| segment[m].1.vars());
        if later_moved.into_iter().any(|v| reads.contains(v)) {
            return None;
        }
    }
    Some(up)
}

/// Rebuilds the lets `segment` (from the first loop's let to the second's)
/// with those marked `up` first, in their order; the segment's first node
/// keeps its place in the chain. Returns the new nodes of the two loops'
/// lets.
fn reorder(b: &mut Builder, segment: &[(ExprId, Pat, ExprId)], up: &[bool]) -> (ExprId, ExprId) {
    let last = segment.len() - 1;
    let ty = b.ty(segment[0].0);
    let link = |b: &mut Builder, (p, r): (&Pat, ExprId), next: ExprId| {
        b.body.alloc_typed(Expr::Let(p.clone(), r, next), ty.clone())
    };
    let Expr::Let(_, _, next2) = b.body.exprs[segment[last].0].clone() else { unreachable!("a let") };
    let new2 = link(b, (&segment[last].1, segment[last].2), next2);
    let mut tail = new2;
    for k in (1..last).rev().filter(|&k| !up[k]) {
        tail = link(b, (&segment[k].1, segment[k].2), tail);
    }
    let new1 = link(b, (&segment[0].1, segment[0].2), tail);
    tail = new1;
    let moved: Vec<usize> = (1..last).filter(|&k| up[k]).collect();
    for &k in moved[1..].iter().rev() {
        tail = link(b, (&segment[k].1, segment[k].2), tail);
    }
    let (_, p, r) = &segment[moved[0]];
    b.body.exprs[segment[0].0] = Expr::Let(p.clone(), *r, tail);
    (new1, new2)
}

/// Fuses the loops (`kind`, of size `n`, or over the vector `n` for
/// folds) of the lets `node1` and `node2` (see the module), the second
/// body first if `second_first`.
fn fuse(
    b: &mut Builder,
    kind: Prim,
    n: ExprId,
    second_first: bool,
    (node1, x1, i1, body1): (ExprId, &Var, &Var, ExprId),
    (node2, x2, i2, body2): (ExprId, &Var, &Var, ExprId),
) {
    if kind == Prim::Fold {
        return fuse_folds(b, n, second_first, (node1, x1, i1, body1), (node2, x2, i2, body2));
    }
    let fused_body = both(b, second_first, body1, body2);
    let fused_body = if i2 == i1 {
        fused_body
    } else {
        let i = b.var(i1, Type::Integer);
        b.let_(i2, i, fused_body)
    };
    let lam = b.lam(i1, Type::Integer, fused_body);
    let size = b.copy(n);
    let fused = b.prim(kind, vec![size, lam]);
    let fused = if kind == Prim::Build { b.prim(Prim::Unzip, vec![fused]) } else { fused };
    bind_parts(b, fused, (node1, x1), (node2, x2));
}

/// Fuses the folds over the vector `v` of the lets `node1` and `node2`
/// (see the module), the second body first if `second_first`.
fn fuse_folds(
    b: &mut Builder,
    v: ExprId,
    second_first: bool,
    (node1, x1, t1, body1): (ExprId, &Var, &Var, ExprId),
    (node2, x2, t2, body2): (ExprId, &Var, &Var, ExprId),
) {
    // The initial accumulator and the step's parameter type.
    let parts = |b: &Builder, node: ExprId| {
        let Expr::Let(_, r, _) = b.body.exprs[node] else { unreachable!("a let") };
        let Some(&[lam, a, _]) = ksc_ir::builder::call_of(b.body, r, Prim::Fold).as_deref() else {
            unreachable!("a fold")
        };
        let Expr::Lam(_, tty, _) = b.body.exprs[lam].clone() else { unreachable!("a lambda") };
        (a, tty)
    };
    let ((a1, tty1), (a2, tty2)) = (parts(b, node1), parts(b, node2));
    let (Type::Tuple(ab1), Type::Tuple(ab2)) = (tty1.clone(), tty2.clone()) else { unreachable!("steps over pairs") };
    let accs_ty = Type::Tuple(vec![ab1[0].clone(), ab2[0].clone()]);
    let w_ty = Type::Tuple(vec![accs_ty, ab1[1].clone()]);
    let w = b.fresh_name("w");
    // let t = (get$k$2 (get$1$2 w), get$2$2 w) in B
    let step = |b: &mut Builder, k: u32, t: &Var, body: ExprId| {
        let tv = b.step_param(&w, &w_ty, k, 2);
        b.let_(t, tv, body)
    };
    let (s1, s2) = (step(b, 1, t1, body1), step(b, 2, t2, body2));
    let fused_body = both(b, second_first, s1, s2);
    let lam = b.lam(&w, w_ty, fused_body);
    let (a1, a2, v) = (b.copy(a1), b.copy(a2), b.copy(v));
    let init = b.tuple(vec![a1, a2]);
    let fused = b.prim(Prim::Fold, vec![lam, init, v]);
    bind_parts(b, fused, (node1, x1), (node2, x2));
}

/// The pair of the values of `body1` and `body2`, each bound to a fresh
/// variable, the second first if `second_first`.
fn both(b: &mut Builder, second_first: bool, body1: ExprId, body2: ExprId) -> ExprId {
    let (t1, t2) = (b.ty(body1), b.ty(body2));
    let (y1, y2) = (b.fresh_name("part"), b.fresh_name("part"));
    let (v1, v2) = (b.var(&y1, t1), b.var(&y2, t2));
    let pair = b.tuple(vec![v1, v2]);
    if second_first {
        let inner = b.let_(&y1, body1, pair);
        b.let_(&y2, body2, inner)
    } else {
        let inner = b.let_(&y2, body2, pair);
        b.let_(&y1, body1, inner)
    }
}

/// Replaces the lets `node1` of `x1` and `node2` of `x2` by `let s = fused,
/// x1 = get$1$2 s` and `let x2 = get$2$2 s`.
fn bind_parts(b: &mut Builder, fused: ExprId, (node1, x1): (ExprId, &Var), (node2, x2): (ExprId, &Var)) {
    let Expr::Let(_, _, next1) = b.body.exprs[node1].clone() else { unreachable!("a let") };
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

/// Merges the pairs of `if`s on one condition in a chain of lets of the
/// A-normal-form tree at `root`; returns how many it merged. For `let x1
/// = if c A1 B1` and a later `let x2 = if c A2 B2` of the same chain (`c`
/// the same expression, nothing it reads bound in between, nothing with an
/// effect from the first to the second, the lets in between that the
/// second reads moved above the first as for loops):
///
/// ```text
/// let s  = if c (let (x1 A1) (y A2) (tuple x1 y)) (let (x1 B1) (y B2) (tuple x1 y))
///     x1 = get$1$2 s
/// ..
/// let x2 = get$2$2 s
/// ```
///
/// Reverse mode makes this pattern at every `if` whose value the reverse
/// pass needs: the primal's `if`, then the reverse pass's `if` on the same
/// test, whose branches recompute their primal's values. Merged, CSE reads
/// those values from the primal's branch (`reduce`'s blocks, folded once
/// instead of twice in its gradient). The branches run in the order they
/// ran, so the results and any failure are the same.
pub fn merge_ifs(b: &mut Builder, globals: &Globals, root: ExprId) -> usize {
    // Each merge leaves one `if` fewer, so this ends.
    let mut merged = 0;
    while chain_heads(b.body, root).into_iter().any(|head| merge_in_chain(b, globals, head)) {
        merged += 1;
    }
    merged
}

/// Merges one pair of `if`s of the chain at `head`; whether there was one.
fn merge_in_chain(b: &mut Builder, globals: &Globals, head: ExprId) -> bool {
    let (lets, _) = chain(b.body, head);
    let mut cache = Cache::new();
    for (k1, (_, p1, r1)) in lets.iter().enumerate() {
        let (Pat::Var(x1), Expr::If(c1, ..)) = (p1, &b.body.exprs[*r1]) else { continue };
        if cache.has_effect(b.body, globals, *r1) {
            continue;
        }
        let c1 = *c1;
        let reads = cache.free_vars(b.body, c1);
        for (k2, (_, p2, r2)) in lets.iter().enumerate().skip(k1 + 1) {
            if cache.has_effect(b.body, globals, *r2) {
                break;
            }
            if p2.vars().iter().any(|v| reads.contains(v)) {
                break;
            }
            let (Pat::Var(x2), Expr::If(c2, ..)) = (p2, &b.body.exprs[*r2]) else { continue };
            if !ksc_ir::term::alpha_eq(b.body, c1, b.body, *c2) {
                continue;
            }
            // The second `if` sees x1 in its branches; the lets in between
            // that it reads move above the first.
            let free2: Vec<Var> = cache.free_vars(b.body, *r2).iter().filter(|v| *v != x1).cloned().collect();
            let Some(up) = lets_to_move(b.body, &mut cache, &lets[k1..=k2], &free2) else { continue };
            let (node1, node2) =
                if up.iter().any(|&u| u) { reorder(b, &lets[k1..=k2], &up) } else { (lets[k1].0, lets[k2].0) };
            merge(b, (node1, x1), (node2, x2));
            return true;
        }
    }
    false
}

/// Merges the `if`s of the lets `node1` of `x1` and `node2` of `x2` (see
/// [`merge_ifs`]).
fn merge(b: &mut Builder, (node1, x1): (ExprId, &Var), (node2, x2): (ExprId, &Var)) {
    let rhs = |b: &Builder, node: ExprId| match b.body.exprs[node] {
        Expr::Let(_, r, _) => match b.body.exprs[r] {
            Expr::If(c, t, f) => (c, t, f),
            _ => unreachable!("an if"),
        },
        _ => unreachable!("a let"),
    };
    let ((c, t1, f1), (_, t2, f2)) = (rhs(b, node1), rhs(b, node2));
    let branch = |b: &mut Builder, first: ExprId, second: ExprId| {
        let (ty1, ty2) = (b.ty(first), b.ty(second));
        let y = b.fresh_name("part");
        let (v1, v2) = (b.var(x1, ty1), b.var(&y, ty2));
        let pair = b.tuple(vec![v1, v2]);
        let inner = b.let_(&y, second, pair);
        b.let_(x1, first, inner)
    };
    let (t, f) = (branch(b, t1, t2), branch(b, f1, f2));
    let merged = b.if_(c, t, f);
    bind_parts(b, merged, (node1, x1), (node2, x2));
}
