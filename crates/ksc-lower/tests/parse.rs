//! The loop IR's text format (`parse.rs`): functions printed alone, maths functions, errors.

use ksc_ir::Type;
use ksc_lower::ir::*;
use ksc_lower::parse::parse_module;

/// A function printed alone names its callees `fn#k`, which parse back
/// as `FuncId(k)`; types come from definitions.
#[test]
fn a_function_printed_alone_parses_back() {
    let text = "fn g (%0:x: (Vec Float)) -> Float {\n  %1 = dim %0.0\n  %2 = load %0[0]\n  \
                %3 = call fn#4(%2, %1) @7\n  mut %4\n  %4 := %3\n  return %2\n}\n";
    let m = parse_module(text).unwrap();
    let f = &m.funcs[0];
    assert_eq!(f.pretty(), text);
    assert!(matches!(&f.body[2], Stmt::Let(_, Rhs::Call { func: FuncId(4), frame: Some(SiteId(7)), .. })));
    assert_eq!((&f.vars[1].ty, &f.vars[2].ty), (&Type::Integer, &Type::Float));
    assert!(f.vars[4].mutable && !f.vars[3].mutable);
}

/// Every maths function reads back as itself.
#[test]
fn every_maths_function_reads_back() {
    for m in MathFn::ALL {
        let name = m.c_name().trim_start_matches("ksrt_");
        let text = format!("fn g (%0:x: Float) -> Float {{\n  %1 = {name} %0\n  return %1\n}}\n");
        let f = &parse_module(&text).unwrap().funcs[0];
        assert!(matches!(&f.body[0], Stmt::Let(_, Rhs::Un(UnOp::Math(n), _, _)) if *n == m), "{name}");
        assert_eq!(f.pretty(), text);
    }
}

/// Errors say where.
#[test]
fn what_is_not_loop_ir_is_reported_at_its_line() {
    let at = |text: &str| parse_module(text).map(|_| ()).map_err(|e| e.line);
    assert_eq!(at("fn f () -> Float {\n  %1 = frobnicate %0\n}\n"), Err(2));
    assert_eq!(at("fn f () -> Float {\n\n  return 1.0\n"), Err(3));
    assert_eq!(at("fn f () -> Float {\n  %1 = call nowhere()\n}\n"), Err(2));
    assert_eq!(at("fn f () -> Float {\n  check %0 @1 no-such-error\n}\n"), Err(2));
    assert_eq!(at("fn f () -> Float {\n  return 1.0\n}\n"), Ok(()));
}
