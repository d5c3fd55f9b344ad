//! Values that two loops over the same range both compute, computed once.
//!
//! Reverse mode makes this pattern everywhere: the primal `build n (lam i
//! ..)` of a loop, and later the loop of its cotangents over the same `n`
//! (`build`, `sumbuild` or `$buildSum`), which recomputes the primal values
//! the derivative needs (`qtimesx` of GMM's cluster, in both). On a body in
//! A-normal form, for a `let x = build n (lam i B1)` followed in the same
//! chain of lets by a loop over `n` whose body `B2` has a let whose right
//! side has the same value as a let of `B1` (equal up to the index and the
//! loop's own lets, by value numbering) and costs something (a call other
//! than arithmetic of scalars, or a loop, without effect), the first loop
//! also returns that value:
//!
//! ```text
//! let ((x s) (unzip (build n (lam i (let (.. (v e) ..) (tuple r v))))))
//! ..
//! loop n (lam j (let (.. (w (index j s)) ..) ..))
//! ```
//!
//! The first loop may also be a `sumbuild` of Floats, whose terms count as
//! values too (log-sum-exp's `exp`, summed and then read again by the
//! cotangents):
//!
//! ```text
//! let ((s x) (if (eq n 0) (tuple $dummy (sumbuild n ..))
//!                ($buildSum n -0.0 (lam i (let (.. (v e) ..) (tuple v r))))))
//! ```
//!
//! (-0.0 + t is t, so the sum is exactly the sumbuild's; an empty range
//! still runs the sumbuild, which fails as before.)
//!
//! Both lets are at the top of their loop bodies, so `B1` computed the
//! value unconditionally; the free variables it reads outside the loops are
//! not bound again between them. It costs memory (n values) to save their
//! recomputation.
//!
//! When the first loop already returns values (an earlier sharing stored
//! them, and a later `unzip` takes them apart), a later loop reads those
//! vectors instead of storing the values again.
//!
//! Forward mode makes the same pattern the other way round: the primal
//! loop calls `g a`, and the later loop of the tangents calls `[fwdt g] (a,
//! da)`, whose first component is `g a` (value numbering knows it). Such a
//! later loop, which has the value cheaply (a projection) where the earlier
//! one computes it at a cost, moves up before the earlier one when nothing
//! it reads is bound, and nothing has an effect, in between; it is then
//! the first loop above.

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, children, same_size, wrap, Cache};
use ksc_ir::{Body, Callee, Derivation, Expr, ExprId, FunName, Pat, Prim, Type, Var};

use crate::cse::{key_with, Key, Tok};
use crate::globals::Globals;

/// A loop over `0 .. size` with an Integer index: its size, its index and
/// its body.
pub(crate) fn loop_parts(body: &Body, e: ExprId, first: bool) -> Option<(ExprId, Var, ExprId)> {
    let Expr::Call(Callee::Prim(p), arg) = &body.exprs[e] else { return None };
    let ok = if first {
        *p == Prim::Build || (*p == Prim::Sumbuild && *body.ty(e) == Type::Float)
    } else {
        matches!(p, Prim::Build | Prim::Sumbuild | Prim::BuildSum)
    };
    if !ok {
        return None;
    }
    let Expr::Tuple(parts) = &body.exprs[*arg] else { return None };
    let (&size, &lam) = (parts.first()?, parts.last()?);
    match &body.exprs[lam] {
        Expr::Lam(i, Type::Integer, b) => Some((size, i.clone(), *b)),
        _ => None,
    }
}

/// The lets of the chain at `e` (node, pattern, right side) and its result.
pub(crate) fn chain(body: &Body, mut e: ExprId) -> (Vec<(ExprId, Pat, ExprId)>, ExprId) {
    let mut out = Vec::new();
    while let Expr::Let(p, r, next) = &body.exprs[e] {
        out.push((e, p.clone(), *r));
        e = *next;
    }
    (out, e)
}

/// Value numbers of a loop body's lets: keys of their right sides with the
/// index and the variables of earlier lets written as tokens, numbered in
/// `ids` (shared between the bodies compared).
fn numbers(body: &Body, lets: &[(ExprId, Pat, ExprId)], index: &Var, ids: &mut FxHashMap<Key, u32>) -> Vec<u32> {
    numbering(body, lets, index, ids).0
}

