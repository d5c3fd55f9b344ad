//! The passes of `[jac f]` (built by `ksc_ad`'s `jac_def`: a loop over the
//! columns of the Jacobian with `[fwd f]` of a basis tangent, or over its
//! rows with `[rev f]`): the calls in those loops inlined, and the work that
//! does not depend on the column (the primal computation of `f`) moved out
//! of the loops, so it is done once for the whole matrix.

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::builder::Builder;
use ksc_ir::names::{JAC_COLUMN as COLUMN, JAC_ROW as ROW};
use ksc_ir::term::{self, let_chain, var_name, wrap, Cache};
use ksc_ir::{Body, Callee, Def, Expr, ExprId, Pat, Prim, Type};

/// Moves the leading `let`s of the column (row) loops of a `[jac f]` whose
/// right sides do not depend on the column (row), and have no effect, out
/// of the loop: after inlining they are the primal computation of `f`,
/// shared by all columns. `jac_def` only makes these loops where they run
/// at least once, so a hoisted computation that fails would have failed in
/// the loop.
pub fn hoist_loop_invariants(def: &mut Def, globals: &crate::Globals) {
    // In A-normal form, the primal computations that the last cleanup put
    // back into argument positions are lets of the loops' bodies again.
    // (`fresh` then names what is made below: a split fold's values.)
    let params: Vec<String> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = term::fresh_floor(&def.body, def.root, params.iter());
    {
        let mut b = Builder::new(&mut def.body, &mut fresh);
        def.root = crate::anf(&mut b, def.root, &params);
    }
    let mut cache = Cache::new();
    let loops = column_loops(&def.body, def.root);
    for (e, (n, index, ity, lam_body)) in loops {
        let (chain, rest) = let_chain(&def.body, lam_body);
        let size_vars = cache.free_vars(&def.body, n);
        let mut bound: FxHashSet<String> = FxHashSet::default();
        let mut variant: FxHashSet<String> = FxHashSet::from_iter([index.clone()]);
        let (mut hoisted, mut kept) = (Vec::new(), Vec::new());
        // The loop's lets so far, and the folds of (value, tangent) pairs
        // whose values have a fold of their own before the loop.
        let mut defs: FxHashMap<String, ExprId> = FxHashMap::default();
        let mut split: FxHashMap<String, String> = FxHashMap::default();
        for (p, mut r) in chain {
            // The values of a split fold: its own fold's.
            let values = ksc_ir::builder::call_of(&def.body, r, Prim::Get { index: 1, arity: 2 })
                .and_then(|a| var_name(&def.body, a[0]).and_then(|pf| split.get(pf)).cloned());
            if let Some(y) = values {
                let ty = def.body.ty(r).clone();
                r = def.body.alloc_typed(Expr::Var(y), ty);
            }
            if let Pat::Var(v) = &p {
                defs.insert(v.clone(), r);
            }
            let names = p.vars();
            // A name bound twice, or one the loop's size reads, stays put
            // (moving it would change what a later use refers to).
            let clash = names.iter().any(|v| bound.contains(v) || size_vars.contains(v) || *v == index);
            bound.extend(names.iter().cloned());
            let depends = cache.free_vars(&def.body, r).iter().any(|v| variant.contains(v));
            // Known zeros stay: the rules simplify what they meet in the loop
            // (a zero accumulator added to), which a hoisted variable hides.
            let zero = term::is_zero(&def.body, r);
            if clash || depends || zero || cache.has_effect(&def.body, globals, r) {
                // A fold of (value, tangent) pairs (forward mode's) whose
                // values do not depend on the column: they get a fold of
                // their own, before the loop.
                if let (Pat::Var(pf), false) = (&p, clash) {
                    let mut b = Builder::new(&mut def.body, &mut fresh);
                    if let Some(values) = values_of_pair_fold(&mut b, &mut cache, &defs, r) {
                        let y = b.fresh_name("values");
                        let invariant = !cache.free_vars(&def.body, values).iter().any(|v| variant.contains(v));
                        if invariant && !cache.has_effect(&def.body, globals, values) {
                            split.insert(pf.clone(), y.clone());
                            hoisted.push((Pat::Var(y), values));
                        }
                    }
                }
                variant.extend(names.iter().cloned());
                kept.push((p, r));
            } else {
                hoisted.push((p, r));
            }
        }
        if hoisted.is_empty() {
            continue;
        }
        let mut b = Builder::new(&mut def.body, &mut fresh);
        let new_body = wrap(&mut b, kept, rest);
        let lam = b.lam(&index, ity, new_body);
        let build = b.prim(Prim::Build, vec![n, lam]);
        // The loop's node becomes the hoisted lets around the new loop.
        let (p0, r0) = hoisted.remove(0);
        let inner = wrap(&mut b, hoisted, build);
        def.body.exprs[e] = Expr::Let(p0, r0, inner);
    }
}

