//! Common-subexpression elimination (knossos-reference.md 6.6), best run
//! after [`crate::anf`].
//!
//! The pass walks the term with a substitution (variable ↦ variable) and a
//! table from expressions, up to alpha-equivalence and under the current
//! substitution, to the pattern of the `let` that already holds them:
//!
//! - `let x = y` (a variable after CSE) is dropped and `x ↦ y` substituted;
//! - `let x = e` with an expression `e` without effect records `e ↦ x`; a
//!   later expression alpha-equal to `e` without effect becomes `x` (never
//!   a literal tuple of a tuple pattern's variables: put where a splatting
//!   primitive reads its argument it would mean several arguments);
//! - a tuple pattern `let (a b) = e` records `e` for tuple patterns only: a
//!   later `let (c d) = e'`, `e'` alpha-equal to `e`, substitutes `c ↦ a`
//!   and `d ↦ b`; and its components are `get$1$2 e` and `get$2$2 e`: read
//!   from lets that hold those already, else recorded as held by `a` and
//!   `b`;
//! - entries made inside a lambda body, an `if` branch or an `assert` body
//!   are forgotten when leaving it, so no work moves out of them; an entry
//!   made outside may be used inside (that only saves work);
//! - `let p = [fwdt g] (a, da)` without effect records `g a` as held by
//!   `get$1$2 p` (forward mode's pair gives the value: a later `g a`, which
//!   the loop of values of a fused loop computes, reads it);
//! - expressions with an effect (`print`, `$trace`, calls of functions that
//!   may reach them) are never recorded nor replaced;
//! - a call's literal argument tuple is never itself replaced (the
//!   argument-tuple invariant);
//! - a binder whose name is already in scope is renamed to a fresh `ksc$`
//!   name, so a recorded variable or a substituted one can never be shadowed.
//!
//! The pass is iterative: bodies nested thousands deep are fine. Running the
//! Core rules afterwards removes the lets CSE made trivial.

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, Cache};
use ksc_ir::{Callee, Expr, ExprId, Lit, Pat, Prim, Type, Var};
use rustc_hash::FxHashMap;

use crate::globals::Globals;

/// Eliminates common subexpressions in the term at `root`. `in_scope` are
/// the variables bound around it (a definition's parameters).
pub fn cse(b: &mut Builder, globals: &Globals, root: ExprId, in_scope: &[Var]) -> ExprId {
    term::bump_fresh(b, root);
    let mut m = Machine {
        b,
        globals,
        cache: Cache::new(),
        in_scope: FxHashMap::default(),
        scope_log: Vec::new(),
        subst: FxHashMap::default(),
        subst_log: Vec::new(),
        table: FxHashMap::default(),
        table_log: Vec::new(),
        frames: Vec::new(),
        results: Vec::new(),
        decisions: Vec::new(),
        tuples: FxHashMap::default(),
    };
    for v in in_scope {
        *m.in_scope.entry(v.clone()).or_default() += 1;
    }
    m.run(root)
}

/// One token of an expression's canonical form: variables bound inside the
/// expression become de Bruijn indices, so alpha-equal expressions have the
/// same key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Tok {
    Node(u8, u32),
    Float(u64),
    Int(i64),
    Bool(bool),
    Str(String),
    Free(Var),
    Bound(u32),
    Prim(Prim),
    Fun(ksc_ir::FunName),
    Ty(Type),
}

pub(crate) type Key = Vec<Tok>;

/// The canonical form of the tree at `e`.
fn key(body: &ksc_ir::Body, e: ExprId) -> Key {
    key_with(body, e, &|v| Tok::Free(v.clone()))
}

