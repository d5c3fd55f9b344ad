//! `[D f] : S -> LM S T`, the full Jacobian of `f : S -> T`, as a Core IR
//! program in A-normal form (seed 003 figure 6, knossos-reference.md 5.1):
//! every primal value and every linear map is let-bound once, to `x` and its
//! Jacobian variable `ksc$g<x>`, and never duplicated.
//!
//! For every variable `x` of f there is a linear map `g_x : LM S Tx`, the
//! derivative of x with respect to the parameter; a call `y = h(a)` gets
//! `g_y = J_h(a) ∘ g_a`; `build` gets `lmVCatV` of the maps of its elements,
//! `fold` gets `lmFold`.

use ksc_ir::builder::Builder;
use ksc_ir::prim::Accumulators;
use ksc_ir::{Body, Callee, Def, Derivation, Expr, ExprId, FunName, Lit, Pat, Prim, Type};

use crate::jacobians::{edef_jacobian, prim_jacobian};

/// Why a function cannot be differentiated, and where (in its body).
#[derive(Clone, Debug, PartialEq)]
pub struct AdError {
    pub message: String,
    /// The expression of the differentiated function's body at fault.
    pub at: Option<ExprId>,
}

pub type R<T> = Result<T, AdError>;

/// A primal value: a variable or a literal.
#[derive(Clone, Debug)]
enum Atom {
    Var(String, Type),
    Lit(Lit),
}

/// What a source variable stands for in the derivative.
#[derive(Clone, Debug)]
struct Entry {
    src: String,
    val: Atom,
    /// The name of its Jacobian variable.
    grad: String,
    /// The Jacobian's type.
    grad_ty: Type,
}

/// Does this global function have a `[D g]`: a `.ks` body (so that it can
/// be derived), or, for an `edef`, derivatives the program declares? If
/// not, an `edef`'s Jacobian must be one ksc knows (the prelude's).
pub type HasBody<'a> = &'a dyn Fn(&FunName) -> bool;

struct Ctx<'s, 'b> {
    src: &'s Body,
    /// The function differentiated, whose `assert`s the derivative keeps
    /// (stamped with where they come from, `ksc_ir::stamp`).
    src_name: &'s FunName,
    b: Builder<'b>,
    /// Bindings of the current block, in order.
    block: Vec<(String, ExprId)>,
    env: Vec<Entry>,
    /// A variable holding the whole argument of the differentiated function.
    s_witness: (String, Type),
    has_body: HasBody<'s>,
    /// For each Jacobian variable, a primal atom of its target's shape.
    witnesses: Witnesses,
    /// Jacobian variables known to be zero (values that do not depend on the
    /// parameter): calls whose arguments all have zero maps need no Jacobian.
    zeros: rustc_hash::FxHashSet<String>,
}

/// For each Jacobian variable of a `[D f]`, the name and type of a primal
/// variable (or literal) whose value has the shape of the map's target: the
/// zero cotangent of the map is shaped like it.
pub type Witnesses = rustc_hash::FxHashMap<String, ExprTemplate>;

/// A variable or literal to instantiate in another body.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprTemplate {
    Var(String, Type),
    Lit(Lit),
}

impl ExprTemplate {
    pub fn build(&self, b: &mut Builder) -> ExprId {
        match self {
            ExprTemplate::Var(n, t) => b.var(n, t.clone()),
            ExprTemplate::Lit(l) => {
                let ty = l.ty();
                b.body.alloc_typed(Expr::Lit(l.clone()), ty)
            }
        }
    }
}

/// Derives `[D f]`, with the witnesses of its Jacobian variables.
pub fn jacobian_def(f: &Def, has_body: HasBody) -> R<(Def, Witnesses)> {
    // A `scan` whose operator calls f as the left scan it equals (a
    // derived function may have one inlined from a primal).
    let left_scans = ksc_types::expand::scans_for_derivation(f, true);
    let f = left_scans.as_ref().unwrap_or(f);
    // A tail recursion as the loop it is (`tail.rs`).
    let looped = crate::tail::as_loop(f);
    let f = looped.as_ref().map_or(f, |l| &l.def);
    // Folds' invariant reads before them (`hoist.rs`).
    let hoisted = crate::hoist::fold_reads(f);
    let f = hoisted.as_ref().unwrap_or(f);
    // Made ready to tape f's recursive calls (`tape.rs`).
    let prepared = crate::tape::prepare(f);
    let f = prepared.as_ref().unwrap_or(f);
    let mut body = Body::new();
    // Above the `ksc$` names f has (a derived f has many), so that none is captured.
    let mut fresh = ksc_ir::term::fresh_floor(&f.body, f.root, f.params.iter().map(|p| &p.name));
    let s_ty = f.arg_ty();
    let mut cx = Ctx {
        src: &f.body,
        src_name: &f.name,
        b: Builder::new(&mut body, &mut fresh),
        block: Vec::new(),
        env: Vec::new(),
        s_witness: (String::new(), s_ty.clone()),
        has_body,
        witnesses: Witnesses::default(),
        zeros: Default::default(),
    };
    // The whole argument, and each parameter's map: the identity, or the
    // selection of its component.
    let n = f.params.len() as u32;
    let s_name = if n == 1 {
        f.params[0].name.clone()
    } else {
        let parts = f.params.iter().map(|p| cx.b.var(&p.name, p.ty.clone())).collect();
        let t = cx.b.tuple(parts);
        cx.bind("s", t)
    };
    cx.s_witness = (s_name.clone(), s_ty.clone());
    for (i, p) in f.params.iter().enumerate() {
        let s = cx.b.var(&s_name, s_ty.clone());
        let m = if n == 1 {
            cx.b.prim(Prim::LmOne, vec![s])
        } else {
            cx.b.prim(Prim::LmGet { index: i as u32 + 1, arity: n }, vec![s])
        };
        let g = cx.bind(&format!("g{}", p.name), m);
        cx.witnesses.insert(g.clone(), ExprTemplate::Var(p.name.clone(), p.ty.clone()));
        cx.env.push(Entry {
            src: p.name.clone(),
            val: Atom::Var(p.name.clone(), p.ty.clone()),
            grad: g,
            grad_ty: Type::lm(s_ty.clone(), p.ty.clone()),
        });
    }
    let (_, g) = cx.grad(f.root)?;
    let result = cx.b.var(&g.0, g.1);
    let block = std::mem::take(&mut cx.block);
    let root = wrap(&mut cx.b, block, result);
    let witnesses = std::mem::take(&mut cx.witnesses);
    Ok((
        Def {
            name: f.name.derived(Derivation::D),
            params: f.params.clone(),
            ret_ty: Type::lm(s_ty, f.ret_ty.clone()),
            body,
            root,
        },
        witnesses,
    ))
}

