//! Let rules (reference 6.2): a `let` whose right side costs nothing to
//! copy, is used once, or is not used at all goes away, and a `let` of a
//! `let` is flattened.

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, occurrences, Occurrences};
use ksc_ir::{Expr, ExprId, Pat, Prim, Type};

use super::heuristics::cheap_linear_map;
use super::instances::{call, dummy, ff, float_or_vec, outer, with_var, G};
use super::{let_, let_parts, rename_pat_avoiding, CoreRule, Head, LET};
use crate::rule::Ctx;

pub(super) const LET_ATOM: CoreRule = CoreRule {
    name: "let-atom",
    statement: "let x = a in b ⇒ b[x := a] for a variable, literal or $dummy a",
    group: LET,
    head: Head::Let,
    rewrite: let_atom,
    instance: let_atom_instance,
};

/// `let x = a in b ⇒ b[x := a]` for an atom `a` (variable, literal, `$dummy`).
fn let_atom(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if !ctx.is_atomic(r) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

fn let_atom_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let b = e0 in let c = e1 in let a = atom in e[a]: the atom is often
    // `b` or `c`, and e often rebinds it around a use of `a`.
    outer(g, b, |g, b| {
        let t = float_or_vec(g);
        let r = g.atom(b, &t);
        let rebind = match b.expr(r) {
            ksc_ir::Expr::Var(w) if g.rng.chance(70) => Some(w.clone()),
            _ => None,
        };
        let body = with_var(g, "a", t.clone(), |g| match rebind {
            Some(w) => {
                let e = g.expr(b, &Type::Float, 1);
                let inner = with_var(g, &w, Type::Float, |g| {
                    let a = b.var("a", t.clone());
                    let use_a = if t == Type::Float {
                        a
                    } else {
                        let s = b.prim(Prim::Size, vec![a]);
                        call(b, "to_float", Type::Integer, Type::Float, vec![s])
                    };
                    let other = g.expr(b, &Type::Float, 2);
                    call(b, "add", ff(), Type::Float, vec![use_a, other])
                });
                b.let_(&w, e, inner)
            }
            None => g.expr(b, &Type::Float, 4),
        });
        b.let_("a", r, body)
    })
}

pub(super) const LET_DEAD: CoreRule = CoreRule {
    name: "let-dead",
    statement: "let p = e in b ⇒ b when p's variables are not free in b and e has no effect",
    group: LET,
    head: Head::Let,
    rewrite: let_dead,
    instance: let_dead_instance,
};

/// `let p = e in b ⇒ b` when no variable of `p` occurs in `b` and `e` has no effect.
fn let_dead(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, r, b) = let_parts(ctx, e)?;
    if p.vars().iter().any(|v| ctx.is_free(v, b)) || !ctx.pure(r) {
        return None;
    }
    Some(b)
}

fn let_dead_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let r = g.expr(b, &Type::Float, 2);
    let body = g.expr(b, &Type::Float, 3);
    b.let_("a", r, body)
}

/// The deepest single use in a `let`'s body that let-once substitutes the
/// binding into: the substitution copies the path down to the use, so
/// moving the bindings of a term of depth D to uses far below them cost D
/// nodes each, D^2 in all (`[rev f]` of the doubling family `f_k x =
/// f_(k-1) (f_(k-1) x)`, whose inlined reverse passes nest 7,500 deep at k
/// = 11: 5.6 s, stopped by the normalizer's work bound).
const LET_ONCE_REACH: usize = 64;

pub(super) const LET_ONCE: CoreRule = CoreRule {
    name: "let-once",
    statement: "let x = e in b ⇒ b[x := e] when x occurs once in b, not under a lambda and at \
        most 64 nodes deep, and e has no effect",
    group: LET,
    head: Head::Let,
    rewrite: let_once,
    instance: let_once_instance,
};

