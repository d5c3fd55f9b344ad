//! The translation of Core IR to CL, with pruning (seed 003 figure 10,
//! "Conversion to CL" and "Pruning"; knossos-reference.md 5.5).
//!
//! `C[e]Γ : T(Γ) ⇒ τ` for `Γ ⊢ e : τ`, where `Γ` lists the variables in
//! scope, outermost first, and `T(Γ)` is the tuple of their types (the
//! environment). Every sub-expression is first pruned to its free
//! variables: `C[e]Γ = P[φ(Γ, v1) .. φ(Γ, vm) / |Γ|] ; C[e]Γ'` with
//! `Γ' = (v1 .. vm)` in the order of `Γ` (the innermost binding of a
//! shadowed name); a prune that keeps everything is left out.
//!
//! ```text
//! C[k]()                 = K(k)
//! C[x]Γ                  = F(π(Γ, x))            the projection get$i$n (needs no prune)
//! C[f e]Γ                = C[e]Γ ; F(f)
//! C[(e1, .., en)]Γ       = (C[e1]Γ, .., C[en]Γ)
//! C[if e1 e2 e3]Γ        = IF(C[e1]Γ, C[e2]Γ, C[e3]Γ)
//! C[let x = r in b]Γ     = L(x, C[r]Γ, C[b](Γ, x))
//! C[build n (λi. e)]Γ    = B(C[n]Γ, i, C[e](Γ, i))
//! C[fold (λx. e) a v]Γ   = Fold(x, C[e](Γ, x), C[a]Γ, C[v]Γ)
//! C[f(x1 .. xn) = e]     = C[e](x1 .. xn)          (with (I) before it for n = 1)
//! ```
//!
//! As in the implementation: `let (x1 .. xn) = r in b` is first
//! `let t = r in let x1 = get$1$n t in ..`, and `sumbuild n l` is
//! `B(..) ; F(sum)`. `print a1 .. an` writes each argument as soon as it
//! is evaluated, so it is `let p1 = print a1 in .. let pn = print an in
//! n - 1`. Beyond the paper: `assert` has its own form
//! ([`Cl::Assert`]; the implementation dropped asserts), and the other
//! primitives with lambda arguments are [`Cl::Prim`]. A lambda anywhere else
//! (CL has no function values) is an error.

use std::rc::Rc;

use ksc_ir::{Body, Callee, Def, Expr, ExprId, Pat, Prim, Type, Var};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::term::{lambda_positions, Cl, ClArg, ClLam, Fun, Konst};
use crate::{ClError, ErrorKind, MAX_DEPTH};

/// `C[f]`: the CL term of a definition, `S ⇒ T` for `f : S -> T`.
pub fn def_to_cl(def: &Def) -> Result<Cl, ClError> {
    let mut tr = ToCl { body: def.body.clone(), fv: FxHashMap::default(), names: FxHashSet::default() };
    // Every name the body mentions, so desugaring binds fresh ones.
    for p in &def.params {
        tr.names.insert(p.name.clone());
    }
    for (_, e) in def.body.exprs.iter() {
        match e {
            Expr::Var(v) | Expr::Lam(v, ..) => {
                tr.names.insert(v.clone());
            }
            Expr::Let(p, ..) => tr.names.extend(p.vars().iter().cloned()),
            _ => {}
        }
    }
    let env: Vec<(Var, Type)> = def.params.iter().map(|p| (p.name.clone(), p.ty.clone())).collect();
    let body = tr.expr(def.root, &env, 0)?;
    Ok(if def.params.len() == 1 {
        // The argument of a one-parameter function is the parameter itself;
        // its environment is the 1-tuple.
        Cl::comp(Cl::Tuple(vec![Cl::Id]), body)
    } else {
        body
    })
}

struct ToCl {
    /// A copy of the body, extended by desugared tuple `let`s.
    body: Body,
    /// Free variables of each expression, sorted.
    fv: FxHashMap<ExprId, Rc<Vec<Var>>>,
    names: FxHashSet<Var>,
}

