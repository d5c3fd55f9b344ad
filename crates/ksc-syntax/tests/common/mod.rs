//! Helpers shared by the integration tests: a canonical rendering of the
//! syntax tree as valid `.ks` text (so tests can compare structure as text and
//! check that printing and re-reading gives the same tree), span checks, and
//! realistic sample programs that use every construct.

#![allow(dead_code)]

use ksc_syntax::ast::*;
use ksc_syntax::{Span, SyntaxError};

/// Canonical rendering of an expression as `.ks` text: every list fully
/// parenthesised, literals with their kind visible (`1` Integer, `1.0` Float).
pub fn expr(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Lit(Literal::Integer(n)) => format!("{n}"),
        ExprKind::Lit(Literal::Float(x)) => format!("{x:?}"),
        ExprKind::Lit(Literal::Bool(b)) => format!("{b}"),
        ExprKind::Lit(Literal::String(s)) => ks_string(s),
        ExprKind::Var(v) => v.text.clone(),
        ExprKind::Call { fun, args } => list(std::iter::once(fun.to_string()).chain(seq(args.iter()))),
        ExprKind::Tuple(es) => list(std::iter::once("tuple".to_string()).chain(seq(es.iter()))),
        ExprKind::Let { bindings, body } => {
            let bs: Vec<String> = bindings.iter().map(|b| format!("({} {})", pattern(&b.pat), expr(&b.rhs))).collect();
            format!("(let ({}) {})", bs.join(" "), expr(body))
        }
        ExprKind::If { cond, then_branch, else_branch } => list(
            std::iter::once("if".to_string()).chain(seq([cond, then_branch, else_branch].into_iter().map(|e| &**e))),
        ),
        ExprKind::Assert { cond, body } => {
            list(std::iter::once("assert".to_string()).chain(seq([&**cond, &**body].into_iter())))
        }
        ExprKind::Lam { param: p, body } => format!("(lam {} {})", param(p), expr(body)),
        ExprKind::Dummy(t) => format!("($dummy {t})"),
    }
}

/// Render sibling expressions. A variable named `-` or `+` followed by a
/// non-negative number would be read back as one signed literal (`- 3` is
/// -3), so such a number is written with an explicit `+`.
pub fn seq<'a>(es: impl Iterator<Item = &'a Expr>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut after_sign = false;
    for e in es {
        let text = expr(e);
        let unsigned_number =
            matches!(e.kind, ExprKind::Lit(Literal::Integer(_) | Literal::Float(_))) && !text.starts_with('-');
        out.push(if after_sign && unsigned_number { format!("+{text}") } else { text });
        after_sign = matches!(&e.kind, ExprKind::Var(v) if v.text == "-" || v.text == "+");
    }
    out
}

/// A string literal in `.ks` (Haskell) syntax.
pub fn ks_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\{}\\&", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list(items: impl Iterator<Item = String>) -> String {
    format!("({})", items.collect::<Vec<_>>().join(" "))
}

pub fn pattern(p: &Pattern) -> String {
    match p {
        Pattern::Var(v) => v.text.clone(),
        Pattern::Tuple(vs, _) => list(vs.iter().map(|v| v.text.clone())),
    }
}

pub fn param(p: &Param) -> String {
    format!("({} : {})", p.name.text, p.ty)
}

pub fn params(ps: &Params) -> String {
    match ps.form {
        ParamsForm::Single => param(&ps.params[0]),
        ParamsForm::List => list(ps.params.iter().map(param)),
    }
}

/// Canonical rendering of a declaration.
pub fn decl(d: &Decl) -> String {
    match d {
        Decl::Def(d) => format!("(def {} {} {} {})", d.name, d.ret_ty, params(&d.params), expr(&d.body)),
        Decl::Edef(d) => format!("(edef {} {} {})", d.name, d.ret_ty, d.arg_ty),
        Decl::Gdef(d) => match &d.schedule {
            None => format!("(gdef {} {})", d.derivation, d.fun),
            Some(s) => format!("(gdef {} {} {})", d.derivation, d.fun, s.text),
        },
        Decl::Rule(r) => {
            let sides = seq([&r.lhs, &r.rhs].into_iter()).join(" ");
            format!("(rule {} {} {sides})", ks_string(&r.name), params(&r.params))
        }
        Decl::Strategy(s) => {
            let head = if s.params.is_empty() {
                s.name.text.clone()
            } else {
                list(std::iter::once(&s.name).chain(&s.params).map(|p| p.text.clone()))
            };
            format!("(strategy {head} {})", sexpr(&s.body))
        }
    }
}

/// An S-expression as read, in canonical layout.
fn sexpr(e: &ksc_syntax::sexpr::SExpr) -> String {
    use ksc_syntax::sexpr::{Atom, SExprKind};
    match &e.kind {
        SExprKind::Atom(Atom::Symbol(s)) => s.clone(),
        SExprKind::Atom(Atom::String(s)) => ks_string(s),
        SExprKind::Atom(Atom::Integer(i)) => i.to_string(),
        SExprKind::Atom(Atom::Float(x)) => format!("{x:?}"),
        SExprKind::Atom(Atom::Invalid) => "?".to_string(),
        SExprKind::List { items, .. } => list(items.iter().map(sexpr)),
    }
}

