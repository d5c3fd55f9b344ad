//! Floating binding forms out of strict positions: a `let`, `if` or
//! `assert` in an argument of a call, or in the condition of an `if` or
//! `assert`, moves out, so the rules that match the enclosing node see its
//! body.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, Prim, Type};

use super::instances::{call, ff, with_var, G};
use super::{call_parts, copy_atom, let_, let_parts, rename_pat_avoiding, CoreRule, Head, FLOAT};
use crate::rule::Ctx;

pub(super) const LET_FLOAT_ARG: CoreRule = CoreRule {
    name: "let-float-arg",
    statement: "f (.., let p = e in b, ..) ⇒ let p = e in f (.., b, ..) when earlier \
        arguments have no effect",
    group: FLOAT,
    head: Head::AnyCall,
    rewrite: let_float_arg,
    instance: let_float_arg_instance,
};

/// `f (.., let p = e in b, ..) ⇒ let p = e in f (.., b, ..)` (earlier arguments without effect; p
/// renamed if free in the others).
fn let_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, mut comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::Let(..)))?;
    let (p, r, b) = let_parts(ctx, comps[k])?;
    let others: Vec<ExprId> = comps.iter().enumerate().filter(|(i, _)| *i != k).map(|(_, &x)| x).collect();
    let (p, b) = rename_pat_avoiding(ctx, &p, b, &others, &[]);
    comps[k] = b;
    let call = term::rebuild_call(ctx.b, e, comps, tupled);
    Some(let_(ctx, p, r, call))
}

fn let_float_arg_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let b = e0 in (add e (let b = e1 in e2)) or (add (let ..) e): the other argument sees the
    // outer b.
    let e0 = g.expr(b, &Type::Float, 1);
    let inner = with_var(g, "b", Type::Float, |g| {
        let other = g.expr(b, &Type::Float, 2);
        let e1 = g.expr(b, &Type::Float, 2);
        let e2 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 2));
        let l = b.let_("b", e1, e2);
        let args = if g.rng.chance(50) { vec![l, other] } else { vec![other, l] };
        call(b, "sub", ff(), Type::Float, args)
    });
    b.let_("b", e0, inner)
}

pub(super) const IF_FLOAT_ARG: CoreRule = CoreRule {
    name: "if-float-arg",
    statement: "f (.., if c a b, ..) ⇒ if c (f (.., a, ..)) (f (.., b, ..)) when the other \
        arguments are atoms",
    group: FLOAT,
    head: Head::AnyCall,
    rewrite: if_float_arg,
    instance: if_float_arg_instance,
};

/// `f (.., if c a b, ..) ⇒ if c (f (.., a, ..)) (f (.., b, ..))` when the other arguments are
/// atoms.
fn if_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::If(..)))?;
    if comps.iter().enumerate().any(|(i, &x)| i != k && !ctx.is_atomic(x)) {
        return None;
    }
    let Expr::If(c, a, b) = ctx.expr(comps[k]).clone() else { return None };
    let mut then_comps = comps.clone();
    then_comps[k] = a;
    let mut else_comps: Vec<ExprId> = Vec::with_capacity(comps.len());
    for (i, &x) in comps.iter().enumerate() {
        else_comps.push(if i == k { b } else { copy_atom(ctx, x) });
    }
    let t = term::rebuild_call(ctx.b, e, then_comps, tupled);
    let f = term::rebuild_call(ctx.b, e, else_comps, tupled);
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::If(c, t, f), ty))
}

fn if_float_arg_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.expr(b, &Type::Bool, 2);
    let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
    let i = b.body.alloc_typed(Expr::If(c, t, f), Type::Float);
    let x = g.atom(b, &Type::Float);
    call(b, "mul", ff(), Type::Float, vec![x, i])
}

pub(super) const ASSERT_FLOAT_ARG: CoreRule = CoreRule {
    name: "assert-float-arg",
    statement: "f (.., assert c x, ..) ⇒ assert c (f (.., x, ..)) when earlier arguments have \
        no effect",
    group: FLOAT,
    head: Head::AnyCall,
    rewrite: assert_float_arg,
    instance: assert_float_arg_instance,
};

/// `f (.., assert c x, ..) ⇒ assert c (f (.., x, ..))` (earlier arguments without effect).
fn assert_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, mut comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::Assert(..)))?;
    let Expr::Assert(c, x, from) = ctx.expr(comps[k]).clone() else { return None };
    comps[k] = x;
    let call = term::rebuild_call(ctx.b, e, comps, tupled);
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::Assert(c, call, from), ty))
}

