//! Term utilities over Core IR bodies: children and rebuilding, free
//! variables and effects (cached per node), alpha-equivalence,
//! capture-avoiding substitution, copying trees within and between bodies,
//! fresh-name floors and known zeros.
//!
//! Nodes of a body are never mutated: a rewrite allocates new parents
//! (copy-on-write), so the subtree under an `ExprId` never changes and
//! per-node facts can be cached by id for as long as the body lives.
//!
//! Every walk here is iterative (an explicit stack), so bodies nested
//! thousands deep cannot overflow the native stack.

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::builder::Builder;
use crate::idset::IdSet;
use crate::{Body, Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type, Var};

pub use crate::core::{children, is_atomic};

/// The same node with its children replaced (same order as [`children`]).
pub fn with_children(e: &Expr, new: &[ExprId]) -> Expr {
    match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => e.clone(),
        Expr::Call(c, _) => Expr::Call(c.clone(), new[0]),
        Expr::Tuple(_) => Expr::Tuple(new.to_vec()),
        Expr::Let(p, _, _) => Expr::Let(p.clone(), new[0], new[1]),
        Expr::If(..) => Expr::If(new[0], new[1], new[2]),
        Expr::Assert(_, _, from) => Expr::Assert(new[0], new[1], from.clone()),
        Expr::Lam(v, t, _) => Expr::Lam(v.clone(), t.clone(), new[0]),
    }
}

/// The variables a node binds for one of its children (by child index in
/// [`children`] order): a let's pattern for its body, a lambda's parameter.
pub fn binds_for_child(e: &Expr, child: usize) -> &[Var] {
    match e {
        Expr::Let(p, _, _) if child == 1 => p.vars(),
        Expr::Lam(v, _, _) => std::slice::from_ref(v),
        _ => &[],
    }
}

/// The components of a call's argument as written: a literal tuple's
/// components (`true`), or the argument itself (`false`).
pub fn call_components(body: &Body, arg: ExprId) -> (Vec<ExprId>, bool) {
    match &body.exprs[arg] {
        Expr::Tuple(es) => (es.clone(), true),
        _ => (vec![arg], false),
    }
}

/// Allocates a call like `call` (same callee and type) with new argument
/// components; `tupled` says whether they form a literal tuple.
pub fn rebuild_call(b: &mut Builder, call: ExprId, comps: Vec<ExprId>, tupled: bool) -> ExprId {
    let Expr::Call(callee, _) = b.expr(call).clone() else { panic!("rebuild_call of a non-call") };
    let arg = if tupled { b.tuple(comps) } else { comps[0] };
    let ty = b.ty(call);
    b.body.alloc_typed(Expr::Call(callee, arg), ty)
}

/// The lets of the chain at `e` (pattern, right side) and its result
/// ([`crate::core::let_chain`]), the patterns owned for rebuilding.
pub fn let_chain(body: &Body, e: ExprId) -> (Vec<(Pat, ExprId)>, ExprId) {
    let (binds, result) = crate::core::let_chain(body, e);
    (binds.into_iter().map(|(p, r)| (p.clone(), r)).collect(), result)
}

/// `let p1 = r1 in .. let pn = rn in result`.
pub fn wrap(b: &mut Builder, lets: Vec<(Pat, ExprId)>, result: ExprId) -> ExprId {
    lets.into_iter().rev().fold(result, |acc, (p, r)| {
        let ty = b.ty(acc);
        b.body.alloc_typed(Expr::Let(p, r, acc), ty)
    })
}

/// Per-node facts of one body, computed once per node on demand.
///
/// Free variables are kept as persistent sets of interned names
/// ([`IdSet`]): a node's set shares all but a path or two with its
/// children's, so a chain of n bindings that read n variables costs
/// O(n log n) memory, where a full sorted vector per node was O(n^2) (a
/// 400-deep nested expression took gigabytes to differentiate).
#[derive(Default)]
pub struct Cache {
    /// Interned variable names: `ids[names[i]] == i`.
    ids: FxHashMap<Var, u32>,
    names: Vec<Var>,
    /// The free variables of each node asked about, by arena index.
    free: Vec<Option<Vars>>,
    effect: FxHashMap<ExprId, bool>,
}

