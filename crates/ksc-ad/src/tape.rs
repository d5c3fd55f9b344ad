//! Split reverse mode with a tape (linear-maps-and-ad.md 5): the forward
//! pass records, for every call of f, its result and where the records of
//! its recursive calls are, so that the reverse pass never recomputes the
//! primal of a recursive call (which makes reverse mode of recursion
//! quadratic).
//!
//! For `f : S -> T`, `Tape = Vec (Tuple T (Vec Integer))` (`Type::tape`):
//!
//! - `[suffwdtape f] (x, tape) : (T, Tape)` is f's primal (the primal part
//!   of `[D f]`) with every recursive call `f a` at site k (the k-th call
//!   of f in `[D f]`) replaced by `[suffwdtape f] (a, tape)`, the tape
//!   threaded through; the position of that call's record is kept in slot k
//!   (-1 where it did not run). At the end the record `(value, positions
//!   by slot)` is appended with `$tapePush`: records are in post-order, one
//!   per call, and the tape is threaded linearly, so each push is in place.
//! - A `build`, `sumbuild` or `fold` whose lambda calls f (or holds such
//!   a loop, at any depth, but no other lambda around the calls) threads
//!   the tape (a `build` or `sumbuild` runs as a fold over its indices,
//!   collecting the elements), and collects, per call in the lambda, the
//!   positions of its records by iteration (for a call in an inner loop,
//!   of that loop's index record in the iteration). After the loop an
//!   index record per call, `($dummy, positions)`, is pushed, and the
//!   call's slot holds its position. `[D f]` copies the loop's body into
//!   the loop of its maps (`derive.rs`), calls and inner loops included
//!   and in the same order (an inner loop as its copy and its loop of
//!   maps); a fold's `lmFold` holds a copy of its step and the step's
//!   Jacobian, which is like the body of a loop of maps. A call there has
//!   the slot of its counterpart in the loop of values and reads the index
//!   records at the iterations of the loops it is in ([`Iter`]): a
//!   `build`'s variable, or, for a fold, a counter that reverse mode's
//!   copies of the step bind ([`counted`]: the stored accumulators, the
//!   backward loop, a recomputed fold of values).
//! - `[suffwdpass f] x = (y, (x, tape, position))` runs it from an empty
//!   tape; the residuals (`Type::residuals`) are the argument, the tape and
//!   the position of this call's record.
//! - `[sufrevpass [f S]] (dr, (x, tape, p))` is `[rev f]`'s transposed
//!   program, with the result of the call at a site read from its record
//!   (found through `kids`, from record p) and its reverse pass
//!   `[sufrevpass f] (r, (a, tape, position))`. The primal bindings of f's
//!   own level are recomputed (a constant per level), never a callee's
//!   recursion.
//! - `[rev f] (x, dr) = [sufrevpass f] (dr, residuals of [suffwdpass f] x)`
//!   for a recursive f.
//!
//! Before `[D f]` is derived, [`prepare`] writes a `map` or `map2` whose
//! function calls f as the `build` it equals, and gives the `let`s around
//! calls of f fresh names (the forward pass hoists them), and writes a
//! `build` or `sumbuild` over a tuple of sizes whose lambda calls f as
//! nested loops over vectors. A `$scan` is taped as a fold is, its forward
//! pass collecting the accumulators. Recursive calls inside other lambdas
//! are not taped: such a function keeps the checkpointing passes
//! ([`checkpoint_passes`]).

use std::rc::Rc;

use rustc_hash::FxHashMap;

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::term::{let_chain, same_size, wrap};
use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};

use crate::apply::{bind_params, checked_def, internal, is_lm, param_name, strip_expr, strip_type};
use crate::derive::{Witnesses, R};

/// Where the record of a recursive call (or of the call a Jacobian call
/// differentiates) is found: `kids[slot]` of the caller's record; for a
/// call inside loops' lambdas, that is the position of the outermost loop's
/// index record for the call, and each loop's iteration in `loops`
/// (outermost first) selects, in turn, an element of the index record's
/// `kids`: the position of the next loop's index record, or, last, the
/// call's record.
#[derive(Clone, Debug)]
pub struct Site {
    pub slot: usize,
    pub loops: Vec<Iter>,
}

/// What selects a loop's iteration for a call inside it.
#[derive(Clone, Debug, PartialEq)]
pub enum Iter {
    /// The variable of a `build` or `sumbuild`.
    Var(String),
    /// The iteration of the `fold` or `lmFold` at this expression: a
    /// counter that the code reading the records binds ([`counted`]).
    Fold(ExprId),
}

/// The recursive calls of f in `[D f]`.
pub struct Plan {
    /// Sites: the primal calls of f, outside lambdas or in the lambdas of
    /// nested loops (`build` or `sumbuild`, of values or of maps; `fold`
    /// and the two steps of its `lmFold`).
    pub sites: FxHashMap<ExprId, Site>,
    /// The `[D f]` call of each site's map, and where its record is.
    pub jacobians: FxHashMap<ExprId, Site>,
    /// The number of slots of a record's `kids`.
    pub slots: usize,
    /// The loops of values (`build`, `sumbuild` or `fold`) whose lambda
    /// calls f (or has such a loop): the slots of those calls.
    pub loops: FxHashMap<ExprId, Vec<usize>>,
}

/// A `build` or `sumbuild` over a vector with its lambda written in place:
/// the size, the variable and the body.
fn vector_loop(body: &Body, e: ExprId) -> Option<(ExprId, String, ExprId)> {
    let (p, args) = prim_call(body, e)?;
    if !matches!(p, Prim::Build | Prim::Sumbuild) || args.len() != 2 {
        return None;
    }
    match &body.exprs[args[1]] {
        Expr::Lam(i, Type::Integer, x) => Some((args[0], i.clone(), *x)),
        _ => None,
    }
}

/// The size and variable of a `build` or `sumbuild`; None for a fold.
type Range = Option<(ExprId, String)>;

/// A loop whose lambda calls f: a `build` or `sumbuild` (of values or of
/// maps), a `fold` or the `lmFold` of one. Its calls of f outside other
/// lambdas, in the order they are evaluated, and the loops in its lambda
/// that call f; for an `lmFold`, those of its primal step, and in `dcalls`
/// and `dinner` those of its Jacobian step.
struct Loop {
    at: ExprId,
    vector: Range,
    of_maps: bool,
    calls: Vec<ExprId>,
    inner: Vec<Loop>,
    dcalls: Vec<ExprId>,
    dinner: Vec<Loop>,
}

impl Loop {
    /// What selects an iteration of this loop for a call inside it.
    fn iter(&self) -> Iter {
        match &self.vector {
            Some((_, var)) => Iter::Var(var.clone()),
            None => Iter::Fold(self.at),
        }
    }

    /// Do `self` and `other` run over the same iterations (loops of the
    /// same kind, vector loops of the same size)?
    fn same_range(&self, body: &Body, other: &Loop) -> bool {
        match (&self.vector, &other.vector) {
            (Some((n, _)), Some((m, _))) => same_size(body, *n, *m),
            (None, None) => true,
            _ => false,
        }
    }
}

/// The lambdas of a loop that [`scan`] looks into: a `build` or
/// `sumbuild`'s (with its size and variable), a `fold`'s step, or an
/// `lmFold`'s primal step and Jacobian step; with whether it is of maps.
fn loop_lambdas(body: &Body, e: ExprId) -> Option<(Range, bool, Vec<ExprId>)> {
    if let Some((size, var, _)) = vector_loop(body, e) {
        let of_maps = matches!(body.ty(e), Type::Tensor(1, t) if is_lm(t));
        let (_, args) = prim_call(body, e)?;
        return Some((Some((size, var)), of_maps, vec![args[1]]));
    }
    let (p, args) = prim_call(body, e)?;
    let (of_maps, lams) = match (p, args.len()) {
        (Prim::Fold | Prim::Scan, 3) => (false, vec![args[0]]),
        (Prim::LmFold | Prim::LmScan, 5) => (true, vec![args[1], args[2]]),
        _ => return None,
    };
    lams.iter().all(|&l| matches!(body.exprs[l], Expr::Lam(..))).then_some((None, of_maps, lams))
}

