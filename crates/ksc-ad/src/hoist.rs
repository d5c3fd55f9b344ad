//! Reads of a fold's surroundings, made once before the fold, before it is
//! differentiated.
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

use ksc_ir::{Body, Callee, Def, Expr, ExprId, Pat, Prim, Var};
use ksc_linmap::builder::Builder;

/// `f` with its folds' invariant reads made before them (see the module),
/// or None if it has none.
pub fn fold_reads(f: &Def) -> Option<Def> {
    let folds: Vec<ExprId> = f
        .body
        .exprs
        .iter()
        .filter(|(_, e)| matches!(e, Expr::Call(Callee::Prim(Prim::Fold | Prim::Scan), _)))
        .map(|(id, _)| id)
        .collect();
    if folds.is_empty() {
        return None;
    }
    let mut def = f.clone();
    let mut fresh = ksc_opt::term::fresh_floor(&def.body, def.root, def.params.iter().map(|p| &p.name));
    let mut b = Builder::new(&mut def.body, &mut fresh);
    let mut changed = false;
    for e in folds {
        changed |= hoist(&mut b, e);
    }
    changed.then_some(def)
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
        if let Some((_, x)) = names.iter().find(|(s, _)| ksc_opt::term::alpha_eq(b.body, *s, b.body, r)) {
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
            Expr::If(c, _, _) | Expr::Assert(c, _) => stack.push((*c, bound)),
            Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) | Expr::Lam(..) => {}
        }
    }
    out
}

/// Does `e` call a primitive with an effect (`print`, `$trace`)?
fn has_effect(body: &Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        if matches!(&body.exprs[x], Expr::Call(Callee::Prim(p), _) if p.has_effect()) {
            return true;
        }
        stack.extend(ksc_opt::term::children(&body.exprs[x]));
    }
    false
}

#[cfg(test)]
mod tests {
    use ksc_eval::{Interpreter, Value};
    use ksc_ir::{print::print_def, FunName};

    /// The rows the inner fold reads unconditionally move before it, the
    /// one read in a branch does not, and the function computes the same,
    /// also where the inner fold runs no step and the read row would not
    /// exist.
    #[test]
    fn a_folds_invariant_reads_move_before_it_guarded_by_its_emptiness() {
        let text = "(def f Float ((xs : Vec (Vec Float)) (ws : Vec Float) (k : Integer))
          (fold (lam (a_t : Tuple Float Integer)
                  (let ((a t) a_t)
                    (fold (lam (b_w : Tuple Float Float)
                            (let ((b w) b_w)
                              (add (mul b (index 0 (index (add t k) xs)))
                                   (if (gt w 0.0) (index k ws) w))))
                          a (build (sub (size ws) 1) (lam (i : Integer) (index i ws))))))
                1.0 (build (size xs) (lam (t : Integer) t))))";
        let analysis = ksc_types::analyze(text);
        assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
        let defs = analysis.defs();
        let f = defs.iter().find(|d| d.name.base == "f").expect("f");
        let hoisted = super::fold_reads(f).expect("a read to move");
        let printed = print_def(&hoisted).split_whitespace().collect::<Vec<_>>().join(" ");
        // The whole read, `index 0 (index t xs)`, moves; `index k ws` in a
        // branch stays.
        assert!(printed.contains("(if (eq (size ksc$w2) 0) ($dummy Float) (index 0 (index ([add (Tuple Integer Integer)] t k) xs)))"), "{printed}");
        assert!(printed.contains("w 0.0) (index k ws) w)"), "the read in a branch moved: {printed}");
        let run = |d: &ksc_ir::Def, ws: Vec<f64>, k: i64| {
            let mut interp = Interpreter::new([d]);
            let row = Value::vector(vec![Value::Float(2.0), Value::Float(3.0)]);
            let xs = Value::vector(vec![row.clone(), row]);
            let arg = Value::tuple(vec![xs, Value::vector(ws.into_iter().map(Value::Float).collect()), Value::Integer(k)]);
            interp.call(&FunName::typed("f", d.arg_ty()), arg, &mut std::io::sink()).map(|v| v.to_string()).map_err(|e| e.message)
        };
        // Steps that run, and none (where row 5 does not exist).
        for (ws, k) in [(vec![0.5, -1.0, 2.0], 0), (vec![0.5], 5)] {
            assert_eq!(run(f, ws.clone(), k), run(&hoisted, ws.clone(), k));
            assert!(run(f, ws, k).is_ok());
        }
        assert!(run(f, vec![0.5, 1.0], 5).is_err() && run(&hoisted, vec![0.5, 1.0], 5).is_err());
    }
}
