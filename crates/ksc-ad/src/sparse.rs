//! `[jacsparse f]`: the Jacobian of `f : S -> T` in compressed sparse row
//! form, computed block by block (linear-maps-and-ad.md section 6).
//!
//! The result, of type [`Type::sparse_matrix`], is
//! `(tuple (tuple m n) row_offsets columns values)`: m rows (T's tangent,
//! flattened as `[jac f]` flattens it), n columns (S's tangent, or with
//! `[jacsparse1 f]` that of f's first parameter), `row_offsets` of m + 1
//! entries, and for row r the entries `row_offsets[r] ..
//! row_offsets[r+1]` of `columns` and `values`. The columns of a row are
//! those of the inputs its output element reads, in ascending order; entries
//! are structural, so some values may be 0. If two reads of one output
//! element reach the same input element through different index
//! expressions (`x[i]` and `x[j]` with i = j), its columns appear twice, next
//! to each other, and the derivative is the sum of the two entries (as with
//! scipy's `csr_matrix`).
//!
//! The blocks come from f's result: a tuple of components (or one), each a
//! `build n (lam (i : Integer) e)` or any other expression. An element `e`
//! depends on the differentiated inputs ("active" variables: f's
//! parameters, and the variables a top-level `let` destructures them into)
//! through reads `index a v` of an active vector `v` whose index `a` does not
//! depend on them ("gathers"), and through every other use of an active
//! variable, which makes it depend on all of it. ksc makes one function of
//! the gathered values per component, takes its dense Jacobian with
//! `[jac1 ..]` (so the block's primal work is shared by its columns or
//! rows), and places the block's columns at the positions of the gathered
//! elements. A component that is not a `build` is one block.
//!
//! Top-level `let`s of f that compute Floats from active variables (a `sum`
//! of an input, say) are recomputed in every block that uses them, with the
//! active variables they read as whole inputs: correct, but dense in those.

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::builder::Builder;
use ksc_ir::term::{alpha_eq, children, copy_tree, Cache};
use ksc_ir::term::{let_chain, wrap};
use ksc_ir::{Body, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type, Var};

use crate::apply::int_pair;
use crate::jacobians::has_float;

/// ksc's own .ks functions that `[jacsparse f]` calls.
const LIBRARY: &str = include_str!("sparse.ks");

/// The function that puts a block's columns in ascending order.
fn sorted_block() -> FunName {
    let (ivec, matrix) = (Type::vec(Type::Integer), Type::tensor(2, Type::Float));
    FunName::typed("ksc$sortedBlock", Type::Tuple(vec![matrix, ivec.clone(), ivec]))
}

/// The function that gives a block's matrix columns in ascending order.
fn sorted_columns() -> FunName {
    let ivec = Type::vec(Type::Integer);
    FunName::typed("ksc$sortedColumns", Type::Tuple(vec![ivec.clone(), ivec]))
}

/// The definitions of `sparse.ks`, checked (once per process).
pub fn library() -> &'static [Def] {
    static LIBRARY_DEFS: std::sync::OnceLock<Vec<Def>> = std::sync::OnceLock::new();
    LIBRARY_DEFS.get_or_init(|| {
        let analysis = ksc_types::analyze(LIBRARY);
        assert!(!analysis.has_errors(), "sparse.ks: {:?}", analysis.diagnostics);
        analysis.defs().into_iter().filter(|d| d.name.base.starts_with("ksc$")).cloned().collect()
    })
}

/// `[jacsparse f]` and the block functions whose `[jac1 ..]` it calls.
pub struct Sparse {
    pub def: Def,
    pub blocks: Vec<Def>,
}

/// Where an active variable's Floats are among the matrix's columns.
#[derive(Clone)]
struct Columns {
    /// The variable (of the sparse function) holding its first column.
    offset: Var,
    /// For a vector of elements whose dimension the type does not fix, the
    /// variable holding the first column of each element relative to
    /// `offset` (n + 1 entries).
    starts: Option<Var>,
    /// Its place in the order of columns: the parameter's position, then
    /// the component's in each tuple taken apart.
    key: Vec<usize>,
    /// For a part of a tuple taken apart: the tuple and the position of the
    /// `let` in f's top-level chain that binds the part.
    parent: Option<(Var, usize)>,
}

/// What an element reads of the active variables.
enum Gather {
    /// `index a v` of an active vector: `a` in f's body, the name the
    /// element gets in the block function.
    Elem { a: ExprId, v: Var, name: Var },
    /// All of the active variable.
    Whole(Var),
}

/// The number of Floats in the variable `v` of type `ty`.
fn dim_of(b: &mut Builder, v: &str, ty: &Type) -> ExprId {
    match ty.fixed_float_count() {
        Some(k) => b.integer(k as i64),
        None => {
            let x = b.var(v, ty.clone());
            b.prim(Prim::TangentDim, vec![x])
        }
    }
}

/// The state of f's scope, let by let: the types of the names in scope, the
/// active variables and their columns, and the names bound by lets that
/// compute Floats from active variables (recomputed inside blocks), with
/// the position of their let in f's top-level `chain`.
struct Scope {
    types: FxHashMap<Var, Type>,
    active: FxHashMap<Var, Columns>,
    inner: FxHashMap<Var, usize>,
    chain: Vec<(Pat, ExprId)>,
}

