//! Vectors: `index`, `size` and `sum` of vectors written out as `build`,
//! `constVec`, `deltaVec` or `sumbuild`, and `build`s that are a known vector
//! or a constant one.

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, numeric_leaves};
use ksc_ir::{Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type, Var};

use super::heuristics::trivial;
use super::instances::{call, ff, vf, with_var, G};
use super::{cannot_fail, index_in_range, int_lit, lam, lam_parts, let_, prim_args, CoreRule, Head, VEC};
use crate::rule::Ctx;

pub(super) const INDEX_BUILD: CoreRule = CoreRule {
    name: "index-build",
    statement: "index i (build n (lam j e)) ⇒ let j = i in e when n and e have no effect",
    group: VEC,
    head: Head::Prim(Prim::Index),
    rewrite: index_build,
    instance: index_build_instance,
};

/// `index i (build n (lam j e)) ⇒ let j = i in e` when `n` and `e` have no effect.
fn index_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [i, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    let (j, _, body) = lam_parts(ctx, f)?;
    if !ctx.pure(n) || !ctx.pure(body) {
        return None;
    }
    Some(let_(ctx, Pat::Var(j), i, body))
}

fn index_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
    let i = g.expr(b, &Type::Integer, 1);
    b.prim(Prim::Index, vec![i, v])
}

pub(super) const GET_INDEX_LET_BUILD: CoreRule = CoreRule {
    name: "get-index-let-build",
    statement: "get$k$n (index i x) ⇒ let j = i in ek (with the lets it needs) when a let in \
        scope binds x = build m (lam j (let .. in (tuple e1 .. en))), i has no effect and ek \
        is a few reads and arithmetic meaning the same here",
    group: VEC,
    head: Head::AnyCall,
    rewrite: get_index_let_build,
    instance: get_index_let_build_instance,
};

/// `get$k$n (index i x) ⇒ let j = i in (the lets it needs) ek` when a `let`
/// in scope binds `x = build m (lam j (let .. in (tuple e1 .. en)))`, `i`
/// has no effect, and `ek` and the lets it needs are [`trivial`] and mean
/// here what they meant at the `let` (their free variables are not bound
/// again in between). Reverse mode makes such vectors of tuples (each
/// element's parts of a loop's cotangents) and reads each part in a loop of
/// its own: the part is computed where it is read (often a read of another
/// vector), not loaded from the strided tuples, which are then dead.
fn get_index_let_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Get { index, arity }), a) = ctx.expr(e).clone() else { return None };
    let [i, x] = prim_args(ctx, a, Prim::Index)?[..] else { return None };
    let Expr::Var(xn) = ctx.expr(x).clone() else { return None };
    let (pos, binding) = ctx.scope.lookup(&xn)?;
    let value = binding.value?;
    let [_, f] = prim_args(ctx, value, Prim::Build)?[..] else { return None };
    let (j, _, body) = lam_parts(ctx, f)?;
    let (lets, inner) = term::let_chain(ctx.b.body, body);
    let Expr::Tuple(es) = ctx.expr(inner).clone() else { return None };
    if es.len() != arity as usize || index == 0 || index > arity || !ctx.pure(i) {
        return None;
    }
    let ek = es[index as usize - 1];
    if !trivial(ctx, ek) {
        return None;
    }
    // The lets ek needs, innermost first: each trivial, with a variable.
    let mut need: Vec<Var> = ctx.cache.free_vars(ctx.b.body, ek).to_vec();
    let mut kept = Vec::new();
    for (p, r) in lets.iter().rev() {
        let Pat::Var(v) = p else { return None };
        if need.contains(v) {
            if !trivial(ctx, *r) {
                return None;
            }
            need.retain(|w| w != v);
            need.extend(ctx.cache.free_vars(ctx.b.body, *r).iter().cloned());
            kept.push((p.clone(), *r));
        }
    }
    // Free variables other than j must mean what they meant at the let.
    if need.iter().any(|v| *v != j && ctx.scope.lookup(v).is_some_and(|(p, _)| p >= pos)) {
        return None;
    }
    let copies = kept.into_iter().rev().map(|(p, r)| (p, term::deep_copy(ctx.b, r))).collect();
    let ek = term::deep_copy(ctx.b, ek);
    let t = term::wrap(ctx.b, copies, ek);
    Some(let_(ctx, Pat::Var(j), i, t))
}

