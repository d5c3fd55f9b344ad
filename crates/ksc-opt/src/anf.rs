//! A-normal form (knossos-reference.md 6.5).
//!
//! Every argument component of a call and every component of a tuple that
//! is not trivial (a variable, literal, `$dummy` or `()`) is let-bound to a
//! fresh `ksc$t<n>`, in evaluation order, so every intermediate value has a
//! name. A call keeps its literal argument tuple (the argument-tuple
//! invariant). A lambda stays with its primitive (`build n (lam ..)`), its
//! body put in A-normal form by itself; so are `if` branches and the body of
//! `assert`: bindings never float out of them, which would change how often
//! they run. Conditions of `if` and `assert` are left as they are, as the
//! original did. The argument of `$inline` stays a call.
//!
//! Lets inside a let's right side or inside an argument float out to the
//! enclosing block. A floated binder keeps its name when that name is bound
//! nowhere else in the body (then nothing can refer to another binding of
//! it); otherwise it is renamed to a fresh `ksc$` name.
//!
//! The pass is iterative: bodies nested thousands deep are fine.

use ksc_ir::builder::Builder;
use ksc_ir::term::{self, Cache};
use ksc_ir::{Callee, Expr, ExprId, Pat, Prim, Var};
use rustc_hash::FxHashMap;

/// Puts the term at `root` in A-normal form. `in_scope` are the variables
/// bound around it (a definition's parameters).
pub fn anf(b: &mut Builder, root: ExprId, in_scope: &[Var]) -> ExprId {
    term::bump_fresh(b, root);
    let mut binders: FxHashMap<Var, u32> = FxHashMap::default();
    for v in in_scope {
        *binders.entry(v.clone()).or_default() += 1;
    }
    let mut stack = vec![root];
    while let Some(x) = stack.pop() {
        let node = &b.body.exprs[x];
        match node {
            Expr::Let(p, _, _) => p.vars().iter().for_each(|v| *binders.entry(v.clone()).or_default() += 1),
            Expr::Lam(v, _, _) => *binders.entry(v.clone()).or_default() += 1,
            _ => {}
        }
        stack.extend(term::children(node));
    }
    let mut m = Machine { b, binders, cache: Cache::new(), blocks: Vec::new(), results: Vec::new() };
    m.run(root)
}

enum Task {
    /// Evaluate an expression into the current block; `tail` when it is the
    /// block's result (its lets then do not move).
    Eval(ExprId, bool),
    /// Evaluate an expression as a block of its own.
    Block(ExprId),
    EndBlock,
    /// The rhs of this let is done: bind it, go on with the body.
    LetBind(ExprId, bool),
    /// Name the last result unless it is trivial.
    Atomize,
    /// Rebuild a call or tuple from its last `n` results.
    Rebuild(ExprId, usize),
    /// Rebuild a lambda from its body's result.
    Lam(ExprId),
    /// Rebuild an `if` from its branches' results.
    If(ExprId),
    /// Rebuild an `assert` from its body's result.
    Assert(ExprId),
}

struct Machine<'a, 'b> {
    b: &'a mut Builder<'b>,
    binders: FxHashMap<Var, u32>,
    cache: Cache,
    blocks: Vec<Vec<(Pat, ExprId)>>,
    results: Vec<ExprId>,
}

impl Machine<'_, '_> {
    fn run(&mut self, root: ExprId) -> ExprId {
        let mut tasks = vec![Task::Block(root)];
        while let Some(t) = tasks.pop() {
            match t {
                Task::Block(e) => {
                    self.blocks.push(Vec::new());
                    tasks.push(Task::EndBlock);
                    tasks.push(Task::Eval(e, true));
                }
                Task::EndBlock => {
                    let mut r = self.results.pop().expect("block result");
                    let binds = self.blocks.pop().expect("block");
                    for (p, rhs) in binds.into_iter().rev() {
                        let ty = self.b.ty(r);
                        r = self.b.body.alloc_typed(Expr::Let(p, rhs, r), ty);
                    }
                    self.results.push(r);
                }
                Task::Eval(e, tail) => self.eval(e, tail, &mut tasks),
                Task::LetBind(e, tail) => {
                    let rhs = self.results.pop().expect("let rhs");
                    let Expr::Let(p, _, body) = self.b.expr(e).clone() else { unreachable!("let") };
                    let (p, body) = if tail { (p, body) } else { self.float_binder(p, body) };
                    self.blocks.last_mut().expect("block").push((p, rhs));
                    tasks.push(Task::Eval(body, tail));
                }
                Task::Atomize => {
                    let v = self.results.pop().expect("component");
                    if trivial(self.b, v) {
                        self.results.push(v);
                    } else {
                        let name = self.b.fresh_name("t");
                        let ty = self.b.ty(v);
                        let var = self.b.var(&name, ty);
                        self.blocks.last_mut().expect("block").push((Pat::Var(name), v));
                        self.results.push(var);
                    }
                }
                Task::Rebuild(e, n) => {
                    let kids = self.results.split_off(self.results.len() - n);
                    let node = self.b.expr(e).clone();
                    let ty = self.b.ty(e);
                    let out = match node {
                        Expr::Call(c, arg) => match self.b.expr(arg).clone() {
                            Expr::Tuple(es) if es != kids => {
                                let tty = self.b.ty(arg);
                                let t = self.b.body.alloc_typed(Expr::Tuple(kids), tty);
                                self.b.body.alloc_typed(Expr::Call(c, t), ty)
                            }
                            Expr::Tuple(_) => e,
                            _ if kids[0] == arg => e,
                            _ => self.b.body.alloc_typed(Expr::Call(c, kids[0]), ty),
                        },
                        Expr::Tuple(es) if es == kids => e,
                        Expr::Tuple(_) => self.b.body.alloc_typed(Expr::Tuple(kids), ty),
                        _ => unreachable!("rebuild of a call or tuple"),
                    };
                    self.results.push(out);
                }
                Task::Lam(e) => {
                    let body = self.results.pop().expect("lambda body");
                    let Expr::Lam(v, t, old) = self.b.expr(e).clone() else { unreachable!("lam") };
                    let out = if body == old { e } else { self.b.lam(&v, t, body) };
                    self.results.push(out);
                }
                Task::If(e) => {
                    let f = self.results.pop().expect("else");
                    let t = self.results.pop().expect("then");
                    let Expr::If(c, t0, f0) = self.b.expr(e).clone() else { unreachable!("if") };
                    let out = if (t, f) == (t0, f0) { e } else { self.alloc_like(e, Expr::If(c, t, f)) };
                    self.results.push(out);
                }
                Task::Assert(e) => {
                    let body = self.results.pop().expect("assert body");
                    let Expr::Assert(c, b0, from) = self.b.expr(e).clone() else { unreachable!("assert") };
                    let out = if body == b0 { e } else { self.alloc_like(e, Expr::Assert(c, body, from)) };
                    self.results.push(out);
                }
            }
        }
        self.results.pop().expect("result")
    }

