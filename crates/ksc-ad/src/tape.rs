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
//!   threaded through; the position of that call's record is kept for site
//!   k (-1 where it did not run). At the end the record `(value, positions
//!   by site)` is appended with `$tapePush`: records are in post-order, one
//!   per call, and the tape is threaded linearly, so each push is in place.
//! - `[suffwdpass f] x = (y, (x, tape, position))` runs it from an empty
//!   tape; the residuals (`Type::residuals`) are the argument, the tape and
//!   the position of this call's record.
//! - `[sufrevpass [f S]] (dr, (x, tape, p))` is `[rev f]`'s transposed
//!   program, with the result of the call at site k read from the record
//!   of position `kids[k]` (`kids` from record p) and its reverse pass
//!   `[sufrevpass f] (r, (a, tape, kids[k]))`. The primal bindings of f's
//!   own level are recomputed (a constant per level), never a callee's
//!   recursion.
//! - `[rev f] (x, dr) = [sufrevpass f] (dr, residuals of [suffwdpass f] x)`
//!   for a recursive f.
//!
//! Recursive calls inside a lambda (`build`, `fold`, ...) are not taped:
//! such a function keeps the checkpointing passes ([`checkpoint_passes`]).

use std::rc::Rc;

use rustc_hash::FxHashMap;

use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Param, Pat, Prim, Type};
use ksc_linmap::builder::{prim_call, Builder};

use crate::apply::{bind_params, checked_def, internal, is_lm, let_chain, param_name, strip_expr, strip_type, wrap};
use crate::derive::{Witnesses, R};

/// The recursive calls of f in `[D f]`.
pub struct Plan {
    /// Sites: the primal calls of f, outside lambdas, in order.
    pub sites: FxHashMap<ExprId, usize>,
    /// The `[D f]` call of each site's map, and the site.
    pub jacobians: FxHashMap<ExprId, usize>,
}

impl Plan {
    /// The recursive calls of `f` in its Jacobian `d`; None when one is
    /// inside a lambda or has no map of its own (then f is not taped).
    pub fn new(f: &FunName, d: &Def) -> Option<Plan> {
        let mut plan = Plan { sites: FxHashMap::default(), jacobians: FxHashMap::default() };
        let mut ok = true;
        walk(&d.body, d.root, false, &mut |e, in_lam| {
            if let Expr::Call(Callee::Fun(g), _) = &d.body.exprs[e] {
                if g == f {
                    ok &= !in_lam;
                    let k = plan.sites.len();
                    plan.sites.insert(e, k);
                }
            }
        });
        // Pair each site with the map bound right after it.
        let mut dcalls = 0;
        let jacobian_of_f = |g: &FunName| g.derivs.first() == Some(&Derivation::D) && g.inner().is_some_and(|(_, i)| &i == f);
        walk(&d.body, d.root, false, &mut |e, _| {
            if let Expr::Call(Callee::Fun(g), _) = &d.body.exprs[e] {
                if jacobian_of_f(g) {
                    dcalls += 1;
                }
            }
            let Expr::Let(Pat::Var(_), r, x) = &d.body.exprs[e] else { return };
            let Some(&k) = plan.sites.get(r) else { return };
            let Expr::Let(Pat::Var(_), m, _) = &d.body.exprs[*x] else { return };
            if let Some((Prim::LmCompose, args)) = prim_call(&d.body, *m) {
                if matches!(&d.body.exprs[args[0]], Expr::Call(Callee::Fun(g), _) if jacobian_of_f(g)) {
                    plan.jacobians.insert(args[0], k);
                }
            }
        });
        // The forward pass hoists the bindings above a recursive call out
        // of the expression they are in; `[D f]`'s own bindings have fresh
        // names, but a copied source `let` (in a condition, say) could
        // shadow a variable read after it.
        walk(&d.body, d.root, false, &mut |e, _| {
            if let Expr::Let(p, r, x) = &d.body.exprs[e] {
                if p.vars().iter().any(|v| !v.starts_with("ksc$")) {
                    let mut inside = false;
                    walk(&d.body, *r, false, &mut |y, _| inside |= plan.sites.contains_key(&y));
                    walk(&d.body, *x, false, &mut |y, _| inside |= plan.sites.contains_key(&y));
                    ok &= !inside;
                }
            }
        });
        (ok && dcalls == plan.jacobians.len()).then_some(plan)
    }

