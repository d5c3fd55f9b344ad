//! Values a backward loop computes again from a scan's accumulators,
//! computed by the scan's own steps instead.
//!
//! Reverse mode of `fold` (`rfold` in ksc-ad) stores the accumulators,
//! `accs = $scan (lam u B) a v`, and its backward `$scanSum` visits every
//! step i (last first), computing the step's primal values again from
//! `index i accs` and `index i v` before its cotangents: an LSTM layer's
//! gates, or the layer fold of a step of a fold over time. The step `B`
//! computed them already. Two passes, on A-normal form:
//!
//! 1. [`scan_extras`]: the lets of the backward body that read only
//!    `index i accs`, `index i v` and what is in scope at the scan,
//!    without effect, are computed for every step by a loop right after
//!    the scan, `e = build (size v) (lam j ..)`, which returns the costly
//!    ones (calls, loops); the backward body reads them with
//!    `index i e` and computes the cheap ones again. This costs nothing but
//!    memory (each value is still computed once per step), and the values
//!    move out of the backward loop: for a fold in a fold, the outer
//!    backward body's inner scan and its `e` are then values of the outer
//!    step, moved in turn (inner folds first).
//! 2. [`fuse_scan_extras`]: a `build (size v) (lam j E)` after the scan
//!    that reads only `index j accs`, `index j v` and what is in scope at
//!    the scan is computed by the scan's steps, which compute the primal
//!    values it needs anyway:
//!
//!    ```text
//!    let accs' = $scan (lam u' (let (u (tuple (get$1$2 (get$1$2 u')) (get$2$2 u')))
//!                                (let (x E') (let (r B) (tuple r x)))))
//!                      (tuple a ($dummy ..)) v
//!    ```
//!
//!    where `E'` reads `get$1$2 u` for `index j accs` and `get$2$2 u` for
//!    `index j v`; the accumulator after step j carries its values, read by
//!    `index (add j 1) accs'`, and the other reads of `accs` read the first
//!    component. The calls of `B` are marked to be inlined, so that the
//!    optimiser run next computes the values of `E'` once with B's own (CSE
//!    and [`crate::share_loop_values`]). Outer scans first: a fold inlined
//!    into the outer step then meets the inner scan (still the plain scan
//!    of the same lambda) in one chain, and [`crate::folds_from_scans`]
//!    reads one from the other before the inner scan is fused.
//!
//! Both need every step computed before (a `$scanSum` over
//! `build n (lam k k)` with `n = size v` whose step index is `k` or
//! `sub (sub n 1) k`; a build over `size v`), so nothing that could fail
//! runs where it did not; nothing with an effect runs in between.

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::builder::{call_of, Builder};
use ksc_ir::term::{self, children, var_name, Cache};
use ksc_ir::{Body, Callee, Expr, ExprId, Pat, Prim, Type, Var};

use crate::globals::{Globals, Measure};
use crate::share::{chain, chain_heads, costly, loop_parts, read_stored};

/// Moves the values one backward loop computes again from a scan's
/// accumulators into a loop after the scan (see the module), inner chains
/// first; whether it moved any. Nodes are changed in place; run the
/// optimiser afterwards.
pub fn scan_extras(b: &mut Builder, globals: &Globals, root: ExprId, inline: usize) -> bool {
    chain_heads(b.body, root)
        .into_iter()
        .rev()
        .any(|head| each_pair(b, globals, head, &mut |b, cx, scan, later| extras_pair(b, cx, scan, later, inline)))
}

/// Makes one scan compute the loop after it that reads its steps (see the
/// module), outer chains first, marking the scan's calls of non-recursive
/// functions of at most `inline` nodes to be inlined; whether it fused
/// one. Nodes are changed in place; run the optimiser afterwards.
pub fn fuse_scan_extras(b: &mut Builder, globals: &Globals, root: ExprId, inline: usize) -> bool {
    chain_heads(b.body, root)
        .into_iter()
        .any(|head| each_pair(b, globals, head, &mut |b, cx, scan, later| fuse_pair(b, cx, scan, later, inline)))
}

