//! Every function named by a `gdef` in `ksc-examples/ad/*.ks` (derived
//! functions too, for derivatives of derivatives) is checked numerically at
//! random points: `[fwd f]` against central finite differences of `f`, and
//! `[rev f]` against `[fwd f]` by the dot-product test
//! `<dr, J dx> = <J^T dr, dx>`; and the matrix of `[jac f]` against both:
//! `J dx` against the finite differences, `dr^T J` against `[rev f]`. Both
//! ways `[jac f]` computes the matrix (columns by forward mode, rows by
//! reverse) must be exercised. `[jac1 f]` must be the columns of `[jac f]`
//! that belong to f's first parameter. Without the optimiser, the
//! unsimplified `[D f]` of a written function is also evaluated as a
//! linear-map value by the interpreter and applied both ways, against
//! `[fwd f]` and `[rev f]`. A point for `f` can be given as `(def f$at S ()
//! ...)` (for sizes that must agree); otherwise vectors have 3 elements and
//! Integers are 2.

use crate::common;

use std::path::PathBuf;

use common::{densify, dot, flat, perturb, random_tangent, random_value, Rng};
use ksc_eval::{Interpreter, Value};
use ksc_ir::{Decl, Def, Derivation, FunName, Type};

/// The program's definitions, for deriving `[D f]`.
struct Defs<'d>(&'d [&'d Def]);

impl ksc_ad::Program for Defs<'_> {
    fn written(&self, name: &FunName) -> Option<&Def> {
        self.0.iter().copied().find(|d| &d.name == name)
    }
}

fn close_all(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol * (1.0 + x.abs() + y.abs()))
}

fn files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ksc-examples/ad");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ks"))
        .collect();
    v.sort();
    v
}

#[test]
fn derivatives_match_finite_differences_and_each_other() {
    check_all(false);
}

/// The same checks on the derivatives after the optimiser has simplified them.
#[test]
fn optimised_derivatives_match_finite_differences_and_each_other() {
    check_all(true);
}

