//! User rules (`(rule ...)`): matching, rewriting with lets, first-match
//! application, and termination of a commutativity rule.

use crate::common;

use common::{checked, defs_with, run, same_value, short_def, user_def, user_rules};
use ksc_eval::Value;
use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_opt::schedule::user_rules_pass;
use ksc_opt::strategy::{normalize, normalize_with_fuel, rules};
use ksc_opt::{optimise_def, DefMap, Globals, Options, Rewriter, RuleSet, Schedules, Strategy, WarningKind};

struct Outcome {
    text: String,
    warnings: Vec<ksc_opt::Warning>,
}

/// Applies `make(user rules)` to `f`, checks evaluation on `arg` is unchanged.
fn apply(text: &str, f: &str, make: impl Fn(&RuleSet) -> Strategy, arg: Value) -> Outcome {
    let a = checked(text);
    let (set, rejected) = RuleSet::user(user_rules(&a).iter());
    assert!(rejected.is_empty(), "{rejected:?}");
    let before = user_def(&a, f);
    let mut d = before.clone();
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let globals = Globals::new(&map);
    let mut fresh = 0;
    let mut b = Builder::new(&mut d.body, &mut fresh);
    let mut rw = Rewriter::new(&globals);
    let root = rw.apply(&make(&set), &mut b, d.root).unwrap_or(d.root);
    let (body, root) = term::compact(&d.body, root);
    d.body = body;
    d.root = root;
    let (vb, ob) = run(&defs_with(&a, &before), &before.name, arg.clone());
    let (va, oa) = run(&defs_with(&a, &d), &d.name, arg);
    let (vb, va) = (vb.expect("original runs"), va.expect("rewritten runs"));
    assert!(same_value(&vb, &va) && ob == oa, "{vb} {ob:?} became {va} {oa:?}");
    Outcome { text: short_def(&d), warnings: rw.take_warnings() }
}

fn pass(set: &RuleSet) -> Strategy {
    user_rules_pass(set)
}

const MUL2: &str = "(rule \"mul2\" (v : Float) (mul v 2.0) (add v v))";

#[test]
fn a_rule_rewrites_with_its_right_side() {
    let text = format!("{MUL2}\n(def f Float (x : Float) (mul x 2.0))");
    assert_eq!(apply(&text, "f", pass, Value::Float(3.0)).text, "(add x x)");
}

#[test]
fn a_non_atomic_match_is_let_bound_once() {
    let text = format!("{MUL2}\n(def f Float (x : Float) (mul ($trace (sub x 1.0)) 2.0))");
    assert_eq!(
        apply(&text, "f", pass, Value::Float(3.0)).text,
        "(let (ksc$v1 ($trace (sub x 1.0))) (add ksc$v1 ksc$v1))"
    );
}

#[test]
fn literals_and_functions_must_be_identical() {
    let text = format!("{MUL2}\n(def f Float (x : Float) (mul x 3.0))");
    assert_eq!(apply(&text, "f", pass, Value::Float(3.0)).text, "(mul x 3.0)");
    // `mul` of Integers is another function.
    let text = "(rule \"mul2i\" (v : Integer) (mul v 2) (add v v))
                (def f Float (x : Float) (mul x 2.0))";
    assert_eq!(apply(text, "f", pass, Value::Float(3.0)).text, "(mul x 2.0)");
}

#[test]
fn a_repeated_pattern_variable_matches_alpha_equal_pure_expressions() {
    let rule = "(rule \"sub-self\" (a : Float) (sub a a) 0.0)";
    let text = format!("{rule}\n(def f Float ((x : Float) (y : Float)) (add (sub (mul x y) (mul x y)) (sub x y)))");
    assert_eq!(
        apply(&text, "f", pass, Value::tuple(vec![Value::Float(2.0), Value::Float(5.0)])).text,
        "(add (let (ksc$a1 (mul x y)) 0.0) (sub x y))"
    );
    // Effects are not merged.
    let text = format!("{rule}\n(def f Float (x : Float) (sub ($trace x) ($trace x)))");
    assert_eq!(apply(&text, "f", pass, Value::Float(2.0)).text, "(sub ($trace x) ($trace x))");
}

#[test]
fn lambdas_match_up_to_renaming_and_a_pattern_variable_cannot_capture_the_binder() {
    let rule = "(rule \"sumbuild-const\" ((n : Integer) (x : Float))
                  (sumbuild n (lam (i : Integer) x)) (mul (to_float n) x))";
    let text = format!(
        "{rule}\n(def f Float ((m : Integer) (y : Float))
           (add (sumbuild m (lam (j : Integer) y)) (sumbuild m (lam (j : Integer) (to_float j)))))"
    );
    assert_eq!(
        apply(&text, "f", pass, Value::tuple(vec![Value::Integer(4), Value::Float(1.5)])).text,
        "(add (mul (to_float m) y) (sumbuild m (lam (j : Integer) (to_float j))))"
    );
}

