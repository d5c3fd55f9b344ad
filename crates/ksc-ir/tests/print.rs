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
