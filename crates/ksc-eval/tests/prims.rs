//! Each primitive and each native prelude function, with their errors.

use ksc_ir::{FunName, Type};

use super::{assert_fails, eval, eval_err, eval_out};
use ksc_eval::{native_prelude, Interpreter, Value};

#[test]
fn integer_arithmetic() {
    assert_eq!(eval("(add 2 3)"), "5");
    assert_eq!(eval("(sub 2 3)"), "-1");
    assert_eq!(eval("(mul -4 3)"), "-12");
    assert_eq!(eval("(div 7 2)"), "3");
    assert_eq!(eval("(div -7 2)"), "-3");
    assert_eq!(eval("(div 7 -2)"), "-3");
    assert_eq!(eval("(neg 5)"), "-5");
    assert_eq!(eval("(add 9223372036854775806 1)"), "9223372036854775807");
}

#[test]
fn integer_errors() {
    assert_fails("(div 1 0)", "division by zero", "div");
    assert_fails("(div -9223372036854775808 -1)", "integer overflow", "div");
    assert_fails("(add 9223372036854775807 1)", "integer overflow", "add");
    assert_fails("(sub -9223372036854775808 1)", "integer overflow", "sub");
    assert_fails("(mul 4611686018427387904 2)", "integer overflow", "mul");
    assert_fails("(neg -9223372036854775808)", "integer overflow", "neg");
    assert_fails("(ts_add 9223372036854775807 1)", "integer overflow", "ts_add");
    assert_fails("(ts_neg -9223372036854775808)", "integer overflow", "ts_neg");
}

#[test]
fn float_arithmetic() {
    assert_eq!(eval("(add 1.5 2.25)"), "3.75");
    assert_eq!(eval("(sub 1.5 2.25)"), "-0.75");
    assert_eq!(eval("(mul 1.5 2.0)"), "3");
    assert_eq!(eval("(div 1.0 3.0)"), "0.333333");
    assert_eq!(eval("(div 1.0 0.0)"), "inf");
    assert_eq!(eval("(div -1.0 0.0)"), "-inf");
    assert_eq!(eval("(neg 2.5)"), "-2.5");
    assert_eq!(eval("(pow 2.0 10)"), "1024");
    assert_eq!(eval("(pow 2.0 -1)"), "0.5");
    assert_eq!(eval("(pow 0.0 0)"), "1");
    assert_eq!(eval("(to_float -3)"), "-3");
    assert_eq!(eval("(bool_to_float true)"), "1");
    assert_eq!(eval("(bool_to_float false)"), "0");
}

#[test]
fn comparisons_and_logic() {
    assert_eq!(eval("(tuple (gt 2.0 1.0) (lt 2.0 1.0) (gte 1.0 1.0) (lte 1.0 0.5))"), "1,0,1,0");
    assert_eq!(eval("(tuple (gt 2 1) (lt 2 1) (gte 1 1) (lte 1 0))"), "1,0,1,0");
    assert_eq!(eval("(tuple (or true false) (and true false) (or false false) (and true true))"), "1,0,0,1");
}

#[test]
fn elementary_functions() {
    let f = |name: &str, x: f64| -> f64 {
        let imp = native_prelude(&FunName::typed(name, Type::Float)).unwrap();
        match imp.call(&Value::Float(x)).unwrap() {
            Value::Float(y) => y,
            v => panic!("{v:?}"),
        }
    };
    assert_eq!(f("log", 1.0), 0.0);
    assert_eq!(f("exp", 0.0), 1.0);
    assert_eq!(f("sin", 0.0), 0.0);
    assert_eq!(f("cos", 0.0), 1.0);
    assert_eq!(f("cosh", 0.0), 1.0);
    assert_eq!(f("tanh", 0.0), 0.0);
    assert_eq!(f("sqrt", 16.0), 4.0);
    assert_eq!(f("abs", -2.5), 2.5);
    // libm's values, bit for bit (C prints them with "%.17g" as
    // 0.52049987781304652, 0.57236494292470008 and 12.801827480081471;
    // Python's own lgamma gives different last bits).
    assert_eq!(f("erf", 0.5), 0.5204998778130465);
    assert_eq!(f("lgamma", 0.5), 0.5723649429247001);
    assert_eq!(f("lgamma", 10.0), 12.80182748008147);
    assert!(f("log", -1.0).is_nan());
    assert_eq!(eval("(exp 1.0)"), "2.71828");
}

#[test]
fn max_and_imax() {
    assert_eq!(eval("(max 1.0 2.0)"), "2");
    assert_eq!(eval("(max 2.0 1.0)"), "2");
    // C++ std::max: `a < b ? b : a`.
    // (The sign of the NaN 0/0 makes depends on the processor, as in C.)
    assert!(eval("(max (div 0.0 0.0) 1.0)").ends_with("nan"));
    assert_eq!(eval("(max 1.0 (div 0.0 0.0))"), "1");
    assert_eq!(eval("(imax (Vec_init 1.0 3.0 2.0 3.0))"), "1");
    assert_eq!(eval("(max (Vec_init 1.0 3.0 2.0 3.0))"), "3");
    assert_eq!(eval("(imax (Vec_init 5.0))"), "0");
    assert_fails("(imax (build 0 (lam (i : Integer) 1.0)))", "`imax` of an empty vector", "imax");
    assert_fails("(max (build 0 (lam (i : Integer) 1.0)))", "`max` of an empty vector", "max");
}

