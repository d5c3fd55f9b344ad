//! Lambdas as values, removed before lowering (issue 36) and before
//! derivation ([`specialise_for_derivation`], seed 004's higher-order
//! functions).
//!
//! The loop IR has no closures: lowering compiles a lambda only where a
//! primitive applies it (the lambda argument of `build`, `sumbuild`,
//! `fold`, ...). The interpreter runs a lambda anywhere, so before lowering
//! [`specialise`] rewrites every definition that holds a lambda elsewhere:
//!
//! - a `let` of a lambda (or of a tuple, an `if` or a `let` whose value
//!   holds one) is substituted into its body, the parts without lambdas
//!   bound to fresh variables first, in order;
//! - a projection of a tuple of lambdas picks the component, through `if`;
//! - a lambda chosen by an `if` where a primitive applies it becomes one
//!   lambda whose body is the `if` of the branches' bodies (the condition
//!   evaluated once, before);
//! - a call of a function with parameters holding lambdas (a lambda, or a
//!   tuple with one) calls a copy of it with the lambdas written in
//!   (`g$lam1`, one per function and lambdas, the lambdas' free variables
//!   and the tuples' other parts its parameters instead), so a recursive
//!   call passing its lambda on calls the same copy;
//! - a call of a non-recursive function returning a lambda is inlined;
//! - `print` of a lambda prints `<lambda>`, as the interpreter does;
//! - an application `$apply f x` of a lambda so written in becomes a `let`
//!   of its parameter to x.
//!
//! What is left (a tensor of lambdas, a lambda returned by a recursive
//! function, a lambda variable that no call binds) is a [`LambdaError`] at
//! the expression, which the driver reports before writing any C.

use rustc_hash::FxHashMap;

use crate::builder::Builder;
use crate::{term, Body, Callee, Def, Expr, ExprId, FunName, Lit, Param, Pat, Prim, Type};

/// At most this many copies of one function for its lambda arguments (a
/// recursion passing a bigger lambda at each call would make copies
/// without end).
const MAX_COPIES: usize = 64;

/// For derivation, a call of a (non-recursive) function taking lambdas is
/// inlined when its body with the lambdas written in at each use has at
/// most this many nodes, else it calls a copy (so nested lambdas applying
/// their parameter twice stop doubling at this size).
const INLINE_FOR_DERIVATION: usize = 200;

/// The most nodes a definition's rewrite may make.
const MAX_REWRITE: usize = 1_000_000;

/// The largest lambda arguments (in nodes, all of one call's together) a
/// copy is made for.
const MAX_LAMBDA_SIZE: usize = 4096;

/// What is not supported when copies of `def` would not end.
fn endless_copies(def: &Def) -> String {
    format!(
        "this call of `{}`: its copies for its lambda arguments do not end (a recursive call passing a bigger \
         lambda each time?)",
        def.name.short()
    )
}

/// At most this deep an inlining of functions returning lambdas (or, for
/// derivation, taking them).
const MAX_INLINE_DEPTH: usize = 32;

/// A lambda native code cannot hold, at an expression of `fun`'s body.
#[derive(Clone, Debug, PartialEq)]
pub struct LambdaError {
    pub fun: FunName,
    pub expr: ExprId,
    pub message: String,
}

/// What [`specialise`] makes.
#[derive(Clone, Debug, Default)]
pub struct Specialised {
    /// Definitions rewritten (with their own names) and copies made for
    /// lambda arguments, to lower instead of and besides the program's.
    pub defs: Vec<Def>,
    /// Each copy's name and the function it copies (its expressions keep
    /// their ids, so a copy's sites are located in the original).
    pub copies: Vec<(FunName, FunName)>,
    /// The nodes of a copy that are its lambda arguments' (copy, node),
    /// and where each was written (caller, node): an error in a lambda is
    /// located in its caller, as the interpreter locates it.
    pub moved: Vec<(FunName, ExprId, FunName, ExprId)>,
    pub errors: Vec<LambdaError>,
}

/// The definitions lowering reads: those of `defs`, each replaced by its
/// rewrite in `s` if it has one, then the copies `s` made.
pub fn lambda_free<'d>(defs: &[&'d Def], s: &'d [Def], copies: &[(FunName, FunName)]) -> Vec<&'d Def> {
    let mut out: Vec<&Def> = defs.iter().map(|d| s.iter().find(|r| r.name == d.name).unwrap_or(d)).collect();
    out.extend(s.iter().filter(|r| copies.iter().any(|(c, _)| *c == r.name)));
    out
}

/// Does the signature of `d` hold a lambda (so it cannot be lowered by
/// itself, nor called from C)?
pub fn signature_has_lam(d: &Def) -> bool {
    d.params.iter().any(|p| p.ty.holds_lam()) || d.ret_ty.holds_lam()
}

