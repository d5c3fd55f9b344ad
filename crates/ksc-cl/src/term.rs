//! CL terms (seed 003 figure 9, with the implementation's `Fold`) and their
//! printed form.
//!
//! A term `c : S ⇒ T` is a morphism: applied to a value of type `S` it gives
//! a value of type `T`. Inside a function body the value a term is applied
//! to is the *environment*: the tuple of the variables in scope, always a
//! tuple (`()` for none, a 1-tuple for one), so that extending it by a
//! binder (`S ▷ R`, for `let`, `build`, `fold` and lambdas) is appending a
//! component.

use std::fmt::{self, Write};

use ksc_ir::{Callee, Lit, Prim, Type, Var};

/// A CL term.
#[derive(Clone, Debug, PartialEq)]
pub enum Cl {
    /// `I : S ⇒ S`, the identity.
    Id,
    /// `K(k) : () ⇒ τ(k)`, a constant.
    Konst(Konst),
    /// `P[i1, .., im / n] : (s1, .., sn) ⇒ (s_i1, .., s_im)`, pruning.
    /// `keep` holds 0-based positions; the printed form is 1-based, as in
    /// the paper.
    Prune { keep: Vec<usize>, of: usize },
    /// `F(f) : S ⇒ T`, a function constant: a global function or a
    /// first-order primitive (a variable is the projection `get$i$n` of the
    /// environment).
    Fun(Fun),
    /// `c1 ; c2`: `c1` first, then `c2` on its result.
    Comp(Box<Cl>, Box<Cl>),
    /// `(c1, .., cn) : S ⇒ (T1, .., Tn)`.
    Tuple(Vec<Cl>),
    /// `IF(c1, c2, c3)`.
    If(Box<Cl>, Box<Cl>, Box<Cl>),
    /// `L(x, c_r, c_b)`: `c_b` runs on the environment extended by `x`.
    Let { var: Var, ty: Type, rhs: Box<Cl>, body: Box<Cl> },
    /// `B(c_s, i, c_e)`: `c_e` runs on the environment extended by the
    /// index `i` (an Integer, or a tuple of them for rank > 1).
    Build { size: Box<Cl>, var: Var, ty: Type, elem: Box<Cl> },
    /// `Fold(x, c_f, c_acc, c_v)` (the implementation's `CLFold`, seed 003
    /// section 8): `c_f` runs on the environment extended by `x = (acc,
    /// element)`.
    Fold { var: Var, ty: Type, step: Box<Cl>, acc: Box<Cl>, vec: Box<Cl> },
    /// `assert c1 c2` (not in the paper, whose translation drops asserts):
    /// fails unless `c1` is true, else `c2`.
    Assert(Box<Cl>, Box<Cl>),
    /// A primitive with lambda arguments other than `build` and `fold`
    /// (`map`, `map2`, `diag`, `$scan`, ...; not in the paper): the
    /// primitive applied to its arguments, each a term on the environment
    /// or a lambda whose body runs on the environment extended by its
    /// binder. `ty` is its result type.
    Prim { prim: Prim, args: Vec<ClArg>, ty: Type },
}

/// An argument of [`Cl::Prim`].
#[derive(Clone, Debug, PartialEq)]
pub enum ClArg {
    Term(Cl),
    Lam(ClLam),
}

/// `λx. c`: `c` runs on the environment extended by `x : ty`, giving a
/// value of type `ret`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClLam {
    pub var: Var,
    pub ty: Type,
    pub ret: Type,
    pub body: Cl,
}

/// The constant of `K(k)`.
#[derive(Clone, Debug, PartialEq)]
pub enum Konst {
    Lit(Lit),
    /// `$dummy T`, the default value of `T`.
    Dummy(Type),
}

impl Konst {
    pub fn ty(&self) -> Type {
        match self {
            Konst::Lit(l) => l.ty(),
            Konst::Dummy(t) => t.clone(),
        }
    }
}

