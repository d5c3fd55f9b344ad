//! The S-expression reader (`sexpr.rs`): atoms, strings, comments,
//! brackets, error recovery and depth.

use ksc_syntax::sexpr::{read_sexprs, Atom, Bracket, SExpr, SExprKind, MAX_DEPTH};
use ksc_syntax::{Span, SyntaxError};

fn read(text: &str) -> Vec<SExpr> {
    let (forms, errors) = read_sexprs(text);
    assert!(errors.is_empty(), "unexpected errors for {text:?}: {errors:?}");
    forms
}

fn atom(text: &str) -> Atom {
    let forms = read(text);
    assert_eq!(forms.len(), 1, "{text:?}");
    match &forms[0].kind {
        SExprKind::Atom(a) => a.clone(),
        k => panic!("not an atom: {k:?}"),
    }
}

fn errors(text: &str) -> Vec<SyntaxError> {
    read_sexprs(text).1
}

/// The single error of reading `text`, as (text under the span, message).
fn one_error(text: &str) -> (String, String) {
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "expected one error for {text:?}, got {errs:?}");
    (text[errs[0].span.range()].to_string(), errs[0].message.clone())
}

/// A compact rendering of a tree, for comparing structure.
fn show(e: &SExpr) -> String {
    match &e.kind {
        SExprKind::Atom(Atom::Integer(n)) => format!("{n}"),
        SExprKind::Atom(Atom::Float(f)) => format!("{f:?}"),
        SExprKind::Atom(Atom::String(s)) => format!("{s:?}"),
        SExprKind::Atom(Atom::Symbol(s)) => s.clone(),
        SExprKind::Atom(Atom::Invalid) => "<invalid>".to_string(),
        SExprKind::List { bracket, items, .. } => {
            let inner: Vec<String> = items.iter().map(show).collect();
            format!("{}{}{}", bracket.open_char(), inner.join(" "), bracket.close_char())
        }
    }
}

fn show_all(text: &str) -> String {
    read_sexprs(text).0.iter().map(show).collect::<Vec<_>>().join(" ")
}

#[test]
fn integers() {
    assert_eq!(atom("42"), Atom::Integer(42));
    assert_eq!(atom("-7"), Atom::Integer(-7));
    assert_eq!(atom("+7"), Atom::Integer(7));
    assert_eq!(atom("0"), Atom::Integer(0));
    assert_eq!(atom("007"), Atom::Integer(7));
    assert_eq!(atom("0x1F"), Atom::Integer(31));
    assert_eq!(atom("0XfF"), Atom::Integer(255));
    assert_eq!(atom("-0x10"), Atom::Integer(-16));
    assert_eq!(atom("0o17"), Atom::Integer(15));
    assert_eq!(atom("0O777"), Atom::Integer(511));
    assert_eq!(atom("9223372036854775807"), Atom::Integer(i64::MAX));
    assert_eq!(atom("-9223372036854775808"), Atom::Integer(i64::MIN));
    assert_eq!(atom("0x7FFFFFFFFFFFFFFF"), Atom::Integer(i64::MAX));
}

#[test]
fn integers_out_of_range() {
    for text in ["9223372036854775808", "-9223372036854775809", "0xFFFFFFFFFFFFFFFF", "123456789012345678901234567890"]
    {
        let (under, msg) = one_error(text);
        assert_eq!(under, text);
        assert!(msg.contains("for a 64-bit Integer"), "{msg}");
        assert_eq!(read_sexprs(text).0[0].kind, SExprKind::Atom(Atom::Invalid));
    }
}

#[test]
fn floats() {
    assert_eq!(atom("1.5"), Atom::Float(1.5));
    assert_eq!(atom("0.0"), Atom::Float(0.0));
    assert_eq!(atom("-1e38"), Atom::Float(-1e38));
    assert_eq!(atom("1.5e-3"), Atom::Float(1.5e-3));
    assert_eq!(atom("+2.0E+5"), Atom::Float(2.0e5));
    assert_eq!(atom("1e5"), Atom::Float(1e5));
    assert_eq!(atom("100000.0"), Atom::Float(100000.0));
    assert_eq!(atom("-0.5"), Atom::Float(-0.5));
}