/// Parse text that must have no errors.
pub fn parse_ok(text: &str) -> SourceFile {
    let (file, errors) = ksc_syntax::parse_source(text);
    assert!(errors.is_empty(), "unexpected errors for {text:?}:\n{}", render_errors(text, &errors));
    file
}

/// Parse text that must have no errors and consist of one declaration; render it.
pub fn one_decl(text: &str) -> String {
    let file = parse_ok(text);
    assert_eq!(file.decls.len(), 1, "{text:?}");
    decl(&file.decls[0])
}

/// The body of a single `(def f Float () BODY)`-style text, rendered.
pub fn body(expr_text: &str) -> String {
    let file = parse_ok(&format!("(def f Float () {expr_text})"));
    match &file.decls[0] {
        Decl::Def(d) => expr(&d.body),
        other => panic!("not a def: {other:?}"),
    }
}

/// Errors of parsing `text`, as (text under the span, message).
pub fn errors(text: &str) -> Vec<(String, String)> {
    let (_, errs) = ksc_syntax::parse_source(text);
    errs.iter().map(|e| (text.get(e.span.range()).unwrap_or("<bad span>").to_string(), e.message.clone())).collect()
}

/// The single error of an expression body `(def f Float () BODY)`.
pub fn body_error(expr_text: &str) -> (String, String) {
    let text = format!("(def f Float () {expr_text})");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "expected one error for {text:?}, got {errs:?}");
    errs.into_iter().next().unwrap_or_default()
}

pub fn render_errors(text: &str, errors: &[SyntaxError]) -> String {
    errors
        .iter()
        .map(|e| format!("  {:?} `{}`: {} {:?}\n", e.span, text.get(e.span.range()).unwrap_or("?"), e.message, e.note))
        .collect()
}

/// Whether a span lies within `text` on char boundaries.
pub fn span_ok(text: &str, span: Span) -> bool {
    let (s, e) = (span.start as usize, span.end as usize);
    s <= e && e <= text.len() && text.is_char_boundary(s) && text.is_char_boundary(e)
}

/// Every span of the tree (declarations, names, types, expressions).
pub fn all_spans(file: &SourceFile) -> Vec<Span> {
    let mut out = Vec::new();
    for d in &file.decls {
        out.push(d.span());
        match d {
            Decl::Def(d) => {
                fun_spans(&d.name, &mut out);
                type_spans(&d.ret_ty, &mut out);
                params_spans(&d.params, &mut out);
                expr_spans(&d.body, &mut out);
            }
            Decl::Edef(d) => {
                fun_spans(&d.name, &mut out);
                type_spans(&d.ret_ty, &mut out);
                type_spans(&d.arg_ty, &mut out);
            }
            Decl::Gdef(d) => {
                out.push(d.derivation_span);
                fun_spans(&d.fun, &mut out);
                out.extend(d.schedule.iter().map(|s| s.span));
            }
            Decl::Rule(r) => {
                out.push(r.name_span);
                params_spans(&r.params, &mut out);
                expr_spans(&r.lhs, &mut out);
                expr_spans(&r.rhs, &mut out);
            }
            Decl::Strategy(s) => {
                out.push(s.name.span);
                out.extend(s.params.iter().map(|p| p.span));
                out.push(s.body.span);
            }
        }
    }
    out
}

fn fun_spans(f: &FunName, out: &mut Vec<Span>) {
    out.push(f.span);
    match &f.kind {
        FunNameKind::Base { name, base_ty } => {
            out.push(name.span);
            if let Some(t) = base_ty {
                type_spans(t, out);
            }
        }
        FunNameKind::Derived { inner, .. } => fun_spans(inner, out),
    }
}

fn type_spans(t: &Type, out: &mut Vec<Span>) {
    out.push(t.span);
    match &t.kind {
        TypeKind::Tuple(ts) => ts.iter().for_each(|t| type_spans(t, out)),
        TypeKind::Tensor(_, t) => type_spans(t, out),
        TypeKind::Lam(s, t) | TypeKind::LM(s, t) => {
            type_spans(s, out);
            type_spans(t, out);
        }
        _ => {}
    }
}

fn params_spans(p: &Params, out: &mut Vec<Span>) {
    out.push(p.span);
    for p in &p.params {
        param_spans(p, out);
    }
}

fn param_spans(p: &Param, out: &mut Vec<Span>) {
    out.push(p.span);
    out.push(p.name.span);
    type_spans(&p.ty, out);
}

