//! `ksc jacobian` and `ksc deriv`: print what automatic differentiation
//! makes of a function, as `.ks`.

use std::path::Path;
use std::process::ExitCode;

use ksc_ir::{Decl, Derivation, FunName};

/// Which derived function `ksc deriv` prints.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    /// `[fwd f] : (S, dS) -> dT`, forward mode.
    Fwd,
    /// `[rev f] : (S, dT) -> dS`, reverse mode.
    Rev,
}

/// The functions of the file's source with this base name.
fn find<'a>(analysis: &'a ksc_types::Analysis, func: &str) -> Result<&'a ksc_ir::Def, String> {
    let mut defs: Vec<&ksc_ir::Def> = analysis
        .source
        .decls
        .iter()
        .filter_map(|d| match d {
            Decl::Def(d) if d.name.to_string() == func || (d.name.derivs.is_empty() && d.name.base == func) => Some(d),
            _ => None,
        })
        .collect();
    if defs.is_empty() {
        // A derived function, by its full name: `[rev [f Float]]`.
        defs.extend(analysis.derived.iter().filter(|d| d.name.to_string() == func));
    }
    match defs[..] {
        [d] => Ok(d),
        [] => Err(format!("no function `{func}` is defined in the file")),
        _ => Err(format!(
            "`{func}` is overloaded; name one of: {}",
            defs.iter().map(|d| format!("`{}`", d.name)).collect::<Vec<_>>().join(", ")
        )),
    }
}

pub fn jacobian(path: &Path, func: &str) -> ExitCode {
    let Ok((analysis, _)) = crate::analyze(path) else { return ExitCode::from(1) };
    let f = match find(&analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    let written: Vec<&ksc_ir::Def> =
        analysis.defs().into_iter().filter(|d| !analysis.derived.iter().any(|x| x.name == d.name)).collect();
    match ksc_ad::jacobian(f, &written) {
        Ok(d) => {
            println!("{}", ksc_ir::print::print_def(&d));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot derive `[D {}]`: {}", f.name.short(), e.message);
            ExitCode::from(1)
        }
    }
}

pub fn deriv(path: &Path, func: &str, mode: Mode) -> ExitCode {
    let Ok((analysis, _)) = crate::analyze(path) else { return ExitCode::from(1) };
    let f = match find(&analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    let d = match mode {
        Mode::Fwd => Derivation::Fwd,
        Mode::Rev => Derivation::Rev,
    };
    let name: FunName = f.name.derived(d);
    // Derive afresh from the program as written (not from what its gdefs made).
    let written: Vec<&ksc_ir::Def> =
        analysis.defs().into_iter().filter(|d| !analysis.derived.iter().any(|x| x.name == d.name)).collect();
    let derived = ksc_ad::derive_requested(&written, std::slice::from_ref(&name));
    if let Some((n, e)) = derived.errors.first() {
        eprintln!("error: cannot derive `{}`: {}", n.short(), e.message);
        return ExitCode::from(1);
    }
    // The requested function first, then the callees' derivatives it needs.
    for def in &derived.defs {
        println!("{}\n", ksc_ir::print::print_def(def));
    }
    ExitCode::SUCCESS
}
