//! Automatic differentiation through full Jacobians: `[D f]`
//! ([`derive::jacobian_def`]), then `[fwd f]` and `[rev f]` from it
//! ([`apply`]). [`derive_requested`] derives what a program's `gdef`s ask
//! for, and the derivatives of callees on demand.

pub mod apply;
pub mod derive;
pub mod jac;
pub mod jacobians;

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::{Def, Derivation, FunName};

pub use derive::AdError;

/// The derived definitions, and the errors of those that could not be derived.
#[derive(Debug, Default)]
pub struct Derived {
    /// `[fwd f]` and `[rev f]`, in order of derivation.
    pub defs: Vec<Def>,
    /// The `[D f]` they came from (linear-map valued: for printing and
    /// checking, not for code generation).
    pub jacobians: Vec<Def>,
    pub errors: Vec<(FunName, AdError)>,
}

/// Derives every requested function (`[fwd f]` or `[rev f]` with `f` fully
/// named), and, on demand, the derivatives of the functions they call.
/// `existing` are the definitions of the program (prelude included); a
/// derivative defined there by hand is used, not derived.
pub fn derive_requested(existing: &[&Def], requests: &[FunName]) -> Derived {
    let mut by_name: FxHashMap<FunName, Def> = FxHashMap::default();
    let known: FxHashSet<FunName> = existing.iter().map(|d| d.name.clone()).collect();
    let mut out = Derived::default();
    let mut jacobians: FxHashMap<FunName, (Def, derive::Witnesses)> = FxHashMap::default();
    let mut work: Vec<FunName> = requests.to_vec();
    let mut failed: FxHashSet<FunName> = FxHashSet::default();
    while let Some(name) = work.pop() {
        if known.contains(&name) || by_name.contains_key(&name) || failed.contains(&name) {
            continue;
        }
        let Some((d, inner)) = name.inner() else { continue };
        if matches!(d, Derivation::SufFwdPass | Derivation::SufRevPass | Derivation::SufRev | Derivation::Shape | Derivation::Jac | Derivation::Jac1) {
            // The split passes: the forward pass keeps the argument as its
            // residual, the reverse pass is `[rev f]` at it. `[shape f]` is
            // the shape of f's result (simplified later where the shape
            // rules allow). `[jac f]` calls `[fwd f]` or `[rev f]` per
            // column or row. All need only f's signature.
            let fdef = existing.iter().copied().find(|d| d.name == inner).or_else(|| by_name.get(&inner));
            let sig = fdef.map(|f| (f.arg_ty(), f.ret_ty.clone(), f.params.len()));
            match sig {
                Some((s, t, arity)) => {
                    let def = match d {
                        Derivation::Jac | Derivation::Jac1 => {
                            let active = jac::Active::new(d, &s, arity);
                            work.extend(jac::needs(&active, &s, &t).into_iter().map(|d| inner.derived(d)));
                            jac::jac_def(d, &inner, &s, &t, &active)
                        }
                        Derivation::Shape => apply::split_pass(d, &inner, &s, &t),
                        _ => {
                            work.push(inner.derived(Derivation::Rev));
                            apply::split_pass(d, &inner, &s, &t)
                        }
                    };
                    by_name.insert(name.clone(), def.clone());
                    out.defs.push(def);
                }
                None if !inner.derivs.is_empty() && !failed.contains(&inner) => {
                    // Derive the inner function first, then come back.
                    work.push(name);
                    work.push(inner);
                }
                None => {
                    out.errors.push((
                        name.clone(),
                        AdError { message: format!("`{inner}` has no definition to differentiate"), at: None },
                    ));
                    failed.insert(name);
                }
            }
            continue;
        }
        if d == Derivation::CL {
            // `[CL f]`: f's definition through the categorical language and back.
            let f = existing.iter().copied().find(|d| d.name == inner).or_else(|| by_name.get(&inner));
            let translated = f.map(|f| {
                guard(|| ksc_cl::cl_def(f).map_err(|e| AdError { message: format!("CL: {e}"), at: None }))
            });
            match translated {
                Some(Ok(def)) => {
                    by_name.insert(name.clone(), def.clone());
                    out.defs.push(def);
                }
                Some(Err(e)) => {
                    out.errors.push((name.clone(), e));
                    failed.insert(name);
                }
                None if !inner.derivs.is_empty() && !failed.contains(&inner) => {
                    work.push(name);
                    work.push(inner);
                }
                None => {
                    let message = format!("`{inner}` has no definition to translate");
                    out.errors.push((name.clone(), AdError { message, at: None }));
                    failed.insert(name);
                }
            }
            continue;
        }
        if !matches!(d, Derivation::Fwd | Derivation::Rev) {
            out.errors.push((
                name.clone(),
                AdError { message: format!("`gdef {}` is not implemented yet", d.keyword()), at: None },
            ));
            failed.insert(name);
            continue;
        }
        let f: Def = match existing.iter().find(|d| d.name == inner) {
            Some(f) => (*f).clone(),
            None => match by_name.get(&inner) {
                Some(f) => f.clone(),
                None if inner.derivs.is_empty() || failed.contains(&inner) => {
                    out.errors.push((
                        name.clone(),
                        AdError { message: format!("`{inner}` has no definition to differentiate"), at: None },
                    ));
                    failed.insert(name);
                    continue;
                }
                None => {
                    // Derive the inner function first, then come back.
                    work.push(name);
                    work.push(inner);
                    continue;
                }
            },
        };
        let has_body = |n: &FunName| {
            known.contains(n) && existing.iter().any(|d| &d.name == n) || by_name.contains_key(n) || derivable(n, &known)
        };
        if !jacobians.contains_key(&inner) {
            match guard(|| derive::jacobian_def(&f, &has_body)) {
                Ok(j) => {
                    jacobians.insert(inner.clone(), j);
                }
                Err(e) => {
                    out.errors.push((name.clone(), e));
                    failed.insert(name);
                    continue;
                }
            }
        }
        let (jd, witnesses) = &jacobians[&inner];
        let mut demands = Vec::new();
        let result = guard(|| match d {
            Derivation::Fwd => apply::fwd_def(&f, jd, &mut demands),
            _ => apply::rev_def(&f, jd, witnesses, &mut demands),
        });
        match result {
            Ok(def) => {
                by_name.insert(name.clone(), def.clone());
                out.defs.push(def);
                work.extend(demands);
            }
            Err(e) => {
                out.errors.push((name.clone(), e));
                failed.insert(name);
            }
        }
    }
    // Keep the Jacobians too (for printing), after the derived functions.
    let mut js: Vec<Def> = jacobians.into_values().map(|(d, _)| d).collect();
    js.sort_by_key(|d| d.name.to_string());
    out.jacobians = js;
    out
}

