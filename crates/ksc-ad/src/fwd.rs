//! Forward mode from the full Jacobian (linear-maps-and-ad.md 5):
//! `[fwd f] (x, dx)` applies `[D f](x)` to `dx` binding by binding: every
//! Jacobian variable `g` (a map from the parameter's tangent space) is
//! replaced, in place, by its tangent `g ⊙ dx`, computed once. `[fwdt f]`
//! returns the value with the tangent, from the same run.

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::prim::Accumulators;
use ksc_ir::term::{let_chain, wrap};
use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};

use crate::apply::{
    bind_params, checked_def, fold_call, fresh_start, has_lm, import, import_with, internal, is_lm, param_name,
    push_applications, tangent_of_mixed, tangent_type_of_mixed,
};
use crate::derive::{AdError, Witnesses, R};

/// `[fwd f]` from `[D f]`. `pairs` says whether a callee's value and
/// tangent may come from one call of `[fwdt g]` (not when `[fwd g]` is
/// written by hand and `[fwdt g]` is not).
pub fn fwd_def(
    f: &Def,
    d: &Def,
    witnesses: &Witnesses,
    demands: &mut Vec<FunName>,
    pairs: &dyn Fn(&FunName) -> bool,
) -> R<Def> {
    fwd_like(Derivation::Fwd, f, d, witnesses, demands, pairs)
}

/// `[fwdt f] (x, dx) = (f x, [fwd f] (x, dx))` from `[D f]`: the value is
/// the primal of the Jacobian's result (its witness), so both come from one
/// run of the let-program.
pub fn fwdt_def(
    f: &Def,
    d: &Def,
    witnesses: &Witnesses,
    demands: &mut Vec<FunName>,
    pairs: &dyn Fn(&FunName) -> bool,
) -> R<Def> {
    fwd_like(Derivation::FwdT, f, d, witnesses, demands, pairs)
}

fn fwd_like(
    which: Derivation,
    f: &Def,
    d: &Def,
    witnesses: &Witnesses,
    demands: &mut Vec<FunName>,
    pairs: &dyn Fn(&FunName) -> bool,
) -> R<Def> {
    let s_ty = f.arg_ty();
    let ds_ty = s_ty.tangent().ok_or_else(|| AdError { message: format!("`{}` has no tangent", s_ty), at: None })?;
    let dt_ty =
        f.ret_ty.tangent().ok_or_else(|| AdError { message: format!("`{}` has no tangent", f.ret_ty), at: None })?;
    let mut body = Body::new();
    let mut fresh = fresh_start(f, d);
    let mut b = Builder::new(&mut body, &mut fresh);
    let (x_name, dx_name) = (param_name("x", f), param_name("dx", f));
    // [fwdt f]'s value: the witness of the map the let-program ends in.
    let value = match which {
        Derivation::FwdT => {
            let (_, result) = let_chain(&d.body, d.root);
            let Expr::Var(g_res) = &d.body.exprs[result] else {
                return internal("a Jacobian that does not end in a map variable");
            };
            let Some(value) = witnesses.get(g_res) else { return internal(format!("no value known for `{g_res}`")) };
            Some(value)
        }
        _ => None,
    };
    // The variables the program reads (its bindings have fresh names), and
    // the value.
    let mut used = rustc_hash::FxHashSet::default();
    collect_vars(&d.body, d.root, &mut used);
    if let Some(crate::derive::ExprTemplate::Var(v, _)) = value {
        used.insert(v.clone());
    }
    add_step_values(&d.body, d.root, witnesses, &mut used);
    let mut fw = Fwd {
        src: &d.body,
        dx: (dx_name.clone(), ds_ty.clone()),
        s_ty: s_ty.clone(),
        demands,
        pairs,
        used: &used,
        own: &f.name,
        witnesses,
    };
    let inner = fw.t(&mut b, d.root)?;
    let inner = match value {
        // The value next to the tangent, where the let-program ends.
        Some(value) => map_tail(&mut b, inner, &mut |b, tangent| {
            let v = value.build(b);
            b.tuple(vec![v, tangent])
        }),
        None => inner,
    };
    let inner = push_applications(&mut b, inner, fw.demands);
    let root = bind_params(&mut b, &f.params, &x_name, &s_ty, inner);
    let ret = match which {
        Derivation::FwdT => Type::Tuple(vec![f.ret_ty.clone(), dt_ty]),
        _ => dt_ty,
    };
    let params = vec![Param { name: x_name, ty: s_ty }, Param { name: dx_name, ty: ds_ty }];
    checked_def(f.name.derived(which), params, ret, body, root)
}