impl Scope {
    fn bind(&mut self, names: &[Var], tys: &[Type]) {
        for (n, t) in names.iter().zip(tys) {
            self.active.remove(n);
            self.inner.remove(n);
            self.types.insert(n.clone(), t.clone());
        }
    }
}

pub fn jacsparse_def(d: Derivation, f: &Def) -> Sparse {
    let src = &f.body;
    let mut cache = Cache::new();
    let mut body = Body::new();
    // Fresh names above f's own `ksc$` names (a derived f has many).
    let mut fresh = ksc_ir::term::fresh_floor(src, f.root, f.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut body, &mut fresh);
    // f's top-level lets; if one rebinds a name, the blocks could not pass
    // values by name, so the whole body is one block.
    let (chain, result) = {
        let (chain, result) = let_chain(src, f.root);
        let mut names: FxHashSet<&Var> = f.params.iter().map(|p| &p.name).collect();
        let rebinds = chain.iter().flat_map(|(p, _)| p.vars()).any(|v| !names.insert(v));
        if rebinds {
            (Vec::new(), f.root)
        } else {
            (chain, result)
        }
    };
    let mut scope = Scope {
        types: FxHashMap::default(),
        active: FxHashMap::default(),
        inner: FxHashMap::default(),
        chain: chain.clone(),
    };
    // The sparse function's lets before its result, in order.
    let mut outer: Vec<(Pat, ExprId)> = Vec::new();

    // The parameters: all active, or only the first (`[jacsparse1 f]` of a
    // function of several parameters).
    let first_only = d == Derivation::JacSparse1 && f.params.len() >= 2;
    let mut total: Option<ExprId> = None;
    for (k, p) in f.params.iter().enumerate() {
        scope.bind(std::slice::from_ref(&p.name), std::slice::from_ref(&p.ty));
        if (first_only && k > 0) || !has_float(&p.ty) {
            continue;
        }
        let start = total.take().unwrap_or_else(|| b.integer(0));
        let dim = dim_of(&mut b, &p.name, &p.ty);
        let key = vec![k];
        total = Some(add_active(&mut b, &mut outer, &mut scope, &p.name, &p.ty, start, Some(dim), key, None));
    }
    let n_columns = total.unwrap_or_else(|| b.integer(0));
    let n_columns_var = b.fresh_name("ncols");
    outer.push((Pat::Var(n_columns_var.clone()), n_columns));

    // f's top-level lets, classified.
    for (at, (p, r)) in chain.into_iter().enumerate() {
        let copy = copy_tree(b.body, Some(src), r);
        let rty = src.ty(r).clone();
        let tys: Vec<Type> = match (&p, &rty) {
            (Pat::Tuple(vs), Type::Tuple(ts)) if vs.len() == ts.len() => ts.clone(),
            _ => vec![rty.clone()],
        };
        let fv = cache.free_vars(src, r);
        // A tuple of active variables taken apart: its parts are active,
        // their columns consecutive.
        let parts_of: Option<(Var, Option<usize>)> = match (&src.exprs[r], &p) {
            (Expr::Var(a), Pat::Tuple(_)) if scope.active.contains_key(a) => Some((a.clone(), None)),
            (Expr::Call(ksc_ir::Callee::Prim(Prim::Get { index, .. }), x), Pat::Var(_)) => match &src.exprs[*x] {
                Expr::Var(a) if scope.active.contains_key(a) => Some((a.clone(), Some(*index as usize))),
                _ => None,
            },
            _ => None,
        };
        let depends = fv.iter().any(|v| scope.active.contains_key(v) || scope.inner.contains_key(v));
        outer.push((p.clone(), copy));
        match parts_of {
            Some((a, which)) => {
                let Type::Tuple(all) = scope.types[&a].clone() else { unreachable!("a tuple pattern of a tuple") };
                let cols = scope.active[&a].clone();
                scope.bind(p.vars(), &tys);
                let mut start = b.var(&cols.offset, Type::Integer);
                for (k, t) in all.iter().enumerate() {
                    let here = match which {
                        None => Some(p.vars()[k].clone()),
                        Some(w) => (w == k + 1).then(|| p.vars()[0].clone()),
                    };
                    // The dimension of a part not bound here comes from the tuple.
                    let dim = match (&here, t.fixed_float_count()) {
                        (_, Some(c)) => b.integer(c as i64),
                        (Some(v), None) => dim_of(&mut b, v, t),
                        (None, None) => {
                            let whole = b.var(&a, Type::Tuple(all.clone()));
                            let part = b.prim(Prim::Get { index: k as u32 + 1, arity: all.len() as u32 }, vec![whole]);
                            b.prim(Prim::TangentDim, vec![part])
                        }
                    };
                    match here {
                        Some(v) if has_float(t) => {
                            let key = [&cols.key[..], &[k]].concat();
                            let parent = Some((a.clone(), at));
                            start = add_active(&mut b, &mut outer, &mut scope, &v, t, start, Some(dim), key, parent);
                        }
                        _ => start = b.int_op("add", start, dim),
                    }
                    if which.is_some_and(|w| w == k + 1) {
                        break;
                    }
                }
            }
            None => {
                scope.bind(p.vars(), &tys);
                if depends && has_float(&rty) {
                    for v in p.vars() {
                        scope.inner.insert(v.clone(), at);
                    }
                }
            }
        }
    }

    // The components of the result: each a number of elements, the index
    // of the element, and its block.
    let components: Vec<ExprId> = match &src.exprs[result] {
        Expr::Tuple(es) => es.clone(),
        _ => vec![result],
    };
    let mut parts = Vec::new();
    let mut blocks = Vec::new();
    for (c, &ec) in components.iter().enumerate() {
        let cty = src.ty(ec).clone();
        if cty.fixed_float_count() == Some(0) {
            continue;
        }
        // (Sizes and indices are Integers: their free variables, evaluated
        // outside the blocks where every top-level let is, carry no derivative.)
        let lp = loop_of(src, ec);
        let (index, elem) = match &lp {
            Some((_, i, e)) => (i.clone(), *e),
            None => (b.fresh_name("i"), ec),
        };
        let name = FunName::plain(format!("{}${}", block_prefix(&f.name.derived(d)), c + 1));
        let (block, gathers, in_order) = block_def(src, &mut cache, &scope, (name, &mut b), &index, elem);
        let element = element_block(&mut b, src, &scope, (&block, &gathers, in_order), &index);
        let count = match lp {
            Some((n, _, _)) => copy_tree(b.body, Some(src), n),
            None => b.integer(1),
        };
        let count_name = b.fresh_name("n");
        outer.push((Pat::Var(count_name.clone()), count));
        parts.push(Component { count: count_name, index, element });
        blocks.push(block);
    }
    let root = assemble(&mut b, &mut outer, &parts, &n_columns_var);
    let root = wrap(&mut b, outer, root);
    let def = Def { name: f.name.derived(d), params: f.params.clone(), ret_ty: Type::sparse_matrix(), body, root };
    Sparse { def, blocks }
}

