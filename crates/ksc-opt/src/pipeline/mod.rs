//! The derived-function pipeline: what happens to `[fwd f]`, `[rev f]`,
//! `[jac f]` and the other functions AD derives, from the body `ksc_ad`
//! writes to the body the backends lower. [`steps`] is the pipeline as a
//! list, in the order things happen; each pass is a [`Pass`] on a
//! [`Def`] (`ksc_ir::pass`), so `--skip-pass NAME` and `--dump-after NAME`
//! work on them, and in debug builds the body's scoping is checked after
//! every pass.
//!
//! Most passes find an opportunity and mark or restructure it; the
//! simplifier (`simplify`: the program's rules, the laws of linear maps,
//! the Core rules, ANF and CSE, [`crate::optimise_def`]) then does the
//! work. So the pipeline repeats "pass, then simplify" until the pass
//! finds nothing, at most a fixed number of times.

pub mod chain;
pub mod jac;

use std::cell::RefCell;

use ksc_ir::builder::Builder;
use ksc_ir::pass::{Pass, Runner};
use ksc_ir::{Callee, Def, Derivation, Expr, ExprId, Prim};

use crate::{Globals, RuleSet, Schedules};

/// What the derived-function passes read besides the definition.
pub struct DerivedCx<'a> {
    /// The program's definitions and the other derived functions.
    pub globals: &'a Globals<'a>,
    /// The program's schedules (ksc's, or its own) and `rule`s.
    pub schedules: &'a Schedules,
    /// The simplifier's warnings, as messages.
    pub warnings: RefCell<Vec<String>>,
}

type DerivedPass<'a> = &'a dyn Pass<Def, DerivedCx<'a>>;

/// One step of the pipeline.
pub enum Step<'a> {
    /// Run the pass once.
    Once(DerivedPass<'a>),
    /// Run `pass`; if it changed nothing, stop; else run `then` and start
    /// again, at most `times` times. If any round ran, run `after`.
    Repeat { pass: DerivedPass<'a>, times: usize, then: Vec<Step<'a>>, after: Vec<Step<'a>> },
    /// The steps, for derived functions of these kinds only.
    Only(&'static [Derivation], Vec<Step<'a>>),
}

/// The pipeline, in the order it runs.
pub fn steps<'a>() -> Vec<Step<'a>> {
    use Step::*;
    let simplify = || Once(&Simplify);
    // The primal values its loops compute twice, computed once, until
    // nothing more is shared (a loop that reads values another one stores
    // may then be seen to compute what it returns), at most three times.
    let share = || Repeat { pass: &ShareLoopValues, times: 3, then: vec![simplify()], after: vec![] };
    vec![
        simplify(),
        share(),
        Only(
            &[Derivation::Rev],
            vec![
                // A callee's primal and reverse pass inlined together, level
                // by level, so its primal values are computed once
                // (`chain.rs`), and then shared between loops again.
                Repeat {
                    pass: &MarkPairedCalls,
                    times: chain::CHAIN_LEVELS,
                    then: vec![Once(&InlinePaired)],
                    after: vec![Once(&SimplifyInlined), share()],
                },
                // The values backward loops compute again from the
                // accumulators of a fold, computed by its scan's steps
                // (`crate::scan_extras`, `crate::fuse_scan_extras`): first
                // moved out of the backward loops, inner folds first, then
                // fused into the scans, outer first; each step followed by
                // the simplifier, a fusion also by the loops' sharing.
                Repeat { pass: &ScanExtras, times: chain::MAX_LEVELS, then: vec![simplify()], after: vec![] },
                Repeat {
                    pass: &FuseScanExtras,
                    times: chain::MAX_LEVELS,
                    then: vec![simplify(), share()],
                    after: vec![],
                },
            ],
        ),
        Only(
            &[Derivation::Jac, Derivation::Jac1],
            vec![
                // The functions the loops call, inlined (three levels), so
                // that their primal work is hoisted with the rest, and then
                // shared.
                Repeat { pass: &MarkCallsInLoops, times: 3, then: vec![simplify()], after: vec![] },
                Once(&HoistLoopInvariants),
                // CSE merges the hoisted primal work with f's own, and the
                // cleanup undoes the A-normal form hoisting needed.
                simplify(),
                // The primal values of the loops inside, once for all
                // columns.
                Repeat { pass: &HoistInnerInvariants, times: 1, then: vec![simplify()], after: vec![] },
            ],
        ),
    ]
}

/// The names of the pipeline's passes, for the command line.
pub fn names() -> Vec<&'static str> {
    fn walk(steps: &[Step], out: &mut Vec<&'static str>) {
        for s in steps {
            let mut add = |p: DerivedPass| {
                if !out.contains(&p.name()) {
                    out.push(p.name());
                }
            };
            match s {
                Step::Once(p) => add(*p),
                Step::Repeat { pass, then, after, .. } => {
                    add(*pass);
                    walk(then, out);
                    walk(after, out);
                }
                Step::Only(_, inner) => walk(inner, out),
            }
        }
    }
    let mut out = Vec::new();
    walk(&steps(), &mut out);
    out
}

