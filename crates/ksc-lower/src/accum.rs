//! In-place accumulation through the structure of an expression.
//!
//! `acc += e` (a term of a `sumbuild`, `sum`, `$buildSum` or `$scanSum` added
//! into its accumulator) does not build the value of `e` first. It looks
//! into `e`:
//!
//! - a tuple adds its components into the accumulator's components, and a
//!   projection `get$i$n` adds that component of its argument;
//! - `if` adds its branches under the condition, `assert` checks and adds
//!   its body, `ts_add a b` adds `a` then `b`;
//! - a `deltaVec` adds into one element (`acc[i] += v`), so does a one-hot
//!   `build n (lam i (if (eq i t) x zero))`, and a `sumbuild` adds each of
//!   its terms (no accumulator of its own is allocated);
//! - a `let` whose variable is only added in (the positions above, at most
//!   once per component, outside any lambda but a one-hot's hit, which is
//!   added once) is left pending
//!   ([`Bound::Pending`]) and its right-hand side is added where the
//!   variable is; a tuple whose components are used differently is bound
//!   component by component ([`Bound::Parts`]); a tuple-valued `if` used at
//!   several components is a join point: the rest of the expression is
//!   copied into both branches (within a size budget), so the condition and
//!   each branch's bindings are evaluated once.
//!
//! An [`Acc::Set`] (the element of a `$buildSum`, the new accumulator of a
//! `$scanSum`) is assigned once, not added into, so it follows only the
//! structure that does not split a value (tuples projected, `if`, `let`).
//!
//! This is what makes reverse mode accumulate cotangents in place: a loop's
//! backward pass returns, per iteration, a tuple of contributions to the
//! outer variables (one-hot vectors, sums of them, branch results bound by
//! `let` and taken apart by projections), and that tuple is never built.
//! Anything else is lowered as a value and added element by element.

use ksc_ir::core::children;
use ksc_ir::{Body, Callee, Expr, ExprId, Pat, Prim, Type};

use crate::builder::FnBuilder;
use crate::ir::*;
use crate::lower::{
    bin, flat_index, in_range, index_lval, index_ops, internal, lval_op, occurs, parts, tensor_ty, tuple_tys, Bound,
    Ctx, FnState, LVal, Lowerer, R,
};
use crate::prims::Acc;

/// A projection: component numbers (from 1), the first applied first.
type Path = Vec<u32>;

/// How an occurrence of a variable is used.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Its value (projected) is added into an accumulator.
    Acc,
    /// Anything else.
    Value,
}

/// A one-hot term's element: a value, or an expression to add in.
enum Term {
    Val(LVal),
    Expr(ExprId),
}

/// The Core expressions that join points may copy in one definition's lowering.
pub(crate) const JOIN_BUDGET: usize = 20_000;
/// The largest rest-of-expression copied into both branches of an `if`.
const JOIN_SIZE: usize = 400;

/// Does evaluating projection `a` overlap evaluating projection `b`?
fn overlap(a: &[u32], b: &[u32]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// `deltaVec n i x` whose arguments are each a scalar computed from atoms
/// by a few primitive or prelude operations: cheap to evaluate at every
/// place it is added (and equal operations there are shared by the
/// builder's hash-consing).
pub(crate) fn cheap_one_hot(body: &Body, r: ExprId) -> bool {
    fn small_scalar(body: &Body, e: ExprId, budget: &mut u32) -> bool {
        if *budget == 0 || !matches!(body.ty(e), Type::Integer | Type::Float) && !ksc_ir::core::is_atomic(body, e) {
            return false;
        }
        *budget -= 1;
        match &body.exprs[e] {
            Expr::Var(_) | Expr::Lit(_) => true,
            Expr::Call(Callee::Prim(Prim::Size), a) => ksc_ir::core::is_atomic(body, *a),
            Expr::Call(Callee::Prim(p), a) if !matches!(p, Prim::Build | Prim::Sumbuild) => match &body.exprs[*a] {
                Expr::Tuple(es) => es.iter().all(|&c| small_scalar(body, c, budget)),
                _ => small_scalar(body, *a, budget),
            },
            Expr::Call(Callee::Fun(f), a) if ksc_ir::Builtin::resolve(f).is_some() => match &body.exprs[*a] {
                Expr::Tuple(es) => es.iter().all(|&c| small_scalar(body, c, budget)),
                _ => small_scalar(body, *a, budget),
            },
            _ => false,
        }
    }
    match &body.exprs[r] {
        Expr::Call(Callee::Prim(Prim::DeltaVec), a) => match &body.exprs[*a] {
            Expr::Tuple(es) if es.len() == 3 => {
                let mut budget = 8;
                es.iter().all(|&c| small_scalar(body, c, &mut budget))
            }
            _ => false,
        },
        _ => false,
    }
}

/// Is every occurrence of `x` in `e` (at least one) the second operand of
/// a `ts_add` of its type, outside any lambda, with `x` not bound again?
pub(crate) fn only_added_into(body: &Body, e: ExprId, x: &str) -> bool {
    let mut uses = 0;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &body.exprs[e] {
            Expr::Var(v) if v == x => return false,
            Expr::Lam(..) if occurs(body, e, x) => return false,
            Expr::Let(p, _, _) if p.vars().iter().any(|v| v == x) => return false,
            _ => {}
        }
        if let Some((a, b)) = same_type_add(body, e) {
            if matches!(&body.exprs[b], Expr::Var(v) if v == x) {
                uses += 1;
                stack.push(a);
                continue;
            }
        }
        stack.extend(children(&body.exprs[e]));
    }
    uses > 0
}

