//! Loops that reverse and forward mode make: a `sumbuild` of tuples split
//! into a tuple of sums, sums a `let` in scope already computed taken out of
//! a `$buildSum`, and a `fold`'s loop-invariant element components moved
//! into its step.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, FunName, Pat, Prim, Type, Var};

use super::heuristics::{small_element, SPLIT_LETS};
use super::instances::{call, ff, let_tuple, vf, with_var, G};
use super::{copy_atom, float_arith, float_lit, lam, lam_parts, let_, prim_args, share, CoreRule, Head, VEC};
use crate::rule::Ctx;

pub(super) const SUMBUILD_TUPLE: CoreRule = CoreRule {
    name: "sumbuild-tuple",
    statement: "sumbuild n (lam i (tuple e1 .. ek)) ⇒ tuple (sumbuild n (lam i e1)) .. when \
        the body has no effect; the tuple may be under small lets (copied into each \
        component) when a component is a deltaVec",
    group: VEC,
    head: Head::Prim(Prim::Sumbuild),
    rewrite: sumbuild_tuple,
    instance: sumbuild_tuple_instance,
};

/// `sumbuild n (lam i (tuple e1 .. ek)) ⇒ tuple (sumbuild n (lam i e1)) ..
/// (sumbuild n (lam i ek))` when the body has no effect (n let-bound if not
/// atomic). The tuple may also be under `let`s, copied into each component
/// (`let`-dead then drops those it does not use), when one component is a
/// `deltaVec` and the `let`s are few and small, without loops or calls of
/// functions with a body: a term of reverse mode's loops, whose one-hot
/// component, on its own, is added into its accumulator in place
/// (lowering), where a sum of the tuples would add whole vectors per
/// iteration.
fn sumbuild_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    let (lets, inner) = term::let_chain(ctx.b.body, body);
    if lets.len() > SPLIT_LETS || lets.iter().any(|(_, r)| !small_element(ctx, *r)) {
        return None;
    }
    let Expr::Tuple(es) = ctx.expr(inner).clone() else { return None };
    if !ctx.pure(body) || (es.is_empty() && !ctx.pure(n)) {
        return None;
    }
    if !lets.is_empty() && !es.iter().any(|&x| prim_args(ctx, x, Prim::DeltaVec).is_some()) {
        return None;
    }
    // Each component's sumbuild is typed like the whole one's.
    if ity != ctx.ty(n) || es.iter().any(|&x| ctx.ty(x).contains_unknown()) {
        return None;
    }
    Some(share(ctx, n, "n", |ctx, n| {
        let parts = es
            .iter()
            .enumerate()
            .map(|(k, &x)| {
                let n = copy_atom(ctx, n);
                let copies = lets
                    .iter()
                    .map(|(p, r)| (p.clone(), if k == 0 { *r } else { term::deep_copy(ctx.b, *r) }))
                    .collect();
                let t = term::wrap(ctx.b, copies, x);
                let l = lam(ctx, &i, &ity, t);
                let ty = ctx.ty(x);
                let arg = ctx.b.tuple(vec![n, l]);
                ctx.alloc(Expr::Call(Callee::Prim(Prim::Sumbuild), arg), ty)
            })
            .collect();
        ctx.b.tuple(parts)
    }))
}

fn sumbuild_tuple_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let i = g.name();
    let body = with_var(g, &i, Type::Integer, |g| {
        if g.rng.chance(50) {
            let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 1));
            return b.tuple(vec![p, q]);
        }
        // Under a let, with a deltaVec component.
        let r = g.expr(b, &Type::Float, 1);
        let t = with_var(g, "a", Type::Float, |g| {
            let p = g.expr(b, &Type::Float, 2);
            let (m, j, x) = (g.size(b, 1), g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Float, 2));
            let q = b.prim(Prim::DeltaVec, vec![m, j, x]);
            b.tuple(vec![p, q])
        });
        b.let_("a", r, t)
    });
    let lam = b.lam(&i, Type::Integer, body);
    b.prim(Prim::Sumbuild, vec![n, lam])
}

