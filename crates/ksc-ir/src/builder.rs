//! Building and taking apart typed Core IR: every node made here gets its
//! type in the body's side table, computed by the primitives' typing rules.

use crate::{Body, Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type};

/// Adds typed expressions to a body.
pub struct Builder<'b> {
    pub body: &'b mut Body,
    /// Counter for fresh variable names.
    pub fresh: &'b mut u32,
}

impl<'b> Builder<'b> {
    pub fn new(body: &'b mut Body, fresh: &'b mut u32) -> Builder<'b> {
        Builder { body, fresh }
    }

    pub fn ty(&self, e: ExprId) -> Type {
        self.body.ty(e).clone()
    }

    pub fn expr(&self, e: ExprId) -> &Expr {
        &self.body.exprs[e]
    }

    /// A fresh variable name: `ksc$<hint><n>` (names starting `ksc$` are the
    /// compiler's).
    pub fn fresh_name(&mut self, hint: &str) -> String {
        *self.fresh += 1;
        format!("ksc${hint}{}", self.fresh)
    }

    pub fn float(&mut self, x: f64) -> ExprId {
        self.body.alloc_typed(Expr::Lit(Lit::Float(x)), Type::Float)
    }

    pub fn integer(&mut self, i: i64) -> ExprId {
        self.body.alloc_typed(Expr::Lit(Lit::Integer(i)), Type::Integer)
    }

    pub fn var(&mut self, name: &str, ty: Type) -> ExprId {
        self.body.alloc_typed(Expr::Var(name.to_string()), ty)
    }

    pub fn tuple(&mut self, es: Vec<ExprId>) -> ExprId {
        let ty = Type::Tuple(es.iter().map(|&e| self.ty(e)).collect());
        self.body.alloc_typed(Expr::Tuple(es), ty)
    }

    /// A call of a primitive with these arguments (one argument is passed as
    /// itself, several as a literal tuple). The type comes from the
    /// primitive's typing rule; a type error here is a bug in the caller.
    pub fn prim(&mut self, p: Prim, args: Vec<ExprId>) -> ExprId {
        if p.splats_arguments() && args.len() == 1 && matches!(self.expr(args[0]), Expr::Tuple(es) if es.len() != 1) {
            // `(Vec_init (tuple a b))` would mean two elements: bind the one
            // tuple element to a variable first.
            let name = self.fresh_name("t");
            let ty = self.ty(args[0]);
            let v = self.var(&name, ty);
            let call = self.prim(p, vec![v]);
            return self.let_(&name, args[0], call);
        }
        let tys: Vec<Type> = args.iter().map(|&a| self.ty(a)).collect();
        let ty = p.result_type(&tys).unwrap_or_else(|e| panic!("ill-typed use of `{p}` by the compiler: {e}"));
        let arg = if args.len() == 1 { args[0] } else { self.tuple(args) };
        self.body.alloc_typed(Expr::Call(Callee::Prim(p), arg), ty)
    }

    /// A call of a global function with its declared result type.
    pub fn call(&mut self, name: FunName, args: Vec<ExprId>, ret: Type) -> ExprId {
        let arg = if args.len() == 1 { args[0] } else { self.tuple(args) };
        self.body.alloc_typed(Expr::Call(Callee::Fun(name), arg), ret)
    }

    /// `op x y` on Integers (`add`, `sub`, `mul`): an Integer.
    pub fn int_op(&mut self, op: &str, x: ExprId, y: ExprId) -> ExprId {
        let pair = Type::Tuple(vec![Type::Integer, Type::Integer]);
        self.call(FunName::typed(op, pair), vec![x, y], Type::Integer)
    }

    /// `op x y` comparing Integers (`lt`, `lte`, `gt`, `gte`): a Bool.
    /// Equality is not a prelude function but the primitive `eq`
    /// (`Prim::Eq`).
    pub fn int_test(&mut self, op: &str, x: ExprId, y: ExprId) -> ExprId {
        debug_assert!(!matches!(op, "eq" | "ne"), "Integer `{op}` is a primitive, not a prelude function");
        let pair = Type::Tuple(vec![Type::Integer, Type::Integer]);
        self.call(FunName::typed(op, pair), vec![x, y], Type::Bool)
    }

    /// `if c t f`, typed like `t`.
    pub fn if_(&mut self, c: ExprId, t: ExprId, f: ExprId) -> ExprId {
        let ty = self.ty(t);
        self.body.alloc_typed(Expr::If(c, t, f), ty)
    }

    /// `mul` of two Floats (the prelude's).
    pub fn mul_float(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.call(FunName::typed("mul", Type::Tuple(vec![Type::Float, Type::Float])), vec![a, b], Type::Float)
    }

    /// `add` of two Floats (the prelude's).
    pub fn add_float(&mut self, a: ExprId, b: ExprId) -> ExprId {
        self.call(FunName::typed("add", Type::Tuple(vec![Type::Float, Type::Float])), vec![a, b], Type::Float)
    }

    pub fn let_(&mut self, name: &str, rhs: ExprId, body: ExprId) -> ExprId {
        let ty = self.ty(body);
        self.body.alloc_typed(Expr::Let(Pat::Var(name.to_string()), rhs, body), ty)
    }

    pub fn lam(&mut self, name: &str, param_ty: Type, body: ExprId) -> ExprId {
        let ty = Type::lam(param_ty.clone(), self.ty(body));
        self.body.alloc_typed(Expr::Lam(name.to_string(), param_ty, body), ty)
    }

    /// The parameter `(acc, x)` of a fold's step whose accumulator has
    /// become a tuple of `n` (acc its `k`-th component), read from the new
    /// step's parameter `w : Tuple (Tuple .. A ..) X`: `(tuple (get$k$n
    /// (get$1$2 w)) (get$2$2 w))`.
    pub fn step_param(&mut self, w: &str, w_ty: &Type, k: u32, n: u32) -> ExprId {
        let wv = self.var(w, w_ty.clone());
        let accs = self.prim(Prim::Get { index: 1, arity: 2 }, vec![wv]);
        let acc = self.prim(Prim::Get { index: k, arity: n }, vec![accs]);
        let wv = self.var(w, w_ty.clone());
        let x = self.prim(Prim::Get { index: 2, arity: 2 }, vec![wv]);
        self.tuple(vec![acc, x])
    }

    /// `(build n (lam (i : I) body(i)))` where `body` builds the element from
    /// the index variable.
    pub fn build(&mut self, size: ExprId, body: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
        let ity = self.ty(size);
        let i = self.fresh_name("i");
        let iv = self.var(&i, ity.clone());
        let b = body(self, iv);
        let lam = self.lam(&i, ity, b);
        self.prim(Prim::Build, vec![size, lam])
    }

    /// Binds `e` to a fresh variable unless it is already atomic, and builds
    /// the body from the atomic expression; so the body may use it many
    /// times without repeating work.
    pub fn share(&mut self, e: ExprId, hint: &str, body: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
        if self.is_atomic(e) {
            return body(self, e);
        }
        let name = self.fresh_name(hint);
        let ty = self.ty(e);
        let v = self.var(&name, ty);
        let b = body(self, v);
        self.let_(&name, e, b)
    }

    /// A variable, literal or `$dummy`: duplicating it costs nothing.
    pub fn is_atomic(&self, e: ExprId) -> bool {
        crate::core::is_atomic(self.body, e)
    }

    /// A fresh copy of an atomic expression (the same node may be shared
    /// within a tree only where it is atomic; copying keeps trees trees).
    pub fn copy(&mut self, e: ExprId) -> ExprId {
        let ty = self.ty(e);
        let node = self.expr(e).clone();
        match node {
            Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => self.body.alloc_typed(node, ty),
            Expr::Call(c, a) => {
                let a = self.copy(a);
                self.body.alloc_typed(Expr::Call(c, a), ty)
            }
            Expr::Tuple(es) => {
                let es = es.into_iter().map(|x| self.copy(x)).collect();
                self.body.alloc_typed(Expr::Tuple(es), ty)
            }
            Expr::Let(p, r, b) => {
                let (r, b) = (self.copy(r), self.copy(b));
                self.body.alloc_typed(Expr::Let(p, r, b), ty)
            }
            Expr::If(c, t, f) => {
                let (c, t, f) = (self.copy(c), self.copy(t), self.copy(f));
                self.body.alloc_typed(Expr::If(c, t, f), ty)
            }
            Expr::Assert(c, b, from) => {
                let (c, b) = (self.copy(c), self.copy(b));
                self.body.alloc_typed(Expr::Assert(c, b, from), ty)
            }
            Expr::Lam(v, t, b) => {
                let b = self.copy(b);
                self.body.alloc_typed(Expr::Lam(v, t, b), ty)
            }
        }
    }

    /// The zero tangent shaped like the value of `witness` (of primal type
    /// `ty`), as an LM-free expression: `0.0`, `()`, tuples of zeros,
    /// `constVec (size w) 0.0`, or a `build` for nested tensors.
    pub fn zero_tangent(&mut self, witness: ExprId) -> ExprId {
        let ty = self.ty(witness);
        match ty {
            Type::Float => self.float(0.0),
            Type::Integer | Type::Bool | Type::String | Type::Unknown => self.tuple(Vec::new()),
            Type::Tuple(ts) => {
                if let Expr::Tuple(es) = self.expr(witness).clone() {
                    let zs = es.into_iter().map(|c| self.zero_tangent(c)).collect();
                    return self.tuple(zs);
                }
                let n = ts.len() as u32;
                self.share(witness, "w", |b, w| {
                    let zs = (1..=n)
                        .map(|i| {
                            let w = b.copy(w);
                            let c = b.prim(Prim::Get { index: i, arity: n }, vec![w]);
                            b.zero_tangent(c)
                        })
                        .collect();
                    b.tuple(zs)
                })
            }
            Type::Tensor(_, elem) => self.share(witness, "w", |b, w| {
                let w1 = b.copy(w);
                let size = b.prim(Prim::Size, vec![w1]);
                match elem.tangent() {
                    Some(Type::Float) => {
                        let z = b.float(0.0);
                        b.prim(Prim::ConstVec, vec![size, z])
                    }
                    Some(t) if t == Type::unit() => {
                        let z = b.tuple(Vec::new());
                        b.prim(Prim::ConstVec, vec![size, z])
                    }
                    _ => b.build(size, |b, i| {
                        let w2 = b.copy(w);
                        let x = b.prim(Prim::Index, vec![i, w2]);
                        b.zero_tangent(x)
                    }),
                }
            }),
            Type::Lam(..) | Type::LM(..) => panic!("zero tangent of a function or linear map: a compiler bug"),
        }
    }
}

/// The primitive and the arguments (as written) of a call of a primitive.
pub fn prim_call(body: &Body, e: ExprId) -> Option<(Prim, Vec<ExprId>)> {
    match &body.exprs[e] {
        Expr::Call(Callee::Prim(p), arg) => {
            let args = match (p.arity(), &body.exprs[*arg]) {
                (None, _) => body.call_args(*arg),
                (Some(k), Expr::Tuple(es)) if k >= 2 && es.len() == k => es.clone(),
                _ => vec![*arg],
            };
            Some((*p, args))
        }
        _ => None,
    }
}

/// The arguments of a call of primitive `p` at `e`, if it is one.
pub fn call_of(body: &Body, e: ExprId, p: Prim) -> Option<Vec<ExprId>> {
    prim_call(body, e).filter(|(q, _)| *q == p).map(|(_, a)| a)
}
