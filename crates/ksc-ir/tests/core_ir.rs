//! Core IR definitions (`core.rs`).

use ksc_ir::{Body, Def, Expr, ExprId, FunName, Lit, Param, Pat, Type};

/// `(def f Float (x : Float) body)` with the body `make` builds.
fn def(make: impl FnOnce(&mut Body) -> ExprId) -> Def {
    let mut body = Body::new();
    let root = make(&mut body);
    let params = vec![Param { name: "x".into(), ty: Type::Float }];
    Def { name: FunName::plain("f"), params, ret_ty: Type::Float, body, root }
}

#[test]
fn scope_errors_are_variables_read_outside_their_binders() {
    // (let (y x) y): fine.
    let ok = def(|b| {
        let x = b.alloc(Expr::Var("x".into()));
        let y = b.alloc(Expr::Var("y".into()));
        b.alloc(Expr::Let(Pat::Var("y".into()), x, y))
    });
    assert_eq!(ok.scope_error(), None);
    // (let (y y) x): the right side does not see its own binder.
    let rhs = def(|b| {
        let y = b.alloc(Expr::Var("y".into()));
        let x = b.alloc(Expr::Var("x".into()));
        b.alloc(Expr::Let(Pat::Var("y".into()), y, x))
    });
    assert_eq!(rhs.scope_error().as_deref(), Some("`y` is read where nothing binds it"));
    // (tuple (lam (z : Float) z) z): a lambda's binder ends with it.
    let lam = def(|b| {
        let z = b.alloc(Expr::Var("z".into()));
        let l = b.alloc(Expr::Lam("z".into(), Type::Float, z));
        let z2 = b.alloc(Expr::Var("z".into()));
        b.alloc(Expr::Tuple(vec![l, z2]))
    });
    assert!(lam.scope_error().is_some());
    // (tuple (let (x 1.0) x) x): shadowing ends with the let, and the
    // parameter is seen again.
    let shadow = def(|b| {
        let one = b.alloc(Expr::Lit(Lit::Float(1.0)));
        let x = b.alloc(Expr::Var("x".into()));
        let l = b.alloc(Expr::Let(Pat::Var("x".into()), one, x));
        let x2 = b.alloc(Expr::Var("x".into()));
        b.alloc(Expr::Tuple(vec![l, x2]))
    });
    assert_eq!(shadow.scope_error(), None);
}