/// The calls of f in `e` outside lambdas (in the order they are evaluated)
/// and the loops whose lambdas call f; `ok` is cleared by a call in any
/// other lambda.
fn scan(
    body: &Body,
    e: ExprId,
    is_f: &dyn Fn(ExprId) -> bool,
    calls: &mut Vec<ExprId>,
    loops: &mut Vec<Loop>,
    ok: &mut bool,
) {
    if let Some((vector, of_maps, lams)) = loop_lambdas(body, e) {
        let Some((_, args)) = prim_call(body, e) else { return };
        for a in args.into_iter().filter(|a| !lams.contains(a)) {
            scan(body, a, is_f, calls, loops, ok);
        }
        let mut steps = Vec::new();
        for l in lams {
            let Expr::Lam(_, _, x) = body.exprs[l] else { return };
            let (mut c, mut lo) = (Vec::new(), Vec::new());
            scan(body, x, is_f, &mut c, &mut lo, ok);
            steps.push((c, lo));
        }
        if steps.iter().any(|(c, lo)| !c.is_empty() || !lo.is_empty()) {
            let (dcalls, dinner) = if steps.len() == 2 { steps.pop().unwrap_or_default() } else { Default::default() };
            let (calls, inner) = steps.pop().unwrap_or_default();
            loops.push(Loop { at: e, vector, of_maps, calls, inner, dcalls, dinner });
        }
        return;
    }
    if matches!(body.exprs[e], Expr::Lam(..)) {
        post_order(body, e, &mut |y, _| *ok &= !is_f(y));
        return;
    }
    for c in ksc_ir::term::children(&body.exprs[e]) {
        scan(body, c, is_f, calls, loops, ok);
    }
    if is_f(e) {
        calls.push(e);
    }
}

impl Plan {
    /// The recursive calls of `f` in its Jacobian `d`; None when one is
    /// inside a lambda other than nested loops' (then f is not taped), or
    /// has no map of its own.
    pub fn new(f: &FunName, d: &Def) -> Option<Plan> {
        let body = &d.body;
        let is_f = |e: ExprId| matches!(&body.exprs[e], Expr::Call(Callee::Fun(g), _) if g == f);
        let (mut top, mut loops, mut ok) = (Vec::new(), Vec::new(), true);
        scan(body, d.root, &is_f, &mut top, &mut loops, &mut ok);
        if !ok {
            return None;
        }
        let mut plan = Plan {
            sites: FxHashMap::default(),
            jacobians: FxHashMap::default(),
            slots: 0,
            loops: FxHashMap::default(),
        };
        for e in top {
            plan.sites.insert(e, Site { slot: plan.slots, loops: Vec::new() });
            plan.slots += 1;
        }
        // Each loop of values is followed by its map: the loop of its maps
        // (`[D f]` of a `build` or `sumbuild`), which copies its body,
        // calls and loops included, in the same order (a loop of values
        // inside it is a copy of one in the original, and is followed by
        // its loop of maps); or, for a `fold`, its `lmFold`, whose primal
        // step is a copy of the fold's, and whose Jacobian step is like
        // the body of a loop of maps.
        let (values, maps): (Vec<&Loop>, Vec<&Loop>) = loops.iter().partition(|l| !l.of_maps);
        if values.len() != maps.len() {
            return None;
        }
        for (v, m) in values.into_iter().zip(maps) {
            let mut slots = FxHashMap::default();
            plan.number(v, &mut slots);
            ok &= v.same_range(body, m) && plan.place(body, v, v, &[], &slots) && plan.place(body, v, m, &[], &slots);
        }
        // Pair each site with the map bound right after it.
        let mut dcalls = 0;
        let jacobian_of_f =
            |g: &FunName| g.derivs.first() == Some(&Derivation::D) && g.inner().is_some_and(|(_, i)| &i == f);
        walk(body, d.root, false, &mut |e, _| {
            if let Expr::Call(Callee::Fun(g), _) = &body.exprs[e] {
                if jacobian_of_f(g) {
                    dcalls += 1;
                }
            }
            let Expr::Let(Pat::Var(_), r, x) = &body.exprs[e] else { return };
            let Some(site) = plan.sites.get(r) else { return };
            let Expr::Let(Pat::Var(_), m, _) = &body.exprs[*x] else { return };
            if let Some((Prim::LmCompose, args)) = prim_call(body, *m) {
                if matches!(&body.exprs[args[0]], Expr::Call(Callee::Fun(g), _) if jacobian_of_f(g)) {
                    plan.jacobians.insert(args[0], site.clone());
                }
            }
        });
        // The forward pass hoists the bindings above a recursive call out
        // of the expression they are in. `[D f]`'s own bindings have fresh
        // names, and [`prepare`] renames the program's `let`s around calls
        // of f, so none can shadow a variable read after it; a `let` of the
        // program's around a call here is not hoisted.
        walk(body, d.root, false, &mut |e, _| {
            if let Expr::Let(p, _, _) = &body.exprs[e] {
                if p.vars().iter().any(|v| !v.starts_with("ksc$")) {
                    let mut inside = false;
                    walk(body, e, false, &mut |y, _| inside |= plan.sites.contains_key(&y));
                    ok &= !inside;
                }
            }
        });
        (ok && dcalls == plan.jacobians.len()).then_some(plan)
    }

    /// Gives the calls of loop of values `v` and of the loops in it slots
    /// (in `slots`), and records each loop's slots.
    fn number(&mut self, v: &Loop, slots: &mut FxHashMap<ExprId, usize>) -> Vec<usize> {
        let mut mine = Vec::new();
        for &c in &v.calls {
            slots.insert(c, self.slots);
            mine.push(self.slots);
            self.slots += 1;
        }
        for l in &v.inner {
            mine.extend(self.number(l, slots));
        }
        self.loops.insert(v.at, mine.clone());
        mine
    }

    /// Places the calls of `x`, which is loop of values `v` itself, a copy
    /// of it, or its map, inside loops `outer`: each has the slot of its
    /// counterpart in `v`. False if the two do not correspond.
    fn place(&mut self, body: &Body, v: &Loop, x: &Loop, outer: &[Iter], slots: &FxHashMap<ExprId, usize>) -> bool {
        if v.inner.iter().any(|l| l.of_maps) || v.vector.is_some() != x.vector.is_some() {
            return false;
        }
        let mut path = outer.to_vec();
        path.push(x.iter());
        if !x.of_maps {
            // A loop of values (or a copy): its loops are copies of v's.
            return self.copies(body, v, &x.calls, &x.inner, &path, slots);
        }
        if x.vector.is_none() {
            // An `lmFold`: a copy of the step, and its Jacobian.
            return self.copies(body, v, &x.calls, &x.inner, &path, slots)
                && self.mapped(body, v, &x.dcalls, &x.dinner, &path, slots);
        }
        self.mapped(body, v, &x.calls, &x.inner, &path, slots)
    }

    /// Places `calls` and `inner`, the calls and loops of a copy of the
    /// body of `v`.
    fn copies(
        &mut self,
        body: &Body,
        v: &Loop,
        calls: &[ExprId],
        inner: &[Loop],
        path: &[Iter],
        slots: &FxHashMap<ExprId, usize>,
    ) -> bool {
        if !self.calls(v, calls, path, slots) || inner.len() != v.inner.len() {
            return false;
        }
        v.inner.iter().zip(inner).all(|(vi, xi)| !xi.of_maps && self.place(body, vi, xi, path, slots))
    }

    /// Places `calls` and `inner`, the calls and loops of the map of the
    /// body of `v`: each of v's loops is copied, with its map.
    fn mapped(
        &mut self,
        body: &Body,
        v: &Loop,
        calls: &[ExprId],
        inner: &[Loop],
        path: &[Iter],
        slots: &FxHashMap<ExprId, usize>,
    ) -> bool {
        let (copies, maps): (Vec<&Loop>, Vec<&Loop>) = inner.iter().partition(|l| !l.of_maps);
        if !self.calls(v, calls, path, slots) || copies.len() != v.inner.len() || maps.len() != v.inner.len() {
            return false;
        }
        v.inner.iter().zip(copies.into_iter().zip(maps)).all(|(vi, (ci, mi))| {
            ci.same_range(body, mi) && self.place(body, vi, ci, path, slots) && self.place(body, vi, mi, path, slots)
        })
    }

