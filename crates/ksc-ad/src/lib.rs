//! Automatic differentiation through full Jacobians: `[D f]`
//! ([`derive::jacobian_def`]), then `[fwd f]` and `[rev f]` from it
//! ([`apply`]). [`derive_requested`] derives what a program's `gdef`s ask
//! for, and the derivatives of callees on demand.

pub mod apply;
pub mod derive;
pub mod fwd;
pub mod hoist;
pub mod jac;
pub mod jacobians;
mod mutual;
pub mod rev;
mod rscan;
pub mod sparse;
mod symmetric;
pub mod tail;
pub mod tape;

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::{Def, Derivation, FunName, Type};

pub use derive::AdError;

/// Internals the integration tests check directly (`tests/rscan.rs`); not
/// part of the API.
#[doc(hidden)]
pub mod testing {
    pub use crate::rscan::{closure, entries, float_leaves};
}

/// The switch (`ksc --skip-pass`) that turns seed 002's parallel reverse
/// mode of a scan over a monoid (Theorem 3.7, [`rev`]) off: its backward
/// pass then runs serially, as for any other scan.
pub const PARALLEL_SCAN_REVERSE: &str = "parallel-scan-reverse";

/// Derivation's switches, which `--skip-pass` takes with the passes.
pub const SWITCHES: &[&str] = &[PARALLEL_SCAN_REVERSE];

/// The derived definitions, and the errors of those that could not be derived.
#[derive(Debug, Default)]
pub struct Derived {
    /// `[fwd f]` and `[rev f]`, in order of derivation.
    pub defs: Vec<Def>,
    /// The `[D f]` they came from (linear-map valued: for printing and
    /// checking, not for code generation).
    pub jacobians: Vec<Def>,
    pub errors: Vec<(FunName, AdError)>,
    /// [`derive_one`]: the derived functions the derived ones call, which
    /// were not derived here, in the order they were asked for.
    pub demands: Vec<FunName>,
}

/// What derivation reads of the program.
pub trait Program {
    /// The written definition of `name` (prelude included), if it has one
    /// with a body.
    fn written(&self, name: &FunName) -> Option<&Def>;
    /// Does `name` have a written definition? Asked about callees and hand
    /// derivatives, whose bodies the derivation does not read.
    fn is_written(&self, name: &FunName) -> bool {
        self.written(name).is_some()
    }
    /// A derived function derived elsewhere (by another [`derive_one`]),
    /// when a derivative of it is asked for. None: not derived.
    fn derived(&self, _name: &FunName) -> Option<&Def> {
        None
    }
    /// `[D f]` and its witnesses for a written f, derived elsewhere
    /// ([`jacobian_in`]), so that the derivatives of f share it. None:
    /// derived here.
    fn jacobian(&self, _f: &FunName) -> Option<&(Def, derive::Witnesses)> {
        None
    }
    /// Is `name` declared by an `edef` of the program's file (implemented
    /// outside `.ks`)? A derivative declared so (`(edef [rev f] ..)`) is
    /// the user's, called by derived code, never derived.
    fn is_declared(&self, _name: &FunName) -> bool {
        false
    }
    /// The functions the written definition of `name` calls, each once, in
    /// order (what mutual recursion is found by: asked for through the
    /// database, it does not change when a body changes but its calls do
    /// not).
    fn callees(&self, name: &FunName) -> Vec<FunName> {
        self.written(name).map(ksc_ir::term::callees).unwrap_or_default()
    }
    /// The functions the written `name` calls that call it back (mutual
    /// recursion, `mutual.rs`). Through the database, an edit elsewhere
    /// that leaves the answer as it is does not re-derive `name`.
    fn recursion_partners(&self, name: &FunName) -> Vec<FunName> {
        self.written(name).map(|f| mutual::partners(self, f)).unwrap_or_default()
    }
    /// Is `name` the user's: written with a body or declared by an `edef`?
    fn is_provided(&self, name: &FunName) -> bool {
        self.is_written(name) || self.is_declared(name)
    }
}

/// How derivation reads a `scan` (`$scanBlocks`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scans {
    /// As itself, a scan over a monoid (its map `lmScanBlocks`), unless
    /// its operator calls the function (a tape records calls only in a
    /// `fold` or `$scan`).
    Monoid,
    /// As the left scan it equals (`[CL f]`, which knows no `$scanBlocks`).
    Left,
}