/// What the cache knows of a node's free variables: which occur, and which
/// of those occur more than once or under a lambda (what inlining a `let`
/// asks, [`occurrences`]: a lookup, where counting walked the body down to
/// each use, quadratic on deep terms).
#[derive(Clone)]
struct Vars {
    free: IdSet,
    many: IdSet,
}

fn index(e: ExprId) -> usize {
    u32::from(e.into_raw()) as usize
}

impl Cache {
    pub fn new() -> Cache {
        Cache::default()
    }

    fn intern(&mut self, v: &Var) -> u32 {
        if let Some(&i) = self.ids.get(v) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(v.clone(), i);
        self.names.push(v.clone());
        i
    }

    fn known(&self, e: ExprId) -> Option<&Vars> {
        self.free.get(index(e)).and_then(Option::as_ref)
    }

    /// The free variables of `e` as a set of interned names (see
    /// [`Cache::name`]).
    pub fn free_set(&mut self, body: &Body, e: ExprId) -> IdSet {
        self.vars(body, e).free
    }

    fn vars(&mut self, body: &Body, e: ExprId) -> Vars {
        if let Some(f) = self.known(e) {
            return f.clone();
        }
        let mut stack = vec![(e, false)];
        while let Some((x, expanded)) = stack.pop() {
            if self.known(x).is_some() {
                continue;
            }
            let node = &body.exprs[x];
            if !expanded {
                stack.push((x, true));
                stack.extend(children(node).into_iter().filter(|c| self.known(*c).is_none()).map(|c| (c, false)));
                continue;
            }
            let fv = match node {
                Expr::Var(v) => Vars { free: IdSet::singleton(self.intern(v)), many: IdSet::new() },
                Expr::Lit(_) | Expr::Dummy(_) => Vars { free: IdSet::new(), many: IdSet::new() },
                _ => {
                    let (mut free, mut many) = (IdSet::new(), IdSet::new());
                    for (i, c) in children(node).into_iter().enumerate() {
                        let Vars { free: mut f, many: mut m } = self.known(c).expect("children first").clone();
                        for v in binds_for_child(node, i) {
                            if let Some(&id) = self.ids.get(v) {
                                f = f.without(id);
                                m = m.without(id);
                            }
                        }
                        // Occurring in two children is occurring twice.
                        many = many.union(&m).union(&free.intersection(&f));
                        free = free.union(&f);
                    }
                    if matches!(node, Expr::Lam(..)) {
                        // Under a lambda, once is once per call.
                        many = free.clone();
                    }
                    Vars { free, many }
                }
            };
            let i = index(x);
            if self.free.len() <= i {
                self.free.resize(i + 1, None);
            }
            self.free[i] = Some(fv);
        }
        self.known(e).expect("computed").clone()
    }

    /// How often `x` occurs free in `e` (see [`occurrences`]).
    fn occurrences_of(&mut self, body: &Body, x: &str, e: ExprId) -> Occurrences {
        let vars = self.vars(body, e);
        match self.ids.get(x) {
            Some(&id) if vars.many.contains(id) => Occurrences::Many,
            Some(&id) if vars.free.contains(id) => Occurrences::Once,
            _ => Occurrences::Zero,
        }
    }

    /// Keeps the facts of the nodes that survive a compaction of the arena
    /// (`map[old index]` is the node's new id), dropping the others.
    pub fn remap(&mut self, map: &[Option<ExprId>]) {
        let mut free: Vec<Option<Vars>> = Vec::new();
        for (old, set) in std::mem::take(&mut self.free).into_iter().enumerate() {
            if let (Some(set), Some(Some(new))) = (set, map.get(old)) {
                let i = index(*new);
                if free.len() <= i {
                    free.resize(i + 1, None);
                }
                free[i] = Some(set);
            }
        }
        self.free = free;
        self.effect = std::mem::take(&mut self.effect)
            .into_iter()
            .filter_map(|(e, f)| map.get(index(e)).copied().flatten().map(|n| (n, f)))
            .collect();
    }

