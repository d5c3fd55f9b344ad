//! Native code agrees with the interpreter on programs nobody wrote: random
//! token swaps that tend to keep programs well typed (one prelude function
//! or literal for another of the same type) of the example programs
//! (`ksc-examples/*.ks` with a `main`), and of the AD examples
//! (`ksc-examples/ad/*.ks`, given a `main` that prints `[rev f]` and `[jac
//! f]` of every `gdef rev`, as `native.rs` does), are run both ways.
//! Where the interpreter succeeds, `ksc run` must succeed and print the same
//! (the same numbers within 1e-5 for derivatives, whose cotangents native
//! code adds in another order); where the interpreter fails (a run-time
//! error of the mutant), so must the native code; and no run may report an
//! internal error or crash.
//!
//! `KSC_MUTANTS=N` sets the number of mutants (default 20, for CI; run with
//! thousands when changing lowering or the C back end), `KSC_MUTANT_SEED`
//! the seed.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ks_files, report, root};
use crate::mutate::{mutate, Rng, SWAPS};

/// A run's outcome: exit success, stdout, stderr.
type Run = (bool, String, String);

/// Runs `cmd` (stdout and stderr read as it runs, so a chatty program does
/// not block on a full pipe) and returns its outcome and how long it took;
/// None if it took longer than `limit` (it is then killed).
fn run_limited(mut cmd: Command, limit: Duration) -> Option<(Run, Duration)> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("cannot start a run");
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let (out, err) = (read(Box::new(child.stdout.take().unwrap())), read(Box::new(child.stderr.take().unwrap())));
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("cannot wait for a run") {
            let elapsed = start.elapsed();
            return Some(((status.success(), out.join().unwrap(), err.join().unwrap()), elapsed));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn ksc_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ksc"));
    cmd.args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("KSC_CACHE_DIR", common::cache_dir())
        .env(common::OMP_WAIT.0, common::OMP_WAIT.1)
        .env(common::MAX_STACK.0, common::MAX_STACK.1)
        .env("KSC_CFLAGS", format!("{} -DKSRT_REUSE_MIN_BYTES=0", common::QUICK_CFLAGS));
    cmd
}

/// How one mutant went: compared, skipped (the interpreter did not finish
/// within its limit: the mutant may loop forever), or a failure.
enum Verdict {
    Compared,
    Skipped,
    Failed(String),
}

/// Runs one mutant in the interpreter, then builds it (no time limit: the
/// compiler always ends, and its time is the C compiler's, which a busy
/// machine stretches) and runs the executable with a limit relative to the
/// interpreter's time on the same machine, so that only a native run that
/// does not end fails for its time.
fn check_mutant(path: &std::path::Path, ad: bool) -> Verdict {
    let p = path.to_str().unwrap();
    let Some((interp, interp_time)) = run_limited(ksc_command(&["run", "--interp", p]), Duration::from_secs(60)) else {
        return Verdict::Skipped;
    };
    let out_dir = path.with_extension("exe.d");
    let built = ksc_command(&["build", p, "--emit", "exe", "-o", out_dir.to_str().unwrap()])
        .output()
        .expect("cannot start ksc");
    let native: Run = if !built.status.success() {
        (false, String::new(), String::from_utf8_lossy(&built.stderr).into_owned())
    } else {
        let limit = interp_time * 10 + Duration::from_secs(10);
        let mut exe = Command::new(out_dir.join(path.file_stem().unwrap()));
        exe.current_dir(root())
            .env(common::OMP_WAIT.0, common::OMP_WAIT.1)
            .env(common::MAX_STACK.0, common::MAX_STACK.1);
        match run_limited(exe, limit) {
            Some((r, _)) => r,
            None => {
                return Verdict::Failed(format!(
                    "the native run took over {limit:?} (10 times the interpreter's time and 10 s)"
                ))
            }
        }
    };
    let bad = |r: &Run| r.2.contains("internal error") || r.2.contains("panicked");
    let same = if ad { common::same_numbers(&interp.1, &native.1) } else { interp.1 == native.1 };
    if !bad(&interp) && !bad(&native) && interp.0 == native.0 && (!interp.0 || same) {
        return Verdict::Compared;
    }
    Verdict::Failed(format!(
        "interpreter: ok={} stdout={:?} stderr={}\n  native: ok={} stdout={:?} stderr={}",
        interp.0,
        interp.1,
        interp.2.lines().next().unwrap_or_default(),
        native.0,
        native.1,
        native.2.lines().next().unwrap_or_default(),
    ))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn mutants_run_natively_as_the_interpreter_runs_them() {
    let read = |dir: &str| -> Vec<(PathBuf, String)> {
        ks_files(dir).into_iter().map(|f| (f.clone(), std::fs::read_to_string(root().join(&f)).unwrap())).collect()
    };
    // (file, text, whether it is an AD example, compared by its numbers)
    let mut sources: Vec<(PathBuf, String, bool)> = read("ksc-examples")
        .into_iter()
        .filter(|(_, t)| t.contains("(def main "))
        .map(|(f, t)| (f, t, false))
        .collect();
    sources.extend(read("ksc-examples/ad").into_iter().map(|(f, t)| (f, t, true)));
    let n = env_number("KSC_MUTANTS", 20);
    let mut rng = Rng(env_number("KSC_MUTANT_SEED", 0x6b73_632d_6d75_7461) | 1);
    let dir = common::work_dir("mutants");
    // The mutants, made one after another (the seed fixes them), then run
    // on every core.
    let mut mutants = Vec::new();
    for k in 0..n as usize {
        let (from, text, ad) = &sources[rng.below(sources.len())];
        let mut mutant = mutate(text, &mut rng, SWAPS);
        if mutant == *text {
            continue;
        }
        if *ad {
            let analysis = ksc_types::analyze(&mutant);
            if analysis.has_errors() {
                continue;
            }
            let Some((program, _)) = common::rev_program(&mutant, &analysis, k) else { continue };
            mutant = program;
        }
        let path = dir.join(format!("mutant{k}.ks"));
        std::fs::write(&path, &mutant).unwrap();
        mutants.push((k, from.clone(), path, *ad));
    }
    let verdicts = common::par_map(&mutants, |(_, _, path, ad)| check_mutant(path, *ad));
    let (mut failures, mut compared, mut skipped) = (Vec::new(), 0, 0);
    for ((k, from, path, _), verdict) in mutants.iter().zip(verdicts) {
        match verdict {
            Verdict::Compared => compared += 1,
            Verdict::Skipped => skipped += 1,
            Verdict::Failed(why) => {
                let kept = dir.join(format!("failing{k}.ks"));
                let _ = std::fs::copy(path, &kept);
                failures.push(format!("mutant {k} of {} (kept as {}): {why}", from.display(), kept.display()));
            }
        }
    }
    if skipped > 0 {
        eprintln!("{skipped} of {n} mutants skipped: the interpreter did not finish them within 60 s");
    }
    // Skips depend on the machine's speed; the number of mutants that are
    // well typed and differ from their source does not.
    assert!(
        n < 8 || (compared + skipped + failures.len()) * 3 >= n as usize,
        "only {compared} of {n} mutants could be compared"
    );
    report("mutants run natively", failures, n as usize);
}
