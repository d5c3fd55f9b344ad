//! Confluence of the rule sets (seed 001; issue 43 item 5): each rule set is
//! run to a normal form twice on the same random terms, its rules tried in
//! their table's order and in the reverse order. Where the two normal
//! forms differ (up to the names of bound variables), the set is not
//! confluent there: the table lists, per generator of terms, how many of
//! its instances differ and which rules fired in one order but never in the
//! other, in `confluence.expected` (re-blessed with `KSC_BLESS=1`), so a
//! change of the rules that changes confluence shows in the diff.
//!
//! Either way both normal forms must mean what the term meant: evaluated
//! in the reference interpreter, the same value (Core terms) or the same
//! matrix (linear maps), and neither run may run out of fuel (a
//! non-terminating pair of rules would).

use std::collections::BTreeSet;
use std::fmt::Write;

use ksc_eval::Value;
use ksc_ir::builder::Builder;
use ksc_ir::{Body, Def, ExprId, FunName, Type};
use ksc_linmap::spec::{MapSpec, Shape};
use ksc_opt::core_rules::instances::{test_def, Rng, G, HELPERS};
use ksc_opt::strategy::{normalize, rules};
use ksc_opt::{DefMap, Globals, Options, Rewriter, RuleSet, CORE_RULES};
use quickcheck::Gen;

use crate::common::terms::random_args;
use crate::common::{checked, run, same_value};

/// `set` with its rules in the reverse order.
fn reversed(set: &RuleSet) -> RuleSet {
    let mut r = RuleSet::new(format!("{} reversed", set.name()));
    for rule in set.rules().iter().rev() {
        r.push(rule.clone());
    }
    r
}

/// One normal form: the term and the rules that fired.
struct Normal {
    term: ExprId,
    fired: BTreeSet<String>,
}

fn normal_form(set: &RuleSet, globals: &Globals, b: &mut Builder, root: ExprId) -> Result<Normal, String> {
    let mut rw = Rewriter::with_options(globals, Options { trace: true, ..Options::default() });
    let term = rw.apply(&normalize(rules(set.clone())), b, root).ok_or("normalize failed")?;
    if let Some(w) = rw.warnings().first() {
        return Err(format!("{}: {w}", set.name()));
    }
    Ok(Normal { term, fired: rw.trace().iter().map(|f| f.rule.clone()).collect() })
}

/// What a table row collects for one generator.
#[derive(Default)]
struct Row {
    instances: usize,
    differ: usize,
    only_in_order: BTreeSet<String>,
    only_reversed: BTreeSet<String>,
}

impl Row {
    fn add(&mut self, same: bool, a: &Normal, b: &Normal) {
        self.instances += 1;
        if !same {
            self.differ += 1;
            self.only_in_order.extend(a.fired.difference(&b.fired).cloned());
            self.only_reversed.extend(b.fired.difference(&a.fired).cloned());
        }
    }
}

fn table(out: &mut String, title: &str, rows: &[(String, Row)]) {
    let total: usize = rows.iter().map(|(_, r)| r.instances).sum();
    let differ: usize = rows.iter().map(|(_, r)| r.differ).sum();
    writeln!(out, "{title}: {differ} of {total} terms reach different normal forms").unwrap();
    for (name, r) in rows.iter().filter(|(_, r)| r.differ > 0) {
        let list = |s: &BTreeSet<String>| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.iter().cloned().collect::<Vec<_>>().join(" ")
            }
        };
        writeln!(
            out,
            "  {name}: {}/{}; only in order: {}; only reversed: {}",
            r.differ,
            r.instances,
            list(&r.only_in_order),
            list(&r.only_reversed)
        )
        .unwrap();
    }
}

/// The Core rules on instances of every Core rule's generator.
fn core_table(out: &mut String, failures: &mut Vec<String>) {
    let a = checked(HELPERS);
    let helpers: Vec<&Def> = a.defs();
    let map = DefMap::new(helpers.iter().copied());
    let globals = Globals::new(&map);
    let set = RuleSet::core();
    let back = reversed(&set);
    let mut rows = Vec::new();
    for (k, rule) in CORE_RULES.iter().enumerate() {
        let mut row = Row::default();
        for seed in 0..24u64 {
            let mut rng = Rng::new(seed * 104729 + k as u64 * 7919 + 1);
            let mut body = Body::new();
            let mut fresh = 0;
            let mut b = Builder::new(&mut body, &mut fresh);
            let root = {
                let mut g = G::new(&mut rng);
                (rule.instance)(&mut g, &mut b)
            };
            let (x, y) = match (normal_form(&set, &globals, &mut b, root), normal_form(&back, &globals, &mut b, root)) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => {
                    failures.push(format!("{}: {e}", rule.name));
                    continue;
                }
            };
            let same = ksc_ir::term::alpha_eq(b.body, x.term, b.body, y.term);
            if !same {
                // Both mean what the term meant.
                let before = test_def(b.body, root);
                for (label, t) in [("in order", x.term), ("reversed", y.term)] {
                    let after = test_def(b.body, t);
                    for _ in 0..3 {
                        let arg = random_args(&mut rng);
                        let name = before.name.clone();
                        let mut defs_b: Vec<&Def> = vec![&before];
                        defs_b.extend(&helpers);
                        let mut defs_a: Vec<&Def> = vec![&after];
                        defs_a.extend(&helpers);
                        let (Ok(vb), ob) = run(&defs_b, &name, arg.clone()) else { continue };
                        let (va, oa) = run(&defs_a, &name, arg.clone());
                        if !matches!(&va, Ok(va) if same_value(&vb, va) && ob == oa) {
                            failures.push(format!("{}: the normal form {label} changed the value on {arg}", rule.name));
                        }
                    }
                }
            }
            row.add(same, &x, &y);
        }
        rows.push((rule.name.to_string(), row));
    }
    table(out, "core, on instances of each Core rule's generator", &rows);
}

