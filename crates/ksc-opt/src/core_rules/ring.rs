//! Rules of dF~ (seed 000, section 4.1) beyond zeros and ones: a Float
//! minus itself cancels (`x - x`, `x + -x`, `x + -1 x`), a common factor
//! comes out of a sum (`y dx + z dx`), a condition tested again inside a
//! branch of its own test is known there, and a sum over a one-hot term is
//! that term (the iteration rule 7e).
//!
//! Floats are assumed finite, as where a zero annihilates (module docs of
//! `core_rules`): `x - x` is 0 for finite `x` only. Distributivity is the
//! one Core rule that may change rounding ([`super::ROUNDING`]): `(y + z)
//! dx` and `y dx + z dx` differ in their last bits. Both backends run the
//! rewritten code, so they still agree; a program that needs the bits of
//! the expression as written leaves the rule out with `(except core
//! distribute)` in its schedule (docs/strategies.md).

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, is_zero};
use ksc_ir::{Builtin, Callee, Expr, ExprId, FunName, Pat, Prim, Type};

use super::instances::{call, ff, vf, with_var, G};
use super::{call_parts, copy_atom, float_lit, lam_parts, let_, prim_args, share, CoreRule, Head, IF, RING};
use crate::rule::Ctx;

pub(super) const RING_CANCEL: CoreRule = CoreRule {
    name: "ring-cancel",
    statement: "sub x x', add x (neg x'), add x (mul -1.0 x') and their mirror images \
        ⇒ 0.0 when x and x' are alpha-equal Floats without an effect (x finite)",
    group: RING,
    head: Head::Fun,
    rewrite: ring_cancel,
    instance: ring_cancel_instance,
};

/// Is `f` the built-in `b` (not a definition of the program's that shadows it)?
fn is_builtin(ctx: &Ctx, f: &FunName, b: Builtin) -> bool {
    Builtin::resolve(f) == Some(b) && ctx.globals.is_builtin(f)
}

/// The two arguments of a call of the built-in `b` at `e` (and whether
/// they are written as a tuple).
fn builtin_args(ctx: &Ctx, e: ExprId, b: Builtin) -> Option<(ExprId, ExprId, bool)> {
    let (Callee::Fun(f), comps, tupled) = call_parts(ctx, e)? else { return None };
    match comps[..] {
        [p, q] if is_builtin(ctx, &f, b) => Some((p, q, tupled)),
        _ => None,
    }
}