/// The two arguments of `sub` of Integers at `e`.
fn int_sub(body: &Body, e: ExprId) -> Option<(ExprId, ExprId)> {
    let Expr::Call(Callee::Fun(f), a) = &body.exprs[e] else { return None };
    let pair = Type::Tuple(vec![Type::Integer, Type::Integer]);
    if f.base != "sub" || !f.derivs.is_empty() || f.base_ty.as_ref() != Some(&pair) {
        return None;
    }
    match &body.exprs[*a] {
        Expr::Tuple(xs) if xs.len() == 2 => Some((xs[0], xs[1])),
        _ => None,
    }
}

/// A scan bound in a chain of lets: `accs = $scan (lam u step) a v`.
struct Scan {
    node: ExprId,
    accs: Var,
    u: Var,
    u_ty: Type,
    step: ExprId,
    a: ExprId,
    v: ExprId,
    vname: Var,
}

/// What the pair's passes know of the chain: its variables' right sides,
/// the names bound between the scan and the later let (except those of
/// `cheap`), and the cheap lets without effect in between that read only
/// what is in scope at the scan (which can be computed there too).
struct Context<'c> {
    globals: &'c Globals<'c>,
    cache: Cache,
    value: FxHashMap<Var, ExprId>,
    between: FxHashSet<Var>,
    cheap: Vec<(Pat, ExprId)>,
}

impl Context<'_> {
    /// `e`, or the right side of the chain's variable `e` is.
    fn resolve(&self, body: &Body, e: ExprId) -> ExprId {
        var_name(body, e).and_then(|x| self.value.get(x).copied()).unwrap_or(e)
    }

    /// Is `e` (through the chain's variables) `size v`?
    fn is_size_of(&self, body: &Body, e: ExprId, v: &Var) -> bool {
        call_of(body, self.resolve(body, e), Prim::Size)
            .is_some_and(|s| s.len() == 1 && var_name(body, s[0]) == Some(v))
    }

    /// The cheap lets in between that lets reading `reads` need, in order;
    /// their names join `names`.
    fn before(&mut self, body: &Body, mut reads: FxHashSet<Var>, names: &mut FxHashSet<Var>) -> Vec<(Pat, ExprId)> {
        let mut before = Vec::new();
        for (q, r) in self.cheap.iter().rev() {
            if q.vars().iter().any(|x| reads.contains(x)) {
                reads.extend(self.cache.free_vars(body, *r).iter().cloned());
                names.extend(q.vars().iter().cloned());
                before.push((q.clone(), *r));
            }
        }
        before.reverse();
        before
    }
}

/// May a moved let read `x` (bound outside the loop), given the names
/// bound between the scan and the loop?
fn in_scope_at_scan(between: &FxHashSet<Var>, scan: &Scan, x: &Var) -> bool {
    !(between.contains(x) || x == &scan.u || x == &scan.accs || x == &scan.vname)
}

/// A pass on a scan and a later let of its chain (node, right side):
/// whether it changed something.
type PairPass<'p> = dyn FnMut(&mut Builder, &mut Context, &Scan, (ExprId, ExprId)) -> bool + 'p;

