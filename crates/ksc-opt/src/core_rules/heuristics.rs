//! The cost heuristics of the Core rules, kept apart from the identities:
//! the thresholds and cost predicates that decide whether a rewrite that
//! preserves meaning also pays (computing an element where it is read
//! instead of storing a vector, copying `let`s into loops, inlining a
//! function for its shape). Each says what it trades. Changing one changes
//! what the optimiser produces, not whether it is right: the property tests
//! (`tests/core_rules.rs`) check every rule wherever it fires.

use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, Prim, Type, Var};

use super::{lam_parts, prim_args};
use crate::rule::Ctx;

/// The most nodes the element of a `build` may have for `let-build` to
/// compute it where it is read instead of storing it (and the most nodes of
/// each `let` that `sumbuild-tuple` copies into every component's loop):
/// computing so few nodes again at each read costs less than writing the
/// vector and loading it back.
pub(super) const SMALL_ELEMENT: usize = 16;

/// The most reads of a vector whose small element `let-build` copies to
/// where it is read: a few recomputations of a small element cost less
/// than storing the vector and loading it back (the reverse pass of `sub`
/// of vectors reads its pairs of cotangents twice).
pub(super) const LET_BUILD_READS: usize = 3;

/// The most reads of the vector for which `let-build-lazy` copies the
/// element to where it is read: each read gets a copy of the element's code
/// (an expensive one, see [`expensive`]) and a term of the run-time test
/// that chooses between computing the elements read and building the
/// vector, so this bounds the code the rule adds.
pub(super) const LAZY_READS: usize = 4;

/// The most nodes of a [`trivial`] expression, which `get-index-let-build`
/// computes again where it is read instead of loading it from a vector of
/// tuples: a few reads and arithmetic cost less than the strided load (and
/// the vector of tuples may then die).
pub(super) const TRIVIAL_NODES: usize = 8;

/// The most `let`s that `sumbuild-tuple` copies into each component's
/// loop: each copy is computed once more per iteration, in exchange for a
/// one-hot (`deltaVec`) component added into its accumulator in place
/// instead of a sum of whole tuples in every iteration.
pub(super) const SPLIT_LETS: usize = 6;

/// The most nodes a function may have for `shape-inline` to inline it
/// under `shape`: the copy is code for the shape rules to take apart (time
/// and size while optimising), in exchange for the shape of the result
/// computed without running the function (`[jac f]` sizes its matrix so).
pub(super) const SHAPE_INLINE_NODES: usize = 2000;

/// Is the tree at `e` at most `cap` nodes, each of which `ok` accepts? (The
/// measure of the size thresholds above.)
pub(super) fn small_tree(ctx: &Ctx, e: ExprId, cap: usize, ok: impl Fn(ExprId) -> bool) -> bool {
    let mut stack = vec![e];
    let mut nodes = 0;
    while let Some(x) = stack.pop() {
        nodes += 1;
        if nodes > cap || !ok(x) {
            return false;
        }
        stack.extend(term::children(ctx.expr(x)));
    }
    true
}

/// Is the tree at `e` at most [`SMALL_ELEMENT`] nodes, without loops and
/// calls of functions that have a body? Then computing it again where it
/// is needed costs less than storing it.
pub(super) fn small_element(ctx: &Ctx, e: ExprId) -> bool {
    small_tree(ctx, e, SMALL_ELEMENT, |_| true) && !expensive(ctx, e)
}

/// Does `e` contain a loop or a call of a function with a body? Such a
/// term is real work to compute again: it is never [`small_element`], and
/// `let-build-lazy` copies it only behind a run-time test that fewer
/// elements are read than the vector holds.
pub(super) fn expensive(ctx: &Ctx, e: ExprId) -> bool {
    let body: &ksc_ir::Body = &*ctx.b.body;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Lam(..) => return true,
            Expr::Call(Callee::Fun(g), _) if ctx.globals.has_def(g) => return true,
            other => stack.extend(term::children(other)),
        }
    }
    false
}

/// Does `e` call a function other than scalar arithmetic (see
/// [`crate::share::costly`])? `let-build` then does not copy it under two
/// lambdas (nested loops), where it would be computed again in every run of
/// the outer one.
pub(super) fn costly_call(ctx: &Ctx, e: ExprId) -> bool {
    let body: &ksc_ir::Body = &*ctx.b.body;
    let mut stack = vec![e];
    while let Some(y) = stack.pop() {
        if matches!(body.exprs[y], Expr::Call(Callee::Fun(_), _)) && crate::share::costly(body, y) {
            return true;
        }
        stack.extend(term::children(&body.exprs[y]));
    }
    false
}

/// Is `e` at most [`TRIVIAL_NODES`] nodes of reads and arithmetic:
/// variables, literals, `index`, `get`, `size`, `ts_scale`/`ts_neg` and the
/// scalar `add`, `sub`, `mul`, `neg` (what is cheaper to compute again than
/// to load from a vector of tuples)?
pub(super) fn trivial(ctx: &Ctx, e: ExprId) -> bool {
    small_tree(ctx, e, TRIVIAL_NODES, |x| match ctx.expr(x) {
        Expr::Var(_) | Expr::Lit(_) | Expr::Tuple(_) => true,
        Expr::Call(Callee::Prim(Prim::Index | Prim::Get { .. } | Prim::Size | Prim::TsScale | Prim::TsNeg), _) => true,
        Expr::Call(Callee::Fun(f), _) => {
            f.derivs.is_empty()
                && matches!(f.base.as_str(), "add" | "sub" | "mul" | "neg")
                && matches!(ctx.ty(x), Type::Float | Type::Integer)
        }
        _ => false,
    })
}