pub(super) const BUILDSUM_KNOWN_SUMS: CoreRule = CoreRule {
    name: "buildsum-known-sums",
    statement: "$buildSum n 0.0 (lam i (tuple a s)) ⇒ tuple (build n (lam i a)) s' when each \
        Float component of s is a term t scaled by factors without i (ts_scale, mul, neg, div \
        by them) and a let in scope binds y = sumbuild n (lam i t): s' is s with t replaced \
        by y",
    group: VEC,
    head: Head::Prim(Prim::BuildSum),
    rewrite: buildsum_known_sums,
    instance: buildsum_known_sums_instance,
};

/// `$buildSum n z (lam i B) ⇒ tuple (build n (lam i A)) S'` where `B` is
/// `(tuple A S)` under `let`s, `z` is `0.0` or a tuple of them, and each
/// Float component of the sum part `S` depends on the loop linearly
/// through one term `T` (see [`Dependence`]) whose sum `sumbuild n (lam i
/// T)` a `let` in scope has bound to `y` (with `T`'s variables meaning the
/// same there): `S'` is `S` with each `T` replaced by its `y`, the
/// factors taken out of the sum. Reverse mode makes this of a sum whose
/// terms are read again: log-sum-exp's cotangent of the maximum sums the
/// cotangents of `exp (x_i - max)` scaled by the same factor, which is
/// the sum of the exponentials (already computed) times that factor. The
/// rounding differs from summing the scaled terms (one multiplication
/// instead of n), and an empty loop's sum may become a zero of the other
/// sign.
fn buildsum_known_sums(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, z, f] = prim_args(ctx, e, Prim::BuildSum)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(body) {
        return None;
    }
    // The body's lets, and its pair.
    let (lets, at) = term::let_chain(ctx.b.body, body);
    let Expr::Tuple(pair) = ctx.expr(at).clone() else { return None };
    let [a, sum_part] = pair[..] else { return None };
    let locals: Vec<(Var, Option<ExprId>)> = lets
        .iter()
        .flat_map(|(p, rhs)| p.vars().iter().map(move |v| (v.clone(), matches!(p, Pat::Var(_)).then_some(*rhs))))
        .collect();
    // Each name the lets bind means that let everywhere after it: bound
    // once, not the index, and read by no right side before its own.
    for (k, (v, _)) in locals.iter().enumerate() {
        let own = lets.iter().position(|(p, _)| p.vars().contains(v)).unwrap_or(0);
        if *v == i || locals[..k].iter().any(|(w, _)| w == v) || lets[..=own].iter().any(|(_, r)| ctx.is_free(v, *r)) {
            return None;
        }
    }
    let (parts, zeros) = match (ctx.expr(sum_part).clone(), ctx.expr(z).clone()) {
        (Expr::Tuple(ps), Expr::Tuple(zs)) if ps.len() == zs.len() => (ps, zs),
        (Expr::Tuple(_), _) | (_, Expr::Tuple(_)) => return None,
        _ => (vec![sum_part], vec![z]),
    };
    let positive_zero = |ctx: &Ctx, x: ExprId| float_lit(ctx, x).is_some_and(|v| v == 0.0 && v.is_sign_positive());
    if !zeros.iter().all(|&x| positive_zero(ctx, x)) || parts.iter().any(|&x| ctx.ty(x) != Type::Float) {
        return None;
    }
    let lb = LoopBody { i: &i, locals: &locals };
    let mut sums = Vec::new();
    for &part in &parts {
        let Dependence::Linear(t) = lb.dependence(ctx, part)? else { return None };
        // The term with the body's lets put in: it reads only i and what
        // stands outside the loop.
        let mut full = t;
        for (v, rhs) in locals.iter().rev() {
            if ctx.is_free(v, full) {
                full = ctx.substitute(full, &[(v.clone(), (*rhs)?)], false);
            }
        }
        if locals.iter().any(|(v, _)| ctx.is_free(v, full)) {
            return None;
        }
        let lam_t = lam(ctx, &i, &ity, full);
        let n_copy = ctx.b.copy(n);
        let wanted = ctx.prim(Prim::Sumbuild, vec![n_copy, lam_t])?;
        // A let in scope bound that sum, and nothing it reads is bound
        // again since.
        let found = ctx.scope.bindings().iter().enumerate().rev().find_map(|(pos, binding)| {
            let value = binding.value?;
            (ctx.alpha_eq(value, wanted) && ctx.scope.lookup(&binding.name).is_some_and(|(p, _)| p == pos))
                .then(|| (pos, binding.name.clone()))
        })?;
        let later: Vec<Var> = ctx.scope.bindings()[found.0 + 1..].iter().map(|b| b.name.clone()).collect();
        if later.iter().any(|v| ctx.is_free(v, wanted)) {
            return None;
        }
        let y = ctx.alloc(Expr::Var(found.1), Type::Float);
        sums.push(lb.replace(ctx, part, t, y)?);
    }
    let elems = term::wrap(ctx.b, lets, a);
    let g = lam(ctx, &i, &ity, elems);
    let built = ctx.prim(Prim::Build, vec![n, g])?;
    let summed = if matches!(ctx.expr(sum_part), Expr::Tuple(_)) { ctx.b.tuple(sums) } else { sums[0] };
    Some(ctx.b.tuple(vec![built, summed]))
}