    /// Gives `calls`, those of a copy of v's body, their counterparts' slots.
    fn calls(&mut self, v: &Loop, calls: &[ExprId], path: &[Iter], slots: &FxHashMap<ExprId, usize>) -> bool {
        if v.calls.len() != calls.len() {
            return false;
        }
        for (vc, &xc) in v.calls.iter().zip(calls) {
            self.sites.insert(xc, Site { slot: slots[vc], loops: path.to_vec() });
        }
        true
    }

    pub fn is_recursive(&self) -> bool {
        !self.sites.is_empty()
    }
}

/// Post-order walk (children first, in order: the order of evaluation),
/// saying whether each expression is inside a lambda below `e`.
fn post_order(body: &Body, e: ExprId, f: &mut dyn FnMut(ExprId, bool)) {
    fn go(body: &Body, e: ExprId, in_lam: bool, f: &mut dyn FnMut(ExprId, bool)) {
        let node = &body.exprs[e];
        let inner = in_lam || matches!(node, Expr::Lam(..));
        for c in ksc_ir::term::children(node) {
            go(body, c, inner, f);
        }
        f(e, in_lam);
    }
    go(body, e, false, f)
}

/// The source of f made ready to tape its recursive calls, or None if
/// nothing changes:
///
/// - a `map` over a vector whose function calls f is written as the
///   `build` over the indices it equals (a `map`'s loop has no index to
///   find an iteration's record by):
///   `map (lam (x : T) b) v` => `let (w v) (build (size w) (lam (i :
///   Integer) (let (x' (index i w)) b[x'/x])))` (`w`, `i`, `x'` fresh; no
///   `w` if v is a variable); and `map2 (lam (x : T) b) v u` => `assert
///   (eq (size w) (size u)) (build (size w) (lam (i : Integer) (let (x'
///   (tuple (index i w) (index i u))) b[x'/x])))`, its vectors bound the
///   same way;
/// - a `build` or `sumbuild` over a tuple of sizes whose lambda calls f is
///   written as nested loops over vectors (one per dimension, the taped
///   kind): `sumbuild (tuple m n) (lam (p : Tuple Integer Integer) b)` =>
///   `sumbuild m (lam (i : Integer) (sumbuild n (lam (j : Integer) (let
///   (p (tuple i j)) b))))`, and a `build` stores the nested vectors and
///   reads them back, `let (rows (build m (lam i (build n (lam j ..)))))
///   (build (tuple m n) (lam (q : ..) (index (get$2$2 q) (index (get$1$2
///   q) rows))))` (the sizes bound first unless written as a tuple);
/// - the variables of a `let` around a call of f are renamed to fresh ones
///   (in the `let`'s body, capture-avoiding): the forward pass hoists the
///   bindings above a call out of the expression they are in, where a
///   variable of the program's could shadow another read after it.
///
/// All compute the same (`map2` of vectors of different sizes fails
/// either way; a sum over a tuple of sizes adds in the same row-major
/// order, grouped by rows), and `[D f]` of a `build` reads element i of
/// v's map as `map`'s does.
pub fn prepare(f: &Def) -> Option<Def> {
    let calls_f = |body: &Body, e: ExprId| crate::tail::calls(body, e, &f.name);
    // Post-order, so that a `let` renamed inside another is already
    // rewritten (in place) when the outer one's body is copied.
    let mut targets = Vec::new();
    post_order(&f.body, f.root, &mut |e, _| {
        let hit = match &f.body.exprs[e] {
            Expr::Let(p, _, _) => p.vars().iter().any(|v| !v.starts_with("ksc$")) && calls_f(&f.body, e),
            _ => prim_call(&f.body, e).is_some_and(|(p, args)| {
                let maps = matches!((p, args.len()), (Prim::Map, 2) | (Prim::Map2, 3))
                    && args[1..].iter().all(|&v| matches!(f.body.ty(v), Type::Tensor(1, _)))
                    && matches!(&f.body.exprs[args[0]], Expr::Lam(..))
                    && calls_f(&f.body, args[0]);
                maps || grid_loop(&f.body, e).is_some_and(|(_, _, lam)| calls_f(&f.body, lam))
            }),
        };
        if hit {
            targets.push(e);
        }
    });
    if targets.is_empty() {
        return None;
    }
    let mut def = f.clone();
    let mut fresh = ksc_ir::term::fresh_floor(&def.body, def.root, def.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let mut cache = ksc_ir::term::Cache::new();
    for e in targets {
        let out = match b.body.exprs[e].clone() {
            Expr::Let(p, r, x) => {
                let renames: Vec<(String, String)> = p
                    .vars()
                    .iter()
                    .map(|v| {
                        (
                            v.clone(),
                            if v.starts_with("ksc$") { v.clone() } else { b.fresh_name(&ksc_ir::term::hint_of(v)) },
                        )
                    })
                    .collect();
                let x = ksc_ir::term::rename(&mut b, &mut cache, x, &renames);
                let p = match p {
                    Pat::Var(_) => Pat::Var(renames[0].1.clone()),
                    Pat::Tuple(_) => Pat::Tuple(renames.into_iter().map(|(_, to)| to).collect()),
                };
                let ty = b.ty(x);
                b.body.alloc_typed(Expr::Let(p, r, x), ty)
            }
            _ if grid_loop(b.body, e).is_some() => {
                let Some((p, size, lam)) = grid_loop(b.body, e) else { continue };
                nested_loops(&mut b, &mut cache, p, size, lam)
            }
            _ => {
                let Some((_, args)) = prim_call(b.body, e) else { continue };
                let Expr::Lam(x, _, body) = b.body.exprs[args[0]].clone() else { continue };
                // The vectors, as variables (the others bound first, in order).
                let mut binds = Vec::new();
                let ws: Vec<(String, Type)> = args[1..]
                    .iter()
                    .map(|&v| {
                        let ty = b.ty(v);
                        match &b.body.exprs[v] {
                            Expr::Var(name) => (name.clone(), ty),
                            _ => {
                                let w = b.fresh_name("w");
                                binds.push((Pat::Var(w.clone()), v));
                                (w, ty)
                            }
                        }
                    })
                    .collect();
                let x2 = b.fresh_name(&ksc_ir::term::hint_of(&x));
                let body = ksc_ir::term::rename(&mut b, &mut cache, body, &[(x, x2.clone())]);
                let size = |b: &mut Builder, (w, t): &(String, Type)| {
                    let wv = b.var(w, t.clone());
                    b.prim(Prim::Size, vec![wv])
                };
                let n = size(&mut b, &ws[0]);
                let i = b.fresh_name("i");
                let elems: Vec<ExprId> = ws
                    .iter()
                    .map(|(w, t)| {
                        let (iv, wv) = (b.var(&i, Type::Integer), b.var(w, t.clone()));
                        b.prim(Prim::Index, vec![iv, wv])
                    })
                    .collect();
                let elem = if elems.len() == 1 { elems[0] } else { b.tuple(elems) };
                let inner = b.let_(&x2, elem, body);
                let lam = b.lam(&i, Type::Integer, inner);
                let mut out = b.prim(Prim::Build, vec![n, lam]);
                if ws.len() == 2 {
                    // `map2` fails on vectors of different sizes.
                    let (n1, n2) = (size(&mut b, &ws[0]), size(&mut b, &ws[1]));
                    let same = b.prim(Prim::Eq, vec![n1, n2]);
                    let ty = b.ty(out);
                    out = b.body.alloc_typed(Expr::Assert(same, out, None), ty);
                }
                wrap(&mut b, binds, out)
            }
        };
        b.body.exprs[e] = b.body.exprs[out].clone();
    }
    Some(def)
}

/// A `build` or `sumbuild` over a tuple of sizes (rank 2 or more) with its
/// lambda written in place: the primitive, the sizes and the lambda.
fn grid_loop(body: &Body, e: ExprId) -> Option<(Prim, ExprId, ExprId)> {
    let (p, args) = prim_call(body, e)?;
    if !matches!(p, Prim::Build | Prim::Sumbuild) || args.len() != 2 {
        return None;
    }
    let rank = body.ty(args[0]).index_rank().filter(|&k| k >= 2)?;
    match &body.exprs[args[1]] {
        Expr::Lam(_, t, _) if t.index_rank() == Some(rank) => Some((p, args[0], args[1])),
        _ => None,
    }
}

/// A [`grid_loop`] as nested loops over vectors ([`prepare`]).
fn nested_loops(b: &mut Builder, cache: &mut ksc_ir::term::Cache, p: Prim, size: ExprId, lam: ExprId) -> ExprId {
    let Expr::Lam(x, x_ty, body) = b.body.exprs[lam].clone() else { unreachable!("a grid loop's lambda") };
    let rank = x_ty.index_rank().unwrap_or(0);
    // The sizes, as atoms (bound first unless written out).
    let mut binds = Vec::new();
    let sizes: Vec<ExprId> = match b.body.exprs[size].clone() {
        Expr::Tuple(es) if es.iter().all(|&s| b.is_atomic(s)) => es,
        _ => {
            let s = b.fresh_name("size");
            binds.push((Pat::Var(s.clone()), size));
            (1..=rank as u32)
                .map(|k| {
                    let sv = b.var(&s, x_ty.clone());
                    b.prim(Prim::Get { index: k, arity: rank as u32 }, vec![sv])
                })
                .collect()
        }
    };
    let idx: Vec<String> = (0..rank).map(|_| b.fresh_name("i")).collect();
    // The innermost body: the lambda's variable (renamed, as a `let`
    // around a call of f is) bound to the indices.
    let ivars: Vec<ExprId> = idx.iter().map(|i| b.var(i, Type::Integer)).collect();
    let point = b.tuple(ivars);
    let x2 = b.fresh_name(&ksc_ir::term::hint_of(&x));
    let body = ksc_ir::term::rename(b, cache, body, &[(x, x2.clone())]);
    let mut inner = b.let_(&x2, point, body);
    let inner_p = if p == Prim::Sumbuild { Prim::Sumbuild } else { Prim::Build };
    for k in (0..rank).rev() {
        let lam = b.lam(&idx[k], Type::Integer, inner);
        let n = b.copy(sizes[k]);
        inner = b.prim(inner_p, vec![n, lam]);
    }
    let out = if p == Prim::Sumbuild {
        inner
    } else {
        // Read the nested vectors back into the tensor of the sizes.
        let rows = b.fresh_name("rows");
        let rows_ty = b.ty(inner);
        let q = b.fresh_name("q");
        let qv = |b: &mut Builder| b.var(&q, x_ty.clone());
        let mut elem = b.var(&rows, rows_ty);
        for k in 1..=rank as u32 {
            let qk = qv(b);
            let i = b.prim(Prim::Get { index: k, arity: rank as u32 }, vec![qk]);
            elem = b.prim(Prim::Index, vec![i, elem]);
        }
        let read = b.lam(&q, x_ty.clone(), elem);
        let whole: Vec<ExprId> = sizes.iter().map(|&s| b.copy(s)).collect();
        let whole = b.tuple(whole);
        let tensor = b.prim(Prim::Build, vec![whole, read]);
        b.let_(&rows, inner, tensor)
    };
    wrap(b, binds, out)
}

/// Does `e` compute a call of `f` whose value is needed? (Bindings whose
/// variables are not read are skipped, as dead-code elimination would.)
/// Returns that, and the variables `e` reads.
pub fn calls_live(body: &Body, e: ExprId, f: &FunName) -> (bool, rustc_hash::FxHashSet<String>) {
    let mut vars = rustc_hash::FxHashSet::default();
    let calls = live(body, e, f, &mut vars);
    (calls, vars)
}

fn live(body: &Body, e: ExprId, f: &FunName, vars: &mut rustc_hash::FxHashSet<String>) -> bool {
    match &body.exprs[e] {
        Expr::Var(v) => {
            vars.insert(v.clone());
            false
        }
        Expr::Lit(_) | Expr::Dummy(_) => false,
        Expr::Call(c, a) => {
            let inner = live(body, *a, f, vars);
            inner || matches!(c, Callee::Fun(g) if g == f)
        }
        Expr::Tuple(es) => es.iter().fold(false, |acc, &x| live(body, x, f, vars) | acc),
        Expr::Let(p, r, x) => {
            let mut inner = rustc_hash::FxHashSet::default();
            let cx = live(body, *x, f, &mut inner);
            let names = p.vars();
            let needed = names.iter().any(|n| inner.contains(n));
            for n in names {
                inner.remove(n);
            }
            vars.extend(inner);
            if needed {
                live(body, *r, f, vars) | cx
            } else {
                cx
            }
        }
        Expr::If(c, t, x) => live(body, *c, f, vars) | live(body, *t, f, vars) | live(body, *x, f, vars),
        Expr::Assert(c, x, _) => live(body, *c, f, vars) | live(body, *x, f, vars),
        Expr::Lam(v, _, x) => {
            let mut inner = rustc_hash::FxHashSet::default();
            let cx = live(body, *x, f, &mut inner);
            inner.remove(v);
            vars.extend(inner);
            cx
        }
    }
}

fn walk(body: &Body, e: ExprId, in_lam: bool, f: &mut dyn FnMut(ExprId, bool)) {
    f(e, in_lam);
    let node = &body.exprs[e];
    let in_lam = in_lam || matches!(node, Expr::Lam(..));
    for c in ksc_ir::term::children(node) {
        walk(body, c, in_lam, f);
    }
}

fn sub_one(b: &mut Builder, e: ExprId) -> ExprId {
    let one = b.integer(1);
    b.int_op("sub", e, one)
}

/// An empty tape of records of results of type `t` (`$dummy` of a vector
/// type is the empty vector; a `build` would be a loop).
fn empty_tape(b: &mut Builder, t: &Type) -> ExprId {
    let tape = Type::tape(t);
    b.body.alloc_typed(Expr::Dummy(tape.clone()), tape)
}

// ---------------------------------------------------------------------------
// The forward pass.

/// `[suffwdtape f]` from `[D f]` (see the module's documentation).
pub fn suffwdtape_def(f: &Def, d: &Def, witnesses: &Witnesses, plan: &Plan) -> R<Def> {
    let s_ty = f.arg_ty();
    let t_ty = f.ret_ty.clone();
    let tape_ty = Type::tape(&t_ty);
    let mut body = Body::new();
    let mut fresh = crate::apply::fresh_start(f, d);
    let mut b = Builder::new(&mut body, &mut fresh);
    let (x_name, tape_name) = (param_name("x", f), param_name("tape", f));
    let mut fw = TapeFwd {
        src: &d.body,
        plan,
        name: f.name.derived(Derivation::SufFwdTape),
        t_ty: t_ty.clone(),
        tape_ty: tape_ty.clone(),
        tape: tape_name.clone(),
        kids: Vec::new(),
        block: Vec::new(),
        has_site: FxHashMap::default(),
    };
    for _ in 0..plan.slots {
        let none = b.integer(-1);
        let k = b.fresh_name("kid");
        fw.block.push((Pat::Var(k.clone()), none));
        fw.kids.push(k);
    }
    let (bindings, result) = let_chain(&d.body, d.root);
    for (p, r) in bindings {
        fw.binding(&mut b, p, r)?;
    }
    let Expr::Var(g_res) = d.body.exprs[result].clone() else {
        return internal("a Jacobian that does not end in a map variable");
    };
    let Some(value) = witnesses.get(&g_res) else { return internal(format!("no value known for `{g_res}`")) };
    let v = value.build(&mut b);
    let v_name = b.fresh_name("value");
    fw.block.push((Pat::Var(v_name.clone()), v));
    // The record: the value and the positions of the recursive calls' records.
    let kids = if fw.kids.is_empty() {
        let n = b.integer(0);
        b.build(n, |b, _| b.integer(-1))
    } else {
        let ks = fw.kids.iter().map(|k| b.var(k, Type::Integer)).collect();
        b.prim(Prim::VecInit, ks)
    };
    let vv = b.var(&v_name, t_ty.clone());
    let record = b.tuple(vec![vv, kids]);
    let tv = b.var(&fw.tape, tape_ty.clone());
    let pushed = b.prim(Prim::TapePush, vec![tv, record]);
    let vv = b.var(&v_name, t_ty.clone());
    let result = b.tuple(vec![vv, pushed]);
    let block = std::mem::take(&mut fw.block);
    let inner = wrap(&mut b, block, result);
    let root = bind_params(&mut b, &f.params, &x_name, &s_ty, inner);
    let ret = Type::Tuple(vec![t_ty, tape_ty.clone()]);
    let params = vec![Param { name: x_name, ty: s_ty }, Param { name: tape_name, ty: tape_ty }];
    checked_def(f.name.derived(Derivation::SufFwdTape), params, ret, body, root)
}

struct TapeFwd<'s> {
    src: &'s Body,
    plan: &'s Plan,
    name: FunName,
    t_ty: Type,
    tape_ty: Type,
    /// The variable holding the tape now.
    tape: String,
    /// The variable holding each site's record position now.
    kids: Vec<String>,
    block: Vec<(Pat, ExprId)>,
    has_site: FxHashMap<ExprId, bool>,
}

