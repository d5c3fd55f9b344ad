//! Whole programs: calls, recursion and its limits, backtraces, closures,
//! ill-formed input, speed.

use std::time::Instant;

use ksc_ir::{Body, Callee, Def, Expr, FunName, Lit, Param, Pat, Prim, Type};
use la_arena::{Idx, RawIdx};

use super::run_main;
use ksc_eval::{Interpreter, RuntimeError, Value};

fn ff() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

#[test]
fn calls_with_every_parameter_form() {
    let src = "
      (def one Float (x : Float) (mul x 2.0))
      (def pair Float (p : Tuple Float Float) (get$2$2 p))
      (def two Float ((a : Float) (b : Float)) (sub a b))
      (def none Integer () 42)
      (def main Float ()
        (let (p (tuple 5.0 1.5))
          (add (add (one 1.0) (pair (tuple 1.0 2.0)))
               (add (two p) (add (two 10.0 1.0) (to_float (none)))))))";
    // 2 + 2 + 3.5 + 9 + 42
    assert_eq!(run_main(src).0.unwrap(), Value::Float(58.5));
}

#[test]
fn top_level_calls() {
    let defs = super::mini::program("(def two Float ((a : Float) (b : Float)) (sub a b))");
    let mut interp = Interpreter::new(&defs);
    let mut out = Vec::new();
    let arg = Value::tuple(vec![Value::Float(5.0), Value::Float(1.5)]);
    assert_eq!(interp.call(&FunName::typed("two", ff()), arg.clone(), &mut out).unwrap(), Value::Float(3.5));
    assert!(interp.is_defined(&FunName::typed("two", ff())));
    // Native prelude functions can be called directly.
    assert_eq!(interp.call(&FunName::typed("add", ff()), arg, &mut out).unwrap(), Value::Float(6.5));
    let e = interp.call(&FunName::typed("two", ff()), Value::Float(1.0), &mut out).unwrap_err();
    assert!(e.message.contains("takes 2 arguments"), "{}", e.message);
    assert_eq!(e.location, None);
    let e = interp.call(&FunName::typed("nope", Type::Float), Value::Float(1.0), &mut out).unwrap_err();
    assert_eq!(e.message, "there is no definition of `[nope Float]`");
}

#[test]
fn recursion() {
    let src = "
      (def fact Integer (n : Integer) (if (eq n 0) 1 (mul n (fact (sub n 1)))))
      (def fib Integer (n : Integer) (if (lt n 2) n (add (fib (sub n 1)) (fib (sub n 2)))))
      (def main Integer () (tuple (fact 20) (fib 20)))";
    assert_eq!(run_main(src).0.unwrap().to_string(), "2432902008176640000,6765");
    let (r, _, _) = run_main(
        "(def fact Integer (n : Integer) (if (eq n 0) 1 (mul n (fact (sub n 1))))) (def main Integer () (add 0 (fact 21)))",
    );
    let e = r.unwrap_err();
    assert_eq!(e.message, "integer overflow");
    // The failing `mul` is in the outermost activation of `fact`, called by main.
    assert_eq!(e.stack.len(), 1);
    let (r, _, _) = run_main(
        "(def f Integer (n : Integer) (if (eq n 0) (div 1 0) (add 1 (f (sub n 1))))) (def main Integer () (add 0 (f 20)))",
    );
    let e = r.unwrap_err();
    assert_eq!(e.message, "division by zero");
    assert_eq!(e.stack.len(), 21);
    assert_eq!(e.stack.iter().filter(|(f, _)| f.base == "f").count(), 20);
    assert_eq!(e.stack.last().unwrap().0.base, "main");
    // A call in tail position leaves no call site behind.
    let (r, _, _) =
        run_main("(def f Integer (n : Integer) (if (eq n 0) (div 1 0) (f (sub n 1)))) (def main Integer () (f 20))");
    assert_eq!(r.unwrap_err().stack.len(), 0);
}

#[test]
fn tail_calls_run_in_constant_space() {
    let src = "
      (def loop Integer ((i : Integer) (acc : Integer))
        (if (eq i 0) acc
          (let (j (sub i 1))
            (assert (gte j 0) (loop j (add acc i))))))
      (def even Bool (n : Integer) (if (eq n 0) true (odd (sub n 1))))
      (def odd Bool (n : Integer) (if (eq n 0) false (even (sub n 1))))
      (def main Integer () (tuple (loop 1000000 0) (even 100001)))";
    assert_eq!(run_main(src).0.unwrap().to_string(), "500000500000,0");
}