/// How a Float expression of a loop's body depends on the loop: not at all
/// (its value is the same in every iteration), or linearly through one
/// term (the expression is that term scaled by factors of the first kind:
/// `ts_scale`, `mul`, `neg`, `ts_neg` and `div` by such a factor, through
/// the body's own `let`s).
enum Dependence {
    Invariant,
    Linear(ExprId),
}

/// A loop body's index `i` and its own `let`s (name, right side; None for
/// a tuple pattern's names), innermost last.
struct LoopBody<'a> {
    i: &'a str,
    locals: &'a [(Var, Option<ExprId>)],
}

impl LoopBody<'_> {
    /// Does `e` read the index or a name the body binds?
    fn reads(&self, ctx: &mut Ctx, e: ExprId) -> bool {
        ctx.is_free(self.i, e) || self.locals.iter().any(|(v, _)| ctx.is_free(v, e))
    }

    /// Whether the body binds `v`, and then the right side of its `let`
    /// (None for a name a tuple pattern binds).
    fn local(&self, v: &str) -> Option<Option<ExprId>> {
        self.locals.iter().rev().find(|(w, _)| w == v).map(|(_, rhs)| *rhs)
    }

    /// `c` for `index j (build m (lam k c))` with `c` reading nothing of
    /// the loop (reverse mode's broadcast cotangent, read at the index).
    fn invariant_read(&self, ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
        let [_, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
        let [_, g] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
        let (k, _, c) = lam_parts(ctx, g)?;
        (!ctx.is_free(&k, c) && !self.reads(ctx, c)).then_some(c)
    }

    /// The two operands of a Float product or quotient `e` (and whether it
    /// divides), or the operand of a negation.
    fn factors(ctx: &Ctx, e: ExprId) -> Option<(Vec<ExprId>, bool)> {
        if ctx.ty(e) != Type::Float {
            return None;
        }
        let pair = |a: ExprId| match ctx.expr(a) {
            Expr::Tuple(xs) if xs.len() == 2 => Some(xs.clone()),
            _ => None,
        };
        let builtin = |f: &FunName| ctx.globals.is_builtin(f) && f.derivs.is_empty();
        match ctx.expr(e) {
            Expr::Call(Callee::Prim(Prim::TsScale), a) => Some((pair(*a)?, false)),
            Expr::Call(Callee::Prim(Prim::TsNeg), a) => Some((vec![*a], false)),
            Expr::Call(Callee::Fun(f), a)
                if builtin(f) && matches!(f.base.as_str(), "mul" | "div") && float_arith(f).is_some() =>
            {
                Some((pair(*a)?, f.base == "div"))
            }
            Expr::Call(Callee::Fun(f), a) if builtin(f) && f.base == "neg" && ctx.ty(*a) == Type::Float => {
                Some((vec![*a], false))
            }
            _ => None,
        }
    }

    /// [`Dependence`] of `e`; None when neither (a product of two terms).
    fn dependence(&self, ctx: &mut Ctx, e: ExprId) -> Option<Dependence> {
        if !self.reads(ctx, e) || self.invariant_read(ctx, e).is_some() {
            return Some(Dependence::Invariant);
        }
        if let Expr::Var(v) = ctx.expr(e).clone() {
            if let Some(rhs) = self.local(&v) {
                return self.dependence(ctx, rhs?);
            }
        }
        let Some((xs, divides)) = Self::factors(ctx, e) else { return Some(Dependence::Linear(e)) };
        let mut term = None;
        for (k, &x) in xs.iter().enumerate() {
            if let Dependence::Linear(t) = self.dependence(ctx, x)? {
                if term.is_some() || (divides && k == 1) {
                    return None;
                }
                term = Some(t);
            }
        }
        Some(term.map_or(Dependence::Invariant, Dependence::Linear))
    }

    /// `e` with its term `t` replaced by `y` and its invariant reads
    /// written out, so it stands outside the loop.
    fn replace(&self, ctx: &mut Ctx, e: ExprId, t: ExprId, y: ExprId) -> Option<ExprId> {
        if e == t {
            return Some(y);
        }
        // Invariant parts are copied: a node stands in one place.
        if !self.reads(ctx, e) {
            return Some(ctx.b.copy(e));
        }
        if let Some(c) = self.invariant_read(ctx, e) {
            return Some(ctx.b.copy(c));
        }
        if let Expr::Var(v) = ctx.expr(e).clone() {
            return self.replace(ctx, self.local(&v)??, t, y);
        }
        let (xs, _) = Self::factors(ctx, e)?;
        let parts = xs.into_iter().map(|x| self.replace(ctx, x, t, y)).collect::<Option<Vec<_>>>()?;
        let arg = if parts.len() == 1 { parts[0] } else { ctx.b.tuple(parts) };
        let Expr::Call(callee, _) = ctx.expr(e).clone() else { return None };
        Some(ctx.alloc(Expr::Call(callee, arg), Type::Float))
    }
}