/// The values of a fold of (value, tangent) pairs, forward mode's fold
/// (`Fwd::ffold_pair`), as a fold of their own: for `fold lam init pairs`
/// with `init` bound to `tuple a0 da0` (in `defs`, or written there),
/// `pairs` to `build n (lam i (lets in tuple e de))` and `lam`'s body
/// ending in `tuple v dv`, where the lets `v` reads read of the step's
/// parameter `((a, da), (x, dx))` only `a` and `x`:
///
/// ```text
/// fold (lam q (those lets, a = get$1$2 q, x = get$2$2 q in v)) a0
///      (build n (lam i (lets in e)))
/// ```
///
/// (copies), which computes the first components of the pairs' fold.
/// Where the elements have no tangent (forward mode then folds over the
/// elements themselves, `((a, da), x)`, as over the bones' indices of a
/// hierarchy), `pairs` is any vector and is folded over as it is.
fn values_of_pair_fold(
    b: &mut Builder,
    cache: &mut Cache,
    defs: &FxHashMap<String, ExprId>,
    e: ExprId,
) -> Option<ExprId> {
    use ksc_ir::builder::{call_of, prim_call};
    let def_of = |b: &Builder, x: ExprId| match &b.body.exprs[x] {
        Expr::Var(v) => defs.get(v).copied(),
        _ => Some(x),
    };
    let [lam, init, pairs] = call_of(b.body, e, Prim::Fold)?[..] else { return None };
    let init = def_of(b, init)?;
    let Expr::Tuple(parts) = &b.body.exprs[init] else { return None };
    let [a0, _] = parts[..] else { return None };
    let Expr::Lam(param, pty, step) = b.body.exprs[lam].clone() else { return None };
    let Type::Tuple(ab) = &pty else { return None };
    let Type::Tuple(a) = &ab[0] else { return None };
    // Elements without a tangent are folded over as they are (`plain`).
    let plain = !matches!(&ab[1], Type::Tuple(_));
    let x_value = match &ab[1] {
        Type::Tuple(x) if x.len() == 2 => x[0].clone(),
        Type::Tuple(_) => return None,
        t => t.clone(),
    };
    if a.len() != 2 {
        return None;
    }
    // The elements' build (their lets and value), unless plain.
    let elements = if plain {
        None
    } else {
        let [n, elems] = call_of(b.body, def_of(b, pairs)?, Prim::Build)?[..] else { return None };
        let Expr::Lam(i, ity, elem) = b.body.exprs[elems].clone() else { return None };
        let (elem_lets, elem_tail) = let_chain(b.body, elem);
        let Expr::Tuple(pair) = &b.body.exprs[elem_tail] else { return None };
        Some((n, i, ity, elem_lets, pair[0]))
    };
    let q_ty = Type::Tuple(vec![a[0].clone(), x_value]);
    let (mut lets, tail) = let_chain(b.body, step);
    let Expr::Tuple(result) = &b.body.exprs[tail] else { return None };
    let v = result[0];
    // A let of a tuple (such as a branch's value and tangent) read only by
    // projections: each projection reads its own component.
    for k in 0..lets.len() {
        let (Pat::Var(x), r) = &lets[k] else { continue };
        let (x, r) = (x.clone(), *r);
        let projected = |body: &Body, e: ExprId| match prim_call(body, e) {
            Some((Prim::Get { index, arity }, a)) if var_name(body, a[0]) == Some(&x) => Some((index, arity)),
            _ => None,
        };
        let only_projected = lets[k + 1..]
            .iter()
            .all(|(_, e)| projected(b.body, *e).is_some() || !cache.free_vars(b.body, *e).contains(&x))
            && !cache.free_vars(b.body, tail).contains(&x);
        if !only_projected {
            continue;
        }
        for (_, e) in lets[k + 1..].iter_mut() {
            if let Some((index, arity)) = projected(b.body, *e) {
                let Some(part) = component(b, cache, r, index, arity) else { break };
                *e = part;
            }
        }
    }
    let wanted = read_by(b.body, cache, &lets, v);
    // Where each projection of the parameter is: (component, arity) from
    // the parameter down. Values are under (1 or 2, 2) then (1, 2); a plain
    // element is a value itself, under (2, 2). `value_path`: the component
    // of q a value is in, and the path below it.
    let mut paths: FxHashMap<String, Vec<(u32, u32)>> = FxHashMap::from_iter([(param.clone(), vec![])]);
    let value_path = |path: &[(u32, u32)]| -> Option<(u32, usize)> {
        match path {
            [(2, 2), ..] if plain => Some((2, 1)),
            [(k, 2), (1, 2), ..] => Some((*k, 2)),
            _ => None,
        }
    };
    let is_value = |path: &[(u32, u32)]| value_path(path).is_some();
    let q = b.fresh_name("q");
    let mut new_lets: Vec<(Pat, ExprId)> = Vec::new();
    let projection = |b: &mut Builder, path: &[(u32, u32)]| {
        let (k, below) = value_path(path).unwrap_or((path[0].0, 2));
        let mut e = b.var(&q, q_ty.clone());
        e = b.prim(Prim::Get { index: k, arity: 2 }, vec![e]);
        for &(index, arity) in &path[below..] {
            e = b.prim(Prim::Get { index, arity }, vec![e]);
        }
        e
    };
    for ((p, r), _) in lets.iter().zip(&wanted).filter(|(_, w)| **w) {
        // A projection (chain) of the parameter or of a projection of it.
        let mut steps = Vec::new();
        let mut at = *r;
        while let Some((Prim::Get { index, arity }, args)) = prim_call(b.body, at) {
            steps.push((index, arity));
            at = args[0];
        }
        let base = var_name(b.body, at).and_then(|v| paths.get(v).cloned());
        match (p, base) {
            (_, Some(mut path)) => {
                path.extend(steps.into_iter().rev());
                let parts: Vec<(String, Vec<(u32, u32)>)> = match p {
                    Pat::Var(x) => vec![(x.clone(), path)],
                    Pat::Tuple(xs) => {
                        let k = xs.len() as u32;
                        xs.iter()
                            .enumerate()
                            .map(|(j, x)| (x.clone(), [path.clone(), vec![(j as u32 + 1, k)]].concat()))
                            .collect()
                    }
                };
                for (x, path) in parts {
                    if is_value(&path) {
                        let e = projection(b, &path);
                        new_lets.push((Pat::Var(x.clone()), e));
                    }
                    paths.insert(x, path);
                }
            }
            _ => {
                // Anything else reads only values of the parameter.
                if cache.free_vars(b.body, *r).iter().any(|x| paths.get(x).is_some_and(|path| !is_value(path))) {
                    return None;
                }
                let r = term::deep_copy(b, *r);
                new_lets.push((p.clone(), r));
            }
        }
    }
    if cache.free_vars(b.body, v).iter().any(|x| paths.get(x).is_some_and(|path| !is_value(path))) {
        return None;
    }
    let v = term::deep_copy(b, v);
    let step = wrap(b, new_lets, v);
    let step = b.lam(&q, q_ty.clone(), step);
    let elems = match elements {
        None => term::deep_copy(b, pairs),
        Some((n, i, ity, elem_lets, value)) => {
            let elem_wanted = read_by(b.body, cache, &elem_lets, value);
            let elem_lets: Vec<(Pat, ExprId)> = elem_lets
                .into_iter()
                .zip(elem_wanted)
                .filter(|(_, w)| *w)
                .map(|((p, r), _)| (p, term::deep_copy(b, r)))
                .collect();
            let value = term::deep_copy(b, value);
            let elem = wrap(b, elem_lets, value);
            let elems = b.lam(&i, ity, elem);
            let n = term::deep_copy(b, n);
            b.prim(Prim::Build, vec![n, elems])
        }
    };
    let a0 = term::deep_copy(b, a0);
    Some(b.prim(Prim::Fold, vec![step, a0, elems]))
}

