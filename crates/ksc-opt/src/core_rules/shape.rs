//! Shapes (reference 5.6). `let`, `if` and `assert` around the argument of
//! `shape` float out with the floating rules; these push `shape` into the
//! rest, so the shape is computed without the values where it can be.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type};

use super::heuristics::SHAPE_INLINE_NODES;
use super::instances::{call, float_or_vec, vf, with_var, G};
use super::{lam, lam_parts, let_, prim_args, CoreRule, Head, SHAPE};
use crate::rule::Ctx;

pub(super) const SHAPE_TRIVIAL: CoreRule = CoreRule {
    name: "shape-trivial",
    statement: "shape e ⇒ () when e's type has a trivial shape and e has no effect",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_trivial,
    instance: shape_trivial_instance,
};

/// `shape e ⇒ ()` when `e`'s type has a trivial shape (scalars, tuples of
/// scalars) and `e` has no effect.
fn shape_trivial(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    if !ctx.ty(x).shape_is_trivial() || !ctx.pure(x) {
        return None;
    }
    Some(ctx.b.tuple(Vec::new()))
}

fn shape_trivial_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let x = if g.rng.chance(50) {
        g.expr(b, &Type::Float, 3)
    } else {
        let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Integer, 2));
        b.tuple(vec![p, q])
    };
    b.prim(Prim::Shape, vec![x])
}

pub(super) const SHAPE_TUPLE: CoreRule = CoreRule {
    name: "shape-tuple",
    statement: "shape (tuple e1 .. en) ⇒ tuple (shape e1) .. (shape en)",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_tuple,
    instance: shape_tuple_instance,
};

/// `shape (tuple e1 .. en) ⇒ tuple (shape e1) .. (shape en)`.
fn shape_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Tuple(es) = ctx.expr(x).clone() else { return None };
    if ctx.ty(x).shape_is_trivial() {
        return None;
    }
    let shapes = es.into_iter().map(|c| ctx.prim(Prim::Shape, vec![c])).collect::<Option<Vec<_>>>()?;
    Some(ctx.b.tuple(shapes))
}

fn shape_tuple_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let p = g.expr(b, &vf(), 2);
    let t = float_or_vec(g);
    let q = g.expr(b, &t, 2);
    let x = b.tuple(vec![p, q]);
    b.prim(Prim::Shape, vec![x])
}

pub(super) const SHAPE_BUILD: CoreRule = CoreRule {
    name: "shape-build",
    statement: "shape (build n (lam i e)) ⇒ n when e has a trivial shape and no effect, else \
        build n (lam i (shape e)); the same for constVec",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_build,
    instance: shape_build_instance,
};

/// `shape (build n (lam i e)) ⇒ n` when e's shape is trivial and e has no
/// effect; `⇒ build n (lam i (shape e))` otherwise. The same for `constVec`.
fn shape_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    if let Some([n, f]) = prim_args(ctx, x, Prim::Build).as_deref() {
        let (n, f) = (*n, *f);
        let (i, ity, body) = lam_parts(ctx, f)?;
        if ctx.ty(body).shape_is_trivial() {
            return ctx.pure(body).then_some(n);
        }
        let s = ctx.prim(Prim::Shape, vec![body])?;
        let l = lam(ctx, &i, &ity, s);
        return ctx.prim(Prim::Build, vec![n, l]);
    }
    let [n, v] = prim_args(ctx, x, Prim::ConstVec)?[..] else { return None };
    if ctx.ty(v).shape_is_trivial() {
        return ctx.pure(v).then_some(n);
    }
    let s = ctx.prim(Prim::Shape, vec![v])?;
    ctx.prim(Prim::ConstVec, vec![n, s])
}

fn shape_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // Elements of trivial shape (Float) or not (vectors); build or constVec.
    let n = g.size(b, 1);
    let t = float_or_vec(g);
    let v = if g.rng.chance(70) {
        g.build_with(b, n, |g, b| g.expr(b, &t, 2))
    } else {
        let x = g.expr(b, &t, 2);
        b.prim(Prim::ConstVec, vec![n, x])
    };
    b.prim(Prim::Shape, vec![v])
}

pub(super) const SHAPE_SUMBUILD: CoreRule = CoreRule {
    name: "shape-sumbuild",
    statement: "shape (sumbuild n (lam i e)) ⇒ let i = 0 in shape e when e has no effect",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_sumbuild,
    instance: shape_sumbuild_instance,
};

/// `shape (sumbuild n (lam i e)) ⇒ let i = 0 in shape e` when e has no
/// effect: every term of a sum that succeeds has the same shape.
fn shape_sumbuild(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let [_, f] = prim_args(ctx, x, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(body) {
        return None;
    }
    let zero = ctx.alloc(Expr::Lit(Lit::Integer(0)), Type::Integer);
    let s = ctx.prim(Prim::Shape, vec![body])?;
    Some(let_(ctx, Pat::Var(i), zero, s))
}

fn shape_sumbuild_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let i = g.name();
    let body = with_var(g, &i, Type::Integer, |g| g.expr(b, &vf(), 2));
    let lam = b.lam(&i, Type::Integer, body);
    let v = b.prim(Prim::Sumbuild, vec![n, lam]);
    b.prim(Prim::Shape, vec![v])
}

pub(super) const SHAPE_TANGENT: CoreRule = CoreRule {
    name: "shape-tangent",
    statement: "shape (ts_add a b) ⇒ shape a, shape (ts_scale k v) ⇒ shape v, shape (ts_neg \
        v) ⇒ shape v, when the dropped operand has no effect",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_tangent,
    instance: shape_tangent_instance,
};

