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

/// Where an `assert` copied from another body comes from: the function
/// whose body holds the `assert` as written and its id there (so a failure
/// of a derived function, or of a function a call was inlined from, is
/// located at the source's `assert`). None: written in this body.
/// Derivation and inlining stamp it ([`stamp`]); every rewrite that
/// rebuilds an `assert` keeps it.
pub type AssertFrom = Option<std::sync::Arc<(FunName, ExprId)>>;

/// The origin an `assert` copied from node `e` of `fun`'s body gets: the
/// node's own origin, else `(fun, e)`.
pub fn stamp(from: &AssertFrom, fun: &FunName, e: ExprId) -> AssertFrom {
    Some(from.clone().unwrap_or_else(|| std::sync::Arc::new((fun.clone(), e))))
}

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
    /// `assert cond body`, and where it comes from ([`AssertFrom`]).
    Assert(ExprId, ExprId, AssertFrom),
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
            (Expr::Assert(c, e, _), Expr::Assert(d, f, _)) => all(&[*c, *e], &[*d, *f]),
            (Expr::Lam(v, t, e), Expr::Lam(w, u, f)) => v == w && t == u && self.same_tree(*e, other, *f),
            (Expr::Dummy(t), Expr::Dummy(u)) => t == u,
            _ => false,
        }
    }
}

/// The direct sub-expressions of a node, in evaluation order (the argument
/// of a call is one child, even when it is a literal tuple).
pub fn children(e: &Expr) -> Children {
    match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => Children::new(),
        Expr::Call(_, a) => smallvec::smallvec![*a],
        Expr::Tuple(es) => Children::from_slice(es),
        Expr::Let(_, r, b) => smallvec::smallvec![*r, *b],
        Expr::If(c, t, f) => smallvec::smallvec![*c, *t, *f],
        Expr::Assert(c, b, _) => smallvec::smallvec![*c, *b],
        Expr::Lam(_, _, b) => smallvec::smallvec![*b],
    }
}

/// A node's children, in order: inline up to three (every node but a
/// longer tuple), so walking a tree does not allocate per node.
pub type Children = smallvec::SmallVec<[ExprId; 3]>;

/// A variable, literal or `$dummy`: duplicating it costs nothing and
/// evaluating it cannot fail.
pub fn is_atomic(body: &Body, e: ExprId) -> bool {
    matches!(body.exprs[e], Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_))
}

/// The lets of the chain of nested lets at `e` (pattern, right side), and
/// the expression it ends in.
pub fn let_chain(body: &Body, mut e: ExprId) -> (Vec<(&Pat, ExprId)>, ExprId) {
    let mut binds = Vec::new();
    while let Expr::Let(p, r, b) = &body.exprs[e] {
        binds.push((p, *r));
        e = *b;
    }
    (binds, e)
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

    /// What is wrong with the body's scoping, if anything: a variable read
    /// where no parameter, `let` or lambda binds it. The pass pipelines run
    /// it after every pass in debug builds (`crate::pass::Runner`). It walks
    /// the tree with a stack of its own, so bodies of any depth are checked.
    pub fn scope_error(&self) -> Option<String> {
        enum Task<'a> {
            Visit(ExprId),
            Bind(&'a [Var]),
            Unbind(usize),
        }
        // The names in scope, innermost last, and how many times each is.
        let mut bound: Vec<&str> = Vec::new();
        let mut count: rustc_hash::FxHashMap<&str, u32> = rustc_hash::FxHashMap::default();
        for p in &self.params {
            bound.push(&p.name);
            *count.entry(&p.name).or_default() += 1;
        }
        let mut tasks = vec![Task::Visit(self.root)];
        while let Some(t) = tasks.pop() {
            let e = match t {
                Task::Visit(e) => e,
                Task::Bind(vs) => {
                    for v in vs {
                        bound.push(v);
                        *count.entry(v).or_default() += 1;
                    }
                    continue;
                }
                Task::Unbind(n) => {
                    for v in bound.drain(bound.len() - n..) {
                        *count.get_mut(v).expect("bound") -= 1;
                    }
                    continue;
                }
            };
            match &self.body.exprs[e] {
                Expr::Var(v) if count.get(v.as_str()).is_none_or(|&n| n == 0) => {
                    return Some(format!("`{v}` is read where nothing binds it"));
                }
                Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => {}
                Expr::Call(_, a) => tasks.push(Task::Visit(*a)),
                Expr::Tuple(es) => tasks.extend(es.iter().map(|&x| Task::Visit(x))),
                Expr::Let(p, r, b) => {
                    let vs = p.vars();
                    tasks.extend([Task::Unbind(vs.len()), Task::Visit(*b), Task::Bind(vs), Task::Visit(*r)]);
                }
                Expr::If(c, t, f) => tasks.extend([Task::Visit(*c), Task::Visit(*t), Task::Visit(*f)]),
                Expr::Assert(c, b, _) => tasks.extend([Task::Visit(*c), Task::Visit(*b)]),
                Expr::Lam(v, _, b) => {
                    tasks.extend([Task::Unbind(1), Task::Visit(*b), Task::Bind(std::slice::from_ref(v))]);
                }
            }
        }
        None
    }
}