impl TapeFwd<'_> {
    fn has_site(&mut self, e: ExprId) -> bool {
        if let Some(&h) = self.has_site.get(&e) {
            return h;
        }
        let mut h = false;
        walk(self.src, e, false, &mut |x, _| h |= self.plan.sites.contains_key(&x));
        self.has_site.insert(e, h);
        h
    }

    fn sites_in(&self, e: ExprId) -> Vec<usize> {
        let mut out = Vec::new();
        walk(self.src, e, false, &mut |x, _| {
            if let Some(site) = self.plan.sites.get(&x) {
                out.push(site.slot);
            }
        });
        out.sort_unstable();
        out.dedup();
        out
    }

    fn bind(&mut self, b: &mut Builder, hint: &str, e: ExprId) -> (String, Type) {
        let n = b.fresh_name(hint);
        let t = b.ty(e);
        self.block.push((Pat::Var(n.clone()), e));
        (n, t)
    }

    fn binding(&mut self, b: &mut Builder, p: Pat, r: ExprId) -> R<()> {
        if is_lm(self.src.ty(r)) {
            return Ok(());
        }
        let r = self.expr(b, r)?;
        self.block.push((p, r));
        Ok(())
    }

    /// The primal of `e` (maps stripped), with the recursive calls in it
    /// threaded through the tape (their bindings emitted before it).
    fn expr(&mut self, b: &mut Builder, e: ExprId) -> R<ExprId> {
        if !self.has_site(e) {
            return Ok(strip_expr(b, self.src, e, None));
        }
        let ty = strip_type(self.src.ty(e));
        match self.src.exprs[e].clone() {
            Expr::Let(p, r, x) => {
                self.binding(b, p, r)?;
                self.expr(b, x)
            }
            Expr::Call(Callee::Prim(Prim::Fold | Prim::Scan), _) if self.plan.loops.contains_key(&e) => {
                self.taped_fold(b, e)
            }
            Expr::Call(Callee::Prim(p), _) if self.plan.loops.contains_key(&e) => self.taped_loop(b, e, p),
            Expr::Call(Callee::Fun(_), a) if self.plan.sites.contains_key(&e) => {
                let k = self.plan.sites[&e].slot;
                let a = self.expr(b, a)?;
                let tv = b.var(&self.tape, self.tape_ty.clone());
                let pair_ty = Type::Tuple(vec![self.t_ty.clone(), self.tape_ty.clone()]);
                let call = b.call(self.name.clone(), vec![a, tv], pair_ty.clone());
                let (pn, pt) = self.bind(b, "call", call);
                let pv = b.var(&pn, pt.clone());
                let tape = b.prim(Prim::Get { index: 2, arity: 2 }, vec![pv]);
                let (tn, tt) = self.bind(b, "tape", tape);
                self.tape = tn.clone();
                let tv = b.var(&tn, tt);
                let size = b.prim(Prim::Size, vec![tv]);
                let pos = sub_one(b, size);
                let (kn, _) = self.bind(b, "kid", pos);
                self.kids[k] = kn;
                let pv = b.var(&pn, pt);
                Ok(b.prim(Prim::Get { index: 1, arity: 2 }, vec![pv]))
            }
            Expr::Call(c, a) => {
                let a = self.expr(b, a)?;
                Ok(b.body.alloc_typed(Expr::Call(c, a), ty))
            }
            Expr::Tuple(es) => {
                let es = es.into_iter().map(|x| self.expr(b, x)).collect::<R<Vec<_>>>()?;
                Ok(b.tuple(es))
            }
            Expr::If(c, t, f) => {
                let c = self.expr(b, c)?;
                let sites = self.sites_in(e);
                let bt = self.branch(b, t, &sites)?;
                let bf = self.branch(b, f, &sites)?;
                let both_ty = b.ty(bt);
                let both = b.body.alloc_typed(Expr::If(c, bt, bf), both_ty);
                Ok(self.unpack(b, both, &sites))
            }
            Expr::Assert(c, x, from) => {
                let c = self.expr(b, c)?;
                let sites = self.sites_in(e);
                let bx = self.branch(b, x, &sites)?;
                let both_ty = b.ty(bx);
                let both = b.body.alloc_typed(Expr::Assert(c, bx, from), both_ty);
                Ok(self.unpack(b, both, &sites))
            }
            _ => internal("a recursive call the tape cannot reach"),
        }
    }

    /// A `build` or `sumbuild` whose lambda calls f, as a fold over the
    /// indices threading the tape ([`Self::threaded`]) that collects the
    /// elements. A `sumbuild` sums them after the loop.
    fn taped_loop(&mut self, b: &mut Builder, e: ExprId, p: Prim) -> R<ExprId> {
        let slots = self.plan.loops[&e].clone();
        let Some((size, i, lbody)) = vector_loop(self.src, e) else { return internal("a taped loop without a lambda") };
        let n = self.expr(b, size)?;
        let (n_name, n_ty) = self.bind(b, "n", n);
        let vals_ty = Type::vec(strip_type(self.src.ty(lbody)));
        let nv = b.var(&n_name, n_ty.clone());
        let range = b.build(nv, |_, j| j);
        let none = b.body.alloc_typed(Expr::Dummy(vals_ty.clone()), vals_ty.clone());
        let vals = self.threaded(
            b,
            &slots,
            false,
            (vals_ty.clone(), none),
            (range, Type::Integer),
            &mut |b, this, vals, j| {
                let jv = b.var(j, Type::Integer);
                this.block.push((Pat::Var(i.clone()), jv));
                let v = this.expr(b, lbody)?;
                let (v_name, v_ty) = this.bind(b, "elem", v);
                let (vals, vv) = (b.var(vals, vals_ty.clone()), b.var(&v_name, v_ty));
                Ok(b.prim(Prim::TapePush, vec![vals, vv]))
            },
        )?;
        if p == Prim::Build {
            return Ok(vals);
        }
        let (vals_name, _) = self.bind(b, "elems", vals);
        let nv = b.var(&n_name, n_ty);
        let q = b.fresh_name("q");
        let (qv, vv) = (b.var(&q, Type::Integer), b.var(&vals_name, vals_ty));
        let x = b.prim(Prim::Index, vec![qv, vv]);
        let lam = b.lam(&q, Type::Integer, x);
        Ok(b.prim(Prim::Sumbuild, vec![nv, lam]))
    }

    /// A `fold` or `$scan` whose step calls f, threading the tape
    /// ([`Self::threaded`]; a `$scan` collects its accumulators).
    fn taped_fold(&mut self, b: &mut Builder, e: ExprId) -> R<ExprId> {
        let slots = self.plan.loops[&e].clone();
        let Some((p @ (Prim::Fold | Prim::Scan), args)) = prim_call(self.src, e) else {
            return internal("a taped fold that is not one");
        };
        let Expr::Lam(t, tty, lbody) = self.src.exprs[args[0]].clone() else {
            return internal("a taped fold without a lambda");
        };
        let Type::Tuple(ab) = strip_type(&tty) else { return internal("a fold's step over a non-pair") };
        let (acc, v) = (self.expr(b, args[1])?, self.expr(b, args[2])?);
        let (a_ty, x_ty) = (ab[0].clone(), ab[1].clone());
        let collect = p == Prim::Scan;
        self.threaded(b, &slots, collect, (a_ty.clone(), acc), (v, x_ty.clone()), &mut |b, this, a, x| {
            let (av, xv) = (b.var(a, a_ty.clone()), b.var(x, x_ty.clone()));
            let tv = b.tuple(vec![av, xv]);
            this.block.push((Pat::Var(t.clone()), tv));
            this.expr(b, lbody)
        })
    }

    /// A fold over the vector `over` (elements of type `x_ty`) whose
    /// accumulator is `(first, tape, positions per slot)`: each step binds
    /// `first`'s part and the element to variables and `step` gives the
    /// next `first`; the tape is threaded through the calls of f in it and,
    /// for each of `slots`, the position of its call's record is collected
    /// by iteration (-1 where it did not run). After the fold an index
    /// record per slot, `($dummy, positions)`, is pushed and the slot holds
    /// its position. Returns the last `first`; with `collect`, the vector
    /// of every `first` instead, the initial and the last included (a
    /// `$scan`'s result), appended to as the tape is.
    fn threaded(
        &mut self,
        b: &mut Builder,
        slots: &[usize],
        collect: bool,
        (first_ty, init): (Type, ExprId),
        (over, x_ty): (ExprId, Type),
        step: &mut dyn FnMut(&mut Builder, &mut Self, &str, &str) -> R<ExprId>,
    ) -> R<ExprId> {
        let pos_ty = Type::vec(Type::Integer);
        let firsts_ty = Type::vec(first_ty.clone());
        let mut acc_tys = vec![first_ty.clone(), self.tape_ty.clone()];
        acc_tys.extend(slots.iter().map(|_| pos_ty.clone()));
        if collect {
            acc_tys.push(firsts_ty.clone());
        }
        let m = acc_tys.len() as u32;
        let acc_ty = Type::Tuple(acc_tys);
        let get = |b: &mut Builder, v: &str, t: &Type, k: u32, n: u32| {
            let x = b.var(v, t.clone());
            b.prim(Prim::Get { index: k, arity: n }, vec![x])
        };
        // One step: (acc, x) to the next acc.
        let saved = (std::mem::take(&mut self.block), self.tape.clone(), self.kids.clone());
        let w_name = b.fresh_name("a");
        let w_ty = Type::Tuple(vec![acc_ty.clone(), x_ty.clone()]);
        let next = (|| -> R<ExprId> {
            let acc = get(b, &w_name, &w_ty, 1, 2);
            let (acc_name, _) = self.bind(b, "acc", acc);
            let x = get(b, &w_name, &w_ty, 2, 2);
            let (x_name, _) = self.bind(b, "x", x);
            let parts: Vec<String> = (1..=m)
                .map(|k| {
                    let x = get(b, &acc_name, &acc_ty, k, m);
                    self.bind(b, "part", x).0
                })
                .collect();
            self.tape = parts[1].clone();
            for &slot in slots {
                let none = b.integer(-1);
                self.kids[slot] = self.bind(b, "kid", none).0;
            }
            let first = step(b, self, &parts[0], &x_name)?;
            let mut next = vec![first, b.var(&self.tape, self.tape_ty.clone())];
            for (j, &slot) in slots.iter().enumerate() {
                let (ps, k) = (b.var(&parts[2 + j], pos_ty.clone()), b.var(&self.kids[slot], Type::Integer));
                next.push(b.prim(Prim::TapePush, vec![ps, k]));
            }
            if collect {
                let (fs, a) = (b.var(&parts[m as usize - 1], firsts_ty.clone()), b.var(&parts[0], first_ty.clone()));
                next.push(b.prim(Prim::TapePush, vec![fs, a]));
            }
            Ok(b.tuple(next))
        })();
        let block = std::mem::replace(&mut self.block, saved.0);
        self.tape = saved.1;
        self.kids = saved.2;
        let next = wrap(b, block, next?);
        let lam = b.lam(&w_name, w_ty, next);
        let mut init = vec![init, b.var(&self.tape, self.tape_ty.clone())];
        for _ in slots {
            init.push(b.body.alloc_typed(Expr::Dummy(pos_ty.clone()), pos_ty.clone()));
        }
        if collect {
            init.push(b.body.alloc_typed(Expr::Dummy(firsts_ty.clone()), firsts_ty.clone()));
        }
        let init = b.tuple(init);
        let run = b.prim(Prim::Fold, vec![lam, init, over]);
        let (run_name, _) = self.bind(b, "loop", run);
        let tape = get(b, &run_name, &acc_ty, 2, m);
        self.tape = self.bind(b, "tape", tape).0;
        for (j, &slot) in slots.iter().enumerate() {
            let no_value = b.body.alloc_typed(Expr::Dummy(self.t_ty.clone()), self.t_ty.clone());
            let kids = get(b, &run_name, &acc_ty, 3 + j as u32, m);
            let record = b.tuple(vec![no_value, kids]);
            let tv = b.var(&self.tape, self.tape_ty.clone());
            let pushed = b.prim(Prim::TapePush, vec![tv, record]);
            self.tape = self.bind(b, "tape", pushed).0;
            let tv = b.var(&self.tape, self.tape_ty.clone());
            let size = b.prim(Prim::Size, vec![tv]);
            let pos = sub_one(b, size);
            self.kids[slot] = self.bind(b, "kid", pos).0;
        }
        let last = get(b, &run_name, &acc_ty, 1, m);
        if !collect {
            return Ok(last);
        }
        let firsts = get(b, &run_name, &acc_ty, m, m);
        Ok(b.prim(Prim::TapePush, vec![firsts, last]))
    }

    /// A branch in a block of its own, returning (value, tape, the
    /// positions of `sites`).
    fn branch(&mut self, b: &mut Builder, e: ExprId, sites: &[usize]) -> R<ExprId> {
        let saved = (std::mem::take(&mut self.block), self.tape.clone(), self.kids.clone());
        let v = self.expr(b, e);
        let block = std::mem::replace(&mut self.block, saved.0);
        let (tape, kids) = (std::mem::replace(&mut self.tape, saved.1), std::mem::replace(&mut self.kids, saved.2));
        let v = v?;
        let mut parts = vec![v, b.var(&tape, self.tape_ty.clone())];
        for &k in sites {
            parts.push(b.var(&kids[k], Type::Integer));
        }
        let t = b.tuple(parts);
        Ok(wrap(b, block, t))
    }

    fn unpack(&mut self, b: &mut Builder, both: ExprId, sites: &[usize]) -> ExprId {
        let (bn, bt) = self.bind(b, "branch", both);
        let n = 2 + sites.len() as u32;
        let get = |b: &mut Builder, i: u32| {
            let v = b.var(&bn, bt.clone());
            b.prim(Prim::Get { index: i, arity: n }, vec![v])
        };
        let tape = get(b, 2);
        self.tape = self.bind(b, "tape", tape).0;
        for (j, &k) in sites.iter().enumerate() {
            let p = get(b, 3 + j as u32);
            self.kids[k] = self.bind(b, "kid", p).0;
        }
        get(b, 1)
    }
}

