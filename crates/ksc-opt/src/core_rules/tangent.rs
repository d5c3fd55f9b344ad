//! Tangent arithmetic: `ts_add`, `ts_scale` and `ts_dot` with known zeros
//! and ones (floats assumed finite, as in the linear-map laws), `ts_add` of
//! tuples, and let-bound zeros copied to where they are added.

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, is_zero};
use ksc_ir::{Callee, Expr, ExprId, Pat, Prim, Type};
use ksc_linmap::witness::is_own_tangent;

use super::instances::{float_or_vec, let_bound_zero, vf, with_var, zero_of, G};
use super::{float_lit, let_parts, only_uses, prim_args, CoreRule, Head, TANGENT};
use crate::rule::Ctx;

pub(super) const LET_ZERO: CoreRule = CoreRule {
    name: "let-zero",
    statement: "let x = Z in b ⇒ b[x := Z] for a known zero Z (constVec sizes atoms) when b \
        uses x only as an operand of ts_add or the vector of index and size",
    group: TANGENT,
    head: Head::Let,
    rewrite: let_zero,
    instance: let_zero_instance,
};

/// `let x = Z in b ⇒ b[x := Z]` for a known zero `Z` whose sizes are atoms,
/// when `b` uses `x` only as an operand of `ts_add` (which the zero rules
/// then drop) or as the vector of `index` and `size`: uses where a zero
/// costs nothing, so copying it does not redo work.
fn let_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if !is_zero(ctx.b.body, r) || !zero_of_atoms(ctx.b.body, r) || !ctx.pure(r) || !only_uses(ctx, &x, b, true) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

/// Are the sizes of the `constVec`s of a known zero atoms?
fn zero_of_atoms(body: &ksc_ir::Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Tuple(es) => stack.extend(es),
            Expr::Call(Callee::Prim(Prim::ConstVec), arg) => match &body.exprs[*arg] {
                Expr::Tuple(es) if es.len() == 2 && term::is_atomic(body, es[0]) => stack.push(es[1]),
                _ => return false,
            },
            _ => {}
        }
    }
    true
}

fn let_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = 0 in ts_add e (ts_add x e'), the zero of a Float or a
    // vector of atom size; e and e' may use x otherwise.
    let t = float_or_vec(g);
    let z = if t == Type::Float {
        b.float(0.0)
    } else {
        let n = g.atom(b, &Type::Integer);
        let zero = b.float(0.0);
        b.prim(Prim::ConstVec, vec![n, zero])
    };
    let body = with_var(g, "x", t.clone(), |g| {
        let e1 = g.expr(b, &t, 2);
        let x = b.var("x", t.clone());
        let e2 = g.expr(b, &t, 1);
        let inner = b.prim(Prim::TsAdd, vec![x, e2]);
        b.prim(Prim::TsAdd, vec![e1, inner])
    });
    b.let_("x", z, body)
}

pub(super) const TS_ADD_TUPLE: CoreRule = CoreRule {
    name: "ts-add-tuple",
    statement: "ts_add (tuple a1 .. an) (tuple b1 .. bn) ⇒ tuple (ts_add a1 b1) .. (ts_add an \
        bn) when no component has an effect",
    group: TANGENT,
    head: Head::Prim(Prim::TsAdd),
    rewrite: ts_add_tuple,
    instance: ts_add_tuple_instance,
};

/// `ts_add (tuple a1 .. an) (tuple b1 .. bn) ⇒ tuple (ts_add a1 b1) .. (ts_add
/// an bn)` when no component has an effect.
fn ts_add_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, y] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    let (Expr::Tuple(xs), Expr::Tuple(ys)) = (ctx.b.expr(x).clone(), ctx.b.expr(y).clone()) else { return None };
    if xs.len() != ys.len() || xs.is_empty() || !xs.iter().chain(&ys).all(|&c| ctx.pure(c)) {
        return None;
    }
    let sums = xs.into_iter().zip(ys).map(|(a, b)| ctx.b.prim(Prim::TsAdd, vec![a, b])).collect();
    Some(ctx.b.tuple(sums))
}