#[test]
fn dot_and_mat_vec() {
    assert_eq!(eval("(dot (Vec_init 1.0 2.0) (Vec_init 3.0 4.0))"), "11");
    assert_fails("(dot (Vec_init 1.0 2.0) (Vec_init 3.0))", "sizes 2 and 1", "dot");
    let m = "(build (tuple 2 3) (lam (ij : Tuple Integer Integer) (let ((i j) ij) (to_float (add (mul 3 i) j)))))";
    assert_eq!(eval(&format!("(mul {m} (Vec_init 1.0 1.0 2.0))")), "[5, 17]");
    assert_fails(&format!("(mul {m} (Vec_init 1.0 1.0))"), "size (2,3) and a vector of size 2", "mul");
    let empty = "(build (tuple 2 0) (lam (ij : Tuple Integer Integer) 1.0))";
    assert_eq!(eval(&format!("(mul {empty} (build 0 (lam (i : Integer) 1.0)))")), "[0, 0]");
}

#[test]
fn edef_without_implementation() {
    let (r, _, _) = super::run_main("(edef frob Float Float) (def main Float () (frob 1.0))");
    let e = r.unwrap_err();
    assert_eq!(
        e.message,
        "`[frob Float]` has no definition to run: it is only declared (native code calls its C function: `ksc run \
         --link FILE`)"
    );
    assert!(e.location.is_some());
}

#[test]
fn every_prelude_edef_is_native() {
    // The built-in prelude's edefs (knossos-reference.md 3.2).
    let sigs = [
        ("to_float", "Integer"),
        ("bool_to_float", "Bool"),
        ("neg", "Float"),
        ("neg", "Integer"),
        ("$ranhashdoub", "Integer"),
        ("log", "Float"),
        ("exp", "Float"),
        ("sin", "Float"),
        ("cos", "Float"),
        ("cosh", "Float"),
        ("tanh", "Float"),
        ("sqrt", "Float"),
        ("erf", "Float"),
        ("lgamma", "Float"),
        ("abs", "Float"),
        ("max", "(Vec Float)"),
        ("imax", "(Vec Float)"),
        ("dot", "(Tuple (Vec Float) (Vec Float))"),
        ("mul", "(Tuple (Tensor 2 Float) (Vec Float))"),
        ("pow", "(Tuple Float Integer)"),
        ("max", "(Tuple Float Float)"),
        ("or", "(Tuple Bool Bool)"),
        ("and", "(Tuple Bool Bool)"),
    ];
    for (name, ty) in sigs {
        let ty = super::mini::parse_type(&super::mini::read(ty)[0]);
        assert!(native_prelude(&FunName::typed(name, ty.clone())).is_some(), "{name} {ty}");
    }
    for name in ["add", "sub", "mul", "div", "gt", "lt", "gte", "lte"] {
        for t in [Type::Float, Type::Integer] {
            let ty = Type::Tuple(vec![t.clone(), t]);
            assert!(native_prelude(&FunName::typed(name, ty.clone())).is_some(), "{name} {ty}");
        }
    }
    // Not natives: derived names, unknown names, other types.
    assert!(native_prelude(&FunName::typed("add", Type::Float)).is_none());
    assert!(native_prelude(&FunName::typed("exp", Type::Float).derived(ksc_ir::Derivation::Rev)).is_none());
    assert!(native_prelude(&FunName::plain("exp")).is_none());
}

#[test]
fn native_call_with_a_tuple_variable() {
    // The argument is a tuple-typed variable, not a literal tuple.
    assert_eq!(eval("(let (p (tuple 2.0 3.0)) (mul p))"), "6");
}

