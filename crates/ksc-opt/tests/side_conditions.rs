//! Rules fire only where they preserve meaning: ranges of indices, integer
//! overflow, user replacements of built-ins, effects, failures; and a rule
//! whose result would change the type is refused.

use crate::common;

use common::{checked, short_def, user_def};
use ksc_ir::builder::{call_of, Builder};
use ksc_ir::term;
use ksc_ir::{Def, Prim, Type};
use ksc_linmap::laws::{Instance, Law};
use ksc_opt::schedule::core_cleanup;
use ksc_opt::strategy::{normalize, rule, top_down};
use ksc_opt::{core_rule, DefMap, Globals, Rewriter, Rule, Strategy, WarningKind};

/// The body of `f` in `text` after `s`, with the program known.
fn after(text: &str, f: &str, s: &Strategy) -> String {
    let a = checked(text);
    let mut d = user_def(&a, f);
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let globals = Globals::new(&map);
    rewrite(&mut d, &globals, s);
    short_def(&d)
}

fn rewrite(d: &mut Def, globals: &Globals, s: &Strategy) {
    let mut fresh = 0;
    let mut b = Builder::new(&mut d.body, &mut fresh);
    let mut rw = Rewriter::new(globals);
    let root = rw.apply(s, &mut b, d.root).unwrap_or(d.root);
    assert!(rw.warnings().is_empty(), "{:?}", rw.warnings());
    let (body, root) = term::compact(&d.body, root);
    d.body = body;
    d.root = root;
}

fn core(name: &str) -> Strategy {
    normalize(rule(Rule::Core(core_rule(name).expect("rule"))))
}

#[test]
fn sum_of_deltavec_needs_the_index_in_range() {
    // Inside the build, i ranges over 0..n.
    let text = "(def f (Vec Float) ((n : Integer) (x : Float))
                  (build n (lam (i : Integer) (sum (deltaVec n i x)))))";
    assert_eq!(after(text, "f", &core("sum-deltavec")), "(build n (lam (i : Integer) x))");
    // A literal index out of range: the sum is zero, not x.
    let text = "(def f Float (x : Float) (sum (deltaVec 3 5 x)))";
    assert_eq!(after(text, "f", &core("sum-deltavec")), "(sum (deltaVec 3 5 x))");
    let text = "(def f Float (x : Float) (sum (deltaVec 3 2 x)))";
    assert_eq!(after(text, "f", &core("sum-deltavec")), "x");
    // The size rebound inside the lambda is another n.
    let text = "(def f (Vec Float) ((n : Integer) (x : Float))
                  (build n (lam (i : Integer) (let (n 7) (sum (deltaVec n i x))))))";
    assert_eq!(
        after(text, "f", &core("sum-deltavec")),
        "(build n (lam (i : Integer) (let (n 7) (sum (deltaVec n i x)))))"
    );
    // An index that is not the build's.
    let text = "(def f (Vec Float) ((n : Integer) (j : Integer) (x : Float))
                  (build n (lam (i : Integer) (sum (deltaVec n j x)))))";
    assert_eq!(after(text, "f", &core("sum-deltavec")), "(build n (lam (i : Integer) (sum (deltaVec n j x))))");
}

#[test]
fn integer_folding_leaves_overflow_and_division_by_zero_to_run_time() {
    let text = "(def f Integer (k : Integer) (add (mul 4611686018427387904 2) (add (div 7 0) (sub 10 3))))";
    assert_eq!(after(text, "f", &core("fold-integer")), "(add (mul 4611686018427387904 2) (add (div 7 0) 7))");
    let text = "(def f Integer (k : Integer) (div -7 2))";
    assert_eq!(after(text, "f", &core("fold-integer")), "-3");
}

#[test]
fn float_folding_stays_finite() {
    let text = "(def f Float (x : Float) (add (div 1.0 0.0) (mul 1.5 2.0)))";
    assert_eq!(after(text, "f", &core("fold-float")), "(add (div 1.0 0.0) 3.0)");
}

#[test]
fn a_user_replacement_of_a_builtin_is_not_folded() {
    let text = "(def add Float ((a : Float) (b : Float)) (sub a b))
                (def f Float (x : Float) (add 1.0 2.0))";
    let a = ksc_types::analyze(text);
    assert!(!a.has_errors());
    let mut d = user_def(&a, "f");
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    rewrite(&mut d, &Globals::new(&map), &core("fold-float"));
    assert_eq!(short_def(&d), "(add 1.0 2.0)");
    // Nothing known about the program: nothing is folded.
    let mut d = user_def(&a, "f");
    rewrite(&mut d, &Globals::unknown(), &core("fold-float"));
    assert_eq!(short_def(&d), "(add 1.0 2.0)");
}