struct Fwd<'s, 'd> {
    src: &'s Body,
    dx: (String, Type),
    s_ty: Type,
    demands: &'d mut Vec<FunName>,
    pairs: &'d dyn Fn(&FunName) -> bool,
    /// The variables read anywhere in the program: a call whose value is
    /// not read needs only `[fwd g]`, unless it is a recursive call.
    used: &'d rustc_hash::FxHashSet<String>,
    /// The function differentiated: its recursive calls in a loop of maps,
    /// whose values its loop of values computes, get `[fwdt f]` too, so
    /// that the loops, fused, compute them once (ksc-opt's `fuse_loops`);
    /// with `[fwd f]` and f, each level would compute its subtree's values
    /// again, a cost growing with the depth.
    own: &'d FunName,
    /// The values of the Jacobian's maps' targets (a fold's step reads its
    /// value from its derivative's let-program).
    witnesses: &'d Witnesses,
}

impl Fwd<'_, '_> {
    /// `let y = g a in let g_y = lmCompose ([D g] a) g_a in rest`, the
    /// pattern `[D f]` gives a call of a function with a body, becomes
    /// `let p = [fwdt g] (a, g_a ⊙ dx); y = get$1$2 p; g_y = get$2$2 p in
    /// rest`: the callee's value and tangent from one call, so that a
    /// recursive call does not compute the callee's primal twice (which
    /// makes forward mode of recursion quadratic). `rest` is transformed
    /// by `t` or, with `map`, by `apply_s`.
    fn pair_call(&mut self, b: &mut Builder, p: &Pat, r: ExprId, x: ExprId, map: bool) -> Option<R<ExprId>> {
        let Pat::Var(y) = p else { return None };
        let Expr::Call(Callee::Fun(g), _) = &self.src.exprs[r] else { return None };
        let Expr::Let(Pat::Var(gy), m, rest) = self.src.exprs[x].clone() else { return None };
        let (Prim::LmCompose, margs) = prim_call(self.src, m)? else { return None };
        let Expr::Call(Callee::Fun(dg), whole) = self.src.exprs[margs[0]].clone() else { return None };
        if dg.derivs.first() != Some(&Derivation::D)
            || dg.inner().map(|(_, i)| i).as_ref() != Some(g)
            || !(self.pairs)(g)
            || !(self.used.contains(y) || g == self.own)
        {
            return None;
        }
        let g = g.clone();
        let y = y.clone();
        Some((|| {
            let t_ty = self.src.ty(r).clone();
            let dt_ty = tangent_of_mixed(self.src.ty(m))?;
            let a = import(b, self.src, whole);
            let da = self.apply_s(b, margs[1])?;
            let target = g.derived(Derivation::FwdT);
            self.demands.push(target.clone());
            let pair_ty = Type::Tuple(vec![t_ty.clone(), dt_ty.clone()]);
            let call = b.call(target, vec![a, da], pair_ty.clone());
            let pn = b.fresh_name("vt");
            let rest = if map { self.apply_s(b, rest)? } else { self.t(b, rest)? };
            let pv = b.var(&pn, pair_ty.clone());
            let dy = b.prim(Prim::Get { index: 2, arity: 2 }, vec![pv]);
            let rest = b.let_(&gy, dy, rest);
            let pv = b.var(&pn, pair_ty);
            let v = b.prim(Prim::Get { index: 1, arity: 2 }, vec![pv]);
            let rest = b.let_(&y, v, rest);
            Ok(b.let_(&pn, call, rest))
        })())
    }