/// Makes `v` (of type `ty`) active with its first column at `start`; binds
/// its offset (and element starts) in `outer`; returns its end column.
#[allow(clippy::too_many_arguments)]
fn add_active(
    b: &mut Builder,
    outer: &mut Vec<(Pat, ExprId)>,
    scope: &mut Scope,
    v: &str,
    ty: &Type,
    start: ExprId,
    dim: Option<ExprId>,
    key: Vec<usize>,
    parent: Option<(Var, usize)>,
) -> ExprId {
    let offset = b.fresh_name("col");
    outer.push((Pat::Var(offset.clone()), start));
    // Element starts of a vector whose elements' dimension is not fixed.
    let starts = match ty {
        Type::Tensor(1, elem) if elem.fixed_float_count().is_none() => {
            let name = b.fresh_name("starts");
            let pair = Type::Tuple(vec![Type::Integer, (**elem).clone()]);
            let acc = b.fresh_name("acc_x");
            let p1 = b.var(&acc, pair.clone());
            let sofar = b.prim(Prim::Get { index: 1, arity: 2 }, vec![p1]);
            let p2 = b.var(&acc, pair.clone());
            let x = b.prim(Prim::Get { index: 2, arity: 2 }, vec![p2]);
            let dx = b.prim(Prim::TangentDim, vec![x]);
            let next = b.int_op("add", sofar, dx);
            let lam = b.lam(&acc, pair, next);
            let zero = b.integer(0);
            let vv = b.var(v, ty.clone());
            let scan = b.prim(Prim::Scan, vec![lam, zero, vv]);
            outer.push((Pat::Var(name.clone()), scan));
            Some(name)
        }
        _ => None,
    };
    scope.active.insert(v.to_string(), Columns { offset: offset.clone(), starts, key, parent });
    let dim = dim.unwrap_or_else(|| dim_of(b, v, ty));
    let off = b.var(&offset, Type::Integer);
    b.int_op("add", off, dim)
}

/// `build n (lam (i : Integer) e)`: n, i and e.
fn loop_of(src: &Body, e: ExprId) -> Option<(ExprId, Var, ExprId)> {
    let Expr::Call(ksc_ir::Callee::Prim(Prim::Build), arg) = &src.exprs[e] else { return None };
    let Expr::Tuple(parts) = &src.exprs[*arg] else { return None };
    let [n, lam] = parts[..] else { return None };
    match &src.exprs[lam] {
        Expr::Lam(i, Type::Integer, body) => Some((n, i.clone(), *body)),
        _ => None,
    }
}

/// The names of the block functions of `[jacsparse f]`:
/// `ksc$jacsparse$f$1`, `ksc$jacsparse$f$2`, .. (their types tell overloads apart).
fn block_prefix(name: &FunName) -> String {
    let mut s = String::from("ksc");
    for d in &name.derivs {
        s.push('$');
        s.push_str(d.keyword());
    }
    s.push('$');
    s.push_str(&name.base);
    s
}

