//! Every law of the table holds on random instances (compared as dense
//! matrices or tangents), every transpose is an adjoint, and a deliberately
//! wrong law is caught with a small counterexample. The table is iterated,
//! so a law cannot be added without being checked.
//!
//! Seeds are fixed for reproducible CI; set `KSC_LAW_SEED` to explore others.

use ksc_linmap::check::{check_law, check_transposes};
use ksc_linmap::laws::{Instance, Law};
use ksc_linmap::spec::{MapSpec, Shape};
use ksc_linmap::LAWS;
use quickcheck::Arbitrary;

fn seed() -> u64 {
    std::env::var("KSC_LAW_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261122)
}

#[test]
fn every_law_holds_on_random_instances() {
    let mut failures = Vec::new();
    for (i, law) in LAWS.iter().enumerate() {
        let report = check_law(law, 150, seed() + i as u64);
        if let Some(c) = report.failure {
            failures.push(format!("law {} ({}) fails:\n{c}", law.name, law.statement));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn transposes_are_adjoints() {
    let report = check_transposes(400, seed());
    assert!(report.failure.is_none(), "{}", report.failure.unwrap());
    assert_eq!(report.passed, 400);
}

#[test]
fn law_names_are_unique_and_statements_present() {
    let mut names: Vec<&str> = LAWS.iter().map(|l| l.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), LAWS.len());
    assert!(LAWS.iter().all(|l| !l.statement.is_empty() && !l.group.is_empty()));
    // Figures 4 and 5 of seed 003 and reference 4.2/4.3 give at least this many.
    assert!(LAWS.len() >= 50, "only {} laws", LAWS.len());
}

/// `(m1 ∘ m2)ᵀ = m1ᵀ ∘ m2ᵀ`: wrong (the order must be reversed), but well
/// typed when all spaces have the same shape.
static WRONG: Law = Law {
    name: "wrong-transpose-compose",
    statement: "(m1 ∘ m2)ᵀ = m1ᵀ ∘ m2ᵀ",
    group: "deliberately wrong",
    duplicates: false,
    rewrite: |b, e| {
        let [c] = ksc_ir::builder::call_of(b.body, e, ksc_ir::Prim::LmTranspose)?[..] else { return None };
        let [m1, m2] = ksc_ir::builder::call_of(b.body, c, ksc_ir::Prim::LmCompose)?[..] else { return None };
        let t1 = b.prim(ksc_ir::Prim::LmTranspose, vec![m1]);
        let t2 = b.prim(ksc_ir::Prim::LmTranspose, vec![m2]);
        Some(b.prim(ksc_ir::Prim::LmCompose, vec![t1, t2]))
    },
    instance: |g| {
        let n = usize::arbitrary(g) % g.size().clamp(1, 3) + 2;
        let s = Shape::Vec(n, Box::new(Shape::Float));
        let m1 = MapSpec::arbitrary(g, &s, &s, 2);
        let m2 = MapSpec::arbitrary(g, &s, &s, 2);
        Instance::Map(MapSpec::Transpose(Box::new(MapSpec::Compose(Box::new(m1), Box::new(m2)))))
    },
};

#[test]
fn a_wrong_law_is_caught_with_a_small_counterexample() {
    let report = check_law(&WRONG, 300, seed());
    let c = report.failure.expect("the wrong law was not caught");
    assert!(!c.lhs.is_empty(), "{c}");
    // Shrinking leaves a small term: two small maps under a transpose.
    assert!(c.lhs.len() < 400, "counterexample not shrunk:\n{c}");
    assert!(c.detail.contains("dense matrices"), "{c}");
}