/// The nodes of `d`'s body that hold a lambda where lowering cannot take
/// it: not a lambda written as a component of a primitive's argument.
fn misplaced(body: &Body, root: ExprId) -> Vec<ExprId> {
    let mut out = Vec::new();
    // (node, is it a component of a primitive's argument)
    let mut stack = vec![(root, false)];
    while let Some((x, in_prim)) = stack.pop() {
        let e = &body.exprs[x];
        let allowed = in_prim && matches!(e, Expr::Lam(..));
        if body.ty(x).holds_lam() && !allowed {
            out.push(x);
            continue;
        }
        match e {
            Expr::Call(Callee::Prim(p), arg) if !matches!(p, Prim::Print | Prim::Get { .. }) => {
                let (comps, _) = term::call_components(body, *arg);
                if comps.len() == 1 && comps[0] == *arg {
                    stack.push((*arg, true));
                } else {
                    stack.extend(comps.into_iter().map(|c| (c, true)));
                }
            }
            _ => stack.extend(term::children(e).into_iter().map(|c| (c, false))),
        }
    }
    out
}

/// Rewrites the definitions of `defs` that hold lambdas where lowering
/// cannot take them (see the module doc). Definitions whose signature
/// holds a lambda are not rewritten: calls use copies of them.
pub fn specialise(defs: &[&Def]) -> Specialised {
    let mut by_name: FxHashMap<&FunName, &Def> = FxHashMap::default();
    for d in defs {
        by_name.entry(&d.name).or_insert(*d);
    }
    let mut s = State::new(by_name, false);
    let mut queue: Vec<Def> = Vec::new();
    for d in defs {
        if !signature_has_lam(d) && !misplaced(&d.body, d.root).is_empty() {
            queue.push((*d).clone());
        }
    }
    queue.reverse();
    while let Some(d) = queue.pop() {
        let d = s.process(d, &mut queue);
        s.out.defs.push(d);
    }
    s.out
}

/// `d` as derivation reads it (seed 004's higher-order functions,
/// defunctionalised): the rewrite [`specialise`] makes for native code,
/// every lambda written in where it is applied (`$apply` becomes a `let`)
/// or given to a primitive; a call of a non-recursive function of `defs`
/// whose parameters hold lambdas inlined when the result is small
/// ([`INLINE_FOR_DERIVATION`]), any other a call of a copy with the
/// lambdas written in. The copies (rewritten the same way) are returned
/// with `d`, to be derived with it, each once (inlining without a bound
/// made lambdas that apply their parameter twice, nested, double at each
/// level). Their names are their lambdas' (`g$lam$` and a hash), so the
/// copies of different derivations agree. A lambda left where derivation
/// cannot take it is the error.
pub fn specialise_for_derivation(d: &Def, defs: &[&Def]) -> Result<(Def, Vec<Def>), LambdaError> {
    let mut by_name: FxHashMap<&FunName, &Def> = FxHashMap::default();
    for d in defs {
        by_name.entry(&d.name).or_insert(*d);
    }
    let mut s = State::new(by_name, true);
    let mut queue = Vec::new();
    let out = s.process(d.clone(), &mut queue);
    let mut copies = Vec::new();
    queue.reverse();
    while let Some(c) = queue.pop() {
        let c = s.process(c, &mut queue);
        copies.push(c);
    }
    match s.out.errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok((out, copies)),
    }
}

/// Does `d` hold a lambda that derivation cannot take as it is (a call of
/// a function with lambda parameters, an application, a `let` of a
/// lambda): should it be read through [`specialise_for_derivation`]?
pub fn needs_specialising_for_derivation(d: &Def) -> bool {
    !signature_has_lam(d) && !misplaced(&d.body, d.root).is_empty()
}

struct State<'d> {
    by_name: FxHashMap<&'d FunName, &'d Def>,
    /// For derivation: small calls of functions taking lambdas inlined,
    /// copies named by their lambdas, errors worded for derivatives.
    for_derivation: bool,
    /// (function, its lambda arguments printed with their free variables
    /// renamed, and those variables' types) to the copy made for them.
    memo: FxHashMap<(FunName, String), FunName>,
    /// Copies made of each function.
    copies: FxHashMap<FunName, usize>,
    /// Each copy's lambda arguments as copied in (their nodes are in
    /// `out.moved`).
    lam_roots: Vec<(FunName, ExprId)>,
    out: Specialised,
}

/// The definition being rewritten.
struct Cx<'b> {
    b: Builder<'b>,
    cache: term::Cache,
    fun: FunName,
    depth: usize,
    /// Copies made while rewriting it, to rewrite next.
    queue: Vec<Def>,
    /// The node each rebuilt node stands for (so an error is located at
    /// the expression as written).
    was: FxHashMap<ExprId, ExprId>,
    /// The rewrite outgrew [`MAX_REWRITE`] (reported once).
    too_big: bool,
}