fn get_index_let_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = build n (lam j (let r = e in (tuple p q))) in get$k (index i x),
    // one component a trivial read of r.
    let n = g.size(b, 1);
    let j = g.name();
    let f = with_var(g, &j, Type::Integer, |g| {
        let r = g.expr(b, &Type::Float, 1);
        let t = with_var(g, "r", Type::Float, |g| {
            let rv = b.var("r", Type::Float);
            let p = if g.rng.chance(50) {
                rv
            } else {
                let k = g.lit_float(b);
                G::fun(b, "mul", ff(), Type::Float, vec![rv, k])
            };
            let q = g.expr(b, &Type::Float, 2);
            b.tuple(if g.rng.chance(50) { vec![p, q] } else { vec![q, p] })
        });
        b.let_("r", r, t)
    });
    let lam = b.lam(&j, Type::Integer, f);
    let v = b.prim(Prim::Build, vec![n, lam]);
    let pairs = Type::vec(ff());
    let body = with_var(g, "x", pairs.clone(), |g| {
        let i = g.expr(b, &Type::Integer, 1);
        let xv = b.var("x", pairs);
        let at = b.prim(Prim::Index, vec![i, xv]);
        let k = 1 + g.rng.below(2) as u32;
        b.prim(Prim::Get { index: k, arity: 2 }, vec![at])
    });
    b.let_("x", v, body)
}

pub(super) const SIZE_BUILD: CoreRule = CoreRule {
    name: "size-build",
    statement: "size (build n f) ⇒ n when f's body has no effect",
    group: VEC,
    head: Head::Prim(Prim::Size),
    rewrite: size_build,
    instance: size_build_instance,
};

/// `size (build n f) ⇒ n` when the body of `f` has no effect.
fn size_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    ctx.pure(f).then_some(n)
}

fn size_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
    b.prim(Prim::Size, vec![v])
}

pub(super) const SIZE_CONSTVEC: CoreRule = CoreRule {
    name: "size-constvec",
    statement: "size (constVec n x) ⇒ n when x has no effect",
    group: VEC,
    head: Head::Prim(Prim::Size),
    rewrite: size_constvec,
    instance: size_constvec_instance,
};

/// `size (constVec n x) ⇒ n` when `x` has no effect.
fn size_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, x] = prim_args(ctx, v, Prim::ConstVec)?[..] else { return None };
    ctx.pure(x).then_some(n)
}

fn size_constvec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let x = g.expr(b, &Type::Float, 2);
    let v = b.prim(Prim::ConstVec, vec![n, x]);
    b.prim(Prim::Size, vec![v])
}

pub(super) const SIZE_SUMBUILD: CoreRule = CoreRule {
    name: "size-sumbuild",
    statement: "size (sumbuild n (lam i e)) ⇒ let i = 0 in size e when n and e have no effect",
    group: VEC,
    head: Head::Prim(Prim::Size),
    rewrite: size_sumbuild,
    instance: size_sumbuild_instance,
};

/// `size (sumbuild n (lam i e)) ⇒ let i = 0 in size e` when `n` and `e`
/// have no effect: the elements a sumbuild adds have one size (reverse mode
/// asks for the size of a primal sumbuild of vectors to shape its
/// cotangent, and would otherwise compute the whole sum for it).
fn size_sumbuild(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(n) || !ctx.pure(body) {
        return None;
    }
    let zero = ctx.alloc(Expr::Lit(Lit::Integer(0)), Type::Integer);
    let s = ctx.prim(Prim::Size, vec![body])?;
    Some(let_(ctx, Pat::Var(i), zero, s))
}

fn size_sumbuild_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let i = g.name();
    let body = with_var(g, &i, Type::Integer, |g| g.expr(b, &vf(), 2));
    let lam = b.lam(&i, Type::Integer, body);
    let v = b.prim(Prim::Sumbuild, vec![n, lam]);
    b.prim(Prim::Size, vec![v])
}