/// Runs the pipeline on one derived function; `globals` knows the
/// program's definitions and the other derived functions, `schedules`
/// holds the program's schedules and rules. Returns the simplifier's
/// warnings.
pub fn optimise_derived(def: &mut Def, globals: &Globals, schedules: &Schedules) -> Vec<String> {
    let cx = DerivedCx { globals, schedules, warnings: RefCell::new(Vec::new()) };
    let runner = Runner {
        cx: &cx,
        unit_name: |d: &Def| d.name.to_string(),
        print: ksc_ir::print::print_def,
        verify: Def::scope_error,
    };
    run_steps(&runner, &steps(), def);
    cx.warnings.into_inner()
}

fn run_steps<'a>(runner: &Runner<'a, Def, DerivedCx<'a>>, steps: &[Step<'a>], def: &mut Def) {
    for s in steps {
        match s {
            Step::Once(p) => {
                runner.run(*p, def);
            }
            Step::Repeat { pass, times, then, after } => {
                let mut any = false;
                for _ in 0..*times {
                    if !runner.run(*pass, def) {
                        break;
                    }
                    run_steps(runner, then, def);
                    any = true;
                }
                if any {
                    run_steps(runner, after, def);
                }
            }
            Step::Only(kinds, inner) => {
                if def.name.derivs.first().is_some_and(|d| kinds.contains(d)) {
                    run_steps(runner, inner, def);
                }
            }
        }
    }
}

/// Simplifies derived functions with the pipeline, in place. `existing`
/// are the program's definitions (for inlining small functions); `rules`
/// its `rule`s and `strategies` its `strategy` declarations. Returns the
/// warnings (a rule that cannot be used, a strategy with an error, a rule
/// set that ran out of fuel), as messages.
pub fn optimise_all(
    derived: &mut [Def],
    existing: &[&Def],
    rules: &[&ksc_ir::Rule],
    strategies: &[&ksc_ir::StrategyDecl],
) -> Vec<String> {
    let snapshot: Vec<Def> = derived.to_vec();
    let all = crate::DefMap::new(existing.iter().copied().chain(snapshot.iter()));
    let globals = Globals::new(&all);
    let (schedules, mut warnings) = program_schedules(rules, strategies);
    for def in derived.iter_mut() {
        warnings.extend(optimise_derived(def, &globals, &schedules));
    }
    warnings
}

/// Keeps, of a request's optimised derived functions, those the requested
/// one calls, transitively (itself among them), in their order. Inlining
/// leaves some of those derivation asked for uncalled: under `gdef rev` of
/// a chain of calls, 16 of every 17 `[rev gk]` are inlined into the one
/// above (`chain`). The incremental database optimises only these
/// (`ksc_db::derive_request`).
pub fn keep_called(derived: &mut Vec<Def>, requested: &ksc_ir::FunName) {
    let mut called: rustc_hash::FxHashSet<ksc_ir::FunName> = rustc_hash::FxHashSet::default();
    let mut work = vec![requested.clone()];
    while let Some(f) = work.pop() {
        if called.contains(&f) {
            continue;
        }
        let Some(d) = derived.iter().find(|d| d.name == f) else { continue };
        called.insert(f);
        work.extend(ksc_ir::term::callees(d));
    }
    derived.retain(|d| called.contains(&d.name));
}