/// `(edef name ret_ty arg_ty)`: a function implemented outside `.ks`.
#[derive(Clone, Debug, PartialEq)]
pub struct Edef {
    pub name: FunName,
    pub ret_ty: Type,
    pub arg_ty: Type,
}

/// `(gdef derivation fun)`: ask the compiler to derive a function;
/// `(gdef derivation fun schedule)`: and then run the named strategy on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Gdef {
    pub derivation: Derivation,
    pub fun: FunName,
    pub schedule: Option<String>,
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

/// `(strategy NAME BODY)` or `(strategy (NAME PARAM ...) BODY)`: a named
/// rewriting strategy (seed 001), its body a term of the strategy language
/// that `ksc_opt::script` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct StrategyDecl {
    pub name: String,
    pub params: Vec<String>,
    pub body: STerm,
}

impl StrategyDecl {
    /// The declaration as read, and the spans of its body's nodes in
    /// pre-order.
    pub fn from_ast(s: &ksc_syntax::ast::Strategy) -> (StrategyDecl, Vec<ksc_syntax::ast::Span>) {
        let (body, spans) = STerm::from_sexpr(&s.body);
        let params = s.params.iter().map(|p| p.text.clone()).collect();
        (StrategyDecl { name: s.name.text.clone(), params, body }, spans)
    }
}

/// An S-expression without positions: the body of a [`StrategyDecl`]. Its
/// nodes' spans are in the declaration's span map, in pre-order
/// ([`STerm::pre_order`]).
#[derive(Clone, Debug, PartialEq)]
pub enum STerm {
    Symbol(String),
    String(String),
    Integer(i64),
    /// A literal of another kind (a Float), or a list in square brackets:
    /// never a strategy (`[...]` for the list).
    Other(String),
    List(Vec<STerm>),
}

impl STerm {
    /// The term of an S-expression as read, and the spans of its nodes in
    /// pre-order. Iterative: S-expressions nest up to the reader's limit.
    pub fn from_sexpr(e: &ksc_syntax::sexpr::SExpr) -> (STerm, Vec<ksc_syntax::ast::Span>) {
        use ksc_syntax::sexpr::{Atom, Bracket, SExpr, SExprKind};
        fn atom(e: &SExpr) -> STerm {
            match &e.kind {
                SExprKind::Atom(Atom::Symbol(s)) => STerm::Symbol(s.clone()),
                SExprKind::Atom(Atom::String(s)) => STerm::String(s.clone()),
                SExprKind::Atom(Atom::Integer(i)) => STerm::Integer(*i),
                SExprKind::Atom(Atom::Float(x)) => STerm::Other(format!("{x:?}")),
                SExprKind::Atom(Atom::Invalid) => STerm::Other("?".to_string()),
                SExprKind::List { .. } => STerm::Other("[...]".to_string()),
            }
        }
        let mut spans = Vec::new();
        // (node, items left to convert, converted items) per open list.
        let mut stack: Vec<(Vec<STerm>, std::slice::Iter<'_, SExpr>)> = Vec::new();
        let mut next = Some(e);
        loop {
            if let Some(x) = next.take() {
                spans.push(x.span);
                match &x.kind {
                    SExprKind::List { bracket: Bracket::Paren, items, .. } => {
                        stack.push((Vec::new(), items.iter()));
                    }
                    _ => {
                        let t = atom(x);
                        match stack.last_mut() {
                            Some((done, _)) => done.push(t),
                            None => return (t, spans),
                        }
                    }
                }
            }
            let Some((_, items)) = stack.last_mut() else { unreachable!("the root is returned") };
            match items.next() {
                Some(child) => next = Some(child),
                None => {
                    let (done, _) = stack.pop().expect("an open list");
                    let t = STerm::List(done);
                    match stack.last_mut() {
                        Some((outer, _)) => outer.push(t),
                        None => return (t, spans),
                    }
                }
            }
        }
    }

    /// The nodes in pre-order (the order of their spans).
    pub fn pre_order(&self) -> Vec<&STerm> {
        let (mut out, mut stack) = (Vec::new(), vec![self]);
        while let Some(t) = stack.pop() {
            out.push(t);
            if let STerm::List(items) = t {
                stack.extend(items.iter().rev());
            }
        }
        out
    }
}

impl fmt::Display for STerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            STerm::Symbol(s) | STerm::Other(s) => f.write_str(s),
            STerm::String(s) => f.write_str(&crate::print::quote_string(s)),
            STerm::Integer(i) => write!(f, "{i}"),
            STerm::List(items) => {
                f.write_str("(")?;
                for (k, t) in items.iter().enumerate() {
                    if k > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
        }
    }
}

#[derive(Clone, Debug)]
pub enum Decl {
    Def(Def),
    Edef(Edef),
    Gdef(Gdef),
    Rule(Rule),
    Strategy(StrategyDecl),
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
            (Decl::Strategy(a), Decl::Strategy(b)) => a == b,
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