/// The function of `F(f)`, with the types it is used at.
#[derive(Clone, Debug, PartialEq)]
pub struct Fun {
    pub callee: Callee,
    /// The argument type. For the primitives that take their arguments as
    /// written (`print`, `Vec_init`, `lmVCat`, `lmHCat`), the tuple of the
    /// arguments, one component per argument written.
    pub src: Type,
    pub tgt: Type,
}

impl Fun {
    /// `π_{i,n}`: component `i` (0-based) of an n-tuple of type `tuple`.
    pub fn projection(i: usize, tuple: &Type) -> Option<Fun> {
        let Type::Tuple(ts) = tuple else { return None };
        let tgt = ts.get(i)?.clone();
        let prim = Prim::Get { index: u32::try_from(i + 1).ok()?, arity: u32::try_from(ts.len()).ok()? };
        Some(Fun { callee: Callee::Prim(prim), src: tuple.clone(), tgt })
    }
}

/// The positions of a primitive's arguments that are lambdas.
pub fn lambda_positions(p: Prim) -> &'static [usize] {
    match p {
        Prim::Build | Prim::Sumbuild => &[1],
        Prim::BuildSum | Prim::Diag | Prim::BuildFromSparse | Prim::BuildFromSparseTupled => &[2],
        Prim::Fold | Prim::Scan | Prim::ScanSum | Prim::Map | Prim::Map2 | Prim::Apply => &[0],
        Prim::Check => &[0, 1],
        Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks => &[1, 2],
        _ => &[],
    }
}

impl Cl {
    pub fn comp(first: Cl, then: Cl) -> Cl {
        Cl::Comp(Box::new(first), Box::new(then))
    }

