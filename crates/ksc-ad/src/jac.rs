//! `[jac f] : S -> Tensor 2 Float`, the dense Jacobian of `f : S -> T` at a
//! point (linear-maps-and-ad.md section 6): row r is the r-th Float of T's
//! tangent, column c the c-th Float of S's, both in the order of
//! `$tangentFlatten` (depth first, tuples left to right, tensors row-major).
//!
//! `[jac1 f]` is the Jacobian with respect to f's first parameter only (for
//! f of several parameters; the others, data, get zero tangents), as JAX's
//! `jacfwd(f)` differentiates with respect to the first argument.
//!
//! It is computed from the optimised derivatives the way seed 000 computes
//! `jacob`: column by column with `[fwd f]` applied to basis tangents, or
//! row by row with `[rev f]`, whichever is fewer (decided by the types when
//! both dimensions are fixed, else at run time). The derivative is inlined
//! into the loop over columns (rows), and after optimisation
//! [`hoist_loop_invariants`] moves the work that does not depend on the
//! column (the primal computation) out of that loop, so it is done once.

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};
use ksc_linmap::builder::Builder;
use ksc_opt::term::var_name;

/// The index variable of the loop over columns (forward mode) and over
/// rows (reverse mode); [`hoist_loop_invariants`] recognises the loops by it.
const COLUMN: &str = "ksc$column";
const ROW: &str = "ksc$row";

/// What the columns of the matrix are: the whole argument, or (for
/// `[jac1 f]` of a function of several parameters) its first parameter.
pub enum Active {
    All,
    First { ty: Type, arity: u32 },
}

impl Active {
    /// For `[d f]`, f of `params` parameters and argument type `s`.
    pub fn new(d: Derivation, s: &Type, params: usize) -> Active {
        match (d, s) {
            (Derivation::Jac1, Type::Tuple(ts)) if params >= 2 => {
                Active::First { ty: ts[0].clone(), arity: ts.len() as u32 }
            }
            _ => Active::All,
        }
    }

    /// The type of the active part of an argument of type `s`.
    fn ty<'a>(&'a self, s: &'a Type) -> &'a Type {
        match self {
            Active::All => s,
            Active::First { ty, .. } => ty,
        }
    }

    /// The active part of the argument `x` (a variable of type `s`).
    fn part(&self, b: &mut Builder, x: &str, s: &Type) -> ExprId {
        let v = b.var(x, s.clone());
        match self {
            Active::All => v,
            Active::First { arity, .. } => b.prim(Prim::Get { index: 1, arity: *arity }, vec![v]),
        }
    }

    /// The whole argument's tangent from the active part's `d`: zeros for
    /// the other parameters.
    fn extend(&self, b: &mut Builder, d: ExprId, x: &str, s: &Type) -> ExprId {
        let Active::First { arity, .. } = self else { return d };
        let mut parts = vec![d];
        for i in 2..=*arity {
            let v = b.var(x, s.clone());
            let w = b.prim(Prim::Get { index: i, arity: *arity }, vec![v]);
            parts.push(b.zero_tangent(w));
        }
        b.tuple(parts)
    }

    /// The active part of the whole argument's tangent `d`.
    fn project(&self, b: &mut Builder, d: ExprId) -> ExprId {
        match self {
            Active::All => d,
            Active::First { arity, .. } => b.prim(Prim::Get { index: 1, arity: *arity }, vec![d]),
        }
    }
}

/// Which derivatives `[jac f]` calls, for `f : S -> T`.
pub fn needs(active: &Active, s: &Type, t: &Type) -> Vec<Derivation> {
    match (active.ty(s).fixed_float_count(), t.fixed_float_count()) {
        (Some(0), _) | (_, Some(0)) => vec![],
        (Some(n), Some(m)) if n <= m => vec![Derivation::Fwd],
        (Some(_), Some(_)) => vec![Derivation::Rev],
        _ => vec![Derivation::Fwd, Derivation::Rev],
    }
}

