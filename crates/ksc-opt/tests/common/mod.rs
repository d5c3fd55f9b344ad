//! Helpers shared by the integration tests: checked programs as input, the
//! reference interpreter to compare before and after, printing.

#![allow(dead_code)]

pub mod terms;

use ksc_eval::{Interpreter, Value};
use ksc_ir::{Decl, Def, FunName};
use ksc_types::Analysis;

/// Reads and checks a program; panics with the diagnostics if it has errors.
pub fn checked(text: &str) -> Analysis {
    let a = ksc_types::analyze(text);
    assert!(!a.has_errors(), "test program does not check:\n{:#?}", a.diagnostics);
    a
}

/// The user's definition whose base name is `base` (the first one).
pub fn user_def(a: &Analysis, base: &str) -> Def {
    a.source
        .decls
        .iter()
        .find_map(|d| match d {
            Decl::Def(d) if d.name.base == base => Some(d.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no def {base}"))
}

/// The user's rule declarations.
pub fn user_rules(a: &Analysis) -> Vec<ksc_ir::Rule> {
    a.source
        .decls
        .iter()
        .filter_map(|d| match d {
            Decl::Rule(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Every definition in force, with `replacement` instead of the definition
/// of the same name.
pub fn defs_with<'a>(a: &'a Analysis, replacement: &'a Def) -> Vec<&'a Def> {
    a.defs().into_iter().map(|d| if d.name == replacement.name { replacement } else { d }).collect()
}

/// Runs `name` on `arg` in the interpreter over `defs`: the value (or the
/// error message) and what it printed.
pub fn run(defs: &[&Def], name: &FunName, arg: Value) -> (Result<Value, String>, String) {
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut out = Vec::new();
    let r = interp.call(name, arg, &mut out).map_err(|e| e.message);
    (r, String::from_utf8_lossy(&out).into_owned())
}

/// Equal values: floats numerically (so -0.0 is 0.0, and NaN is NaN).
pub fn same_value(a: &Value, b: &Value) -> bool {
    close_value(a, b, 0.0)
}

/// [`same_value`], Floats within a relative `tolerance` (of the larger
/// magnitude, and of 1).
pub fn close_value(a: &Value, b: &Value, tolerance: f64) -> bool {
    let same_value = |a, b| close_value(a, b, tolerance);
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => {
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= tolerance * x.abs().max(y.abs()).max(1.0)
        }
        (Value::Integer(x), Value::Integer(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Tuple(xs), Value::Tuple(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys.iter()).all(|(x, y)| same_value(x, y))
        }
        (Value::Tensor(x), Value::Tensor(y)) => {
            x.shape == y.shape
                && x.data.len() == y.data.len()
                && x.data.iter().zip(&y.data).all(|(p, q)| same_value(p, q))
        }
        _ => false,
    }
}

/// The definition printed as `.ks`.
pub fn print_def(d: &Def) -> String {
    ksc_ir::print::print_def(d)
}

/// An expression printed with function names without their base types
/// (`add` for `[add (Tuple Float Float)]`), for readable expectations.
pub fn short(body: &ksc_ir::Body, root: ksc_ir::ExprId) -> String {
    let mut b = body.clone();
    let ids: Vec<ksc_ir::ExprId> = b.exprs.iter().map(|(id, _)| id).collect();
    for id in ids {
        if let ksc_ir::Expr::Call(ksc_ir::Callee::Fun(f), a) = &b.exprs[id] {
            let (f, a) = (f.with_base_ty(None), *a);
            b.exprs[id] = ksc_ir::Expr::Call(ksc_ir::Callee::Fun(f), a);
        }
    }
    ksc_ir::print::print_expr(&b, root)
}

/// A definition's body printed with [`short`].
pub fn short_def(d: &Def) -> String {
    short(&d.body, d.root)
}