pub(super) const SIZE_DELTAVEC: CoreRule = CoreRule {
    name: "size-deltavec",
    statement: "size (deltaVec n i x) ⇒ n when i and x have no effect",
    group: VEC,
    head: Head::Prim(Prim::Size),
    rewrite: size_deltavec,
    instance: size_deltavec_instance,
};

/// `size (deltaVec n i x) ⇒ n` when `i` and `x` have no effect.
fn size_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, i, x] = prim_args(ctx, v, Prim::DeltaVec)?[..] else { return None };
    (ctx.pure(i) && ctx.pure(x)).then_some(n)
}

fn size_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (n, i, x) = (g.size(b, 1), g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Float, 2));
    let v = b.prim(Prim::DeltaVec, vec![n, i, x]);
    b.prim(Prim::Size, vec![v])
}

pub(super) const SIZE_SCAN: CoreRule = CoreRule {
    name: "size-scan",
    statement: "size ($scanBlocks f e v) ⇒ size v, size ($scan f e v) ⇒ size v + 1 when f and e have no effect",
    group: VEC,
    head: Head::Prim(Prim::Size),
    rewrite: size_scan,
    instance: size_scan_instance,
};

/// `size ($scanBlocks f e v) ⇒ size v` and `size ($scan f e v) ⇒
/// size v + 1` when `f` and `e` have no effect (a scan keeps an
/// accumulator per element, and `$scan` the first too): reverse mode asks
/// for the size of a primal scan to shape its cotangent, and would
/// otherwise compute the scan for it.
fn size_scan(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let (p, args) = match ctx.expr(v) {
        Expr::Call(Callee::Prim(p @ (Prim::Scan | Prim::ScanBlocks)), _) => (*p, prim_args(ctx, v, *p)?),
        _ => return None,
    };
    let [f, init, vec] = args[..] else { return None };
    if !ctx.pure(f) || !ctx.pure(init) {
        return None;
    }
    let n = ctx.prim(Prim::Size, vec![vec])?;
    if p == Prim::ScanBlocks {
        return Some(n);
    }
    let one = ctx.alloc(Expr::Lit(Lit::Integer(1)), Type::Integer);
    let pair = Type::Tuple(vec![Type::Integer, Type::Integer]);
    let arg = ctx.alloc(Expr::Tuple(vec![n, one]), pair.clone());
    Some(ctx.alloc(Expr::Call(Callee::Fun(FunName::typed("add", pair)), arg), Type::Integer))
}

fn size_scan_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
    let op = *g.rng.pick(&["add", "mul", "max"]);
    let p = g.name();
    let (x, y) = (b.var(&p, ff()), b.var(&p, ff()));
    let (x, y) = (b.prim(Prim::Get { index: 1, arity: 2 }, vec![x]), b.prim(Prim::Get { index: 2, arity: 2 }, vec![y]));
    let body = call(b, op, ff(), Type::Float, vec![x, y]);
    let lam = b.lam(&p, ff(), body);
    let init = g.lit_float(b);
    let scan = if g.rng.chance(50) { Prim::ScanBlocks } else { Prim::Scan };
    let s = b.prim(scan, vec![lam, init, v]);
    b.prim(Prim::Size, vec![s])
}

pub(super) const INDEX_CONSTVEC: CoreRule = CoreRule {
    name: "index-constvec",
    statement: "index i (constVec n x) ⇒ x when i and n have no effect",
    group: VEC,
    head: Head::Prim(Prim::Index),
    rewrite: index_constvec,
    instance: index_constvec_instance,
};

/// `index i (constVec n x) ⇒ x` when `i` and `n` have no effect.
fn index_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [i, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let [n, x] = prim_args(ctx, v, Prim::ConstVec)?[..] else { return None };
    (ctx.pure(i) && ctx.pure(n)).then_some(x)
}

fn index_constvec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let x = g.expr(b, &Type::Float, 2);
    let v = b.prim(Prim::ConstVec, vec![n, x]);
    let i = g.expr(b, &Type::Integer, 1);
    b.prim(Prim::Index, vec![i, v])
}

