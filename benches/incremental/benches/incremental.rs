//! Incremental compilation of the GMM program (ksc-examples/ad/gmm.ks: the
//! objective and `gdef rev` of it) through the salsa database:
//!
//! - `cold`: a new database, the whole analysis (check, derive, optimise);
//! - `edit used by [rev gmm_objective]`: one edit of `sqnorm`'s body, which
//!   the derivative calls, then the analysis again;
//! - `edit of another definition`: one edit of `gmm_data`'s body, which no
//!   derivative uses.
//!
//! Each edit alternates between two texts, so every iteration is a real
//! change. After criterion's report, the medians' ratios are printed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use ksc_db::{analysis, Database};

const GMM: &str = include_str!("../../../ksc-examples/ad/gmm.ks");

/// The program with one definition's body changed (`from` -> `to`).
fn edited(from: &str, to: &str) -> String {
    assert_eq!(GMM.matches(from).count(), 1, "`{from}` occurs once in gmm.ks");
    GMM.replace(from, to)
}

fn cold() {
    let db = Database::new();
    let file = db.add_file(GMM.to_string());
    let a = analysis(&db, file);
    assert!(!a.has_errors() && !a.derived.is_empty());
    black_box(a);
}

/// A database that has compiled the program, and a closure that applies the
/// edit (or undoes it) and compiles again.
fn incremental(from: &'static str, to: &'static str) -> impl FnMut() {
    let mut db = Database::new();
    let file = db.add_file(GMM.to_string());
    let _ = analysis(&db, file);
    let texts = [edited(from, to), GMM.to_string()];
    let mut i = 0;
    move || {
        db.set_text(file, texts[i % 2].clone());
        i += 1;
        let a = analysis(&db, file);
        assert!(!a.has_errors());
        black_box(a);
    }
}

/// `sqnorm` multiplies `x` by itself; the edit multiplies by `1.0 * x`.
const USED: (&str, &str) = ("(let (x (index i v)) (mul x x))", "(let (x (index i v)) (mul x (mul 1.0 x)))");
/// `gmm_data`'s first random offset.
const UNUSED: (&str, &str) = ("(sub ($ranhashdoub (add base3 (add (mul c icf_size) j))) 0.5)", "(sub ($ranhashdoub (add base3 (add (mul c icf_size) j))) 0.25)");

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("gmm");
    g.bench_function("cold", |b| b.iter(cold));
    g.bench_function("edit used by [rev gmm_objective]", |b| b.iter(incremental(USED.0, USED.1)));
    g.bench_function("edit of another definition", |b| b.iter(incremental(UNUSED.0, UNUSED.1)));
    g.finish();
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
    let cold_t = median(cold);
    let used_t = median(incremental(USED.0, USED.1));
    let unused_t = median(incremental(UNUSED.0, UNUSED.1));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("median cold compile:                    {:8.3} ms", ms(cold_t));
    println!(
        "median after an edit the derivative uses: {:8.3} ms  (cold / incremental = {:.1}x)",
        ms(used_t),
        cold_t.as_secs_f64() / used_t.as_secs_f64()
    );
    println!(
        "median after an edit of another def:    {:8.3} ms  (cold / incremental = {:.1}x)",
        ms(unused_t),
        cold_t.as_secs_f64() / unused_t.as_secs_f64()
    );
}

criterion_group!(group, benches);

fn main() {
    group();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}