/// `[jac f]` for `f : S -> T`:
///
/// ```text
/// [jac f] x = let y = f x; n = $tangentDim x; m = $tangentDim y
///             (for a tensor of Floats, y is not computed: m is the
///             product of `shape (f x)`, and the basis point the zeros of
///             that shape)
///             in if (n == 0 || m == 0) then (an m x n matrix)
///                else if n <= m then   -- columns by forward mode
///                  let cols = $concatN (n, m) (build n (lam c ($tangentFlatten ($inline ([fwd f] x ($tangentBasis x c))))))
///                  in build (m, n) (lam (r, c) cols[c, r])
///                else                  -- rows by reverse mode
///                  $concatN (m, n) (build m (lam r ($tangentFlatten ($inline ([rev f] x ($tangentBasis y r))))))
/// ```
///
/// with the tests decided here when the types fix the dimensions.
pub fn jac_def(name: Derivation, f: &FunName, s: &Type, t: &Type, active: &Active) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let (ds, dt) = (s.tangent().unwrap_or(Type::Unknown), t.tangent().unwrap_or(Type::Unknown));
    let var = |b: &mut Builder, name: &str, ty: &Type| b.var(name, ty.clone());
    let dim = |b: &mut Builder, fixed: Option<usize>, of: &dyn Fn(&mut Builder) -> ExprId| match fixed {
        Some(k) => b.integer(k as i64),
        None => {
            let v = of(b);
            b.prim(Prim::TangentDim, vec![v])
        }
    };
    let n = dim(&mut b, active.ty(s).fixed_float_count(), &|b| active.part(b, "ksc$x", s));
    // A result that is a tensor of Floats has as many as its shape says:
    // `shape (f x)`, which the shape rules compute without f's values where
    // they can, sizes the matrix, and the zeros of that shape are the point
    // of reverse mode's basis; f itself is not run. Any other result is
    // computed (`ksc$y`) for its dimension.
    let float_tensor = match t {
        Type::Tensor(rank, e) if **e == Type::Float => Some(*rank),
        _ => None,
    };
    let shape_ty = t.shape().unwrap_or(Type::Unknown);
    let m = match float_tensor {
        Some(rank) => {
            let dims: Vec<ExprId> = (0..rank)
                .map(|k| {
                    let sh = b.var("ksc$shape", shape_ty.clone());
                    if rank == 1 {
                        sh
                    } else {
                        b.prim(Prim::Get { index: k as u32 + 1, arity: rank as u32 }, vec![sh])
                    }
                })
                .collect();
            dims.into_iter().reduce(|p, q| b.int_op("mul", p, q)).expect("a rank of at least 1")
        }
        None => dim(&mut b, t.fixed_float_count(), &|b| b.var("ksc$y", t.clone())),
    };

    // The m x n matrix whose entry (r, c) is `entry(r, c)`.
    let matrix = |b: &mut Builder, entry: &dyn Fn(&mut Builder, ExprId, ExprId) -> ExprId| {
        let (m, n) = (var(b, "ksc$m", &Type::Integer), var(b, "ksc$n", &Type::Integer));
        let size = b.tuple(vec![m, n]);
        b.build(size, |b, rc| {
            let r = b.prim(Prim::Get { index: 1, arity: 2 }, vec![rc]);
            let rc2 = b.copy(rc);
            let c = b.prim(Prim::Get { index: 2, arity: 2 }, vec![rc2]);
            entry(b, r, c)
        })
    };
    // One derivative per column (forward) or row (reverse), flattened.
    let sweep = |b: &mut Builder, d: Derivation| {
        let (count, index, ret) = match d {
            Derivation::Fwd => ("ksc$n", COLUMN, &dt),
            _ => ("ksc$m", ROW, &ds),
        };
        let size = var(b, count, &Type::Integer);
        let k = var(b, index, &Type::Integer);
        let basis = if d == Derivation::Fwd {
            let point = active.part(b, "ksc$x", s);
            let e = b.prim(Prim::TangentBasis, vec![point, k]);
            active.extend(b, e, "ksc$x", s)
        } else {
            // A result of fixed dimension has a basis without its value
            // (`$dummy`: so f's result need not be computed for its shape).
            let point = match (t.fixed_float_count(), float_tensor) {
                (Some(_), _) => b.body.alloc_typed(Expr::Dummy(t.clone()), t.clone()),
                (None, Some(_)) => {
                    let sh = var(b, "ksc$shape", &shape_ty);
                    let zero = b.float(0.0);
                    b.prim(Prim::ConstVec, vec![sh, zero])
                }
                (None, None) => var(b, "ksc$y", t),
            };
            b.prim(Prim::TangentBasis, vec![point, k])
        };
        let x = var(b, "ksc$x", s);
        let call = b.call(f.derived(d), vec![x, basis], ret.clone());
        let inlined = b.prim(Prim::Inline, vec![call]);
        let derivative = if d == Derivation::Fwd { inlined } else { active.project(b, inlined) };
        let flat = b.prim(Prim::TangentFlatten, vec![derivative]);
        let lam = b.lam(index, Type::Integer, flat);
        let vectors = b.prim(Prim::Build, vec![size, lam]);
        // The rows (columns), one after the other: each is computed, copied
        // into the matrix (its transpose) and freed.
        let (m, n) = (var(b, "ksc$m", &Type::Integer), var(b, "ksc$n", &Type::Integer));
        let shape = if d == Derivation::Fwd { b.tuple(vec![n, m]) } else { b.tuple(vec![m, n]) };
        let stacked = b.prim(Prim::ConcatN, vec![shape, vectors]);
        if d != Derivation::Fwd {
            return stacked;
        }
        let tty = b.ty(stacked);
        let read = matrix(b, &|b, r, c| {
            let cols = b.var("ksc$columns", tty.clone());
            let cr = b.tuple(vec![c, r]);
            b.prim(Prim::Index, vec![cr, cols])
        });
        b.let_("ksc$columns", stacked, read)
    };
    let zeros = |b: &mut Builder| matrix(b, &|b, _, _| b.float(0.0));
    let result = match needs(active, s, t)[..] {
        [] => zeros(&mut b),
        [d] => sweep(&mut b, d),
        _ => {
            // Decided at run time; the zero test keeps the sweeps' loops
            // non-empty, so work hoisted out of them runs only if they would.
            // (A fixed dimension is not 0 here: `needs` is empty then.)
            let mut zero_tests = Vec::new();
            for (name, fixed) in [("ksc$n", active.ty(s).fixed_float_count()), ("ksc$m", t.fixed_float_count())] {
                if fixed.is_none() {
                    let (d, z) = (var(&mut b, name, &Type::Integer), b.integer(0));
                    zero_tests.push(b.prim(Prim::Eq, vec![d, z]));
                }
            }
            let bools = Type::Tuple(vec![Type::Bool, Type::Bool]);
            let empty = zero_tests
                .into_iter()
                .reduce(|p, q| b.call(FunName::typed("or", bools.clone()), vec![p, q], Type::Bool))
                .expect("a dimension that is not fixed");
            let (n1, m1) = (var(&mut b, "ksc$n", &Type::Integer), var(&mut b, "ksc$m", &Type::Integer));
            let columns = b.int_test("lte", n1, m1);
            let fwd = sweep(&mut b, Derivation::Fwd);
            let rev = sweep(&mut b, Derivation::Rev);
            let choose = b.body.alloc_typed(Expr::If(columns, fwd, rev), Type::tensor(2, Type::Float));
            let z = zeros(&mut b);
            b.body.alloc_typed(Expr::If(empty, z, choose), Type::tensor(2, Type::Float))
        }
    };
    let with_dims = b.let_("ksc$m", m, result);
    let with_dims = b.let_("ksc$n", n, with_dims);
    let x = var(&mut b, "ksc$x", s);
    let y = b.call(f.clone(), vec![x], t.clone());
    let root = match float_tensor {
        Some(_) => {
            let sh = b.prim(Prim::Shape, vec![y]);
            b.let_("ksc$shape", sh, with_dims)
        }
        None => b.let_("ksc$y", y, with_dims),
    };
    Def {
        name: f.derived(name),
        params: vec![Param { name: "ksc$x".into(), ty: s.clone() }],
        ret_ty: Type::tensor(2, Type::Float),
        body,
        root,
    }
}