/// The free variables of an expression with their types, in order of first
/// occurrence.
pub(crate) fn free_vars(body: &Body, e: ExprId) -> Vec<(String, Type)> {
    fn go(body: &Body, e: ExprId, bound: &mut Vec<String>, out: &mut Vec<(String, Type)>) {
        match &body.exprs[e] {
            Expr::Var(v) => {
                if !bound.contains(v) && !out.iter().any(|(n, _)| n == v) {
                    out.push((v.clone(), body.ty(e).clone()));
                }
            }
            Expr::Lit(_) | Expr::Dummy(_) => {}
            Expr::Call(_, a) => go(body, *a, bound, out),
            Expr::Tuple(es) => es.iter().for_each(|&x| go(body, x, bound, out)),
            Expr::Let(p, r, x) => {
                go(body, *r, bound, out);
                let depth = bound.len();
                bound.extend(p.vars().iter().cloned());
                go(body, *x, bound, out);
                bound.truncate(depth);
            }
            Expr::If(c, t, f) => [c, t, f].iter().for_each(|&&x| go(body, x, bound, out)),
            Expr::Assert(c, x, _) => [c, x].iter().for_each(|&&y| go(body, y, bound, out)),
            Expr::Lam(v, _, x) => {
                bound.push(v.clone());
                go(body, *x, bound, out);
                bound.pop();
            }
        }
    }
    let mut out = Vec::new();
    go(body, e, &mut Vec::new(), &mut out);
    out
}

/// `let b1 = e1 in .. let bn = en in result`.
fn wrap(b: &mut Builder, block: Vec<(String, ExprId)>, result: ExprId) -> ExprId {
    block.into_iter().rev().fold(result, |acc, (name, rhs)| b.let_(&name, rhs, acc))
}

fn err<T>(at: ExprId, message: impl Into<String>) -> R<T> {
    Err(AdError { message: message.into(), at: Some(at) })
}

impl Ctx<'_, '_> {
    fn bind(&mut self, hint: &str, rhs: ExprId) -> String {
        let name = self.b.fresh_name(hint);
        self.block.push((name.clone(), rhs));
        name
    }

    /// Binds a value and returns it as an atom.
    fn bind_val(&mut self, hint: &str, rhs: ExprId) -> Atom {
        let ty = self.b.ty(rhs);
        Atom::Var(self.bind(hint, rhs), ty)
    }

    /// Binds a linear map whose target has the shape of `witness`; returns
    /// its variable and type.
    fn bind_lm(&mut self, rhs: ExprId, witness: &Atom) -> (String, Type) {
        let ty = self.b.ty(rhs);
        let name = self.bind("g", rhs);
        let w = match witness {
            Atom::Var(n, t) => ExprTemplate::Var(n.clone(), t.clone()),
            Atom::Lit(l) => ExprTemplate::Lit(l.clone()),
        };
        self.witnesses.insert(name.clone(), w);
        (name, ty)
    }

    fn atom(&mut self, a: &Atom) -> ExprId {
        match a {
            Atom::Var(n, t) => self.b.var(n, t.clone()),
            Atom::Lit(l) => {
                let ty = l.ty();
                self.b.body.alloc_typed(Expr::Lit(l.clone()), ty)
            }
        }
    }

    fn s(&mut self) -> ExprId {
        let (n, t) = self.s_witness.clone();
        self.b.var(&n, t)
    }

    /// `lmZero (s, v)`: the derivative of something that does not depend on s.
    fn zero_from(&mut self, v: &Atom) -> (String, Type) {
        let (s, w) = (self.s(), self.atom(v));
        let z = self.b.prim(Prim::LmZero, vec![s, w]);
        let g = self.bind_lm(z, v);
        self.zeros.insert(g.0.clone());
        g
    }

    /// Element i of the vector `vec` (whose map is `g`), bound, with its map
    /// `lmIndex (i, vec) ∘ g`.
    fn element(&mut self, i: &Atom, vec: &Atom, g: &(String, Type)) -> (Atom, (String, Type)) {
        let (i1, v1) = (self.atom(i), self.atom(vec));
        let x = self.b.prim(Prim::Index, vec![i1, v1]);
        let x = self.bind_val("x", x);
        let (i1, v1) = (self.atom(i), self.atom(vec));
        let sel = self.b.prim(Prim::LmIndex, vec![i1, v1]);
        let gv = self.b.var(&g.0, g.1.clone());
        let m = self.b.prim(Prim::LmCompose, vec![sel, gv]);
        let m = self.bind_lm(m, &x);
        (x, m)
    }

