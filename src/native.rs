//! `ksc run` (native) and `ksc build`: Core IR to loop IR to C, the system
//! C compiler, and running the result.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ksc_codegen_c::{compile_c, run_executable, Artefact, CcConfig, Outcome, Target};
use ksc_eval::RuntimeError;
use ksc_ir::{FunName, Type};
use ksc_lower::ir::{Module, SiteId};

use crate::{compile, main_of, runtime_diagnostic, Compiled, FAILURE, USAGE};

/// Options of native compilation shared by `run` and `build`.
#[derive(Args, Clone, Debug, Default)]
pub struct NativeOptions {
    /// Remove index bounds checks and Integer overflow checks (for
    /// benchmarking; assertions and division by zero stay checked).
    #[arg(long)]
    pub unchecked: bool,
    /// Flags for the C compiler, replacing the default `-O3 -march=native`
    /// (also `$KSC_CFLAGS`). The compiler is `$CC`, else `cc`.
    #[arg(long, value_name = "FLAGS", allow_hyphen_values = true)]
    pub cflags: Option<String>,
}

/// What `ksc build` writes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// `NAME.c` (self-contained: the runtime is included) and `NAME.h`.
    C,
    /// `NAME.o` and `NAME.h`.
    Obj,
    /// `libNAME.so` and `NAME.h`.
    So,
    /// `NAME`, an executable running `main`.
    Exe,
    /// `NAME.loops`, the optimised loop IR (for reading).
    Loops,
    /// `NAME.ks`, the program with its derived functions, as `.ks` that ksc
    /// reads, checks and runs again with the same output.
    Ks,
}

fn config(opts: &NativeOptions) -> CcConfig {
    let mut cfg = CcConfig::from_env();
    if let Some(f) = &opts.cflags {
        cfg.cflags = ksc_codegen_c::driver::split_flags(f);
    }
    cfg
}

/// What a library exports: every definition of the user's file and every
/// derived function whose type has no lambda or linear map.
pub(crate) fn export_roots(analysis: &ksc_types::Analysis) -> Vec<FunName> {
    let defs = analysis.defs();
    analysis
        .source
        .decls
        .iter()
        .filter_map(|d| match d {
            ksc_ir::Decl::Def(d) => Some(d),
            _ => None,
        })
        .filter(|d| defs.iter().any(|x| x.name == d.name))
        .chain(analysis.derived.iter())
        .filter(|d| plain(&d.ret_ty) && d.params.iter().all(|p| plain(&p.ty)))
        .map(|d| d.name.clone())
        .collect()
}

fn internal_error(what: &str) -> ExitCode {
    eprintln!("error: {what}\n  = note: this is a bug in ksc; `ksc run --interp` runs the program with the interpreter");
    ExitCode::from(FAILURE)
}

/// `ksc run FILE`: compile natively and run `main`.
pub fn run(path: &Path, opts: &NativeOptions) -> ExitCode {
    let Compiled { db, file, analysis, sources } = match compile(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let main_name = match main_of(&analysis, &sources) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let (roots, checked) = (vec![main_name.clone()], !opts.unchecked);
    let display = path.display().to_string();
    let prog = match ksc_db::c_unit(&db, file, display, roots.clone(), checked, Target::Executable, String::new()) {
        Ok(p) => p,
        Err(e) => return internal_error(e),
    };
    let Ok(module) = ksc_db::native_module(&db, file, roots, checked) else { unreachable!("c_unit succeeded") };
    let exe = match compile_c(&prog.c, None, Artefact::Executable, &config(opts)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(FAILURE);
        }
    };
    match run_executable(&exe, &[]) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failed { message, site, frames }) => {
            let mut e = runtime_error(module, message, site, &frames);
            if e.location.is_none() {
                // A failure with no site of its own (running out of memory
                // in `main` itself): blame `main`'s body.
                e.location = analysis.defs().into_iter().find(|d| d.name == main_name).map(|d| (d.name.clone(), d.root));
            }
            sources.emit(&[runtime_diagnostic(&analysis, &e)]);
            ExitCode::from(FAILURE)
        }
        Ok(Outcome::Abnormal(how)) => {
            eprintln!("error: the compiled program ended abnormally ({how})");
            ExitCode::from(FAILURE)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(FAILURE)
        }
    }
}