    /// The name of an interned variable of [`Cache::free_set`].
    pub fn name(&self, id: u32) -> &Var {
        &self.names[id as usize]
    }

    /// The interned number of a variable, if the cache has seen it.
    pub fn id(&self, v: &str) -> Option<u32> {
        self.ids.get(v).copied()
    }

    /// The free variables of `e`, sorted.
    pub fn free_vars(&mut self, body: &Body, e: ExprId) -> Rc<[Var]> {
        let set = self.free_set(body, e);
        let mut vars: Vec<Var> = set.to_vec().into_iter().map(|i| self.names[i as usize].clone()).collect();
        vars.sort();
        Rc::from(vars)
    }

    /// Does `x` occur free in `e`?
    pub fn is_free(&mut self, body: &Body, x: &str, e: ExprId) -> bool {
        let set = self.free_set(body, e);
        self.ids.get(x).is_some_and(|&i| set.contains(i))
    }

    /// May evaluating `e` have an effect besides its value (`print`,
    /// `$trace`, or a call of a function that may do either, as `calls`
    /// says)? The answers are cached per node, so one cache must always be
    /// asked with the same `calls`.
    pub fn has_effect<C: CallEffects + ?Sized>(&mut self, body: &Body, calls: &C, e: ExprId) -> bool {
        if let Some(&f) = self.effect.get(&e) {
            return f;
        }
        let mut stack = vec![(e, false)];
        while let Some((x, expanded)) = stack.pop() {
            if self.effect.contains_key(&x) {
                continue;
            }
            let node = &body.exprs[x];
            if !expanded {
                stack.push((x, true));
                stack.extend(children(node).into_iter().filter(|c| !self.effect.contains_key(c)).map(|c| (c, false)));
                continue;
            }
            let own = match node {
                Expr::Call(Callee::Prim(p), _) => p.has_effect(),
                Expr::Call(Callee::Fun(f), _) => calls.may_have_effect(f),
                _ => false,
            };
            let eff = own || children(node).iter().any(|c| self.effect[c]);
            self.effect.insert(x, eff);
        }
        self.effect[&e]
    }
}

/// Whether calling a global function may have an effect, as
/// [`Cache::has_effect`] asks it (the optimiser answers from the program's
/// definitions, through the functions each one calls).
pub trait CallEffects {
    /// May calling `name` have an effect (`print`, `$trace`), directly or
    /// through the functions it calls?
    fn may_have_effect(&self, name: &FunName) -> bool;
}

/// How often a variable occurs in an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occurrences {
    Zero,
    /// Exactly once, and not inside a lambda (so evaluated at most once).
    Once,
    /// More than once, or inside a lambda.
    Many,
}

/// How often `x` occurs free in `e`: an occurrence under a lambda counts
/// as many (it runs once per call). Cached per node with the free
/// variables, so asking is a lookup.
pub fn occurrences(cache: &mut Cache, body: &Body, x: &str, e: ExprId) -> Occurrences {
    cache.occurrences_of(body, x, e)
}

/// Does `x` occur free in `e` as the single argument of a primitive that
/// splats a literal tuple argument (`(print x)`, `(Vec_init x)`)? Putting a
/// literal tuple there would change the call's meaning.
pub fn splatted(cache: &mut Cache, body: &Body, x: &str, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(n) = stack.pop() {
        if !cache.is_free(body, x, n) {
            continue;
        }
        let node = &body.exprs[n];
        if let Expr::Call(Callee::Prim(p), a) = node {
            if p.splats_arguments() && matches!(&body.exprs[*a], Expr::Var(v) if v == x) {
                return true;
            }
        }
        for (i, c) in children(node).into_iter().enumerate() {
            if !binds_for_child(node, i).iter().any(|v| v == x) {
                stack.push(c);
            }
        }
    }
    false
}