fn check_all(optimise: bool) {
    let mut failures = Vec::new();
    let mut checked = 0;
    // How often [jac f] went by columns (forward) and by rows (reverse).
    let mut sweeps = [0; 2];
    // How often [jac1 f] had fewer columns than [jac f].
    let mut partial = 0;
    // How often [jacsparse f] stored fewer entries than the dense matrix.
    let mut sparser = 0;
    // How often [D f] was evaluated as a linear map.
    let mut lm_checked = 0;
    for path in files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut analysis = ksc_types::analyze(&text);
        assert!(!analysis.has_errors(), "{}: {:?}", path.display(), analysis.diagnostics);
        let funs: Vec<FunName> = analysis
            .source
            .decls
            .iter()
            .filter_map(|d| match d {
                Decl::Gdef(g) => Some(g.fun.clone()),
                _ => None,
            })
            .fold(Vec::new(), |mut v, f| {
                if !v.contains(&f) {
                    v.push(f);
                }
                v
            });
        let requests: Vec<FunName> = funs
            .iter()
            .flat_map(|f| {
                [
                    Derivation::Fwd,
                    Derivation::Rev,
                    Derivation::Jac,
                    Derivation::Jac1,
                    Derivation::JacSparse,
                    Derivation::JacSparse1,
                ]
                .map(|d| f.derived(d))
            })
            .collect();
        let mut derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
        assert!(derived.errors.is_empty(), "{}: {:?}", path.display(), derived.errors);
        if optimise {
            let warnings = ksc_opt::pipeline::optimise_all(&mut derived.defs, &analysis.defs(), &[], &[]);
            assert!(warnings.is_empty(), "{}: {warnings:?}", path.display());
        }
        analysis.derived = derived.defs;
        let defs = analysis.defs();
        let mut interp = Interpreter::new(defs.iter().copied());
        let mut sink = std::io::sink();
        let mut rng = Rng(12345);
        // [D g] of every function that has one (callees' are called), and
        // an interpreter that evaluates them as linear-map values.
        let jacobians: Vec<Def> = if optimise {
            Vec::new()
        } else {
            defs.iter().filter_map(|d| ksc_ad::jacobian_in(&Defs(&defs), d).ok().map(|j| j.0)).collect()
        };
        let mut lm_interp = Interpreter::new(defs.iter().copied().chain(&jacobians));
        for f in funs {
            let sig = analysis.table.get(&f).unwrap().clone();
            let at = FunName::typed(format!("{}$at", f.base), Type::unit());
            // (Only for written functions: the interpreter's linear maps share
            // no work between uses, which makes [D f] of a derivative slow.)
            let jacobian = (!optimise && f.derivs.is_empty()).then(|| f.derived(Derivation::D));
            for trial in 0..3 {
                let given = if f.derivs.is_empty() { interp.call(&at, Value::unit(), &mut sink).ok() } else { None };
                // A given point is used for every trial (with new directions).
                let _ = trial;
                let x = match given {
                    Some(x) => x,
                    None => random_value(&sig.arg_ty, &mut rng),
                };
                let dx = random_tangent(&x, &mut rng);
                let y = interp.call(&f, x.clone(), &mut sink).unwrap_or_else(|e| panic!("{f}: {}", e.message));
                let dr = random_tangent(&y, &mut rng);
                let fwd = interp
                    .call(&f.derived(Derivation::Fwd), Value::Tuple(vec![x.clone(), dx.clone()].into()), &mut sink)
                    .unwrap_or_else(|e| panic!("[fwd {f}]: {}", e.message));
                let rev = interp
                    .call(&f.derived(Derivation::Rev), Value::Tuple(vec![x.clone(), dr.clone()].into()), &mut sink)
                    .unwrap_or_else(|e| panic!("[rev {f}]: {}", e.message));
                // Central differences along dx.
                let h = 1e-6;
                let yp = interp.call(&f, perturb(&x, &dx, h), &mut sink).unwrap();
                let ym = interp.call(&f, perturb(&x, &dx, -h), &mut sink).unwrap();
                let fd: Vec<f64> = flat(&yp).iter().zip(flat(&ym)).map(|(p, m)| (p - m) / (2.0 * h)).collect();
                let jv = flat(&fwd);
                if fd.len() != jv.len() || fd.iter().zip(&jv).any(|(a, b)| (a - b).abs() > 1e-5 * (1.0 + a.abs())) {
                    failures.push(format!("{}: [fwd {f}] at {x}: {jv:?}, finite differences {fd:?}", path.display()));
                }
                let lhs = dot(&flat(&dr), &jv);
                let rhs = dot(&flat(&rev), &flat(&dx));
                if (lhs - rhs).abs() > 1e-9 * (1.0 + lhs.abs() + rhs.abs()) {
                    failures.push(format!(
                        "{}: [rev {f}] at {x}: <dr, J dx> = {lhs} but <J^T dr, dx> = {rhs}",
                        path.display()
                    ));
                }
                // [D g] of a callee that is not differentiated through its
                // Jacobian (a tape's forward pass) is only declared.
                let lm = jacobian.as_ref().and_then(|j| match lm_interp.call(j, x.clone(), &mut sink) {
                    Ok(m) => Some(m),
                    Err(e) if e.message.contains("it is only declared") => None,
                    Err(e) => panic!("[D {f}]: {}", e.message),
                });
                if let Some(m) = lm {
                    lm_checked += 1;
                    let jdx = lm_interp
                        .apply_linear_map(&m, dx.clone())
                        .unwrap_or_else(|e| panic!("[D {f}] ⊙ dx: {}", e.message));
                    if !close_all(&flat(&jdx), &flat(&fwd), 1e-9) {
                        failures.push(format!("{}: [D {f}] ⊙ dx at {x}: {jdx}, [fwd {f}] {fwd}", path.display()));
                    }
                    let rj = lm_interp
                        .apply_linear_map_r(dr.clone(), &m)
                        .unwrap_or_else(|e| panic!("dr ⊙ [D {f}]: {}", e.message));
                    if !close_all(&flat(&rj), &flat(&rev), 1e-9) {
                        failures.push(format!("{}: dr ⊙ᴿ [D {f}] at {x}: {rj}, [rev {f}] {rev}", path.display()));
                    }
                }
                // The whole Jacobian, applied both ways.
                let jac = interp
                    .call(&f.derived(Derivation::Jac), x.clone(), &mut sink)
                    .unwrap_or_else(|e| panic!("[jac {f}]: {}", e.message));
                let (dxs, drs) = (flat(&dx), flat(&dr));
                let Value::Tensor(j) = &jac else { panic!("[jac {f}] is not a tensor: {jac}") };
                let entries = flat(&jac);
                if j.shape != [drs.len(), dxs.len()] {
                    failures.push(format!(
                        "{}: [jac {f}] at {x} is {:?}, not {} x {}",
                        path.display(),
                        j.shape,
                        drs.len(),
                        dxs.len()
                    ));
                } else {
                    sweeps[usize::from(dxs.len() > drs.len())] += 1;
                    let row = |r: usize| &entries[r * dxs.len()..(r + 1) * dxs.len()];
                    let j_dx: Vec<f64> = (0..drs.len()).map(|r| dot(row(r), &dxs)).collect();
                    if j_dx.iter().zip(&fd).any(|(a, b)| (a - b).abs() > 1e-5 * (1.0 + b.abs())) {
                        failures.push(format!(
                            "{}: [jac {f}] at {x}: J dx = {j_dx:?}, finite differences {fd:?}",
                            path.display()
                        ));
                    }
                    let dr_j: Vec<f64> =
                        (0..dxs.len()).map(|c| (0..drs.len()).map(|r| drs[r] * row(r)[c]).sum()).collect();
                    let rev = flat(&rev);
                    if dr_j.iter().zip(&rev).any(|(a, b)| (a - b).abs() > 1e-9 * (1.0 + b.abs())) {
                        failures
                            .push(format!("{}: [jac {f}] at {x}: dr^T J = {dr_j:?}, [rev f] {rev:?}", path.display()));
                    }
                    // [jac1 f]: the columns of the first parameter.
                    let params = defs.iter().find(|d| d.name == f).map_or(1, |d| d.params.len());
                    let first = match &x {
                        Value::Tuple(xs) if params >= 2 => flat(&xs[0]).len(),
                        _ => dxs.len(),
                    };
                    let jac1 = interp
                        .call(&f.derived(Derivation::Jac1), x.clone(), &mut sink)
                        .unwrap_or_else(|e| panic!("[jac1 {f}]: {}", e.message));
                    let expected: Vec<f64> = (0..drs.len()).flat_map(|r| row(r)[..first].to_vec()).collect();
                    let got = flat(&jac1);
                    if got.len() != expected.len()
                        || got.iter().zip(&expected).any(|(a, b)| (a - b).abs() > 1e-9 * (1.0 + b.abs()))
                    {
                        failures.push(format!(
                            "{}: [jac1 {f}] at {x}: {got:?}, the first {first} columns of [jac f]: {expected:?}",
                            path.display()
                        ));
                    }
                    partial += usize::from(first < dxs.len());
                    // The sparse forms: the same matrices.
                    for (d, cols, dense) in
                        [(Derivation::JacSparse, dxs.len(), entries.clone()), (Derivation::JacSparse1, first, expected)]
                    {
                        let sparse = interp
                            .call(&f.derived(d), x.clone(), &mut sink)
                            .unwrap_or_else(|e| panic!("[{} {f}]: {}", d.keyword(), e.message));
                        match densify(&sparse, drs.len(), cols) {
                            Ok((got, nnz)) => {
                                if got.iter().zip(&dense).any(|(a, b)| (a - b).abs() > 1e-9 * (1.0 + b.abs())) {
                                    failures.push(format!(
                                        "{}: [{} {f}] at {x}: {sparse}, dense {dense:?}",
                                        path.display(),
                                        d.keyword()
                                    ));
                                }
                                sparser += usize::from(nnz < dense.len());
                            }
                            Err(m) => failures.push(format!(
                                "{}: [{} {f}] at {x}: {m}: {sparse}",
                                path.display(),
                                d.keyword()
                            )),
                        }
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 75, "only {checked} checks");
    assert!(sweeps.iter().all(|&k| k >= 10), "[jac f] by columns {} times, by rows {} times", sweeps[0], sweeps[1]);
    assert!(partial >= 10, "[jac1 f] differed from [jac f] only {partial} times");
    assert!(optimise || lm_checked >= 75, "[D f] was evaluated as a linear map only {lm_checked} times");
    assert!(sparser >= 10, "[jacsparse f] was sparser than [jac f] only {sparser} times");
}
