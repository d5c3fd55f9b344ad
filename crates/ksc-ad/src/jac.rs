//! `[jac f] : S -> Tensor 2 Float`, the dense Jacobian of `f : S -> T` at a
//! point (linear-maps-and-ad.md section 6): row r is the r-th Float of T's
//! tangent, column c the c-th Float of S's, both in the order of
//! `$tangentFlatten` (depth first, tuples left to right, tensors row-major).
//!
//! It is computed from the optimised derivatives the way seed 000 computes
//! `jacob`: column by column with `[fwd f]` applied to basis tangents, or
//! row by row with `[rev f]`, whichever is fewer (decided by the types when
//! both dimensions are fixed, else at run time). The derivative is inlined
//! into the loop over columns (rows), and after optimisation
//! [`hoist_loop_invariants`] moves the work that does not depend on the
//! column (the primal computation) out of that loop, so it is done once.

use rustc_hash::FxHashSet;

use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};
use ksc_linmap::builder::Builder;

/// The index variable of the loop over columns (forward mode) and over
/// rows (reverse mode); [`hoist_loop_invariants`] recognises the loops by it.
const COLUMN: &str = "ksc$column";
const ROW: &str = "ksc$row";

/// The number of Floats in every value of type `t`, if it is fixed.
pub fn fixed_dim(t: &Type) -> Option<usize> {
    match t {
        Type::Float => Some(1),
        Type::Integer | Type::Bool | Type::String => Some(0),
        Type::Tuple(ts) => ts.iter().map(fixed_dim).sum(),
        _ => None,
    }
}

/// Which derivatives `[jac f]` calls, for `f : S -> T`.
pub fn needs(s: &Type, t: &Type) -> Vec<Derivation> {
    match (fixed_dim(s), fixed_dim(t)) {
        (Some(0), _) | (_, Some(0)) => vec![],
        (Some(n), Some(m)) if n <= m => vec![Derivation::Fwd],
        (Some(_), Some(_)) => vec![Derivation::Rev],
        _ => vec![Derivation::Fwd, Derivation::Rev],
    }
}

