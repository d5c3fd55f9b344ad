//! Lowering LM-free Core IR to the loop IR.
//!
//! The lowering is a partial evaluator over *lowered values* ([`LVal`]):
//!
//! - a tuple is a Rust vector of its components' lowered values, so tuples
//!   are scalar-replaced as they are built: no struct exists unless it
//!   crosses a call or is stored in a tensor;
//! - a `build` whose lambda has no effect is *delayed* (a pull array: its
//!   sizes and its element expression with the environment it closes over).
//!   Its consumers fuse with it: `index i` evaluates the element at `i`,
//!   `size` is the sizes, `sum`, `fold`, `dot`, ... loop over the index space
//!   evaluating elements, and only other uses allocate and fill a tensor. A
//!   delayed value bound by `let` or passed as a parameter stays delayed only
//!   if the variable is used once and not inside a lambda, so no element is
//!   computed twice, or if its elements only rearrange computed vectors
//!   (`is_view`), which costs no more than reading them stored;
//! - small non-recursive definitions are inlined at their call sites (the
//!   arguments' lowered values bound to the parameters), so fusion works
//!   across definitions (`sum (mul a v)` with the prelude's `mul`);
//! - `sumbuild` and `sum` of tensors accumulate in place into one
//!   accumulator, looking into each term ([`crate::accum`]): a `deltaVec`
//!   (one-hot vector) becomes `acc[i] += v`, tuples, `if`, `let` and
//!   projections are followed, so a reverse pass's contributions are never
//!   built before they are added.
//!
//! Every check the interpreter makes (bounds, assertions, overflow, sizes)
//! becomes a `Check` statement at the site of the Core expression the
//! interpreter would blame; sites remember the inlined call they are in, so
//! run-time errors show the interpreter's "called from" frames.

use std::rc::Rc;

use ksc_ir::{Builtin, Callee, Def, Expr, ExprId, FunName, Lit, Pat, Prim, Type};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::builder::FnBuilder;
use crate::ir::*;

/// How to lower.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Check index bounds and integer overflow (assertions are always
    /// checked, and so is integer division by zero).
    pub checked: bool,
    /// Inline small non-recursive definitions (needed for fusion across
    /// definitions).
    pub inline: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { checked: true, inline: true }
    }
}

/// A failure of the lowering itself: input it does not accept (a lambda
/// outside a primitive's arguments, a linear map), which the front end and
/// AD never produce. Always a ksc bug when it happens.
#[derive(Clone, Debug, PartialEq)]
pub struct LowerError {
    pub message: String,
}

impl std::fmt::Display for LowerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "internal error in the loop-IR lowering: {}", self.message)
    }
}

impl std::error::Error for LowerError {}

pub(crate) type R<T> = Result<T, LowerError>;

pub(crate) fn internal<T>(message: impl Into<String>) -> R<T> {
    Err(LowerError { message: message.into() })
}

/// A persistent environment: variable names to lowered values.
#[derive(Clone, Default)]
struct Env(Option<Rc<EnvNode>>);

struct EnvNode {
    name: String,
    val: Bound,
    next: Env,
}

/// What a variable is bound to.
#[derive(Clone)]
pub(crate) enum Bound {
    Val(LVal),
    /// A pure expression not evaluated yet, in its own context: the
    /// right-hand side of a `let` whose variable is only added into
    /// accumulators ([`crate::accum`]), evaluated where it is added in.
    /// Any other use evaluates it there.
    Pending(ExprId, Ctx),
    /// A tuple bound component by component.
    Parts(Vec<Bound>),
}

impl Env {
    fn bind(&self, name: &str, val: LVal) -> Env {
        self.bind_as(name, Bound::Val(val))
    }
    fn bind_as(&self, name: &str, val: Bound) -> Env {
        Env(Some(Rc::new(EnvNode { name: name.to_string(), val, next: self.clone() })))
    }
    fn get(&self, name: &str) -> Option<&Bound> {
        let mut cur = &self.0;
        while let Some(n) = cur {
            if n.name == name {
                return Some(&n.val);
            }
            cur = &n.next.0;
        }
        None
    }
}

/// Where an expression is being lowered: which definition's body, the
/// environment, and the inlined call it is in.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) def: usize,
    env: Env,
    chain: Option<SiteId>,
    depth: u32,
}

/// A lowered value.
#[derive(Clone)]
pub(crate) enum LVal {
    /// A scalar, string, tensor (or, rarely, a packed tuple) in one operand.
    Op(Op),
    /// A tuple, component by component.
    Tuple(Vec<LVal>),
    /// A tensor not yet computed.
    Delayed(Rc<Delayed>),
    /// The value of an expression that does not return (a self tail call).
    Never,
}

/// A pull array: `build dims (lam (binder : I) body)` in `ctx`.
pub(crate) struct Delayed {
    dims: Vec<Op>,
    elem: DelayedElem,
}

pub(crate) enum DelayedElem {
    Lam { binder: String, body: ExprId, ctx: Ctx },
    Const(LVal),
}

/// What lowering a definition needs to know about every definition of the
/// program, computed once from all of them ([`program_facts`]): whether it
/// prints, whether it may be inlined, how fresh its result is, its C name.
/// Indexed like the definitions it was computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramFacts {
    pub names: Vec<FunName>,
    /// Does the definition (transitively) print?
    effectful: Vec<bool>,
    /// May it be inlined at its call sites (at most [`INLINE_SIZE`], and
    /// [`INLINE_EXPANDED`] with what it inlines in turn; not recursive,
    /// not external)? Where it is, see [`Lowerer::lower_call`].
    inlinable: Vec<bool>,
    /// Is it inlined at every call site, in loops or not (inlinable, and
    /// small or called from one place only)?
    inlined_anywhere: Vec<bool>,
    /// Does it call itself, directly or not (then `$inline` leaves it)?
    recursive: Vec<bool>,
    /// How fresh each definition's result is (`prims::fresh_expr`): a call
    /// whose result is fresh is added into in place, not copied first (a
    /// reverse pass adding to the cotangent vector its recursive call
    /// returns would otherwise copy it per call).
    fresh_results: Vec<crate::prims::Fresh>,
    /// The C name of each definition.
    c_names: Vec<String>,
    /// Is it an external function ([`program_facts_with_externals`])?
    external: Vec<bool>,
    /// The position of each name (its first) in `names`: a search of
    /// `names` per question made lowering a program of n definitions
    /// quadratic (a 10,000-call chain: 10,000 units asking of their calls).
    index: FxHashMap<FunName, usize>,
}

/// The definitions to lower, and what is known about them.
pub struct Lowerer<'a> {
    defs: Vec<&'a Def>,
    by_name: FxHashMap<&'a FunName, usize>,
    opts: Options,
    facts: &'a ProgramFacts,
    sites: Vec<Site>,
    site_ids: FxHashMap<(usize, ExprId, Option<SiteId>), SiteId>,
    func_of: FxHashMap<usize, FuncId>,
    funcs: Vec<Option<Func>>,
    queue: Vec<(usize, FuncId)>,
    /// How many more Core expressions may be copied into both branches of
    /// an `if` by the accumulation's join points ([`crate::accum`]), in the
    /// definition being lowered.
    pub(crate) join_budget: usize,
    /// The parameters each definition lowered so far consumes, with how
    /// fresh they are ([`consumed_params`]).
    consumed: FxHashMap<usize, Vec<(String, crate::prims::Fresh)>>,
    /// The parameters of the steps of folds being lowered that own their
    /// accumulators (definition, parameter, how fresh): see `Prim::Fold`.
    pub(crate) step_params: Vec<(usize, String, crate::prims::Fresh)>,
    /// Per definition, its calls whose result is only projected
    /// ([`projected_calls`]), computed when first asked.
    projected: FxHashMap<usize, FxHashSet<ExprId>>,
}

/// The calls of `body` whose results are only read in part: the argument
/// of a `get`, or bound by a `let` to a variable that is only an argument
/// of `get`s. Inlined, the parts that are not read are not computed (an
/// entry point `get$2$3 ([rev f] ...)` that wants one cotangent of three,
/// the others matrices).
fn projected_calls(body: &ksc_ir::Body) -> FxHashSet<ExprId> {
    let is_call = |e: ExprId| matches!(body.exprs[e], Expr::Call(Callee::Fun(_), _));
    let mut out = FxHashSet::default();
    // Per variable name: (uses, uses as the argument of a `get`).
    let mut uses: FxHashMap<&str, (usize, usize)> = FxHashMap::default();
    for (_, e) in body.exprs.iter() {
        match e {
            Expr::Var(v) => uses.entry(v.as_str()).or_default().0 += 1,
            Expr::Call(Callee::Prim(Prim::Get { .. }), t) => {
                if is_call(*t) {
                    out.insert(*t);
                }
                if let Expr::Var(v) = &body.exprs[*t] {
                    uses.entry(v.as_str()).or_default().1 += 1;
                }
            }
            _ => {}
        }
    }
    for (_, e) in body.exprs.iter() {
        if let Expr::Let(ksc_ir::Pat::Var(x), r, _) = e {
            if is_call(*r) && uses.get(x.as_str()).is_some_and(|&(all, got)| all == got) {
                out.insert(*r);
            }
        }
    }
    out
}

/// The parameters a definition consumes, with which of their parts are
/// fresh (used once on every path): the accumulator of `[sufrevacc f]`
/// (its last parameter), which it adds into in place and returns. Its
/// callers pass storage they own or a copy ([`Lowerer::consumable`]).
pub(crate) fn consumed_params(def: &Def) -> Vec<(String, crate::prims::Fresh)> {
    use crate::prims::Fresh;
    if def.name.derivs.first() != Some(&ksc_ir::Derivation::SufRevAcc) {
        return Vec::new();
    }
    let Some(p) = def.params.last() else { return Vec::new() };
    let sole = |comp| if sole_use(&def.body, def.root, &p.name, comp) { Fresh::Yes } else { Fresh::No };
    let fresh = match &p.ty {
        Type::Tuple(ts) => Fresh::Tuple((0..ts.len()).map(|k| sole(Some(k))).collect()),
        _ => sole(None),
    };
    vec![(p.name.clone(), fresh)]
}

/// The largest body (in Core expressions) that is inlined. Reverse passes
/// of small functions (GMM's `[rev qtimesx]`, over 120 nodes) called once
/// per iteration of a loop cost more in calls, result tuples and their
/// allocations than in arithmetic; inlined, their results are fused into
/// the caller's accumulations. (At 400 the C of the benchmarks grows by a
/// third to a half; GMM's gradient gets 5 to 18% faster, BA, HT and LSTM
/// are unchanged.)
///
/// That is where inlining pays: in a loop (or a branch) the call's cost is
/// paid per iteration; and where the caller reads only part of the result
/// (the parts it does not read are then not computed). A call outside
/// every loop and branch of its caller whose whole result is used is made
/// once per call of the caller, so inlining it there saves a call and a
/// result tuple, not a cost per element, while every such site gets a copy
/// of the callee (and of what the callee inlines): a `main` calling twenty
/// derivatives three times each was 31,000 lines of C. There a callee is
/// inlined only if it is small ([`INLINE_ALWAYS`]) or that is its only call
/// in the program (no copy is made).
const INLINE_SIZE: usize = 400;
/// The largest body inlined at every call, wherever it is: a call and its
/// result tuple cost about as much as the arithmetic of such a body. It is
/// measured with what the body inlines in turn ([`expanded_sizes`]), so
/// that small functions calling each other twice do not double the code at
/// every level.
const INLINE_ALWAYS: usize = 40;
/// The largest body with what it inlines in turn ([`expanded_sizes`]) that
/// is inlined in a loop, a branch or where part of its result is read: a
/// call of a 400-node function that calls two others of its size inlines
/// them too (the camera's projection of a point, project.ks, does), but a
/// tree of calls that doubles at each level stops here.
// pub for the integration tests (tests/lower.rs).
#[doc(hidden)]
pub const INLINE_EXPANDED: usize = 4 * INLINE_SIZE;
/// The deepest nesting of inlined calls.
const INLINE_DEPTH: u32 = 8;

