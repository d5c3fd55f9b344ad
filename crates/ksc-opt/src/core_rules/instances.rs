//! Random instances of the Core rules' left sides, for the property tests
//! (`tests/core_rules.rs`), which evaluate each before and after its rule
//! in the reference interpreter. Each rule's generator sits next to its
//! rewrite in its theme file ([`super::CoreRule::instance`]); this module
//! holds what they share: random well-typed Core expressions ([`G`]) over the
//! parameters `x y : Float`, `n : Integer`, `v : Vec Float` ([`params`]),
//! with binders drawn from a tiny pool of names (`a`, `b`, `c`) so
//! shadowing and would-be captures are frequent, with effects (`$trace`)
//! and run-time failures (indices out of range) among them; and the helper
//! functions ([`HELPERS`]) that the inlining and shape rules' instances call.

use ksc_ir::builder::Builder;
use ksc_ir::{Body, Def, Expr, ExprId, FunName, Lit, Param, Pat, Prim, Type};

/// SplitMix64: a small deterministic generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
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

/// `let a = rhs in body` helper with a tuple pattern.
pub fn let_tuple(b: &mut Builder, names: &[&str], rhs: ExprId, body: ExprId) -> ExprId {
    let ty = b.ty(body);
    b.body.alloc_typed(Expr::Let(Pat::Tuple(names.iter().map(|s| s.to_string()).collect()), rhs, body), ty)
}

/// Helper functions the inlining rules can inline.
pub const HELPERS: &str = "
(def sq Float (z : Float) (mul z z))
(def twice Float ((p : Float) (q : Float)) (add p (mul 2.0 q)))
(def noisy Float (z : Float) ($trace (add z 1.0)))
(def fact Integer (k : Integer) (if (lt k 1) 1 (mul k (fact (sub k 1)))))
(def dbl (Vec Float) (v : Vec Float) (build (size v) (lam (i : Integer) (mul 2.0 (index i v)))))
(def [shape dbl] Integer (v : Vec Float) (size v))
(def firsts (Vec Float) ((v : Vec Float) (k : Integer))
  (build (if (lt k (size v)) k (size v)) (lam (i : Integer) (mul (index i v) (to_float k)))))
(def nested (Vec (Vec Float)) (v : Vec Float)
  (build (size v) (lam (i : Integer) (firsts v i))))
";

pub fn dummy(b: &mut Builder, t: Type) -> ExprId {
    b.body.alloc_typed(Expr::Dummy(t.clone()), t)
}

pub fn lit_bool(b: &mut Builder, x: bool) -> ExprId {
    b.body.alloc_typed(Expr::Lit(Lit::Bool(x)), Type::Bool)
}

pub fn with_var(g: &mut G, name: &str, t: Type, f: impl FnOnce(&mut G) -> ExprId) -> ExprId {
    g.env.push((name.to_string(), t));
    let r = f(g);
    g.env.pop();
    r
}

/// `let b = e0 in let c = e1 in f`: names from the binder pool in scope.
pub fn outer(g: &mut G, b: &mut Builder, f: impl FnOnce(&mut G, &mut Builder) -> ExprId) -> ExprId {
    let e0 = g.expr(b, &Type::Float, 1);
    let e1 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 1));
    g.env.push(("b".into(), Type::Float));
    g.env.push(("c".into(), Type::Float));
    let inner = f(g, b);
    g.env.pop();
    g.env.pop();
    let l = b.let_("c", e1, inner);
    b.let_("b", e0, l)
}

pub fn float_or_vec(g: &mut G) -> Type {
    if g.rng.chance(50) {
        Type::Float
    } else {
        vf()
    }
}

pub fn zero_of(g: &mut G, b: &mut Builder, t: &Type) -> ExprId {
    if *t == Type::Float {
        return b.float(0.0);
    }
    let n = g.size(b, 1);
    let z = b.float(0.0);
    b.prim(Prim::ConstVec, vec![n, z])
}

/// `f z`, or half the time `let ksc$z = z in f ksc$z` (a zero the rules
/// know by its let), or a variable that a let between rebinds to a value
/// that is not zero.
pub fn let_bound_zero(g: &mut G, b: &mut Builder, z: ExprId, f: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
    if g.rng.chance(50) {
        return f(b, z);
    }
    let ty = b.ty(z);
    let zv = b.var("ksc$z", ty.clone());
    let inner = f(b, zv);
    if g.rng.chance(25) {
        let other = g.expr(b, &ty, 1);
        let rebound = b.let_("ksc$z", other, inner);
        return b.let_("ksc$z", z, rebound);
    }
    b.let_("ksc$z", z, inner)
}

pub fn call(b: &mut Builder, name: &str, arg: Type, ret: Type, args: Vec<ExprId>) -> ExprId {
    b.call(FunName::typed(name, arg), args, ret)
}

/// `let x = t in (get$1$2 x) + sum (get$2$2 x) + e` for a pair `t` of a
/// Float and a vector, `e` sometimes rebinding or printing `x`.
pub fn tuple_uses(g: &mut G, b: &mut Builder, t: ExprId) -> ExprId {
    let ty = b.ty(t);
    let body = with_var(g, "x", ty.clone(), |g| {
        let x1 = b.var("x", ty.clone());
        let p = b.prim(Prim::Get { index: 1, arity: 2 }, vec![x1]);
        let x2 = b.var("x", ty.clone());
        let v = b.prim(Prim::Get { index: 2, arity: 2 }, vec![x2]);
        let q = b.prim(Prim::Sum, vec![v]);
        let other = if g.rng.chance(20) {
            // `print x` prints one tuple: x must not become a literal tuple there.
            let x4 = b.var("x", ty.clone());
            let p = b.prim(Prim::Print, vec![x4]);
            call(b, "to_float", Type::Integer, Type::Float, vec![p])
        } else if g.rng.chance(30) {
            let (e, w) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 1));
            let pair = b.tuple(vec![e, w]);
            let x3 = b.var("x", ty.clone());
            let inner = b.prim(Prim::Get { index: 1, arity: 2 }, vec![x3]);
            b.let_("x", pair, inner)
        } else {
            g.expr(b, &Type::Float, 2)
        };
        let pq = call(b, "add", ff(), Type::Float, vec![p, q]);
        call(b, "add", ff(), Type::Float, vec![pq, other])
    });
    b.let_("x", t, body)
}