fn unsupported(message: impl Into<String>) -> ClError {
    ClError::new(ErrorKind::Unsupported, message)
}

fn too_deep() -> ClError {
    unsupported(format!("the expression is nested more than {MAX_DEPTH} deep"))
}

impl ToCl {
    fn ty(&self, e: ExprId) -> Result<Type, ClError> {
        let t = self.body.ty(e);
        if t.contains_unknown() {
            return Err(ClError::new(
                ErrorKind::Malformed,
                format!(
                    "`{}` has no type: the definition is not type-checked",
                    ksc_ir::print::print_expr(&self.body, e)
                ),
            ));
        }
        Ok(t.clone())
    }

    fn fresh(&mut self, base: &str) -> Var {
        crate::fresh_name(&mut self.names, base)
    }

    fn fv(&mut self, e: ExprId, depth: usize) -> Result<Rc<Vec<Var>>, ClError> {
        if let Some(v) = self.fv.get(&e) {
            return Ok(v.clone());
        }
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let d = depth + 1;
        if u32::from(e.into_raw()) as usize >= self.body.exprs.len() {
            return Err(ClError::new(ErrorKind::Malformed, "the body refers to a missing expression"));
        }
        let mut out: Vec<Var> = Vec::new();
        match self.body.exprs[e].clone() {
            Expr::Lit(_) | Expr::Dummy(_) => {}
            Expr::Var(v) => out.push(v),
            Expr::Call(_, a) => out.extend(self.fv(a, d)?.iter().cloned()),
            Expr::Tuple(es) => {
                for c in es {
                    out.extend(self.fv(c, d)?.iter().cloned());
                }
            }
            Expr::Let(p, r, b) => {
                out.extend(self.fv(r, d)?.iter().cloned());
                out.extend(self.fv(b, d)?.iter().filter(|v| !p.vars().contains(v)).cloned());
            }
            Expr::If(a, b, c) => {
                for x in [a, b, c] {
                    out.extend(self.fv(x, d)?.iter().cloned());
                }
            }
            Expr::Assert(a, b, _) => {
                for x in [a, b] {
                    out.extend(self.fv(x, d)?.iter().cloned());
                }
            }
            Expr::Lam(v, _, b) => out.extend(self.fv(b, d)?.iter().filter(|w| **w != v).cloned()),
        }
        out.sort();
        out.dedup();
        let out = Rc::new(out);
        self.fv.insert(e, out.clone());
        Ok(out)
    }

    /// `C[e]Γ`, pruned to the free variables of `e`.
    fn expr(&mut self, e: ExprId, env: &[(Var, Type)], depth: usize) -> Result<Cl, ClError> {
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let env_ty = Type::Tuple(env.iter().map(|(_, t)| t.clone()).collect());
        let position = |v: &Var| {
            env.iter()
                .rposition(|(w, _)| w == v)
                .ok_or_else(|| ClError::new(ErrorKind::Malformed, format!("variable `{v}` is not in scope")))
        };
        if let Expr::Var(v) = &self.body.exprs[e] {
            let i = position(v)?;
            let f = Fun::projection(i, &env_ty).ok_or_else(|| unsupported("an environment too large"))?;
            return Ok(Cl::Fun(f));
        }
        let fv = self.fv(e, depth)?;
        let mut keep = fv.iter().map(position).collect::<Result<Vec<usize>, _>>()?;
        keep.sort_unstable();
        let sub: Vec<(Var, Type)> = keep.iter().map(|&i| env[i].clone()).collect();
        let c = self.unpruned(e, &sub, depth + 1)?;
        Ok(if keep.len() == env.len() { c } else { Cl::comp(Cl::Prune { keep, of: env.len() }, c) })
    }