/// Offers each scan of the chain at `head` with each later let (node and
/// right side) to `pair`, until it changes something; whether it did.
fn each_pair(b: &mut Builder, globals: &Globals, head: ExprId, pair: &mut PairPass) -> bool {
    let (outer, _) = chain(b.body, head);
    let value = outer
        .iter()
        .filter_map(|(_, p, r)| match p {
            Pat::Var(v) => Some((v.clone(), *r)),
            _ => None,
        })
        .collect();
    let mut cx = Context { globals, cache: Cache::new(), value, between: FxHashSet::default(), cheap: Vec::new() };
    for (k1, (node1, p1, r1)) in outer.iter().enumerate() {
        let Pat::Var(accs) = p1 else { continue };
        let Some(args) = call_of(b.body, *r1, Prim::Scan) else { continue };
        let [lam, a, v] = args[..] else { continue };
        let Expr::Lam(u, u_ty, step) = b.body.exprs[lam].clone() else { continue };
        let Some(vname) = var_name(b.body, v).cloned() else { continue };
        if cx.cache.has_effect(b.body, globals, *r1) {
            continue;
        }
        let scan = Scan { node: *node1, accs: accs.clone(), u, u_ty, step, a, v, vname };
        cx.between.clear();
        cx.cheap.clear();
        for (node2, p2, r2) in &outer[k1 + 1..] {
            if pair(b, &mut cx, &scan, (*node2, *r2)) {
                return true;
            }
            if cx.cache.has_effect(b.body, globals, *r2) {
                break;
            }
            let free = cx.cache.free_vars(b.body, *r2);
            if !costly(b.body, *r2) && !free.iter().any(|x| cx.between.contains(x) || x == accs || x == &scan.u) {
                cx.cheap.push((p2.clone(), *r2));
            } else {
                cx.between.extend(p2.vars().iter().cloned());
            }
            if p2.vars().iter().any(|x| x == accs || x == &scan.vname) {
                break;
            }
        }
    }
    false
}

