//! The primitives that make a tensor of a size computed at run time check
//! it against the limit on elements (`ksc_ir::limits`, README "Limits")
//! before allocating: `$tapePush` (the tape grows by one record), `$scan`
//! and `$scanSum` (n + 1 accumulators) and `$tangentFlatten` (the Floats
//! of a value), as `build` and the others do. Without the check a tape or
//! a scan grew past the limit natively.

use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Param, Pat, Prim, Type};

fn vf() -> Type {
    Type::vec(Type::Float)
}

fn ff() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

fn var(b: &mut Body, name: &str, t: Type) -> ExprId {
    b.alloc_typed(Expr::Var(name.to_string()), t)
}

fn prim(b: &mut Body, p: Prim, args: Vec<ExprId>, t: Type) -> ExprId {
    let arg = match &args[..] {
        [a] => *a,
        _ => {
            let ts = args.iter().map(|a| b.ty(*a).clone()).collect();
            b.alloc_typed(Expr::Tuple(args), Type::Tuple(ts))
        }
    };
    b.alloc_typed(Expr::Call(Callee::Prim(p), arg), t)
}

/// `(def name ret (v : Vec Float) body)`.
fn def(name: &str, ret: Type, body: Body, root: ExprId) -> Def {
    Def {
        name: FunName::typed(name, vf()),
        params: vec![Param { name: "v".into(), ty: vf() }],
        ret_ty: ret,
        body,
        root,
    }
}

/// The loop IR of `d` as lowered (not optimised), as text.
fn lowered(d: &Def) -> String {
    let m = ksc_lower::compile(&[d], std::slice::from_ref(&d.name), ksc_lower::Options::default(), false)
        .unwrap_or_else(|e| panic!("{} does not lower: {e:?}", d.name));
    m.pretty()
}

#[test]
fn tapes_scans_and_flattened_tangents_check_the_limit_on_elements() {
    // $tapePush v 1.0
    let mut b = Body::new();
    let v = var(&mut b, "v", vf());
    let one = b.alloc_typed(Expr::Lit(ksc_ir::Lit::Float(1.0)), Type::Float);
    let root = prim(&mut b, Prim::TapePush, vec![v, one], vf());
    let tape = def("tape", vf(), b, root);

    // $scan (lam (p : Tuple Float Float) (get$1$2 p)) 0.0 v
    let mut b = Body::new();
    let p = var(&mut b, "p", ff());
    let first = prim(&mut b, Prim::Get { index: 1, arity: 2 }, vec![p], Type::Float);
    let lam = b.alloc_typed(Expr::Lam("p".into(), ff(), first), Type::Lam(Box::new(ff()), Box::new(Type::Float)));
    let zero = b.alloc_typed(Expr::Lit(ksc_ir::Lit::Float(0.0)), Type::Float);
    let v = var(&mut b, "v", vf());
    let root = prim(&mut b, Prim::Scan, vec![lam, zero, v], vf());
    let scan = def("scan", vf(), b, root);

    // $tangentFlatten (build (size v) (lam (i : Integer) (tuple 1.0 1.0)))
    // of a vector of pairs: 2 n Floats.
    let mut b = Body::new();
    let v = var(&mut b, "v", vf());
    let n = prim(&mut b, Prim::Size, vec![v], Type::Integer);
    let x = b.alloc_typed(Expr::Lit(ksc_ir::Lit::Float(1.0)), Type::Float);
    let y = b.alloc_typed(Expr::Lit(ksc_ir::Lit::Float(1.0)), Type::Float);
    let pair = b.alloc_typed(Expr::Tuple(vec![x, y]), ff());
    let lam =
        b.alloc_typed(Expr::Lam("i".into(), Type::Integer, pair), Type::Lam(Box::new(Type::Integer), Box::new(ff())));
    let pairs = prim(&mut b, Prim::Build, vec![n, lam], Type::vec(ff()));
    let w = var(&mut b, "w", Type::vec(ff()));
    let flat = prim(&mut b, Prim::TangentFlatten, vec![w], vf());
    let root = b.alloc_typed(Expr::Let(Pat::Var("w".into()), pairs, flat), vf());
    let flatten = def("flatten", vf(), b, root);

    for (d, prim) in [(&tape, "$tapePush"), (&scan, "$scan"), (&flatten, "$tangentFlatten")] {
        let text = lowered(d);
        assert!(text.contains(&format!("too-large({prim})")), "no check of the limit for `{prim}`:\n{text}");
    }
}