    /// The expression with every map from S replaced by its tangent.
    fn t(&mut self, b: &mut Builder, e: ExprId) -> R<ExprId> {
        let ty = self.src.ty(e).clone();
        if !has_lm(&ty) {
            return Ok(import_with(b, self.src, e, &tangent_type_of_mixed));
        }
        if is_lm(&ty) {
            return self.apply_s(b, e);
        }
        let node = match self.src.exprs[e].clone() {
            Expr::Let(p, r, x) => {
                if let Some(done) = self.pair_call(b, &p, r, x, false).or_else(|| self.pair_fold(b, &p, r, x, false)) {
                    return done;
                }
                let r = self.t(b, r)?;
                let x = self.t(b, x)?;
                let ty = b.ty(x);
                return Ok(b.body.alloc_typed(Expr::Let(p, r, x), ty));
            }
            Expr::Tuple(es) => {
                let es = es.into_iter().map(|x| self.t(b, x)).collect::<R<Vec<_>>>()?;
                return Ok(b.tuple(es));
            }
            Expr::If(c, t, f) => {
                let c = import(b, self.src, c);
                let (t, f) = (self.t(b, t)?, self.t(b, f)?);
                let ty = b.ty(t);
                return Ok(b.body.alloc_typed(Expr::If(c, t, f), ty));
            }
            Expr::Assert(c, x, from) => {
                let c = import(b, self.src, c);
                let x = self.t(b, x)?;
                let ty = b.ty(x);
                return Ok(b.body.alloc_typed(Expr::Assert(c, x, from), ty));
            }
            Expr::Lam(v, vt, x) => {
                let x = self.t(b, x)?;
                return Ok(b.lam(&v, vt, x));
            }
            Expr::Var(v) => {
                let t = tangent_of_mixed(&ty)?;
                return Ok(b.var(&v, t));
            }
            Expr::Call(Callee::Prim(p), a) if !p.is_linear_map() => {
                let args = call_args(self.src, p, a);
                let args = args.into_iter().map(|x| self.t(b, x)).collect::<R<Vec<_>>>()?;
                return Ok(b.prim(p, args));
            }
            n => n,
        };
        internal(format!("cannot apply {node:?} of type {ty}"))
    }

    /// `m ⊙ dx` for a map `m` from the parameter's tangent space.
    fn apply_s(&mut self, b: &mut Builder, m: ExprId) -> R<ExprId> {
        let ty = self.src.ty(m).clone();
        match self.src.exprs[m].clone() {
            Expr::Var(g) => {
                let t = tangent_of_mixed(&ty)?;
                return Ok(b.var(&g, t));
            }
            Expr::Let(..) | Expr::If(..) | Expr::Assert(..) => return self.t_structural(b, m),
            _ => {}
        }
        let Some((p, args)) = prim_call(self.src, m) else {
            return self.apply_j(b, m, None);
        };
        if !p.is_linear_map() {
            // A projection out of a (value, map) pair or a vector of maps,
            // which have been replaced by tangents in place.
            let args = args.into_iter().map(|x| self.t(b, x)).collect::<R<Vec<_>>>()?;
            return Ok(b.prim(p, args));
        }
        Ok(match p {
            Prim::LmCompose => {
                let x = self.apply_s(b, args[1])?;
                match fold_call(self.src, args[0]) {
                    Some((fold, kept)) => self.ffold(b, &fold, x, kept)?,
                    None => self.apply_j(b, args[0], Some(x))?,
                }
            }
            Prim::LmVCat => {
                let parts = args.into_iter().map(|a| self.apply_s(b, a)).collect::<R<Vec<_>>>()?;
                b.tuple(parts)
            }
            Prim::LmAdd => {
                let (x, y) = (self.apply_s(b, args[0])?, self.apply_s(b, args[1])?);
                b.prim(Prim::TsAdd, vec![x, y])
            }
            Prim::LmZero => {
                let t = import(b, self.src, args[1]);
                b.zero_tangent(t)
            }
            // The parameter's own map and its selections.
            Prim::LmOne if self.src.ty(args[0]) == &self.s_ty => b.var(&self.dx.0, self.dx.1.clone()),
            Prim::LmGet { index, arity } if self.src.ty(args[0]) == &self.s_ty => {
                let dx = b.var(&self.dx.0, self.dx.1.clone());
                b.prim(Prim::Get { index, arity }, vec![dx])
            }
            // V(s, build n (λi. m_i)) ⊙ dx = the vector of the tangents.
            Prim::LmVCatV if prim_call(self.src, args[1]).is_some_and(|(q, _)| q == Prim::Build) => {
                self.t(b, args[1])?
            }
            _ => self.apply_j(b, m, None)?,
        })
    }