/// Lowers the definitions `roots` (and every definition they call that is
/// not inlined) of a checked, LM-free program. `defs` are all definitions in
/// force; calls to names without a definition go to the built-in prelude's
/// native implementations, or fail at run time as the interpreter does.
pub fn lower_program(defs: &[&Def], roots: &[FunName], opts: Options) -> R<Module> {
    let facts = program_facts_with_externals(defs, &[], roots);
    let mut l = Lowerer::new(defs, &facts, opts);
    let mut main = None;
    for r in roots {
        let Some(&i) = l.by_name.get(r) else {
            return internal(format!("there is no definition of `{r}` to compile"));
        };
        let f = l.func_for(i);
        if r.base == "main" && r.derivs.is_empty() {
            main = Some(f);
        }
    }
    while let Some((d, f)) = l.queue.pop() {
        let func = l.lower_def(d)?;
        l.funcs[f.0 as usize] = Some(func);
    }
    let funcs = l.funcs.into_iter().map(|f| f.expect("every queued function is lowered")).collect();
    Ok(Module { funcs, sites: l.sites, main })
}

/// One definition lowered by itself ([`lower_unit`]): its function, whose
/// calls name `calls[k]` by `FuncId(k)` (`FuncId(0)` is itself), and whose
/// sites are `sites` (numbered from 0). [`crate::link`] puts units together
/// into the module [`lower_program`] would give.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub func: Func,
    pub calls: Vec<FunName>,
    pub sites: Vec<Site>,
}

/// Lowers the definition `root` alone. `defs` are indexed like `facts`
/// (computed from the whole program); only the bodies of `root` and of the
/// definitions lowering inlines into it (those `facts` says are inlinable,
/// transitively) are read, so the others may be given as signatures with
/// any body.
pub fn lower_unit(defs: &[&Def], facts: &ProgramFacts, root: &FunName, opts: Options) -> R<Unit> {
    if defs.len() != facts.names.len() || defs.iter().zip(&facts.names).any(|(d, n)| d.name != *n) {
        return internal("lower_unit: the definitions are not those the facts were computed from");
    }
    let mut l = Lowerer::new(defs, facts, opts);
    let Some(&d) = l.by_name.get(root) else {
        return internal(format!("there is no definition of `{root}` to compile"));
    };
    l.func_for(d);
    l.queue.clear();
    let func = l.lower_def(d)?;
    let mut calls: Vec<(FuncId, FunName)> = l.func_of.iter().map(|(&d, &f)| (f, defs[d].name.clone())).collect();
    calls.sort_by_key(|(f, _)| *f);
    Ok(Unit { func, calls: calls.into_iter().map(|(_, n)| n).collect(), sites: l.sites })
}

/// The facts lowering needs about every definition (see [`ProgramFacts`]).
pub fn program_facts(defs: &[&Def]) -> ProgramFacts {
    program_facts_with_externals(defs, &[], &[])
}

