//! Differentiating any well-typed program never fails with an internal
//! error: random mutations of the AD examples that still type-check are
//! differentiated (every `gdef`), and every error must be a user-facing one
//! ("not supported", "no derivative", ...), never "internal error". And
//! the sparse Jacobian of every mutant's functions equals the dense one,
//! and the optimiser reaches a normal form on every mutant's derivatives
//! (its rules terminate: no "stopped" warning).

use crate::common;

use ksc_eval::Interpreter;
use ksc_ir::{Decl, Derivation, Type};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

fn examples() -> &'static [String] {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ksc-examples/ad");
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files
            .iter()
            .filter(|p| p.extension().is_some_and(|x| x == "ks"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect()
    })
}

/// The operations one call of a mutant may do in the interpreter: a
/// mutated tail recursion can loop forever in constant stack (the
/// interpreter's tail calls do not nest), which the stack limit never
/// stops. A call past it is skipped, as one that fails is; the examples'
/// calls at their points do far fewer.
const MUTANT_OPS: u64 = 1_000_000;

/// Token-level mutations that tend to keep programs well typed: swap one
/// prelude function or literal for another of the same type.
const SWAPS: &[(&str, &str)] = &[
    ("mul", "add"),
    ("add", "sub"),
    ("sin", "cos"),
    ("exp", "tanh"),
    ("log", "sqrt"),
    ("1.0", "2.5"),
    ("0.0", "-1.5"),
    ("gt", "lt"),
    ("sumbuild", "sumbuild"),
    ("(index i v)", "(index 0 v)"),
    ("(mul x y)", "(mul y x)"),
    ("x", "y"),
];

#[derive(Clone, Debug)]
struct Case {
    file: usize,
    swaps: Vec<(usize, usize)>,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let n = usize::arbitrary(g) % 4 + 1;
        Case { file: usize::arbitrary(g), swaps: (0..n).map(|_| (usize::arbitrary(g), usize::arbitrary(g))).collect() }
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Case>> {
        let file = self.file;
        Box::new(self.swaps.shrink().map(move |swaps| Case { file, swaps }))
    }
}

fn mutate(text: &str, case: &Case) -> String {
    let mut t = text.to_string();
    for &(which, at) in &case.swaps {
        let (from, to) = SWAPS[which % SWAPS.len()];
        let hits: Vec<usize> = t.match_indices(from).map(|(i, _)| i).collect();
        if hits.is_empty() {
            continue;
        }
        let i = hits[at % hits.len()];
        t.replace_range(i..i + from.len(), to);
    }
    t
}

#[test]
fn differentiating_well_typed_mutants_never_hits_an_internal_error() {
    fn prop(case: Case) -> TestResult {
        let texts = examples();
        let text = mutate(&texts[case.file % texts.len()], &case);
        let analysis = ksc_types::analyze(&text);
        if analysis.has_errors() {
            return TestResult::discard();
        }
        let requests: Vec<_> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
        let derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
        match derived.errors.iter().find(|(_, e)| e.message.contains("internal error")) {
            Some((n, e)) => TestResult::error(format!("{n}: {}\n{text}", e.message)),
            None => TestResult::passed(),
        }
    }
    let seed = run_seed("differentiating_well_typed_mutants_never_hits_an_internal_error");
    QuickCheck::new()
        .rng(Gen::from_size_and_seed(100, seed))
        .tests(200)
        .max_tests(2000)
        .quickcheck(prop as fn(Case) -> TestResult);
}