#[test]
fn build_and_index() {
    assert_eq!(eval("(build 4 (lam (i : Integer) (mul i i)))"), "[0, 1, 4, 9]");
    assert_eq!(eval("(build 0 (lam (i : Integer) (mul i i)))"), "[]");
    let m = "(build (tuple 2 3) (lam (ij : Tuple Integer Integer) ij))";
    assert_eq!(eval(m), "[[0,0, 0,1, 0,2], [1,0, 1,1, 1,2]]");
    assert_eq!(eval(&format!("(index (tuple 1 2) {m})")), "1,2");
    assert_eq!(eval(&format!("(size {m})")), "2,3");
    assert_eq!(eval("(size (build 5 (lam (i : Integer) i)))"), "5");
    assert_eq!(eval("(index 2 (build 5 (lam (i : Integer) (add i 10))))"), "12");
    let t3 = "(build (tuple 2 2 2) (lam (ijk : Tuple Integer Integer Integer) (let ((i j k) ijk) (add (mul 4 i) (add (mul 2 j) k)))))";
    assert_eq!(eval(t3), "[[[0, 1], [2, 3]], [[4, 5], [6, 7]]]");
    assert_fails("(build -3 (lam (i : Integer) i))", "`build` with a negative size -3", "build");
    assert_fails("(build (tuple 2 -1) (lam (ij : Tuple Integer Integer) 1))", "negative size (2,-1)", "build");
    assert_fails("(build 4611686018427387904 (lam (i : Integer) i))", "too large", "build");
    // Too many elements for an Integer: the limit's error, not an overflow.
    assert_fails(
        "(build (tuple 4294967296 4294967296) (lam (ij : Tuple Integer Integer) 1))",
        "`build` of size (4294967296,4294967296) is too large: more than 268435456 elements",
        "build",
    );
    // Refused before anything is allocated (this used to abort on 48 GB).
    assert_fails(
        "($concatN (tuple 2 1000000000) (build 3 (lam (i : Integer) (constVec 2 1.0))))",
        "`$concatN` of size (2,1000000000) is too large",
        "$concatN",
    );
    assert_fails(
        "(index 5 (build 3 (lam (i : Integer) i)))",
        "index out of range: index 5 in a tensor of size 3",
        "index",
    );
    assert_fails("(index -1 (build 3 (lam (i : Integer) i)))", "index out of range: index -1", "index");
    assert_fails(
        &format!("(index (tuple 2 0) {m})"),
        "index out of range: index (2,0) in a tensor of size (2,3)",
        "index",
    );
}

#[test]
fn build_sees_enclosing_variables() {
    assert_eq!(
        eval("(let (a 10) (let (b 2) (build 3 (lam (i : Integer) (let (c (mul i b)) (add a c))))))"),
        "[10, 12, 14]"
    );
    // Nested builds: the inner lambda sees the outer one's parameter.
    assert_eq!(
        eval("(build 3 (lam (i : Integer) (build i (lam (j : Integer) (tuple i j)))))"),
        "[[], [1,0], [2,0, 2,1]]"
    );
}

#[test]
fn sumbuild() {
    assert_eq!(eval("(sumbuild 4 (lam (i : Integer) (to_float i)))"), "6");
    assert_eq!(eval("(sumbuild 4 (lam (i : Integer) i))"), "6");
    assert_eq!(eval("(sumbuild (tuple 2 3) (lam (ij : Tuple Integer Integer) (let ((i j) ij) (mul i j))))"), "3");
    assert_eq!(eval("(sumbuild 3 (lam (i : Integer) (build 2 (lam (j : Integer) (to_float (add i j))))))"), "[3, 6]");
    assert_eq!(eval("(sumbuild 2 (lam (i : Integer) (tuple (to_float i) 1)))"), "1,2");
    assert_fails("(sumbuild 0 (lam (i : Integer) 1.0))", "`sumbuild` of an empty range", "sumbuild");
    assert_fails("(sumbuild -1 (lam (i : Integer) 1.0))", "negative size", "sumbuild");
    assert_fails(
        "(sumbuild 2 (lam (i : Integer) (build (add i 1) (lam (j : Integer) 1.0))))",
        "`ts_add` of tensors of different sizes: 1 and 2",
        "sumbuild",
    );
}

#[test]
fn fold_map_map2() {
    assert_eq!(
        eval("(fold (lam (acc_x : Tuple Float Float) (let ((acc x) acc_x) (add (mul acc 10.0) x))) 0.0 (Vec_init 1.0 2.0 3.0))"),
        "123"
    );
    assert_eq!(eval("(fold (lam (ax : Tuple Integer Integer) 0) 7 (build 0 (lam (i : Integer) i)))"), "7");
    assert_eq!(eval("(map (lam (x : Float) (mul x 2.0)) (Vec_init 1.0 2.5))"), "[2, 5]");
    let m = "(build (tuple 2 2) (lam (ij : Tuple Integer Integer) (let ((i j) ij) (add i j))))";
    assert_eq!(eval(&format!("(map (lam (x : Integer) (mul x 10)) {m})")), "[[0, 10], [10, 20]]");
    assert_eq!(
        eval("(map2 (lam (xy : Tuple Float Integer) (let ((x y) xy) (mul x (to_float y)))) (Vec_init 1.5 2.0) (Vec_init 2 3))"),
        "[3, 6]"
    );
    assert_fails(
        "(map2 (lam (xy : Tuple Float Float) 1.0) (Vec_init 1.5 2.0) (Vec_init 2.0))",
        "`map2` of tensors of different sizes: 2 and 1",
        "map2",
    );
}

#[test]
fn sum() {
    assert_eq!(eval("(sum (Vec_init 1.0 2.0 3.5))"), "6.5");
    assert_eq!(eval("(sum (Vec_init 1 2 3))"), "6");
    assert_eq!(eval("(sum (Vec_init (tuple 1.0 2) (tuple 3.0 4)))"), "4,6");
    assert_eq!(eval("(sum (Vec_init (Vec_init 1.0 2.0) (Vec_init 3.0 4.0)))"), "[4, 6]");
    assert_eq!(eval("(sum (build (tuple 2 2) (lam (ij : Tuple Integer Integer) 1.5)))"), "6");
    assert_fails("(sum (build 0 (lam (i : Integer) 1.0)))", "`sum` of an empty tensor", "sum");
    assert_fails("(sum (Vec_init (Vec_init 1.0 2.0) (Vec_init 3.0)))", "different sizes: 2 and 1", "sum");
}

