//! The pretty printer: Core IR back to valid `.ks` text.
//!
//! Reading the printed text gives back the same program (tested on every
//! example). Lines are kept within [`WIDTH`] columns where the structure
//! allows; a form that does not fit is broken after its head.

use std::fmt::Write;

use crate::core::{
    let_chain, Body, Callee, Decl, Def, Edef, Expr, ExprId, Gdef, Lit, Param, Pat, Program, Rule, StrategyDecl,
};
use crate::types::Type;

/// The line width the printer aims for.
pub const WIDTH: usize = 90;

/// The deepest indentation: a form nested deeper starts at this column
/// (plus the few its own head adds), so a deep nest prints in space linear
/// in its size. `[rev f]` of a doubling chain of calls (`f_k x = f_(k-1)
/// (f_(k-1) x)`, k = 12) is a nest of 4,096 calls of `[rev f0]`, each the
/// cotangent argument of the one before: indented a step per level, its
/// 12,000 lines took 33 MB.
const DEEPEST: usize = 60;

pub fn print_program(p: &Program) -> String {
    let mut out = String::new();
    for (i, d) in p.decls.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&print_decl(d));
        out.push('\n');
    }
    out
}

pub fn print_decl(d: &Decl) -> String {
    match d {
        Decl::Def(d) => print_def(d),
        Decl::Edef(Edef { name, ret_ty, arg_ty }) => format!("(edef {name} {ret_ty} {arg_ty})"),
        Decl::Gdef(Gdef { derivation, fun, schedule }) => {
            let schedule = schedule.as_ref().map(|s| format!(" {s}")).unwrap_or_default();
            format!("(gdef {} {fun}{schedule})", derivation.keyword())
        }
        Decl::Rule(r) => print_rule(r),
        Decl::Strategy(s) => print_strategy(s),
    }
}

pub fn print_def(d: &Def) -> String {
    let head = format!("(def {} {} {}", d.name, d.ret_ty, print_params(&d.params));
    let mut p = Printer { body: &d.body, out: String::new() };
    p.out.push_str(&head);
    p.out.push_str("\n  ");
    p.expr(d.root, 2);
    p.out.push(')');
    p.out
}

fn print_strategy(s: &StrategyDecl) -> String {
    let head = if s.params.is_empty() { s.name.clone() } else { format!("({} {})", s.name, s.params.join(" ")) };
    format!("(strategy {head}\n  {})", s.body)
}

fn print_rule(r: &Rule) -> String {
    let mut p = Printer { body: &r.body, out: String::new() };
    write!(p.out, "(rule {} {}", quote_string(&r.name), print_params(&r.params)).unwrap();
    p.out.push_str("\n  ");
    p.expr(r.lhs, 2);
    p.out.push_str("\n  ");
    p.expr(r.rhs, 2);
    p.out.push(')');
    p.out
}

/// `(x : T)` for one parameter, `((x : S) (y : T))` or `()` otherwise.
pub fn print_params(params: &[Param]) -> String {
    let one = |p: &Param| format!("({} : {})", p.name, compound_type(&p.ty));
    if params.len() == 1 {
        one(&params[0])
    } else {
        let inner: Vec<String> = params.iter().map(one).collect();
        format!("({})", inner.join(" "))
    }
}

/// A type in parameter position, without its outer parentheses: `Vec Float`.
pub fn compound_type(t: &Type) -> String {
    let s = t.to_string();
    match t {
        Type::Tuple(_) | Type::Tensor(..) | Type::Lam(..) | Type::LM(..) => s[1..s.len() - 1].to_string(),
        _ => s,
    }
}

/// Print one expression of a body, as it would appear in a program.
pub fn print_expr(body: &Body, e: ExprId) -> String {
    let mut p = Printer { body, out: String::new() };
    p.expr(e, 0);
    p.out
}

pub fn print_lit(l: &Lit) -> String {
    match l {
        Lit::Integer(i) => i.to_string(),
        Lit::Float(f) => print_float(*f),
        Lit::Bool(b) => b.to_string(),
        Lit::String(s) => quote_string(s),
    }
}

/// A float literal that reads back as the same bits: `1.0`, `-1.5e-7`.
/// Non-finite values have no literal syntax and print as a division.
pub fn print_float(f: f64) -> String {
    if f.is_nan() {
        "(div 0.0 0.0)".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "(div 1.0 0.0)" } else { "(div -1.0 0.0)" }.to_string()
    } else {
        // Rust's shortest round-trip form: `2.0`, `1e16`, `-1.5e-7`.
        format!("{f:?}")
    }
}