/// `shape (ts_add a b) ⇒ shape a` when b has no effect; `shape (ts_scale k
/// v)`, `shape (ts_neg v) ⇒ shape v` (k without effect).
fn shape_tangent(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let (p, args) = ksc_ir::builder::prim_call(ctx.b.body, x)?;
    let (keep, drop) = match (p, &args[..]) {
        (Prim::TsAdd, [a, b]) => (*a, Some(*b)),
        (Prim::TsScale, [k, v]) => (*v, Some(*k)),
        (Prim::TsNeg, [v]) => (*v, None),
        _ => return None,
    };
    if ctx.ty(keep) != ctx.ty(x) || drop.is_some_and(|d| !ctx.pure(d)) {
        return None;
    }
    ctx.prim(Prim::Shape, vec![keep])
}

fn shape_tangent_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let x = match g.rng.below(3) {
        0 => {
            let (p, q) = (g.expr(b, &vf(), 2), g.expr(b, &vf(), 2));
            b.prim(Prim::TsAdd, vec![p, q])
        }
        1 => {
            let (k, v) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
            b.prim(Prim::TsScale, vec![k, v])
        }
        _ => {
            let v = g.expr(b, &vf(), 2);
            b.prim(Prim::TsNeg, vec![v])
        }
    };
    b.prim(Prim::Shape, vec![x])
}

pub(super) const SHAPE_CALL: CoreRule = CoreRule {
    name: "shape-call",
    statement: "shape (f a) ⇒ [shape f] a when the program defines [shape f] other than as \
        the shape of f",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_call,
    instance: shape_call_instance,
};

/// `shape (f a) ⇒ [shape f] a` when the program defines `[shape f]` (a
/// user-written shape function, or one a `gdef shape` derived), unless
/// that definition is itself the shape of a call of f.
fn shape_call(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Call(Callee::Fun(f), a) = ctx.expr(x).clone() else { return None };
    let name = f.derived(ksc_ir::Derivation::Shape);
    let def = ctx.globals.def(&name)?;
    if def.ret_ty != ctx.ty(e) || def.arg_ty() != ctx.ty(a) || shape_of_call_of(def, &f) {
        return None;
    }
    let ty = def.ret_ty.clone();
    Some(ctx.alloc(Expr::Call(Callee::Fun(name), a), ty))
}

/// Does `def` contain `shape (f ..)` (possibly through `$inline`)?
fn shape_of_call_of(def: &ksc_ir::Def, f: &FunName) -> bool {
    let calls_f = |e: ExprId| {
        let e = match &def.body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Inline), inner) => *inner,
            _ => e,
        };
        matches!(&def.body.exprs[e], Expr::Call(Callee::Fun(g), _) if g == f)
    };
    let mut stack = vec![def.root];
    while let Some(x) = stack.pop() {
        if let Expr::Call(Callee::Prim(Prim::Shape), a) = &def.body.exprs[x] {
            if calls_f(*a) {
                return true;
            }
        }
        stack.extend(term::children(&def.body.exprs[x]));
    }
    false
}

fn shape_call_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let v = g.expr(b, &vf(), 3);
    let c = call(b, "dbl", vf(), vf(), vec![v]);
    b.prim(Prim::Shape, vec![c])
}

pub(super) const SHAPE_INLINE: CoreRule = CoreRule {
    name: "shape-inline",
    statement: "shape (f a) ⇒ shape ($inline (f a)) when f has a body of at most 2000 nodes, \
        is not recursive, has no effect and no [shape f]",
    group: SHAPE,
    head: Head::Prim(Prim::Shape),
    rewrite: shape_inline,
    instance: shape_inline_instance,
};

/// `shape (f a) ⇒ shape ($inline (f a))` when f has a body of at most
/// [`SHAPE_INLINE_NODES`] nodes, is not recursive, prints nothing and has no
/// `[shape f]` (then `shape-call` applies): the shape rules then compute
/// the shape of f's result without its values where they can (`[jac f]`
/// sizes its matrix so, without running f).
fn shape_inline(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Call(Callee::Fun(f), _) = ctx.expr(x).clone() else { return None };
    if ctx.globals.def(&f.derived(ksc_ir::Derivation::Shape)).is_some() || ctx.globals.is_recursive(&f) || !ctx.pure(x)
    {
        return None;
    }
    ctx.globals.small_def(&f, SHAPE_INLINE_NODES, crate::Measure::Tree)?;
    let inlined = ctx.prim(Prim::Inline, vec![x])?;
    ctx.prim(Prim::Shape, vec![inlined])
}

fn shape_inline_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // The shape of a call of a function without a shape function:
    // a vector's size, or a vector of vectors' sizes.
    let v = g.expr(b, &vf(), 3);
    if g.rng.chance(50) {
        let k = g.expr(b, &Type::Integer, 2);
        let c = call(b, "firsts", Type::Tuple(vec![vf(), Type::Integer]), vf(), vec![v, k]);
        let s = b.prim(Prim::Shape, vec![c]);
        call(b, "to_float", Type::Integer, Type::Float, vec![s])
    } else {
        let c = call(b, "nested", vf(), Type::vec(vf()), vec![v]);
        let s = b.prim(Prim::Shape, vec![c]);
        let n = b.prim(Prim::Size, vec![s]);
        call(b, "to_float", Type::Integer, Type::Float, vec![n])
    }
}

// ---------------------------------------------------------------------------
// Helpers of this theme.

/// The argument of `shape` at `e`.
fn shape_arg(ctx: &Ctx, e: ExprId) -> Option<ExprId> {
    Some(prim_args(ctx, e, Prim::Shape)?[0])
}