/// `x` if `e` is `neg x`, `mul -1.0 x` or `mul x -1.0` (built-ins on Floats).
fn negated(ctx: &Ctx, e: ExprId) -> Option<ExprId> {
    let (Callee::Fun(f), comps, _) = call_parts(ctx, e)? else { return None };
    match &comps[..] {
        [x] if is_builtin(ctx, &f, Builtin::FNeg) => Some(*x),
        [a, b] if is_builtin(ctx, &f, Builtin::FMul) => {
            if float_lit(ctx, *a) == Some(-1.0) {
                Some(*b)
            } else if float_lit(ctx, *b) == Some(-1.0) {
                Some(*a)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `sub x x ⇒ 0.0`, `add x (neg x) ⇒ 0.0`, ... (see [`RING_CANCEL`]).
fn ring_cancel(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Callee::Fun(f), comps, _) = call_parts(ctx, e)? else { return None };
    let [a, b] = comps[..] else { return None };
    let (x, y) = if is_builtin(ctx, &f, Builtin::FSub) {
        (a, b)
    } else if is_builtin(ctx, &f, Builtin::FAdd) {
        match (negated(ctx, b), negated(ctx, a)) {
            (Some(nb), _) => (a, nb),
            (None, Some(na)) => (na, b),
            (None, None) => return None,
        }
    } else {
        return None;
    };
    (ctx.pure(x) && ctx.pure(y) && ctx.alpha_eq(x, y)).then(|| ctx.b.float(0.0))
}

fn ring_cancel_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // x - x (or x + -x, x + -1 x, mirrored), added to a term so that the
    // zero meets other arithmetic.
    let x = g.expr(b, &Type::Float, 2);
    let x2 = term::deep_copy(b, x);
    let cancelled = match g.rng.below(5) {
        0 => call(b, "sub", ff(), Type::Float, vec![x, x2]),
        1 => {
            let n = call(b, "neg", Type::Float, Type::Float, vec![x2]);
            call(b, "add", ff(), Type::Float, vec![x, n])
        }
        2 => {
            let n = call(b, "neg", Type::Float, Type::Float, vec![x2]);
            call(b, "add", ff(), Type::Float, vec![n, x])
        }
        3 => {
            let m1 = b.float(-1.0);
            let n = call(b, "mul", ff(), Type::Float, vec![m1, x2]);
            call(b, "add", ff(), Type::Float, vec![x, n])
        }
        _ => {
            let m1 = b.float(-1.0);
            let n = call(b, "mul", ff(), Type::Float, vec![x2, m1]);
            call(b, "add", ff(), Type::Float, vec![n, x])
        }
    };
    let other = g.expr(b, &Type::Float, 1);
    call(b, "mul", ff(), Type::Float, vec![cancelled, other])
}

pub(super) const DISTRIBUTE: CoreRule = CoreRule {
    name: "distribute",
    statement: "ts_add (ts_scale y d) (ts_scale z d') ⇒ ts_scale (add y z) d, add (mul y x) (mul z x') \
        ⇒ mul (add y z) x and add (mul x y) (mul x' z) ⇒ mul x (add y z), when d and d' (x and x') are \
        alpha-equal, and y, z and they have no effect (it may change rounding)",
    group: RING,
    head: Head::AnyCall,
    rewrite: distribute,
    instance: distribute_instance,
};

/// `y d + z d ⇒ (y + z) d` (see [`DISTRIBUTE`]).
fn distribute(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (callee, comps, _) = call_parts(ctx, e)?;
    let [a, b] = comps[..] else { return None };
    // The two products' parts: (factor, common) of each, and how to
    // rebuild the product of the summed factors.
    let scaled = |ctx: &Ctx, x: ExprId| prim_args(ctx, x, Prim::TsScale).map(|v| (v[0], v[1]));
    let float_mul = |ctx: &Ctx, x: ExprId| builtin_args(ctx, x, Builtin::FMul).map(|(p, q, _)| (p, q));
    let pure_same = |ctx: &mut Ctx, x: ExprId, y: ExprId| ctx.pure(x) && ctx.pure(y) && ctx.alpha_eq(x, y);
    let sum_of = |ctx: &mut Ctx, y: ExprId, z: ExprId| ctx.b.call(Builtin::FAdd.name(), vec![y, z], Type::Float);
    match &callee {
        Callee::Prim(Prim::TsAdd) => {
            let ((y, d), (z, d2)) = (scaled(ctx, a)?, scaled(ctx, b)?);
            if !(ctx.pure(y) && ctx.pure(z) && pure_same(ctx, d, d2)) || ctx.ty(y) != Type::Float {
                return None;
            }
            let k = sum_of(ctx, y, z);
            ctx.prim(Prim::TsScale, vec![k, d])
        }
        Callee::Fun(f) if is_builtin(ctx, f, Builtin::FAdd) => {
            let ((p, q), (r, s)) = (float_mul(ctx, a)?, float_mul(ctx, b)?);
            let f = Builtin::FMul.name();
            if ctx.pure(p) && ctx.pure(r) && pure_same(ctx, q, s) {
                let k = sum_of(ctx, p, r);
                Some(ctx.b.call(f, vec![k, q], Type::Float))
            } else if ctx.pure(q) && ctx.pure(s) && pure_same(ctx, p, r) {
                let k = sum_of(ctx, q, s);
                Some(ctx.b.call(f, vec![p, k], Type::Float))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn distribute_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // y d + z d over Floats (the common factor on either side) or a
    // tangent vector, sometimes with factors that differ (no rewrite).
    let common = |g: &mut G, b: &mut Builder, t: &Type| {
        let d = g.expr(b, t, 2);
        let d2 = if g.rng.chance(85) { term::deep_copy(b, d) } else { g.expr(b, t, 1) };
        (d, d2)
    };
    let (y, z) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
    if g.rng.chance(50) {
        let vt = Type::vec(Type::Float);
        let (d, d2) = common(g, b, &vt);
        let l = b.prim(Prim::TsScale, vec![y, d]);
        let r = b.prim(Prim::TsScale, vec![z, d2]);
        let s = b.prim(Prim::TsAdd, vec![l, r]);
        b.prim(Prim::Sum, vec![s])
    } else {
        let (x, x2) = common(g, b, &Type::Float);
        let left = g.rng.chance(50);
        let prod = |b: &mut Builder, k, x| {
            let args = if left { vec![x, k] } else { vec![k, x] };
            call(b, "mul", ff(), Type::Float, args)
        };
        let (l, r) = (prod(b, y, x), prod(b, z, x2));
        call(b, "add", ff(), Type::Float, vec![l, r])
    }
}

pub(super) const MUL_IF_ZERO: CoreRule = CoreRule {
    name: "mul-if-zero",
    statement: "mul (if c a Z) y ⇒ if c (mul a y) Z and mul y (if c a Z) ⇒ if c (mul y a) Z for Floats and a \
        known zero Z, when y has no effect (y finite)",
    group: RING,
    head: Head::Fun,
    rewrite: mul_if_zero,
    instance: mul_if_zero_instance,
};

/// A product with an indicator is the product where the indicator holds
/// (see [`MUL_IF_ZERO`]): forward mode over one-hot directions multiplies
/// by `if (eq i j) 1.0 0.0`, which the iteration rule then sums away.
fn mul_if_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, q, tupled) = builtin_args(ctx, e, Builtin::FMul)?;
    let (c, parts, z) = split_indicator(ctx, p, q)?;
    let product = term::rebuild_call(ctx.b, e, parts, tupled);
    Some(ctx.alloc(Expr::If(c, product, z), Type::Float))
}

/// Of two operands `p` and `q`, one an indicator `if c a Z` (Z a known
/// zero) and the other without effect: c, the operands with a for the
/// indicator, and Z.
fn split_indicator(ctx: &mut Ctx, p: ExprId, q: ExprId) -> Option<(ExprId, Vec<ExprId>, ExprId)> {
    let indicator = |x: ExprId| match ctx.expr(x) {
        Expr::If(c, a, z) if is_zero(ctx.b.body, *z) => Some((*c, *a, *z)),
        _ => None,
    };
    let (k, (c, a, z)) = match (indicator(p), indicator(q)) {
        (Some(i), _) => (0, i),
        (None, Some(i)) => (1, i),
        (None, None) => return None,
    };
    let y = if k == 0 { q } else { p };
    if !ctx.pure(y) || !ctx.pure(z) {
        return None;
    }
    let mut parts = vec![p, q];
    parts[k] = a;
    Some((c, parts, z))
}

fn mul_if_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let args = indicator_and_float(g, b);
    call(b, "mul", ff(), Type::Float, args)
}

/// `if c a 0.0` and a Float, in either order.
fn indicator_and_float(g: &mut G, b: &mut Builder) -> Vec<ExprId> {
    let c = g.expr(b, &Type::Bool, 2);
    let a = g.expr(b, &Type::Float, 2);
    let z = b.float(0.0);
    let ind = b.body.alloc_typed(Expr::If(c, a, z), Type::Float);
    let y = g.expr(b, &Type::Float, 2);
    if g.rng.chance(50) {
        vec![ind, y]
    } else {
        vec![y, ind]
    }
}

pub(super) const MUL_ZERO: CoreRule = CoreRule {
    name: "mul-zero",
    statement: "mul 0.0 y ⇒ 0.0 and mul y 0.0 ⇒ 0.0 for Floats, when y has no effect (y finite)",
    group: RING,
    head: Head::Fun,
    rewrite: mul_zero,
    instance: mul_zero_instance,
};

/// A zero annihilates a Float product (see [`MUL_ZERO`]), as it does a
/// `ts_scale`: what `if-float-arg` leaves of an indicator's zero branch,
/// so that it and `mul-if-zero` reach one normal form.
fn mul_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, q, _) = builtin_args(ctx, e, Builtin::FMul)?;
    let (z, y) = match (float_lit(ctx, p), float_lit(ctx, q)) {
        (Some(0.0), _) => (p, q),
        (_, Some(0.0)) => (q, p),
        _ => return None,
    };
    // The product of 0.0 and a negative y is -0.0, numerically the zero
    // written (as `ts_scale 0.0 y`'s rule has it).
    ctx.pure(y).then_some(z)
}

