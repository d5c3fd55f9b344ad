//! Incremental compilation of the GMM program (ksc-examples/ad/gmm.ks: the
//! objective and `gdef rev` of it) through the salsa database, to two
//! stages: the analysis (check, derive, optimise), and the C of everything
//! a library of the file exports (its definitions and the derived
//! functions: loop IR per definition, linked, emitted).
//!
//! - `cold`: a new database, compiled to the stage;
//! - then one edit and the stage again, for each of [`EDITS`]: of
//!   `qtimesx` and of `sqnorm`, whose derivatives `[rev gmm_objective]`
//!   calls (only `[rev qtimesx]`, or `[rev sqnorm]`, is derived and
//!   optimised again; lowering inlines both into their callers, which are
//!   lowered again); of `gmm_objective` itself (its derivative is derived
//!   and optimised again, the callees' are not); of `gmm_data`, which no
//!   derivative uses.
//!
//! Each edit alternates between two texts, so every iteration is a real
//! change. After criterion's report, the medians' ratios are printed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use ksc_db::{analysis, c_unit, Database, SourceFile};
use ksc_ir::{Decl, FunName};

const GMM: &str = include_str!("../../../ksc-examples/ad/gmm.ks");

/// The program with one definition's body changed (`from` -> `to`).
fn edited(from: &str, to: &str) -> String {
    assert_eq!(GMM.matches(from).count(), 1, "`{from}` occurs once in gmm.ks");
    GMM.replace(from, to)
}

/// How far a compilation goes.
#[derive(Clone, Copy)]
enum Stage {
    Analysis,
    C,
}

fn compile(db: &Database, file: SourceFile, stage: Stage) {
    let a = analysis(db, file);
    assert!(!a.has_errors() && !a.derived.is_empty());
    if let Stage::C = stage {
        let mut roots: Vec<FunName> =
            a.source.decls.iter().filter_map(|d| if let Decl::Def(d) = d { Some(d.name.clone()) } else { None }).collect();
        roots.extend(a.derived.iter().map(|d| d.name.clone()));
        let c = c_unit(db, file, "gmm.ks".into(), roots, true, ksc_codegen_c::Target::Library, "gmm.h".into());
        assert!(c.is_ok());
        black_box(c);
    }
    black_box(a);
}

fn cold(stage: Stage) -> impl FnMut() {
    move || {
        let db = Database::new();
        let file = db.add_file(GMM.to_string());
        compile(&db, file, stage);
    }
}

/// A database that has compiled the program, and a closure that applies the
/// edit (or undoes it) and compiles again.
fn incremental(from: &'static str, to: &'static str, stage: Stage) -> impl FnMut() {
    let mut db = Database::new();
    let file = db.add_file(GMM.to_string());
    compile(&db, file, stage);
    let texts = [edited(from, to), GMM.to_string()];
    let mut i = 0;
    move || {
        db.set_text(file, texts[i % 2].clone());
        i += 1;
        compile(&db, file, stage);
    }
}

/// One-definition edits: what the benchmark calls them, and the text
/// replaced.
const EDITS: [(&str, &str, &str); 4] = [
    (
        "edit of qtimesx (called by gmm_objective)",
        "(mul (index j qdiag) (index j y))",
        "(mul (index j qdiag) (mul 1.0 (index j y)))",
    ),
    ("edit of sqnorm (called by gmm_objective)", "(let (x (index i v)) (mul x x))", "(let (x (index i v)) (mul x (mul 1.0 x)))"),
    ("edit of gmm_objective itself", "(mul 0.5 (sqnorm (qtimesx", "(mul 0.25 (sqnorm (qtimesx"),
    (
        "edit of gmm_data (no derivative uses it)",
        "(sub ($ranhashdoub (add base3 (add (mul c icf_size) j))) 0.5)",
        "(sub ($ranhashdoub (add base3 (add (mul c icf_size) j))) 0.25)",
    ),
];

fn benches(c: &mut Criterion) {
    for (stage, name) in [(Stage::Analysis, "gmm analysis"), (Stage::C, "gmm to C")] {
        let mut g = c.benchmark_group(name);
        g.bench_function("cold", |b| b.iter(cold(stage)));
        for (label, from, to) in EDITS {
            g.bench_function(label, |b| b.iter(incremental(from, to, stage)));
        }
        g.finish();
    }
}

/// The median time of `f` over enough runs to fill about a second.
fn median(mut f: impl FnMut()) -> Duration {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 10 || (start.elapsed() < Duration::from_secs(1) && times.len() < 1000) {
        let t = Instant::now();
        f();
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

fn ratios() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (stage, name) in [(Stage::Analysis, "the analysis"), (Stage::C, "C")] {
        let cold_t = median(cold(stage));
        println!("to {name}: median cold compile {:8.3} ms", ms(cold_t));
        for (label, from, to) in EDITS {
            let t = median(incremental(from, to, stage));
            println!(
                "  median after an {label:<44} {:8.3} ms  (cold / incremental = {:.1}x)",
                ms(t),
                cold_t.as_secs_f64() / t.as_secs_f64()
            );
        }
    }
}

criterion_group!(group, benches);

fn main() {
    group();
    Criterion::default().configure_from_args().final_summary();
    if std::env::var_os("KSC_NO_RATIOS").is_none() {
        ratios();
    }
}
