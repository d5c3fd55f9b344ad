//! The semantics of each strategy combinator on small terms, with constant
//! folding of Float `add` as the rule: `(add (add 1 2) (add 3 4))` has the
//! redexes `(add 1 2)` and `(add 3 4)`, and the root becomes one once both
//! are folded.

use crate::common;

use common::short;
use ksc_ir::builder::Builder;
use ksc_ir::{Body, ExprId, FunName, Type};
use ksc_opt::strategy::*;
use ksc_opt::{core_rule, DefMap, Globals, Options, Rewriter, Rule, WarningKind};

fn fold() -> Strategy {
    rule(Rule::Core(core_rule("fold-float").expect("fold-float")))
}

fn add(b: &mut Builder, x: ExprId, y: ExprId) -> ExprId {
    b.call(FunName::typed("add", Type::Tuple(vec![Type::Float, Type::Float])), vec![x, y], Type::Float)
}

/// `(add (add 1.0 2.0) (add 3.0 4.0))`, or with `x` for the last literal.
fn term(b: &mut Builder, with_var: bool) -> ExprId {
    let (p, q, r) = (b.float(1.0), b.float(2.0), b.float(3.0));
    let s = if with_var { b.var("x", Type::Float) } else { b.float(4.0) };
    let l = add(b, p, q);
    let rr = add(b, r, s);
    add(b, l, rr)
}

/// Applies `s` to a fresh instance of the term: the printed result, or None.
fn run(s: &Strategy, with_var: bool) -> Option<String> {
    run_with(s, with_var, Options::default()).0
}

fn run_with(s: &Strategy, with_var: bool, options: Options) -> (Option<String>, Vec<ksc_opt::Warning>, usize) {
    let no_defs: Vec<ksc_ir::Def> = Vec::new();
    let map = DefMap::new(no_defs.iter());
    let globals = Globals::new(&map);
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let root = term(&mut b, with_var);
    let mut rw = Rewriter::with_options(&globals, Options { trace: true, ..options });
    let out = rw.apply(s, &mut b, root);
    let unchanged = out == Some(root);
    let text = out.map(|o| if unchanged { "unchanged".to_string() } else { short(&body, o) });
    (text, rw.warnings().to_vec(), rw.trace().len())
}

#[test]
fn id_succeeds_without_change_and_fail_fails() {
    assert_eq!(run(&id(), false).as_deref(), Some("unchanged"));
    assert_eq!(run(&fail(), false), None);
}

#[test]
fn a_rule_rewrites_only_the_root() {
    // The root's arguments are not literals.
    assert_eq!(run(&fold(), false), None);
}

#[test]
fn one_rewrites_the_first_child_where_it_applies() {
    assert_eq!(run(&one(fold()), false).as_deref(), Some("(add 3.0 (add 3.0 4.0))"));
    // A leaf has no children.
    assert_eq!(run(&seq(one(fold()), one(one(fold()))), true), None);
}

#[test]
fn all_rewrites_every_child_or_fails() {
    assert_eq!(run(&all(fold()), false).as_deref(), Some("(add 3.0 7.0)"));
    // (add 3.0 x) does not fold: all fails.
    assert_eq!(run(&all(fold()), true), None);
    assert_eq!(run(&all(try_(fold())), true).as_deref(), Some("(add 3.0 (add 3.0 x))"));
    // On leaves `all` succeeds trivially: all(all(all(fail))) reaches only leaves.
    assert_eq!(run(&all(all(all(fail()))), false).as_deref(), Some("unchanged"));
}

#[test]
fn seq_and_lchoice() {
    assert_eq!(run(&seq(all(fold()), fold()), false).as_deref(), Some("10.0"));
    assert_eq!(run(&seq(fold(), all(fold())), false), None);
    assert_eq!(run(&lchoice(fold(), one(fold())), false).as_deref(), Some("(add 3.0 (add 3.0 4.0))"));
    assert_eq!(run(&lchoice(fail(), id()), false).as_deref(), Some("unchanged"));
}

#[test]
fn try_never_fails() {
    assert_eq!(run(&try_(fold()), false).as_deref(), Some("unchanged"));
}