/// Alpha-equivalence of the trees at `a` (in `ba`) and `b` (in `bb`): equal
/// up to the names of variables bound inside them; free variables must have
/// the same names. Literals compare by bits, lambda parameters by type.
pub fn alpha_eq(ba: &Body, a: ExprId, bb: &Body, b: ExprId) -> bool {
    enum Task {
        Cmp(ExprId, ExprId),
        Push(Vec<(Var, Var)>),
        Pop(usize),
    }
    let mut env: Vec<(Var, Var)> = Vec::new();
    let mut tasks = vec![Task::Cmp(a, b)];
    while let Some(t) = tasks.pop() {
        let (x, y) = match t {
            Task::Cmp(x, y) => (x, y),
            Task::Push(pairs) => {
                env.extend(pairs);
                continue;
            }
            Task::Pop(n) => {
                env.truncate(env.len() - n);
                continue;
            }
        };
        let ok = match (&ba.exprs[x], &bb.exprs[y]) {
            (Expr::Lit(l), Expr::Lit(m)) => l == m,
            (Expr::Dummy(s), Expr::Dummy(t)) => s == t,
            (Expr::Var(v), Expr::Var(w)) => {
                let i = env.iter().rposition(|(p, _)| p == v);
                let j = env.iter().rposition(|(_, q)| q == w);
                match (i, j) {
                    (None, None) => v == w,
                    (Some(i), Some(j)) => i == j,
                    _ => false,
                }
            }
            (Expr::Call(f, p), Expr::Call(g, q)) => {
                tasks.push(Task::Cmp(*p, *q));
                f == g
            }
            (Expr::Tuple(xs), Expr::Tuple(ys)) => {
                tasks.extend(xs.iter().zip(ys).rev().map(|(p, q)| Task::Cmp(*p, *q)));
                xs.len() == ys.len()
            }
            (Expr::Let(p, r, s), Expr::Let(q, t, u)) => {
                let same_shape = matches!((p, q), (Pat::Var(_), Pat::Var(_)))
                    || matches!((p, q), (Pat::Tuple(a), Pat::Tuple(b)) if a.len() == b.len());
                let pairs: Vec<(Var, Var)> = p.vars().iter().cloned().zip(q.vars().iter().cloned()).collect();
                let n = pairs.len();
                tasks.extend([Task::Pop(n), Task::Cmp(*s, *u), Task::Push(pairs), Task::Cmp(*r, *t)]);
                same_shape
            }
            (Expr::If(c, t, f), Expr::If(d, u, g)) => {
                tasks.extend([Task::Cmp(*f, *g), Task::Cmp(*t, *u), Task::Cmp(*c, *d)]);
                true
            }
            (Expr::Assert(c, e, _), Expr::Assert(d, f, _)) => {
                tasks.extend([Task::Cmp(*e, *f), Task::Cmp(*c, *d)]);
                true
            }
            (Expr::Lam(v, s, e), Expr::Lam(w, t, f)) => {
                tasks.extend([Task::Pop(1), Task::Cmp(*e, *f), Task::Push(vec![(v.clone(), w.clone())])]);
                s == t
            }
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Copies the tree at `e` of `src` (or of the destination body itself when
/// `src` is None) into `dst`, with its types; returns the copy's root.
pub fn copy_tree(dst: &mut Body, src: Option<&Body>, e: ExprId) -> ExprId {
    copy_tree_stamping(dst, src, e, None)
}

/// [`copy_tree`] of the body of the function `fun` (`src`), an inlined
/// call: each `assert` copied keeps where it was written
/// ([`crate::core::stamp`]), so its failure is located there.
pub fn copy_inlined(dst: &mut Body, src: &Body, fun: &FunName, e: ExprId) -> ExprId {
    copy_tree_stamping(dst, Some(src), e, Some(fun))
}

fn copy_tree_stamping(dst: &mut Body, src: Option<&Body>, e: ExprId, fun: Option<&FunName>) -> ExprId {
    let mut results: Vec<ExprId> = Vec::new();
    let mut stack = vec![(e, false)];
    while let Some((x, expanded)) = stack.pop() {
        let (node, ty) = {
            let from = src.unwrap_or(dst);
            (from.exprs[x].clone(), from.ty(x).clone())
        };
        let kids = children(&node);
        if !expanded && !kids.is_empty() {
            stack.push((x, true));
            stack.extend(kids.iter().rev().map(|&c| (c, false)));
            continue;
        }
        let new_kids = results.split_off(results.len() - kids.len());
        let mut new = with_children(&node, &new_kids);
        if let (Some(f), Expr::Assert(_, _, from)) = (fun, &mut new) {
            *from = crate::core::stamp(from, f, x);
        }
        let copy = dst.alloc_typed(new, ty);
        results.push(copy);
    }
    results.pop().expect("copy of a tree")
}

/// The number of nodes of the tree at `e`, counted up to `limit + 1` (so
/// it stops early on a large tree).
pub fn tree_size_at_most(body: &Body, e: ExprId, limit: usize) -> usize {
    let mut n = 0;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        n += 1;
        if n > limit {
            break;
        }
        stack.extend(children(&body.exprs[x]));
    }
    n
}

/// The global functions `def`'s body calls, each once, in the order met.
pub fn callees(def: &crate::Def) -> Vec<FunName> {
    let mut out: Vec<FunName> = Vec::new();
    let mut seen: rustc_hash::FxHashSet<&FunName> = rustc_hash::FxHashSet::default();
    let mut stack = vec![def.root];
    while let Some(e) = stack.pop() {
        let node = &def.body.exprs[e];
        if let Expr::Call(Callee::Fun(f), _) = node {
            if seen.insert(f) {
                out.push(f.clone());
            }
        }
        stack.extend(children(node));
    }
    out
}

/// The variable `e` is, if it is one.
pub fn var_name(body: &Body, e: ExprId) -> Option<&Var> {
    match &body.exprs[e] {
        Expr::Var(v) => Some(v),
        _ => None,
    }
}

/// Are two loop sizes the same variable or literal?
pub fn same_size(body: &Body, a: ExprId, b: ExprId) -> bool {
    match (&body.exprs[a], &body.exprs[b]) {
        (Expr::Var(u), Expr::Var(v)) => u == v,
        (Expr::Lit(l), Expr::Lit(m)) => l == m,
        _ => false,
    }
}

/// A fresh copy of the tree at `e` in the builder's body.
pub fn deep_copy(b: &mut Builder, e: ExprId) -> ExprId {
    copy_tree(b.body, None, e)
}

/// Compacts `body` in place to the nodes reachable from `roots`, keeping
/// their order (a node's new id is the number of surviving nodes before
/// it), so comparisons of ids keep their answers. Returns, for every old
/// index, the node's new id (None: dropped). Every id into the body held
/// elsewhere must be renamed with it.
pub fn compact_in_place(body: &mut Body, roots: impl IntoIterator<Item = ExprId>) -> Vec<Option<ExprId>> {
    let n = body.exprs.len();
    let mut live = vec![false; n];
    let mut stack: Vec<ExprId> = roots.into_iter().collect();
    while let Some(x) = stack.pop() {
        let i = u32::from(x.into_raw()) as usize;
        if !live[i] {
            live[i] = true;
            stack.extend(children(&body.exprs[x]));
        }
    }
    let old = std::mem::take(body);
    let ids: Vec<ExprId> = old.exprs.iter().map(|(id, _)| id).collect();
    // New ids are allocated in order: the k-th surviving node is the k-th
    // node of the new arena.
    let mut map: Vec<Option<ExprId>> = vec![None; n];
    let mut next = 0u32;
    for (slot, &alive) in map.iter_mut().zip(&live) {
        if alive {
            *slot = Some(ExprId::from_raw(next.into()));
            next += 1;
        }
    }
    let rename = |e: ExprId| map[u32::from(e.into_raw()) as usize].expect("a child of a live node is live");
    for (i, &id) in ids.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let node = &old.exprs[id];
        let kids: Vec<ExprId> = children(node).into_iter().map(rename).collect();
        let copy = with_children(node, &kids);
        let new = match old.types.get(id) {
            Some(t) => body.alloc_typed(copy, t.clone()),
            None => body.alloc(copy),
        };
        debug_assert_eq!(Some(new), map[i]);
    }
    map
}

/// Copies the reachable tree at `root` into a fresh body (dropping the
/// garbage that copy-on-write rewriting leaves in the arena).
pub fn compact(body: &Body, root: ExprId) -> (Body, ExprId) {
    let mut out = Body::new();
    let r = copy_tree(&mut out, Some(body), root);
    (out, r)
}

/// Every name a tree mentions (variables and binders), in no order.
pub fn names_in(body: &Body, root: ExprId) -> Vec<&Var> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(x) = stack.pop() {
        let node = &body.exprs[x];
        match node {
            Expr::Var(v) | Expr::Lam(v, _, _) => out.push(v),
            Expr::Let(p, _, _) => out.extend(p.vars()),
            _ => {}
        }
        stack.extend(children(node));
    }
    out
}

/// The smallest counter value from which the builder's fresh names
/// (`ksc$<hint><n>`) cannot clash with a `ksc$` name of the tree at `root`
/// or of `extra` (such as parameters).
pub fn fresh_floor<'a>(body: &'a Body, root: ExprId, extra: impl IntoIterator<Item = &'a Var>) -> u32 {
    names_in(body, root)
        .into_iter()
        .chain(extra)
        .filter_map(|n| {
            let rest = n.strip_prefix("ksc$")?;
            let digits = rest.len() - rest.bytes().rev().take_while(u8::is_ascii_digit).count();
            let tail = &rest[digits..];
            if tail.is_empty() {
                return None;
            }
            Some(tail.parse::<u32>().unwrap_or(u32::MAX / 2))
        })
        .max()
        .unwrap_or(0)
}