    /// `lmFold (sc, f, df, acc, v) ⊙ (dsc, (dacc, dv))` with the fold's
    /// value: a fold carrying the accumulator and its tangent (seed 003
    /// figure 14, FFold), the pair it ends in. For an `lmScan`, the same
    /// step under `$scan`: the vector of the pairs. For an `lmScanBlocks`
    /// (a monoid's scan), the step under `$scanBlocks`: the step is then
    /// seed 002's paired monoid `(a, da) ⊕ (x, dx) = (a ⊙ x, ∂⊙ (da, dx))`,
    /// associative with left identity `(E, dE)` because ⊙ is with E, so the
    /// tangents are computed in the scan's parallel blocks. The step's value is
    /// the primal of its tangent's let-program (the witness of the map it
    /// ends in) where that is known, so the step computes it once.
    fn ffold_pair(&mut self, b: &mut Builder, fold: &[ExprId], x: ExprId, kept: Accumulators) -> R<ExprId> {
        let [sc, f, df, acc, v] = fold[..] else { return internal("malformed lmFold") };
        let (Expr::Lam(fp, _, fbody), Expr::Lam(t2, tty, dbody)) =
            (self.src.exprs[f].clone(), self.src.exprs[df].clone())
        else {
            return internal("lmFold without lambdas");
        };
        let Type::Tuple(ab) = tty.clone() else { return internal("lmFold over a non-pair") };
        let (a_ty, b_ty) = (ab[0].clone(), ab[1].clone());
        let (da_ty, db_ty) = (a_ty.tangent().unwrap_or(Type::Unknown), b_ty.tangent().unwrap_or(Type::Unknown));
        let sc_ty = self.src.ty(sc).clone();
        let dsc_ty = sc_ty.tangent().unwrap_or(Type::Unknown);
        let st_ty = Type::Tuple(vec![sc_ty, tty.clone()]);
        let xs = b.fresh_name("dfold");
        let x_ty = b.ty(x);
        let xv = |b: &mut Builder| b.var(&xs, x_ty.clone());
        // The tangents of the scope, the accumulator and the vector.
        let x1 = xv(b);
        let dsc = b.prim(Prim::Get { index: 1, arity: 2 }, vec![x1]);
        let x2 = xv(b);
        let dadv = b.prim(Prim::Get { index: 2, arity: 2 }, vec![x2]);
        let dacc = b.prim(Prim::Get { index: 1, arity: 2 }, vec![dadv]);
        let x3 = xv(b);
        let dadv2 = b.prim(Prim::Get { index: 2, arity: 2 }, vec![x3]);
        let dv = b.prim(Prim::Get { index: 2, arity: 2 }, vec![dadv2]);
        let dsc_name = b.fresh_name("dsc");
        let dv_name = b.fresh_name("dv");
        let dv_ty = b.ty(dv);
        // pairs = build (size v) (λi. (v[i], dv[i]))
        let v1 = import(b, self.src, v);
        let n = b.prim(Prim::Size, vec![v1]);
        let pairs = b.build(n, |b, i| {
            let (i1, i2) = (b.copy(i), b.copy(i));
            let v2 = import(b, self.src, v);
            let xi = b.prim(Prim::Index, vec![i1, v2]);
            let dvv = b.var(&dv_name, dv_ty.clone());
            let dxi = b.prim(Prim::Index, vec![i2, dvv]);
            b.tuple(vec![xi, dxi])
        });
        // The step: (a, da), (x, dx) -> (f (a, x), df(a, x) ⊙ (dsc, (da, dx)))
        let p = b.fresh_name("p");
        let p_ty =
            Type::Tuple(vec![Type::Tuple(vec![a_ty.clone(), da_ty.clone()]), Type::Tuple(vec![b_ty.clone(), db_ty])]);
        let get = |b: &mut Builder, outer: u32, inner: u32| {
            let pv = b.var(&p, p_ty.clone());
            let o = b.prim(Prim::Get { index: outer, arity: 2 }, vec![pv]);
            b.prim(Prim::Get { index: inner, arity: 2 }, vec![o])
        };
        let (a, xi) = (get(b, 1, 1), get(b, 2, 1));
        let t_val = b.tuple(vec![a, xi]);
        // The derivative's tangent, with its own parameter (sc, t).
        let (da, dxi) = (get(b, 1, 2), get(b, 2, 2));
        let inner_t = b.tuple(vec![da, dxi]);
        let dscv = b.var(&dsc_name, dsc_ty.clone());
        let dst = b.tuple(vec![dscv, inner_t]);
        let dst_name = b.fresh_name("dst");
        let dst_ty = b.ty(dst);
        let mut inner = Fwd {
            src: self.src,
            dx: (dst_name.clone(), dst_ty),
            s_ty: st_ty,
            demands: self.demands,
            pairs: self.pairs,
            used: self.used,
            own: self.own,
            witnesses: self.witnesses,
        };
        let new_da = inner.t(b, dbody)?;
        let step = match step_value(self.src, self.witnesses, dbody, &a_ty) {
            Some(w) => map_tail(b, new_da, &mut |b, tangent| {
                let v = w.build(b);
                b.tuple(vec![v, tangent])
            }),
            None => {
                // f's result, with its parameter bound to (a, x).
                let fb = import(b, self.src, fbody);
                let t_val2 = b.var(&t2, tty.clone());
                let ty = b.ty(fb);
                let new_a = b.body.alloc_typed(Expr::Let(Pat::Var(fp.clone()), t_val2, fb), ty);
                b.tuple(vec![new_a, new_da])
            }
        };
        let step = push_applications(b, step, inner.demands);
        let step = b.let_(&dst_name, dst, step);
        let step = b.let_(&t2, t_val, step);
        let lam = b.lam(&p, p_ty.clone(), step);
        let a0 = import(b, self.src, acc);
        let init = b.tuple(vec![a0, dacc]);
        let result = b.prim(kept.value_prim(), vec![lam, init, pairs]);
        let result = b.let_(&dv_name, dv, result);
        let result = b.let_(&dsc_name, dsc, result);
        Ok(b.let_(&xs, x, result))
    }