fn mul_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let z = b.float(0.0);
    let y = g.expr(b, &Type::Float, 2);
    let args = if g.rng.chance(50) { vec![z, y] } else { vec![y, z] };
    let m = call(b, "mul", ff(), Type::Float, args);
    let other = g.expr(b, &Type::Float, 1);
    call(b, "add", ff(), Type::Float, vec![m, other])
}

pub(super) const ADD_IF_SAME: CoreRule = CoreRule {
    name: "add-if-same",
    statement: "add (if c a b) (if c' a' b') ⇒ if c (add a a') (add b b') (Float add or ts_add) when c and c' \
        are alpha-equal and have no effect",
    group: IF,
    head: Head::AnyCall,
    rewrite: add_if_same,
    instance: add_if_same_instance,
};

/// Two branches on the same test added are one branch on it (see
/// [`ADD_IF_SAME`]): each side's work is still done once.
fn add_if_same(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (callee, comps, tupled) = call_parts(ctx, e)?;
    let adds = match &callee {
        Callee::Prim(Prim::TsAdd) => true,
        Callee::Fun(f) => is_builtin(ctx, f, Builtin::FAdd),
        _ => false,
    };
    let [p, q] = comps[..] else { return None };
    let (Expr::If(c, a, b), Expr::If(c2, a2, b2)) = (ctx.expr(p).clone(), ctx.expr(q).clone()) else { return None };
    if !adds || !ctx.pure(c) || !ctx.alpha_eq(c, c2) {
        return None;
    }
    let t = term::rebuild_call(ctx.b, e, vec![a, a2], tupled);
    let f = term::rebuild_call(ctx.b, e, vec![b, b2], tupled);
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::If(c, t, f), ty))
}

