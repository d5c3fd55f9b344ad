//! Every Core rule preserves evaluation: for random instances of its left
//! side (random sub-terms over parameters, with shadowed names, effects and
//! run-time failures among them), the program before and after the rule
//! evaluates, in the reference interpreter, to the same value with the same
//! output whenever the original succeeds; and the rule must actually fire on
//! enough of its instances, so the test cannot pass vacuously. The table is
//! iterated, and every entry carries its generator ([`ksc_opt::CoreRule::instance`],
//! next to the rule's rewrite in its theme file under `src/core_rules/`).

use crate::common;

use common::terms::random_args;
use common::{checked, close_value, run};
use ksc_ir::builder::Builder;
use ksc_ir::{Body, Def};
use ksc_opt::core_rules::instances::{test_def, Rng, G, HELPERS};
use ksc_opt::core_rules::Instance;
use ksc_opt::strategy::{normalize_with_fuel, rule};
use ksc_opt::{core_rule, DefMap, Globals, Options, Rewriter, Rule, CORE_RULES};

/// Runs both programs on a few random arguments; a failure message if
/// they differ where the original succeeds. Counts original successes.
fn compare(
    before: &Def,
    after: &Def,
    helpers: &[&Def],
    rng: &mut Rng,
    ok: &mut usize,
    tolerance: f64,
) -> Option<String> {
    let name = before.name.clone();
    for _ in 0..3 {
        let arg = random_args(rng);
        let mut defs_b: Vec<&Def> = vec![before];
        defs_b.extend(helpers);
        let mut defs_a: Vec<&Def> = vec![after];
        defs_a.extend(helpers);
        let (rb, ob) = run(&defs_b, &name, arg.clone());
        let (ra, oa) = run(&defs_a, &name, arg.clone());
        let Ok(vb) = rb else { continue };
        match ra {
            Ok(va) if close_value(&vb, &va, tolerance) && ob == oa => *ok += 1,
            Ok(va) => return Some(format!("on {arg}: {vb} printing {ob:?} became {va} printing {oa:?}")),
            Err(e) => return Some(format!("on {arg}: {vb} became the error {e}")),
        }
    }
    None
}

fn check_rule(name: &str, template: Instance, helpers: &[&Def], globals: &Globals) -> Result<usize, String> {
    let r = Rule::Core(core_rule(name).expect("rule"));
    let strategy = normalize_with_fuel(rule(r), 40);
    let mut fired = 0;
    let mut ok = 0;
    for seed in 0..400u64 {
        if ok >= 60 {
            break;
        }
        let mut rng = Rng::new(seed * 7919 + name.len() as u64 * 104729 + name.bytes().map(u64::from).sum::<u64>());
        let mut body = Body::new();
        let mut fresh = 0;
        let mut b = Builder::new(&mut body, &mut fresh);
        let root = {
            let mut g = G::new(&mut rng);
            template(&mut g, &mut b)
        };
        let before = test_def(b.body, root);
        let options = Options { trace: true, ..Options::default() };
        let mut rw = Rewriter::with_options(globals, options);
        let out = rw.apply(&strategy, &mut b, root).expect("normalize succeeds");
        if let Some(w) = rw.warnings().first() {
            return Err(format!("warning: {w}\n{}", ksc_ir::print::print_expr(b.body, root)));
        }
        if !rw.trace().iter().any(|f| f.rule == name) {
            continue;
        }
        fired += 1;
        let after = test_def(b.body, out);
        // A rule that may change rounding (`ROUNDING`) is compared within
        // a relative 1e-9; every other one to the bit.
        let tolerance = if ksc_opt::core_rules::ROUNDING.contains(&name) { 1e-9 } else { 0.0 };
        if let Some(problem) = compare(&before, &after, helpers, &mut rng, &mut ok, tolerance) {
            return Err(format!(
                "rule {name} changed the meaning of\n{}\ninto\n{}\n{problem}",
                ksc_ir::print::print_expr(&before.body, before.root),
                ksc_ir::print::print_expr(&after.body, after.root)
            ));
        }
    }
    if fired < 20 || ok < 20 {
        return Err(format!("rule {name} fired on only {fired} instances, {ok} comparisons where the original ran"));
    }
    Ok(ok)
}

#[test]
fn every_core_rule_preserves_evaluation() {
    let a = checked(HELPERS);
    let helpers: Vec<&Def> = a.defs();
    let map = DefMap::new(helpers.iter().copied());
    let globals = Globals::new(&map);
    let mut failures = Vec::new();
    for r in CORE_RULES {
        match check_rule(r.name, r.instance, &helpers, &globals) {
            Ok(n) => eprintln!("{:20} {n} comparisons", r.name),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rule_names_are_unique_and_stated() {
    let mut names: Vec<&str> = CORE_RULES.iter().map(|r| r.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), CORE_RULES.len());
    assert!(CORE_RULES.iter().all(|r| !r.statement.is_empty() && !r.statement.contains('\n')));
}