/// The interpreter's form of a native run-time error: the failing
/// expression and the call sites, innermost first, expanding inlined calls.
fn runtime_error(m: &Module, message: String, site: i64, frames: &[i64]) -> RuntimeError {
    let get = |s: i64| usize::try_from(s).ok().and_then(|s| m.sites.get(s));
    let mut stack = Vec::new();
    let push_chain = |mut s: Option<SiteId>, stack: &mut Vec<(FunName, ksc_ir::ExprId)>| {
        while let Some(site) = s.and_then(|s| m.sites.get(s.0 as usize)) {
            stack.push((site.fun.clone(), site.expr));
            s = site.inlined_at;
        }
    };
    let location = get(site).map(|s| {
        push_chain(s.inlined_at, &mut stack);
        (s.fun.clone(), s.expr)
    });
    for &f in frames {
        if f >= 0 {
            push_chain(Some(SiteId(f as u32)), &mut stack);
        }
    }
    RuntimeError { message, location, stack }
}

/// `ksc build FILE`: write the C, header and compiled artefacts.
pub fn build(path: &Path, out_dir: Option<&Path>, emit: Emit, opts: &NativeOptions) -> ExitCode {
    let Compiled { db, file, analysis, .. } = match compile(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let display = path.display().to_string();
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("program").to_string();
    let stem: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    let out_dir: PathBuf = out_dir.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("error: cannot create `{}`: {e}", out_dir.display());
        return ExitCode::from(USAGE);
    }
    let roots = export_roots(&analysis);
    if emit == Emit::Ks {
        let p = out_dir.join(format!("{stem}.ks"));
        return match std::fs::write(&p, crate::emit_ks(&analysis)) {
            Ok(()) => {
                eprintln!("wrote {}", p.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot write `{}`: {e}", p.display());
                ExitCode::from(USAGE)
            }
        };
    }
    let main = analysis.main().map(|s| s.name.clone());
    let roots = if emit == Emit::Exe {
        match &main {
            Some(m) => vec![m.clone()],
            None => {
                eprintln!("error: `--emit exe` needs a `main`: `(def main Integer () ...)`");
                return ExitCode::from(FAILURE);
            }
        }
    } else {
        roots
    };
    let checked = !opts.unchecked;
    let module = match ksc_db::native_module(&db, file, roots.clone(), checked) {
        Ok(m) => m,
        Err(e) => return internal_error(e),
    };
    let write = |name: String, contents: &[u8]| -> Result<PathBuf, ExitCode> {
        let p = out_dir.join(name);
        std::fs::write(&p, contents).map_err(|e| {
            eprintln!("error: cannot write `{}`: {e}", p.display());
            ExitCode::from(USAGE)
        })?;
        Ok(p)
    };
    let result = (|| -> Result<Vec<PathBuf>, ExitCode> {
        if emit == Emit::Loops {
            return Ok(vec![write(format!("{stem}.loops"), module.pretty().as_bytes())?]);
        }
        let header_name = format!("{stem}.h");
        let target = if emit == Emit::Exe { Target::Executable } else { Target::Library };
        let prog = ksc_db::c_unit(&db, file, display.clone(), roots.clone(), checked, target, header_name.clone())
            .as_ref()
            .map_err(|e| internal_error(e))?;
        let mut written = Vec::new();
        if target == Target::Library {
            written.push(write(header_name.clone(), prog.header.as_bytes())?);
        }
        let header = (target == Target::Library).then_some((header_name.as_str(), prog.header.as_str()));
        let (kind, name) = match emit {
            Emit::C => {
                written.push(write(format!("{stem}.c"), prog.c.as_bytes())?);
                return Ok(written);
            }
            Emit::Obj => (Artefact::Object, format!("{stem}.o")),
            Emit::So => (Artefact::SharedLibrary, format!("lib{stem}.so")),
            Emit::Exe | Emit::Loops | Emit::Ks => (Artefact::Executable, stem.clone()),
        };
        let built = compile_c(&prog.c, header, kind, &config(opts)).map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(FAILURE)
        })?;
        let bytes = std::fs::read(&built).map_err(|e| {
            eprintln!("error: cannot read `{}`: {e}", built.display());
            ExitCode::from(FAILURE)
        })?;
        let p = write(name, &bytes)?;
        #[cfg(unix)]
        if kind == Artefact::Executable {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
        }
        written.push(p);
        Ok(written)
    })();
    match result {
        Ok(files) => {
            for f in files {
                eprintln!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// A type the C ABI can carry (no lambdas, linear maps or unknowns).
fn plain(t: &Type) -> bool {
    match t {
        Type::Bool | Type::Integer | Type::Float | Type::String => true,
        Type::Tuple(ts) => ts.iter().all(plain),
        Type::Tensor(_, e) => plain(e),
        _ => false,
    }
}
