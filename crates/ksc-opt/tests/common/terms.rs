//! Random well-typed Core expressions for property tests: small terms over
//! the parameters `x y : Float`, `n : Integer`, `v : Vec Float`, with
//! binders drawn from a tiny pool of names (`a`, `b`, `c`) so shadowing and
//! would-be captures are frequent, with effects (`$trace`) and run-time
//! failures (indices out of range) among them.

#![allow(dead_code)]

use ksc_ir::{Body, Def, Expr, ExprId, FunName, Lit, Param, Pat, Prim, Type};
use ksc_linmap::builder::Builder;

/// SplitMix64: a small deterministic generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

pub fn ff() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

pub fn ii() -> Type {
    Type::Tuple(vec![Type::Integer, Type::Integer])
}

pub fn vf() -> Type {
    Type::vec(Type::Float)
}

/// The test definition's parameters.
pub fn params() -> Vec<Param> {
    vec![
        Param { name: "x".into(), ty: Type::Float },
        Param { name: "y".into(), ty: Type::Float },
        Param { name: "n".into(), ty: Type::Integer },
        Param { name: "v".into(), ty: vf() },
    ]
}

/// A generator of terms into a builder, tracking the variables in scope.
pub struct G<'r> {
    pub rng: &'r mut Rng,
    pub env: Vec<(String, Type)>,
}

pub const NAMES: &[&str] = &["a", "b", "c"];

