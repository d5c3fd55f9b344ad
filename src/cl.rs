//! `ksc cl`: print the categorical-language (CL) term of a function.

use std::path::Path;
use std::process::ExitCode;

use ksc_ir::{FunName, Type};

pub fn cl(path: &Path, func: &str, check: bool) -> ExitCode {
    let Ok((analysis, _)) = crate::analyze(path) else { return ExitCode::from(1) };
    let f = match crate::deriv::find(&analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    // As `(gdef CL ..)` reads it (`ksc_ad::derivation_form_in`: lambdas
    // written in, mutual recursion made self-recursion; where that fails,
    // CL's own error follows).
    let form = ksc_ad::derivation_form_in(&analysis.defs(), f).ok().flatten();
    let (f, copies): (&ksc_ir::Def, &[ksc_ir::Def]) = form.as_ref().map_or((f, &[]), |(d, c)| (d, c));
    // The passes recurse on the nesting of the body: give them a big stack.
    ksc_cl::on_big_stack(|| {
        let term = match ksc_cl::def_to_cl(f) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: `{}` cannot be translated to CL: {e}", f.name.short());
                return ExitCode::from(1);
            }
        };
        println!("{}", term.pretty());
        if check {
            // Γ: the program's functions, derived ones included.
            let sigs = |g: &FunName| -> Option<(Type, Type)> {
                analysis.table.get(g).map(|s| (s.arg_ty.clone(), s.ret_ty.clone())).or_else(|| {
                    // Derived functions, and the copies of functions
                    // taking lambdas that f's form calls.
                    analysis.derived.iter().chain(copies).find(|d| &d.name == g).map(|d| (d.arg_ty(), d.ret_ty.clone()))
                })
            };
            let (s, t) = ksc_cl::def_type(f);
            match ksc_cl::check(&term, &s, &t, &sigs) {
                Ok(()) => println!("; {} : {s} => {t}", f.name.short()),
                Err(e) => {
                    eprintln!("error: the CL term of `{}` does not type-check (a ksc bug): {e}", f.name.short());
                    return ExitCode::from(1);
                }
            }
        }
        ExitCode::SUCCESS
    })
}