#[test]
fn sum_does_not_modify_its_argument() {
    // `sum` accumulates in place: the vector's first element must be copied first.
    assert_eq!(
        eval("(let (v (Vec_init (Vec_init 1.0 2.0) (Vec_init 3.0 4.0))) (tuple (sum v) v (sum v)))"),
        "[4, 6],[[1, 2], [3, 4]],[4, 6]"
    );
}

#[test]
fn shape() {
    assert_eq!(eval("(shape 1.5)"), "");
    assert_eq!(eval("(shape (tuple 1.5 2 \"s\"))"), "");
    assert_eq!(eval("(shape (Vec_init 1.0 2.0 3.0))"), "3");
    assert_eq!(eval("(shape (build (tuple 2 3) (lam (ij : Tuple Integer Integer) 1.0)))"), "2,3");
    assert_eq!(eval("(shape (Vec_init (tuple 1.0 2) (tuple 3.0 4)))"), "2");
    // The example of knossos-reference.md 5.6.
    assert_eq!(
        eval("(shape (tuple (Vec_init 1.0 2.0) 3.0 (build 3 (lam (i : Integer) (build i (lam (j : Integer) 1.0))))))"),
        "2,,[0, 1, 2]"
    );
    // An empty vector of vectors has an empty vector of sizes as shape.
    assert_eq!(eval("(shape (build 0 (lam (i : Integer) (Vec_init 1.0))))"), "[]");
}

#[test]
fn unzip() {
    assert_eq!(
        eval("(unzip (build 3 (lam (i : Integer) (tuple i (to_float i) (gt i 0)))))"),
        "[0, 1, 2],[0, 1, 2],[0, 1, 1]"
    );
    assert_eq!(eval("(unzip (build 0 (lam (i : Integer) (tuple i 1.0))))"), "[],[]");
}

#[test]
fn const_vec_delta_vec_diag() {
    assert_eq!(eval("(constVec 3 1.5)"), "[1.5, 1.5, 1.5]");
    assert_eq!(eval("(constVec (tuple 2 2) 1)"), "[[1, 1], [1, 1]]");
    assert_eq!(eval("(constVec 0 1)"), "[]");
    assert_fails("(constVec -2 1.0)", "`constVec` with a negative size -2", "constVec");
    assert_eq!(eval("(deltaVec 4 1 2.5)"), "[0, 2.5, 0, 0]");
    assert_eq!(eval("(deltaVec 3 7 2.5)"), "[0, 0, 0]");
    assert_eq!(eval("(deltaVec 3 -1 2.5)"), "[0, 0, 0]");
    assert_eq!(eval("(deltaVec 2 0 (tuple 1.5 3 (Vec_init 2.0 4.0)))"), "[1.5,3,[2, 4], 0,0,[0, 0]]");
    assert_eq!(eval("(deltaVec (tuple 2 2) (tuple 1 0) 5)"), "[[0, 0], [5, 0]]");
    assert_fails("(deltaVec -1 0 1.0)", "negative size", "deltaVec");
    assert_eq!(eval("(diag 3 3 (lam (i : Integer) (add (to_float i) 1.0)))"), "[[1, 0, 0], [0, 2, 0], [0, 0, 3]]");
    assert_eq!(eval("(diag 0 0 (lam (i : Integer) 1.0))"), "[]");
    assert_fails("(diag 2 3 (lam (i : Integer) 1.0))", "has 2 rows and 3 columns", "diag");
    assert_fails("(diag -2 -2 (lam (i : Integer) 1.0))", "negative size -2", "diag");
}

#[test]
fn vec_init() {
    assert_eq!(eval("(Vec_init 1.0 2.0 3.0)"), "[1, 2, 3]");
    assert_eq!(eval("(Vec_init 4)"), "[4]");
    assert_eq!(eval("(Vec_init (tuple 1 2) (tuple 3 4))"), "[1,2, 3,4]");
    assert_eq!(eval("(let (p (tuple 1 2)) (size (Vec_init p)))"), "1");
    // In Core IR `(Vec_init (tuple 1 2))` and `(Vec_init 1 2)` are the same
    // call: a literal tuple argument is splatted, as in the original.
    assert_eq!(eval("(size (Vec_init (tuple 1 2)))"), "2");
}

#[test]
fn print_and_trace() {
    assert_eq!(eval_out("(print \"a\" 1 2.5 true (tuple 1 2) \"\\n\")"), ("a12.511,2\n".to_string(), "5".to_string()));
    assert_eq!(eval_out("(print \"x\")"), ("x".to_string(), "0".to_string()));
    assert_eq!(eval_out("(print)"), ("".to_string(), "-1".to_string()));
    // A one-tuple argument is one argument.
    assert_eq!(eval_out("(print (tuple 7))"), ("7".to_string(), "0".to_string()));
    assert_eq!(eval_out("($trace (tuple 1 (Vec_init 2.0)))"), ("Trace[1,[2]]\n".to_string(), "1,[2]".to_string()));
    // Arguments are printed as soon as each is evaluated.
    assert_eq!(
        eval_out("(print \"first \" ($trace 1.5) \" last\")"),
        ("first Trace[1.5]\n1.5 last".to_string(), "2".to_string())
    );
    assert_eq!(eval_out("($copydown ($inline (add 1 2)))"), ("".to_string(), "3".to_string()));
}