    /// `C[e]Γ` where `Γ` holds exactly the free variables of `e`.
    fn unpruned(&mut self, e: ExprId, env: &[(Var, Type)], d: usize) -> Result<Cl, ClError> {
        let extended = |x: &Var, t: &Type| {
            let mut v = env.to_vec();
            v.push((x.clone(), t.clone()));
            v
        };
        Ok(match self.body.exprs[e].clone() {
            Expr::Lit(l) => Cl::Konst(Konst::Lit(l)),
            Expr::Dummy(t) => Cl::Konst(Konst::Dummy(t)),
            Expr::Var(_) => self.expr(e, env, d)?,
            Expr::Call(Callee::Prim(p), arg) if !lambda_positions(p).is_empty() => {
                self.higher_order(e, p, arg, env, d)?
            }
            Expr::Call(Callee::Prim(Prim::Print), arg) if self.body.call_args(arg).len() >= 2 => {
                self.print(&self.body.call_args(arg), env, d)?
            }
            Expr::Call(Callee::Prim(p), arg) if p.splats_arguments() => {
                let args = self.body.call_args(arg);
                let mut cs = Vec::with_capacity(args.len());
                let mut tys = Vec::with_capacity(args.len());
                for a in args {
                    cs.push(self.expr(a, env, d)?);
                    tys.push(self.ty(a)?);
                }
                let f = Fun { callee: Callee::Prim(p), src: Type::Tuple(tys), tgt: self.ty(e)? };
                Cl::comp(Cl::Tuple(cs), Cl::Fun(f))
            }
            Expr::Call(callee, arg) => {
                let f = Fun { callee, src: self.ty(arg)?, tgt: self.ty(e)? };
                Cl::comp(self.expr(arg, env, d)?, Cl::Fun(f))
            }
            Expr::Tuple(es) => Cl::Tuple(es.iter().map(|&c| self.expr(c, env, d)).collect::<Result<_, _>>()?),
            Expr::Let(Pat::Var(x), r, b) => {
                let ty = self.ty(r)?;
                let rhs = self.expr(r, env, d)?;
                let body = self.expr(b, &extended(&x, &ty), d)?;
                Cl::Let { var: x, ty, rhs: Box::new(rhs), body: Box::new(body) }
            }
            Expr::Let(Pat::Tuple(xs), r, b) => {
                let desugared = self.untuple_let(e, &xs, r, b)?;
                self.unpruned(desugared, env, d)?
            }
            Expr::If(a, b, c) => Cl::If(
                Box::new(self.expr(a, env, d)?),
                Box::new(self.expr(b, env, d)?),
                Box::new(self.expr(c, env, d)?),
            ),
            Expr::Assert(a, b, _) => Cl::Assert(Box::new(self.expr(a, env, d)?), Box::new(self.expr(b, env, d)?)),
            Expr::Lam(..) => {
                return Err(unsupported("a lambda that is not an argument of a primitive: CL has no function values"))
            }
        })
    }

    /// `print a1 .. an` (n >= 2) writes each argument as soon as it is
    /// evaluated: `let p1 = print a1 in .. let pn = print an in n - 1`.
    fn print(&mut self, args: &[ExprId], env: &[(Var, Type)], d: usize) -> Result<Cl, ClError> {
        let mut env = env.to_vec();
        let mut lets = Vec::with_capacity(args.len());
        for &a in args {
            let ty = self.ty(a)?;
            let rhs = self.expr(a, &env, d)?;
            let f = Fun { callee: Callee::Prim(Prim::Print), src: Type::Tuple(vec![ty]), tgt: Type::Integer };
            let var = self.fresh("p");
            lets.push((var.clone(), Cl::comp(Cl::Tuple(vec![rhs]), Cl::Fun(f))));
            env.push((var, Type::Integer));
        }
        let n = Cl::Konst(Konst::Lit(ksc_ir::Lit::Integer(args.len() as i64 - 1)));
        let mut body = Cl::comp(Cl::Prune { keep: Vec::new(), of: env.len() }, n);
        for (var, rhs) in lets.into_iter().rev() {
            body = Cl::Let { var, ty: Type::Integer, rhs: Box::new(rhs), body: Box::new(body) };
        }
        Ok(body)
    }

