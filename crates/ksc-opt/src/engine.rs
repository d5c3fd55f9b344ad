//! The interpreter of strategies over Core IR bodies.
//!
//! Terms are expression trees in an arena ([`ksc_ir::Body`]); a rewrite
//! never changes a node, it allocates new ones (copy-on-write), typed by the
//! [`Builder`]. Rewriting a sub-term allocates new copies of its ancestors,
//! so trees that share the old nodes stay valid.
//!
//! `top_down`, `bottom_up` and `normalize` walk the term with an explicit
//! stack, so their depth is bounded by the strategy's nesting, not the
//! term's: bodies nested thousands deep are fine. `one` and `all` descend one
//! level. The traversals keep the [`Scope`] of binders above the current
//! node for the rules.
//!
//! `normalize(s)` rewrites until `s` applies nowhere, like
//! `repeat(top_down(s))`, but in linear time for the usual terms: instead of
//! searching from the root again after every rewrite (which retries every
//! rebuilt ancestor, quadratic on long let chains), it sweeps the term top
//! down, applying `s` at each node as long as it succeeds before sweeping
//! the children of the result, and repeats sweeps until one changes
//! nothing. Outer redexes still go first; the result is a normal form (the
//! same as `repeat(top_down(s))`'s for confluent rules). A subtree where a
//! sweep found nothing is remembered by id and skipped later (nodes never
//! change, and rules depend only on a node's subtree and the binders above
//! it). It stops after a bounded number of rewrites (fuel), reporting a
//! [`Warning`] instead of looping forever; `repeat` is bounded the same way.
//!
//! Every rule result is checked: a rewrite to a term of another type is
//! refused and reported ([`WarningKind::TypeChanged`]); a rewrite of a term
//! whose type is unknown (a part of the program that failed to check) is
//! never attempted.

use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, Cache};
use ksc_ir::{Callee, Expr, ExprId, FunName, Pat, Prim, Var};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::globals::Globals;
use crate::rule::{Ctx, HeadKey, Rule, RuleKind, RuleSet};
use crate::scope::Scope;
use crate::script::{Library, MAX_CALL_DEPTH};
use crate::strategy::Strategy;

thread_local! {
    /// Rules fired on this thread (see [`rewrites_on_this_thread`]).
    static REWRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many rewrites (rules that fired) every run on this thread has done
/// so far: the simplifier's work, which tests bound without reading a
/// clock.
pub fn rewrites_on_this_thread() -> u64 {
    REWRITES.with(|r| r.get())
}

/// The fewest nodes an arena has before a run may compact it (see
/// [`Rewriter::set_compacting`]): small bodies are never compacted.
const COMPACT_FROM: usize = 50_000;

/// The default [`Options::work`]: nodes made by one `normalize`. The
/// benchmark programs' largest normalize makes 39,000 (hand.ks); a
/// program whose derivative doubles at each of k nested calls made a
/// million at k = 11 and took minutes from k = 13 before this bound.
pub const WORK: u64 = 2_000_000;

/// Settings of a rewriting run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The most rewrites one `normalize` may do before it stops with a warning.
    pub fuel: u32,
    /// The most nodes one `normalize`'s rewrites may make before it stops
    /// with a warning: a rewrite copies the path down to what it changes,
    /// so on a deep term each costs its depth, and the fuel alone bounds
    /// the rewrites, not the time they take.
    pub work: u64,
    /// The most iterations one `repeat` may do before it stops with a warning.
    pub repeat_limit: u32,
    /// Record every rule that fires, with the printed term before and after.
    pub trace: bool,
    /// Functions whose body has at most this many nodes are inlined by the
    /// `inline-small` rule (when not recursive).
    pub inline_size: usize,
    /// Run ANF and CSE in [`crate::optimise_def`].
    pub cse: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { fuel: 100_000, repeat_limit: 100_000, trace: false, inline_size: 12, cse: true, work: WORK }
    }
}

/// One rule firing, for `--trace`.
#[derive(Clone, Debug, PartialEq)]
pub struct Fired {
    pub rule: String,
    pub kind: RuleKind,
    /// The rule in one line, from its table ([`Rule::statement`]).
    pub statement: String,
    /// The rewritten term (the redex), printed as `.ks`.
    pub before: String,
    /// What it became.
    pub after: String,
    /// The named strategies running when it fired, outermost first
    /// (`push-apply`, or `tidy > first-place` for a program's), joined by
    /// ` > `; empty when none is.
    pub strategy: String,
}