/// Makes sure the builder's fresh names cannot clash with any `ksc$` name
/// already in the tree at `root`.
pub fn bump_fresh(b: &mut Builder, root: ExprId) {
    let floor = fresh_floor(b.body, root, std::iter::empty());
    if *b.fresh < floor {
        *b.fresh = floor;
    }
}

/// A call of `def` written in: a copy of its body in `b`'s arena (its
/// `assert`s stamped with where they were written, fresh names raised past
/// the copy's) and the pattern its parameters bind (None: it has none),
/// for `let pattern = argument in body`.
pub fn inlined_body(b: &mut Builder, def: &crate::Def) -> (Option<Pat>, ExprId) {
    let body = copy_inlined(b.body, &def.body, &def.name, def.root);
    bump_fresh(b, body);
    let pat = match &def.params[..] {
        [] => None,
        [p] => Some(Pat::Var(p.name.clone())),
        ps => Some(Pat::Tuple(ps.iter().map(|p| p.name.clone()).collect())),
    };
    (pat, body)
}

/// Is `e` a known zero: `0.0`, `0`, `()`, a tuple of zeros, `constVec n z`
/// of a zero (the original's `isKZero`), or `build n (lam i z)` of one?
pub fn is_zero(body: &Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Lit(Lit::Float(f)) if *f == 0.0 => {}
            Expr::Lit(Lit::Integer(0)) => {}
            Expr::Tuple(es) => stack.extend(es),
            Expr::Call(Callee::Prim(Prim::ConstVec), arg) => match &body.exprs[*arg] {
                Expr::Tuple(es) if es.len() == 2 => stack.push(es[1]),
                _ => return false,
            },
            // A build of zeros (whose sizes may vary with the index).
            Expr::Call(Callee::Prim(Prim::Build), arg) => match &body.exprs[*arg] {
                Expr::Tuple(es) if es.len() == 2 => match &body.exprs[es[1]] {
                    Expr::Lam(_, _, z) => stack.push(*z),
                    _ => return false,
                },
                _ => return false,
            },
            _ => return false,
        }
    }
    true
}

