//! The properties the fuzz targets check, one function per target, and the
//! input guards that keep a run within the shared machine's memory and
//! time. The test suite replays the reproducers of `tests/fuzz-regressions/`
//! through these same functions (`crates/ksc-db/tests/fuzz_regressions.rs`
//! includes this file), so it depends on ksc's crates only.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ksc_eval::{Interpreter, Value};

/// The longest text the checker, derivation and native targets read (run.sh
/// passes `-max_len` too; this guards a corpus file read by hand).
pub const MAX_TEXT: usize = 16 * 1024;

/// The reader target: any bytes (as text, invalid UTF-8 replaced) read
/// without a panic, every error pointing into the text.
pub fn read(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (_file, errors) = ksc_syntax::parse_source(&text);
    for e in &errors {
        assert!(
            e.span.start <= e.span.end && e.span.end as usize <= text.len(),
            "syntax error {:?} out of bounds ({} bytes): {}",
            e.span,
            text.len(),
            e.message
        );
    }
}

/// The checker target: the analysis `ksc check` runs never panics, and
/// every diagnostic points into its file.
pub fn check(text: &str) {
    let analysis = ksc_db::analyze(text);
    diagnostics_in_bounds(text, &analysis);
}

/// The text of a fuzz input, or None if it is too long.
pub fn text(data: &[u8]) -> Option<String> {
    (data.len() <= MAX_TEXT).then(|| String::from_utf8_lossy(data).into_owned())
}

/// Every diagnostic points into its file (the property of
/// `tests/random_input.rs`).
pub fn diagnostics_in_bounds(text: &str, analysis: &ksc_types::Analysis) {
    for d in &analysis.diagnostics {
        let len = match d.file {
            ksc_types::FileRef::Source => text.len(),
            ksc_types::FileRef::Prelude => ksc_types::PRELUDE_SOURCE.len(),
        };
        assert!(
            d.span.start <= d.span.end && (d.span.end as usize) <= len,
            "diagnostic {:?} out of bounds ({len} bytes): {}",
            d.span,
            d.message
        );
    }
}

/// Whether a program's integer literals are all small: the interpreter has
/// no work limit, so programs that may build large vectors or loop long
/// are not run (libFuzzer's `-timeout` and `-rss_limit_mb` catch the rest).
pub fn small_literals(text: &str, max: u64) -> bool {
    text.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter(|w| !w.is_empty() && w.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()))
        .all(|w| w.trim_start_matches('-').parse::<u64>().is_ok_and(|n| n <= max))
}

/// The derivations requested of every function of the file.
pub const DERIVATIONS: &[ksc_ir::Derivation] = {
    use ksc_ir::Derivation::*;
    &[Fwd, Rev, SufFwdPass, SufRevPass, Shape, Jac, Jac1, JacSparse, CL]
};

/// At most this many functions of a file are differentiated.
pub const MAX_DIFFERENTIATED: usize = 4;

/// Derives and optimises every derivation of `DERIVATIONS` of the first
/// `MAX_DIFFERENTIATED` functions of a well-typed text, as `ksc deriv`
/// does (through `ksc_db::derive_request`), and `[D f]` simplified, as
/// `ksc jacobian` does. Derivation errors are values; a panic is a bug.
/// Returns how many derived functions were made.
pub fn derive_all(text: &str) -> Option<usize> {
    let db = ksc_db::Database::new();
    let file = db.add_file(text.to_string());
    let analysis = ksc_db::analysis(&db, file);
    diagnostics_in_bounds(text, &analysis);
    if analysis.has_errors() {
        return None;
    }
    let mut made = 0;
    let functions = analysis.source.decls.iter().filter_map(|d| match d {
        ksc_ir::Decl::Def(d) if d.name.derivs.is_empty() && d.name.base != "main" => Some(d.name.clone()),
        _ => None,
    });
    for f in functions.take(MAX_DIFFERENTIATED) {
        let _ = ksc_db::simplified_jacobian(&db, file, f.clone(), false);
        for &d in DERIVATIONS {
            let out = ksc_db::derive_request(&db, ksc_db::Request::new(&db, file, f.derived(d)));
            made += out.defs.len();
        }
    }
    Some(made)
}