// ---------------------------------------------------------------------------
// The reverse pass.

/// What the transposition of `[D f]` needs to read the tape.
pub struct RevTape {
    pub f: FunName,
    pub t_ty: Type,
    pub s_ty: Type,
    pub tape: (String, Type),
    /// The positions of the records of this call's recursive calls, by site.
    pub kids: String,
    pub sites: FxHashMap<ExprId, Site>,
    pub jacobians: FxHashMap<ExprId, Site>,
    /// The folds (of values and `lmFold`s) with calls of f in their steps:
    /// a copy of one counts its iterations ([`counted`]).
    pub folds: rustc_hash::FxHashSet<ExprId>,
    /// The variable holding the iteration of each such fold in the code
    /// being written (bound while its step is copied).
    pub iters: std::cell::RefCell<FxHashMap<ExprId, String>>,
    /// Whether the reverse passes of recursive calls may be given an
    /// accumulator (`[sufrevacc f]`): f's argument has a tensor in its
    /// cotangent.
    pub accumulates: bool,
}

impl RevTape {
    pub fn new(f: &Def, tape: (String, Type), kids: String, plan: &Plan) -> RevTape {
        let folds = plan
            .sites
            .values()
            .flat_map(|s| &s.loops)
            .filter_map(|i| match i {
                Iter::Fold(at) => Some(*at),
                Iter::Var(_) => None,
            })
            .collect();
        RevTape {
            f: f.name.clone(),
            t_ty: f.ret_ty.clone(),
            s_ty: f.arg_ty(),
            tape,
            kids,
            sites: plan.sites.clone(),
            jacobians: plan.jacobians.clone(),
            folds,
            iters: Default::default(),
            accumulates: accumulates(&f.arg_ty()),
        }
    }