impl fmt::Display for Fired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}  ==>  {}", self.kind, self.rule, self.before, self.after)
    }
}

/// What can go wrong in a run without making its result wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// A `normalize` ran out of fuel: its rules may not terminate (such as a
    /// commutativity rule). The term reached is returned.
    FuelExhausted,
    /// A `repeat` ran out of iterations.
    RepeatLimit,
    /// A rule produced a term of another type; the rewrite was refused. This
    /// is a bug in the rule (or a user rule whose sides differ in type).
    TypeChanged,
    /// A named strategy was called too deep or too often (a recursion that
    /// does not end), or is not defined where it was called: the call
    /// failed ([`crate::script`]).
    CallLimit,
}

/// A warning of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Interprets strategies, collecting the trace and warnings of its runs.
pub struct Rewriter<'g> {
    globals: &'g Globals<'g>,
    pub options: Options,
    trace: Vec<Fired>,
    warnings: Vec<Warning>,
    /// Each `normalize` run, when tracing.
    normalizes: Vec<NormalizeRun>,
    /// May a run compact the body (see [`Rewriter::set_compacting`])?
    compacting: bool,
    /// The variables bound around the terms it rewrites (a definition's
    /// parameters), for `anf` and `cse`.
    in_scope: Vec<Var>,
    /// The names of the definition whose body it rewrites, for `in-def`
    /// ([`def_names`]); none if it was not told.
    def_names: Vec<String>,
}

/// One `normalize` of a traced run: the named strategies it ran in, the
/// rules it fired and its fuel (the most rewrites it could do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalizeRun {
    pub strategy: String,
    pub rewrites: usize,
    pub fuel: u32,
}

/// Applies `s` at `root` with default options and nothing known about the
/// program's functions ([`Globals::unknown`]); warnings are dropped. None
/// if the strategy fails.
pub fn apply(s: &Strategy, b: &mut Builder, root: ExprId) -> Option<ExprId> {
    let globals = Globals::unknown();
    Rewriter::new(&globals).apply(s, b, root)
}

impl<'g> Rewriter<'g> {
    pub fn new(globals: &'g Globals<'g>) -> Rewriter<'g> {
        Rewriter::with_options(globals, Options::default())
    }

    pub fn with_options(globals: &'g Globals<'g>, options: Options) -> Rewriter<'g> {
        Rewriter {
            globals,
            options,
            trace: Vec::new(),
            warnings: Vec::new(),
            normalizes: Vec::new(),
            compacting: false,
            in_scope: Vec::new(),
            def_names: Vec::new(),
        }
    }

    /// Lets a `normalize` applied at the top ([`Rewriter::apply`] of a
    /// `normalize` strategy) compact the body's arena while it runs, once
    /// the garbage of copy-on-write rewriting outgrows what is reachable
    /// from the term: a rewrite copies the path to what it changes, so
    /// rewriting a let chain of n bindings (each `let-atom` substituting
    /// down to the end of the chain) allocates O(n^2) nodes, of which O(n)
    /// stay reachable. Compaction keeps the order of the surviving nodes,
    /// so the result is the same; but every other id into the body is
    /// invalidated: only for a caller that keeps nothing of the body but
    /// the term it rewrites.
    pub fn set_compacting(&mut self, on: bool) {
        self.compacting = on;
    }

    /// The variables bound around the terms it rewrites (a definition's
    /// parameters): `anf` and `cse` must not capture them.
    pub fn set_in_scope(&mut self, vars: Vec<Var>) {
        self.in_scope = vars;
    }

    /// The definition whose body it rewrites: `(in-def NAME S)` runs S
    /// only there, NAME one of [`def_names`].
    pub fn set_def(&mut self, name: &FunName) {
        self.def_names = def_names(name).to_vec();
    }

    pub fn globals(&self) -> &'g Globals<'g> {
        self.globals
    }

    /// Applies `s` to the term at `root`: the rewritten term, or None if the
    /// strategy fails. The builder's fresh-name counter is first raised past
    /// every `ksc$` name of the term, so fresh names cannot clash.
    pub fn apply(&mut self, s: &Strategy, b: &mut Builder, root: ExprId) -> Option<ExprId> {
        term::bump_fresh(b, root);
        let compact = self.compacting && normalizes_at_top(s, None);
        let live = b.body.exprs.len();
        let mut run = Run {
            compact,
            live,
            normalizing: 0,
            b,
            globals: self.globals,
            options: &self.options,
            trace: &mut self.trace,
            warnings: &mut self.warnings,
            cache: Cache::new(),
            scope: Scope::new(),
            here: Here::default(),
            recent: VecDeque::new(),
            dispatch: FxHashMap::default(),
            libraries: Vec::new(),
            call_depth: 0,
            calls: 0,
            call_limit_warned: false,
            names: Vec::new(),
            normalizes: &mut self.normalizes,
            in_scope: &self.in_scope,
            def_names: &self.def_names,
        };
        run.apply(s, root)
    }

    /// The rules fired so far, in order (recorded when `options.trace`).
    pub fn trace(&self) -> &[Fired] {
        &self.trace
    }

    pub fn take_trace(&mut self) -> Vec<Fired> {
        std::mem::take(&mut self.trace)
    }

    /// The `normalize`s run so far, in the order they ended (recorded when
    /// `options.trace`).
    pub fn take_normalizes(&mut self) -> Vec<NormalizeRun> {
        std::mem::take(&mut self.normalizes)
    }

    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }
}