/// Is `e` a linear map built from combinators over atoms? Rebuilding it
/// at each use costs a few combinator nodes and no arithmetic, and lets the
/// linear-map laws see the map where it is applied (`let-linear-map`).
pub(super) fn cheap_linear_map(ctx: &Ctx, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match ctx.expr(x) {
            Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => {}
            Expr::Tuple(es) => stack.extend(es),
            Expr::Call(Callee::Prim(p), a)
                if p.is_linear_map()
                    && !matches!(
                        p,
                        Prim::LmApply | Prim::LmApplyR | Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks
                    ) =>
            {
                stack.push(*a)
            }
            _ => return false,
        }
    }
    matches!(ctx.ty(e), Type::LM(..))
}

/// The most lambdas of `e` around a free occurrence of `x`: how many nested
/// loops would run a copy of `x`'s value put there (see [`costly_call`]).
/// The lambda of a `build` over k dimensions (a tuple of sizes) counts k:
/// it runs as often as k nested loops (`[jac f]`'s matrix, when its
/// columns are read where they are stored: `let-columns`).
pub(super) fn lambda_depth(ctx: &mut Ctx, x: &str, e: ExprId) -> usize {
    if let Some([m, f]) = prim_args(ctx, e, Prim::Build).as_deref() {
        if let (Type::Tuple(dims), Expr::Lam(v, _, b)) = (ctx.ty(*m), ctx.expr(*f).clone()) {
            let inner = if v != x && ctx.is_free(x, b) { dims.len() + lambda_depth(ctx, x, b) } else { 0 };
            return lambda_depth(ctx, x, *m).max(inner);
        }
    }
    match ctx.expr(e).clone() {
        Expr::Var(_) => 0,
        Expr::Lam(v, _, b) if v != x && ctx.is_free(x, b) => 1 + lambda_depth(ctx, x, b),
        Expr::Lam(..) => 0,
        Expr::Let(p, r, b) => {
            let inner = if p.vars().iter().any(|v| v == x) { 0 } else { lambda_depth(ctx, x, b) };
            lambda_depth(ctx, x, r).max(inner)
        }
        other => term::children(&other).into_iter().map(|c| lambda_depth(ctx, x, c)).max().unwrap_or(0),
    }
}

/// A read `index j x` found by [`lazy_reads`]: the sizes of the `build` /
/// `sumbuild` loops around it (outermost first), and whether `j` is the
/// innermost loop's index.
pub(super) struct Read {
    pub(super) loops: Vec<ExprId>,
    pub(super) by_loop_index: bool,
}

/// Collects, for every read `index j x` of the free `x` in `e`, the sizes of
/// the `build`/`sumbuild` loops around it (inside `e`); `loops` are those
/// around `e` (each with the position of its index in `bound`) and `bound`
/// the variables bound between the top and `e`.
/// False when `x` is used otherwise, or read under another lambda, under
/// more than two loops, or under a loop whose size is not an atom bound
/// outside the top: reads whose cost (the elements they ask for) the
/// vector rules can count, and test against the vector's size.
pub(super) fn lazy_reads(
    ctx: &mut Ctx,
    x: &str,
    e: ExprId,
    loops: &mut Vec<(ExprId, usize)>,
    bound: &mut Vec<Var>,
    reads: &mut Vec<Read>,
) -> bool {
    let is_x = |ctx: &Ctx, v: ExprId| matches!(ctx.expr(v), Expr::Var(y) if y == x);
    if let Some([i, v]) = prim_args(ctx, e, Prim::Index).as_deref() {
        if is_x(ctx, *v) {
            // By the innermost loop's index: the name bound at that loop's
            // position of `bound`, not bound again by a let since.
            let by_loop_index = loops.last().is_some_and(
                |&(_, at)| matches!(ctx.expr(*i), Expr::Var(j) if bound.iter().rposition(|v| v == j) == Some(at)),
            );
            reads.push(Read { loops: loops.iter().map(|&(m, _)| m).collect(), by_loop_index });
            return lazy_reads(ctx, x, *i, loops, bound, reads);
        }
    }
    if let Some([v]) = prim_args(ctx, e, Prim::Size).as_deref() {
        if is_x(ctx, *v) {
            return true;
        }
    }
    let loop_parts = prim_args(ctx, e, Prim::Build).or_else(|| prim_args(ctx, e, Prim::Sumbuild));
    if let Some(&[m, f]) = loop_parts.as_deref() {
        if let Some((j, _, lb)) = lam_parts(ctx, f) {
            if !lazy_reads(ctx, x, m, loops, bound, reads) {
                return false;
            }
            if j == x || !ctx.is_free(x, lb) {
                return true;
            }
            let outside = match ctx.expr(m) {
                Expr::Var(v) => !bound.contains(v),
                Expr::Lit(_) => true,
                _ => false,
            };
            if !outside || loops.len() == 2 {
                return false;
            }
            loops.push((m, bound.len()));
            bound.push(j);
            let ok = lazy_reads(ctx, x, lb, loops, bound, reads);
            bound.pop();
            loops.pop();
            return ok;
        }
    }
    match ctx.expr(e).clone() {
        Expr::Var(v) => v != x,
        Expr::Let(p, r, b) => {
            if !lazy_reads(ctx, x, r, loops, bound, reads) {
                return false;
            }
            let vars = p.vars();
            if vars.iter().any(|v| v == x) {
                return true;
            }
            let depth = bound.len();
            bound.extend(vars.iter().cloned());
            let ok = lazy_reads(ctx, x, b, loops, bound, reads);
            bound.truncate(depth);
            ok
        }
        Expr::Lam(v, _, b) => v == x || !ctx.is_free(x, b),
        other => term::children(&other).into_iter().all(|c| lazy_reads(ctx, x, c, loops, bound, reads)),
    }
}