#[test]
fn tangent_arithmetic() {
    assert_eq!(eval("(ts_add 1.5 2.0)"), "3.5");
    assert_eq!(eval("(ts_add 3 4)"), "7");
    assert_eq!(eval("(ts_add 3 (tuple))"), "3");
    assert_eq!(eval("(ts_add (tuple 1.0 2 true) (tuple 0.5 (tuple) (tuple)))"), "1.5,2,1");
    assert_eq!(eval("(ts_add (Vec_init 1.0 2.0) (Vec_init 0.5 0.25))"), "[1.5, 2.25]");
    assert_eq!(
        eval("(let (a (tuple 1.0 2)) (let (b (tuple 2.0 (tuple))) (ts_add (Vec_init a) (Vec_init b))))"),
        "[3,2]"
    );
    assert_fails("(ts_add (Vec_init 1.0 2.0) (Vec_init 1.0))", "different sizes: 2 and 1", "ts_add");
    assert_eq!(eval("(ts_scale 2.0 (tuple 1.5 3 (Vec_init 1.0 -2.0)))"), "3,3,[2, -4]");
    assert_eq!(eval("(ts_dot (tuple 1.5 3 (Vec_init 1.0 2.0)) (tuple 2.0 4 (Vec_init 3.0 4.0)))"), "14");
    assert_eq!(eval("(ts_dot (tuple) (tuple))"), "0");
    assert_fails("(ts_dot (Vec_init 1.0 2.0) (Vec_init 1.0))", "different sizes: 2 and 1", "ts_dot");
    assert_eq!(eval("(ts_neg (tuple 1.5 3 (Vec_init 1.0 -2.0)))"), "-1.5,-3,[-1, 2]");
}

#[test]
fn ts_add_does_not_modify_shared_values() {
    assert_eq!(
        eval("(let (v (Vec_init 1.0 2.0)) (let (w (ts_add v v)) (tuple v w (ts_scale 3.0 v) (ts_neg v) v)))"),
        "[1, 2],[2, 4],[3, 6],[-1, -2],[1, 2]"
    );
}

#[test]
fn equality_and_delta() {
    assert_eq!(eval("(tuple (eq 1 1) (eq 1 2) (ne 1 2) (eq 1.5 1.5) (eq \"a\" \"a\") (eq true false))"), "1,0,1,1,1,0");
    assert_eq!(eval("(eq (tuple 1 (Vec_init 2.0)) (tuple 1 (Vec_init 2.0)))"), "1");
    assert_eq!(eval("(eq (Vec_init 1.0 2.0) (Vec_init 1.0 2.5))"), "0");
    // Tensors of different sizes are different (the original compares sizes first).
    assert_eq!(eval("(eq (Vec_init 1.0 2.0) (Vec_init 1.0))"), "0");
    assert_eq!(eval("(ne (Vec_init 1.0 2.0) (Vec_init 1.0))"), "1");
    assert_eq!(eval("(let (nan (div 0.0 0.0)) (tuple (eq nan nan) (ne nan nan)))"), "0,1");
    assert_eq!(eval("(delta 1 1 2.5)"), "2.5");
    assert_eq!(eval("(delta 1 2 (tuple 2.5 (Vec_init 1.0)))"), "0,[0]");
    assert_eq!(eval("(delta (tuple 1 2) (tuple 1 2) 3)"), "3");
}

#[test]
fn get() {
    assert_eq!(eval("(get$2$3 (tuple 1 2.5 \"x\"))"), "2.5");
    assert_eq!(eval("(get$1$2 (tuple (tuple 1 2) 3))"), "1,2");
    assert_eq!(eval("(let (t (tuple 1 2)) (add (get$1$2 t) (get$2$2 t)))"), "3");
}

#[test]
fn build_from_sparse() {
    // Entries k -> (k mod 3, k): repeated indices add up.
    let shape = "(constVec 3 (tuple))";
    assert_eq!(
        eval(&format!(
            "(buildFromSparse {shape} 5 (lam (k : Integer) (tuple (sub k (mul 3 (div k 3))) (to_float k))))"
        )),
        "[3, 5, 2]"
    );
    assert_eq!(eval(&format!("(buildFromSparse {shape} 0 (lam (k : Integer) (tuple 0 1.0)))")), "[0, 0, 0]");
    // Integer values, and a rank-2 result.
    let shape2 = "(constVec (tuple 2 2) (tuple))";
    assert_eq!(
        eval(&format!("(buildFromSparse {shape2} 3 (lam (k : Integer) (tuple (tuple 1 (div k 2)) k)))")),
        "[[0, 0], [1, 2]]"
    );
    // Vector-valued elements, zero-initialised from the element shapes.
    let shape_v = "(constVec 2 (constVec 2 (tuple)))";
    assert_eq!(
        eval(&format!("(buildFromSparse {shape_v} 2 (lam (k : Integer) (tuple 1 (Vec_init 1.0 (to_float k)))))")),
        "[[0, 0], [2, 1]]"
    );
    assert_fails(
        &format!("(buildFromSparse {shape} 1 (lam (k : Integer) (tuple 3 1.0)))"),
        "index out of range: index 3 in a tensor of size 3",
        "buildFromSparse",
    );
    assert_eq!(
        eval(&format!(
            "(buildFromSparseTupled (tuple {shape} (constVec 2 (tuple))) 4 \
               (lam (k : Integer) (tuple (tuple (div k 2) 1.0) (tuple 1 k))))"
        )),
        "[2, 2, 0],[0, 6]"
    );
}