/// The program's `rule`s as the simplifier's first rule set, and warnings
/// for those it cannot use.
pub fn user_rule_set(rules: &[&ksc_ir::Rule]) -> (RuleSet, Vec<String>) {
    let (user, rejected) = RuleSet::user(rules.iter().copied());
    (user, rejected.into_iter().map(|(name, why)| format!("rule \"{name}\" is not used: {why}")).collect())
}

/// A definition the user wrote, rewritten by the program's `user-rules`
/// schedule (ksc's applies each rule once per node, children first), as
/// the original applied its rules to every definition, when the program
/// has rules or its own `user-rules`; the warnings (a schedule that ran
/// out of fuel), as messages. Nothing else of the optimiser runs on it
/// unless the program's `user-rules` says so: the loop IR has its own
/// passes.
///
/// `program` is what the rewriting knows of the program's functions: their
/// names ([`Declared`]: where the program declares no function of a base
/// name, a call of a built-in is the built-in, whose rules then apply),
/// and the bodies it may inline (the database gives the optimised bodies
/// of the derived functions a definition calls; no written body is
/// inlined). `inline-small` inlines a body of at most
/// [`WRITTEN_INLINE_SIZE`] nodes there, with the small calls it makes.
pub fn rewrite_written(def: &mut Def, schedules: &Schedules, program: &dyn crate::Defs) -> Vec<String> {
    if !schedules.runs_user_rules() {
        return Vec::new();
    }
    let globals = Globals::new(program);
    let options = crate::Options { inline_size: WRITTEN_INLINE_SIZE, ..crate::Options::default() };
    let (_, mut rw) = rewrite_def(def, &globals, options, &schedules.schedule("user-rules"));
    rw.take_warnings().into_iter().map(|w| format!("the rules on `{}`: {w}", def.name.short())).collect()
}

/// The largest body (in nodes, with the small calls it makes) that
/// `inline-small` inlines into what the user wrote: larger than between
/// derived functions (`Options::inline_size`), since the bodies known there
/// are derived functions, already optimised, whose inlining into a loop
/// lets the Core rules see a one-hot direction (`[fwd f]` of a sum or a
/// dot product is 15 to 40 nodes).
pub const WRITTEN_INLINE_SIZE: usize = 100;

/// The program's function names, without their bodies: `has_def(f)` if the
/// program declares a function of `f`'s base name.
pub struct Declared<'a>(pub &'a dyn Fn(&str) -> bool);

impl crate::Defs for Declared<'_> {
    fn def(&self, _: &ksc_ir::FunName) -> Option<&Def> {
        None
    }
    fn has_def(&self, name: &ksc_ir::FunName) -> bool {
        (self.0)(&name.base)
    }
}

/// Runs `strategy` on a definition's body, its parameters in scope, and
/// compacts the body if it succeeded: whether it did, and the rewriter
/// (its trace and warnings).
fn rewrite_def<'g>(
    def: &mut Def,
    globals: &'g Globals<'g>,
    options: crate::Options,
    strategy: &crate::Strategy,
) -> (bool, crate::Rewriter<'g>) {
    let params: Vec<ksc_ir::Var> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = ksc_ir::term::fresh_floor(&def.body, def.root, params.iter());
    let mut rw = crate::Rewriter::with_options(globals, options);
    rw.set_in_scope(params);
    rw.set_def(&def.name);
    let out = {
        let mut b = Builder::new(&mut def.body, &mut fresh);
        rw.apply(strategy, &mut b, def.root)
    };
    if let Some(root) = out {
        let (body, root) = ksc_ir::term::compact(&def.body, root);
        def.body = body;
        def.root = root;
    }
    (out.is_some(), rw)
}