#[test]
fn malformed_numbers() {
    for text in ["1.", "12ab", "1e", "1e+", "1.5e", "0x", "0xG", "0o8", "1.2.3", "-1.", "3_000", "0b101", "1.e5"] {
        let (under, msg) = one_error(text);
        assert_eq!(under, text);
        assert!(msg.starts_with("malformed number literal"), "{text}: {msg}");
    }
    assert_eq!(one_error("1e999").1, "float literal `1e999` is out of range");
    // Too close to 0 is out of range too (it was silently 0.0); zero
    // written with an exponent, and subnormals, are values.
    for text in ["1e-400", "-2.5e-330", "0.0001e-321"] {
        assert!(one_error(text).1.contains("too close to 0"), "{text}");
    }
    for text in ["0e-400", "0.0e5", "1e-310", "-4.9e-324"] {
        let forms = read(text);
        assert!(matches!(forms[0].kind, SExprKind::Atom(Atom::Float(_))), "{text}");
    }
    let errs = errors("12ab");
    assert_eq!(errs[0].note.as_deref(), Some("names cannot start with a digit"));
    let errs = errors("1.");
    assert!(errs[0].note.as_deref().is_some_and(|n| n.contains("`1.0`")), "{errs:?}");
}

#[test]
fn symbols() {
    for s in [
        "x",
        "get$1$2",
        "x'",
        "aten::mul",
        "$ranhashdoub",
        "a.b",
        "fun@ii",
        "R$dot",
        ":",
        "-",
        "+",
        "-x",
        ".5",
        "+.5",
        "a1",
        "|",
        "~x?",
    ] {
        assert_eq!(atom(s), Atom::Symbol(s.to_string()), "{s}");
    }
    // `:` is an identifier character, so this is one symbol.
    assert_eq!(atom("x:Float"), Atom::Symbol("x:Float".to_string()));
}