fn ts_add_tuple_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (a1, a2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
    let (b1, b2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
    let x = b.tuple(vec![a1, a2]);
    let y = b.tuple(vec![b1, b2]);
    b.prim(Prim::TsAdd, vec![x, y])
}

pub(super) const TS_ADD_ZERO_RIGHT: CoreRule = CoreRule {
    name: "ts-add-zero-right",
    statement: "ts_add x 0 ⇒ x (0 a known zero, or a variable let-bound to one)",
    group: TANGENT,
    head: Head::Prim(Prim::TsAdd),
    rewrite: ts_add_zero_right,
    instance: ts_add_zero_right_instance,
};

/// `ts_add x 0 ⇒ x` for a known zero without effect.
fn ts_add_zero_right(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, z] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    known_zero(ctx, z).then_some(x)
}

fn ts_add_zero_right_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let t = float_or_vec(g);
    let x = g.expr(b, &t, 2);
    let z = zero_of(g, b, &t);
    let_bound_zero(g, b, z, |b, z| b.prim(Prim::TsAdd, vec![x, z]))
}

pub(super) const TS_ADD_ZERO_LEFT: CoreRule = CoreRule {
    name: "ts-add-zero-left",
    statement: "ts_add 0 y ⇒ y when y has the result's type (0 a known zero, or a variable \
        let-bound to one)",
    group: TANGENT,
    head: Head::Prim(Prim::TsAdd),
    rewrite: ts_add_zero_left,
    instance: ts_add_zero_left_instance,
};

/// `ts_add 0 y ⇒ y` for a known zero without effect, when `y` has the result's type.
fn ts_add_zero_left(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [z, y] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    (known_zero(ctx, z) && ctx.ty(y) == ctx.ty(e)).then_some(y)
}

fn ts_add_zero_left_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let t = float_or_vec(g);
    let x = g.expr(b, &t, 2);
    let z = zero_of(g, b, &t);
    let_bound_zero(g, b, z, |b, z| b.prim(Prim::TsAdd, vec![z, x]))
}

pub(super) const TS_SCALE_ONE: CoreRule = CoreRule {
    name: "ts-scale-one",
    statement: "ts_scale 1.0 x ⇒ x, and ts_scale k 1.0 ⇒ k for a Float k",
    group: TANGENT,
    head: Head::Prim(Prim::TsScale),
    rewrite: ts_scale_one,
    instance: ts_scale_one_instance,
};

/// `ts_scale 1.0 x ⇒ x`, and `ts_scale k 1.0 ⇒ k` for a Float `k` (what
/// a transposed step applied to a unit seed scales, reverse mode's
/// Theorem 3.7).
fn ts_scale_one(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, x] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    if float_lit(ctx, k) == Some(1.0) {
        return Some(x);
    }
    (float_lit(ctx, x)? == 1.0).then_some(k)
}

fn ts_scale_one_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let one = b.float(1.0);
    if g.rng.chance(50) {
        let k = g.expr(b, &Type::Float, 2);
        return b.prim(Prim::TsScale, vec![k, one]);
    }
    let t = float_or_vec(g);
    let x = g.expr(b, &t, 2);
    b.prim(Prim::TsScale, vec![one, x])
}

pub(super) const TS_SCALE_ZERO: CoreRule = CoreRule {
    name: "ts-scale-zero",
    statement: "ts_scale 0.0 y ⇒ the zero shaped like y, when y has no effect and is made of \
        Floats",
    group: TANGENT,
    head: Head::Prim(Prim::TsScale),
    rewrite: ts_scale_zero,
    instance: ts_scale_zero_instance,
};