/// What [`apply_schedule`] did: whether the strategy succeeded, how often
/// each rule fired (in the order they first fired), and the warnings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScheduleRun {
    pub succeeded: bool,
    pub fired: Vec<(String, usize)>,
    pub warnings: Vec<String>,
}

/// Runs the program's strategy `name` (without parameters) on a derived
/// function, after its optimisation (`(gdef rev [f T] NAME)`, `ksc deriv
/// --schedule NAME`); a strategy that fails leaves it as it was. An error if
/// there is no such strategy or it takes parameters.
pub fn apply_schedule(
    def: &mut Def,
    globals: &Globals,
    schedules: &Schedules,
    name: &str,
) -> Result<ScheduleRun, String> {
    let strategy = match (schedules.library().params(name), schedules.get(name)) {
        (_, Some(s)) => s,
        (Some(k), None) => {
            let plural = if k == 1 { "strategy" } else { "strategies" };
            return Err(format!("the strategy `{name}` takes {k} {plural}: name one that applies it to its arguments"));
        }
        (None, _) => {
            let names = schedules.library().names().join(", ");
            return Err(format!("`{name}` is not a strategy of the file or a schedule of ksc (they are: {names})"));
        }
    };
    let options = crate::Options { trace: true, ..crate::Options::default() };
    let (succeeded, mut rw) = rewrite_def(def, globals, options, &strategy);
    let mut run = ScheduleRun { succeeded, ..ScheduleRun::default() };
    for f in rw.trace() {
        match run.fired.iter_mut().find(|(r, _)| *r == f.rule) {
            Some((_, n)) => *n += 1,
            None => run.fired.push((f.rule.clone(), 1)),
        }
    }
    run.warnings = rw.take_warnings().into_iter().map(|w| w.message).collect();
    Ok(run)
}

/// The program's schedules: ksc's, its `strategy` declarations (which may
/// replace them) and its `rule`s; warnings for the rules it cannot use and
/// the strategies with an error (which checking reports, located).
pub fn program_schedules(rules: &[&ksc_ir::Rule], strategies: &[&ksc_ir::StrategyDecl]) -> (Schedules, Vec<String>) {
    let (user, mut warnings) = user_rule_set(rules);
    let (schedules, errors) = Schedules::program(strategies, &user);
    warnings.extend(
        errors.into_iter().map(|e| format!("strategy `{}` is not used: {}", strategies[e.decl].name, e.message)),
    );
    (schedules, warnings)
}

/// Simplifies a Jacobian `[D f]` with the program's schedules (its rules,
/// the laws of linear maps, Core rules, ANF, CSE). With `trace`, the report
/// has the rules that fired, in order, and the phases with the term's size
/// after each (empty without).
pub fn simplify_jacobian(d: &mut Def, globals: &Globals, schedules: &Schedules, trace: bool) -> crate::Report {
    let options = crate::Options { trace, ..crate::Options::default() };
    crate::optimise_def(d, schedules, globals, &options)
}

// ---------------------------------------------------------------------------
// The passes, in the order `steps` first runs them.

/// `simplify`: the program's rules once, then the laws, the Core rules,
/// ANF and CSE ([`crate::optimise_def`]).
struct Simplify;

impl<'a> Pass<Def, DerivedCx<'a>> for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    /// Always `true`: whether the simplifier changed anything is not known
    /// cheaply, and no step repeats on it.
    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        let report = crate::optimise_def(def, cx.schedules, cx.globals, &crate::Options::default());
        cx.warnings.borrow_mut().extend(report.warnings.iter().map(|w| format!("{}: {}", def.name, w.message)));
        true
    }
}

/// `share-loop-values`: forward mode's loops of values and of tangents
/// fused ([`crate::fuse_loops`], then CSE at once, which reads the values
/// from the tangents' pairs before the cleanup could split the loops
/// again), the `if`s on one test merged ([`crate::merge_ifs`], then CSE:
/// a reverse pass's branch reads its primal values from the primal's
/// branch), then [`crate::share_loop_values`] and
/// [`crate::folds_from_scans`], on the body in A-normal form.
struct ShareLoopValues;

