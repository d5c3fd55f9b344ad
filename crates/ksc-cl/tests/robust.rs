//! Bad input never crashes the CL passes: deep nesting, untyped bodies,
//! ill-typed terms and what CL cannot express are error values.

use ksc_cl::{Cl, ClError, ErrorKind, Fun, Konst};
use ksc_eval::Value;
use ksc_ir::{Body, Callee, Def, Expr, FunName, Lit, Param, Pat, Prim, Type};

fn float2() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

/// `let x1 = add x0 1.0 in .. let xn = add x(n-1) 1.0 in xn`.
fn chain(n: usize) -> Def {
    let mut body = Body::new();
    let add = FunName::typed("add", float2());
    let mut e = body.alloc_typed(Expr::Var(format!("x{n}")), Type::Float);
    for i in (1..=n).rev() {
        let v = body.alloc_typed(Expr::Var(format!("x{}", i - 1)), Type::Float);
        let one = body.alloc_typed(Expr::Lit(Lit::Float(1.0)), Type::Float);
        let t = body.alloc_typed(Expr::Tuple(vec![v, one]), float2());
        let c = body.alloc_typed(Expr::Call(Callee::Fun(add.clone()), t), Type::Float);
        e = body.alloc_typed(Expr::Let(Pat::Var(format!("x{i}")), c, e), Type::Float);
    }
    let params = vec![Param { name: "x0".into(), ty: Type::Float }];
    Def { name: FunName::typed("f", Type::Float), params, ret_ty: Type::Float, body, root: e }
}

fn sigs(f: &FunName) -> Option<(Type, Type)> {
    (f.base == "add" && f.base_ty == Some(float2())).then(|| (float2(), Type::Float))
}

#[test]
fn deep_let_chains_translate_on_any_stack_or_are_refused() {
    // On a small stack: cl_def moves to a big one itself.
    let r = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let d = chain(5000);
            let back = ksc_cl::cl_def(&d).map_err(|e| e.message)?;
            let too_deep = ksc_cl::cl_def(&chain(ksc_cl::MAX_DEPTH + 5));
            Ok::<_, String>((back.name.to_string(), too_deep))
        })
        .unwrap()
        .join()
        .unwrap();
    let (name, too_deep) = r.unwrap();
    assert_eq!(name, "[CL [f Float]]");
    let e = too_deep.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.message.contains("nested more than"), "{e}");
    // The term of the 5000-deep chain type-checks and evaluates (on a big stack).
    let v = ksc_cl::on_big_stack(|| {
        let d = chain(5000);
        let c = ksc_cl::def_to_cl(&d).map_err(|e| e.message)?;
        ksc_cl::check(&c, &Type::Float, &Type::Float, &sigs).map_err(|e| e.message)?;
        let defs: Vec<Def> = Vec::new();
        let mut out = Vec::new();
        let mut rt = ksc_cl::InterpRuntime::new(defs.iter(), &mut out);
        ksc_cl::eval(&c, Value::Float(0.5), &mut rt).map(|v| v.to_string()).map_err(|e| e.message)
    });
    assert_eq!(v.as_deref(), Ok("5000.5"));
}

#[test]
fn untyped_bodies_and_unbound_variables_are_malformed() {
    let mut d = chain(2);
    d.body.types = Default::default();
    assert_eq!(ksc_cl::def_to_cl(&d).unwrap_err().kind, ErrorKind::Malformed);
    let mut d = chain(2);
    d.params[0].name = "y".into();
    let e = ksc_cl::def_to_cl(&d).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Malformed);
    assert!(e.message.contains("`x0` is not in scope"), "{e}");
}

fn konst(x: f64) -> Cl {
    Cl::Konst(Konst::Lit(Lit::Float(x)))
}

fn type_error(c: &Cl, src: &Type) -> ClError {
    let e = ksc_cl::type_of(c, src, &sigs).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Type, "{e}");
    e
}

#[test]
fn ill_typed_terms_are_type_errors() {
    // A constant needs the empty environment (figure 11: K(k) : () => R).
    assert!(type_error(&konst(1.0), &Type::Float).message.contains("the input of a constant"));
    assert_eq!(ksc_cl::type_of(&konst(1.0), &Type::unit(), &sigs), Ok(Type::Float));
    // Pruning needs a tuple of its size.
    let p = Cl::Prune { keep: vec![0, 2], of: 3 };
    type_error(&p, &float2());
    let three = Type::Tuple(vec![Type::Float, Type::Integer, Type::Bool]);
    assert_eq!(ksc_cl::type_of(&p, &three, &sigs), Ok(Type::Tuple(vec![Type::Float, Type::Bool])));
    type_error(&Cl::Prune { keep: vec![3], of: 3 }, &three);
    // A function at the wrong type, an unknown function, a lambda primitive as F.
    let add = Fun { callee: Callee::Fun(FunName::typed("add", float2())), src: float2(), tgt: Type::Float };
    type_error(&Cl::Fun(add.clone()), &three);
    let nosuch = Fun { callee: Callee::Fun(FunName::typed("nosuch", Type::Float)), src: Type::Float, tgt: Type::Float };
    assert!(type_error(&Cl::Fun(nosuch), &Type::Float).message.contains("there is no function"));
    let build = Fun { callee: Callee::Prim(Prim::Build), src: float2(), tgt: Type::Float };
    type_error(&Cl::Fun(build), &float2());
    // Branches of different types; a let on an environment that is not a tuple.
    let cond = Cl::comp(Cl::Prune { keep: vec![], of: 0 }, Cl::Konst(Konst::Lit(Lit::Bool(true))));
    let k_int = Cl::Konst(Konst::Lit(Lit::Integer(1)));
    type_error(&Cl::If(Box::new(cond.clone()), Box::new(konst(1.0)), Box::new(k_int)), &Type::unit());
    let l = Cl::Let { var: "x".into(), ty: Type::Float, rhs: Box::new(Cl::Id), body: Box::new(Cl::Id) };
    assert!(type_error(&l, &Type::Float).message.contains("must be a tuple"));
    // A build of a Float size.
    let b = Cl::Build { size: Box::new(konst(2.0)), var: "i".into(), ty: Type::Integer, elem: Box::new(Cl::Id) };
    type_error(&b, &Type::unit());
}