    /// The number of nodes of the term.
    pub fn size(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_| n += 1);
        n
    }

    /// Calls `f` on every sub-term, parents first.
    pub fn visit(&self, f: &mut dyn FnMut(&Cl)) {
        f(self);
        match self {
            Cl::Id | Cl::Konst(_) | Cl::Prune { .. } | Cl::Fun(_) => {}
            Cl::Comp(a, b) | Cl::Assert(a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Cl::Tuple(cs) => cs.iter().for_each(|c| c.visit(f)),
            Cl::If(a, b, c) => {
                a.visit(f);
                b.visit(f);
                c.visit(f);
            }
            Cl::Let { rhs, body, .. } => {
                rhs.visit(f);
                body.visit(f);
            }
            Cl::Build { size, elem, .. } => {
                size.visit(f);
                elem.visit(f);
            }
            Cl::Fold { step, acc, vec, .. } => {
                step.visit(f);
                acc.visit(f);
                vec.visit(f);
            }
            Cl::Prim { args, .. } => {
                for a in args {
                    match a {
                        ClArg::Term(c) => c.visit(f),
                        ClArg::Lam(l) => l.body.visit(f),
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Printing

/// The width the printed form aims for.
const WIDTH: usize = 90;

/// A printed term before layout: an atom, or a list whose first `head`
/// elements stay on the first line when it is broken.
enum Doc {
    Atom(String),
    List { head: usize, items: Vec<Doc> },
}

impl Doc {
    fn atom(s: impl Into<String>) -> Doc {
        Doc::Atom(s.into())
    }

    fn list(head: usize, items: Vec<Doc>) -> Doc {
        Doc::List { head, items }
    }

    fn flat(&self, out: &mut String) {
        match self {
            Doc::Atom(s) => out.push_str(s),
            Doc::List { items, .. } => {
                out.push('(');
                for (i, d) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    d.flat(out);
                }
                out.push(')');
            }
        }
    }

    fn flat_len(&self) -> usize {
        match self {
            Doc::Atom(s) => s.chars().count(),
            Doc::List { items, .. } => 1 + items.iter().map(|d| d.flat_len() + 1).sum::<usize>(),
        }
    }

    fn layout(&self, indent: usize, out: &mut String) {
        match self {
            Doc::List { head, items } if indent + self.flat_len() > WIDTH && items.len() > *head => {
                out.push('(');
                for (i, d) in items.iter().take(*head).enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    d.flat(out);
                }
                for d in &items[*head..] {
                    out.push('\n');
                    out.extend(std::iter::repeat_n(' ', indent + 2));
                    d.layout(indent + 2, out);
                }
                out.push(')');
            }
            d => d.flat(out),
        }
    }
}

fn binder(var: &str, ty: &Type) -> Doc {
    Doc::atom(format!("({var} : {})", ksc_ir::print::compound_type(ty)))
}

fn konst(k: &Konst) -> String {
    match k {
        Konst::Lit(l) => ksc_ir::print::print_lit(l),
        Konst::Dummy(t) => format!("($dummy {t})"),
    }
}

fn callee(c: &Callee) -> String {
    match c {
        Callee::Prim(p) => p.to_string(),
        Callee::Fun(f) => f.to_string(),
    }
}

impl Cl {
    fn doc(&self) -> Doc {
        match self {
            Cl::Id => Doc::atom("id"),
            Cl::Konst(k) => Doc::list(1, vec![Doc::atom("K"), Doc::atom(konst(k))]),
            Cl::Prune { keep, of } => {
                let mut items = vec![Doc::atom("P")];
                items.extend(keep.iter().map(|i| Doc::atom((i + 1).to_string())));
                items.push(Doc::atom("/"));
                items.push(Doc::atom(of.to_string()));
                Doc::list(items.len(), items)
            }
            Cl::Fun(f) => Doc::list(2, vec![Doc::atom("F"), Doc::atom(callee(&f.callee))]),
            Cl::Comp(..) => {
                // Composition is associative: a chain prints as one list.
                let mut stages = Vec::new();
                self.stages(&mut stages);
                let mut items = vec![Doc::atom("comp")];
                items.extend(stages.into_iter().map(Cl::doc));
                Doc::list(1, items)
            }
            Cl::Tuple(cs) => {
                let mut items = vec![Doc::atom("tuple")];
                items.extend(cs.iter().map(Cl::doc));
                Doc::list(1, items)
            }
            Cl::If(a, b, c) => Doc::list(1, vec![Doc::atom("if"), a.doc(), b.doc(), c.doc()]),
            Cl::Let { var, ty, rhs, body } => {
                Doc::list(2, vec![Doc::atom("let"), binder(var, ty), rhs.doc(), body.doc()])
            }
            Cl::Build { size, var, ty, elem } => {
                Doc::list(1, vec![Doc::atom("build"), size.doc(), binder(var, ty), elem.doc()])
            }
            Cl::Fold { var, ty, step, acc, vec } => {
                Doc::list(2, vec![Doc::atom("fold"), binder(var, ty), step.doc(), acc.doc(), vec.doc()])
            }
            Cl::Assert(a, b) => Doc::list(1, vec![Doc::atom("assert"), a.doc(), b.doc()]),
            Cl::Prim { prim, args, .. } => {
                let mut items = vec![Doc::atom(prim.to_string())];
                for a in args {
                    items.push(match a {
                        ClArg::Term(c) => c.doc(),
                        ClArg::Lam(l) => Doc::list(2, vec![Doc::atom("lam"), binder(&l.var, &l.ty), l.body.doc()]),
                    });
                }
                Doc::list(1, items)
            }
        }
    }

    /// The stages of a composition chain, first to last.
    fn stages<'a>(&'a self, out: &mut Vec<&'a Cl>) {
        match self {
            Cl::Comp(a, b) => {
                a.stages(out);
                b.stages(out);
            }
            c => out.push(c),
        }
    }

    /// The printed form, laid out within about 90 columns.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        self.doc().layout(0, &mut out);
        out
    }

    /// The printed form on one line.
    pub fn flat(&self) -> String {
        let mut out = String::new();
        self.doc().flat(&mut out);
        out
    }

    /// The printed form on one line, cut to about `n` characters (for
    /// messages).
    pub fn short(&self, n: usize) -> String {
        let s = self.flat();
        if s.chars().count() <= n {
            return s;
        }
        let mut out: String = s.chars().take(n).collect();
        let _ = write!(out, " ...");
        out
    }
}

/// The one-line printed form.
impl fmt::Display for Cl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.flat())
    }
}