/// Pass 1 on a scan and a later let: if the let is a backward loop of the
/// scan with a costly value to move, moves its values to a loop after the
/// scan.
fn extras_pair(b: &mut Builder, cx: &mut Context, scan: &Scan, (_, r2): (ExprId, ExprId), inline: usize) -> bool {
    let body = &*b.body;
    let Some(args) = call_of(body, r2, Prim::ScanSum) else { return false };
    let [lam2, _, _, ks] = args[..] else { return false };
    let Expr::Lam(p, _, body2) = body.exprs[lam2].clone() else { return false };
    let (p, body2) = (&p, &body2);
    // ks = build n (lam k k), n = size v.
    let Some(ks_parts) = call_of(body, cx.resolve(body, ks), Prim::Build) else { return false };
    let [n, klam] = ks_parts[..] else { return false };
    let Expr::Lam(k, Type::Integer, kb) = &body.exprs[klam] else { return false };
    if var_name(body, *kb) != Some(k) || !cx.is_size_of(body, n, &scan.vname) {
        return false;
    }
    let (lets2, result2) = chain(body, *body2);
    let mut names = FxHashSet::default();
    if !lets2.iter().flat_map(|(_, q, _)| q.vars()).all(|x| names.insert(x.clone())) {
        return false;
    }
    // The step index i of the reads `index i accs`: `k` or `sub last k`,
    // with k = get$2$2 p and last = n - 1.
    let local_value: FxHashMap<&Var, ExprId> = lets2
        .iter()
        .filter_map(|(_, q, r)| match q {
            Pat::Var(x) => Some((x, *r)),
            _ => None,
        })
        .collect();
    let through = |e: ExprId| var_name(body, e).and_then(|x| local_value.get(x).copied()).unwrap_or(e);
    let is_k = |e: ExprId| matches!(&body.exprs[through(e)], Expr::Call(Callee::Prim(Prim::Get { index: 2, arity: 2 }), x) if var_name(body, *x) == Some(p));
    let index = lets2.iter().find_map(|(_, _, r)| {
        let Expr::Call(Callee::Prim(Prim::Index), a) = &body.exprs[*r] else { return None };
        let Expr::Tuple(xs) = &body.exprs[*a] else { return None };
        (xs.len() == 2 && var_name(body, xs[1]) == Some(&scan.accs)).then_some(())?;
        var_name(body, xs[0]).cloned()
    });
    let Some(index) = index else { return false };
    let Some(&at) = local_value.get(&index) else { return false };
    let steps_all = is_k(at)
        || int_sub(body, at).is_some_and(|(last, kk)| {
            is_k(kk)
                && int_sub(body, cx.resolve(body, last)).is_some_and(|(n2, one)| {
                    matches!(&body.exprs[one], Expr::Lit(ksc_ir::Lit::Integer(1)))
                        && cx.is_size_of(body, n2, &scan.vname)
                })
        });
    if !steps_all {
        return false;
    }
    // The reverse passes it calls, inlined first: their primal values are
    // values of the step.
    let body2 = *body2;
    if mark_calls(b, cx.globals, body2, inline, false) > 0 {
        return true;
    }
    let body = &*b.body;
    // The lets that read only index i accs, index i v, each other and
    // what is in scope at the scan.
    let mut moved_names: FxHashSet<Var> = FxHashSet::default();
    let mut local: FxHashSet<Var> = FxHashSet::default();
    let mut moved = Vec::new();
    for (node, q, r) in &lets2 {
        let ok = !cx.cache.has_effect(body, cx.globals, *r)
            && reads_only(body, *r, &index, (&scan.accs, &scan.vname), &|x: &Var| {
                moved_names.contains(x) || (!local.contains(x) && x != p && in_scope_at_scan(&cx.between, scan, x))
            });
        if ok {
            moved_names.extend(q.vars().iter().cloned());
            moved.push((*node, q.clone(), *r));
        } else {
            local.extend(q.vars().iter().cloned());
        }
    }
    // The moved values the backward body still reads: the costly ones are
    // stored, the cheap ones computed again (from what they read).
    let mut needed: FxHashSet<Var> = cx.cache.free_vars(body, result2).iter().cloned().collect();
    for (_, q, r) in &lets2 {
        if !q.vars().iter().any(|x| moved_names.contains(x)) {
            needed.extend(cx.cache.free_vars(body, *r).iter().cloned());
        }
    }
    let mut stored = Vec::new();
    for (node, q, r) in moved.iter().rev() {
        if !q.vars().iter().any(|x| needed.contains(x)) {
            continue;
        }
        if costly(body, *r) {
            stored.push((*node, q.clone(), *r));
        } else {
            needed.extend(cx.cache.free_vars(body, *r).iter().cloned());
        }
    }
    stored.reverse();
    // The loops of the backward body that stay (they read cotangents) over
    // a size known at the scan: the lets of their bodies that read only the
    // loop's index and what moved lets read, and cost something, are
    // computed by a loop of their own, which moves (a layer's gates that a
    // reverse loop computes again).
    let mut inner = Vec::new();
    let between = &cx.between.clone();
    for (node, q, r) in &lets2 {
        if q.vars().iter().any(|x| moved_names.contains(x)) {
            continue;
        }
        let Some((size, j, lb)) = loop_parts(body, *r, false) else { continue };
        let outside =
            |x: &Var| moved_names.contains(x) || (!local.contains(x) && x != p && in_scope_at_scan(between, scan, x));
        if !reads_only(body, size, &index, (&scan.accs, &scan.vname), &outside) {
            continue;
        }
        let mut picked_names: FxHashSet<Var> = FxHashSet::default();
        let mut unpicked: FxHashSet<Var> = FxHashSet::default();
        let mut picked = Vec::new();
        for (ln, lq, lr) in chain(body, lb).0 {
            let ok = !cx.cache.has_effect(body, cx.globals, lr)
                && reads_only(body, lr, &index, (&scan.accs, &scan.vname), &|x: &Var| {
                    x == &j || picked_names.contains(x) || (!unpicked.contains(x) && outside(x))
                });
            if ok && lq.vars().iter().all(|x| !moved_names.contains(x) && !names.contains(x) && x != &j) {
                picked_names.extend(lq.vars().iter().cloned());
                picked.push((ln, lq, lr));
            } else {
                unpicked.extend(lq.vars().iter().cloned());
            }
        }
        let costly_lets: Vec<usize> =
            (0..picked.len()).filter(|&c| matches!(picked[c].1, Pat::Var(_)) && costly(body, picked[c].2)).collect();
        if !costly_lets.is_empty() {
            inner.push((*node, size, j, picked, costly_lets));
        }
    }
    if stored.is_empty() && inner.is_empty() {
        return false;
    }
    let mut reads = FxHashSet::default();
    for (_, _, r) in &moved {
        reads.extend(cx.cache.free_vars(body, *r).iter().cloned());
    }
    for (_, size, _, picked, _) in &inner {
        reads.extend(cx.cache.free_vars(body, *size).iter().cloned());
        for (_, _, r) in picked {
            reads.extend(cx.cache.free_vars(body, *r).iter().cloned());
        }
    }
    let before = cx.before(body, reads, &mut moved_names);
    if before.iter().flat_map(|(q, _)| q.vars()).any(|x| names.contains(x)) {
        return false;
    }
    // Those loops' values: `w = build size (lam j (tuple ..))` just before
    // the loop, moved and stored; the loop reads `index j w`.
    for (node, size, j, picked, costly_lets) in inner {
        let lets: Vec<(Pat, ExprId)> =
            picked.iter().map(|(_, q, r)| (q.clone(), term::copy_tree(b.body, None, *r))).collect();
        let costly_picked: Vec<(ExprId, Pat, ExprId)> = costly_lets.iter().map(|&c| picked[c].clone()).collect();
        let (val, val_ty) = tuple_of(b, &costly_picked);
        let loop_body = term::wrap(b, lets, val);
        let lam = b.lam(&j, Type::Integer, loop_body);
        let size = term::copy_tree(b.body, None, size);
        let values = b.prim(Prim::Build, vec![size, lam]);
        let w = b.fresh_name("values");
        let w_ty = Type::vec(val_ty);
        let ty = b.ty(node);
        let old = b.body.alloc_typed(b.body.exprs[node].clone(), ty);
        b.body.exprs[node] = Expr::Let(Pat::Var(w.clone()), values, old);
        let k = costly_picked.len() as u32;
        for (c, (ln, _, _)) in costly_picked.iter().enumerate() {
            read_stored(b, *ln, &j, (&w, w_ty.clone()), (k > 1).then_some((c as u32 + 1, k)));
        }
        moved.push((node, Pat::Var(w.clone()), values));
        stored.push((node, Pat::Var(w), values));
    }
    // The loop after the scan: j for i.
    let j = b.fresh_name("j");
    let mut lets: Vec<(Pat, ExprId)> = Vec::new();
    let mut cache = Cache::new();
    for (q, r) in before.into_iter().chain(moved.into_iter().map(|(_, q, r)| (q, r))) {
        let copy = term::copy_tree(b.body, None, r);
        let copy = term::rename(b, &mut cache, copy, &[(index.clone(), j.clone())]);
        lets.push((q, copy));
    }
    let (stored_val, stored_ty) = tuple_of(b, &stored);
    let loop_body = term::wrap(b, lets, stored_val);
    let lam = b.lam(&j, Type::Integer, loop_body);
    let vv = b.var(&scan.vname, b.ty(scan.v));
    let size = b.prim(Prim::Size, vec![vv]);
    let extras = b.prim(Prim::Build, vec![size, lam]);
    let e = b.fresh_name("extras");
    let e_ty = Type::vec(stored_ty);
    let Expr::Let(p1, r1, rest1) = b.body.exprs[scan.node].clone() else { unreachable!("a let") };
    let rest_ty = b.ty(rest1);
    let with_extras = b.body.alloc_typed(Expr::Let(Pat::Var(e.clone()), extras, rest1), rest_ty);
    b.body.exprs[scan.node] = Expr::Let(p1, r1, with_extras);
    // The backward body reads them.
    let k = stored.len() as u32;
    for (c, (node, _, _)) in stored.iter().enumerate() {
        read_stored(b, *node, &index, (&e, e_ty.clone()), (k > 1).then_some((c as u32 + 1, k)));
    }
    true
}