/// `[D f]` of a function of the program, with its witnesses (what the
/// derivations from it instantiate).
pub fn jacobian_in(program: &dyn Program, f: &Def) -> Result<(Def, derive::Witnesses), AdError> {
    let (first_order, copies) =
        derivation_form(program, f, Scans::Monoid)?.map_or((None, Vec::new()), |(d, c)| (Some(d), c));
    let has_body = |n: &FunName| {
        program.is_written(n)
            || copies.iter().any(|c| c.name == *n)
            || derivable(n, program)
            || hand_derived(n, program)
    };
    guard(|| derive::jacobian_def(first_order.as_ref().unwrap_or(f), &has_body))
}

/// [`derivation_form`] of `f` in the program of `defs` (for `ksc cl`, which
/// translates what `(gdef CL ..)` would).
pub fn derivation_form_in(defs: &[&Def], f: &Def) -> Result<Option<(Def, Vec<Def>)>, AdError> {
    derivation_form(&Listed::new(defs), f, Scans::Left)
}

/// `f` as derivation reads it (seed 004) when it uses higher-order
/// functions (calls of functions taking lambdas made calls of copies with
/// the lambdas written in, applications of lambdas reduced:
/// `ksc_ir::lambdas::specialise_for_derivation`, with the copies), is
/// mutually recursive (the functions calling it back inlined,
/// `mutual.rs`) or has a `scan` read as the left scan it equals
/// (`ksc_types::expand::scans_for_derivation`; with [`Scans::Monoid`] only
/// one whose operator calls f). None: `f` as it is.
fn derivation_form(program: &dyn Program, f: &Def, scans: Scans) -> Result<Option<(Def, Vec<Def>)>, AdError> {
    let only_recursive = scans == Scans::Monoid;
    // `reduce`'s runs and some scans, as derivation reads them.
    let read = |d: &Def| {
        let runs = ksc_types::expand::runs_for_derivation(d);
        let d2 = runs.as_ref().unwrap_or(d);
        ksc_types::expand::scans_for_derivation(d2, only_recursive).or(runs)
    };
    let left_scans = read(f);
    let f = left_scans.as_ref().unwrap_or(f);
    let higher_order = higher_order(program, f)?;
    // Then mutual recursion as self-recursion (`mutual.rs`).
    let (base, partners) = match &higher_order {
        // Rewritten: its calls are not the written ones.
        Some((d, _)) => (d, mutual::partners(program, d)),
        None => (f, program.recursion_partners(&f.name)),
    };
    let form = match mutual::self_recursive(program, base, &partners) {
        Some(d) => Some((d, higher_order.map_or(Vec::new(), |(_, copies)| copies))),
        None => higher_order,
    };
    // The partners inlined or the copies made may have scans of their own.
    let with_left_scans = |d: Def| read(&d).unwrap_or(d);
    Ok(match form {
        Some((d, copies)) => Some((with_left_scans(d), copies.into_iter().map(with_left_scans).collect())),
        None => left_scans.map(|d| (d, Vec::new())),
    })
}

/// The higher-order part of [`derivation_form`]. (It reads the callees'
/// definitions to find those taking lambdas: only for a definition that
/// calls such a function, applies or binds a lambda.)
fn higher_order(program: &dyn Program, f: &Def) -> Result<Option<(Def, Vec<Def>)>, AdError> {
    if !ksc_ir::lambdas::needs_specialising_for_derivation(f) {
        return Ok(None);
    }
    // The functions taking lambdas that it reaches, and what they reach.
    let mut defs: Vec<&Def> = Vec::new();
    let mut seen: FxHashSet<FunName> = FxHashSet::default();
    let mut work = vec![f];
    while let Some(x) = work.pop() {
        for g in ksc_ir::term::callees(x) {
            if !seen.insert(g.clone()) {
                continue;
            }
            if let Some(gd) = program.written(&g).filter(|gd| ksc_ir::lambdas::signature_has_lam(gd)) {
                defs.push(gd);
                work.push(gd);
            }
        }
    }
    match ksc_ir::lambdas::specialise_for_derivation(f, &defs) {
        Ok(d) => Ok(Some(d)),
        Err(e) => Err(AdError { message: e.message, at: (e.fun == f.name).then_some(e.expr) }),
    }
}