/// Which of the `lets` (of a let-chain ending in `e`) `e` reads, directly
/// or through later ones.
fn read_by(body: &Body, cache: &mut Cache, lets: &[(Pat, ExprId)], e: ExprId) -> Vec<bool> {
    let mut needed: FxHashSet<String> = cache.free_vars(body, e).iter().cloned().collect();
    let mut wanted = vec![false; lets.len()];
    for (k, (p, r)) in lets.iter().enumerate().rev() {
        if p.vars().iter().any(|x| needed.contains(x)) {
            wanted[k] = true;
            needed.extend(cache.free_vars(body, *r).iter().cloned());
        }
    }
    wanted
}

/// The `index`th of the `arity` components of the tuple `e` ends in (through
/// `let`, `if` and `assert`), without the lets it does not read; a copy.
fn component(b: &mut Builder, cache: &mut Cache, e: ExprId, index: u32, arity: u32) -> Option<ExprId> {
    let ty = |b: &Builder, e: ExprId| b.body.ty(e).clone();
    Some(match b.body.exprs[e].clone() {
        Expr::Tuple(es) if es.len() == arity as usize => term::deep_copy(b, es[index as usize - 1]),
        Expr::If(c, t, f) => {
            let (t, f) = (component(b, cache, t, index, arity)?, component(b, cache, f, index, arity)?);
            let c = term::deep_copy(b, c);
            let t_ty = ty(b, t);
            b.body.alloc_typed(Expr::If(c, t, f), t_ty)
        }
        Expr::Assert(c, x, from) => {
            let x = component(b, cache, x, index, arity)?;
            let c = term::deep_copy(b, c);
            let x_ty = ty(b, x);
            b.body.alloc_typed(Expr::Assert(c, x, from), x_ty)
        }
        Expr::Let(p, r, x) => {
            let x = component(b, cache, x, index, arity)?;
            if !p.vars().iter().any(|v| cache.free_vars(b.body, x).contains(v)) {
                return Some(x);
            }
            let r = term::deep_copy(b, r);
            let x_ty = ty(b, x);
            b.body.alloc_typed(Expr::Let(p, r, x), x_ty)
        }
        _ => return None,
    })
}

