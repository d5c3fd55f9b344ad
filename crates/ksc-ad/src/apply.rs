//! What forward mode ([`crate::fwd`]) and reverse mode ([`crate::rev`])
//! share when they derive `[fwd f]` and `[rev f]` from the full Jacobian
//! `[D f]` (linear-maps-and-ad.md 5): copying Core IR out of the Jacobian
//! with its maps stripped to their tangent types, the application laws that
//! turn `[D h](a) ⊙ x` into `[fwd h](a, x)` and `r ⊙ᴿ [D h](a)` into
//! `[rev h](a, r)` ([`push_applications`]; those are derived on demand),
//! parameters and fresh names of the derived definitions, and what both
//! read of folds' Jacobians.

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::prim::Accumulators;
use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};

use crate::derive::{AdError, R};

pub(crate) fn has_lm(t: &Type) -> bool {
    match t {
        Type::LM(..) => true,
        Type::Tuple(ts) => ts.iter().any(has_lm),
        Type::Tensor(_, e) | Type::Lam(_, e) => has_lm(e),
        _ => false,
    }
}

pub(crate) fn is_lm(t: &Type) -> bool {
    matches!(t, Type::LM(..))
}

/// `(Tuple Integer Integer)`: the argument of Integer arithmetic and
/// comparisons.
pub(crate) fn int_pair() -> Type {
    Type::Tuple(vec![Type::Integer, Type::Integer])
}

pub(crate) fn internal<T>(what: impl Into<String>) -> R<T> {
    Err(AdError { message: format!("internal error in automatic differentiation: {}", what.into()), at: None })
}

/// Copies the expression `e` of `src` into the builder's body. A variable
/// of a (value, map) pair type is retyped: in the derived function its map
/// part has become a tangent (forward) or a unit (reverse).
pub fn import(b: &mut Builder, src: &Body, e: ExprId) -> ExprId {
    import_with(b, src, e, &|t: &Type| t.clone())
}

pub(crate) fn import_with(b: &mut Builder, src: &Body, e: ExprId, retype: &dyn Fn(&Type) -> Type) -> ExprId {
    import_hooked(b, src, e, retype, None)
}

/// A hook replacing some sub-expressions of the source when they are
/// copied (reverse mode reads the results of recursive calls from a tape).
pub(crate) type Hook<'h> = Option<&'h dyn Fn(&mut Builder, ExprId) -> Option<ExprId>>;

pub(crate) fn import_hooked(
    b: &mut Builder,
    src: &Body,
    e: ExprId,
    retype: &dyn Fn(&Type) -> Type,
    hook: Hook,
) -> ExprId {
    if let Some(r) = hook.and_then(|h| h(b, e)) {
        return r;
    }
    let ty = retype(src.ty(e));
    let go = |b: &mut Builder, x: ExprId| import_hooked(b, src, x, retype, hook);
    let node = match src.exprs[e].clone() {
        Expr::Call(c, a) => Expr::Call(c, go(b, a)),
        Expr::Tuple(es) => Expr::Tuple(es.into_iter().map(|x| go(b, x)).collect()),
        Expr::Let(p, r, x) => Expr::Let(p, go(b, r), go(b, x)),
        Expr::If(c, t, f) => Expr::If(go(b, c), go(b, t), go(b, f)),
        Expr::Assert(c, x, from) => Expr::Assert(go(b, c), go(b, x), from),
        Expr::Lam(v, t, x) => Expr::Lam(v, t, go(b, x)),
        n @ (Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_)) => n,
    };
    b.body.alloc_typed(node, ty)
}

/// The primal part of a mixed expression of `src`: maps replaced by units.
pub(crate) fn strip_expr(b: &mut Builder, src: &Body, e: ExprId, hook: Hook) -> ExprId {
    let ty = src.ty(e).clone();
    if !has_lm(&ty) {
        return import_hooked(b, src, e, &strip_type, hook);
    }
    if is_lm(&ty) {
        return b.tuple(Vec::new());
    }
    match src.exprs[e].clone() {
        Expr::Let(p, r, x) => {
            if is_lm(src.ty(r)) {
                return strip_expr(b, src, x, hook);
            }
            let r = strip_expr(b, src, r, hook);
            let x = strip_expr(b, src, x, hook);
            let ty = b.ty(x);
            b.body.alloc_typed(Expr::Let(p, r, x), ty)
        }
        Expr::Tuple(es) => {
            let es = es.into_iter().map(|x| strip_expr(b, src, x, hook)).collect();
            b.tuple(es)
        }
        Expr::If(c, t, f) => {
            let c = import_hooked(b, src, c, &|t: &Type| t.clone(), hook);
            let (t, f) = (strip_expr(b, src, t, hook), strip_expr(b, src, f, hook));
            let ty = b.ty(t);
            b.body.alloc_typed(Expr::If(c, t, f), ty)
        }
        Expr::Assert(c, x, from) => {
            let c = import_hooked(b, src, c, &|t: &Type| t.clone(), hook);
            let x = strip_expr(b, src, x, hook);
            let ty = b.ty(x);
            b.body.alloc_typed(Expr::Assert(c, x, from), ty)
        }
        Expr::Call(Callee::Prim(p @ Prim::Get { .. }), a) => {
            let a = strip_expr(b, src, a, hook);
            b.prim(p, vec![a])
        }
        _ => b.tuple(Vec::new()),
    }
}