/// A writer that fails once it has taken `limit` bytes (a program printing
/// in a long loop stops with an error instead of filling memory).
struct Capped {
    out: Vec<u8>,
    limit: usize,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.limit {
            return Err(std::io::Error::other("output limit"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The most output a compared run may print.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// The interpreter's stack, as `ksc run --interp` gives it.
const INTERPRETER_STACK: usize = 1 << 30;

/// How a run ended: success with its output, or a run-time error.
#[derive(Debug, PartialEq)]
pub enum Run {
    Ok(String),
    Failed(String),
    /// Not compared: the output limit, the time limit, a C compiler failure
    /// that is not ksc's (cc missing).
    Skipped(String),
}

/// Runs `main` with the interpreter.
pub fn interpret(analysis: &ksc_types::Analysis, main: &ksc_ir::FunName) -> Run {
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .stack_size(INTERPRETER_STACK)
            .spawn_scoped(s, || {
                let mut out = Capped { out: Vec::new(), limit: MAX_OUTPUT };
                let mut interp = Interpreter::new(analysis.defs());
                let r = interp.call(main, Value::Tuple(Vec::new().into()), &mut out);
                match r {
                    Ok(_) => Run::Ok(String::from_utf8_lossy(&out.out).into_owned()),
                    Err(e) if out.out.len() + 4096 > MAX_OUTPUT => Run::Skipped(format!("output limit: {}", e.message)),
                    Err(e) => Run::Failed(e.message),
                }
            })
            .expect("cannot start the interpreter's thread");
        match worker.join() {
            Ok(r) => r,
            // The panic has been printed; make it the fuzzer's finding.
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// How long a compiled program may run.
pub const NATIVE_TIME: Duration = Duration::from_secs(10);

/// Compiles `main` to C through the database (as `ksc run` does), compiles
/// the C with `$CC` (flags `$KSC_FUZZ_CFLAGS`, default `-O1`: fast to
/// compile, and optimised enough to exercise the C the way `-O3` does
/// more often than `-O0`), runs it and returns its outcome.
pub fn native(db: &ksc_db::Database, file: ksc_db::SourceFile, main: &ksc_ir::FunName, dir: &Path) -> Run {
    use ksc_codegen_c::{compile_c, Artefact, CcConfig, Target};
    let prog = ksc_db::c_unit(db, file, "fuzz.ks".into(), vec![main.clone()], true, Target::Executable, String::new())
        .as_ref()
        .unwrap_or_else(|e| panic!("ksc cannot compile a well-typed program natively: {e}"));
    // The last C compiled, for reproducing a finding by hand.
    let _ = std::fs::write(dir.join("last.c"), &prog.c);
    let mut cfg = CcConfig::from_env();
    cfg.cflags = ksc_codegen_c::driver::split_flags(&std::env::var("KSC_FUZZ_CFLAGS").unwrap_or_else(|_| "-O1".into()));
    cfg.cache_dir = Some(dir.to_path_buf());
    let exe = match compile_c(&prog.c, None, Artefact::Executable, &cfg) {
        Ok(p) => p,
        Err(e @ ksc_codegen_c::driver::BuildError::CompilerFailed { .. }) => {
            panic!("the C of a well-typed program does not compile: {e}")
        }
        // No C compiler, or the cache is not writable: the machine's problem.
        Err(e) => return Run::Skipped(e.to_string()),
    };
    let report = dir.join(format!("error-{}", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let mut child = Command::new(&exe)
        .env("KSC_ERROR_FILE", &report)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run the compiled program");
    // Read stdout on a thread, so a program printing much does not block.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut chunk) {
            if n == 0 || buf.len() > MAX_OUTPUT {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("cannot wait for the compiled program") {
            break Some(s);
        }
        if start.elapsed() > NATIVE_TIME {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let out = reader.join().unwrap_or_default();
    let _ = std::fs::remove_file(&exe);
    let Some(status) = status else { return Run::Skipped("the compiled program took too long".into()) };
    if out.len() > MAX_OUTPUT {
        return Run::Skipped("output limit".into());
    }
    if status.success() {
        return Run::Ok(String::from_utf8_lossy(&out).into_owned());
    }
    match std::fs::read_to_string(&report) {
        Ok(text) => {
            let _ = std::fs::remove_file(&report);
            Run::Failed(text.lines().next().unwrap_or_default().to_string())
        }
        Err(_) => panic!(
            "the compiled program ended abnormally ({status}); output so far:\n{}",
            String::from_utf8_lossy(&out)
        ),
    }
}

/// The numbers in a program's output.
fn numbers(s: &str) -> Vec<f64> {
    s.split(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).filter_map(|w| w.parse().ok()).collect()
}

/// The output with its numbers removed.
fn words(s: &str) -> String {
    s.split(|c: char| c.is_ascii_digit() || "+-.eE".contains(c)).collect::<Vec<_>>().join("#")
}

/// Do two outputs agree: the same text, or the same text around numbers
/// within 1e-5 relative (native code may add sums in another order).
pub fn same_output(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (na, nb) = (numbers(a), numbers(b));
    words(a) == words(b)
        && na.len() == nb.len()
        && na
            .iter()
            .zip(&nb)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())))
}

/// The largest integer literal a compared program may have.
pub const MAX_LITERAL: u64 = 1000;

/// The native target: a well-typed program with a `main` and small
/// literals runs natively as the interpreter runs it (the property of
/// `tests/it/native_mutants.rs`). Returns whether the two runs were compared.
pub fn native_against_interpreter(text: &str, dir: &Path) -> bool {
    if !small_literals(text, MAX_LITERAL) {
        return false;
    }
    let db = ksc_db::Database::new();
    let file = db.add_file(text.to_string());
    let analysis = ksc_db::analysis(&db, file);
    if analysis.has_errors() {
        return false;
    }
    let Some(main) = analysis.main().map(|m| m.name.clone()) else { return false };
    let interp = interpret(&analysis, &main);
    if matches!(interp, Run::Skipped(_)) {
        return false;
    }
    let native = native(&db, file, &main, dir);
    match (&interp, &native) {
        (_, Run::Skipped(_)) => false,
        (Run::Ok(a), Run::Ok(b)) => {
            assert!(
                same_output(a, b),
                "native output differs from the interpreter's:\n--- interpreter\n{a}\n--- native\n{b}"
            );
            true
        }
        (Run::Failed(_), Run::Failed(_)) => true,
        _ => panic!("the interpreter and native code disagree:\n  interpreter: {interp:?}\n  native: {native:?}"),
    }
}