/// One step of the way from a column (row) loop's body down to a value in
/// it: what the value is evaluated under.
#[derive(Clone)]
enum Step {
    /// In the body of `let p = r`.
    Let(Pat, ExprId),
    /// In the branch of `if c` that `bool` names (true: then).
    If(ExprId, bool),
    /// After `assert c` (and where the assert comes from).
    Assert(ExprId, ksc_ir::AssertFrom),
    /// In the body of a loop `.. size (lam (i : Integer) ..)`, run for
    /// every i below size.
    Loop(ExprId, String),
}

/// Work of the walk in [`hoist_inner_invariants`]: nodes to visit, and the
/// scopes and steps to open and close around them.
enum Work {
    Visit(ExprId),
    Open(Step, Vec<(String, bool)>),
    Close(usize),
}

/// Moves the values that a loop inside a column (row) loop computes the
/// same way for every column, such as the primal of each point in forward
/// mode over theta, out of the column loop into a vector:
///
/// ```text
/// build n (lam c (.. loop m (lam i (.. e ..)) ..))
///   =>  let pre = build m (lam i e)
///       in build n (lam c (.. loop m (lam i (.. index i pre ..)) ..))
/// ```
///
/// `e` costs something (a loop or a call other than scalar arithmetic),
/// has no effect, reads the inner index and nothing that depends on the
/// column. The inner loop and the way to it are evaluated in every column:
/// they are reached through lets (whose right sides `e` may read: those it
/// reads are copied into `pre`), loops over all their indices, and the
/// branches of `if`s and `assert`s whose conditions do not depend on the
/// column (copied into `pre`, with `$dummy` where a branch is not taken).
/// So `pre` computes what every column computed, once; and as the column
/// loop runs at least once (`jac_def`), a value that fails to compute
/// would have failed in the loop. Returns whether it moved any.
pub fn hoist_inner_invariants(def: &mut Def, globals: &crate::Globals) -> bool {
    let params: Vec<String> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = term::fresh_floor(&def.body, def.root, params.iter());
    let loops = column_loops(&def.body, def.root);
    let mut moved = false;
    for (column_loop, (_, index, _, lam_body)) in loops {
        let found = inner_invariants(&def.body, globals, &index, lam_body);
        let mut b = Builder::new(&mut def.body, &mut fresh);
        let mut lets = Vec::new();
        for (x, path) in found {
            let Some((pre, i)) = precompute(&mut b, globals, x, &path) else { continue };
            let name = b.fresh_name("pre");
            let (pre_ty, ity) = (b.ty(pre), Type::Integer);
            let (iv, pv) = (b.var(&i, ity), b.var(&name, pre_ty));
            let read = b.prim(Prim::Index, vec![iv, pv]);
            b.body.exprs[x] = b.body.exprs[read].clone();
            lets.push((Pat::Var(name), pre));
        }
        if lets.is_empty() {
            continue;
        }
        let ty = b.ty(column_loop);
        let inner = b.body.alloc_typed(b.body.exprs[column_loop].clone(), ty);
        let wrapped = wrap(&mut b, lets, inner);
        b.body.exprs[column_loop] = b.body.exprs[wrapped].clone();
        moved = true;
    }
    moved
}