    pub fn is_recursive(&self) -> bool {
        !self.sites.is_empty()
    }
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
        Expr::Assert(c, x) => live(body, *c, f, vars) | live(body, *x, f, vars),
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
    for c in ksc_opt::term::children(node) {
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
    for _ in 0..plan.sites.len() {
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
            if let Some(&k) = self.plan.sites.get(&x) {
                out.push(k);
            }
        });
        out.sort_unstable();
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
            Expr::Call(Callee::Fun(_), a) if self.plan.sites.contains_key(&e) => {
                let k = self.plan.sites[&e];
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
            Expr::Assert(c, x) => {
                let c = self.expr(b, c)?;
                let sites = self.sites_in(e);
                let bx = self.branch(b, x, &sites)?;
                let both_ty = b.ty(bx);
                let both = b.body.alloc_typed(Expr::Assert(c, bx), both_ty);
                Ok(self.unpack(b, both, &sites))
            }
            _ => internal("a recursive call the tape cannot reach"),
        }
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
    pub sites: FxHashMap<ExprId, usize>,
    pub jacobians: FxHashMap<ExprId, usize>,
}

impl RevTape {
    fn position(&self, b: &mut Builder, k: usize) -> ExprId {
        let ki = b.integer(k as i64);
        let kids = b.var(&self.kids, Type::vec(Type::Integer));
        b.prim(Prim::Index, vec![ki, kids])
    }

    /// The result of the recursive call at `e`, if `e` is one: read from
    /// its record.
    pub fn read(&self, b: &mut Builder, e: ExprId) -> Option<ExprId> {
        let &k = self.sites.get(&e)?;
        let p = self.position(b, k);
        let tape = b.var(&self.tape.0, self.tape.1.clone());
        let record = b.prim(Prim::Index, vec![p, tape]);
        Some(b.prim(Prim::Get { index: 1, arity: 2 }, vec![record]))
    }

    /// `r ⊙ᴿ [D f](a)` for the Jacobian call `j` of a recursive call:
    /// `[sufrevpass f] (r, (a, tape, position))`.
    pub fn rev_call(&self, b: &mut Builder, src: &Body, j: ExprId, r: &(String, Type)) -> Option<ExprId> {
        let &k = self.jacobians.get(&j)?;
        let Expr::Call(_, a) = src.exprs[j].clone() else { return None };
        let a = crate::apply::import(b, src, a);
        let tape = b.var(&self.tape.0, self.tape.1.clone());
        let p = self.position(b, k);
        let res = b.tuple(vec![a, tape, p]);
        let rv = b.var(&r.0, r.1.clone());
        let ds = self.s_ty.tangent()?;
        Some(b.call(self.f.derived(Derivation::SufRevPass), vec![rv, res], ds))
    }
}

/// `[sufrevpass [f S]]` from `[D f]` (see the module's documentation).
pub fn sufrevpass_def(f: &Def, d: &Def, witnesses: &Witnesses, plan: &Plan, demands: &mut Vec<FunName>) -> R<Def> {
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
    let tape = Rc::new(RevTape {
        f: f.name.clone(),
        t_ty: t_ty.clone(),
        s_ty: s_ty.clone(),
        tape: (tape_name.clone(), tape_ty.clone()),
        kids: kids_name.clone(),
        sites: plan.sites.clone(),
        jacobians: plan.jacobians.clone(),
    });
    let seed = (dr_name.clone(), dt_ty.clone());
    let inner =
        crate::apply::transpose_program(&mut b, &d.body, d.root, witnesses, demands, &s_ty, &f.params, seed, Some(tape))?;
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
    let params = vec![Param { name: dr_name, ty: dt_ty }, Param { name: res_name, ty: res_ty }];
    checked_def(f.name.derived(Derivation::SufRevPass), params, ds_ty, body, root)
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
    Def { name: f.derived(Derivation::SufFwdPass), params: vec![Param { name: "ksc$x".into(), ty: s.clone() }], ret_ty: ret, body, root }
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
            Def { name: f.derived(d), params: vec![Param { name: "ksc$x".into(), ty: s.clone() }], ret_ty: ret, body, root }
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