/// `[jacsparse f]` finds blocks in the shape of f's body; mutants give it
/// bodies the examples do not have. Wherever `[jac f]` runs at a random
/// point, `[jacsparse f]` must run too and be the same matrix, with its
/// layout intact.
#[test]
fn sparse_jacobians_of_well_typed_mutants_are_the_dense_ones() {
    fn prop(case: Case) -> TestResult {
        let Derived { text, analysis, funs, watch: _watch } =
            match derived_mutant(&case, &[Derivation::Jac, Derivation::JacSparse]) {
                Ok(d) => d,
                Err(verdict) => return verdict,
            };
        let defs = analysis.defs();
        let mut interp = Interpreter::new(defs.iter().copied());
        interp.set_call_limit(MUTANT_OPS);
        let mut sink = std::io::sink();
        let mut rng = common::Rng((case.file as u64).wrapping_add(7));
        for f in funs {
            let (jac, sparse) = (f.derived(Derivation::Jac), f.derived(Derivation::JacSparse));
            let Some(sig) = analysis.table.get(&f) else { continue };
            let x = common::random_value(&sig.arg_ty, &mut rng);
            // Where the function itself fails (a mutant's `index (sub i 2)
            // v` out of range), its Jacobians need not agree: the dense one
            // may never read the failing value (the derivative of `add` does
            // not), the sparse one gathers it.
            if interp.call(&f, x.clone(), &mut sink).is_err() {
                continue;
            }
            let Ok(dense) = interp.call(&jac, x.clone(), &mut sink) else { continue };
            let ksc_eval::Value::Tensor(d) = &dense else { return TestResult::error(format!("{jac} is {dense}")) };
            let (m, n) = (d.shape[0], d.shape[1]);
            let got = match interp.call(&sparse, x.clone(), &mut sink) {
                Ok(v) => v,
                Err(e) => {
                    return TestResult::error(format!("{sparse} at {x} fails where {jac} runs: {}\n{text}", e.message))
                }
            };
            let want = common::flat(&dense);
            match common::densify(&got, m, n) {
                // (A mutant may be undefined at the point: NaN where the dense one has NaN.)
                Ok((g, _))
                    if g.iter()
                        .zip(&want)
                        .all(|(a, b)| (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * (1.0 + b.abs())) => {}
                Ok(_) => return TestResult::error(format!("{sparse} at {x}: {got}, dense {dense}\n{text}")),
                Err(m) => return TestResult::error(format!("{sparse} at {x}: {m}: {got}\n{text}")),
            }
        }
        TestResult::passed()
    }
    quickcheck_deep("sparse_jacobians_of_well_typed_mutants_are_the_dense_ones", prop);
}

/// The derivatives of mutants are right: for every function a mutant's
/// `gdef`s name, at a random point where f, `[fwd f]` and `[rev f]` all
/// run and are finite, reverse agrees with forward (`<dr, J dx> = <J^T dr,
/// dx>`), and forward with central finite differences wherever those are
/// stable (the same at two step sizes: the point is not at a kink of an
/// `if` or `max` the mutation moved). The derivatives are optimised, so
/// the optimiser's rules are checked on bodies the examples do not have.
#[test]
fn derivatives_of_well_typed_mutants_agree_with_each_other_and_finite_differences() {
    fn prop(case: Case) -> TestResult {
        let Derived { text, analysis, funs, watch: _watch } =
            match derived_mutant(&case, &[Derivation::Fwd, Derivation::Rev]) {
                Ok(d) => d,
                Err(verdict) => return verdict,
            };
        let defs = analysis.defs();
        let mut interp = Interpreter::new(defs.iter().copied());
        interp.set_call_limit(MUTANT_OPS);
        let mut sink = std::io::sink();
        let mut rng = common::Rng((case.file as u64).wrapping_mul(31).wrapping_add(case.swaps.len() as u64));
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        for f in funs {
            let (fwd, rev) = (f.derived(Derivation::Fwd), f.derived(Derivation::Rev));
            let Some(sig) = analysis.table.get(&f) else { continue };
            let at = ksc_ir::FunName::typed(format!("{}$at", f.base), Type::unit());
            let x = match interp.call(&at, ksc_eval::Value::unit(), &mut sink) {
                Ok(x) => x,
                Err(_) => common::random_value(&sig.arg_ty, &mut rng),
            };
            let Ok(y) = interp.call(&f, x.clone(), &mut sink) else { continue };
            let (dx, dr) = (common::random_tangent(&x, &mut rng), common::random_tangent(&y, &mut rng));
            let pair =
                |a: &ksc_eval::Value, b: &ksc_eval::Value| ksc_eval::Value::Tuple(vec![a.clone(), b.clone()].into());
            let (Ok(jv), Ok(jr)) =
                (interp.call(&fwd, pair(&x, &dx), &mut sink), interp.call(&rev, pair(&x, &dr), &mut sink))
            else {
                continue;
            };
            let (jv, jr, y) = (common::flat(&jv), common::flat(&jr), common::flat(&y));
            if !finite(&jv) || !finite(&jr) || !finite(&y) {
                continue;
            }
            let (lhs, rhs) = (common::dot(&common::flat(&dr), &jv), common::dot(&jr, &common::flat(&dx)));
            if (lhs - rhs).abs() > 1e-8 * (1.0 + lhs.abs() + rhs.abs()) {
                return TestResult::error(format!("{f} at {x}: <dr, J dx> = {lhs} but <J^T dr, dx> = {rhs}\n{text}"));
            }
            let fd = |h: f64, interp: &mut Interpreter| -> Option<Vec<f64>> {
                let p = common::flat(&interp.call(&f, common::perturb(&x, &dx, h), &mut std::io::sink()).ok()?);
                let m = common::flat(&interp.call(&f, common::perturb(&x, &dx, -h), &mut std::io::sink()).ok()?);
                (p.len() == m.len()).then(|| p.iter().zip(&m).map(|(p, m)| (p - m) / (2.0 * h)).collect())
            };
            let (Some(fine), Some(coarse)) = (fd(1e-6, &mut interp), fd(1e-4, &mut interp)) else { continue };
            let near = |a: &[f64], b: &[f64], tol: f64| {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| (a - b).abs() <= tol * (1.0 + a.abs() + b.abs()))
            };
            if !finite(&fine) || !near(&fine, &coarse, 1e-4) {
                continue;
            }
            if !near(&jv, &fine, 1e-4) {
                return TestResult::error(format!("[fwd {f}] at {x}: {jv:?}, finite differences {fine:?}\n{text}"));
            }
        }
        TestResult::passed()
    }
    quickcheck_deep("derivatives_of_well_typed_mutants_agree_with_each_other_and_finite_differences", prop);
}

