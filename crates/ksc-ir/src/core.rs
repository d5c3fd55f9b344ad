//! Core IR: the program as the compiler sees it after lowering.
//!
//! Every definition owns a [`Body`], an arena of expressions. Expressions carry
//! no source positions (a separate span map, owned by the front end, maps
//! expression ids to spans), so moving text around does not change Core IR.
//! Types live in a side table inside the body, filled in by the type checker
//! and by every later stage that builds new expressions.

use std::fmt;

use la_arena::{Arena, ArenaMap, Idx};

use crate::names::{Derivation, FunName};
use crate::prim::Prim;
use crate::types::Type;

pub type ExprId = Idx<Expr>;

/// A local variable name. Shadowing is allowed; names are compared as text.
pub type Var = String;

#[derive(Clone, Debug)]
pub enum Lit {
    Integer(i64),
    Float(f64),
    Bool(bool),
    String(String),
}

/// Literals compare floats by bit pattern, so structural equality of programs
/// is reflexive and exact (a printed and re-read program must be identical).
impl PartialEq for Lit {
    fn eq(&self, other: &Lit) -> bool {
        match (self, other) {
            (Lit::Integer(a), Lit::Integer(b)) => a == b,
            (Lit::Float(a), Lit::Float(b)) => a.to_bits() == b.to_bits(),
            (Lit::Bool(a), Lit::Bool(b)) => a == b,
            (Lit::String(a), Lit::String(b)) => a == b,
            _ => false,
        }
    }
}

impl Lit {
    pub fn ty(&self) -> Type {
        match self {
            Lit::Integer(_) => Type::Integer,
            Lit::Float(_) => Type::Float,
            Lit::Bool(_) => Type::Bool,
            Lit::String(_) => Type::String,
        }
    }
}

/// The function called by a `Call`.
#[derive(Clone, Debug, PartialEq)]
pub enum Callee {
    /// A primitive with its own typing rule (knossos-reference.md 3.1).
    Prim(Prim),
    /// A global function: prelude, user-defined, declared or derived. Its base
    /// type is filled in by the type checker.
    Fun(FunName),
}

/// A `let` pattern: a variable or a flat tuple of variables.
#[derive(Clone, Debug, PartialEq)]
pub enum Pat {
    Var(Var),
    Tuple(Vec<Var>),
}

impl Pat {
    pub fn vars(&self) -> &[Var] {
        match self {
            Pat::Var(v) => std::slice::from_ref(v),
            Pat::Tuple(vs) => vs,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Lit(Lit),
    Var(Var),
    /// `f arg`: every function takes exactly one argument; a call written with
    /// n != 1 arguments has a literal `Tuple` as its argument.
    Call(Callee, ExprId),
    Tuple(Vec<ExprId>),
    /// `let pat = rhs in body`.
    Let(Pat, ExprId, ExprId),
    If(ExprId, ExprId, ExprId),
    /// `assert cond body`
    Assert(ExprId, ExprId),
    /// `lam (x : T) body`
    Lam(Var, Type, ExprId),
    /// `$dummy T`: a placeholder value of type T.
    Dummy(Type),
}

/// An arena of expressions with a type side table.
#[derive(Clone, Debug, Default)]
pub struct Body {
    pub exprs: Arena<Expr>,
    /// Types of expressions, filled in by the type checker.
    pub types: ArenaMap<ExprId, Type>,
}

impl Body {
    pub fn new() -> Body {
        Body::default()
    }

    pub fn alloc(&mut self, e: Expr) -> ExprId {
        self.exprs.alloc(e)
    }

    pub fn alloc_typed(&mut self, e: Expr, ty: Type) -> ExprId {
        let id = self.exprs.alloc(e);
        self.types.insert(id, ty);
        id
    }

    /// The type the checker gave this expression (`Unknown` if none).
    pub fn ty(&self, id: ExprId) -> &Type {
        const UNKNOWN: &Type = &Type::Unknown;
        self.types.get(id).unwrap_or(UNKNOWN)
    }

    /// The arguments of a call as written: the components of a literal tuple
    /// argument (`(f a b)`), or the argument itself (`(f x)`). `print` and
    /// `Vec_init` take their arguments this way, as the original's code
    /// generator splatted literal argument tuples.
    pub fn call_args(&self, arg: ExprId) -> Vec<ExprId> {
        match &self.exprs[arg] {
            Expr::Tuple(es) if es.len() != 1 => es.clone(),
            _ => vec![arg],
        }
    }

    /// Structural equality of the expression trees rooted at `a` (in `self`)
    /// and `b` (in `other`), ignoring types and unreachable arena entries.
    pub fn same_tree(&self, a: ExprId, other: &Body, b: ExprId) -> bool {
        let (x, y) = (&self.exprs[a], &other.exprs[b]);
        let all = |xs: &[ExprId], ys: &[ExprId]| {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(&p, &q)| self.same_tree(p, other, q))
        };
        match (x, y) {
            (Expr::Lit(l), Expr::Lit(m)) => l == m,
            (Expr::Var(v), Expr::Var(w)) => v == w,
            (Expr::Call(f, p), Expr::Call(g, q)) => f == g && self.same_tree(*p, other, *q),
            (Expr::Tuple(xs), Expr::Tuple(ys)) => all(xs, ys),
            (Expr::Let(p, r, s), Expr::Let(q, t, u)) => p == q && all(&[*r, *s], &[*t, *u]),
            (Expr::If(c, t, e), Expr::If(d, u, f)) => all(&[*c, *t, *e], &[*d, *u, *f]),
            (Expr::Assert(c, e), Expr::Assert(d, f)) => all(&[*c, *e], &[*d, *f]),
            (Expr::Lam(v, t, e), Expr::Lam(w, u, f)) => v == w && t == u && self.same_tree(*e, other, *f),
            (Expr::Dummy(t), Expr::Dummy(u)) => t == u,
            _ => false,
        }
    }
}

/// A parameter `x : T`.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Var,
    pub ty: Type,
}

