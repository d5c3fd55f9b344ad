//! The surface syntax tree of a `.ks` file: declarations, types, names and
//! expressions exactly as written, every node with its byte span.
//!
//! This tree is produced by [`crate::parse_source`] and consumed by the
//! lowering in `ksc-types`. It keeps the distinctions the source makes (for
//! example the three forms of `let`), and nothing is resolved yet.

/// A half-open byte range `start..end` into the source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    /// The smallest span covering both.
    pub fn cover(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// An identifier as written (variable, function or parameter name).
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub text: String,
    pub span: Span,
}

/// A whole file: the declarations that could be read, in order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SourceFile {
    pub decls: Vec<Decl>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    Def(Def),
    Edef(Edef),
    Gdef(Gdef),
    Rule(Rule),
    Strategy(Strategy),
}

impl Decl {
    pub fn span(&self) -> Span {
        match self {
            Decl::Def(d) => d.span,
            Decl::Edef(d) => d.span,
            Decl::Gdef(d) => d.span,
            Decl::Rule(d) => d.span,
            Decl::Strategy(d) => d.span,
        }
    }
}

/// `(def NAME RET_TYPE PARAMS BODY)`
#[derive(Clone, Debug, PartialEq)]
pub struct Def {
    pub name: FunName,
    pub ret_ty: Type,
    pub params: Params,
    pub body: Expr,
    pub span: Span,
}

/// `(edef NAME RET_TYPE ARG_TYPE)`
#[derive(Clone, Debug, PartialEq)]
pub struct Edef {
    pub name: FunName,
    pub ret_ty: Type,
    pub arg_ty: Type,
    pub span: Span,
}

/// `(gdef DERIVATION FUN)`, e.g. `(gdef rev [f (Tuple Float Float)])`, or
/// `(gdef DERIVATION FUN SCHEDULE)`: the derived function then also goes
/// through the named strategy (ksc's own).
#[derive(Clone, Debug, PartialEq)]
pub struct Gdef {
    pub derivation: Derivation,
    /// Span of the derivation keyword.
    pub derivation_span: Span,
    pub fun: FunName,
    pub schedule: Option<Ident>,
    pub span: Span,
}

/// `(rule "NAME" PARAMS LHS RHS)`
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub name: String,
    pub name_span: Span,
    pub params: Params,
    pub lhs: Expr,
    pub rhs: Expr,
    pub span: Span,
}

/// `(strategy NAME BODY)` or `(strategy (NAME PARAM ...) BODY)`: a named
/// rewriting strategy (seed 001). The body is kept as read: it is a term of
/// the strategy language (`ksc_opt::script`), which gives it its meaning.
#[derive(Clone, Debug, PartialEq)]
pub struct Strategy {
    pub name: Ident,
    /// The strategy parameters, in order (none for `(strategy NAME BODY)`).
    pub params: Vec<Ident>,
    pub body: crate::sexpr::SExpr,
    pub span: Span,
}

/// The parameter list of a `def` or `rule`.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub params: Vec<Param>,
    /// `(x : T)` (one parameter in single parentheses) or a list `((x : S) (y : T))` / `()`.
    pub form: ParamsForm,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamsForm {
    /// `(x : T)`
    Single,
    /// `()`, `((x : T))`, `((x : S) (y : T))`
    List,
}