/// Checks `prop` on 100 mutants, in two halves of 50 on two threads with a
/// deep native stack (the interpreter recurses; a mutant may recurse until
/// its depth limit). The mutants are random either way; in halves, the
/// longest of these properties no longer runs on one core while the other
/// idles at the end of the binary.
fn quickcheck_deep(test: &str, prop: fn(Case) -> TestResult) {
    let seed = run_seed(test);
    let halves: Vec<_> = (0..2u64)
        .map(|half| {
            let g = Gen::from_size_and_seed(100, seed.wrapping_add(half));
            std::thread::Builder::new()
                .stack_size(512 << 20)
                .spawn(move || QuickCheck::new().rng(g).tests(50).max_tests(500).quickcheck(prop))
                .unwrap()
        })
        .collect();
    for h in halves {
        h.join().unwrap();
    }
}

/// The seed of a test's mutants: `KSC_ROBUST_SEED` if it is set (to
/// repeat a run), else a fresh one. It is written to the terminal, past
/// the test harness's capture, so that the mutants of a run that failed or
/// did not end can be made again.
fn run_seed(test: &str) -> u64 {
    use std::hash::BuildHasher;
    use std::io::Write;
    let seed = match std::env::var("KSC_ROBUST_SEED") {
        Ok(s) => s.parse().expect("KSC_ROBUST_SEED is a number"),
        Err(_) => std::collections::hash_map::RandomState::new().hash_one(test),
    };
    let _ = writeln!(std::io::stderr(), "{test}: mutants from KSC_ROBUST_SEED={seed}");
    seed
}

/// Writes a case to the terminal (past the harness's capture) when
/// deriving or checking it has taken longer than [`LONG_CASE`]: ksc must
/// end on every input, and the mutant's text is what a fix needs. It only
/// reports; no test here depends on the machine's speed.
struct Watch(std::sync::Arc<std::sync::atomic::AtomicBool>);

const LONG_CASE: std::time::Duration = std::time::Duration::from_secs(300);

