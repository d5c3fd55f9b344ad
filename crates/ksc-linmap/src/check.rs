//! Checking the laws against the reference semantics: for random instances
//! of each law's left side, both sides evaluate (in `ksc-eval`) to the same
//! linear map, compared as dense matrices, or to the same tangent. Failures
//! are shrunk to small counterexamples. `ksc laws` and the test suite run
//! the same checks.

use std::time::{Duration, Instant};

use quickcheck::Gen;

use ksc_eval::{Interpreter, Matrix, Value};
use ksc_ir::prim::Accumulators;
use ksc_ir::{Body, Def, ExprId, FunName, Prim, Type};

use crate::laws::{Instance, Law};
use crate::spec::{MapSpec, Numbers, Shape};
use ksc_ir::builder::Builder;

/// Relative tolerance of comparisons: |a - b| <= TOL * max(1, |a| + |b|).
pub const TOL: f64 = 1e-9;

/// How a law fared.
#[derive(Clone, Debug)]
pub struct LawReport {
    pub name: &'static str,
    pub statement: &'static str,
    /// Instances on which the law fired and both sides agreed.
    pub passed: usize,
    pub failure: Option<Counterexample>,
    pub elapsed: Duration,
}

/// A (shrunk) instance on which the two sides differ.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The left side, as `.ks`.
    pub lhs: String,
    /// The right side the law produced, as `.ks`.
    pub rhs: String,
    /// What differs.
    pub detail: String,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "left side:  {}\nright side: {}\n{}", self.lhs, self.rhs, self.detail)
    }
}

enum Outcome {
    Agree,
    /// The law did not fire (the instance does not match after shrinking,
    /// or a side condition fails).
    NotApplicable,
    Differ(Counterexample),
}

/// The left side of an instance, built in `b`.
fn build_instance(b: &mut Builder, inst: &Instance) -> Option<ExprId> {
    Some(match inst {
        Instance::Map(m) => {
            if !m.well_formed() {
                return None;
            }
            m.build(b)
        }
        Instance::Apply(m, ns) => {
            if !m.well_formed() {
                return None;
            }
            let m2 = m.build(b);
            let x = m.source().tangent_value(b, &mut ns.clone());
            b.prim(Prim::LmApply, vec![m2, x])
        }
        Instance::ApplyR(ns, m) => {
            if !m.well_formed() {
                return None;
            }
            let m2 = m.build(b);
            let r = m.target().tangent_value(b, &mut ns.clone());
            b.prim(Prim::LmApplyR, vec![r, m2])
        }
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOL * (a.abs() + b.abs()).max(1.0) || (a.is_nan() && b.is_nan())
}

fn flat(v: &Value) -> Vec<f64> {
    let mut out = Vec::new();
    ksc_eval::flatten_tangent(v, &mut out);
    out
}

fn compare_vectors(what: &str, a: &[f64], b: &[f64]) -> Option<String> {
    if a.len() != b.len() {
        return Some(format!("{what}: {} numbers on the left, {} on the right", a.len(), b.len()));
    }
    let k = (0..a.len()).find(|&k| !close(a[k], b[k]))?;
    Some(format!("{what}: component {k} is {} on the left and {} on the right\nleft:  {a:?}\nright: {b:?}", a[k], b[k]))
}

fn compare_matrices(a: &Matrix, b: &Matrix) -> Option<String> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Some(format!("the left side is {}x{}, the right side {}x{}", a.rows, a.cols, b.rows, b.cols));
    }
    compare_vectors("dense matrices (row-major)", &a.data, &b.data)
}

/// Evaluates a closed expression of `body`.
fn def_of(name: &str, body: &Body, root: ExprId) -> Def {
    Def {
        name: FunName::typed(name, Type::unit()),
        params: Vec::new(),
        ret_ty: body.ty(root).clone(),
        body: body.clone(),
        root,
    }
}