/// The block function of an element `e` (in the scope of the index
/// `index`): `(def name R ((gathered : G) (index : Integer) data..) e')`
/// with the gathers of `e` replaced by the parts of `gathered`; and the
/// gathers.
fn block_def(
    src: &Body,
    cache: &mut Cache,
    scope: &Scope,
    (name, namer): (FunName, &mut Builder),
    index: &str,
    e: ExprId,
) -> (Def, Vec<Gather>, bool) {
    // Reads of active variables in e, and the inner lets e needs.
    let mut candidates: Vec<(ExprId, ExprId, Var)> = Vec::new();
    let mut whole: Vec<Var> = Vec::new();
    let mut needed_inner: FxHashSet<usize> = FxHashSet::default();
    let mut stack: Vec<(ExprId, Vec<Var>)> = vec![(e, Vec::new())];
    let shadowed = |bound: &[Var], v: &str| bound.iter().any(|b| b == v);
    while let Some((x, bound)) = stack.pop() {
        let node = &src.exprs[x];
        if let Some((a, v)) = gather_candidate(src, x) {
            let ok = scope.active.contains_key(&v)
                && v != index
                && !shadowed(&bound, &v)
                && matches!(scope.types.get(&v), Some(Type::Tensor(1, _)))
                && cache.free_vars(src, a).iter().all(|w| !shadowed(&bound, w));
            if ok {
                candidates.push((x, a, v));
                continue;
            }
        }
        if let Expr::Var(v) = node {
            // (The index of the loop may shadow a name of f's scope.)
            if !shadowed(&bound, v) && v != index {
                if scope.active.contains_key(v) && !whole.contains(v) {
                    whole.push(v.clone());
                } else if let Some(&k) = scope.inner.get(v) {
                    needed_inner.insert(k);
                }
            }
        }
        // Children pushed last first, so reads are found in evaluation order.
        for (i, c) in children(node).into_iter().enumerate().rev() {
            let mut inner_bound = bound.clone();
            inner_bound.extend(ksc_ir::term::binds_for_child(node, i).iter().cloned());
            stack.push((c, inner_bound));
        }
    }
    // The inner lets needed, with the ones they need, in order; the active
    // variables they read are read whole.
    let mut k = scope.chain.len();
    while k > 0 {
        k -= 1;
        if !needed_inner.contains(&k) {
            continue;
        }
        let (_, r) = &scope.chain[k];
        for v in cache.free_vars(src, *r).iter() {
            if let Some(&j) = scope.inner.get(v).filter(|&&j| j < k) {
                needed_inner.insert(j);
            }
            if scope.active.contains_key(v) && !whole.contains(v) {
                whole.push(v.clone());
            }
        }
    }
    // A part of a tuple that is read whole is not gathered: the block takes
    // it apart again (the lets from the tuple down to the part).
    let whole_ancestor = |v: &Var| {
        let mut at = scope.active[v].parent.clone();
        let mut lets = Vec::new();
        while let Some((up, k)) = at {
            lets.push(k);
            if whole.contains(&up) {
                return Some(lets);
            }
            at = scope.active[&up].parent.clone();
        }
        None
    };
    let read: Vec<Var> = whole.iter().cloned().chain(candidates.iter().map(|c| c.2.clone())).collect();
    let covered: FxHashSet<Var> = read
        .into_iter()
        .filter(|v| match whole_ancestor(v) {
            Some(lets) => {
                needed_inner.extend(lets);
                true
            }
            None => false,
        })
        .collect();
    whole.retain(|v| !covered.contains(v));
    // Element gathers of variables not read whole, one per distinct read.
    let mut gathers: Vec<Gather> = Vec::new();
    let mut replace: FxHashMap<ExprId, Var> = FxHashMap::default();
    for (x, a, v) in candidates {
        if whole.contains(&v) || covered.contains(&v) {
            continue;
        }
        let same = gathers.iter().find_map(|g| match g {
            Gather::Elem { a: a2, v: v2, name } if *v2 == v && alpha_eq(src, a, src, *a2) => Some(name.clone()),
            _ => None,
        });
        let name = same.unwrap_or_else(|| {
            let name = namer.fresh_name("gather");
            gathers.push(Gather::Elem { a, v: v.clone(), name: name.clone() });
            name
        });
        replace.insert(x, name);
    }
    gathers.extend(whole.into_iter().map(Gather::Whole));
    // In the order of the columns of the variables read (so that only reads
    // of one variable at indices known at run time may need sorting).
    let var_of = |g: &Gather| match g {
        Gather::Elem { v, .. } | Gather::Whole(v) => v.clone(),
    };
    gathers.sort_by(|g, h| scope.active[&var_of(g)].key.cmp(&scope.active[&var_of(h)].key));
    let in_order = gathers.windows(2).all(|w| var_of(&w[0]) != var_of(&w[1]));

    // The block function's body: the gathered values taken apart, the
    // inner lets, e with the gathers replaced.
    let mut body = Body::new();
    let mut fresh_names = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh_names);
    let e2 = copy_replacing(b.body, src, e, &replace);
    let mut lets: Vec<(Pat, ExprId)> = Vec::new();
    let mut sorted: Vec<usize> = needed_inner.into_iter().collect();
    sorted.sort();
    for k in sorted {
        let (p, r) = &scope.chain[k];
        lets.push((p.clone(), copy_tree(b.body, Some(src), *r)));
    }
    let inner = wrap(&mut b, lets, e2);
    let (names, tys): (Vec<Var>, Vec<Type>) = gathers
        .iter()
        .map(|g| match g {
            Gather::Elem { a: _, v, name } => {
                let Type::Tensor(_, elem) = &scope.types[v] else { unreachable!("a gather of a vector") };
                (name.clone(), (**elem).clone())
            }
            Gather::Whole(v) => (v.clone(), scope.types[v].clone()),
        })
        .unzip();
    let gathered_ty = if tys.len() == 1 { tys[0].clone() } else { Type::Tuple(tys.clone()) };
    let gathered = namer.fresh_name("gathered");
    let gvar = b.var(&gathered, gathered_ty.clone());
    let pat = if names.len() == 1 { Pat::Var(names[0].clone()) } else { Pat::Tuple(names.clone()) };
    let root = wrap(&mut b, vec![(pat, gvar)], inner);
    let mut params =
        vec![Param { name: gathered.clone(), ty: gathered_ty }, Param { name: index.to_string(), ty: Type::Integer }];
    let mut fv_cache = Cache::new();
    for v in fv_cache.free_vars(&body, root).iter() {
        if *v != gathered && v != index {
            params.push(Param { name: v.clone(), ty: scope.types[v].clone() });
        }
    }
    let ret_ty = src.ty(e).clone();
    let arg_ty = Type::of_params(params.iter().map(|p| p.ty.clone()));
    let name = FunName { base_ty: Some(arg_ty), ..name };
    (Def { name, params, ret_ty, body, root }, gathers, in_order)
}