/// [`numbers`], and the token of each variable the lets bind.
///
/// Forward mode computes a callee's value and tangent with one call, `p =
/// [fwdt g] (a, da)`, and reads the value as `get$1$2 p`: that value is
/// numbered as `g a` is (with `a` the tuple a variable is bound to, as in a
/// call's literal argument tuple), so a loop that calls `g a` itself can
/// read it from the one that calls `[fwdt g]`.
fn numbering(
    body: &Body,
    lets: &[(ExprId, Pat, ExprId)],
    index: &Var,
    ids: &mut FxHashMap<Key, u32>,
) -> (Vec<u32>, FxHashMap<Var, u32>) {
    numbering_with(body, lets, index, ids, &FxHashMap::default())
}

/// [`numbering`], where a let `x = index i v` (i the index) with `v` in
/// `known` gets the token `known[v]` (an element of a vector the first
/// loop returns: the token of its let there).
fn numbering_with(
    body: &Body,
    lets: &[(ExprId, Pat, ExprId)],
    index: &Var,
    ids: &mut FxHashMap<Key, u32>,
    known: &FxHashMap<Var, u32>,
) -> (Vec<u32>, FxHashMap<Var, u32>) {
    let mut names: FxHashMap<Var, u32> = FxHashMap::default();
    // Variables bound to a `[fwdt g] (a, da)` (g and a), and to a tuple.
    let mut pairs: FxHashMap<&Var, (FunName, ExprId)> = FxHashMap::default();
    let mut tuples: FxHashMap<&Var, ExprId> = FxHashMap::default();
    let mut out = Vec::new();
    for (_, p, r) in lets {
        if let (Pat::Var(x), Some(t)) = (p, known_read(body, *r, index, known)) {
            names.insert(x.clone(), t);
            out.push(u32::MAX);
            continue;
        }
        let token = |v: &Var| {
            if v == index {
                Tok::Node(200, 0)
            } else if let Some(&t) = names.get(v) {
                Tok::Node(201, t)
            } else {
                Tok::Free(v.clone())
            }
        };
        let key = match value_of_pair(body, *r, &pairs) {
            Some((g, a)) => {
                let a = match &body.exprs[a] {
                    Expr::Var(v) => tuples.get(v).copied().unwrap_or(a),
                    _ => a,
                };
                let mut key = vec![Tok::Node(1, 0), Tok::Fun(g.clone())];
                key.extend(key_with(body, a, &token));
                key
            }
            None => key_with(body, *r, &token),
        };
        let next = ids.len() as u32;
        let id = *ids.entry(key).or_insert(next);
        match p {
            Pat::Var(v) => {
                names.insert(v.clone(), id * 64);
                match &body.exprs[*r] {
                    Expr::Tuple(_) => {
                        tuples.insert(v, *r);
                    }
                    Expr::Call(Callee::Fun(h), arg) => {
                        if let (Some((Derivation::FwdT, g)), Expr::Tuple(xs)) = (h.inner(), &body.exprs[*arg]) {
                            if let [a, _] = xs[..] {
                                pairs.insert(v, (g, a));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Pat::Tuple(vs) => {
                for (c, v) in vs.iter().enumerate() {
                    names.insert(v.clone(), id * 64 + 1 + c as u32);
                }
            }
        }
        out.push(id);
    }
    (out, names)
}

/// `known[v]` if `r` is `index i v` with `i` the loop's index.
fn known_read(body: &Body, r: ExprId, index: &Var, known: &FxHashMap<Var, u32>) -> Option<u32> {
    let [i, v] = ksc_ir::builder::call_of(body, r, Prim::Index)?[..] else { return None };
    (term::var_name(body, i)? == index).then_some(())?;
    known.get(term::var_name(body, v)?).copied()
}

/// `(g, a)` if `r` is `get$1$2 p` with `p` bound to `[fwdt g] (a, da)`.
fn value_of_pair<'p>(
    body: &Body,
    r: ExprId,
    pairs: &'p FxHashMap<&Var, (FunName, ExprId)>,
) -> Option<(&'p FunName, ExprId)> {
    let Expr::Call(Callee::Prim(Prim::Get { index: 1, arity: 2 }), arg) = &body.exprs[r] else { return None };
    let Expr::Var(p) = &body.exprs[*arg] else { return None };
    pairs.get(p).map(|(g, a)| (g, *a))
}

/// Does computing `r` cost something worth storing: a call of a function
/// other than elementary arithmetic, or a loop?
pub fn costly(body: &Body, r: ExprId) -> bool {
    match &body.exprs[r] {
        Expr::Call(Callee::Fun(f), _) => !elementary(f),
        Expr::Call(Callee::Prim(p), _) => matches!(
            p,
            Prim::Build
                | Prim::Sumbuild
                | Prim::Fold
                | Prim::BuildSum
                | Prim::Scan
                | Prim::ScanSum
                | Prim::ScanBlocks
                | Prim::Map
                | Prim::Map2
        ),
        _ => false,
    }
}

/// Arithmetic and comparisons of scalars: cheaper to redo than to store in
/// a vector and load back (`exp`, `tanh` and the like are not).
fn elementary(f: &ksc_ir::FunName) -> bool {
    const NAMES: [&str; 15] =
        ["add", "sub", "mul", "div", "neg", "abs", "max", "min", "to_float", "eq", "ne", "lt", "gt", "lte", "gte"];
    let scalar = |t: &Type| matches!(t, Type::Float | Type::Integer | Type::Bool);
    let scalars = |t: &Type| match t {
        Type::Tuple(ts) => ts.iter().all(scalar),
        t => scalar(t),
    };
    f.derivs.is_empty() && NAMES.contains(&f.base.as_str()) && f.base_ty.as_ref().is_some_and(scalars)
}

/// Shares the values loops of the A-normal-form tree at `root` compute
/// twice (see the module); returns how many it shared. Nodes are changed
/// in place (run the optimiser afterwards: it removes what became dead).
pub fn share_loop_values(b: &mut Builder, globals: &Globals, root: ExprId) -> usize {
    name_pair_values(b, root);
    let mut shared = 0;
    for head in chain_heads(b.body, root).into_iter().rev() {
        while hoist_provider(b, globals, head) {}
        shared += share_in_chain(b, globals, head);
    }
    shared
}

/// The lets of a consumer loop's body (its index `ci`, its lets and
/// result) that have the value of a let of a provider loop's body (its lets
/// and index `pi`), both binding a variable, and cost something, without
/// effect, and whose value the consumer still needs once the later ones
/// are read from the provider: (the consumer's let node, the position of
/// the provider's let).
fn common_values(
    body: &Body,
    globals: &Globals,
    cache: &mut Cache,
    (provider, pi): (&[(ExprId, Pat, ExprId)], &Var),
    (consumer, ci, result): (&[(ExprId, Pat, ExprId)], &Var, ExprId),
) -> Vec<(ExprId, usize)> {
    let mut ids: FxHashMap<Key, u32> = FxHashMap::default();
    let mut by_vn: FxHashMap<u32, usize> = FxHashMap::default();
    for (k, vn) in numbers(body, provider, pi, &mut ids).into_iter().enumerate() {
        by_vn.entry(vn).or_insert(k);
    }
    let vn2 = numbers(body, consumer, ci, &mut ids);
    let mut needed: FxHashSet<Var> = cache.free_vars(body, result).iter().cloned().collect();
    let mut out = Vec::new();
    for ((node, p, r), vn) in consumer.iter().zip(vn2).rev() {
        let effect = cache.has_effect(body, globals, *r);
        if !effect && !p.vars().iter().any(|v| needed.contains(v)) {
            continue;
        }
        if let Some(&k) = by_vn.get(&vn) {
            if matches!(p, Pat::Var(_)) && matches!(provider[k].1, Pat::Var(_)) && costly(body, *r) && !effect {
                out.push((*node, k));
                continue;
            }
        }
        needed.extend(cache.free_vars(body, *r).iter().cloned());
    }
    out.reverse();
    out
}

/// Names the value of every `p = [fwdt g] (a, da)` of a chain of lets,
/// `let v = get$1$2 p` after it, so that [`share_in_chain`] can store it
/// (the optimiser removes the lets that stay unread).
fn name_pair_values(b: &mut Builder, root: ExprId) {
    for head in chain_heads(b.body, root) {
        let (lets, _) = chain(b.body, head);
        for (node, p, r) in lets {
            let (Pat::Var(pv), Expr::Call(Callee::Fun(h), _)) = (&p, &b.body.exprs[r]) else { continue };
            if !matches!(h.inner(), Some((Derivation::FwdT, _))) {
                continue;
            }
            let Expr::Let(_, _, next) = b.body.exprs[node].clone() else { unreachable!("a let") };
            let pair_ty = b.ty(r);
            let v = b.fresh_name("value");
            let pair = b.var(pv, pair_ty);
            let get = b.prim(Prim::Get { index: 1, arity: 2 }, vec![pair]);
            let ty = b.ty(next);
            let named = b.body.alloc_typed(Expr::Let(Pat::Var(v), get, next), ty);
            b.body.exprs[node] = Expr::Let(p, r, named);
        }
    }
}

/// Moves a loop of the chain at `head` up to just before an earlier loop
/// over the same size that computes at a cost a value the moved loop has
/// cheaply (not costly to it: a projection), when it has no effect and, in
/// between, nothing it reads is bound and nothing has an effect. That is
/// forward mode's tangent loop, whose `[fwdt g] (a, da)` calls give `g a`,
/// which the primal loop before it computes again; moved, it is the first
/// loop that [`share_in_chain`] stores values of. Whether a loop moved.
fn hoist_provider(b: &mut Builder, globals: &Globals, head: ExprId) -> bool {
    let (lets, _) = chain(b.body, head);
    let mut cache = Cache::new();
    for (k2, (node2, p2, r2)) in lets.iter().enumerate() {
        let Some((size2, i2, body2)) = loop_parts(b.body, *r2, true) else { continue };
        if !matches!(p2, Pat::Var(_)) || cache.has_effect(b.body, globals, *r2) {
            continue;
        }
        let free2 = cache.free_vars(b.body, *r2);
        let (lets2, _) = chain(b.body, body2);
        for (node1, p1, r1) in lets[..k2].iter().rev() {
            // Not above what it reads, nor above an effect (a `print`
            // before a loop that fails must still print).
            if p1.vars().iter().any(|v| free2.contains(v)) || cache.has_effect(b.body, globals, *r1) {
                break;
            }
            let Some((size1, i1, body1)) = loop_parts(b.body, *r1, false) else { continue };
            if !same_size(b.body, size1, size2) {
                continue;
            }
            let (lets1, result1) = chain(b.body, body1);
            let found = common_values(b.body, globals, &mut cache, (&lets2, &i2), (&lets1, &i1, result1));
            if !found.iter().any(|&(_, k)| !costly(b.body, lets2[k].2)) {
                continue;
            }
            // The loop's let becomes its continuation; the loop is bound
            // just before the earlier one.
            let Expr::Let(_, _, rest2) = b.body.exprs[*node2].clone() else { unreachable!("a let") };
            b.body.exprs[*node2] = b.body.exprs[rest2].clone();
            let ty = b.ty(*node1);
            let moved = b.body.alloc_typed(b.body.exprs[*node1].clone(), ty.clone());
            b.body.exprs[*node1] = Expr::Let(p2.clone(), *r2, moved);
            return true;
        }
    }
    false
}

/// The heads of let chains, outer ones first.
pub(crate) fn chain_heads(body: &Body, root: ExprId) -> Vec<ExprId> {
    let mut heads = Vec::new();
    let mut stack = vec![(root, false)];
    while let Some((e, in_chain)) = stack.pop() {
        let node = &body.exprs[e];
        if let Expr::Let(_, r, next) = node {
            if !in_chain {
                heads.push(e);
            }
            stack.push((*r, false));
            stack.push((*next, true));
            continue;
        }
        stack.extend(children(node).into_iter().map(|c| (c, false)));
    }
    heads
}

/// Folds whose accumulators a `$scan` of the same chain of lets also
/// computes, read from it: reverse mode of `fold` stores the accumulators
/// with `$scan f a v`, and the primal still computes `fold f a v` (for its
/// value, or only for the shape of a zero cotangent). In A-normal form, for
/// `let x = fold f a v` and `let s = $scan f' a' v'` in one chain that binds
/// no name twice, whose arguments have the same value (alpha-equal, with
/// the chain's variables compared by value number), neither with an effect,
/// `x` becomes the last accumulator, `index (sub (size s) 1) s`. A scan
/// after the fold moves up to just before it, taking the fold's arguments
/// (which are in scope there). Returns how many folds were replaced.
pub fn folds_from_scans(b: &mut Builder, globals: &Globals, root: ExprId) -> usize {
    let mut replaced = 0;
    for head in chain_heads(b.body, root).into_iter().rev() {
        while fold_from_scan(b, globals, head) {
            replaced += 1;
        }
    }
    replaced
}

/// One fold of the chain at `head` read from a scan; whether there was one.
fn fold_from_scan(b: &mut Builder, globals: &Globals, head: ExprId) -> bool {
    let (lets, _) = chain(b.body, head);
    let mut bound: Vec<&Var> = lets.iter().flat_map(|(_, p, _)| p.vars()).collect();
    let n = bound.len();
    bound.sort();
    bound.dedup();
    if bound.len() != n {
        return false;
    }
    let mut ids = FxHashMap::default();
    let (_, names) = numbering(b.body, &lets, &Var::new(), &mut ids);
    let key = |body: &Body, e: ExprId| {
        key_with(body, e, &|v| names.get(v).map_or_else(|| Tok::Free(v.clone()), |&t| Tok::Node(201, t)))
    };
    let args_of = |body: &Body, r: ExprId, p: Prim| match &body.exprs[r] {
        Expr::Call(Callee::Prim(q), a) if *q == p => Some(*a),
        _ => None,
    };
    let mut cache = Cache::new();
    for (kf, (node_f, pat_f, rhs_f)) in lets.iter().enumerate() {
        let Some(args_f) = args_of(b.body, *rhs_f, Prim::Fold) else { continue };
        if cache.has_effect(b.body, globals, *rhs_f) {
            continue;
        }
        let key_f = key(b.body, args_f);
        let found = lets.iter().enumerate().find(|(_, (_, pat_s, rhs_s))| {
            matches!(pat_s, Pat::Var(_)) && args_of(b.body, *rhs_s, Prim::Scan).is_some_and(|a| key(b.body, a) == key_f)
        });
        let Some((ks, (node_s, pat_s, rhs_s))) = found else { continue };
        let Pat::Var(s) = pat_s.clone() else { unreachable!("a variable") };
        let Expr::Let(_, _, rest_f) = b.body.exprs[*node_f].clone() else { unreachable!("a let") };
        let scan_ty = b.ty(*rhs_s);
        let (sv, sv2) = (b.var(&s, scan_ty.clone()), b.var(&s, scan_ty.clone()));
        let size = b.prim(Prim::Size, vec![sv]);
        let one = b.integer(1);
        let at = b.int_op("sub", size, one);
        let read = b.prim(Prim::Index, vec![at, sv2]);
        if ks < kf {
            b.body.exprs[*node_f] = Expr::Let(pat_f.clone(), read, rest_f);
        } else {
            // The scan's let becomes its continuation, and the scan of the
            // fold's arguments is bound just before the fold's let.
            let Expr::Let(_, _, rest_s) = b.body.exprs[*node_s].clone() else { unreachable!("a let") };
            b.body.exprs[*node_s] = b.body.exprs[rest_s].clone();
            let ty = b.ty(*node_f);
            let fold_let = b.body.alloc_typed(Expr::Let(pat_f.clone(), read, rest_f), ty);
            let scan = b.body.alloc_typed(Expr::Call(Callee::Prim(Prim::Scan), args_f), scan_ty);
            b.body.exprs[*node_f] = Expr::Let(Pat::Var(s), scan, fold_let);
        }
        return true;
    }
    false
}

/// The let at `node` reads its value from element `i` of the stored
/// vector `vector` (of type `vec_ty`), or from component `get` (index,
/// arity) of that element.
pub(crate) fn read_stored(
    b: &mut Builder,
    node: ExprId,
    i: &Var,
    (vector, vec_ty): (&Var, Type),
    get: Option<(u32, u32)>,
) {
    let Expr::Let(p, _, rest) = b.body.exprs[node].clone() else { unreachable!("a let") };
    let iv = b.var(i, Type::Integer);
    let sv = b.var(vector, vec_ty);
    let mut read = b.prim(Prim::Index, vec![iv, sv]);
    if let Some((index, arity)) = get {
        read = b.prim(Prim::Get { index, arity }, vec![read]);
    }
    b.body.exprs[node] = Expr::Let(p, read, rest);
}

fn share_in_chain(b: &mut Builder, globals: &Globals, head: ExprId) -> usize {
    let mut shared = 0;
    let (outer, _) = chain(b.body, head);
    let mut cache = Cache::new();
    for (k1, (node1, p1, r1)) in outer.iter().enumerate() {
        let Pat::Var(x1) = p1 else { continue };
        let Some((size1, i1, body1)) = loop_parts(b.body, *r1, true) else { continue };
        let size_var = match &b.body.exprs[size1] {
            Expr::Var(v) => Some(v.clone()),
            Expr::Lit(_) => None,
            _ => continue,
        };
        let summed = matches!(&b.body.exprs[*r1], Expr::Call(Callee::Prim(Prim::Sumbuild), _));
        let (mut lets1, mut result1) = chain(b.body, body1);
        // Values the loop already returns (an earlier sharing stored them):
        // its result is a tuple of variables, taken apart by an `unzip` of
        // x1 later in the chain. By variable: that let's position and the
        // name of the component.
        let mut returned: FxHashMap<Var, (usize, Var)> = FxHashMap::default();
        if let Expr::Tuple(es) = &b.body.exprs[result1] {
            let unzip =
                outer.iter().enumerate().skip(k1 + 1).find_map(|(ku, (_, p, r))| match (p, &b.body.exprs[*r]) {
                    (Pat::Tuple(ns), Expr::Call(Callee::Prim(Prim::Unzip), a))
                        if matches!(&b.body.exprs[*a], Expr::Var(v) if v == x1) && ns.len() == es.len() =>
                    {
                        Some((ku, ns.clone()))
                    }
                    _ => None,
                });
            if let Some((ku, ns)) = unzip {
                for (e, n) in es.iter().zip(ns) {
                    if let Expr::Var(v) = &b.body.exprs[*e] {
                        returned.entry(v.clone()).or_insert((ku, n));
                    }
                }
            }
        }
        shared += same_vectors(b, &outer, (k1, size1, &i1, body1), &returned);
        if !term::is_atomic(b.body, result1) {
            // The result is a value too (a sum's term): as if let-bound.
            let v = b.fresh_name("r");
            let ty = b.ty(result1);
            lets1.push((result1, Pat::Var(v.clone()), result1));
            result1 = b.var(&v, ty);
        }
        // The free variables B1's lets read from outside.
        let free1: Vec<Var> = {
            let mut vs: Vec<Var> = Vec::new();
            for (_, _, r) in &lets1 {
                vs.extend(cache.free_vars(b.body, *r).iter().cloned());
            }
            vs
        };
        // Later loops over the same size, while nothing B1 reads is rebound.
        let mut stores: Vec<usize> = Vec::new();
        let mut replace: Vec<(ExprId, usize, Var)> = Vec::new();
        // Reads of a vector the loop already returns: (let, vector, index).
        let mut reads: Vec<(ExprId, Var, Var)> = Vec::new();
        for (k2, (_, p2, r2)) in outer.iter().enumerate().skip(k1 + 1) {
            if let Some((size2, i2, body2)) = loop_parts(b.body, *r2, false) {
                if same_size(b.body, size1, size2) {
                    let (_, result2) = chain(b.body, body2);
                    if costly(b.body, result2) {
                        // Its result is a value too: bound to a variable, it
                        // can be read like its lets.
                        let ty = b.ty(result2);
                        let v = b.fresh_name("r");
                        let value = b.body.alloc_typed(b.body.exprs[result2].clone(), ty.clone());
                        let read = b.var(&v, ty);
                        b.body.exprs[result2] = Expr::Let(Pat::Var(v), value, read);
                        cache = Cache::new();
                    }
                    let (lets2, result2) = chain(b.body, body2);
                    for (n2, k) in common_values(b.body, globals, &mut cache, (&lets1, &i1), (&lets2, &i2, result2)) {
                        let Pat::Var(v) = &lets1[k].1 else { unreachable!("variables only") };
                        if let Some((_, name)) = returned.get(v).filter(|(ku, _)| *ku < k2) {
                            reads.push((n2, name.clone(), i2.clone()));
                            continue;
                        }
                        let at = stores.iter().position(|&s| s == k).unwrap_or_else(|| {
                            stores.push(k);
                            stores.len() - 1
                        });
                        replace.push((n2, at, i2.clone()));
                    }
                }
            }
            // A rebinding of what B1 reads (or of the size) ends the search.
            if p2.vars().iter().any(|v| free1.contains(v) || Some(v) == size_var.as_ref() || v == x1) {
                break;
            }
        }
        for (n2, name, i2) in reads {
            let Expr::Let(_, r, _) = &b.body.exprs[n2] else { unreachable!("a let") };
            let ty = b.ty(*r);
            read_stored(b, n2, &i2, (&name, Type::vec(ty)), None);
            shared += 1;
        }
        if stores.is_empty() {
            cache = Cache::new();
            continue;
        }
        // The first loop returns the stored values too.
        // A summed loop keeps its values in one vector (of tuples, for
        // several); a built one in a vector each.
        let names: Vec<Var> =
            if summed { vec![b.fresh_name("stored")] } else { stores.iter().map(|_| b.fresh_name("stored")).collect() };
        let mut stored = Vec::new();
        let mut tys = Vec::new();
        for &k in &stores {
            let Pat::Var(v) = &lets1[k].1 else { unreachable!("variables only") };
            let ty = b.ty(lets1[k].2);
            stored.push(b.var(v, ty.clone()));
            tys.push(ty);
        }
        let Expr::Let(_, _, rest1) = b.body.exprs[*node1].clone() else { unreachable!("a let") };
        let lets = lets1.iter().map(|(_, p, r)| (p.clone(), *r)).collect();
        if summed {
            // `$buildSum n -0.0 (lam i (tuple stored term))`: the stored
            // values and the sum (from -0.0, as sumbuild adds). An empty
            // range still runs the sumbuild, for its error.
            let stored_part = if stored.len() == 1 { stored[0] } else { b.tuple(stored) };
            let pair = b.tuple(vec![stored_part, result1]);
            let new_body = wrap(b, lets, pair);
            let lam = b.lam(&i1, Type::Integer, new_body);
            let zero = b.float(-0.0);
            let both = b.prim(Prim::BuildSum, vec![size1, zero, lam]);
            let Type::Tuple(parts) = b.ty(both) else { unreachable!("a pair") };
            let vec_ty = parts[0].clone();
            let n = b.copy(size1);
            let zero = b.integer(0);
            let empty = b.prim(Prim::Eq, vec![n, zero]);
            let original = term::copy_tree(b.body, None, *r1);
            let none = b.body.alloc_typed(Expr::Dummy(vec_ty.clone()), vec_ty.clone());
            let failing = b.tuple(vec![none, original]);
            let ty = b.ty(both);
            let rhs = b.body.alloc_typed(Expr::If(empty, failing, both), ty);
            b.body.exprs[*node1] = Expr::Let(Pat::Tuple(vec![names[0].clone(), x1.clone()]), rhs, rest1);
        } else {
            let mut parts = vec![result1];
            parts.extend(stored);
            let result = b.tuple(parts);
            let new_body = wrap(b, lets, result);
            let lam = b.lam(&i1, Type::Integer, new_body);
            let build = b.prim(Prim::Build, vec![size1, lam]);
            let unzip = b.prim(Prim::Unzip, vec![build]);
            let mut pat = vec![x1.clone()];
            pat.extend(names.iter().cloned());
            b.body.exprs[*node1] = Expr::Let(Pat::Tuple(pat), unzip, rest1);
        }
        // The later loops read them.
        let k = tys.len() as u32;
        for (n2, at, i2) in replace {
            if summed && k > 1 {
                let vec_ty = Type::vec(Type::Tuple(tys.clone()));
                read_stored(b, n2, &i2, (&names[0], vec_ty), Some((at as u32 + 1, k)));
            } else {
                read_stored(b, n2, &i2, (&names[at], Type::vec(tys[at].clone())), None);
            }
            shared += 1;
        }
        // Nodes changed: what the cache knows of them is stale.
        cache = Cache::new();
    }
    shared
}

/// Later loops that compute, element by element, only vectors a loop of
/// the chain (`outer[k1]`, over `size1` with index `i1` and body `body1`)
/// returns (`returned`: its result's variables, the `unzip` that
/// takes them apart and their names there): reverse mode's extra loop
/// that makes a cell again from the gates the step stored. Such a loop's
/// `unzip` becomes the tuple of those vectors. Returns how many.
fn same_vectors(
    b: &mut Builder,
    outer: &[(ExprId, Pat, ExprId)],
    (k1, size1, i1, body1): (usize, ExprId, &Var, ExprId),
    returned: &FxHashMap<Var, (usize, Var)>,
) -> usize {
    if returned.is_empty() {
        return 0;
    }
    let Some(&ku) = returned.values().map(|(ku, _)| ku).min() else { return 0 };
    let (lets1, _) = chain(b.body, body1);
    // What the first loop reads from outside: equal names are equal values
    // only while none of them is bound again.
    let mut cache = Cache::new();
    let free1: FxHashSet<Var> = lets1.iter().flat_map(|(_, _, r)| cache.free_vars(b.body, *r).to_vec()).collect();
    let mut ids: FxHashMap<Key, u32> = FxHashMap::default();
    let (_, names1) = numbering(b.body, &lets1, i1, &mut ids);
    // The token of each returned vector's element, and back.
    let mut known: FxHashMap<Var, u32> = FxHashMap::default();
    let mut by_token: FxHashMap<u32, Var> = FxHashMap::default();
    for (v, (_, name)) in returned {
        if let Some(&t) = names1.get(v) {
            known.insert(name.clone(), t);
            by_token.entry(t).or_insert_with(|| name.clone());
        }
    }
    let vector_ty = |b: &Builder, name: &Var| -> Option<Type> {
        let (_, Pat::Tuple(ns), r) = &outer[ku] else { return None };
        let Type::Tuple(ts) = b.ty(*r) else { return None };
        ns.iter().position(|n| n == name).map(|c| ts[c].clone())
    };
    let mut found = 0;
    for (k2, (_, p2, r2)) in outer.iter().enumerate().skip(ku + 1) {
        let Pat::Var(x2) = p2 else { continue };
        let Some((size2, i2, body2)) = loop_parts(b.body, *r2, false) else { continue };
        if !matches!(&b.body.exprs[*r2], Expr::Call(Callee::Prim(Prim::Build), _)) || !same_size(b.body, size1, size2) {
            continue;
        }
        let unzip = outer.iter().enumerate().skip(k2 + 1).find_map(|(k, (node, p, r))| match (p, &b.body.exprs[*r]) {
            (Pat::Tuple(ns), Expr::Call(Callee::Prim(Prim::Unzip), a)) if matches!(&b.body.exprs[*a], Expr::Var(v) if v == x2) => {
                Some((k, *node, ns.clone()))
            }
            _ => None,
        });
        let Some((k3, node3, ns3)) = unzip else { continue };
        // The vectors must still be the first loop's where the unzip is.
        let rebound = outer[k1 + 1..k3].iter().any(|(_, p, _)| p.vars().iter().any(|v| free1.contains(v)))
            || outer[ku + 1..k3].iter().any(|(_, p, _)| p.vars().iter().any(|v| known.contains_key(v)));
        let (lets2, result2) = chain(b.body, body2);
        let Expr::Tuple(comps) = b.body.exprs[result2].clone() else { continue };
        if rebound || comps.len() != ns3.len() {
            continue;
        }
        let (_, names2) = numbering_with(b.body, &lets2, &i2, &mut ids, &known);
        let vectors: Option<Vec<Var>> = comps
            .iter()
            .map(|&c| match &b.body.exprs[c] {
                Expr::Var(v) => names2.get(v).and_then(|t| by_token.get(t)).cloned(),
                _ => None,
            })
            .collect();
        let Some(vectors) = vectors else { continue };
        let parts: Option<Vec<ExprId>> = vectors.iter().map(|n| vector_ty(b, n).map(|t| b.var(n, t))).collect();
        let Some(parts) = parts else { continue };
        let tuple = b.tuple(parts);
        let Expr::Let(p3, r3, rest3) = b.body.exprs[node3].clone() else { unreachable!("a let") };
        if b.ty(tuple) != b.ty(r3) {
            continue;
        }
        b.body.exprs[node3] = Expr::Let(p3, tuple, rest3);
        found += 1;
    }
    found
}
