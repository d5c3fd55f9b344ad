//! dF~'s point (seed 000, Example 4) in seed 001's terms (its vectorSum
//! benchmark): a gradient computed by forward mode over one-hot directions
//! is quadratic as written (n directions, each a sum over n elements), and
//! linear once the Core rules run on it: `index-deltavec` reads the
//! direction as an indicator, `mul-if-zero` and `add-if-same` move the
//! indicator out of the products, and the iteration rule
//! `sumbuild-one-hot` takes the sum away. The program asks for that with
//! its own `user-rules`, which runs on what it wrote (docs/strategies.md),
//! and, where what it wrote calls a derived function (`[fwd f]`), on the
//! derived function inlined (`ksc_db::queries::written`; `let-deltavec`
//! then reads the direction where it is used).
//! Counted by the interpreter's operations at n and 4n, without a clock.

/// The schedule that runs the Core rules on what the program wrote.
const SCHEDULE: &str = "(strategy user-rules (normalize (rules core)))\n";

/// The gradient of `dot x x` by forward mode, one direction per element,
/// with the tangent written out.
const DOT_WRITTEN_OUT: &str = "(def grad_fwd (Vec Float) (x : Vec Float)
  (let (n (size x))
    (build n (lam (i : Integer)
      (sumbuild n (lam (j : Integer)
        (add (mul (index j (deltaVec n i 1.0)) (index j x))
             (mul (index j x) (index j (deltaVec n i 1.0))))))))))\n";

/// The same through `[fwd dot_self]`, as a user of forward mode writes it.
const DOT_THROUGH_FWD: &str = "(def dot_self Float (x : Vec Float) (dot x x))
(gdef fwd [dot_self (Vec Float)])
(def grad_fwd (Vec Float) (x : Vec Float)
  (let (n (size x))
    (build n (lam (i : Integer) ([fwd dot_self] x (deltaVec n i 1.0))))))\n";

/// Seed 001's vectorSum: the gradient of the sum of a vector by forward
/// mode.
const VECTOR_SUM: &str = "(def vectorSum Float (v : Vec Float) (sum v))
(gdef fwd [vectorSum (Vec Float)])
(def grad_fwd (Vec Float) (x : Vec Float)
  (let (n (size x))
    (build n (lam (i : Integer) ([fwd vectorSum] x (deltaVec n i 1.0))))))\n";

/// The program `gradient` with an input, with the schedule or without.
fn program(gradient: &str, with_schedule: bool) -> String {
    with(if with_schedule { SCHEDULE } else { "" }, gradient)
}

/// The program `gradient` with an input, after `schedule`.
fn with(schedule: &str, gradient: &str) -> String {
    format!("{schedule}{gradient}(def input (Vec Float) (n : Integer) (build n (lam (i : Integer) (to_float i))))\n")
}

/// The operations of `grad_fwd (input n)` and its result's element 3.
fn cost(gradient: &str, with_schedule: bool, n: i64) -> (u64, f64) {
    cost_of(&program(gradient, with_schedule), n)
}

/// The operations of `grad_fwd (input n)` in `program`, and its result's
/// element 3.
fn cost_of(program: &str, n: i64) -> (u64, f64) {
    use ksc_eval::{Interpreter, Value};
    use ksc_ir::{FunName, Type};
    let analysis = ksc_db::analyze(program);
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let defs = analysis.defs();
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut sink = std::io::sink();
    let x = interp.call(&FunName::typed("input", Type::Integer), Value::Integer(n), &mut sink).expect("input");
    let before = interp.operations();
    let g = interp.call(&FunName::typed("grad_fwd", Type::vec(Type::Float)), x, &mut sink).expect("grad_fwd");
    let ops = interp.operations() - before;
    let Value::Tensor(t) = g else { panic!("a vector") };
    let Value::Float(g3) = t.data[3] else { panic!("a Float") };
    (ops, g3)
}

/// Quadratic as written (16 times the work at 4n), linear with the rules
/// (at most 4.5 times), and cheaper already at n; `expected` is the
/// gradient's element 3.
fn linear_after_the_rules(gradient: &str, expected: f64) {
    let (n1, n4) = (250, 1000);
    let (plain1, g) = cost(gradient, false, n1);
    let (plain4, _) = cost(gradient, false, n4);
    let (ruled1, h) = cost(gradient, true, n1);
    let (ruled4, _) = cost(gradient, true, n4);
    println!("as written: {plain1} -> {plain4}; with the rules: {ruled1} -> {ruled4}");
    assert_eq!((g, h), (expected, expected), "the gradient's element 3");
    assert!(plain4 >= 14 * plain1, "{plain1} -> {plain4}");
    assert!(2 * ruled4 <= 9 * ruled1, "{ruled1} -> {ruled4}");
    assert!(10 * ruled1 < plain1, "{ruled1} against {plain1}");
}

#[test]
fn a_forward_mode_gradient_over_one_hot_directions_is_linear_after_the_rules() {
    // The gradient of dot x x at x_3 = 3 is 6.
    linear_after_the_rules(DOT_WRITTEN_OUT, 6.0);
}

#[test]
fn so_is_one_that_calls_the_forward_derivative() {
    linear_after_the_rules(DOT_THROUGH_FWD, 6.0);
    linear_after_the_rules(VECTOR_SUM, 1.0);
}

#[test]
fn a_schedule_for_one_definition_runs_there_only() {
    // `in-def` runs the Core rules on `grad_fwd` alone: linear; on `input`
    // alone, the gradient stays quadratic.
    let on = |f: &str| format!("(strategy user-rules (in-def {f} (normalize (rules core))))\n");
    let (here1, g) = cost_of(&with(&on("grad_fwd"), VECTOR_SUM), 250);
    let (here4, _) = cost_of(&with(&on("grad_fwd"), VECTOR_SUM), 1000);
    let (there1, h) = cost_of(&with(&on("input"), VECTOR_SUM), 250);
    let (there4, _) = cost_of(&with(&on("input"), VECTOR_SUM), 1000);
    println!("in grad_fwd: {here1} -> {here4}; in input: {there1} -> {there4}");
    assert_eq!((g, h), (1.0, 1.0));
    assert!(2 * here4 <= 9 * here1, "{here1} -> {here4}");
    assert!(there4 >= 14 * there1, "{there1} -> {there4}");
}
