//! Tuples: a `let` of a literal tuple becomes lets of its components (or
//! the tuple of atoms is copied to its uses), and a projection of a literal
//! tuple is the component.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, Pat, Prim, Type, Var};

use super::instances::{call, ff, let_tuple, tuple_uses, vf, with_var, G};
use super::{let_, let_parts, CoreRule, Head, TUPLE};
use crate::rule::Ctx;

pub(super) const LET_TUPLE_SPLIT: CoreRule = CoreRule {
    name: "let-tuple-split",
    statement: "let (a1 .. an) = (tuple e1 .. en) in b ⇒ let a1 = e1 in .. let an = en in b",
    group: TUPLE,
    head: Head::Let,
    rewrite: let_tuple_split,
    instance: let_tuple_split_instance,
};

/// `let (a1 .. an) = (tuple e1 .. en) in b ⇒ let a1 = e1 in .. let an = en in b` (renaming ai free
/// in a later ej).
fn let_tuple_split(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Tuple(vs), r, b) = let_parts(ctx, e)? else { return None };
    let Expr::Tuple(es) = ctx.expr(r).clone() else { return None };
    if es.len() != vs.len() {
        return None;
    }
    let mut names = vs.clone();
    let mut renames = Vec::new();
    for j in 0..vs.len() {
        if es[j + 1..].iter().any(|&later| ctx.is_free(&vs[j], later)) {
            let fresh = ctx.fresh_like(&vs[j]);
            renames.push((vs[j].clone(), fresh.clone()));
            names[j] = fresh;
        }
    }
    let mut out = ctx.rename(b, &renames);
    for (v, rhs) in names.into_iter().zip(es).rev() {
        out = let_(ctx, Pat::Var(v), rhs, out);
    }
    Some(out)
}

fn let_tuple_split_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let a = e0 in let (a b) = (tuple e1 e2[a]) in e3[a b]
    let e0 = g.expr(b, &Type::Float, 2);
    let inner = with_var(g, "a", Type::Float, |g| {
        let e1 = g.expr(b, &Type::Float, 2);
        let av = b.var("a", Type::Float);
        let e2x = g.expr(b, &Type::Float, 1);
        let e2 = call(b, "add", ff(), Type::Float, vec![av, e2x]);
        let t = b.tuple(vec![e1, e2]);
        g.env.push(("a".into(), Type::Float));
        g.env.push(("b".into(), Type::Float));
        let e3 = g.expr(b, &Type::Float, 3);
        g.env.pop();
        g.env.pop();
        let_tuple(b, &["a", "b"], t, e3)
    });
    b.let_("a", e0, inner)
}

pub(super) const LET_TUPLE_VAR: CoreRule = CoreRule {
    name: "let-tuple-var",
    statement: "let x = (tuple e1 .. en) in b ⇒ let xi = ei .. in b[x := (tuple a1 .. an)], \
        naming (fresh xi) the ei that are not atoms, when b does not splat x",
    group: TUPLE,
    head: Head::Let,
    rewrite: let_tuple_var,
    instance: let_tuple_var_instance,
};

/// `let x = (tuple e1 .. en) in b ⇒ let xi = ei in .. b[x := (tuple a1 ..
/// an)]`, naming (fresh xi) the components that are not atoms, so that
/// projections of x see them. (Substituting at once: a `let x = (tuple x1
/// ..)` left behind would be undone by `let-once`.)
fn let_tuple_var(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (x, _, es, b) = let_bound_tuple(ctx, e)?;
    if es.iter().all(|&c| ctx.is_atomic(c)) {
        return None;
    }
    let mut named = Vec::new();
    let atoms: Vec<ExprId> = es
        .into_iter()
        .map(|c| {
            if ctx.is_atomic(c) {
                return c;
            }
            let n = ctx.fresh_like(&x);
            let ty = ctx.ty(c);
            named.push((n.clone(), c));
            ctx.alloc(Expr::Var(n), ty)
        })
        .collect();
    let tuple = ctx.b.tuple(atoms);
    let mut out = ctx.substitute(b, &[(x, tuple)], false);
    for (n, c) in named.into_iter().rev() {
        out = let_(ctx, Pat::Var(n), c, out);
    }
    Some(out)
}

fn let_tuple_var_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = (tuple e1 e2) in (get$1$2 x) + sum (get$2$2 x) + e3,
    // the components often traced (their order is observable).
    let (mut e1, mut e2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
    if g.rng.chance(50) {
        e1 = b.prim(Prim::Trace, vec![e1]);
        e2 = b.prim(Prim::Trace, vec![e2]);
    }
    let t = b.tuple(vec![e1, e2]);
    tuple_uses(g, b, t)
}

pub(super) const LET_TUPLE_ATOMS: CoreRule = CoreRule {
    name: "let-tuple-atoms",
    statement: "let x = (tuple a1 .. an) in b ⇒ b[x := (tuple a1 .. an)] for atoms ai, when b \
        does not splat x",
    group: TUPLE,
    head: Head::Let,
    rewrite: let_tuple_atoms,
    instance: let_tuple_atoms_instance,
};

/// `let x = (tuple a1 .. an) in b ⇒ b[x := (tuple a1 .. an)]` for atoms ai
/// (copying atoms costs nothing; tuples are not stored), unless b passes x
/// to a primitive that reads a literal tuple as several arguments.
fn let_tuple_atoms(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (x, r, es, b) = let_bound_tuple(ctx, e)?;
    if !es.iter().all(|&c| ctx.is_atomic(c)) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

fn let_tuple_atoms_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (a1, a2) = (g.atom(b, &Type::Float), g.atom(b, &vf()));
    let t = b.tuple(vec![a1, a2]);
    tuple_uses(g, b, t)
}

pub(super) const GET_TUPLE: CoreRule = CoreRule {
    name: "get-tuple",
    statement: "get$i$n (tuple e1 .. en) ⇒ ei when the other components have no effect",
    group: TUPLE,
    head: Head::AnyCall,
    rewrite: get_tuple,
    instance: get_tuple_instance,
};

/// `get$i$n (tuple e1 .. en) ⇒ ei` when the other components have no effect.
fn get_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Get { index, arity }), a) = ctx.expr(e).clone() else { return None };
    let Expr::Tuple(es) = ctx.expr(a).clone() else { return None };
    if es.len() != arity as usize || index == 0 || index > arity {
        return None;
    }
    let i = index as usize - 1;
    if es.iter().enumerate().any(|(j, &x)| j != i && !ctx.pure(x)) {
        return None;
    }
    Some(es[i])
}

fn get_tuple_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
    let t = b.tuple(vec![p, q]);
    if g.rng.chance(50) {
        b.prim(Prim::Get { index: 1, arity: 2 }, vec![t])
    } else {
        let v = b.prim(Prim::Get { index: 2, arity: 2 }, vec![t]);
        b.prim(Prim::Sum, vec![v])
    }
}

// ---------------------------------------------------------------------------
// Helpers of this theme.

/// `let x = (tuple e1 .. en) in b` with n >= 2, when b does not pass x to a
/// primitive that reads a literal tuple as several arguments: x, the
/// components and b.
fn let_bound_tuple(ctx: &mut Ctx, e: ExprId) -> Option<(Var, ExprId, Vec<ExprId>, ExprId)> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let Expr::Tuple(es) = ctx.expr(r).clone() else { return None };
    if es.len() < 2 || term::splatted(ctx.cache, ctx.b.body, &x, b) {
        return None;
    }
    Some((x, r, es, b))
}
