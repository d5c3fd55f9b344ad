//! Reads of a fold's surroundings, made once before the fold or (a fold
//! over indices that only reads a vector) by a fold over the vector, before
//! it is differentiated.
//!
//! The map of a fold's step takes the step's free variables as a scope
//! (`lmFold`'s `s'`), whose cotangent reverse mode sums over the steps. A
//! step that reads one row of a large vector of its surroundings, `(index
//! t xs)` with `t` fixed for the fold (a time step's input, read by every
//! layer of the inner fold), makes the whole of `xs` part of the scope: its
//! zero cotangent, as large as `xs`, is made and summed for every run of
//! the fold, so that a fold inside a loop over `xs` costs its size each time
//! (quadratic in the number of time steps). Read before the fold, only the
//! row is in the scope.
//!
//! `fold (lam p B) a w` where `B` reads `index i v` unconditionally (not
//! inside a branch, an `assert`'s body or a lambda) with `i` and `v`
//! bound outside the lambda becomes
//!
//! ```text
//! let (a' a) (w' w) (x (if (eq (size w') 0) ($dummy T) (index i v)))
//!   (fold (lam p B[x / index i v]) a' w')
//! ```
//!
//! The read runs only when the step runs at least once, as before (it
//! could fail); the same for `$scan`. A step that calls `print` or
//! `$trace` itself is left as it is; one that calls a function that prints
//! could, where the read fails, print less before the failure than the
//! original did (the derivative is not printed output, and the read fails
//! in both).
//!
//! A step that uses its element only to read a vector of its surroundings,
//! `fold (lam p B) a (build (size v) (lam t t))` where `t` (`p`'s second
//! component) occurs in `B` only in `index t v` and `B` uses `v` nowhere
//! else, makes `v` part of the scope too, and each step's cotangent of `v`
//! is a whole vector that is zero but for row t (summed over the steps:
//! quadratic in their number where the interpreter runs it). Such a fold
//! runs over `v` itself, its element the row: `fold (lam p B') a v` with
//! `B'` reading the row where `B` read `index t v`. Reverse mode stores
//! each step's cotangent of its element (`rfold`), which is v's cotangent
//! row by row, and the backward loop reads the row as `index i v`, which
//! ksc-opt's `residuals.rs` lets it take from the forward scan.

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::{Body, Callee, Def, Expr, ExprId, Pat, Prim, Type, Var};