/// The values of the body of the column (row) loop over `column` that
/// [`hoist_inner_invariants`] moves, each with the way to it.
fn inner_invariants(body: &Body, globals: &crate::Globals, column: &str, root: ExprId) -> Vec<(ExprId, Vec<Step>)> {
    let mut cache = Cache::new();
    // Per name, whether its innermost binding depends on the column (a
    // name bound outside the column loop does not).
    let mut scope: FxHashMap<String, Vec<bool>> = FxHashMap::default();
    scope.entry(column.to_string()).or_default().push(true);
    let mut path: Vec<Step> = Vec::new();
    let mut in_loop = 0;
    let mut found = Vec::new();
    let mut work = vec![Work::Visit(root)];
    while let Some(w) = work.pop() {
        let x = match w {
            Work::Visit(x) => x,
            Work::Open(step, names) => {
                in_loop += matches!(step, Step::Loop(..)) as usize;
                path.push(step);
                for (v, variant) in names {
                    scope.entry(v).or_default().push(variant);
                }
                continue;
            }
            Work::Close(n) => {
                let step = path.pop().expect("a step to close");
                in_loop -= matches!(step, Step::Loop(..)) as usize;
                let names: Vec<String> = match step {
                    Step::Let(p, _) => p.vars().to_vec(),
                    Step::Loop(_, i) => vec![i],
                    _ => Vec::new(),
                };
                debug_assert_eq!(names.len(), n);
                for v in names {
                    scope.get_mut(&v).and_then(|s| s.pop());
                }
                continue;
            }
        };
        let variant = |cache: &mut Cache, e: ExprId| {
            cache.free_vars(body, e).iter().any(|v| scope.get(v).and_then(|s| s.last()).copied().unwrap_or(false))
        };
        if in_loop > 0
            && crate::costly(body, x)
            && !sums_zeros(body, x)
            && !matches!(body.ty(x), Type::Lam(..) | Type::LM(..))
            && !variant(&mut cache, x)
            && !cache.has_effect(body, globals, x)
        {
            found.push((x, path.clone()));
            continue;
        }
        // The children evaluated whenever x is, in reverse order of
        // evaluation (the work is a stack).
        match &body.exprs[x] {
            Expr::Let(p, r, next) => {
                let dep = variant(&mut cache, *r);
                let names: Vec<(String, bool)> = p.vars().iter().map(|v| (v.clone(), dep)).collect();
                work.push(Work::Close(names.len()));
                work.push(Work::Visit(*next));
                work.push(Work::Open(Step::Let(p.clone(), *r), names));
                work.push(Work::Visit(*r));
            }
            Expr::If(c, t, f) => {
                if !variant(&mut cache, *c) {
                    for (branch, then) in [(*f, false), (*t, true)] {
                        work.push(Work::Close(0));
                        work.push(Work::Visit(branch));
                        work.push(Work::Open(Step::If(*c, then), Vec::new()));
                    }
                }
                work.push(Work::Visit(*c));
            }
            Expr::Assert(c, next, from) => {
                if !variant(&mut cache, *c) {
                    work.push(Work::Close(0));
                    work.push(Work::Visit(*next));
                    work.push(Work::Open(Step::Assert(*c, from.clone()), Vec::new()));
                }
                work.push(Work::Visit(*c));
            }
            Expr::Call(Callee::Prim(Prim::Build | Prim::Sumbuild | Prim::BuildSum), arg) => {
                let Expr::Tuple(parts) = &body.exprs[*arg] else { continue };
                let (size, lam) = (parts[0], *parts.last().expect("a loop's lambda"));
                if let Expr::Lam(i, Type::Integer, lam_body) = &body.exprs[lam] {
                    if in_loop == 0 && !variant(&mut cache, size) {
                        work.push(Work::Close(1));
                        work.push(Work::Visit(*lam_body));
                        work.push(Work::Open(Step::Loop(size, i.clone()), vec![(i.clone(), false)]));
                    }
                }
                work.extend(parts[..parts.len() - 1].iter().rev().map(|&p| Work::Visit(p)));
            }
            // A lambda's body runs when its caller decides: not followed.
            Expr::Lam(..) => {}
            node => work.extend(term::children(node).into_iter().rev().map(Work::Visit)),
        }
    }
    found
}

