//! The work of checking a chain of n calls under `gdef rev` (`g0 x = sin
//! x`, `gk x = sin (g(k-1) x)`, `(gdef rev [g(n-1) Float])`) is linear in
//! n with a small constant, counted without a clock: the rewrites the
//! simplifier does and the derived functions optimised.
//!
//! `[rev gk]` inlines 16 levels of its callees' reverse passes (with their
//! primal calls, `ksc_opt::pipeline::chain`). Each level used to run the
//! whole simplifier on the growing body (about 700 rewrites per `[rev
//! gk]`, 14 ms each in release: a 10,000-call chain took 140 s); and every
//! `[rev gk]` derivation asked for was optimised, though only one in 17
//! is still called once its caller has inlined the levels below it.

/// The chain of n calls with its `gdef`.
fn chain(n: usize) -> String {
    let mut text = String::from("(def g0 Float (x : Float) (sin x))\n");
    for k in 1..n {
        text.push_str(&format!("(def g{k} Float (x : Float) (sin (g{} x)))\n", k - 1));
    }
    text.push_str(&format!("(gdef rev [g{} Float])\n", n - 1));
    text
}

/// Checks the chain of n calls: (rewrites, derived functions optimised,
/// derived functions in the analysis).
fn work(n: usize) -> (u64, usize, usize) {
    let db = ksc_db::Database::new();
    let file = db.add_file(chain(n));
    let before = ksc_opt::rewrites_on_this_thread();
    let analysis = ksc_db::analysis(&db, file);
    let rewrites = ksc_opt::rewrites_on_this_thread() - before;
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let requested = format!("[rev [g{} Float]]", n - 1);
    assert!(analysis.derived.iter().any(|d| d.name.to_string() == requested), "no {requested}");
    let optimised = db.take_executed().queries.iter().filter(|q| q.starts_with("optimised(")).count();
    (rewrites, optimised, analysis.derived.len())
}

#[test]
fn a_chain_of_calls_under_gdef_rev_costs_linear_work() {
    let n = 100;
    let (r1, o1, d1) = work(n);
    let (r4, o4, d4) = work(4 * n);
    // Only the derived functions still called are optimised and kept: one
    // in 17 (the requested one, then every 17th below it).
    for (m, o, d) in [(n, o1, d1), (4 * n, o4, d4)] {
        assert!(o <= m / 8 + 2, "{o} derived functions optimised for a chain of {m}");
        assert_eq!(o, d, "chain of {m}");
    }
    // A few rewrites per function of the chain (levels inlined without the
    // simplifier, which runs once after the last; 8 per function here),
    // and linear.
    // (The simplifier after every level made about 700 per function.)
    assert!(r1 <= 20 * n as u64, "{r1} rewrites for a chain of {n}");
    assert!(r4 <= 20 * 4 * n as u64, "{r4} rewrites for a chain of {}", 4 * n);
    assert!(r4 <= 5 * r1, "{r1} rewrites for {n} calls, {r4} for {}", 4 * n);
}
