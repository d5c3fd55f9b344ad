//! Second derivatives of a function g whose reverse mode is taped (`[rev
//! g]` made of g's split passes, `tape.rs`: g is recursive), through the
//! symmetry of second derivatives.
//!
//! `[rev g]`'s taped form cannot be differentiated as it is (`$tapePush`
//! and the tape's reads would need derivatives of their own), and its
//! recomputing form (`recomputing` in `lib.rs`) computes a callee's primal
//! at every level, quadratic in the depth of the recursion. But g's
//! forward mode `[fwd g]` is recursive in the same way as g, so `[rev
//! [fwd g]]` is taped, linear in the depth; and for `[rev g] (x, r) =
//! J(x)^T r` and `[fwd g] (x, v) = J(x) v`,
//!
//! - `[fwd [rev g]] ((x, r), (v, dr)) = d/dε J(x + εv)^T (r + ε dr)
//!   = (Σ_k r_k H_k) v + J(x)^T dr`,
//! - `[rev [rev g]] ((x, r), c)` = the gradient of `<c, J(x)^T r> = <r,
//!   J(x) c>`, which is `((Σ_k r_k H_k) c, J(x) c)`,
//!
//! where H_k, the Hessian of g's k-th output, is symmetric, so `(Σ_k r_k
//! H_k) v` is the cotangent of x in `[rev [fwd g]] ((x, v), r)` (the
//! gradient of `<r, J(x) v>` with respect to x). Both are therefore
//!
//! - `[fwd [rev g]] ((x, r), (v, dr)) = get$1$2 ([rev [fwd g]] ((x, v),
//!   r)) + [rev g] (x, dr)`,
//! - `[rev [rev g]] ((x, r), c) = (get$1$2 ([rev [fwd g]] ((x, c), r)),
//!   [fwd g] (x, c))`,
//!
//! a constant times g's cost. They equal the direct derivatives wherever
//! g is twice differentiable (the order of the sums differs, so the last
//! bits may). Higher orders follow: `[rev [rev g]]` so defined is not
//! made of split passes, and its own derivatives call those of `[rev [fwd
//! g]]`, which is, and is differentiated the same way.

use ksc_ir::builder::Builder;
use ksc_ir::{Body, Def, Derivation, FunName, Param, Prim, Type};

use crate::derive::{AdError, R};

/// `[d [rev g]]` for d = `fwd` or `rev` as above, or `fwdt` (`[rev g]`'s
/// value beside `[fwd [rev g]]`), from the signature of `rev_g` (`[rev g]
/// : (S, dT) -> dS`); with the functions it calls.
pub fn second_def(d: Derivation, rev_g: &Def) -> R<(Def, Vec<FunName>)> {
    let (Some((Derivation::Rev, g)), [x_param, r_param]) = (rev_g.name.inner(), &rev_g.params[..]) else {
        return Err(AdError { message: format!("`{}` is not a reverse mode of two parameters", rev_g.name), at: None });
    };
    let (s, dt, ds) = (x_param.ty.clone(), r_param.ty.clone(), rev_g.ret_ty.clone());
    let fwd_g = g.derived(Derivation::Fwd);
    let rev_fwd_g = fwd_g.derived(Derivation::Rev);
    let pair = |a: &Type, b: &Type| Type::Tuple(vec![a.clone(), b.clone()]);
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let xr_ty = pair(&s, &dt);
    let xr = |b: &mut Builder, k: u32| {
        let v = b.var("ksc$x", xr_ty.clone());
        b.prim(Prim::Get { index: k, arity: 2 }, vec![v])
    };
    // get$1$2 ([rev [fwd g]] ((x, v), r)): (Σ_k r_k H_k) v.
    let hessian = |b: &mut Builder, v| {
        let (x, r) = (xr(b, 1), xr(b, 2));
        let xv = b.tuple(vec![x, v]);
        let both = b.call(rev_fwd_g.clone(), vec![xv, r], pair(&ds, &ds));
        b.prim(Prim::Get { index: 1, arity: 2 }, vec![both])
    };
    let (params, root, needs) = match d {
        Derivation::Fwd => {
            let dx_ty = pair(&ds, &dt);
            let dx = |b: &mut Builder, k: u32| {
                let v = b.var("ksc$dx", dx_ty.clone());
                b.prim(Prim::Get { index: k, arity: 2 }, vec![v])
            };
            let v = dx(&mut b, 1);
            let hv = hessian(&mut b, v);
            let (x, dr) = (xr(&mut b, 1), dx(&mut b, 2));
            let jt = b.call(rev_g.name.clone(), vec![x, dr], ds.clone());
            let root = b.prim(Prim::TsAdd, vec![hv, jt]);
            let params =
                vec![Param { name: "ksc$x".into(), ty: xr_ty.clone() }, Param { name: "ksc$dx".into(), ty: dx_ty }];
            (params, root, vec![rev_fwd_g, rev_g.name.clone()])
        }
        Derivation::Rev => {
            let c = b.var("ksc$dr", ds.clone());
            let hc = hessian(&mut b, c);
            let (x, c) = (xr(&mut b, 1), b.var("ksc$dr", ds.clone()));
            let jc = b.call(fwd_g.clone(), vec![x, c], dt.clone());
            let root = b.tuple(vec![hc, jc]);
            let params =
                vec![Param { name: "ksc$x".into(), ty: xr_ty.clone() }, Param { name: "ksc$dr".into(), ty: ds }];
            (params, root, vec![rev_fwd_g, fwd_g])
        }
        Derivation::FwdT => {
            // ([rev g] (x, r), [fwd [rev g]] ((x, r), (v, dr))).
            let (x, r) = (xr(&mut b, 1), xr(&mut b, 2));
            let value = b.call(rev_g.name.clone(), vec![x, r], ds.clone());
            let dx_ty = pair(&ds, &dt);
            let (whole, dx) = (b.var("ksc$x", xr_ty.clone()), b.var("ksc$dx", dx_ty.clone()));
            let fwd = rev_g.name.derived(Derivation::Fwd);
            let tangent = b.call(fwd.clone(), vec![whole, dx], ds.clone());
            let root = b.tuple(vec![value, tangent]);
            let params =
                vec![Param { name: "ksc$x".into(), ty: xr_ty.clone() }, Param { name: "ksc$dx".into(), ty: dx_ty }];
            (params, root, vec![fwd, rev_g.name.clone()])
        }
        _ => {
            return Err(AdError {
                message: format!("no symmetric form of the {d:?} derivative of `{}`", rev_g.name),
                at: None,
            })
        }
    };
    let ret_ty = b.ty(root);
    Ok((Def { name: rev_g.name.derived(d), params, ret_ty, body, root }, needs))
}