/// Can a value used this way be left pending: only added in, and no part
/// of it twice?
fn deferrable(us: &[(Path, Kind)]) -> bool {
    us.iter().all(|(_, k)| *k == Kind::Acc)
        && us.iter().enumerate().all(|(i, (p, _))| us[i + 1..].iter().all(|(q, _)| !overlap(p, q)))
}

/// The uses of component `k` of a tuple used as `us`.
fn component_uses(us: &[(Path, Kind)], k: u32) -> Vec<(Path, Kind)> {
    us.iter()
        .filter_map(|(p, kind)| match p.split_first() {
            None => Some((Vec::new(), *kind)),
            Some((&j, rest)) if j == k => Some((rest.to_vec(), *kind)),
            Some(_) => None,
        })
        .collect()
}

/// `e` as `get$..(x)`: the projection path, if it is one.
fn alias_path(body: &Body, mut e: ExprId, x: &str) -> Option<Path> {
    let mut path = Vec::new();
    loop {
        match &body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Get { index, .. }), a) => {
                path.push(*index);
                e = *a;
            }
            Expr::Var(v) if v == x => {
                path.reverse();
                return Some(path);
            }
            _ => return None,
        }
    }
}

/// `ts_add a b` whose arguments both have the sum's type.
fn same_type_add(body: &Body, e: ExprId) -> Option<(ExprId, ExprId)> {
    let Expr::Call(Callee::Prim(Prim::TsAdd), a) = &body.exprs[e] else { return None };
    let Expr::Tuple(es) = &body.exprs[*a] else { return None };
    let [x, y] = es[..] else { return None };
    (body.ty(x) == body.ty(e) && body.ty(y) == body.ty(e)).then_some((x, y))
}

/// Is `e` a zero written out: `0.0`, `constVec n zero`, `build n (lam i
/// zero)`, or a tuple of zeros? (Adding one changes nothing but the sign
/// of a zero.)
fn is_zero(body: &Body, e: ExprId) -> bool {
    match &body.exprs[e] {
        Expr::Lit(ksc_ir::Lit::Float(x)) => *x == 0.0,
        Expr::Lit(ksc_ir::Lit::Integer(0)) => true,
        Expr::Tuple(es) => es.iter().all(|&c| is_zero(body, c)),
        Expr::Call(Callee::Prim(Prim::ConstVec | Prim::Build), a) => match &body.exprs[*a] {
            Expr::Tuple(es) if es.len() == 2 => match &body.exprs[es[1]] {
                Expr::Lam(_, _, z) => is_zero(body, *z),
                _ => is_zero(body, es[1]),
            },
            _ => false,
        },
        _ => false,
    }
}

