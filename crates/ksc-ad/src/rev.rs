//! Reverse mode from the full Jacobian (linear-maps-and-ad.md 5):
//! `[rev f] (x, dr)` transposes the let-program of `[D f]`: the primal
//! bindings run forwards, then the linear bindings are visited in reverse
//! order, each adding its contribution to the cotangents of the variables it
//! mentions (seed 004's linear factoring: every backpropagator runs once).
//! Loops and conditionals are transposed in place (their primal bindings are
//! recomputed inside the backward loop or branch, a constant factor).
//! Recursive functions read their primal values from a tape
//! ([`crate::tape`], which calls back into [`transpose_program`]).

use rustc_hash::FxHashMap;

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::prim::Accumulators;
use ksc_ir::term::{let_chain, wrap};
use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};

use crate::apply::{
    bind_params, checked_def, fold_call, fresh_start, has_lm, import, import_hooked, internal, is_lm, param_name,
    push_applications, strip_expr, strip_type,
};
use crate::derive::{AdError, Witnesses, R};

/// [`Rev::rfold`]'s transposed step of a loop: at the element whose index
/// variable is named, with the named cotangent seed, `(dsc, (da, dx))`.
type TransposedStep<'f, 's, 'd> = dyn Fn(&mut Rev<'s, 'd>, &mut Builder, &str, (String, Type)) -> R<ExprId> + 'f;

/// `[rev f]` from `[D f]`.
pub fn rev_def(f: &Def, d: &Def, witnesses: &Witnesses, demands: &mut Vec<FunName>) -> R<Def> {
    let s_ty = f.arg_ty();
    let ds_ty = s_ty.tangent().ok_or_else(|| AdError { message: format!("`{s_ty}` has no tangent"), at: None })?;
    let dt_ty =
        f.ret_ty.tangent().ok_or_else(|| AdError { message: format!("`{}` has no tangent", f.ret_ty), at: None })?;
    let mut body = Body::new();
    let mut fresh = fresh_start(f, d);
    let mut b = Builder::new(&mut body, &mut fresh);
    let (x_name, dr_name) = (param_name("x", f), param_name("dr", f));
    let dr = (dr_name.clone(), dt_ty.clone());
    let inner = transpose_program(&mut b, &d.body, d.root, witnesses, demands, &s_ty, &f.params, dr, None, None)?;
    let root = bind_params(&mut b, &f.params, &x_name, &s_ty, inner);
    let params = vec![Param { name: x_name, ty: s_ty }, Param { name: dr_name, ty: dt_ty }];
    checked_def(f.name.derived(Derivation::Rev), params, ds_ty, body, root)
}

/// Transposes the let-program of a Jacobian (`root` in `src`, a map from
/// the tuple of `params`, or from the one parameter), seeded with the
/// cotangent `seed` of its result: the cotangent of the parameters.
/// Recursive calls are read from `tape` if given. With `acc` (the
/// accumulator of `[sufrevacc f]`, of the parameters' cotangent type), the
/// result is `acc` plus that cotangent: each parameter's part of `acc`
/// starts as a contribution to the parameter's map, which the reverse
/// passes of recursive calls passing the parameter on are given to add
/// into ([`Rev::accs`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn transpose_program(
    b: &mut Builder,
    src: &Body,
    root: ExprId,
    witnesses: &Witnesses,
    demands: &mut Vec<FunName>,
    s_ty: &Type,
    params: &[Param],
    seed: (String, Type),
    tape: Option<std::rc::Rc<crate::tape::RevTape>>,
    acc: Option<(String, Type)>,
) -> R<ExprId> {
    let map_defs = match &tape {
        Some(t) if t.accumulates => map_definitions(src, root),
        _ => FxHashMap::default(),
    };
    let mut rv = Rev {
        src,
        witnesses,
        demands,
        s_ty: s_ty.clone(),
        params: params.to_vec(),
        contribs: FxHashMap::default(),
        param_contribs: vec![Vec::new(); params.len().max(1)],
        mixed: FxHashMap::default(),
        block: Vec::new(),
        tuples: FxHashMap::default(),
        indexed: FxHashMap::default(),
        loop_depth: 0,
        tape,
        accs: Default::default(),
        map_defs,
        carry: Vec::new(),
    };
    let (bindings, result) = let_chain(src, root);
    let Expr::Var(g_res) = src.exprs[result].clone() else {
        return internal("a Jacobian that does not end in a map variable");
    };
    rv.contribs.entry(g_res).or_default().push(seed);
    if let Some(acc) = acc {
        rv.seed_accumulator(b, &bindings, acc);
    }
    rv.transpose_block(b, &bindings)?;
    // The cotangent of the argument.
    let mut parts = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let mut c = std::mem::take(&mut rv.param_contribs[i]);
        rv.owned_first(&mut c);
        parts.push(rv.sum_or_zero(b, c, |b| {
            let w = b.var(&p.name, p.ty.clone());
            b.zero_tangent(w)
        }));
    }
    let result = if params.len() == 1 { parts.pop().unwrap_or_else(|| b.tuple(Vec::new())) } else { b.tuple(parts) };
    let block = std::mem::take(&mut rv.block);
    Ok(wrap(b, block, result))
}

struct Rev<'s, 'd> {
    src: &'s Body,
    witnesses: &'s Witnesses,
    demands: &'d mut Vec<FunName>,
    s_ty: Type,
    params: Vec<Param>,
    /// Cotangent contributions to each Jacobian variable, as variables.
    contribs: FxHashMap<String, Vec<(String, Type)>>,
    /// Contributions to each parameter (or to the whole argument, if one).
    param_contribs: Vec<Vec<(String, Type)>>,
    /// Bindings of mixed type (value and map pairs) in scope: name to source.
    mixed: FxHashMap<String, ExprId>,
    /// The output bindings of the current block.
    block: Vec<(Pat, ExprId)>,
    /// Variables bound to literal tuples, with the variables of their components.
    tuples: FxHashMap<String, Vec<(String, Type)>>,
    /// Maps of vectors that an enclosing loop only reads at its own index
    /// (`index i v` in the loop over i), with that loop's variable: their
    /// cotangent contributions inside the loop are elements, and the loop
    /// assembles them with a `build` instead of summing one-hot vectors.
    indexed: FxHashMap<String, String>,
    /// How many loop bodies the code being transposed is in.
    loop_depth: u32,
    /// In `[sufrevpass f]` of a recursive f: where the results of f's
    /// recursive calls are read from, and how its reverse passes are called.
    tape: Option<std::rc::Rc<crate::tape::RevTape>>,
    /// The contributions (variables) that are cotangents of tensors this
    /// code owns and reads once: the parts of `[sufrevacc f]`'s
    /// accumulator, the results of reverse passes of recursive calls, and
    /// sums and branch results that start from one. When the tape
    /// `accumulates`, the reverse pass of a recursive call whose argument
    /// passes on a vector with such a contribution is given it to add into
    /// (`[sufrevacc f]`), so the cotangent of a vector the recursion reads
    /// is threaded through the calls as one accumulator, not a vector per
    /// call summed by the caller (tree recursion: quadratic in native code).
    accs: rustc_hash::FxHashSet<String>,
    /// The source's map variables bound by `let` (names bound once), for
    /// the maps of a recursive call's argument (`lmVCat` of its parts).
    map_defs: FxHashMap<String, ExprId>,
    /// Owned contributions to outer variables that the next sub-block (a
    /// branch) starts from ([`Rev::push_r_pair`]).
    carry: Vec<(String, (String, Type))>,
}

/// The map variables `let` binds in `root` (names bound once) and their
/// right-hand sides.
fn map_definitions(src: &Body, root: ExprId) -> FxHashMap<String, ExprId> {
    let mut defs: FxHashMap<String, Option<ExprId>> = FxHashMap::default();
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        if let Expr::Let(Pat::Var(g), r, _) = &src.exprs[e] {
            if is_lm(src.ty(*r)) {
                defs.entry(g.clone()).and_modify(|d| *d = None).or_insert(Some(*r));
            }
        }
        stack.extend(ksc_ir::core::children(&src.exprs[e]));
    }
    defs.into_iter().filter_map(|(g, d)| d.map(|d| (g, d))).collect()
}

/// Does a value of this type hold a Float?
fn has_float(t: &Type) -> bool {
    match t {
        Type::Float => true,
        Type::Tensor(_, e) => has_float(e),
        Type::Tuple(ts) => ts.iter().any(has_float),
        _ => false,
    }
}

