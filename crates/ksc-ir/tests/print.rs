//! The printer of Core IR.

use ksc_ir::print::{print_expr, print_float, quote_string};

#[test]
fn floats_read_back() {
    for f in [1.0, -1.5e-7, 1e16, 0.1, 123456.789, 5e-324, f64::MAX] {
        let s = print_float(f);
        assert_eq!(s.parse::<f64>().unwrap().to_bits(), f.to_bits(), "{s}");
    }
    assert_eq!(print_float(2.0), "2.0");
}

#[test]
fn literal_after_a_sign_variable_keeps_its_own_sign() {
    use ksc_ir::core::{Body, Callee, Expr, Lit};
    use ksc_ir::names::FunName;
    let mut b = Body::new();
    let v = b.alloc(Expr::Var("-".into()));
    let three = b.alloc(Expr::Lit(Lit::Integer(3)));
    let neg = b.alloc(Expr::Lit(Lit::Integer(-3)));
    let args = b.alloc(Expr::Tuple(vec![v, three, v, neg]));
    let call = b.alloc(Expr::Call(Callee::Fun(FunName::plain("f")), args));
    assert_eq!(print_expr(&b, call), "(f - +3 - -3)");
}

#[test]
fn strings_are_escaped() {
    assert_eq!(quote_string("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    assert_eq!(quote_string("\u{1}2"), "\"\\1\\&2\"");
}

/// A deep nest (a chain of calls, each the argument of the one before, as
/// reverse mode makes of a long chain of calls) prints in space linear in
/// its size: indentation stops growing at a fixed column. So does a chain
/// of lets that cannot share one binding list.
#[test]
fn deep_nests_print_in_linear_space() {
    use ksc_ir::core::{Body, Callee, Expr, Lit, Pat};
    use ksc_ir::names::FunName;
    let depth = 3000;
    let mut b = Body::new();
    let mut e = b.alloc(Expr::Var("a_long_variable_name".into()));
    for _ in 0..depth {
        let x = b.alloc(Expr::Var("another_long_variable_name".into()));
        let args = b.alloc(Expr::Tuple(vec![x, e]));
        e = b.alloc(Expr::Call(Callee::Fun(FunName::plain("some_function")), args));
    }
    let calls = print_expr(&b, e);
    // Every call on its own line (the nest is far wider than a line),
    // indented at most to the deepest column (the last line closes them
    // all: a parenthesis a call).
    let indent = |l: &str| l.len() - l.trim_start().len();
    assert!(calls.lines().count() >= depth, "{} lines", calls.lines().count());
    assert!(calls.lines().all(|l| indent(l) <= 80), "indented {}", calls.lines().map(indent).max().unwrap());
    assert!(calls.len() < 250 * depth, "{} bytes for {depth} calls", calls.len());
    // (let (x (f x)) (let ((y z) ..) ..)): a variable then a tuple pattern
    // cannot share a binding list, so each let nests in the one before.
    let mut b = Body::new();
    let mut e = b.alloc(Expr::Lit(Lit::Integer(0)));
    for i in 0..depth {
        let x = b.alloc(Expr::Var("x".into()));
        let pat = if i % 2 == 0 { Pat::Var("x".into()) } else { Pat::Tuple(vec!["x".into(), "y".into()]) };
        e = b.alloc(Expr::Let(pat, x, e));
    }
    let lets = print_expr(&b, e);
    assert!(lets.lines().count() >= depth, "{} lines", lets.lines().count());
    assert!(lets.lines().all(|l| indent(l) <= 80), "indented {}", lets.lines().map(indent).max().unwrap());
    assert!(lets.len() < 250 * depth, "{} bytes for {depth} lets", lets.len());
}