    /// Component k of the pair `v` (whose map is `g`), bound, with its map
    /// `lmGet$k$2 v ∘ g`.
    fn component(&mut self, v: &Atom, g: (String, Type), k: u32) -> (Atom, (String, Type)) {
        let w = self.atom(v);
        let part = self.b.prim(Prim::Get { index: k, arity: 2 }, vec![w]);
        let part = self.bind_val("y", part);
        let w = self.atom(v);
        let pick = self.b.prim(Prim::LmGet { index: k, arity: 2 }, vec![w]);
        let gv = self.b.var(&g.0, g.1);
        let m = self.b.prim(Prim::LmCompose, vec![pick, gv]);
        let m = self.bind_lm(m, &part);
        (part, m)
    }

    /// The map of `z` plus a sum of n terms: `g_z + H(1, .., 1) ∘ terms`,
    /// where `terms` is the `lmVCatV` of the terms' maps and `total` the
    /// sum's value (the witness of its target).
    fn sum_map(&mut self, n: &Atom, total: &Atom, terms: (String, Type), gz: (String, Type)) -> ExprId {
        let (n1, w) = (self.atom(n), self.atom(total));
        let o = self.b.prim(Prim::LmOne, vec![w]);
        let ones = self.b.prim(Prim::ConstVec, vec![n1, o]);
        let w = self.atom(total);
        let h = self.b.prim(Prim::LmHCatV, vec![w, ones]);
        let tv = self.b.var(&terms.0, terms.1);
        let summed = self.b.prim(Prim::LmCompose, vec![h, tv]);
        let gzv = self.b.var(&gz.0, gz.1);
        self.b.prim(Prim::LmAdd, vec![gzv, summed])
    }

    fn lookup(&self, x: &str) -> Option<Entry> {
        self.env.iter().rev().find(|e| e.src == x).cloned()
    }

    /// The source expression `e`, copied into the derivative with variables
    /// renamed to their primal values (no derivatives).
    fn primal(&mut self, e: ExprId) -> R<ExprId> {
        let mut shadow: Vec<String> = Vec::new();
        self.primal_in(e, &mut shadow)
    }

    fn primal_in(&mut self, e: ExprId, shadow: &mut Vec<String>) -> R<ExprId> {
        let ty = self.src.ty(e).clone();
        let node = match self.src.exprs[e].clone() {
            Expr::Var(x) => {
                if shadow.contains(&x) {
                    Expr::Var(x)
                } else {
                    match self.lookup(&x) {
                        Some(entry) => return Ok(self.atom(&entry.val)),
                        None => return err(e, format!("internal error: variable `{x}` unknown to AD")),
                    }
                }
            }
            Expr::Lit(l) => Expr::Lit(l),
            Expr::Dummy(t) => Expr::Dummy(t),
            Expr::Call(c, a) => Expr::Call(c, self.primal_in(a, shadow)?),
            Expr::Tuple(es) => Expr::Tuple(es.into_iter().map(|x| self.primal_in(x, shadow)).collect::<R<_>>()?),
            Expr::Let(p, r, body) => {
                let r = self.primal_in(r, shadow)?;
                let depth = shadow.len();
                shadow.extend(p.vars().iter().cloned());
                let body = self.primal_in(body, shadow)?;
                shadow.truncate(depth);
                Expr::Let(p, r, body)
            }
            Expr::If(c, t, f) => {
                Expr::If(self.primal_in(c, shadow)?, self.primal_in(t, shadow)?, self.primal_in(f, shadow)?)
            }
            Expr::Assert(c, body, from) => Expr::Assert(
                self.primal_in(c, shadow)?,
                self.primal_in(body, shadow)?,
                ksc_ir::stamp(&from, self.src_name, e),
            ),
            Expr::Lam(v, t, body) => {
                shadow.push(v.clone());
                let body = self.primal_in(body, shadow)?;
                shadow.pop();
                Expr::Lam(v, t, body)
            }
        };
        Ok(self.b.body.alloc_typed(node, ty))
    }

    /// Runs `f` in a fresh block; returns its bindings wrapped around the
    /// result `f` builds.
    fn in_block(&mut self, f: impl FnOnce(&mut Self) -> R<ExprId>) -> R<ExprId> {
        let saved = std::mem::take(&mut self.block);
        let depth = self.env.len();
        let r = f(self);
        self.env.truncate(depth);
        let block = std::mem::replace(&mut self.block, saved);
        let result = r?;
        Ok(wrap(&mut self.b, block, result))
    }

    /// The arguments of a call as written (components of a literal tuple).
    fn call_args(&self, callee: &Callee, arg: ExprId) -> Vec<ExprId> {
        match callee {
            Callee::Prim(p) if p.splats_arguments() => self.src.call_args(arg),
            Callee::Prim(p) => match (&self.src.exprs[arg], p.arity()) {
                (Expr::Tuple(es), Some(k)) if k >= 2 && es.len() == k => es.clone(),
                _ => vec![arg],
            },
            Callee::Fun(_) => self.src.call_args(arg),
        }
    }