/// The values bound by `lets` as one value (a tuple of several) and its
/// type.
fn tuple_of(b: &mut Builder, lets: &[(ExprId, Pat, ExprId)]) -> (ExprId, Type) {
    let vals: Vec<ExprId> = lets
        .iter()
        .map(|(_, q, r)| {
            let t = b.ty(*r);
            match q {
                Pat::Var(x) => b.var(x, t),
                Pat::Tuple(xs) => {
                    let Type::Tuple(ts) = t else { unreachable!("a tuple pattern binds a tuple") };
                    let parts = xs.iter().zip(ts).map(|(x, t)| b.var(x, t)).collect();
                    b.tuple(parts)
                }
            }
        })
        .collect();
    let v = if vals.len() == 1 { vals[0] } else { b.tuple(vals) };
    let t = b.ty(v);
    (v, t)
}

/// Pass 2 on a scan and a later let: if the let is a loop over the scan's
/// steps that reads only them and what is in scope at the scan, the scan
/// computes it.
fn fuse_pair(b: &mut Builder, cx: &mut Context, scan: &Scan, (node2, r2): (ExprId, ExprId), inline: usize) -> bool {
    let body = &*b.body;
    let Expr::Let(Pat::Var(_), _, _) = &body.exprs[node2] else { return false };
    let Some(args) = call_of(body, r2, Prim::Build) else { return false };
    let [n, lam2] = args[..] else { return false };
    let Expr::Lam(j, Type::Integer, body2) = body.exprs[lam2].clone() else { return false };
    let (j, body2) = (&j, &body2);
    if !cx.is_size_of(body, n, &scan.vname) || cx.cache.has_effect(body, cx.globals, r2) {
        return false;
    }
    if !reads_only(body, *body2, j, (&scan.accs, &scan.vname), &|x: &Var| in_scope_at_scan(&cx.between, scan, x)) {
        return false;
    }
    let reads = cx.cache.free_vars(body, *body2).iter().cloned().collect();
    // (The loop body's own lets scope over the step once floated out.)
    let mut names: FxHashSet<Var> = chain(body, *body2).0.iter().flat_map(|(_, q, _)| q.vars()).cloned().collect();
    let before = cx.before(body, reads, &mut names);
    // What the fused step binds must not capture what the step reads.
    let step_free = cx.cache.free_vars(body, scan.step);
    if names.iter().any(|x| step_free.contains(x)) {
        return false;
    }
    let Expr::Let(_, _, rest1) = b.body.exprs[scan.node].clone() else { return false };
    let Some(reads) = reads_of(b.body, rest1, &scan.accs) else { return false };
    let Type::Tuple(ax) = &scan.u_ty else { return false };
    let [acc_ty, x_ty] = &ax[..] else { return false };
    // The scan's new step.
    let u2 = b.fresh_name("u");
    let extra_ty = b.ty(*body2);
    let pair_ty = Type::Tuple(vec![acc_ty.clone(), extra_ty.clone()]);
    let u2_ty = Type::Tuple(vec![pair_ty, x_ty.clone()]);
    let get = |b: &mut Builder, e: ExprId, index: u32| b.prim(Prim::Get { index, arity: 2 }, vec![e]);
    let mut lets: Vec<(Pat, ExprId)> = Vec::new();
    let t = b.step_param(&u2, &u2_ty, 1, 2);
    lets.push((Pat::Var(scan.u.clone()), t));
    for (q, r) in before {
        let copy = term::copy_tree(b.body, None, r);
        lets.push((q, copy));
    }
    let extra = b.fresh_name("extra");
    let copy = term::copy_tree(b.body, None, *body2);
    substitute_reads(b, copy, j, (&scan.accs, &scan.vname), (&scan.u, &scan.u_ty));
    lets.push((Pat::Var(extra.clone()), copy));
    let r = b.fresh_name("r");
    lets.push((Pat::Var(r.clone()), scan.step));
    let rv = b.var(&r, acc_ty.clone());
    let ev = b.var(&extra, extra_ty.clone());
    let result = b.tuple(vec![rv, ev]);
    let new_step = term::wrap(b, lets, result);
    // Inlined alike, the step's calls and the loop's meet in CSE (and a
    // fold inlined into the step meets a scan of the loop).
    mark_calls(b, cx.globals, new_step, inline, true);
    let new_lam = b.lam(&u2, u2_ty, new_step);
    let dummy = b.body.alloc_typed(Expr::Dummy(extra_ty.clone()), extra_ty);
    let init = b.tuple(vec![scan.a, dummy]);
    let fused = b.prim(Prim::Scan, vec![new_lam, init, scan.v]);
    let accs2 = b.fresh_name("accs");
    let fused_ty = b.ty(fused);
    // The other reads of accs read the accumulators (all of them, copied,
    // where the vector is used whole).
    for &x in &reads {
        let w = b.var(&accs2, fused_ty.clone());
        let read = match b.body.exprs[x].clone() {
            Expr::Call(Callee::Prim(Prim::Size), _) => b.prim(Prim::Size, vec![w]),
            Expr::Call(Callee::Prim(Prim::Index), arg) => {
                let Expr::Tuple(xs) = b.body.exprs[arg].clone() else { unreachable!("index's arguments") };
                let at = b.prim(Prim::Index, vec![xs[0], w]);
                get(b, at, 1)
            }
            _ => {
                let size = b.prim(Prim::Size, vec![w]);
                b.build(size, |b, k| {
                    let w = b.var(&accs2, fused_ty.clone());
                    let at = b.prim(Prim::Index, vec![k, w]);
                    get(b, at, 1)
                })
            }
        };
        b.body.exprs[x] = b.body.exprs[read].clone();
    }
    // The loop reads the values of step j from the accumulator after it.
    let Expr::Let(q2, _, next2) = b.body.exprs[node2].clone() else { unreachable!("a let") };
    let jv = b.fresh_name("j");
    let iv = b.var(&jv, Type::Integer);
    let one = b.integer(1);
    let after = b.int_op("add", iv, one);
    let w = b.var(&accs2, fused_ty.clone());
    let at = b.prim(Prim::Index, vec![after, w]);
    let read = get(b, at, 2);
    let read_lam = b.lam(&jv, Type::Integer, read);
    let vv = b.var(&scan.vname, b.ty(scan.v));
    let size = b.prim(Prim::Size, vec![vv]);
    let copy = b.prim(Prim::Build, vec![size, read_lam]);
    b.body.exprs[node2] = Expr::Let(q2, copy, next2);
    b.body.exprs[scan.node] = Expr::Let(Pat::Var(accs2), fused, rest1);
    true
}