/// `index a v` with `v` a variable: `a` and `v`.
fn gather_candidate(src: &Body, x: ExprId) -> Option<(ExprId, Var)> {
    let Expr::Call(ksc_ir::Callee::Prim(Prim::Index), arg) = &src.exprs[x] else { return None };
    let Expr::Tuple(parts) = &src.exprs[*arg] else { return None };
    let [a, v] = parts[..] else { return None };
    match &src.exprs[v] {
        Expr::Var(v) => Some((a, v.clone())),
        _ => None,
    }
}

/// Copies the tree at `e` of `src` into `dst`, with the nodes of `replace`
/// replaced by variables.
fn copy_replacing(dst: &mut Body, src: &Body, e: ExprId, replace: &FxHashMap<ExprId, Var>) -> ExprId {
    let mut results: Vec<ExprId> = Vec::new();
    let mut stack = vec![(e, false)];
    while let Some((x, expanded)) = stack.pop() {
        let ty = src.ty(x).clone();
        if let Some(v) = replace.get(&x) {
            results.push(dst.alloc_typed(Expr::Var(v.clone()), ty));
            continue;
        }
        let node = &src.exprs[x];
        let kids = children(node);
        if !expanded && !kids.is_empty() {
            stack.push((x, true));
            stack.extend(kids.iter().rev().map(|&c| (c, false)));
            continue;
        }
        let new_kids = results.split_off(results.len() - kids.len());
        results.push(dst.alloc_typed(ksc_ir::term::with_children(node, &new_kids), ty));
    }
    results.pop().expect("copy of a tree")
}

/// The elements of one component of f's result, numbered by `index`
/// (`count` of them: variables of the sparse function).
struct Component {
    count: Var,
    index: Var,
    element: ElementBlock,
}

/// What the sparse function computes of one element's block, in the scope
/// of its index: `lets` gather the values the block reads and their first
/// columns and widths (the runs of the block's columns, `starts` and
/// `widths`, variables); `args` are the block function's arguments.
/// Each use takes fresh copies, so the lets may be repeated: the sparse
/// function computes them once for the sizes of its arrays, once for the
/// columns, and once with the block's Jacobian.
struct ElementBlock {
    lets: Vec<(Pat, ExprId)>,
    args: Vec<ExprId>,
    starts: Vec<ExprId>,
    widths: Vec<ExprId>,
    block: FunName,
    ret_ty: Type,
    in_order: bool,
}

impl ElementBlock {
    /// `body` in the scope of the lets.
    fn within(&self, b: &mut Builder, body: ExprId) -> ExprId {
        let lets = self.lets.iter().map(|(p, r)| (p.clone(), ksc_ir::term::deep_copy(b, *r))).collect();
        wrap(b, lets, body)
    }

    fn copies(b: &mut Builder, es: &[ExprId]) -> Vec<ExprId> {
        es.iter().map(|&e| ksc_ir::term::deep_copy(b, e)).collect()
    }

    /// Are the runs of columns known to be in ascending order?
    fn runs_in_order(&self) -> bool {
        self.in_order || self.starts.len() < 2
    }

    /// `(Vec_init starts..)` and `(Vec_init widths..)`, for `sparse.ks`.
    fn run_vectors(&self, b: &mut Builder) -> [ExprId; 2] {
        [&self.starts, &self.widths].map(|es| {
            let es = Self::copies(b, es);
            b.prim(Prim::VecInit, es)
        })
    }

