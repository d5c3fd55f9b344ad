//! Inlining: calls marked `$inline` always, other calls when the callee is
//! not recursive and small (the limit is [`crate::Options::inline_size`],
//! measured by [`crate::Globals::expanded_size`]).

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, Pat, Prim, Type};

use super::instances::{call, ff, G};
use super::{let_, CoreRule, Head, INLINE};
use crate::rule::Ctx;

pub(super) const INLINE_MARKED: CoreRule = CoreRule {
    name: "inline-marked",
    statement: "$inline (f a) ⇒ let params = a in (body of f)",
    group: INLINE,
    head: Head::Prim(Prim::Inline),
    rewrite: inline_marked,
    instance: inline_marked_instance,
};

/// `$inline (f a) ⇒ let params = a in body of f` (always, when f's definition is known).
fn inline_marked(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Inline), call) = ctx.expr(e).clone() else { return None };
    inline_call(ctx, call)
}

fn inline_marked_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let x = g.expr(b, &Type::Float, 2);
    let c = call(b, "sq", Type::Float, Type::Float, vec![x]);
    b.prim(Prim::Inline, vec![c])
}

pub(super) const INLINE_SMALL: CoreRule = CoreRule {
    name: "inline-small",
    statement: "f a ⇒ let params = a in (body of f) when f is not recursive and its body is \
        small (with the small functions it calls inlined in turn)",
    group: INLINE,
    head: Head::Fun,
    rewrite: inline_small,
    instance: inline_small_instance,
};

/// `f a ⇒ let params = a in body of f` when f is not recursive and its
/// body is small, counting the bodies of the small functions it calls
/// (which are inlined in turn) ([`crate::Globals::expanded_size`]).
fn inline_small(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Fun(f), _) = ctx.expr(e).clone() else { return None };
    ctx.globals.small_def(&f, ctx.options.inline_size, crate::Measure::Tree)?;
    if ctx.globals.is_recursive(&f) {
        return None;
    }
    // Small with the small calls it brings in inlined too: the engine goes
    // on to inline those, so a chain of small functions (g1 calls g0, g2
    // calls g1, ...) was inlined whole, and every derivative of gN held
    // a copy of the chain (quadratic in the program).
    ctx.globals.expanded_size(&f, ctx.options.inline_size, ctx.options.inline_size)?;
    inline_call(ctx, e)
}

fn inline_small_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
    let t = call(b, "twice", ff(), Type::Float, vec![p, q]);
    let z = g.expr(b, &Type::Float, 1);
    let nz = call(b, "noisy", Type::Float, Type::Float, vec![z]);
    call(b, "add", ff(), Type::Float, vec![t, nz])
}

// ---------------------------------------------------------------------------
// Helpers of this theme.

/// `f a ⇒ let params = a in body` for a definition of `f` whose body is fully typed.
fn inline_call(ctx: &mut Ctx, call: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Fun(f), arg) = ctx.expr(call).clone() else { return None };
    let def = ctx.globals.def(&f)?;
    // Only definitions that checked cleanly.
    let mut stack = vec![def.root];
    while let Some(x) = stack.pop() {
        if def.body.ty(x).contains_unknown() {
            return None;
        }
        stack.extend(term::children(&def.body.exprs[x]));
    }
    if def.ret_ty != ctx.ty(call) {
        return None;
    }
    // Fresh names from now on are not among the callee's `ksc$` names (a
    // binder renamed to avoid capture would collide with one of them).
    let (pat, body) = term::inlined_body(ctx.b, def);
    let pat = match pat {
        Some(pat) => pat,
        None if ctx.pure(arg) => return Some(body),
        None => Pat::Var(ctx.b.fresh_name("unit")),
    };
    Some(let_(ctx, pat, arg, body))
}