/// Does `e` read `accs` and `v` only as `index i accs` and `index i v`,
/// `i` nowhere else, bind none of the three, and every other free
/// variable `x` only where `outside(x)`?
fn reads_only(body: &Body, e: ExprId, i: &Var, (accs, v): (&Var, &Var), outside: &dyn Fn(&Var) -> bool) -> bool {
    let special = |x: &Var| x == i || x == accs || x == v;
    // (node, variables bound around it)
    let mut stack: Vec<(ExprId, Vec<Var>)> = vec![(e, Vec::new())];
    while let Some((x, bound)) = stack.pop() {
        let node = &body.exprs[x];
        match node {
            Expr::Var(y) => {
                if !bound.contains(y) && (special(y) || !outside(y)) {
                    return false;
                }
                continue;
            }
            Expr::Call(Callee::Prim(Prim::Index), a) => {
                if let Expr::Tuple(xs) = &body.exprs[*a] {
                    if let [at, vec] = xs[..] {
                        let read = var_name(body, vec).is_some_and(|w| w == accs || w == v);
                        if read && var_name(body, at) == Some(i) {
                            continue;
                        }
                    }
                }
            }
            _ => {}
        }
        for (c, child) in children(node).into_iter().enumerate() {
            let binds = term::binds_for_child(node, c);
            if binds.iter().any(special) {
                return false;
            }
            let mut inner = bound.clone();
            inner.extend(binds.iter().cloned());
            stack.push((child, inner));
        }
    }
    true
}