/// `f` with its folds' invariant reads made before them and the folds over
/// indices that only read a vector made folds over the vector (see the
/// module), or None if it has neither.
pub fn fold_reads(f: &Def) -> Option<Def> {
    let folds = |body: &Body| -> Vec<ExprId> {
        body.exprs
            .iter()
            .filter(|(_, e)| matches!(e, Expr::Call(Callee::Prim(Prim::Fold | Prim::Scan), _)))
            .map(|(id, _)| id)
            .collect()
    };
    if folds(&f.body).is_empty() {
        return None;
    }
    let mut def = f.clone();
    let mut fresh = ksc_ir::term::fresh_floor(&def.body, def.root, def.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let mut changed = false;
    for e in folds(b.body) {
        changed |= hoist(&mut b, e);
    }
    // (Hoisting makes a fold's node a `let`: its fold is a new node.)
    for e in folds(b.body) {
        changed |= fold_over_vector(&mut b, e);
    }
    changed.then_some(def)
}

/// The fold at `e` over `build (size v) (lam t t)` whose step uses its
/// element only to read `index t v` made a fold over `v` (see the module);
/// whether it was.
fn fold_over_vector(b: &mut Builder, e: ExprId) -> bool {
    let Some((p, args)) = prim_call(b.body, e) else { return false };
    let [lam, a, w] = args[..] else { return false };
    let Expr::Lam(param, p_ty, step) = b.body.exprs[lam].clone() else { return false };
    let Some((v, v_ty)) = iota_of_size(b.body, w) else { return false };
    let Type::Tensor(1, row_ty) = &v_ty else { return false };
    let Type::Tuple(at) = &p_ty else { return false };
    if at.len() != 2 || at[1] != Type::Integer {
        return false;
    }
    let Some(uses) = element_uses(b.body, step, &param, &v) else { return false };
    if uses.reads.is_empty() {
        return false;
    }
    // The element is the row: each read is the element's expression, and
    // what held the index (the parameter's second component) holds the row.
    let row_ty = (**row_ty).clone();
    let p2_ty = Type::Tuple(vec![at[0].clone(), row_ty.clone()]);
    for (read, elem) in uses.reads {
        b.body.exprs[read] = b.body.exprs[elem].clone();
    }
    for x in uses.params {
        b.body.types.insert(x, p2_ty.clone());
    }
    for x in uses.seconds {
        b.body.types.insert(x, row_ty.clone());
    }
    let lam2 = b.lam(&param, p2_ty, step);
    let vv = b.var(&v, v_ty);
    let call = b.prim(p, vec![lam2, a, vv]);
    b.body.exprs[e] = b.body.exprs[call].clone();
    true
}

/// `v` (and its type) where `w` is `build (size v) (lam t t)`.
fn iota_of_size(body: &Body, w: ExprId) -> Option<(Var, Type)> {
    let (Prim::Build, bargs) = prim_call(body, w)? else { return None };
    let [n, lam] = bargs[..] else { return None };
    let Expr::Lam(t, _, tb) = &body.exprs[lam] else { return None };
    if !matches!(&body.exprs[*tb], Expr::Var(x) if x == t) {
        return None;
    }
    let (Prim::Size, sargs) = prim_call(body, n)? else { return None };
    match &body.exprs[*sargs.first()?] {
        Expr::Var(v) => Some((v.clone(), body.ty(sargs[0]).clone())),
        _ => None,
    }
}

/// How a fold's step uses its parameter and a vector `v`.
struct ElementUses {
    /// The `index t v` nodes, with their element expression `t`.
    reads: Vec<(ExprId, ExprId)>,
    /// The parameter's occurrences.
    params: Vec<ExprId>,
    /// The `get$2$2` of the parameter that bind the element's names.
    seconds: Vec<ExprId>,
}

/// The uses in a fold's step `step` (parameter `param`) of its element,
/// `get$2$2 param` or a name the step's first lets bind to it, if it is
/// used only to read `index t v` and those are the step's only uses of `v`
/// (None otherwise, or if a name these rely on is bound again inside).
fn element_uses(body: &Body, step: ExprId, param: &Var, v: &Var) -> Option<ElementUses> {
    // The parameter's node in `get$2$2 param`.
    let get2_of = |e: ExprId| match prim_call(body, e) {
        Some((Prim::Get { index: 2, arity: 2 }, a)) if matches!(&body.exprs[a[0]], Expr::Var(x) if x == param) => {
            Some(a[0])
        }
        _ => None,
    };
    let is_get2 = |e: ExprId| get2_of(e).is_some();
    let mut uses = ElementUses { reads: Vec::new(), params: Vec::new(), seconds: Vec::new() };
    // The element's names, bound by the step's first lets, and the
    // parameter's occurrences that may change type: there, in the reads and
    // under `get$1$2` (the accumulator keeps its type).
    let mut aliases: Vec<Var> = Vec::new();
    let mut retyped: Vec<ExprId> = Vec::new();
    let mut e = step;
    while let Expr::Let(pat, r, next) = &body.exprs[e] {
        match pat {
            Pat::Tuple(xs) if xs.len() == 2 && matches!(&body.exprs[*r], Expr::Var(x) if x == param) => {
                aliases.push(xs[1].clone());
                retyped.push(*r);
            }
            Pat::Var(x) if is_get2(*r) => {
                aliases.push(x.clone());
                uses.seconds.push(*r);
                retyped.extend(get2_of(*r));
            }
            _ => {}
        }
        e = *next;
    }
    let is_elem = |e: ExprId| is_get2(e) || matches!(&body.exprs[e], Expr::Var(x) if aliases.contains(x));
    // Names bound inside: never v or param; counts the aliases' bindings.
    let mut alias_bindings = 0;
    let mut bound = |xs: &[Var]| -> Option<()> {
        if xs.iter().any(|y| y == v || y == param) {
            return None;
        }
        alias_bindings += xs.iter().filter(|y| aliases.contains(y)).count();
        Some(())
    };
    let mut stack = vec![step];
    while let Some(x) = stack.pop() {
        if let Some((Prim::Index, ia)) = prim_call(body, x) {
            if matches!(&body.exprs[ia[1]], Expr::Var(y) if y == v) && is_elem(ia[0]) {
                uses.reads.push((x, ia[0]));
                uses.params.extend(get2_of(ia[0]));
                continue;
            }
        }
        if let Some((Prim::Get { index: 1, arity: 2 }, a)) = prim_call(body, x) {
            retyped.push(a[0]);
        }
        match &body.exprs[x] {
            // (Passed whole to a function, say, it would change type.)
            Expr::Var(y) if y == param && !retyped.contains(&x) => return None,
            Expr::Var(y) if y == param => uses.params.push(x),
            Expr::Var(y) if y == v || aliases.contains(y) => return None,
            _ if is_get2(x) && !uses.seconds.contains(&x) => return None,
            Expr::Let(pat, ..) => bound(pat.vars())?,
            Expr::Lam(y, ..) => bound(std::slice::from_ref(y))?,
            _ => {}
        }
        stack.extend(ksc_ir::term::children(&body.exprs[x]));
    }
    // Each name of the element is bound once, by the first lets.
    (alias_bindings == aliases.len()).then_some(uses)
}

/// The invariant reads of the fold at `e` moved before it; whether there
/// were any.
fn hoist(b: &mut Builder, e: ExprId) -> bool {
    let Expr::Call(Callee::Prim(p), arg) = b.body.exprs[e].clone() else { return false };
    let Expr::Tuple(args) = b.body.exprs[arg].clone() else { return false };
    let [lam, a, w] = args[..] else { return false };
    let Expr::Lam(param, _, step) = b.body.exprs[lam].clone() else { return false };
    // (A step that prints keeps its order.)
    let reads = if has_effect(b.body, step) { Vec::new() } else { invariant_reads(b.body, step, &param) };
    if reads.is_empty() {
        return false;
    }
    let fold_ty = b.ty(e);
    let (av, wv) = (b.fresh_name("a"), b.fresh_name("w"));
    let (a_ty, w_ty) = (b.ty(a), b.ty(w));
    let mut lets: Vec<(Pat, ExprId)> = vec![(Pat::Var(av.clone()), a), (Pat::Var(wv.clone()), w)];
    // Equal reads share one variable.
    let mut names: Vec<(ExprId, Var)> = Vec::new();
    for r in reads {
        if let Some((_, x)) = names.iter().find(|(s, _)| ksc_ir::term::alpha_eq(b.body, *s, b.body, r)) {
            let x = x.clone();
            b.body.exprs[r] = Expr::Var(x);
            continue;
        }
        let ty = b.ty(r);
        let x = b.fresh_name("row");
        let read = b.body.alloc_typed(b.body.exprs[r].clone(), ty.clone());
        // Each read tests the fold's emptiness itself: with one shared
        // test, the copies of a step that reverse mode's passes compare
        // (a fold and the scan of the same lambda) no longer came out
        // equal, and the step's values were computed twice.
        let wvar = b.var(&wv, w_ty.clone());
        let size = b.prim(Prim::Size, vec![wvar]);
        let zero = b.integer(0);
        let empty = b.prim(Prim::Eq, vec![size, zero]);
        let dummy = b.body.alloc_typed(Expr::Dummy(ty.clone()), ty.clone());
        let guarded = b.body.alloc_typed(Expr::If(empty, dummy, read), ty);
        lets.push((Pat::Var(x.clone()), guarded));
        b.body.exprs[r] = Expr::Var(x.clone());
        names.push((read, x));
    }
    let (a2, w2) = (b.var(&av, a_ty), b.var(&wv, w_ty));
    let call = b.tuple(vec![lam, a2, w2]);
    let mut out = b.body.alloc_typed(Expr::Call(Callee::Prim(p), call), fold_ty.clone());
    for (pat, rhs) in lets.into_iter().rev() {
        out = b.body.alloc_typed(Expr::Let(pat, rhs, out), fold_ty.clone());
    }
    b.body.exprs[e] = b.body.exprs[out].clone();
    true
}

/// The `index i v` nodes of `e` evaluated whenever `e` is (outside
/// branches, `assert` bodies and lambdas) whose free variables are bound
/// outside `e` (none is `param` or bound inside).
fn invariant_reads(body: &Body, e: ExprId, param: &Var) -> Vec<ExprId> {
    let mut out = Vec::new();
    let mut stack: Vec<(ExprId, Vec<Var>)> = vec![(e, vec![param.clone()])];
    while let Some((x, bound)) = stack.pop() {
        match &body.exprs[x] {
            Expr::Call(Callee::Prim(Prim::Index), a) => {
                let free = crate::derive::free_vars(body, *a);
                if !free.is_empty() && free.iter().all(|(v, _)| !bound.contains(v)) {
                    out.push(x);
                } else {
                    stack.push((*a, bound));
                }
            }
            Expr::Call(_, a) => stack.push((*a, bound)),
            Expr::Tuple(es) => stack.extend(es.iter().map(|&c| (c, bound.clone()))),
            Expr::Let(p, r, next) => {
                stack.push((*r, bound.clone()));
                let mut inner = bound;
                inner.extend(p.vars().iter().cloned());
                stack.push((*next, inner));
            }
            Expr::If(c, _, _) | Expr::Assert(c, _, _) => stack.push((*c, bound)),
            Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) | Expr::Lam(..) => {}
        }
    }
    out
}

/// Does `e` call a primitive with an effect (`print`, `$trace`)?
pub(crate) fn has_effect(body: &Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if matches!(&body.exprs[x], Expr::Call(Callee::Prim(p), _) if p.has_effect()) {
            return true;
        }
        stack.extend(ksc_ir::term::children(&body.exprs[x]));
    }
    false
}