fn buildsum_known_sums_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let y = sumbuild n (lam j T_j) in (sometimes rebinding what
    // T reads) let c = $buildSum n 0.0 (lam i (let r = T_i scaled
    // in (tuple a (tuple s1 ..)))) in (sum of c's parts): each sum
    // part T_i times factors without i, or (not the rule's) a
    // product of two terms or a term plus something.
    let shape = g.rng.below(4);
    let term = |b: &mut Builder, i: &str| -> ExprId {
        let iv = b.var(i, Type::Integer);
        let fi = call(b, "to_float", Type::Integer, Type::Float, vec![iv]);
        match shape {
            0 => {
                let v = b.var("v", vf());
                b.prim(Prim::Index, vec![iv, v])
            }
            1 => {
                let v = b.var("v", vf());
                let vi = b.prim(Prim::Index, vec![iv, v]);
                let x = b.var("x", Type::Float);
                call(b, "mul", ff(), Type::Float, vec![vi, x])
            }
            2 => {
                let y = b.var("y", Type::Float);
                call(b, "add", ff(), Type::Float, vec![fi, y])
            }
            _ => call(b, "mul", ff(), Type::Float, vec![fi, fi]),
        }
    };
    let n = if g.rng.chance(60) {
        let v = b.var("v", vf());
        b.prim(Prim::Size, vec![v])
    } else {
        b.var("n", Type::Integer)
    };
    let t_j = term(b, "ksc$j");
    let lam_j = b.lam("ksc$j", Type::Integer, t_j);
    let sum = b.prim(Prim::Sumbuild, vec![n, lam_j]);
    let k = 1 + g.rng.below(2) as usize;
    g.env.push(("ksc$y".into(), Type::Float));
    let loop_ = with_var(g, "ksc$i", Type::Integer, |g| {
        let t_i = term(b, "ksc$i");
        let c = g.expr(b, &Type::Float, 1);
        let r = match g.rng.below(4) {
            0 => b.prim(Prim::TsScale, vec![t_i, c]),
            1 => call(b, "mul", ff(), Type::Float, vec![c, t_i]),
            2 => call(b, "div", ff(), Type::Float, vec![t_i, c]),
            _ => call(b, "neg", Type::Float, Type::Float, vec![t_i]),
        };
        g.env.push(("ksc$r".into(), Type::Float));
        let parts: Vec<ExprId> = (0..k)
            .map(|_| {
                let rv = b.var("ksc$r", Type::Float);
                let c2 = g.expr(b, &Type::Float, 1);
                match g.rng.below(5) {
                    0 => rv,
                    1 => b.prim(Prim::TsScale, vec![c2, rv]),
                    2 => call(b, "mul", ff(), Type::Float, vec![rv, c2]),
                    // Not linear in one term.
                    3 => {
                        let rv2 = b.var("ksc$r", Type::Float);
                        call(b, "mul", ff(), Type::Float, vec![rv, rv2])
                    }
                    _ => call(b, "add", ff(), Type::Float, vec![rv, c2]),
                }
            })
            .collect();
        let a = g.expr(b, &Type::Float, 2);
        g.env.pop();
        let sum_part = b.tuple(parts);
        let pair = b.tuple(vec![a, sum_part]);
        let body = b.let_("ksc$r", r, pair);
        let lam_i = b.lam("ksc$i", Type::Integer, body);
        let zeros: Vec<ExprId> = (0..k).map(|_| b.float(0.0)).collect();
        let z = b.tuple(zeros);
        b.prim(Prim::BuildSum, vec![n, z, lam_i])
    });
    let ty = b.ty(loop_);
    let use_ = {
        let cv = b.var("ksc$c", ty.clone());
        let elems = b.prim(Prim::Get { index: 1, arity: 2 }, vec![cv]);
        let total = b.prim(Prim::Sum, vec![elems]);
        (1..=k as u32).fold(total, |acc, j| {
            let cv = b.var("ksc$c", ty.clone());
            let sums = b.prim(Prim::Get { index: 2, arity: 2 }, vec![cv]);
            let sj = b.prim(Prim::Get { index: j, arity: k as u32 }, vec![sums]);
            call(b, "add", ff(), Type::Float, vec![acc, sj])
        })
    };
    let mut body = b.let_("ksc$c", loop_, use_);
    g.env.pop();
    // What T reads, sometimes bound again between the sum and the loop.
    if g.rng.chance(20) {
        let (name, ty) = g.rng.pick(&[("x", Type::Float), ("y", Type::Float), ("v", vf())]).clone();
        let other = g.expr(b, &ty, 1);
        body = b.let_(name, other, body);
    }
    b.let_("ksc$y", sum, body)
}

