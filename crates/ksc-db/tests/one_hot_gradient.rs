//! dF~'s point (seed 000, Example 4) in seed 001's terms (its vectorSum
//! benchmark): a gradient computed by forward mode over one-hot directions
//! is quadratic as written (n directions, each a sum over n elements), and
//! linear once the Core rules run on it: `index-deltavec` reads the
//! direction as an indicator, `mul-if-zero` and `add-if-same` move the
//! indicator out of the products, and the iteration rule
//! `sumbuild-one-hot` takes the sum away. The program asks for that with
//! its own `user-rules`, which runs on what it wrote (docs/strategies.md).
//! Counted by the interpreter's operations at n and 4n, without a clock.

/// The gradient of `dot x x` by forward mode, one direction per element;
/// with the schedule that runs the Core rules on it, or without.
fn program(with_schedule: bool) -> String {
    let schedule = if with_schedule { "(strategy user-rules (normalize (rules core)))\n" } else { "" };
    format!(
        "{schedule}(def grad_fwd (Vec Float) (x : Vec Float)
  (let (n (size x))
    (build n (lam (i : Integer)
      (sumbuild n (lam (j : Integer)
        (add (mul (index j (deltaVec n i 1.0)) (index j x))
             (mul (index j x) (index j (deltaVec n i 1.0))))))))))
(def input (Vec Float) (n : Integer) (build n (lam (i : Integer) (to_float i))))\n"
    )
}

/// The operations of `grad_fwd (input n)` and its result's element 3.
fn cost(with_schedule: bool, n: i64) -> (u64, f64) {
    use ksc_eval::{Interpreter, Value};
    use ksc_ir::{FunName, Type};
    let analysis = ksc_db::analyze(&program(with_schedule));
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

#[test]
fn a_forward_mode_gradient_over_one_hot_directions_is_linear_after_the_rules() {
    let (n1, n4) = (250, 1000);
    let (plain1, g) = cost(false, n1);
    let (plain4, _) = cost(false, n4);
    let (ruled1, h) = cost(true, n1);
    let (ruled4, _) = cost(true, n4);
    println!("as written: {plain1} -> {plain4}; with the rules: {ruled1} -> {ruled4}");
    assert_eq!((g, h), (6.0, 6.0), "the gradient of dot x x at x_3 = 3 is 6");
    // Quadratic as written (16 times the work at 4n), linear with the
    // rules (at most 4.5 times), and cheaper already at n.
    assert!(plain4 >= 14 * plain1, "{plain1} -> {plain4}");
    assert!(2 * ruled4 <= 9 * ruled1, "{ruled1} -> {ruled4}");
    assert!(10 * ruled1 < plain1, "{ruled1} against {plain1}");
}
