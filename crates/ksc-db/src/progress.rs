//! What a long compilation is doing, on stderr (for the command line and
//! the Python package): once a step has taken a
//! second, one status line (`ksc: lowering [rev f] (3 s)`) redrawn in place
//! until the step ends, then erased. Only when stderr is a terminal (or
//! `KSC_PROGRESS=1`, which prints each new status on a line of its own, for
//! logs and tests); `KSC_PROGRESS=0` turns it off.
//!
//! The status is the phase the driver sets ([`Progress::phase`]) and,
//! while the database computes, the query it last started (its activity,
//! `ksc_db::Database::activity`), in words. One line with a counter needs
//! no progress-bar library.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the status is shown.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Redrawn in place (a terminal).
    Line,
    /// A line per new status (`KSC_PROGRESS=1`).
    Log,
}

/// After how long a step shows its status.
const DELAY: Duration = Duration::from_secs(1);

/// The status thread of one command, stopped when dropped.
pub struct Progress {
    phase: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Progress {
    /// Starts showing the status of a command whose database reports its
    /// queries into `activity`, if stderr is a terminal or `KSC_PROGRESS=1`.
    pub fn start(activity: Arc<Mutex<String>>) -> Progress {
        let phase = Arc::new(Mutex::new("checking".to_string()));
        let stop = Arc::new(AtomicBool::new(false));
        let mode = match std::env::var("KSC_PROGRESS").as_deref() {
            Ok("0") => None,
            Ok("1") => Some(Mode::Log),
            _ => std::io::stderr().is_terminal().then_some(Mode::Line),
        };
        let thread = mode.map(|mode| {
            let (phase, stop) = (phase.clone(), stop.clone());
            std::thread::spawn(move || show(mode, &phase, &activity, &stop))
        });
        Progress { phase, stop, thread: Mutex::new(thread) }
    }

    /// The phase the command is in (the database's activity is shown
    /// after it while the phase is `checking` or `compiling`).
    pub fn phase(&self, phase: &str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase.to_string();
    }

    /// The C compiler's progress: `done` of the `total` translation units
    /// to compile are compiled (`ksc_codegen_c::compile_program`'s report).
    pub fn c_units(&self, done: usize, total: usize) {
        self.phase(&format!("compiling the C ({done} of {total} units)"));
    }

    /// Stops showing the status and erases it (before the program runs and
    /// writes to the terminal itself).
    pub fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn show(mode: Mode, phase: &Mutex<String>, activity: &Mutex<String>, stop: &AtomicBool) {
    let started = Instant::now();
    let mut shown = String::new();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let elapsed = started.elapsed();
        if elapsed < DELAY {
            continue;
        }
        let phase = phase.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let doing = describe(&activity.lock().unwrap_or_else(|e| e.into_inner()));
        let status = match (phase.as_str(), doing) {
            ("checking" | "compiling", Some(d)) => d,
            _ => phase,
        };
        let mut err = std::io::stderr().lock();
        match mode {
            Mode::Line => {
                let mut line = format!("ksc: {status} ({} s)", elapsed.as_secs());
                if line.chars().count() > 78 {
                    line = line.chars().take(75).collect::<String>() + "...";
                }
                let _ = write!(err, "\r\x1b[K{line}");
            }
            Mode::Log if status != shown => {
                let _ = writeln!(err, "ksc: {status}");
            }
            Mode::Log => {}
        }
        let _ = err.flush();
        shown = status;
    }
    if mode == Mode::Line && started.elapsed() >= DELAY {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

/// A query of the database in words, for the queries that take time.
pub fn describe(query: &str) -> Option<String> {
    let (name, key) = query.split_once('(')?;
    let key = key.strip_suffix(')').unwrap_or(key);
    let what = match name {
        "checked" => "checking",
        "derived_one" => "deriving",
        "simplified_jacobian" => "simplifying the Jacobian of",
        "optimised" => "optimising",
        "loop_unit" => "lowering",
        "c_function" => "writing the C of",
        _ => return None,
    };
    Some(format!("{what} {}", without_types(key)))
}

/// A function's name without its types: `[rev [f (Tuple Float Float)]]`
/// is `[rev [f]]`.
fn without_types(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' if depth == 0 && chars.peek() == Some(&'(') => {}
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}