/// `[jac f]` for `f : S -> T`:
///
/// ```text
/// [jac f] x = let y = f x; n = $tangentDim x; m = $tangentDim y
///             in if (n == 0 || m == 0) then (an m x n matrix)
///                else if n <= m then   -- columns by forward mode
///                  let cols = build n (lam c ($tangentFlatten ($inline ([fwd f] x ($tangentBasis x c)))))
///                  in build (m, n) (lam (r, c) cols[c][r])
///                else                  -- rows by reverse mode
///                  let rows = build m (lam r ($tangentFlatten ($inline ([rev f] x ($tangentBasis y r)))))
///                  in build (m, n) (lam (r, c) rows[r][c])
/// ```
///
/// with the tests decided here when the types fix the dimensions.
pub fn jac_def(f: &FunName, s: &Type, t: &Type) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let (ds, dt) = (s.tangent().unwrap_or(Type::Unknown), t.tangent().unwrap_or(Type::Unknown));
    let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
    let int_test = |b: &mut Builder, name: &str, x: ExprId, y: ExprId| {
        b.call(FunName::typed(name, ii.clone()), vec![x, y], Type::Bool)
    };
    let var = |b: &mut Builder, name: &str, ty: &Type| b.var(name, ty.clone());
    let dim = |b: &mut Builder, fixed: Option<usize>, of: &str, ty: &Type| match fixed {
        Some(k) => b.integer(k as i64),
        None => {
            let v = b.var(of, ty.clone());
            b.prim(Prim::TangentDim, vec![v])
        }
    };
    let (fixed_n, fixed_m) = (fixed_dim(s), fixed_dim(t));
    let n = dim(&mut b, fixed_n, "ksc$x", s);
    let m = dim(&mut b, fixed_m, "ksc$y", t);

    // The m x n matrix whose entry (r, c) is `entry(r, c)`.
    let matrix = |b: &mut Builder, entry: &dyn Fn(&mut Builder, ExprId, ExprId) -> ExprId| {
        let (m, n) = (var(b, "ksc$m", &Type::Integer), var(b, "ksc$n", &Type::Integer));
        let size = b.tuple(vec![m, n]);
        b.build(size, |b, rc| {
            let r = b.prim(Prim::Get { index: 1, arity: 2 }, vec![rc]);
            let rc2 = b.copy(rc);
            let c = b.prim(Prim::Get { index: 2, arity: 2 }, vec![rc2]);
            entry(b, r, c)
        })
    };
    // One derivative per column (forward) or row (reverse), flattened.
    let sweep = |b: &mut Builder, d: Derivation| {
        let (count, index, like, like_ty, ret) = match d {
            Derivation::Fwd => ("ksc$n", COLUMN, "ksc$x", s, &dt),
            _ => ("ksc$m", ROW, "ksc$y", t, &ds),
        };
        let size = var(b, count, &Type::Integer);
        let k = var(b, index, &Type::Integer);
        let point = var(b, like, like_ty);
        let basis = b.prim(Prim::TangentBasis, vec![point, k]);
        let x = var(b, "ksc$x", s);
        let call = b.call(f.derived(d), vec![x, basis], ret.clone());
        let inlined = b.prim(Prim::Inline, vec![call]);
        let flat = b.prim(Prim::TangentFlatten, vec![inlined]);
        let lam = b.lam(index, Type::Integer, flat);
        let vectors = b.prim(Prim::Build, vec![size, lam]);
        let vty = b.ty(vectors);
        let read = matrix(b, &|b, r, c| {
            let (outer, inner) = if d == Derivation::Fwd { (c, r) } else { (r, c) };
            let vs = b.var("ksc$vectors", vty.clone());
            let v = b.prim(Prim::Index, vec![outer, vs]);
            b.prim(Prim::Index, vec![inner, v])
        });
        b.let_("ksc$vectors", vectors, read)
    };
    let zeros = |b: &mut Builder| matrix(b, &|b, _, _| b.float(0.0));
    let result = match needs(s, t)[..] {
        [] => zeros(&mut b),
        [d] => sweep(&mut b, d),
        _ => {
            // Decided at run time; the zero test keeps the sweeps' loops
            // non-empty, so work hoisted out of them runs only if they would.
            let (n0, m0) = (var(&mut b, "ksc$n", &Type::Integer), var(&mut b, "ksc$m", &Type::Integer));
            let (z1, z2) = (b.integer(0), b.integer(0));
            let n_zero = b.prim(Prim::Eq, vec![n0, z1]);
            let m_zero = b.prim(Prim::Eq, vec![m0, z2]);
            let bools = Type::Tuple(vec![Type::Bool, Type::Bool]);
            let empty = b.call(FunName::typed("or", bools), vec![n_zero, m_zero], Type::Bool);
            let (n1, m1) = (var(&mut b, "ksc$n", &Type::Integer), var(&mut b, "ksc$m", &Type::Integer));
            let columns = int_test(&mut b, "lte", n1, m1);
            let fwd = sweep(&mut b, Derivation::Fwd);
            let rev = sweep(&mut b, Derivation::Rev);
            let choose = b.body.alloc_typed(Expr::If(columns, fwd, rev), Type::tensor(2, Type::Float));
            let z = zeros(&mut b);
            b.body.alloc_typed(Expr::If(empty, z, choose), Type::tensor(2, Type::Float))
        }
    };
    let with_dims = b.let_("ksc$m", m, result);
    let with_dims = b.let_("ksc$n", n, with_dims);
    let x = var(&mut b, "ksc$x", s);
    let y = b.call(f.clone(), vec![x], t.clone());
    let root = b.let_("ksc$y", y, with_dims);
    Def {
        name: f.derived(Derivation::Jac),
        params: vec![Param { name: "ksc$x".into(), ty: s.clone() }],
        ret_ty: Type::tensor(2, Type::Float),
        body,
        root,
    }
}