impl Cx<'_> {
    fn alloc(&mut self, e: Expr, ty: Type) -> ExprId {
        self.b.body.alloc_typed(e, ty)
    }
}

impl<'d> State<'d> {
    fn new(by_name: FxHashMap<&'d FunName, &'d Def>, for_derivation: bool) -> State<'d> {
        State {
            by_name,
            for_derivation,
            memo: FxHashMap::default(),
            copies: FxHashMap::default(),
            lam_roots: Vec::new(),
            out: Specialised::default(),
        }
    }

    /// Reports `what` (a phrase: "this call of `g`: ...") as not
    /// supported, by native code (which the interpreter can replace) or by
    /// derivatives.
    fn error(&mut self, cx: &Cx, expr: ExprId, what: String) {
        let message = if self.for_derivation {
            format!("derivatives do not support {what}")
        } else {
            format!("native code does not support {what}; `ksc run --interp` runs it")
        };
        self.out.errors.push(LambdaError { fun: cx.fun.clone(), expr, message });
    }

    fn process(&mut self, mut d: Def, queue: &mut Vec<Def>) -> Def {
        let mut fresh = term::fresh_floor(&d.body, d.root, d.params.iter().map(|p| &p.name));
        let name = d.name.clone();
        let root = {
            let b = Builder::new(&mut d.body, &mut fresh);
            let mut cx = Cx {
                b,
                cache: term::Cache::new(),
                fun: name,
                depth: 0,
                queue: Vec::new(),
                was: FxHashMap::default(),
                too_big: false,
            };
            let root = self.go(&mut cx, d.root);
            let left = misplaced(cx.b.body, root);
            let reported = self.out.errors.iter().any(|e| e.fun == cx.fun);
            if let (Some(&x), false) = (left.first(), reported) {
                let message = self.misplaced_message(cx.b.body, x);
                let mut at = x;
                while let Some(&y) = cx.was.get(&at) {
                    at = y;
                }
                self.error(&cx, at, message);
            }
            queue.extend(cx.queue);
            let was = cx.was;
            restore_ids(&mut d.body, root, &was)
        };
        d.root = root;
        self.map_lambda_copies(&d);
        d
    }

    /// The copies of a copy's lambda arguments that the rewrite made (a
    /// lambda used twice): their nodes are where the lambda was written too.
    fn map_lambda_copies(&mut self, d: &Def) {
        let roots: Vec<ExprId> = self.lam_roots.iter().filter(|(c, _)| *c == d.name).map(|(_, l)| *l).collect();
        if roots.is_empty() {
            return;
        }
        let mut stack = vec![d.root];
        let mut pairs = Vec::new();
        while let Some(x) = stack.pop() {
            match roots.iter().find(|&&l| l != x && d.body.same_tree(x, &d.body, l)) {
                Some(&l) => pairs.push((x, l)),
                None => stack.extend(term::children(&d.body.exprs[x])),
            }
        }
        for (x, l) in pairs {
            let mut walk = vec![(x, l)];
            while let Some((x, l)) = walk.pop() {
                if let Some((_, _, caller, at)) = self.out.moved.iter().find(|(c, n, _, _)| *c == d.name && *n == l) {
                    let entry = (d.name.clone(), x, caller.clone(), *at);
                    self.out.moved.push(entry);
                }
                walk.extend(term::children(&d.body.exprs[x]).into_iter().zip(term::children(&d.body.exprs[l])));
            }
        }
    }

    fn misplaced_message(&self, body: &Body, x: ExprId) -> String {
        let ty = body.ty(x);
        let tensor = |e: ExprId| matches!(body.ty(e), Type::Tensor(..)) && body.ty(e).holds_lam();
        let read = match &body.exprs[x] {
            Expr::Call(Callee::Prim(_), arg) => {
                tensor(*arg) || term::call_components(body, *arg).0.into_iter().any(tensor)
            }
            _ => false,
        };
        if matches!(ty, Type::Tensor(..)) || read {
            return "a tensor of lambdas".to_string();
        }
        let what = match &body.exprs[x] {
            Expr::Var(v) => format!("the lambda variable `{v}`"),
            Expr::If(..) => "a lambda chosen by `if`".to_string(),
            Expr::Call(Callee::Fun(g), _) => format!("the lambda returned by `{}`", g.short()),
            _ => format!("a value of type `{ty}`"),
        };
        format!(
            "{what} here: a lambda must reach the primitive that applies it (`build`, `sumbuild`, `fold`, ...) \
             through `let`, `if`, tuples and calls"
        )
    }

    /// `e` rewritten, recursively.
    fn go(&mut self, cx: &mut Cx, e: ExprId) -> ExprId {
        // Lambdas written in where they are used are copied per use: nested
        // (a lambda applying another twice, that one applying a third
        // twice, ...) they double at each level. Stop at a size.
        if cx.b.body.exprs.len() > MAX_REWRITE {
            if !cx.too_big {
                cx.too_big = true;
                let message = "these lambdas: written in where they are applied, they grow without bound \
                               (lambdas applying lambdas, nested)"
                    .to_string();
                self.error(cx, e, message);
            }
            return e;
        }
        let out = self.go_inner(cx, e);
        if out != e {
            cx.was.entry(out).or_insert(e);
        }
        out
    }

    fn go_inner(&mut self, cx: &mut Cx, e: ExprId) -> ExprId {
        let node = cx.b.expr(e).clone();
        let ty = cx.b.ty(e);
        match node {
            Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => e,
            Expr::Lam(..) | Expr::Tuple(_) | Expr::If(..) | Expr::Assert(..) => {
                let kids = term::children(&node);
                let new: Vec<ExprId> = kids.iter().map(|&k| self.go(cx, k)).collect();
                if new[..] == kids[..] {
                    e
                } else {
                    cx.alloc(term::with_children(&node, &new), ty)
                }
            }
            Expr::Let(pat, r, body) => {
                let r2 = self.go(cx, r);
                if !cx.b.ty(r2).holds_lam() {
                    let body2 = self.go(cx, body);
                    return if (r2, body2) == (r, body) { e } else { cx.alloc(Expr::Let(pat, r2, body2), ty) };
                }
                let mut lets = Vec::new();
                let Some(v) = self.valueize(cx, r2, &mut lets) else {
                    let body2 = self.go(cx, body);
                    return cx.alloc(Expr::Let(pat, r2, body2), ty);
                };
                let map: Vec<(String, ExprId)> = match &pat {
                    Pat::Var(x) => vec![(x.clone(), v)],
                    Pat::Tuple(xs) => xs.iter().enumerate().map(|(i, x)| (x.clone(), self.select(cx, v, i))).collect(),
                };
                // The first use takes the value's own nodes (their ids, so
                // their places in the source).
                let body2 = term::substitute(&mut cx.b, &mut cx.cache, body, &map, true);
                let body3 = self.go(cx, body2);
                term::wrap(&mut cx.b, lets, body3)
            }
            Expr::Call(Callee::Fun(g), arg) => {
                let arg2 = self.go(cx, arg);
                let same = |cx: &mut Cx| {
                    if arg2 == arg {
                        e
                    } else {
                        cx.alloc(Expr::Call(Callee::Fun(g.clone()), arg2), ty.clone())
                    }
                };
                let Some(&def) = self.by_name.get(&g) else { return same(cx) };
                if def.params.iter().any(|p| p.ty.holds_lam()) {
                    // For derivation, a small enough result is inlined: the
                    // optimiser's loop rules then see the lambda's reads of
                    // its caller's vectors (a copy's reverse pass returns a
                    // dense cotangent per call).
                    let inlined = if self.for_derivation && self.inlined_size(cx, def, arg2) <= INLINE_FOR_DERIVATION {
                        self.inline(cx, e, def, arg2)
                    } else {
                        None
                    };
                    inlined.unwrap_or_else(|| self.specialise_call(cx, e, def, arg2).unwrap_or_else(|| same(cx)))
                } else if def.ret_ty.holds_lam() {
                    self.inline(cx, e, def, arg2).unwrap_or_else(|| same(cx))
                } else {
                    same(cx)
                }
            }
            Expr::Call(Callee::Prim(p), arg) => {
                let arg2 = self.go(cx, arg);
                let single = matches!(p, Prim::Get { .. }) || !matches!(cx.b.expr(arg2), Expr::Tuple(_));
                let comps = if single { vec![arg2] } else { term::call_components(cx.b.body, arg2).0 };
                if !comps.iter().any(|&c| cx.b.ty(c).holds_lam()) {
                    return if arg2 == arg { e } else { cx.alloc(Expr::Call(Callee::Prim(p), arg2), ty) };
                }
                let mut lets = Vec::new();
                let out = match p {
                    Prim::Print => {
                        let mut args = Vec::new();
                        for c in comps {
                            if cx.b.ty(c).holds_lam() {
                                match self.valueize(cx, c, &mut lets) {
                                    Some(v) => self.print_leaves(cx, v, &mut args),
                                    None => args.push(c),
                                }
                            } else {
                                args.push(c);
                            }
                        }
                        let arg = if args.len() == 1 { args[0] } else { cx.b.tuple(args) };
                        cx.alloc(Expr::Call(Callee::Prim(Prim::Print), arg), ty)
                    }
                    // `$apply f x`: the lambda written in, applied to x bound
                    // to a fresh variable.
                    Prim::Apply if comps.len() == 2 => {
                        let Type::Lam(s, _) = cx.b.ty(comps[0]) else { unreachable!("`$apply` of a lambda") };
                        let lam = self.valueize(cx, comps[0], &mut lets).and_then(|v| self.literal(cx, v));
                        let x = cx.b.fresh_name("x");
                        match lam.and_then(|l| self.apply(cx, l, &x, &s)) {
                            Some(applied) => {
                                lets.push((Pat::Var(x), comps[1]));
                                self.go(cx, applied)
                            }
                            None => cx.alloc(Expr::Call(Callee::Prim(p), arg2), ty),
                        }
                    }
                    Prim::Get { index, .. } if single => match self.valueize(cx, arg2, &mut lets) {
                        Some(v) => self.select(cx, v, index as usize - 1),
                        None => cx.alloc(Expr::Call(Callee::Prim(p), arg2), ty),
                    },
                    _ => {
                        let mut new = Vec::new();
                        for c in comps {
                            let lam = if matches!(cx.b.ty(c), Type::Lam(..)) && !matches!(cx.b.expr(c), Expr::Lam(..)) {
                                self.valueize(cx, c, &mut lets).and_then(|v| self.literal(cx, v))
                            } else {
                                None
                            };
                            new.push(lam.unwrap_or(c));
                        }
                        let arg = if single { new[0] } else { cx.b.tuple(new) };
                        cx.alloc(Expr::Call(Callee::Prim(p), arg), ty)
                    }
                };
                term::wrap(&mut cx.b, lets, out)
            }
        }
    }

    /// `e` (already rewritten) as a value whose lambdas are written out: a
    /// lambda, a variable, a literal, a tuple of values, or an `if` on a
    /// variable between values. What it computes besides is bound in
    /// `lets`, in order, to fresh names. None: not such a value.
    fn valueize(&mut self, cx: &mut Cx, e: ExprId, lets: &mut Vec<(Pat, ExprId)>) -> Option<ExprId> {
        let ty = cx.b.ty(e);
        match cx.b.expr(e).clone() {
            Expr::Lam(..) | Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => Some(e),
            _ if !ty.holds_lam() => {
                let name = cx.b.fresh_name("v");
                lets.push((Pat::Var(name.clone()), e));
                Some(cx.b.var(&name, ty))
            }
            Expr::Tuple(es) => {
                let mut new = Vec::new();
                for c in es {
                    new.push(self.valueize(cx, c, lets)?);
                }
                Some(cx.b.tuple(new))
            }
            Expr::If(c, a, b) => {
                let cv = self.valueize(cx, c, lets)?;
                let (mut la, mut lb) = (Vec::new(), Vec::new());
                let va = self.valueize(cx, a, &mut la)?;
                let vb = self.valueize(cx, b, &mut lb)?;
                if !la.is_empty() || !lb.is_empty() {
                    return None;
                }
                Some(cx.alloc(Expr::If(cv, va, vb), ty))
            }
            Expr::Assert(c, x, from) => {
                // The check first, then the value.
                let unit = cx.b.tuple(Vec::new());
                let check = cx.alloc(Expr::Assert(c, unit, from), Type::unit());
                let name = cx.b.fresh_name("checked");
                lets.push((Pat::Var(name), check));
                self.valueize(cx, x, lets)
            }
            Expr::Let(pat, r, body) => {
                // Float the binding out, its names made fresh.
                let renames: Vec<(String, String)> =
                    pat.vars().iter().map(|v| (v.clone(), cx.b.fresh_name(&term::hint_of(v)))).collect();
                let body = term::rename(&mut cx.b, &mut cx.cache, body, &renames);
                let pat = match pat {
                    Pat::Var(_) => Pat::Var(renames[0].1.clone()),
                    Pat::Tuple(_) => Pat::Tuple(renames.iter().map(|r| r.1.clone()).collect()),
                };
                lets.push((pat, r));
                let body = self.go(cx, body);
                self.valueize(cx, body, lets)
            }
            _ => None,
        }
    }

    /// The value `v` with its parts that hold no lambda (literals, and
    /// values an `if` chooses) bound to fresh variables in `lets`.
    fn leaves_to_vars(&mut self, cx: &mut Cx, v: ExprId, lets: &mut Vec<(Pat, ExprId)>) -> ExprId {
        let ty = cx.b.ty(v);
        match cx.b.expr(v).clone() {
            Expr::Var(_) | Expr::Lam(..) => v,
            Expr::Tuple(es) => {
                let new = es.into_iter().map(|c| self.leaves_to_vars(cx, c, lets)).collect();
                cx.b.tuple(new)
            }
            _ if !ty.holds_lam() => {
                let name = cx.b.fresh_name("v");
                lets.push((Pat::Var(name.clone()), v));
                cx.b.var(&name, ty)
            }
            _ => v,
        }
    }

    /// Component `i` of the tuple value `v`.
    fn select(&mut self, cx: &mut Cx, v: ExprId, i: usize) -> ExprId {
        match cx.b.expr(v).clone() {
            Expr::Tuple(es) => es[i],
            Expr::If(c, a, b) => {
                let (a, b) = (self.select(cx, a, i), self.select(cx, b, i));
                let ty = cx.b.ty(a);
                cx.alloc(Expr::If(c, a, b), ty)
            }
            _ => {
                let Type::Tuple(ts) = cx.b.ty(v) else { unreachable!("a projection of a tuple") };
                let p = Prim::Get { index: i as u32 + 1, arity: ts.len() as u32 };
                cx.alloc(Expr::Call(Callee::Prim(p), v), ts[i].clone())
            }
        }
    }

    /// The arguments `print` prints for the value `v`: its leaves, a lambda
    /// as `<lambda>`, separated by commas as the interpreter prints a tuple.
    fn print_leaves(&mut self, cx: &mut Cx, v: ExprId, out: &mut Vec<ExprId>) {
        match (cx.b.expr(v).clone(), cx.b.ty(v)) {
            (_, Type::Lam(..)) => out.push(cx.alloc(Expr::Lit(Lit::String("<lambda>".into())), Type::String)),
            (_, Type::Tuple(ts)) => {
                for i in 0..ts.len() {
                    if i > 0 {
                        out.push(cx.alloc(Expr::Lit(Lit::String(",".into())), Type::String));
                    }
                    let c = self.select(cx, v, i);
                    self.print_leaves(cx, c, out);
                }
            }
            _ => out.push(v),
        }
    }

    /// The lambda value `v` as one lambda: a lambda, or `lam x (if c (a x)
    /// (b x))` for `if c a b`.
    fn literal(&mut self, cx: &mut Cx, v: ExprId) -> Option<ExprId> {
        match cx.b.expr(v).clone() {
            Expr::Lam(..) => Some(v),
            Expr::If(..) => {
                let Type::Lam(s, _) = cx.b.ty(v) else { return None };
                let x = cx.b.fresh_name("x");
                let body = self.apply(cx, v, &x, &s)?;
                Some(cx.b.lam(&x, (*s).clone(), body))
            }
            _ => None,
        }
    }

    /// The body of the lambda value `v` applied to the variable `x`.
    fn apply(&mut self, cx: &mut Cx, v: ExprId, x: &str, s: &Type) -> Option<ExprId> {
        match cx.b.expr(v).clone() {
            Expr::Lam(p, _, body) => {
                let xv = cx.b.var(x, s.clone());
                Some(cx.b.let_(&p, xv, body))
            }
            Expr::If(c, a, b) => {
                let (a, b) = (self.apply(cx, a, x, s)?, self.apply(cx, b, x, s)?);
                let ty = cx.b.ty(a);
                Some(cx.alloc(Expr::If(c, a, b), ty))
            }
            _ => None,
        }
    }

    /// `call` of `def` (whose parameters hold lambdas) with the argument
    /// `arg`, as a call of a copy of `def` with the lambdas written in.
    fn specialise_call(&mut self, cx: &mut Cx, call: ExprId, def: &'d Def, arg: ExprId) -> Option<ExprId> {
        let comps = if def.params.len() == 1 {
            vec![arg]
        } else {
            match cx.b.expr(arg) {
                Expr::Tuple(es) if es.len() == def.params.len() => es.clone(),
                _ => return None,
            }
        };
        let mut lets = Vec::new();
        let mut kept = Vec::new();
        let mut lams = Vec::new();
        for (p, &c) in def.params.iter().zip(&comps) {
            if !p.ty.holds_lam() {
                kept.push(c);
                continue;
            }
            let lam = match self.valueize(cx, c, &mut lets) {
                Some(v) if matches!(p.ty, Type::Lam(..)) => self.literal(cx, v),
                // A tuple holding lambdas: its other parts become variables
                // (so the copy's parameters), as a lambda's free variables.
                Some(v) if matches!(p.ty, Type::Tuple(_)) => Some(self.leaves_to_vars(cx, v, &mut lets)),
                _ => None,
            };
            let Some(lam) = lam else {
                let message = format!(
                    "this argument of `{}`: a lambda passed to a function must be written as a lambda, chosen by \
                     `if` between lambdas, or in a tuple",
                    def.name.short()
                );
                self.error(cx, c, message);
                return None;
            };
            lams.push((p.name.clone(), lam));
        }
        // A recursion that passes a bigger lambda at each call makes copies
        // without end, each lambda up to twice the last (a lambda applying
        // its parameter twice): stop at a size, not only at a count.
        if lams.iter().map(|(_, l)| term::tree_size_at_most(cx.b.body, *l, MAX_LAMBDA_SIZE)).sum::<usize>()
            > MAX_LAMBDA_SIZE
        {
            self.error(cx, call, endless_copies(def));
            return None;
        }
        // The lambdas' free variables, in order, become parameters.
        let mut captured: Vec<String> = Vec::new();
        for (_, l) in &lams {
            for v in cx.cache.free_vars(cx.b.body, *l).iter() {
                if !captured.contains(v) {
                    captured.push(v.clone());
                }
            }
        }
        let mut cap_tys = Vec::new();
        for v in &captured {
            let ty = lams.iter().find_map(|(_, l)| var_type(cx.b.body, *l, v)).unwrap_or(Type::Unknown);
            if ty.holds_lam() {
                let message = format!("a lambda that uses the lambda variable `{v}`, passed to `{}`", def.name.short());
                self.error(cx, call, message);
                return None;
            }
            cap_tys.push(ty);
        }
        let cap_names: Vec<String> = (0..captured.len()).map(|i| format!("ksc$cap${i}")).collect();
        let renames: Vec<(String, String)> = captured.iter().cloned().zip(cap_names.iter().cloned()).collect();
        let renamed: Vec<(String, ExprId)> =
            lams.iter().map(|(p, l)| (p.clone(), term::rename(&mut cx.b, &mut cx.cache, *l, &renames))).collect();
        let mut key: String = renamed
            .iter()
            .map(|(p, l)| format!("{p}={}", crate::print::print_expr(cx.b.body, *l)))
            .collect::<Vec<_>>()
            .join(" ");
        for t in &cap_tys {
            key.push_str(&format!(" : {t}"));
        }
        let memo_key = (def.name.clone(), key);
        let name = match self.memo.get(&memo_key) {
            Some(n) => n.clone(),
            None => {
                let k = self.copies.entry(def.name.clone()).or_insert(0);
                *k += 1;
                if *k > MAX_COPIES {
                    self.error(cx, call, endless_copies(def));
                    return None;
                }
                let mut params: Vec<Param> = def.params.iter().filter(|p| !p.ty.holds_lam()).cloned().collect();
                // The lambdas as written (so their nodes' places are known)
                // when their free variables can name the copy's parameters.
                // For derivation, always renamed: a copy is then the same
                // definition whoever makes it (its name is its content's).
                let clash = captured.iter().any(|v| def.params.iter().any(|p| p.name == *v)) || self.for_derivation;
                let (names, lams) = if clash { (&cap_names, &renamed) } else { (&captured, &lams) };
                params.extend(names.iter().zip(&cap_tys).map(|(n, t)| Param { name: n.clone(), ty: t.clone() }));
                let base_ty = Type::of_params(params.iter().map(|p| p.ty.clone()));
                // Copies made for derivation go with the derived functions
                // of every function that reaches them: named by a hash of
                // the lambdas (the memo's key), so that equal copies have
                // one name and different ones different names.
                let base = if self.for_derivation {
                    let mut h = rustc_hash::FxHasher::default();
                    std::hash::Hash::hash(&memo_key.1, &mut h);
                    format!("{}$lam${:08x}", def.name.base, std::hash::Hasher::finish(&h) as u32)
                } else {
                    format!("{}$lam{k}", def.name.base)
                };
                let name = FunName { derivs: Vec::new(), base, base_ty: Some(base_ty) };
                // The copy keeps the original's arena, so its expressions
                // keep their ids (and their places in the source).
                let mut body = def.body.clone();
                let mut root = def.root;
                for (p, l) in lams.iter().rev() {
                    let mut moved = Vec::new();
                    let l2 = copy_mapped(&mut body, cx.b.body, *l, &mut moved);
                    for (to, from) in moved {
                        self.out.moved.push((name.clone(), to, cx.fun.clone(), from));
                    }
                    self.lam_roots.push((name.clone(), l2));
                    root = body.alloc_typed(Expr::Let(Pat::Var(p.clone()), l2, root), def.ret_ty.clone());
                }
                let copy = Def { name: name.clone(), params, ret_ty: def.ret_ty.clone(), body, root };
                self.memo.insert(memo_key, name.clone());
                self.out.copies.push((name.clone(), def.name.clone()));
                cx.queue.push(copy);
                name
            }
        };
        let mut args = kept;
        for (v, t) in captured.iter().zip(&cap_tys) {
            args.push(cx.b.var(v, t.clone()));
        }
        let ty = cx.b.ty(call);
        let new = cx.b.call(name, args, ty);
        Some(term::wrap(&mut cx.b, lets, new))
    }

    /// The nodes `def`'s body called with `arg` would have inlined, its
    /// lambda arguments written in at each use (at most a bound past
    /// [`INLINE_FOR_DERIVATION`]).
    fn inlined_size(&self, cx: &Cx, def: &Def, arg: ExprId) -> usize {
        let limit = INLINE_FOR_DERIVATION;
        let comps = match (def.params.len(), cx.b.expr(arg)) {
            (1, _) => vec![arg],
            (k, Expr::Tuple(es)) if es.len() == k => es.clone(),
            _ => return limit + 1,
        };
        let mut n = term::tree_size_at_most(&def.body, def.root, limit);
        for (p, &c) in def.params.iter().zip(&comps) {
            if !p.ty.holds_lam() {
                continue;
            }
            let uses = def.body.exprs.iter().filter(|(_, x)| matches!(x, Expr::Var(v) if *v == p.name)).count();
            n = n.saturating_add(uses.saturating_mul(term::tree_size_at_most(cx.b.body, c, limit)));
        }
        n
    }

    /// `call` of `def` (which returns a lambda) inlined: `let params = arg
    /// in body`, rewritten.
    fn inline(&mut self, cx: &mut Cx, call: ExprId, def: &'d Def, arg: ExprId) -> Option<ExprId> {
        let recursive =
            def.body.exprs.iter().any(|(_, e)| matches!(e, Expr::Call(Callee::Fun(g), _) if *g == def.name));
        if recursive || cx.depth >= MAX_INLINE_DEPTH || def.body.ty(def.root).contains_unknown() {
            return None;
        }
        let (pat, body) = term::inlined_body(&mut cx.b, def);
        let ty = cx.b.ty(call);
        let out = match pat {
            None => body,
            Some(pat) => cx.alloc(Expr::Let(pat, arg, body), ty),
        };
        cx.depth += 1;
        let out = self.go(cx, out);
        cx.depth -= 1;
        Some(out)
    }
}