/// Is an index space of this size (a variable) empty: `n == 0`, or some
/// dimension zero for a tuple of sizes.
fn is_empty(b: &mut Builder, n: &(String, Type)) -> ExprId {
    let zero_at = |b: &mut Builder, dim: Option<(u32, u32)>| {
        let nv = b.var(&n.0, n.1.clone());
        let d = match dim {
            Some((k, r)) => b.prim(Prim::Get { index: k, arity: r }, vec![nv]),
            None => nv,
        };
        let z = b.integer(0);
        b.prim(Prim::Eq, vec![d, z])
    };
    match &n.1 {
        Type::Tuple(ts) => {
            let r = ts.len() as u32;
            let mut acc = zero_at(b, Some((1, r)));
            for k in 2..=r {
                let next = zero_at(b, Some((k, r)));
                acc = b.call(
                    FunName::typed("or", Type::Tuple(vec![Type::Bool, Type::Bool])),
                    vec![acc, next],
                    Type::Bool,
                );
            }
            acc
        }
        _ => zero_at(b, None),
    }
}

/// `m` as a read of one element of the vector whose map is `g`:
/// `lmCompose (lmIndex e ..) g` (as `index e v` differentiates), or the
/// `lmHCat (lmZero, lmIndex e ..) ∘ lmVCat (_, g)` form `map` makes. The
/// index expression and `g`.
fn element_read(src: &Body, m: ExprId) -> Option<(ExprId, String)> {
    let (p, args) = prim_call(src, m)?;
    if p != Prim::LmCompose {
        return None;
    }
    let (sel, g) = match ksc_ir::builder::call_of(src, args[0], Prim::LmIndex) {
        Some(sel) => (sel, args[1]),
        None => {
            let hcat = ksc_ir::builder::call_of(src, args[0], Prim::LmHCat)?;
            let vcat = ksc_ir::builder::call_of(src, args[1], Prim::LmVCat)?;
            let (&[z, sel], &[_, g]) = (&hcat[..], &vcat[..]) else { return None };
            ksc_ir::builder::call_of(src, z, Prim::LmZero)?;
            (ksc_ir::builder::call_of(src, sel, Prim::LmIndex)?, g)
        }
    };
    match &src.exprs[g] {
        Expr::Var(g) => Some((sel[0], g.clone())),
        _ => None,
    }
}

/// `m` as a read of element `ivar` (a variable) of the vector whose map
/// is the result.
fn indexed_read(src: &Body, m: ExprId, ivar: &str) -> Option<String> {
    let (i, g) = element_read(src, m)?;
    matches!(&src.exprs[i], Expr::Var(v) if v == ivar).then_some(g)
}

/// How a map variable occurs in an expression.
#[derive(Default, Clone, Copy)]
struct Uses {
    /// Free occurrences.
    all: usize,
    /// Reads of the element at the loop's index (see [`indexed_read`]).
    at_index: usize,
    /// Reads of one element at any index (see [`element_read`]).
    elements: usize,
}

/// Counts the free occurrences of `g` in `e`.
fn count_uses(src: &Body, e: ExprId, g: &str, ivar: &str, bound: &mut Vec<String>) -> Uses {
    if !bound.iter().any(|b| b == g) {
        if let Some((i, h)) = element_read(src, e) {
            if h == g {
                let at = matches!(&src.exprs[i], Expr::Var(v) if v == ivar) as usize;
                return Uses { all: 1, at_index: at, elements: 1 };
            }
        }
    }
    let mut acc = Uses::default();
    let mut add = |u: Uses| {
        acc.all += u.all;
        acc.at_index += u.at_index;
        acc.elements += u.elements;
    };
    match &src.exprs[e] {
        Expr::Var(v) => {
            if v == g && !bound.iter().any(|b| b == g) {
                add(Uses { all: 1, ..Uses::default() });
            }
        }
        Expr::Lit(_) | Expr::Dummy(_) => {}
        Expr::Call(_, a) => add(count_uses(src, *a, g, ivar, bound)),
        Expr::Tuple(es) => {
            for &x in es {
                add(count_uses(src, x, g, ivar, bound));
            }
        }
        Expr::Let(p, r, x) => {
            add(count_uses(src, *r, g, ivar, bound));
            let depth = bound.len();
            bound.extend(p.vars().iter().cloned());
            add(count_uses(src, *x, g, ivar, bound));
            bound.truncate(depth);
        }
        Expr::If(c, t, f) => {
            for x in [c, t, f] {
                add(count_uses(src, *x, g, ivar, bound));
            }
        }
        Expr::Assert(c, x, _) => {
            for y in [c, x] {
                add(count_uses(src, *y, g, ivar, bound));
            }
        }
        Expr::Lam(v, _, x) => {
            bound.push(v.clone());
            add(count_uses(src, *x, g, ivar, bound));
            bound.pop();
        }
    }
    acc
}

impl<'s, 'd> Rev<'s, 'd> {
    /// `[sufrevacc f]`: each parameter's part of the accumulator `acc` is
    /// a contribution to the parameter's map (bound at the top of `[D f]`
    /// as `lmOne` or `lmGet` of the argument), owned if it holds a tensor;
    /// a part without a tensor is added to the result.
    fn seed_accumulator(&mut self, b: &mut Builder, bindings: &[(Pat, ExprId)], acc: (String, Type)) {
        let n = self.params.len();
        for i in 0..n {
            let part = if n == 1 {
                b.var(&acc.0, acc.1.clone())
            } else {
                let a = b.var(&acc.0, acc.1.clone());
                b.prim(Prim::Get { index: i as u32 + 1, arity: n as u32 }, vec![a])
            };
            let part = self.emit(b, "acc", part);
            let map = bindings.iter().find_map(|(pat, rhs)| {
                let Pat::Var(g) = pat else { return None };
                let (p, args) = prim_call(self.src, *rhs)?;
                let of_arg = self.src.ty(args[0]) == &self.s_ty;
                let hit = match p {
                    Prim::LmOne => n == 1 && of_arg,
                    Prim::LmGet { index, arity } => of_arg && arity as usize == n && index as usize == i + 1,
                    _ => false,
                };
                hit.then(|| g.clone())
            });
            match map {
                Some(g) if part.1.holds_tensor() => {
                    self.accs.insert(part.0.clone());
                    self.contribs.entry(g).or_default().push(part);
                }
                // A part without Floats (an Integer's) is zero.
                _ if !has_float(&part.1) => {}
                _ => self.param_contribs[i].push(part),
            }
        }
    }

    /// Puts an owned contribution first, so that the sum adds the others
    /// into it; whether there is one.
    fn owned_first(&self, cs: &mut [(String, Type)]) -> bool {
        match cs.iter().position(|(n, _)| self.accs.contains(n)) {
            Some(k) => {
                cs[..=k].rotate_right(1);
                true
            }
            None => false,
        }
    }

    /// Has map variable `g` an owned contribution?
    fn has_owned(&self, g: &str) -> bool {
        self.contribs.get(g).is_some_and(|cs| cs.iter().any(|(n, _)| self.accs.contains(n)))
    }