/// The names `in-def` knows a definition by: as ksc prints it without
/// types (`f`, `[rev f]`) and with them (`[f (Vec Float)]`).
pub fn def_names(def: &FunName) -> [String; 2] {
    [def.short(), def.to_string()]
}

/// Is `s` a `normalize` (through libraries and calls of named strategies)?
fn normalizes_at_top(s: &Strategy, lib: Option<&Library>) -> bool {
    match s {
        Strategy::Normalize(..) => true,
        Strategy::In(l, inner) => normalizes_at_top(inner, Some(l)),
        Strategy::InDef(_, inner) => normalizes_at_top(inner, lib),
        Strategy::Call(name, args) => {
            lib.and_then(|l| l.unfold(name, args)).is_some_and(|body| matches!(body, Strategy::Normalize(..)))
        }
        _ => false,
    }
}

/// A child position as strategies see it: the argument tuple of a call is
/// looked through; a `build`/`sumbuild` lambda knows its size expression.
#[derive(Clone, Debug)]
struct Slot {
    id: ExprId,
    /// The variables bound for this child.
    binds: Vec<Var>,
    /// For the lambda of `build n (lam ..)` / `sumbuild n (lam ..)`: `n`.
    lam_range: Option<ExprId>,
    /// The single argument of a primitive that splats a literal tuple
    /// argument (`print`, `Vec_init`, `lmVCat`, `lmHCat`).
    splat_arg: bool,
    /// For the body of a `let` of one variable: its right side.
    value: Option<ExprId>,
}

/// What the traversal knows about the node it is at from its parent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Here {
    /// The size expression if the node is a `build`/`sumbuild` lambda.
    range: Option<ExprId>,
    /// The node is the single argument of a splatting primitive: it must not
    /// become a literal tuple, which would be read as several arguments.
    splat_arg: bool,
}

fn slots(b: &Builder, e: ExprId) -> Vec<Slot> {
    let plain = |id| Slot { id, binds: Vec::new(), lam_range: None, splat_arg: false, value: None };
    match b.expr(e) {
        Expr::Call(c, arg) => match b.expr(*arg) {
            Expr::Tuple(es) => {
                let ranged = matches!(c, Callee::Prim(Prim::Build | Prim::Sumbuild)) && es.len() == 2;
                es.iter()
                    .enumerate()
                    .map(|(i, &id)| Slot {
                        id,
                        binds: Vec::new(),
                        lam_range: (ranged && i == 1 && matches!(b.expr(id), Expr::Lam(..))).then_some(es[0]),
                        splat_arg: false,
                        value: None,
                    })
                    .collect()
            }
            _ => vec![Slot { splat_arg: matches!(c, Callee::Prim(p) if p.splats_arguments()), ..plain(*arg) }],
        },
        Expr::Let(p, r, s) => {
            let value = matches!(p, Pat::Var(_)).then_some(*r);
            vec![plain(*r), Slot { binds: p.vars().to_vec(), value, ..plain(*s) }]
        }
        Expr::Lam(v, _, s) => vec![Slot { binds: vec![v.clone()], ..plain(*s) }],
        node => term::children(node).into_iter().map(plain).collect(),
    }
}