/// The tree at `root` with each rebuilt node moved back to the id of the
/// node it stands for as written (`was`), where that node is no longer in
/// the tree: run-time errors are located by the ids (the call of a copy
/// made for lambda arguments, a `print` of a lambda). Returns the root.
/// Runs after the rewrite, when no cache of the body's nodes is left.
fn restore_ids(body: &mut Body, root: ExprId, was: &FxHashMap<ExprId, ExprId>) -> ExprId {
    if was.is_empty() {
        return root;
    }
    let mut reachable = rustc_hash::FxHashSet::default();
    let mut order = Vec::new();
    let mut stack = vec![root];
    while let Some(x) = stack.pop() {
        if reachable.insert(x) {
            order.push(x);
            stack.extend(term::children(&body.exprs[x]));
        }
    }
    // Each reachable rebuilt node's original, if that is free.
    let mut to: FxHashMap<ExprId, ExprId> = FxHashMap::default();
    let mut taken = rustc_hash::FxHashSet::default();
    for &x in &order {
        let mut y = x;
        while let Some(&z) = was.get(&y) {
            y = z;
        }
        if y != x && !reachable.contains(&y) && body.ty(y) == body.ty(x) && taken.insert(y) {
            to.insert(x, y);
        }
    }
    if to.is_empty() {
        return root;
    }
    // Children first, so a node's children are renamed before it moves.
    for &x in order.iter().rev() {
        let kids = term::children(&body.exprs[x]);
        let new: Vec<ExprId> = kids.iter().map(|k| to.get(k).copied().unwrap_or(*k)).collect();
        let node = term::with_children(&body.exprs[x], &new);
        match to.get(&x) {
            Some(&y) => {
                let ty = body.ty(x).clone();
                body.exprs[y] = node;
                body.types.insert(y, ty);
            }
            None => body.exprs[x] = node,
        }
    }
    to.get(&root).copied().unwrap_or(root)
}

