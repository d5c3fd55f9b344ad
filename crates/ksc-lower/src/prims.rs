//! Lowering the primitives (knossos-reference.md 3.1 and 7.7), with the
//! interpreter's checks and messages, and in-place accumulation.

use std::rc::Rc;

use ksc_ir::{Callee, Expr, ExprId, Pat, Prim, Type};

use crate::builder::FnBuilder;
use crate::ir::*;
use crate::lower::{
    all_of, bin, check_type, components, default_lval, flat_index, in_range, index_lval, index_ops, internal, lval_op,
    parts, split, tensor_ty, tuple_tys, Ctx, Delayed, FnState, LVal, Lowerer, R,
};

/// An accumulator being added into in place.
pub(crate) enum Acc {
    /// A Float or Integer in a mutable variable.
    Scalar(VarId, Type),
    /// A scalar element `arr[idx]` of a tensor.
    Slot(Op, Op, Type),
    /// A tensor (fresh, owned by the accumulation) whose elements are
    /// added into.
    Tensor(Op, Type),
    /// A Bool, String or unit: adding keeps the first value.
    Keep(LVal),
    /// A mutable variable that is set, not added into: the element of a
    /// `$buildSum`, computed once per iteration.
    Set(VarId, Type),
    Tuple(Vec<Acc>),
}

/// What every pass of `$scanBlocks` over its blocks shares: the operator,
/// the accumulator's and elements' types, the elements and their number.
struct BlockPass<'a> {
    lam: &'a Arg,
    tys: (&'a Type, &'a Type),
    v: &'a LVal,
    n: &'a Op,
    site: SiteId,
}

/// Where a pass of `$scanBlocks` starts each block: from E (folding it to
/// its result), or from its carry (scanning it).
enum BlockStart {
    From(LVal),
    Carries(LVal),
}

/// Mutable variables holding the leaves of a fold's or scan's accumulator,
/// initialised with `leaves`.
fn fold_vars(fb: &mut FnBuilder, leaves: &[(Op, Type)]) -> Vec<VarId> {
    leaves
        .iter()
        .map(|(o, t)| {
            let var = fb.var(t.clone(), Some("acc"), true);
            fb.emit(Stmt::DeclMut(var, Some(o.clone())));
            var
        })
        .collect()
}

/// The accumulator's current value: a snapshot of its leaf variables,
/// reassembled into `acc_ty`.
fn read_fold_vars(fb: &mut FnBuilder, vars: &[VarId], acc_ty: &Type) -> LVal {
    let cur: Vec<Op> = vars
        .iter()
        .map(|&var| {
            let t = fb.ty(var).clone();
            fb.let_(Rhs::Copy(Op::Var(var)), t, None)
        })
        .collect();
    crate::lower::rebuild(acc_ty, &mut cur.into_iter())
}

/// A type with tensors, all of whose tensors have elements of numbers or
/// tuples of them, which the tensor holds itself (adding into them in
/// place touches no storage shared with another value).
fn flat_tensors(t: &Type) -> bool {
    fn numbers(t: &Type) -> bool {
        match t {
            Type::Tuple(ts) => ts.iter().all(numbers),
            t => is_number(t),
        }
    }
    fn go(t: &Type, seen: &mut bool) -> bool {
        match t {
            Type::Tensor(_, e) => {
                *seen = true;
                numbers(e)
            }
            Type::Tuple(ts) => ts.iter().all(|t| go(t, seen)),
            _ => true,
        }
    }
    let mut seen = false;
    go(t, &mut seen) && seen
}

/// Does lowering `e` give storage that nothing else refers to? (A new
/// vector of numbers or of tuples of them: a `deltaVec`, `build`, `constVec`, or a `ts_add`,
/// `sumbuild` or `sum` of flat tensors, whose accumulator is new: a sum
/// adds its terms in place into a copy of its first, `Lowerer::sum`.)
pub(crate) fn fresh_value(body: &ksc_ir::Body, e: ExprId) -> bool {
    matches!(
        &body.exprs[e],
        Expr::Call(
            Callee::Prim(Prim::DeltaVec | Prim::Build | Prim::ConstVec | Prim::TsAdd | Prim::Sumbuild | Prim::Sum),
            _
        )
    ) && flat_tensors(body.ty(e))
}

/// Is `e` a `ts_add` whose value is storage it made, the tensors it holds
/// included: `ts_add x y` of tensors (into a deep copy of `x`, or into `x`
/// where that is such storage itself), `y` not `()` (adding `()` is `x`
/// itself)? Every tensor of its value then has no other name than the
/// value, as long as `e` is not bound to a variable.
pub(crate) fn made_by_ts_add(body: &ksc_ir::Body, e: ExprId) -> bool {
    let Expr::Call(Callee::Prim(Prim::TsAdd), arg) = &body.exprs[e] else { return false };
    matches!(body.ty(e), Type::Tensor(..))
        && matches!(body.call_args(*arg)[..], [_, y] if matches!(body.ty(y), Type::Tensor(..)))
}

/// Which parts of a value are storage nothing else refers to: `Yes` for a
/// fresh value (scalars are), `Tuple` component by component; `Top` while a
/// recursive definition's result is being worked out (optimistically).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fresh {
    Top,
    No,
    Yes,
    Tuple(Vec<Fresh>),
}

impl Fresh {
    fn meet(self, other: Fresh) -> Fresh {
        match (self, other) {
            (Fresh::Top, x) | (x, Fresh::Top) => x,
            (Fresh::Yes, Fresh::Yes) => Fresh::Yes,
            (Fresh::Tuple(a), Fresh::Tuple(b)) if a.len() == b.len() => {
                Fresh::Tuple(a.into_iter().zip(b).map(|(x, y)| x.meet(y)).collect())
            }
            (Fresh::Tuple(a), Fresh::Yes) | (Fresh::Yes, Fresh::Tuple(a)) => Fresh::Tuple(a),
            _ => Fresh::No,
        }
    }

    pub(crate) fn component(&self, i: usize, n: usize) -> Fresh {
        match self {
            Fresh::Tuple(fs) if fs.len() == n => fs[i].clone(),
            Fresh::Top | Fresh::Yes => self.clone(),
            _ => Fresh::No,
        }
    }

    /// Is every tensor in the value fresh?
    pub(crate) fn all(&self) -> bool {
        match self {
            Fresh::Yes => true,
            Fresh::Tuple(fs) => fs.iter().all(Fresh::all),
            _ => false,
        }
    }
}

/// How fresh the value of `e` is, given how fresh the results of the
/// program's functions are (`results`): new vectors of scalars
/// ([`fresh_value`]), scalars, tuples of those, branches that both are,
/// calls of functions whose results are, and variables a `let` around `e`
/// bound to such a value and reads nowhere else (a component of a tuple
/// variable, where no other use reads that component). A parameter is not
/// (the caller may read it again). With `ret` (`e` is what a definition
/// returns), neither is a vector that copies a variable
/// ([`passed_through`]): the definition returns the variable itself when
/// the sizes agree. `params` are the parameters the definition consumes
/// (see [`crate::lower::consumed_params`]), with how fresh they are.
pub(crate) fn fresh_expr(
    body: &ksc_ir::Body,
    e: ExprId,
    ret: bool,
    results: &dyn Fn(&ksc_ir::FunName) -> Fresh,
    params: &[(String, Fresh)],
) -> Fresh {
    fresh_in(body, e, ret, results, &mut params.to_vec())
}

/// [`fresh_expr`] under the `let`s around `e` (innermost last): the
/// freshness of each variable they bind, as read from `e`.
fn fresh_in(
    body: &ksc_ir::Body,
    e: ExprId,
    ret: bool,
    results: &dyn Fn(&ksc_ir::FunName) -> Fresh,
    env: &mut Vec<(String, Fresh)>,
) -> Fresh {
    let ty = body.ty(e);
    if !crate::ir::needs_heap(ty) {
        return Fresh::Yes;
    }
    if ret && passed_build(body, e) {
        return Fresh::No;
    }
    if fresh_value(body, e) {
        return Fresh::Yes;
    }
    let var = |env: &[(String, Fresh)], x: ExprId| match &body.exprs[x] {
        Expr::Var(v) => env.iter().rev().find(|(w, _)| w == v).map(|(_, f)| f.clone()),
        _ => None,
    };
    match &body.exprs[e] {
        Expr::Var(_) => var(env, e).unwrap_or(Fresh::No),
        Expr::Call(Callee::Fun(g), _) => results(g),
        // The elements are a fresh `build`; the sum may be the start itself.
        Expr::Call(Callee::Prim(Prim::BuildSum), _) => Fresh::Tuple(vec![Fresh::Yes, Fresh::No]),
        Expr::Call(Callee::Prim(Prim::Get { index, arity }), a) => {
            let whole = var(env, *a).unwrap_or_else(|| fresh_in(body, *a, ret, results, env));
            whole.component(*index as usize - 1, *arity as usize)
        }
        Expr::Tuple(es) => Fresh::Tuple(es.iter().map(|&x| fresh_in(body, x, ret, results, env)).collect()),
        Expr::If(_, t, f) => fresh_in(body, *t, ret, results, env).meet(fresh_in(body, *f, ret, results, env)),
        Expr::Let(pat, rhs, x) => {
            // A variable (or a tuple variable's component) read once in
            // the body, outside any lambda, hands its storage over.
            let value = fresh_in(body, *rhs, ret, results, env);
            let sole = |x_name: &str, comp: Option<usize>| crate::lower::sole_use(body, *x, x_name, comp);
            let bound: Vec<(String, Fresh)> = match pat {
                Pat::Var(v) => {
                    // A tuple read through its components: each by itself.
                    let value = match (value, body.ty(*rhs)) {
                        (f @ (Fresh::Yes | Fresh::Top), Type::Tuple(ts)) => Fresh::Tuple(vec![f; ts.len()]),
                        (f, _) => f,
                    };
                    let f = match &value {
                        Fresh::Tuple(fs) => Fresh::Tuple(
                            fs.iter()
                                .enumerate()
                                .map(|(k, f)| if sole(v, Some(k)) { f.clone() } else { Fresh::No })
                                .collect(),
                        ),
                        f if sole(v, None) => f.clone(),
                        _ => Fresh::No,
                    };
                    vec![(v.clone(), f)]
                }
                Pat::Tuple(vs) => vs
                    .iter()
                    .enumerate()
                    .map(|(k, v)| {
                        let f = value.component(k, vs.len());
                        (v.clone(), if sole(v, None) { f } else { Fresh::No })
                    })
                    .collect(),
            };
            let depth = env.len();
            env.extend(bound);
            let r = fresh_in(body, *x, ret, results, env);
            env.truncate(depth);
            r
        }
        Expr::Assert(_, x, _) => fresh_in(body, *x, ret, results, env),
        // A fold whose start is fresh and whose step returns fresh storage
        // when its accumulator is (read once): see [`fold_step_fresh`].
        Expr::Call(Callee::Prim(Prim::Fold), a) => {
            let args = body.call_args(*a);
            if args.len() != 3 {
                return Fresh::No;
            }
            let init = fresh_in(body, args[1], ret, results, env);
            match fold_step_fresh(body, args[0], ret, results, env) {
                Some(step) => init.meet(step),
                None => Fresh::No,
            }
        }
        _ => Fresh::No,
    }
}

/// How fresh the result of a fold's step `lam` is when its accumulator
/// is fresh: the step's parameter `(acc, x)` has a fresh `acc` if the
/// step reads it once (`get$1$2` of the parameter, on every path). None
/// if it does not.
pub(crate) fn fold_step_fresh(
    body: &ksc_ir::Body,
    lam: ExprId,
    ret: bool,
    results: &dyn Fn(&ksc_ir::FunName) -> Fresh,
    env: &mut Vec<(String, Fresh)>,
) -> Option<Fresh> {
    let Expr::Lam(w, _, step) = &body.exprs[lam] else { return None };
    if !crate::lower::sole_use(body, *step, w, Some(0)) {
        return None;
    }
    env.push((w.clone(), Fresh::Tuple(vec![Fresh::Yes, Fresh::No])));
    let f = fresh_in(body, *step, ret, results, env);
    env.pop();
    Some(f)
}