#[test]
fn check() {
    // f x = x * x, a correct reverse derivative: the result is 0 up to rounding.
    let f = "(lam (x : Float) (mul x x))";
    let rev = "(lam (xr : Tuple Float Float) (let ((x r) xr) (mul 2.0 (mul x r))))";
    let ok: f64 = eval(&format!("($check {f} {rev} 3.0 0.001 1.0)")).parse().unwrap();
    assert!(ok < 1e-3, "{ok}");
    // A wrong one.
    let bad = "(lam (xr : Tuple Float Float) (let ((x r) xr) (mul 3.0 (mul x r))))";
    let wrong: f64 = eval(&format!("($check {f} {bad} 3.0 0.001 1.0)")).parse().unwrap();
    assert!((wrong - 0.2).abs() < 1e-3, "{wrong}");
    // Vector-valued f of a tuple: (x, v) -> x * v.
    let fv = "(lam (xv : Tuple Float (Vec Float)) (let ((x v) xv) (build (size v) (lam (i : Integer) (mul x (index i v))))))";
    let revv = "(lam (a : Tuple (Tuple Float (Vec Float)) (Vec Float)) \
                  (let ((xv r) a) (let ((x v) xv) \
                    (tuple (sumbuild (size v) (lam (i : Integer) (mul (index i v) (index i r)))) \
                           (build (size v) (lam (i : Integer) (mul x (index i r))))))))";
    let point = "(tuple 2.0 (Vec_init 1.0 3.0))";
    let dx = "(tuple 0.001 (Vec_init 0.002 -0.001))";
    let c: f64 = eval(&format!("($check {fv} {revv} {point} {dx} (Vec_init 0.5 1.0))")).parse().unwrap();
    assert!(c < 1e-3, "{c}");
}

#[test]
fn dummy_values() {
    assert_eq!(eval("($dummy Float)"), "0");
    assert_eq!(eval("($dummy (Tuple Integer Bool String (Vec Float)))"), "0,0,,[]");
    assert_eq!(eval("(size ($dummy (Tensor 2 Float)))"), "0,0");
}

#[test]
fn assert_and_if() {
    assert_eq!(eval("(assert (gt 2 1) 5)"), "5");
    let (m, e) = eval_err("(let (x 1) (assert (gt x 1) 5))");
    assert_eq!(m, "assertion failed");
    assert!(matches!(e, ksc_ir::Expr::Assert(..)));
    // Only one branch is evaluated.
    assert_eq!(eval("(if (lt 1 2) 1 (div 1 0))"), "1");
    assert_eq!(eval("(if (gt 1 2) (div 1 0) 2)"), "2");
}

#[test]
fn let_forms() {
    assert_eq!(eval("(let (x 1) (let (x (add x 1)) x))"), "2");
    assert_eq!(eval("(let ((a b c) (tuple 1 2.5 \"s\")) (tuple c b a))"), "s,2.5,1");
    assert_eq!(eval("(let (x 1) (tuple (let (x 2) x) x))"), "2,1");
    // A tuple pattern may repeat a name; the last binding wins.
    assert_eq!(eval("(let ((x x) (tuple 1 2)) x)"), "2");
}

#[test]
fn tape_push_appends_in_place_only_to_the_latest_version() {
    use std::rc::Rc;
    let empty = Value::Tensor(Rc::new(ksc_eval::Tensor::vector(Vec::new())));
    let t1 = Value::tape_push(&empty, Value::Float(1.0)).unwrap();
    let t2 = Value::tape_push(&t1, Value::Float(2.0)).unwrap();
    let t3 = Value::tape_push(&t2, Value::Float(3.0)).unwrap();
    // The latest version each time: one buffer, grown in place.
    let (Value::Tape(b1, 1), Value::Tape(b3, 3)) = (&t1, &t3) else { panic!("{t1:?} {t3:?}") };
    assert!(Rc::ptr_eq(b1, b3));
    // An older version is copied: the others keep their elements.
    let u = Value::tape_push(&t1, Value::Float(9.0)).unwrap();
    let Value::Tape(bu, 2) = &u else { panic!("{u:?}") };
    assert!(!Rc::ptr_eq(b1, bu));
    assert_eq!(
        (t1.to_string(), t2.to_string(), t3.to_string(), u.to_string()),
        ("[1]".into(), "[1, 2]".into(), "[1, 2, 3]".into(), "[1, 9]".into())
    );
    assert_eq!(eval("(size ($tapePush ($tapePush (build 2 (lam (i : Integer) i)) 5) 6))"), "4");
    assert_eq!(eval("(index 3 ($tapePush ($tapePush (build 2 (lam (i : Integer) i)) 5) 6))"), "6");
    assert_eq!(eval("(sum ($tapePush (build 2 (lam (i : Integer) (to_float i))) 5.0))"), "6");
    assert_fails("(index 3 ($tapePush (build 2 (lam (i : Integer) i)) 5))", "index out of range", "index");
}