/// `(def name ret_ty params body)`.
///
/// Every function takes one argument: with one parameter it is that
/// parameter, with n != 1 parameters it is their tuple, bound by a tuple
/// pattern.
#[derive(Clone, Debug)]
pub struct Def {
    pub name: FunName,
    pub params: Vec<Param>,
    pub ret_ty: Type,
    pub body: Body,
    pub root: ExprId,
}

impl Def {
    /// The type of the function's single argument.
    pub fn arg_ty(&self) -> Type {
        Type::of_params(self.params.iter().map(|p| p.ty.clone()))
    }
}

/// `(edef name ret_ty arg_ty)`: a function implemented outside `.ks`.
#[derive(Clone, Debug, PartialEq)]
pub struct Edef {
    pub name: FunName,
    pub ret_ty: Type,
    pub arg_ty: Type,
}

/// `(gdef derivation fun)`: ask the compiler to derive a function.
#[derive(Clone, Debug, PartialEq)]
pub struct Gdef {
    pub derivation: Derivation,
    pub fun: FunName,
}

/// `(rule "name" params lhs rhs)`: a user rewrite rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Body,
    pub lhs: ExprId,
    pub rhs: ExprId,
}

#[derive(Clone, Debug)]
pub enum Decl {
    Def(Def),
    Edef(Edef),
    Gdef(Gdef),
    Rule(Rule),
}

/// A program: its declarations in order.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub decls: Vec<Decl>,
}

impl PartialEq for Def {
    fn eq(&self, o: &Def) -> bool {
        self.name == o.name
            && self.params == o.params
            && self.ret_ty == o.ret_ty
            && self.body.same_tree(self.root, &o.body, o.root)
    }
}

impl PartialEq for Rule {
    fn eq(&self, o: &Rule) -> bool {
        self.name == o.name
            && self.params == o.params
            && self.body.same_tree(self.lhs, &o.body, o.lhs)
            && self.body.same_tree(self.rhs, &o.body, o.rhs)
    }
}

impl PartialEq for Decl {
    fn eq(&self, o: &Decl) -> bool {
        match (self, o) {
            (Decl::Def(a), Decl::Def(b)) => a == b,
            (Decl::Edef(a), Decl::Edef(b)) => a == b,
            (Decl::Gdef(a), Decl::Gdef(b)) => a == b,
            (Decl::Rule(a), Decl::Rule(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialEq for Program {
    fn eq(&self, o: &Program) -> bool {
        self.decls == o.decls
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::print::print_program(self))
    }
}