    /// The position of a site's record.
    fn position(&self, b: &mut Builder, site: &Site) -> ExprId {
        let ki = b.integer(site.slot as i64);
        let kids = b.var(&self.kids, Type::vec(Type::Integer));
        let mut p = b.prim(Prim::Index, vec![ki, kids]);
        // In loops: each index record's kids at the loop's iteration.
        for i in &site.loops {
            let tape = b.var(&self.tape.0, self.tape.1.clone());
            let index_record = b.prim(Prim::Index, vec![p, tape]);
            let by_iteration = b.prim(Prim::Get { index: 2, arity: 2 }, vec![index_record]);
            let name = match i {
                Iter::Var(v) => v.clone(),
                Iter::Fold(at) => {
                    self.iters.borrow().get(at).cloned().expect("a fold's step copied without its iteration")
                }
            };
            let iv = b.var(&name, Type::Integer);
            p = b.prim(Prim::Index, vec![iv, by_iteration]);
        }
        p
    }

    /// Copies `step` (the body of the step of the fold `at`) with `it`
    /// as its iteration.
    pub fn in_step<T>(&self, at: ExprId, it: &str, step: impl FnOnce() -> T) -> T {
        let before = self.iters.borrow_mut().insert(at, it.to_string());
        let r = step();
        match before {
            Some(v) => self.iters.borrow_mut().insert(at, v),
            None => self.iters.borrow_mut().remove(&at),
        };
        r
    }