/// The arguments of a one-hot `build n (lam i (if (eq i at) hit zero))` of
/// a vector (either side of `eq`, `at` not mentioning `i`): `(n, i, at, hit,
/// zero)`.
fn one_hot_build(body: &Body, a: ExprId) -> Option<(ExprId, String, ExprId, ExprId, ExprId)> {
    let (n, i, b) = crate::prims::build_lambda(body, a)?;
    let Expr::If(c, hit, miss) = &body.exprs[b] else { return None };
    let Expr::Call(Callee::Prim(Prim::Eq), args) = &body.exprs[*c] else { return None };
    let Expr::Tuple(xy) = &body.exprs[*args] else { return None };
    let [x, y] = xy[..] else { return None };
    let is_i = |e: ExprId| matches!(&body.exprs[e], Expr::Var(v) if v == i);
    let at = if is_i(x) {
        y
    } else if is_i(y) {
        x
    } else {
        return None;
    };
    (!occurs(body, at, i) && is_zero(body, *miss)).then(|| (n, i.clone(), at, *hit, *miss))
}

/// The arguments of a prefix `build n (lam i (if (lt i k) hit zero))` of a
/// vector (`k` a variable other than `i`, or a literal: it is read once
/// before the loop, and reading it cannot fail): `(n, i, k, hit)`. Reverse
/// mode makes these when a loop reads the first k elements of a vector.
fn prefix_build(body: &Body, a: ExprId) -> Option<(ExprId, String, ExprId, ExprId)> {
    let (n, i, b) = crate::prims::build_lambda(body, a)?;
    let Expr::If(c, hit, miss) = &body.exprs[b] else { return None };
    let k = crate::prims::below(body, i, *c)?;
    is_zero(body, *miss).then(|| (n, i.clone(), k, *hit))
}

/// Component `k` (from 1) of a tuple type.
fn component_ty(t: &Type, k: u32) -> R<Type> {
    match tuple_tys(t)?.get((k as usize).wrapping_sub(1)) {
        Some(c) => Ok(c.clone()),
        None => internal("a projection out of range"),
    }
}