fn add_if_same_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.expr(b, &Type::Bool, 2);
    let side = |g: &mut G, b: &mut Builder, c: ExprId| {
        let (x, y) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
        b.body.alloc_typed(Expr::If(c, x, y), Type::Float)
    };
    let l = side(g, b, c);
    let c2 = if g.rng.chance(85) { term::deep_copy(b, c) } else { g.expr(b, &Type::Bool, 2) };
    let r = side(g, b, c2);
    call(b, "add", ff(), Type::Float, vec![l, r])
}

pub(super) const IF_KNOWN_COND: CoreRule = CoreRule {
    name: "if-known-cond",
    statement: "if c (if c' a b) e ⇒ if c a e and if c t (if c' a b) ⇒ if c t b when c and c' \
        are alpha-equal and have no effect",
    group: IF,
    head: Head::If,
    rewrite: if_known_cond,
    instance: if_known_cond_instance,
};

/// A branch that tests the condition of the `if` it is a branch of again
/// takes the side the outer test chose (see [`IF_KNOWN_COND`]).
fn if_known_cond(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, t, f) = ctx.expr(e).clone() else { return None };
    if !ctx.pure(c) {
        return None;
    }
    let inner = |ctx: &Ctx, branch: ExprId, then: bool| match ctx.expr(branch) {
        Expr::If(c2, a, b) if ctx.alpha_eq(c, *c2) => Some(if then { *a } else { *b }),
        _ => None,
    };
    let (t2, f2) = (inner(ctx, t, true), inner(ctx, f, false));
    if t2.is_none() && f2.is_none() {
        return None;
    }
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::If(c, t2.unwrap_or(t), f2.unwrap_or(f)), ty))
}

fn if_known_cond_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.expr(b, &Type::Bool, 2);
    let branch = |g: &mut G, b: &mut Builder| {
        if g.rng.chance(70) {
            let c2 = term::deep_copy(b, c);
            let (x, y) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            b.body.alloc_typed(Expr::If(c2, x, y), Type::Float)
        } else {
            g.expr(b, &Type::Float, 2)
        }
    };
    let (t, f) = (branch(g, b), branch(g, b));
    b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
}

pub(super) const SUMBUILD_ONE_HOT: CoreRule = CoreRule {
    name: "sumbuild-one-hot",
    statement: "sumbuild n (lam j (if (eq i j) a Z)) ⇒ if (lt i n) (if (gte i 0) (let j = i in a) \
        Z) Z for a known zero Z and an i without an effect, neither mentioning j (also eq j i)",
    group: RING,
    head: Head::Prim(Prim::Sumbuild),
    rewrite: sumbuild_one_hot,
    instance: sumbuild_one_hot_instance,
};