    fn alloc_like(&mut self, like: ExprId, e: Expr) -> ExprId {
        let ty = self.b.ty(like);
        self.b.body.alloc_typed(e, ty)
    }

    fn eval(&mut self, e: ExprId, tail: bool, tasks: &mut Vec<Task>) {
        match self.b.expr(e).clone() {
            Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => self.results.push(e),
            Expr::Let(_, r, _) => {
                tasks.push(Task::LetBind(e, tail));
                tasks.push(Task::Eval(r, false));
            }
            Expr::If(_, t, f) => {
                tasks.push(Task::If(e));
                tasks.push(Task::Block(f));
                tasks.push(Task::Block(t));
            }
            Expr::Assert(_, body, _) => {
                tasks.push(Task::Assert(e));
                tasks.push(Task::Block(body));
            }
            Expr::Lam(_, _, body) => {
                tasks.push(Task::Lam(e));
                tasks.push(Task::Block(body));
            }
            Expr::Call(Callee::Prim(Prim::Inline), arg) => {
                // `$inline (f ..)`: the inner call stays, its arguments are named.
                tasks.push(Task::Rebuild(e, 1));
                tasks.push(Task::Eval(arg, false));
            }
            Expr::Call(_, arg) => {
                let comps = match self.b.expr(arg) {
                    Expr::Tuple(es) => es.clone(),
                    _ => vec![arg],
                };
                self.components(e, comps, tasks);
            }
            Expr::Tuple(es) => self.components(e, es, tasks),
        }
    }

    /// Evaluates components in order, naming each non-trivial one; lambdas stay.
    fn components(&mut self, e: ExprId, comps: Vec<ExprId>, tasks: &mut Vec<Task>) {
        tasks.push(Task::Rebuild(e, comps.len()));
        for &c in comps.iter().rev() {
            if matches!(self.b.expr(c), Expr::Lam(..)) {
                tasks.push(Task::Eval(c, false));
            } else {
                tasks.push(Task::Atomize);
                tasks.push(Task::Eval(c, false));
            }
        }
    }

    /// A let binder about to float out of a nested position: keeps its name
    /// if the name is bound only once in the whole body, else renamed.
    fn float_binder(&mut self, p: Pat, body: ExprId) -> (Pat, ExprId) {
        let mut renames: Vec<(Var, Var)> = Vec::new();
        for v in p.vars() {
            if self.binders.get(v).copied().unwrap_or(0) > 1 {
                let fresh = self.b.fresh_name(&term::hint_of(v));
                renames.push((v.clone(), fresh));
            }
        }
        if renames.is_empty() {
            return (p, body);
        }
        let rn = |v: &Var| renames.iter().find(|(a, _)| a == v).map_or(v.clone(), |(_, b)| b.clone());
        let p2 = match &p {
            Pat::Var(v) => Pat::Var(rn(v)),
            Pat::Tuple(vs) => Pat::Tuple(vs.iter().map(rn).collect()),
        };
        let body = term::rename(self.b, &mut self.cache, body, &renames);
        (p2, body)
    }
}

/// Needs no name: a variable, literal, `$dummy` or `()`.
fn trivial(b: &Builder, e: ExprId) -> bool {
    match b.expr(e) {
        Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => true,
        Expr::Tuple(es) => es.is_empty(),
        _ => false,
    }
}