impl Watch {
    fn start(text: &str) -> Watch {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, text) = (done.clone(), text.to_string());
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if start.elapsed() >= LONG_CASE {
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr(), "a mutant has taken over {LONG_CASE:?}:\n{text}");
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        Watch(done)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A mutant that type-checks, with the functions its `gdef`s name and
/// their derivatives `ds` derived and optimised.
struct Derived {
    text: String,
    analysis: ksc_types::Analysis,
    /// The functions the `gdef`s name (not derived ones) whose derivatives
    /// `ds` all derived, and whose arguments `common::random_value` makes.
    funs: Vec<ksc_ir::FunName>,
    /// Reports the case if it runs long, until the property is done with it.
    watch: Watch,
}

/// The mutant of `case` derived as [`Derived`] says, or the property's
/// verdict: discarded if it does not type-check, an error if deriving it
/// hit an internal error.
fn derived_mutant(case: &Case, ds: &[Derivation]) -> Result<Derived, TestResult> {
    let texts = examples();
    let text = mutate(&texts[case.file % texts.len()], case);
    let mut analysis = ksc_types::analyze(&text);
    if analysis.has_errors() {
        return Err(TestResult::discard());
    }
    let watch = Watch::start(&text);
    let mut funs: Vec<ksc_ir::FunName> = analysis
        .source
        .decls
        .iter()
        .filter_map(|d| match d {
            Decl::Gdef(g) if g.fun.derivs.is_empty() => Some(g.fun.clone()),
            _ => None,
        })
        .collect();
    funs.dedup();
    let requests: Vec<_> = funs.iter().flat_map(|f| ds.iter().map(|&d| f.derived(d))).collect();
    let mut derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
    if let Some((n, e)) = derived.errors.iter().find(|(_, e)| e.message.contains("internal error")) {
        return Err(TestResult::error(format!("{n}: {}\n{text}", e.message)));
    }
    let failed: Vec<_> = derived.errors.iter().map(|(n, _)| n.clone()).collect();
    funs.retain(|f| {
        ds.iter().all(|&d| !failed.contains(&f.derived(d)))
            && analysis.table.get(f).is_some_and(|sig| type_has_values(&sig.arg_ty))
    });
    let warnings = ksc_opt::pipeline::optimise_all(&mut derived.defs, &analysis.defs(), &[], &[]);
    if let Some(w) = warnings.iter().find(|w| w.contains("stopped")) {
        return Err(TestResult::error(format!("{w}\n{text}")));
    }
    analysis.derived = derived.defs;
    Ok(Derived { text, analysis, funs, watch })
}

/// Types `common::random_value` makes values of.
fn type_has_values(t: &Type) -> bool {
    match t {
        Type::Float | Type::Integer | Type::Bool => true,
        Type::Tuple(ts) => ts.iter().all(type_has_values),
        Type::Tensor(_, e) => type_has_values(e),
        _ => false,
    }
}

/// `[D f]` of every function of every shipped example (`ksc-examples`,
/// its subdirectories too) is built without an internal error: the
/// derivative builder never meets a term it cannot type (`ts_add` of a
/// value with Integer parts and its tangent used to build an ill-typed
/// `lmHCat` and panic).
#[test]
fn every_example_function_has_a_jacobian_without_internal_errors() {
    struct Defs<'d>(&'d [&'d ksc_ir::Def]);
    impl ksc_ad::Program for Defs<'_> {
        fn written(&self, name: &ksc_ir::FunName) -> Option<&ksc_ir::Def> {
            self.0.iter().copied().find(|d| &d.name == name)
        }
    }
    fn ks_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                ks_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "ks") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    ks_files(&std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ksc-examples"), &mut files);
    files.sort();
    let (mut tried, mut failures) = (0, Vec::new());
    for path in &files {
        let analysis = ksc_types::analyze(&std::fs::read_to_string(path).unwrap());
        if analysis.has_errors() {
            continue;
        }
        let defs = analysis.defs();
        for d in &defs {
            tried += 1;
            if let Err(e) = ksc_ad::jacobian_in(&Defs(&defs), d) {
                if e.message.contains("internal error") {
                    failures.push(format!("{}: [D {}]: {}", path.display(), d.name, e.message));
                }
            }
        }
    }
    assert!(tried > 100, "only {tried} functions");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
