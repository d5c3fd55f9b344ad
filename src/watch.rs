//! `ksc watch FILE [--run]`: recompiles the file through the incremental
//! database (ksc-db) every time it changes, up to its C (of `main`, or of
//! what `ksc build` exports), printing what was recompiled (which queries,
//! for which declarations) and how long it took, and with `--run` running
//! `main` with the interpreter after each successful build, in a child
//! process (`ksc run --interp FILE`) that the next change of the file
//! stops: a `main` that never ends does not stop the watcher.
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

use crate::render::{error_summary, Sources};
use crate::USAGE;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The .ks file to watch.
    file: PathBuf,
    /// Run `main` (with the interpreter, in a child process) after every
    /// build without errors; a change of the file stops a run still going.
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
    let mut running: Option<Running> = None;
    loop {
        let ok = build(&db, file, path);
        if args.run && ok {
            running = Running::start(path);
        }
        builds += 1;
        if args.builds.is_some_and(|n| builds >= n) {
            if let Some(r) = running.take() {
                r.wait();
            }
            return ExitCode::SUCCESS;
        }
        // Wait for a change of the text (and for the run to end, or stop
        // it when the text changes first).
        loop {
            std::thread::sleep(Duration::from_millis(args.poll.max(10)));
            if running.as_mut().is_some_and(Running::ended) {
                running.take().unwrap().wait();
            }
            let now = stamp(path);
            if now == last {
                continue;
            }
            last = now;
            match std::fs::read_to_string(path) {
                Ok(t) if t != *file.text(&db) => {
                    if let Some(r) = running.take() {
                        r.stop();
                    }
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

/// Compiles the current text, reports what ran, and renders the
/// diagnostics. Returns whether it compiled without errors.
fn build(db: &Database, file: SourceFile, path: &Path) -> bool {
    let start = Instant::now();
    let analysis = ksc_db::analysis(db, file);
    // Without errors, the C too: of `main`, or of what a library exports.
    let c = (!analysis.has_errors()).then(|| {
        let (roots, target) = match analysis.main() {
            Some(m) => (vec![m.name.clone()], Target::Executable),
            None => (analysis.library_roots(), Target::Library),
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
        return false;
    }
    if let Some(Err(e)) = c {
        eprintln!("error: {e}\n  = note: this is a bug in ksc's native backend");
    }
    true
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

/// A run of `main`: `ksc run --interp FILE` as a child process, whose
/// output is copied to ours by a thread.
struct Running {
    child: std::process::Child,
    copier: std::thread::JoinHandle<()>,
    start: Instant,
}

impl Running {
    fn start(path: &Path) -> Option<Running> {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("error: cannot run `main`: cannot find ksc's own executable ({e})");
                return None;
            }
        };
        let mut child = match std::process::Command::new(exe)
            .args(["run", "--interp"])
            .arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: cannot run `main`: {e}");
                return None;
            }
        };
        let mut from = child.stdout.take()?;
        let copier = std::thread::spawn(move || {
            let mut out = LastByte { inner: std::io::stdout(), last: b'\n' };
            let _ = std::io::copy(&mut from, &mut out);
            // End the program's output with a newline before watch's lines.
            if out.last != b'\n' {
                let _ = out.write_all(b"\n");
            }
            let _ = out.flush();
        });
        Some(Running { child, copier, start: Instant::now() })
    }

    /// Whether the run has ended.
    fn ended(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the run to end and says how it ended (a run-time error
    /// was rendered by the child).
    fn wait(mut self) {
        let status = self.child.wait();
        let _ = self.copier.join();
        match status {
            Ok(s) if s.success() => {
                println!("[watch] ran `main` in {:.1} ms", self.start.elapsed().as_secs_f64() * 1e3);
            }
            Ok(s) if s.code() == Some(1) => {}
            Ok(s) => eprintln!("error: running `main` ended abnormally ({s})"),
            Err(e) => eprintln!("error: cannot wait for `main`: {e}"),
        }
    }

    /// Stops the run (the file changed).
    fn stop(mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = self.copier.join();
            println!("[watch] stopped `main` after {:.1} s: the file changed", self.start.elapsed().as_secs_f64());
        } else {
            self.wait();
        }
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