/// The variable a lambda body `b` (binder `i`) copies, element `i` of it:
/// `index i w`, or `if (lt i k) (index i w) z` with `k` a literal or a
/// variable other than `i` (reverse mode's cotangent of a vector's prefix).
/// A `build n` of it is `w` itself when `n` is `w`'s size (and `k >= n`, so
/// `z` is never computed): `(w, k)`.
pub(crate) fn passed_through<'b>(body: &'b ksc_ir::Body, i: &str, b: ExprId) -> Option<(&'b str, Option<ExprId>)> {
    let element = |e: ExprId| {
        let Expr::Call(Callee::Prim(Prim::Index), a) = &body.exprs[e] else { return None };
        let Expr::Tuple(xs) = &body.exprs[*a] else { return None };
        let [x, w] = xs[..] else { return None };
        match (&body.exprs[x], &body.exprs[w]) {
            (Expr::Var(j), Expr::Var(w)) if j == i && w != i => Some(w.as_str()),
            _ => None,
        }
    };
    if let Expr::If(c, hit, _) = &body.exprs[b] {
        let k = below(body, i, *c)?;
        return element(*hit).map(|w| (w, Some(k)));
    }
    element(b).map(|w| (w, None))
}

/// The bound `k` of a condition `c` that is `lt i k` on Integers, with `k`
/// a literal or a variable other than `i` (read once before a loop over
/// `i`; reading it cannot fail).
pub(crate) fn below(body: &ksc_ir::Body, i: &str, c: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Fun(f), args) = &body.exprs[c] else { return None };
    let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
    if f.base != "lt" || !f.derivs.is_empty() || f.base_ty.as_ref() != Some(&ii) {
        return None;
    }
    let Expr::Tuple(xk) = &body.exprs[*args] else { return None };
    let [x, k] = xk[..] else { return None };
    let atom = match &body.exprs[k] {
        Expr::Var(v) => v != i,
        Expr::Lit(_) => true,
        _ => false,
    };
    (matches!(&body.exprs[x], Expr::Var(v) if v == i) && atom).then_some(k)
}

/// Is `e` a `build` of a vector of numbers that copies a variable
/// ([`passed_through`])?
fn passed_build(body: &ksc_ir::Body, e: ExprId) -> bool {
    let Expr::Call(Callee::Prim(Prim::Build), a) = &body.exprs[e] else { return false };
    let Some((_, i, b)) = build_lambda(body, *a) else { return false };
    matches!(body.ty(e), Type::Tensor(1, x) if is_number(x)) && passed_through(body, i, b).is_some()
}

/// The size, index and body of a vector's `build n (lam (i : Integer) b)`,
/// from the build's argument `a`.
pub(crate) fn build_lambda(body: &ksc_ir::Body, a: ExprId) -> Option<(ExprId, &String, ExprId)> {
    let Expr::Tuple(es) = &body.exprs[a] else { return None };
    let [n, lam] = es[..] else { return None };
    let Expr::Lam(i, Type::Integer, b) = &body.exprs[lam] else { return None };
    Some((n, i, *b))
}

fn is_number(t: &Type) -> bool {
    matches!(t, Type::Float | Type::Integer)
}

/// Can a sum of this type start from an identity instead of its first term?
/// (Float sums start from -0.0, which is exact: -0.0 + x == x for every x.)
fn identity_summable(t: &Type) -> bool {
    match t {
        Type::Float | Type::Integer => true,
        Type::Tuple(ts) => ts.iter().all(identity_summable),
        _ => false,
    }
}

/// The number of arguments of a primitive of fixed arity (1 for those that
/// take their arguments as written).
fn arity(p: Prim) -> usize {
    p.arity().unwrap_or(1)
}

/// A primitive's argument: a value, or a lambda written in place.
enum Arg {
    Val(LVal, Type),
    Lam { binder: String, body: ExprId },
}

impl Arg {
    fn val(&self) -> R<(&LVal, &Type)> {
        match self {
            Arg::Val(v, t) => Ok((v, t)),
            Arg::Lam { .. } => internal("a lambda where a value was expected"),
        }
    }
}