/// Are all the scalars of values of this type Floats or Integers (so that
/// adding a zero made by `zero_like` is the identity)?
pub fn numeric_leaves(t: &Type) -> bool {
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        match t {
            Type::Float | Type::Integer => {}
            Type::Tuple(ts) => stack.extend(ts),
            Type::Tensor(_, e) => stack.push(e),
            _ => return false,
        }
    }
    true
}

/// Capture-avoiding simultaneous substitution of `map` (variable ↦
/// expression) in the tree at `e`.
///
/// Binders of the tree that rebind a substituted variable stop its
/// substitution below them; binders that would capture a free variable of a
/// replacement are renamed to fresh `ksc$` names. Only the paths to
/// occurrences are copied (copy-on-write); untouched subtrees keep their ids.
///
/// With `move_first`, the first occurrence of each variable takes the
/// replacement node itself instead of a copy: use it when the replacement's
/// old position is being discarded.
pub fn substitute(b: &mut Builder, cache: &mut Cache, e: ExprId, map: &[(Var, ExprId)], move_first: bool) -> ExprId {
    if map.is_empty() {
        return e;
    }
    // Names a binder must not take inside the scope of a substitution.
    let mut capture = IdSet::new();
    for (_, r) in map {
        capture = capture.union(&cache.free_set(b.body, *r));
    }
    // The innermost entry for a name decides: Some(r) substitutes, None
    // means the name is bound here (shadowed, or renamed below).
    let mut env: Vec<(Var, Option<ExprId>)> = map.iter().map(|(v, r)| (v.clone(), Some(*r))).collect();
    let mut moved: Vec<ExprId> = Vec::new();

    enum Task {
        Visit(ExprId),
        /// Rebuild the node from its children's results; the binder names
        /// it gets (for a let or lambda), and how many env entries to pop.
        Build(ExprId, Option<Vec<Var>>, usize),
        Push(Vec<(Var, Option<ExprId>)>),
    }
    let mut results: Vec<ExprId> = Vec::new();
    let mut tasks = vec![Task::Visit(e)];
    while let Some(t) = tasks.pop() {
        match t {
            Task::Push(entries) => env.extend(entries),
            Task::Visit(x) => {
                // Is a name free here whose innermost entry substitutes?
                let free = cache.free_set(b.body, x);
                let active = env.iter().enumerate().rev().any(|(i, (n, r))| {
                    r.is_some()
                        && !env[i + 1..].iter().any(|(m, _)| m == n)
                        && cache.id(n).is_some_and(|id| free.contains(id))
                });
                if !active {
                    results.push(x);
                    continue;
                }
                let node = b.expr(x).clone();
                match &node {
                    Expr::Var(v) => {
                        let Some((_, Some(r))) = env.iter().rev().find(|(n, _)| n == v).cloned() else {
                            unreachable!("an active variable has a replacement")
                        };
                        let out = if !b.body.types.contains_idx(r) {
                            // A renaming: the occurrence keeps its type.
                            let ty = b.ty(x);
                            let Expr::Var(name) = b.expr(r).clone() else { unreachable!("rename marker") };
                            b.body.alloc_typed(Expr::Var(name), ty)
                        } else if move_first && !moved.contains(&r) {
                            moved.push(r);
                            r
                        } else {
                            deep_copy(b, r)
                        };
                        results.push(out);
                    }
                    Expr::Let(p, r, body) => {
                        let (names, entries) = binder_entries(b, cache, p.vars(), &capture, &env);
                        let n = entries.len();
                        tasks.push(Task::Build(x, Some(names), n));
                        tasks.push(Task::Visit(*body));
                        tasks.push(Task::Push(entries));
                        tasks.push(Task::Visit(*r));
                    }
                    Expr::Lam(v, _, body) => {
                        let (names, entries) = binder_entries(b, cache, std::slice::from_ref(v), &capture, &env);
                        let n = entries.len();
                        tasks.push(Task::Build(x, Some(names), n));
                        tasks.push(Task::Visit(*body));
                        tasks.push(Task::Push(entries));
                    }
                    _ => {
                        tasks.push(Task::Build(x, None, 0));
                        tasks.extend(children(&node).into_iter().rev().map(Task::Visit));
                    }
                }
            }
            Task::Build(x, names, pop) => {
                env.truncate(env.len() - pop);
                let node = b.expr(x).clone();
                let k = children(&node).len();
                let kids = results.split_off(results.len() - k);
                let mut new = with_children(&node, &kids);
                if let Some(names) = names {
                    new = match new {
                        Expr::Let(Pat::Var(_), r, s) => Expr::Let(Pat::Var(names[0].clone()), r, s),
                        Expr::Let(Pat::Tuple(_), r, s) => Expr::Let(Pat::Tuple(names), r, s),
                        Expr::Lam(_, t, s) => Expr::Lam(names[0].clone(), t, s),
                        other => other,
                    };
                }
                let ty = b.ty(x);
                results.push(b.body.alloc_typed(new, ty));
            }
        }
    }
    results.pop().expect("substitution result")
}