pub(super) const INDEX_DELTAVEC: CoreRule = CoreRule {
    name: "index-deltavec",
    statement: "index j (deltaVec n i x) ⇒ if (eq i j) x 0.0 for a Float x, when j, n, i and x have no effect",
    group: VEC,
    head: Head::Prim(Prim::Index),
    rewrite: index_deltavec,
    instance: index_deltavec_instance,
};

/// A one-hot read at `j` is its value where `j` is its position (see
/// [`INDEX_DELTAVEC`]; like `index-constvec`, the read's range check goes):
/// forward mode over one-hot directions reads its tangents so, and the
/// iteration rule `sumbuild-one-hot` then takes the sums over them away.
fn index_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [j, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let [n, i, x] = prim_args(ctx, v, Prim::DeltaVec)?[..] else { return None };
    if ctx.ty(x) != Type::Float || ctx.ty(j) != Type::Integer || ![j, n, i, x].into_iter().all(|y| ctx.pure(y)) {
        return None;
    }
    let c = ctx.prim(Prim::Eq, vec![i, j])?;
    let z = ctx.b.float(0.0);
    Some(ctx.alloc(Expr::If(c, x, z), Type::Float))
}

fn index_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let (i, x) = (g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Float, 2));
    let v = b.prim(Prim::DeltaVec, vec![n, i, x]);
    let j = g.expr(b, &Type::Integer, 1);
    b.prim(Prim::Index, vec![j, v])
}

pub(super) const SUM_BUILD: CoreRule = CoreRule {
    name: "sum-build",
    statement: "sum (build n f) ⇒ sumbuild n f",
    group: VEC,
    head: Head::Prim(Prim::Sum),
    rewrite: sum_build,
    instance: sum_build_instance,
};

/// `sum (build n f) ⇒ sumbuild n f`.
fn sum_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Sum)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    ctx.prim(Prim::Sumbuild, vec![n, f])
}

fn sum_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
    b.prim(Prim::Sum, vec![v])
}

pub(super) const SUM_DELTAVEC: CoreRule = CoreRule {
    name: "sum-deltavec",
    statement: "sum (deltaVec n i e) ⇒ e when i is known to be in 0..n and e is made of \
        numbers",
    group: VEC,
    head: Head::Prim(Prim::Sum),
    rewrite: sum_deltavec,
    instance: sum_deltavec_instance,
};

/// `sum (deltaVec n i e) ⇒ e` when `i` is known to lie in `0 .. n` and the elements are numbers.
fn sum_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Sum)?[0];
    let [n, i, x] = prim_args(ctx, v, Prim::DeltaVec)?[..] else { return None };
    if !numeric_leaves(&ctx.ty(x)) || !ctx.pure(n) || !ctx.pure(i) || !index_in_range(ctx, i, n) {
        return None;
    }
    Some(x)
}

fn sum_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    if g.rng.chance(30) {
        let n = b.integer(3);
        let i = b.integer(g.rng.below(3) as i64);
        let x = g.expr(b, &Type::Float, 2);
        let d = b.prim(Prim::DeltaVec, vec![n, i, x]);
        return b.prim(Prim::Sum, vec![d]);
    }
    // build n (lam i (sum (deltaVec n i e))): i is in range.
    let n = g.size(b, 1);
    let n2 = term::deep_copy(b, n);
    let i = g.name();
    let body = with_var(g, &i, Type::Integer, |g| {
        let iv = b.var(&i, Type::Integer);
        let x = g.expr(b, &Type::Float, 2);
        let d = b.prim(Prim::DeltaVec, vec![n2, iv, x]);
        b.prim(Prim::Sum, vec![d])
    });
    let lam = b.lam(&i, Type::Integer, body);
    b.prim(Prim::Build, vec![n, lam])
}

pub(super) const SUMBUILD_DELTAVEC: CoreRule = CoreRule {
    name: "sumbuild-deltavec",
    statement: "sumbuild n (lam i (deltaVec n i e)) ⇒ build n (lam i e) when e is made of \
        numbers",
    group: VEC,
    head: Head::Prim(Prim::Sumbuild),
    rewrite: sumbuild_deltavec,
    instance: sumbuild_deltavec_instance,
};