/// Is `e` a loop whose terms are a known zero (a tangent that is zero, kept
/// for the failure of an empty `sumbuild`)? Not worth a vector.
fn sums_zeros(body: &Body, e: ExprId) -> bool {
    let Expr::Call(Callee::Prim(Prim::Build | Prim::Sumbuild), arg) = &body.exprs[e] else { return false };
    let Expr::Tuple(parts) = &body.exprs[*arg] else { return false };
    matches!(parts[..], [_, lam] if matches!(&body.exprs[lam], Expr::Lam(_, _, b) if term::is_zero(body, *b)))
}

/// `pre` for the value at `x` reached by `path` (see
/// [`hoist_inner_invariants`]): x under the steps it needs, innermost
/// first, and the index of its loop. None when x does not read that index
/// (it is the same in every iteration, not worth a vector), when a let on
/// the way binds that index again, or when what it would copy has an
/// effect (it would happen twice).
fn precompute(b: &mut Builder, globals: &crate::Globals, x: ExprId, path: &[Step]) -> Option<(ExprId, String)> {
    let mut cache = Cache::new();
    let ty = b.ty(x);
    let mut acc = b.body.alloc_typed(b.body.exprs[x].clone(), ty);
    let mut needed: FxHashSet<String> = cache.free_vars(b.body, acc).iter().cloned().collect();
    let mut index = None;
    for step in path.iter().rev() {
        let ty = b.ty(acc);
        let copied = match step {
            Step::Let(p, _) if !p.vars().iter().any(|v| needed.contains(v)) => continue,
            Step::Let(_, e) | Step::If(e, _) | Step::Assert(e, _) | Step::Loop(e, _) => *e,
        };
        if cache.has_effect(b.body, globals, copied) {
            return None;
        }
        acc = match step {
            Step::Let(p, r) => {
                for v in p.vars() {
                    needed.remove(v);
                }
                needed.extend(cache.free_vars(b.body, *r).iter().cloned());
                let r = term::deep_copy(b, *r);
                b.body.alloc_typed(Expr::Let(p.clone(), r, acc), ty)
            }
            Step::If(c, then) => {
                needed.extend(cache.free_vars(b.body, *c).iter().cloned());
                let c = term::deep_copy(b, *c);
                let none = b.body.alloc_typed(Expr::Dummy(ty.clone()), ty.clone());
                let (t, f) = if *then { (acc, none) } else { (none, acc) };
                b.body.alloc_typed(Expr::If(c, t, f), ty)
            }
            Step::Assert(c, from) => {
                needed.extend(cache.free_vars(b.body, *c).iter().cloned());
                let c = term::deep_copy(b, *c);
                b.body.alloc_typed(Expr::Assert(c, acc, from.clone()), ty)
            }
            Step::Loop(size, i) => {
                // x is read as `index i pre` where it was: a let on the way
                // that binds i again would make that a different i.
                let at = path.iter().position(|s| matches!(s, Step::Loop(..))).expect("the loop step");
                let rebound = path[at + 1..].iter().any(|s| matches!(s, Step::Let(p, _) if p.vars().contains(i)));
                if rebound || !needed.remove(i) {
                    return None;
                }
                index = Some(i.clone());
                needed.extend(cache.free_vars(b.body, *size).iter().cloned());
                let size = term::deep_copy(b, *size);
                let lam = b.lam(i, Type::Integer, acc);
                b.prim(Prim::Build, vec![size, lam])
            }
        };
    }
    index.map(|i| (acc, i))
}