/// [`program_facts`] of definitions some of which, `externals`, are
/// external functions (a user's `edef`s, given as signatures whose bodies
/// are placeholders): lowered to a call of the C function the user links,
/// never inlined, and with a result that may share memory with an argument
/// (so it is copied before it is written to); and some of which,
/// `exported`, are compiled as functions of their own whatever calls them
/// (a library's entry points): for the inlining of a definition called from
/// one place, that is a second place (inlined, it would be a copy).
pub fn program_facts_with_externals(defs: &[&Def], externals: &[FunName], exported: &[FunName]) -> ProgramFacts {
    let external: Vec<bool> = defs.iter().map(|d| externals.contains(&d.name)).collect();
    let mut by_name = FxHashMap::default();
    for (i, d) in defs.iter().enumerate() {
        by_name.entry(&d.name).or_insert(i);
    }
    let callees: Vec<Vec<usize>> = defs
        .iter()
        .map(|d| {
            let mut out = Vec::new();
            for (_, e) in d.body.exprs.iter() {
                if let Expr::Call(Callee::Fun(n), _) = e {
                    if let Some(&j) = by_name.get(n) {
                        out.push(j);
                    }
                }
            }
            out
        })
        .collect();
    let n = defs.len();
    // Effects: a definition prints if its body does or a callee does.
    let mut effectful: Vec<bool> = defs
        .iter()
        .map(|d| d.body.exprs.iter().any(|(_, e)| matches!(e, Expr::Call(Callee::Prim(p), _) if p.has_effect())))
        .collect();
    loop {
        let mut changed = false;
        for i in 0..n {
            if !effectful[i] && callees[i].iter().any(|&j| effectful[j]) {
                effectful[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let recursive = in_cycles(&callees);
    let may_inline = |i: usize| !recursive[i] && !external[i];
    let sizes: Vec<usize> = defs.iter().map(|d| d.body.exprs.len()).collect();
    let expanded = expanded_sizes(&sizes, &callees, &may_inline);
    let inlinable: Vec<bool> =
        (0..n).map(|i| may_inline(i) && sizes[i] <= INLINE_SIZE && expanded[i] <= INLINE_EXPANDED).collect();
    let mut call_sites: Vec<usize> = defs.iter().map(|d| usize::from(exported.contains(&d.name))).collect();
    for cs in &callees {
        for &j in cs {
            call_sites[j] += 1;
        }
    }
    let inlined_anywhere =
        (0..n).map(|i| inlinable[i] && (expanded[i] <= INLINE_ALWAYS || call_sites[i] <= 1)).collect();
    // The greatest fixpoint: every result is assumed fresh, then each
    // definition's is recomputed from its body until nothing changes.
    let mut fresh_results = vec![crate::prims::Fresh::Top; n];
    loop {
        let mut changed = false;
        for i in 0..n {
            let lookup = |g: &FunName| match by_name.get(g) {
                Some(&j) => fresh_results[j].clone(),
                None => crate::prims::Fresh::No,
            };
            let f = if external[i] {
                crate::prims::Fresh::No
            } else {
                crate::prims::fresh_expr(&defs[i].body, defs[i].root, true, &lookup, &consumed_params(defs[i]))
            };
            if f != fresh_results[i] {
                fresh_results[i] = f;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let c_names = crate::names::c_names(&defs.iter().map(|d| &d.name).collect::<Vec<_>>());
    let mut index = FxHashMap::default();
    for (i, d) in defs.iter().enumerate() {
        index.entry(d.name.clone()).or_insert(i);
    }
    ProgramFacts {
        names: defs.iter().map(|d| d.name.clone()).collect(),
        effectful,
        inlinable,
        inlined_anywhere,
        recursive,
        fresh_results,
        c_names,
        external,
        index,
    }
}

/// The size of each definition with the calls lowering may inline written
/// in (`may_inline`: not recursive, not external), transitively: its own
/// size (`sizes`: Core expressions) plus, per call, its callee's expanded
/// size. Inlining decides by it, not by the body alone: `f_k x = f_(k-1)
/// (f_(k-1) x)` has a small body at every k, and inlined by its own size
/// at each level, f_9 was 2,048 lines of C (2^8 copies of f_1), its
/// forward derivative 3,070.
/// Sizes are counted up to just over [`INLINE_EXPANDED`] (what decides);
/// the non-recursive definitions form a graph without cycles, walked
/// callees first without recursion (chains of thousands of calls).
// pub for the integration tests (tests/lower.rs).
#[doc(hidden)]
pub fn expanded_sizes(sizes: &[usize], callees: &[Vec<usize>], may_inline: &dyn Fn(usize) -> bool) -> Vec<usize> {
    const CAP: usize = INLINE_EXPANDED + 1;
    let n = sizes.len();
    let mut size: Vec<Option<usize>> = vec![None; n];
    for root in 0..n {
        let mut stack = vec![root];
        while let Some(&i) = stack.last() {
            if size[i].is_some() {
                stack.pop();
                continue;
            }
            let own = sizes[i].min(CAP);
            if !may_inline(i) {
                size[i] = Some(own);
                stack.pop();
                continue;
            }
            let pending: Vec<usize> = callees[i].iter().copied().filter(|&j| size[j].is_none()).collect();
            if pending.is_empty() {
                let inlined = callees[i].iter().filter(|&&j| may_inline(j)).map(|&j| size[j].unwrap_or(CAP));
                size[i] = Some(inlined.fold(own, |a, b| a.saturating_add(b).min(CAP)));
                stack.pop();
            } else {
                stack.extend(pending);
            }
        }
    }
    size.into_iter().map(|s| s.unwrap_or(CAP)).collect()
}

/// Which nodes of a call graph (each node's callees) lie on a cycle: the
/// members of strongly connected components with more than one node, and
/// nodes calling themselves. One iterative Tarjan search over the whole
/// graph, linear in its size (a search from every node was quadratic on a
/// chain of calls).
// pub for the integration tests (tests/lower.rs).
#[doc(hidden)]
pub fn in_cycles(callees: &[Vec<usize>]) -> Vec<bool> {
    const UNSEEN: usize = usize::MAX;
    let n = callees.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut out = vec![false; n];
    let mut next = 0;
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // The search path: (node, how many of its callees were visited).
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&(v, k)) = path.last() {
            if let Some(&w) = callees[v].get(k) {
                path.last_mut().expect("a node on the path").1 += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    path.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            path.pop();
            if let Some(&(u, _)) = path.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let at = stack.iter().rposition(|&x| x == v).expect("on the stack");
                let members: Vec<usize> = stack.drain(at..).collect();
                let cyclic = members.len() > 1 || callees[v].contains(&v);
                for m in members {
                    on_stack[m] = false;
                    out[m] = cyclic;
                }
            }
        }
    }
    out
}

impl ProgramFacts {
    /// Does the definition named `name` (transitively) print?
    pub fn effectful(&self, name: &FunName) -> bool {
        self.index.get(name).is_some_and(|&i| self.effectful[i])
    }
    /// Is the definition named `name` inlined where it is called?
    pub fn inlinable(&self, name: &FunName) -> bool {
        self.index.get(name).is_some_and(|&i| self.inlinable[i])
    }
    /// Is the definition named `name` inlined where a call of it is marked
    /// `$inline` (whatever its size: it is not recursive)?
    pub fn inlined_where_marked(&self, name: &FunName) -> bool {
        self.index.get(name).is_some_and(|&i| !self.recursive[i])
    }
    /// The C name of the definition named `name` (a library exports it
    /// under this name).
    pub fn c_name(&self, name: &FunName) -> Option<&str> {
        self.index.get(name).map(|&i| self.c_names[i].as_str())
    }
}

impl<'a> Lowerer<'a> {
    fn new(defs: &[&'a Def], facts: &'a ProgramFacts, opts: Options) -> Lowerer<'a> {
        let defs: Vec<&'a Def> = defs.to_vec();
        let mut by_name = FxHashMap::default();
        for (i, d) in defs.iter().enumerate() {
            by_name.entry(&d.name).or_insert(i);
        }
        Lowerer {
            defs,
            by_name,
            opts,
            facts,
            sites: Vec::new(),
            site_ids: FxHashMap::default(),
            func_of: FxHashMap::default(),
            funcs: Vec::new(),
            queue: Vec::new(),
            join_budget: crate::accum::JOIN_BUDGET,
            consumed: FxHashMap::default(),
            step_params: Vec::new(),
            projected: FxHashMap::default(),
        }
    }

    /// Is the result of the call `e` in definition `def` only read in part
    /// ([`projected_calls`])?
    fn projected(&mut self, def: usize, e: ExprId) -> bool {
        let body = &self.defs[def].body;
        self.projected.entry(def).or_insert_with(|| projected_calls(body)).contains(&e)
    }

    /// Is the value of `e` (in the body of definition `def`) storage
    /// nothing else refers to?
    pub(crate) fn fresh(&self, def: usize, body: &ksc_ir::Body, e: ExprId) -> bool {
        self.fresh_parts(def, body, e).all()
    }

    /// Is the value of `e` storage made each time `e` is evaluated, so
    /// nothing else refers to it? Unlike [`Self::fresh`], a variable bound
    /// around `e` is not, even one whose storage this code owns: `e` may be
    /// the element of a `build`, and such a variable the same storage in
    /// every element.
    pub(crate) fn made_fresh(&self, body: &ksc_ir::Body, e: ExprId) -> bool {
        crate::prims::fresh_expr(body, e, false, &|g| self.fresh_result(g), &[]).all()
    }

    /// Is a delayed tensor of type `ty`, once made, storage that nothing
    /// else refers to, the tensors it holds included? Its own storage is
    /// made when it is; a tensor element is only where the element
    /// expression makes new storage each time ([`Self::made_fresh`]):
    /// `build n (lam i r)` and `constVec n r` hold `r` itself, n times, so
    /// adding into them in place would change `r` (and each element as
    /// many times as `r` is held).
    pub(crate) fn delayed_fresh(&self, d: &Delayed, ty: &Type) -> bool {
        let Type::Tensor(_, elem) = ty else { return false };
        if !needs_heap(elem) {
            return true;
        }
        d.lam_parts().is_some_and(|(_, e, dctx)| self.made_fresh(self.body(dctx), e))
    }

    /// May the fold whose step is `lam` (in the body of definition `def`)
    /// own its accumulator, so that its step adds into it in place? When
    /// the step hands it to a function that consumes it (`[sufrevacc f]`,
    /// reverse mode's threaded loops, `ksc_ad::rev`) and returns fresh
    /// storage when its accumulator is.
    pub(crate) fn fold_owns(&self, def: usize, body: &ksc_ir::Body, lam: ExprId) -> bool {
        let consumes = {
            let mut stack = vec![lam];
            let mut found = false;
            while let Some(x) = stack.pop() {
                if let Expr::Call(Callee::Fun(g), _) = &body.exprs[x] {
                    found |= g.derivs.first() == Some(&ksc_ir::Derivation::SufRevAcc);
                }
                stack.extend(ksc_ir::core::children(&body.exprs[x]));
            }
            found
        };
        if !consumes {
            return false;
        }
        let mut env = self.owned_params(def);
        crate::prims::fold_step_fresh(body, lam, false, &|g| self.fresh_result(g), &mut env).is_some_and(|f| f.all())
    }

    /// How fresh the result of a call of `g` is.
    fn fresh_result(&self, g: &FunName) -> crate::prims::Fresh {
        match self.by_name.get(g) {
            Some(&j) => self.facts.fresh_results[j].clone(),
            None => crate::prims::Fresh::No,
        }
    }

    /// The parameters of definition `def` whose storage its code owns,
    /// with how fresh they are: those it consumes, and those of the steps
    /// of folds being lowered that own their accumulators.
    fn owned_params(&self, def: usize) -> Vec<(String, crate::prims::Fresh)> {
        let mut params = self.consumed.get(&def).cloned().unwrap_or_default();
        params.extend(self.step_params.iter().filter(|(d, ..)| *d == def).map(|(_, x, f)| (x.clone(), f.clone())));
        params
    }

    /// Which parts of the value of `e` (in the body of definition `def`)
    /// are storage nothing else refers to.
    fn fresh_parts(&self, def: usize, body: &ksc_ir::Body, e: ExprId) -> crate::prims::Fresh {
        crate::prims::fresh_expr(body, e, false, &|g| self.fresh_result(g), &self.owned_params(def))
    }

    /// The value `v` of a call's argument `e` (if it is known) for a
    /// parameter the callee consumes ([`consumed_params`]): its tensors
    /// as they are where this code owns them (fresh, or a variable's
    /// storage handed over), else copies.
    pub(crate) fn consumable(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        e: Option<ExprId>,
        v: LVal,
        ty: &Type,
    ) -> R<LVal> {
        if !crate::ir::needs_heap(ty) {
            return Ok(v);
        }
        let expr = e.map(|e| self.defs[ctx.def].body.exprs[e].clone());
        match (ty, v) {
            (Type::Tuple(ts), LVal::Tuple(vs)) if vs.len() == ts.len() => {
                let es: Vec<Option<ExprId>> = match expr {
                    Some(Expr::Tuple(es)) if es.len() == ts.len() => es.into_iter().map(Some).collect(),
                    _ => vec![None; ts.len()],
                };
                let mut out = Vec::with_capacity(vs.len());
                for ((v, t), e) in vs.into_iter().zip(ts).zip(es) {
                    out.push(self.consumable(fb, st, ctx, e, v, t)?);
                }
                Ok(LVal::Tuple(out))
            }
            (Type::Tensor(..), v) => {
                let owned = e.is_some_and(|e| self.owns(fb, ctx.def, e, &v));
                let acc = self.new_acc_owned(fb, st, v, ty, owned)?;
                self.acc_value(fb, &acc)
            }
            (_, v) => {
                // Another value holding tensors: its parts, each copied.
                let n = match ty {
                    Type::Tuple(ts) => ts.len(),
                    _ => return internal(format!("a consumed argument of type `{ty}`")),
                };
                let vs = parts(fb, v, ty, n)?;
                self.consumable(fb, st, ctx, None, LVal::Tuple(vs), ty)
            }
        }
    }

    fn func_for(&mut self, d: usize) -> FuncId {
        if let Some(&f) = self.func_of.get(&d) {
            return f;
        }
        let f = FuncId(self.funcs.len() as u32);
        self.funcs.push(None);
        self.func_of.insert(d, f);
        self.queue.push((d, f));
        f
    }

    fn site(&mut self, ctx: &Ctx, e: ExprId) -> SiteId {
        let key = (ctx.def, e, ctx.chain);
        if let Some(&s) = self.site_ids.get(&key) {
            return s;
        }
        let s = SiteId(self.sites.len() as u32);
        self.sites.push(Site { fun: self.defs[ctx.def].name.clone(), expr: e, inlined_at: ctx.chain });
        self.site_ids.insert(key, s);
        s
    }

    fn expr(&self, ctx: &Ctx, e: ExprId) -> &'a Expr {
        &self.defs[ctx.def].body.exprs[e]
    }

    fn ty(&self, ctx: &Ctx, e: ExprId) -> R<Type> {
        let t = self.defs[ctx.def].body.ty(e);
        check_type(t)?;
        Ok(t.clone())
    }

    fn lower_def(&mut self, d: usize) -> R<Func> {
        let def = self.defs[d];
        self.join_budget = crate::accum::JOIN_BUDGET;
        let mut fb = FnBuilder::new();
        let mut env = Env::default();
        let mut params = Vec::new();
        for p in &def.params {
            check_type(&p.ty)?;
            let v = fb.var(p.ty.clone(), Some(&p.name), false);
            params.push(v);
            let val = split(&mut fb, Op::Var(v), &p.ty);
            env = env.bind(&p.name, val);
        }
        // An external function has no body: the user's C is called.
        let external = self.facts.external[d];
        let loops = if external { check_type(&def.ret_ty).map(|_| false)? } else { self.lower_body(d, &mut fb, env)? };
        let (body, vars) = fb.finish();
        Ok(Func {
            name: def.name.clone(),
            c_name: self.facts.c_names[d].clone(),
            params,
            ret: def.ret_ty.clone(),
            vars,
            body,
            loops,
            entry_mark: None,
            external,
        })
    }

    /// The body of definition `d` into `fb`, its parameters bound in `env`;
    /// whether it ends in self tail calls (a loop).
    fn lower_body(&mut self, d: usize, fb: &mut FnBuilder, env: Env) -> R<bool> {
        let def = self.defs[d];
        // A consumed parameter's fresh tensors are this code's to add into.
        let consumed = consumed_params(def);
        for (name, fresh) in &consumed {
            let tensor = |fb: &FnBuilder, id: &VarId| matches!(fb.vars[id.0 as usize].ty, Type::Tensor(..));
            match (env.get(name), fresh) {
                (Some(Bound::Val(LVal::Op(Op::Var(id)))), crate::prims::Fresh::Yes) if tensor(fb, id) => {
                    fb.own(*id, name, None)
                }
                (Some(Bound::Val(LVal::Tuple(vs))), crate::prims::Fresh::Tuple(fs)) => {
                    for (k, (v, f)) in vs.iter().zip(fs).enumerate() {
                        if let (LVal::Op(Op::Var(id)), crate::prims::Fresh::Yes) = (v, f) {
                            if tensor(fb, id) {
                                fb.own(*id, name, Some(k));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        self.consumed.insert(d, consumed);
        check_type(&def.ret_ty)?;
        let ctx = Ctx { def: d, env, chain: None, depth: 0 };
        let mut st = FnState { self_def: d, loops: false };
        let v = self.lower(fb, &mut st, &ctx, def.root, Tail::Function)?;
        if !matches!(v, LVal::Never) {
            let r = self.returned(fb, &mut st, v, &def.ret_ty)?;
            fb.emit(Stmt::Return(r));
        }
        Ok(st.loops)
    }
}

/// Which tail position an expression is in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The tail of the function being emitted: may return, or loop by a
    /// self tail call.
    Function,
    /// The tail of an (inlined) definition's body: a call here pushes no
    /// frame, as in the interpreter.
    Body,
    /// Anywhere else.
    No,
}

impl Tail {
    fn is_tail(self) -> bool {
        self != Tail::No
    }
}

pub(crate) struct FnState {
    self_def: usize,
    loops: bool,
}

pub(crate) fn check_type(t: &Type) -> R<()> {
    match t {
        Type::Bool | Type::Integer | Type::Float | Type::String => Ok(()),
        Type::Tuple(ts) => ts.iter().try_for_each(check_type),
        Type::Tensor(_, e) => check_type(e),
        Type::Lam(..) => internal(format!("a value of type `{t}` outside the arguments of a primitive")),
        Type::LM(..) => internal(format!("a linear map of type `{t}` reached code generation")),
        Type::Unknown => internal("an expression of unknown type (the program did not type-check)"),
    }
}

/// An operand of tuple type, taken apart into its components.
pub(crate) fn split(fb: &mut FnBuilder, op: Op, ty: &Type) -> LVal {
    match ty {
        Type::Tuple(ts) => {
            if let Op::Unit = op {
                return LVal::Tuple(Vec::new());
            }
            LVal::Tuple(
                ts.iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let f = fb.let_(Rhs::Field(op.clone(), i), t.clone(), None);
                        split(fb, f, t)
                    })
                    .collect(),
            )
        }
        _ => LVal::Op(op),
    }
}

/// The element type and rank of a tensor type.
pub(crate) fn tensor_ty(t: &Type) -> R<(usize, Type)> {
    match t {
        Type::Tensor(r, e) => Ok((*r, (**e).clone())),
        _ => internal(format!("expected a tensor type, found `{t}`")),
    }
}

pub(crate) fn tuple_tys(t: &Type) -> R<&[Type]> {
    match t {
        Type::Tuple(ts) => Ok(ts),
        _ => internal(format!("expected a tuple type, found `{t}`")),
    }
}

pub(crate) fn lval_op(v: &LVal) -> R<Op> {
    match v {
        LVal::Op(o) => Ok(o.clone()),
        _ => internal("expected a single value"),
    }
}

/// The `n` components of a tuple value of type `ty`, splitting a single
/// operand into its fields.
pub(crate) fn parts(fb: &mut FnBuilder, v: LVal, ty: &Type, n: usize) -> R<Vec<LVal>> {
    match v {
        LVal::Op(o) => components(split(fb, o, ty), n),
        v => components(v, n),
    }
}

pub(crate) fn components(v: LVal, n: usize) -> R<Vec<LVal>> {
    match v {
        LVal::Tuple(vs) if vs.len() == n => Ok(vs),
        LVal::Never => Ok(vec![LVal::Never; n]),
        _ => internal(format!("expected a tuple of {n} components")),
    }
}

/// The index value for these index components: an Integer, or a tuple.
pub(crate) fn index_lval(idx: &[Op]) -> LVal {
    if idx.len() == 1 {
        LVal::Op(idx[0].clone())
    } else {
        LVal::Tuple(idx.iter().cloned().map(LVal::Op).collect())
    }
}

/// An index value's components.
pub(crate) fn index_ops(v: &LVal) -> R<Vec<Op>> {
    match v {
        LVal::Op(o) => Ok(vec![o.clone()]),
        LVal::Tuple(vs) => vs.iter().map(lval_op).collect(),
        _ => internal("expected an index"),
    }
}

/// An open nest of loops over an index space.
pub(crate) struct Nest {
    levels: Vec<(VarId, Op)>,
    idx: Vec<Op>,
    flat: Op,
}

/// Binary operations, checked where the interpreter checks.
fn float_bin(fb: &mut FnBuilder, op: BinOp, a: Op, b: Op) -> Op {
    let ty = match op {
        BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FMax | BinOp::FPowI => Type::Float,
        BinOp::IAddNoCheck | BinOp::IMulNoCheck | BinOp::IMulSat => Type::Integer,
        _ => Type::Bool,
    };
    fb.let_(Rhs::Bin(op, a, b), ty, None)
}

impl<'a> Lowerer<'a> {
    // ---------------------------------------------------------------------
    // Loops

    /// Loops over `dims`, one per dimension, except that a dimension of
    /// size 1 has no loop: its index is 0 where the body is emitted (so
    /// the body's tests and offsets on it fold: a Jacobian's blocks of one
    /// column, a `build 1`).
    fn open_nest(&mut self, fb: &mut FnBuilder, dims: &[Op]) -> Nest {
        let mut levels = Vec::new();
        let mut idx = Vec::new();
        let mut flat: Option<Op> = None;
        for (k, d) in dims.iter().enumerate() {
            let i = if *d == Op::Int(1) {
                Op::Int(0)
            } else {
                let name = if dims.len() == 1 { "i".to_string() } else { format!("i{k}") };
                let i = fb.var(Type::Integer, Some(&name), false);
                fb.loop_index(i, d.clone());
                levels.push((i, d.clone()));
                fb.push_block();
                Op::Var(i)
            };
            idx.push(i.clone());
            flat = Some(match flat {
                None => i,
                Some(f) => {
                    let m = float_bin(fb, BinOp::IMulNoCheck, f, d.clone());
                    float_bin(fb, BinOp::IAddNoCheck, m, i)
                }
            });
        }
        Nest { levels, idx, flat: flat.unwrap_or(Op::Int(0)) }
    }

    fn close_nest(&mut self, fb: &mut FnBuilder, nest: Nest) {
        for (i, n) in nest.levels.into_iter().rev() {
            let body = fb.pop_block();
            fb.emit(Stmt::For { idx: i, n, pre: Vec::new(), body, reset: false });
        }
    }

    /// The product of sizes (the number of elements), without overflow
    /// checks (the sizes belong to an existing tensor or were checked).
    fn count(&mut self, fb: &mut FnBuilder, dims: &[Op]) -> Op {
        let mut acc = dims[0].clone();
        for d in &dims[1..] {
            acc = float_bin(fb, BinOp::IMulNoCheck, acc, d.clone());
        }
        acc
    }

    /// Checks that sizes are not negative (`` `prim` with a negative size ``).
    fn check_sizes(&mut self, fb: &mut FnBuilder, dims: &[Op], prim: &str, site: SiteId) {
        let conds: Vec<Op> = dims
            .iter()
            .filter(|d| !matches!(d, Op::Int(n) if *n >= 0))
            .map(|d| float_bin(fb, BinOp::IGe, d.clone(), Op::Int(0)))
            .collect();
        let cond = all_of(fb, conds);
        fb.emit(Stmt::Check {
            cond,
            site,
            err: ErrorKind::NegativeSize { prim: prim.to_string(), size: dims.to_vec() },
        });
    }

    /// Checks that a tensor of sizes `dims` (not negative: checked first)
    /// has at most `ksc_ir::limits::max_elements()` elements, as the
    /// interpreter does before making it, whether or not it is ever
    /// materialised here.
    fn check_limit(&mut self, fb: &mut FnBuilder, dims: &[Op], prim: &str, site: SiteId) {
        let limit = ksc_ir::limits::max_elements();
        let mut count = dims[0].clone();
        for d in &dims[1..] {
            count = float_bin(fb, BinOp::IMulSat, count, d.clone());
        }
        let cond = float_bin(fb, BinOp::ILe, count, Op::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        fb.emit(Stmt::Check {
            cond,
            site,
            err: ErrorKind::TooLarge { prim: prim.to_string(), size: dims.to_vec(), limit },
        });
    }

    /// Checks that two tensors have the same sizes.
    fn check_same_dims(&mut self, fb: &mut FnBuilder, a: &[Op], b: &[Op], what: &str, site: SiteId) {
        let conds: Vec<Op> = a
            .iter()
            .zip(b)
            .filter(|(x, y)| x != y)
            .map(|(x, y)| float_bin(fb, BinOp::IEq, x.clone(), y.clone()))
            .collect();
        let cond = all_of(fb, conds);
        fb.emit(Stmt::Check {
            cond,
            site,
            err: ErrorKind::Sizes { what: what.to_string(), a: a.to_vec(), b: b.to_vec() },
        });
    }

    // ---------------------------------------------------------------------
    // Values

    /// The sizes of a tensor value.
    fn dims(&mut self, fb: &mut FnBuilder, v: &LVal, rank: usize) -> R<Vec<Op>> {
        match v {
            LVal::Delayed(d) => Ok(d.dims.clone()),
            LVal::Op(o) => {
                Ok((0..rank).map(|k| fb.let_(Rhs::Dim { arr: o.clone(), dim: k }, Type::Integer, None)).collect())
            }
            _ => internal("expected a tensor value"),
        }
    }

    /// Element `idx` of a tensor value (no bounds check).
    fn elem(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: &LVal,
        elem_ty: &Type,
        idx: &[Op],
        flat: Option<Op>,
    ) -> R<LVal> {
        match v {
            LVal::Delayed(d) => match &d.elem {
                DelayedElem::Const(c) => Ok(c.clone()),
                DelayedElem::Lam { binder, body, ctx } => {
                    let ctx = Ctx { env: ctx.env.bind(binder, index_lval(idx)), ..ctx.clone() };
                    self.lower(fb, st, &ctx, *body, Tail::No)
                }
            },
            LVal::Op(arr) => {
                let flat = match flat {
                    Some(f) => f,
                    None => {
                        let dims = self.dims(fb, v, idx.len())?;
                        let mut f = idx[0].clone();
                        for (i, d) in idx.iter().zip(&dims).skip(1) {
                            let m = float_bin(fb, BinOp::IMulNoCheck, f, d.clone());
                            f = float_bin(fb, BinOp::IAddNoCheck, m, i.clone());
                        }
                        f
                    }
                };
                let x = fb.let_(Rhs::Load { arr: arr.clone(), idx: flat }, elem_ty.clone(), None);
                Ok(split(fb, x, elem_ty))
            }
            _ => internal("expected a tensor value"),
        }
    }

    /// The value the function being emitted returns, as one operand.
    /// Where its facts say a vector of the result is not fresh (so no
    /// caller writes into it), a vector that only copies a variable
    /// ([`crate::prims::passed_through`]) is that variable itself when the
    /// sizes agree: reverse mode returns a cotangent passed through
    /// unchanged without copying it.
    fn returned(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<Op> {
        let fresh = self.facts.fresh_results[st.self_def].clone();
        self.returned_part(fb, st, v, ty, &fresh)
    }

    fn returned_part(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: LVal,
        ty: &Type,
        fresh: &crate::prims::Fresh,
    ) -> R<Op> {
        use crate::prims::Fresh;
        match v {
            LVal::Tuple(vs) if !matches!(fresh, Fresh::Yes) => {
                let ts = tuple_tys(ty)?.to_vec();
                let mut parts = Vec::new();
                for (k, (v, t)) in vs.into_iter().zip(&ts).enumerate() {
                    parts.push(LVal::Op(self.returned_part(fb, st, v, t, &fresh.component(k, ts.len()))?));
                }
                self.materialize_in(fb, st, LVal::Tuple(parts), ty)
            }
            LVal::Delayed(d) if *fresh == Fresh::No => match self.passed_vector(fb, st, &d, ty)? {
                Some((w, cond)) => {
                    let r = fb.var(ty.clone(), None, true);
                    fb.emit(Stmt::DeclMut(r, None));
                    fb.push_block();
                    fb.emit(Stmt::Set(r, w));
                    let then = fb.pop_block();
                    fb.push_block();
                    let o = self.materialize_in(fb, st, LVal::Delayed(d), ty)?;
                    fb.emit(Stmt::Set(r, o));
                    let els = fb.pop_block();
                    fb.emit(Stmt::If { cond, then, els });
                    Ok(Op::Var(r))
                }
                None => self.materialize_in(fb, st, LVal::Delayed(d), ty),
            },
            v => self.materialize_in(fb, st, v, ty),
        }
    }

    /// For a delayed vector of numbers that copies a variable `w`
    /// ([`crate::prims::passed_through`]): `w`, and the condition under
    /// which the vector is `w` (its size is `w`'s, and the prefix's bound
    /// is at least that).
    fn passed_vector(&mut self, fb: &mut FnBuilder, st: &mut FnState, d: &Delayed, ty: &Type) -> R<Option<(Op, Op)>> {
        let DelayedElem::Lam { binder, body, ctx } = &d.elem else { return Ok(None) };
        if d.dims.len() != 1 || !matches!(ty, Type::Tensor(1, e) if matches!(**e, Type::Float | Type::Integer)) {
            return Ok(None);
        }
        let Some((w, k)) = crate::prims::passed_through(self.body(ctx), binder, *body) else { return Ok(None) };
        let Some(Bound::Val(LVal::Op(w))) = ctx.env.get(w) else { return Ok(None) };
        let (w, n) = (w.clone(), d.dims[0].clone());
        let size = fb.let_(Rhs::Dim { arr: w.clone(), dim: 0 }, Type::Integer, None);
        let mut cond = bin(fb, BinOp::IEq, size, n.clone());
        if let Some(k) = k {
            let k = self.lower(fb, st, ctx, k, Tail::No)?;
            let covered = bin(fb, BinOp::ILe, n, lval_op(&k)?);
            cond = bin(fb, BinOp::And, cond, covered);
        }
        Ok(Some((w, cond)))
    }

    /// A lowered value as one operand: tuples packed, delayed tensors computed.
    fn materialize_in(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<Op> {
        match v {
            LVal::Op(o) => Ok(o),
            LVal::Tuple(vs) => {
                let ts = tuple_tys(ty)?.to_vec();
                if ts.is_empty() {
                    return Ok(Op::Unit);
                }
                let mut ops = Vec::new();
                for (v, t) in vs.into_iter().zip(&ts) {
                    ops.push(self.materialize_in(fb, st, v, t)?);
                }
                Ok(fb.let_(Rhs::Pack(ops, ty.clone()), ty.clone(), None))
            }
            LVal::Delayed(d) => {
                let (_, elem_ty) = tensor_ty(ty)?;
                let arr = fb.let_(Rhs::Alloc { dims: d.dims.clone(), elem: elem_ty.clone() }, ty.clone(), None);
                let nest = self.open_nest(fb, &d.dims);
                // Elements that live on the heap are copied down after each
                // iteration, so the temporaries that computed them are freed.
                let mark = fb.mark_if(needs_heap(&elem_ty));
                let start = fb.position();
                let x = self.elem(fb, st, &LVal::Delayed(d.clone()), &elem_ty, &nest.idx, None)?;
                let x = self.materialize_in(fb, st, x, &elem_ty)?;
                let x = fb.copy_down_since(mark, start, vec![(x, elem_ty.clone())]).remove(0);
                fb.emit(Stmt::Store { arr: arr.clone(), idx: nest.flat.clone(), val: x });
                self.close_nest(fb, nest);
                if let (Op::Var(a), true) = (&arr, is_zeros(&LVal::Delayed(d.clone()), fb)) {
                    fb.remember_zeros(*a);
                }
                Ok(arr)
            }
            LVal::Never => Ok(default_op(ty)),
        }
    }

    /// Computes every delayed tensor inside a value (tuples stay split).
    fn force(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<LVal> {
        self.force_parts(fb, st, v, ty, false)
    }

    /// [`Self::force`], except (with `keep_zeros`) the parts that are
    /// delayed zeros: a tuple of a tangent and a zero vector, bound to a
    /// parameter that is only taken apart, keeps the zeros unmade.
    fn force_parts(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type, keep_zeros: bool) -> R<LVal> {
        match v {
            v if keep_zeros && is_zeros(&v, fb) => Ok(v),
            LVal::Delayed(_) => Ok(LVal::Op(self.materialize_in(fb, st, v, ty)?)),
            LVal::Tuple(vs) => {
                let ts = tuple_tys(ty)?.to_vec();
                let mut out = Vec::new();
                for (v, t) in vs.into_iter().zip(&ts) {
                    out.push(self.force_parts(fb, st, v, t, keep_zeros)?);
                }
                Ok(LVal::Tuple(out))
            }
            v => Ok(v),
        }
    }

    /// The leaves (non-tuple components) of a forced value, with their types.
    fn leaves(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type, out: &mut Vec<(Op, Type)>) -> R<()> {
        match ty {
            Type::Tuple(ts) => {
                let vs = match v {
                    LVal::Op(o) => match split(fb, o, ty) {
                        LVal::Tuple(vs) => vs,
                        _ => return internal("expected a tuple"),
                    },
                    v => components(v, ts.len())?,
                };
                for (v, t) in vs.into_iter().zip(ts) {
                    self.leaves(fb, st, v, t, out)?;
                }
                Ok(())
            }
            _ => {
                let o = self.materialize_in(fb, st, v, ty)?;
                out.push((o, ty.clone()));
                Ok(())
            }
        }
    }

    // ---------------------------------------------------------------------
    // Expressions

    fn lower(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, e: ExprId, tail: Tail) -> R<LVal> {
        let body = &self.defs[ctx.def].body;
        match &body.exprs[e] {
            Expr::Lit(l) => Ok(LVal::Op(match l {
                Lit::Integer(i) => Op::Int(*i),
                Lit::Float(x) => Op::Float(*x),
                Lit::Bool(b) => Op::Bool(*b),
                Lit::String(s) => Op::Str(s.clone()),
            })),
            Expr::Var(v) => match ctx.env.get(v) {
                Some(b) => {
                    let b = b.clone();
                    self.force_bound(fb, st, &b)
                }
                None => internal(format!("variable `{v}` is not in scope")),
            },
            Expr::Tuple(es) => {
                let mut vs = Vec::new();
                for &c in es {
                    vs.push(self.lower(fb, st, ctx, c, Tail::No)?);
                }
                Ok(LVal::Tuple(vs))
            }
            // A one-hot vector of a few scalar operations, only added into
            // sums: added where each sum is, at one element each time, and
            // never made. Reverse mode makes one per read `index i v` and
            // adds it once per use of the read (twice for `(mul (index i v)
            // (index i v))`); made, it cost a vector of v's size per call,
            // which made the reverse pass of a recursion over v's elements
            // quadratic.
            Expr::Let(Pat::Var(x), rhs, next)
                if crate::accum::cheap_one_hot(self.body(ctx), *rhs)
                    && !self.has_effect(ctx, *rhs)
                    && crate::accum::only_added_into(self.body(ctx), *next, x) =>
            {
                let ctx = ctx.with_bound(x, Bound::Pending(*rhs, ctx.clone()));
                self.lower(fb, st, &ctx, *next, tail)
            }
            Expr::Let(pat, rhs, next) => {
                let rty = self.ty(ctx, *rhs)?;
                let v = self.lower(fb, st, ctx, *rhs, Tail::No)?;
                if matches!(v, LVal::Never) {
                    return Ok(LVal::Never);
                }
                let ctx = self.bind_pat(fb, st, ctx, pat, v, &rty, *next)?;
                self.own_sole_uses(fb, &ctx, pat, *rhs, *next);
                self.lower(fb, st, &ctx, *next, tail)
            }
            Expr::If(c, t, f) => {
                let cond = self.lower(fb, st, ctx, *c, Tail::No)?;
                let cond = lval_op(&cond)?;
                let ty = self.ty(ctx, e)?;
                if let Op::Bool(b) = cond {
                    return self.lower(fb, st, ctx, if b { *t } else { *f }, tail);
                }
                if tail == Tail::Function {
                    self.emit_branches(fb, st, cond, [*t, *f], &mut |this, fb, st, branch| {
                        let v = this.lower(fb, st, ctx, branch, tail)?;
                        if !matches!(v, LVal::Never) {
                            let r = this.returned(fb, st, v, &ty)?;
                            fb.emit(Stmt::Return(r));
                        }
                        Ok(())
                    })?;
                    return Ok(LVal::Never);
                }
                let leaf_tys = leaf_types(&ty);
                let vars: Vec<VarId> = leaf_tys.iter().map(|t| fb.var(t.clone(), None, true)).collect();
                for &v in &vars {
                    fb.emit(Stmt::DeclMut(v, None));
                }
                self.emit_branches(fb, st, cond, [*t, *f], &mut |this, fb, st, branch| {
                    let v = this.lower(fb, st, ctx, branch, tail)?;
                    if !matches!(v, LVal::Never) {
                        let mut ls = Vec::new();
                        this.leaves(fb, st, v, &ty, &mut ls)?;
                        for (&var, (o, _)) in vars.iter().zip(ls) {
                            fb.emit(Stmt::Set(var, o));
                        }
                    }
                    Ok(())
                })?;
                let ops: Vec<Op> =
                    vars.iter().zip(&leaf_tys).map(|(&v, t)| fb.let_(Rhs::Copy(Op::Var(v)), t.clone(), None)).collect();
                Ok(rebuild(&ty, &mut ops.into_iter()))
            }
            Expr::Assert(c, next, _) => {
                let cond = self.lower(fb, st, ctx, *c, Tail::No)?;
                let cond = lval_op(&cond)?;
                let site = self.site(ctx, e);
                match cond {
                    Op::Bool(true) => {}
                    Op::Bool(false) => {
                        fb.emit(Stmt::Fail { site, err: ErrorKind::Assert });
                        let ty = self.ty(ctx, e)?;
                        return Ok(default_lval(&ty));
                    }
                    cond => fb.emit(Stmt::Check { cond, site, err: ErrorKind::Assert }),
                }
                self.lower(fb, st, ctx, *next, tail)
            }
            Expr::Lam(..) => internal("a lambda outside the arguments of a primitive"),
            Expr::Dummy(t) => {
                check_type(t)?;
                Ok(default_lval(t))
            }
            Expr::Call(Callee::Fun(name), arg) => self.lower_call(fb, st, ctx, e, name, *arg, tail, false),
            // `$inline (f a)`: f's body in place of the call, whatever its
            // size (the original's meaning), unless f is recursive.
            Expr::Call(Callee::Prim(Prim::Inline), call) if matches!(&self.defs[ctx.def].body.exprs[*call], Expr::Call(Callee::Fun(f), _) if self.facts.inlined_where_marked(f)) =>
            {
                let Expr::Call(Callee::Fun(name), arg) = &self.defs[ctx.def].body.exprs[*call] else { unreachable!() };
                self.lower_call(fb, st, ctx, *call, name, *arg, tail, true)
            }
            Expr::Call(Callee::Prim(p), arg) => {
                if let Prim::Get { .. } = p {
                    if let Some(v) = self.lower_part(fb, st, ctx, e)? {
                        return Ok(v);
                    }
                }
                self.lower_prim(fb, st, ctx, e, *p, *arg)
            }
        }
    }

    /// The value of a bound variable, evaluating what is pending.
    pub(crate) fn force_bound(&mut self, fb: &mut FnBuilder, st: &mut FnState, b: &Bound) -> R<LVal> {
        match b {
            Bound::Val(v) => Ok(v.clone()),
            Bound::Pending(e, at) => self.lower(fb, st, at, *e, Tail::No),
            Bound::Parts(ps) => Ok(LVal::Tuple(ps.iter().map(|p| self.force_bound(fb, st, p)).collect::<R<_>>()?)),
        }
    }

    /// `ctx` with `pat` bound to the value `v` (of type `ty`) of a `let`
    /// whose body is `scope`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bind_pat(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        pat: &Pat,
        v: LVal,
        ty: &Type,
        scope: ExprId,
    ) -> R<Ctx> {
        let mut env = ctx.env.clone();
        match pat {
            Pat::Var(x) => {
                let v = self.keep_delayed_if_used_once(fb, st, ctx, v, ty, x, scope)?;
                let v = name_value(fb, v, x);
                env = env.bind(x, v);
            }
            Pat::Tuple(xs) => {
                let ts = tuple_tys(ty)?.to_vec();
                let vs = parts(fb, v, ty, xs.len())?;
                for ((x, v), t) in xs.iter().zip(vs).zip(&ts) {
                    let v = self.keep_delayed_if_used_once(fb, st, ctx, v, t, x, scope)?;
                    let v = name_value(fb, v, x);
                    env = env.bind(x, v);
                }
            }
        }
        Ok(Ctx { env, ..ctx.clone() })
    }

    /// Records the fresh tensors a `let` just bound (a variable, or a
    /// component of a tuple variable or pattern) whose only use in `scope` is
    /// outside any lambda: `ts_add` may add into them in place there instead
    /// of copying them first (reverse mode adds a one-hot row into the
    /// cotangent vector a loop just built).
    fn own_sole_uses(&self, fb: &mut FnBuilder, ctx: &Ctx, pat: &Pat, rhs: ExprId, scope: ExprId) {
        let body = &self.defs[ctx.def].body;
        let fresh = self.fresh_parts(ctx.def, body, rhs);
        let own = |fb: &mut FnBuilder, x: &str, comp: Option<usize>, val: Option<&Bound>| {
            if let Some(Bound::Val(LVal::Op(Op::Var(id)))) = val {
                if matches!(fb.vars[id.0 as usize].ty, Type::Tensor(..)) && sole_use(body, scope, x, comp) {
                    fb.own(*id, x, comp);
                }
            }
        };
        let part = |f: &crate::prims::Fresh, k: usize| match f {
            crate::prims::Fresh::Yes => true,
            crate::prims::Fresh::Tuple(ps) => ps.get(k) == Some(&crate::prims::Fresh::Yes),
            _ => false,
        };
        match pat {
            Pat::Var(x) => match (ctx.env.get(x), &fresh) {
                (Some(Bound::Val(LVal::Tuple(vs))), f) => {
                    for (k, v) in vs.iter().enumerate() {
                        if part(f, k) {
                            own(fb, x, Some(k), Some(&Bound::Val(v.clone())));
                        }
                    }
                }
                (val, crate::prims::Fresh::Yes) => own(fb, x, None, val),
                _ => {}
            },
            Pat::Tuple(xs) => {
                for (k, x) in xs.iter().enumerate() {
                    if part(&fresh, k) {
                        own(fb, x, None, ctx.env.get(x));
                    }
                }
            }
        }
    }

    /// Does this code own the storage of `v`, the value of `e` (in the body
    /// of definition `def`): a new value, one nothing else refers to, or a
    /// variable's storage handed over ([`Lowerer::owned_operand`])?
    pub(crate) fn owns(&self, fb: &mut FnBuilder, def: usize, e: ExprId, v: &LVal) -> bool {
        let body = &self.defs[def].body;
        crate::prims::fresh_value(body, e) || self.fresh(def, body, e) || self.owned_operand(fb, body, e, v)
    }

    /// Is a fresh tensor an operand `a` of `ts_add` owns (see
    /// [`Lowerer::own_sole_uses`]): `a` is the variable (or a projection of
    /// it) whose sole use this is, and `first` its value?
    pub(crate) fn owned_operand(&self, fb: &mut FnBuilder, body: &ksc_ir::Body, a: ExprId, first: &LVal) -> bool {
        let LVal::Op(Op::Var(id)) = first else { return false };
        let (x, comp) = match &body.exprs[a] {
            Expr::Var(x) => (x, None),
            Expr::Call(Callee::Prim(Prim::Get { index, .. }), t) => match &body.exprs[*t] {
                Expr::Var(x) => (x, Some(*index as usize - 1)),
                _ => return false,
            },
            _ => return false,
        };
        fb.take_owned(*id, x, comp)
    }

    /// A value bound to `x` in `scope`: a delayed tensor stays delayed only
    /// if `x` is read once, outside any lambda, besides any number of
    /// `size`s (its sizes are known without its elements).
    #[allow(clippy::too_many_arguments)]
    fn keep_delayed_if_used_once(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        v: LVal,
        ty: &Type,
        x: &str,
        scope: ExprId,
    ) -> R<LVal> {
        if !contains_delayed(&v) {
            return Ok(v);
        }
        let body = &self.defs[ctx.def].body;
        let u = uses(body, scope, x);
        // Zeros (the value, or parts of a tuple) stay delayed where they
        // are only added (nothing to add), indexed or measured, or are an
        // accumulator's start (made once).
        if u.only_size || (u.read <= 1 && !u.read_under_lambda) || (self.is_view(fb, &v) && only_read(body, scope, x)) {
            Ok(v)
        } else {
            self.force_parts(fb, st, v, ty, !u.passed)
        }
    }

    /// Is `v` a delayed vector whose elements are a view of vectors already
    /// computed: `build (size x) (lam i E)` with E made of `index i x`
    /// (x a computed vector of the build's size, so the read cannot fail),
    /// scalar variables, literals, tuples and projections? Reading its
    /// element is as cheap as reading it from memory, so it is read where
    /// it is used, however often, and never stored: `reduce OP E (build n
    /// (lam i (tuple (index i x) 1.0)))` reads x, not a vector of pairs
    /// written first. So is a `constVec` of numbers or tuples of them,
    /// whose every element is the value itself.
    fn is_view(&mut self, fb: &mut FnBuilder, v: &LVal) -> bool {
        let LVal::Delayed(d) = v else { return false };
        let [size] = &d.dims[..] else { return false };
        let (binder, body, ctx) = match &d.elem {
            DelayedElem::Lam { binder, body, ctx } => (binder, body, ctx),
            // A `constVec` of numbers: each element is the value itself.
            DelayedElem::Const(c) => return flat_numbers(fb, c),
        };
        let code = self.body(ctx);
        let mut stack = vec![*body];
        while let Some(e) = stack.pop() {
            match &code.exprs[e] {
                Expr::Lit(_) => {}
                Expr::Var(y) => match ctx.env.get(y) {
                    Some(Bound::Val(LVal::Op(_))) => {}
                    _ if y == binder => {}
                    _ => return false,
                },
                Expr::Tuple(es) => stack.extend(es),
                Expr::Call(Callee::Prim(Prim::Get { .. }), t) => stack.push(*t),
                Expr::Call(Callee::Prim(Prim::Index), a) => {
                    let [i, x] = code.call_args(*a)[..] else { return false };
                    if !matches!(&code.exprs[i], Expr::Var(j) if j == binder) {
                        return false;
                    }
                    let Expr::Var(x) = &code.exprs[x] else { return false };
                    let Some(Bound::Val(xv @ LVal::Op(_))) = ctx.env.get(x) else { return false };
                    let xv = xv.clone();
                    if self.checked() && self.dims(fb, &xv, 1).ok().as_deref() != Some(std::slice::from_ref(size)) {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        true
    }

    // ---------------------------------------------------------------------
    // Calls

    /// The argument values of a call of a function of `n` parameters.
    fn call_args(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, arg: ExprId, n: usize) -> R<Vec<LVal>> {
        match self.expr(ctx, arg) {
            Expr::Tuple(es) if n != 1 && es.len() == n => {
                let mut vs = Vec::new();
                for &c in es {
                    vs.push(self.lower(fb, st, ctx, c, Tail::No)?);
                }
                Ok(vs)
            }
            _ => {
                let v = self.lower(fb, st, ctx, arg, Tail::No)?;
                if n == 1 {
                    return Ok(vec![v]);
                }
                let ty = self.ty(ctx, arg)?;
                parts(fb, v, &ty, n)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn lower_call(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        e: ExprId,
        name: &FunName,
        arg: ExprId,
        tail: Tail,
        marked: bool,
    ) -> R<LVal> {
        let ret = self.ty(ctx, e)?;
        let Some(&d) = self.by_name.get(name) else {
            if let Some(v) = self.lower_native(fb, st, ctx, e, name, arg)? {
                return Ok(v);
            }
            let site = self.site(ctx, e);
            fb.emit(Stmt::Fail {
                site,
                err: ErrorKind::Message(format!("`{name}` has no definition to run: it is only declared")),
            });
            return Ok(default_lval(&ret));
        };
        let callee = self.defs[d];
        let args = self.call_args(fb, st, ctx, arg, callee.params.len())?;
        if args.iter().any(|a| matches!(a, LVal::Never)) {
            return Ok(LVal::Never);
        }
        let inline = self.opts.inline
            && (self.facts.inlinable[d]
                && (self.facts.inlined_anywhere[d] || fb.nested() || self.projected(ctx.def, e))
                || marked && !self.facts.recursive[d])
            && ctx.depth < INLINE_DEPTH;
        let mut args = args;
        if !inline && !consumed_params(callee).is_empty() {
            // The last argument is consumed: owned storage or a copy.
            let n = callee.params.len();
            let e = match self.expr(ctx, arg) {
                Expr::Tuple(es) if n != 1 && es.len() == n => Some(es[n - 1]),
                _ if n == 1 => Some(arg),
                _ => None,
            };
            if let (Some(v), Some(p)) = (args.pop(), callee.params.last()) {
                let v = self.consumable(fb, st, ctx, e, v, &p.ty)?;
                args.push(v);
            }
        }
        // A self tail call of the function being emitted: a loop.
        if tail == Tail::Function && d == st.self_def && ctx.depth == 0 {
            let mut ops = Vec::new();
            for (a, p) in args.into_iter().zip(&callee.params) {
                ops.push(self.materialize_in(fb, st, a, &p.ty)?);
            }
            fb.emit(Stmt::TailCall(ops));
            st.loops = true;
            return Ok(LVal::Never);
        }
        if inline {
            let chain = if tail.is_tail() { ctx.chain } else { Some(self.site(ctx, e)) };
            let mut env = Env::default();
            for (a, p) in args.into_iter().zip(&callee.params) {
                let inner = Ctx { def: d, env: Env::default(), chain, depth: ctx.depth + 1 };
                let a = self.keep_delayed_if_used_once(fb, st, &inner, a, &p.ty, &p.name, callee.root)?;
                env = env.bind(&p.name, a);
            }
            let inner = Ctx { def: d, env, chain, depth: ctx.depth + 1 };
            return self.lower(fb, st, &inner, callee.root, Tail::Body);
        }
        let mut ops = Vec::new();
        for (a, p) in args.into_iter().zip(&callee.params) {
            ops.push(self.materialize_in(fb, st, a, &p.ty)?);
        }
        let func = self.func_for(d);
        let frame = if tail.is_tail() { ctx.chain } else { Some(self.site(ctx, e)) };
        let r = fb.let_(Rhs::Call { func, args: ops, frame }, callee.ret_ty.clone(), None);
        Ok(split(fb, r, &callee.ret_ty))
    }

    /// A call of a built-in prelude function implemented natively, if `name`
    /// is one.
    fn lower_native(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        e: ExprId,
        name: &FunName,
        arg: ExprId,
    ) -> R<Option<LVal>> {
        let Some(builtin) = Builtin::resolve(name) else { return Ok(None) };
        let n = builtin.arity();
        let args = self.call_args(fb, st, ctx, arg, n)?;
        if args.iter().any(|a| matches!(a, LVal::Never)) {
            return Ok(Some(LVal::Never));
        }
        let site = self.site(ctx, e);
        let checked = self.opts.checked;
        let op = |i: usize| lval_op(&args[i]);
        use Builtin as B;
        let v = match builtin {
            B::ToFloat => fb.let_(Rhs::Un(UnOp::ToFloat, op(0)?, None), Type::Float, None),
            B::BoolToFloat => fb.let_(Rhs::Un(UnOp::BoolToFloat, op(0)?, None), Type::Float, None),
            B::FNeg => fb.let_(Rhs::Un(UnOp::FNeg, op(0)?, None), Type::Float, None),
            B::INeg => {
                let s = checked.then_some(site);
                fb.let_(Rhs::Un(UnOp::INeg, op(0)?, s), Type::Integer, None)
            }
            B::FAdd | B::FSub | B::FMul | B::FDiv | B::FMax | B::FGt | B::FLt | B::FGte | B::FLte => {
                let b = match builtin {
                    B::FAdd => BinOp::FAdd,
                    B::FSub => BinOp::FSub,
                    B::FMul => BinOp::FMul,
                    B::FDiv => BinOp::FDiv,
                    B::FMax => BinOp::FMax,
                    B::FGt => BinOp::FGt,
                    B::FLt => BinOp::FLt,
                    B::FGte => BinOp::FGe,
                    _ => BinOp::FLe,
                };
                float_bin(fb, b, op(0)?, op(1)?)
            }
            B::IAdd | B::ISub | B::IMul | B::IDiv => {
                let i = match builtin {
                    B::IAdd => IOp::Add,
                    B::ISub => IOp::Sub,
                    B::IMul => IOp::Mul,
                    _ => IOp::Div,
                };
                self.int_op(fb, i, op(0)?, op(1)?, site)
            }
            B::IGt | B::ILt | B::IGte | B::ILte => {
                let b = match builtin {
                    B::IGt => BinOp::IGt,
                    B::ILt => BinOp::ILt,
                    B::IGte => BinOp::IGe,
                    _ => BinOp::ILe,
                };
                float_bin(fb, b, op(0)?, op(1)?)
            }
            B::Pow => float_bin(fb, BinOp::FPowI, op(0)?, op(1)?),
            B::Or => float_bin(fb, BinOp::Or, op(0)?, op(1)?),
            B::And => float_bin(fb, BinOp::And, op(0)?, op(1)?),
            B::RanHashDoub => fb.let_(Rhs::Un(UnOp::RanHashDoub, op(0)?, None), Type::Float, None),
            B::Log
            | B::Exp
            | B::Sin
            | B::Cos
            | B::Cosh
            | B::Tanh
            | B::Sqrt
            | B::Abs
            | B::Erf
            | B::Digamma
            | B::Lgamma => {
                let m = match builtin {
                    B::Log => MathFn::Log,
                    B::Exp => MathFn::Exp,
                    B::Sin => MathFn::Sin,
                    B::Cos => MathFn::Cos,
                    B::Cosh => MathFn::Cosh,
                    B::Tanh => MathFn::Tanh,
                    B::Sqrt => MathFn::Sqrt,
                    B::Abs => MathFn::Fabs,
                    B::Erf => MathFn::Erf,
                    B::Digamma => MathFn::Digamma,
                    _ => MathFn::Lgamma,
                };
                fb.let_(Rhs::Un(UnOp::Math(m), op(0)?, None), Type::Float, None)
            }
            B::Dot => {
                let (a, b) = (&args[0], &args[1]);
                let da = self.dims(fb, a, 1)?;
                let db = self.dims(fb, b, 1)?;
                self.check_same_dims(fb, &da, &db, "`dot` of vectors of sizes", site);
                let acc = fb.var(Type::Float, Some("dot"), true);
                fb.emit(Stmt::DeclMut(acc, Some(Op::Float(0.0))));
                let nest = self.open_nest(fb, &da);
                let x = self.elem(fb, st, a, &Type::Float, &nest.idx, Some(nest.flat.clone()))?;
                let y = self.elem(fb, st, b, &Type::Float, &nest.idx, Some(nest.flat.clone()))?;
                let p = float_bin(fb, BinOp::FMul, lval_op(&x)?, lval_op(&y)?);
                let s = float_bin(fb, BinOp::FAdd, Op::Var(acc), p);
                fb.emit(Stmt::Set(acc, s));
                self.close_nest(fb, nest);
                fb.let_(Rhs::Copy(Op::Var(acc)), Type::Float, None)
            }
            B::IMax | B::VMax => {
                let imax = builtin == B::IMax;
                let v = &args[0];
                // `max v` and `imax v` share one loop.
                let operand = match v {
                    LVal::Op(Op::Var(x)) => Some(*x),
                    _ => None,
                };
                if let Some((best, at)) = operand.and_then(|x| fb.reduction(x)) {
                    return Ok(Some(LVal::Op(if imax { at } else { best })));
                }
                let d = self.dims(fb, v, 1)?;
                let nonempty = float_bin(fb, BinOp::IGt, d[0].clone(), Op::Int(0));
                let msg = if imax { "`imax` of an empty vector" } else { "`max` of an empty vector" };
                fb.emit(Stmt::Check { cond: nonempty, site, err: ErrorKind::Message(msg.into()) });
                let first = self.elem(fb, st, v, &Type::Float, &[Op::Int(0)], Some(Op::Int(0)))?;
                let best = fb.var(Type::Float, Some("best"), true);
                let at = fb.var(Type::Integer, Some("at"), true);
                fb.emit(Stmt::DeclMut(best, Some(lval_op(&first)?)));
                fb.emit(Stmt::DeclMut(at, Some(Op::Int(0))));
                let nest = self.open_nest(fb, &d);
                let x = self.elem(fb, st, v, &Type::Float, &nest.idx, Some(nest.flat.clone()))?;
                let x = lval_op(&x)?;
                let gt = float_bin(fb, BinOp::FGt, x.clone(), Op::Var(best));
                fb.emit(Stmt::If {
                    cond: gt,
                    then: vec![Stmt::Set(best, x), Stmt::Set(at, nest.flat.clone())],
                    els: vec![],
                });
                self.close_nest(fb, nest);
                let at = fb.let_(Rhs::Copy(Op::Var(at)), Type::Integer, None);
                let best = fb.let_(Rhs::Copy(Op::Var(best)), Type::Float, None);
                if let Some(x) = operand {
                    fb.remember_reduction(x, best.clone(), at.clone());
                }
                if imax {
                    at
                } else {
                    best
                }
            }
            B::MatVec => {
                // Matrix-vector product.
                let (m, v) = (&args[0], &args[1]);
                let dm = self.dims(fb, m, 2)?;
                let dv = self.dims(fb, v, 1)?;
                let ok = float_bin(fb, BinOp::IEq, dm[1].clone(), dv[0].clone());
                fb.emit(Stmt::Check {
                    cond: ok,
                    site,
                    err: ErrorKind::MatVec { rows: dm[0].clone(), cols: dm[1].clone(), n: dv[0].clone() },
                });
                let out =
                    fb.let_(Rhs::Alloc { dims: vec![dm[0].clone()], elem: Type::Float }, Type::vec(Type::Float), None);
                let rows = self.open_nest(fb, &dm[..1]);
                let acc = fb.var(Type::Float, Some("sum"), true);
                fb.emit(Stmt::DeclMut(acc, Some(Op::Float(0.0))));
                let cols = self.open_nest(fb, &dm[1..]);
                let (r, c) = (rows.idx[0].clone(), cols.idx[0].clone());
                let x = self.elem(fb, st, m, &Type::Float, &[r.clone(), c.clone()], None)?;
                let y = self.elem(fb, st, v, &Type::Float, std::slice::from_ref(&c), Some(c.clone()))?;
                let p = float_bin(fb, BinOp::FMul, lval_op(&x)?, lval_op(&y)?);
                let s = float_bin(fb, BinOp::FAdd, Op::Var(acc), p);
                fb.emit(Stmt::Set(acc, s));
                self.close_nest(fb, cols);
                fb.emit(Stmt::Store { arr: out.clone(), idx: r, val: Op::Var(acc) });
                self.close_nest(fb, rows);
                out
            }
        };
        Ok(Some(LVal::Op(v)))
    }

    /// Checked integer arithmetic (division by zero is checked even
    /// without `checked`).
    fn int_op(&mut self, fb: &mut FnBuilder, op: IOp, a: Op, b: Op, site: SiteId) -> Op {
        if let (Op::Int(x), Op::Int(y)) = (&a, &b) {
            let r = match op {
                IOp::Add => x.checked_add(*y),
                IOp::Sub => x.checked_sub(*y),
                IOp::Mul => x.checked_mul(*y),
                IOp::Div => x.checked_div(*y),
            };
            if let Some(r) = r {
                return Op::Int(r);
            }
        }
        if !self.opts.checked && op != IOp::Div {
            // Wrapping arithmetic, without checks.
            let s = SiteId::UNCHECKED;
            return fb.let_(Rhs::IChecked(op, a, b, s), Type::Integer, None);
        }
        fb.let_(Rhs::IChecked(op, a, b, site), Type::Integer, None)
    }
}

/// Names a value's operand after the variable it is bound to, for readable C.
fn name_value(fb: &mut FnBuilder, v: LVal, name: &str) -> LVal {
    if let LVal::Op(Op::Var(id)) = &v {
        let info = &mut fb.vars[id.0 as usize];
        if info.name.is_none() {
            let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            let s = s.trim_matches('_').to_string();
            if !s.is_empty() {
                info.name = Some(s);
            }
        }
    }
    v
}

/// Is `v` known to be zero: a number 0, a tensor of zeros (delayed, or
/// filled and not written since), or a tuple of zeros? Adding it into an
/// accumulator adds nothing (but the sign of a zero).
pub(crate) fn is_zeros(v: &LVal, fb: &FnBuilder) -> bool {
    match v {
        LVal::Op(Op::Float(x)) => *x == 0.0,
        LVal::Op(Op::Int(0)) => true,
        LVal::Op(Op::Var(a)) => fb.is_zeros(*a),
        LVal::Tuple(vs) => vs.iter().all(|v| is_zeros(v, fb)),
        LVal::Delayed(d) => matches!(&d.elem, DelayedElem::Const(c) if is_zeros(c, fb)),
        _ => false,
    }
}

/// Is `v` a number, or a tuple of them (held in operands, not delayed)?
fn flat_numbers(fb: &FnBuilder, v: &LVal) -> bool {
    match v {
        LVal::Op(Op::Float(_) | Op::Int(_)) => true,
        LVal::Op(Op::Var(x)) => matches!(fb.ty(*x), Type::Float | Type::Integer),
        LVal::Op(_) => false,
        LVal::Tuple(xs) => xs.iter().all(|x| flat_numbers(fb, x)),
        LVal::Delayed(_) | LVal::Never => false,
    }
}

fn contains_delayed(v: &LVal) -> bool {
    match v {
        LVal::Delayed(_) => true,
        LVal::Tuple(vs) => vs.iter().any(contains_delayed),
        _ => false,
    }
}

/// The non-tuple components of a type, in order.
pub(crate) fn leaf_types(t: &Type) -> Vec<Type> {
    match t {
        Type::Tuple(ts) => ts.iter().flat_map(leaf_types).collect(),
        t => vec![t.clone()],
    }
}

/// A value of type `t` from its leaves.
pub(crate) fn rebuild(t: &Type, ops: &mut impl Iterator<Item = Op>) -> LVal {
    match t {
        Type::Tuple(ts) => LVal::Tuple(ts.iter().map(|t| rebuild(t, ops)).collect()),
        _ => LVal::Op(ops.next().unwrap_or(Op::Unit)),
    }
}

/// The default value of a type (`$dummy T`): zeros, `false`, `""`, empty tensors.
pub(crate) fn default_lval(t: &Type) -> LVal {
    match t {
        Type::Tuple(ts) => LVal::Tuple(ts.iter().map(default_lval).collect()),
        t => LVal::Op(default_op(t)),
    }
}

pub(crate) fn default_op(t: &Type) -> Op {
    match t {
        Type::Integer => Op::Int(0),
        Type::Float => Op::Float(0.0),
        Type::Bool => Op::Bool(false),
        Type::String => Op::Str(String::new()),
        // Empty tensors and packed tuples: zero-initialised in C.
        _ => Op::Unit,
    }
}

/// Does `x` occur free in `e`?
pub(crate) fn occurs(body: &ksc_ir::Body, e: ExprId, x: &str) -> bool {
    uses(body, e, x).count > 0
}

/// How a variable is used in an expression.
#[derive(Default, Debug)]
pub(crate) struct Uses {
    count: usize,
    only_size: bool,
    /// The occurrences not measured by `size`, and whether one is inside
    /// a lambda: a delayed tensor's size is known without its elements.
    read: usize,
    read_under_lambda: bool,
    /// Some occurrence is inside an argument of a call that takes the value
    /// as it is (not `ts_add`, `index`, `size`, a projection, a `sumbuild`'s
    /// term, or a `$buildSum`'s start or term; a `let` bound inside a
    /// `$buildSum`'s body counts as its term).
    passed: bool,
}

/// Is there exactly one free occurrence of `x` in `e` that reads all of it
/// or (with `comp`) its component `comp` by `get$k$n`, outside any lambda?
pub(crate) fn sole_use(body: &ksc_ir::Body, e: ExprId, x: &str, comp: Option<usize>) -> bool {
    uses_on_a_path(body, e, x, comp) == Some(1)
}

/// The most uses of `x` (its component `comp`, if given) on one path
/// through `e`: the two branches of an `if` are alternatives. None if one
/// is inside a lambda (it may run any number of times).
fn uses_on_a_path(body: &ksc_ir::Body, e: ExprId, x: &str, comp: Option<usize>) -> Option<usize> {
    let mut count = 0usize;
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match &body.exprs[e] {
            Expr::Var(v) => count += (v == x) as usize,
            Expr::Call(Callee::Prim(Prim::Get { index, .. }), t) if matches!(&body.exprs[*t], Expr::Var(v) if v == x) =>
            {
                count += comp.is_none_or(|k| k == *index as usize - 1) as usize;
            }
            Expr::Let(p, r, b) => {
                stack.push(*r);
                if !p.vars().iter().any(|v| v == x) {
                    stack.push(*b);
                }
            }
            Expr::Lam(v, _, b) => {
                if v != x && uses_on_a_path(body, *b, x, comp) != Some(0) {
                    return None;
                }
            }
            Expr::If(c, t, f) => {
                stack.push(*c);
                let (t, f) = (uses_on_a_path(body, *t, x, comp)?, uses_on_a_path(body, *f, x, comp)?);
                count += t.max(f);
            }
            other => stack.extend(ksc_ir::core::children(other)),
        }
        if count > 1 {
            return Some(count);
        }
    }
    Some(count)
}

/// The free occurrences of `x` in `e`.
pub(crate) fn uses(body: &ksc_ir::Body, e: ExprId, x: &str) -> Uses {
    let mut u = Uses { only_size: true, ..Uses::default() };
    walk_uses(body, e, x, Where::default(), &mut u);
    if u.count == 0 {
        u.only_size = false;
    }
    u
}

/// The body of a `$buildSum`'s lambda, `(tuple element term)` under lets
/// and ifs: occurrences in the element are passed (it is stored), those in
/// the term are added.
fn walk_buildsum_body(body: &ksc_ir::Body, e: ExprId, x: &str, at: Where, u: &mut Uses) {
    match &body.exprs[e] {
        Expr::Let(p, r, b) => {
            walk_uses(body, *r, x, at, u);
            if !p.vars().iter().any(|v| v == x) {
                walk_buildsum_body(body, *b, x, at, u);
            }
        }
        Expr::If(c, t, f) => {
            walk_uses(body, *c, x, at, u);
            walk_buildsum_body(body, *t, x, at, u);
            walk_buildsum_body(body, *f, x, at, u);
        }
        Expr::Tuple(es) if es.len() == 2 => {
            walk_uses(body, es[0], x, Where { passed: true, ..at }, u);
            walk_uses(body, es[1], x, at, u);
        }
        _ => walk_uses(body, e, x, Where { passed: true, ..at }, u),
    }
}

/// Is every occurrence of `x` in `e` an element read (`index _ x`), its
/// size, or the vector a `fold` or a scan goes over (which lowering reads
/// element by element)?
fn only_read(body: &ksc_ir::Body, e: ExprId, x: &str) -> bool {
    let is_x = |a: ExprId| matches!(&body.exprs[a], Expr::Var(v) if v == x);
    let mut ok = true;
    ksc_ir::term::walk_free(body, x, e, &mut |_, node| match node {
        Expr::Var(v) if v == x => {
            ok = false;
            Some(Vec::new())
        }
        Expr::Call(
            Callee::Prim(Prim::Index | Prim::Size | Prim::Fold | Prim::Scan | Prim::ScanSum | Prim::ScanBlocks),
            a,
        ) => {
            let args = body.call_args(*a);
            let n = args.len();
            Some(args.into_iter().enumerate().filter(|&(k, a)| !(is_x(a) && k + 1 == n)).map(|(_, a)| a).collect())
        }
        _ => None,
    });
    ok
}

/// Where an occurrence is (see [`Uses`]).
#[derive(Clone, Copy, Default)]
struct Where {
    lam: bool,
    in_size: bool,
    passed: bool,
}

fn walk_uses(body: &ksc_ir::Body, e: ExprId, x: &str, at: Where, u: &mut Uses) {
    let inner = Where { in_size: false, ..at };
    match &body.exprs[e] {
        Expr::Var(v) if v == x => {
            u.count += 1;
            u.only_size &= at.in_size;
            u.passed |= at.passed;
            if !at.in_size {
                u.read += 1;
                u.read_under_lambda |= at.lam;
            }
        }
        Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => {}
        Expr::Call(Callee::Prim(Prim::Size), a) => walk_uses(body, *a, x, Where { in_size: true, ..at }, u),
        // `$buildSum n init (lam i body)`: `n` is passed, `init` starts the
        // accumulator, and `body`'s element is stored (passed) while its
        // term is added.
        Expr::Call(Callee::Prim(Prim::BuildSum), a) => match &body.exprs[*a] {
            Expr::Tuple(es) if es.len() == 3 => {
                walk_uses(body, es[0], x, Where { passed: true, ..inner }, u);
                walk_uses(body, es[1], x, inner, u);
                match &body.exprs[es[2]] {
                    Expr::Lam(v, _, b) if v != x => walk_buildsum_body(body, *b, x, Where { lam: true, ..inner }, u),
                    Expr::Lam(..) => {}
                    _ => walk_uses(body, es[2], x, Where { passed: true, ..inner }, u),
                }
            }
            _ => walk_uses(body, *a, x, Where { passed: true, ..inner }, u),
        },
        // An element read is not the vector passed, wherever the element goes.
        Expr::Call(Callee::Prim(Prim::Index), a) => walk_uses(body, *a, x, Where { passed: false, ..inner }, u),
        Expr::Call(Callee::Prim(Prim::TsAdd | Prim::Get { .. } | Prim::Sumbuild), a) => {
            walk_uses(body, *a, x, inner, u)
        }
        Expr::Call(_, a) => walk_uses(body, *a, x, Where { passed: true, ..inner }, u),
        Expr::Tuple(es) => es.iter().for_each(|&c| walk_uses(body, c, x, inner, u)),
        Expr::Let(p, r, b) => {
            walk_uses(body, *r, x, inner, u);
            if !p.vars().iter().any(|v| v == x) {
                walk_uses(body, *b, x, inner, u);
            }
        }
        Expr::If(c, t, f) => {
            for c in [*c, *t, *f] {
                walk_uses(body, c, x, inner, u);
            }
        }
        Expr::Assert(c, b, _) => {
            walk_uses(body, *c, x, inner, u);
            walk_uses(body, *b, x, inner, u);
        }
        Expr::Lam(v, _, b) => {
            if v != x {
                walk_uses(body, *b, x, Where { lam: true, ..inner }, u);
            }
        }
    }
}

impl<'a> Lowerer<'a> {
    pub(crate) fn effectful_def(&self, d: usize) -> bool {
        self.facts.effectful[d]
    }
    pub(crate) fn def_index(&self, n: &FunName) -> Option<usize> {
        self.by_name.get(n).copied()
    }
    pub(crate) fn checked(&self) -> bool {
        self.opts.checked
    }
    pub(crate) fn body(&self, ctx: &Ctx) -> &'a ksc_ir::Body {
        &self.defs[ctx.def].body
    }
    pub(crate) fn site_of(&mut self, ctx: &Ctx, e: ExprId) -> SiteId {
        self.site(ctx, e)
    }
    pub(crate) fn type_of(&self, ctx: &Ctx, e: ExprId) -> R<Type> {
        self.ty(ctx, e)
    }
    pub(crate) fn lower_expr(&mut self, fb: &mut FnBuilder, st: &mut FnState, ctx: &Ctx, e: ExprId) -> R<LVal> {
        self.lower(fb, st, ctx, e, Tail::No)
    }
    pub(crate) fn materialize_val(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<Op> {
        self.materialize_in(fb, st, v, ty)
    }
    pub(crate) fn force_val(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<LVal> {
        self.force(fb, st, v, ty)
    }
    pub(crate) fn leaves_of(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<Vec<(Op, Type)>> {
        let mut out = Vec::new();
        self.leaves(fb, st, v, ty, &mut out)?;
        Ok(out)
    }
    pub(crate) fn dims_of(&mut self, fb: &mut FnBuilder, v: &LVal, rank: usize) -> R<Vec<Op>> {
        self.dims(fb, v, rank)
    }
    /// The vector a serial loop (a `fold`'s or a scan's steps) reads
    /// element by element: a delayed `build` whose elements have loops of
    /// their own is computed first, into a vector, by a loop of its own.
    /// That loop's iterations are independent, so it runs on every core
    /// (ksc-codegen-c's `parallel.rs`), where fused into the serial loop
    /// they would not; each element is still computed once, the same way,
    /// so results are unchanged. Elements on the heap stay fused: their
    /// loop would be serial.
    pub(crate) fn serial_input(&mut self, fb: &mut FnBuilder, st: &mut FnState, v: LVal, ty: &Type) -> R<LVal> {
        let LVal::Delayed(d) = &v else { return Ok(v) };
        let DelayedElem::Lam { body, ctx, .. } = &d.elem else { return Ok(v) };
        let (_, elem_ty) = tensor_ty(ty)?;
        if needs_heap(&elem_ty) || !has_loop(&self.defs[ctx.def].body, *body) {
            return Ok(v);
        }
        Ok(LVal::Op(self.materialize_in(fb, st, v, ty)?))
    }
    pub(crate) fn elem_of(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: &LVal,
        ty: &Type,
        idx: &[Op],
        flat: Option<Op>,
    ) -> R<LVal> {
        self.elem(fb, st, v, ty, idx, flat)
    }
    /// Element `idx` of a tensor value, given to `k` where it is made: when
    /// the value is a delayed `build` whose body is an `if` (as a `build` of
    /// differently made blocks is), `k` runs in each branch with that
    /// branch's value, so the branches' values are not merged (which
    /// materialises them); a branch that never returns gets no call.
    pub(crate) fn with_elem(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        v: &LVal,
        ty: &Type,
        (idx, flat): (&[Op], Op),
        k: &mut dyn FnMut(&mut Self, &mut FnBuilder, &mut FnState, LVal) -> R<()>,
    ) -> R<()> {
        if let LVal::Delayed(d) = v {
            if let DelayedElem::Lam { binder, body, ctx } = &d.elem {
                let ctx = Ctx { env: ctx.env.bind(binder, index_lval(idx)), ..ctx.clone() };
                return self.with_branches(fb, st, &ctx, *body, k);
            }
        }
        let x = self.elem(fb, st, v, ty, idx, Some(flat))?;
        k(self, fb, st, x)
    }

    fn with_branches(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        ctx: &Ctx,
        e: ExprId,
        k: &mut dyn FnMut(&mut Self, &mut FnBuilder, &mut FnState, LVal) -> R<()>,
    ) -> R<()> {
        if let Expr::If(c, t, f) = self.defs[ctx.def].body.exprs[e] {
            let cond = self.lower(fb, st, ctx, c, Tail::No)?;
            let cond = lval_op(&cond)?;
            if let Op::Bool(b) = cond {
                return self.with_branches(fb, st, ctx, if b { t } else { f }, k);
            }
            return self.emit_branches(fb, st, cond, [t, f], &mut |this, fb, st, branch| {
                this.with_branches(fb, st, ctx, branch, k)
            });
        }
        match self.lower(fb, st, ctx, e, Tail::No)? {
            LVal::Never => Ok(()),
            x => k(self, fb, st, x),
        }
    }

    /// Emits `if cond { .. } else { .. }` with `each` lowering each branch
    /// into its own block.
    pub(crate) fn emit_branches(
        &mut self,
        fb: &mut FnBuilder,
        st: &mut FnState,
        cond: Op,
        [t, f]: [ExprId; 2],
        each: &mut dyn FnMut(&mut Self, &mut FnBuilder, &mut FnState, ExprId) -> R<()>,
    ) -> R<()> {
        // A tensor owned before the `if` may be handed over in either
        // branch (`sole_use` counts one use per path).
        let owned = fb.owned_now();
        fb.push_block();
        each(self, fb, st, t)?;
        let then = fb.pop_block();
        let owned_then = fb.owned_now();
        fb.restore_owned(owned);
        fb.push_block();
        each(self, fb, st, f)?;
        let els = fb.pop_block();
        fb.join_owned(&owned_then);
        fb.emit(Stmt::If { cond, then, els });
        Ok(())
    }

    pub(crate) fn nest_open(&mut self, fb: &mut FnBuilder, dims: &[Op]) -> Nest {
        self.open_nest(fb, dims)
    }
    pub(crate) fn nest_close(&mut self, fb: &mut FnBuilder, n: Nest) {
        self.close_nest(fb, n)
    }
    pub(crate) fn count_of(&mut self, fb: &mut FnBuilder, dims: &[Op]) -> Op {
        self.count(fb, dims)
    }
    /// The number of indices of an iteration space of these (non-negative)
    /// sizes, saturating at 2^63 - 1: a `sumbuild` has no limit, so its
    /// count may overflow, and only whether it is empty is asked.
    pub(crate) fn count_sat_of(&mut self, fb: &mut FnBuilder, dims: &[Op]) -> Op {
        let mut acc = dims[0].clone();
        for d in &dims[1..] {
            acc = float_bin(fb, BinOp::IMulSat, acc, d.clone());
        }
        acc
    }
    pub(crate) fn sizes_check(&mut self, fb: &mut FnBuilder, dims: &[Op], prim: &str, site: SiteId) {
        self.check_sizes(fb, dims, prim, site)
    }
    /// [`Self::sizes_check`] of the sizes of a tensor `prim` makes, then
    /// the limit on its elements.
    pub(crate) fn tensor_sizes_check(&mut self, fb: &mut FnBuilder, dims: &[Op], prim: &str, site: SiteId) {
        self.check_sizes(fb, dims, prim, site);
        self.check_limit(fb, dims, prim, site)
    }
    pub(crate) fn limit_check(&mut self, fb: &mut FnBuilder, dims: &[Op], prim: &str, site: SiteId) {
        self.check_limit(fb, dims, prim, site)
    }
    pub(crate) fn same_dims_check(&mut self, fb: &mut FnBuilder, a: &[Op], b: &[Op], what: &str, site: SiteId) {
        self.check_same_dims(fb, a, b, what, site)
    }
    pub(crate) fn int_arith(&mut self, fb: &mut FnBuilder, op: IOp, a: Op, b: Op, site: SiteId) -> Op {
        self.int_op(fb, op, a, b, site)
    }
}

pub(crate) fn bin(fb: &mut FnBuilder, op: BinOp, a: Op, b: Op) -> Op {
    float_bin(fb, op, a, b)
}

/// `0 <= i < d` for every index component `i` and size `d`.
pub(crate) fn in_range(fb: &mut FnBuilder, idx: &[Op], dims: &[Op]) -> Op {
    let conds: Vec<Op> = idx
        .iter()
        .zip(dims)
        .map(|(i, d)| {
            let lo = bin(fb, BinOp::IGe, i.clone(), Op::Int(0));
            let hi = bin(fb, BinOp::ILt, i.clone(), d.clone());
            bin(fb, BinOp::And, lo, hi)
        })
        .collect();
    all_of(fb, conds)
}

/// The conjunction of conditions (`true` for none).
pub(crate) fn all_of(fb: &mut FnBuilder, conds: Vec<Op>) -> Op {
    conds.into_iter().fold(Op::Bool(true), |ok, c| bin(fb, BinOp::And, ok, c))
}

/// The row-major position of index `idx` in a tensor of sizes `dims`.
pub(crate) fn flat_index(fb: &mut FnBuilder, idx: &[Op], dims: &[Op]) -> Op {
    let mut flat = idx[0].clone();
    for (i, d) in idx.iter().zip(dims).skip(1) {
        let m = bin(fb, BinOp::IMulNoCheck, flat, d.clone());
        flat = bin(fb, BinOp::IAddNoCheck, m, i.clone());
    }
    flat
}

impl Nest {
    pub(crate) fn idx(&self) -> &[Op] {
        &self.idx
    }
    pub(crate) fn flat(&self) -> Op {
        self.flat.clone()
    }
}

impl Delayed {
    pub(crate) fn lam(dims: Vec<Op>, binder: String, body: ExprId, ctx: Ctx) -> Delayed {
        Delayed { dims, elem: DelayedElem::Lam { binder, body, ctx } }
    }
    pub(crate) fn constant(dims: Vec<Op>, v: LVal) -> Delayed {
        Delayed { dims, elem: DelayedElem::Const(v) }
    }
}

impl Delayed {
    /// The binder, element expression and context of a delayed `build`.
    pub(crate) fn lam_parts(&self) -> Option<(&str, ExprId, &Ctx)> {
        match &self.elem {
            DelayedElem::Lam { binder, body, ctx } => Some((binder, *body, ctx)),
            DelayedElem::Const(_) => None,
        }
    }
}

impl Ctx {
    pub(crate) fn with_binding(&self, name: &str, v: LVal) -> Ctx {
        Ctx { env: self.env.bind(name, v), ..self.clone() }
    }
    pub(crate) fn with_bound(&self, name: &str, b: Bound) -> Ctx {
        Ctx { env: self.env.bind_as(name, b), ..self.clone() }
    }
    pub(crate) fn bound(&self, name: &str) -> Option<Bound> {
        self.env.get(name).cloned()
    }
}

/// Does the expression at `e` loop? Every loop of Core IR takes a lambda
/// (`build`, `sumbuild`, `fold`, the scans, `map`, ...), except `sum`.
/// Calls are not looked into.
fn has_loop(body: &ksc_ir::Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Lam(..) | Expr::Call(Callee::Prim(Prim::Sum), _) => return true,
            other => stack.extend(ksc_ir::core::children(other)),
        }
    }
    false
}