fn expr_spans(e: &Expr, out: &mut Vec<Span>) {
    out.push(e.span);
    match &e.kind {
        ExprKind::Lit(_) => {}
        ExprKind::Var(v) => out.push(v.span),
        ExprKind::Call { fun, args } => {
            fun_spans(fun, out);
            args.iter().for_each(|a| expr_spans(a, out));
        }
        ExprKind::Tuple(es) => es.iter().for_each(|a| expr_spans(a, out)),
        ExprKind::Let { bindings, body } => {
            for b in bindings {
                out.push(b.span);
                match &b.pat {
                    Pattern::Var(v) => out.push(v.span),
                    Pattern::Tuple(vs, s) => {
                        out.push(*s);
                        out.extend(vs.iter().map(|v| v.span));
                    }
                }
                expr_spans(&b.rhs, out);
            }
            expr_spans(body, out);
        }
        ExprKind::If { cond, then_branch, else_branch } => {
            expr_spans(cond, out);
            expr_spans(then_branch, out);
            expr_spans(else_branch, out);
        }
        ExprKind::Assert { cond, body } => {
            expr_spans(cond, out);
            expr_spans(body, out);
        }
        ExprKind::Lam { param, body } => {
            param_spans(param, out);
            expr_spans(body, out);
        }
        ExprKind::Dummy(t) => type_spans(t, out),
    }
}

/// Realistic programs using every construct of the language.
pub const PROGRAMS: [&str; 4] = [
    r#"; A file may start with a comment.
#| Block comments #| nest |# like this. |#
(edef add Float (Tuple Float Float))
(edef atan2 Float (Float Float))            ; ksc-mlir style argument list
(edef [D [my_log Float]] (LM Float Float) (Float))
(edef sin Float Float)
(def f Float ((x : Float) (y : Float))
  (let (z (mul x y))
    (add z x)))
(def v (Vec Float) (n : Integer) (build n (lam (i : Integer) (to_float i))))
(def m (Tensor 2 Float) () (build (tuple 2 3) (lam (ij : Tuple Integer Integer) 0.0)))
(def p Float (v : Vec Float)
  (fold (lam (a_x : Tuple Float Float) (let ((a x) a_x) (mul a x))) 1.0 v))
(gdef rev [f (Tuple Float Float)])
(gdef fwd [f (Tuple Float Float)])
(def g (Tuple Float Float) (t : Float) ([rev f] (tuple 1.0 2.0) 1.0))
(rule "mul2" (v : Float) (mul v 2.0) (add v v))
"#,
    r#"(def main Integer ()
  (let ((a 0x1F)
        (b 0o17)
        (c -1e38)
        ((p q) (tuple 1 2.5))
        (s "tab\there \"quoted\" \x41\&1 \o101 \\ end"))
    (assert (gt a 0)
      (if (eq b 15)
          (print s (f - 3) (h + 2.0e-3) (get$1$2 (tuple p q)))
          0))))
(def dummy (LM Float Float) (x : Float) (lmOne ($dummy Float)))
(def shape_test Integer (x : (Vec (Tensor 3 (Lam Integer Bool))))
  (let (() (tuple)) 1))
(gdef shape [rev [f (Tuple Float Integer)]])
(gdef sufrevpass [g Float])
(gdef suffwdpass [g Float])
(gdef sufrev [g Float])
(gdef CL [g Float])
(def [fwd mul] Float ((x : Float) (dx : Float)) (mul x dx))
(def t String () (let ((x 1) (y 2)) "s"))
"#,
    r#"#| Structured names and nested lets |#
(def h (Tuple Float (Tuple)) ((v : Vec Float) (w : (Vec Float)) (k : Integer))
  (let (((x y) (tuple 1.5 -2.5))
        (z (add x y))
        (u ([D f] (tuple x y))))
    (tuple (sum (build k (lam (i : Integer) (index i v))))
           (tuple))))
(def q Bool ((a : Bool) (b : Bool)) (if a (not b) true))
(def e (Tuple) () (tuple))
(def one (Tuple Float) () (tuple 1.0))
(def s String (x : String) (concat x "\65\66"))
(def r Float (x : Float) ([sufrev [f Float]] x 1.0))
(def w Float (x : Float) ([shape [CL f]] x))
(rule "add0" ((x : Float)) (add x 0.0) x)
(rule "let" ((x : Float) (y : Float)) (let (z x) (add z y)) (add x y))
"#,
    r#"; Signed literals, odd names and all types
(edef $ranhashdoub Float Integer)
(edef aten::mul (Tensor 2 Float) ((Tensor 2 Float) (Tensor 2 Float)))
(edef [f (Tuple Integer Float)] (Lam Integer (LM Float Float)) (Tuple Integer Float))
(def x' Float ((-x : Float) (a.b : Integer)) (fun@ii - 1.5e-3 + 7 -x x'))
(def k Integer () (if false -9223372036854775808 9223372036854775807))
(def lam Integer (lam : Integer) (lam (lam : Integer) lam))
(def tp (Tuple Integer Integer) () (let ((ab (tuple 1 2)) ((c d) ab)) (tuple d c)))
"#,
];