/// `sumbuild n (lam i (deltaVec n i e)) ⇒ build n (lam i e)` when the elements are numbers (the two
/// n alike, i not free in the inner n).
fn sumbuild_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    let [m, j, x] = prim_args(ctx, body, Prim::DeltaVec)?[..] else { return None };
    if !matches!(ctx.expr(j), Expr::Var(w) if *w == i) || ctx.is_free(&i, m) || !ctx.alpha_eq(n, m) || !ctx.pure(m) {
        return None;
    }
    if !numeric_leaves(&ctx.ty(x)) {
        return None;
    }
    let l = lam(ctx, &i, &ity, x);
    ctx.prim(Prim::Build, vec![n, l])
}

fn sumbuild_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    let n2 = term::deep_copy(b, n);
    let i = g.name();
    let body = with_var(g, &i, Type::Integer, |g| {
        let iv = b.var(&i, Type::Integer);
        let x = g.expr(b, &Type::Float, 2);
        b.prim(Prim::DeltaVec, vec![n2, iv, x])
    });
    let lam = b.lam(&i, Type::Integer, body);
    b.prim(Prim::Sumbuild, vec![n, lam])
}

pub(super) const BUILD_INDEX_SAME: CoreRule = CoreRule {
    name: "build-index-same",
    statement: "build n (lam q (index q v)) ⇒ v for a variable v whose size is known to be n \
        (n is size v, a variable bound to size v, or the size v's let built it with)",
    group: VEC,
    head: Head::Prim(Prim::Build),
    rewrite: build_index_same,
    instance: build_index_same_instance,
};

/// `build n (lam q (index q v)) ⇒ v` for a vector variable `v` whose size
/// is known to be `n`: `n` is `size v`, or a variable bound to `size v`, or
/// the variable `v`'s `let` gave as its size (reverse mode makes such
/// copies of a loop's cotangent vector).
fn build_index_same(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Build)?[..] else { return None };
    let (q, _, body) = lam_parts(ctx, f)?;
    let [i, v] = prim_args(ctx, body, Prim::Index)?[..] else { return None };
    let (Expr::Var(iq), Expr::Var(vn)) = (ctx.expr(i).clone(), ctx.expr(v).clone()) else { return None };
    if iq != q || vn == q || ctx.ty(v) != ctx.ty(e) {
        return None;
    }
    let is_v = |ctx: &Ctx, x: ExprId| matches!(ctx.expr(x), Expr::Var(w) if *w == vn);
    let sized = |ctx: &Ctx, x: ExprId| prim_args(ctx, x, Prim::Size).is_some_and(|a| is_v(ctx, a[0]));
    let same = match ctx.expr(n).clone() {
        _ if sized(ctx, n) => true,
        Expr::Var(nn) => {
            let bound_before = |ctx: &Ctx, x: &str, at: usize| ctx.scope.lookup(x).is_none_or(|(p, _)| p < at);
            // v was made with size n, n meaning the same there as here.
            let made = let_bound_size(ctx, &vn).is_some_and(|(size, at)| {
                matches!(ctx.expr(size), Expr::Var(m) if *m == nn) && bound_before(ctx, &nn, at)
            });
            // n was bound to `size v`, v meaning the same there as here.
            let measured = ctx
                .scope
                .lookup(&nn)
                .and_then(|(p, b)| Some((p, b.value?)))
                .is_some_and(|(p, value)| sized(ctx, value) && bound_before(ctx, &vn, p));
            made || measured
        }
        _ => false,
    };
    same.then_some(v)
}

/// The size a `let` in scope gave the vector variable `v`: `build n ..`,
/// `constVec n ..`, or the first component of a variable bound to
/// `$buildSum n ..`; with the scope position of the binding whose right
/// side holds `n` (its variables mean there what they meant before it).
fn let_bound_size(ctx: &Ctx, v: &str) -> Option<(ExprId, usize)> {
    let (pos, binding) = ctx.scope.lookup(v)?;
    let value = binding.value?;
    if let Some(args) = prim_args(ctx, value, Prim::Build).or_else(|| prim_args(ctx, value, Prim::ConstVec)) {
        return Some((args[0], pos));
    }
    let [pair] = prim_args(ctx, value, Prim::Get { index: 1, arity: 2 })?[..] else { return None };
    let Expr::Var(c) = ctx.expr(pair) else { return None };
    let (cpos, cb) = ctx.scope.lookup(c)?;
    if cpos >= pos {
        return None;
    }
    Some((prim_args(ctx, cb.value?, Prim::BuildSum)?[0], cpos))
}