    /// `lmFold (sc, f, df, acc, v) ⊙ x`: the tangent part of [`Self::ffold_pair`]
    /// (for a scan, the vector of the accumulators' tangents).
    fn ffold(&mut self, b: &mut Builder, fold: &[ExprId], x: ExprId, kept: Accumulators) -> R<ExprId> {
        let pair = self.ffold_pair(b, fold, x, kept)?;
        Ok(map_tail(b, pair, &mut |b, e| {
            if kept != Accumulators::Last {
                components(b, e, 2)
            } else {
                b.prim(Prim::Get { index: 2, arity: 2 }, vec![e])
            }
        }))
    }

    /// `let y = fold f acc v` (or `$scan`) followed, a few bindings later,
    /// by `let g = lmCompose (lmFold (sc, f, df, acc, v)) x`, the pattern
    /// `[D f]` gives a fold: both from one fold carrying the accumulator
    /// and its tangent (`y = get$1$2 p; g = get$2$2 p`), so that forward
    /// mode computes the steps' values once. The bindings in between are
    /// transformed as usual; `rest` by `t` or, with `map`, by `apply_s`.
    fn pair_fold(&mut self, b: &mut Builder, p: &Pat, r: ExprId, x: ExprId, map: bool) -> Option<R<ExprId>> {
        let Pat::Var(y) = p else { return None };
        let (prim, args) = prim_call(self.src, r)?;
        let kind = Accumulators::of_value(prim)?;
        if args.len() != 3 {
            return None;
        }
        // The bindings up to the fold's map, none of which reads y.
        let mut between = Vec::new();
        let mut cache = ksc_ir::term::Cache::default();
        let mut at = x;
        let (g, g_rhs, fold, xin, rest) = loop {
            let Expr::Let(q, rhs, next) = self.src.exprs[at].clone() else { return None };
            if let (Pat::Var(g), Some((Prim::LmCompose, margs))) = (&q, prim_call(self.src, rhs)) {
                if let Some((fold, kept)) = fold_call(self.src, margs[0]) {
                    let same = |i: usize, j: usize| ksc_ir::term::alpha_eq(self.src, args[i], self.src, fold[j]);
                    if kept == kind && same(0, 1) && same(1, 3) && same(2, 4) {
                        break (g.clone(), rhs, fold, margs[1], next);
                    }
                }
            }
            if between.len() == 8 || cache.free_vars(self.src, rhs).iter().any(|v| v == y) {
                return None;
            }
            between.push((q, rhs));
            at = next;
        };
        let y = y.clone();
        Some((|| {
            let y_ty = self.src.ty(r).clone();
            let g_ty = tangent_of_mixed(self.src.ty(g_rhs))?;
            let mut done = Vec::new();
            for (q, rhs) in between {
                let rhs = self.t(b, rhs)?;
                done.push((q, rhs));
            }
            let xt = self.apply_s(b, xin)?;
            let pair = self.ffold_pair(b, &fold, xt, kind)?;
            let rest = if map { self.apply_s(b, rest)? } else { self.t(b, rest)? };
            let pn = b.fresh_name("pf");
            let pair_ty = b.ty(pair);
            let project = |b: &mut Builder, k: u32, ty: &Type| {
                let pv = b.var(&pn, pair_ty.clone());
                let e = if kind == Accumulators::Last {
                    b.prim(Prim::Get { index: k, arity: 2 }, vec![pv])
                } else {
                    components(b, pv, k)
                };
                debug_assert_eq!(&b.ty(e), ty);
                e
            };
            let dy = project(b, 2, &g_ty);
            let rest = b.let_(&g, dy, rest);
            let v = project(b, 1, &y_ty);
            let rest = b.let_(&y, v, rest);
            let rest = b.let_(&pn, pair, rest);
            Ok(wrap(b, done, rest))
        })())
    }