    /// The value and the Jacobian variable of a source expression.
    fn grad(&mut self, e: ExprId) -> R<(Atom, (String, Type))> {
        let ty = self.src.ty(e).clone();
        match self.src.exprs[e].clone() {
            Expr::Lit(l) => {
                let v = Atom::Lit(l);
                let g = self.zero_from(&v);
                Ok((v, g))
            }
            Expr::Var(x) => match self.lookup(&x) {
                Some(entry) => Ok((entry.val, (entry.grad, entry.grad_ty))),
                None => err(e, format!("internal error: variable `{x}` unknown to AD")),
            },
            Expr::Dummy(t) => {
                let d = self.b.body.alloc_typed(Expr::Dummy(t), ty);
                let v = self.bind_val("d", d);
                let g = self.zero_from(&v);
                Ok((v, g))
            }
            Expr::Tuple(es) => {
                let mut vals = Vec::new();
                let mut maps = Vec::new();
                for x in es {
                    let (v, g) = self.grad(x)?;
                    vals.push(v);
                    maps.push(g);
                }
                let parts = vals.iter().map(|v| self.atom(v)).collect();
                let t = self.b.tuple(parts);
                let v = self.bind_val("t", t);
                if maps.is_empty() {
                    let g = self.zero_from(&v);
                    return Ok((v, g));
                }
                let ms = maps.iter().map(|(n, t)| self.b.var(n, t.clone())).collect();
                let m = self.b.prim(Prim::LmVCat, ms);
                let g = self.bind_lm(m, &v);
                Ok((v, g))
            }
            Expr::Let(pat, rhs, body) => {
                let (v, g) = self.grad(rhs)?;
                let depth = self.env.len();
                match &pat {
                    Pat::Var(x) => {
                        self.env.push(Entry { src: x.clone(), val: v, grad: g.0, grad_ty: g.1 });
                    }
                    Pat::Tuple(xs) => {
                        let n = xs.len() as u32;
                        let tv = self.atom(&v);
                        let tv = self.bind_val("t", tv);
                        for (i, x) in xs.iter().enumerate() {
                            let sel = Prim::Get { index: i as u32 + 1, arity: n };
                            let t1 = self.atom(&tv);
                            let c = self.b.prim(sel, vec![t1]);
                            let val = self.bind_val(x, c);
                            let t2 = self.atom(&tv);
                            let pick = self.b.prim(Prim::LmGet { index: i as u32 + 1, arity: n }, vec![t2]);
                            let gv = self.b.var(&g.0, g.1.clone());
                            let m = self.b.prim(Prim::LmCompose, vec![pick, gv]);
                            let (gn, gt) = self.bind_lm(m, &val);
                            self.env.push(Entry { src: x.clone(), val, grad: gn, grad_ty: gt });
                        }
                    }
                }
                let r = self.grad(body);
                self.env.truncate(depth);
                r
            }
            Expr::If(c, t, f) => {
                let cv = self.primal(c)?;
                let branch = |cx: &mut Self, x: ExprId| {
                    cx.in_block(|cx| {
                        let (v, g) = cx.grad(x)?;
                        let (va, ga) = (cx.atom(&v), cx.b.var(&g.0, g.1));
                        Ok(cx.b.tuple(vec![va, ga]))
                    })
                };
                let (tb, fb) = (branch(self, t)?, branch(self, f)?);
                let pty = self.b.ty(tb);
                let pair = self.b.body.alloc_typed(Expr::If(cv, tb, fb), pty);
                self.split_pair(pair)
            }
            Expr::Assert(c, body, from) => {
                let from = ksc_ir::stamp(&from, self.src_name, e);
                let cv = self.primal(c)?;
                let inner = self.in_block(|cx| {
                    let (v, g) = cx.grad(body)?;
                    let (va, ga) = (cx.atom(&v), cx.b.var(&g.0, g.1));
                    Ok(cx.b.tuple(vec![va, ga]))
                })?;
                let pty = self.b.ty(inner);
                let pair = self.b.body.alloc_typed(Expr::Assert(cv, inner, from), pty);
                self.split_pair(pair)
            }
            Expr::Lam(..) => err(e, "a lambda can only be differentiated as the argument of `build`, `sumbuild`, `fold`, `map`, `map2`, `diag`, `$buildSum`, `$scan` or `$scanSum`"),
            Expr::Call(Callee::Prim(Prim::Inline), arg) => self.grad(arg),
            Expr::Call(Callee::Prim(p @ (Prim::Build | Prim::Sumbuild)), arg) => self.grad_build(e, p, arg),
            Expr::Call(Callee::Prim(Prim::BuildSum), arg) => self.grad_build_sum(e, arg),
            Expr::Call(Callee::Prim(p @ (Prim::Fold | Prim::Scan | Prim::ScanBlocks)), arg) => self.grad_fold(e, p, arg),
            Expr::Call(Callee::Prim(Prim::ScanSum), arg) => self.grad_scan_sum(e, arg),
            Expr::Call(Callee::Prim(p @ (Prim::Map | Prim::Map2)), arg) => self.grad_map(e, p, arg),
            Expr::Call(Callee::Prim(Prim::Diag), arg) => self.grad_diag(e, arg),
            Expr::Call(callee, arg) => self.grad_call(e, callee, arg),
        }
    }

    /// `(v, g)` from a bound pair `(tuple v g)`.
    fn split_pair(&mut self, pair: ExprId) -> R<(Atom, (String, Type))> {
        let p = self.bind_val("p", pair);
        let p1 = self.atom(&p);
        let v = self.b.prim(Prim::Get { index: 1, arity: 2 }, vec![p1]);
        let v = self.bind_val("v", v);
        let p2 = self.atom(&p);
        let g = self.b.prim(Prim::Get { index: 2, arity: 2 }, vec![p2]);
        let g = self.bind_lm(g, &v);
        Ok((v, g))
    }