    /// The number of its rows when the block function's result type fixes
    /// it; else `$tangentDim` of the block function's result (which calls it).
    fn rows(&self, b: &mut Builder) -> ExprId {
        match self.ret_ty.fixed_float_count() {
            Some(k) => b.integer(k as i64),
            None => {
                let args = Self::copies(b, &self.args);
                let y = b.call(self.block.clone(), args, self.ret_ty.clone());
                b.prim(Prim::TangentDim, vec![y])
            }
        }
    }

    /// The number of its columns: the sum of the widths.
    fn width(&self, b: &mut Builder) -> ExprId {
        let ws = Self::copies(b, &self.widths);
        ws.into_iter().reduce(|x, y| b.int_op("add", x, y)).unwrap_or_else(|| b.integer(0))
    }

    /// Its matrix columns, one row of them per row of the block:
    /// `build (tuple rows width) (lam rc column)`; the column of the
    /// block's column `c` from the runs in order, or from
    /// `ksc$sortedColumns` (computed once for the block).
    fn columns(&self, b: &mut Builder, rows: ExprId) -> ExprId {
        let width = self.width(b);
        let size = b.tuple(vec![rows, width]);
        let rc = b.fresh_name("rc");
        let c = {
            let x = b.var(&rc, int_pair());
            b.prim(Prim::Get { index: 2, arity: 2 }, vec![x])
        };
        if self.runs_in_order() {
            let c_name = b.fresh_name("c");
            let (starts, widths) = (Self::copies(b, &self.starts), Self::copies(b, &self.widths));
            let column = run_column(b, &starts, &widths, &c_name);
            let column = b.let_(&c_name, c, column);
            let lam = b.lam(&rc, int_pair(), column);
            b.prim(Prim::Build, vec![size, lam])
        } else {
            let ivec = Type::vec(Type::Integer);
            let [starts, widths] = self.run_vectors(b);
            let sorted = b.call(sorted_columns(), vec![starts, widths], ivec.clone());
            let cols = b.fresh_name("cols");
            let v = b.var(&cols, ivec);
            let column = b.prim(Prim::Index, vec![c, v]);
            let lam = b.lam(&rc, int_pair(), column);
            let all = b.prim(Prim::Build, vec![size, lam]);
            b.let_(&cols, sorted, all)
        }
    }

    /// Its values: `[jac1 block]` of the arguments, its columns put in
    /// ascending order by `ksc$sortedBlock` unless the runs are in order.
    fn values(&self, b: &mut Builder) -> ExprId {
        let args = Self::copies(b, &self.args);
        let jac = b.call(self.block.derived(Derivation::Jac1), args, Type::tensor(2, Type::Float));
        if self.runs_in_order() {
            return jac;
        }
        let [starts, widths] = self.run_vectors(b);
        b.call(sorted_block(), vec![jac, starts, widths], Type::tensor(2, Type::Float))
    }
}

/// One element's block, in the sparse function: the lets that gather its
/// values and their columns, and the block function's arguments. The
/// gathers' columns are in ascending order if `in_order`, else they are
/// sorted at run time.
fn element_block(
    b: &mut Builder,
    src: &Body,
    scope: &Scope,
    (block, gathers, in_order): (&Def, &[Gather], bool),
    index: &str,
) -> ElementBlock {
    let mut lets: Vec<(Pat, ExprId)> = Vec::new();
    let mut values = Vec::new();
    let (mut starts, mut widths) = (Vec::new(), Vec::new());
    for g in gathers {
        // The gathered value, its type, and its first column: the active
        // variable's, plus (for an element) the columns of the elements before it.
        let (value_name, elem_ty, offset, before) = match g {
            Gather::Elem { a, v, name: _ } => {
                let Type::Tensor(_, elem) = &scope.types[v] else { unreachable!("a gather of a vector") };
                let a2 = copy_tree(b.body, Some(src), *a);
                let vv = b.var(v, scope.types[v].clone());
                let read = b.prim(Prim::Index, vec![a2, vv]);
                let local = b.fresh_name("gathered");
                lets.push((Pat::Var(local.clone()), read));
                let cols = &scope.active[v];
                let a3 = copy_tree(b.body, Some(src), *a);
                let before = match (&cols.starts, elem.fixed_float_count()) {
                    (Some(starts), _) => {
                        let s = b.var(starts, Type::vec(Type::Integer));
                        b.prim(Prim::Index, vec![a3, s])
                    }
                    (None, Some(1)) => a3,
                    (None, k) => {
                        let k = b.integer(k.expect("a fixed element dimension") as i64);
                        b.int_op("mul", a3, k)
                    }
                };
                (local, (**elem).clone(), cols.offset.clone(), before)
            }
            Gather::Whole(v) => (v.clone(), scope.types[v].clone(), scope.active[v].offset.clone(), b.integer(0)),
        };
        let off = b.var(&offset, Type::Integer);
        let start = b.int_op("add", off, before);
        values.push(b.var(&value_name, elem_ty.clone()));
        let width = dim_of(b, &value_name, &elem_ty);
        for (hint, e, list) in [("start", start, &mut starts), ("width", width, &mut widths)] {
            let name = b.fresh_name(hint);
            lets.push((Pat::Var(name.clone()), e));
            list.push(b.var(&name, Type::Integer));
        }
    }
    let gathered = if values.len() == 1 { values.pop().expect("one") } else { b.tuple(values) };
    let mut args = vec![gathered, b.var(index, Type::Integer)];
    for p in &block.params[2..] {
        args.push(b.var(&p.name, p.ty.clone()));
    }
    ElementBlock { lets, args, starts, widths, block: block.name.clone(), ret_ty: block.ret_ty.clone(), in_order }
}

