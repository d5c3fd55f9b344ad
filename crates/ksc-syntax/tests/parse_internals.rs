//! The parser's internals: "did you mean" suggestions, the bounds on
//! `let` bindings and on the depth of hand-built trees, reserved words.

use ksc_syntax::sexpr::{Atom, Bracket, SExpr, SExprKind, MAX_DEPTH};
use ksc_syntax::testing::{parse_forms, suggest, TYPE_WORDS};
use ksc_syntax::{edit_distance, is_reserved, Span, MAX_LET_DEPTH, RESERVED};

#[test]
fn edit_distances() {
    assert_eq!(edit_distance("Flot", "Float"), 1);
    assert_eq!(edit_distance("float", "Float"), 1);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("dfe", "def"), 1);
    assert_eq!(edit_distance("rve", "rev"), 1);
    assert_eq!(suggest("Flot", &TYPE_WORDS), Some("Float"));
    assert_eq!(suggest("Integr", &TYPE_WORDS), Some("Integer"));
    assert_eq!(suggest("x", &TYPE_WORDS), None);
    assert_eq!(suggest("ab", &TYPE_WORDS), None);
    assert_eq!(suggest("Lm", &TYPE_WORDS), Some("LM"));
    assert_eq!(suggest("Foo", &TYPE_WORDS), None);
    assert_eq!(suggest("INTEGER", &TYPE_WORDS), Some("Integer"));
    assert_eq!(suggest("Flaot", &TYPE_WORDS), Some("Float"));
    assert_eq!(suggest("Vector", &TYPE_WORDS), Some("Vec"));
    assert_eq!(suggest("Int", &TYPE_WORDS), Some("Integer"));
    assert_eq!(suggest("Lambda", &TYPE_WORDS), Some("Lam"));
}

fn sym(s: &str) -> SExpr {
    SExpr { kind: SExprKind::Atom(Atom::Symbol(s.to_string())), span: Span::new(0, 1) }
}

fn list(items: Vec<SExpr>) -> SExpr {
    SExpr {
        kind: SExprKind::List { bracket: Bracket::Paren, items, closed_by: Some(Bracket::Paren) },
        span: Span::new(0, 1),
    }
}

#[test]
fn let_bindings_around_an_expression_are_bounded() {
    let binds = |v: &str, n: usize| (0..n).map(|i| format!("({v}{i} 1.0)")).collect::<Vec<_>>().join(" ");
    // One let at the limit is fine; the nested lets of two count together.
    let ok = format!("(def f Float (x : Float) (let ({}) x))", binds("a", MAX_LET_DEPTH));
    let (_, errors) = ksc_syntax::parse_source(&ok);
    assert!(errors.is_empty(), "{errors:?}");
    let nested = format!(
        "(def f Float (x : Float) (let ({}) (let ({}) (let (c 2.0) x))))",
        binds("a", MAX_LET_DEPTH / 2),
        binds("b", MAX_LET_DEPTH / 2)
    );
    let (file, errors) = ksc_syntax::parse_source(&nested);
    assert!(file.decls.is_empty());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].message, format!("more than {MAX_LET_DEPTH} `let` bindings around this expression"));
    assert_eq!(&nested[errors[0].span.range()], "(c 2.0)");
}

#[test]
fn parser_guards_depth_of_hand_built_trees() {
    // Deeper than the reader would ever produce: the parser has its own limit.
    let mut e = sym("x");
    for _ in 0..MAX_DEPTH + 500 {
        e = list(vec![sym("g"), e]);
    }
    let def = list(vec![sym("def"), sym("f"), sym("Float"), list(vec![]), e]);
    let (file, errors) = parse_forms("x", &[def]);
    assert!(file.decls.is_empty());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].message, "nesting deeper than 1000 levels");

    let mut t = sym("Float");
    for _ in 0..MAX_DEPTH + 500 {
        t = list(vec![sym("Vec"), t]);
    }
    let edef = list(vec![sym("edef"), sym("f"), t, sym("Float")]);
    let (_, errors) = parse_forms("x", &[edef]);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

#[test]
fn reserved_words() {
    for w in RESERVED {
        assert!(is_reserved(w));
    }
    for w in ["lam", "gdef", "Tensor", "Tuple", "LM", "Bool", "fwd", "rev", "D", "shape"] {
        assert!(!is_reserved(w), "{w}");
    }
}