const DEEP: &str = "(def deep Integer (n : Integer) (if (eq n 0) 0 (add 1 (deep (sub n 1)))))";

/// Runs `deep` at depth `n` with a stack limit of `limit` bytes, on a
/// thread with room for it (its stack is reserved, not all used).
fn deep_with_stack(n: i64, limit: usize) -> Result<String, Box<RuntimeError>> {
    std::thread::Builder::new()
        .stack_size(limit + ksc_eval::STACK_SLACK)
        .spawn(move || {
            let defs = super::mini::program(DEEP);
            let mut interp = Interpreter::new(&defs);
            interp.set_stack_limit(limit);
            interp
                .call(&FunName::typed("deep", Type::Integer), Value::Integer(n), &mut Vec::new())
                .map(|v| v.to_string())
                .map_err(Box::new)
        })
        .unwrap()
        .join()
        .unwrap()
}

/// Nested calls have no bound of their own: only the stack's bytes bound
/// them. 100,000 nested calls (ten times the old fixed limit) run with a
/// limit of 512 MiB; a limit of 4 MiB stops the same recursion with "recursion
/// too deep", and a limit twice as large lets it nest about twice as deep.
/// Also measures the native stack one nested call takes.
#[test]
fn recursion_is_bounded_by_the_stack_not_by_a_count() {
    assert_eq!(deep_with_stack(100_000, 512 << 20).unwrap(), "100000");
    let depth_at = |limit: usize| {
        let e = deep_with_stack(10_000_000, limit).unwrap_err();
        assert_eq!(e.message, "recursion too deep");
        assert!(e.location.is_some());
        e.stack.len() + e.elided
    };
    let (small, large) = (depth_at(4 << 20), depth_at(8 << 20));
    let per_call = (4 << 20) / small;
    eprintln!("native stack per nested call of `deep`: about {per_call} bytes");
    assert!(per_call < 4096, "{per_call} bytes per call");
    assert!(large > small * 3 / 2 && large < small * 5 / 2, "{small} calls in 4 MiB, {large} in 8 MiB");
}

/// A run-time error lists the innermost 10,000 calling frames and counts
/// the others.
#[test]
fn deep_errors_list_the_innermost_frames() {
    let e = deep_with_stack(10_000_000, 64 << 20).unwrap_err();
    assert_eq!(e.message, "recursion too deep");
    assert_eq!(e.stack.len(), 10_000);
    assert!(e.elided > 0);
}

