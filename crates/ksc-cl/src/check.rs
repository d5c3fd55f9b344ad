//! The type system of CL (seed 003 figure 11): `Γ ⊢ c : S ⇒ T`, where `Γ`
//! holds the global functions' types. Given the source type `S`, [`type_of`]
//! computes `T` or says why the term is ill-typed.

use ksc_ir::{Callee, FunName, Type};

use crate::term::{lambda_positions, Cl, ClArg, Fun};
use crate::{ClError, ErrorKind, MAX_TERM_DEPTH};

/// `Γ`: the argument and result types of a global function, if it exists.
pub trait Signatures {
    fn signature(&self, f: &FunName) -> Option<(Type, Type)>;
}

impl<F: Fn(&FunName) -> Option<(Type, Type)>> Signatures for F {
    fn signature(&self, f: &FunName) -> Option<(Type, Type)> {
        self(f)
    }
}

/// The target type of `c` applied to a value of type `src`.
pub fn type_of(c: &Cl, src: &Type, sigs: &dyn Signatures) -> Result<Type, ClError> {
    Checker { sigs }.infer(c, src, 0)
}

/// Checks `c : src ⇒ tgt`.
pub fn check(c: &Cl, src: &Type, tgt: &Type, sigs: &dyn Signatures) -> Result<(), ClError> {
    let t = type_of(c, src, sigs)?;
    if t == *tgt {
        Ok(())
    } else {
        Err(ClError::new(ErrorKind::Type, format!("the term has type `{src} => {t}`, not `{src} => {tgt}`")))
    }
}

struct Checker<'s> {
    sigs: &'s dyn Signatures,
}

fn err(c: &Cl, message: impl Into<String>) -> ClError {
    ClError::new(ErrorKind::Type, format!("{} in `{}`", message.into(), c.short(80)))
}

/// `S ▷ R`: the environment `S` extended by a variable of type `R`.
pub fn extend(s: &Type, r: &Type) -> Option<Type> {
    match s {
        Type::Tuple(ts) => {
            let mut ts = ts.clone();
            ts.push(r.clone());
            Some(Type::Tuple(ts))
        }
        _ => None,
    }
}