/// The canonical form of the tree at `e`, with its free variables written
/// as `free` says.
pub(crate) fn key_with(body: &ksc_ir::Body, e: ExprId, free: &dyn Fn(&Var) -> Tok) -> Key {
    enum Task {
        Visit(ExprId),
        Push(Vec<Var>),
        Pop(usize),
    }
    let mut out = Vec::new();
    let mut env: Vec<Var> = Vec::new();
    let mut tasks = vec![Task::Visit(e)];
    while let Some(t) = tasks.pop() {
        let x = match t {
            Task::Visit(x) => x,
            Task::Push(vs) => {
                env.extend(vs);
                continue;
            }
            Task::Pop(n) => {
                env.truncate(env.len() - n);
                continue;
            }
        };
        match &body.exprs[x] {
            Expr::Lit(l) => out.push(match l {
                Lit::Float(f) => Tok::Float(f.to_bits()),
                Lit::Integer(i) => Tok::Int(*i),
                Lit::Bool(b) => Tok::Bool(*b),
                Lit::String(s) => Tok::Str(s.clone()),
            }),
            Expr::Var(v) => out.push(match env.iter().rposition(|w| w == v) {
                Some(i) => Tok::Bound((env.len() - i) as u32),
                None => free(v),
            }),
            Expr::Dummy(t) => {
                out.push(Tok::Node(0, 0));
                out.push(Tok::Ty(t.clone()));
            }
            Expr::Call(c, a) => {
                out.push(Tok::Node(1, 0));
                out.push(match c {
                    Callee::Prim(p) => Tok::Prim(*p),
                    Callee::Fun(f) => Tok::Fun(f.clone()),
                });
                tasks.push(Task::Visit(*a));
            }
            Expr::Tuple(es) => {
                out.push(Tok::Node(2, es.len() as u32));
                tasks.extend(es.iter().rev().map(|&c| Task::Visit(c)));
            }
            Expr::Let(p, r, s) => {
                let tuple = matches!(p, Pat::Tuple(_));
                out.push(Tok::Node(3, if tuple { p.vars().len() as u32 + 1 } else { 0 }));
                let n = p.vars().len();
                tasks.extend([Task::Pop(n), Task::Visit(*s), Task::Push(p.vars().to_vec()), Task::Visit(*r)]);
            }
            Expr::If(c, t, f) => {
                out.push(Tok::Node(4, 0));
                tasks.extend([Task::Visit(*f), Task::Visit(*t), Task::Visit(*c)]);
            }
            Expr::Assert(c, s, _) => {
                out.push(Tok::Node(5, 0));
                tasks.extend([Task::Visit(*s), Task::Visit(*c)]);
            }
            Expr::Lam(v, t, s) => {
                out.push(Tok::Node(6, 0));
                out.push(Tok::Ty(t.clone()));
                tasks.extend([Task::Pop(1), Task::Visit(*s), Task::Push(vec![v.clone()])]);
            }
        }
    }
    out
}

/// What holds a recorded expression: a let's pattern.
#[derive(Clone, Debug)]
struct Holder {
    pat: Pat,
    ty: Type,
    /// Held as component `index` of the tuple of `arity` the pattern's
    /// variable is, of this type (`[fwdt g]`'s value, a component of an
    /// `if` of tuples), not by the variable itself.
    part_of: Option<(u32, u32, Type)>,
}

/// What became of a let.
enum Decision {
    /// Dropped: its variable was substituted.
    Dropped,
    /// Kept with this pattern and right side.
    Kept(Pat, ExprId),
}

/// Scope marks to return to when leaving a let body, branch or lambda.
#[derive(Clone, Copy)]
struct Frame {
    scope: usize,
    subst: usize,
    table: usize,
}

enum Task {
    Visit(ExprId),
    /// Rebuild a call (its argument tuple looked through) or a tuple.
    Rebuild(ExprId, usize),
    /// The rhs of this let is done.
    LetBind(ExprId),
    /// The body of this let is done.
    LetExit(ExprId),
    /// Enter a branch, assert body or lambda body (binding the lambda's
    /// parameter when given).
    Enter(Option<ExprId>),
    /// Leave it.
    Leave,
    If(ExprId),
    Assert(ExprId),
    Lam(ExprId),
}

struct Machine<'a, 'b, 'g> {
    b: &'a mut Builder<'b>,
    globals: &'a Globals<'g>,
    cache: Cache,
    /// Names in scope (with multiplicity).
    in_scope: FxHashMap<Var, u32>,
    scope_log: Vec<Var>,
    /// Variable ↦ variable: the last of a variable's stack is its image
    /// (a map of stacks: scanning a list of pairs per variable read and per
    /// binder was quadratic in a long let chain).
    subst: FxHashMap<Var, Vec<Var>>,
    /// The variables of `subst`'s pushes, in order, for leaving a frame.
    subst_log: Vec<Var>,
    table: FxHashMap<Key, Vec<Holder>>,
    table_log: Vec<Key>,
    frames: Vec<Frame>,
    results: Vec<ExprId>,
    decisions: Vec<Decision>,
    /// The literal tuple a variable is bound to, by the latest binder of
    /// its name (the one in scope wherever it is read: a binder of a name
    /// in scope is renamed).
    tuples: FxHashMap<Var, ExprId>,
}

