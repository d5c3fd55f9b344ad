//! The translation of CL back to Core IR (knossos-reference.md 5.5,
//! `fromCL`): the combinators are interpreted symbolically over the
//! argument's variables.
//!
//! A symbolic value is a tuple of symbolic values or an *atom*: a variable,
//! a constant, or a projection of an atom, which may be copied and dropped
//! freely. Every other result (a call, a conditional, a `build`, ...) is
//! bound to a fresh variable by a `let` at the point CL evaluates it, so
//! the Core program evaluates the same things in the same order, and
//! pruning or duplicating a value never drops or repeats a computation.
//! `let`, `build`, `fold` and lambda binders keep their names where no
//! other variable of the result has them; every variable of the result is
//! bound once, so nothing is captured.

use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Lit, Param, Pat, Prim, Type, Var};
use rustc_hash::FxHashSet;

use crate::term::{Cl, ClArg, Konst};
use crate::{ClError, ErrorKind, MAX_TERM_DEPTH};

/// The definition `name params = c` (of result type `ret_ty`), where
/// `c : S ⇒ ret_ty` and `S` is the argument type of the parameters.
pub fn cl_to_def(c: &Cl, name: FunName, params: &[Param], ret_ty: &Type) -> Result<Def, ClError> {
    let mut b = FromCl { body: Body::new(), names: FxHashSet::default() };
    for p in params {
        if !b.names.insert(p.name.clone()) {
            return Err(malformed(format!("parameter `{}` is bound twice", p.name)));
        }
    }
    let param = |p: &Param| Sym::Atom(Atom::Var(p.name.clone()), p.ty.clone());
    let input = match params {
        [p] => param(p),
        ps => Sym::Tuple(ps.iter().map(param).collect()),
    };
    let mut scope = Vec::new();
    let result = b.go(c, input, &mut scope, 0)?;
    if result.ty() != *ret_ty {
        return Err(ClError::new(
            ErrorKind::Type,
            format!("the term gives a `{}`, but the function returns `{ret_ty}`", result.ty()),
        ));
    }
    let e = b.materialize(&result);
    let root = b.finish(scope, e);
    Ok(Def { name, params: params.to_vec(), ret_ty: ret_ty.clone(), body: b.body, root })
}

fn malformed(message: impl Into<String>) -> ClError {
    ClError::new(ErrorKind::Malformed, message)
}

#[derive(Clone, Debug)]
enum Atom {
    Var(Var),
    Lit(Lit),
    Dummy(Type),
    /// `get$index$arity` of an atom of the given (tuple) type.
    Get(u32, u32, Box<(Atom, Type)>),
}

#[derive(Clone, Debug)]
enum Sym {
    Atom(Atom, Type),
    Tuple(Vec<Sym>),
}

impl Sym {
    fn ty(&self) -> Type {
        match self {
            Sym::Atom(_, t) => t.clone(),
            Sym::Tuple(cs) => Type::Tuple(cs.iter().map(Sym::ty).collect()),
        }
    }
}

/// The bindings of one scope (a body, a branch, a lambda), in order.
type Scope = Vec<(Var, ExprId)>;

struct FromCl {
    body: Body,
    /// Every variable bound in the result.
    names: FxHashSet<Var>,
}

impl FromCl {
    fn fresh(&mut self, base: &str) -> Var {
        crate::fresh_name(&mut self.names, base)
    }

    /// A Core expression of an atom of type `ty`.
    fn atom(&mut self, a: &Atom, ty: &Type) -> ExprId {
        match a {
            Atom::Var(v) => self.body.alloc_typed(Expr::Var(v.clone()), ty.clone()),
            Atom::Lit(l) => self.body.alloc_typed(Expr::Lit(l.clone()), ty.clone()),
            Atom::Dummy(t) => self.body.alloc_typed(Expr::Dummy(t.clone()), ty.clone()),
            Atom::Get(i, n, inner) => {
                let x = self.atom(&inner.0, &inner.1);
                self.body.alloc_typed(Expr::Call(Callee::Prim(Prim::Get { index: *i, arity: *n }), x), ty.clone())
            }
        }
    }

    /// A Core expression of the symbolic value (a fresh tree each time).
    fn materialize(&mut self, s: &Sym) -> ExprId {
        match s {
            Sym::Atom(a, t) => self.atom(a, t),
            Sym::Tuple(cs) => {
                let es: Vec<ExprId> = cs.iter().map(|c| self.materialize(c)).collect();
                self.body.alloc_typed(Expr::Tuple(es), s.ty())
            }
        }
    }

    /// Binds `e : ty` to a fresh variable in `scope`.
    fn bind(&mut self, scope: &mut Scope, base: &str, e: ExprId, ty: Type) -> Sym {
        let v = self.fresh(base);
        scope.push((v.clone(), e));
        Sym::Atom(Atom::Var(v), ty)
    }