pub(super) const FOLD_INVARIANT_ELEMENT: CoreRule = CoreRule {
    name: "fold-invariant-element",
    statement: "fold (lam p s) a (build n (lam i (tuple e1 .. ek))) ⇒ fold (lam q (let p = \
        (tuple (get$1$2 q) (tuple .. ej ..)) in s)) a (build n (lam i e')) for the components \
        ej without i and effect (e' the others, read from get$2$2 q)",
    group: VEC,
    head: Head::Prim(Prim::Fold),
    rewrite: fold_invariant_element,
    instance: fold_invariant_element_instance,
};

/// `fold (lam (p : Tuple A (Tuple B1 .. Bk)) s) a (build n (lam (i :
/// Integer) (tuple e1 .. ek)))`: the components `ej` that do not mention
/// `i` and have no effect move into the step (each was evaluated once per
/// element, now once per step), and the fold runs over a build of the
/// others (one: itself; more: their tuple, read through `q`, fresh):
/// `fold (lam (q : Tuple A B') (let (p (tuple (get$1$2 q) (tuple .. ej ..
/// (get$r$m (get$2$2 q)) ..))) s)) a (build n (lam i e'))`. Forward mode
/// folds over (element, tangent) pairs whose tangent is a known zero; in
/// the step, the zero then annihilates what it scales.
fn fold_invariant_element(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [f, a, v] = prim_args(ctx, e, Prim::Fold)?[..] else { return None };
    let (p, pty, step) = lam_parts(ctx, f)?;
    let [n, g] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    let (i, ity, elem) = lam_parts(ctx, g)?;
    let Expr::Tuple(es) = ctx.expr(elem).clone() else { return None };
    let Type::Tuple(ab) = pty.clone() else { return None };
    if ity != Type::Integer || ab.len() != 2 {
        return None;
    }
    let invariant: Vec<bool> = es.iter().map(|&x| !ctx.is_free(&i, x) && ctx.pure(x)).collect();
    let kept: Vec<ExprId> = es.iter().zip(&invariant).filter(|(_, &inv)| !inv).map(|(&x, _)| x).collect();
    if kept.is_empty() || kept.len() == es.len() {
        return None;
    }
    let m = kept.len() as u32;
    let elem2 = if m == 1 { kept[0] } else { ctx.b.tuple(kept) };
    let elem_ty = ctx.ty(elem2);
    let g2 = lam(ctx, &i, &ity, elem2);
    let v2 = ctx.prim(Prim::Build, vec![n, g2])?;
    let q = ctx.fresh_like(&p);
    let q_ty = Type::Tuple(vec![ab[0].clone(), elem_ty.clone()]);
    let get = |ctx: &mut Ctx, x: ExprId, k: u32, n: u32| ctx.prim(Prim::Get { index: k, arity: n }, vec![x]);
    let mut parts = Vec::new();
    let mut r = 0;
    for (&x, inv) in es.iter().zip(invariant) {
        if inv {
            parts.push(x);
            continue;
        }
        r += 1;
        let qv = ctx.alloc(Expr::Var(q.clone()), q_ty.clone());
        let y = get(ctx, qv, 2, 2)?;
        parts.push(if m == 1 { y } else { get(ctx, y, r, m)? });
    }
    let qv = ctx.alloc(Expr::Var(q.clone()), q_ty.clone());
    let acc = get(ctx, qv, 1, 2)?;
    let x = ctx.b.tuple(parts);
    let pv = ctx.b.tuple(vec![acc, x]);
    let body = let_(ctx, Pat::Var(p), pv, step);
    let f2 = lam(ctx, &q, &q_ty, body);
    ctx.prim(Prim::Fold, vec![f2, a, v2])
}

