//! Conditionals: `if` and `assert` of a literal condition, and `if` of
//! alpha-equal branches.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Expr, ExprId, Lit, Type};

use super::instances::{lit_bool, G};
use super::{CoreRule, Head, IF};
use crate::rule::Ctx;

pub(super) const IF_TRUE: CoreRule = CoreRule {
    name: "if-true",
    statement: "if true t e ⇒ t",
    group: IF,
    head: Head::If,
    rewrite: if_true,
    instance: if_literal_instance,
};

/// `if true t e ⇒ t`.
fn if_true(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, t, _) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(true))).then_some(t)
}

fn if_literal_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.rng.chance(50);
    let c = lit_bool(b, c);
    let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
    b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
}

pub(super) const IF_FALSE: CoreRule = CoreRule {
    name: "if-false",
    statement: "if false t e ⇒ e",
    group: IF,
    head: Head::If,
    rewrite: if_false,
    instance: if_literal_instance,
};

/// `if false t e ⇒ e`.
fn if_false(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, _, f) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(false))).then_some(f)
}

pub(super) const IF_SAME: CoreRule = CoreRule {
    name: "if-same",
    statement: "if c t t' ⇒ t when t and t' are alpha-equal and c has no effect",
    group: IF,
    head: Head::If,
    rewrite: if_same,
    instance: if_same_instance,
};

/// `if c t t' ⇒ t` when the branches are alpha-equal and `c` has no effect.
fn if_same(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, t, f) = ctx.expr(e).clone() else { return None };
    (ctx.pure(c) && ctx.alpha_eq(t, f)).then_some(t)
}

fn if_same_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = g.expr(b, &Type::Bool, 2);
    let t = g.expr(b, &Type::Float, 3);
    let f = term::deep_copy(b, t);
    b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
}

pub(super) const ASSERT_TRUE: CoreRule = CoreRule {
    name: "assert-true",
    statement: "assert true e ⇒ e",
    group: IF,
    head: Head::Assert,
    rewrite: assert_true,
    instance: assert_true_instance,
};

/// `assert true e ⇒ e`.
fn assert_true(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Assert(c, b, _) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(true))).then_some(b)
}

fn assert_true_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let c = lit_bool(b, true);
    let e = g.expr(b, &Type::Float, 2);
    b.body.alloc_typed(Expr::Assert(c, e, None), Type::Float)
}