    /// The last contributions to these map variables are owned.
    fn mark_last<'g>(&mut self, gs: impl IntoIterator<Item = &'g String>) {
        for g in gs {
            if let Some((last, _)) = self.contribs.get(g).and_then(|cs| cs.last()) {
                self.accs.insert(last.clone());
            }
        }
    }

    /// Takes an owned contribution to map variable `g` out of its list.
    fn take_owned(&mut self, g: &str) -> Option<(String, Type)> {
        let accs = &self.accs;
        let cs = self.contribs.get_mut(g)?;
        let k = cs.iter().position(|(n, _)| accs.contains(n))?;
        let c = cs.remove(k);
        if cs.is_empty() {
            self.contribs.remove(g);
        }
        Some(c)
    }

    /// The map variables of the parts of a recursive call's argument,
    /// whose map is `m` (an `lmVCat` of them when f has several
    /// parameters), for the parts whose cotangent holds a tensor.
    fn argument_maps(&self, m: ExprId) -> Vec<Option<String>> {
        let n = self.params.len();
        let var = |e: ExprId| match &self.src.exprs[e] {
            Expr::Var(g) => Some(g.clone()),
            _ => None,
        };
        let tensor = |e: ExprId| match self.src.ty(e) {
            Type::LM(_, t) => t.tangent().is_some_and(|t| t.holds_tensor()),
            _ => false,
        };
        if n == 1 {
            return vec![var(m).filter(|_| tensor(m))];
        }
        let vcat = match var(m).and_then(|g| self.map_defs.get(&g).copied()) {
            Some(d) => ksc_ir::builder::call_of(self.src, d, Prim::LmVCat),
            None => ksc_ir::builder::call_of(self.src, m, Prim::LmVCat),
        };
        match vcat {
            Some(parts) if parts.len() == n => parts.into_iter().map(|p| var(p).filter(|_| tensor(p))).collect(),
            _ => vec![None; n],
        }
    }

    /// Does `e` hold a recursive call (its map `lmCompose j m`, `j` a
    /// Jacobian call of the tape) whose argument passes on one of the
    /// vectors whose maps are `outer`, when the tape accumulates?
    fn passes_on(&self, e: ExprId, outer: &[String]) -> bool {
        let Some(t) = self.tape.as_ref().filter(|t| t.accumulates) else { return false };
        let mut stack = vec![e];
        while let Some(x) = stack.pop() {
            if let Some((Prim::LmCompose, args)) = prim_call(self.src, x) {
                if t.jacobians.contains_key(&args[0])
                    && self.argument_maps(args[1]).iter().flatten().any(|g| outer.contains(g))
                {
                    return true;
                }
            }
            stack.extend(ksc_ir::core::children(&self.src.exprs[x]));
        }
        false
    }

    /// `r ⊙ᴿ [D f](a)` for a recursive call (Jacobian call `j`, argument
    /// map `m`): its reverse pass, given as accumulator the owned
    /// contributions to the vectors it passes on, if any (and the tape
    /// accumulates); the parts of the result that hold tensors are owned
    /// contributions in turn. None if `j` is not a recursive call.
    fn recursive_call(&mut self, b: &mut Builder, j: ExprId, m: ExprId, r: &(String, Type)) -> R<Option<()>> {
        let Some(t) = self.tape.clone().filter(|t| t.jacobians.contains_key(&j)) else { return Ok(None) };
        let maps = self.argument_maps(m);
        let owned: Vec<Option<(String, Type)>> = if t.accumulates {
            maps.iter().map(|g| g.as_ref().and_then(|g| self.take_owned(g))).collect()
        } else {
            vec![None; maps.len()]
        };
        let acc = owned.iter().any(Option::is_some).then_some(&owned[..]);
        let Some(call) = t.rev_call(b, self.src, j, r, acc) else {
            for (g, c) in maps.iter().zip(owned) {
                if let (Some(g), Some(c)) = (g, c) {
                    self.contribs.entry(g.clone()).or_default().push(c);
                }
            }
            return Ok(None);
        };
        if acc.is_some() {
            self.demands.push(t.f.derived(Derivation::SufRevAcc));
        }
        let c = self.emit(b, "r", call);
        self.push_r(b, c, m)?;
        self.mark_last(maps.iter().flatten());
        Ok(Some(()))
    }

    fn emit(&mut self, b: &mut Builder, hint: &str, e: ExprId) -> (String, Type) {
        // A literal tuple (the cotangent of a tuple of maps): bind its
        // components, so that taking them apart later costs nothing.
        if let Expr::Tuple(es) = b.expr(e).clone() {
            if !es.is_empty() {
                let parts: Vec<(String, Type)> = es.iter().map(|&c| self.emit(b, hint, c)).collect();
                let vars = parts.iter().map(|(n, t)| b.var(n, t.clone())).collect();
                let t = b.tuple(vars);
                let name = b.fresh_name(hint);
                let ty = b.ty(t);
                self.block.push((Pat::Var(name.clone()), t));
                self.tuples.insert(name.clone(), parts);
                return (name, ty);
            }
        }
        let name = b.fresh_name(hint);
        let ty = b.ty(e);
        self.block.push((Pat::Var(name.clone()), e));
        (name, ty)
    }

    fn sum_or_zero(
        &mut self,
        b: &mut Builder,
        cs: Vec<(String, Type)>,
        zero: impl FnOnce(&mut Builder) -> ExprId,
    ) -> ExprId {
        let mut it = cs.into_iter();
        match it.next() {
            None => zero(b),
            Some((n, t)) => it.fold(b.var(&n, t), |acc, (n, t)| {
                let v = b.var(&n, t);
                b.prim(Prim::TsAdd, vec![acc, v])
            }),
        }
    }

    /// The hook of this transposition's copies of primal code: recursive
    /// calls read from the tape, if there is one.
    fn read_tape(&self) -> impl Fn(&mut Builder, ExprId) -> Option<ExprId> + '_ {
        |b, x| self.tape.as_ref().and_then(|t| crate::tape::read_hook(t, self.src, b, x))
    }

    /// The primal part of a mixed expression: maps replaced by units.
    fn strip(&mut self, b: &mut Builder, e: ExprId) -> ExprId {
        strip_expr(b, self.src, e, Some(&self.read_tape()))
    }

    /// A primal expression of the source, copied (recursive calls read
    /// from the tape).
    fn import_primal(&mut self, b: &mut Builder, e: ExprId) -> ExprId {
        import_hooked(b, self.src, e, &strip_type, Some(&self.read_tape()))
    }

    /// Emits the primal bindings of a block forwards, then transposes its
    /// linear bindings backwards.
    fn transpose_block(&mut self, b: &mut Builder, bindings: &[(Pat, ExprId)]) -> R<()> {
        let mut linear: Vec<(String, ExprId)> = Vec::new();
        for (pat, rhs) in bindings {
            let ty = self.src.ty(*rhs).clone();
            if is_lm(&ty) {
                let Pat::Var(g) = pat else { return internal("tuple pattern over a map") };
                linear.push((g.clone(), *rhs));
            } else if has_lm(&ty) {
                let Pat::Var(p) = pat else { return internal("tuple pattern over a pair") };
                self.mixed.insert(p.clone(), *rhs);
                let e = self.strip(b, *rhs);
                self.block.push((pat.clone(), e));
            } else {
                let e = self.import_primal(b, *rhs);
                self.block.push((pat.clone(), e));
            }
        }
        for (g, rhs) in linear.into_iter().rev() {
            let Some(mut cs) = self.contribs.remove(&g) else { continue };
            let owned = self.owned_first(&mut cs);
            let r = self.sum_or_zero(b, cs, |b| b.tuple(Vec::new()));
            let r = self.emit(b, "r", r);
            if owned {
                self.accs.insert(r.0.clone());
            }
            self.push_r(b, r, rhs)?;
        }
        Ok(())
    }

    /// Adds the contributions of `r ⊙ᴿ m` for a map `m` from S.
    fn push_r(&mut self, b: &mut Builder, r: (String, Type), m: ExprId) -> R<()> {
        match self.src.exprs[m].clone() {
            Expr::Var(g) => {
                self.contribs.entry(g).or_default().push(r);
                return Ok(());
            }
            Expr::Call(Callee::Prim(Prim::Get { index: 2, arity: 2 }), p) => {
                if let Expr::Var(pn) = &self.src.exprs[p] {
                    if let Some(&pair) = self.mixed.get(pn) {
                        return self.push_r_pair(b, r, pair);
                    }
                }
            }
            _ => {}
        }
        let Some((p, args)) = prim_call(self.src, m) else {
            return internal(format!("cannot transpose {:?}", self.src.exprs[m]));
        };
        match p {
            Prim::LmCompose => {
                if let Some(g) =
                    self.indexed.iter().find_map(|(g, iv)| indexed_read(self.src, m, iv).filter(|h| h == g))
                {
                    // An element of a vector the loop reads at its index.
                    self.contribs.entry(g).or_default().push(r);
                    return Ok(());
                }
                if self.recursive_call(b, args[0], args[1], &r)?.is_some() {
                    return Ok(());
                }
                if let Some((fold, kept)) = fold_call(self.src, args[0]) {
                    let t = self.rfold(b, args[0], &fold, r, kept)?;
                    let t = self.emit(b, "r", t);
                    return self.push_r(b, t, args[1]);
                }
                let rv = b.var(&r.0, r.1.clone());
                let jj = import(b, self.src, args[0]);
                let app = b.prim(Prim::LmApplyR, vec![rv, jj]);
                let t = push_applications(b, app, self.demands);
                let t = self.emit(b, "r", t);
                self.push_r(b, t, args[1])
            }
            Prim::LmVCat => {
                let n = args.len() as u32;
                if let Some(parts) = self.tuples.get(&r.0).cloned().filter(|p| p.len() == n as usize) {
                    for (ri, a) in parts.into_iter().zip(args) {
                        self.push_r(b, ri, a)?;
                    }
                    return Ok(());
                }
                for (i, a) in args.into_iter().enumerate() {
                    let rv = b.var(&r.0, r.1.clone());
                    let ri = b.prim(Prim::Get { index: i as u32 + 1, arity: n }, vec![rv]);
                    let ri = self.emit(b, "r", ri);
                    self.push_r(b, ri, a)?;
                }
                Ok(())
            }
            Prim::LmAdd => {
                self.push_r(b, r.clone(), args[0])?;
                self.push_r(b, r, args[1])
            }
            Prim::LmZero => Ok(()),
            Prim::LmOne if self.src.ty(args[0]) == &self.s_ty => {
                // The whole argument: with several parameters, split it.
                let n = self.params.len();
                if n == 1 {
                    self.param_contribs[0].push(r);
                } else {
                    for i in 0..n {
                        let rv = b.var(&r.0, r.1.clone());
                        let ri = b.prim(Prim::Get { index: i as u32 + 1, arity: n as u32 }, vec![rv]);
                        let ri = self.emit(b, "r", ri);
                        self.param_contribs[i].push(ri);
                    }
                }
                Ok(())
            }
            Prim::LmGet { index, .. } if self.src.ty(args[0]) == &self.s_ty && self.params.len() > 1 => {
                self.param_contribs[index as usize - 1].push(r);
                Ok(())
            }
            Prim::LmVCatV => match prim_call(self.src, args[1]) {
                Some((Prim::Build, bargs)) => self.push_r_loop(b, r, bargs[0], bargs[1]),
                _ => internal("lmVCatV of something other than a build"),
            },
            _ => internal(format!("cannot transpose a `{p}` from the parameter")),
        }
    }

    /// A zero contribution to Jacobian variable `g`: the zero cotangent of
    /// its target, or of one element of it if an enclosing loop reads it at
    /// the loop's index (then its contributions are elements).
    fn zero_for(&self, b: &mut Builder, g: &str) -> R<ExprId> {
        let w = self.witness_expr(b, g)?;
        match self.indexed.get(g) {
            Some(iv) => {
                let i = b.var(iv, Type::Integer);
                let wi = b.prim(Prim::Index, vec![i, w]);
                Ok(b.zero_tangent(wi))
            }
            None => Ok(b.zero_tangent(w)),
        }
    }

    /// A primal value shaped like the target of Jacobian variable `g`.
    fn witness_expr(&self, b: &mut Builder, g: &str) -> R<ExprId> {
        match self.witnesses.get(g) {
            Some(w) => Ok(w.build(b)),
            None => internal(format!("no shape known for `{g}`")),
        }
    }

    /// Transposes a sub-block (a branch or a loop body) that ends in `(v, g)`
    /// or in `g`, seeded with the cotangent `r` of its map; returns the tuple
    /// of the contributions to the outer variables `outer`, in order.
    fn sub_block(&mut self, b: &mut Builder, e: ExprId, r: (String, Type), outer: &[String], pair: bool) -> R<ExprId> {
        self.sub_block_grouped(b, e, r, outer, pair, None)
    }

    /// [`Rev::sub_block`], with the contributions grouped if `group` is
    /// `Some(k)`: the first `k` are an element (the one contribution if
    /// `k` is 1, else their tuple), paired with the tuple of the rest if
    /// there is a rest.
    fn sub_block_grouped(
        &mut self,
        b: &mut Builder,
        e: ExprId,
        r: (String, Type),
        outer: &[String],
        pair: bool,
        group: Option<usize>,
    ) -> R<ExprId> {
        let (bindings, result) = let_chain(self.src, e);
        let g_local = if pair {
            match self.src.exprs[result].clone() {
                Expr::Tuple(es) if es.len() == 2 => es[1],
                _ => return internal("a branch that does not end in a (value, map) pair"),
            }
        } else {
            result
        };
        let saved_block = std::mem::take(&mut self.block);
        let saved_contribs = std::mem::take(&mut self.contribs);
        let n_params = self.param_contribs.len();
        let saved_params = std::mem::replace(&mut self.param_contribs, vec![Vec::new(); n_params]);
        for (g, c) in std::mem::take(&mut self.carry) {
            self.contribs.entry(g).or_default().push(c);
        }
        // The seed: r flows into the block's result map.
        let r2 = r;
        match self.src.exprs[g_local].clone() {
            Expr::Var(g) => {
                self.contribs.entry(g).or_default().push(r2);
            }
            _ => return internal("a block whose map is not a variable"),
        }
        self.transpose_block(b, &bindings)?;
        // Contributions to outer variables, and to the parameter.
        let mut parts = Vec::new();
        for g in outer {
            let mut cs = self.contribs.remove(g).unwrap_or_default();
            self.owned_first(&mut cs);
            let z = if cs.is_empty() { Some(self.zero_for(b, g)?) } else { None };
            let e = self.sum_or_zero(b, cs, |_| z.unwrap());
            parts.push(e);
        }
        let params = std::mem::replace(&mut self.param_contribs, saved_params);
        let inner_block = std::mem::replace(&mut self.block, saved_block);
        self.contribs = saved_contribs;
        if params.iter().any(|p| !p.is_empty()) {
            return internal("a map of the parameter inside a block");
        }
        let t = match group {
            Some(k) => {
                let rest = parts.split_off(k);
                let elem = if k == 1 { parts.pop().unwrap_or_else(|| b.tuple(Vec::new())) } else { b.tuple(parts) };
                if rest.is_empty() {
                    elem
                } else {
                    let rest = b.tuple(rest);
                    b.tuple(vec![elem, rest])
                }
            }
            None => b.tuple(parts),
        };
        Ok(wrap(b, inner_block, t))
    }

    /// The Jacobian variables an expression mentions that it does not bind.
    fn outer_maps(&self, e: ExprId) -> Vec<String> {
        crate::derive::free_vars(self.src, e).into_iter().filter(|(_, t)| is_lm(t)).map(|(n, _)| n).collect()
    }

    fn scatter(&mut self, b: &mut Builder, result: ExprId, outer: &[String]) {
        let res = self.emit(b, "c", result);
        let n = outer.len() as u32;
        for (i, g) in outer.iter().enumerate() {
            let rv = b.var(&res.0, res.1.clone());
            let c = b.prim(Prim::Get { index: i as u32 + 1, arity: n }, vec![rv]);
            let c = self.emit(b, "r", c);
            self.contribs.entry(g.clone()).or_default().push(c);
        }
    }

    /// `r ⊙ᴿ lmFold (sc, f, df, acc, v)` = `(dsc, (dacc, dv))` (seed 003
    /// figure 15, RFold): the accumulators are stored with `$scan`, the
    /// accumulator's cotangent runs backwards with another `$scan`, and each
    /// step's contributions to the scope and to its element are gathered
    /// from those.
    ///
    /// For an `lmScan` (`$scan`), `r` has a part for every accumulator: the
    /// backward scan starts from the last part and adds part i to the
    /// accumulator's cotangent once step i has been transposed. For an
    /// `lmScanBlocks` (`$scanBlocks`), the same without a part for the
    /// first accumulator: part i - 1 is added after step i > 0; the
    /// accumulators are `$scanBlocks`' own results (the one before element
    /// i > 0 is result i - 1, before element 0 the identity), computed in
    /// its parallel blocks by the same call as the primal's, which CSE
    /// shares with it; and each
    /// element's cotangent is added one-hot into the backward scan's sum
    /// (in place natively, where the step computes it) instead of being
    /// stored per step and gathered in reverse afterwards. (Its backward
    /// scan is serial: seed 002's Theorem 3.7 is not built.)
    ///
    /// In `[sufrevpass f]`, a fold whose step calls f counts its iterations
    /// ([`crate::tape::counted`]), so the copies of its steps read those
    /// calls' records: the stored accumulators are (accumulator, iteration)
    /// pairs.
    fn rfold(
        &mut self,
        b: &mut Builder,
        at: ExprId,
        fold: &[ExprId],
        r: (String, Type),
        kept: Accumulators,
    ) -> R<ExprId> {
        let [sc, f, df, acc, v] = fold[..] else { return internal("malformed lmFold") };
        let Expr::Lam(t2, tty, dbody) = self.src.exprs[df].clone() else { return internal("lmFold without a lambda") };
        let sc_ty = self.src.ty(sc).clone();
        let st_ty = Type::Tuple(vec![sc_ty.clone(), tty.clone()]);
        let Type::Tuple(ab) = tty.clone() else { return internal("lmFold over a non-pair") };
        let a_ty = ab[0].clone();
        let da_ty = a_ty.tangent().unwrap_or(Type::Unknown);
        // n and the stored accumulators.
        let v1 = import(b, self.src, v);
        let n = b.prim(Prim::Size, vec![v1]);
        let n = self.emit(b, "n", n);
        let (a1, v2) = (import(b, self.src, acc), import(b, self.src, v));
        let taped = self.tape.clone().filter(|t| t.folds.contains(&at));
        let accs = match &taped {
            Some(t) => {
                let Expr::Lam(ft, ftty, fbody) = self.src.exprs[f].clone() else {
                    return internal("lmFold without lambdas");
                };
                let mut step = |b: &mut Builder, it: &str| t.in_step(at, it, || self.import_primal(b, fbody));
                crate::tape::counted(b, Prim::Scan, (&ft, &strip_type(&ftty)), a1, v2, &mut step)
            }
            // A monoid's scan: the accumulators after the first are
            // `$scanBlocks`' own results, in its parallel blocks, the same
            // call as the primal's, which CSE then shares (the
            // accumulator before element i > 0 is result i - 1).
            None if kept == Accumulators::AfterFirst => {
                let f1 = import(b, self.src, f);
                b.prim(Prim::ScanBlocks, vec![f1, a1, v2])
            }
            None => {
                let f1 = import(b, self.src, f);
                b.prim(Prim::Scan, vec![f1, a1, v2])
            }
        };
        let blocked = kept == Accumulators::AfterFirst && taped.is_none();
        let accs = self.emit(b, "accs", accs);
        let (nv, one) = (b.var(&n.0, n.1.clone()), b.integer(1));
        let last = b.int_op("sub", nv, one);
        let last = self.emit(b, "last", last);
        let sc_name = match &self.src.exprs[sc] {
            Expr::Var(x) => x.clone(),
            _ => return internal("lmFold whose scope is not a variable"),
        };
        let params = [Param { name: sc_name.clone(), ty: sc_ty.clone() }, Param { name: t2.clone(), ty: tty.clone() }];
        // The backward step at element i with incoming cotangent `seed`:
        // (dsc_i, (da_i, dx_i)), with t2 bound to (accs[i], v[i]).
        let step = |this: &mut Self, b: &mut Builder, i_name: &str, seed: (String, Type)| -> R<ExprId> {
            let i = b.var(i_name, Type::Integer);
            let i2 = b.copy(i);
            let accs_v = b.var(&accs.0, accs.1.clone());
            let mut a = if blocked {
                let (i0, zero) = (b.var(i_name, Type::Integer), b.integer(0));
                let first = b.prim(Prim::Eq, vec![i0, zero]);
                let a0 = import(b, this.src, acc);
                let one = b.integer(1);
                let before = b.int_op("sub", i, one);
                let ai = b.prim(Prim::Index, vec![before, accs_v]);
                let ty = b.ty(ai);
                b.body.alloc_typed(Expr::If(first, a0, ai), ty)
            } else {
                b.prim(Prim::Index, vec![i, accs_v])
            };
            if taped.is_some() {
                a = b.prim(Prim::Get { index: 1, arity: 2 }, vec![a]);
            }
            let vv = import(b, this.src, v);
            let x = b.prim(Prim::Index, vec![i2, vv]);
            let t_val = b.tuple(vec![a, x]);
            let transpose = || {
                transpose_program(
                    b,
                    this.src,
                    dbody,
                    this.witnesses,
                    this.demands,
                    &st_ty,
                    &params,
                    seed,
                    taped.clone(),
                    None,
                )
            };
            let inner = match &taped {
                Some(t) => t.in_step(at, i_name, transpose)?,
                None => transpose()?,
            };
            Ok(b.let_(&t2, t_val, inner))
        };
        // A monoid's scan whose cotangent is a few Floats: seed 002's
        // Theorem 3.7, the backward recurrence as a scan of affine maps in
        // `$scanBlocks`' parallel blocks and lanes (unless switched off).
        let switched_off = ksc_ir::pass::options().skip.iter().any(|s| s == crate::PARALLEL_SCAN_REVERSE);
        if blocked && !switched_off {
            let sc = (sc_name.as_str(), &sc_ty);
            if let Some(e) = self.rscan_blocks(b, &step, (&n, &r), &da_ty, sc, acc)? {
                return Ok(e);
            }
        }
        // One backward `$scanSum`. Its accumulator after k steps is (the
        // accumulator's cotangent, the element cotangent of the last step),
        // stored per step; the scope's cotangents are its summed terms
        // (added in place, not stored per step). Step k visits element
        // i = n - 1 - k.
        let db_ty = ab[1].tangent().unwrap_or(Type::Unknown);
        // A scan over a monoid adds each element's cotangent, one-hot, into
        // the summed terms: written where the step computes it, not stored
        // per step and gathered in reverse afterwards.
        let one_hot = kept == Accumulators::AfterFirst && taped.is_none();
        let c_ty = if one_hot { da_ty.clone() } else { Type::Tuple(vec![da_ty.clone(), db_ty.clone()]) };
        let p = b.fresh_name("p");
        let p_ty = Type::Tuple(vec![c_ty.clone(), Type::Integer]);
        let get = |b: &mut Builder, e: ExprId, i: u32, n: u32| b.prim(Prim::Get { index: i, arity: n }, vec![e]);
        let rk = b.fresh_name("rk");
        let pv = b.var(&p, p_ty.clone());
        let c = get(b, pv, 1, 2);
        let rk_val = if one_hot { c } else { get(b, c, 1, 2) };
        let pv = b.var(&p, p_ty.clone());
        let k = get(b, pv, 2, 2);
        let lastv = b.var(&last.0, last.1.clone());
        let i = b.int_op("sub", lastv, k);
        let i_name = b.fresh_name("i");
        let d = step(self, b, &i_name, (rk.clone(), da_ty.clone()))?;
        let d_name = b.fresh_name("d");
        let d_ty = b.ty(d);
        let dv = b.var(&d_name, d_ty.clone());
        let dsc_i = get(b, dv, 1, 2);
        let dv = b.var(&d_name, d_ty.clone());
        let mut dt = get(b, dv, 2, 2);
        if kept != Accumulators::Last {
            // (da_i + r[i], dx_i); for `lmScanBlocks`, (da_i + r[i - 1],
            // dx_i) after a step i > 0.
            let dt2 = b.copy(dt);
            let da = get(b, dt, 1, 2);
            let mut part = b.var(&i_name, Type::Integer);
            if kept == Accumulators::AfterFirst {
                let one = b.integer(1);
                part = b.int_op("sub", part, one);
            }
            let rv = b.var(&r.0, r.1.clone());
            let ri = b.prim(Prim::Index, vec![part, rv]);
            let mut da = b.prim(Prim::TsAdd, vec![da, ri]);
            if kept == Accumulators::AfterFirst {
                let (iv, zero) = (b.var(&i_name, Type::Integer), b.integer(0));
                let first = b.prim(Prim::Eq, vec![iv, zero]);
                let dt3 = b.copy(dt2);
                let da_only = get(b, dt3, 1, 2);
                da = b.if_(first, da_only, da);
            }
            let dx = get(b, dt2, 2, 2);
            dt = b.tuple(vec![da, dx]);
        }
        let next = if one_hot {
            let dt2 = b.copy(dt);
            let da = get(b, dt, 1, 2);
            let dx = get(b, dt2, 2, 2);
            let (nv, iv) = (b.var(&n.0, n.1.clone()), b.var(&i_name, Type::Integer));
            let dx = b.prim(Prim::DeltaVec, vec![nv, iv, dx]);
            let terms = b.tuple(vec![dsc_i, dx]);
            b.tuple(vec![da, terms])
        } else {
            b.tuple(vec![dt, dsc_i])
        };
        let body = b.let_(&d_name, d, next);
        let body = b.let_(&i_name, i, body);
        let body = b.let_(&rk, rk_val, body);
        let lam = b.lam(&p, p_ty, body);
        let nv2 = b.var(&n.0, n.1.clone());
        let ks = b.build(nv2, |_, k| k);
        let mut r0 = b.var(&r.0, r.1.clone());
        match kept {
            Accumulators::Last => {}
            Accumulators::All => {
                let nv = b.var(&n.0, n.1.clone());
                r0 = b.prim(Prim::Index, vec![nv, r0]);
            }
            Accumulators::AfterFirst => {
                // The last part; none over no elements.
                let lastv = b.var(&last.0, last.1.clone());
                let part = b.prim(Prim::Index, vec![lastv, r0]);
                let (nv, zero) = (b.var(&n.0, n.1.clone()), b.integer(0));
                let empty = b.prim(Prim::Eq, vec![nv, zero]);
                let a = import(b, self.src, acc);
                let none = b.zero_tangent(a);
                r0 = b.if_(empty, none, part);
            }
        }
        let scv = b.var(&sc_name, sc_ty.clone());
        let mut z = b.zero_tangent(scv);
        let init = if one_hot {
            let vv = import(b, self.src, v);
            let zv = b.zero_tangent(vv);
            z = b.tuple(vec![z, zv]);
            r0
        } else {
            // The element cotangent before the first step is never read.
            let placeholder = b.body.alloc_typed(Expr::Dummy(db_ty.clone()), db_ty.clone());
            b.tuple(vec![r0, placeholder])
        };
        let both = b.prim(Prim::ScanSum, vec![lam, init, z, ks]);
        let both = self.emit(b, "rs", both);
        let bv = b.var(&both.0, both.1.clone());
        let rs = get(b, bv, 1, 2);
        let rs = self.emit(b, "rs", rs);
        let bv = b.var(&both.0, both.1.clone());
        let dsc = get(b, bv, 2, 2);
        let (nv3, rsv) = (b.var(&n.0, n.1.clone()), b.var(&rs.0, rs.1.clone()));
        let fin = b.prim(Prim::Index, vec![nv3, rsv]);
        if one_hot {
            // dacc from the last accumulator, dv the sum of the one-hots.
            let terms = self.emit(b, "terms", dsc);
            let tv = b.var(&terms.0, terms.1.clone());
            let dsc = get(b, tv, 1, 2);
            let tv = b.var(&terms.0, terms.1.clone());
            let dvec = get(b, tv, 2, 2);
            let inner = b.tuple(vec![fin, dvec]);
            return Ok(b.tuple(vec![dsc, inner]));
        }
        // dacc from the last accumulator; dv[i] from step n - 1 - i,
        // stored at n - i.
        let dacc = get(b, fin, 1, 2);
        let nv4 = b.var(&n.0, n.1.clone());
        let dvec = b.build(nv4, |b, i| {
            let nv = b.var(&n.0, n.1.clone());
            let at = b.int_op("sub", nv, i);
            let rsv = b.var(&rs.0, rs.1.clone());
            let c = b.prim(Prim::Index, vec![at, rsv]);
            get(b, c, 2, 2)
        });
        let inner = b.tuple(vec![dacc, dvec]);
        Ok(b.tuple(vec![dsc, inner]))
    }

    /// Seed 002's Theorem 3.7 for `$scanBlocks OP E V` (see [`crate::rscan`]):
    /// the cotangents `g_i` of its results, `g_(i-1) = M_i g_i + r[i-1]`,
    /// as `$scanBlocks` of the affine maps `(M_i, r[i-1])` in reverse order
    /// (element j the map of step n - j; the first the constant r[n-1]),
    /// then each element's and the scope's cotangent from its `g_i` in one
    /// loop whose iterations are independent, and E's from g_0. `step` is
    /// [`Rev::rfold`]'s transposed step. `None` where the cotangent is not
    /// a few Floats: the serial backward pass then runs.
    fn rscan_blocks(
        &mut self,
        b: &mut Builder,
        step: &TransposedStep<'_, 's, 'd>,
        (n, r): (&(String, Type), &(String, Type)),
        da_ty: &Type,
        (sc_name, sc_ty): (&str, &Type),
        acc: ExprId,
    ) -> R<Option<ExprId>> {
        use crate::rscan;
        let Some(paths) = rscan::float_leaves(da_ty) else { return Ok(None) };
        let k = paths.len();
        if k == 0 || k > rscan::MAX_FLOATS {
            return Ok(None);
        }
        let get = |b: &mut Builder, e: ExprId, i: u32, n: u32| b.prim(Prim::Get { index: i, arity: n }, vec![e]);
        // M's pattern: which seed components each component of the
        // accumulator's cotangent reads, in the step written with a
        // symbolic seed.
        let (seed, probe) = (b.fresh_name("seed"), b.fresh_name("i"));
        let d = step(self, b, &probe, (seed.clone(), da_ty.clone()))?;
        let Type::Tuple(parts) = b.ty(d) else { return internal("a transposed step that is not a pair") };
        let deps = rscan::seed_dependence(b.body, d, &seed, k);
        let off = rscan::leaf_count(&parts[0]);
        let pattern: Vec<u64> = deps[off..off + k].to_vec();
        let s = rscan::closure(&pattern);
        let ents = rscan::entries(&s);
        let width = (ents.len() + k) as u32;
        let st_ty = rscan::state_type(ents.len(), k);
        let nvar = |b: &mut Builder| b.var(&n.0, n.1.clone());
        // W[j]: the map of step i = n - j (for j = 0 the constant r[n - 1]).
        let (j, i_name) = (b.fresh_name("j"), b.fresh_name("i"));
        let mut cols = Vec::new();
        for m in 0..k {
            if pattern.iter().all(|row| row >> m & 1 == 0) {
                continue;
            }
            let unit = {
                let mut ls = (0..k).map(|q| b.float(if q == m { 1.0 } else { 0.0 })).collect::<Vec<_>>().into_iter();
                rscan::from_leaves(b, da_ty, &mut ls)
            };
            let s_m = b.fresh_name("seed");
            let d = step(self, b, &i_name, (s_m.clone(), da_ty.clone()))?;
            let dt = get(b, d, 2, 2);
            let col = get(b, dt, 1, 2);
            cols.push((m, s_m, unit, b.fresh_name("col"), col));
        }
        let mut a = Vec::new();
        for &(l, m) in &ents {
            a.push(match cols.iter().find(|c| c.0 == m).filter(|_| pattern[l] >> m & 1 == 1) {
                Some(c) => rscan::leaf(b, &c.3, da_ty, &paths[l]),
                None => b.float(0.0),
            });
        }
        let mut a = b.tuple(a);
        for (_, s_m, unit, col_name, col) in cols.into_iter().rev() {
            a = b.let_(&col_name, col, a);
            a = b.let_(&s_m, unit, a);
        }
        let zeros = (0..ents.len()).map(|_| b.float(0.0)).collect();
        let zeros = b.tuple(zeros);
        let (jv, zero) = (b.var(&j, Type::Integer), b.integer(0));
        let first = b.prim(Prim::Eq, vec![jv, zero]);
        let a = b.if_(first, zeros, a);
        let (nv, jv, one) = (nvar(b), b.var(&j, Type::Integer), b.integer(1));
        let at = b.int_op("sub", nv, jv);
        let at = b.int_op("sub", at, one);
        let rv = b.var(&r.0, r.1.clone());
        let c = b.prim(Prim::Index, vec![at, rv]);
        // The flat state: A's entries, then c's leaves.
        let (a_name, c_name) = (b.fresh_name("m"), b.fresh_name("c"));
        let a_ty = b.ty(a);
        let mut flat = Vec::new();
        for e in 0..ents.len() {
            let av = b.var(&a_name, a_ty.clone());
            flat.push(b.prim(Prim::Get { index: e as u32 + 1, arity: ents.len() as u32 }, vec![av]));
        }
        for path in &paths {
            flat.push(rscan::leaf(b, &c_name, da_ty, path));
        }
        let elem = b.tuple(flat);
        let elem = b.let_(&c_name, c, elem);
        let elem = b.let_(&a_name, a, elem);
        let (nv, jv) = (nvar(b), b.var(&j, Type::Integer));
        let i_val = b.int_op("sub", nv, jv);
        let elem = b.let_(&i_name, i_val, elem);
        let lam = b.lam(&j, Type::Integer, elem);
        let nv = nvar(b);
        let ws = b.prim(Prim::Build, vec![nv, lam]);
        let op = rscan::compose(b, &s);
        let e = rscan::identity(b, &s);
        let gs = b.prim(Prim::ScanBlocks, vec![op, e, ws]);
        let gs = self.emit(b, "gs", gs);
        debug_assert_eq!(gs.1, Type::vec(st_ty.clone()));
        // g_i, the cotangent of result i, is the state of W's element
        // n - 1 - i applied to 0: its c.
        let g_at = |b: &mut Builder, i: ExprId| {
            let (nv, one) = (b.var(&n.0, n.1.clone()), b.integer(1));
            let at = b.int_op("sub", nv, one);
            let at = b.int_op("sub", at, i);
            let gv = b.var(&gs.0, gs.1.clone());
            let st = b.prim(Prim::Index, vec![at, gv]);
            let name = b.fresh_name("st");
            let mut leaves = Vec::new();
            for l in 0..k {
                let sv = b.var(&name, st_ty.clone());
                leaves.push(b.prim(Prim::Get { index: (ents.len() + l) as u32 + 1, arity: width }, vec![sv]));
            }
            let g = rscan::from_leaves(b, da_ty, &mut leaves.into_iter());
            b.let_(&name, st, g)
        };
        // The transposed step i from g_i: (dsc_i, (da_i, dx_i)).
        let at_step = |this: &mut Self, b: &mut Builder, i_name: &str, i_val: ExprId| -> R<ExprId> {
            let g = b.fresh_name("g");
            let iv = b.var(i_name, Type::Integer);
            let g_val = g_at(b, iv);
            let d = step(this, b, i_name, (g.clone(), da_ty.clone()))?;
            let d = b.let_(&g, g_val, d);
            Ok(b.let_(i_name, i_val, d))
        };
        // dx_i and dsc_i: one loop, its iterations independent but for the
        // scope's sum (a `$buildSum` only where the scope has a tangent).
        let (i2, i3) = (b.fresh_name("i"), b.fresh_name("i"));
        let i2v = b.var(&i2, Type::Integer);
        let d = at_step(self, b, &i3, i2v)?;
        let dname = b.fresh_name("d");
        let d_ty = b.ty(d);
        let dv = b.var(&dname, d_ty.clone());
        let dt = get(b, dv, 2, 2);
        let dx = get(b, dt, 2, 2);
        let scv = b.var(sc_name, sc_ty.clone());
        let z = b.zero_tangent(scv);
        let scoped = sc_ty.tangent().and_then(|t| t.fixed_float_count()) != Some(0);
        let (dsc, dvec) = if scoped {
            let dv = b.var(&dname, d_ty.clone());
            let dsc_i = get(b, dv, 1, 2);
            let pair = b.tuple(vec![dx, dsc_i]);
            let body = b.let_(&dname, d, pair);
            let lam = b.lam(&i2, Type::Integer, body);
            let nv = nvar(b);
            let both = b.prim(Prim::BuildSum, vec![nv, z, lam]);
            let both = self.emit(b, "dxs", both);
            let bv = b.var(&both.0, both.1.clone());
            let dvec = get(b, bv, 1, 2);
            let bv = b.var(&both.0, both.1.clone());
            (get(b, bv, 2, 2), dvec)
        } else {
            let body = b.let_(&dname, d, dx);
            let lam = b.lam(&i2, Type::Integer, body);
            let nv = nvar(b);
            (z, b.prim(Prim::Build, vec![nv, lam]))
        };
        // E's cotangent: step 0's accumulator part (none over no elements).
        let (i0, zero) = (b.fresh_name("i"), b.integer(0));
        let d0 = at_step(self, b, &i0, zero)?;
        let dt0 = get(b, d0, 2, 2);
        let da0 = get(b, dt0, 1, 2);
        let (nv, zero) = (nvar(b), b.integer(0));
        let empty = b.prim(Prim::Eq, vec![nv, zero]);
        let e0 = import(b, self.src, acc);
        let none = b.zero_tangent(e0);
        let dacc = b.if_(empty, none, da0);
        let inner = b.tuple(vec![dacc, dvec]);
        Ok(Some(b.tuple(vec![dsc, inner])))
    }

    /// The map component of a (value, map) pair bound by `if` or `assert`.
    /// Owned contributions to the outer variables start both branches'
    /// sums (so a branch adds into them or gives them to a recursive
    /// call's reverse pass), and the branches' results for those are owned.
    fn push_r_pair(&mut self, b: &mut Builder, r: (String, Type), pair: ExprId) -> R<()> {
        let outer = self.outer_maps(pair);
        let carry: Vec<(String, (String, Type))> =
            outer.iter().filter_map(|g| self.take_owned(g).map(|c| (g.clone(), c))).collect();
        self.carry = carry.clone();
        let result = match self.src.exprs[pair].clone() {
            Expr::If(c, t, f) => {
                let c = self.import_primal(b, c);
                let t = self.sub_block(b, t, r.clone(), &outer, true)?;
                self.carry = carry.clone();
                let f = self.sub_block(b, f, r, &outer, true)?;
                let ty = b.ty(t);
                b.body.alloc_typed(Expr::If(c, t, f), ty)
            }
            // The derivative fails where the function does.
            Expr::Assert(c, x, from) => {
                let c = self.import_primal(b, c);
                let x = self.sub_block(b, x, r, &outer, true)?;
                let ty = b.ty(x);
                b.body.alloc_typed(Expr::Assert(c, x, from), ty)
            }
            _ => return internal("a pair that is not an `if` or `assert`"),
        };
        self.scatter(b, result, &outer);
        self.mark_last(carry.iter().map(|(g, _)| g));
        Ok(())
    }

    /// `r ⊙ᴿ V(s, build n (λi. m_i))`: the sum over i of the transposed
    /// bodies, each seeded with `r[i]`.
    fn push_r_loop(&mut self, b: &mut Builder, r: (String, Type), n: ExprId, lam: ExprId) -> R<()> {
        let Expr::Lam(i, ity, body) = self.src.exprs[lam].clone() else { return internal("a build without a lambda") };
        let outer = self.outer_maps(lam);
        if outer.is_empty() {
            return Ok(());
        }
        // Outer vectors that the loop reads only at its own index (for loops
        // over vectors; a loop over a rank-d index space sums one-hots), and
        // whether it reads some other vector only element by element (so its
        // contributions are one-hot).
        let (mut indexed, mut others, mut gathers) = (Vec::new(), Vec::new(), false);
        for g in &outer {
            let u = count_uses(self.src, body, g, &i, &mut Vec::new());
            if ity == Type::Integer && u.all > 0 && u.all == u.at_index && self.witnesses.contains_key(g) {
                indexed.push(g.clone());
            } else {
                gathers |= u.all > 0 && u.all == u.elements;
                others.push(g.clone());
            }
        }
        // A loop over a vector whose body has a recursive call passing on
        // a vector of the scope (when their reverse passes accumulate)
        // threads its contributions through its iterations in sequence
        // (`thread` below), all of them: a vector read at the loop's index
        // included.
        let threaded = ity == Type::Integer && self.passes_on(body, &outer);
        if threaded {
            others.append(&mut indexed);
        }
        let n1 = self.import_primal(b, n);
        let nv = self.emit(b, "n", n1);
        // The loop's body transposed, seeded with r[i], returning the tuple
        // of its contributions to `targets` (grouped as `group` says).
        let body_for = |this: &mut Self, b: &mut Builder, targets: &[String], group: Option<usize>| -> R<ExprId> {
            let saved_indexed = this.indexed.clone();
            for g in &indexed {
                this.indexed.insert(g.clone(), i.clone());
            }
            let iv = b.var(&i, ity.clone());
            let rv = b.var(&r.0, r.1.clone());
            let ri = b.prim(Prim::Index, vec![iv, rv]);
            let ri_name = b.fresh_name("ri");
            let elem_ty = b.ty(ri);
            this.loop_depth += 1;
            let inner = this.sub_block_grouped(b, body, (ri_name.clone(), elem_ty), targets, false, group);
            this.loop_depth -= 1;
            this.indexed = saved_indexed;
            let inner = inner?;
            let ty = b.ty(inner);
            let inner = b.body.alloc_typed(Expr::Let(Pat::Var(ri_name), ri, inner), ty);
            Ok(b.lam(&i, ity.clone(), inner))
        };
        let zeros_of = |this: &mut Self, b: &mut Builder, gs: &[String]| -> R<ExprId> {
            let zeros = gs.iter().map(|g| this.zero_for(b, g)).collect::<R<Vec<_>>>()?;
            Ok(b.tuple(zeros))
        };
        // Contributions to other maps are summed directly (no iteration's
        // contributions are kept), so a one-hot contribution becomes an
        // in-place accumulation in the loop IR. The vectors read at the
        // loop's index get their cotangents element by element: a `build`
        // of each iteration's contributions. When there are both, the two
        // are made in one pass (`$buildSum`), except in a loop inside
        // another's backward pass that reads some other vector element by
        // element: it runs its body twice (a `build` and a `sumbuild`),
        // because the loop IR adds a nested `sumbuild`'s one-hot terms
        // straight into the outer loop's accumulators, while a `$buildSum`'s
        // sum is a value of its own (a full-size vector per outer
        // iteration).
        //
        // The sum of the contributions to `others`, scattered to them:
        //
        // When every one of them has an owned contribution (a recursive
        // reverse pass's accumulator), the sum starts from those, `ts_add`
        // adding the loop's terms into them in place; the results are owned.
        let sum_others = |this: &mut Self, b: &mut Builder| -> R<()> {
            let lam = body_for(this, b, &others, None)?;
            let n2 = b.var(&nv.0, nv.1.clone());
            let sum = b.prim(Prim::Sumbuild, vec![n2, lam]);
            let start: Option<Vec<(String, Type)>> = if others.iter().all(|g| this.has_owned(g)) {
                others.iter().map(|g| this.take_owned(g)).collect()
            } else {
                None
            };
            let (empty_value, sum) = match &start {
                Some(cs) => {
                    let vars = |b: &mut Builder| cs.iter().map(|(c, t)| b.var(c, t.clone())).collect::<Vec<_>>();
                    let (first, second) = (vars(b), vars(b));
                    let first = b.tuple(first);
                    let second = b.tuple(second);
                    (first, b.prim(Prim::TsAdd, vec![second, sum]))
                }
                // An empty loop contributes zeros.
                None => (zeros_of(this, b, &others)?, sum),
            };
            let empty = is_empty(b, &nv);
            let ty = b.ty(sum);
            let result = b.body.alloc_typed(Expr::If(empty, empty_value, sum), ty);
            this.scatter(b, result, &others);
            if start.is_some() {
                this.mark_last(&others);
            }
            Ok(())
        };
        // The threaded loop: `fold (λ((acc..), i). body) (acc0..) (build n
        // (λi. i))`, whose body starts its contributions to `others` from
        // the accumulators, owned (as a branch starts from the carried
        // ones), so it gives them to the reverse passes of its recursive
        // calls (`[sufrevacc f]`) or adds its terms into them in place. The
        // accumulators start from the owned contributions, else zeros; the
        // results are owned. (A `sumbuild` of the calls' reverse passes
        // made each call's cotangent a vector of its own, summed: tree
        // recursion in a loop was quadratic in native code.)
        let thread = |this: &mut Self, b: &mut Builder| -> R<()> {
            let mut inits = Vec::with_capacity(others.len());
            for g in &others {
                inits.push(match this.take_owned(g) {
                    Some((c, t)) => b.var(&c, t),
                    None => this.zero_for(b, g)?,
                });
            }
            let tys: Vec<Type> = inits.iter().map(|&e| b.ty(e)).collect();
            let names: Vec<String> = others.iter().map(|_| b.fresh_name("acc")).collect();
            this.carry.clear();
            for ((g, a), t) in others.iter().zip(&names).zip(&tys) {
                this.accs.insert(a.clone());
                this.carry.push((g.clone(), (a.clone(), t.clone())));
            }
            let lam = body_for(this, b, &others, None)?;
            let Expr::Lam(iv, _, inner) = b.expr(lam).clone() else {
                return internal("a loop body that is not a lambda");
            };
            let acc_ty = Type::Tuple(tys);
            let w = b.fresh_name("w");
            let w_ty = Type::Tuple(vec![acc_ty.clone(), Type::Integer]);
            let wv = b.var(&w, w_ty.clone());
            let i_val = b.prim(Prim::Get { index: 2, arity: 2 }, vec![wv]);
            let step = b.let_(&iv, i_val, inner);
            let wv = b.var(&w, w_ty.clone());
            let accs = b.prim(Prim::Get { index: 1, arity: 2 }, vec![wv]);
            let ty = b.ty(step);
            let step = b.body.alloc_typed(Expr::Let(Pat::Tuple(names), accs, step), ty);
            let step = b.lam(&w, w_ty, step);
            let init = b.tuple(inits);
            let n2 = b.var(&nv.0, nv.1.clone());
            let range = b.build(n2, |_, j| j);
            let run = b.prim(Prim::Fold, vec![step, init, range]);
            this.scatter(b, run, &others);
            this.mark_last(&others);
            Ok(())
        };
        if threaded {
            return thread(self, b);
        }
        let n2 = b.var(&nv.0, nv.1.clone());
        let per_iteration = if indexed.is_empty() {
            return if others.is_empty() { Ok(()) } else { sum_others(self, b) };
        } else if others.is_empty() || (self.loop_depth > 0 && gathers) {
            if !others.is_empty() {
                sum_others(self, b)?;
            }
            let lam = body_for(self, b, &indexed, Some(indexed.len()))?;
            b.prim(Prim::Build, vec![n2, lam])
        } else {
            let targets: Vec<String> = indexed.iter().chain(&others).cloned().collect();
            let lam = body_for(self, b, &targets, Some(indexed.len()))?;
            let zeros = zeros_of(self, b, &others)?;
            let both = b.prim(Prim::BuildSum, vec![n2, zeros, lam]);
            let both = self.emit(b, "c", both);
            let bv = b.var(&both.0, both.1.clone());
            let sums = b.prim(Prim::Get { index: 2, arity: 2 }, vec![bv]);
            self.scatter(b, sums, &others);
            let bv = b.var(&both.0, both.1.clone());
            b.prim(Prim::Get { index: 1, arity: 2 }, vec![bv])
        };
        let t = self.emit(b, "t", per_iteration);
        let k = indexed.len() as u32;
        for (j, g) in indexed.iter().enumerate() {
            // build (size w) (λq. if q < n then t[q].j else 0)
            let w = self.witness_expr(b, g)?;
            let size = b.prim(Prim::Size, vec![w]);
            let q = b.fresh_name("q");
            let qv = b.var(&q, Type::Integer);
            let nvar = b.var(&nv.0, nv.1.clone());
            let inside = b.int_test("lt", qv, nvar);
            let (q1, tv) = (b.var(&q, Type::Integer), b.var(&t.0, t.1.clone()));
            let row = b.prim(Prim::Index, vec![q1, tv]);
            let hit = if k == 1 { row } else { b.prim(Prim::Get { index: j as u32 + 1, arity: k }, vec![row]) };
            let (q2, w2) = (b.var(&q, Type::Integer), self.witness_expr(b, g)?);
            let wq = b.prim(Prim::Index, vec![q2, w2]);
            let miss = b.zero_tangent(wq);
            let ty = b.ty(hit);
            let body = b.body.alloc_typed(Expr::If(inside, hit, miss), ty);
            let lam = b.lam(&q, Type::Integer, body);
            let contribution = b.prim(Prim::Build, vec![size, lam]);
            let c = self.emit(b, "r", contribution);
            self.contribs.entry(g.clone()).or_default().push(c);
        }
        Ok(())
    }
}