/// dF~'s iteration rule (7e): a sum over a one-hot term is its one term
/// (see [`SUMBUILD_ONE_HOT`]). A forward-mode gradient over one-hot
/// directions sums each direction's products in such a loop: n terms each
/// for n directions, quadratic, and linear once the sums are gone.
fn sumbuild_one_hot(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Sumbuild)?[..] else { return None };
    let (j, jty, body) = lam_parts(ctx, f)?;
    if jty != Type::Integer {
        return None;
    }
    let Expr::If(c, a, z) = ctx.expr(body).clone() else { return None };
    let [p, q] = prim_args(ctx, c, Prim::Eq)?[..] else { return None };
    let is_j = |ctx: &Ctx, x: ExprId| matches!(ctx.expr(x), Expr::Var(v) if *v == j);
    let i = if is_j(ctx, q) {
        p
    } else if is_j(ctx, p) {
        q
    } else {
        return None;
    };
    if ctx.is_free(&j, i) || !ctx.pure(i) || !is_zero(ctx.b.body, z) || ctx.is_free(&j, z) || !ctx.pure(z) {
        return None;
    }
    Some(share(ctx, i, "i", |ctx, i| {
        let i2 = copy_atom(ctx, i);
        let one = let_(ctx, Pat::Var(j.clone()), i, a);
        in_range(ctx, i2, n, one, z)
    }))
}

/// `if (lt i n) (if (gte i 0) value z) z` for an atom i: `value` where i
/// is a position of a vector of n elements, else the zero `z`.
fn in_range(ctx: &mut Ctx, i: ExprId, n: ExprId, value: ExprId, z: ExprId) -> ExprId {
    let ty = ctx.ty(value);
    let i2 = copy_atom(ctx, i);
    let zero = ctx.b.integer(0);
    let lo = ctx.b.call(Builtin::IGte.name(), vec![i, zero], Type::Bool);
    let hi = ctx.b.call(Builtin::ILt.name(), vec![i2, n], Type::Bool);
    let z2 = term::deep_copy(ctx.b, z);
    let inner = ctx.alloc(Expr::If(lo, value, z), ty.clone());
    ctx.alloc(Expr::If(hi, inner, z2), ty)
}

fn sumbuild_one_hot_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // sumbuild n (lam j (if (eq i j) a 0.0)), i sometimes out of range, a
    // reading j and printing sometimes.
    let n = g.size(b, 1);
    let i = g.expr(b, &Type::Integer, 1);
    let j = g.name();
    let body = with_var(g, &j, Type::Integer, |g| {
        let jv = b.var(&j, Type::Integer);
        let (p, q) = if g.rng.chance(50) { (i, jv) } else { (jv, i) };
        let c = b.prim(Prim::Eq, vec![p, q]);
        let a = g.expr(b, &Type::Float, 2);
        let z = b.float(0.0);
        b.body.alloc_typed(Expr::If(c, a, z), Type::Float)
    });
    let lam = b.body.alloc_typed(Expr::Lam(j, Type::Integer, body), Type::lam(Type::Integer, Type::Float));
    b.prim(Prim::Sumbuild, vec![n, lam])
}

pub(super) const TS_DOT_DELTAVEC: CoreRule = CoreRule {
    name: "ts-dot-deltavec",
    statement: "ts_dot v (deltaVec n i a) and ts_dot (deltaVec n i a) v ⇒ if (lt i (size v)) (if (gte i 0) \
        (mul (index i v) a) 0.0) 0.0 for a Vec Float v and a Float a, when v, n, i and a have no effect",
    group: RING,
    head: Head::Prim(Prim::TsDot),
    rewrite: ts_dot_deltavec,
    instance: ts_dot_deltavec_instance,
};