#[test]
fn effects_are_never_dropped() {
    let text = "(def noisy Float (z : Float) ($trace z))
                (def f Integer (x : Float)
                  (let (a (print \"hello\")) (let (b ($trace x)) (let (c (noisy x)) 0))))";
    let a = checked(text);
    let mut d = user_def(&a, "f");
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    // `noisy` is small: it is inlined, and its effect stays.
    rewrite(&mut d, &Globals::new(&map), &core_cleanup());
    assert_eq!(short_def(&d), "(let ((a (print \"hello\")) (b ($trace x)) (c ($trace x))) 0)");
    // A pure unused binding goes.
    let text = "(def f Integer (x : Float) (let (a (mul x 2.0)) 0))";
    assert_eq!(after(text, "f", &core_cleanup()), "0");
}

#[test]
fn vectors_of_an_expression_that_may_fail_stay_builds() {
    // With n = 0 the build never evaluates (index 5 v); constVec would.
    let text = "(def f (Vec Float) ((n : Integer) (v : Vec Float)) (build n (lam (i : Integer) (index 5 v))))";
    assert_eq!(after(text, "f", &core("build-const")), "(build n (lam (i : Integer) (index 5 v)))");
    let text = "(def f (Vec Float) ((n : Integer) (x : Float)) (build n (lam (i : Integer) (mul x 2.0))))";
    assert_eq!(after(text, "f", &core("build-const")), "(constVec n (mul x 2.0))");
    let text = "(def f (Vec Float) (v : Vec Float) (build 3 (lam (i : Integer) (index 5 v))))";
    assert_eq!(after(text, "f", &core("build-const")), "(constVec 3 (index 5 v))");
}

#[test]
fn scaling_by_zero_needs_a_float_shape() {
    // ts_scale leaves Integers alone: no zero for them.
    let text = "(def f Integer (k : Integer) (ts_scale 0.0 k))";
    assert_eq!(after(text, "f", &core("ts-scale-zero")), "(ts_scale 0.0 k)");
    let text = "(def f (Vec Float) (v : Vec Float) (ts_scale 0.0 v))";
    assert_eq!(after(text, "f", &core("ts-scale-zero")), "(constVec (size v) 0.0)");
}

/// A wrong law: `lmScale t k ⇒ k` (a Float for a linear map).
static RETYPING: Law = Law {
    name: "retyping",
    statement: "S(k) = k",
    group: "deliberately wrong",
    duplicates: false,
    rewrite: |b, e| Some(call_of(b.body, e, Prim::LmScale)?[1]),
    instance: |_| Instance::Map(ksc_linmap::spec::MapSpec::One(ksc_linmap::spec::Shape::Float)),
};

#[test]
fn a_rewrite_that_changes_the_type_is_refused() {
    let text = "(def f (LM Float Float) (k : Float) (lmScale 0.0 k))";
    let a = checked(text);
    let mut d = user_def(&a, "f");
    let globals = Globals::unknown();
    let mut fresh = 0;
    let mut b = Builder::new(&mut d.body, &mut fresh);
    let mut rw = Rewriter::new(&globals);
    let out = rw.apply(&top_down(rule(Rule::Law(&RETYPING))), &mut b, d.root);
    assert_eq!(out, None);
    assert_eq!(rw.warnings().len(), 1);
    assert_eq!(rw.warnings()[0].kind, WarningKind::TypeChanged);
    assert_eq!(b.ty(d.root), Type::lm(Type::Float, Type::Float));
}

#[test]
fn single_use_inlining_never_moves_work_into_a_lambda() {
    let text = "(def f (Vec Float) ((n : Integer) (x : Float))
                  (let (a (mul x x)) (build n (lam (i : Integer) (add a 1.0)))))";
    assert_eq!(after(text, "f", &core("let-once")), "(let (a (mul x x)) (build n (lam (i : Integer) (add a 1.0))))");
}

#[test]
fn a_recursive_function_is_not_inlined_but_a_marked_call_is() {
    let text = "(def fact Integer (k : Integer) (if (lt k 1) 1 (mul k (fact (sub k 1)))))
                (def f Integer (k : Integer) (add (fact k) ($inline (fact 3))))";
    assert_eq!(after(text, "f", &core("inline-small")), "(add (fact k) ($inline (fact 3)))");
    assert_eq!(
        after(text, "f", &top_down(rule(Rule::Core(core_rule("inline-marked").unwrap())))),
        "(add (fact k) (let (k 3) (if (lt k 1) 1 (mul k (fact (sub k 1))))))"
    );
}

#[test]
fn a_literal_tuple_never_becomes_the_argument_of_a_splatting_primitive() {
    // (Vec_init t) of a pair t is a vector of one pair; (Vec_init (tuple x x)) would have two elements.
    let text = "(def f (Vec (Tuple Float Float)) (x : Float) (let (t (tuple x x)) (Vec_init t)))";
    assert_eq!(after(text, "f", &core_cleanup()), "(let (t (tuple x x)) (Vec_init t))");
    // Nor does a rewrite produce one there: get$1$2 of a pair of pairs is a pair.
    let text = "(def f Integer (x : Float) (print (get$1$2 (tuple (tuple x x) 1.0))))";
    // (The printer writes get$1$2's literal argument tuple as its arguments.)
    assert_eq!(after(text, "f", &core_cleanup()), "(print (get$1$2 (tuple x x) 1.0))");
}

#[test]
fn a_vector_of_transcendentals_is_not_copied_into_a_loop_in_a_loop() {
    // let-build copies a small element to where it is read; an `exp` read
    // in a loop inside another loop would be computed again in every run
    // of the outer one, so there the vector stays.
    let program = |elem: &str, reads: &str| {
        format!("(def f Float ((v : Vec Float) (n : Integer) (m : Integer)) (let (x (build n (lam (i : Integer) {elem}))) {reads}))")
    };
    let nested = "(sumbuild m (lam (k : Integer) (sumbuild n (lam (j : Integer) (index j x)))))";
    let single = "(sumbuild n (lam (j : Integer) (index j x)))";
    let exp = "(exp (index i v))";
    let arithmetic = "(mul 2.0 (index i v))";
    let kept = |text: &str| after(text, "f", &core("let-build")).contains("(let (x (build");
    assert!(kept(&program(exp, nested)), "{}", after(&program(exp, nested), "f", &core("let-build")));
    assert!(!kept(&program(exp, single)), "{}", after(&program(exp, single), "f", &core("let-build")));
    assert!(!kept(&program(arithmetic, nested)), "{}", after(&program(arithmetic, nested), "f", &core("let-build")));
}