#[test]
fn strings_and_escapes() {
    assert_eq!(atom(r#""hello""#), Atom::String("hello".into()));
    assert_eq!(atom(r#""""#), Atom::String(String::new()));
    assert_eq!(atom(r#""\n\t\r\\\"\'\a\b\f\v""#), Atom::String("\n\t\r\\\"'\u{7}\u{8}\u{c}\u{b}".into()));
    assert_eq!(atom(r#""\65\x41\o101\x3bb""#), Atom::String("AAA\u{3bb}".into()));
    assert_eq!(atom(r#""\1234\&5""#), Atom::String("\u{4d2}5".into()));
    assert_eq!(atom(r#""a\^Ab""#), Atom::String("a\u{1}b".into()));
    assert_eq!(atom("\"a\\   \n   \\b\""), Atom::String("ab".into()));
    assert_eq!(atom("\"λ (x)\""), Atom::String("λ (x)".into()));
    // A string delimits tokens on both sides.
    assert_eq!(show_all(r#"(f"a"b)"#), r#"(f "a" b)"#);
}

#[test]
fn bad_strings() {
    let (under, msg) = one_error(r#"(f "a\qb" x)"#);
    assert_eq!(under, r"\q");
    assert!(msg.contains("unknown escape"), "{msg}");
    assert_eq!(show_all(r#"(f "a\qb" x)"#), "(f <invalid> x)");

    let (under, msg) = one_error("(f \"abc\n x)");
    assert_eq!(under, "\"");
    assert!(msg.contains("unterminated string"), "{msg}");
    assert_eq!(show_all("(f \"abc\n x)"), "(f <invalid> x)");

    assert!(one_error("\"abc").1.contains("unterminated string"));
    assert!(one_error("\"abc\\").1.contains("unterminated string"));
    assert!(one_error(r#""\x""#).1.contains("missing hexadecimal digits"));
    assert!(one_error(r#""\1114112""#).1.contains("not a valid Unicode character"));
    assert!(one_error(r#""\xD800""#).1.contains("not a valid Unicode character"));
    // NUL, escaped any way or written as is, is refused.
    for s in [r#""a\0b""#, r#""\x0""#, r#""\o00""#, r#""\^@""#, "\"a\0b\""] {
        let (_, msg) = one_error(s);
        assert!(msg.contains("NUL"), "{s}: {msg}");
        assert_eq!(show_all(s), "<invalid>", "{s}");
    }
    // Two bad escapes in one string: both reported.
    assert_eq!(errors(r#""\q\z""#).len(), 2);
}

#[test]
fn lists_and_spans() {
    let text = "(def f [g Float]\n  (x 1))";
    let forms = read(text);
    assert_eq!(forms.len(), 1);
    assert_eq!(show(&forms[0]), "(def f [g Float] (x 1))");
    assert_eq!(forms[0].span, Span::new(0, text.len()));
    let (_, items) = forms[0].as_list().unwrap();
    assert_eq!(&text[items[2].span.range()], "[g Float]");
    assert_eq!(items[2].as_list().unwrap().0, Bracket::Square);
    assert_eq!(&text[items[3].span.range()], "(x 1)");
    assert_eq!(&text[items[1].span.range()], "f");
    assert!(forms[0].brackets_balanced());
    assert_eq!(show_all("() [] (())"), "() [] (())");
}

#[test]
fn comments() {
    assert_eq!(show_all("; comment\n(a b) ; more\n(c)"), "(a b) (c)");
    assert_eq!(show_all("#| a #| b |# c |# (x)"), "(x)");
    assert_eq!(show_all("(a #| inside |# b)"), "(a b)");
    assert_eq!(show_all("(a;c\nb)"), "(a b)");
    assert_eq!(show_all("x#|c|#y"), "x y");
    assert_eq!(show_all("#|#||#|#z"), "z");
    assert_eq!(show_all("; only a comment"), "");
    let (under, msg) = one_error("(a) #| x #| y |# (b)");
    assert_eq!(under, "#|");
    assert!(msg.contains("unterminated block comment"));
    // The error is at the outer comment's start.
    assert_eq!(errors("(a) #| x #| y |# (b)")[0].span, Span::new(4, 6));
}

#[test]
fn byte_order_mark_is_ignored() {
    assert_eq!(show_all("\u{FEFF}(a)"), "(a)");
}

#[test]
fn invalid_characters() {
    let (under, msg) = one_error("(f { x)");
    assert_eq!(under, "{");
    assert_eq!(msg, "unexpected character `{`");
    assert_eq!(show_all("(f { x)"), "(f x)");

    // Glued to a name, the whole token becomes a placeholder.
    let (under, msg) = one_error("(f naïve x)");
    assert_eq!(under, "ï");
    assert_eq!(msg, "unexpected character `ï`");
    assert_eq!(show_all("(f naïve x)"), "(f <invalid> x)");

    assert_eq!(one_error("(f \u{1} x)").1, "unexpected character U+0001");
    assert_eq!(one_error("#t").1, "unexpected character `#`");
    assert_eq!(one_error("a`b").0, "`");
    // Two separate bad characters in one token: two errors.
    assert_eq!(errors("a{b}c").len(), 2);
    // A run of bad characters is one error.
    assert_eq!(one_error("(x {{{ y)").0, "{{{");
}

#[test]
fn stray_and_mismatched_brackets() {
    let (under, msg) = one_error("(a)) (b)");
    assert_eq!(under, ")");
    assert!(msg.contains("unexpected `)`"));
    assert_eq!(show_all("(a)) (b)"), "(a) (b)");

    let (under, msg) = one_error("(a b]");
    assert_eq!(under, "]");
    assert_eq!(msg, "mismatched brackets: `(` closed by `]`");
    let forms = read_sexprs("(a b]").0;
    assert_eq!(show(&forms[0]), "(a b)");
    assert!(!forms[0].brackets_balanced());
    let err = &errors("\n  (a b]")[0];
    assert_eq!(err.note.as_deref(), Some("the `(` opened at line 2, column 3 should be closed by `)`"));
}

#[test]
fn unclosed_at_end_of_file() {
    let text = "(a) (b (c d)";
    let (under, msg) = one_error(text);
    assert_eq!(under, "(");
    assert_eq!(msg, "unclosed `(`: no matching `)` at the end of the file");
    assert_eq!(errors(text)[0].span, Span::new(4, 5));
    let forms = read_sexprs(text).0;
    assert_eq!(show_all(text), "(a) (b (c d))");
    assert!(!forms[1].brackets_balanced());
    assert_eq!(&text[forms[1].span.range()], "(b (c d)");

    let errs = errors("(a (b (c");
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].span, Span::new(0, 1));
    assert_eq!(errs[0].note.as_deref(), Some("2 more lists opened inside it are not closed either"));
    assert_eq!(one_error("[x").1, "unclosed `[`: no matching `]` at the end of the file");
}

#[test]
fn unclosed_recovers_at_next_line_starting_with_paren() {
    let text = "(def f Float (x : Float)\n  (add x 1.0)\n(def g Float (y : Float) y)\n(def h)";
    let (forms, errs) = read_sexprs(text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].span, Span::new(0, 1));
    assert_eq!(errs[0].message, "unclosed `(`: no matching `)` before the next top-level `(` on line 3");
    let shown: Vec<String> = forms.iter().map(show).collect();
    assert_eq!(shown, ["(def f Float (x : Float) (add x 1.0))", "(def g Float (y : Float) y)", "(def h)"]);
    assert!(!forms[0].brackets_balanced());
    assert!(forms[1].brackets_balanced());

    // Two unclosed forms in a row: both reported, everything kept.
    let (forms, errs) = read_sexprs("(a\n(b\n(c)");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(forms.len(), 3);

    // A `(` at the start of a line inside a form that is closed is fine.
    assert_eq!(show_all("(a\n(b))"), "(a (b))");
}

#[test]
fn deep_nesting_is_cut() {
    let depth = MAX_DEPTH;
    let ok = format!("{}x{}", "(".repeat(depth), ")".repeat(depth));
    assert!(errors(&ok).is_empty());

    let deep = format!("{}x{} (y)", "(".repeat(depth + 1), ")".repeat(depth + 1));
    let (forms, errs) = read_sexprs(&deep);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].message, "nesting deeper than 1000 levels");
    assert_eq!(errs[0].span, Span::new(depth, depth + 1));
    assert_eq!(forms.len(), 2);

    for text in ["(".repeat(100_000), "[".repeat(100_000), ")".repeat(100_000), "(\n".repeat(100_000)] {
        let (_, errs) = read_sexprs(&text);
        assert!(!errs.is_empty());
        assert!(errs.iter().all(|e| e.span.end as usize <= text.len()));
    }
}

#[test]
fn error_recovery_reports_every_error() {
    let text = "(a 1. \"\\q\" { ) ] (b 0x) (c";
    let errs = errors(text);
    let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(errs.len(), 6, "{msgs:?}");
    assert!(msgs[0].contains("malformed number"));
    assert!(msgs[1].contains("unknown escape"));
    assert!(msgs[2].contains("unexpected character"));
    assert!(msgs[3].contains("unexpected `]`"));
    assert!(msgs[4].contains("malformed number"));
    assert!(msgs[5].contains("unclosed"));
}

#[test]
fn an_unterminated_string_is_the_only_error_of_the_brackets_it_took() {
    for text in ["(def f Integer () (print \"abc))\n(def g Float () 1.0)", "(a (b \"x)])"] {
        let errs = errors(text);
        assert_eq!(errs.len(), 1, "{text}: {errs:?}");
        assert!(errs[0].message.starts_with("unterminated string literal"), "{errs:?}");
    }
}