fn assert_float_arg_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.expr(b, &Type::Bool, 1);
    let e = g.expr(b, &Type::Float, 2);
    let a = b.body.alloc_typed(Expr::Assert(c, e, None), Type::Float);
    let x = g.expr(b, &Type::Float, 1);
    call(b, "add", ff(), Type::Float, vec![a, x])
}

pub(super) const LET_FLOAT_COND: CoreRule = CoreRule {
    name: "let-float-cond",
    statement: "if (let p = e in c) t f ⇒ let p = e in if c t f (p renamed if free in t or f)",
    group: FLOAT,
    head: Head::If,
    rewrite: let_float_cond,
    instance: let_float_cond_instance,
};

/// `if (let p = e in c) t f ⇒ let p = e in if c t f` (p renamed if free in t or f).
fn let_float_cond(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(cond, t, f) = ctx.expr(e).clone() else { return None };
    let (p, r, c) = let_parts(ctx, cond)?;
    let (p, c) = rename_pat_avoiding(ctx, &p, c, &[t, f], &[]);
    let ty = ctx.ty(e);
    let inner = ctx.alloc(Expr::If(c, t, f), ty);
    Some(let_(ctx, p, r, inner))
}

fn let_float_cond_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let e0 = g.expr(b, &Type::Float, 1);
    let inner = with_var(g, "a", Type::Float, |g| {
        let e1 = g.expr(b, &Type::Float, 2);
        let c = with_var(g, "a", Type::Float, |g| g.expr(b, &Type::Bool, 2));
        let cond = b.let_("a", e1, c);
        let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
        b.body.alloc_typed(Expr::If(cond, t, f), Type::Float)
    });
    b.let_("a", e0, inner)
}

pub(super) const LET_FLOAT_ASSERT: CoreRule = CoreRule {
    name: "let-float-assert",
    statement: "assert (let p = e in c) b ⇒ let p = e in assert c b (p renamed if free in b)",
    group: FLOAT,
    head: Head::Assert,
    rewrite: let_float_assert,
    instance: let_float_assert_instance,
};

/// `assert (let p = e in c) b ⇒ let p = e in assert c b` (p renamed if free in b).
fn let_float_assert(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Assert(cond, b, from) = ctx.expr(e).clone() else { return None };
    let (p, r, c) = let_parts(ctx, cond)?;
    let (p, c) = rename_pat_avoiding(ctx, &p, c, &[b], &[]);
    let ty = ctx.ty(e);
    let inner = ctx.alloc(Expr::Assert(c, b, from), ty);
    Some(let_(ctx, p, r, inner))
}

fn let_float_assert_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let e0 = g.expr(b, &Type::Float, 1);
    let inner = with_var(g, "a", Type::Float, |g| {
        let e1 = g.expr(b, &Type::Float, 2);
        let c = with_var(g, "a", Type::Float, |g| g.expr(b, &Type::Bool, 2));
        let cond = b.let_("a", e1, c);
        let body = g.expr(b, &Type::Float, 2);
        b.body.alloc_typed(Expr::Assert(cond, body, None), Type::Float)
    });
    b.let_("a", e0, inner)
}

// ---------------------------------------------------------------------------
// Helpers of this theme.

/// A call whose argument components may be moved around: not a primitive
/// that reads its literal argument tuple as separate arguments, not
/// `$inline` (whose argument must stay a call).
fn movable_callee(c: &Callee) -> bool {
    match c {
        Callee::Prim(p) => !p.splats_arguments() && *p != Prim::Inline,
        Callee::Fun(_) => true,
    }
}

/// The first argument component of call `e` that satisfies `is`, if every
/// component before it has no effect (so it may be evaluated first).
fn first_component(ctx: &mut Ctx, e: ExprId, is: fn(&Expr) -> bool) -> Option<(Callee, Vec<ExprId>, bool, usize)> {
    let (c, comps, tupled) = call_parts(ctx, e)?;
    if !movable_callee(&c) {
        return None;
    }
    let k = comps.iter().position(|&x| is(ctx.expr(x)))?;
    if !comps[..k].iter().all(|&x| ctx.pure(x)) {
        return None;
    }
    Some((c, comps, tupled, k))
}