fn build_index_same_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // A copy of a vector variable at its own indices, its size
    // known three ways: the size its let built it with, a variable
    // bound to its size, or `size v` in place; and (so the side
    // conditions are exercised) sometimes a size that differs, or
    // a variable rebound in between.
    let n0 = g.size(b, 1);
    let e = with_var(g, "ksc$idx", Type::Integer, |g| g.expr(b, &Type::Float, 1));
    let lam = b.lam("ksc$idx", Type::Integer, e);
    let n_var = b.var("ksc$n", Type::Integer);
    let made = b.prim(Prim::Build, vec![n_var, lam]);
    let copy_of = |g: &mut G, b: &mut Builder, size: ExprId| {
        g.build_with(b, size, |g, b| {
            let (i, _) = g.env.last().cloned().unwrap();
            let iv = b.var(&i, Type::Integer);
            let vv = b.var("ksc$v", vf());
            b.prim(Prim::Index, vec![iv, vv])
        })
    };
    g.env.push(("ksc$n".into(), Type::Integer));
    g.env.push(("ksc$v".into(), vf()));
    let body = match g.rng.below(5) {
        0 => {
            let n = b.var("ksc$n", Type::Integer);
            copy_of(g, b, n)
        }
        1 => {
            let vv = b.var("ksc$v", vf());
            let size = b.prim(Prim::Size, vec![vv]);
            let inner = {
                let m = b.var("ksc$m", Type::Integer);
                copy_of(g, b, m)
            };
            b.let_("ksc$m", size, inner)
        }
        2 => {
            let vv = b.var("ksc$v", vf());
            let size = b.prim(Prim::Size, vec![vv]);
            copy_of(g, b, size)
        }
        3 => {
            let other = g.size(b, 1);
            copy_of(g, b, other)
        }
        _ => {
            // n rebound between v's let and the copy.
            let other = g.size(b, 1);
            let inner = {
                let n = b.var("ksc$n", Type::Integer);
                copy_of(g, b, n)
            };
            b.let_("ksc$n", other, inner)
        }
    };
    g.env.pop();
    g.env.pop();
    let with_v = b.let_("ksc$v", made, body);
    b.let_("ksc$n", n0, with_v)
}

pub(super) const BUILD_CONST: CoreRule = CoreRule {
    name: "build-const",
    statement: "build n (lam i e) ⇒ constVec n e when i is not free in e, e has no effect and \
        cannot fail (or n > 0)",
    group: VEC,
    head: Head::Prim(Prim::Build),
    rewrite: build_const,
    instance: build_const_instance,
};

/// `build n (lam i e) ⇒ constVec n e` when `i` is not free in `e`, `e` has no effect, and `e`
/// cannot fail or `n` is a positive literal.
fn build_const(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Build)?[..] else { return None };
    let (i, _, body) = lam_parts(ctx, f)?;
    if ctx.is_free(&i, body) || !ctx.pure(body) {
        return None;
    }
    let positive = match ctx.expr(n).clone() {
        Expr::Lit(Lit::Integer(k)) => k > 0,
        Expr::Tuple(ks) => ks.iter().all(|&k| int_lit(ctx, k).is_some_and(|k| k > 0)),
        _ => false,
    };
    if !positive && !cannot_fail(ctx, body) {
        return None;
    }
    ctx.prim(Prim::ConstVec, vec![n, body])
}

fn build_const_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.size(b, 1);
    // The body does not mention the index.
    let x = g.expr(b, &Type::Float, 2);
    let lam = b.lam("ksc$idx", Type::Integer, x);
    b.prim(Prim::Build, vec![n, lam])
}