/// One-hot vectors are kept sparse (`Value::Sparse`): each operation on
/// them gives what it gives on the dense vector, and sums of them added
/// into a vector cost their entries, not the vector's size.
#[test]
fn one_hot_vectors_are_sparse_and_mean_their_dense_value() {
    let d = "(deltaVec 6 2 1.5)";
    for (expr, dense) in [
        (format!("(index 2 {d})"), "1.5"),
        (format!("(index 3 {d})"), "0"),
        (format!("(size {d})"), "6"),
        (format!("(sum {d})"), "1.5"),
        (format!("(ts_add {d} (deltaVec 6 2 1.0))"), "[0, 0, 2.5, 0, 0, 0]"),
        (format!("(ts_add {d} (deltaVec 6 0 1.0))"), "[1, 0, 1.5, 0, 0, 0]"),
        // Past half the elements, the sum is made dense.
        (
            format!("(ts_add (ts_add {d} (deltaVec 6 0 1.0)) (ts_add (deltaVec 6 5 1.0) (deltaVec 6 4 1.0)))"),
            "[1, 0, 1.5, 0, 1, 1]",
        ),
        (format!("(ts_add (constVec 6 1.0) {d})"), "[1, 1, 2.5, 1, 1, 1]"),
        (format!("(ts_add {d} (constVec 6 1.0))"), "[1, 1, 2.5, 1, 1, 1]"),
        (format!("(ts_scale 2.0 {d})"), "[0, 0, 3, 0, 0, 0]"),
        (format!("(ts_neg {d})"), "[-0, -0, -1.5, -0, -0, -0]"),
        (format!("(ts_scale -2.0 {d})"), "[-0, -0, -3, -0, -0, -0]"),
        // Adding a one-hot leaves the other elements as they are, a -0 too.
        (format!("(ts_add (ts_neg (constVec 6 0.0)) {d})"), "[-0, -0, 1.5, -0, -0, -0]"),
        (format!("(ts_add (constVec 6 1.0) (ts_neg {d}))"), "[1, 1, -0.5, 1, 1, 1]"),
        (format!("(ts_dot (Vec_init 1.0 (div 1.0 0.0) 2.0 0.0 0.0 0.0) {d})"), "nan"),
        (format!("(ts_dot {d} (build 6 (lam (i : Integer) (to_float i))))"), "3"),
        (format!("(ts_dot (build 6 (lam (i : Integer) (to_float i))) (ts_add {d} {d}))"), "6"),
        (format!("(eq {d} (Vec_init 0.0 0.0 1.5 0.0 0.0 0.0))"), "1"),
        (format!("(build 2 (lam (i : Integer) (index (add i 1) {d})))"), "[0, 1.5]"),
        (format!("(tuple {d} (deltaVec (tuple 2 2) (tuple 1 1) 2.0))"), "[0, 0, 1.5, 0, 0, 0],[[0, 0], [0, 2]]"),
        (
            "(ts_add (deltaVec 3 1 (Vec_init 1.0 2.0)) (deltaVec 3 1 (Vec_init 1.0 1.0)))".to_string(),
            "[[0, 0], [2, 3], [0, 0]]",
        ),
        (format!("(dot {d} (constVec 6 2.0))"), "3"),
    ] {
        assert_eq!(eval(&expr), dense, "{expr}");
    }
    assert_fails("(ts_add (deltaVec 3 0 1.0) (deltaVec 4 0 1.0))", "different sizes: 3 and 4", "ts_add");
}