/// The most nodes a function may have to be inlined into a `[jac f]` loop.
const INLINE_INTO_LOOP: usize = 6000;

/// Marks the calls of program functions (derivatives and primal functions)
/// in the column (row) loops of a `[jac f]` with `$inline`, so the next
/// optimisation inlines them and their primal work can be hoisted and
/// shared (recursive ones and ones of more than [`INLINE_INTO_LOOP`] nodes
/// are left). Returns whether it marked any.
pub fn mark_calls_in_loops(def: &mut Def, globals: &crate::Globals) -> bool {
    let mut stack = vec![(def.root, false)];
    let mut calls = Vec::new();
    while let Some((e, inside)) = stack.pop() {
        let inside = inside || loop_parts(&def.body, e).is_some();
        match &def.body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Inline), _) => continue,
            Expr::Call(Callee::Fun(g), _)
                if inside
                    && globals.small_def(g, INLINE_INTO_LOOP, crate::Measure::Arena).is_some()
                    && !globals.is_recursive(g) =>
            {
                calls.push(e)
            }
            _ => {}
        }
        stack.extend(term::children(&def.body.exprs[e]).into_iter().map(|c| (c, inside)));
    }
    for &e in &calls {
        term::mark_inline(&mut def.body, e);
    }
    !calls.is_empty()
}

/// The column (row) loops of a `[jac f]` ([`loop_parts`]), outermost ones
/// only, with their nodes.
fn column_loops(body: &Body, root: ExprId) -> Vec<(ExprId, (ExprId, String, Type, ExprId))> {
    let mut stack = vec![root];
    let mut loops = Vec::new();
    while let Some(e) = stack.pop() {
        if let Some(parts) = loop_parts(body, e) {
            loops.push((e, parts));
            continue;
        }
        stack.extend(term::children(&body.exprs[e]));
    }
    loops
}

/// A `build n (lam (c : Integer) body)` over the columns or rows of a
/// `[jac f]`: its size, index, index type and body.
fn loop_parts(body: &Body, e: ExprId) -> Option<(ExprId, String, Type, ExprId)> {
    let Expr::Call(Callee::Prim(Prim::Build), arg) = &body.exprs[e] else { return None };
    let Expr::Tuple(parts) = &body.exprs[*arg] else { return None };
    let [n, lam] = parts[..] else { return None };
    let Expr::Lam(i, ity, lam_body) = &body.exprs[lam] else { return None };
    (i == COLUMN || i == ROW).then(|| (n, i.clone(), ity.clone(), *lam_body))
}