/// The type with every linear map replaced by the unit (reverse mode's
/// primal view of a (value, map) pair).
pub(crate) fn strip_type(t: &Type) -> Type {
    match t {
        Type::LM(..) => Type::unit(),
        Type::Tuple(ts) => Type::Tuple(ts.iter().map(strip_type).collect()),
        Type::Tensor(n, e) => Type::Tensor(*n, Box::new(strip_type(e))),
        t => t.clone(),
    }
}

/// The type with every `LM S T` replaced by `dT`.
pub(crate) fn tangent_of_mixed(t: &Type) -> R<Type> {
    Ok(match t {
        Type::LM(_, t) => match t.tangent() {
            Some(x) => x,
            None => return internal(format!("map into `{t}`")),
        },
        Type::Tuple(ts) => Type::Tuple(ts.iter().map(tangent_of_mixed).collect::<R<_>>()?),
        Type::Tensor(n, e) => Type::Tensor(*n, Box::new(tangent_of_mixed(e)?)),
        t => t.clone(),
    })
}

/// The type with every `LM S T` replaced by `dT` (forward mode's view).
pub(crate) fn tangent_type_of_mixed(t: &Type) -> Type {
    tangent_of_mixed(t).unwrap_or_else(|_| t.clone())
}

/// Rewrites every `lmApply` / `lmApplyR` in the tree at `e` with the
/// application laws until none applies; calls of `[D h]` become calls of
/// `[fwd h]` / `[rev h]` (recorded in `demands`).
pub fn push_applications(b: &mut Builder, e: ExprId, demands: &mut Vec<FunName>) -> ExprId {
    if let Some(r) = rewrite_application(b, e, demands) {
        return push_applications(b, r, demands);
    }
    let ty = b.ty(e);
    let node = b.expr(e).clone();
    let node = match node {
        Expr::Call(c, a) => Expr::Call(c, push_applications(b, a, demands)),
        Expr::Tuple(es) => Expr::Tuple(es.into_iter().map(|x| push_applications(b, x, demands)).collect()),
        Expr::Let(p, r, x) => {
            let r = push_applications(b, r, demands);
            Expr::Let(p, r, push_applications(b, x, demands))
        }
        Expr::If(c, t, f) => {
            let c = push_applications(b, c, demands);
            let t = push_applications(b, t, demands);
            Expr::If(c, t, push_applications(b, f, demands))
        }
        Expr::Assert(c, x, from) => {
            let c = push_applications(b, c, demands);
            Expr::Assert(c, push_applications(b, x, demands), from)
        }
        Expr::Lam(v, t, x) => Expr::Lam(v, t, push_applications(b, x, demands)),
        Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => return e,
    };
    b.body.alloc_typed(node, ty)
}

