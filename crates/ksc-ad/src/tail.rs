//! A tail recursion differentiated as the loop it is (issue 36).
//!
//! Knossos has no loop statement: its programs write loops as tail
//! recursion, `f x = .. (if c (f x') r) ..`. Differentiated as recursion,
//! `[rev f]` calls itself once per step, not in tail position, so the call
//! stack is its tape: a frame per step (about 200 bytes at 10^6 steps, and
//! the memory's page faults dominate). Written as a loop, reverse mode
//! stores the loop's state per step and runs a backward loop over it, which
//! is what ksc's `fold` already does.
//!
//! A function f (not a derived one) is a loop when every call of f in its
//! body is in tail position (the body of a `let`, a branch of an `if`, the
//! body of an `assert`, none inside a lambda) with its arguments written
//! out, at least one branch ends in such a call and one in another value
//! (a leaf), its parameters and result hold no lambdas, and it
//! prints nothing (the loop form runs the body's tests and updates twice:
//! counting the steps, then taking them). Its
//! parameters split into the invariant ones (passed on as themselves by
//! every call: the vector a loop reads) and the state (the others).
//!
//! For differentiation, such an f is the equal
//!
//! ```text
//! f p = let n = [f$steps] (p, 0)                 ; the steps it takes
//!           s' = fold (lam (s, k) STEP s) s (build n (lam k k))
//!       in FINAL s'
//! ```
//!
//! where STEP is f's body with each tail call replaced by its new state
//! and each leaf by the state unchanged, FINAL is the body with each tail
//! call replaced by `$dummy T` (never reached: after n steps the state
//! ends at a leaf), and `[f$steps] (p, k)` is the body with each tail call
//! replaced by `[f$steps] (args, k + 1)` and each leaf by `k` (a tail
//! recursion too, a loop in native code). The invariant parameters are
//! the loop's scope, not its state, so the backward loop adds each step's
//! cotangent of them (a one-hot for a read element) in place.
//!
//! `[D f]` is derived from that form ([`crate::derive::jacobian_def`]), so
//! `[fwd f]`, `[rev f]`, the split passes and `[jac f]` are all loops, at
//! any depth, in O(n) time and memory (the states). The primal f itself is
//! not changed.

use ksc_ir::builder::Builder;
use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Param, Pat, Prim, Type};

/// f as a loop ([the module](self)): the equal function with a `fold`, and
/// the function counting its steps, which it calls.
pub struct Loop {
    pub def: Def,
    pub steps: Def,
}

/// The name of the function counting f's steps: `f$steps`, typed by its
/// parameters (f's and the count) where f's name is typed, so that
/// overloads of f get their own.
pub fn steps_name(f: &Def) -> FunName {
    let base_ty =
        f.name.base_ty.as_ref().map(|_| Type::of_params(f.params.iter().map(|p| p.ty.clone()).chain([Type::Integer])));
    FunName { derivs: Vec::new(), base: format!("{}$steps", f.name.base), base_ty }
}

/// Does `e` (anywhere, lambdas included) call f?
pub(crate) fn calls(body: &Body, e: ExprId, f: &FunName) -> bool {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        if matches!(&body.exprs[e], Expr::Call(Callee::Fun(g), _) if g == f) {
            return true;
        }
        stack.extend(ksc_ir::core::children(&body.exprs[e]));
    }
    false
}

/// The arguments of a call of f with `arity` parameters, as written.
fn call_args(body: &Body, e: ExprId, f: &FunName, arity: usize) -> Option<Vec<ExprId>> {
    let Expr::Call(Callee::Fun(g), a) = &body.exprs[e] else { return None };
    if g != f {
        return None;
    }
    if arity == 1 {
        return Some(vec![*a]);
    }
    match &body.exprs[*a] {
        Expr::Tuple(es) if es.len() == arity => Some(es.clone()),
        _ => None,
    }
}

/// What the tail tree of f's body holds.
struct Shape {
    calls: usize,
    leaves: usize,
    /// Per parameter: is it passed on as itself by every tail call?
    invariant: Vec<bool>,
}

