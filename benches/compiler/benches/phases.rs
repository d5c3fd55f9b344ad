//! The compiler's phases on ksc-examples/adbench/gmm.ks (objective and
//! `gdef rev`): parse, check, derive, simplify, lower, emit C, and the whole
//! pipeline. `cargo bench` in benches/compiler.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use ksc_codegen_c::Target;
use ksc_ir::FunName;

const GMM: &str = include_str!("../../../ksc-examples/adbench/gmm.ks");

/// The requested derivatives of the program.
fn requests(a: &ksc_types::Analysis) -> Vec<FunName> {
    a.gdef_requests().into_iter().map(|(n, _)| n).collect()
}

/// The functions `ksc build` exports: every `def` of the file.
fn roots(a: &ksc_types::Analysis) -> Vec<FunName> {
    a.source
        .decls
        .iter()
        .filter_map(|d| match d {
            ksc_ir::Decl::Def(d) if d.name.base != "main" => Some(d.name.clone()),
            _ => None,
        })
        .collect()
}

fn derive(a: &ksc_types::Analysis) -> Vec<ksc_ir::Def> {
    let written = a.defs();
    let d = ksc_ad::derive_requested(&written, &requests(a));
    assert!(d.errors.is_empty(), "derivation failed");
    d.defs
}

fn phases(c: &mut Criterion) {
    let mut g = c.benchmark_group("gmm");
    g.bench_function("parse", |b| b.iter(|| ksc_syntax::parse_source(black_box(GMM))));
    g.bench_function("check", |b| b.iter(|| ksc_types::analyze(black_box(GMM))));
    let analysis = ksc_types::analyze(GMM);
    assert!(!analysis.has_errors());
    g.bench_function("derive", |b| b.iter(|| derive(black_box(&analysis))));
    let derived = derive(&analysis);
    g.bench_function("simplify", |b| {
        b.iter(|| {
            let mut d = derived.clone();
            ksc_opt::pipeline::optimise_all(&mut d, &analysis.defs(), &[], &[]);
            d
        })
    });
    let mut simplified = derived.clone();
    ksc_opt::pipeline::optimise_all(&mut simplified, &analysis.defs(), &[], &[]);
    let mut all = analysis.defs();
    all.extend(simplified.iter());
    let roots = roots(&analysis);
    let opts = || ksc_lower::Options { checked: false, ..ksc_lower::Options::default() };
    g.bench_function("lower", |b| b.iter(|| ksc_lower::compile(black_box(&all), &roots, opts(), true).unwrap()));
    let module = ksc_lower::compile(&all, &roots, opts(), true).unwrap();
    g.bench_function("emit", |b| b.iter(|| ksc_codegen_c::emit(black_box(&module), &[], Target::Library, false, "gmm.h")));
    g.bench_function("all (parse to C)", |b| {
        b.iter(|| {
            let a = ksc_types::analyze(black_box(GMM));
            let mut d = derive(&a);
            ksc_opt::pipeline::optimise_all(&mut d, &a.defs(), &[], &[]);
            let mut all = a.defs();
            all.extend(d.iter());
            let m = ksc_lower::compile(&all, &roots, opts(), true).unwrap();
            ksc_codegen_c::emit(&m, &[], Target::Library, false, "gmm.h")
        })
    });
    g.finish();
}

criterion_group!(benches, phases);
criterion_main!(benches);