/// A string literal in Haskell syntax (the reader's escapes).
pub fn quote_string(s: &str) -> String {
    let mut out = String::from("\"");
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                write!(out, "\\{}", c as u32).unwrap();
                // `\12` followed by a digit would read as one longer escape.
                if chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    out.push_str("\\&");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Printer<'a> {
    body: &'a Body,
    out: String,
}

impl Printer<'_> {
    /// The expression on one line, or None if it would exceed `budget` chars.
    fn flat(&self, e: ExprId, budget: usize) -> Option<String> {
        let mut s = String::new();
        self.flat_into(e, &mut s, budget)?;
        Some(s)
    }

    fn flat_into(&self, e: ExprId, s: &mut String, budget: usize) -> Option<()> {
        let check = |s: &String| (s.len() <= budget).then_some(());
        match &self.body.exprs[e] {
            Expr::Lit(l) => {
                let lit = print_lit(l);
                s.push_str(if follows_sign_symbol(s, &lit) { "+" } else { "" });
                s.push_str(&lit);
            }
            Expr::Var(v) => s.push_str(v),
            Expr::Dummy(t) => write!(s, "($dummy {t})").unwrap(),
            Expr::Call(f, arg) => {
                s.push('(');
                s.push_str(&callee_name(f));
                for a in self.body.call_args(*arg) {
                    s.push(' ');
                    check(s)?;
                    self.flat_into(a, s, budget)?;
                }
                s.push(')');
            }
            Expr::Tuple(es) => {
                s.push_str("(tuple");
                for &a in es {
                    s.push(' ');
                    check(s)?;
                    self.flat_into(a, s, budget)?;
                }
                s.push(')');
            }
            Expr::Let(..) => {
                let (binds, b) = let_chain(self.body, e);
                s.push_str("(let ");
                let grouped = can_group(self.body, &binds);
                if grouped {
                    s.push('(');
                }
                for (i, (p, r)) in binds.iter().enumerate() {
                    if !grouped && i > 0 {
                        s.push_str(" (let ");
                    }
                    if i > 0 && grouped {
                        s.push(' ');
                    }
                    write!(s, "({} ", pat_string(p)).unwrap();
                    check(s)?;
                    self.flat_into(*r, s, budget)?;
                    s.push(')');
                }
                if grouped {
                    s.push(')');
                }
                s.push(' ');
                check(s)?;
                self.flat_into(b, s, budget)?;
                let closes = if grouped { 1 } else { binds.len() };
                s.push_str(&")".repeat(closes));
            }
            Expr::If(c, t, f) => {
                s.push_str("(if ");
                for (i, x) in [c, t, f].into_iter().enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    check(s)?;
                    self.flat_into(*x, s, budget)?;
                }
                s.push(')');
            }
            Expr::Assert(c, b, _) => {
                s.push_str("(assert ");
                self.flat_into(*c, s, budget)?;
                s.push(' ');
                check(s)?;
                self.flat_into(*b, s, budget)?;
                s.push(')');
            }
            Expr::Lam(v, t, b) => {
                write!(s, "(lam ({v} : {}) ", compound_type(t)).unwrap();
                check(s)?;
                self.flat_into(*b, s, budget)?;
                s.push(')');
            }
        }
        check(s)
    }

    /// Print `e` at the current position, which is at column `col`.
    fn expr(&mut self, e: ExprId, col: usize) {
        let col = col.min(DEEPEST);
        if let Some(s) = self.flat(e, WIDTH.saturating_sub(col).max(30)) {
            self.push_flat(&s);
            return;
        }
        let ind = |n: usize| format!("\n{}", " ".repeat(n.min(DEEPEST + 8)));
        match &self.body.exprs[e] {
            Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) => {
                let s = self.flat(e, usize::MAX).unwrap_or_default();
                self.out.push_str(&s)
            }
            Expr::Call(f, arg) => {
                let name = callee_name(f);
                write!(self.out, "({name}").unwrap();
                let args = self.body.call_args(*arg);
                // Short arguments stay on the head's line; the rest go below it.
                let mut c = col + 1 + name.len();
                let mut broke = false;
                for a in args {
                    match self.flat(a, 30).filter(|s| !broke && c + 1 + s.len() <= WIDTH) {
                        Some(s) => {
                            self.out.push(' ');
                            self.push_flat(&s);
                            c += 1 + s.len();
                        }
                        None => {
                            broke = true;
                            self.out.push_str(&ind(col + 2));
                            self.expr(a, col + 2);
                        }
                    }
                }
                self.out.push(')');
            }
            Expr::Tuple(es) => {
                self.out.push_str("(tuple");
                for &a in es {
                    self.out.push_str(&ind(col + 2));
                    self.expr(a, col + 2);
                }
                self.out.push(')');
            }
            Expr::Let(..) => {
                let (binds, b) = let_chain(self.body, e);
                let grouped = can_group(self.body, &binds);
                if grouped {
                    self.out.push_str("(let (");
                    for (i, (p, r)) in binds.iter().enumerate() {
                        if i > 0 {
                            self.out.push_str(&ind(col + 6));
                        }
                        self.binding(p, *r, col + 6);
                    }
                    self.out.push(')');
                    self.out.push_str(&ind(col + 2));
                    self.expr(b, col + 2);
                    self.out.push(')');
                } else {
                    for (i, (p, r)) in binds.iter().enumerate() {
                        if i > 0 {
                            self.out.push_str(&ind(col + 2 * i));
                        }
                        self.out.push_str("(let ");
                        self.binding(p, *r, col + 2 * i + 5);
                    }
                    let c = col + 2 * binds.len();
                    self.out.push_str(&ind(c));
                    self.expr(b, c);
                    self.out.push_str(&")".repeat(binds.len()));
                }
            }
            Expr::If(c, t, f) => {
                self.out.push_str("(if ");
                self.expr(*c, col + 4);
                for x in [t, f] {
                    self.out.push_str(&ind(col + 4));
                    self.expr(*x, col + 4);
                }
                self.out.push(')');
            }
            Expr::Assert(c, b, _) => {
                self.out.push_str("(assert ");
                self.expr(*c, col + 8);
                self.out.push_str(&ind(col + 2));
                self.expr(*b, col + 2);
                self.out.push(')');
            }
            Expr::Lam(v, t, b) => {
                write!(self.out, "(lam ({v} : {})", compound_type(t)).unwrap();
                self.out.push_str(&ind(col + 2));
                self.expr(*b, col + 2);
                self.out.push(')');
            }
        }
    }

    fn push_flat(&mut self, s: &str) {
        if follows_sign_symbol(&self.out, s) {
            self.out.push('+');
        }
        self.out.push_str(s);
    }

    fn binding(&mut self, p: &Pat, r: ExprId, col: usize) {
        let col = col.min(DEEPEST);
        let ps = pat_string(p);
        write!(self.out, "({ps} ").unwrap();
        let c = col + ps.len() + 2;
        if self.flat(r, WIDTH.saturating_sub(c)).is_some() || c < 40 {
            self.expr(r, c);
        } else {
            self.out.push_str(&format!("\n{}", " ".repeat(col + 2)));
            self.expr(r, col + 2);
        }
        self.out.push(')');
    }
}