/// `x : T`
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Type {
    pub kind: TypeKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeKind {
    Bool,
    Integer,
    Float,
    String,
    /// `(Tuple T1 .. Tn)`, n >= 0.
    Tuple(Vec<Type>),
    /// `(Tensor n T)`; `(Vec T)` is read as `Tensor 1 T`.
    Tensor(usize, Box<Type>),
    /// `(Lam S T)`
    Lam(Box<Type>, Box<Type>),
    /// `(LM S T)`
    LM(Box<Type>, Box<Type>),
}

/// The derivations that may wrap a function name: `[D f]`, `[rev f]`, ...
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Derivation {
    /// `[D f] : S -> LM S T`, the full Jacobian.
    D,
    /// `[fwd f] : (S, dS) -> dT`
    Fwd,
    /// `[rev f] : (S, dT) -> dS`
    Rev,
    /// `[CL f]`: f through the categorical language and back.
    CL,
    /// `[shape f] : S -> st(T)`
    Shape,
    /// `[suffwdpass f] : S -> (T, residuals)`
    SufFwdPass,
    /// `[sufrevpass [f S]] : (dT, residuals) -> dS`
    SufRevPass,
    /// `[sufrev f] : (S, dT) -> dS`
    SufRev,
    /// `[jac f] : S -> Tensor 2 Float`, the dense Jacobian (not in the
    /// original): rows index T's tangent, columns S's, both flattened.
    Jac,
    /// `[jac1 f] : S -> Tensor 2 Float`, the Jacobian with respect to f's
    /// first parameter only, the others held constant (not in the original).
    Jac1,
    /// `[jacsparse f] : S -> (Tuple (Tuple Integer Integer) (Vec Integer)
    /// (Vec Integer) (Vec Float))`, the Jacobian in compressed sparse row
    /// form (shape, row offsets, column indices, values), computed block by
    /// block from the inputs each output element reads (not in the original).
    JacSparse,
    /// `[jacsparse1 f]`: the sparse Jacobian with respect to f's first
    /// parameter only, as `[jac1 f]` is to `[jac f]` (not in the original).
    JacSparse1,
    /// `[fwdt f] : (S, dS) -> (T, dT)`: the value and its tangent from one
    /// call (the original's tupled AD had this name). ksc's forward mode
    /// calls it where it needs both, so that a recursive call does not
    /// compute its callee's primal twice.
    FwdT,
    /// `[suffwdtape f] : (S, Tape) -> (T, Tape)` with `Tape = Vec (Tuple T
    /// (Vec Integer))`: f's value, with the record of this call (its result
    /// and the tape positions of the records of its recursive calls)
    /// appended to the tape after theirs (not in the original). The
    /// forward pass `[suffwdpass f]` runs it from an empty tape.
    SufFwdTape,
    /// `[sufrevacc [f S]] : (dT, residuals, dS) -> dS`: `[sufrevpass f]`'s
    /// cotangent added to the accumulator `dS` it is given, which it owns
    /// (native code adds into it in place): the reverse pass of a
    /// recursive f threads its cotangent of the vectors it passes on
    /// unchanged through its recursive calls (not in the original).
    SufRevAcc,
}

impl Derivation {
    pub const ALL: [Derivation; 15] = [
        Derivation::D,
        Derivation::Fwd,
        Derivation::Rev,
        Derivation::CL,
        Derivation::Shape,
        Derivation::SufFwdPass,
        Derivation::SufRevPass,
        Derivation::SufRev,
        Derivation::Jac,
        Derivation::Jac1,
        Derivation::JacSparse,
        Derivation::JacSparse1,
        Derivation::FwdT,
        Derivation::SufFwdTape,
        Derivation::SufRevAcc,
    ];
    pub fn keyword(self) -> &'static str {
        match self {
            Derivation::D => "D",
            Derivation::Fwd => "fwd",
            Derivation::Rev => "rev",
            Derivation::CL => "CL",
            Derivation::Shape => "shape",
            Derivation::SufFwdPass => "suffwdpass",
            Derivation::SufRevPass => "sufrevpass",
            Derivation::SufRev => "sufrev",
            Derivation::Jac => "jac",
            Derivation::Jac1 => "jac1",
            Derivation::JacSparse => "jacsparse",
            Derivation::JacSparse1 => "jacsparse1",
            Derivation::FwdT => "fwdt",
            Derivation::SufFwdTape => "suffwdtape",
            Derivation::SufRevAcc => "sufrevacc",
        }
    }
    pub fn from_keyword(s: &str) -> Option<Derivation> {
        Derivation::ALL.into_iter().find(|d| d.keyword() == s)
    }
}

/// A function name as written at a definition or a call:
/// `f`, `[f Float]`, `[rev f]`, `[shape [rev [f (Tuple Float Integer)]]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct FunName {
    pub kind: FunNameKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FunNameKind {
    /// `f` or `[f T]`: a base name with an optional explicit base argument type.
    Base { name: Ident, base_ty: Option<Type> },
    /// `[DERIV inner]`
    Derived { derivation: Derivation, inner: Box<FunName> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Integer(i64),
    Float(f64),
    Bool(bool),
    String(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Lit(Literal),
    Var(Ident),
    /// `(f e1 .. en)`; `args` are the written arguments (the call means `f` applied
    /// to `e1` when n = 1 and to `(tuple e1 .. en)` otherwise).
    Call {
        fun: FunName,
        args: Vec<Expr>,
    },
    /// `(tuple e1 .. en)`
    Tuple(Vec<Expr>),
    /// `(let (p e) body)` or `(let ((p1 e1) ..) body)`: bindings are sequential.
    Let {
        bindings: Vec<Binding>,
        body: Box<Expr>,
    },
    If {
        cond: Box<Expr>,
        then_branch: Box<Expr>,
        else_branch: Box<Expr>,
    },
    Assert {
        cond: Box<Expr>,
        body: Box<Expr>,
    },
    /// `(lam (x : T) body)`
    Lam {
        param: Param,
        body: Box<Expr>,
    },
    /// `($dummy T)`
    Dummy(Type),
}

/// One `let` binding: `x e` or `(a b c) e`.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub pat: Pattern,
    pub rhs: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    Var(Ident),
    /// A flat tuple pattern `(a b c)`; its span covers the parentheses.
    Tuple(Vec<Ident>, Span),
}

// --------------------------------------------------------------------------
// Rendering back to `.ks` syntax (for messages and tests).

impl std::fmt::Display for Derivation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.keyword())
    }
}

/// Renders a type in atomic position, e.g. `Float`, `(Vec Float)`, `(Tensor 2 Float)`.
impl std::fmt::Display for TypeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TypeKind::Bool => f.write_str("Bool"),
            TypeKind::Integer => f.write_str("Integer"),
            TypeKind::Float => f.write_str("Float"),
            TypeKind::String => f.write_str("String"),
            TypeKind::Tuple(ts) => {
                f.write_str("(Tuple")?;
                for t in ts {
                    write!(f, " {t}")?;
                }
                f.write_str(")")
            }
            TypeKind::Tensor(1, t) => write!(f, "(Vec {t})"),
            TypeKind::Tensor(n, t) => write!(f, "(Tensor {n} {t})"),
            TypeKind::Lam(s, t) => write!(f, "(Lam {s} {t})"),
            TypeKind::LM(s, t) => write!(f, "(LM {s} {t})"),
        }
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.kind.fmt(f)
    }
}

/// Renders a function name as written: `f`, `[f Float]`, `[rev [f Float]]`.
impl std::fmt::Display for FunName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            FunNameKind::Base { name, base_ty: None } => f.write_str(&name.text),
            FunNameKind::Base { name, base_ty: Some(t) } => write!(f, "[{} {t}]", name.text),
            FunNameKind::Derived { derivation, inner } => write!(f, "[{derivation} {inner}]"),
        }
    }
}