/// `[sufrev f] (x, dr) = [rev f] (x, dr)` (the split passes are in
/// `tape.rs`), and `[shape f] x = shape (f x)` (knossos-reference.md 5.6),
/// which the optimiser's rules simplify where they can.
pub fn split_pass(d: Derivation, f: &FunName, s: &Type, t: &Type) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let dt = t.tangent().unwrap_or(Type::Unknown);
    let ds = s.tangent().unwrap_or(Type::Unknown);
    let rev = f.derived(Derivation::Rev);
    let (params, root, ret) = match d {
        Derivation::Shape => {
            // f inlined, so the shape rules can look at its result.
            let x = b.var("ksc$x", s.clone());
            let y = b.call(f.clone(), vec![x], t.clone());
            let y = b.prim(Prim::Inline, vec![y]);
            let root = b.prim(Prim::Shape, vec![y]);
            let ret = b.ty(root);
            (vec![Param { name: "ksc$x".into(), ty: s.clone() }], root, ret)
        }
        _ => {
            let (x, r) = (b.var("ksc$x", s.clone()), b.var("ksc$dr", dt.clone()));
            let root = b.call(rev, vec![x, r], ds.clone());
            (vec![Param { name: "ksc$x".into(), ty: s.clone() }, Param { name: "ksc$dr".into(), ty: dt }], root, ds)
        }
    };
    Def { name: f.derived(d), params, ret_ty: ret, body, root }
}