/// The occurrences of `accs` in `e`: `index _ accs` and `size accs` nodes,
/// and the variable itself elsewhere; None if `e` binds that name.
fn reads_of(body: &Body, e: ExprId, accs: &Var) -> Option<Vec<ExprId>> {
    let mut out = Vec::new();
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        let node = &body.exprs[x];
        let read = match node {
            Expr::Call(Callee::Prim(Prim::Index), a) => match &body.exprs[*a] {
                Expr::Tuple(xs) if xs.len() == 2 => var_name(body, xs[1]) == Some(accs),
                _ => false,
            },
            Expr::Call(Callee::Prim(Prim::Size), a) => var_name(body, *a) == Some(accs),
            Expr::Var(y) => y == accs,
            _ => false,
        };
        if read {
            out.push(x);
            if let Expr::Call(_, a) = node {
                if let Expr::Tuple(xs) = &body.exprs[*a] {
                    stack.push(xs[0]);
                }
            }
            continue;
        }
        for (c, child) in children(node).into_iter().enumerate() {
            if term::binds_for_child(node, c).iter().any(|y| y == accs) {
                return None;
            }
            stack.push(child);
        }
    }
    Some(out)
}

/// In the copied tree at `e`, `index i accs` becomes `get$1$2 u` and
/// `index i v` becomes `get$2$2 u`.
fn substitute_reads(b: &mut Builder, e: ExprId, i: &Var, (accs, v): (&Var, &Var), (u, u_ty): (&Var, &Type)) {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if let Expr::Call(Callee::Prim(Prim::Index), a) = &b.body.exprs[x] {
            if let Expr::Tuple(xs) = &b.body.exprs[*a] {
                if let [at, vec] = xs[..] {
                    let which = match var_name(b.body, vec) {
                        Some(w) if w == accs => Some(1),
                        Some(w) if w == v => Some(2),
                        _ => None,
                    };
                    if let (Some(index), true) = (which, var_name(b.body, at) == Some(i)) {
                        let w = b.var(u, u_ty.clone());
                        let g = b.prim(Prim::Get { index, arity: 2 }, vec![w]);
                        b.body.exprs[x] = b.body.exprs[g].clone();
                        continue;
                    }
                }
            }
        }
        stack.extend(children(&b.body.exprs[x]));
    }
}