impl<'a> Pass<Def, DerivedCx<'a>> for ShareLoopValues {
    fn name(&self) -> &'static str {
        "share-loop-values"
    }

    fn enabled(&self, def: &Def, _: &DerivedCx<'a>) -> bool {
        matches!(def.name.derivs.first(), Some(Derivation::Rev | Derivation::Fwd | Derivation::FwdT))
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        let globals = cx.globals;
        let forward = matches!(def.name.derivs.first(), Some(Derivation::Fwd | Derivation::FwdT));
        let fused = forward
            && in_anf_to(def, |b, root, params| {
                // CSE first: loops over sizes computed twice have one size.
                let root = crate::cse(b, globals, root, params);
                (crate::fuse_loops(b, globals, root) > 0).then(|| {
                    // The fused bodies' chains are nested in the lambda's:
                    // one chain again, so CSE sees across them.
                    let root = crate::anf(b, root, params);
                    crate::cse(b, globals, root, params)
                })
            });
        // Then CSE reads a branch's values from the merged `if`'s other.
        // In an A-normal form of its own, after the fused bodies' chains
        // are one again: merged in the fusion's, forward mode of a tree
        // in a loop cost 5 times the work at 4 times the size
        // (`cost_native`).
        let merged = in_anf_to(def, |b, root, params| {
            (crate::merge_ifs(b, globals, root) > 0).then(|| {
                let root = crate::anf(b, root, params);
                crate::cse(b, globals, root, params)
            })
        });
        let shared = in_anf(def, |b, root| {
            crate::share_loop_values(b, globals, root) + crate::folds_from_scans(b, globals, root) > 0
        });
        fused || merged || shared
    }
}

/// `mark-paired-calls`: a callee's primal call and its reverse pass marked
/// for inlining together ([`chain::mark_paired_calls`]).
struct MarkPairedCalls;

impl<'a> Pass<Def, DerivedCx<'a>> for MarkPairedCalls {
    fn name(&self) -> &'static str {
        "mark-paired-calls"
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        chain::mark_paired_calls(def, cx.globals)
    }
}

/// `inline-paired`: one level of [`chain`]'s inlining, the calls
/// `mark-paired-calls` marked inlined and the primal values they share
/// computed once. In a body without lambdas that is
/// [`crate::schedule::inline_marked`] (inlining, ANF and CSE), and the
/// whole simplifier runs once after the last level ([`SimplifyInlined`]):
/// a simplifier run per level made the levels cost as much as simplifying
/// the body 16 times (on a chain of 10,000 calls, 17 ms for each
/// `[rev gk]`). A body with loops (before or after the level) is
/// simplified after each level, as before: the loop rules decide which
/// pairs the next level finds there (without them, LSTM's reverse pass was
/// 5% slower). So after this pass the body is simplified if and only if
/// it has a lambda.
struct InlinePaired;

impl<'a> Pass<Def, DerivedCx<'a>> for InlinePaired {
    fn name(&self) -> &'static str {
        "inline-paired"
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        if !has_lambda(def) {
            crate::schedule::inline_marked(def, cx.schedules, cx.globals);
            if !has_lambda(def) {
                return true;
            }
        }
        Simplify.run(def, cx)
    }
}

/// `simplify` after the last level of [`InlinePaired`], for a body it did
/// not simplify (one without lambdas).
struct SimplifyInlined;

impl<'a> Pass<Def, DerivedCx<'a>> for SimplifyInlined {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn enabled(&self, def: &Def, _: &DerivedCx<'a>) -> bool {
        !has_lambda(def)
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        Simplify.run(def, cx)
    }
}

/// Does the body (from its root) hold a lambda?
fn has_lambda(def: &Def) -> bool {
    let mut stack = vec![def.root];
    while let Some(e) = stack.pop() {
        let node = &def.body.exprs[e];
        if matches!(node, Expr::Lam(..)) {
            return true;
        }
        stack.extend(ksc_ir::term::children(node));
    }
    false
}

