//! Native code agrees with the interpreter on programs nobody wrote: random
//! token swaps that tend to keep programs well typed (one prelude function
//! or literal for another of the same type) of the example programs
//! (`ksc-examples/*.ks` with a `main`), and of the AD examples
//! (`ksc-examples/ad/*.ks`, given a `main` that prints `[rev f]` and `[jac
//! f]` of every `gdef rev`, as `tests/native.rs` does), are run both ways.
//! Where the interpreter succeeds, `ksc run` must succeed and print the same
//! (the same numbers within 1e-5 for derivatives, whose cotangents native
//! code adds in another order); where the interpreter fails (a run-time
//! error of the mutant), so must the native code; and no run may report an
//! internal error or crash.
//!
//! `KSC_MUTANTS=N` sets the number of mutants (default 20, for CI; run with
//! thousands when changing lowering or the C back end), `KSC_MUTANT_SEED`
//! the seed.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ks_files, report, root};

/// Swaps that tend to keep a program well typed.
const SWAPS: &[(&str, &str)] = &[
    ("mul", "add"),
    ("add", "sub"),
    ("sub", "mul"),
    ("div", "mul"),
    ("sin", "cos"),
    ("exp", "tanh"),
    ("log", "sqrt"),
    ("1.0", "2.5"),
    ("0.0", "-1.5"),
    ("2.0", "0.0"),
    (" 1)", " 0)"),
    (" 0)", " 2)"),
    (" 2)", " 1)"),
    (" 3)", " 0)"),
    ("gt", "lt"),
    ("lte", "gte"),
    ("eq", "ne"),
    ("true", "false"),
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut t = text.to_string();
    for _ in 0..1 + rng.below(3) {
        let (from, to) = SWAPS[rng.below(SWAPS.len())];
        let hits: Vec<usize> = t.match_indices(from).map(|(i, _)| i).collect();
        if !hits.is_empty() {
            let i = hits[rng.below(hits.len())];
            t.replace_range(i..i + from.len(), to);
        }
    }
    t
}

/// A run's outcome: exit success, stdout, stderr; None if it took too long.
fn run(args: &[&str], cache: &std::path::Path, limit: Duration) -> Option<(bool, String, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ksc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("KSC_CACHE_DIR", cache)
        .env("KSC_CFLAGS", common::reuse_always_cflags())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start ksc");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("cannot wait for ksc").is_some() {
            let out = child.wait_with_output().expect("cannot read ksc's output");
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            return Some((out.status.success(), text(&out.stdout), text(&out.stderr)));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let mut sources: Vec<(PathBuf, String, bool)> =
        read("ksc-examples").into_iter().filter(|(_, t)| t.contains("(def main ")).map(|(f, t)| (f, t, false)).collect();
    sources.extend(read("ksc-examples/ad").into_iter().map(|(f, t)| (f, t, true)));
    let n = env_number("KSC_MUTANTS", 20);
    let mut rng = Rng(env_number("KSC_MUTANT_SEED", 0x6b73_632d_6d75_7461) | 1);
    let dir = std::env::temp_dir().join(format!("ksc-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let limit = Duration::from_secs(30);
    let (mut failures, mut compared) = (Vec::new(), 0);
    for k in 0..n {
        let (from, text, ad) = &sources[rng.below(sources.len())];
        let mut mutant = mutate(text, &mut rng);
        if mutant == *text {
            continue;
        }
        if *ad {
            let analysis = ksc_types::analyze(&mutant);
            if analysis.has_errors() {
                continue;
            }
            let Some((program, _)) = common::rev_program(&mutant, &analysis, k as usize) else { continue };
            mutant = program;
        }
        let path = dir.join(format!("mutant{k}.ks"));
        std::fs::write(&path, &mutant).unwrap();
        let p = path.to_str().unwrap();
        let Some(interp) = run(&["run", "--interp", p], &dir, limit) else { continue };
        let Some(native) = run(&["run", p], &dir, limit) else {
            let kept = dir.join(format!("failing{k}.ks"));
            let _ = std::fs::copy(&path, &kept);
            failures.push(format!(
                "mutant {k} of {} (kept as {}): the native run took over {limit:?}",
                from.display(),
                kept.display()
            ));
            continue;
        };
        let bad = |r: &(bool, String, String)| r.2.contains("internal error") || r.2.contains("panicked");
        let same = if *ad { common::same_numbers(&interp.1, &native.1) } else { interp.1 == native.1 };
        let ok = !bad(&interp) && !bad(&native) && interp.0 == native.0 && (!interp.0 || same);
        compared += 1;
        if !ok {
            let kept = dir.join(format!("failing{k}.ks"));
            let _ = std::fs::copy(&path, &kept);
            failures.push(format!(
                "mutant {k} of {} (kept as {}):\n  interpreter: ok={} stdout={:?} stderr={}\n  native: ok={} stdout={:?} stderr={}",
                from.display(),
                kept.display(),
                interp.0,
                interp.1,
                interp.2.lines().next().unwrap_or_default(),
                native.0,
                native.1,
                native.2.lines().next().unwrap_or_default(),
            ));
        }
    }
    assert!(n < 8 || compared * 3 >= n as usize, "only {compared} of {n} mutants could be compared");
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    report("mutants run natively", failures, n as usize);
}
