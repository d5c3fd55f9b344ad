//! The CL translation on every function of the examples: for each function
//! of `ksc-examples/*.ks` and `ksc-examples/ad/*.ks` (and the functions
//! their `gdef`s derive) that CL supports,
//!
//! 1. its CL term type-checks (figure 11) with the function's type;
//! 2. evaluating the term (figure 10) gives the interpreter's value and
//!    output on the original, at several seeded random well-typed arguments
//!    (or the point `f$at` a file gives; arguments on which the original
//!    fails are skipped);
//! 3. the round trip Core -> CL -> Core gives a definition that the
//!    front end's checker accepts and that evaluates to the same value and
//!    output.
//!
//! Functions CL does not support must fail with an `Unsupported` error, and
//! enough functions and points must be checked for the test to mean
//! something. (Breaking the translations on purpose makes this test fail;
//! a round trip that swaps the branches of an `if` can also make a
//! tail-recursive original loop forever, since the interpreter has no
//! fuel.)

use std::path::PathBuf;
use std::rc::Rc;

use ksc_cl::{ErrorKind, InterpRuntime};
use ksc_eval::{Interpreter, Tensor, Value};
use ksc_ir::{Decl, Def, FunName, Type};
use ksc_types::check::Checker;
use ksc_types::{DeclSpans, FileRef, GlobalTable};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn float(&mut self) -> f64 {
        (self.next() as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A random value of type `t` whose vectors all have `n` elements (so
/// sizes agree) and whose Integers are below `n` (so they index them).
fn random_value(t: &Type, n: usize, rng: &mut Rng) -> Option<Value> {
    Some(match t {
        Type::Float => Value::Float(0.3 + rng.float()),
        Type::Integer => Value::Integer(rng.below(n as u64) as i64),
        Type::Bool => Value::Bool(rng.below(2) == 1),
        Type::String => Value::string(["a", "bc", ""][rng.below(3) as usize]),
        Type::Tuple(ts) => Value::tuple(ts.iter().map(|t| random_value(t, n, rng)).collect::<Option<_>>()?),
        Type::Tensor(r, e) => {
            let shape = vec![n; *r];
            let data = (0..n.pow(*r as u32)).map(|_| random_value(e, n, rng)).collect::<Option<_>>()?;
            Value::Tensor(Rc::new(Tensor { shape, data }))
        }
        Type::Lam(..) | Type::LM(..) | Type::Unknown => return None,
    })
}

/// Structural equality where NaN equals NaN and floats compare by bits (so
/// -0.0 differs from 0.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (Value::Tuple(xs), Value::Tuple(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys.iter()).all(|(x, y)| same(x, y))
        }
        (Value::Tensor(x), Value::Tensor(y)) => {
            x.shape == y.shape && x.data.len() == y.data.len() && x.data.iter().zip(&y.data).all(|(p, q)| same(p, q))
        }
        (a, b) => a == b,
    }
}

fn files() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ksc-examples");
    let mut v = Vec::new();
    for dir in [root.clone(), root.join("ad")] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "ks"))
            .collect();
        here.sort();
        v.extend(here);
    }
    v
}

/// Files whose `main` is not evaluated here: `deep_recursion.ks`'s runs
/// derivatives over 100,000 steps and calls, which unoptimised (as
/// `derive_requested` gives them here, without the derived-function
/// pipeline) take about 15 s of this test's time in the interpreter. Their
/// other functions are checked as every file's.
const SLOW_MAINS: [&str; 1] = ["deep_recursion.ks"];

/// The most interpreter operations a point may take to be evaluated by
/// CL's evaluator too.
const CL_WORK: u64 = 200_000;

#[derive(Default)]
struct Tally {
    functions: usize,
    points: usize,
    skipped_points: usize,
    large_points: usize,
    unsupported: Vec<String>,
    failures: Vec<String>,
    forms: std::collections::BTreeSet<&'static str>,
}