/// `e` with its slot children replaced by `new` (allocates only if one
/// changed). Children have the types of the ones they replace, so every
/// rebuilt node keeps its type.
fn rebuild(b: &mut Builder, e: ExprId, new: &[ExprId]) -> ExprId {
    let node = b.expr(e).clone();
    let ty = b.ty(e);
    match &node {
        Expr::Call(c, arg) => {
            if let Expr::Tuple(es) = b.expr(*arg).clone() {
                if es == new {
                    return e;
                }
                let tty = b.ty(*arg);
                let t = b.body.alloc_typed(Expr::Tuple(new.to_vec()), tty);
                return b.body.alloc_typed(Expr::Call(c.clone(), t), ty);
            }
            if new[0] == *arg {
                return e;
            }
            b.body.alloc_typed(Expr::Call(c.clone(), new[0]), ty)
        }
        _ => {
            if term::children(&node)[..] == new[..] {
                return e;
            }
            b.body.alloc_typed(term::with_children(&node, new), ty)
        }
    }
}

/// `e` with slot child `k` replaced.
fn rebuild_at(b: &mut Builder, e: ExprId, k: usize, child: ExprId) -> ExprId {
    let mut kids: Vec<ExprId> = slots(b, e).into_iter().map(|s| s.id).collect();
    kids[k] = child;
    rebuild(b, e, &kids)
}

/// One run of a strategy over one term.
struct Run<'a, 'b, 'g> {
    /// May the arena be compacted (see [`Rewriter::set_compacting`])?
    compact: bool,
    /// The arena's size after the last compaction (or at the start).
    live: usize,
    /// How many `normalize`s are running (only the outermost compacts:
    /// an inner one does not know the outer one's ids).
    normalizing: u32,
    b: &'a mut Builder<'b>,
    globals: &'a Globals<'g>,
    options: &'a Options,
    trace: &'a mut Vec<Fired>,
    warnings: &'a mut Vec<Warning>,
    cache: Cache,
    scope: Scope,
    /// What the parent says about the node being looked at.
    here: Here,
    /// The last rules to fire, for messages.
    recent: VecDeque<String>,
    /// For each rule set and kind of node, the rules that may apply there.
    dispatch: FxHashMap<(*const RuleSet, HeadKey), Rc<Vec<usize>>>,
    /// The libraries of named strategies in scope, innermost last.
    libraries: Vec<Arc<Library>>,
    /// Named strategy calls running, and made in this run.
    call_depth: u32,
    calls: u64,
    /// Whether the run has warned of its call limit (once).
    call_limit_warned: bool,
    /// The named strategies running, outermost first (for the trace).
    names: Vec<Arc<str>>,
    /// Each `normalize` that ended, when tracing.
    normalizes: &'a mut Vec<NormalizeRun>,
    /// The variables bound around the term (see [`Rewriter::set_in_scope`]).
    in_scope: &'a [Var],
    /// The names of the definition being rewritten (see
    /// [`Rewriter::set_def`]).
    def_names: &'a [String],
}

/// A node on the path of a traversal.
struct Frame {
    node: ExprId,
    here: Here,
    slots: Vec<Slot>,
    /// The slot being visited (or the next to visit).
    next: usize,
    /// Results of the children visited so far (bottom-up).
    done: Vec<ExprId>,
    /// Scope mark before the current child's binders.
    mark: usize,
}

