//! The named schedules of ksc: each is a short strategy expression over rule
//! sets, so the order in which rules are tried is visible in one place.
//!
//! They are written in the strategy language ([`crate::script`]) in
//! `schedules.ks`, which this crate ships and reads at start-up:
//!
//! | schedule | for | strategy |
//! |---|---|---|
//! | `simplify-lm` ([`simplify_lm`]) | Jacobians (`[D f]`, `lm*` terms) | `(normalize (rules map-laws core))` |
//! | `push-apply` ([`push_apply`]) | `lmApply`/`lmApplyR` down to LM-free code | `(normalize (rules application-laws map-laws core))` |
//! | `core-cleanup` ([`core_cleanup`]) | ordinary Core code | `(normalize (rules core))` |
//! | `user-rules` ([`user_rules_pass`]) | the program's `rule`s, first match, once per node | `(bottomUp (try (rules user)))` |
//! | `inline-marked` ([`inline_marked`]) | one level of paired inlining | `(normalize (rules inline-marked let-tuple-split))` |
//!
//! A program's strategy of one of these names replaces ksc's for its
//! derived functions ([`Schedules::program`]).
//!
//! Every law set applies the duplicating laws of `ksc_linmap::LAWS` only
//! where the operand they repeat is atomic (see
//! [`crate::rule::DUPLICATED_OPERAND`]), so no schedule duplicates work.
//! [`optimise_def`] runs a whole definition through `user-rules`,
//! `push-apply`, ANF, CSE and `push-apply` again.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Def, Var};

use crate::engine::{Fired, Options, Rewriter, Warning};
use crate::globals::Globals;
use crate::rule::RuleSet;
use crate::script::Schedules;
use crate::strategy::Strategy;

/// Jacobians: `simplify-lm` of `schedules.ks`, the map laws and the Core
/// rules to a normal form.
pub fn simplify_lm() -> Strategy {
    Schedules::builtin().schedule("simplify-lm")
}

/// `push-apply` of `schedules.ks`: `lmApply`/`lmApplyR` pushed through the
/// combinators down to LM-free code (Core rules float lets, `if`s and
/// `assert`s out of the way).
pub fn push_apply() -> Strategy {
    Schedules::builtin().schedule("push-apply")
}

/// `core-cleanup` of `schedules.ks`: the Core rules to a normal form.
pub fn core_cleanup() -> Strategy {
    Schedules::builtin().schedule("core-cleanup")
}

/// `user-rules` of `schedules.ks` over `user`: at every node, children
/// first, the first rule that matches fires once; its result is not
/// rewritten again (a commutativity rule terminates).
pub fn user_rules_pass(user: &RuleSet) -> Strategy {
    Schedules::program(&[], user).0.schedule("user-rules")
}

/// What [`optimise_def`] did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Rules fired, in order (when `options.trace`).
    pub trace: Vec<Fired>,
    /// The phases run, in order, each with the size of the whole term
    /// after it and how many rules of [`Report::trace`] fired before its
    /// end (when `options.trace`).
    pub phases: Vec<Phase>,
    pub warnings: Vec<Warning>,
}

/// One phase of [`optimise_def`] (for `--trace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    /// `user-rules`, `simplify`, `anf`, `cse` or `simplify-again`.
    pub name: &'static str,
    /// The nodes of the whole term after the phase.
    pub size: usize,
    /// The rules fired up to the end of the phase (an index into the trace).
    pub fired: usize,
    /// The `normalize`s the phase ran: in which named strategy, how many
    /// rewrites of how much fuel.
    pub normalizes: Vec<crate::NormalizeRun>,
}

/// The nodes of the tree at `root`.
pub fn term_size(body: &ksc_ir::Body, root: ksc_ir::ExprId) -> usize {
    let (mut n, mut stack) = (0, vec![root]);
    while let Some(e) = stack.pop() {
        n += 1;
        stack.extend(term::children(&body.exprs[e]));
    }
    n
}

/// Optimises a definition in place with a program's schedules: the user
/// rules once (`user-rules`, when the program has rules or its own
/// `user-rules`), then `push-apply`
/// (which also simplifies maps and cleans up Core), then (with
/// `options.cse`) ANF, CSE and `push-apply` again. The body is compacted
/// afterwards (the arena keeps only the result's tree).
pub fn optimise_def(def: &mut Def, schedules: &Schedules, globals: &Globals, options: &Options) -> Report {
    let params: Vec<Var> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = term::fresh_floor(&def.body, def.root, params.iter());
    let mut rw = Rewriter::with_options(globals, options.clone());
    rw.set_def(&def.name);
    // Nothing of the body but the term is kept here: the simplifier may
    // compact the arena as it goes.
    rw.set_compacting(true);
    let mut root = def.root;
    let mut phases = Vec::new();
    {
        let mut b = Builder::new(&mut def.body, &mut fresh);
        // Records a phase's end (only when tracing: sizing walks the term).
        let mut phase = |name, b: &Builder, root, rw: &mut Rewriter| {
            if options.trace {
                let (size, fired, normalizes) = (term_size(b.body, root), rw.trace().len(), rw.take_normalizes());
                phases.push(Phase { name, size, fired, normalizes });
            }
        };
        if schedules.runs_user_rules() {
            root = rw.apply(&schedules.schedule("user-rules"), &mut b, root).unwrap_or(root);
            phase("user-rules", &b, root, &mut rw);
        }
        let simplify = schedules.schedule("push-apply");
        root = rw.apply(&simplify, &mut b, root).unwrap_or(root);
        phase("simplify", &b, root, &mut rw);
        if options.cse {
            root = crate::anf::anf(&mut b, root, &params);
            phase("anf", &b, root, &mut rw);
            root = crate::cse::cse(&mut b, globals, root, &params);
            phase("cse", &b, root, &mut rw);
            root = rw.apply(&simplify, &mut b, root).unwrap_or(root);
            phase("simplify-again", &b, root, &mut rw);
        }
    }
    let (body, root) = term::compact(&def.body, root);
    def.body = body;
    def.root = root;
    Report { trace: rw.take_trace(), phases, warnings: rw.take_warnings() }
}

/// Inlines the calls marked `$inline` and computes once what they compute
/// twice: the `inline-marked` rule (with `let-tuple-split` for the
/// parameters it binds), then ANF and CSE (which substitutes the lets of
/// variables, such as `let x = ksc$x1` of a derived body); none of the other Core
/// rules, laws or user rules. This is one level of the paired inlining of
/// reverse passes (`pipeline::chain`): between levels, only the inlining
/// and the sharing of the callee's primal values decide which pairs the
/// next level finds, and the whole simplifier runs once after the last
/// one. The body is left in A-normal form, compacted.
pub fn inline_marked(def: &mut Def, schedules: &Schedules, globals: &Globals) {
    let params: Vec<Var> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = term::fresh_floor(&def.body, def.root, params.iter());
    let mut rw = Rewriter::with_options(globals, Options::default());
    rw.set_compacting(true);
    rw.set_def(&def.name);
    let mut root = def.root;
    {
        let mut b = Builder::new(&mut def.body, &mut fresh);
        root = rw.apply(&schedules.schedule("inline-marked"), &mut b, root).unwrap_or(root);
        root = crate::anf::anf(&mut b, root, &params);
        root = crate::cse::cse(&mut b, globals, root, &params);
    }
    let (body, root) = term::compact(&def.body, root);
    def.body = body;
    def.root = root;
}