    /// Wraps the bindings of a scope around its result; `let t = e in t` is `e`.
    fn finish(&mut self, mut scope: Scope, mut e: ExprId) -> ExprId {
        if let (Some((v, rhs)), Expr::Var(w)) = (scope.last(), &self.body.exprs[e]) {
            if v == w {
                e = *rhs;
                scope.pop();
            }
        }
        let ty = self.body.ty(e).clone();
        for (v, rhs) in scope.into_iter().rev() {
            e = self.body.alloc_typed(Expr::Let(Pat::Var(v), rhs, e), ty.clone());
        }
        e
    }

    /// The `n` components of a symbolic tuple.
    fn components(&self, s: &Sym, n: usize) -> Result<Vec<Sym>, ClError> {
        match s {
            Sym::Tuple(cs) if cs.len() == n => Ok(cs.clone()),
            Sym::Atom(a, tt @ Type::Tuple(ts)) if ts.len() == n => Ok(ts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Sym::Atom(Atom::Get(i as u32 + 1, n as u32, Box::new((a.clone(), tt.clone()))), t.clone())
                })
                .collect()),
            s => Err(ClError::new(
                ErrorKind::Type,
                format!("a tuple of {n} components is needed, but the value has type `{}`", s.ty()),
            )),
        }
    }

    /// `s ▷ x`.
    fn extend(&self, s: &Sym, x: Sym) -> Result<Sym, ClError> {
        let n = match s.ty() {
            Type::Tuple(ts) => ts.len(),
            t => return Err(ClError::new(ErrorKind::Type, format!("an environment must be a tuple, not `{t}`"))),
        };
        let mut cs = self.components(s, n)?;
        cs.push(x);
        Ok(Sym::Tuple(cs))
    }

    /// A scope of its own (a branch, a lambda body): `c` on `input`.
    fn nested(&mut self, c: &Cl, input: Sym, d: usize) -> Result<(ExprId, Type), ClError> {
        let mut scope = Vec::new();
        let r = self.go(c, input, &mut scope, d)?;
        let ty = r.ty();
        let e = self.materialize(&r);
        Ok((self.finish(scope, e), ty))
    }

    /// `input ◇ c`, symbolically: its bindings go to `scope`.
    fn go(&mut self, c: &Cl, input: Sym, scope: &mut Scope, depth: usize) -> Result<Sym, ClError> {
        if depth > MAX_TERM_DEPTH {
            return Err(malformed(format!("the term is nested more than {MAX_TERM_DEPTH} deep")));
        }
        let d = depth + 1;
        Ok(match c {
            Cl::Id => input,
            Cl::Konst(Konst::Lit(l)) => Sym::Atom(Atom::Lit(l.clone()), l.ty()),
            Cl::Konst(Konst::Dummy(t)) => Sym::Atom(Atom::Dummy(t.clone()), t.clone()),
            Cl::Prune { keep, of } => {
                let cs = self.components(&input, *of)?;
                let mut out = Vec::with_capacity(keep.len());
                for &i in keep {
                    out.push(
                        cs.get(i)
                            .cloned()
                            .ok_or_else(|| malformed(format!("pruning keeps component {} of {of}", i + 1)))?,
                    );
                }
                Sym::Tuple(out)
            }
            Cl::Fun(f) => match &f.callee {
                Callee::Prim(Prim::Get { index, arity }) => {
                    let cs = self.components(&input, *arity as usize)?;
                    cs.get((*index as usize).wrapping_sub(1))
                        .cloned()
                        .ok_or_else(|| malformed(format!("`get${index}${arity}`")))?
                }
                Callee::Prim(p) if p.splats_arguments() => {
                    let k = match &f.src {
                        Type::Tuple(ts) => ts.len(),
                        t => return Err(malformed(format!("`{p}` takes the tuple of its arguments, not `{t}`"))),
                    };
                    let mut cs = self.components(&input, k)?;
                    if let [one @ Sym::Tuple(parts)] = &cs[..] {
                        if parts.len() != 1 {
                            // `(print (tuple a b))` would read as `(print a b)`:
                            // a single tuple argument is passed in a variable.
                            let e = self.materialize(one);
                            cs = vec![self.bind(scope, "t", e, one.ty())];
                        }
                    }
                    let es: Vec<ExprId> = cs.iter().map(|s| self.materialize(s)).collect();
                    let arg = match es[..] {
                        [one] => one,
                        _ => self.body.alloc_typed(Expr::Tuple(es), f.src.clone()),
                    };
                    let call = self.body.alloc_typed(Expr::Call(f.callee.clone(), arg), f.tgt.clone());
                    self.bind(scope, "t", call, f.tgt.clone())
                }
                Callee::Prim(Prim::Inline) => {
                    // `$inline` is written around the call it inlines: take
                    // back the binding of the call just made.
                    let arg = match (&input, scope.last()) {
                        (Sym::Atom(Atom::Var(v), _), Some((w, rhs)))
                            if v == w && matches!(self.body.exprs[*rhs], Expr::Call(Callee::Fun(_), _)) =>
                        {
                            let rhs = *rhs;
                            scope.pop();
                            rhs
                        }
                        _ => self.materialize(&input),
                    };
                    let call = self.body.alloc_typed(Expr::Call(f.callee.clone(), arg), f.tgt.clone());
                    self.bind(scope, "t", call, f.tgt.clone())
                }
                callee => {
                    let arg = self.materialize(&input);
                    let call = self.body.alloc_typed(Expr::Call(callee.clone(), arg), f.tgt.clone());
                    self.bind(scope, "t", call, f.tgt.clone())
                }
            },
            Cl::Comp(a, b) => {
                let s = self.go(a, input, scope, d)?;
                self.go(b, s, scope, d)?
            }
            Cl::Tuple(cs) => {
                let mut out = Vec::with_capacity(cs.len());
                for x in cs {
                    out.push(self.go(x, input.clone(), scope, d)?);
                }
                Sym::Tuple(out)
            }
            Cl::If(a, b, e) => {
                let cond = self.go(a, input.clone(), scope, d)?;
                let cond = self.materialize(&cond);
                let (then, ty) = self.nested(b, input.clone(), d)?;
                let (other, ty2) = self.nested(e, input, d)?;
                if ty != ty2 {
                    return Err(ClError::new(ErrorKind::Type, format!("the branches have types `{ty}` and `{ty2}`")));
                }
                let x = self.body.alloc_typed(Expr::If(cond, then, other), ty.clone());
                self.bind(scope, "t", x, ty)
            }
            Cl::Assert(a, b) => {
                let cond = self.go(a, input.clone(), scope, d)?;
                let cond = self.materialize(&cond);
                let (rest, ty) = self.nested(b, input, d)?;
                let x = self.body.alloc_typed(Expr::Assert(cond, rest, None), ty.clone());
                self.bind(scope, "t", x, ty)
            }
            Cl::Let { var, ty, rhs, body } => {
                let r = self.go(rhs, input.clone(), scope, d)?;
                let e = self.materialize(&r);
                let x = self.bind(scope, var, e, ty.clone());
                let env = self.extend(&input, x)?;
                self.go(body, env, scope, d)?
            }
            Cl::Build { size, var, ty, elem } => {
                let n = self.go(size, input.clone(), scope, d)?;
                let n = self.materialize(&n);
                let (lam, ret) = self.lambda(var, ty, elem, &input, d)?;
                let rank = ty.index_rank().ok_or_else(|| malformed(format!("a build index of type `{ty}`")))?;
                let out_ty = Type::tensor(rank, ret);
                let args_ty = Type::Tuple(vec![ty.clone(), self.body.ty(lam).clone()]);
                let args = self.body.alloc_typed(Expr::Tuple(vec![n, lam]), args_ty);
                let x = self.body.alloc_typed(Expr::Call(Callee::Prim(Prim::Build), args), out_ty.clone());
                self.bind(scope, "t", x, out_ty)
            }
            Cl::Fold { var, ty, step, acc, vec } => {
                let a = self.go(acc, input.clone(), scope, d)?;
                let acc_ty = a.ty();
                let a = self.materialize(&a);
                let v = self.go(vec, input.clone(), scope, d)?;
                let v_ty = v.ty();
                let v = self.materialize(&v);
                let (lam, _) = self.lambda(var, ty, step, &input, d)?;
                let args_ty = Type::Tuple(vec![self.body.ty(lam).clone(), acc_ty.clone(), v_ty]);
                let args = self.body.alloc_typed(Expr::Tuple(vec![lam, a, v]), args_ty);
                let x = self.body.alloc_typed(Expr::Call(Callee::Prim(Prim::Fold), args), acc_ty.clone());
                self.bind(scope, "t", x, acc_ty)
            }
            Cl::Prim { prim, args, ty } => {
                let mut es = Vec::with_capacity(args.len());
                let mut tys = Vec::with_capacity(args.len());
                for a in args {
                    match a {
                        ClArg::Term(x) => {
                            let s = self.go(x, input.clone(), scope, d)?;
                            tys.push(s.ty());
                            es.push(self.materialize(&s));
                        }
                        ClArg::Lam(l) => {
                            let (lam, _) = self.lambda(&l.var, &l.ty, &l.body, &input, d)?;
                            tys.push(self.body.ty(lam).clone());
                            es.push(lam);
                        }
                    }
                }
                let arg = self.body.alloc_typed(Expr::Tuple(es), Type::Tuple(tys));
                let x = self.body.alloc_typed(Expr::Call(Callee::Prim(*prim), arg), ty.clone());
                self.bind(scope, "t", x, ty.clone())
            }
        })
    }

    /// `(lam (x : ty) body)` where `body` runs on `input ▷ x`.
    fn lambda(&mut self, var: &Var, ty: &Type, body: &Cl, input: &Sym, d: usize) -> Result<(ExprId, Type), ClError> {
        let x = self.fresh(var);
        let env = self.extend(input, Sym::Atom(Atom::Var(x.clone()), ty.clone()))?;
        let (b, ret) = self.nested(body, env, d)?;
        let lam = self.body.alloc_typed(Expr::Lam(x, ty.clone(), b), Type::lam(ty.clone(), ret.clone()));
        Ok((lam, ret))
    }
}