/// Moves the leading `let`s of the column (row) loops of a `[jac f]` whose
/// right sides do not depend on the column (row), and have no effect, out
/// of the loop: after inlining they are the primal computation of `f`,
/// shared by all columns. `jac_def` only makes these loops where they run
/// at least once, so a hoisted computation that fails would have failed in
/// the loop.
pub fn hoist_loop_invariants(def: &mut Def, globals: &ksc_opt::Globals) {
    let mut cache = ksc_opt::term::Cache::new();
    let mut stack = vec![def.root];
    let mut loops = Vec::new();
    while let Some(e) = stack.pop() {
        if let Some(parts) = loop_parts(&def.body, e) {
            loops.push((e, parts));
            continue;
        }
        stack.extend(ksc_opt::term::children(&def.body.exprs[e]));
    }
    for (e, (n, index, ity, lam_body)) in loops {
        let mut chain = Vec::new();
        let mut rest = lam_body;
        while let Expr::Let(p, r, x) = &def.body.exprs[rest] {
            chain.push((p.clone(), *r));
            rest = *x;
        }
        let size_vars = cache.free_vars(&def.body, n);
        let mut bound: FxHashSet<String> = FxHashSet::default();
        let mut variant: FxHashSet<String> = FxHashSet::from_iter([index.clone()]);
        let (mut hoisted, mut kept) = (Vec::new(), Vec::new());
        for (p, r) in chain {
            let names = p.vars();
            // A name bound twice, or one the loop's size reads, stays put
            // (moving it would change what a later use refers to).
            let clash = names.iter().any(|v| bound.contains(v) || size_vars.contains(v) || *v == index);
            bound.extend(names.iter().cloned());
            let depends = cache.free_vars(&def.body, r).iter().any(|v| variant.contains(v));
            if clash || depends || cache.has_effect(&def.body, globals, r) {
                variant.extend(names.iter().cloned());
                kept.push((p, r));
            } else {
                hoisted.push((p, r));
            }
        }
        if hoisted.is_empty() {
            continue;
        }
        let wrap = |body: &mut Body, block: Vec<(Pat, ExprId)>, inner: ExprId| {
            block.into_iter().rev().fold(inner, |acc, (p, r)| {
                let ty = body.ty(acc).clone();
                body.alloc_typed(Expr::Let(p, r, acc), ty)
            })
        };
        let new_body = wrap(&mut def.body, kept, rest);
        let lam_ty = Type::lam(ity.clone(), def.body.ty(new_body).clone());
        let lam = def.body.alloc_typed(Expr::Lam(index, ity, new_body), lam_ty);
        let args_ty = Type::Tuple(vec![def.body.ty(n).clone(), def.body.ty(lam).clone()]);
        let args = def.body.alloc_typed(Expr::Tuple(vec![n, lam]), args_ty);
        let ty = def.body.ty(e).clone();
        let build = def.body.alloc_typed(Expr::Call(Callee::Prim(Prim::Build), args), ty);
        // The loop's node becomes the hoisted lets around the new loop.
        let (p0, r0) = hoisted.remove(0);
        let inner = wrap(&mut def.body, hoisted, build);
        def.body.exprs[e] = Expr::Let(p0, r0, inner);
    }
}

/// A `build n (lam (c : Integer) body)` over the columns or rows of a
/// `[jac f]`: its size, index, index type and body.
fn loop_parts(body: &Body, e: ExprId) -> Option<(ExprId, String, Type, ExprId)> {
    let Expr::Call(Callee::Prim(Prim::Build), arg) = &body.exprs[e] else { return None };
    let Expr::Tuple(parts) = &body.exprs[*arg] else { return None };
    let [n, lam] = parts[..] else { return None };
    let Expr::Lam(i, ity, lam_body) = &body.exprs[lam] else { return None };
    (i == COLUMN || i == ROW).then(|| (n, i.clone(), ity.clone(), *lam_body))
}