/// One step at `e`, if `e` is an application that can move.
pub(crate) fn rewrite_application(b: &mut Builder, e: ExprId, demands: &mut Vec<FunName>) -> Option<ExprId> {
    let (p, args) = prim_call(b.body, e)?;
    let (map, other, fwd) = match p {
        Prim::LmApply => (args[0], args[1], true),
        Prim::LmApplyR => (args[1], args[0], false),
        _ => return None,
    };
    // An element of a vector of maps written out: index i (constVec n m) = m,
    // index i (build n (λj. m)) = let j = i in m.
    if let Some([i, v]) = ksc_ir::builder::call_of(b.body, map, Prim::Index).as_deref().map(|a| [a[0], a[1]]) {
        let elem = match prim_call(b.body, v) {
            Some((Prim::ConstVec, a)) => Some(a[1]),
            Some((Prim::Build, a)) => match b.expr(a[1]).clone() {
                Expr::Lam(j, _, m) => {
                    let ty = b.ty(m);
                    Some(b.body.alloc_typed(Expr::Let(Pat::Var(j), i, m), ty))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(m) = elem {
            return Some(if fwd {
                b.prim(Prim::LmApply, vec![m, other])
            } else {
                b.prim(Prim::LmApplyR, vec![other, m])
            });
        }
    }
    // A vector of maps written out element by element (the Jacobian of
    // `Vec_init`): V(Vec_init m1..mk) ⊙ dx = Vec_init (m1 ⊙ dx) .. (mk ⊙ dx),
    // r ⊙ᴿ V(Vec_init m1..mk) = Σj r[j] ⊙ᴿ mj.
    if let Some(v) = ksc_ir::builder::call_of(b.body, map, Prim::LmVCatV).map(|a| a[1]) {
        if let Some((Prim::VecInit, maps)) = prim_call(b.body, v) {
            let mut terms = Vec::new();
            for (j, m) in maps.into_iter().enumerate() {
                let o = b.copy(other);
                terms.push(if fwd {
                    b.prim(Prim::LmApply, vec![m, o])
                } else {
                    let jv = b.integer(j as i64);
                    let rj = b.prim(Prim::Index, vec![jv, o]);
                    b.prim(Prim::LmApplyR, vec![rj, m])
                });
            }
            return Some(if fwd {
                b.prim(Prim::VecInit, terms)
            } else {
                terms.into_iter().reduce(|acc, t| b.prim(Prim::TsAdd, vec![acc, t]))?
            });
        }
    }
    // Through binding forms: (let x = r in m) ⊙ dx = let x = r in (m ⊙ dx).
    match b.expr(map).clone() {
        Expr::Let(pat, r, m) => {
            let inner =
                if fwd { b.prim(Prim::LmApply, vec![m, other]) } else { b.prim(Prim::LmApplyR, vec![other, m]) };
            let ty = b.ty(inner);
            return Some(b.body.alloc_typed(Expr::Let(pat, r, inner), ty));
        }
        Expr::If(c, m1, m2) => {
            let o2 = b.copy(other);
            let (a1, a2) = if fwd {
                (b.prim(Prim::LmApply, vec![m1, other]), b.prim(Prim::LmApply, vec![m2, o2]))
            } else {
                (b.prim(Prim::LmApplyR, vec![other, m1]), b.prim(Prim::LmApplyR, vec![o2, m2]))
            };
            let ty = b.ty(a1);
            return Some(b.body.alloc_typed(Expr::If(c, a1, a2), ty));
        }
        Expr::Assert(c, m, from) => {
            let inner =
                if fwd { b.prim(Prim::LmApply, vec![m, other]) } else { b.prim(Prim::LmApplyR, vec![other, m]) };
            let ty = b.ty(inner);
            return Some(b.body.alloc_typed(Expr::Assert(c, inner, from), ty));
        }
        Expr::Call(Callee::Fun(name), a) if name.derivs.first() == Some(&Derivation::D) => {
            let inner =
                FunName { derivs: name.derivs[1..].to_vec(), base: name.base.clone(), base_ty: name.base_ty.clone() };
            let d = if fwd { Derivation::Fwd } else { Derivation::Rev };
            let target = inner.derived(d);
            demands.push(target.clone());
            let ret = b.ty(e);
            return Some(b.call(target, vec![a, other], ret));
        }
        _ => {}
    }
    let group = if fwd { "application" } else { "reverse application" };
    ksc_linmap::LAWS.iter().filter(|l| l.group.starts_with(group)).find_map(|l| (l.rewrite)(b, e))
}

/// Binds the function's parameters from the single argument `arg`.
pub(crate) fn bind_params(b: &mut Builder, params: &[Param], arg: &str, arg_ty: &Type, inner: ExprId) -> ExprId {
    let a = b.var(arg, arg_ty.clone());
    let pat = if params.len() == 1 {
        Pat::Var(params[0].name.clone())
    } else {
        Pat::Tuple(params.iter().map(|p| p.name.clone()).collect())
    };
    let ty = b.ty(inner);
    b.body.alloc_typed(Expr::Let(pat, a, inner), ty)
}

/// A name for a parameter of a derived function that none of the
/// differentiated function's parameters uses (derivatives of derivatives
/// have the inner derivative's parameters in scope).
pub(crate) fn param_name(hint: &str, f: &Def) -> String {
    let depth = f.name.derivs.len() + 1;
    (depth..)
        .map(|k| format!("ksc${hint}{k}"))
        .find(|n| !f.params.iter().any(|p| &p.name == n))
        .unwrap_or_else(|| format!("ksc${hint}"))
}

/// Where the fresh names of `[fwd f]` and `[rev f]` start: above the
/// `ksc$` names of f and of its Jacobian `d`, which they keep.
pub(crate) fn fresh_start(f: &Def, d: &Def) -> u32 {
    let floor = ksc_ir::term::fresh_floor(&d.body, d.root, f.params.iter().map(|p| &p.name));
    1000u32.max(floor.saturating_add(1))
}
/// A derived definition, if its body has the type it must have (else an
/// internal error: a bug of the derivation).
pub(crate) fn checked_def(name: FunName, params: Vec<Param>, ret_ty: Type, body: Body, root: ExprId) -> R<Def> {
    let got = body.ty(root);
    if *got != ret_ty {
        return internal(format!("{name} has type {got} instead of {ret_ty}"));
    }
    Ok(Def { name, params, ret_ty, body, root })
}

/// The arguments of an `lmFold`, `lmScan` or `lmScanBlocks` call, and
/// which it is.
pub(crate) fn fold_call(src: &Body, m: ExprId) -> Option<(Vec<ExprId>, Accumulators)> {
    let (p, args) = prim_call(src, m)?;
    Some((args, p.fold_map_kind()?))
}