impl Lowerer<'_> {
    /// The occurrences of `x` in `e` and how they are used, when the value
    /// of `e`, projected by `proj`, is added into an accumulator (`acc`) or
    /// used otherwise. Components of `if` branches are merged (only one
    /// branch runs).
    fn uses_of(&self, ctx: &Ctx, e: ExprId, x: &str, proj: &[u32], acc: bool) -> Vec<(Path, Kind)> {
        let body = self.body(ctx);
        if !occurs(body, e, x) {
            return Vec::new();
        }
        let kind = if acc { Kind::Acc } else { Kind::Value };
        match &body.exprs[e] {
            Expr::Var(_) => vec![(proj.to_vec(), kind)],
            Expr::Call(Callee::Prim(Prim::Get { index, .. }), a) => {
                let mut p = vec![*index];
                p.extend_from_slice(proj);
                self.uses_of(ctx, *a, x, &p, acc)
            }
            Expr::Tuple(es) => match proj.split_first() {
                Some((&k, rest)) if k >= 1 && (k as usize) <= es.len() => {
                    if acc {
                        return self.uses_of(ctx, es[k as usize - 1], x, rest, true);
                    }
                    let mut u = Vec::new();
                    for (i, &c) in es.iter().enumerate() {
                        let r: &[u32] = if i + 1 == k as usize { rest } else { &[] };
                        u.extend(self.uses_of(ctx, c, x, r, false));
                    }
                    u
                }
                _ => es.iter().flat_map(|&c| self.uses_of(ctx, c, x, &[], acc)).collect(),
            },
            Expr::If(c, t, f) => {
                let mut u = self.uses_of(ctx, *c, x, &[], false);
                u.extend(self.uses_of(ctx, *t, x, proj, acc));
                for q in self.uses_of(ctx, *f, x, proj, acc) {
                    if !u.contains(&q) {
                        u.push(q);
                    }
                }
                u
            }
            Expr::Assert(c, n, _) => {
                let mut u = self.uses_of(ctx, *c, x, &[], false);
                u.extend(self.uses_of(ctx, *n, x, proj, acc));
                u
            }
            Expr::Let(pat, r, n) => {
                let mut u =
                    if pat.vars().iter().any(|v| v == x) { Vec::new() } else { self.uses_of(ctx, *n, x, proj, acc) };
                if occurs(body, *r, x) {
                    match (pat, alias_path(body, *r, x)) {
                        // `let y = get$..(x)`: y's uses are uses of x.
                        (Pat::Var(y), Some(ap)) => {
                            for (q, k) in self.uses_of(ctx, *n, y, proj, acc) {
                                u.push(([ap.as_slice(), q.as_slice()].concat(), k));
                            }
                        }
                        _ => u.extend(self.uses_of(ctx, *r, x, &[], false)),
                    }
                }
                u
            }
            // A one-hot `build`'s hit is added in where the index is (once).
            Expr::Call(Callee::Prim(Prim::Build), a)
                if acc && proj.is_empty() && one_hot_build(body, *a).is_some_and(|(_, i, ..)| i != x) =>
            {
                let (n, _, at, hit, zero) = one_hot_build(body, *a).expect("a one-hot build");
                let mut u = self.uses_of(ctx, hit, x, &[], true);
                // (The zero too: a build lowered as a value evaluates it.)
                for c in [n, at, zero] {
                    u.extend(self.uses_of(ctx, c, x, &[], false));
                }
                u
            }
            _ => match same_type_add(body, e) {
                Some((a, b)) if acc => {
                    let mut u = self.uses_of(ctx, a, x, proj, true);
                    u.extend(self.uses_of(ctx, b, x, proj, true));
                    u
                }
                _ => children(&body.exprs[e]).into_iter().flat_map(|c| self.uses_of(ctx, c, x, &[], false)).collect(),
            },
        }
    }

    /// What to bind a pure `r` to, given its variable's uses `us`: pending
    /// if it is only added in (and each use evaluates only its own part of
    /// it), component by component if it is a tuple; `None` if it is to be
    /// evaluated now.
    fn bind_deferred(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        r: ExprId,
        us: &[(Path, Kind)],
    ) -> R<Option<Bound>> {
        if self.has_effect(ctx, r) {
            return Ok(None);
        }
        let body = self.body(ctx);
        // Projecting these evaluates only the part projected.
        let splits = matches!(body.exprs[r], Expr::Tuple(_) | Expr::Var(_) | Expr::Lit(_))
            || matches!(&body.exprs[r], Expr::Call(Callee::Prim(Prim::Get { .. }), a) if matches!(body.exprs[*a], Expr::Var(_)));
        if deferrable(us) && (us.len() <= 1 || splits) {
            return Ok(Some(Bound::Pending(r, ctx.clone())));
        }
        // A cheap one-hot only added in is added where each use is (at one
        // element each time), even where it is added twice (`ts_add t t`,
        // reverse mode's `(mul (index i v) (index i v))`): made, it costs a
        // vector of its size per evaluation (a loop's step reading its
        // scope at an index of its state was quadratic).
        if us.iter().all(|(_, k)| *k == Kind::Acc) && cheap_one_hot(body, r) {
            return Ok(Some(Bound::Pending(r, ctx.clone())));
        }
        // `let p = r2 in inner` with a part only added in: p bound here
        // (deferred as its own uses allow), for the parts of `inner` to see.
        let some_added = us.iter().any(|(_, k)| *k == Kind::Acc);
        if let (Expr::Let(pat, r2, inner), true) = (body.exprs[r].clone(), some_added) {
            let ctx2 = match &pat {
                Pat::Var(z) => {
                    let mut uz = Vec::new();
                    for (q, k) in us {
                        uz.extend(self.uses_of(ctx, inner, z, q, *k == Kind::Acc));
                    }
                    match self.bind_deferred(fb, st, ctx, r2, &uz)? {
                        Some(bz) => ctx.with_bound(z, bz),
                        None => self.bind_now(fb, st, ctx, &pat, r2, inner)?,
                    }
                }
                Pat::Tuple(_) => self.bind_now(fb, st, ctx, &pat, r2, inner)?,
            };
            return Ok(Some(match self.bind_deferred(fb, st, &ctx2, inner, us)? {
                Some(b) => b,
                None => {
                    let ty = self.type_of(&ctx2, inner)?;
                    let v = self.lower_expr(fb, st, &ctx2, inner)?;
                    Bound::Val(self.force_val(fb, st, v, &ty)?)
                }
            }));
        }
        let Expr::Tuple(es) = body.exprs[r].clone() else { return Ok(None) };
        let mut parts = Vec::new();
        for (i, c) in es.into_iter().enumerate() {
            let ui = component_uses(us, i as u32 + 1);
            parts.push(match self.bind_deferred(fb, st, ctx, c, &ui)? {
                Some(b) => b,
                None => {
                    // Used as a value: computed once, here.
                    let ty = self.type_of(ctx, c)?;
                    let v = self.lower_expr(fb, st, ctx, c)?;
                    Bound::Val(self.force_val(fb, st, v, &ty)?)
                }
            });
        }
        Ok(Some(Bound::Parts(parts)))
    }

    /// `ctx` with `pat` bound to the value of `r` (evaluated now), for `scope`.
    fn bind_now(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        pat: &Pat,
        r: ExprId,
        scope: ExprId,
    ) -> R<Ctx> {
        let ty = self.type_of(ctx, r)?;
        let v = self.lower_expr(fb, st, ctx, r)?;
        self.bind_pat(fb, st, ctx, pat, v, &ty, scope)
    }

    /// `acc += e` in place.
    pub(crate) fn accumulate_expr(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        acc: &Acc,
        e: ExprId,
        site: SiteId,
    ) -> R<()> {
        self.accumulate_proj(fb, st, ctx, acc, e, &[], site)
    }

    /// `acc += proj(e)` in place, looking into `e` (see the module's
    /// documentation).
    #[allow(clippy::too_many_arguments)]
    fn accumulate_proj(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        acc: &Acc,
        e: ExprId,
        proj: &[u32],
        site: SiteId,
    ) -> R<()> {
        let body = self.body(ctx);
        match body.exprs[e].clone() {
            Expr::Var(x) => {
                if let Some(b) = ctx.bound(&x) {
                    if !matches!(b, Bound::Val(_)) {
                        let ty = self.type_of(ctx, e)?;
                        return self.accumulate_bound(fb, st, acc, &b, &ty, proj, site);
                    }
                }
            }
            Expr::Tuple(es) => match proj.split_first() {
                Some((&k, rest)) if k >= 1 && (k as usize) <= es.len() => {
                    return self.accumulate_proj(fb, st, ctx, acc, es[k as usize - 1], rest, site);
                }
                None => {
                    if let Acc::Tuple(accs) = acc {
                        if accs.len() == es.len() {
                            for (a, c) in accs.iter().zip(es) {
                                self.accumulate_proj(fb, st, ctx, a, c, &[], site)?;
                            }
                            return Ok(());
                        }
                    }
                }
                _ => {}
            },
            Expr::Call(Callee::Prim(Prim::Get { index, .. }), a) => {
                let mut p = vec![index];
                p.extend_from_slice(proj);
                return self.accumulate_proj(fb, st, ctx, acc, a, &p, site);
            }
            Expr::If(c, t, f) => {
                let cond = self.lower_expr(fb, st, ctx, c)?;
                let cond = lval_op(&cond)?;
                if let Op::Bool(b) = cond {
                    return self.accumulate_proj(fb, st, ctx, acc, if b { t } else { f }, proj, site);
                }
                return self.emit_branches(fb, st, cond, [t, f], &mut |this, fb, st, branch| {
                    this.accumulate_proj(fb, st, ctx, acc, branch, proj, site)
                });
            }
            Expr::Assert(c, n, _) => {
                let cond = self.lower_expr(fb, st, ctx, c)?;
                let asite = self.site_of(ctx, e);
                match lval_op(&cond)? {
                    Op::Bool(true) => {}
                    Op::Bool(false) => {
                        fb.emit(Stmt::Fail { site: asite, err: ErrorKind::Assert });
                        return Ok(());
                    }
                    cond => fb.emit(Stmt::Check { cond, site: asite, err: ErrorKind::Assert }),
                }
                return self.accumulate_proj(fb, st, ctx, acc, n, proj, site);
            }
            Expr::Let(pat, r, n) => return self.accumulate_let(fb, st, ctx, acc, &pat, r, n, proj, site),
            Expr::Call(Callee::Prim(Prim::DeltaVec), a) if proj.is_empty() => {
                if let (Acc::Tensor(arr, t), Expr::Tuple(es)) = (acc, &body.exprs[a]) {
                    if let [n, i, v] = es[..] {
                        return self.accumulate_delta(fb, st, ctx, arr, t, e, [n, i, v], site);
                    }
                }
            }
            Expr::Call(Callee::Prim(Prim::Build), a) if proj.is_empty() => {
                if let (Acc::Tensor(arr, t), Some((n, i, at, hit, _))) = (acc, one_hot_build(body, a)) {
                    return self.accumulate_one_hot(fb, st, ctx, arr, t, (n, i, at, hit), site);
                }
                if let (Acc::Tensor(arr, t), Some((n, i, k, hit))) = (acc, prefix_build(body, a)) {
                    return self.accumulate_prefix(fb, st, ctx, arr, t, (n, i, k, hit), site);
                }
            }
            Expr::Call(Callee::Prim(Prim::Sumbuild), a)
                if proj.is_empty() && !matches!(acc, Acc::Keep(_) | Acc::Set(..)) =>
            {
                if let Expr::Tuple(es) = &body.exprs[a] {
                    if let [n, lam] = es[..] {
                        if let Expr::Lam(i, _, term) = body.exprs[lam].clone() {
                            let ssite = self.site_of(ctx, e);
                            let n = self.lower_expr(fb, st, ctx, n)?;
                            let dims = index_ops(&n)?;
                            self.sizes_check(fb, &dims, "sumbuild", ssite);
                            let total = self.count_sat_of(fb, &dims);
                            match bin(fb, BinOp::IGt, total, Op::Int(0)) {
                                Op::Bool(true) => {}
                                cond => fb.emit(Stmt::Check {
                                    cond,
                                    site: ssite,
                                    err: ErrorKind::SumbuildEmpty { size: dims.clone() },
                                }),
                            }
                            let nest = self.nest_open(fb, &dims);
                            let inner = ctx.with_binding(&i, index_lval(nest.idx()));
                            self.accumulate_proj(fb, st, &inner, acc, term, &[], site)?;
                            self.nest_close(fb, nest);
                            return Ok(());
                        }
                    }
                }
            }
            _ => {
                if let Some((x, y)) = same_type_add(body, e).filter(|_| !matches!(acc, Acc::Set(..))) {
                    self.accumulate_proj(fb, st, ctx, acc, x, proj, site)?;
                    return self.accumulate_proj(fb, st, ctx, acc, y, proj, site);
                }
            }
        }
        // Anything else: its value, added in.
        let ty = self.type_of(ctx, e)?;
        let v = self.lower_expr(fb, st, ctx, e)?;
        self.accumulate_projected(fb, st, acc, v, ty, proj, site)
    }

    /// `acc += proj(v)` for a value `v` of type `ty`.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_projected(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        acc: &Acc,
        mut v: LVal,
        mut ty: Type,
        proj: &[u32],
        site: SiteId,
    ) -> R<()> {
        for &k in proj {
            let n = tuple_tys(&ty)?.len();
            let t = component_ty(&ty, k)?;
            v = parts(fb, v, &ty, n)?.swap_remove(k as usize - 1);
            ty = t;
        }
        self.accumulate_lval(fb, st, acc, v, &ty, site)
    }

    /// `acc += proj(b)` for a bound variable's binding `b` of type `ty`.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_bound(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        acc: &Acc,
        b: &Bound,
        ty: &Type,
        proj: &[u32],
        site: SiteId,
    ) -> R<()> {
        match b {
            Bound::Pending(e, at) => self.accumulate_proj(fb, st, at, acc, *e, proj, site),
            Bound::Parts(ps) => match proj.split_first() {
                Some((&k, rest)) if k >= 1 && (k as usize) <= ps.len() => {
                    let t = component_ty(ty, k)?;
                    self.accumulate_bound(fb, st, acc, &ps[k as usize - 1], &t, rest, site)
                }
                None if matches!(acc, Acc::Tuple(accs) if accs.len() == ps.len()) => {
                    let Acc::Tuple(accs) = acc else { return internal("a tuple accumulator") };
                    for (i, (a, p)) in accs.iter().zip(ps).enumerate() {
                        let t = component_ty(ty, i as u32 + 1)?;
                        self.accumulate_bound(fb, st, a, p, &t, &[], site)?;
                    }
                    Ok(())
                }
                _ => {
                    let v = self.force_bound(fb, st, b)?;
                    self.accumulate_projected(fb, st, acc, v, ty.clone(), proj, site)
                }
            },
            Bound::Val(v) => self.accumulate_projected(fb, st, acc, v.clone(), ty.clone(), proj, site),
        }
    }

    /// The value of `get$..(x)` when `x` is bound component by component:
    /// only the component used is evaluated. `None` for other expressions.
    pub(crate) fn lower_part(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, e: ExprId) -> R<Option<LVal>> {
        let body = self.body(ctx);
        let mut cur = e;
        while let Expr::Call(Callee::Prim(Prim::Get { .. }), a) = &body.exprs[cur] {
            cur = *a;
        }
        let Expr::Var(x) = &body.exprs[cur] else { return Ok(None) };
        let Some(mut b) = ctx.bound(x).filter(|b| matches!(b, Bound::Parts(_))) else { return Ok(None) };
        let path = alias_path(body, e, x).unwrap_or_default();
        let mut ty = body.ty(cur).clone();
        let mut rest: &[u32] = &path;
        while let (Bound::Parts(ps), Some((&k, r))) = (&b, rest.split_first()) {
            let Some(p) = ps.get((k as usize).wrapping_sub(1)) else { return internal("a projection out of range") };
            ty = component_ty(&ty, k)?;
            b = p.clone();
            rest = r;
        }
        let mut v = self.force_bound(fb, st, &b)?;
        for &k in rest {
            let n = tuple_tys(&ty)?.len();
            let t = component_ty(&ty, k)?;
            v = parts(fb, v, &ty, n)?.swap_remove(k as usize - 1);
            ty = t;
        }
        Ok(Some(v))
    }

    /// `acc += proj(let pat = r in n)`: `r` deferred as far as its
    /// variable's uses allow, otherwise evaluated now.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_let(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        acc: &Acc,
        pat: &Pat,
        r: ExprId,
        n: ExprId,
        proj: &[u32],
        site: SiteId,
    ) -> R<()> {
        if let Pat::Var(y) = pat {
            if !self.has_effect(ctx, r) {
                let us = self.uses_of(ctx, n, y, proj, true);
                let body = self.body(ctx);
                if us.len() >= 2 && us.iter().any(|(_, k)| *k == Kind::Acc) {
                    // Several parts of `r` are used: split it so that each is
                    // evaluated once, and those only added in stay pending.
                    match body.exprs[r].clone() {
                        // A join point: the rest copied into both branches.
                        Expr::If(c, a, b) => {
                            let cost = ksc_ir::term::tree_size_at_most(body, n, JOIN_SIZE + 1);
                            if cost <= JOIN_SIZE && cost <= self.join_budget {
                                self.join_budget -= cost;
                                let cond = self.lower_expr(fb, st, ctx, c)?;
                                let cond = lval_op(&cond)?;
                                if let Op::Bool(k) = cond {
                                    return self.accumulate_let(
                                        fb,
                                        st,
                                        ctx,
                                        acc,
                                        pat,
                                        if k { a } else { b },
                                        n,
                                        proj,
                                        site,
                                    );
                                }
                                return self.emit_branches(fb, st, cond, [a, b], &mut |this, fb, st, branch| {
                                    this.accumulate_let(fb, st, ctx, acc, pat, branch, n, proj, site)
                                });
                            }
                        }
                        // let y = (let p = r2 in inner) in n
                        //   ==  let p = r2 in let y = inner in n
                        Expr::Let(p, r2, inner) if p.vars().iter().all(|z| z != y && !occurs(body, n, z)) => {
                            let ctx2 = match &p {
                                Pat::Var(z) if !self.has_effect(ctx, r2) => {
                                    let mut uz = Vec::new();
                                    for (q, k) in &us {
                                        uz.extend(self.uses_of(ctx, inner, z, q, *k == Kind::Acc));
                                    }
                                    match self.bind_deferred(fb, st, ctx, r2, &uz)? {
                                        Some(bz) => ctx.with_bound(z, bz),
                                        None => self.bind_now(fb, st, ctx, &p, r2, inner)?,
                                    }
                                }
                                _ => self.bind_now(fb, st, ctx, &p, r2, inner)?,
                            };
                            return self.accumulate_let(fb, st, &ctx2, acc, pat, inner, n, proj, site);
                        }
                        _ => {}
                    }
                }
                if let Some(b) = self.bind_deferred(fb, st, ctx, r, &us)? {
                    let inner = ctx.with_bound(y, b);
                    return self.accumulate_proj(fb, st, &inner, acc, n, proj, site);
                }
            }
        }
        let inner = self.bind_now(fb, st, ctx, pat, r, n)?;
        self.accumulate_proj(fb, st, &inner, acc, n, proj, site)
    }

    /// The sizes of `build n ..`, checked as `build` checks them.
    fn build_dims(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, n: ExprId, site: SiteId) -> R<Vec<Op>> {
        let n = self.lower_expr(fb, st, ctx, n)?;
        let dims = index_ops(&n)?;
        self.tensor_sizes_check(fb, &dims, "build", site);
        Ok(dims)
    }

    /// `arr += build n (lam i (if (eq i at) hit zero))`: `arr[at] += hit`
    /// with `i = at` (an index out of range adds nothing).
    #[allow(clippy::too_many_arguments)]
    fn accumulate_one_hot(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        arr: &Op,
        t: &Type,
        (n, i, at, hit): (ExprId, String, ExprId, ExprId),
        site: SiteId,
    ) -> R<()> {
        let dims = self.build_dims(fb, st, ctx, n, site)?;
        let at = lval_op(&self.lower_expr(fb, st, ctx, at)?)?;
        let inner = ctx.with_binding(&i, LVal::Op(at.clone()));
        // As in the interpreter, `hit` is evaluated only at `at`.
        self.accumulate_at(fb, st, &inner, arr, t, &dims, &[at], Term::Expr(hit), site)
    }

    /// `arr += build n (lam i (if (lt i k) hit 0))`: `arr[i] += hit` for `i`
    /// below both k and n; zeros elsewhere add nothing (but the sign of a
    /// zero), so the loop stops at k. `k` is evaluated once, before it.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_prefix(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        arr: &Op,
        t: &Type,
        (n, i, k, hit): (ExprId, String, ExprId, ExprId),
        site: SiteId,
    ) -> R<()> {
        let dims = self.build_dims(fb, st, ctx, n, site)?;
        let (rank, elem) = tensor_ty(t)?;
        let da = self.dims_of(fb, &LVal::Op(arr.clone()), rank)?;
        self.same_dims_check(fb, &da, &dims, "`ts_add` of tensors of different sizes", site);
        let k = lval_op(&self.lower_expr(fb, st, ctx, k)?)?;
        let below = bin(fb, BinOp::ILt, k.clone(), dims[0].clone());
        let m = fb.let_(Rhs::Select(below, k, dims[0].clone()), Type::Integer, Some("prefix"));
        let nest = self.nest_open(fb, &[m]);
        let inner = ctx.with_binding(&i, index_lval(nest.idx()));
        let slot = self.slot_acc(fb, arr.clone(), nest.flat(), &elem);
        self.accumulate_proj(fb, st, &inner, &slot, hit, &[], site)?;
        self.nest_close(fb, nest);
        Ok(())
    }

    /// `arr += deltaVec n i v`: `arr[i] += v` (an index out of range adds
    /// nothing, as `deltaVec` is zero there).
    #[allow(clippy::too_many_arguments)]
    fn accumulate_delta(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        arr: &Op,
        t: &Type,
        e: ExprId,
        [n, i, v]: [ExprId; 3],
        site: SiteId,
    ) -> R<()> {
        let dsite = self.site_of(ctx, e);
        let n = self.lower_expr(fb, st, ctx, n)?;
        let i = self.lower_expr(fb, st, ctx, i)?;
        // As in the interpreter, `v` is evaluated whatever the index.
        let v = self.lower_expr(fb, st, ctx, v)?;
        let dims = index_ops(&n)?;
        self.tensor_sizes_check(fb, &dims, "deltaVec", dsite);
        let idx = index_ops(&i)?;
        self.accumulate_at(fb, st, ctx, arr, t, &dims, &idx, Term::Val(v), site)
    }

    /// `arr[idx] += v` for a one-hot term of sizes `dims` (checked against
    /// `arr`'s), if `idx` is in range.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_at(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        arr: &Op,
        t: &Type,
        dims: &[Op],
        idx: &[Op],
        v: Term,
        site: SiteId,
    ) -> R<()> {
        let (rank, elem) = tensor_ty(t)?;
        let da = self.dims_of(fb, &LVal::Op(arr.clone()), rank)?;
        self.same_dims_check(fb, &da, dims, "`ts_add` of tensors of different sizes", site);
        let inside = in_range(fb, idx, dims);
        fb.push_block();
        let flat = flat_index(fb, idx, dims);
        let slot = self.slot_acc(fb, arr.clone(), flat, &elem);
        match v {
            Term::Val(v) => self.accumulate_lval(fb, st, &slot, v, &elem, site)?,
            Term::Expr(e) => self.accumulate_proj(fb, st, ctx, &slot, e, &[], site)?,
        }
        let then = fb.pop_block();
        fb.emit(Stmt::If { cond: inside, then, els: vec![] });
        Ok(())
    }
}