#[test]
fn repeat_applies_until_failure() {
    assert_eq!(run(&repeat(one(fold())), false).as_deref(), Some("(add 3.0 7.0)"));
    assert_eq!(run(&repeat(fold()), false).as_deref(), Some("unchanged"));
}

#[test]
fn repeat_of_id_is_stopped_by_its_limit() {
    let options = Options { repeat_limit: 50, ..Options::default() };
    let (out, warnings, _) = run_with(&repeat(id()), false, options);
    assert_eq!(out.as_deref(), Some("unchanged"));
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].kind, WarningKind::RepeatLimit);
}

#[test]
fn top_down_rewrites_the_first_position_in_pre_order() {
    assert_eq!(run(&top_down(fold()), false).as_deref(), Some("(add 3.0 (add 3.0 4.0))"));
    assert_eq!(run(&top_down(fail()), false), None);
}

#[test]
fn bottom_up_visits_children_first() {
    assert_eq!(run(&bottom_up(try_(fold())), false).as_deref(), Some("10.0"));
    // Without try it fails at the first leaf.
    assert_eq!(run(&bottom_up(fold()), false), None);
    assert_eq!(run(&bottom_up(try_(fold())), true).as_deref(), Some("(add 3.0 (add 3.0 x))"));
}

#[test]
fn normalize_rewrites_until_no_rule_applies() {
    assert_eq!(run(&normalize(fold()), false).as_deref(), Some("10.0"));
    assert_eq!(run(&normalize(fold()), true).as_deref(), Some("(add 3.0 (add 3.0 x))"));
    // Nothing to do: still succeeds.
    assert_eq!(run(&normalize(fail()), false).as_deref(), Some("unchanged"));
}

#[test]
fn normalize_stops_at_its_fuel_with_a_warning() {
    let (out, warnings, fired) = run_with(&normalize_with_fuel(fold(), 2), false, Options::default());
    assert_eq!(out.as_deref(), Some("(add 3.0 7.0)"));
    assert_eq!(fired, 2);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].kind, WarningKind::FuelExhausted);
    assert!(warnings[0].message.contains("fold-float"), "{}", warnings[0].message);
}

#[test]
fn normalize_stops_when_its_rewrites_have_made_its_work_in_nodes() {
    // Each fold makes one node (a literal); with work for two, the third
    // rewrite is not done, whatever the fuel.
    let (out, warnings, fired) = run_with(&normalize(fold()), false, Options { work: 2, ..Options::default() });
    assert_eq!(out.as_deref(), Some("(add 3.0 7.0)"));
    assert_eq!(fired, 2);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].kind, WarningKind::FuelExhausted);
    assert!(warnings[0].message.contains("made 2 nodes"), "{}", warnings[0].message);
    // With the default work, all three.
    assert_eq!(run(&normalize(fold()), false).as_deref(), Some("10.0"));
}

#[test]
fn rules_tries_a_set_in_order() {
    let mut set = ksc_opt::RuleSet::new("s");
    set.push(Rule::Core(core_rule("if-true").unwrap()));
    set.push(Rule::Core(core_rule("fold-float").unwrap()));
    assert_eq!(run(&normalize(rules(set)), false).as_deref(), Some("10.0"));
    assert_eq!(format!("{}", normalize(rules(ksc_opt::RuleSet::new("s")))), "normalize(rules(s))");
}

#[test]
fn the_argument_tuple_is_looked_through() {
    // `one` on (add a b) reaches a and b directly: one(one(..)) from the
    // root reaches the literals of (add 1.0 2.0), which no rule rewrites.
    assert_eq!(run(&one(one(fold())), false), None);
    assert_eq!(run(&one(id()), false).as_deref(), Some("unchanged"));
}

#[test]
fn strategies_print_as_combinator_expressions() {
    let s = seq(top_down(fold()), lchoice(bottom_up(try_(id())), repeat(all(one(fail())))));
    assert_eq!(s.to_string(), "seq(topDown(rule(fold-float)), lchoice(bottomUp(try(id)), repeat(all(one(fail)))))");
}