/// `let x = e in b ⇒ b[x := e]` when `x` occurs once in `b`, not under a lambda and at most
/// [`LET_ONCE_REACH`] nodes deep, and `e` has no effect.
fn let_once(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if ctx.is_atomic(r) || !ctx.pure(r) {
        return None;
    }
    if occurrences(ctx.cache, ctx.b.body, &x, b) != Occurrences::Once {
        return None;
    }
    // Not deeper in b than LET_ONCE_REACH nodes: substituting copies the
    // path down to the use.
    let mut at = b;
    let mut depth = 0;
    while !matches!(ctx.expr(at), Expr::Var(_)) {
        depth += 1;
        let kids = ksc_ir::core::children(ctx.expr(at));
        let Some(next) = kids.into_iter().find(|&c| ctx.is_free(&x, c)) else { break };
        if depth > LET_ONCE_REACH {
            return None;
        }
        at = next;
    }
    if matches!(ctx.expr(r), Expr::Tuple(es) if es.len() != 1) && term::splatted(ctx.cache, ctx.b.body, &x, b) {
        // `let t = (tuple a b) in (print t)` prints one tuple, not two values.
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

fn let_once_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let b = e0 in let c = e1 in let a = e[b c] in (let b = .. in a * ..)
    outer(g, b, |g, b| {
        let rebound = *g.rng.pick(&["b", "c"]);
        let r0 = g.expr(b, &Type::Float, 2);
        let w = b.var(rebound, Type::Float);
        let r = call(b, "add", ff(), Type::Float, vec![w, r0]);
        let e = g.expr(b, &Type::Float, 1);
        let inner = with_var(g, rebound, Type::Float, |g| {
            let other = g.expr(b, &Type::Float, 2);
            let a = b.var("a", Type::Float);
            call(b, "mul", ff(), Type::Float, vec![other, a])
        });
        let body = b.let_(rebound, e, inner);
        b.let_("a", r, body)
    })
}

pub(super) const LET_LINEAR_MAP: CoreRule = CoreRule {
    name: "let-linear-map",
    statement: "let m = L in b ⇒ b[m := L] for a linear map L built by combinators over atoms",
    group: LET,
    head: Head::Let,
    rewrite: let_linear_map,
    instance: let_linear_map_instance,
};

/// `let m = L in b ⇒ b[m := L]` for a linear map `L` made of combinators over atoms.
fn let_linear_map(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(m), r, b) = let_parts(ctx, e)? else { return None };
    if ctx.is_atomic(r) || !cheap_linear_map(ctx, r) {
        return None;
    }
    Some(ctx.substitute(b, &[(m, r)], true))
}

fn let_linear_map_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let d = dummy(b, Type::Float);
    let k = g.atom(b, &Type::Float);
    let m = b.prim(Prim::LmScale, vec![d, k]);
    let lm = Type::lm(Type::Float, Type::Float);
    let (x1, x2) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
    let (a1, a2) = (b.var("a", lm.clone()), b.var("a", lm));
    let y1 = b.prim(Prim::LmApply, vec![a1, x1]);
    let y2 = b.prim(Prim::LmApply, vec![a2, x2]);
    let body = call(b, "add", ff(), Type::Float, vec![y1, y2]);
    b.let_("a", m, body)
}

pub(super) const LET_FLOAT_LET: CoreRule = CoreRule {
    name: "let-float-let",
    statement: "let p = (let q = a in b) in c ⇒ let q = a in let p = b in c (q renamed if \
        free in c)",
    group: LET,
    head: Head::Let,
    rewrite: let_float_let,
    instance: let_float_let_instance,
};

/// `let p = (let q = a in b) in c ⇒ let q = a in let p = b in c` (q renamed if free in c).
fn let_float_let(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, r, c) = let_parts(ctx, e)?;
    let (q, a, b) = let_parts(ctx, r)?;
    let (q, b) = rename_pat_avoiding(ctx, &q, b, &[c], p.vars());
    let inner = let_(ctx, p, b, c);
    Some(let_(ctx, q, a, inner))
}

fn let_float_let_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let b = e0 in let a = (let b = e1 in e2) in e3: e3 sees the outer b.
    let e0 = g.expr(b, &Type::Float, 2);
    let inner = with_var(g, "b", Type::Float, |g| {
        let e1 = g.expr(b, &Type::Float, 2);
        let e2 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 2));
        let rhs = b.let_("b", e1, e2);
        let e3 = with_var(g, "a", Type::Float, |g| {
            let x = g.expr(b, &Type::Float, 2);
            let bv = b.var("b", Type::Float);
            call(b, "add", ff(), Type::Float, vec![x, bv])
        });
        b.let_("a", rhs, e3)
    });
    b.let_("b", e0, inner)
}