impl Machine<'_, '_, '_> {
    fn run(&mut self, root: ExprId) -> ExprId {
        let mut lam_names: Vec<Var> = Vec::new();
        let mut tasks = vec![Task::Visit(root)];
        while let Some(t) = tasks.pop() {
            match t {
                Task::Visit(e) => self.visit(e, &mut tasks),
                Task::Rebuild(e, n) => {
                    let kids = self.results.split_off(self.results.len() - n);
                    let node = self.b.expr(e).clone();
                    let ty = self.b.ty(e);
                    let out = match node {
                        Expr::Call(c, arg) => match self.b.expr(arg).clone() {
                            Expr::Tuple(es) if es == kids => e,
                            Expr::Tuple(_) => {
                                let tty = self.b.ty(arg);
                                let t = self.b.body.alloc_typed(Expr::Tuple(kids), tty);
                                self.b.body.alloc_typed(Expr::Call(c, t), ty)
                            }
                            _ if kids[0] == arg => e,
                            _ => self.b.body.alloc_typed(Expr::Call(c, kids[0]), ty),
                        },
                        Expr::Tuple(es) if es == kids => e,
                        Expr::Tuple(_) => self.b.body.alloc_typed(Expr::Tuple(kids), ty),
                        _ => unreachable!("rebuild of a call or tuple"),
                    };
                    let out = self.replace(out);
                    self.results.push(out);
                }
                Task::LetBind(e) => self.let_bind(e),
                Task::LetExit(e) => {
                    let body = self.results.pop().expect("let body");
                    self.leave();
                    let out = match self.decisions.pop().expect("decision") {
                        Decision::Dropped => body,
                        Decision::Kept(p, r) => match self.b.expr(e).clone() {
                            Expr::Let(p0, r0, b0) if p0 == p && r0 == r && b0 == body => e,
                            _ => {
                                let ty = self.b.ty(e);
                                self.b.body.alloc_typed(Expr::Let(p, r, body), ty)
                            }
                        },
                    };
                    self.results.push(out);
                }
                Task::Enter(lam) => {
                    self.enter();
                    if let Some(l) = lam {
                        let Expr::Lam(v, _, _) = self.b.expr(l).clone() else { unreachable!("lam") };
                        let name = self.bind_name(&v);
                        lam_names.push(name);
                    }
                }
                Task::Leave => self.leave(),
                Task::If(e) => {
                    let f = self.results.pop().expect("else");
                    let t = self.results.pop().expect("then");
                    let c = self.results.pop().expect("cond");
                    let out = match self.b.expr(e).clone() {
                        Expr::If(c0, t0, f0) if (c0, t0, f0) == (c, t, f) => e,
                        _ => {
                            let ty = self.b.ty(e);
                            self.b.body.alloc_typed(Expr::If(c, t, f), ty)
                        }
                    };
                    let out = self.replace(out);
                    self.results.push(out);
                }
                Task::Assert(e) => {
                    let body = self.results.pop().expect("assert body");
                    let c = self.results.pop().expect("assert cond");
                    let out = match self.b.expr(e).clone() {
                        Expr::Assert(c0, b0, _) if (c0, b0) == (c, body) => e,
                        Expr::Assert(_, _, from) => {
                            let ty = self.b.ty(e);
                            self.b.body.alloc_typed(Expr::Assert(c, body, from), ty)
                        }
                        _ => unreachable!("an assert"),
                    };
                    self.results.push(out);
                }
                Task::Lam(e) => {
                    let body = self.results.pop().expect("lambda body");
                    let name = lam_names.pop().expect("lambda name");
                    let Expr::Lam(v, t, b0) = self.b.expr(e).clone() else { unreachable!("lam") };
                    let out = if v == name && b0 == body { e } else { self.b.lam(&name, t, body) };
                    self.results.push(out);
                }
            }
        }
        self.results.pop().expect("result")
    }

    fn visit(&mut self, e: ExprId, tasks: &mut Vec<Task>) {
        match self.b.expr(e).clone() {
            Expr::Var(v) => {
                let out = match self.subst.get(&v).and_then(|s| s.last()) {
                    Some(y) if *y != v => {
                        let y = y.clone();
                        let ty = self.b.ty(e);
                        self.b.var(&y, ty)
                    }
                    _ => e,
                };
                self.results.push(out);
            }
            Expr::Lit(_) | Expr::Dummy(_) => self.results.push(e),
            Expr::Call(_, arg) => {
                let comps = match self.b.expr(arg) {
                    Expr::Tuple(es) => es.clone(),
                    _ => vec![arg],
                };
                tasks.push(Task::Rebuild(e, comps.len()));
                tasks.extend(comps.into_iter().rev().map(Task::Visit));
            }
            Expr::Tuple(es) => {
                tasks.push(Task::Rebuild(e, es.len()));
                tasks.extend(es.into_iter().rev().map(Task::Visit));
            }
            Expr::Let(_, r, s) => {
                tasks.extend([Task::LetExit(e), Task::Visit(s), Task::LetBind(e), Task::Visit(r)]);
            }
            Expr::If(c, t, f) => {
                tasks.extend([
                    Task::If(e),
                    Task::Leave,
                    Task::Visit(f),
                    Task::Enter(None),
                    Task::Leave,
                    Task::Visit(t),
                    Task::Enter(None),
                    Task::Visit(c),
                ]);
            }
            Expr::Assert(c, s, _) => {
                tasks.extend([Task::Assert(e), Task::Leave, Task::Visit(s), Task::Enter(None), Task::Visit(c)]);
            }
            Expr::Lam(_, _, s) => {
                tasks.extend([Task::Lam(e), Task::Leave, Task::Visit(s), Task::Enter(Some(e))]);
            }
        }
    }

    /// The let's rhs is done: drop it for a variable, else bind (renaming
    /// shadowing binders) and record the rhs.
    fn let_bind(&mut self, e: ExprId) {
        let mut r = self.results.pop().expect("let rhs");
        let Expr::Let(p, _, _) = self.b.expr(e).clone() else { unreachable!("let") };
        self.enter();
        // `let x = e` where a tuple pattern holds e: x is the literal tuple
        // of its variables (a let's right side, never a call's argument).
        if matches!(p, Pat::Var(_)) && !term::is_atomic(self.b.body, r) && self.pure(r) {
            let ty = self.b.ty(r);
            if let (Some(Pat::Tuple(vs)), Type::Tuple(ts)) = (self.held(&key(self.b.body, r), true, &ty), &ty) {
                let comps = vs.iter().zip(ts).map(|(v, t)| self.b.var(v, t.clone())).collect();
                r = self.b.tuple(comps);
            }
        }
        if let (Pat::Var(x), Expr::Var(y)) = (&p, self.b.expr(r)) {
            let y = y.clone();
            self.substitute(x.clone(), y);
            self.decisions.push(Decision::Dropped);
            return;
        }
        let names: Vec<Var> = p.vars().iter().map(|v| self.bind_name(v)).collect();
        let pat = match p {
            Pat::Var(_) => Pat::Var(names[0].clone()),
            Pat::Tuple(_) => Pat::Tuple(names.clone()),
        };
        if let (Pat::Var(x), Expr::Tuple(_)) = (&pat, self.b.expr(r)) {
            self.tuples.insert(x.clone(), r);
        }
        if self.pure(r) {
            self.record_value_of_pair(&pat, r);
            self.record_parts_of_if(&pat, r);
        }
        // A tuple pattern of t (a variable or an expression without
        // effect): its components are `get$c$n t`, read from a let that
        // holds one already, else recorded; and of an expression a tuple
        // pattern already holds, its variables are those of the first
        // (tuple holders only serve this: see below).
        if let (Pat::Tuple(_), Type::Tuple(ts)) = (&pat, self.b.ty(r)) {
            let atomic = term::is_atomic(self.b.body, r);
            if atomic || self.pure(r) {
                let of = key(self.b.body, r);
                let n = names.len() as u32;
                for (c, (orig, name)) in p.vars().iter().zip(&names).enumerate() {
                    // The key of `get$c$n t` (as `key` makes it), without
                    // allocating the term.
                    let mut k = vec![Tok::Node(1, 0), Tok::Prim(Prim::Get { index: c as u32 + 1, arity: n })];
                    k.extend(of.iter().cloned());
                    match self.held(&k, false, &ts[c]) {
                        Some(Pat::Var(h)) => self.substitute((*orig).clone(), h),
                        _ => self.record(k, Pat::Var(name.clone()), ts[c].clone()),
                    }
                }
                if !atomic {
                    let ty = Type::Tuple(ts);
                    match self.held(&of, true, &ty) {
                        Some(Pat::Tuple(hs)) => {
                            for (orig, h) in p.vars().iter().zip(hs) {
                                self.substitute(orig.clone(), h);
                            }
                        }
                        _ => self.record(of, pat.clone(), ty),
                    }
                }
            }
        }
        // Only variables hold expressions: a tuple of a pattern's variables
        // put in place of an expression could land where a literal tuple
        // means several arguments (`print`).
        if matches!(pat, Pat::Var(_))
            && !term::is_atomic(self.b.body, r)
            && !matches!(self.b.expr(r), Expr::Lam(..))
            && self.pure(r)
        {
            let k = key(self.b.body, r);
            let ty = self.b.ty(r);
            self.record(k, pat.clone(), ty);
        }
        self.decisions.push(Decision::Kept(pat, r));
    }

    /// Binds `v` in the current frame: renamed to a fresh name if a binder
    /// of that name is already in scope.
    fn bind_name(&mut self, v: &Var) -> Var {
        let name = if self.in_scope.get(v).copied().unwrap_or(0) > 0 {
            let fresh = self.b.fresh_name(&term::hint_of(v));
            self.substitute(v.clone(), fresh.clone());
            fresh
        } else {
            // A binder shadows any substitution of its name.
            if self.subst.get(v).is_some_and(|s| !s.is_empty()) {
                self.substitute(v.clone(), v.clone());
            }
            v.clone()
        };
        *self.in_scope.entry(name.clone()).or_default() += 1;
        self.scope_log.push(name.clone());
        self.tuples.remove(&name);
        name
    }

    /// For `pat = [fwdt g] (a, da)` (without effect), records `g a` as
    /// held by `get$1$2` of the pattern's variable, or by the first variable
    /// of a tuple pattern.
    fn record_value_of_pair(&mut self, pat: &Pat, r: ExprId) {
        let ty = self.b.ty(r);
        let Expr::Call(Callee::Fun(h), arg) = self.b.expr(r) else { return };
        let (Some((ksc_ir::Derivation::FwdT, g)), Expr::Tuple(xs), Type::Tuple(ts)) =
            (h.inner(), self.b.expr(*arg), &ty)
        else {
            return;
        };
        let ([a, _], [value_ty, _]) = (&xs[..], &ts[..]) else { return };
        // The arguments a call `g a` may have: `a`, and the literal tuple
        // `a` is bound to.
        let mut args = vec![*a];
        if let Expr::Var(x) = self.b.expr(*a) {
            args.extend(self.tuples.get(x).copied());
        }
        let holder = match pat {
            Pat::Var(_) => Holder { pat: pat.clone(), ty: value_ty.clone(), part_of: Some((1, 2, ty.clone())) },
            Pat::Tuple(vs) => Holder { pat: Pat::Var(vs[0].clone()), ty: value_ty.clone(), part_of: None },
        };
        for a in args {
            // The key of `g a` (as `key` makes it), without allocating the term.
            let mut k = vec![Tok::Node(1, 0), Tok::Fun(g.clone())];
            k.extend(key(self.b.body, a));
            self.table.entry(k.clone()).or_default().push(holder.clone());
            self.table_log.push(k);
        }
    }

    /// For `x = if c (tuple a1 .. an) (tuple b1 .. bn)` (without effect),
    /// records each `if c ai bi` as held by `get$i$n x`: forward mode's
    /// (value, tangent) pair of an `if` gives the value a recursive call's
    /// `[fwdt g]` is given, and the loop of values of a fused loop computes
    /// `g` of the `if` itself (tree recursion in a loop computed each
    /// level's subtree again: n log n).
    fn record_parts_of_if(&mut self, pat: &Pat, r: ExprId) {
        let Pat::Var(_) = pat else { return };
        let Expr::If(c, t, f) = self.b.expr(r).clone() else { return };
        let (Expr::Tuple(ts), Expr::Tuple(fs)) = (self.b.expr(t).clone(), self.b.expr(f).clone()) else { return };
        let ty = self.b.ty(r);
        let Type::Tuple(tys) = &ty else { return };
        if ts.len() != fs.len() || ts.len() != tys.len() {
            return;
        }
        let n = ts.len() as u32;
        for (j, ((&a, &bj), cty)) in ts.iter().zip(&fs).zip(tys).enumerate() {
            let part = self.b.body.alloc_typed(Expr::If(c, a, bj), cty.clone());
            let k = key(self.b.body, part);
            let holder = Holder { pat: pat.clone(), ty: cty.clone(), part_of: Some((j as u32 + 1, n, ty.clone())) };
            self.table.entry(k.clone()).or_default().push(holder);
            self.table_log.push(k);
        }
    }

    fn pure(&mut self, e: ExprId) -> bool {
        !self.cache.has_effect(self.b.body, self.globals, e)
    }

    /// `e` itself, or the holder of an alpha-equal expression recorded in
    /// scope (for a non-atomic `e` without effect).
    fn replace(&mut self, e: ExprId) -> ExprId {
        if self.table.is_empty() || term::is_atomic(self.b.body, e) || !self.pure(e) {
            return e;
        }
        let k = key(self.b.body, e);
        let ty = self.b.ty(e);
        match self.held(&k, false, &ty) {
            Some(Pat::Var(v)) => self.b.var(&v, ty),
            _ => match self.table.get(&k).and_then(|hs| hs.iter().rev().find(|h| h.part_of.is_some() && h.ty == ty)) {
                Some(Holder { pat: Pat::Var(p), part_of: Some((index, arity, pair_ty)), .. }) => {
                    let (p, index, arity, pair_ty) = (p.clone(), *index, *arity, pair_ty.clone());
                    let pair = self.b.var(&p, pair_ty);
                    let value = self.b.prim(Prim::Get { index, arity }, vec![pair]);
                    // A let that holds the projection already holds it.
                    match self.held(&key(self.b.body, value), false, &ty) {
                        Some(Pat::Var(v)) => self.b.var(&v, ty),
                        _ => value,
                    }
                }
                _ => e,
            },
        }
    }

    /// The pattern of the innermost let in scope holding an expression of
    /// key `k` and type `ty`: a tuple pattern (`tuple`), else a variable.
    fn held(&self, k: &Key, tuple: bool, ty: &Type) -> Option<Pat> {
        let hs = self.table.get(k)?;
        hs.iter()
            .rev()
            .find(|h| h.part_of.is_none() && matches!(h.pat, Pat::Tuple(_)) == tuple && &h.ty == ty)
            .map(|h| h.pat.clone())
    }

    /// Records that `pat` (of type `ty`) holds the expression of key `k`,
    /// until the current frame is left.
    fn record(&mut self, k: Key, pat: Pat, ty: Type) {
        self.table.entry(k.clone()).or_default().push(Holder { pat, ty, part_of: None });
        self.table_log.push(k);
    }

    /// Substitutes `y` for `x` until the current frame is left.
    fn substitute(&mut self, x: Var, y: Var) {
        self.subst.entry(x.clone()).or_default().push(y);
        self.subst_log.push(x);
    }

    fn enter(&mut self) {
        self.frames.push(Frame {
            scope: self.scope_log.len(),
            subst: self.subst_log.len(),
            table: self.table_log.len(),
        });
    }

    fn leave(&mut self) {
        let f = self.frames.pop().expect("frame");
        for v in self.scope_log.drain(f.scope..) {
            if let Some(n) = self.in_scope.get_mut(&v) {
                *n -= 1;
            }
        }
        for x in self.subst_log.drain(f.subst..).rev() {
            if let Some(s) = self.subst.get_mut(&x) {
                s.pop();
                if s.is_empty() {
                    self.subst.remove(&x);
                }
            }
        }
        for k in self.table_log.drain(f.table..) {
            if let Some(hs) = self.table.get_mut(&k) {
                hs.pop();
                if hs.is_empty() {
                    self.table.remove(&k);
                }
            }
        }
    }
}