impl Lowerer<'_> {
    fn prim_args(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, arg: ExprId, k: usize) -> R<Vec<Arg>> {
        let body = self.body(ctx);
        if k == 1 {
            let t = self.type_of(ctx, arg)?;
            let v = self.lower_expr(fb, st, ctx, arg)?;
            return Ok(vec![Arg::Val(v, t)]);
        }
        match &body.exprs[arg] {
            Expr::Tuple(es) if es.len() == k => {
                let es = es.clone();
                let mut out = Vec::new();
                for c in es {
                    if let Expr::Lam(x, _, b) = &self.body(ctx).exprs[c] {
                        out.push(Arg::Lam { binder: x.clone(), body: *b });
                    } else {
                        let t = self.type_of(ctx, c)?;
                        let v = self.lower_expr(fb, st, ctx, c)?;
                        out.push(Arg::Val(v, t));
                    }
                }
                Ok(out)
            }
            _ => {
                let t = self.type_of(ctx, arg)?;
                let ts = tuple_tys(&t)?.to_vec();
                let v = self.lower_expr(fb, st, ctx, arg)?;
                let vs = parts(fb, v, &t, k)?;
                Ok(vs.into_iter().zip(ts).map(|(v, t)| Arg::Val(v, t)).collect())
            }
        }
    }

    /// The accumulators of `$scan` (`out[i]` before step i, `out[n]` after
    /// the last) or `$scanSum` (with `sum`, its `z` and type: the lambda also
    /// returns a term, added in place into one accumulator that starts as a
    /// copy of z). Stored values must live: a step's temporaries are freed
    /// by copying its new accumulator down to the mark taken after the
    /// previous one was stored.
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        p: Prim,
        lam: &Arg,
        (init, acc_ty): (LVal, &Type),
        (v, vt): (LVal, &Type),
        sum: Option<(LVal, Type)>,
        ty: &Type,
        site: SiteId,
    ) -> R<LVal> {
        let (_, elem_ty) = tensor_ty(vt)?;
        let v = self.serial_input(fb, st, v, vt)?;
        let sum = match sum {
            Some((z, zt)) => Some(self.new_acc(fb, st, z, &zt)?),
            None => None,
        };
        let accs_ty = if sum.is_some() { tuple_tys(ty)?[0].clone() } else { ty.clone() };
        let leaves = self.leaves_of(fb, st, init, acc_ty)?;
        let vars = fold_vars(fb, &leaves);
        let dims = self.dims_of(fb, &v, 1)?;
        let n1 = fb.let_(Rhs::Bin(BinOp::IAddNoCheck, dims[0].clone(), Op::Int(1)), Type::Integer, Some("n1"));
        // n + 1 accumulators: within the limit on elements.
        self.limit_check(fb, std::slice::from_ref(&n1), &p.to_string(), site);
        let out = fb.let_(Rhs::Alloc { dims: vec![n1], elem: acc_ty.clone() }, accs_ty, Some("accs"));
        let nest = self.nest_open(fb, &dims);
        let acc = read_fold_vars(fb, &vars, acc_ty);
        let stored = self.materialize_val(fb, st, acc.clone(), acc_ty)?;
        fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: stored });
        let mark = fb.mark_if(needs_heap(acc_ty));
        let x = self.elem_of(fb, st, &v, &elem_ty, nest.idx(), Some(nest.flat()))?;
        let sum = self.lambda_step(fb, st, ctx, lam, (acc, x), (&vars, acc_ty), sum, mark, site)?;
        self.nest_close(fb, nest);
        let last = read_fold_vars(fb, &vars, acc_ty);
        let stored = self.materialize_val(fb, st, last, acc_ty)?;
        fb.emit(Stmt::Store { arr: out.clone(), idx: dims[0].clone(), val: stored });
        match sum {
            Some(sum) => Ok(LVal::Tuple(vec![LVal::Op(out), self.acc_value(fb, &sum)?])),
            None => Ok(LVal::Op(out)),
        }
    }

    /// One pass of `$scanBlocks` over its blocks k < count, of which the
    /// first `whole` have B elements (`REDUCE_BLOCK`; the others n - kB):
    /// each block's steps from its start, E (then its result is stored at
    /// `dest[k]`) or its carry (then each step's accumulator is stored in
    /// `dest`, at its element's index). Where the accumulator is numbers
    /// (`ksc_ir::prim::scans_in_lanes`), the whole blocks go in groups of L
    /// (`SCAN_LANES`) that advance together (`block_steps`), the rest one
    /// at a time; else every block one at a time, in a loop over k (so a
    /// team may run it).
    #[allow(clippy::too_many_arguments)]
    fn block_pass(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        pass: &BlockPass<'_>,
        start: &BlockStart,
        (count, whole): (Op, Op),
        dest: &Op,
    ) -> R<()> {
        let bsz = ksc_ir::prim::REDUCE_BLOCK;
        let lanes = if ksc_ir::prim::scans_in_lanes(pass.tys.0) { ksc_ir::prim::SCAN_LANES } else { 1 };
        let first = if lanes > 1 {
            let groups = self.int_arith(fb, IOp::Div, whole, Op::Int(lanes), pass.site);
            let nest = self.nest_open(fb, std::slice::from_ref(&groups));
            let base = fb.let_(Rhs::Bin(BinOp::IMulNoCheck, nest.flat(), Op::Int(lanes)), Type::Integer, None);
            let mut ks = Vec::new();
            let mut starts = Vec::new();
            for l in 0..lanes {
                let k = fb.let_(Rhs::Bin(BinOp::IAddNoCheck, base.clone(), Op::Int(l)), Type::Integer, Some("k"));
                starts.push(self.block_start(fb, st, start, pass.tys.0, &k)?);
                ks.push(k);
            }
            let los: Vec<Op> = ks
                .iter()
                .map(|k| fb.let_(Rhs::Bin(BinOp::IMulNoCheck, k.clone(), Op::Int(bsz)), Type::Integer, Some("lo")))
                .collect();
            let out = matches!(start, BlockStart::Carries(_)).then_some(dest);
            let vars = self.block_steps(fb, st, ctx, pass, (starts, &los[..], Op::Int(bsz)), out)?;
            if out.is_none() {
                for (k, vars) in ks.into_iter().zip(vars) {
                    self.store_block_result(fb, st, pass.tys.0, &vars, dest, k)?;
                }
            }
            self.nest_close(fb, nest);
            Some(bin(fb, BinOp::IMulNoCheck, groups, Op::Int(lanes)))
        } else {
            None
        };
        // The blocks left over (all of them, one at a time, without lanes).
        let left = match &first {
            Some(f) => self.int_arith(fb, IOp::Sub, count, f.clone(), pass.site),
            None => count,
        };
        let nest = self.nest_open(fb, std::slice::from_ref(&left));
        let k = match first {
            Some(f) => fb.let_(Rhs::Bin(BinOp::IAddNoCheck, f, nest.flat()), Type::Integer, Some("k")),
            None => nest.flat(),
        };
        let lo = fb.let_(Rhs::Bin(BinOp::IMulNoCheck, k.clone(), Op::Int(bsz)), Type::Integer, Some("lo"));
        let b0 = self.block_start(fb, st, start, pass.tys.0, &k)?;
        let (len, out) = match start {
            BlockStart::From(_) => (Op::Int(bsz), None),
            BlockStart::Carries(_) => {
                let rest = self.int_arith(fb, IOp::Sub, pass.n.clone(), lo.clone(), pass.site);
                let short = bin(fb, BinOp::ILt, rest.clone(), Op::Int(bsz));
                (fb.let_(Rhs::Select(short, rest, Op::Int(bsz)), Type::Integer, Some("len")), Some(dest))
            }
        };
        let mut vars = self.block_steps(fb, st, ctx, pass, (vec![b0], std::slice::from_ref(&lo), len), out)?;
        if out.is_none() {
            self.store_block_result(fb, st, pass.tys.0, &vars.remove(0), dest, k)?;
        }
        self.nest_close(fb, nest);
        Ok(())
    }

    /// Block k's result, held in `vars`, stored at `dest[k]`.
    fn store_block_result(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        acc_ty: &Type,
        vars: &[VarId],
        dest: &Op,
        k: Op,
    ) -> R<()> {
        let sum = read_fold_vars(fb, vars, acc_ty);
        let sum = self.materialize_val(fb, st, sum, acc_ty)?;
        fb.emit(Stmt::Store { arr: dest.clone(), idx: k, val: sum });
        Ok(())
    }

    /// Block k's accumulator before its first step.
    fn block_start(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        start: &BlockStart,
        acc_ty: &Type,
        k: &Op,
    ) -> R<LVal> {
        match start {
            BlockStart::From(e) => Ok(e.clone()),
            BlockStart::Carries(c) => self.elem_of(fb, st, c, acc_ty, std::slice::from_ref(k), Some(k.clone())),
        }
    }

    /// The steps of the lambda over `v[lo .. lo + len)` of one block, or
    /// over the whole blocks of several (the lanes, from `starts`, at
    /// `los`, `len` being B), in one loop of their own, each block's
    /// accumulator in its own variables; the variables holding each
    /// block's result. The lanes advance together: round r runs step r - l
    /// skew of each lane l in turn, where it has one
    /// (`ksc_ir::prim::lane_rounds`, `lane_step`; a lane's guard is
    /// left out where the loop's bounds imply it). With `out`, each step's
    /// accumulator is stored at its element's index, living on (copied down
    /// to a mark taken after the previous one was stored, as a scan's);
    /// otherwise the steps' memory is freed (copied down to a mark taken
    /// before them, as a fold's). Several blocks only where the accumulator
    /// is numbers (`scans_in_lanes`): no memory.
    fn block_steps(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        pass: &BlockPass<'_>,
        (starts, los, len): (Vec<LVal>, &[Op], Op),
        out: Option<&Op>,
    ) -> R<Vec<Vec<VarId>>> {
        let (acc_ty, elem_ty) = pass.tys;
        debug_assert!(starts.len() == 1 || !needs_heap(acc_ty), "lanes of accumulators in memory");
        let mut lanes = Vec::new();
        for s in starts {
            let leaves = self.leaves_of(fb, st, s, acc_ty)?;
            lanes.push(fold_vars(fb, &leaves));
        }
        let count = lanes.len() as i64;
        let rounds = if count > 1 { Op::Int(ksc_ir::prim::lane_rounds(count)) } else { len.clone() };
        let fold_mark = if out.is_none() { fb.mark_if(needs_heap(acc_ty)) } else { None };
        let steps = self.nest_open(fb, &[rounds]);
        let mark = if out.is_some() { fb.mark_if(needs_heap(acc_ty)) } else { fold_mark };
        for (l, (vars, lo)) in (0..count).zip(lanes.iter().zip(los)) {
            // Step j = r - l skew of lane l, if 0 <= j (implied for lane 0)
            // and j < B (implied for the last lane).
            let skew = l * ksc_ir::prim::SCAN_LANE_SKEW;
            let j = match skew {
                0 => steps.flat(),
                _ => fb.let_(Rhs::Bin(BinOp::IAddNoCheck, steps.flat(), Op::Int(-skew)), Type::Integer, Some("j")),
            };
            let mut guards = Vec::new();
            if l > 0 {
                guards.push(bin(fb, BinOp::IGe, j.clone(), Op::Int(0)));
            }
            if l + 1 < count {
                guards.push(bin(fb, BinOp::ILt, j.clone(), len.clone()));
            }
            for _ in &guards {
                fb.push_block();
            }
            let at = fb.let_(Rhs::Bin(BinOp::IAddNoCheck, lo.clone(), j), Type::Integer, None);
            let acc = read_fold_vars(fb, vars, acc_ty);
            let x = self.elem_of(fb, st, pass.v, elem_ty, std::slice::from_ref(&at), Some(at.clone()))?;
            self.lambda_step(fb, st, ctx, pass.lam, (acc, x), (vars, acc_ty), None, mark, pass.site)?;
            if let Some(out) = out {
                let now = read_fold_vars(fb, vars, acc_ty);
                let stored = self.materialize_val(fb, st, now, acc_ty)?;
                fb.emit(Stmt::Store { arr: out.clone(), idx: at, val: stored });
            }
            for cond in guards.into_iter().rev() {
                let then = fb.pop_block();
                fb.emit(Stmt::If { cond, then, els: vec![] });
            }
        }
        self.nest_close(fb, steps);
        Ok(lanes)
    }

    /// One step of a scan's lambda `lam` (a `$scan`'s, `$scanSum`'s or
    /// `$scanBlocks`'): applied to the accumulator `acc` and the element
    /// `x`, its new accumulator into the leaf variables `vars` (copied down
    /// to `mark` where they live on the heap), and, for `$scanSum`, its
    /// term added into `sum`, which it gives back.
    #[allow(clippy::too_many_arguments)]
    fn lambda_step(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        lam: &Arg,
        (acc, x): (LVal, LVal),
        (vars, acc_ty): (&[VarId], &Type),
        sum: Option<Acc>,
        mark: Option<VarId>,
        site: SiteId,
    ) -> R<Option<Acc>> {
        let Arg::Lam { binder, body } = lam else {
            return internal("a scan of a lambda that is not written in place");
        };
        let new = fb.var(acc_ty.clone(), Some("acc"), true);
        fb.emit(Stmt::DeclMut(new, None));
        let inner = ctx.with_binding(binder, LVal::Tuple(vec![acc, x]));
        let set = Acc::Set(new, acc_ty.clone());
        let summed = sum.is_some();
        let target = match sum {
            Some(sum) => Acc::Tuple(vec![set, sum]),
            None => set,
        };
        let start = fb.position();
        self.accumulate_expr(fb, st, &inner, &target, *body, site)?;
        // A flat tuple assigned whole: its operands are the new leaves (a
        // copy of the tuple and its projections would keep every operand
        // alive where some leaves are never read).
        let packed = match acc_ty {
            Type::Tuple(ts) if !summed && ts.iter().all(|t| !matches!(t, Type::Tuple(_))) => {
                fb.packed_set(new, start).filter(|ops| ops.len() == ts.len()).map(|ops| (ops, ts))
            }
            _ => None,
        };
        let new = match packed {
            Some((ops, ts)) => ops.into_iter().zip(ts.iter().cloned()).collect(),
            None => {
                let new = fb.let_(Rhs::Copy(Op::Var(new)), acc_ty.clone(), None);
                let new = split(fb, new, acc_ty);
                self.leaves_of(fb, st, new, acc_ty)?
            }
        };
        for (&var, (o, _)) in vars.iter().zip(new) {
            fb.emit(Stmt::Set(var, o));
        }
        if let Some(m) = mark {
            let hv: Vec<VarId> = vars.iter().copied().filter(|v| needs_heap(fb.ty(*v))).collect();
            fb.emit(Stmt::CopyDown { mark: m, vars: hv });
        }
        Ok(match target {
            Acc::Tuple(mut accs) => accs.pop(),
            _ => None,
        })
    }

    fn apply(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, lam: &Arg, x: LVal) -> R<LVal> {
        match lam {
            Arg::Lam { binder, body } => {
                let inner = ctx.with_binding(binder, x);
                self.lower_expr(fb, st, &inner, *body)
            }
            Arg::Val(..) => internal("a lambda that is not written in place"),
        }
    }

    /// Does evaluating `e` print (directly or through a call)?
    pub(crate) fn has_effect(&self, ctx: &Ctx, e: ExprId) -> bool {
        let body = self.body(ctx);
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match &body.exprs[e] {
                Expr::Call(Callee::Prim(p), a) => {
                    if p.has_effect() {
                        return true;
                    }
                    stack.push(*a);
                }
                Expr::Call(Callee::Fun(n), a) => {
                    if self.def_index(n).is_some_and(|d| self.effectful_def(d)) {
                        return true;
                    }
                    stack.push(*a);
                }
                Expr::Tuple(es) => stack.extend(es),
                Expr::Let(_, r, b) | Expr::Assert(r, b, _) => stack.extend([*r, *b]),
                Expr::If(c, t, f) => stack.extend([*c, *t, *f]),
                Expr::Lam(_, _, b) => stack.push(*b),
                Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => {}
            }
        }
        false
    }

    pub(crate) fn lower_prim(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        e: ExprId,
        p: Prim,
        arg: ExprId,
    ) -> R<LVal> {
        let ty = self.type_of(ctx, e)?;
        let site = self.site_of(ctx, e);
        match p {
            Prim::Print => {
                let parts = self.body(ctx).call_args(arg);
                let n = parts.len() as i64;
                for c in parts {
                    let t = self.type_of(ctx, c)?;
                    let v = self.lower_expr(fb, st, ctx, c)?;
                    if matches!(v, LVal::Never) {
                        return Ok(LVal::Never);
                    }
                    let o = self.materialize_val(fb, st, v, &t)?;
                    fb.emit(Stmt::Print { val: o, ty: t });
                }
                return Ok(LVal::Op(Op::Int(n - 1)));
            }
            Prim::VecInit => {
                let parts = self.body(ctx).call_args(arg);
                let (_, elem) = tensor_ty(&ty)?;
                let mut ops = Vec::new();
                for c in parts {
                    let v = self.lower_expr(fb, st, ctx, c)?;
                    ops.push(self.materialize_val(fb, st, v, &elem)?);
                }
                let arr = fb.let_(Rhs::Alloc { dims: vec![Op::Int(ops.len() as i64)], elem }, ty.clone(), None);
                for (i, o) in ops.into_iter().enumerate() {
                    fb.emit(Stmt::Store { arr: arr.clone(), idx: Op::Int(i as i64), val: o });
                }
                return Ok(LVal::Op(arr));
            }
            Prim::TsAdd if flat_tensors(&ty) => {
                // `ts_add a b` of tensors: a's value (not copied when it is
                // fresh) becomes the accumulator, and b is added into it in
                // place through its structure, so a chain of one-hot
                // contributions is `acc[i] += v` each, not a vector each.
                if let [a, b] = self.body(ctx).call_args(arg)[..] {
                    // `ts_add (deltaVec ..) v` with v a tensor this code owns
                    // (a variable read nowhere else, whose reading cannot
                    // fail, so the order does not matter): the one-hot is
                    // added into v, not v into a vector of zeros (the
                    // cotangent a recursion's reverse pass returns, added
                    // to at each level).
                    let body = self.body(ctx);
                    let one_hot = matches!(&body.exprs[a], Expr::Call(Callee::Prim(Prim::DeltaVec), _));
                    let var_read = match &body.exprs[b] {
                        Expr::Var(_) => true,
                        Expr::Call(Callee::Prim(Prim::Get { .. }), t) => matches!(&body.exprs[*t], Expr::Var(_)),
                        _ => false,
                    };
                    let mut second = None;
                    if one_hot && var_read {
                        let v = self.lower_expr(fb, st, ctx, b)?;
                        let body = self.body(ctx);
                        if self.owned_operand(fb, body, b, &v) {
                            let acc = self.new_acc_owned(fb, st, v, &ty, true)?;
                            self.accumulate_expr(fb, st, ctx, &acc, a, site)?;
                            return self.acc_value(fb, &acc);
                        }
                        second = Some(v);
                    }
                    let first = self.lower_expr(fb, st, ctx, a)?;
                    if matches!(first, LVal::Never) {
                        return Ok(LVal::Never);
                    }
                    let acc = self.owned_acc(fb, st, ctx, a, first, &ty)?;
                    match second {
                        Some(v) => self.accumulate_lval(fb, st, &acc, v, &ty, site)?,
                        None => self.accumulate_expr(fb, st, ctx, &acc, b, site)?,
                    }
                    return self.acc_value(fb, &acc);
                }
            }
            _ => {}
        }
        let args = self.prim_args(fb, st, ctx, arg, arity(p))?;
        if args.iter().any(|a| matches!(a, Arg::Val(LVal::Never, _))) {
            return Ok(LVal::Never);
        }
        match p {
            Prim::Build => {
                let (size, _) = args[0].val()?;
                let dims = index_ops(size)?;
                self.tensor_sizes_check(fb, &dims, "build", site);
                let Arg::Lam { binder, body } = &args[1] else {
                    return internal("`build` of a lambda that is not written in place");
                };
                if let Expr::Lit(_) = &self.body(ctx).exprs[*body] {
                    // A vector of one literal (a zero tangent): a
                    // `constVec`, whose reads are the literal, never stored.
                    let v = self.lower_expr(fb, st, ctx, *body)?;
                    return Ok(LVal::Delayed(Rc::new(Delayed::constant(dims, v))));
                }
                let d = LVal::Delayed(Rc::new(Delayed::lam(dims, binder.clone(), *body, ctx.clone())));
                // Effects happen where the interpreter has them: now. With
                // `--skip-pass fuse-builds` every build is stored now.
                if self.has_effect(ctx, *body) || ksc_ir::pass::skips_pass("fuse-builds") {
                    return Ok(LVal::Op(self.materialize_val(fb, st, d, &ty)?));
                }
                Ok(d)
            }
            Prim::Sumbuild => {
                let (size, _) = args[0].val()?;
                let dims = index_ops(size)?;
                self.sizes_check(fb, &dims, "sumbuild", site);
                let Arg::Lam { binder, body } = &args[1] else {
                    return internal("`sumbuild` of a lambda that is not written in place");
                };
                let d = LVal::Delayed(Rc::new(Delayed::lam(dims.clone(), binder.clone(), *body, ctx.clone())));
                self.sum(fb, st, &d, dims.len(), &ty, site, ErrorKind::SumbuildEmpty { size: dims.clone() })
            }
            Prim::TapePush => {
                let (t, tt) = args[0].val()?;
                let (r, rt) = args[1].val()?;
                let (t, tt, r, rt) = (t.clone(), tt.clone(), r.clone(), rt.clone());
                let tape = self.materialize_val(fb, st, t, &tt)?;
                let val = self.materialize_val(fb, st, r, &rt)?;
                // The tape grows by one record: within the limit on elements.
                let len = fb.let_(Rhs::Dim { arr: tape.clone(), dim: 0 }, Type::Integer, None);
                let n = fb.let_(Rhs::Bin(BinOp::IAddNoCheck, len, Op::Int(1)), Type::Integer, None);
                self.limit_check(fb, &[n], "$tapePush", site);
                Ok(LVal::Op(fb.let_(Rhs::TapePush { tape, val, elem: rt }, ty.clone(), Some("tape"))))
            }
            Prim::Sum => {
                let (v, vt) = args[0].val()?;
                let (rank, _) = tensor_ty(vt)?;
                self.sum(fb, st, v, rank, &ty, site, ErrorKind::Message("`sum` of an empty tensor".into()))
            }
            Prim::Index => {
                let (i, _) = args[0].val()?;
                let (v, vt) = args[1].val()?;
                let (rank, elem_ty) = tensor_ty(vt)?;
                let idx = index_ops(i)?;
                let dims = self.dims_of(fb, v, rank)?;
                if self.checked() {
                    let cond = in_range(fb, &idx, &dims);
                    if cond != Op::Bool(true) {
                        fb.emit(Stmt::Check {
                            cond,
                            site,
                            err: ErrorKind::IndexOutOfRange { index: idx.clone(), size: dims },
                        });
                    }
                }
                self.elem_of(fb, st, v, &elem_ty, &idx, None)
            }
            Prim::Size => {
                let (v, vt) = args[0].val()?;
                let (rank, _) = tensor_ty(vt)?;
                let dims = self.dims_of(fb, v, rank)?;
                Ok(index_lval(&dims))
            }
            Prim::Shape => {
                let (v, vt) = args[0].val()?;
                self.shape(fb, st, v.clone(), &vt.clone())
            }
            Prim::TangentDim => {
                let (v, vt) = args[0].val()?;
                Ok(LVal::Op(self.tangent_dim(fb, st, v.clone(), &vt.clone())?))
            }
            Prim::TangentFlatten => {
                let (v, vt) = args[0].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                let n = self.tangent_dim(fb, st, v.clone(), &vt)?;
                self.limit_check(fb, std::slice::from_ref(&n), "$tangentFlatten", site);
                let out = fb.let_(Rhs::Alloc { dims: vec![n], elem: Type::Float }, ty.clone(), None);
                let pos = fb.var(Type::Integer, Some("pos"), true);
                fb.emit(Stmt::DeclMut(pos, Some(Op::Int(0))));
                self.each_float(fb, st, v, &vt, &mut |fb, x| {
                    fb.emit(Stmt::Store { arr: out.clone(), idx: Op::Var(pos), val: x });
                    let next = bin(fb, BinOp::IAddNoCheck, Op::Var(pos), Op::Int(1));
                    fb.emit(Stmt::Set(pos, next));
                })?;
                Ok(LVal::Op(out))
            }
            Prim::Concat | Prim::ConcatN => {
                // Two passes over the tensors: their total size, then the
                // copies. A `build` of tensors whose sizes come without
                // allocating or calling (views, `constVec`s, lazy `build`s)
                // is computed in each pass, not stored; any other is
                // materialised first, so its elements are computed once.
                // `$concatN n ts` knows the total: one pass, each tensor
                // computed, copied and dropped (the loop resets the arena),
                // with checks that the sizes add up to n (the product of
                // the result's sizes `out_dims`).
                let (out_dims, given) = match p {
                    Prim::ConcatN => {
                        let dims = index_ops(args[0].val()?.0)?;
                        self.tensor_sizes_check(fb, &dims, "$concatN", site);
                        let n = self.count_of(fb, &dims);
                        (Some(dims), Some(n))
                    }
                    _ => (None, None),
                };
                let (v, vt) = args[usize::from(given.is_some())].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                let (_, inner_ty) = tensor_ty(&vt)?;
                let (rank, elem_ty) = tensor_ty(&inner_ty)?;
                // The total counted by the sizes pass of `$concat`.
                let total = fb.var(Type::Integer, Some("total"), true);
                if given.is_none() {
                    fb.emit(Stmt::DeclMut(total, Some(Op::Int(0))));
                }
                let sizes = |this: &mut Self, fb: &mut FnBuilder, st: &mut FnState, v: &LVal| -> R<()> {
                    let dims = this.dims_of(fb, v, 1)?;
                    let nest = this.nest_open(fb, &dims);
                    let x = this.elem_of(fb, st, v, &inner_ty, nest.idx(), Some(nest.flat()))?;
                    let d = this.dims_of(fb, &x, rank)?;
                    let count = this.count_of(fb, &d);
                    let next = bin(fb, BinOp::IAddNoCheck, Op::Var(total), count);
                    fb.emit(Stmt::Set(total, next));
                    this.nest_close(fb, nest);
                    Ok(())
                };
                let lazy = given.is_some()
                    || matches!(v, LVal::Delayed(_)) && {
                        fb.push_block();
                        sizes(self, fb, st, &v)?;
                        let pass = fb.pop_block();
                        let cheap = !crate::builder::allocates(&pass);
                        if cheap {
                            for s in pass {
                                fb.emit(s);
                            }
                        }
                        cheap
                    };
                let v = if lazy {
                    v
                } else {
                    let v = LVal::Op(self.materialize_val(fb, st, v, &vt)?);
                    sizes(self, fb, st, &v)?;
                    v
                };
                let dims = self.dims_of(fb, &v, 1)?;
                if given.is_none() {
                    // The interpreter's check of the total (each tensor is
                    // within the limit, so the sum cannot overflow).
                    self.limit_check(fb, &[Op::Var(total)], "$concat", site);
                }
                let dims_out = out_dims.unwrap_or_else(|| vec![Op::Var(total)]);
                let out = fb.let_(Rhs::Alloc { dims: dims_out, elem: elem_ty.clone() }, ty.clone(), None);
                let pos = fb.var(Type::Integer, Some("pos"), true);
                fb.emit(Stmt::DeclMut(pos, Some(Op::Int(0))));
                let nest = self.nest_open(fb, &dims);
                // Each tensor is copied where it is made: in each branch of
                // an `if` that picks how (not merged and materialised first).
                let mut copy = |this: &mut Self, fb: &mut FnBuilder, st: &mut FnState, x: LVal| -> R<()> {
                    let d = this.dims_of(fb, &x, rank)?;
                    if let Some(n) = &given {
                        let count = this.count_of(fb, &d);
                        let end = bin(fb, BinOp::IAddNoCheck, Op::Var(pos), count);
                        let cond = bin(fb, BinOp::ILe, end.clone(), n.clone());
                        let what =
                            "`$concatN` of tensors of more elements than its size (elements so far, size)".to_string();
                        fb.emit(Stmt::Check {
                            cond,
                            site,
                            err: ErrorKind::Sizes { what, a: vec![end], b: vec![n.clone()] },
                        });
                    }
                    // A materialised tensor of scalars is copied by one loop
                    // over its row-major elements (emitted as `ksrt_copy_f`
                    // for Floats).
                    let flat_src = match &x {
                        LVal::Op(o) if rank > 1 && matches!(elem_ty, Type::Float | Type::Integer | Type::Bool) => {
                            Some(o.clone())
                        }
                        _ => None,
                    };
                    let inner = match &flat_src {
                        Some(_) => {
                            let count = this.count_of(fb, &d);
                            this.nest_open(fb, &[count])
                        }
                        None => this.nest_open(fb, &d),
                    };
                    let y = match flat_src {
                        Some(src) => fb.let_(Rhs::Load { arr: src, idx: inner.flat() }, elem_ty.clone(), None),
                        None => {
                            let y = this.elem_of(fb, st, &x, &elem_ty, inner.idx(), Some(inner.flat()))?;
                            this.materialize_val(fb, st, y, &elem_ty)?
                        }
                    };
                    fb.emit(Stmt::Store { arr: out.clone(), idx: Op::Var(pos), val: y });
                    let next = bin(fb, BinOp::IAddNoCheck, Op::Var(pos), Op::Int(1));
                    fb.emit(Stmt::Set(pos, next));
                    this.nest_close(fb, inner);
                    Ok(())
                };
                self.with_elem(fb, st, &v, &inner_ty, (nest.idx(), nest.flat()), &mut copy)?;
                self.nest_close(fb, nest);
                if let Some(n) = given {
                    let cond = bin(fb, BinOp::IEq, Op::Var(pos), n.clone());
                    let what = "`$concatN` of tensors of fewer elements than its size (elements, size):".to_string();
                    fb.emit(Stmt::Check {
                        cond,
                        site,
                        err: ErrorKind::Sizes { what, a: vec![Op::Var(pos)], b: vec![n] },
                    });
                }
                Ok(LVal::Op(out))
            }
            Prim::TangentBasis => {
                let (v, vt) = args[0].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                let (k, _) = args[1].val()?;
                let k = lval_op(k)?;
                let pos = fb.var(Type::Integer, Some("pos"), true);
                fb.emit(Stmt::DeclMut(pos, Some(Op::Int(0))));
                self.tangent_basis(fb, st, v, &vt, &k, pos)
            }
            Prim::BuildSum => {
                // out[i] = e_i and acc += s_i in one loop; acc starts as a
                // copy of z. Heap elements are copied down after their
                // iteration, as in `build`.
                let (size, _) = args[0].val()?;
                let dims = index_ops(size)?;
                self.tensor_sizes_check(fb, &dims, "$buildSum", site);
                let (z, zt) = args[1].val()?;
                let (z, zt) = (z.clone(), zt.clone());
                let Arg::Lam { binder, body } = &args[2] else {
                    return internal("`$buildSum` of a lambda that is not written in place");
                };
                let (binder, body) = (binder.clone(), *body);
                let out_ty = tuple_tys(&ty)?[0].clone();
                let (_, elem_ty) = tensor_ty(&out_ty)?;
                let out = fb.let_(Rhs::Alloc { dims: dims.clone(), elem: elem_ty.clone() }, out_ty, None);
                let sum = self.new_acc(fb, st, z, &zt)?;
                let nest = self.nest_open(fb, &dims);
                let mark = fb.mark_if(needs_heap(&elem_ty));
                let elem = fb.var(elem_ty.clone(), Some("elem"), true);
                fb.emit(Stmt::DeclMut(elem, None));
                let inner = ctx.with_binding(&binder, index_lval(nest.idx()));
                let both = Acc::Tuple(vec![Acc::Set(elem, elem_ty), sum]);
                self.accumulate_expr(fb, st, &inner, &both, body, site)?;
                if let Some(m) = mark {
                    fb.emit(Stmt::CopyDown { mark: m, vars: vec![elem] });
                }
                fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: Op::Var(elem) });
                self.nest_close(fb, nest);
                let Acc::Tuple(accs) = &both else { return internal("$buildSum") };
                let total = self.acc_value(fb, &accs[1])?;
                Ok(LVal::Tuple(vec![LVal::Op(out), total]))
            }
            Prim::Fold => {
                let (init, acc_ty) = args[1].val()?;
                let (v, vt) = args[2].val()?;
                let (_, elem_ty) = tensor_ty(vt)?;
                let (init, acc_ty, v) = (init.clone(), acc_ty.clone(), v.clone());
                let v = self.serial_input(fb, st, v, vt)?;
                // A fold that owns its accumulator (`Lowerer::fold_owns`)
                // starts from owned storage (or a copy), and its step owns
                // its parameter's accumulator, which it hands on (to a
                // `[sufrevacc f]` that adds into it). Its steps' memory is
                // kept (as a tape's): a copy-down of the accumulators per
                // step would make reverse mode's threaded loops quadratic.
                let es = self.body(ctx).call_args(arg);
                let owns = es.len() == 3 && needs_heap(&acc_ty) && self.fold_owns(ctx.def, self.body(ctx), es[0]);
                let init = if owns { self.consumable(fb, st, ctx, Some(es[1]), init, &acc_ty)? } else { init };
                let leaves = self.leaves_of(fb, st, init, &acc_ty)?;
                let vars = fold_vars(fb, &leaves);
                let dims = self.dims_of(fb, &v, 1)?;
                let mark = fb.mark_if(needs_heap(&acc_ty));
                let nest = self.nest_open(fb, &dims);
                let start = fb.position();
                let acc = read_fold_vars(fb, &vars, &acc_ty);
                let x = self.elem_of(fb, st, &v, &elem_ty, nest.idx(), Some(nest.flat()))?;
                let step_param = match (&args[0], owns) {
                    (Arg::Lam { binder, .. }, true) => Some(binder.clone()),
                    _ => None,
                };
                if let Some(w) = &step_param {
                    let fresh = Fresh::Tuple(vec![Fresh::Yes, Fresh::No]);
                    self.step_params.push((ctx.def, w.clone(), fresh));
                }
                let r = self.apply(fb, st, ctx, &args[0], LVal::Tuple(vec![acc, x]));
                if step_param.is_some() {
                    self.step_params.pop();
                }
                let new = self.leaves_of(fb, st, r?, &acc_ty)?;
                for (&var, (o, _)) in vars.iter().zip(new) {
                    fb.emit(Stmt::Set(var, o));
                }
                // A step that appends to a tape (the forward pass of a
                // recursive function whose calls are in a loop, `tape.rs`)
                // keeps its memory: the records outlive the step, and a copy
                // of the tape per step would make the loop quadratic.
                if let Some(m) = mark.filter(|_| !owns && !fb.pushes_tape_since(start)) {
                    let hv: Vec<VarId> = vars.iter().copied().filter(|v| needs_heap(fb.ty(*v))).collect();
                    fb.emit(Stmt::CopyDown { mark: m, vars: hv });
                }
                self.nest_close(fb, nest);
                Ok(read_fold_vars(fb, &vars, &acc_ty))
            }
            Prim::Scan | Prim::ScanSum => {
                let (init, acc_ty) = args[1].val()?;
                let (v, vt) = args[args.len() - 1].val()?;
                let sum = match p {
                    Prim::ScanSum => Some(args[2].val().map(|(z, zt)| (z.clone(), zt.clone()))?),
                    _ => None,
                };
                let (init, acc_ty, v, vt) = (init.clone(), acc_ty.clone(), v.clone(), vt.clone());
                self.scan(fb, st, ctx, p, &args[0], (init, &acc_ty), (v, &vt), sum, &ty, site)
            }
            Prim::ScanBlocks => {
                // `scan`'s blocked order (`ksc_ir::prim::REDUCE_BLOCK`), in
                // three passes: the blocks but the last, each folded from E
                // into its own element of the results s; the carries as
                // `$scan OP E s`; every block, scanned from carry k into its
                // own slab of the result, [kB, kB + len) with len = min(B, n
                // - kB). The passes over blocks are independent loops, so a
                // team runs them (ksc-codegen-c's `parallel.rs` sees the
                // slab); each block's steps run in order, as the
                // interpreter's do, and in lanes (`SCAN_LANES` full blocks
                // advancing together) where the accumulator is numbers.
                let (e, acc_ty) = args[1].val()?;
                let (v, vt) = args[2].val()?;
                let (_, elem_ty) = tensor_ty(vt)?;
                let (e, acc_ty, v) = (e.clone(), acc_ty.clone(), v.clone());
                let n = self.dims_of(fb, &v, 1)?.remove(0);
                let block = Op::Int(ksc_ir::prim::REDUCE_BLOCK);
                let up = bin(fb, BinOp::IAddNoCheck, n.clone(), Op::Int(ksc_ir::prim::REDUCE_BLOCK - 1));
                let m = self.int_arith(fb, IOp::Div, up, block.clone(), site);
                let none = bin(fb, BinOp::ILt, m.clone(), Op::Int(1));
                let before = self.int_arith(fb, IOp::Sub, m.clone(), Op::Int(1), site);
                let full = fb.let_(Rhs::Select(none, Op::Int(0), before), Type::Integer, Some("full"));
                let vec_ty = Type::vec(acc_ty.clone());
                let sums = fb.let_(Rhs::Alloc { dims: vec![full.clone()], elem: acc_ty.clone() }, vec_ty.clone(), None);
                let tys = (&acc_ty, &elem_ty);
                let pass = BlockPass { lam: &args[0], tys, v: &v, n: &n, site };
                self.block_pass(fb, st, ctx, &pass, &BlockStart::From(e.clone()), (full.clone(), full), &sums)?;
                let carries = (LVal::Op(sums), &vec_ty);
                let carries =
                    self.scan(fb, st, ctx, Prim::Scan, &args[0], (e, &acc_ty), carries, None, &vec_ty, site)?;
                let out = fb.let_(Rhs::Alloc { dims: vec![n.clone()], elem: acc_ty.clone() }, ty.clone(), None);
                let whole = self.int_arith(fb, IOp::Div, n.clone(), block, site);
                self.block_pass(fb, st, ctx, &pass, &BlockStart::Carries(carries), (m, whole), &out)?;
                Ok(LVal::Op(out))
            }
            Prim::Map | Prim::Map2 => {
                let (rank, out_elem) = tensor_ty(&ty)?;
                let srcs: Vec<(LVal, Type)> =
                    args[1..].iter().map(|a| a.val().map(|(v, t)| (v.clone(), t.clone()))).collect::<R<_>>()?;
                let dims = self.dims_of(fb, &srcs[0].0, rank)?;
                if p == Prim::Map2 {
                    let d2 = self.dims_of(fb, &srcs[1].0, rank)?;
                    self.same_dims_check(fb, &dims, &d2, "`map2` of tensors of different sizes", site);
                }
                let out = fb.let_(Rhs::Alloc { dims: dims.clone(), elem: out_elem.clone() }, ty.clone(), None);
                let nest = self.nest_open(fb, &dims);
                let mut xs = Vec::new();
                for (v, t) in &srcs {
                    let (_, et) = tensor_ty(t)?;
                    xs.push(self.elem_of(fb, st, v, &et, nest.idx(), Some(nest.flat()))?);
                }
                let x = if xs.len() == 1 { xs.pop().unwrap_or(LVal::Never) } else { LVal::Tuple(xs) };
                let y = self.apply(fb, st, ctx, &args[0], x)?;
                let y = self.materialize_val(fb, st, y, &out_elem)?;
                fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: y });
                self.nest_close(fb, nest);
                Ok(LVal::Op(out))
            }
            Prim::Unzip => {
                let (v, vt) = args[0].val()?;
                let (rank, elem) = tensor_ty(vt)?;
                let comps = tuple_tys(&elem)?.to_vec();
                let v = v.clone();
                let dims = self.dims_of(fb, &v, rank)?;
                let outs: Vec<Op> = comps
                    .iter()
                    .map(|t| {
                        fb.let_(Rhs::Alloc { dims: dims.clone(), elem: t.clone() }, Type::tensor(rank, t.clone()), None)
                    })
                    .collect();
                let nest = self.nest_open(fb, &dims);
                // As in `build`: components that live on the heap are copied
                // down after each iteration, so its temporaries are freed.
                let mark = fb.mark_if(comps.iter().any(needs_heap));
                let start = fb.position();
                let x = self.elem_of(fb, st, &v, &elem, nest.idx(), Some(nest.flat()))?;
                let xs = parts(fb, x, &elem, comps.len())?;
                let mut values = Vec::new();
                for (x, t) in xs.into_iter().zip(&comps) {
                    values.push((self.materialize_val(fb, st, x, t)?, t.clone()));
                }
                for (o, out) in fb.copy_down_since(mark, start, values).into_iter().zip(&outs) {
                    fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: o });
                }
                self.nest_close(fb, nest);
                Ok(LVal::Tuple(outs.into_iter().map(LVal::Op).collect()))
            }
            Prim::ConstVec => {
                let (size, _) = args[0].val()?;
                let (v, vt) = args[1].val()?;
                let dims = index_ops(size)?;
                self.tensor_sizes_check(fb, &dims, "constVec", site);
                let v = self.force_val(fb, st, v.clone(), &vt.clone())?;
                Ok(LVal::Delayed(Rc::new(Delayed::constant(dims, v))))
            }
            Prim::DeltaVec => {
                let (size, _) = args[0].val()?;
                let (i, _) = args[1].val()?;
                let (v, vt) = args[2].val()?;
                let (dims, idx, v, vt) = (index_ops(size)?, index_ops(i)?, v.clone(), vt.clone());
                self.tensor_sizes_check(fb, &dims, "deltaVec", site);
                self.delta_vec(fb, st, &dims, &idx, v, &vt, &ty)
            }
            Prim::Diag => {
                let rows = lval_op(args[0].val()?.0)?;
                let cols = lval_op(args[1].val()?.0)?;
                let same = bin(fb, BinOp::IEq, rows.clone(), cols.clone());
                fb.emit(Stmt::Check { cond: same, site, err: ErrorKind::Diag { rows: rows.clone(), cols } });
                self.sizes_check(fb, std::slice::from_ref(&rows), "diag", site);
                self.limit_check(fb, &[rows.clone(), rows.clone()], "diag", site);
                let (_, row_ty) = tensor_ty(&ty)?;
                let (_, elem_ty) = tensor_ty(&row_ty)?;
                let out = fb.let_(Rhs::Alloc { dims: vec![rows.clone()], elem: row_ty.clone() }, ty.clone(), None);
                let nest = self.nest_open(fb, std::slice::from_ref(&rows));
                let i = nest.idx()[0].clone();
                let d = self.apply(fb, st, ctx, &args[2], LVal::Op(i.clone()))?;
                let d = self.force_val(fb, st, d, &elem_ty)?;
                let zero = self.zero_like(fb, st, &d, &elem_ty)?;
                let zrow = LVal::Delayed(Rc::new(Delayed::constant(vec![rows.clone()], zero)));
                let row = self.materialize_val(fb, st, zrow, &row_ty)?;
                let d = self.materialize_val(fb, st, d, &elem_ty)?;
                fb.emit(Stmt::Store { arr: row.clone(), idx: i.clone(), val: d });
                fb.emit(Stmt::Store { arr: out.clone(), idx: i, val: row });
                self.nest_close(fb, nest);
                Ok(LVal::Op(out))
            }
            Prim::TsAdd => {
                let (a, at) = args[0].val()?;
                let (b, bt) = args[1].val()?;
                let (a, at, b, bt) = (a.clone(), at.clone(), b.clone(), bt.clone());
                // `ts_add (ts_add x y) z`: the inner sum is new storage,
                // its tensors included, that nothing else holds.
                let body = self.body(ctx);
                let made = matches!(body.call_args(arg)[..], [x, _] if made_by_ts_add(body, x));
                self.ts_add_vals(fb, st, a, &at, b, &bt, site, made)
            }
            Prim::TsScale => {
                let k = lval_op(args[0].val()?.0)?;
                let (v, vt) = args[1].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                self.ts_scale(fb, st, k, v, &vt)
            }
            Prim::TsDot => {
                let (a, at) = args[0].val()?;
                let (b, _) = args[1].val()?;
                let (a, at, b) = (a.clone(), at.clone(), b.clone());
                Ok(LVal::Op(self.ts_dot(fb, st, a, b, &at, site)?))
            }
            Prim::TsNeg => {
                let (v, vt) = args[0].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                self.ts_neg(fb, st, v, &vt, site)
            }
            Prim::Eq | Prim::Ne => {
                let (a, at) = args[0].val()?;
                let (b, _) = args[1].val()?;
                let (a, at, b) = (a.clone(), at.clone(), b.clone());
                let eq = self.equal(fb, st, a, b, &at)?;
                Ok(LVal::Op(if p == Prim::Eq { eq } else { fb.let_(Rhs::Un(UnOp::Not, eq, None), Type::Bool, None) }))
            }
            Prim::Delta => {
                let (i, it) = args[0].val()?;
                let (j, _) = args[1].val()?;
                let (v, vt) = args[2].val()?;
                let (i, it, j, v, vt) = (i.clone(), it.clone(), j.clone(), v.clone(), vt.clone());
                let same = self.equal(fb, st, i, j, &it)?;
                let v = self.force_val(fb, st, v, &vt)?;
                let zero = self.zero_like(fb, st, &v, &vt)?;
                self.select(fb, st, same, v, zero, &vt)
            }
            Prim::Trace => {
                let (v, vt) = args[0].val()?;
                let (v, vt) = (v.clone(), vt.clone());
                let o = self.materialize_val(fb, st, v, &vt)?;
                fb.emit(Stmt::Print { val: Op::Str("Trace[".into()), ty: Type::String });
                fb.emit(Stmt::Print { val: o.clone(), ty: vt.clone() });
                fb.emit(Stmt::Print { val: Op::Str("]\n".into()), ty: Type::String });
                Ok(split(fb, o, &vt))
            }
            Prim::Copydown | Prim::Inline => Ok(args[0].val()?.0.clone()),
            Prim::Get { index, arity } => {
                let (v, vt) = args[0].val()?;
                let comps = parts(fb, v.clone(), vt, arity as usize)?;
                comps
                    .into_iter()
                    .nth(index as usize - 1)
                    .map_or_else(|| internal(format!("`{p}` of a short tuple")), Ok)
            }
            Prim::BuildFromSparse | Prim::BuildFromSparseTupled => {
                let (sh, sht) = args[0].val()?;
                let (n, _) = args[1].val()?;
                let (sh, sht, n) = (sh.clone(), sht.clone(), n.clone());
                let space = index_ops(&n)?;
                let name = if p == Prim::BuildFromSparse { "buildFromSparse" } else { "buildFromSparseTupled" };
                let (shapes, out_tys): (Vec<(LVal, Type)>, Vec<Type>) = if p == Prim::BuildFromSparse {
                    (vec![(sh, sht)], vec![ty.clone()])
                } else {
                    let ts = tuple_tys(&sht)?.to_vec();
                    let vs = parts(fb, sh, &sht, ts.len())?;
                    (vs.into_iter().zip(ts).collect(), tuple_tys(&ty)?.to_vec())
                };
                let mut outs = Vec::new();
                for ((s, st_ty), ot) in shapes.iter().zip(&out_tys) {
                    outs.push(self.zeros_of_shape(fb, st, s, st_ty, ot)?);
                }
                self.sizes_check(fb, &space, name, site);
                let nest = self.nest_open(fb, &space);
                let entry = self.apply(fb, st, ctx, &args[2], index_lval(nest.idx()))?;
                let entries = if p == Prim::BuildFromSparse { vec![entry] } else { components(entry, outs.len())? };
                for ((entry, out), ot) in entries.into_iter().zip(&outs).zip(&out_tys) {
                    let (rank, elem) = tensor_ty(ot)?;
                    let [i, v] = <[LVal; 2]>::try_from(components(entry, 2)?)
                        .map_err(|_| crate::lower::LowerError { message: "an entry that is not a pair".into() })?;
                    let idx = index_ops(&i)?;
                    let dims = self.dims_of(fb, &LVal::Op(out.clone()), rank)?;
                    let cond = in_range(fb, &idx, &dims);
                    if cond != Op::Bool(true) {
                        fb.emit(Stmt::Check {
                            cond,
                            site,
                            err: ErrorKind::IndexOutOfRange { index: idx.clone(), size: dims.clone() },
                        });
                    }
                    let flat = flat_index(fb, &idx, &dims);
                    let slot = self.slot_acc(fb, out.clone(), flat, &elem);
                    self.accumulate_lval(fb, st, &slot, v, &elem, site)?;
                }
                self.nest_close(fb, nest);
                if p == Prim::BuildFromSparse {
                    Ok(LVal::Op(outs.pop().unwrap_or(Op::Unit)))
                } else {
                    Ok(LVal::Tuple(outs.into_iter().map(LVal::Op).collect()))
                }
            }
            Prim::Check => self.lower_check(fb, st, ctx, &args, site),
            Prim::Print | Prim::VecInit => internal("print"),
            p => internal(format!("the linear-map primitive `{p}` reached code generation")),
        }
    }

    /// `sum` of a tensor value (fused with a delayed `build`).
    #[allow(clippy::too_many_arguments)]
    fn sum(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: &LVal,
        rank: usize,
        ty: &Type,
        site: SiteId,
        empty: ErrorKind,
    ) -> R<LVal> {
        let dims = self.dims_of(fb, v, rank)?;
        let total = self.count_sat_of(fb, &dims);
        let nonempty = bin(fb, BinOp::IGt, total, Op::Int(0));
        match nonempty {
            Op::Bool(true) => {}
            cond => fb.emit(Stmt::Check { cond, site, err: empty }),
        }
        if identity_summable(ty) {
            let tys = crate::lower::leaf_types(ty);
            let vars: Vec<VarId> = tys
                .iter()
                .map(|t| {
                    let var = fb.var(t.clone(), Some("sum"), true);
                    let init = if *t == Type::Float { Op::Float(-0.0) } else { Op::Int(0) };
                    fb.emit(Stmt::DeclMut(var, Some(init)));
                    var
                })
                .collect();
            let nest = self.nest_open(fb, &dims);
            let x = self.elem_of(fb, st, v, ty, nest.idx(), Some(nest.flat()))?;
            let xs = self.leaves_of(fb, st, x, ty)?;
            for (&var, (x, t)) in vars.iter().zip(xs) {
                let s = if t == Type::Float {
                    bin(fb, BinOp::FAdd, Op::Var(var), x)
                } else {
                    self.int_arith(fb, IOp::Add, Op::Var(var), x, site)
                };
                fb.emit(Stmt::Set(var, s));
            }
            self.nest_close(fb, nest);
            let out: Vec<Op> =
                vars.iter().zip(&tys).map(|(&var, t)| fb.let_(Rhs::Copy(Op::Var(var)), t.clone(), None)).collect();
            return Ok(crate::lower::rebuild(ty, &mut out.into_iter()));
        }
        // The first term, copied so it can be added into in place, unless
        // the element of a delayed build is new storage (a one-hot, a
        // `build`: reverse mode's sums of one-hots), made here for this sum.
        let zeros = vec![Op::Int(0); rank];
        let first = self.elem_of(fb, st, v, ty, &zeros, Some(Op::Int(0)))?;
        let fresh = match v {
            LVal::Delayed(d) => d.lam_parts().is_some_and(|(_, e, dctx)| self.made_fresh(self.body(dctx), e)),
            _ => false,
        };
        let acc = self.new_acc_owned(fb, st, first, ty, fresh)?;
        let nest = self.nest_open(fb, &dims);
        let not_first = bin(fb, BinOp::IGt, nest.flat(), Op::Int(0));
        fb.push_block();
        // In-place accumulation of the element expression of a delayed build.
        match v {
            LVal::Delayed(d) if d.lam_parts().is_some() => {
                let (binder, body, dctx) = d.lam_parts().expect("checked");
                let inner = dctx.with_binding(binder, index_lval(nest.idx()));
                self.accumulate_expr(fb, st, &inner, &acc, body, site)?;
            }
            _ => {
                let x = self.elem_of(fb, st, v, ty, nest.idx(), Some(nest.flat()))?;
                self.accumulate_lval(fb, st, &acc, x, ty, site)?;
            }
        }
        let then = fb.pop_block();
        fb.emit(Stmt::If { cond: not_first, then, els: vec![] });
        self.nest_close(fb, nest);
        self.acc_value(fb, &acc)
    }

    /// An accumulator initialised with (a copy of) `first`.
    fn new_acc(&mut self, fb: &mut FnBuilder, st: &mut FnState, first: LVal, ty: &Type) -> R<Acc> {
        self.new_acc_owned(fb, st, first, ty, false)
    }

    /// An accumulator initialised with `first`, the value of `a`: not
    /// copied where it is fresh (a new value, or a variable's storage
    /// handed over), each component of a literal tuple by itself (the
    /// cotangents a loop's sum starts from in a recursive reverse pass).
    fn owned_acc(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        a: ExprId,
        first: LVal,
        ty: &Type,
    ) -> R<Acc> {
        let body = self.body(ctx);
        if let (Expr::Tuple(es), LVal::Tuple(vs), Type::Tuple(ts)) = (&body.exprs[a], &first, ty) {
            if es.len() == vs.len() && es.len() == ts.len() {
                let (es, vs) = (es.clone(), vs.clone());
                let mut accs = Vec::with_capacity(es.len());
                for ((e, v), t) in es.into_iter().zip(vs).zip(ts) {
                    accs.push(self.owned_acc(fb, st, ctx, e, v, t)?);
                }
                return Ok(Acc::Tuple(accs));
            }
        }
        let fresh = self.owns(fb, ctx.def, a, &first);
        self.new_acc_owned(fb, st, first, ty, fresh)
    }

    /// An accumulator initialised with `first`, copied unless it is `fresh`
    /// (storage nothing else refers to) or delayed.
    pub(crate) fn new_acc_owned(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        first: LVal,
        ty: &Type,
        fresh: bool,
    ) -> R<Acc> {
        Ok(match ty {
            Type::Float | Type::Integer => {
                let o = lval_op(&first)?;
                let var = fb.var(ty.clone(), Some("acc"), true);
                fb.emit(Stmt::DeclMut(var, Some(o)));
                Acc::Scalar(var, ty.clone())
            }
            Type::Tuple(ts) => {
                let vs = parts(fb, first, ty, ts.len())?;
                let mut accs = Vec::new();
                for (v, t) in vs.into_iter().zip(ts) {
                    accs.push(self.new_acc_owned(fb, st, v, t, fresh)?);
                }
                Acc::Tuple(accs)
            }
            Type::Tensor(..) => {
                let fresh = fresh || matches!(&first, LVal::Delayed(d) if self.delayed_fresh(d, ty));
                let o = self.materialize_val(fb, st, first, ty)?;
                let o = if fresh { o } else { fb.let_(Rhs::DeepCopy(o), ty.clone(), Some("acc")) };
                Acc::Tensor(o, ty.clone())
            }
            _ => Acc::Keep(first),
        })
    }

    pub(crate) fn acc_value(&mut self, fb: &mut FnBuilder, acc: &Acc) -> R<LVal> {
        Ok(match acc {
            Acc::Scalar(v, t) => LVal::Op(fb.let_(Rhs::Copy(Op::Var(*v)), t.clone(), None)),
            Acc::Tensor(o, _) => LVal::Op(o.clone()),
            Acc::Keep(v) => v.clone(),
            Acc::Tuple(accs) => LVal::Tuple(accs.iter().map(|a| self.acc_value(fb, a)).collect::<R<_>>()?),
            Acc::Slot(..) | Acc::Set(..) => return internal("the value of an element slot"),
        })
    }

    /// An accumulator for element `flat` of tensor `arr` with elements of type `elem`.
    pub(crate) fn slot_acc(&mut self, fb: &mut FnBuilder, arr: Op, flat: Op, elem: &Type) -> Acc {
        match elem {
            Type::Float | Type::Integer => Acc::Slot(arr, flat, elem.clone()),
            Type::Tensor(..) => {
                let x = fb.let_(Rhs::Load { arr, idx: flat }, elem.clone(), None);
                Acc::Tensor(x, elem.clone())
            }
            // Tuples, Bools, Strings: read, add, write back.
            _ => Acc::Slot(arr, flat, elem.clone()),
        }
    }

    /// `acc += v` in place (`ts_add` semantics: Integers checked, Bools and
    /// Strings keep the accumulator, tensors must have equal sizes).
    pub(crate) fn accumulate_lval(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        acc: &Acc,
        v: LVal,
        ty: &Type,
        site: SiteId,
    ) -> R<()> {
        match acc {
            Acc::Scalar(var, t) => {
                let x = lval_op(&v)?;
                let s = if *t == Type::Float {
                    bin(fb, BinOp::FAdd, Op::Var(*var), x)
                } else {
                    self.int_arith(fb, IOp::Add, Op::Var(*var), x, site)
                };
                fb.emit(Stmt::Set(*var, s));
            }
            Acc::Slot(arr, idx, t) if is_number(t) => {
                let x = lval_op(&v)?;
                fb.emit(Stmt::Accum { arr: arr.clone(), idx: idx.clone(), val: x, site });
            }
            Acc::Slot(arr, idx, t) => {
                let old = fb.let_(Rhs::Load { arr: arr.clone(), idx: idx.clone() }, t.clone(), None);
                let old = split(fb, old, t);
                let new = self.ts_add_vals(fb, st, old, t, v, t, site, false)?;
                let new = self.materialize_val(fb, st, new, t)?;
                fb.emit(Stmt::Store { arr: arr.clone(), idx: idx.clone(), val: new });
            }
            Acc::Tensor(arr, t) => {
                let (rank, elem) = tensor_ty(t)?;
                let da = self.dims_of(fb, &LVal::Op(arr.clone()), rank)?;
                let db = self.dims_of(fb, &v, rank)?;
                self.same_dims_check(fb, &da, &db, "`ts_add` of tensors of different sizes", site);
                // Zeros add nothing (tensors of numbers or tuples of them
                // only: a tensor of tensors still checks its rows' sizes).
                // A dense zero added per iteration would cost the
                // accumulator's size each time: reverse mode's branch that
                // does not read a captured vector contributes its zero
                // (the blocked `scan`'s steps, whose other branch reads
                // the block's carry).
                if !needs_heap(&elem) && crate::lower::is_zeros(&v, fb) {
                    return Ok(());
                }
                let nest = self.nest_open(fb, &da);
                let x = self.elem_of(fb, st, &v, &elem, nest.idx(), Some(nest.flat()))?;
                let slot = self.slot_acc(fb, arr.clone(), nest.flat(), &elem);
                self.accumulate_lval(fb, st, &slot, x, &elem, site)?;
                self.nest_close(fb, nest);
            }
            Acc::Keep(_) => {}
            Acc::Set(var, t) => {
                let o = self.materialize_val(fb, st, v, t)?;
                fb.emit(Stmt::Set(*var, o));
            }
            Acc::Tuple(accs) => {
                let ts = tuple_tys(ty)?.to_vec();
                let vs = parts(fb, v, ty, ts.len())?;
                for ((a, v), t) in accs.iter().zip(vs).zip(&ts) {
                    self.accumulate_lval(fb, st, a, v, t, site)?;
                }
            }
        }
        Ok(())
    }

    /// `a + b`, added into `a` in place where `made` (`a` is storage,
    /// the tensors it holds included, that nothing else refers to) or `a`
    /// is a delayed tensor made here ([`Lowerer::delayed_fresh`]); into a
    /// deep copy of `a` otherwise.
    #[allow(clippy::too_many_arguments)]
    fn ts_add_vals(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        a: LVal,
        at: &Type,
        b: LVal,
        bt: &Type,
        site: SiteId,
        made: bool,
    ) -> R<LVal> {
        if *bt == Type::unit() {
            return Ok(a);
        }
        match at {
            Type::Float => Ok(LVal::Op(bin(fb, BinOp::FAdd, lval_op(&a)?, lval_op(&b)?))),
            Type::Integer if *bt == Type::Integer => {
                Ok(LVal::Op(self.int_arith(fb, IOp::Add, lval_op(&a)?, lval_op(&b)?, site)))
            }
            Type::Tuple(ts) => {
                let bts = tuple_tys(bt)?.to_vec();
                let avs = parts(fb, a, at, ts.len())?;
                let bvs = parts(fb, b, bt, ts.len())?;
                let mut out = Vec::new();
                for (((a, b), t), u) in avs.into_iter().zip(bvs).zip(ts).zip(&bts) {
                    out.push(self.ts_add_vals(fb, st, a, t, b, u, site, made)?);
                }
                Ok(LVal::Tuple(out))
            }
            Type::Tensor(..) => {
                let fresh = made || matches!(&a, LVal::Delayed(d) if self.delayed_fresh(d, at));
                let o = self.materialize_val(fb, st, a, at)?;
                let o = if fresh { o } else { fb.let_(Rhs::DeepCopy(o), at.clone(), None) };
                let acc = Acc::Tensor(o.clone(), at.clone());
                self.accumulate_lval(fb, st, &acc, b, bt, site)?;
                Ok(LVal::Op(o))
            }
            _ => Ok(a),
        }
    }

    fn ts_scale(&mut self, fb: &mut FnBuilder, st: &mut FnState, k: Op, v: LVal, t: &Type) -> R<LVal> {
        self.map_leaves(fb, st, v, t, &mut |_, fb, v, t| match t {
            Type::Float => Ok(LVal::Op(bin(fb, BinOp::FMul, lval_op(&v)?, k.clone()))),
            _ => Ok(v),
        })
    }

    fn ts_neg(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, t: &Type, site: SiteId) -> R<LVal> {
        self.map_leaves(fb, st, v, t, &mut |this, fb, v, t| match t {
            Type::Float => Ok(LVal::Op(fb.let_(Rhs::Un(UnOp::FNeg, lval_op(&v)?, None), Type::Float, None))),
            Type::Integer => {
                let s = this.checked().then_some(site);
                Ok(LVal::Op(fb.let_(Rhs::Un(UnOp::INeg, lval_op(&v)?, s), Type::Integer, None)))
            }
            _ => Ok(v),
        })
    }

    /// `v` with `leaf` applied to each of its scalar leaves: tuples
    /// component by component, tensors element by element into a fresh one.
    fn map_leaves(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: LVal,
        t: &Type,
        leaf: &mut dyn FnMut(&mut Self, &mut FnBuilder, LVal, &Type) -> R<LVal>,
    ) -> R<LVal> {
        self.map_leaves_to(fb, st, v, t, &|t: &Type| Some(t.clone()), leaf)
    }

    /// `map_leaves` where `leaf` changes the types of the leaves: `result`
    /// gives the type of the result for each type of the argument.
    fn map_leaves_to(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: LVal,
        t: &Type,
        result: &dyn Fn(&Type) -> Option<Type>,
        leaf: &mut dyn FnMut(&mut Self, &mut FnBuilder, LVal, &Type) -> R<LVal>,
    ) -> R<LVal> {
        match t {
            Type::Tuple(ts) => {
                let vs = parts(fb, v, t, ts.len())?;
                let mut out = Vec::new();
                for (v, t) in vs.into_iter().zip(ts) {
                    out.push(self.map_leaves_to(fb, st, v, t, result, leaf)?);
                }
                Ok(LVal::Tuple(out))
            }
            Type::Tensor(rank, elem) => {
                let Some(out_elem) = result(elem) else {
                    return internal(format!("a result for elements of type `{elem}`"));
                };
                check_type(&out_elem)?;
                let dims = self.dims_of(fb, &v, *rank)?;
                let out_ty = Type::tensor(*rank, out_elem.clone());
                let out = fb.let_(Rhs::Alloc { dims: dims.clone(), elem: out_elem.clone() }, out_ty, None);
                let nest = self.nest_open(fb, &dims);
                let x = self.elem_of(fb, st, &v, elem, nest.idx(), Some(nest.flat()))?;
                let y = self.map_leaves_to(fb, st, x, elem, result, leaf)?;
                let y = self.materialize_val(fb, st, y, &out_elem)?;
                fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: y });
                self.nest_close(fb, nest);
                Ok(LVal::Op(out))
            }
            _ => leaf(self, fb, v, t),
        }
    }

    /// `ts_dot a b`: products of Float leaves summed left to right from 0.0.
    fn ts_dot(&mut self, fb: &mut FnBuilder, st: &mut FnState, a: LVal, b: LVal, t: &Type, site: SiteId) -> R<Op> {
        match t {
            Type::Float => Ok(bin(fb, BinOp::FMul, lval_op(&a)?, lval_op(&b)?)),
            Type::Tuple(ts) if ts.is_empty() => Ok(Op::Float(0.0)),
            Type::Tuple(ts) => {
                let avs = parts(fb, a, t, ts.len())?;
                let bvs = parts(fb, b, t, ts.len())?;
                let mut acc = Op::Float(0.0);
                for ((a, b), t) in avs.into_iter().zip(bvs).zip(ts) {
                    let d = self.ts_dot(fb, st, a, b, t, site)?;
                    acc = bin(fb, BinOp::FAdd, acc, d);
                }
                Ok(acc)
            }
            Type::Tensor(rank, elem) => {
                let da = self.dims_of(fb, &a, *rank)?;
                let db = self.dims_of(fb, &b, *rank)?;
                self.same_dims_check(fb, &da, &db, "`ts_dot` of tensors of different sizes", site);
                let acc = fb.var(Type::Float, Some("dot"), true);
                fb.emit(Stmt::DeclMut(acc, Some(Op::Float(0.0))));
                let nest = self.nest_open(fb, &da);
                let x = self.elem_of(fb, st, &a, elem, nest.idx(), Some(nest.flat()))?;
                let y = self.elem_of(fb, st, &b, elem, nest.idx(), Some(nest.flat()))?;
                let d = self.ts_dot(fb, st, x, y, elem, site)?;
                let s = bin(fb, BinOp::FAdd, Op::Var(acc), d);
                fb.emit(Stmt::Set(acc, s));
                self.nest_close(fb, nest);
                Ok(fb.let_(Rhs::Copy(Op::Var(acc)), Type::Float, None))
            }
            _ => Ok(Op::Float(0.0)),
        }
    }

    /// Structural equality (`eq`): floats with `==`, tensors by sizes then elements.
    fn equal(&mut self, fb: &mut FnBuilder, st: &mut FnState, a: LVal, b: LVal, t: &Type) -> R<Op> {
        let scalar = |op| -> R<Op> { Ok(op) };
        match t {
            Type::Float => scalar(bin(fb, BinOp::FEq, lval_op(&a)?, lval_op(&b)?)),
            Type::Integer => scalar(bin(fb, BinOp::IEq, lval_op(&a)?, lval_op(&b)?)),
            Type::Bool => scalar(bin(fb, BinOp::BEq, lval_op(&a)?, lval_op(&b)?)),
            Type::String => scalar(bin(fb, BinOp::SEq, lval_op(&a)?, lval_op(&b)?)),
            Type::Tuple(ts) => {
                let avs = parts(fb, a, t, ts.len())?;
                let bvs = parts(fb, b, t, ts.len())?;
                let mut conds = Vec::new();
                for ((a, b), t) in avs.into_iter().zip(bvs).zip(ts) {
                    conds.push(self.equal(fb, st, a, b, t)?);
                }
                Ok(all_of(fb, conds))
            }
            Type::Tensor(rank, elem) => {
                let da = self.dims_of(fb, &a, *rank)?;
                let db = self.dims_of(fb, &b, *rank)?;
                let flag = fb.var(Type::Bool, Some("equal"), true);
                let conds = da.iter().zip(&db).map(|(x, y)| bin(fb, BinOp::IEq, x.clone(), y.clone())).collect();
                let same = all_of(fb, conds);
                fb.emit(Stmt::DeclMut(flag, Some(same.clone())));
                fb.push_block();
                let nest = self.nest_open(fb, &da);
                let x = self.elem_of(fb, st, &a, elem, nest.idx(), Some(nest.flat()))?;
                let y = self.elem_of(fb, st, &b, elem, nest.idx(), Some(nest.flat()))?;
                let e = self.equal(fb, st, x, y, elem)?;
                let ne = fb.let_(Rhs::Un(UnOp::Not, e, None), Type::Bool, None);
                fb.emit(Stmt::If { cond: ne, then: vec![Stmt::Set(flag, Op::Bool(false))], els: vec![] });
                self.nest_close(fb, nest);
                let then = fb.pop_block();
                fb.emit(Stmt::If { cond: same, then, els: vec![] });
                Ok(fb.let_(Rhs::Copy(Op::Var(flag)), Type::Bool, None))
            }
            _ => internal(format!("equality of values of type `{t}`")),
        }
    }

    /// A zero shaped like `v`: 0.0, 0, false, "", and tensors of zeros.
    fn zero_like(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: &LVal, t: &Type) -> R<LVal> {
        Ok(match t {
            Type::Float => LVal::Op(Op::Float(0.0)),
            Type::Integer => LVal::Op(Op::Int(0)),
            Type::Bool => LVal::Op(Op::Bool(false)),
            Type::String => LVal::Op(Op::Str(String::new())),
            Type::Tuple(ts) => {
                let vs = parts(fb, v.clone(), t, ts.len())?;
                let mut out = Vec::new();
                for (v, t) in vs.iter().zip(ts) {
                    out.push(self.zero_like(fb, st, v, t)?);
                }
                LVal::Tuple(out)
            }
            Type::Tensor(rank, elem) => {
                let dims = self.dims_of(fb, v, *rank)?;
                if matches!(**elem, Type::Tensor(..) | Type::Tuple(_)) {
                    // Element zeros of each element's own shape.
                    let out = fb.let_(Rhs::Alloc { dims: dims.clone(), elem: (**elem).clone() }, t.clone(), None);
                    let nest = self.nest_open(fb, &dims);
                    let x = self.elem_of(fb, st, v, elem, nest.idx(), Some(nest.flat()))?;
                    let z = self.zero_like(fb, st, &x, elem)?;
                    let z = self.materialize_val(fb, st, z, elem)?;
                    fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: z });
                    self.nest_close(fb, nest);
                    LVal::Op(out)
                } else {
                    let z = default_lval(elem);
                    LVal::Delayed(Rc::new(Delayed::constant(dims, z)))
                }
            }
            _ => return internal(format!("a zero of type `{t}`")),
        })
    }

    /// `c ? a : b` for values of any type.
    fn select(&mut self, fb: &mut FnBuilder, st: &mut FnState, c: Op, a: LVal, b: LVal, t: &Type) -> R<LVal> {
        let la = self.leaves_of(fb, st, a, t)?;
        let lb = self.leaves_of(fb, st, b, t)?;
        let ops: Vec<Op> =
            la.into_iter().zip(lb).map(|((x, ty), (y, _))| fb.let_(Rhs::Select(c.clone(), x, y), ty, None)).collect();
        Ok(crate::lower::rebuild(t, &mut ops.into_iter()))
    }

    #[allow(clippy::too_many_arguments)]
    fn delta_vec(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        dims: &[Op],
        idx: &[Op],
        v: LVal,
        vt: &Type,
        ty: &Type,
    ) -> R<LVal> {
        let v = self.force_val(fb, st, v, vt)?;
        let zero = self.zero_like(fb, st, &v, vt)?;
        let zeros = LVal::Delayed(Rc::new(Delayed::constant(dims.to_vec(), zero)));
        let arr = self.materialize_val(fb, st, zeros, ty)?;
        let inside = in_range(fb, idx, dims);
        fb.push_block();
        let flat = flat_index(fb, idx, dims);
        let v = self.materialize_val(fb, st, v, vt)?;
        fb.emit(Stmt::Store { arr: arr.clone(), idx: flat, val: v });
        let then = fb.pop_block();
        fb.emit(Stmt::If { cond: inside, then, els: vec![] });
        Ok(LVal::Op(arr))
    }

    /// `shape v`: the compressed shape, directed by the type.
    fn shape(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, t: &Type) -> R<LVal> {
        if t.shape_is_trivial() {
            return Ok(LVal::Tuple(Vec::new()));
        }
        match t {
            Type::Tuple(ts) => {
                let vs = parts(fb, v, t, ts.len())?;
                let mut out = Vec::new();
                for (v, t) in vs.into_iter().zip(ts) {
                    out.push(self.shape(fb, st, v, t)?);
                }
                Ok(LVal::Tuple(out))
            }
            Type::Tensor(rank, e) if e.shape_is_trivial() => Ok(index_lval(&self.dims_of(fb, &v, *rank)?)),
            Type::Tensor(rank, e) => {
                let dims = self.dims_of(fb, &v, *rank)?;
                let Some(se) = e.shape() else { return internal(format!("the shape of `{t}`")) };
                check_type(&se)?;
                let out =
                    fb.let_(Rhs::Alloc { dims: dims.clone(), elem: se.clone() }, Type::tensor(*rank, se.clone()), None);
                let nest = self.nest_open(fb, &dims);
                let x = self.elem_of(fb, st, &v, e, nest.idx(), Some(nest.flat()))?;
                let s = self.shape(fb, st, x, e)?;
                let s = self.materialize_val(fb, st, s, &se)?;
                fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: s });
                self.nest_close(fb, nest);
                Ok(LVal::Op(out))
            }
            _ => internal(format!("the shape of `{t}`")),
        }
    }

    /// `$tangentDim v`: the number of Floats in `v` (constant for types
    /// without tensors, a product of sizes for tensors of those).
    fn tangent_dim(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, t: &Type) -> R<Op> {
        if let Some(c) = t.fixed_float_count() {
            return Ok(Op::Int(c as i64));
        }
        match t {
            Type::Tuple(ts) => {
                let vs = parts(fb, v, t, ts.len())?;
                let mut n = Op::Int(0);
                for (v, t) in vs.into_iter().zip(ts) {
                    let d = self.tangent_dim(fb, st, v, t)?;
                    n = bin(fb, BinOp::IAddNoCheck, n, d);
                }
                Ok(n)
            }
            Type::Tensor(rank, e) => {
                let dims = self.dims_of(fb, &v, *rank)?;
                let count = self.count_of(fb, &dims);
                if let Some(c) = e.fixed_float_count() {
                    return Ok(bin(fb, BinOp::IMulNoCheck, count, Op::Int(c as i64)));
                }
                let n = fb.var(Type::Integer, Some("dim"), true);
                fb.emit(Stmt::DeclMut(n, Some(Op::Int(0))));
                let nest = self.nest_open(fb, &dims);
                let x = self.elem_of(fb, st, &v, e, nest.idx(), Some(nest.flat()))?;
                let d = self.tangent_dim(fb, st, x, e)?;
                let next = bin(fb, BinOp::IAddNoCheck, Op::Var(n), d);
                fb.emit(Stmt::Set(n, next));
                self.nest_close(fb, nest);
                Ok(fb.let_(Rhs::Copy(Op::Var(n)), Type::Integer, None))
            }
            _ => internal(format!("the tangent dimension of `{t}`")),
        }
    }

    /// Calls `f` on every Float of `v`, in the order of `$tangentFlatten`.
    fn each_float(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: LVal,
        t: &Type,
        f: &mut dyn FnMut(&mut FnBuilder, Op),
    ) -> R<()> {
        match t {
            Type::Float => {
                let x = self.materialize_val(fb, st, v, t)?;
                f(fb, x);
            }
            Type::Integer | Type::Bool | Type::String => {}
            Type::Tuple(ts) => {
                for (v, t) in parts(fb, v, t, ts.len())?.into_iter().zip(ts) {
                    self.each_float(fb, st, v, t, f)?;
                }
            }
            Type::Tensor(rank, e) => {
                let dims = self.dims_of(fb, &v, *rank)?;
                let nest = self.nest_open(fb, &dims);
                let x = self.elem_of(fb, st, &v, e, nest.idx(), Some(nest.flat()))?;
                self.each_float(fb, st, x, e, f)?;
                self.nest_close(fb, nest);
            }
            _ => return internal(format!("the Floats of `{t}`")),
        }
        Ok(())
    }

    /// `$tangentBasis v k`: the tangent shaped like `v`, 1.0 at the Float
    /// whose position (counted in `pos`) is `k`.
    fn tangent_basis(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: LVal,
        t: &Type,
        k: &Op,
        pos: VarId,
    ) -> R<LVal> {
        self.map_leaves_to(fb, st, v, t, &Type::tangent, &mut |_, fb, _, t| match t {
            Type::Float => {
                let hit = bin(fb, BinOp::IEq, Op::Var(pos), k.clone());
                let x = fb.let_(Rhs::Select(hit, Op::Float(1.0), Op::Float(0.0)), Type::Float, None);
                let next = bin(fb, BinOp::IAddNoCheck, Op::Var(pos), Op::Int(1));
                fb.emit(Stmt::Set(pos, next));
                Ok(LVal::Op(x))
            }
            Type::Integer | Type::Bool | Type::String => Ok(LVal::Tuple(Vec::new())),
            _ => internal(format!("a basis tangent of `{t}`")),
        })
    }

    /// The zero-initialised result of `buildFromSparse`: shaped like the
    /// shape tensor `sh`, each element a zero of the element's shape.
    fn zeros_of_shape(&mut self, fb: &mut FnBuilder, st: &mut FnState, sh: &LVal, sht: &Type, out_ty: &Type) -> R<Op> {
        let (rank, sh_elem) = tensor_ty(sht)?;
        let (_, elem) = tensor_ty(out_ty)?;
        let dims = self.dims_of(fb, sh, rank)?;
        let out = fb.let_(Rhs::Alloc { dims: dims.clone(), elem: elem.clone() }, out_ty.clone(), None);
        let nest = self.nest_open(fb, &dims);
        let s = self.elem_of(fb, st, sh, &sh_elem, nest.idx(), Some(nest.flat()))?;
        let z = self.zero_from_shape(fb, st, s, &sh_elem, &elem)?;
        let z = self.materialize_val(fb, st, z, &elem)?;
        fb.emit(Stmt::Store { arr: out.clone(), idx: nest.flat(), val: z });
        self.nest_close(fb, nest);
        Ok(out)
    }

    fn zero_from_shape(&mut self, fb: &mut FnBuilder, st: &mut FnState, s: LVal, st_ty: &Type, t: &Type) -> R<LVal> {
        Ok(match t {
            Type::Float | Type::Integer | Type::Bool | Type::String => default_lval(t),
            Type::Tuple(ts) => match st_ty {
                Type::Tuple(ss) if ss.len() == ts.len() => {
                    let vs = parts(fb, s, st_ty, ts.len())?;
                    let mut out = Vec::new();
                    for ((v, s), t) in vs.into_iter().zip(ss).zip(ts) {
                        out.push(self.zero_from_shape(fb, st, v, s, t)?);
                    }
                    LVal::Tuple(out)
                }
                _ => {
                    let mut out = Vec::new();
                    for t in ts {
                        out.push(self.zero_from_shape(fb, st, LVal::Tuple(vec![]), &Type::unit(), t)?);
                    }
                    LVal::Tuple(out)
                }
            },
            Type::Tensor(rank, _) => match st_ty {
                Type::Tensor(..) => LVal::Op(self.zeros_of_shape(fb, st, &s, st_ty, t)?),
                _ => {
                    let dims = vec![Op::Int(0); *rank];
                    LVal::Op(fb.let_(Rhs::Alloc { dims, elem: tensor_ty(t)?.1 }, t.clone(), None))
                }
            },
            _ => return internal(format!("a zero of type `{t}`")),
        })
    }

    /// `$check f rev_f x dx dr`: `|d1 - d2| / (|d1| + |d2|)` with
    /// `d1 = <f(x + dx) - f(x), dr>` and `d2 = <rev_f(x, dr), dx>`.
    fn lower_check(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, args: &[Arg], site: SiteId) -> R<LVal> {
        let (x, xt) = args[2].val()?;
        let (dx, dxt) = args[3].val()?;
        let (dr, _) = args[4].val()?;
        let (x, xt, dx, dxt, dr) = (x.clone(), xt.clone(), dx.clone(), dxt.clone(), dr.clone());
        let x = self.force_val(fb, st, x, &xt)?;
        let fx = self.apply(fb, st, ctx, &args[0], x.clone())?;
        let x_dx = self.ts_add_vals(fb, st, x.clone(), &xt, dx.clone(), &dxt, site, false)?;
        let fx_dx = self.apply(fb, st, ctx, &args[0], x_dx)?;
        let Arg::Lam { body, .. } = &args[0] else { return internal("$check of a lambda not written in place") };
        let ft = self.type_of(ctx, *body)?;
        let neg = self.ts_scale(fb, st, Op::Float(-1.0), fx, &ft)?;
        let df = self.ts_add_vals(fb, st, fx_dx, &ft, neg, &ft, site, false)?;
        let d1 = self.ts_dot(fb, st, df, dr.clone(), &ft, site)?;
        let grad = self.apply(fb, st, ctx, &args[1], LVal::Tuple(vec![x, dr]))?;
        let d2 = self.ts_dot(fb, st, grad, dx, &dxt, site)?;
        let diff = bin(fb, BinOp::FSub, d1.clone(), d2.clone());
        let num = fb.let_(Rhs::Un(UnOp::Math(MathFn::Fabs), diff, None), Type::Float, None);
        let a1 = fb.let_(Rhs::Un(UnOp::Math(MathFn::Fabs), d1, None), Type::Float, None);
        let a2 = fb.let_(Rhs::Un(UnOp::Math(MathFn::Fabs), d2, None), Type::Float, None);
        let den = bin(fb, BinOp::FAdd, a1, a2);
        Ok(LVal::Op(bin(fb, BinOp::FDiv, num, den)))
    }
}