/// May these nested lets print as one binding list? Not when that would be
/// read back differently: `(let ((x y) (z e)) b)` reads as the tuple pattern
/// `(x y) = (z e)` (knossos-reference.md 1.4), so a first binding of a
/// variable to a variable in a list of exactly two stays nested.
fn can_group(body: &Body, binds: &[(&Pat, ExprId)]) -> bool {
    match binds {
        [] | [_] => false,
        [(Pat::Var(_), r), _] => !matches!(body.exprs[*r], Expr::Var(_)),
        _ => true,
    }
}

/// Would `next`, printed after `before`, be read as one signed literal with a
/// preceding variable named `-` or `+`? (The reader reads `- 3` as -3, as the
/// original did.) Then the literal must be written with an explicit `+`.
fn follows_sign_symbol(before: &str, next: &str) -> bool {
    if !next.starts_with(|c: char| c.is_ascii_digit()) {
        return false;
    }
    let t = before.trim_end();
    let Some(rest) = t.strip_suffix('-').or_else(|| t.strip_suffix('+')) else { return false };
    rest.is_empty() || rest.ends_with(|c: char| c.is_whitespace() || c == '(' || c == '[')
}

fn pat_string(p: &Pat) -> String {
    match p {
        Pat::Var(v) => v.clone(),
        Pat::Tuple(vs) => format!("({})", vs.join(" ")),
    }
}

fn callee_name(c: &Callee) -> String {
    match c {
        Callee::Prim(p) => p.to_string(),
        Callee::Fun(f) => f.to_string(),
    }
}