/// The functions `f` calls that call it back (mutual recursion), found
/// through `program`'s [`Program::callees`].
pub fn mutual_partners(program: &dyn Program, f: &Def) -> Vec<FunName> {
    mutual::partners(program, f)
}

/// A program given as the list of its definitions (the first of a name
/// counts).
struct Listed<'d>(FxHashMap<&'d FunName, &'d Def>);

impl<'d> Listed<'d> {
    fn new(defs: &[&'d Def]) -> Listed<'d> {
        let mut map = FxHashMap::default();
        for d in defs {
            map.entry(&d.name).or_insert(*d);
        }
        Listed(map)
    }
}

impl Program for Listed<'_> {
    fn written(&self, name: &FunName) -> Option<&Def> {
        self.0.get(name).copied()
    }
}

/// Derives every requested function (`[fwd f]` or `[rev f]` with `f` fully
/// named), and, on demand, the derivatives of the functions they call.
/// `existing` are the definitions of the program (prelude included); a
/// derivative defined there by hand is used, not derived.
pub fn derive_requested(existing: &[&Def], requests: &[FunName]) -> Derived {
    derive(&Listed::new(existing), requests, false)
}

/// Derives `request` alone, for a driver that derives each function once
/// (the incremental database): the derived functions it calls are left in
/// [`Derived::demands`], and a derived function it derives is taken from
/// [`Program::derived`]. Functions it generates (the blocks of
/// `[jacsparse f]`) are derived here with their derivatives.
pub fn derive_one(program: &dyn Program, request: &FunName) -> Derived {
    derive(program, std::slice::from_ref(request), true)
}

/// Why the derivation `d` of f, made from f's signature, cannot be made,
/// if it cannot. A Jacobian's columns are the tangent of f's argument (of
/// its first parameter, for `jac1` and `jacsparse1` of several) and its
/// rows the tangent of f's result; `[sufrev f]` takes and gives tangents;
/// `[shape f]` gives the shape of f's result. A lambda has neither.
fn signature_fault(d: Derivation, f: &Def) -> Option<AdError> {
    let s = f.arg_ty();
    let (columns, what, rows) = match (d, &s) {
        (Derivation::Jac1 | Derivation::JacSparse1, Type::Tuple(ts)) if f.params.len() >= 2 => {
            (&ts[0], "first parameter", true)
        }
        (
            Derivation::Jac | Derivation::Jac1 | Derivation::JacSparse | Derivation::JacSparse1 | Derivation::SufRev,
            _,
        ) => (&s, "argument", true),
        (Derivation::Shape, _) => (&s, "argument", false),
        _ => return None,
    };
    let message = if rows && columns.tangent().is_none() {
        format!("the {what} `{columns}` has no tangent (a lambda has none)")
    } else if rows && f.ret_ty.tangent().is_none() {
        format!("the result `{}` has no tangent (a lambda has none)", f.ret_ty)
    } else if !rows && f.ret_ty.shape().is_none() {
        format!("the result `{}` has no shape (a lambda has none)", f.ret_ty)
    } else {
        return None;
    };
    Some(AdError { message, at: None })
}

fn derive(program: &dyn Program, requests: &[FunName], one: bool) -> Derived {
    let mut by_name: FxHashMap<FunName, Def> = FxHashMap::default();
    let mut out = Derived::default();
    let mut jacobians: FxHashMap<FunName, (Def, derive::Witnesses)> = FxHashMap::default();
    let mut work: Vec<FunName> = requests.to_vec();
    let mut failed: FxHashSet<FunName> = FxHashSet::default();
    // A callee's value and tangent come from one `[fwdt g]`, unless `[fwd
    // g]` is written by hand and `[fwdt g]` is not.
    let pairs = |g: &FunName| {
        !program.is_provided(&g.derived(Derivation::Fwd)) || program.is_provided(&g.derived(Derivation::FwdT))
    };
    while let Some(name) = work.pop() {
        if program.is_provided(&name) || by_name.contains_key(&name) || failed.contains(&name) {
            continue;
        }
        let Some((d, inner)) = name.inner() else { continue };
        if one && !requests.contains(&name) && !by_name.contains_key(&FunName { derivs: Vec::new(), ..name.clone() }) {
            if !out.demands.contains(&name) {
                out.demands.push(name);
            }
            continue;
        }
        // The definition of f: written, or derived already; a derived one
        // not derived yet is derived first, then `name` again.
        let written = program.written(&inner);
        let elsewhere = || if one && !inner.derivs.is_empty() { program.derived(&inner) } else { None };
        let f: Def = match written.or_else(|| by_name.get(&inner)).or_else(elsewhere) {
            Some(f) => f.clone(),
            // A derivative of an external function that the program does
            // not declare: say which declaration would provide it.
            None if program.is_declared(&inner) => {
                // `[fwdt f]` is ksc's: `[fwd f]` (with f) stands for it.
                let wanted = if d == Derivation::FwdT { inner.derived(Derivation::Fwd) } else { name.clone() };
                let message = format!(
                    "`{inner}` is declared with `edef`, and so is a derivative of it, but not `{wanted}`, \
                     which derived code calls: declare it too (`edef` or `def`)"
                );
                out.errors.push((name.clone(), AdError { message, at: None }));
                failed.insert(name);
                continue;
            }
            None if inner.derivs.is_empty() || failed.contains(&inner) || one => {
                let what = if d == Derivation::CL { "translate" } else { "differentiate" };
                let message = format!("`{inner}` has no definition to {what}");
                out.errors.push((name.clone(), AdError { message, at: None }));
                failed.insert(name);
                continue;
            }
            None => {
                work.push(name);
                work.push(inner);
                continue;
            }
        };
        // Functions taking lambdas called as copies with the lambdas
        // written in, mutual recursion made self-recursion (for `[CL f]`, where that
        // fails, CL's own error follows).
        let scans = if d == Derivation::CL { Scans::Left } else { Scans::Monoid };
        let f = match derivation_form(program, &f, scans) {
            Ok(Some((first_order, copies))) => {
                // The copies go with the derived functions (their own
                // derivatives are derived here on demand, as a derived
                // function's are).
                for c in copies {
                    if !program.is_provided(&c.name) && !by_name.contains_key(&c.name) {
                        by_name.insert(c.name.clone(), c.clone());
                        out.defs.push(c);
                    }
                }
                first_order
            }
            Ok(None) => f,
            Err(_) if d == Derivation::CL => f,
            Err(e) => {
                out.errors.push((name.clone(), e));
                failed.insert(name);
                continue;
            }
        };
        // A tail recursion is differentiated as the loop it is (`tail.rs`),
        // which calls the function counting its steps (kept after the
        // derived function: [`derive_one`] gives that first).
        let mut steps = None;
        let f = match d {
            Derivation::Fwd
            | Derivation::Rev
            | Derivation::FwdT
            | Derivation::SufFwdPass
            | Derivation::SufRevPass
            | Derivation::SufFwdTape
            | Derivation::SufRevAcc => match tail::as_loop(&f) {
                Some(l) => {
                    if !program.is_provided(&l.steps.name) && !by_name.contains_key(&l.steps.name) {
                        steps = Some(l.steps);
                    }
                    l.def
                }
                None => f,
            },
            _ => f,
        };
        let has_body = |n: &FunName| {
            program.is_written(n) || by_name.contains_key(n) || derivable(n, program) || hand_derived(n, program)
        };
        // [D f] of a written f from the program, if it keeps it.
        if one && written.is_some() && !jacobians.contains_key(&f.name) {
            if let Some(j) = program.jacobian(&f.name) {
                jacobians.insert(f.name.clone(), j.clone());
            }
        }
        // `[fwd [rev g]]`, `[fwdt [rev g]]` and `[rev [rev g]]` of a `[rev
        // g]` made of the split passes (g recursive), linear in the depth
        // by the symmetry of second derivatives (`symmetric.rs`); its own
        // split passes are the checkpointing ones, whose reverse pass is
        // that `[rev [rev g]]`.
        let taped_rev = written.is_none() && matches!(inner.inner(), Some((Derivation::Rev, _))) && by_passes(&f);
        if taped_rev && matches!(d, Derivation::SufFwdPass | Derivation::SufRevPass) {
            if d == Derivation::SufRevPass {
                work.push(f.name.derived(Derivation::Rev));
            }
            let def = tape::checkpoint_passes(d, &f.name, &f.arg_ty(), &f.ret_ty);
            by_name.insert(name.clone(), def.clone());
            out.defs.push(def);
            continue;
        }
        if taped_rev && matches!(d, Derivation::Fwd | Derivation::FwdT | Derivation::Rev) {
            match guard(|| symmetric::second_def(d, &f)) {
                Ok((def, needs)) => {
                    by_name.insert(name.clone(), def.clone());
                    out.defs.push(def);
                    work.extend(needs);
                }
                Err(e) => {
                    out.errors.push((name.clone(), e));
                    failed.insert(name);
                }
            }
            continue;
        }
        // Other derivatives of such a `[rev g]` differentiate it as the
        // equal function that recomputes primals
        // (the tape's `$tapePush` has no derivative): `[rev g]` from the
        // transposed `[D g]`, whose recursive call is `[rev g]` again. A g
        // that is itself such a `[rev h]` is taken in its recomputing form
        // first, and so on down (third and higher orders).
        let f = match inner.inner() {
            Some((Derivation::Rev, _)) if written.is_none() && d != Derivation::CL && by_passes(&f) => {
                let lookup =
                    |n: &FunName| program.written(n).or_else(|| by_name.get(n)).or_else(|| program.derived(n)).cloned();
                match recomputing(&inner, &lookup, &mut jacobians, &mut work, &pairs, &has_body) {
                    Some(Ok(plain)) => plain,
                    _ => f,
                }
            }
            _ => f,
        };
        // Derivations made from f's signature alone: a lambda in it may
        // leave them without a type (f is differentiated where a call
        // passes it a known lambda, as a copy with the lambda written in).
        if let Some(e) = signature_fault(d, &f) {
            out.errors.push((name.clone(), e));
            failed.insert(name);
            continue;
        }
        let made = match d {
            // `[shape f]` is the shape of f's result (simplified later
            // where the shape rules allow). `[jac f]` calls `[fwd f]` or
            // `[rev f]` per column or row. `[sufrev f]` is `[rev f]`. All
            // need only f's signature.
            Derivation::Jac | Derivation::Jac1 => {
                let (s, t) = (f.arg_ty(), f.ret_ty.clone());
                let active = jac::Active::new(d, &s, f.params.len());
                work.extend(jac::needs(&active, &s, &t).into_iter().map(|d| inner.derived(d)));
                Ok(jac::jac_def(d, &inner, &s, &t, &active))
            }
            // `[jacsparse f]`: block functions of f's parts, and their `[jac1 ..]`.
            Derivation::JacSparse | Derivation::JacSparse1 => guard(|| Ok(sparse::jacsparse_def(d, &f))).map(|sp| {
                for lib in sparse::library() {
                    if !by_name.contains_key(&lib.name) {
                        by_name.insert(lib.name.clone(), lib.clone());
                        out.defs.push(lib.clone());
                    }
                }
                for block in sp.blocks {
                    work.push(block.name.derived(Derivation::Jac1));
                    by_name.insert(block.name.clone(), block.clone());
                    out.defs.push(block);
                }
                sp.def
            }),
            Derivation::Shape => Ok(rev::split_pass(d, &inner, &f.arg_ty(), &f.ret_ty)),
            Derivation::SufRev => {
                work.push(inner.derived(Derivation::Rev));
                Ok(rev::split_pass(d, &inner, &f.arg_ty(), &f.ret_ty))
            }
            // The split passes with a tape (`tape.rs`), and `[rev f]` by
            // them when f is recursive.
            Derivation::SufFwdPass | Derivation::SufRevPass | Derivation::SufFwdTape | Derivation::SufRevAcc => {
                split_passes(d, &f, &mut jacobians, &mut work, has_body)
            }
            Derivation::Rev if is_recursive(&f) => split_passes(d, &f, &mut jacobians, &mut work, has_body),
            // `[CL f]`: f's definition through the categorical language and back.
            Derivation::CL => {
                guard(|| ksc_cl::cl_def(&f).map_err(|e| AdError { message: format!("CL: {e}"), at: None }))
            }
            Derivation::D => Err(AdError { message: "`[D f]` is a linear map, not code".to_string(), at: None }),
            Derivation::Fwd | Derivation::Rev | Derivation::FwdT => {
                derive_from_jacobian(d, &f, &mut jacobians, &mut work, &pairs, has_body)
            }
        };
        match made {
            Ok(def) => {
                by_name.insert(name.clone(), def.clone());
                out.defs.push(def);
                if let Some(steps) = steps {
                    by_name.insert(steps.name.clone(), steps.clone());
                    out.defs.push(steps);
                }
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

/// `[rev g]` (the name `rev_g`) as the function that recomputes primals:
/// from the transposed `[D g]` of g's definition, itself in this form first
/// when it is a `[rev h]` made of split passes. None if a definition is
/// missing.
fn recomputing(
    rev_g: &FunName,
    lookup: &dyn Fn(&FunName) -> Option<Def>,
    jacobians: &mut FxHashMap<FunName, (Def, derive::Witnesses)>,
    work: &mut Vec<FunName>,
    pairs: &dyn Fn(&FunName) -> bool,
    has_body: &dyn Fn(&FunName) -> bool,
) -> Option<Result<Def, AdError>> {
    let (_, g) = rev_g.inner()?;
    let mut gdef = lookup(&g)?;
    if matches!(g.inner(), Some((Derivation::Rev, _))) && by_passes(&gdef) {
        gdef = match recomputing(&g, lookup, jacobians, work, pairs, has_body)? {
            Ok(plain) => plain,
            Err(e) => return Some(Err(e)),
        };
    }
    Some(derive_from_jacobian(Derivation::Rev, &gdef, jacobians, work, pairs, has_body))
}

/// Is f (a `[rev g]`) made of g's split passes?
fn by_passes(f: &Def) -> bool {
    f.body.exprs.iter().any(|(_, e)| {
        matches!(e, ksc_ir::Expr::Call(ksc_ir::Callee::Fun(g), _) if g.derivs.first() == Some(&Derivation::SufRevPass))
    })
}

/// Does f's body call f?
fn is_recursive(f: &Def) -> bool {
    f.body.exprs.iter().any(|(_, e)| matches!(e, ksc_ir::Expr::Call(ksc_ir::Callee::Fun(g), _) if g == &f.name))
}

/// The split passes of f from `[D f]` and the recursive calls in it; the
/// checkpointing ones if its recursive calls cannot be taped.
fn split_passes(
    d: Derivation,
    f: &Def,
    jacobians: &mut FxHashMap<FunName, (Def, derive::Witnesses)>,
    work: &mut Vec<FunName>,
    has_body: impl Fn(&FunName) -> bool,
) -> Result<Def, AdError> {
    let (jd, witnesses) = jacobian_of(f, jacobians, &has_body)?;
    let (s, t) = (f.arg_ty(), f.ret_ty.clone());
    let Some(plan) = tape::Plan::new(&f.name, jd) else {
        return match d {
            Derivation::SufFwdPass | Derivation::SufRevPass => {
                work.push(f.name.derived(Derivation::Rev));
                Ok(tape::checkpoint_passes(d, &f.name, &s, &t))
            }
            Derivation::Rev => derive_from_jacobian(d, f, jacobians, work, &|_| true, has_body),
            _ => Err(AdError {
                message: format!("`{}` has a recursive call inside a lambda: no tape", f.name),
                at: None,
            }),
        };
    };
    match d {
        Derivation::Rev => {
            // The direct transposition, if it computes no recursive call
            // (when no call's value is needed, as in a tail call), needs
            // no tape.
            let direct = derive_from_jacobian(d, f, jacobians, work, &|_| true, &has_body)?;
            if !tape::calls_live(&direct.body, direct.root, &f.name).0 {
                return Ok(direct);
            }
            work.push(f.name.derived(Derivation::SufFwdPass));
            work.push(f.name.derived(Derivation::SufRevPass));
            guard(|| tape::rev_by_passes(&f.name, &s, &t))
        }
        Derivation::SufFwdPass => {
            work.push(f.name.derived(Derivation::SufFwdTape));
            Ok(tape::suffwdpass_def(&f.name, &s, &t))
        }
        Derivation::SufFwdTape => guard(|| tape::suffwdtape_def(f, jd, witnesses, &plan)),
        _ => {
            let mut demands = Vec::new();
            let acc = d == Derivation::SufRevAcc;
            let r = guard(|| tape::sufrevpass_def(f, jd, witnesses, &plan, &mut demands, acc));
            if r.is_ok() {
                work.extend(demands);
            }
            r
        }
    }
}

/// `[fwd f]` or `[rev f]` from `[D f]` (derived once per f, kept in
/// `jacobians`); the derivatives of callees it needs are added to `work`.
fn derive_from_jacobian(
    d: Derivation,
    f: &Def,
    jacobians: &mut FxHashMap<FunName, (Def, derive::Witnesses)>,
    work: &mut Vec<FunName>,
    pairs: &dyn Fn(&FunName) -> bool,
    has_body: impl Fn(&FunName) -> bool,
) -> Result<Def, AdError> {
    let (jd, witnesses) = jacobian_of(f, jacobians, &has_body)?;
    let mut demands = Vec::new();
    let result = guard(|| match d {
        Derivation::Fwd => fwd::fwd_def(f, jd, witnesses, &mut demands, pairs),
        Derivation::FwdT => fwd::fwdt_def(f, jd, witnesses, &mut demands, pairs),
        _ => rev::rev_def(f, jd, witnesses, &mut demands),
    });
    if result.is_ok() {
        work.extend(demands);
    }
    result
}

/// `[D f]` and its witnesses, derived once per f and kept in `jacobians`.
fn jacobian_of<'j>(
    f: &Def,
    jacobians: &'j mut FxHashMap<FunName, (Def, derive::Witnesses)>,
    has_body: impl Fn(&FunName) -> bool,
) -> Result<&'j (Def, derive::Witnesses), AdError> {
    if !jacobians.contains_key(&f.name) {
        let j = guard(|| derive::jacobian_def(f, &has_body))?;
        jacobians.insert(f.name.clone(), j);
    }
    Ok(&jacobians[&f.name])
}

thread_local! {
    /// How many [`guard`]s the current thread is inside.
    static GUARDED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Is the current thread inside a derivation whose panics become errors
/// ([`AdError`], reported as located diagnostics)? A panic hook can stay
/// silent for those, so that a panic is never how an error is shown.
pub fn panic_is_guarded() -> bool {
    GUARDED.with(|g| g.get() > 0)
}

/// Runs a derivation, turning an internal failure (a compiler bug: an
/// ill-typed term built by a rule) into an error instead of a crash.
// pub for the integration tests (tests/guard.rs).
#[doc(hidden)]
pub fn guard<T>(f: impl FnOnce() -> Result<T, AdError>) -> Result<T, AdError> {
    struct Inside;
    impl Drop for Inside {
        fn drop(&mut self) {
            GUARDED.with(|g| g.set(g.get() - 1));
        }
    }
    GUARDED.with(|g| g.set(g.get() + 1));
    let inside = Inside;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    drop(inside);
    result.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(AdError { message: format!("internal error (a ksc bug): {what}"), at: None })
    })
}

/// Is `n` an external function (an `edef`) whose derivatives the program
/// provides (`[fwd n]` or `[rev n]`, declared with `edef` or written)? A
/// call of it then gets the Jacobian `[D n] x`, which forward and reverse
/// mode apply by calling those (the original's `edef.ks`).
fn hand_derived(n: &FunName, program: &dyn Program) -> bool {
    program.is_declared(n)
        && (program.is_provided(&n.derived(Derivation::Fwd)) || program.is_provided(&n.derived(Derivation::Rev)))
}

/// Can `[fwd h]` / `[rev h]` / `[D h]` style names be derived (the base has
/// a body)?
fn derivable(n: &FunName, program: &dyn Program) -> bool {
    match n.inner() {
        Some((Derivation::Fwd | Derivation::Rev | Derivation::FwdT, inner)) => {
            program.is_written(&inner) || derivable(&inner, program)
        }
        _ => false,
    }
}
