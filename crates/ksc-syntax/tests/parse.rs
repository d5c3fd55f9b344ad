//! Tests of `parse_source`: every construct, literal form, the `let`
//! ambiguity, structured names, spans, error messages and error recovery.

use crate::common;

use common::*;
use ksc_syntax::ast::*;
use ksc_syntax::{parse_source, Span};

// ------------------------------------------------------------------ literals

#[test]
fn literals() {
    assert_eq!(body("42"), "42");
    assert_eq!(body("-7"), "-7");
    assert_eq!(body("+7"), "7");
    assert_eq!(body("0x1F"), "31");
    assert_eq!(body("0o17"), "15");
    assert_eq!(body("1.5"), "1.5");
    assert_eq!(body("-1e38"), "-1e38");
    assert_eq!(body("1.5e-3"), "0.0015");
    assert_eq!(body("+2.0E+5"), "200000.0");
    assert_eq!(body("1e5"), "100000.0");
    assert_eq!(body(r#""a\tb\"c\65\x42\o103\&4""#), r#""a\tb\"cABC4""#);
    assert_eq!(body(r#""\1\&2\\""#), r#""\1\&2\\""#);
    assert_eq!(body("true"), "true");
    assert_eq!(body("false"), "false");
    assert_eq!(body("-9223372036854775808"), "-9223372036854775808");
}

#[test]
fn literal_kinds() {
    let file = parse_ok("(def f Float () (g 1 1.0 \"1\" true))");
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    let ExprKind::Call { args, .. } = &d.body.kind else { panic!() };
    let kinds: Vec<&ExprKind> = args.iter().map(|a| &a.kind).collect();
    assert_eq!(
        kinds,
        [
            &ExprKind::Lit(Literal::Integer(1)),
            &ExprKind::Lit(Literal::Float(1.0)),
            &ExprKind::Lit(Literal::String("1".into())),
            &ExprKind::Lit(Literal::Bool(true)),
        ]
    );
}

#[test]
fn sign_separated_from_number_is_one_literal() {
    assert_eq!(body("(f - 3)"), "(f -3)");
    assert_eq!(body("(f + 3)"), "(f 3)");
    assert_eq!(body("(f - 2.5 x)"), "(f -2.5 x)");
    assert_eq!(body("(f -\n  3)"), "(f -3)");
    assert_eq!(body("- 3"), "-3");
    // Only an unsigned number after a lone sign merges.
    assert_eq!(body("(f - -3)"), "(f - -3)");
    assert_eq!(body("(f - +3)"), "(f - +3)");
    assert_eq!(body("(f - x)"), "(f - x)");
    // In every expression position.
    assert_eq!(body("(if c - 1 + 2)"), "(if c -1 2)");
    assert_eq!(body("(let (x - 1) x)"), "(let ((x -1)) x)");
    assert_eq!(body("(lam (x : Float) - 1.0)"), "(lam (x : Float) -1.0)");
    // Span covers sign and number.
    let text = "(def f Integer () (g - 3))";
    let file = parse_ok(text);
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    let ExprKind::Call { args, .. } = &d.body.kind else { panic!() };
    assert_eq!(&text[args[0].span.range()], "- 3");
}

#[test]
fn signed_names_are_variables() {
    assert_eq!(body("(f -x +y)"), "(f -x +y)");
    assert_eq!(body("-"), "-");
}

// ---------------------------------------------------------------- expressions

#[test]
fn expression_forms() {
    assert_eq!(body("x"), "x");
    assert_eq!(body("(if (lt x 0) (neg x) x)"), "(if (lt x 0) (neg x) x)");
    assert_eq!(body("(assert (gt n 0) n)"), "(assert (gt n 0) n)");
    assert_eq!(body("(lam (i : Integer) (to_float i))"), "(lam (i : Integer) (to_float i))");
    assert_eq!(body("(lam (ij : Tuple Integer Integer) 0.0)"), "(lam (ij : (Tuple Integer Integer)) 0.0)");
    assert_eq!(body("(tuple)"), "(tuple)");
    assert_eq!(body("(tuple 1)"), "(tuple 1)");
    assert_eq!(body("(tuple 1 2.0 \"s\")"), "(tuple 1 2.0 \"s\")");
    assert_eq!(body("($dummy Float)"), "($dummy Float)");
    assert_eq!(body("($dummy (Vec (Tuple Float Integer)))"), "($dummy (Vec (Tuple Float Integer)))");
    assert_eq!(body("(f)"), "(f)");
    assert_eq!(body("(f x)"), "(f x)");
    assert_eq!(body("(f x y z)"), "(f x y z)");
    assert_eq!(body("(get$1$2 t)"), "(get$1$2 t)");
    assert_eq!(body("([rev f] x dr)"), "([rev f] x dr)");
    assert_eq!(body("([f Float] x)"), "([f Float] x)");
    assert_eq!(body("(x 2)"), "(x 2)");
}

#[test]
fn call_args_as_written() {
    let file = parse_ok("(def f Float () (g))");
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    let ExprKind::Call { fun, args } = &d.body.kind else { panic!("{:?}", d.body) };
    assert!(args.is_empty());
    assert_eq!(fun.to_string(), "g");
}

#[test]
fn contextual_keywords_are_not_reserved() {
    for w in ["lam", "gdef", "Tensor", "Tuple", "LM", "Bool", "fwd", "rev", "D", "CL", "shape", "sufrev"] {
        assert_eq!(body(w), w);
        assert_eq!(body(&format!("(let ({w} 1) {w})")), format!("(let (({w} 1)) {w})"));
    }
    assert_eq!(body("(gdef x)"), "(gdef x)");
    assert_eq!(body("(Tuple x)"), "(Tuple x)");
    // `(lam ...)` in head position is always a lambda.
    assert_eq!(body_error("(lam x x)").1, "`lam` takes exactly one typed parameter `(x : T)`, found `x`");
}

// ----------------------------------------------------------------------- let

#[test]
fn let_forms() {
    assert_eq!(body("(let (x 1) x)"), "(let ((x 1)) x)");
    assert_eq!(body("(let ((x 1)) x)"), "(let ((x 1)) x)");
    assert_eq!(body("(let ((x 1) (y 2)) y)"), "(let ((x 1) (y 2)) y)");
    assert_eq!(body("(let ((a b c) t) a)"), "(let (((a b c) t)) a)");
    assert_eq!(body("(let (((x y) t) (z (add x y))) z)"), "(let (((x y) t) (z (add x y))) z)");
    assert_eq!(body("(let () 1)"), "(let () 1)");
    assert_eq!(body("(let (() (tuple)) 1)"), "(let ((() (tuple))) 1)");
    assert_eq!(body("(let ((x 1) (y 2) (z 3)) z)"), "(let ((x 1) (y 2) (z 3)) z)");
}

#[test]
fn let_ambiguity_resolved_as_the_original() {
    // ONE tuple-pattern binding (p, q) = f(x), not p = q; f = x.
    assert_eq!(body("(let ((p q) (f x)) p)"), "(let (((p q) (f x))) p)");
    // Three bindings: the first element is a list of names but there are three elements.
    assert_eq!(body("(let ((a b) (c d) (e f)) a)"), "(let ((a b) (c d) (e f)) a)");
    // Two bindings: the first element contains a non-name.
    assert_eq!(body("(let ((x 1) (y 2)) y)"), "(let ((x 1) (y 2)) y)");
}

#[test]
fn let_binding_spans() {
    let text = "(def f Float () (let ((a b) (c 1) (e 2)) (let (d 2) (let ((p q) t) d))))";
    let file = parse_ok(text);
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    let ExprKind::Let { bindings, body } = &d.body.kind else { panic!() };
    let spans: Vec<&str> = bindings.iter().map(|b| &text[b.span.range()]).collect();
    assert_eq!(spans, ["(a b)", "(c 1)", "(e 2)"]);
    let ExprKind::Let { bindings, body } = &body.kind else { panic!() };
    assert_eq!(&text[bindings[0].span.range()], "(d 2)");
    let Pattern::Var(v) = &bindings[0].pat else { panic!() };
    assert_eq!(&text[v.span.range()], "d");
    let ExprKind::Let { bindings, .. } = &body.kind else { panic!() };
    assert_eq!(&text[bindings[0].span.range()], "((p q) t)");
    let Pattern::Tuple(names, span) = &bindings[0].pat else { panic!() };
    assert_eq!(&text[span.range()], "(p q)");
    assert_eq!(names.iter().map(|n| &text[n.span.range()]).collect::<Vec<_>>(), ["p", "q"]);
}

// --------------------------------------------------------------- declarations

#[test]
fn defs_and_params() {
    assert_eq!(one_decl("(def f Float (x : Float) x)"), "(def f Float (x : Float) x)");
    assert_eq!(one_decl("(def f Float ((x : Float)) x)"), "(def f Float ((x : Float)) x)");
    assert_eq!(one_decl("(def f Float () 1.0)"), "(def f Float () 1.0)");
    assert_eq!(
        one_decl("(def f Float ((x : Float) (y : Vec Float)) x)"),
        "(def f Float ((x : Float) (y : (Vec Float))) x)"
    );
    assert_eq!(one_decl("(def f Float (x : (Vec Float)) x)"), "(def f Float (x : (Vec Float)) x)");
    assert_eq!(one_decl("(def f Float (x : Tensor 2 Float) x)"), "(def f Float (x : (Tensor 2 Float)) x)");
    assert_eq!(one_decl("(def f (Tuple) (u : Tuple) (tuple))"), "(def f (Tuple) (u : (Tuple)) (tuple))");
    assert_eq!(one_decl("(def f (Tuple) (u : (Tuple)) (tuple))"), "(def f (Tuple) (u : (Tuple)) (tuple))");
    assert_eq!(errors("(def f Float (v : Vec) 1.0)")[0].1, "`Vec` takes 1 type, found 0: write `(Vec T)`");
    assert_eq!(
        one_decl("(def [fwd mul] Float ((x : Float) (dx : Float)) (mul x dx))"),
        "(def [fwd mul] Float ((x : Float) (dx : Float)) (mul x dx))"
    );
    assert_eq!(one_decl("(def [f Float] Float (x : Float) x)"), "(def [f Float] Float (x : Float) x)");
}

#[test]
fn edefs_gdefs_rules() {
    assert_eq!(one_decl("(edef add Float (Tuple Float Float))"), "(edef add Float (Tuple Float Float))");
    assert_eq!(one_decl("(edef neg Float (Float))"), "(edef neg Float Float)");
    assert_eq!(one_decl("(edef neg Float Float)"), "(edef neg Float Float)");
    // Extension: multi-type argument list is a tuple.
    assert_eq!(one_decl("(edef atan2 Float (Float Float))"), "(edef atan2 Float (Tuple Float Float))");
    assert_eq!(
        one_decl("(edef f Bool ((Vec Float) Integer String))"),
        "(edef f Bool (Tuple (Vec Float) Integer String))"
    );
    assert_eq!(one_decl("(edef f Bool (Vec Float))"), "(edef f Bool (Vec Float))");
    assert_eq!(
        one_decl("(edef [D [my_log Float]] (LM Float Float) (Float))"),
        "(edef [D [my_log Float]] (LM Float Float) Float)"
    );
    for d in ["fwd", "rev", "CL", "shape", "suffwdpass", "sufrevpass", "sufrev"] {
        assert_eq!(one_decl(&format!("(gdef {d} [f Float])")), format!("(gdef {d} [f Float])"));
    }
    assert_eq!(
        one_decl("(gdef shape [rev [f (Tuple Float Integer)]])"),
        "(gdef shape [rev [f (Tuple Float Integer)]])"
    );
    assert_eq!(
        one_decl(r#"(rule "mul2" (v : Float) (mul v 2.0) (add v v))"#),
        r#"(rule "mul2" (v : Float) (mul v 2.0) (add v v))"#
    );
    assert_eq!(one_decl(r#"(rule "neg0" () (neg 0.0) - 0.0)"#), r#"(rule "neg0" () (neg 0.0) -0.0)"#);
}

#[test]
fn edef_extension_only_in_argument_position() {
    let errs = errors("(edef f (Float Float) Float)");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].1, "expected a type, found `(Float Float)`");
    let (_, all) = parse_source("(def f (Float Float) () 1.0)");
    assert_eq!(all[0].note.as_deref(), Some("a tuple type is written `(Tuple Float Float)`"));
}

#[test]
fn types() {
    let ty = |t: &str| {
        let file = parse_ok(&format!("(edef f {t} Float)"));
        let Decl::Edef(e) = &file.decls[0] else { panic!() };
        e.ret_ty.clone()
    };
    assert_eq!(ty("Integer").kind, TypeKind::Integer);
    assert_eq!(ty("Float").kind, TypeKind::Float);
    assert_eq!(ty("String").kind, TypeKind::String);
    assert_eq!(ty("Bool").kind, TypeKind::Bool);
    assert_eq!(
        ty("(Vec Float)").kind,
        TypeKind::Tensor(1, Box::new(Type { kind: TypeKind::Float, span: Span::new(13, 18) }))
    );
    assert_eq!(ty("(Tensor 3 Integer)").to_string(), "(Tensor 3 Integer)");
    assert_eq!(ty("(Tensor 1 Integer)").to_string(), "(Vec Integer)");
    assert_eq!(ty("(Tuple)").kind, TypeKind::Tuple(vec![]));
    assert_eq!(ty("(Tuple Float)").to_string(), "(Tuple Float)");
    assert_eq!(
        ty("(Tuple Float (Tuple Integer Bool) (Vec (Vec Float)))").to_string(),
        "(Tuple Float (Tuple Integer Bool) (Vec (Vec Float)))"
    );
    assert_eq!(ty("(LM (Vec Float) Float)").to_string(), "(LM (Vec Float) Float)");
    assert_eq!(ty("(Lam Integer Float)").to_string(), "(Lam Integer Float)");
    assert_eq!(ty("(Float)").kind, TypeKind::Float);
    assert_eq!(ty("((Vec Float))").to_string(), "(Vec Float)");
    // Spans cover the written type, parentheses included.
    let text = "(edef f (Float) (Vec Float))";
    let file = parse_ok(text);
    let Decl::Edef(e) = &file.decls[0] else { panic!() };
    assert_eq!(&text[e.ret_ty.span.range()], "(Float)");
    assert_eq!(&text[e.arg_ty.span.range()], "(Vec Float)");
}

#[test]
fn param_spans() {
    let text = "(def f Float ((x : Vec Float) (n : Integer)) (g x n))";
    let file = parse_ok(text);
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    assert_eq!(&text[d.params.span.range()], "((x : Vec Float) (n : Integer))");
    assert_eq!(&text[d.params.params[0].span.range()], "(x : Vec Float)");
    assert_eq!(&text[d.params.params[0].name.span.range()], "x");
    assert_eq!(&text[d.params.params[0].ty.span.range()], "Vec Float");
    assert_eq!(&text[d.params.params[1].ty.span.range()], "Integer");
    assert_eq!(&text[d.body.span.range()], "(g x n)");
    let ExprKind::Call { fun, args } = &d.body.kind else { panic!() };
    assert_eq!(&text[fun.span.range()], "g");
    assert_eq!(&text[args[1].span.range()], "n");
    assert_eq!(d.span, Span::new(0, text.len()));
}

#[test]
fn structured_names() {
    let names = [
        "f",
        "[f Float]",
        "[D f]",
        "[fwd [f (Tuple Float Integer)]]",
        "[rev f]",
        "[CL f]",
        "[suffwdpass f]",
        "[sufrevpass [f Float]]",
        "[sufrev f]",
        "[shape f]",
        "[shape [rev [f (Tuple Float Integer)]]]",
        "[rev [fwd [D f]]]",
    ];
    for n in names {
        assert_eq!(body(&format!("({n} x)")), format!("({n} x)"));
    }
    let text = "(def f Float () ([shape [rev [g Float]]] x))";
    let file = parse_ok(text);
    let Decl::Def(d) = &file.decls[0] else { panic!() };
    let ExprKind::Call { fun, .. } = &d.body.kind else { panic!() };
    assert_eq!(&text[fun.span.range()], "[shape [rev [g Float]]]");
    let FunNameKind::Derived { derivation: Derivation::Shape, inner } = &fun.kind else { panic!() };
    assert_eq!(&text[inner.span.range()], "[rev [g Float]]");
    let FunNameKind::Derived { derivation: Derivation::Rev, inner } = &inner.kind else { panic!() };
    let FunNameKind::Base { name, base_ty: Some(t) } = &inner.kind else { panic!() };
    assert_eq!((&text[name.span.range()], &text[t.span.range()]), ("g", "Float"));
}

#[test]
fn comments_anywhere() {
    let text = "; leading comment\n#| block #| nested |# |#\n(def f ; here\n Float #| there |# () ; and\n 1.0) ; end";
    assert_eq!(one_decl(text), "(def f Float () 1.0)");
    assert!(parse_ok("").decls.is_empty());
    assert!(parse_ok("; nothing but a comment").decls.is_empty());
    assert!(parse_ok("#| only |#").decls.is_empty());
}

#[test]
fn sample_programs_parse_without_errors() {
    let counts = [12, 10, 9, 7];
    for (program, count) in PROGRAMS.iter().zip(counts) {
        let file = parse_ok(program);
        assert_eq!(file.decls.len(), count, "{program}");
        for span in all_spans(&file) {
            assert!(span_ok(program, span));
        }
    }
    // Spot checks of the content.
    let file = parse_ok(PROGRAMS[3]);
    assert_eq!(decl(&file.decls[3]), "(def x' Float ((-x : Float) (a.b : Integer)) (fun@ii -0.0015 7 -x x'))");
    assert_eq!(decl(&file.decls[5]), "(def lam Integer (lam : Integer) (lam (lam : Integer) lam))");
    let file = parse_ok(PROGRAMS[1]);
    let main = decl(&file.decls[0]);
    assert!(main.contains(r#"(s "tab\there \"quoted\" A1 A \\ end")"#), "{main}");
    assert!(main.contains("(print s (f -3) (h 0.002) (get$1$2 (tuple p q)))"), "{main}");
}

// --------------------------------------------------------------------- errors

#[test]
fn type_errors_with_suggestions() {
    let (file, errs) = parse_source("(def f Flot (x : Float) x)");
    assert!(file.decls.is_empty());
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].message, "expected a type, found `Flot`");
    assert_eq!(errs[0].note.as_deref(), Some("did you mean `Float`?"));
    assert_eq!(errs[0].span, Span::new(7, 11));

    let (_, errs) = parse_source("(def f float () 1.0)");
    assert_eq!(errs[0].note.as_deref(), Some("did you mean `Float`?"));
    let (_, errs) = parse_source("(def f Foo () 1.0)");
    assert_eq!(errs[0].note, None);

    assert_eq!(errors("(def f Vec () 1.0)")[0].1, "`Vec` needs parentheses here: write `(Vec T)`");
    assert_eq!(errors("(def f (Vec) () 1.0)")[0].1, "`Vec` takes 1 type, found 0: write `(Vec T)`");
    assert_eq!(errors("(def f (LM Float) () 1.0)")[0].1, "`LM` takes 2 types, found 1: write `(LM S T)`");
    assert_eq!(
        errors("(def f (Tensor 0 Float) () 1.0)")[0].1,
        "the rank of a `Tensor` must be a positive integer, found `0`"
    );
    assert_eq!(
        errors("(def f (Tensor Float) () 1.0)")[0].1,
        "`Tensor` takes a rank and an element type, found 1 part: write `(Tensor N T)`"
    );
    assert_eq!(errors("(def f () () 1.0)")[0].1, "expected a type, found `()`");
    assert_eq!(
        errors("(def f () 1.0)")[0].1,
        "the return type of this `def` is missing: expected `(def NAME RETURN_TYPE PARAMS BODY)`"
    );
    assert_eq!(
        errors("(def f (x : Float) x)")[0].1,
        "the return type of this `def` is missing: expected `(def NAME RETURN_TYPE PARAMS BODY)`"
    );
    assert_eq!(errors("(def f Integer (x : ) 1.0)")[0].1, "missing type after `:` in parameter `(x : T)`");
    let (_, errs) = parse_source("(def f (Vector Float) () 1.0)");
    assert_eq!(errs[0].message, "expected a type constructor `Vec`, `Tensor`, `Tuple`, `LM` or `Lam`, found `Vector`");
    assert_eq!(errs[0].note.as_deref(), Some("did you mean `Vec`?"));
    assert_eq!(errors("(def f [Float] () 1.0)")[0].1, "expected a type, found `[Float]`");
    assert_eq!(errors("(def f Float (x : Float Float) 1.0)")[0].1, "expected a type, found `Float Float`");
}

#[test]
fn expression_errors() {
    assert_eq!(
        body_error("(if c 1)"),
        ("(if c 1)".into(), "`if` takes 3 arguments (condition, then, else), found 2".into())
    );
    assert_eq!(body_error("(assert c)").1, "`assert` takes 2 arguments (condition, body), found 1");
    let (_, errs) = parse_source("(def f Float () (if c 1))");
    assert_eq!(errs[0].note.as_deref(), Some("expected `(if CONDITION THEN ELSE)`"));
    assert_eq!(
        body_error("(lam ((x : Float) (y : Float)) x)").1,
        "`lam` takes exactly one typed parameter `(x : T)`, found `((x : Float) (y : Float))`"
    );
    assert_eq!(body_error("(lam x x)").1, "`lam` takes exactly one typed parameter `(x : T)`, found `x`");
    assert_eq!(
        body_error("(lam (x : Float))").1,
        "`lam` needs a body after its parameter `(x : T)`: expected `(lam (x : T) BODY)`"
    );
    assert_eq!(
        body_error("(lam (x : Float) x y)").1,
        "`lam` takes one body expression, found 2: expected `(lam (x : T) BODY)`"
    );
    assert_eq!(
        body_error("(lam (i : Integer) (j : Integer) (add i j))"),
        ("(j : Integer)".into(), "`lam` takes exactly one typed parameter `(x : T)`: expected its body, found another parameter `(j : Integer)`".into())
    );
    assert_eq!(body_error("($dummy)").1, "`$dummy` takes exactly one type, found 0");
    assert_eq!(body_error("(let (x 1))").1, "`let` needs a body after its bindings: expected `(let BINDINGS BODY)`");
    assert_eq!(
        body_error("(let (x 1) x y)").1,
        "`let` takes one body expression, found 2: expected `(let BINDINGS BODY)`"
    );
    assert_eq!(
        body_error("(let (x 1 2) x)").1,
        "a `let` binding `(x e)` needs exactly one expression after the name, found 2"
    );
    assert_eq!(body_error("(let ((x 1) y) x)").1, "expected a `let` binding `(x e)`, found `y`");
    assert_eq!(body_error("(let ((x 1) ((a (b c)) t)) x)").1, "tuple patterns are flat lists of names, found `(b c)`");
    assert_eq!(body_error("(let x x)").1, "expected `let` bindings `(x e)` or `((x e) ...)`, found `x`");
    assert_eq!(body_error("()").1, "expected an expression, found `()`");
    assert_eq!(body_error("(1 2)").1, "expected a function name or keyword after `(`, found `1`");
    assert_eq!(body_error("((f x) y)").1, "expected a function name or keyword after `(`, found `(f x)`");
    assert_eq!(body_error("[rev f]").1, "expected an expression, found the function name `[rev f]`");
    assert_eq!(body_error(":").1, "unexpected `:` in an expression");
}

#[test]
fn reserved_words_rejected() {
    for w in [
        "def", "edef", "rule", "let", "if", "assert", "call", "tuple", "$dummy", "Integer", "Float", "Vec", "Lam",
        "String",
    ] {
        let (under, msg) = body_error(w);
        assert_eq!(under, w);
        assert_eq!(msg, format!("`{w}` is a reserved word and cannot be used as a variable name"));
    }
    assert_eq!(body_error("(call f x)").1, "`call` is a reserved word and cannot be used as a function name");
    assert_eq!(body_error("(def g Float () 1.0)").1, "`def` is only allowed at the top level of a file");
    assert_eq!(body_error("(Float 1)").1, "`Float` is a type, not a function");
    assert_eq!(body_error("(true 1)").1, "`true` is a literal, not a function");
    assert_eq!(body_error("(let (if 1) 2)").1, "`if` is a reserved word and cannot be used as a variable name");
    assert_eq!(errors("(def if Float () 1.0)")[0].1, "`if` is a reserved word and cannot be used as a function name");
    assert_eq!(
        errors("(def f Float (true : Bool) 1.0)")[0].1,
        "`true` is a reserved word and cannot be used as a parameter name"
    );
}

#[test]
fn glued_colon_explained() {
    let msg = "expected a parameter `(x : T)`, found the single name `x:Float`: the `:` must be separated by spaces";
    assert_eq!(errors("(def f Float (x:Float) x)"), [("x:Float".to_string(), msg.to_string())]);
    assert_eq!(errors("(def f Float ((x:Float)) x)"), [("x:Float".to_string(), msg.to_string())]);
    assert_eq!(errors("(def f Float (x: Float) x)")[0].0, "x:");
    assert_eq!(body_error("(lam (x:Float) x)").0, "x:Float");
}

#[test]
fn name_errors() {
    assert_eq!(
        errors("(gdef D [f Float])")[0].1,
        "there is no `gdef D`; `[D f]` is derived by `gdef fwd` / `gdef rev`"
    );
    let (_, errs) = parse_source("(gdef reverse [f Float])");
    assert_eq!(
        errs[0].message,
        "unknown derivation `reverse`: expected `fwd`, `rev`, `CL`, `shape`, `suffwdpass`, `sufrevpass` or `sufrev`"
    );
    let (_, errs) = parse_source("(def g Float () ([rve f] x))");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].message, "unknown derivation `rve`: expected one of `D`, `fwd`, `rev`, `CL`, `shape`, `suffwdpass`, `sufrevpass`, `sufrev`, `jac`, `jac1`, `jacsparse`, `jacsparse1`, `fwdt`, `suffwdtape`, `sufrevacc`");
    assert_eq!(errs[0].note.as_deref(), Some("did you mean `rev`?"));
    assert_eq!(body_error("([f Flot] x)").1, "expected a type, found `Flot`");
    assert_eq!(
        body_error("([rev f g] x)").1,
        "expected a function name `f`, `[f T]` or `[DERIVATION f]`, found `[rev f g]`"
    );
    assert_eq!(body_error("([] x)").1, "expected a function name `f`, `[f T]` or `[DERIVATION f]`, found `[]`");
    assert_eq!(
        errors("(def 3 Float () 1.0)")[0].1,
        "expected a function name `f`, `[f T]` or `[DERIVATION f]`, found `3`"
    );
    assert_eq!(
        errors("(rule mul2 (x : Float) x x)")[0].1,
        "expected the rule's name as a string `\"name\"`, found `mul2`"
    );
}

#[test]
fn declaration_shape_errors() {
    assert_eq!(
        errors("x")[0].1,
        "expected a declaration `(def ...)`, `(edef ...)`, `(gdef ...)`, `(rule ...)` or `(strategy ...)`, found `x`"
    );
    assert_eq!(
        errors("()")[0].1,
        "expected a declaration `(def ...)`, `(edef ...)`, `(gdef ...)`, `(rule ...)` or `(strategy ...)`, found `()`"
    );
    assert_eq!(
        errors("[def f Float () 1.0]")[0].1,
        "expected a declaration `(def ...)`, `(edef ...)`, `(gdef ...)`, `(rule ...)` or `(strategy ...)`, found `[def f Float () 1.0]`"
    );
    let (_, errs) = parse_source("(dfe f Float () 1.0)");
    assert_eq!(
        errs[0].message,
        "expected a declaration keyword `def`, `edef`, `gdef`, `rule` or `strategy`, found `dfe`"
    );
    assert_eq!(errs[0].note.as_deref(), Some("did you mean `def`?"));
    let (_, errs) = parse_source("(add 1 2)");
    assert_eq!(errs[0].note.as_deref(), Some("expressions can only appear inside a `def` or a `rule`"));
    assert_eq!(
        errors("(def f Float ())")[0].1,
        "incomplete `def`: the body is missing; expected `(def NAME RETURN_TYPE PARAMS BODY)`"
    );
    assert_eq!(
        errors("(edef f Float)")[0].1,
        "incomplete `edef`: the argument type is missing; expected `(edef NAME RETURN_TYPE ARGUMENT_TYPE)`"
    );
    assert_eq!(
        errors("(gdef)")[0].1,
        "incomplete `gdef`: the derivation is missing; expected `(gdef DERIVATION FUNCTION)`"
    );
    assert_eq!(
        errors("(rule \"r\" () x)")[0].1,
        "incomplete `rule`: the right-hand side is missing; expected `(rule \"NAME\" PARAMS LHS RHS)`"
    );
    let errs = errors("(def f Float () (let (x 1) x) x)");
    assert_eq!(
        errs,
        [(
            "x".to_string(),
            "too many parts in `def`: expected `(def NAME RETURN_TYPE PARAMS BODY)`, found 1 more: `x`".to_string()
        )]
    );
}

#[test]
fn independent_errors_in_one_declaration_are_all_reported() {
    let text = "(def f Flot (x : Integr) (g (if c) (lam x x) 1. naïve))";
    let (file, errs) = parse_source(text);
    assert!(file.decls.is_empty());
    let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        msgs,
        [
            "expected a type, found `Flot`",
            "expected a type, found `Integr`",
            "`if` takes 3 arguments (condition, then, else), found 1",
            "`lam` takes exactly one typed parameter `(x : T)`, found `x`",
            "malformed number literal `1.`",
            "unexpected character `ï`",
        ]
    );
}

#[test]
fn bad_declarations_are_skipped_and_good_ones_kept() {
    let text = "(def ok1 Float () 1.0)\n(def bad1 Flot () 1.0)\n(edef ok2 Float Float)\n(def bad2 Float (x) x)\n(gdef rev [ok1 (Tuple)])";
    let (file, errs) = parse_source(text);
    assert_eq!(errs.len(), 2, "{}", render_errors(text, &errs));
    assert_eq!(&text[errs[0].span.range()], "Flot");
    assert_eq!(errs[1].message, "expected a parameter `(x : T)`, found `x`");
    let names: Vec<String> = file.decls.iter().map(decl).collect();
    assert_eq!(names, ["(def ok1 Float () 1.0)", "(edef ok2 Float Float)", "(gdef rev [ok1 (Tuple)])"]);
}

#[test]
fn lexical_errors_do_not_cascade() {
    // The malformed number is reported once; the `if` still has three arguments.
    let errs = errors("(def f Float () (if c 1. 2.0))");
    assert_eq!(errs, [("1.".to_string(), "malformed number literal `1.`".to_string())]);
    let errs = errors("(def f Float () (if c \"a\\q\" 2.0))");
    assert_eq!(errs.len(), 1, "{errs:?}");
    // A lone bad character is skipped, the declaration survives.
    let (file, errs) = parse_source("(def f Float () (g { x))");
    assert_eq!(errs.len(), 1);
    assert_eq!(file.decls.len(), 1);
    assert_eq!(decl(&file.decls[0]), "(def f Float () (g x))");
}

#[test]
fn bracket_errors_do_not_cascade() {
    // A missing `)` is reported once, at its `(`, and later declarations are read.
    let text = "(def f Float (x : Float)\n  (add x 1.0)\n(def g Float (y : Float) (mul y y))\n(def h Flot () 1.0)";
    let (file, errs) = parse_source(text);
    let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(
        msgs,
        ["unclosed `(`: no matching `)` before the next top-level `(` on line 3", "expected a type, found `Flot`"]
    );
    let names: Vec<String> = file.decls.iter().map(decl).collect();
    assert_eq!(names, ["(def f Float (x : Float) (add x 1.0))", "(def g Float (y : Float) (mul y y))"]);

    // A mismatched bracket inside a form: one error, no parser complaints about its content.
    let text = "(def f Float () [add x 1.0))\n(def g Float () 1.0)";
    let (file, errs) = parse_source(text);
    assert_eq!(errs.len(), 1, "{}", render_errors(text, &errs));
    assert_eq!(errs[0].message, "mismatched brackets: `[` closed by `)`");
    assert_eq!(file.decls.len(), 1);

    // A stray `)` between declarations.
    let (file, errs) = parse_source("(def f Float () 1.0))\n(def g Float () 2.0)");
    assert_eq!(errs.len(), 1);
    assert_eq!(file.decls.len(), 2);
}

#[test]
fn errors_are_sorted_and_within_text() {
    let text = "(def f Flot () 1.)\n(edef g Float (Float Flt))) \"unterminated\n(def";
    let (_, errs) = parse_source(text);
    assert!(errs.len() >= 4, "{}", render_errors(text, &errs));
    assert!(errs.windows(2).all(|w| w[0].span.start <= w[1].span.start));
    assert!(errs.iter().all(|e| span_ok(text, e.span)));
}

#[test]
fn deep_nesting_does_not_overflow() {
    // 999 nested calls inside a def: exactly at the limit, parses fine.
    let depth = 998;
    let text = format!("(def f Float (x : Float) {}x{})", "(g ".repeat(depth), ")".repeat(depth));
    let file = parse_ok(&text);
    assert_eq!(file.decls.len(), 1);

    let too_deep =
        format!("(def f Float (x : Float) {}x{})\n(def ok Float () 1.0)", "(g ".repeat(1000), ")".repeat(1000));
    let (file, errs) = parse_source(&too_deep);
    assert_eq!(errs.len(), 1, "{}", render_errors(&too_deep, &errs));
    assert_eq!(errs[0].message, "nesting deeper than 1000 levels");
    assert_eq!(file.decls.len(), 1);

    for text in [
        "(".repeat(100_000),
        "[".repeat(100_000),
        format!("(def f Float () {}", "(".repeat(100_000)),
        "(let ((x ".repeat(30_000),
    ] {
        let (_, errs) = parse_source(&text);
        assert!(!errs.is_empty());
        assert!(errs.iter().all(|e| span_ok(&text, e.span)));
    }
    // Deep structured names and types are cut too.
    let text = format!("(def f Float () ({}f{} x))", "[rev ".repeat(2000), "]".repeat(2000));
    assert!(!parse_source(&text).1.is_empty());
    let text = format!("(def f {}Float{} () 1.0)", "(Vec ".repeat(2000), ")".repeat(2000));
    assert!(!parse_source(&text).1.is_empty());
}

#[test]
fn strategy_declarations() {
    assert_eq!(one_decl("(strategy tidy (normalize (rules core)))"), "(strategy tidy (normalize (rules core)))");
    assert_eq!(one_decl("(strategy (twice s) (seq s s))"), "(strategy (twice s) (seq s s))");
    assert_eq!(
        errors("(strategy (twice let) s)")[0].1,
        "`let` is a reserved word and cannot be used as a strategy parameter"
    );
    assert_eq!(errors("(strategy () id)")[0].1, "expected the strategy's name, or `(NAME PARAM ...)`, found `()`");
    assert_eq!(one_decl("(gdef rev [f Float] tidy)"), "(gdef rev [f Float] tidy)");
    assert_eq!(
        errors("(gdef rev f a b)")[0].1,
        "too many parts in `gdef`: expected `(gdef DERIVATION FUNCTION SCHEDULE)`, found 1 more: `b`"
    );
    assert_eq!(
        errors("(strategy s id id)")[0].1,
        "too many parts in `strategy`: expected `(strategy NAME BODY)`, found 1 more: `id`"
    );
}