#[test]
fn backtrace() {
    let src = "
      (def inner Float (v : Vec Float) (index 5 v))
      (def middle Float (v : Vec Float) (mul 2.0 (inner v)))
      (def main Float () (add 1.0 (middle (Vec_init 1.0))))";
    let (r, _, defs) = run_main(src);
    let e = r.unwrap_err();
    assert_eq!(e.message, "index out of range: index 5 in a tensor of size 1");
    let (name, at) = e.location.unwrap();
    assert_eq!(name, defs[0].name);
    assert!(matches!(defs[0].body.exprs[at], Expr::Call(Callee::Prim(Prim::Index), _)));
    let sites: Vec<String> = e
        .stack
        .iter()
        .map(|(f, at)| {
            let def = defs.iter().find(|d| d.name == *f).unwrap();
            match &def.body.exprs[*at] {
                Expr::Call(Callee::Fun(g), _) => format!("{} -> {}", f.base, g.base),
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(sites, ["middle -> inner", "main -> middle"]);
}

#[test]
fn errors_inside_lambdas_point_into_the_lambda() {
    let (r, _, defs) = run_main("(def main Integer () (sum (build 3 (lam (i : Integer) (div 6 (sub 2 i))))))");
    let e = r.unwrap_err();
    assert_eq!(e.message, "division by zero");
    let (_, at) = e.location.unwrap();
    match &defs[0].body.exprs[at] {
        Expr::Call(Callee::Fun(f), _) => assert_eq!(f.base, "div"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_interpreter_is_reusable_after_an_error() {
    let defs = super::mini::program(
        "(def bad Integer (n : Integer) (let (x 1) (build 2 (lam (i : Integer) (div x (sub n i))))))
         (def good Integer (n : Integer) (let (y 5) (add y n)))",
    );
    let mut interp = Interpreter::new(&defs);
    let mut out = Vec::new();
    assert!(interp.call(&FunName::typed("bad", Type::Integer), Value::Integer(1), &mut out).is_err());
    let r = interp.call(&FunName::typed("good", Type::Integer), Value::Integer(1), &mut out);
    assert_eq!(r.unwrap(), Value::Integer(6));
}

#[test]
fn closures_outside_argument_lists() {
    let src = "
      (def main Integer ()
        (let (k 3.0)
          (let (f (lam (x : Float) (mul x k)))
            (let (junk 5)
              (tuple (map f (Vec_init 1.0 2.0))
                     (build 2 (lam (i : Integer) (sum (map f (Vec_init (to_float i) 1.0))))))))))";
    assert_eq!(run_main(src).0.unwrap().to_string(), "[3, 6],[3, 6]");
    let (r, out, _) = run_main("(def main Integer () (print (lam (x : Float) x)))");
    assert_eq!((r.unwrap(), out.as_str()), (Value::Integer(0), "<lambda>"));
}

#[test]
fn print_values_example() {
    // The value forms of ksc-examples/print_values.ks.
    let src = r#"
      (def main Integer ()
        (print "pair: " (tuple 1 2.5) "\n"
               "nested tuple: " (tuple 1 (tuple 2 3) 4) "\n"
               "unit: [" (tuple) "]\n"
               "unit first: " (tuple (tuple) 2.0) "\n"
               "vector: " (build 3 (lam (i : Integer) (mul 1.5 (to_float i)))) "\n"
               "vector of tuples: " (build 2 (lam (i : Integer) (tuple (add (mul 2 i) 1) (add (mul 2 i) 2)))) "\n"
               "vector of vectors: " (build 2 (lam (i : Integer) (build (add i 1) (lam (j : Integer) j)))) "\n"
               "tensor 2: " (build (tuple 2 3) (lam (ij : Tuple Integer Integer)
                              (let ((i j) ij) (add (mul 3 i) j)))) "\n"
               "empty vector: " (build 0 (lam (i : Integer) 1.0)) "\n"))"#;
    let (r, out, _) = run_main(src);
    assert_eq!(r.unwrap(), Value::Integer(26));
    assert_eq!(
        out,
        "pair: 1,2.5\nnested tuple: 1,2,3,4\nunit: []\nunit first: ,2\nvector: [0, 1.5, 3]\n\
         vector of tuples: [1,2, 3,4]\nvector of vectors: [[0], [0, 1]]\ntensor 2: [[0, 1, 2], [3, 4, 5]]\n\
         empty vector: []\n"
    );
}

/// A definition built directly with `Body::alloc_typed`, as the front end does.
#[test]
fn hand_built_core_ir() {
    let mut body = Body::new();
    let x = body.alloc_typed(Expr::Var("x".into()), Type::Float);
    let x2 = body.alloc_typed(Expr::Var("x".into()), Type::Float);
    let arg = body.alloc_typed(Expr::Tuple(vec![x, x2]), ff());
    let sq = body.alloc_typed(Expr::Call(Callee::Fun(FunName::typed("mul", ff())), arg), Type::Float);
    let y = body.alloc_typed(Expr::Var("y".into()), Type::Float);
    let one = body.alloc_typed(Expr::Lit(Lit::Float(1.0)), Type::Float);
    let arg = body.alloc_typed(Expr::Tuple(vec![y, one]), ff());
    let inc = body.alloc_typed(Expr::Call(Callee::Prim(Prim::TsAdd), arg), Type::Float);
    let root = body.alloc_typed(Expr::Let(Pat::Var("y".into()), sq, inc), Type::Float);
    let def = Def {
        name: FunName::typed("f", Type::Float),
        params: vec![Param { name: "x".into(), ty: Type::Float }],
        ret_ty: Type::Float,
        body,
        root,
    };
    let mut interp = Interpreter::new([&def]);
    let r = interp.call(&def.name, Value::Float(3.0), &mut Vec::new());
    assert_eq!(r.unwrap(), Value::Float(10.0));
}

fn one_def(body: Body, root: ksc_ir::ExprId) -> Def {
    Def { name: FunName::typed("f", Type::unit()), params: vec![], ret_ty: Type::Float, body, root }
}

fn run_def(def: &Def) -> RuntimeError {
    Interpreter::new([def]).call(&def.name, Value::unit(), &mut Vec::new()).unwrap_err()
}

#[test]
fn ill_formed_bodies_are_errors() {
    // A variable not in scope.
    let mut body = Body::new();
    let root = body.alloc(Expr::Var("y".into()));
    let e = run_def(&one_def(body, root));
    assert_eq!(e.message, "variable `y` is not in scope");
    assert_eq!(e.location, Some((FunName::typed("f", Type::unit()), root)));

    // A dangling expression id.
    let mut body = Body::new();
    let dangling = Idx::from_raw(RawIdx::from(99u32));
    let root = body.alloc(Expr::Call(Callee::Prim(Prim::TsNeg), dangling));
    let e = run_def(&one_def(body, root));
    assert!(e.message.contains("is malformed"), "{}", e.message);

    // A cycle.
    let mut body = Body::new();
    let a = body.alloc(Expr::Tuple(vec![]));
    let b = body.alloc(Expr::Tuple(vec![a]));
    body.exprs[a] = Expr::Tuple(vec![b]);
    let e = run_def(&one_def(body, b));
    assert!(e.message.contains("not a tree"), "{}", e.message);

    // A variable shared between scopes where it means different bindings.
    let mut body = Body::new();
    let v = body.alloc(Expr::Var("x".into()));
    let one = body.alloc(Expr::Lit(Lit::Integer(1)));
    let two = body.alloc(Expr::Lit(Lit::Integer(2)));
    let inner = body.alloc(Expr::Let(Pat::Var("x".into()), two, v));
    let pair = body.alloc(Expr::Tuple(vec![v, inner]));
    let root = body.alloc(Expr::Let(Pat::Var("x".into()), one, pair));
    let e = run_def(&one_def(body, root));
    assert!(e.message.contains("shared between different scopes"), "{}", e.message);

    // A caller of a malformed definition fails at the call.
    let mut body = Body::new();
    let root = body.alloc(Expr::Call(Callee::Prim(Prim::TsNeg), dangling));
    let bad = one_def(body, root);
    let mut body = Body::new();
    let unit = body.alloc(Expr::Tuple(vec![]));
    let root = body.alloc(Expr::Call(Callee::Fun(bad.name.clone()), unit));
    let caller = Def { name: FunName::typed("g", Type::unit()), ..one_def(body, root) };
    let e = Interpreter::new([&bad, &caller]).call(&caller.name, Value::unit(), &mut Vec::new()).unwrap_err();
    assert!(e.message.contains("is malformed"), "{}", e.message);
    assert_eq!(e.location, Some((caller.name.clone(), root)));

    // An ill-typed argument.
    let mut body = Body::new();
    let s = body.alloc(Expr::Lit(Lit::String("s".into())));
    let root = body.alloc(Expr::Call(Callee::Fun(FunName::typed("exp", Type::Float)), s));
    let e = run_def(&one_def(body, root));
    assert!(e.message.starts_with("internal error"), "{}", e.message);
}

/// Loops of about 1e5 iterations, as example programs run in tests.
#[test]
fn speed() {
    let src = "
      (def step Float ((x : Float) (i : Integer)) (add (mul x 0.999) (to_float (sub i (mul 2 (div i 2))))))
      (def loop Float ((i : Integer) (n : Integer) (x : Float))
        (if (eq i n) x (loop (add i 1) n (step x i))))
      (def main Float ()
        (let (v (build 100000 (lam (i : Integer) ($ranhashdoub i))))
        (let (s (sumbuild 100000 (lam (i : Integer) (let (x (index i v)) (mul (sin x) (cos x))))))
        (let (m (fold (lam (acc_x : Tuple Float Float) (let ((acc x) acc_x) (max acc x))) 0.0 v))
          (add (add s m) (loop 0 100000 0.0))))))";
    let start = Instant::now();
    let (r, _, _) = run_main(src);
    let elapsed = start.elapsed();
    eprintln!("speed test: {elapsed:?}");
    let Value::Float(x) = r.unwrap() else { panic!() };
    assert!(x.is_finite());
    assert!(elapsed.as_secs_f64() < 10.0, "too slow: {elapsed:?}");
}

/// A tail recursion that never ends runs in constant stack; a call limit
/// stops it, located at a call, and a call within the limit is unaffected.
#[test]
fn a_call_limit_stops_a_loop_that_never_ends() {
    let defs = super::mini::program("(def spin Integer (n : Integer) (if (lt n 0) n (spin (add n 1))))");
    let mut interp = Interpreter::new(&defs);
    interp.set_call_limit(100_000);
    let spin = FunName::typed("spin", Type::Integer);
    let e = interp.call(&spin, Value::Integer(0), &mut Vec::new()).unwrap_err();
    assert_eq!(e.message, "the run took more than 100000 operations (a loop that never ends?)");
    assert!(e.location.is_some());
    assert_eq!(interp.call(&spin, Value::Integer(-3), &mut Vec::new()).unwrap().to_string(), "-3");
}