    fn grad_call(&mut self, e: ExprId, callee: Callee, arg: ExprId) -> R<(Atom, (String, Type))> {
        let args = self.call_args(&callee, arg);
        let mut vals = Vec::new();
        let mut maps = Vec::new();
        for a in args {
            let (v, g) = self.grad(a)?;
            vals.push(v);
            maps.push(g);
        }
        let ty = self.src.ty(e).clone();
        let atoms: Vec<ExprId> = vals.iter().map(|v| self.atom(v)).collect();
        let inactive = maps.iter().all(|(g, _)| self.zeros.contains(g));
        let call = match &callee {
            Callee::Prim(p) => self.b.prim(*p, atoms),
            Callee::Fun(name) => self.b.call(name.clone(), atoms, ty.clone()),
        };
        let y = self.bind_val("y", call);
        let discrete = ty.tangent().is_none_or(|t| !crate::jacobians::has_float(&t));
        if discrete || (inactive && !maps.is_empty()) {
            // The result has no Float, or nothing the call depends on
            // depends on the parameter: its map is zero.
            let g = self.zero_from(&y);
            return Ok((y, g));
        }
        let y_expr = self.atom(&y);
        let arg_atoms: Vec<ExprId> = vals.iter().map(|v| self.atom(v)).collect();
        let jac = match &callee {
            Callee::Prim(p) => prim_jacobian(&mut self.b, *p, &arg_atoms, y_expr),
            Callee::Fun(name) if (self.has_body)(name) => {
                let arg_ty = self.src.ty(arg).clone();
                let whole = if arg_atoms.len() == 1 { arg_atoms[0] } else { self.b.tuple(arg_atoms) };
                Ok(self.b.call(name.derived(Derivation::D), vec![whole], Type::lm(arg_ty, ty.clone())))
            }
            Callee::Fun(name) => edef_jacobian(&mut self.b, name, &arg_atoms, y_expr),
        };
        let jac = jac.map_err(|m| AdError { message: m, at: Some(e) })?;
        // The map of the whole argument: the tuple of the arguments' maps.
        let g_arg = if maps.len() == 1 {
            self.b.var(&maps[0].0, maps[0].1.clone())
        } else if maps.is_empty() {
            let (s, u) = (self.s(), self.b.tuple(Vec::new()));
            self.b.prim(Prim::LmZero, vec![s, u])
        } else {
            let ms = maps.iter().map(|(n, t)| self.b.var(n, t.clone())).collect();
            self.b.prim(Prim::LmVCat, ms)
        };
        // The Jacobian stays inline: every let-bound map goes from S.
        let m = self.b.prim(Prim::LmCompose, vec![jac, g_arg]);
        let g = self.bind_lm(m, &y);
        Ok((y, g))
    }

    /// The arguments as written of a call of `p` (`what` says what they
    /// should be), `arity` of them if given, and the parts of the literal
    /// lambda at position `lam_at`.
    fn lambda_args(
        &self,
        e: ExprId,
        p: Prim,
        arg: ExprId,
        what: &str,
        arity: Option<usize>,
        lam_at: usize,
    ) -> R<(Vec<ExprId>, (String, Type, ExprId))> {
        let Expr::Tuple(parts) = &self.src.exprs[arg] else {
            return err(e, format!("`{p}` must be applied to {what} to be differentiated"));
        };
        if arity.is_some_and(|k| parts.len() != k) || parts.len() <= lam_at {
            return err(e, format!("`{p}` must be applied to {what} to be differentiated"));
        }
        let Expr::Lam(i, ity, body) = &self.src.exprs[parts[lam_at]] else {
            return err(e, format!("`{p}` must be applied to a literal lambda to be differentiated"));
        };
        Ok((parts.clone(), (i.clone(), ity.clone(), *body)))
    }