    fn t_structural(&mut self, b: &mut Builder, e: ExprId) -> R<ExprId> {
        let ty = self.src.ty(e).clone();
        match self.src.exprs[e].clone() {
            Expr::Let(p, r, x) => {
                if let Some(done) = self.pair_call(b, &p, r, x, true).or_else(|| self.pair_fold(b, &p, r, x, true)) {
                    return done;
                }
                let r = self.t(b, r)?;
                let x = self.apply_s(b, x)?;
                let ty = b.ty(x);
                Ok(b.body.alloc_typed(Expr::Let(p, r, x), ty))
            }
            Expr::If(c, t, f) => {
                let c = import(b, self.src, c);
                let (t, f) = (self.apply_s(b, t)?, self.apply_s(b, f)?);
                let ty = b.ty(t);
                Ok(b.body.alloc_typed(Expr::If(c, t, f), ty))
            }
            Expr::Assert(c, x, from) => {
                let c = import(b, self.src, c);
                let x = self.apply_s(b, x)?;
                let ty = b.ty(x);
                Ok(b.body.alloc_typed(Expr::Assert(c, x, from), ty))
            }
            _ => internal(format!("not a binding form: {ty}")),
        }
    }

    /// `J ⊙ x` for a map `J` that is not from S (a Jacobian of a call); with
    /// `x` None, J goes from S and is applied to dx.
    fn apply_j(&mut self, b: &mut Builder, j: ExprId, x: Option<ExprId>) -> R<ExprId> {
        let jj = import(b, self.src, j);
        let x = match x {
            Some(x) => x,
            None => b.var(&self.dx.0, self.dx.1.clone()),
        };
        let app = b.prim(Prim::LmApply, vec![jj, x]);
        Ok(push_applications(b, app, self.demands))
    }
}