/// Runs a derivation, turning an internal failure (a compiler bug: an
/// ill-typed term built by a rule) into an error instead of a crash.
fn guard<T>(f: impl FnOnce() -> Result<T, AdError>) -> Result<T, AdError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(AdError { message: format!("internal error (a ksc bug): {what}"), at: None })
    })
}

/// Can `[fwd h]` / `[rev h]` / `[D h]` style names be derived (the base has
/// a body)?
fn derivable(n: &FunName, known: &FxHashSet<FunName>) -> bool {
    match n.inner() {
        Some((Derivation::Fwd | Derivation::Rev, inner)) => known.contains(&inner) || derivable(&inner, known),
        _ => false,
    }
}

/// Derives `[D f]` alone (for printing Jacobians).
pub fn jacobian(f: &Def, existing: &[&Def]) -> Result<Def, AdError> {
    let known: FxHashSet<FunName> = existing.iter().map(|d| d.name.clone()).collect();
    let has_body = |n: &FunName| known.contains(n) || derivable(n, &known);
    guard(|| derive::jacobian_def(f, &has_body)).map(|(d, _)| d)
}

/// Simplifies a Jacobian `[D f]` with the optimiser (map laws, Core rules,
/// ANF, CSE). With `trace`, returns the rules that fired, in order, as
/// lines `rule: before  =>  after`.
pub fn simplify_jacobian(d: &mut Def, existing: &[&Def], trace: bool) -> Vec<String> {
    let all = ksc_opt::DefMap::new(existing.iter().copied());
    let globals = ksc_opt::Globals::new(&all);
    let none = ksc_opt::RuleSet::new("none");
    let options = ksc_opt::Options { trace, ..ksc_opt::Options::default() };
    let report = ksc_opt::optimise_def(d, &none, &globals, &options);
    report.trace.iter().map(|f| f.to_string()).collect()
}

/// Simplifies derived functions with the optimiser's schedule (the
/// program's `rule`s once, then laws, Core rules, ANF, CSE), in place.
/// `existing` are the program's definitions, for inlining small functions.
/// Returns the optimiser's warnings (a rule that cannot be used, a rule set
/// that ran out of fuel), as messages.
pub fn optimise(derived: &mut [Def], existing: &[&Def], rules: &[&ksc_ir::Rule]) -> Vec<String> {
    let snapshot: Vec<Def> = derived.to_vec();
    let all = ksc_opt::DefMap::new(existing.iter().copied().chain(snapshot.iter()));
    let globals = ksc_opt::Globals::new(&all);
    let (user, rejected) = ksc_opt::RuleSet::user(rules.iter().copied());
    let options = ksc_opt::Options::default();
    let mut warnings: Vec<String> =
        rejected.into_iter().map(|(name, why)| format!("rule \"{name}\" is not used: {why}")).collect();
    for def in derived.iter_mut() {
        let report = ksc_opt::optimise_def(def, &user, &globals, &options);
        warnings.extend(report.warnings.iter().map(|w| format!("{}: {}", def.name, w.message)));
        if matches!(def.name.derivs.first(), Some(Derivation::Jac | Derivation::Jac1)) {
            // The functions the loops call, inlined (three levels), so that
            // their primal work is hoisted with the rest, and then shared.
            for _ in 0..3 {
                if !jac::mark_calls_in_loops(def, &globals) {
                    break;
                }
                let report = ksc_opt::optimise_def(def, &user, &globals, &options);
                warnings.extend(report.warnings.iter().map(|w| format!("{}: {}", def.name, w.message)));
            }
            jac::hoist_loop_invariants(def, &globals);
            // CSE merges the hoisted primal work with f's own, and the
            // cleanup undoes the A-normal form hoisting needed.
            let report = ksc_opt::optimise_def(def, &user, &globals, &options);
            warnings.extend(report.warnings.iter().map(|w| format!("{}: {}", def.name, w.message)));
        }
    }
    warnings
}