impl Run<'_, '_, '_> {
    fn apply(&mut self, s: &Strategy, e: ExprId) -> Option<ExprId> {
        match s {
            Strategy::Id => Some(e),
            Strategy::Fail => None,
            Strategy::Rule(r) => {
                let ty = self.b.ty(e);
                if ty.contains_unknown() || !r.may_match(HeadKey::of(self.b.expr(e))) {
                    return None;
                }
                self.fire(r, e, &ty)
            }
            Strategy::Rules(set) => {
                let key = HeadKey::of(self.b.expr(e));
                let dispatch = self
                    .dispatch
                    .entry((Arc::as_ptr(set), key))
                    .or_insert_with(|| {
                        Rc::new(
                            set.rules().iter().enumerate().filter(|(_, r)| r.may_match(key)).map(|(i, _)| i).collect(),
                        )
                    })
                    .clone();
                if dispatch.is_empty() {
                    return None;
                }
                let ty = self.b.ty(e);
                if ty.contains_unknown() {
                    return None;
                }
                dispatch.iter().find_map(|&i| self.fire(&set.rules()[i], e, &ty))
            }
            Strategy::Seq(a, b) => {
                let e1 = self.apply(a, e)?;
                self.apply(b, e1)
            }
            Strategy::LChoice(a, b) => self.apply(a, e).or_else(|| self.apply(b, e)),
            Strategy::Try(s) => Some(self.apply(s, e).unwrap_or(e)),
            Strategy::Repeat(s) => {
                let mut cur = e;
                let mut n = 0;
                while let Some(next) = self.apply(s, cur) {
                    cur = next;
                    n += 1;
                    if n >= self.options.repeat_limit {
                        self.warn(WarningKind::RepeatLimit, format!("repeat({s}) stopped after {n} iterations"));
                        break;
                    }
                }
                Some(cur)
            }
            Strategy::One(s) => {
                for (k, slot) in slots(self.b, e).iter().enumerate() {
                    if let Some(c) = self.at_child(slot, |run| run.apply(s, slot.id)) {
                        return Some(rebuild_at(self.b, e, k, c));
                    }
                }
                None
            }
            Strategy::All(s) => {
                let slots = slots(self.b, e);
                let mut new = Vec::with_capacity(slots.len());
                for slot in &slots {
                    new.push(self.at_child(slot, |run| run.apply(s, slot.id))?);
                }
                Some(rebuild(self.b, e, &new))
            }
            Strategy::TopDown(s) => self.top_down(s, e, None),
            Strategy::BottomUp(s) => self.bottom_up(s, e),
            Strategy::Normalize(s, fuel) => {
                self.normalizing += 1;
                let r = self.normalize(s, e, fuel.unwrap_or(self.options.fuel));
                self.normalizing -= 1;
                Some(r)
            }
            Strategy::In(lib, s) => {
                self.libraries.push(lib.clone());
                let r = self.apply(s, e);
                self.libraries.pop();
                r
            }
            Strategy::Call(name, args) => {
                let body = self.libraries.last().and_then(|lib| lib.unfold(name, args));
                let Some(body) = body else {
                    self.warn(WarningKind::CallLimit, format!("the strategy `{s}` is not defined here; it failed"));
                    return None;
                };
                self.calls += 1;
                if self.call_depth >= MAX_CALL_DEPTH || self.calls > self.options.work {
                    if !self.call_limit_warned {
                        self.call_limit_warned = true;
                        let why = if self.call_depth >= MAX_CALL_DEPTH {
                            format!("nested {MAX_CALL_DEPTH} deep")
                        } else {
                            format!("{} times in one run", self.options.work)
                        };
                        self.warn(
                            WarningKind::CallLimit,
                            format!("named strategies were called {why} (at `{s}`): the call failed there"),
                        );
                    }
                    return None;
                }
                self.call_depth += 1;
                self.names.push(name.clone());
                let r = self.apply(&body, e);
                self.names.pop();
                self.call_depth -= 1;
                r
            }
            // Replaced by its argument when the call is unfolded.
            Strategy::Param(..) => None,
            Strategy::InDef(name, s) => {
                if self.def_names.iter().any(|d| **d == **name) {
                    self.apply(s, e)
                } else {
                    Some(e)
                }
            }
            Strategy::Anf | Strategy::Cse => {
                let mut vars = self.in_scope.to_vec();
                vars.extend(self.scope.bindings().iter().map(|b| b.name.clone()));
                Some(if matches!(s, Strategy::Anf) {
                    crate::anf::anf(self.b, e, &vars)
                } else {
                    crate::cse::cse(self.b, self.globals, e, &vars)
                })
            }
        }
    }

    /// Makes a child slot of the current node the current node: binds its
    /// variables (a lambda's parameter gets the lambda's range) and returns
    /// the scope mark to go back to.
    fn enter(&mut self, slot: &Slot) -> usize {
        let range = if slot.binds.is_empty() { None } else { self.here.range };
        let mark = self.scope.push(&slot.binds, range, slot.value);
        self.here = Here { range: slot.lam_range, splat_arg: slot.splat_arg };
        mark
    }

    /// Runs `f` with a child slot as the current node.
    fn at_child<T>(&mut self, slot: &Slot, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = self.here;
        let mark = self.enter(slot);
        let r = f(self);
        self.scope.truncate(mark);
        self.here = saved;
        r
    }

    /// Returns from a child to its parent frame.
    fn leave(&mut self, parent: &Frame) {
        self.scope.truncate(parent.mark);
        self.here = parent.here;
    }

    /// The first pre-order position where `s` applies, rewritten; None if
    /// there is none. With `memo`, subtrees known to contain no position
    /// where `s` applies are skipped, and subtrees found so are added.
    fn top_down(&mut self, s: &Strategy, root: ExprId, mut memo: Option<&mut FxHashSet<ExprId>>) -> Option<ExprId> {
        let (base_scope, base_here) = (self.scope.len(), self.here);
        let mut path: Vec<Frame> = Vec::new();
        let mut visit = Some(root);
        let result = loop {
            if let Some(x) = visit.take() {
                let known_normal = memo.as_ref().is_some_and(|m| m.contains(&x));
                if !known_normal {
                    if let Some(new) = self.apply(s, x) {
                        let mut cur = new;
                        while let Some(f) = path.pop() {
                            cur = rebuild_at(self.b, f.node, f.next, cur);
                        }
                        break Some(cur);
                    }
                    let slots = slots(self.b, x);
                    path.push(Frame {
                        node: x,
                        here: self.here,
                        slots,
                        next: 0,
                        done: Vec::new(),
                        mark: self.scope.len(),
                    });
                } else {
                    // Nothing to find below `x`: on to its next sibling.
                    let Some(parent) = path.last_mut() else { break None };
                    parent.next += 1;
                    let parent = path.last().expect("frame");
                    self.leave(parent);
                }
            }
            let Some(f) = path.last() else { break None };
            if f.next < f.slots.len() {
                let slot = f.slots[f.next].clone();
                let mark = self.enter(&slot);
                path.last_mut().expect("frame").mark = mark;
                visit = Some(slot.id);
                continue;
            }
            // Every child searched: nothing to find in this subtree.
            let f = path.pop().expect("frame");
            if let Some(m) = memo.as_deref_mut() {
                m.insert(f.node);
            }
            let Some(parent) = path.last_mut() else { break None };
            parent.next += 1;
            let parent = path.last().expect("frame");
            self.leave(parent);
        };
        self.scope.truncate(base_scope);
        self.here = base_here;
        result
    }

    /// `seq(all(bottom_up(s)), s)`, iteratively.
    fn bottom_up(&mut self, s: &Strategy, root: ExprId) -> Option<ExprId> {
        let (base_scope, base_here) = (self.scope.len(), self.here);
        let slots0 = slots(self.b, root);
        let mut path =
            vec![Frame { node: root, here: self.here, slots: slots0, next: 0, done: Vec::new(), mark: base_scope }];
        let result = loop {
            let f = path.last().expect("frame");
            if f.next < f.slots.len() {
                let slot = f.slots[f.next].clone();
                let mark = self.enter(&slot);
                path.last_mut().expect("frame").mark = mark;
                let child_slots = slots(self.b, slot.id);
                path.push(Frame {
                    node: slot.id,
                    here: self.here,
                    slots: child_slots,
                    next: 0,
                    done: Vec::new(),
                    mark: self.scope.len(),
                });
                continue;
            }
            let f = path.pop().expect("frame");
            self.here = f.here;
            let rebuilt = rebuild(self.b, f.node, &f.done);
            let Some(out) = self.apply(s, rebuilt) else { break None };
            let Some(parent) = path.last_mut() else { break Some(out) };
            parent.done.push(out);
            parent.next += 1;
            let parent = path.last().expect("frame");
            self.leave(parent);
        };
        self.scope.truncate(base_scope);
        self.here = base_here;
        result
    }

    /// Rewrites until `s` applies nowhere: sweeps over the term, each
    /// applying `s` at a node as long as it succeeds (outermost first) and
    /// then sweeping the children of the result, until a sweep changes
    /// nothing. Subtrees where a sweep found nothing are remembered and
    /// skipped later. At most `fuel` rewrites.
    fn normalize(&mut self, s: &Strategy, root: ExprId, fuel: u32) -> ExprId {
        let before = self.trace.len();
        let out = self.normalize_inner(s, root, fuel);
        if self.options.trace {
            let (strategy, rewrites) = (self.strategy_path(), self.trace.len() - before);
            self.normalizes.push(NormalizeRun { strategy, rewrites, fuel });
        }
        out
    }

    /// The named strategies running, outermost first, joined by ` > `.
    fn strategy_path(&self) -> String {
        self.names.iter().map(|n| &**n).collect::<Vec<_>>().join(" > ")
    }

    fn normalize_inner(&mut self, s: &Strategy, root: ExprId, fuel: u32) -> ExprId {
        let mut memo: FxHashSet<ExprId> = FxHashSet::default();
        let mut left = fuel;
        let mut work = self.options.work;
        let mut cur = root;
        loop {
            let (next, changed) = self.sweep(s, cur, &mut memo, &mut left, &mut work);
            cur = next;
            if work == 0 {
                self.warn(
                    WarningKind::FuelExhausted,
                    format!(
                        "normalize stopped after its rewrites made {} nodes (the term is too deep or too large to \
                         simplify further; the result is correct, less simplified); the last rules to fire: {}",
                        self.options.work,
                        self.recent.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
                    ),
                );
                return cur;
            }
            if left == 0 {
                let recent: Vec<&str> = self.recent.iter().map(String::as_str).collect();
                self.warn(
                    WarningKind::FuelExhausted,
                    format!(
                        "normalize stopped after {fuel} rewrites without reaching a normal form (its rules may not terminate); the last rules to fire: {}",
                        recent.join(", ")
                    ),
                );
                return cur;
            }
            if !changed {
                return cur;
            }
        }
    }

    /// One sweep of [`Run::normalize`]: the new term and whether it changed.
    fn sweep(
        &mut self,
        s: &Strategy,
        root: ExprId,
        memo: &mut FxHashSet<ExprId>,
        left: &mut u32,
        work: &mut u64,
    ) -> (ExprId, bool) {
        let (base_scope, base_here) = (self.scope.len(), self.here);
        let mut path: Vec<(Frame, bool)> = Vec::new();
        // The node to enter, at the current scope.
        let mut visit = Some(root);
        let result = loop {
            if let Some(mut x) = visit.take() {
                let mut changed = false;
                if !memo.contains(&x) {
                    while *left > 0 {
                        // Between rewrites (many may happen here: the
                        // bindings of a let chain go one by one at its top).
                        if self.compact
                            && self.normalizing == 1
                            && self.b.body.exprs.len() > (2 * self.live).max(COMPACT_FROM)
                        {
                            x = self.compact_sweep(&mut path, x, memo);
                        }
                        let before = self.b.body.exprs.len();
                        match self.apply(s, x) {
                            Some(y) => {
                                x = y;
                                changed = true;
                                *left -= 1;
                                let made = self.b.body.exprs.len().saturating_sub(before) as u64;
                                *work = work.saturating_sub(made.max(1));
                                if *work == 0 {
                                    // Stop here: the sweep hands up what it has.
                                    *left = 0;
                                }
                            }
                            None => break,
                        }
                    }
                }
                if memo.contains(&x) || *left == 0 {
                    // Nothing to do below: hand the node to its parent.
                    match path.last_mut() {
                        Some((parent, parent_changed)) => {
                            parent.done.push(x);
                            *parent_changed |= changed;
                            parent.next += 1;
                            let (parent, _) = path.last().expect("frame");
                            self.leave(parent);
                        }
                        None => break (x, changed),
                    }
                } else {
                    let slots = slots(self.b, x);
                    let frame =
                        Frame { node: x, here: self.here, slots, next: 0, done: Vec::new(), mark: self.scope.len() };
                    path.push((frame, changed));
                }
            }
            let (f, _) = path.last().expect("frame");
            if f.next < f.slots.len() {
                let slot = f.slots[f.next].clone();
                let mark = self.enter(&slot);
                path.last_mut().expect("frame").0.mark = mark;
                visit = Some(slot.id);
                continue;
            }
            let (f, changed) = path.pop().expect("frame");
            self.here = f.here;
            let new = rebuild(self.b, f.node, &f.done);
            if !changed && new == f.node {
                memo.insert(new);
            }
            match path.last_mut() {
                Some((parent, parent_changed)) => {
                    parent.done.push(new);
                    *parent_changed |= changed || new != f.node;
                    parent.next += 1;
                    let (parent, _) = path.last().expect("frame");
                    self.leave(parent);
                }
                None => break (new, changed || new != f.node),
            }
        };
        self.scope.truncate(base_scope);
        self.here = base_here;
        result
    }

    /// Compacts the arena to what a sweep can still reach: the node `x`
    /// about to be visited, the path above it (its nodes, their children
    /// visited or not, the results so far) and the scope; the memo and
    /// the cache keep what survives. Returns `x`'s new id.
    fn compact_sweep(&mut self, path: &mut [(Frame, bool)], x: ExprId, memo: &mut FxHashSet<ExprId>) -> ExprId {
        let mut roots = vec![x];
        let here_nodes = |h: &Here| h.range;
        roots.extend(here_nodes(&self.here));
        for (f, _) in path.iter() {
            roots.push(f.node);
            roots.extend(here_nodes(&f.here));
            roots.extend(f.done.iter().copied());
            for slot in &f.slots {
                roots.push(slot.id);
                roots.extend(slot.lam_range);
                roots.extend(slot.value);
            }
        }
        roots.extend(self.scope.nodes());
        let map = term::compact_in_place(self.b.body, roots);
        let rename = |e: ExprId| map[u32::from(e.into_raw()) as usize].expect("a root survives");
        self.here.range = self.here.range.map(rename);
        for (f, _) in path.iter_mut() {
            f.node = rename(f.node);
            f.here.range = f.here.range.map(rename);
            for d in &mut f.done {
                *d = rename(*d);
            }
            for slot in &mut f.slots {
                slot.id = rename(slot.id);
                slot.lam_range = slot.lam_range.map(rename);
                slot.value = slot.value.map(rename);
            }
        }
        self.scope.remap(&rename);
        *memo = memo.iter().filter_map(|e| map[u32::from(e.into_raw()) as usize]).collect();
        self.cache.remap(&map);
        self.live = self.b.body.exprs.len();
        rename(x)
    }

    /// Applies one rule at `e` (whose type is `before_ty`, known), checking the result.
    fn fire(&mut self, r: &Rule, e: ExprId, before_ty: &ksc_ir::Type) -> Option<ExprId> {
        let out = {
            let mut ctx = Ctx {
                b: &mut *self.b,
                scope: &self.scope,
                globals: self.globals,
                cache: &mut self.cache,
                options: self.options,
            };
            r.rewrite(&mut ctx, e)?
        };
        if out == e {
            return None;
        }
        if self.here.splat_arg && matches!(self.b.expr(out), Expr::Tuple(es) if es.len() != 1) {
            // `(print t)` must not become `(print (tuple a b))`.
            return None;
        }
        let after_ty = self.b.ty(out);
        if after_ty != *before_ty {
            let msg = format!(
                "{} rule `{}` would change the type of `{}` from `{before_ty}` to `{after_ty}`; not applied",
                r.kind(),
                r.name(),
                ksc_ir::print::print_expr(self.b.body, e)
            );
            self.warn(WarningKind::TypeChanged, msg);
            return None;
        }
        REWRITES.with(|r| r.set(r.get() + 1));
        if self.recent.len() == 5 {
            self.recent.pop_front();
        }
        self.recent.push_back(r.name().to_string());
        if self.options.trace {
            self.trace.push(Fired {
                rule: r.name().to_string(),
                kind: r.kind(),
                statement: r.statement(),
                before: ksc_ir::print::print_expr(self.b.body, e),
                after: ksc_ir::print::print_expr(self.b.body, out),
                strategy: self.strategy_path(),
            });
        }
        Some(out)
    }

    fn warn(&mut self, kind: WarningKind, message: String) {
        if !self.warnings.iter().any(|w| w.kind == kind && w.message == message) {
            self.warnings.push(Warning { kind, message });
        }
    }
}