/// A dot product with a one-hot vector is one product (see
/// [`TS_DOT_DELTAVEC`]): the forward derivative of a dot product, `[fwd f]`
/// of `dot x x` inlined into a loop over one-hot directions, takes the
/// direction so. Where `v` and the direction differ in size the product
/// failed and the rewrite does not (a rewrite may remove a failure); the
/// read of `v` is in range.
fn ts_dot_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, y] = prim_args(ctx, e, Prim::TsDot)?[..] else { return None };
    let (v, dv) = match (prim_args(ctx, x, Prim::DeltaVec), prim_args(ctx, y, Prim::DeltaVec)) {
        (_, Some(_)) => (x, y),
        (Some(_), None) => (y, x),
        (None, None) => return None,
    };
    let [n, i, a] = prim_args(ctx, dv, Prim::DeltaVec)?[..] else { return None };
    let builtins = [Builtin::FMul, Builtin::ILt, Builtin::IGte];
    if ctx.ty(v) != Type::vec(Type::Float)
        || ctx.ty(a) != Type::Float
        || ![v, n, i, a].into_iter().all(|z| ctx.pure(z))
        || !builtins.iter().all(|b| ctx.globals.is_builtin(&b.name()))
    {
        return None;
    }
    Some(share(ctx, v, "v", |ctx, v| {
        share(ctx, i, "i", |ctx, i| {
            let (v2, i2) = (copy_atom(ctx, v), copy_atom(ctx, i));
            let size = ctx.b.prim(Prim::Size, vec![v2]);
            let read = ctx.b.prim(Prim::Index, vec![i, v]);
            let product = ctx.b.call(Builtin::FMul.name(), vec![read, a], Type::Float);
            let z = ctx.b.float(0.0);
            in_range(ctx, i2, size, product, z)
        })
    }))
}

fn ts_dot_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let v = e in ts_dot v (deltaVec (size v) i a), or the mirror image,
    // i sometimes out of range; sometimes a direction of another size.
    let e = g.expr(b, &vf(), 2);
    let body = with_var(g, "v", vf(), |g| {
        let n = if g.rng.chance(80) {
            let vv = b.var("v", vf());
            b.prim(Prim::Size, vec![vv])
        } else {
            g.size(b, 1)
        };
        let i = g.expr(b, &Type::Integer, 1);
        let a = g.expr(b, &Type::Float, 2);
        let dv = b.prim(Prim::DeltaVec, vec![n, i, a]);
        let vv = b.var("v", vf());
        let args = if g.rng.chance(50) { vec![vv, dv] } else { vec![dv, vv] };
        b.prim(Prim::TsDot, args)
    });
    b.let_("v", e, body)
}

pub(super) const TANGENT_BASIS_ONE_HOT: CoreRule = CoreRule {
    name: "tangent-basis-one-hot",
    statement: "$tangentBasis x k ⇒ deltaVec (size x) k 1.0 for a Vec Float x, and ⇒ if (eq k 0) 1.0 0.0 for a \
        Float x, when x and k have no effect",
    group: RING,
    head: Head::Prim(Prim::TangentBasis),
    rewrite: tangent_basis_one_hot,
    instance: tangent_basis_one_hot_instance,
};

/// The k-th direction of a vector's (or a Float's) tangent space is a
/// one-hot (see [`TANGENT_BASIS_ONE_HOT`]): `[jac f]`'s columns are f's
/// forward derivative along these, which the one-hot rules then read
/// element by element (a position out of range is no direction: zeros, as
/// `deltaVec` out of range).
fn tangent_basis_one_hot(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, k] = prim_args(ctx, e, Prim::TangentBasis)?[..] else { return None };
    if !ctx.pure(x) || !ctx.pure(k) {
        return None;
    }
    match ctx.ty(x) {
        Type::Float => {
            let zero = ctx.b.integer(0);
            let c = ctx.prim(Prim::Eq, vec![k, zero])?;
            let (one, z) = (ctx.b.float(1.0), ctx.b.float(0.0));
            Some(ctx.alloc(Expr::If(c, one, z), Type::Float))
        }
        t if t == Type::vec(Type::Float) => {
            let n = ctx.b.prim(Prim::Size, vec![x]);
            let one = ctx.b.float(1.0);
            Some(ctx.b.prim(Prim::DeltaVec, vec![n, k, one]))
        }
        _ => None,
    }
}

fn tangent_basis_one_hot_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // $tangentBasis x k of a vector or a Float, k sometimes out of range;
    // read through a sum, so the instance is a Float.
    let k = g.expr(b, &Type::Integer, 1);
    if g.rng.chance(50) {
        let x = g.expr(b, &Type::Float, 1);
        b.prim(Prim::TangentBasis, vec![x, k])
    } else {
        let x = g.expr(b, &vf(), 2);
        let t = b.prim(Prim::TangentBasis, vec![x, k]);
        b.prim(Prim::Sum, vec![t])
    }
}

pub(super) const SCALE_IF_ZERO: CoreRule = CoreRule {
    name: "scale-if-zero",
    statement: "ts_scale (if c a Z) y ⇒ if c (ts_scale a y) Z and ts_scale y (if c a Z) ⇒ if c (ts_scale y a) Z \
        for Floats and a known zero Z, when y has no effect (y finite)",
    group: RING,
    head: Head::Prim(Prim::TsScale),
    rewrite: scale_if_zero,
    instance: scale_if_zero_instance,
};