fn fold_invariant_element_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // A fold over a build of 2 or 3 Floats per element, each
    // mentioning the build's index or not (the rule moves those
    // that do not, if pure, into the step; an element without the
    // index could read an outer variable the step's pattern shadows).
    let n = g.size(b, 1);
    let k = 2 + g.rng.below(2) as usize;
    let comps: Vec<ExprId> = (0..k)
        .map(|_| {
            if g.rng.chance(50) {
                with_var(g, "ksc$idx", Type::Integer, |g| {
                    let i = b.var("ksc$idx", Type::Integer);
                    let x = g.expr(b, &Type::Float, 2);
                    let fi = call(b, "to_float", Type::Integer, Type::Float, vec![i]);
                    call(b, "add", ff(), Type::Float, vec![x, fi])
                })
            } else {
                g.expr(b, &Type::Float, 2)
            }
        })
        .collect();
    let elem = b.tuple(comps);
    let lam = b.lam("ksc$idx", Type::Integer, elem);
    let v = b.prim(Prim::Build, vec![n, lam]);
    let xs_ty = Type::Tuple(vec![Type::Float; k]);
    let p_ty = Type::Tuple(vec![Type::Float, xs_ty.clone()]);
    let (p, acc, xs) = (g.name(), g.name(), "ksc$xs".to_string());
    let names: Vec<String> = (1..=k).map(|j| format!("x{j}")).collect();
    let step = with_var(g, &p, p_ty.clone(), |g| {
        with_var(g, &acc, Type::Float, |g| {
            with_var(g, &xs, xs_ty.clone(), |g| {
                for x in &names {
                    g.env.push((x.clone(), Type::Float));
                }
                let body = g.expr(b, &Type::Float, 3);
                g.env.truncate(g.env.len() - k);
                let refs: Vec<&str> = names.iter().map(|x| x.as_str()).collect();
                let xsv = b.var(&xs, xs_ty.clone());
                let body = let_tuple(b, &refs, xsv, body);
                let pv = b.var(&p, p_ty.clone());
                let_tuple(b, &[&acc, &xs], pv, body)
            })
        })
    });
    let f = b.lam(&p, p_ty, step);
    let a = g.expr(b, &Type::Float, 1);
    b.prim(Prim::Fold, vec![f, a, v])
}