/// The column of the block's column `c` (a variable) when its columns are
/// runs, one after the other: run k is `widths[k]` columns from
/// `starts[k]` (variables):
/// `(if (lt c w1) (add s1 c) (if (lt c (w1 + w2)) (add s2 (sub c w1)) ..))`.
fn run_column(b: &mut Builder, starts: &[ExprId], widths: &[ExprId], c: &str) -> ExprId {
    // The bounds w1, w1 + w2, .. (the last is not needed).
    let mut bounds: Vec<ExprId> = Vec::new();
    for &w in widths {
        let w = b.copy(w);
        let bound = match bounds.last() {
            Some(&prev) => {
                let prev = ksc_ir::term::deep_copy(b, prev);
                b.int_op("add", prev, w)
            }
            None => w,
        };
        bounds.push(bound);
    }
    // From the last run back: column = start_k + c - (bound of run k - 1).
    let mut body: Option<ExprId> = None;
    for k in (0..starts.len()).rev() {
        let cv = b.var(c, Type::Integer);
        let from = match k {
            0 => cv,
            _ => {
                let before = ksc_ir::term::deep_copy(b, bounds[k - 1]);
                b.int_op("sub", cv, before)
            }
        };
        let s = b.copy(starts[k]);
        let col = b.int_op("add", s, from);
        body = Some(match body {
            None => col,
            Some(later) => {
                let cv = b.var(c, Type::Integer);
                let bound = ksc_ir::term::deep_copy(b, bounds[k]);
                let test = b.int_test("lt", cv, bound);
                b.body.alloc_typed(Expr::If(test, col, later), Type::Integer)
            }
        });
    }
    // (No runs: a block of no columns, whose column is never asked for.)
    body.unwrap_or_else(|| b.var(c, Type::Integer))
}

