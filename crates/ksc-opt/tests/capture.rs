//! Capture avoidance: beta reduction and let floating over shadowed names
//! rename binders instead of capturing, checked on the printed result and by
//! evaluation.

use crate::common;

use common::{checked, defs_with, print_def, run, same_value, short_def, user_def};
use ksc_eval::Value;
use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::Def;
use ksc_opt::strategy::{normalize, rule, top_down};
use ksc_opt::{core_rule, DefMap, Globals, Rewriter, Rule, Strategy};

/// Applies `s` to the body of `f` in `text`; returns the result and checks
/// that it evaluates like the original on `arg`.
fn rewrite(text: &str, f: &str, s: &Strategy, arg: Value) -> Def {
    let a = checked(text);
    let before = user_def(&a, f);
    let mut after = before.clone();
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let globals = Globals::new(&map);
    let mut fresh = 0;
    let mut b = Builder::new(&mut after.body, &mut fresh);
    let mut rw = Rewriter::new(&globals);
    let root = rw.apply(s, &mut b, after.root).expect("strategy succeeds");
    assert!(rw.warnings().is_empty(), "{:?}", rw.warnings());
    let (body, root) = term::compact(&after.body, root);
    after.body = body;
    after.root = root;
    let (vb, ob) = run(&defs_with(&a, &before), &before.name, arg.clone());
    let (va, oa) = run(&defs_with(&a, &after), &after.name, arg);
    let (vb, va) = (vb.expect("original runs"), va.expect("rewritten runs"));
    assert!(same_value(&vb, &va) && ob == oa, "{vb} became {va}\n{}", print_def(&after));
    after
}

fn core(name: &str) -> Strategy {
    rule(Rule::Core(core_rule(name).expect("rule")))
}

fn body_text(d: &Def) -> String {
    short_def(d)
}

#[test]
fn beta_renames_a_binder_that_would_capture_the_substituted_variable() {
    // let a = b in (let b = 2.0 in a + b): substituting b for a under the
    // inner b must rename the inner b.
    let text = "(def f Float (b : Float) (let (a b) (let (b 2.0) (add a b))))";
    let d = rewrite(text, "f", &top_down(core("let-atom")), Value::Float(10.0));
    assert_eq!(body_text(&d), "(let (ksc$b1 2.0) (add b ksc$b1))");
}

#[test]
fn beta_stops_at_a_binder_that_shadows_the_variable() {
    // let a = 1.0 in (let a = 5.0 in a): the inner a is another variable.
    let text = "(def f Float (x : Float) (let (a 1.0) (add a (let (a 5.0) a))))";
    let d = rewrite(text, "f", &top_down(core("let-atom")), Value::Float(0.0));
    assert_eq!(body_text(&d), "(add 1.0 (let (a 5.0) a))");
}

#[test]
fn inlining_a_single_use_renames_capturing_binders() {
    // let a = (mul b 3.0) in (let b = 1.0 in add a b): moving (mul b 3.0)
    // under the inner b must not capture it.
    let text = "(def f Float (b : Float) (let (a (mul b 3.0)) (let (b 1.0) (add a b))))";
    let d = rewrite(text, "f", &top_down(core("let-once")), Value::Float(2.0));
    assert_eq!(body_text(&d), "(let (ksc$b1 1.0) (add (mul b 3.0) ksc$b1))");
}

#[test]
fn floating_a_let_out_of_a_let_renames_it_when_the_body_uses_the_outer_name() {
    // let y = 1.0 in let x = (let y = 5.0 in y + 1) in x + y: the body's y is the outer one.
    let text = "(def f Float (z : Float) (let (y 1.0) (let (x (let (y 5.0) (add y 1.0))) (add x y))))";
    let d = rewrite(text, "f", &top_down(core("let-float-let")), Value::Float(0.0));
    assert_eq!(body_text(&d), "(let ((y 1.0) (ksc$y1 5.0) (x (add ksc$y1 1.0))) (add x y))");
}

#[test]
fn floating_a_let_keeps_the_name_when_nothing_is_captured() {
    let text = "(def f Float (z : Float) (let (x (let (y 5.0) (add y z))) (mul x 2.0)))";
    let d = rewrite(text, "f", &top_down(core("let-float-let")), Value::Float(1.0));
    assert_eq!(body_text(&d), "(let ((y 5.0) (x (add y z))) (mul x 2.0))");
}

#[test]
fn floating_a_let_out_of_an_argument_renames_it_when_another_argument_uses_the_name() {
    // (add (let y = 5.0 in y) y): the second argument is the parameter y.
    let text = "(def f Float (y : Float) (add (let (y 5.0) (mul y y)) y))";
    let d = rewrite(text, "f", &top_down(core("let-float-arg")), Value::Float(1.0));
    assert_eq!(body_text(&d), "(let (ksc$y1 5.0) (add (mul ksc$y1 ksc$y1) y))");
}

#[test]
fn floating_lets_out_of_a_tuple_pattern_binding() {
    let text = "(def f Float (a : Float) (let ((p q) (tuple (add a 1.0) (mul a 2.0))) (sub p q)))";
    let d = rewrite(text, "f", &top_down(core("let-tuple-split")), Value::Float(3.0));
    assert_eq!(body_text(&d), "(let ((p (add a 1.0)) (q (mul a 2.0))) (sub p q))");
    // A component mentioning a name the pattern binds earlier: rename.
    let text = "(def f Float (a : Float) (let ((a b) (tuple 2.0 (mul a 10.0))) (sub a b)))";
    let d = rewrite(text, "f", &top_down(core("let-tuple-split")), Value::Float(3.0));
    assert_eq!(body_text(&d), "(let ((ksc$a1 2.0) (b (mul a 10.0))) (sub ksc$a1 b))");
}

#[test]
fn floating_out_of_an_if_condition_renames_over_the_branches() {
    let text = "(def f Float (c : Float) (if (let (c 0.0) (gt c 1.0)) c 7.0))";
    let d = rewrite(text, "f", &top_down(core("let-float-cond")), Value::Float(2.0));
    assert_eq!(body_text(&d), "(let (ksc$c1 0.0) (if (gt ksc$c1 1.0) c 7.0))");
}

#[test]
fn index_of_build_binds_the_index_outside_the_element() {
    // index j (build n (lam j ..)): the outer j is the index, bound by let.
    let text =
        "(def f Float ((j : Integer) (n : Integer)) (index j (build n (lam (j : Integer) (to_float (mul j 2))))))";
    let d =
        rewrite(text, "f", &normalize(core("index-build")), Value::tuple(vec![Value::Integer(2), Value::Integer(5)]));
    assert_eq!(body_text(&d), "(let (j j) (to_float (mul j 2)))");
}

#[test]
fn inlining_keeps_fresh_names_clear_of_the_callee_s_names() {
    // g's body binds `ksc$` names; inlined into f, whose parameter has one
    // of them, substituting the parameter renames g's binder of that name,
    // and the new name must not be another of g's (it would then capture).
    let text = "
        (def g Float (ksc$dr1 : Float)
          (let (ksc$r1 ksc$dr1)
            (let (ksc$r2 (mul ksc$r1 2.0))
              (let (ksc$r3 (add ksc$r2 1.0))
                (let (ksc$r4 (mul ksc$r1 ksc$r3))
                  (add ksc$r4 ksc$r2))))))
        (def f Float (ksc$r2 : Float) (add 0.5 ($inline (g ksc$r2))))";
    rewrite(text, "f", &ksc_opt::schedule::core_cleanup(), Value::Float(3.0));
}