    /// `let (x1 .. xn) = r in b` as `let t = r in let x1 = get$1$n t in .. b`.
    fn untuple_let(&mut self, e: ExprId, xs: &[Var], r: ExprId, b: ExprId) -> Result<ExprId, ClError> {
        let rt = self.ty(r)?;
        let comps = match &rt {
            Type::Tuple(ts) if ts.len() == xs.len() => ts.clone(),
            t => {
                return Err(ClError::new(
                    ErrorKind::Malformed,
                    format!("a pattern of {} variables bound to a value of type `{t}`", xs.len()),
                ))
            }
        };
        let bt = self.ty(b)?;
        let t = self.fresh("t");
        let n = xs.len() as u32;
        let mut inner = b;
        for (i, (x, ty)) in xs.iter().zip(&comps).enumerate().rev() {
            let v = self.body.alloc_typed(Expr::Var(t.clone()), rt.clone());
            let get = Prim::Get { index: i as u32 + 1, arity: n };
            let g = self.body.alloc_typed(Expr::Call(Callee::Prim(get), v), ty.clone());
            inner = self.body.alloc_typed(Expr::Let(Pat::Var(x.clone()), g, inner), bt.clone());
        }
        let _ = e;
        Ok(self.body.alloc_typed(Expr::Let(Pat::Var(t), r, inner), bt))
    }

    /// A primitive with lambda arguments: `build` and `fold` as the paper's
    /// `B` and `Fold`, `sumbuild` as `B(..) ; F(sum)`, the others as
    /// [`Cl::Prim`].
    fn higher_order(&mut self, e: ExprId, p: Prim, arg: ExprId, env: &[(Var, Type)], d: usize) -> Result<Cl, ClError> {
        let lams = lambda_positions(p);
        let es = match &self.body.exprs[arg] {
            Expr::Tuple(es) if Some(es.len()) == p.arity() => es.clone(),
            _ => {
                return Err(unsupported(format!(
                    "`{p}` applied to a tuple value rather than to its arguments written out: CL needs its lambdas written in place"
                )))
            }
        };
        // Each lambda: binder, its type, the body's type, the body in the extended environment.
        let mut args: Vec<ClArg> = Vec::with_capacity(es.len());
        for (i, &a) in es.iter().enumerate() {
            match (self.body.exprs[a].clone(), lams.contains(&i)) {
                (Expr::Lam(x, ty, b), true) => {
                    let mut inner = env.to_vec();
                    inner.push((x.clone(), ty.clone()));
                    let ret = self.ty(b)?;
                    let body = self.expr(b, &inner, d)?;
                    args.push(ClArg::Lam(ClLam { var: x, ty, ret, body }));
                }
                (_, true) => {
                    return Err(unsupported(format!(
                        "argument {} of `{p}` is not a lambda written in place: CL has no function values",
                        i + 1
                    )))
                }
                (Expr::Lam(..), false) => {
                    return Err(ClError::new(ErrorKind::Malformed, format!("argument {} of `{p}` is a lambda", i + 1)))
                }
                (_, false) => args.push(ClArg::Term(self.expr(a, env, d)?)),
            }
        }
        let ty = self.ty(e)?;
        Ok(match (p, args.as_slice()) {
            (Prim::Build | Prim::Sumbuild, [ClArg::Term(size), ClArg::Lam(l)]) => {
                let rank = l.ty.index_rank().unwrap_or(1);
                let b = Cl::Build {
                    size: Box::new(size.clone()),
                    var: l.var.clone(),
                    ty: l.ty.clone(),
                    elem: Box::new(l.body.clone()),
                };
                if p == Prim::Build {
                    b
                } else {
                    let src = Type::tensor(rank, l.ret.clone());
                    Cl::comp(b, Cl::Fun(Fun { callee: Callee::Prim(Prim::Sum), src, tgt: ty }))
                }
            }
            (Prim::Fold, [ClArg::Lam(l), ClArg::Term(acc), ClArg::Term(vec)]) => Cl::Fold {
                var: l.var.clone(),
                ty: l.ty.clone(),
                step: Box::new(l.body.clone()),
                acc: Box::new(acc.clone()),
                vec: Box::new(vec.clone()),
            },
            _ => Cl::Prim { prim: p, args, ty },
        })
    }
}