struct NoFunctions;

impl ksc_cl::Runtime for NoFunctions {
    fn call_fun(&mut self, f: &FunName, _: Value) -> Result<Value, String> {
        Err(format!("no `{f}`"))
    }
    fn call_prim(&mut self, p: Prim, _: &Type, _: &Type, _: Value) -> Result<Value, String> {
        Err(format!("no `{p}`"))
    }
}

#[test]
fn evaluation_failures_are_values() {
    let eval = |c: &Cl, t: Value| ksc_cl::eval(c, t, &mut NoFunctions);
    // An ill-typed term evaluates to an error, not a crash.
    assert_eq!(eval(&Cl::Prune { keep: vec![0], of: 2 }, Value::Float(1.0)).unwrap_err().kind, ErrorKind::Eval);
    let l = Cl::Let { var: "x".into(), ty: Type::Float, rhs: Box::new(Cl::Id), body: Box::new(Cl::Id) };
    assert!(eval(&l, Value::Float(1.0)).is_err());
    // A failed assertion.
    let no = Cl::Konst(Konst::Lit(Lit::Bool(false)));
    let a = Cl::Assert(Box::new(no), Box::new(Cl::Id));
    assert_eq!(eval(&a, Value::unit()).unwrap_err().message, "assertion failed");
    // A negative build size.
    let b = Cl::Build {
        size: Box::new(Cl::Konst(Konst::Lit(Lit::Integer(-2)))),
        var: "i".into(),
        ty: Type::Integer,
        elem: Box::new(Cl::Id),
    };
    assert_eq!(eval(&b, Value::unit()).unwrap_err().message, "`build` with a negative size -2");
    // The runtime's failures come through.
    let add = Fun { callee: Callee::Fun(FunName::typed("add", float2())), src: float2(), tgt: Type::Float };
    let pair = Value::tuple(vec![Value::Float(1.0), Value::Float(2.0)]);
    assert!(eval(&Cl::Fun(add), pair).unwrap_err().message.contains("no `[add"));
}

#[test]
fn back_translation_of_ill_typed_terms_is_an_error() {
    let params = vec![Param { name: "x".into(), ty: Type::Float }];
    let name = FunName::plain("g");
    // Pruning a Float; a let on a Float; a result of the wrong type.
    let bad = [
        Cl::Prune { keep: vec![0], of: 2 },
        Cl::Let { var: "x".into(), ty: Type::Float, rhs: Box::new(Cl::Id), body: Box::new(Cl::Id) },
        Cl::Tuple(vec![Cl::Id, Cl::Id]),
    ];
    for c in &bad {
        assert!(ksc_cl::cl_to_def(c, name.clone(), &params, &Type::Float).is_err(), "{c}");
    }
    // Parameters bound twice.
    let twice = vec![params[0].clone(), params[0].clone()];
    assert_eq!(ksc_cl::cl_to_def(&Cl::Id, name, &twice, &float2()).unwrap_err().kind, ErrorKind::Malformed);
}

#[test]
fn lambdas_outside_primitives_are_unsupported() {
    // f v = let g = (lam (x : Float) x) in map g v
    let mut body = Body::new();
    let vf = Type::vec(Type::Float);
    let x = body.alloc_typed(Expr::Var("x".into()), Type::Float);
    let lam = body.alloc_typed(Expr::Lam("x".into(), Type::Float, x), Type::lam(Type::Float, Type::Float));
    let g = body.alloc_typed(Expr::Var("g".into()), Type::lam(Type::Float, Type::Float));
    let v = body.alloc_typed(Expr::Var("v".into()), vf.clone());
    let args =
        body.alloc_typed(Expr::Tuple(vec![g, v]), Type::Tuple(vec![Type::lam(Type::Float, Type::Float), vf.clone()]));
    let map = body.alloc_typed(Expr::Call(Callee::Prim(Prim::Map), args), vf.clone());
    let root = body.alloc_typed(Expr::Let(Pat::Var("g".into()), lam, map), vf.clone());
    let d = Def {
        name: FunName::typed("f", vf.clone()),
        params: vec![Param { name: "v".into(), ty: vf.clone() }],
        ret_ty: vf,
        body,
        root,
    };
    let e = ksc_cl::cl_def(&d).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.message.contains("CL has no function values"), "{e}");
}