fn run_instance(law: &Law, inst: &Instance) -> Outcome {
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let Some(lhs) = build_instance(&mut b, inst) else { return Outcome::NotApplicable };
    let lhs_text = ksc_ir::print::print_expr(b.body, lhs);
    let Some(rhs) = (law.rewrite)(&mut b, lhs) else { return Outcome::NotApplicable };
    let rhs_text = ksc_ir::print::print_expr(&body, rhs);
    let differ =
        |detail: String| Outcome::Differ(Counterexample { lhs: lhs_text.clone(), rhs: rhs_text.clone(), detail });
    if body.ty(lhs) != body.ty(rhs) {
        return differ(format!("the law changed the type from `{}` to `{}`", body.ty(lhs), body.ty(rhs)));
    }
    let defs = [def_of("lhs", &body, lhs), def_of("rhs", &body, rhs)];
    let mut interp = Interpreter::new(defs.iter());
    let mut sink = std::io::sink();
    let mut eval =
        |name: &str| interp.call(&FunName::typed(name, Type::unit()), Value::unit(), &mut sink).map_err(|e| e.message);
    let (l, r) = match (eval("lhs"), eval("rhs")) {
        (Ok(l), Ok(r)) => (l, r),
        (Err(e), _) => return differ(format!("the left side fails: {e}")),
        (_, Err(e)) => return differ(format!("the right side fails: {e}")),
    };
    let problem = match (&l, &r) {
        (Value::LinMap(_), Value::LinMap(_)) => match (interp.dense_matrix(&l), interp.dense_matrix(&r)) {
            (Ok(a), Ok(b)) => compare_matrices(&a, &b),
            (Err(e), _) | (_, Err(e)) => Some(format!("cannot materialise: {}", e.message)),
        },
        _ => compare_vectors("tangents", &flat(&l), &flat(&r)),
    };
    match problem {
        None => Outcome::Agree,
        Some(detail) => differ(detail),
    }
}

/// Simpler instances of the same law.
fn shrink_instance(inst: &Instance) -> Vec<Instance> {
    let simple = Numbers(vec![1.0], 0);
    match inst {
        Instance::Map(m) => m.shrink().map(Instance::Map).collect(),
        Instance::Apply(m, ns) => {
            let mut out: Vec<Instance> = m.shrink().map(|m2| Instance::Apply(m2, ns.clone())).collect();
            if *ns != simple {
                out.push(Instance::Apply(m.clone(), simple));
            }
            out
        }
        Instance::ApplyR(ns, m) => {
            let mut out: Vec<Instance> = m.shrink().map(|m2| Instance::ApplyR(ns.clone(), m2)).collect();
            if *ns != simple {
                out.push(Instance::ApplyR(simple, m.clone()));
            }
            out
        }
    }
}

/// Greedy shrinking: while some simpler instance still fails, take it.
fn shrink_failure(law: &Law, mut inst: Instance, mut cx: Counterexample) -> Counterexample {
    for _ in 0..200 {
        let next = shrink_instance(&inst).into_iter().find_map(|s| match run_instance(law, &s) {
            Outcome::Differ(c) => Some((s, c)),
            _ => None,
        });
        match next {
            Some((s, c)) => {
                inst = s;
                cx = c;
            }
            None => break,
        }
    }
    cx
}

/// The generator for case number `k`: sizes grow from 1 to 3 (vector
/// lengths up to 3, nesting up to 3), so small instances come first.
fn generator(seed: u64, k: usize) -> Gen {
    Gen::from_size_and_seed(1 + (k / 16).min(2), seed.wrapping_mul(6364136223846793005).wrapping_add(k as u64))
}

/// Checks one law on `cases` random instances.
pub fn check_law(law: &Law, cases: usize, seed: u64) -> LawReport {
    let start = Instant::now();
    let mut passed = 0;
    let mut failure = None;
    let mut tries = 0;
    while passed < cases && tries < cases * 20 {
        tries += 1;
        let inst = (law.instance)(&mut generator(seed, tries));
        match run_instance(law, &inst) {
            Outcome::Agree => passed += 1,
            Outcome::NotApplicable => {}
            Outcome::Differ(c) => {
                failure = Some(shrink_failure(law, inst, c));
                break;
            }
        }
    }
    if failure.is_none() && passed < cases {
        failure = Some(Counterexample {
            lhs: String::new(),
            rhs: String::new(),
            detail: format!(
                "the law fired on only {passed} of {tries} of its own random instances: its generator or its side conditions are wrong"
            ),
        });
    }
    LawReport { name: law.name, statement: law.statement, passed, failure, elapsed: start.elapsed() }
}