impl Checker<'_> {
    fn same(&self, c: &Cl, what: &str, expected: &Type, found: &Type) -> Result<(), ClError> {
        if expected == found && !found.contains_unknown() {
            Ok(())
        } else {
            Err(err(c, format!("{what} must have type `{expected}`, but it has type `{found}`")))
        }
    }

    fn env(&self, c: &Cl, s: &Type, r: &Type) -> Result<Type, ClError> {
        extend(s, r).ok_or_else(|| {
            err(
                c,
                format!("a binder extends its input environment, which must be a tuple, but the input has type `{s}`"),
            )
        })
    }

    fn infer(&self, c: &Cl, s: &Type, depth: usize) -> Result<Type, ClError> {
        if depth > MAX_TERM_DEPTH {
            return Err(ClError::new(ErrorKind::Type, format!("the term is nested more than {MAX_TERM_DEPTH} deep")));
        }
        let d = depth + 1;
        if s.contains_unknown() {
            return Err(err(c, "the input type is unknown"));
        }
        Ok(match c {
            Cl::Id => s.clone(),
            Cl::Konst(k) => {
                self.same(c, "the input of a constant", &Type::unit(), s)?;
                k.ty()
            }
            Cl::Prune { keep, of } => match s {
                Type::Tuple(ts) if ts.len() == *of => {
                    let mut out = Vec::with_capacity(keep.len());
                    for &i in keep {
                        match ts.get(i) {
                            Some(t) => out.push(t.clone()),
                            None => return Err(err(c, format!("pruning keeps component {} of {of}", i + 1))),
                        }
                    }
                    Type::Tuple(out)
                }
                _ => {
                    return Err(err(
                        c,
                        format!("pruning needs a tuple of {of} components, but its input has type `{s}`"),
                    ))
                }
            },
            Cl::Fun(f) => self.fun(c, f, s)?,
            Cl::Comp(a, b) => {
                let r = self.infer(a, s, d)?;
                self.infer(b, &r, d)?
            }
            Cl::Tuple(cs) => Type::Tuple(cs.iter().map(|x| self.infer(x, s, d)).collect::<Result<_, _>>()?),
            Cl::If(a, b, e) => {
                let cond = self.infer(a, s, d)?;
                self.same(c, "the condition", &Type::Bool, &cond)?;
                let t = self.infer(b, s, d)?;
                let u = self.infer(e, s, d)?;
                self.same(c, "the else branch", &t, &u)?;
                t
            }
            Cl::Let { ty, rhs, body, .. } => {
                let r = self.infer(rhs, s, d)?;
                self.same(c, "the bound value", ty, &r)?;
                self.infer(body, &self.env(c, s, &r)?, d)?
            }
            Cl::Build { size, ty, elem, .. } => {
                let n = self.infer(size, s, d)?;
                let Some(rank) = n.index_rank() else {
                    return Err(err(
                        c,
                        format!("the size must be an Integer or a tuple of Integers, but it has type `{n}`"),
                    ));
                };
                self.same(c, "the index", &n, ty)?;
                let t = self.infer(elem, &self.env(c, s, &n)?, d)?;
                Type::tensor(rank, t)
            }
            Cl::Fold { ty, step, acc, vec, .. } => {
                let a = self.infer(acc, s, d)?;
                let v = self.infer(vec, s, d)?;
                let Type::Tensor(1, b) = &v else {
                    return Err(err(c, format!("fold runs over a vector, but it is given `{v}`")));
                };
                let ab = Type::Tuple(vec![a.clone(), (**b).clone()]);
                self.same(c, "the binder (accumulator, element)", &ab, ty)?;
                let a2 = self.infer(step, &self.env(c, s, &ab)?, d)?;
                self.same(c, "the step's result (the new accumulator)", &a, &a2)?;
                a
            }
            Cl::Assert(a, b) => {
                let cond = self.infer(a, s, d)?;
                self.same(c, "the asserted condition", &Type::Bool, &cond)?;
                self.infer(b, s, d)?
            }
            Cl::Prim { prim, args, ty } => {
                let lams = lambda_positions(*prim);
                if lams.is_empty() || prim.arity() != Some(args.len()) {
                    return Err(err(c, format!("`{prim}` is not a primitive with lambda arguments of this arity")));
                }
                let mut tys = Vec::with_capacity(args.len());
                for (i, a) in args.iter().enumerate() {
                    match a {
                        ClArg::Term(x) if !lams.contains(&i) => tys.push(self.infer(x, s, d)?),
                        ClArg::Lam(l) if lams.contains(&i) => {
                            let t = self.infer(&l.body, &self.env(c, s, &l.ty)?, d)?;
                            self.same(c, "the lambda's result", &l.ret, &t)?;
                            tys.push(Type::lam(l.ty.clone(), t));
                        }
                        _ => return Err(err(c, format!("argument {} of `{prim}` is in the wrong form", i + 1))),
                    }
                }
                let t = prim.result_type(&tys).map_err(|m| err(c, m))?;
                self.same(c, "the result", ty, &t)?;
                t
            }
        })
    }

    fn fun(&self, c: &Cl, f: &Fun, s: &Type) -> Result<Type, ClError> {
        self.same(c, "the argument", &f.src, s)?;
        let t = match &f.callee {
            Callee::Fun(name) => match self.sigs.signature(name) {
                Some((a, t)) => {
                    self.same(c, "the argument", &a, s)?;
                    t
                }
                None => return Err(err(c, format!("there is no function `{name}`"))),
            },
            Callee::Prim(p) if !lambda_positions(*p).is_empty() => {
                return Err(err(c, format!("`{p}` takes lambdas: it is not a function constant")));
            }
            Callee::Prim(p) if p.splats_arguments() => match s {
                Type::Tuple(args) => p.result_type(args).map_err(|m| err(c, m))?,
                _ => return Err(err(c, format!("`{p}` takes the tuple of its arguments, but is given `{s}`"))),
            },
            Callee::Prim(p) => p.result_type(std::slice::from_ref(s)).map_err(|m| err(c, m))?,
        };
        self.same(c, "the result", &f.tgt, &t)?;
        Ok(t)
    }
}