/// Does the body hold a `$scan` (a fold's reverse pass)?
fn has_scan(def: &Def) -> bool {
    def.body.exprs.iter().any(|(_, e)| matches!(e, Expr::Call(Callee::Prim(Prim::Scan), _)))
}

/// `scan-extras`: values backward loops compute again from a fold's
/// accumulators, moved out of the loops ([`crate::scan_extras`]).
struct ScanExtras;

impl<'a> Pass<Def, DerivedCx<'a>> for ScanExtras {
    fn name(&self) -> &'static str {
        "scan-extras"
    }

    fn enabled(&self, def: &Def, _: &DerivedCx<'a>) -> bool {
        has_scan(def)
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        in_anf(def, |b, root| crate::scan_extras(b, cx.globals, root, chain::CALLEE))
    }
}

/// `fuse-scan-extras`: those values computed by the scan's steps
/// ([`crate::fuse_scan_extras`]).
struct FuseScanExtras;

impl<'a> Pass<Def, DerivedCx<'a>> for FuseScanExtras {
    fn name(&self) -> &'static str {
        "fuse-scan-extras"
    }

    fn enabled(&self, def: &Def, _: &DerivedCx<'a>) -> bool {
        has_scan(def)
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        in_anf(def, |b, root| crate::fuse_scan_extras(b, cx.globals, root, chain::CALLEE))
    }
}

/// `mark-calls-in-loops`: the calls in a `[jac f]`'s column (row) loops
/// marked for inlining ([`jac::mark_calls_in_loops`]).
struct MarkCallsInLoops;

impl<'a> Pass<Def, DerivedCx<'a>> for MarkCallsInLoops {
    fn name(&self) -> &'static str {
        "mark-calls-in-loops"
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        jac::mark_calls_in_loops(def, cx.globals)
    }
}

/// `hoist-loop-invariants`: the primal work of a `[jac f]` moved out of its
/// column (row) loops ([`jac::hoist_loop_invariants`]).
struct HoistLoopInvariants;

impl<'a> Pass<Def, DerivedCx<'a>> for HoistLoopInvariants {
    fn name(&self) -> &'static str {
        "hoist-loop-invariants"
    }

    /// Always `true` (the body is put in A-normal form either way).
    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        jac::hoist_loop_invariants(def, cx.globals);
        true
    }
}

/// `hoist-inner-invariants`: the primal values of the loops inside the
/// column loops, computed once for all columns
/// ([`jac::hoist_inner_invariants`]).
struct HoistInnerInvariants;

impl<'a> Pass<Def, DerivedCx<'a>> for HoistInnerInvariants {
    fn name(&self) -> &'static str {
        "hoist-inner-invariants"
    }

    fn run(&self, def: &mut Def, cx: &DerivedCx<'a>) -> bool {
        jac::hoist_inner_invariants(def, cx.globals)
    }
}

// ---------------------------------------------------------------------------

/// Runs `pass` on `def`'s body in A-normal form; whether it changed it.
/// Unchanged, the definition is left as it was (the A-normal form's nodes
/// would count against inlining it).
fn in_anf(def: &mut Def, pass: impl FnOnce(&mut Builder, ExprId) -> bool) -> bool {
    in_anf_to(def, |b, root, _| pass(b, root).then_some(root))
}

/// [`in_anf`] with a pass that is also given the definition's parameters
/// and returns the new root (`None`: unchanged).
fn in_anf_to(def: &mut Def, pass: impl FnOnce(&mut Builder, ExprId, &[String]) -> Option<ExprId>) -> bool {
    let saved = def.clone();
    let params: Vec<String> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = ksc_ir::term::fresh_floor(&def.body, def.root, params.iter());
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let root = crate::anf(&mut b, def.root, &params);
    match pass(&mut b, root, &params) {
        Some(root) => {
            def.root = root;
            true
        }
        None => {
            *def = saved;
            false
        }
    }
}