    /// `build n (λi. b)` and `sumbuild n (λi. b)`.
    fn grad_build(&mut self, e: ExprId, p: Prim, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, (i, ity, body)) = self.lambda_args(e, p, arg, "a size and a lambda", Some(2), 1)?;
        let [n, lam] = parts[..] else { unreachable!("two arguments") };
        let nv = self.primal(n)?;
        let nv = self.bind_val("n", nv);
        // The value: the primal loop.
        let lam_primal = self.primal(lam)?;
        let n1 = self.atom(&nv);
        let value = self.b.prim(p, vec![n1, lam_primal]);
        let v = self.bind_val("y", value);
        // The map of each element, in a loop of its own.
        let i2 = self.b.fresh_name(&i);
        let maps_body = self.in_block(|cx| {
            let iv = Atom::Var(i2.clone(), ity.clone());
            let gi = cx.zero_from(&iv);
            cx.env.push(Entry { src: i.clone(), val: iv, grad: gi.0, grad_ty: gi.1 });
            let (_, g) = cx.grad(body)?;
            Ok(cx.b.var(&g.0, g.1))
        })?;
        let maps_lam = self.b.lam(&i2, ity, maps_body);
        let n2 = self.atom(&nv);
        let maps = self.b.prim(Prim::Build, vec![n2, maps_lam]);
        let s = self.s();
        let vcat = self.b.prim(Prim::LmVCatV, vec![s, maps]);
        if p == Prim::Build {
            let g = self.bind_lm(vcat, &v);
            return Ok((v, g));
        }
        // sumbuild: the sum of the elements' maps = H(1, .., 1) ∘ V(maps).
        let vcat = {
            let ty = self.b.ty(vcat);
            (self.bind("g", vcat), ty)
        };
        let n3 = self.atom(&nv);
        let w = self.atom(&v);
        let o = self.b.prim(Prim::LmOne, vec![w]);
        let ones = self.b.prim(Prim::ConstVec, vec![n3, o]);
        let w2 = self.atom(&v);
        let h = self.b.prim(Prim::LmHCatV, vec![w2, ones]);
        let vc = self.b.var(&vcat.0, vcat.1);
        let m = self.b.prim(Prim::LmCompose, vec![h, vc]);
        let g = self.bind_lm(m, &v);
        Ok((v, g))
    }

    /// `$buildSum n z (λi. b)` (made by reverse mode, so this is for
    /// derivatives of derivatives): with `g_i` the map of `b` at `i`,
    /// `lmVCat (V(s, build n (λi. get$1 ∘ g_i)), g_z + H(1..1) ∘ V(s, build n (λi. get$2 ∘ g_i)))`.
    fn grad_build_sum(&mut self, e: ExprId, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, (i, ity, body)) =
            self.lambda_args(e, Prim::BuildSum, arg, "a size, a zero and a lambda", Some(3), 2)?;
        let [n, z, lam] = parts[..] else { unreachable!("three arguments") };
        let nv = self.primal(n)?;
        let nv = self.bind_val("n", nv);
        let (zv, gz) = self.grad(z)?;
        let lam_primal = self.primal(lam)?;
        let (n1, z1) = (self.atom(&nv), self.atom(&zv));
        let value = self.b.prim(Prim::BuildSum, vec![n1, z1, lam_primal]);
        let v = self.bind_val("y", value);
        // V(s, build n (λi. get$k ∘ g_i)): the maps of component k.
        let component_maps = |this: &mut Self, k: u32| -> R<ExprId> {
            let i2 = this.b.fresh_name(&i);
            let maps_body = this.in_block(|cx| {
                let iv = Atom::Var(i2.clone(), ity.clone());
                let gi = cx.zero_from(&iv);
                cx.env.push(Entry { src: i.clone(), val: iv, grad: gi.0, grad_ty: gi.1 });
                let (bv, g) = cx.grad(body)?;
                let (_, m) = cx.component(&bv, g, k);
                Ok(cx.b.var(&m.0, m.1))
            })?;
            let maps_lam = this.b.lam(&i2, ity.clone(), maps_body);
            let n2 = this.atom(&nv);
            let maps = this.b.prim(Prim::Build, vec![n2, maps_lam]);
            let s = this.s();
            Ok(this.b.prim(Prim::LmVCatV, vec![s, maps]))
        };
        let elems = component_maps(self, 1)?;
        let elems = {
            let ty = self.b.ty(elems);
            (self.bind("g", elems), ty)
        };
        let terms = component_maps(self, 2)?;
        let terms = {
            let ty = self.b.ty(terms);
            (self.bind("g", terms), ty)
        };
        // The sum's map, with the sum's value as witness.
        let va = self.atom(&v);
        let total = self.b.prim(Prim::Get { index: 2, arity: 2 }, vec![va]);
        let total = self.bind_val("y", total);
        let sum_map = self.sum_map(&nv, &total, terms, gz);
        let ev = self.b.var(&elems.0, elems.1);
        let m = self.b.prim(Prim::LmVCat, vec![ev, sum_map]);
        let g = self.bind_lm(m, &v);
        Ok((v, g))
    }

    /// `map (λx. b) v` as `build (size v) (λi. let x = v[i] in b)`, and
    /// `map2 (λxy. b) v w` with `xy = (v[i], w[i])`: the map of element i
    /// reads the vectors at i.
    fn grad_map(&mut self, e: ExprId, p: Prim, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, (x, _, body)) = self.lambda_args(e, p, arg, "a lambda and tensors", None, 0)?;
        let (lam, vecs) = (parts[0], parts[1..].to_vec());
        // The index of an element: an Integer, or a tuple of them for a
        // tensor of rank > 1 (as `build` over a tuple of sizes takes).
        let ity = match self.src.ty(vecs[0]) {
            Type::Tensor(1, _) => Type::Integer,
            Type::Tensor(rank, _) => Type::Tuple(vec![Type::Integer; *rank]),
            _ => return err(e, format!("`{p}` must be applied to tensors to be differentiated")),
        };
        let mut grads = Vec::new();
        for &v in &vecs {
            grads.push(self.grad(v)?);
        }
        let lam_primal = self.primal(lam)?;
        let mut call_args = vec![lam_primal];
        call_args.extend(grads.iter().map(|(v, _)| self.atom(v)));
        let value = self.b.prim(p, call_args);
        let y = self.bind_val("y", value);
        let i = self.b.fresh_name("i");
        let maps_body = self.in_block(|cx| {
            let iv = Atom::Var(i.clone(), ity.clone());
            // Element i of each vector, whose map selects element i of the vector's map.
            let mut elems = Vec::new();
            for (vv, gv) in &grads {
                let elem = cx.element(&iv, vv, gv);
                elems.push(elem);
            }
            let (xv, gx) = if elems.len() == 1 {
                elems.pop().ok_or_else(|| AdError { message: "internal error: no vector".into(), at: Some(e) })?
            } else {
                // map2's lambda takes the pair of elements.
                let vals = elems.iter().map(|(v, _)| cx.atom(v)).collect();
                let t = cx.b.tuple(vals);
                let tv = cx.bind_val("xy", t);
                let ms = elems.iter().map(|(_, g)| cx.b.var(&g.0, g.1.clone())).collect();
                let m = cx.b.prim(Prim::LmVCat, ms);
                let g = cx.bind_lm(m, &tv);
                (tv, g)
            };
            cx.env.push(Entry { src: x.clone(), val: xv, grad: gx.0, grad_ty: gx.1 });
            let (_, g) = cx.grad(body)?;
            Ok(cx.b.var(&g.0, g.1))
        })?;
        let maps_lam = self.b.lam(&i, ity, maps_body);
        let v4 = self.atom(&grads[0].0);
        let n = self.b.prim(Prim::Size, vec![v4]);
        let maps = self.b.prim(Prim::Build, vec![n, maps_lam]);
        let s = self.s();
        let vcat = self.b.prim(Prim::LmVCatV, vec![s, maps]);
        let g = self.bind_lm(vcat, &y);
        Ok((y, g))
    }

    /// `diag r c (λi. e)`, rows that are zero but for `e` at column i: row
    /// i's map injects e's map at position i (a transposed selection).
    fn grad_diag(&mut self, e: ExprId, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, (i, ity, body)) = self.lambda_args(e, Prim::Diag, arg, "two sizes and a lambda", Some(3), 2)?;
        let [rows, cols, lam] = parts[..] else { unreachable!("three arguments") };
        let (rv, cv) = (self.primal(rows)?, self.primal(cols)?);
        let rv = self.bind_val("n", rv);
        let cv = self.bind_val("m", cv);
        let lam_primal = self.primal(lam)?;
        let (r1, c1) = (self.atom(&rv), self.atom(&cv));
        let value = self.b.prim(Prim::Diag, vec![r1, c1, lam_primal]);
        let y = self.bind_val("y", value);
        let i2 = self.b.fresh_name(&i);
        let maps_body = self.in_block(|cx| {
            let iv = Atom::Var(i2.clone(), ity.clone());
            let gi = cx.zero_from(&iv);
            cx.env.push(Entry { src: i.clone(), val: iv.clone(), grad: gi.0, grad_ty: gi.1 });
            let (_, g) = cx.grad(body)?;
            // Row i of the result, as the shape of the injection.
            let (i1, y1) = (cx.atom(&iv), cx.atom(&y));
            let row = cx.b.prim(Prim::Index, vec![i1, y1]);
            let row = cx.bind_val("row", row);
            let (i3, row1) = (cx.atom(&iv), cx.atom(&row));
            let sel = cx.b.prim(Prim::LmIndex, vec![i3, row1]);
            let inject = cx.b.prim(Prim::LmTranspose, vec![sel]);
            let gv = cx.b.var(&g.0, g.1);
            let m = cx.b.prim(Prim::LmCompose, vec![inject, gv]);
            let gr = cx.bind_lm(m, &row);
            Ok(cx.b.var(&gr.0, gr.1))
        })?;
        let maps_lam = self.b.lam(&i2, ity, maps_body);
        let r2 = self.atom(&rv);
        let maps = self.b.prim(Prim::Build, vec![r2, maps_lam]);
        let s = self.s();
        let vcat = self.b.prim(Prim::LmVCatV, vec![s, maps]);
        let g = self.bind_lm(vcat, &y);
        Ok((y, g))
    }

    /// `fold (λt. b) acc v` through `lmFold` (knossos-reference.md 5.2),
    /// `$scan (λt. b) acc v` (all the accumulators) through `lmScan`, and
    /// `$scanBlocks` (a monoid's scan) through `lmScanBlocks`.
    fn grad_fold(&mut self, e: ExprId, p: Prim, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, lam_parts) = self.lambda_args(e, p, arg, "a lambda, an accumulator and a vector", Some(3), 0)?;
        let [lam, acc, vec] = parts[..] else { unreachable!("three arguments") };
        let (accv, gacc) = self.grad(acc)?;
        let (vv, gv) = self.grad(vec)?;
        let f_primal = self.primal(lam)?;
        let (a1, v1) = (self.atom(&accv), self.atom(&vv));
        let value = self.b.prim(p, vec![f_primal, a1, v1]);
        let y = self.bind_val("y", value);
        let lm = Accumulators::of_value(p).expect("a fold-like loop").map_prim();
        let m = self.fold_map(lm, lam, lam_parts, (&accv, gacc), (&vv, gv), false)?;
        let g = self.bind_lm(m, &y);
        Ok((y, g))
    }

    /// The map of a fold or scan of the lambda `lam` (with parameter `t` and
    /// body `body`) from `acc` over `v`, given their values and maps:
    /// `lmFold (s', f, df, acc, v) ∘ (g_s', (g_acc, g_v))`, or `lmScan`.
    /// With `first`, the lambda returns a pair whose first component is the
    /// next accumulator (`$scanSum`'s lambda), and `f` and `df` take it.
    fn fold_map(
        &mut self,
        lm: Prim,
        lam: ExprId,
        (t, tty, body): (String, Type, ExprId),
        (accv, gacc): (&Atom, (String, Type)),
        (vv, gv): (&Atom, (String, Type)),
        first: bool,
    ) -> R<ExprId> {
        // df = λt. ∇_{(s', t)} b, where s' is the tuple of the lambda's free
        // variables (its scope, as in the categorical language): inside,
        // each free variable's map is a projection of the pair (s', t), so
        // df mentions no map of the enclosing function.
        let fvs: Vec<Entry> = free_vars(self.src, lam).into_iter().filter_map(|(v, _)| self.lookup(&v)).collect();
        let k = fvs.len() as u32;
        let scope_parts = fvs.iter().map(|e| self.atom(&e.val)).collect();
        let scope = self.b.tuple(scope_parts);
        let scope = self.bind_val("sc", scope);
        let Atom::Var(sc_name, sc_ty) = scope.clone() else { unreachable!() };
        let t2 = self.b.fresh_name(&t);
        let st_ty = Type::Tuple(vec![sc_ty.clone(), tty.clone()]);
        let df_body = {
            let saved_env = std::mem::take(&mut self.env);
            let saved_s = self.s_witness.clone();
            let r = self.in_block(|cx| {
                let (sv, tv) = (cx.b.var(&sc_name, sc_ty.clone()), cx.b.var(&t2, tty.clone()));
                let st = cx.b.tuple(vec![sv, tv]);
                let st = cx.bind("st", st);
                cx.s_witness = (st.clone(), st_ty.clone());
                for (i, entry) in fvs.iter().enumerate() {
                    let stv = cx.b.var(&st, st_ty.clone());
                    let first = cx.b.prim(Prim::LmGet { index: 1, arity: 2 }, vec![stv]);
                    let scv = cx.b.var(&sc_name, sc_ty.clone());
                    let pick = cx.b.prim(Prim::LmGet { index: i as u32 + 1, arity: k }, vec![scv]);
                    let m = cx.b.prim(Prim::LmCompose, vec![pick, first]);
                    let (gn, gt) = cx.bind_lm(m, &entry.val);
                    cx.env.push(Entry { grad: gn, grad_ty: gt, ..entry.clone() });
                }
                let stv = cx.b.var(&st, st_ty.clone());
                let second = cx.b.prim(Prim::LmGet { index: 2, arity: 2 }, vec![stv]);
                let tv = Atom::Var(t2.clone(), tty.clone());
                let (gn, gt) = cx.bind_lm(second, &tv);
                cx.env.push(Entry { src: t.clone(), val: tv, grad: gn, grad_ty: gt });
                let (bv, g) = cx.grad(body)?;
                let (_, m) = if first { cx.component(&bv, g, 1) } else { (bv, g) };
                Ok(cx.b.var(&m.0, m.1))
            });
            self.env = saved_env;
            self.s_witness = saved_s;
            r?
        };
        let df = self.b.lam(&t2, tty, df_body);
        let mut f_primal2 = self.primal(lam)?;
        if first {
            let Expr::Lam(x, xt, fb) = self.b.body.exprs[f_primal2].clone() else { unreachable!("a lambda") };
            let next = self.b.prim(Prim::Get { index: 1, arity: 2 }, vec![fb]);
            f_primal2 = self.b.lam(&x, xt, next);
        }
        let (sc, a2, v2) = (self.atom(&scope), self.atom(accv), self.atom(vv));
        let lmfold = self.b.prim(lm, vec![sc, f_primal2, df, a2, v2]);
        // lmFold : LM (s', (A, Vec B)) A, composed with (g_s', (g_acc, g_v)).
        let g_scope = if fvs.is_empty() {
            let (s, w) = (self.s(), self.atom(&scope));
            self.b.prim(Prim::LmZero, vec![s, w])
        } else {
            let ms = fvs.iter().map(|e| self.b.var(&e.grad, e.grad_ty.clone())).collect();
            self.b.prim(Prim::LmVCat, ms)
        };
        let (ga, gvv) = (self.b.var(&gacc.0, gacc.1), self.b.var(&gv.0, gv.1));
        let inner = self.b.prim(Prim::LmVCat, vec![ga, gvv]);
        let outer = self.b.prim(Prim::LmVCat, vec![g_scope, inner]);
        Ok(self.b.prim(Prim::LmCompose, vec![lmfold, outer]))
    }

    /// `$scanSum (λt. b) acc z v` (made by reverse mode of `fold`, so this is
    /// for derivatives of derivatives): its accumulators are the scan of
    /// the first component of `b`, whose map is an `lmScan`; its sum is
    /// `z` plus the second components of `b` at each accumulator and
    /// element, whose map is `g_z + H(1..1) ∘ V(s, build n (λi. get$2 ∘ g_i))`.
    fn grad_scan_sum(&mut self, e: ExprId, arg: ExprId) -> R<(Atom, (String, Type))> {
        let (parts, lam_parts) =
            self.lambda_args(e, Prim::ScanSum, arg, "a lambda, an accumulator, a zero and a vector", Some(4), 0)?;
        let [lam, acc, z, vec] = parts[..] else { unreachable!("four arguments") };
        let (t, _, body) = lam_parts.clone();
        let (accv, gacc) = self.grad(acc)?;
        let (zv, gz) = self.grad(z)?;
        let (vv, gv) = self.grad(vec)?;
        let f_primal = self.primal(lam)?;
        let (a1, z1, v1) = (self.atom(&accv), self.atom(&zv), self.atom(&vv));
        let value = self.b.prim(Prim::ScanSum, vec![f_primal, a1, z1, v1]);
        let y = self.bind_val("y", value);
        let part = |this: &mut Self, k: u32| {
            let w = this.atom(&y);
            let c = this.b.prim(Prim::Get { index: k, arity: 2 }, vec![w]);
            this.bind_val("y", c)
        };
        let accs = part(self, 1);
        let m = self.fold_map(Prim::LmScan, lam, lam_parts, (&accv, gacc), (&vv, gv.clone()), true)?;
        let g_accs = self.bind_lm(m, &accs);
        // The map of each step's term, with t = (accs[i], v[i]).
        let v0 = self.atom(&vv);
        let n = self.b.prim(Prim::Size, vec![v0]);
        let n = self.bind_val("n", n);
        let i2 = self.b.fresh_name("i");
        let maps_body = self.in_block(|cx| {
            let iv = Atom::Var(i2.clone(), Type::Integer);
            let (xa, ma) = cx.element(&iv, &accs, &g_accs);
            let (xv, mv) = cx.element(&iv, &vv, &gv);
            let (xa, xv) = (cx.atom(&xa), cx.atom(&xv));
            let tval = cx.b.tuple(vec![xa, xv]);
            let tval = cx.bind_val("t", tval);
            let (ma, mv) = (cx.b.var(&ma.0, ma.1), cx.b.var(&mv.0, mv.1));
            let mt = cx.b.prim(Prim::LmVCat, vec![ma, mv]);
            let (gn, gt) = cx.bind_lm(mt, &tval);
            cx.env.push(Entry { src: t.clone(), val: tval, grad: gn, grad_ty: gt });
            let (bv, g) = cx.grad(body)?;
            let (_, m) = cx.component(&bv, g, 2);
            Ok(cx.b.var(&m.0, m.1))
        })?;
        let maps_lam = self.b.lam(&i2, Type::Integer, maps_body);
        let n1 = self.atom(&n);
        let maps = self.b.prim(Prim::Build, vec![n1, maps_lam]);
        let s = self.s();
        let terms = self.b.prim(Prim::LmVCatV, vec![s, maps]);
        let terms = {
            let ty = self.b.ty(terms);
            (self.bind("g", terms), ty)
        };
        let total = part(self, 2);
        let sum_map = self.sum_map(&n, &total, terms, gz);
        let ga = self.b.var(&g_accs.0, g_accs.1);
        let m = self.b.prim(Prim::LmVCat, vec![ga, sum_map]);
        let g = self.bind_lm(m, &y);
        Ok((y, g))
    }
}