/// The adjoint property of transposition, for random maps built from every
/// combinator: `<mᵀ ⊙ r, s> = <r, m ⊙ s>`, and the dense matrix of `mᵀ` is
/// the transpose of that of `m`. One case in four is a fold-like map
/// (`lmFold`, `lmScan`, `lmScanBlocks`), whose reverse application the
/// interpreter computes by a backward pass of its own.
pub fn check_transposes(cases: usize, seed: u64) -> LawReport {
    let start = Instant::now();
    let mut passed = 0;
    let mut failure = None;
    for k in 0..cases {
        let mut g = generator(seed, k);
        let (s, t) = (Shape::arbitrary(&mut g, 2), Shape::arbitrary(&mut g, 2));
        let m = if k % 4 == 3 {
            let kinds = [Accumulators::Last, Accumulators::All, Accumulators::AfterFirst];
            let kept = *g.choose(&kinds).unwrap_or(&Accumulators::Last);
            MapSpec::arbitrary_fold(&mut g, kept)
        } else {
            MapSpec::arbitrary(&mut g, &s, &t, 3)
        };
        let numbers = (Numbers::arbitrary(&mut g), Numbers::arbitrary(&mut g));
        match adjoint_case(&m, &numbers) {
            None => passed += 1,
            Some(mut c) => {
                // Greedy shrinking of the map.
                let mut m = m;
                'outer: for _ in 0..200 {
                    for m2 in m.shrink() {
                        if let Some(c2) = adjoint_case(&m2, &numbers) {
                            m = m2;
                            c = c2;
                            continue 'outer;
                        }
                    }
                    break;
                }
                failure = Some(c);
                break;
            }
        }
    }
    LawReport {
        name: "transpose-adjoint",
        statement: "<mᵀ ⊙ r, s> = <r, m ⊙ s>, dense(mᵀ) = dense(m)ᵀ",
        passed,
        failure,
        elapsed: start.elapsed(),
    }
}

fn adjoint_case(m: &MapSpec, (ns, nr): &(Numbers, Numbers)) -> Option<Counterexample> {
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let map = m.build(&mut b);
    let text = ksc_ir::print::print_expr(b.body, map);
    let map2 = b.copy(map);
    let mt = b.prim(Prim::LmTranspose, vec![map2]);
    let s = m.source().tangent_value(&mut b, &mut ns.clone());
    let r = m.target().tangent_value(&mut b, &mut nr.clone());
    let defs = [def_of("m", &body, map), def_of("mt", &body, mt), def_of("s", &body, s), def_of("r", &body, r)];
    let mut interp = Interpreter::new(defs.iter());
    let mut sink = std::io::sink();
    let cx = |detail: String| Counterexample { lhs: text.clone(), rhs: format!("(lmTranspose {text})"), detail };
    let mut get =
        |n: &str| interp.call(&FunName::typed(n, Type::unit()), Value::unit(), &mut sink).map_err(|e| e.message);
    let (mv, mtv, sv, rv) = match (get("m"), get("mt"), get("s"), get("r")) {
        (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
        _ => return Some(cx("evaluation failed".to_string())),
    };
    #[allow(clippy::result_large_err)]
    let result = (|| -> Result<Option<String>, ksc_eval::RuntimeError> {
        let ms = interp.apply_linear_map(&mv, sv.clone())?;
        let mtr = interp.apply_linear_map_r(rv.clone(), &mv)?;
        let lhs: f64 = flat(&mtr).iter().zip(flat(&sv)).map(|(a, b)| a * b).sum();
        let rhs: f64 = flat(&rv).iter().zip(flat(&ms)).map(|(a, b)| a * b).sum();
        if !close(lhs, rhs) {
            return Ok(Some(format!("<mᵀ r, s> = {lhs} but <r, m s> = {rhs}")));
        }
        let (dm, dmt) = (interp.dense_matrix(&mv)?, interp.dense_matrix(&mtv)?);
        Ok(compare_matrices(&dm.transpose(), &dmt))
    })();
    match result {
        Ok(None) => None,
        Ok(Some(d)) => Some(cx(d)),
        Err(e) => Some(cx(format!("evaluation failed: {}", e.message))),
    }
}