/// The CSR arrays from the components' blocks, numbered k = 0 .. nb - 1
/// over all components in order (`select` finds the component and
/// element of k):
///
/// ```text
/// (let ((nb (n1 + .. + nm))
///       (lens ($concat (build nb (lam k (constVec rows_k width_k)))))
///       (columns ($concat (build nb (lam k
///                  (build (tuple rows_k width_k) (lam rc column_k[c]))))))
///       (values ($concatN (size columns) (build nb (lam k J_k)))))
///   (tuple (tuple (size lens) ncols) ($scan add 0 lens) columns values))
/// ```
///
/// The first two read only the gathers' positions and sizes, so `$concat`
/// computes their `build`s in each of its passes without storing them;
/// `$concatN` computes each block's Jacobian J_k, copies it into place
/// and frees its temporaries. When a block function's result type does not
/// fix its number of rows, the rows are computed once, into a vector, by
/// calling it.
fn assemble(b: &mut Builder, outer: &mut Vec<(Pat, ExprId)>, parts: &[Component], n_columns: &str) -> ExprId {
    let ivec = Type::vec(Type::Integer);
    // The ends of the components' ranges of k: the last is nb.
    let mut ends: Vec<Var> = Vec::new();
    for part in parts {
        let count = b.var(&part.count, Type::Integer);
        let end = match ends.last() {
            Some(prev) => {
                let prev = b.var(prev, Type::Integer);
                b.int_op("add", prev, count)
            }
            None => count,
        };
        let name = b.fresh_name("end");
        outer.push((Pat::Var(name.clone()), end));
        ends.push(name);
    }
    let nb = |b: &mut Builder| match ends.last() {
        Some(end) => b.var(end, Type::Integer),
        None => b.integer(0),
    };
    // build nb (lam k e_k), e_k of type `ty` from the element's block.
    let per_block = |b: &mut Builder, ty: Type, f: &mut dyn FnMut(&mut Builder, &Component, &str) -> ExprId| {
        let k = b.fresh_name("k");
        let body = select(b, &k, parts, &ends, ty, f);
        let lam = b.lam(&k, Type::Integer, body);
        let n = nb(b);
        b.prim(Prim::Build, vec![n, lam])
    };
    let rows_vector = parts.iter().any(|p| p.element.ret_ty.fixed_float_count().is_none()).then(|| {
        let v = per_block(b, Type::Integer, &mut |b, part, _| {
            let rows = part.element.rows(b);
            part.element.within(b, rows)
        });
        let name = b.fresh_name("rows");
        outer.push((Pat::Var(name.clone()), v));
        name
    });
    let rows = |b: &mut Builder, part: &Component, k: &str| match &rows_vector {
        Some(v) => {
            let kv = b.var(k, Type::Integer);
            let v = b.var(v, ivec.clone());
            b.prim(Prim::Index, vec![kv, v])
        }
        None => part.element.rows(b),
    };
    // The number of rows: the components' counts times their blocks'
    // rows, or the sum of the vector of rows.
    let n_rows = match &rows_vector {
        None => {
            let terms: Vec<ExprId> = parts
                .iter()
                .map(|part| {
                    let count = b.var(&part.count, Type::Integer);
                    let r = part.element.rows(b);
                    b.int_op("mul", count, r)
                })
                .collect();
            terms.into_iter().reduce(|x, y| b.int_op("add", x, y)).unwrap_or_else(|| b.integer(0))
        }
        Some(v) => {
            let v = b.var(v, ivec.clone());
            let zero = b.integer(0);
            let sum = add_ints(b);
            b.prim(Prim::Fold, vec![sum, zero, v])
        }
    };
    let lens = per_block(b, ivec.clone(), &mut |b, part, k| {
        let r = rows(b, part, k);
        let w = part.element.width(b);
        let e = b.prim(Prim::ConstVec, vec![r, w]);
        part.element.within(b, e)
    });
    let lens = b.prim(Prim::ConcatN, vec![n_rows, lens]);
    let lens_name = b.fresh_name("lens");
    outer.push((Pat::Var(lens_name.clone()), lens));
    let offsets = {
        let zero = b.integer(0);
        let l = b.var(&lens_name, ivec.clone());
        let sum = add_ints(b);
        b.prim(Prim::Scan, vec![sum, zero, l])
    };
    let offsets_name = b.fresh_name("offsets");
    outer.push((Pat::Var(offsets_name.clone()), offsets));
    let nnz = {
        let l = b.var(&lens_name, ivec.clone());
        let m = b.prim(Prim::Size, vec![l]);
        let o = b.var(&offsets_name, ivec.clone());
        b.prim(Prim::Index, vec![m, o])
    };
    let nnz_name = b.fresh_name("nnz");
    outer.push((Pat::Var(nnz_name.clone()), nnz));
    let columns = per_block(b, Type::tensor(2, Type::Integer), &mut |b, part, k| {
        let r = rows(b, part, k);
        let e = part.element.columns(b, r);
        part.element.within(b, e)
    });
    let nnz = b.var(&nnz_name, Type::Integer);
    let columns = b.prim(Prim::ConcatN, vec![nnz, columns]);
    let values = per_block(b, Type::tensor(2, Type::Float), &mut |b, part, _| {
        let e = part.element.values(b);
        part.element.within(b, e)
    });
    let nnz = b.var(&nnz_name, Type::Integer);
    let values = b.prim(Prim::ConcatN, vec![nnz, values]);
    let shape = {
        let l = b.var(&lens_name, ivec.clone());
        let m = b.prim(Prim::Size, vec![l]);
        let n = b.var(n_columns, Type::Integer);
        b.tuple(vec![m, n])
    };
    let offsets = b.var(&offsets_name, ivec);
    b.tuple(vec![shape, offsets, columns, values])
}

/// `(lam (acc_x : Tuple Integer Integer) (add (get$1$2 acc_x) (get$2$2 acc_x)))`.
fn add_ints(b: &mut Builder) -> ExprId {
    let pair = int_pair();
    let acc = b.fresh_name("acc_x");
    let p1 = b.var(&acc, pair.clone());
    let x = b.prim(Prim::Get { index: 1, arity: 2 }, vec![p1]);
    let p2 = b.var(&acc, pair.clone());
    let y = b.prim(Prim::Get { index: 2, arity: 2 }, vec![p2]);
    let sum = b.int_op("add", x, y);
    b.lam(&acc, pair, sum)
}

/// The element e_k of the block numbered `k` (a variable): the component
/// whose range holds k (`ends` are the ranges' ends), its index bound to
/// k less the components' elements before it:
/// `(if (lt k end1) (let (i1 k) e1) (if (lt k end2) (let (i2 (sub k end1)) e2) ..))`.
/// With no components, a `$dummy` of type `ty` (there are no elements).
fn select(
    b: &mut Builder,
    k: &str,
    parts: &[Component],
    ends: &[Var],
    ty: Type,
    f: &mut dyn FnMut(&mut Builder, &Component, &str) -> ExprId,
) -> ExprId {
    let mut body: Option<ExprId> = None;
    for (c, part) in parts.iter().enumerate().rev() {
        let e = f(b, part, k);
        let kv = b.var(k, Type::Integer);
        let index = match c {
            0 => kv,
            _ => {
                let before = b.var(&ends[c - 1], Type::Integer);
                b.int_op("sub", kv, before)
            }
        };
        let e = b.let_(&part.index, index, e);
        body = Some(match body {
            None => e,
            Some(later) => {
                let kv = b.var(k, Type::Integer);
                let end = b.var(&ends[c], Type::Integer);
                let test = b.int_test("lt", kv, end);
                b.body.alloc_typed(Expr::If(test, e, later), ty.clone())
            }
        });
    }
    body.unwrap_or_else(|| b.body.alloc_typed(Expr::Dummy(ty.clone()), ty))
}