    /// The result of the recursive call at `e`, if `e` is one: read from
    /// its record.
    pub fn read(&self, b: &mut Builder, e: ExprId) -> Option<ExprId> {
        let site = self.sites.get(&e)?;
        let p = self.position(b, site);
        let tape = b.var(&self.tape.0, self.tape.1.clone());
        let record = b.prim(Prim::Index, vec![p, tape]);
        Some(b.prim(Prim::Get { index: 1, arity: 2 }, vec![record]))
    }

    /// `r ⊙ᴿ [D f](a)` for the Jacobian call `j` of a recursive call:
    /// `[sufrevpass f] (r, (a, tape, position))`; with `acc` (a
    /// contribution or none per parameter of f),
    /// `[sufrevacc f] (r, (a, tape, position), acc)`, a zero where there is
    /// none.
    pub fn rev_call(
        &self,
        b: &mut Builder,
        src: &Body,
        j: ExprId,
        r: &(String, Type),
        acc: Option<&[Option<(String, Type)>]>,
    ) -> Option<ExprId> {
        let site = self.jacobians.get(&j)?;
        let Expr::Call(_, a) = src.exprs[j].clone() else { return None };
        let ds = self.s_ty.tangent()?;
        let a_expr = a;
        let a = crate::apply::import(b, src, a);
        let tape = b.var(&self.tape.0, self.tape.1.clone());
        let p = self.position(b, site);
        let res = b.tuple(vec![a, tape, p]);
        let rv = b.var(&r.0, r.1.clone());
        let Some(acc) = acc else {
            return Some(b.call(self.f.derived(Derivation::SufRevPass), vec![rv, res], ds));
        };
        // The accumulator: each given contribution, else the zero of the
        // argument's part.
        let n = acc.len();
        let mut parts = Vec::with_capacity(n);
        for (i, c) in acc.iter().enumerate() {
            parts.push(match c {
                Some((c, t)) => b.var(c, t.clone()),
                None => {
                    let w = crate::apply::import(b, src, a_expr);
                    let w =
                        if n == 1 { w } else { b.prim(Prim::Get { index: i as u32 + 1, arity: n as u32 }, vec![w]) };
                    b.zero_tangent(w)
                }
            });
        }
        let acc = if n == 1 { parts.pop()? } else { b.tuple(parts) };
        Some(b.call(self.f.derived(Derivation::SufRevAcc), vec![rv, res, acc], ds))
    }
}

/// Copies the primal expression `x` of `src`, reading the results of the
/// recursive calls from the tape: the hook of reverse mode's copies. A
/// fold whose step calls f counts its iterations ([`counted`]).
pub(crate) fn read_hook(tape: &RevTape, src: &Body, b: &mut Builder, x: ExprId) -> Option<ExprId> {
    if let Some(r) = tape.read(b, x) {
        return Some(r);
    }
    if !tape.folds.contains(&x) {
        return None;
    }
    let (p @ (Prim::Fold | Prim::Scan), args) = prim_call(src, x)? else { return None };
    let Expr::Lam(t, tty, step) = src.exprs[args[0]].clone() else { return None };
    let copy = |b: &mut Builder, y: ExprId| {
        crate::apply::import_hooked(b, src, y, &strip_type, Some(&|b: &mut Builder, z| read_hook(tape, src, b, z)))
    };
    let (a, v) = (copy(b, args[1]), copy(b, args[2]));
    let run = counted(b, p, (&t, &strip_type(&tty)), a, v, &mut |b, it| tape.in_step(x, it, || copy(b, step)));
    if p == Prim::Fold {
        return Some(b.prim(Prim::Get { index: 1, arity: 2 }, vec![run]));
    }
    // A `$scan`'s (accumulator, iteration) pairs, without the iterations.
    Some(b.share(run, "accs", |b, run| {
        let n = {
            let r = b.copy(run);
            b.prim(Prim::Size, vec![r])
        };
        b.build(n, |b, k| {
            let r = b.copy(run);
            let pair = b.prim(Prim::Index, vec![k, r]);
            b.prim(Prim::Get { index: 1, arity: 2 }, vec![pair])
        })
    }))
}

/// `p (λt. step) a v`, for p `fold` or `$scan`, with its iterations
/// counted: `p (λ(w : Tuple (Tuple A Integer) B). let (it (get$2$2
/// (get$1$2 w)) t (tuple (get$1$2 (get$1$2 w)) (get$2$2 w))) (tuple step
/// (add it 1))) (tuple a 0) v`, whose accumulators are (accumulator,
/// iteration) pairs; `step(b, it)` writes the step's body.
pub(crate) fn counted(
    b: &mut Builder,
    p: Prim,
    (t, tty): (&str, &Type),
    a: ExprId,
    v: ExprId,
    step: &mut dyn FnMut(&mut Builder, &str) -> ExprId,
) -> ExprId {
    let Type::Tuple(ab) = tty else { unreachable!("a fold's step over a non-pair") };
    let acc_ty = Type::Tuple(vec![ab[0].clone(), Type::Integer]);
    let w_ty = Type::Tuple(vec![acc_ty, ab[1].clone()]);
    let w = b.fresh_name("w");
    let it = b.fresh_name("it");
    let get = |b: &mut Builder, e: ExprId, i: u32| b.prim(Prim::Get { index: i, arity: 2 }, vec![e]);
    let body = step(b, &it);
    let (iv, one) = (b.var(&it, Type::Integer), b.integer(1));
    let next = b.int_op("add", iv, one);
    let out = b.tuple(vec![body, next]);
    let tv = b.step_param(&w, &w_ty, 1, 2);
    let out = b.let_(t, tv, out);
    let wv = b.var(&w, w_ty.clone());
    let acc = get(b, wv, 1);
    let itv = get(b, acc, 2);
    let out = b.let_(&it, itv, out);
    let lam = b.lam(&w, w_ty, out);
    let zero = b.integer(0);
    let init = b.tuple(vec![a, zero]);
    b.prim(p, vec![lam, init, v])
}