/// Marks the calls in `e` of non-recursive functions of at most `limit`
/// nodes with `$inline`: of primal functions outside lambdas (a scan's step
/// is inlined alike wherever it is written, so that its copies stay
/// equal), or (`!primal`) of the reverse passes `[rev g]` of such
/// functions, anywhere. Returns how many.
fn mark_calls(b: &mut Builder, globals: &Globals, e: ExprId, limit: usize, primal: bool) -> usize {
    let wanted = |g: &ksc_ir::FunName| {
        let base = if primal {
            g.derivs.is_empty().then(|| g.clone())
        } else {
            g.inner().and_then(|(d, base)| (d == ksc_ir::Derivation::Rev && base.derivs.is_empty()).then_some(base))
        };
        base.is_some_and(|base| !globals.is_recursive(&base) && globals.small_def(g, limit, Measure::Arena).is_some())
    };
    let mut marked = 0;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &b.body.exprs[x] {
            Expr::Call(Callee::Prim(Prim::Inline), _) => continue,
            Expr::Lam(..) if primal => continue,
            Expr::Call(Callee::Fun(g), _) if wanted(g) => {
                let call = term::mark_inline(b.body, x);
                stack.extend(children(&b.body.exprs[call]));
                marked += 1;
            }
            node => stack.extend(children(node)),
        }
    }
    marked
}