/// `ts_scale 0.0 y ⇒ zero shaped like y` when `y` has no effect and is made of Floats.
fn ts_scale_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, y] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    if float_lit(ctx, k)? != 0.0 || !ctx.pure(y) || !is_own_tangent(&ctx.ty(y)) || is_zero(ctx.b.body, y) {
        return None;
    }
    Some(ctx.b.zero_tangent(y))
}

fn ts_scale_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let t = float_or_vec(g);
    let x = g.expr(b, &t, 2);
    let zero = b.float(0.0);
    b.prim(Prim::TsScale, vec![zero, x])
}

pub(super) const TS_SCALE_OF_ZERO: CoreRule = CoreRule {
    name: "ts-scale-of-zero",
    statement: "ts_scale k 0 ⇒ 0 when k has no effect",
    group: TANGENT,
    head: Head::Prim(Prim::TsScale),
    rewrite: ts_scale_of_zero,
    instance: ts_scale_of_zero_instance,
};

/// `ts_scale k 0 ⇒ 0` for a known zero, when `k` has no effect.
fn ts_scale_of_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, z] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    (is_zero(ctx.b.body, z) && ctx.pure(k)).then_some(z)
}

fn ts_scale_of_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let t = float_or_vec(g);
    let k = g.expr(b, &Type::Float, 2);
    let z = zero_of(g, b, &t);
    b.prim(Prim::TsScale, vec![k, z])
}

pub(super) const TS_DOT_ZERO: CoreRule = CoreRule {
    name: "ts-dot-zero",
    statement: "ts_dot 0 y ⇒ 0.0, ts_dot x 0 ⇒ 0.0 when the other operand has no effect",
    group: TANGENT,
    head: Head::Prim(Prim::TsDot),
    rewrite: ts_dot_zero,
    instance: ts_dot_zero_instance,
};

/// `ts_dot 0 y ⇒ 0.0` and `ts_dot x 0 ⇒ 0.0` for a known zero, when the other operand has no
/// effect.
fn ts_dot_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, y] = prim_args(ctx, e, Prim::TsDot)?[..] else { return None };
    let zero = (is_zero(ctx.b.body, x) || is_zero(ctx.b.body, y)) && ctx.pure(x) && ctx.pure(y);
    zero.then(|| ctx.b.float(0.0))
}

fn ts_dot_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let x = g.expr(b, &vf(), 2);
    let z = zero_of(g, b, &vf());
    let args = if g.rng.chance(50) { vec![x, z] } else { vec![z, x] };
    b.prim(Prim::TsDot, args)
}

// ---------------------------------------------------------------------------
// Helpers of this theme.

/// Is `z` a known zero without effect: written out, or a variable that a
/// `let` in scope binds to one? (Reverse mode binds the zero cotangents of
/// a loop's outer variables once and adds them in every iteration.)
fn known_zero(ctx: &mut Ctx, z: ExprId) -> bool {
    let bound = match ctx.b.expr(z) {
        Expr::Var(v) => ctx.scope.lookup(v).and_then(|(_, binding)| binding.value),
        _ => Some(z),
    };
    bound.is_some_and(|r| is_zero(ctx.b.body, r) && ctx.pure(r))
}

pub(super) const FLATTEN_VEC: CoreRule = CoreRule {
    name: "flatten-vec",
    statement: "$tangentFlatten v ⇒ v for a Vec Float v",
    group: TANGENT,
    head: Head::Prim(Prim::TangentFlatten),
    rewrite: flatten_vec,
    instance: flatten_vec_instance,
};

/// A vector of Floats is its own flattened tangent (see [`FLATTEN_VEC`]):
/// what `[jac f]`'s columns and rows are, for f from or to a vector.
fn flatten_vec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [v] = prim_args(ctx, e, Prim::TangentFlatten)?[..] else { return None };
    (ctx.ty(v) == vf()).then_some(v)
}

fn flatten_vec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let v = g.expr(b, &vf(), 2);
    let f = b.prim(Prim::TangentFlatten, vec![v]);
    b.prim(Prim::Sum, vec![f])
}