#[test]
fn the_right_side_cannot_capture_a_matched_variable() {
    // The rhs binds `b`; the match is the program's `b`.
    let text = "(rule \"neg-as-sub\" (a : Float) (neg a) (let (b 0.0) (sub b a)))
                (def f Float (b : Float) (neg b))";
    assert_eq!(apply(text, "f", pass, Value::Float(2.0)).text, "(let (ksc$b1 0.0) (sub ksc$b1 b))");
}

#[test]
fn matches_are_bound_in_evaluation_order() {
    let text = "(rule \"sub-flip\" ((a : Float) (b : Float)) (sub a b) (neg (sub b a)))
                (def f Float ((x : Float) (y : Float)) (sub ($trace x) ($trace y)))";
    let out = apply(text, "f", pass, Value::tuple(vec![Value::Float(2.0), Value::Float(5.0)]));
    assert_eq!(out.text, "(let ((ksc$a1 ($trace x)) (ksc$b2 ($trace y))) (neg (sub ksc$b2 ksc$a1)))");
}

#[test]
fn the_first_matching_rule_fires() {
    let text = "(rule \"first\" (v : Float) (mul v 2.0) (add v v))
                (rule \"second\" (v : Float) (mul v 2.0) (mul 2.0 v))
                (def f Float (x : Float) (mul x 2.0))";
    assert_eq!(apply(text, "f", pass, Value::Float(3.0)).text, "(add x x)");
}

const COMM: &str = "(rule \"comm\" ((a : Float) (b : Float)) (add a b) (add b a))";

#[test]
fn commutativity_applied_first_match_terminates() {
    let text = format!("{COMM}\n(def f Float ((x : Float) (y : Float)) (add (add x 1.0) y))");
    let out = apply(&text, "f", pass, Value::tuple(vec![Value::Float(2.0), Value::Float(5.0)]));
    // The inner sum was rewritten first (children first); the outer match
    // is not an atom, so it is let-bound.
    assert_eq!(out.text, "(let (ksc$a1 (add 1.0 x)) (add y ksc$a1))");
    assert!(out.warnings.is_empty());
}

#[test]
fn commutativity_normalized_runs_out_of_fuel_and_says_so() {
    let text = format!("{COMM}\n(def f Float ((x : Float) (y : Float)) (add x y))");
    let out = apply(
        &text,
        "f",
        |s| normalize_with_fuel(rules(s.clone()), 1000),
        Value::tuple(vec![Value::Float(2.0), Value::Float(5.0)]),
    );
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert_eq!(out.warnings[0].kind, WarningKind::FuelExhausted);
    assert!(out.warnings[0].message.contains("comm"), "{}", out.warnings[0].message);
    // After an even number of swaps.
    assert_eq!(out.text, "(add x y)");
    // With the default fuel, too.
    let out =
        apply(&text, "f", |s| normalize(rules(s.clone())), Value::tuple(vec![Value::Float(2.0), Value::Float(5.0)]));
    assert_eq!(out.warnings[0].kind, WarningKind::FuelExhausted);
}

#[test]
fn optimise_def_applies_user_rules_once() {
    let text = format!("{COMM}\n(def f Float ((x : Float) (y : Float)) (add x y))");
    let a = checked(&text);
    let (set, _) = RuleSet::user(user_rules(&a).iter());
    let mut d = user_def(&a, "f");
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let report = optimise_def(
        &mut d,
        &Schedules::program(&[], &set).0,
        &Globals::new(&map),
        &Options { trace: true, ..Options::default() },
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(short_def(&d), "(add y x)");
    assert_eq!(report.trace.iter().filter(|f| f.rule == "comm").count(), 1);
}

#[test]
fn unusable_rules_are_rejected_with_a_reason() {
    let text = "(rule \"free-b\" ((a : Float) (b : Float)) (neg a) (add a b))
                (rule \"ok\" (a : Float) (neg a) (sub 0.0 a))";
    let a = checked(text);
    let (set, rejected) = RuleSet::user(user_rules(&a).iter());
    assert_eq!(set.len(), 1);
    assert_eq!(set.rules()[0].name(), "ok");
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, "free-b");
    assert!(rejected[0].1.contains("`b`"), "{}", rejected[0].1);
}