/// Walks the tail tree of `e` (`bound`: the names bound on the way down,
/// which shadow parameters); false if f is called anywhere but in tail
/// position with its arguments written out.
fn walk(body: &Body, e: ExprId, f: &FunName, params: &[Param], bound: &mut Vec<String>, shape: &mut Shape) -> bool {
    match &body.exprs[e] {
        Expr::Let(p, r, next) => {
            if calls(body, *r, f) {
                return false;
            }
            let n = bound.len();
            bound.extend(p.vars().iter().cloned());
            let ok = walk(body, *next, f, params, bound, shape);
            bound.truncate(n);
            ok
        }
        Expr::If(c, t, x) => {
            !calls(body, *c, f) && walk(body, *t, f, params, bound, shape) && walk(body, *x, f, params, bound, shape)
        }
        Expr::Assert(c, next, _) => !calls(body, *c, f) && walk(body, *next, f, params, bound, shape),
        _ => match call_args(body, e, f, params.len()) {
            Some(args) => {
                if args.iter().any(|&a| calls(body, a, f)) {
                    return false;
                }
                shape.calls += 1;
                for (j, (&a, p)) in args.iter().zip(params).enumerate() {
                    let same = matches!(&body.exprs[a], Expr::Var(v) if *v == p.name) && !bound.contains(&p.name);
                    shape.invariant[j] &= same;
                }
                true
            }
            None => {
                shape.leaves += 1;
                !calls(body, e, f)
            }
        },
    }
}

/// What a tail position of f's body becomes in a copy of it.
enum At {
    /// A tail call, with (copies of) its arguments.
    Call(Vec<ExprId>),
    /// Any other value (a copy).
    Leaf(ExprId),
}

/// A copy of f's body `e` with each tail position replaced by `at`'s
/// result.
fn rebuild(
    b: &mut Builder,
    e: ExprId,
    f: &FunName,
    arity: usize,
    at: &mut dyn FnMut(&mut Builder, At) -> ExprId,
) -> ExprId {
    match b.body.exprs[e].clone() {
        Expr::Let(p, r, next) => {
            let r = b.copy(r);
            let next = rebuild(b, next, f, arity, at);
            let ty = b.ty(next);
            b.body.alloc_typed(Expr::Let(p, r, next), ty)
        }
        Expr::If(c, t, x) => {
            let c = b.copy(c);
            let t = rebuild(b, t, f, arity, at);
            let x = rebuild(b, x, f, arity, at);
            let ty = b.ty(t);
            b.body.alloc_typed(Expr::If(c, t, x), ty)
        }
        Expr::Assert(c, next, from) => {
            let c = b.copy(c);
            let next = rebuild(b, next, f, arity, at);
            let ty = b.ty(next);
            b.body.alloc_typed(Expr::Assert(c, next, from), ty)
        }
        _ => match call_args(b.body, e, f, arity) {
            Some(args) => {
                let args = args.into_iter().map(|a| b.copy(a)).collect();
                at(b, At::Call(args))
            }
            None => {
                let leaf = b.copy(e);
                at(b, At::Leaf(leaf))
            }
        },
    }
}

/// One value of the given parts: itself if one, else their tuple.
fn one_of(b: &mut Builder, mut parts: Vec<ExprId>) -> ExprId {
    if parts.len() == 1 {
        parts.pop().expect("one part")
    } else {
        b.tuple(parts)
    }
}

/// The pattern binding `names`: a variable if one, else a tuple.
fn pat_of(mut names: Vec<String>) -> Pat {
    if names.len() == 1 {
        Pat::Var(names.pop().expect("one name"))
    } else {
        Pat::Tuple(names)
    }
}