/// `mul-if-zero` for the scaling of a Float tangent (see
/// [`SCALE_IF_ZERO`]): a forward derivative scales its direction, and
/// along `[jac f]`'s one-hot columns the direction is an indicator.
fn scale_if_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [p, q] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    if ctx.ty(e) != Type::Float || ctx.ty(p) != Type::Float {
        return None;
    }
    let (c, parts, z) = split_indicator(ctx, p, q)?;
    let scaled = ctx.b.prim(Prim::TsScale, parts);
    Some(ctx.alloc(Expr::If(c, scaled, z), Type::Float))
}

fn scale_if_zero_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let args = indicator_and_float(g, b);
    b.prim(Prim::TsScale, args)
}

pub(super) const TANGENT_BASIS_TUPLE: CoreRule = CoreRule {
    name: "tangent-basis-tuple",
    statement: "$tangentBasis x k ⇒ tuple ($tangentBasis (get$1$n x) k) ($tangentBasis (get$2$n x) (k - d1)) .. \
        for a tuple x of n components, d1, d2, .. the tangent dimensions of the components before, when x and k \
        have no effect",
    group: RING,
    head: Head::Prim(Prim::TangentBasis),
    rewrite: tangent_basis_tuple,
    instance: tangent_basis_tuple_instance,
};

/// The k-th direction of a tuple's tangent space is, component by
/// component, the k-th counted from the component's first (see
/// [`TANGENT_BASIS_TUPLE`]): the directions of `[jac f]` of a function of
/// several arguments, which `tangent-basis-one-hot` then reads component
/// by component.
fn tangent_basis_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, k] = prim_args(ctx, e, Prim::TangentBasis)?[..] else { return None };
    let Type::Tuple(ts) = ctx.ty(x) else { return None };
    if ts.is_empty() || !ctx.pure(x) || !ctx.pure(k) {
        return None;
    }
    let ty = ctx.ty(e);
    let n = u32::try_from(ts.len()).ok()?;
    Some(share(ctx, x, "x", |ctx, x| {
        share(ctx, k, "k", |ctx, k| {
            let mut parts = Vec::new();
            let mut offset: Option<ExprId> = None;
            for i in 0..n {
                let xi = copy_atom(ctx, x);
                let part = ctx.b.prim(Prim::Get { index: i + 1, arity: n }, vec![xi]);
                let ki = copy_atom(ctx, k);
                let at = match offset {
                    None => ki,
                    Some(o) => {
                        let o2 = term::deep_copy(ctx.b, o);
                        ctx.b.int_op("sub", ki, o2)
                    }
                };
                parts.push(ctx.b.prim(Prim::TangentBasis, vec![part, at]));
                if i + 1 < n {
                    let xi = copy_atom(ctx, x);
                    let part = ctx.b.prim(Prim::Get { index: i + 1, arity: n }, vec![xi]);
                    let dim = ctx.b.prim(Prim::TangentDim, vec![part]);
                    offset = Some(match offset {
                        None => dim,
                        Some(o) => ctx.b.int_op("add", o, dim),
                    });
                }
            }
            ctx.alloc(Expr::Tuple(parts), ty.clone())
        })
    }))
}

fn tangent_basis_tuple_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let t = $tangentBasis (tuple a v) k in add (get$1$2 t) (sum (get$2$2 t)),
    // k sometimes out of range.
    let a = g.expr(b, &Type::Float, 1);
    let v = g.expr(b, &vf(), 2);
    let x = b.tuple(vec![a, v]);
    let k = g.expr(b, &Type::Integer, 1);
    let basis = b.prim(Prim::TangentBasis, vec![x, k]);
    let tty = Type::Tuple(vec![Type::Float, vf()]);
    let t1 = b.var("ksc$t", tty.clone());
    let first = b.prim(Prim::Get { index: 1, arity: 2 }, vec![t1]);
    let t2 = b.var("ksc$t", tty);
    let second = b.prim(Prim::Get { index: 2, arity: 2 }, vec![t2]);
    let s = b.prim(Prim::Sum, vec![second]);
    let body = call(b, "add", ff(), Type::Float, vec![first, s]);
    b.let_("ksc$t", basis, body)
}