/// The forms of CL a term uses.
fn forms(c: &ksc_cl::Cl, out: &mut std::collections::BTreeSet<&'static str>) {
    use ksc_cl::Cl;
    c.visit(&mut |x| {
        out.insert(match x {
            Cl::Id => "I",
            Cl::Konst(_) => "K",
            Cl::Prune { .. } => "P",
            Cl::Fun(_) => "F",
            Cl::Comp(..) => "comp",
            Cl::Tuple(_) => "tuple",
            Cl::If(..) => "if",
            Cl::Let { .. } => "let",
            Cl::Build { .. } => "build",
            Cl::Fold { .. } => "fold",
            Cl::Assert(..) => "assert",
            Cl::Prim { .. } => "prim",
        });
    });
}

#[test]
fn cl_round_trip_preserves_every_example_function() {
    // The files, shared out to one thread per core (each with its own
    // tally, merged in the files' order): each file is checked alone.
    let files = files();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(files.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut tallies: Vec<(usize, Tally)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(1 << 30)
                    .spawn_scoped(s, || {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(path) = files.get(i) else { break };
                            let mut tally = Tally::default();
                            check_file(path, &mut tally);
                            done.push((i, tally));
                        }
                        done
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    tallies.sort_by_key(|(i, _)| *i);
    let mut tally = Tally::default();
    for (_, t) in tallies {
        tally.functions += t.functions;
        tally.points += t.points;
        tally.skipped_points += t.skipped_points;
        tally.large_points += t.large_points;
        tally.unsupported.extend(t.unsupported);
        tally.failures.extend(t.failures);
        tally.forms.extend(t.forms);
    }
    eprintln!(
        "CL round trip: {} functions, {} points checked ({} skipped: the original fails there; {} left to the interpreter: over {CL_WORK} operations); unsupported:\n  {}",
        tally.functions,
        tally.points,
        tally.skipped_points,
        tally.large_points,
        tally.unsupported.join("\n  ")
    );
    assert!(tally.failures.is_empty(), "{} failures:\n{}", tally.failures.len(), tally.failures.join("\n"));
    assert!(tally.functions >= 300, "only {} functions checked", tally.functions);
    assert!(tally.points >= 900, "only {} points checked", tally.points);
    for form in ["I", "K", "P", "F", "comp", "tuple", "if", "let", "build", "fold", "assert", "prim"] {
        assert!(tally.forms.contains(form), "no function used the CL form `{form}`");
    }
}

fn check_file(path: &std::path::Path, tally: &mut Tally) {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let mut analysis = ksc_types::analyze(&text);
    assert!(!analysis.has_errors(), "{file}: {:?}", analysis.diagnostics);
    let requests: Vec<FunName> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
    let derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
    analysis.derived = derived.defs;
    let defs: Vec<&Def> = analysis.defs();
    // The global table with the derived functions too (to check the round trips).
    let mut table: GlobalTable = analysis.table.clone();
    for d in &analysis.derived {
        let mut checker = Checker::new(&mut table, FileRef::Source);
        checker.check_decl(0, &mut Decl::Def(d.clone()), &DeclSpans::default());
    }
    let sigs = |f: &FunName| {
        table
            .get(f)
            .map(|s| (s.arg_ty.clone(), s.ret_ty.clone()))
            .or_else(|| analysis.derived.iter().find(|d| &d.name == f).map(|d| (d.arg_ty(), d.ret_ty.clone())))
    };
    let mut functions: Vec<&Def> = analysis
        .source
        .decls
        .iter()
        .filter_map(|d| match d {
            Decl::Def(d) => Some(d),
            _ => None,
        })
        .collect();
    functions.extend(analysis.derived.iter());
    let mut rng = Rng(0x5eed ^ text.len() as u64);
    for f in functions {
        let name = format!("{file}: {}", f.name);
        if f.name.base == "main" && SLOW_MAINS.contains(&file.as_str()) {
            continue;
        }
        let c = match ksc_cl::def_to_cl(f) {
            Ok(c) => c,
            Err(e) => {
                if e.kind != ErrorKind::Unsupported {
                    tally.failures.push(format!("{name}: translation failed: {e}"));
                } else {
                    tally.unsupported.push(format!("{name}: {e}"));
                }
                continue;
            }
        };
        forms(&c, &mut tally.forms);
        // (i) The term has the function's type.
        let (s, t) = ksc_cl::def_type(f);
        if let Err(e) = ksc_cl::check(&c, &s, &t, &sigs) {
            tally.failures.push(format!("{name}: the CL term does not type-check: {e}\n{}", c.pretty()));
            continue;
        }
        // (iii) The round trip is a definition the front end accepts.
        let mut back = match ksc_cl::cl_def(f) {
            Ok(d) => d,
            Err(e) => {
                tally.failures.push(format!("{name}: back to Core failed: {e}"));
                continue;
            }
        };
        back.name = FunName::plain("cl$round$trip");
        let printed = ksc_ir::print::print_def(&back);
        let mut scratch = table.clone();
        let mut decl = Decl::Def(back);
        let mut checker = Checker::new(&mut scratch, FileRef::Source);
        checker.check_decl(0, &mut decl, &DeclSpans::default());
        if !checker.diagnostics.is_empty() {
            let msgs: Vec<String> = checker.diagnostics.iter().map(|d| d.message.clone()).collect();
            tally.failures.push(format!("{name}: the round trip does not type-check: {msgs:?}\n{printed}"));
            continue;
        }
        let Decl::Def(back) = decl else { unreachable!() };
        if s.contains_unknown() || t.contains_unknown() || format!("{t}").contains("LM") {
            continue;
        }
        // (ii) and (iii) at random points.
        let at = FunName::typed(format!("{}$at", f.name.base), Type::unit());
        let given = f.name.derivs.is_empty() && defs.iter().any(|d| d.name == at);
        let mut interp = Interpreter::new(defs.iter().copied());
        let mut with_back: Vec<&Def> = defs.clone();
        with_back.push(&back);
        let mut interp_back = Interpreter::new(with_back.iter().copied());
        let mut checked_points = 0;
        for (trial, n) in [3usize, 2, 4].into_iter().enumerate() {
            let x = if given {
                interp.call(&at, Value::unit(), &mut std::io::sink()).ok()
            } else {
                random_value(&s, n, &mut rng)
            };
            let Some(x) = x else { break };
            let mut out = Vec::new();
            let before = interp.operations();
            let Ok(want) = interp.call(&f.name, x.clone(), &mut out) else {
                tally.skipped_points += 1;
                continue;
            };
            // CL's evaluator is figure 10 written out, for meaning, not
            // speed (it copies where the interpreter moves): points that
            // take the interpreter more than `CL_WORK` operations (the
            // examples' `main`s over thousands of elements) are left to it.
            if interp.operations() - before > CL_WORK {
                tally.large_points += 1;
                break;
            }
            let mut cl_out = Vec::new();
            let got = {
                let mut rt = InterpRuntime::new(defs.iter().copied(), &mut cl_out);
                ksc_cl::eval(&c, x.clone(), &mut rt)
            };
            match got {
                Ok(v) if same(&v, &want) && cl_out == out => {}
                Ok(v) => tally.failures.push(format!(
                    "{name} at {x}: CL gives {v} printing {:?}, the interpreter {want} printing {:?}",
                    String::from_utf8_lossy(&cl_out),
                    String::from_utf8_lossy(&out)
                )),
                Err(e) => tally.failures.push(format!("{name} at {x}: CL fails: {e}\n{}", c.pretty())),
            }
            let mut back_out = Vec::new();
            match interp_back.call(&back.name, x.clone(), &mut back_out) {
                Ok(v) if same(&v, &want) && back_out == out => {}
                Ok(v) => tally.failures.push(format!(
                    "{name} at {x}: the round trip gives {v} printing {:?}, the original {want} printing {:?}\n{printed}",
                    String::from_utf8_lossy(&back_out),
                    String::from_utf8_lossy(&out)
                )),
                Err(e) => tally.failures.push(format!("{name} at {x}: the round trip fails: {}\n{printed}", e.message)),
            }
            checked_points += 1;
            tally.points += 1;
            // A given point, or the one value of `()`, is the same at every
            // trial: once is enough.
            if (given || s == Type::unit()) && trial == 0 {
                break;
            }
        }
        if checked_points > 0 {
            tally.functions += 1;
        }
    }
}