/// A definition `name () = body[root]`.
fn def_of(name: &str, body: &Body, root: ExprId) -> Def {
    let (body, root) = ksc_ir::term::compact(body, root);
    Def { name: FunName::typed(name, Type::unit()), params: Vec::new(), ret_ty: body.ty(root).clone(), body, root }
}

/// The dense matrix of the map a definition returns.
fn matrix(defs: &[Def], name: &str) -> Vec<f64> {
    let mut interp = ksc_eval::Interpreter::new(defs.iter());
    let v = interp.call(&FunName::typed(name, Type::unit()), Value::unit(), &mut std::io::sink()).expect("runs");
    interp.dense_matrix(&v).expect("dense").data
}

/// The map laws and the Core rules on random linear-map terms.
fn map_table(out: &mut String, failures: &mut Vec<String>) {
    let no_defs: Vec<Def> = Vec::new();
    let map = DefMap::new(no_defs.iter());
    let globals = Globals::new(&map);
    let set = ksc_opt::script::Schedules::builtin().definition("simplify-lm");
    let Some(ksc_opt::Strategy::Normalize(inner, _)) = set else { panic!("simplify-lm is a normalize") };
    let ksc_opt::Strategy::Rules(set) = *inner else { panic!("rules") };
    let set: RuleSet = (*set).clone();
    let back = reversed(&set);
    let mut row = Row::default();
    for seed in 0..600u64 {
        let mut g = Gen::from_size_and_seed(1 + (seed as usize / 60).min(2), seed * 2654435761 + 17);
        let (s, t) = (Shape::arbitrary(&mut g, 2), Shape::arbitrary(&mut g, 2));
        let m = MapSpec::arbitrary(&mut g, &s, &t, 3);
        if !m.well_formed() {
            continue;
        }
        let mut body = Body::new();
        let mut fresh = 0;
        let mut b = Builder::new(&mut body, &mut fresh);
        let root = m.build(&mut b);
        let (x, y) = match (normal_form(&set, &globals, &mut b, root), normal_form(&back, &globals, &mut b, root)) {
            (Ok(x), Ok(y)) => (x, y),
            (Err(e), _) | (_, Err(e)) => {
                failures.push(format!("map {seed}: {e}"));
                continue;
            }
        };
        let same = ksc_ir::term::alpha_eq(b.body, x.term, b.body, y.term);
        if !same {
            let defs = [
                def_of("before", b.body, root),
                def_of("in_order", b.body, x.term),
                def_of("reversed", b.body, y.term),
            ];
            let want = matrix(&defs, "before");
            for label in ["in_order", "reversed"] {
                let got = matrix(&defs, label);
                let close = got.len() == want.len()
                    && got.iter().zip(&want).all(|(p, q)| (p - q).abs() <= 1e-9 * (1.0 + p.abs().max(q.abs())));
                if !close {
                    failures.push(format!("map {seed}: the normal form {label} has another matrix"));
                }
            }
        }
        row.add(same, &x, &y);
    }
    table(out, "map-laws+core, on random linear-map terms", &[("random maps".to_string(), row)]);
}

#[test]
fn rule_sets_in_two_orders() {
    let mut out = String::from(
        "; Each rule set run to a normal form with its rules in table order and reversed\n\
         ; (crates/ksc-opt/tests/confluence.rs): where the normal forms differ, and the\n\
         ; rules that fired in one order only. Re-bless with KSC_BLESS=1.\n",
    );
    let mut failures = Vec::new();
    core_table(&mut out, &mut failures);
    map_table(&mut out, &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/confluence.expected");
    if std::env::var_os("KSC_BLESS").is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::write(&path, &out).expect("write confluence.expected");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(expected == out, "confluence changed (KSC_BLESS=1 to accept); now:\n{out}");
}