/// The names binders get under a substitution, and the env entries for
/// their scope: a binder that would capture a replacement's free variable
/// is renamed (its occurrences then map to the new name), any other binder
/// shadows. A shadowing entry is made only for a name `env` has an entry
/// for (it changes nothing for other names), so the env of a substitution
/// down a long `let` chain stays short.
fn binder_entries(
    b: &mut Builder,
    cache: &Cache,
    vars: &[Var],
    capture: &IdSet,
    env: &[(Var, Option<ExprId>)],
) -> (Vec<Var>, Vec<(Var, Option<ExprId>)>) {
    let mut names = Vec::new();
    let mut entries = Vec::new();
    for v in vars {
        if cache.id(v).is_some_and(|id| capture.contains(id)) {
            let fresh = b.fresh_name(&hint_of(v));
            entries.push((v.clone(), Some(rename_marker(b, &fresh))));
            names.push(fresh);
        } else {
            if env.iter().any(|(n, _)| n == v) || entries.iter().any(|(n, _)| n == v) {
                entries.push((v.clone(), None));
            }
            names.push(v.clone());
        }
    }
    (names, entries)
}

/// A hint for a fresh name derived from a user's name: its letters only, so
/// the `ksc$<hint><n>` form stays unambiguous.
pub fn hint_of(v: &str) -> String {
    let base = v.strip_prefix("ksc$").unwrap_or(v);
    let h: String = base.chars().filter(|c| c.is_ascii_alphabetic()).take(12).collect();
    if h.is_empty() {
        "v".to_string()
    } else {
        h
    }
}