impl<'r> G<'r> {
    pub fn new(rng: &'r mut Rng) -> G<'r> {
        G { rng, env: params().into_iter().map(|p| (p.name, p.ty)).collect() }
    }

    pub fn vars_of(&self, t: &Type) -> Vec<String> {
        // Innermost binding of each name only.
        let mut out: Vec<String> = Vec::new();
        for (i, (n, ty)) in self.env.iter().enumerate() {
            let shadowed = self.env[i + 1..].iter().any(|(m, _)| m == n);
            if ty == t && !shadowed {
                out.push(n.clone());
            }
        }
        out
    }

    pub fn name(&mut self) -> String {
        self.rng.pick(NAMES).to_string()
    }

    pub fn fun(b: &mut Builder, name: &str, arg_ty: Type, ret: Type, args: Vec<ExprId>) -> ExprId {
        b.call(FunName::typed(name, arg_ty), args, ret)
    }

    pub fn lit_float(&mut self, b: &mut Builder) -> ExprId {
        let x = *self.rng.pick(&[0.0, 1.0, 0.5, -2.0, 3.0, 1.5]);
        b.float(x)
    }

    pub fn lit_int(&mut self, b: &mut Builder) -> ExprId {
        let i = self.rng.below(5) as i64 - 1;
        b.integer(i)
    }

    pub fn atom(&mut self, b: &mut Builder, t: &Type) -> ExprId {
        let vars = self.vars_of(t);
        if !vars.is_empty() && self.rng.chance(60) {
            let v = self.rng.pick(&vars).clone();
            return b.var(&v, t.clone());
        }
        match t {
            Type::Float => self.lit_float(b),
            Type::Integer => self.lit_int(b),
            Type::Bool => {
                let x = self.rng.chance(50);
                b.body.alloc_typed(Expr::Lit(Lit::Bool(x)), Type::Bool)
            }
            Type::Tuple(ts) => {
                let comps = ts.clone().iter().map(|c| self.atom(b, c)).collect();
                b.tuple(comps)
            }
            _ => {
                // A vector: a small constant one.
                let n = b.integer(self.rng.below(3) as i64);
                let x = self.lit_float(b);
                b.prim(Prim::ConstVec, vec![n, x])
            }
        }
    }

    pub fn let_(&mut self, b: &mut Builder, t: &Type, depth: u32) -> ExprId {
        let rt = self.rng.pick(&[Type::Float, Type::Integer, vf()]).clone();
        let rhs = self.expr(b, &rt, depth - 1);
        let name = self.name();
        self.env.push((name.clone(), rt));
        let body = self.expr(b, t, depth - 1);
        self.env.pop();
        b.let_(&name, rhs, body)
    }

    pub fn if_(&mut self, b: &mut Builder, t: &Type, depth: u32) -> ExprId {
        let c = self.expr(b, &Type::Bool, depth - 1);
        let x = self.expr(b, t, depth - 1);
        let y = self.expr(b, t, depth - 1);
        b.body.alloc_typed(Expr::If(c, x, y), t.clone())
    }

    /// `(build size (lam (i : Integer) body))` with the body from `f`.
    pub fn build_with(
        &mut self,
        b: &mut Builder,
        size: ExprId,
        f: impl FnOnce(&mut Self, &mut Builder) -> ExprId,
    ) -> ExprId {
        let i = self.name();
        self.env.push((i.clone(), Type::Integer));
        let body = f(self, b);
        self.env.pop();
        let lam = b.lam(&i, Type::Integer, body);
        b.prim(Prim::Build, vec![size, lam])
    }

    pub fn size(&mut self, b: &mut Builder, depth: u32) -> ExprId {
        if self.rng.chance(50) {
            let v = self.expr(b, &vf(), depth.saturating_sub(1));
            b.prim(Prim::Size, vec![v])
        } else {
            let k = self.rng.below(4) as i64;
            b.integer(k)
        }
    }

    /// A random expression of type `t`.
    pub fn expr(&mut self, b: &mut Builder, t: &Type, depth: u32) -> ExprId {
        if depth == 0 || self.rng.chance(25) {
            return self.atom(b, t);
        }
        let d = depth - 1;
        match t {
            Type::Float => match self.rng.below(12) {
                0 | 1 => {
                    let op = *self.rng.pick(&["add", "sub", "mul"]);
                    let (p, q) = (self.expr(b, t, d), self.expr(b, t, d));
                    Self::fun(b, op, ff(), Type::Float, vec![p, q])
                }
                2 => self.let_(b, t, depth),
                3 => self.if_(b, t, depth),
                4 => {
                    let i = self.expr(b, &Type::Integer, d);
                    let v = self.expr(b, &vf(), d);
                    b.prim(Prim::Index, vec![i, v])
                }
                5 => {
                    let v = self.expr(b, &vf(), d);
                    b.prim(Prim::Sum, vec![v])
                }
                6 => {
                    let x = self.expr(b, t, d);
                    b.prim(Prim::Trace, vec![x])
                }
                7 => {
                    let (p, q) = (self.expr(b, t, d), self.expr(b, t, d));
                    let tup = b.tuple(vec![p, q]);
                    let k = self.rng.below(2) as u32 + 1;
                    b.prim(Prim::Get { index: k, arity: 2 }, vec![tup])
                }
                8 => {
                    let (p, q) = (self.expr(b, t, d), self.expr(b, t, d));
                    let op = *self.rng.pick(&[Prim::TsAdd, Prim::TsScale]);
                    b.prim(op, vec![p, q])
                }
                9 => {
                    let (p, q) = (self.expr(b, &vf(), d), self.expr(b, &vf(), d));
                    b.prim(Prim::TsDot, vec![p, q])
                }
                10 => {
                    let n = self.size(b, d);
                    let i = self.name();
                    self.env.push((i.clone(), Type::Integer));
                    let body = self.expr(b, t, d);
                    self.env.pop();
                    let lam = b.lam(&i, Type::Integer, body);
                    b.prim(Prim::Sumbuild, vec![n, lam])
                }
                _ => {
                    let p = self.expr(b, &Type::Integer, d);
                    Self::fun(b, "to_float", Type::Integer, Type::Float, vec![p])
                }
            },
            Type::Integer => match self.rng.below(6) {
                0 | 1 => {
                    let op = *self.rng.pick(&["add", "sub", "mul"]);
                    let (p, q) = (self.expr(b, t, d), self.expr(b, t, d));
                    Self::fun(b, op, ii(), Type::Integer, vec![p, q])
                }
                2 => self.let_(b, t, depth),
                3 => self.if_(b, t, depth),
                4 => {
                    let v = self.expr(b, &vf(), d);
                    b.prim(Prim::Size, vec![v])
                }
                _ => self.atom(b, t),
            },
            Type::Bool => match self.rng.below(4) {
                0 => {
                    let op = *self.rng.pick(&["lt", "gt"]);
                    let (p, q) = (self.expr(b, &Type::Float, d), self.expr(b, &Type::Float, d));
                    Self::fun(b, op, ff(), Type::Bool, vec![p, q])
                }
                1 => {
                    let (p, q) = (self.expr(b, &Type::Integer, d), self.expr(b, &Type::Integer, d));
                    b.prim(Prim::Eq, vec![p, q])
                }
                _ => self.atom(b, t),
            },
            Type::Tensor(1, e) if **e == Type::Float => match self.rng.below(7) {
                0 | 1 => {
                    let n = self.size(b, d);
                    self.build_with(b, n, |g, b| g.expr(b, &Type::Float, d))
                }
                2 => {
                    let n = self.size(b, d);
                    let x = self.expr(b, &Type::Float, d);
                    b.prim(Prim::ConstVec, vec![n, x])
                }
                3 => {
                    let n = self.size(b, d);
                    let i = self.expr(b, &Type::Integer, d);
                    let x = self.expr(b, &Type::Float, d);
                    b.prim(Prim::DeltaVec, vec![n, i, x])
                }
                4 => self.let_(b, t, depth),
                5 => {
                    let k = self.expr(b, &Type::Float, d);
                    let w = self.expr(b, t, d);
                    b.prim(Prim::TsScale, vec![k, w])
                }
                _ => self.if_(b, t, depth),
            },
            Type::Tuple(ts) => {
                let comps = ts.clone().iter().map(|c| self.expr(b, c, d)).collect();
                b.tuple(comps)
            }
            _ => self.atom(b, t),
        }
    }
}

/// A definition `test` over the parameters with this body and root.
pub fn test_def(body: &Body, root: ExprId) -> Def {
    Def {
        name: FunName::typed("test", Type::Tuple(params().into_iter().map(|p| p.ty).collect())),
        params: params(),
        ret_ty: body.ty(root).clone(),
        body: body.clone(),
        root,
    }
}

/// Random arguments for the parameters.
pub fn random_args(rng: &mut Rng) -> ksc_eval::Value {
    use ksc_eval::Value;
    let f = |r: &mut Rng| Value::Float(*r.pick(&[0.0, 1.0, -1.5, 2.5, 0.25]));
    let x = f(rng);
    let y = f(rng);
    let n = Value::Integer(rng.below(4) as i64);
    let len = rng.below(4) as usize;
    let v = Value::vector((0..len).map(|_| f(rng)).collect());
    Value::tuple(vec![x, y, n, v])
}

/// `let a = rhs in body` helper with a tuple pattern.
pub fn let_tuple(b: &mut Builder, names: &[&str], rhs: ExprId, body: ExprId) -> ExprId {
    let ty = b.ty(body);
    b.body.alloc_typed(Expr::Let(Pat::Tuple(names.iter().map(|s| s.to_string()).collect()), rhs, body), ty)
}