/// The operation count includes element work: a `constVec` counts its
/// elements, a one-hot one, and adding n one-hots into a vector not shared
/// counts n (not n times its size).
#[test]
fn the_operation_count_counts_element_work() {
    let ops = |body: &str| {
        let defs = crate::mini::program(&format!("(def main Float () {body})"));
        let mut it = Interpreter::new(&defs);
        it.call(&FunName::typed("main", Type::unit()), Value::unit(), &mut std::io::sink()).unwrap();
        it.operations()
    };
    let n = 1000;
    // `constVec`: the call and its elements.
    assert_eq!(ops(&format!("(index 0 (constVec {n} 1.0))")), 2 + n);
    // One-hot vectors: a call and an entry each; `index` reads the entry.
    assert_eq!(ops(&format!("(index 0 (deltaVec {n} 0 1.0))")), 2 + 1 + 1);
    // A fold adding a one-hot per step into its accumulator: the steps'
    // calls and one entry each, the accumulator's elements once.
    let fold = |k: u64| {
        ops(&format!(
            "(index 0 (fold (lam (acc_i : Tuple (Vec Float) Integer) (let ((acc i) acc_i) (ts_add acc (deltaVec {n} i 1.0)))) (constVec {n} 0.0) (build {k} (lam (i : Integer) i))))"
        ))
    };
    let (small, large) = (fold(10), fold(40));
    assert!(large - small < 30 * 10, "{small} {large}");
    // A sum of one-hots at increasing positions (reverse mode's of a slice
    // of a long vector, a block of a `reduce`) stays sparse, appended in
    // place: a few operations per term, not the vector's size once it has
    // more than a few entries.
    // m blocks of 32 such one-hots into a vector of 32 m elements: linear
    // in m (each block made dense would be quadratic).
    let blocks = |m: u64| {
        ops(&format!(
            "(index 7 (sumbuild {m} (lam (k : Integer) (sumbuild 32 (lam (i : Integer) (deltaVec {} (add (mul k 32) i) 1.0))))))",
            32 * m
        ))
    };
    let (small, large) = (blocks(20), blocks(80));
    assert!(large < 5 * small, "{small} {large}");
}

/// A sum of one-hots appended in place means the dense sum: increasing
/// positions with repeats (not appended: merged), and a -0.0 fill.
#[test]
fn one_hots_appended_in_order_mean_their_sum() {
    for (expr, dense) in [
        ("(sumbuild 3 (lam (i : Integer) (deltaVec 8 (add 2 i) 1.5)))", "[0, 0, 1.5, 1.5, 1.5, 0, 0, 0]"),
        ("(sumbuild 4 (lam (i : Integer) (deltaVec 10 (div i 2) 1.0)))", "[2, 2, 0, 0, 0, 0, 0, 0, 0, 0]"),
        ("(ts_add (ts_neg (deltaVec 8 0 0.0)) (deltaVec 8 3 -0.0))", "[-0, -0, -0, -0, -0, -0, -0, -0]"),
    ] {
        assert_eq!(eval(expr), dense, "{expr}");
    }
}

/// A variable's last use moves its value out of the frame; every other use
/// still reads it: after an `if` whose one branch used it, in a lambda a
/// primitive runs after evaluating an argument that uses it, in a closure,
/// and in both components of a tuple.
#[test]
fn values_move_only_at_their_last_use() {
    for (expr, value) in [
        // `v` is the fold's start and read by its step, which runs after.
        (
            "(let (v (constVec 2 1.0)) (fold (lam (acc_x : Tuple (Vec Float) Float) (ts_add (get$1$2 acc_x) v)) v (Vec_init 1.0 2.0)))",
            "[3, 3]",
        ),
        // Used in one branch, then after the `if`.
        ("(let (v (constVec 2 1.0)) (let (w (if (gt 1 0) (ts_add v v) v)) (ts_add w v)))", "[3, 3]"),
        ("(let (v (constVec 2 1.0)) (let (w (if (gt 0 1) v (ts_scale 2.0 v))) (ts_add w v)))", "[3, 3]"),
        // Twice in one call, and in a tuple.
        ("(let (v (constVec 2 1.0)) (ts_add v v))", "[2, 2]"),
        ("(let (v (constVec 2 1.0)) (tuple (ts_add v v) v))", "[2, 2],[1, 1]"),
        // A build's lambda reading `v` after `v` is a size argument's.
        ("(let (v (constVec 2 1.5)) (build (size v) (lam (i : Integer) (index i v))))", "[1.5, 1.5]"),
        // A tuple pattern moves the components of an unshared tuple, and
        // copies those of a shared one.
        ("(let (p (tuple (constVec 2 1.0) 2.0)) (let ((a b) p) (ts_scale b a)))", "[2, 2]"),
        ("(let (p (tuple (constVec 2 1.0) 2.0)) (let ((a b) p) (tuple (ts_scale b a) (get$1$2 p))))", "[2, 2],[1, 1]"),
        // A component's last read takes it; other components, and reads
        // of the same component or of the whole tuple later, still see
        // theirs.
        ("(let (p (tuple (constVec 2 1.0) (constVec 2 2.0))) (tuple (ts_add (get$1$2 p) (get$2$2 p)) (get$1$2 p)))", "[3, 3],[1, 1]"),
        ("(let (p (tuple (constVec 2 1.0) 2.0)) (tuple (ts_scale (get$2$2 p) (get$1$2 p)) p))", "[2, 2],[1, 1],2"),
        ("(let (p (tuple (constVec 2 1.0) 2.0)) (let (q p) (tuple (ts_scale 3.0 (get$1$2 p)) (get$1$2 q))))", "[3, 3],[1, 1]"),
        // A recursion's accumulator.
        ("(let (v (constVec 3 0.0)) (get$1$2 (fold (lam (s_i : Tuple (Tuple (Vec Float) Integer) Integer) (let ((sk i) s_i) (let ((s k) sk) (tuple (ts_add s (deltaVec 3 i 1.0)) k)))) (tuple v 0) (Vec_init 0 2 2))))", "[1, 0, 2]"),
    ] {
        assert_eq!(eval(expr), value, "{expr}");
    }
}