/// Renames the variables `from[i]` to `to[i]` (free occurrences in `e`),
/// capture-avoiding. The new variable nodes get the types of the
/// occurrences they replace.
pub fn rename(b: &mut Builder, cache: &mut Cache, e: ExprId, renames: &[(Var, Var)]) -> ExprId {
    if renames.is_empty() {
        return e;
    }
    let map: Vec<(Var, ExprId)> = renames.iter().map(|(from, to)| (from.clone(), rename_marker(b, to))).collect();
    substitute(b, cache, e, &map, false)
}

/// An untyped variable node: as a replacement in [`substitute`] it stands
/// for a renaming, and each occurrence becomes a variable of that name with
/// the occurrence's own type.
fn rename_marker(b: &mut Builder, to: &str) -> ExprId {
    b.body.alloc(Expr::Var(to.to_string()))
}

/// Marks the call at `e` with `$inline` (the optimiser's `inline-marked`
/// rule then inlines it): `e` becomes `$inline (call)`, the call moved to a
/// new node, which is returned.
pub fn mark_inline(body: &mut Body, e: ExprId) -> ExprId {
    let ty = body.ty(e).clone();
    let call = body.alloc_typed(body.exprs[e].clone(), ty);
    body.exprs[e] = Expr::Call(Callee::Prim(Prim::Inline), call);
    call
}

/// Walks the nodes of `e` in the scope of the free `x` (a binder of `x`
/// hides its body): `visit` returns the children to go on with, or None
/// for all of them.
pub fn walk_free(body: &Body, x: &str, e: ExprId, visit: &mut dyn FnMut(ExprId, &Expr) -> Option<Vec<ExprId>>) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        let node = &body.exprs[e];
        if let Some(next) = visit(e, node) {
            stack.extend(next);
            continue;
        }
        match node {
            Expr::Let(p, r, b) => {
                stack.push(*r);
                if !p.vars().iter().any(|v| v == x) {
                    stack.push(*b);
                }
            }
            Expr::Lam(v, _, b) => {
                if v != x {
                    stack.push(*b);
                }
            }
            other => stack.extend(children(other)),
        }
    }
}