/// Moves the leading `let`s of the column (row) loops of a `[jac f]` whose
/// right sides do not depend on the column (row), and have no effect, out
/// of the loop: after inlining they are the primal computation of `f`,
/// shared by all columns. `jac_def` only makes these loops where they run
/// at least once, so a hoisted computation that fails would have failed in
/// the loop.
pub fn hoist_loop_invariants(def: &mut Def, globals: &ksc_opt::Globals) {
    // In A-normal form, the primal computations that the last cleanup put
    // back into argument positions are lets of the loops' bodies again.
    // (`fresh` then names what is made below: a split fold's values.)
    let params: Vec<String> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = ksc_opt::term::fresh_floor(&def.body, def.root, params.iter());
    {
        let mut b = Builder::new(&mut def.body, &mut fresh);
        def.root = ksc_opt::anf(&mut b, def.root, &params);
    }
    let mut cache = ksc_opt::term::Cache::new();
    let loops = column_loops(&def.body, def.root);
    for (e, (n, index, ity, lam_body)) in loops {
        let (chain, rest) = crate::apply::let_chain(&def.body, lam_body);
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
            let values = ksc_linmap::builder::call_of(&def.body, r, Prim::Get { index: 1, arity: 2 })
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
            let zero = ksc_opt::term::is_zero(&def.body, r);
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
        let new_body = crate::apply::wrap(&mut b, kept, rest);
        let lam = b.lam(&index, ity, new_body);
        let build = b.prim(Prim::Build, vec![n, lam]);
        // The loop's node becomes the hoisted lets around the new loop.
        let (p0, r0) = hoisted.remove(0);
        let inner = crate::apply::wrap(&mut b, hoisted, build);
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
fn values_of_pair_fold(
    b: &mut Builder,
    cache: &mut ksc_opt::term::Cache,
    defs: &FxHashMap<String, ExprId>,
    e: ExprId,
) -> Option<ExprId> {
    use ksc_linmap::builder::{call_of, prim_call};
    let def_of = |b: &Builder, x: ExprId| match &b.body.exprs[x] {
        Expr::Var(v) => defs.get(v).copied(),
        _ => Some(x),
    };
    let [lam, init, pairs] = call_of(b.body, e, Prim::Fold)?[..] else { return None };
    let init = def_of(b, init)?;
    let Expr::Tuple(parts) = &b.body.exprs[init] else { return None };
    let [a0, _] = parts[..] else { return None };
    let [n, elems] = call_of(b.body, def_of(b, pairs)?, Prim::Build)?[..] else { return None };
    let Expr::Lam(i, ity, elem) = b.body.exprs[elems].clone() else { return None };
    let (elem_lets, elem_tail) = crate::apply::let_chain(b.body, elem);
    let Expr::Tuple(pair) = &b.body.exprs[elem_tail] else { return None };
    let value = pair[0];
    let Expr::Lam(param, pty, step) = b.body.exprs[lam].clone() else { return None };
    let Type::Tuple(ab) = &pty else { return None };
    let (Type::Tuple(a), Type::Tuple(x)) = (&ab[0], &ab[1]) else { return None };
    if a.len() != 2 || x.len() != 2 {
        return None;
    }
    let q_ty = Type::Tuple(vec![a[0].clone(), x[0].clone()]);
    let (mut lets, tail) = crate::apply::let_chain(b.body, step);
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
    // the parameter down. Values are under (1 or 2, 2) then (1, 2).
    let mut paths: FxHashMap<String, Vec<(u32, u32)>> = FxHashMap::from_iter([(param.clone(), vec![])]);
    let is_value = |path: &[(u32, u32)]| path.len() >= 2 && path[1] == (1, 2);
    let q = b.fresh_name("q");
    let mut new_lets: Vec<(Pat, ExprId)> = Vec::new();
    let projection = |b: &mut Builder, path: &[(u32, u32)]| {
        let mut e = b.var(&q, q_ty.clone());
        e = b.prim(Prim::Get { index: path[0].0, arity: 2 }, vec![e]);
        for &(index, arity) in &path[2..] {
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
                let r = ksc_opt::term::deep_copy(b, *r);
                new_lets.push((p.clone(), r));
            }
        }
    }
    if cache.free_vars(b.body, v).iter().any(|x| paths.get(x).is_some_and(|path| !is_value(path))) {
        return None;
    }
    let v = ksc_opt::term::deep_copy(b, v);
    let step = crate::apply::wrap(b, new_lets, v);
    let step = b.lam(&q, q_ty.clone(), step);
    let elem_wanted = read_by(b.body, cache, &elem_lets, value);
    let elem_lets: Vec<(Pat, ExprId)> = elem_lets
        .into_iter()
        .zip(elem_wanted)
        .filter(|(_, w)| *w)
        .map(|((p, r), _)| (p, ksc_opt::term::deep_copy(b, r)))
        .collect();
    let value = ksc_opt::term::deep_copy(b, value);
    let elem = crate::apply::wrap(b, elem_lets, value);
    let elems = b.lam(&i, ity, elem);
    let n = ksc_opt::term::deep_copy(b, n);
    let elems = b.prim(Prim::Build, vec![n, elems]);
    let a0 = ksc_opt::term::deep_copy(b, a0);
    Some(b.prim(Prim::Fold, vec![step, a0, elems]))
}

/// Which of the `lets` (of a let-chain ending in `e`) `e` reads, directly
/// or through later ones.
fn read_by(body: &Body, cache: &mut ksc_opt::term::Cache, lets: &[(Pat, ExprId)], e: ExprId) -> Vec<bool> {
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
fn component(b: &mut Builder, cache: &mut ksc_opt::term::Cache, e: ExprId, index: u32, arity: u32) -> Option<ExprId> {
    let ty = |b: &Builder, e: ExprId| b.body.ty(e).clone();
    Some(match b.body.exprs[e].clone() {
        Expr::Tuple(es) if es.len() == arity as usize => ksc_opt::term::deep_copy(b, es[index as usize - 1]),
        Expr::If(c, t, f) => {
            let (t, f) = (component(b, cache, t, index, arity)?, component(b, cache, f, index, arity)?);
            let c = ksc_opt::term::deep_copy(b, c);
            let t_ty = ty(b, t);
            b.body.alloc_typed(Expr::If(c, t, f), t_ty)
        }
        Expr::Assert(c, x) => {
            let x = component(b, cache, x, index, arity)?;
            let c = ksc_opt::term::deep_copy(b, c);
            let x_ty = ty(b, x);
            b.body.alloc_typed(Expr::Assert(c, x), x_ty)
        }
        Expr::Let(p, r, x) => {
            let x = component(b, cache, x, index, arity)?;
            if !p.vars().iter().any(|v| cache.free_vars(b.body, x).contains(v)) {
                return Some(x);
            }
            let r = ksc_opt::term::deep_copy(b, r);
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
    /// After `assert c`.
    Assert(ExprId),
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
pub fn hoist_inner_invariants(def: &mut Def, globals: &ksc_opt::Globals) -> bool {
    let params: Vec<String> = def.params.iter().map(|p| p.name.clone()).collect();
    let mut fresh = ksc_opt::term::fresh_floor(&def.body, def.root, params.iter());
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
        let wrapped = crate::apply::wrap(&mut b, lets, inner);
        b.body.exprs[column_loop] = b.body.exprs[wrapped].clone();
        moved = true;
    }
    moved
}

/// The values of the body of the column (row) loop over `column` that
/// [`hoist_inner_invariants`] moves, each with the way to it.
fn inner_invariants(body: &Body, globals: &ksc_opt::Globals, column: &str, root: ExprId) -> Vec<(ExprId, Vec<Step>)> {
    let mut cache = ksc_opt::term::Cache::new();
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
        let variant = |cache: &mut ksc_opt::term::Cache, e: ExprId| {
            cache.free_vars(body, e).iter().any(|v| scope.get(v).and_then(|s| s.last()).copied().unwrap_or(false))
        };
        if in_loop > 0
            && ksc_opt::costly(body, x)
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
            Expr::Assert(c, next) => {
                if !variant(&mut cache, *c) {
                    work.push(Work::Close(0));
                    work.push(Work::Visit(*next));
                    work.push(Work::Open(Step::Assert(*c), Vec::new()));
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
            node => work.extend(ksc_opt::term::children(node).into_iter().rev().map(Work::Visit)),
        }
    }
    found
}

/// Is `e` a loop whose terms are a known zero (a tangent that is zero, kept
/// for the failure of an empty `sumbuild`)? Not worth a vector.
fn sums_zeros(body: &Body, e: ExprId) -> bool {
    let Expr::Call(Callee::Prim(Prim::Build | Prim::Sumbuild), arg) = &body.exprs[e] else { return false };
    let Expr::Tuple(parts) = &body.exprs[*arg] else { return false };
    matches!(parts[..], [_, lam] if matches!(&body.exprs[lam], Expr::Lam(_, _, b) if ksc_opt::term::is_zero(body, *b)))
}

/// `pre` for the value at `x` reached by `path` (see
/// [`hoist_inner_invariants`]): x under the steps it needs, innermost
/// first, and the index of its loop. None when x does not read that index
/// (it is the same in every iteration, not worth a vector), when a let on
/// the way binds that index again, or when what it would copy has an
/// effect (it would happen twice).
fn precompute(b: &mut Builder, globals: &ksc_opt::Globals, x: ExprId, path: &[Step]) -> Option<(ExprId, String)> {
    let mut cache = ksc_opt::term::Cache::new();
    let ty = b.ty(x);
    let mut acc = b.body.alloc_typed(b.body.exprs[x].clone(), ty);
    let mut needed: FxHashSet<String> = cache.free_vars(b.body, acc).iter().cloned().collect();
    let mut index = None;
    for step in path.iter().rev() {
        let ty = b.ty(acc);
        let copied = match step {
            Step::Let(p, _) if !p.vars().iter().any(|v| needed.contains(v)) => continue,
            Step::Let(_, e) | Step::If(e, _) | Step::Assert(e) | Step::Loop(e, _) => *e,
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
                let r = ksc_opt::term::deep_copy(b, *r);
                b.body.alloc_typed(Expr::Let(p.clone(), r, acc), ty)
            }
            Step::If(c, then) => {
                needed.extend(cache.free_vars(b.body, *c).iter().cloned());
                let c = ksc_opt::term::deep_copy(b, *c);
                let none = b.body.alloc_typed(Expr::Dummy(ty.clone()), ty.clone());
                let (t, f) = if *then { (acc, none) } else { (none, acc) };
                b.body.alloc_typed(Expr::If(c, t, f), ty)
            }
            Step::Assert(c) => {
                needed.extend(cache.free_vars(b.body, *c).iter().cloned());
                let c = ksc_opt::term::deep_copy(b, *c);
                b.body.alloc_typed(Expr::Assert(c, acc), ty)
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
                let size = ksc_opt::term::deep_copy(b, *size);
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
pub fn mark_calls_in_loops(def: &mut Def, globals: &ksc_opt::Globals) -> bool {
    let mut stack = vec![(def.root, false)];
    let mut calls = Vec::new();
    while let Some((e, inside)) = stack.pop() {
        let inside = inside || loop_parts(&def.body, e).is_some();
        match &def.body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Inline), _) => continue,
            Expr::Call(Callee::Fun(g), _)
                if inside
                    && globals.small_def(g, INLINE_INTO_LOOP, ksc_opt::Measure::Arena).is_some()
                    && !globals.is_recursive(g) =>
            {
                calls.push(e)
            }
            _ => {}
        }
        stack.extend(ksc_opt::term::children(&def.body.exprs[e]).into_iter().map(|c| (c, inside)));
    }
    for &e in &calls {
        ksc_opt::term::mark_inline(&mut def.body, e);
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
        stack.extend(ksc_opt::term::children(&body.exprs[e]));
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
