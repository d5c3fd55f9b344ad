//! `ksc watch FILE [--run]`: recompiles the file through the incremental
//! database (ksc-db) every time it changes, up to its C (of `main`, or of
//! what `ksc build` exports), printing what was recompiled (which queries,
//! for which declarations) and how long it took, and with `--run` running
//! `main` with the interpreter after each successful build.
//!
//! Changes are found by polling the file's modification time and length
//! (no dependency on a file-notification library); a change that leaves
//! the text as it was recompiles nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use ksc_codegen_c::Target;
use ksc_db::{Database, SourceFile};
use ksc_eval::{Interpreter, Value};
use ksc_types::Analysis;

use crate::render::{error_summary, Sources};
use crate::{runtime_diagnostic, USAGE};

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The .ks file to watch.
    file: PathBuf,
    /// Run `main` (with the interpreter) after every build without errors.
    #[arg(long)]
    run: bool,
    /// How often to look at the file, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    poll: u64,
    /// Stop after this many builds (the first one included); for tests.
    #[arg(long, value_name = "N", hide = true)]
    builds: Option<usize>,
}

/// What identifies a version of the file without reading it.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

pub fn watch(args: &WatchArgs) -> ExitCode {
    let path = &args.file;
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("error: cannot read `{}`", path.display());
        return ExitCode::from(USAGE);
    };
    let mut db = Database::new();
    let file = db.add_file(text);
    let mut last = stamp(path);
    let mut builds = 0;
    loop {
        build(&db, file, path, args.run);
        builds += 1;
        if args.builds.is_some_and(|n| builds >= n) {
            return ExitCode::SUCCESS;
        }
        // Wait for a change of the text.
        loop {
            std::thread::sleep(Duration::from_millis(args.poll.max(10)));
            let now = stamp(path);
            if now == last {
                continue;
            }
            last = now;
            match std::fs::read_to_string(path) {
                Ok(t) if t != *file.text(&db) => {
                    db.set_text(file, t);
                    break;
                }
                Ok(_) => {}
                // Editors may remove the file while saving: wait for it.
                Err(_) => last = None,
            }
        }
    }
}

/// Compiles the current text, reports what ran, renders the diagnostics,
/// and runs `main` if asked and possible.
fn build(db: &Database, file: SourceFile, path: &Path, run: bool) {
    let start = Instant::now();
    let analysis = ksc_db::analysis(db, file);
    // Without errors, the C too: of `main`, or of what a library exports.
    let c = (!analysis.has_errors()).then(|| {
        let (roots, target) = match analysis.main() {
            Some(m) => (vec![m.name.clone()], Target::Executable),
            None => (crate::native::export_roots(&analysis), Target::Library),
        };
        ksc_db::c_unit(db, file, path.display().to_string(), roots, true, target, String::new())
    });
    let elapsed = start.elapsed();
    let executed = db.take_executed();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "[watch] {} compiled in {:.1} ms ({} queries re-executed)",
        path.display(),
        elapsed.as_secs_f64() * 1e3,
        executed.queries.len()
    );
    for line in summarize(&executed.queries) {
        let _ = writeln!(out, "[watch]   {line}");
    }
    let _ = out.flush();
    drop(out);
    let sources = Sources::new(&path.display().to_string(), file.text(db));
    sources.emit(&analysis.diagnostics);
    if let Some(summary) = error_summary(&analysis.diagnostics) {
        eprintln!("error: could not compile `{}` due to {summary}", path.display());
        return;
    }
    if let Some(Err(e)) = c {
        eprintln!("error: {e}\n  = note: this is a bug in ksc's native backend");
    }
    if run {
        run_main(&analysis, &sources);
    }
}

/// The executed queries grouped by stage: `checked: def f, def g`.
fn summarize(queries: &[String]) -> Vec<String> {
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for q in queries {
        let (stage, key) = match q.split_once('(') {
            Some((s, k)) => (s.to_string(), k.strip_suffix(')').unwrap_or(k).to_string()),
            None => (q.clone(), String::new()),
        };
        match stages.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, keys)) => keys.push(key),
            None => stages.push((stage, vec![key])),
        }
    }
    stages
        .into_iter()
        .map(|(stage, keys)| {
            let keys: Vec<String> = keys.into_iter().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                stage
            } else {
                format!("{stage}: {}", keys.join(", "))
            }
        })
        .collect()
}

/// The interpreter recurses on the program's calls; give it a deep stack.
const INTERPRETER_STACK: usize = 1 << 30;

/// Runs `main` with the interpreter, rendering a run-time error.
fn run_main(analysis: &Analysis, sources: &Sources) {
    let Some(main) = analysis.main() else {
        eprintln!("error: this program has no `main` to run");
        return;
    };
    let main_name = main.name.clone();
    let start = Instant::now();
    let result = std::thread::scope(|s| {
        let worker = std::thread::Builder::new().stack_size(INTERPRETER_STACK).spawn_scoped(s, || {
            let stdout = std::io::stdout();
            let mut out = LastByte { inner: std::io::BufWriter::new(stdout.lock()), last: b'\n' };
            let mut interp = Interpreter::new(analysis.defs());
            let result = interp.call(&main_name, Value::Tuple(Vec::new().into()), &mut out);
            if out.last != b'\n' {
                let _ = out.write_all(b"\n");
            }
            let _ = out.flush();
            result.map(|_| ()).map_err(Box::new)
        });
        worker.ok().map(|h| h.join())
    });
    match result {
        Some(Ok(Ok(()))) => {
            println!("[watch] ran `main` in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
        }
        Some(Ok(Err(e))) => sources.emit(&[runtime_diagnostic(analysis, &e)]),
        _ => eprintln!("error: internal error in the interpreter (this is a ksc bug)"),
    }
}

/// A writer remembering the last byte written, so the program's output can
/// be ended with a newline before watch's own lines.
struct LastByte<W> {
    inner: W,
    last: u8,
}

impl<W: Write> Write for LastByte<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if let Some(&b) = buf[..n].last() {
            self.last = b;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
