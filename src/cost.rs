//! `ksc deriv --cost --at ARGS`: what a derived function costs. The
//! interpreter's operation count (`ksc_eval::Interpreter::operations`, the
//! measure the cost tests of `crates/ksc-ad/tests/cost.rs` bound) of the
//! function and of its derivative at a point; and, for every derived
//! function printed, the loops, allocations and lines of C of the code
//! `ksc build` makes of it (ksc_db's queries).

use std::process::ExitCode;

use ksc_eval::{Interpreter, Value};
use ksc_ir::{Def, Derivation, FunName};
use ksc_lower::ir::{Rhs, Stmt};

use crate::deriv::AtPoint;

/// The argument `[d f]` is measured with, given the point `x` and `f`'s
/// value `y` there; or why it is not measured.
fn derivative_argument(d: Derivation, x: &Value, y: &Value) -> Result<Value, String> {
    match d {
        Derivation::Fwd => Ok(Value::Tuple(vec![x.clone(), ksc_eval::tangent_ones(x)].into())),
        Derivation::Rev => Ok(Value::Tuple(vec![x.clone(), ksc_eval::tangent_ones(y)].into())),
        Derivation::Shape
        | Derivation::SufFwdPass
        | Derivation::Jac
        | Derivation::Jac1
        | Derivation::JacSparse
        | Derivation::JacSparse1 => Ok(x.clone()),
        d => Err(format!("`--cost` does not measure `{}` (its argument is not the point)", d.keyword())),
    }
}

/// What the derivative is given besides the point, for the table's
/// heading.
fn direction(d: Derivation) -> &'static str {
    match d {
        Derivation::Fwd => "; tangent: 1.0 for every Float of the point",
        Derivation::Rev => "; cotangent: 1.0 for every Float of the result",
        _ => "",
    }
}

/// Checks that `--cost` can measure `mode` (before anything is printed).
pub fn check_mode(d: Derivation) -> Result<(), ExitCode> {
    let dummy = Value::unit();
    derivative_argument(d, &dummy, &dummy).map(|_| ()).map_err(|m| {
        eprintln!("error: {m}; it measures fwd, rev, shape, suffwdpass and the Jacobians");
        ExitCode::from(crate::USAGE)
    })
}

/// Prints the cost table of `[d f]` at `args` (`text` is the program,
/// `printed` the derived functions `ksc deriv` printed, `[d f]` first).
pub fn table(
    text: &str,
    analysis: &ksc_types::Analysis,
    f: &Def,
    d: Derivation,
    args: &str,
    printed: &[Def],
) -> ExitCode {
    let name = f.name.derived(d);
    // The derived function must be generated in the program the point is
    // added to: by a gdef of its own unless the file has one.
    let extra = if analysis.derived.iter().any(|x| x.name == name) {
        String::new()
    } else {
        format!("(gdef {} {})\n", d.keyword(), f.name)
    };
    let AtPoint { db, file, analysis } = match AtPoint::new(text, f, args, &extra) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let defs = analysis.defs();
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut measure = |n: &FunName, arg: Value| -> Result<(Value, (u64, u64)), String> {
        let (before, span) = (interp.operations(), interp.span());
        let v = interp
            .call(n, arg, &mut std::io::sink())
            .map_err(|e| format!("evaluating `{}` failed: {}", n.short(), e.message))?;
        Ok((v, (interp.operations() - before, interp.span() - span)))
    };
    let counts = (|| {
        let (x, _) = measure(&AtPoint::point(), Value::unit())?;
        let (y, primal) = measure(&f.name, x.clone())?;
        let (_, derivative) = measure(&name, derivative_argument(d, &x, &y)?)?;
        Ok::<_, String>((primal, derivative))
    })();
    let (primal, derivative) = match counts {
        Ok(c) => c,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(crate::FAILURE);
        }
    };
    println!("; cost at `--at {args}`{}", direction(d));
    let (fs, ds) = (f.name.short(), name.short());
    let w = fs.len().max(ds.len()).max("function".len());
    println!("; {:<w$}  {:>12}  {:>8}  {:>12}", "function", "operations", "ratio", "span");
    println!("; {fs:<w$}  {:>12}  {:>8.2}  {:>12}", primal.0, 1.0, primal.1);
    let ratio = derivative.0 as f64 / primal.0.max(1) as f64;
    println!("; {ds:<w$}  {:>12}  {ratio:>8.2}  {:>12}", derivative.0, derivative.1);
    println!(";");
    // The native code of each derived function printed.
    let w = printed.iter().map(|p| p.name.short().len()).max().unwrap_or(0).max("function".len());
    println!("; {:<w$}  {:>5}  {:>11}  {:>10}", "function", "loops", "allocations", "lines of C");
    for p in printed {
        match native(&db, file, p) {
            Ok(n) => println!("; {:<w$}  {:>5}  {:>11}  {:>10}", p.name.short(), n.loops, n.allocations, n.c_lines),
            Err(why) => println!("; {:<w$}  not compiled: {why}", p.name.short()),
        }
    }
    ExitCode::SUCCESS
}

/// What `ksc build` makes of one function.
struct Native {
    /// `for` statements, nested ones included.
    loops: usize,
    /// Statements that may take memory for a tensor: `Alloc`, `Reuse`
    /// (which takes fresh memory unless the dead vector has the size),
    /// `DeepCopy` and `TapePush`.
    allocations: usize,
    /// Lines of the function's C (without the wrapper a library exports).
    c_lines: usize,
}

/// The loop IR and C of `def` as `ksc build` emits them (checked, as a
/// library's export): the module of `def` alone, so that a function that
/// cannot be compiled does not hide the others.
fn native(db: &ksc_db::Database, file: ksc_db::SourceFile, def: &Def) -> Result<Native, String> {
    if !ksc_types::crosses_c_abi(&def.ret_ty) || !def.params.iter().all(|p| ksc_types::crosses_c_abi(&p.ty)) {
        return Err("its type has a lambda or a linear map, which `ksc build` does not export".into());
    }
    let roots = vec![def.name.clone()];
    let module = ksc_db::native_module(db, file, roots.clone(), true).as_ref().map_err(Clone::clone)?;
    let index = module
        .funcs
        .iter()
        .position(|g| g.name == def.name)
        .ok_or_else(|| "it is not in the module built for it (a ksc bug)".to_string())?;
    let func = &module.funcs[index];
    let (mut loops, mut allocations) = (0, 0);
    ksc_lower::visit::walk(&func.body, &mut |s| match s {
        Stmt::For { .. } => loops += 1,
        Stmt::Let(_, Rhs::Alloc { .. } | Rhs::Reuse { .. } | Rhs::DeepCopy(_) | Rhs::TapePush { .. }) => {
            allocations += 1
        }
        _ => {}
    });
    let c = ksc_db::c_function(db, file, ksc_db::Roots::new(db, roots), true, ksc_codegen_c::Target::Library, index);
    Ok(Native { loops, allocations, c_lines: c.text.lines().count() })
}
