//! Tests of the interpreter, in one test binary (`cargo test -p ksc-eval
//! --test eval`). Programs are written in a small subset of `.ks` read by
//! [`mini`], which builds typed, resolved Core IR by hand the way the front
//! end does. (They are here, not unit tests in `src/`, so that `cargo test`
//! does not compile the library a second time as a test harness.)

mod format_cases;
mod mathfns;
mod mini;
mod native;
mod prims;
mod programs;
mod properties;

use std::rc::Rc;

use ksc_ir::{Def, Expr, FunName, Type};

use ksc_eval::{Interpreter, RuntimeError, Tensor, Value};

/// Runs `name` (with argument type `arg_ty`) of the program `src`.
pub fn run_fn(src: &str, name: &str, arg_ty: Type, arg: Value) -> (Result<Value, RuntimeError>, String, Vec<Def>) {
    let defs = mini::program(src);
    let mut out = Vec::new();
    let r = Interpreter::new(&defs).call(&FunName::typed(name, arg_ty), arg, &mut out);
    (r, String::from_utf8(out).unwrap(), defs)
}

/// Runs `main` of the program `src`.
pub fn run_main(src: &str) -> (Result<Value, RuntimeError>, String, Vec<Def>) {
    run_fn(src, "main", Type::unit(), Value::unit())
}

/// The printed value of an expression (its type does not matter).
pub fn eval(expr: &str) -> String {
    let (r, out, _) = run_main(&format!("(def main Integer () {expr})"));
    assert_eq!(out, "", "unexpected output");
    r.unwrap_or_else(|e| panic!("{expr}: {}", e.message)).to_string()
}

/// The output and the printed value of an expression.
pub fn eval_out(expr: &str) -> (String, String) {
    let (r, out, _) = run_main(&format!("(def main Integer () {expr})"));
    (out, r.unwrap_or_else(|e| panic!("{expr}: {}", e.message)).to_string())
}

/// The error of an expression, and the expression it is located at.
pub fn eval_err(expr: &str) -> (String, Expr) {
    let (r, _, defs) = run_main(&format!("(def main Integer () {expr})"));
    let e = r.expect_err("expected an error");
    let (name, at) = e.location.clone().expect("an error without location");
    assert_eq!(name, FunName::typed("main", Type::unit()));
    (e.message, defs[0].body.exprs[at].clone())
}

/// Asserts that `expr` fails with a message containing `msg`, at a call of
/// the primitive or function named `at`.
#[track_caller]
pub fn assert_fails(expr: &str, msg: &str, at: &str) {
    let (m, e) = eval_err(expr);
    assert!(m.contains(msg), "{expr}: message {m:?} does not contain {msg:?}");
    let name = match &e {
        Expr::Call(ksc_ir::Callee::Prim(p), _) => p.to_string(),
        Expr::Call(ksc_ir::Callee::Fun(f), _) => f.base.clone(),
        Expr::Assert(..) => "assert".to_string(),
        other => format!("{other:?}"),
    };
    assert_eq!(name, at, "{expr}: located at the wrong expression");
}

fn floats(xs: &[f64]) -> Value {
    Value::vector(xs.iter().map(|&x| Value::Float(x)).collect())
}

#[test]
fn format_float_matches_c() {
    for &(bits, want) in format_cases::CASES {
        let x = f64::from_bits(bits);
        assert_eq!(ksc_eval::format_float(x), want, "{x:?}");
    }
}

#[test]
fn format_float_special_values() {
    assert_eq!(ksc_eval::format_float(f64::NAN), "nan");
    // Without its sign, which native code cannot reproduce reliably.
    assert_eq!(ksc_eval::format_float(-f64::NAN), "nan");
    assert_eq!(ksc_eval::format_float(f64::INFINITY), "inf");
    assert_eq!(ksc_eval::format_float(f64::NEG_INFINITY), "-inf");
    assert_eq!(ksc_eval::format_float(-0.0), "-0");
    // The examples of knossos-reference.md 7.7.
    for (x, s) in
        [(2.0, "2"), (100000.0, "100000"), (-1e38, "-1e+38"), (0.0015, "0.0015"), (1.86265e-11, "1.86265e-11")]
    {
        assert_eq!(ksc_eval::format_float(x), s);
    }
}

#[test]
fn display_of_values() {
    let t = |vs: Vec<Value>| Value::tuple(vs);
    assert_eq!(Value::Integer(-12).to_string(), "-12");
    assert_eq!(Value::Bool(true).to_string(), "1");
    assert_eq!(Value::Bool(false).to_string(), "0");
    assert_eq!(Value::string("a \"b\"\n").to_string(), "a \"b\"\n");
    assert_eq!(t(vec![Value::Integer(1), Value::Float(2.5)]).to_string(), "1,2.5");
    assert_eq!(Value::unit().to_string(), "");
    assert_eq!(t(vec![Value::unit(), Value::Float(2.0)]).to_string(), ",2");
    let nested = t(vec![Value::Integer(1), t(vec![Value::Integer(2), Value::Integer(3)]), Value::Integer(4)]);
    assert_eq!(nested.to_string(), "1,2,3,4");
    assert_eq!(floats(&[1.0, 0.5, 1e6]).to_string(), "[1, 0.5, 1e+06]");
    assert_eq!(floats(&[]).to_string(), "[]");
    let m = Tensor::new(vec![2, 3], (0..6).map(Value::Integer).collect()).unwrap();
    assert_eq!(Value::Tensor(Rc::new(m)).to_string(), "[[0, 1, 2], [3, 4, 5]]");
    let m = Tensor::new(vec![2, 0], vec![]).unwrap();
    assert_eq!(Value::Tensor(Rc::new(m)).to_string(), "[[], []]");
    let m = Tensor::new(vec![2, 1, 2], (0..4).map(Value::Integer).collect()).unwrap();
    assert_eq!(Value::Tensor(Rc::new(m)).to_string(), "[[[0, 1]], [[2, 3]]]");
    let ragged = Value::vector(vec![floats(&[1.0]), floats(&[]), floats(&[2.0, 3.0])]);
    assert_eq!(ragged.to_string(), "[[1], [], [2, 3]]");
    let pairs = Value::vector(vec![
        t(vec![Value::Integer(1), Value::Integer(2)]),
        t(vec![Value::Integer(3), Value::Integer(4)]),
    ]);
    assert_eq!(pairs.to_string(), "[1,2, 3,4]");
    // A malformed tensor built by hand prints what it has, without panicking.
    let bad = Tensor { shape: vec![3, 2], data: vec![Value::Integer(1)] };
    assert_eq!(Value::Tensor(Rc::new(bad)).to_string(), "[[], [], []]");
}

#[test]
fn ranhash_values() {
    // Computed with python3 from the definition.
    let cases = [
        (0, 8882115565503647203u64, 0.4815004496193184, "0.4815"),
        (1, 13738603025981410947, 0.7447711623842486, "0.744771"),
        (20000, 10057253250411273171, 0.5452047911666401, "0.545205"),
        (123456789, 12024371466665708517, 0.6518424833465836, "0.651842"),
        (-1, 10017675707735882228, 0.5430592882791253, "0.543059"),
    ];
    for (seed, hash, x, printed) in cases {
        assert_eq!(ksc_eval::ranhash(seed as u64), hash);
        assert_eq!(ksc_eval::ranhashdoub(seed), x);
        assert_eq!(ksc_eval::format_float(x), printed);
        assert_eq!(eval(&format!("($ranhashdoub {seed})")), printed);
    }
}