/// Does the cotangent of f's argument hold a tensor (so that its reverse
/// pass has an accumulating variant, `[sufrevacc f]`)?
pub fn accumulates(s: &Type) -> bool {
    s.tangent().is_some_and(|t| t.holds_tensor())
}

/// `[sufrevpass [f S]]` from `[D f]` (see the module's documentation), or
/// with `acc` `[sufrevacc [f S]]`, whose third parameter is an
/// accumulator: the transposition starts from it ([`crate::rev`]).
pub fn sufrevpass_def(
    f: &Def,
    d: &Def,
    witnesses: &Witnesses,
    plan: &Plan,
    demands: &mut Vec<FunName>,
    acc: bool,
) -> R<Def> {
    let s_ty = f.arg_ty();
    let t_ty = f.ret_ty.clone();
    let no_tangent = |t: &Type| AdError { message: format!("`{t}` has no tangent"), at: None };
    let ds_ty = s_ty.tangent().ok_or_else(|| no_tangent(&s_ty))?;
    let dt_ty = t_ty.tangent().ok_or_else(|| no_tangent(&t_ty))?;
    let res_ty = Type::residuals(&s_ty, &t_ty);
    let tape_ty = Type::tape(&t_ty);
    let mut body = Body::new();
    let mut fresh = crate::apply::fresh_start(f, d);
    let mut b = Builder::new(&mut body, &mut fresh);
    let (dr_name, res_name) = (param_name("dr", f), param_name("res", f));
    let (x_name, tape_name, pos_name, kids_name) =
        (param_name("x", f), param_name("tape", f), param_name("pos", f), param_name("kids", f));
    let tape = Rc::new(RevTape::new(f, (tape_name.clone(), tape_ty.clone()), kids_name.clone(), plan));
    let seed = (dr_name.clone(), dt_ty.clone());
    let acc_param = acc.then(|| (param_name("acc", f), ds_ty.clone()));
    let inner = crate::rev::transpose_program(
        &mut b,
        &d.body,
        d.root,
        witnesses,
        demands,
        &s_ty,
        &f.params,
        seed,
        Some(tape),
        acc_param.clone(),
    )?;
    demands.push(f.name.derived(Derivation::SufRevPass));
    // kids = get$2$2 (index pos tape)
    let (pv, tv) = (b.var(&pos_name, Type::Integer), b.var(&tape_name, tape_ty.clone()));
    let record = b.prim(Prim::Index, vec![pv, tv]);
    let kids = b.prim(Prim::Get { index: 2, arity: 2 }, vec![record]);
    let inner = if plan.is_recursive() { b.let_(&kids_name, kids, inner) } else { inner };
    let inner = bind_params(&mut b, &f.params, &x_name, &s_ty, inner);
    let rv = b.var(&res_name, res_ty.clone());
    let ty = b.ty(inner);
    let root = b.body.alloc_typed(Expr::Let(Pat::Tuple(vec![x_name, tape_name, pos_name]), rv, inner), ty);
    let mut params = vec![Param { name: dr_name, ty: dt_ty }, Param { name: res_name, ty: res_ty }];
    let name = match acc_param {
        Some((name, ty)) => {
            params.push(Param { name, ty });
            f.name.derived(Derivation::SufRevAcc)
        }
        None => f.name.derived(Derivation::SufRevPass),
    };
    checked_def(name, params, ds_ty, body, root)
}

use crate::derive::AdError;

/// `[suffwdpass f] x = let (y, tape) = [suffwdtape f] (x, empty) in (y,
/// (x, tape, size tape - 1))`: the last record is this call's.
pub fn suffwdpass_def(f: &FunName, s: &Type, t: &Type) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let tape_ty = Type::tape(t);
    let x = b.var("ksc$x", s.clone());
    let empty = empty_tape(&mut b, t);
    let pair_ty = Type::Tuple(vec![t.clone(), tape_ty.clone()]);
    let call = b.call(f.derived(Derivation::SufFwdTape), vec![x, empty], pair_ty.clone());
    let pv = b.var("ksc$run", pair_ty.clone());
    let y = b.prim(Prim::Get { index: 1, arity: 2 }, vec![pv]);
    let x2 = b.var("ksc$x", s.clone());
    let tv = b.var("ksc$tape", tape_ty.clone());
    let tv2 = b.var("ksc$tape", tape_ty.clone());
    let size = b.prim(Prim::Size, vec![tv2]);
    let pos = sub_one(&mut b, size);
    let res = b.tuple(vec![x2, tv, pos]);
    let out = b.tuple(vec![y, res]);
    let pv = b.var("ksc$run", pair_ty);
    let tape = b.prim(Prim::Get { index: 2, arity: 2 }, vec![pv]);
    let out = b.let_("ksc$tape", tape, out);
    let root = b.let_("ksc$run", call, out);
    let ret = b.ty(root);
    Def {
        name: f.derived(Derivation::SufFwdPass),
        params: vec![Param { name: "ksc$x".into(), ty: s.clone() }],
        ret_ty: ret,
        body,
        root,
    }
}

/// `[rev f] (x, dr) = [sufrevpass f] (dr, get$2$2 ([suffwdpass f] x))`.
pub fn rev_by_passes(f: &FunName, s: &Type, t: &Type) -> R<Def> {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let no_tangent = |t: &Type| AdError { message: format!("`{t}` has no tangent"), at: None };
    let ds = s.tangent().ok_or_else(|| no_tangent(s))?;
    let dt = t.tangent().ok_or_else(|| no_tangent(t))?;
    let res_ty = Type::residuals(s, t);
    let x = b.var("ksc$x", s.clone());
    let fwd = b.call(f.derived(Derivation::SufFwdPass), vec![x], Type::Tuple(vec![t.clone(), res_ty.clone()]));
    let res = b.prim(Prim::Get { index: 2, arity: 2 }, vec![fwd]);
    let dr = b.var("ksc$dr", dt.clone());
    let root = b.call(f.derived(Derivation::SufRevPass), vec![dr, res], ds.clone());
    Ok(Def {
        name: f.derived(Derivation::Rev),
        params: vec![Param { name: "ksc$x".into(), ty: s.clone() }, Param { name: "ksc$dr".into(), ty: dt }],
        ret_ty: ds,
        body,
        root,
    })
}

/// The split passes of a function whose recursive calls are not taped
/// (some are inside a lambda): the argument and an empty tape are the
/// residuals, and the reverse pass is `[rev f]` at the argument.
pub fn checkpoint_passes(d: Derivation, f: &FunName, s: &Type, t: &Type) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let dt = t.tangent().unwrap_or(Type::Unknown);
    let ds = s.tangent().unwrap_or(Type::Unknown);
    let res_ty = Type::residuals(s, t);
    match d {
        Derivation::SufFwdPass => {
            let x = b.var("ksc$x", s.clone());
            let y = b.call(f.clone(), vec![x], t.clone());
            let x2 = b.var("ksc$x", s.clone());
            let empty = empty_tape(&mut b, t);
            let none = b.integer(-1);
            let res = b.tuple(vec![x2, empty, none]);
            let root = b.tuple(vec![y, res]);
            let ret = b.ty(root);
            Def {
                name: f.derived(d),
                params: vec![Param { name: "ksc$x".into(), ty: s.clone() }],
                ret_ty: ret,
                body,
                root,
            }
        }
        _ => {
            let res = b.var("ksc$res", res_ty.clone());
            let x = b.prim(Prim::Get { index: 1, arity: 3 }, vec![res]);
            let r = b.var("ksc$dr", dt.clone());
            let root = b.call(f.derived(Derivation::Rev), vec![x, r], ds.clone());
            Def {
                name: f.derived(Derivation::SufRevPass),
                params: vec![Param { name: "ksc$dr".into(), ty: dt }, Param { name: "ksc$res".into(), ty: res_ty }],
                ret_ty: ds,
                body,
                root,
            }
        }
    }
}