/// The names of the variables read in `e`.
fn collect_vars(body: &Body, e: ExprId, out: &mut rustc_hash::FxHashSet<String>) {
    if let Expr::Var(v) = &body.exprs[e] {
        out.insert(v.clone());
    }
    for c in ksc_ir::term::children(&body.exprs[e]) {
        collect_vars(body, c, out);
    }
}

/// The let-chain at `e` with its final expression replaced by `f` of it.
fn map_tail(b: &mut Builder, e: ExprId, f: &mut dyn FnMut(&mut Builder, ExprId) -> ExprId) -> ExprId {
    match b.expr(e).clone() {
        Expr::Let(p, r, x) => {
            let x = map_tail(b, x, f);
            let ty = b.ty(x);
            b.body.alloc_typed(Expr::Let(p, r, x), ty)
        }
        _ => f(b, e),
    }
}

/// The value of a fold's step, `f`'s result, as the primal of its
/// derivative's let-program `dbody` (the witness of the map it ends in), if
/// that is known and has the accumulator's type.
fn step_value<'w>(
    src: &Body,
    witnesses: &'w Witnesses,
    dbody: ExprId,
    a_ty: &Type,
) -> Option<&'w crate::derive::ExprTemplate> {
    let (_, tail) = let_chain(src, dbody);
    let Expr::Var(g) = &src.exprs[tail] else { return None };
    let w = witnesses.get(g)?;
    let ty = match w {
        crate::derive::ExprTemplate::Var(_, t) => t.clone(),
        crate::derive::ExprTemplate::Lit(l) => l.ty(),
    };
    (&ty == a_ty).then_some(w)
}

/// Adds to `used` the variables holding the values of the folds' steps
/// that [`step_value`] reads: a call computing one needs its value.
fn add_step_values(src: &Body, e: ExprId, witnesses: &Witnesses, used: &mut rustc_hash::FxHashSet<String>) {
    if let Some((fold, _)) = fold_call(src, e) {
        if let Expr::Lam(_, Type::Tuple(ab), dbody) = &src.exprs[fold[2]] {
            if let Some(crate::derive::ExprTemplate::Var(v, _)) = step_value(src, witnesses, *dbody, &ab[0]) {
                used.insert(v.clone());
            }
        }
    }
    for c in ksc_ir::term::children(&src.exprs[e]) {
        add_step_values(src, c, witnesses, used);
    }
}

/// `build (size all) (λj. get$k$2 (index j all))`: the `k`th components
/// of a vector of pairs.
fn components(b: &mut Builder, all: ExprId, k: u32) -> ExprId {
    b.share(all, "scan", |b, all| {
        let all2 = b.copy(all);
        let n = b.prim(Prim::Size, vec![all]);
        b.build(n, |b, j| {
            let at = b.prim(Prim::Index, vec![j, all2]);
            b.prim(Prim::Get { index: k, arity: 2 }, vec![at])
        })
    })
}

fn call_args(body: &Body, p: Prim, arg: ExprId) -> Vec<ExprId> {
    match (p.arity(), &body.exprs[arg]) {
        (None, _) => body.call_args(arg),
        (Some(k), Expr::Tuple(es)) if k >= 2 && es.len() == k => es.clone(),
        _ => vec![arg],
    }
}