/// f as a loop, if it is one ([the module](self)).
pub fn as_loop(f: &Def) -> Option<Loop> {
    if !f.name.derivs.is_empty()
        || f.params.iter().any(|p| p.ty.holds_lam())
        || f.ret_ty.holds_lam()
        || crate::hoist::has_effect(&f.body, f.root)
    {
        return None;
    }
    let arity = f.params.len();
    let mut shape = Shape { calls: 0, leaves: 0, invariant: vec![true; arity] };
    if !walk(&f.body, f.root, &f.name, &f.params, &mut Vec::new(), &mut shape) || shape.calls == 0 || shape.leaves == 0
    {
        return None;
    }
    let state: Vec<usize> = (0..arity).filter(|&j| !shape.invariant[j]).collect();
    let state_ty = Type::of_params(state.iter().map(|&j| f.params[j].ty.clone()));
    let steps = steps_def(f);

    let mut def = f.clone();
    let mut fresh = ksc_ir::term::fresh_floor(&f.body, f.root, f.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let mut cache = ksc_ir::term::Cache::new();
    let state_var = |b: &mut Builder, j: usize| b.var(&f.params[j].name, f.params[j].ty.clone());
    // Fresh names for the state inside the step, and after the loop.
    let renamed = |b: &mut Builder| -> Vec<(String, String)> {
        state
            .iter()
            .map(|&j| (f.params[j].name.clone(), b.fresh_name(&ksc_ir::term::hint_of(&f.params[j].name))))
            .collect()
    };

    // STEP: the new state at a tail call, the same state at a leaf.
    let step = rebuild(&mut b, f.root, &f.name, arity, &mut |b, at| match at {
        At::Call(args) => {
            let parts = state.iter().map(|&j| args[j]).collect();
            one_of(b, parts)
        }
        At::Leaf(_) => {
            let parts = state.iter().map(|&j| state_var(b, j)).collect();
            one_of(b, parts)
        }
    });
    let step_names = renamed(&mut b);
    let step = ksc_ir::term::rename(&mut b, &mut cache, step, &step_names);
    let sk = b.fresh_name("sk");
    let sk_ty = Type::Tuple(vec![state_ty.clone(), Type::Integer]);
    let skv = b.var(&sk, sk_ty.clone());
    let s = b.prim(Prim::Get { index: 1, arity: 2 }, vec![skv]);
    let step = match state.len() {
        0 => step,
        _ => {
            let ty = b.ty(step);
            b.body.alloc_typed(Expr::Let(pat_of(step_names.into_iter().map(|(_, to)| to).collect()), s, step), ty)
        }
    };
    let lam = b.lam(&sk, sk_ty, step);

    // The number of steps, and the indices the fold runs over.
    let mut args: Vec<ExprId> = (0..arity).map(|j| state_var(&mut b, j)).collect();
    args.push(b.integer(0));
    let count = b.call(steps.name.clone(), args, Type::Integer);
    let n = b.fresh_name("n");
    let nv = b.var(&n, Type::Integer);
    let range = b.build(nv, |b, k| b.copy(k));
    let init = {
        let parts = state.iter().map(|&j| state_var(&mut b, j)).collect();
        one_of(&mut b, parts)
    };
    let fold = b.prim(Prim::Fold, vec![lam, init, range]);

    // FINAL: the leaf the last state reaches.
    let ret_ty = f.ret_ty.clone();
    let last = rebuild(&mut b, f.root, &f.name, arity, &mut |b, at| match at {
        At::Call(_) => b.body.alloc_typed(Expr::Dummy(ret_ty.clone()), ret_ty.clone()),
        At::Leaf(e) => e,
    });
    let last_names = renamed(&mut b);
    let last = ksc_ir::term::rename(&mut b, &mut cache, last, &last_names);
    let ty = b.ty(last);
    // The last state bound for FINAL; with no state, the fold still runs
    // the steps (whose asserts may fail).
    let last_pat = match state.len() {
        0 => Pat::Var(b.fresh_name("z")),
        _ => pat_of(last_names.into_iter().map(|(_, to)| to).collect()),
    };
    let body = b.body.alloc_typed(Expr::Let(last_pat, fold, last), ty.clone());
    let root = b.body.alloc_typed(Expr::Let(Pat::Var(n), count, body), ty);
    def.root = root;
    Some(Loop { def, steps })
}

/// `[f$steps] (p, k)`: the number of tail calls f makes from p, plus k.
fn steps_def(f: &Def) -> Def {
    let name = steps_name(f);
    let mut def = f.clone();
    let mut fresh = ksc_ir::term::fresh_floor(&f.body, f.root, f.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let k = b.fresh_name("k");
    let arity = f.params.len();
    let root = rebuild(&mut b, f.root, &f.name, arity, &mut |b, at| match at {
        At::Call(mut args) => {
            let (kv, one) = (b.var(&k, Type::Integer), b.integer(1));
            args.push(b.int_op("add", kv, one));
            b.call(name.clone(), args, Type::Integer)
        }
        At::Leaf(_) => b.var(&k, Type::Integer),
    });
    def.name = name;
    def.params.push(Param { name: k, ty: Type::Integer });
    def.ret_ty = Type::Integer;
    def.root = root;
    def
}