/// A copy into `dst` of the tree at `e` of `src`, recording each node's
/// (new id, old id).
fn copy_mapped(dst: &mut Body, src: &Body, e: ExprId, moved: &mut Vec<(ExprId, ExprId)>) -> ExprId {
    let node = src.exprs[e].clone();
    let kids: Vec<ExprId> = term::children(&node).into_iter().map(|k| copy_mapped(dst, src, k, moved)).collect();
    let new = dst.alloc_typed(term::with_children(&node, &kids), src.ty(e).clone());
    moved.push((new, e));
    new
}

/// Where an expression of a definition lowering reads is in the program
/// as written: a node of a lambda argument in a copy is its caller's (as
/// written), another node of a copy is the original function's.
pub fn written_at(
    copies: &[(FunName, FunName)],
    moved: &[(FunName, ExprId, FunName, ExprId)],
    fun: &FunName,
    e: ExprId,
) -> (FunName, ExprId) {
    let (mut fun, mut e) = (fun.clone(), e);
    for _ in 0..64 {
        if let Some((_, _, caller, at)) = moved.iter().find(|(c, x, _, _)| *c == fun && *x == e) {
            (fun, e) = (caller.clone(), *at);
        } else if let Some((_, original)) = copies.iter().find(|(c, _)| *c == fun) {
            fun = original.clone();
        } else {
            break;
        }
    }
    (fun, e)
}

/// The type of a free occurrence of `v` in the tree at `e`.
fn var_type(body: &Body, e: ExprId, v: &str) -> Option<Type> {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Var(n) if n == v => return Some(body.ty(x).clone()),
            Expr::Lam(p, _, _) if p == v => {}
            Expr::Let(p, r, _) if p.vars().iter().any(|n| n == v) => stack.push(*r),
            other => stack.extend(term::children(other)),
        }
    }
    None
}
