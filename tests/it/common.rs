//! Helpers shared by the data-driven tests: finding example files, running
//! the `ksc` binary, and comparing against expected files that are re-blessed
//! with `KSC_BLESS=1`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (tests run from it, so paths in messages are relative).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `.ks` files directly in `dir` (relative to the root), sorted.
pub fn ks_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("cannot list {dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ks"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .ks files in {dir}");
    files
}

/// The compiled-program cache shared by every test (and by every run of the
/// tests: its keys are content hashes of the C text, compiler and flags, so
/// a hit is the program a fresh compilation would make). It lives in the
/// target directory, so `cargo clean` removes it and nothing is left in the
/// user's cache or in `/tmp`.
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ksc-cache")
}

/// A scratch directory `name` for a test's generated files, in the target
/// directory, emptied of earlier runs' files (`ksc build` refuses to write
/// over a file it did not write, as an older ksc's outputs are).
pub fn work_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ksc-work").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
    d
}

/// The C compiler's flags for the tests' native runs unless a test says
/// otherwise: `-O0`. The tests' C is large (derivatives of every example,
/// called at several points) and is run once on small inputs, so compiling
/// it is almost all of a native run's time: `-O0` compiles in about half
/// `-O1`'s time (the reverse derivatives of `ksc-examples/ad/` 22 s against
/// 45 s of CPU) and a third of `-O3`'s. What the optimiser may assume
/// (aliasing, no undefined behaviour, vectorisation) is still tested: the
/// unchecked runs of the examples keep the default `-O3`
/// ([`reuse_always_cflags`]), as users get it.
pub const QUICK_CFLAGS: &str = "-O0";

/// The OpenMP runtime's waiting policy for every native run of the tests:
/// a thread waiting at a parallel loop's end sleeps instead of spinning
/// (libgomp's default is to spin for a while). The tests run several
/// programs at once, each with a team of threads, on a machine with fewer
/// cores: a spinning thread burnt the core its team's other thread needed
/// (`hand.ks` on two threads took 6-20 s of CPU instead of 1.5 s,
/// `gdef_reduce.ks` 10 s instead of 0.15 s, on a loaded 2-core machine).
/// The code run, and its results, are the same; only idle threads wait
/// differently.
pub const OMP_WAIT: (&str, &str) = ("OMP_WAIT_POLICY", "passive");

/// The native stack a program's calls may use in every run of the tests
/// (`ksc run`, in both backends, and the executables the tests start),
/// unless a test says otherwise: 512 MiB (the interpreter takes about 2 KB
/// per nested call). A recursion that never ends (a
/// mutant's, `tests/bad/run_recursion_too_deep.ks`) fails with "recursion
/// too deep" once its calls have used that much, instead of the default
/// half of the memory limit, which several tests at once would take from
/// the machine. Every program of the tests nests its calls far less deep.
pub const MAX_STACK: (&str, &str) = ("KSC_MAX_STACK", "536870912");

/// `text` with the number of calling frames a run-time error summarises
/// (`... and 12345 more calling frames`) replaced by `N`: where "recursion
/// too deep" happens depends on the bytes of stack a call takes, which
/// differ between the backends, the compilers and the builds.
pub fn hide_frame_count(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("... and ").zip(l.find(" more calling frames")) {
            Some((a, b)) if a + 8 < b && l[a + 8..b].bytes().all(|c| c.is_ascii_digit()) => {
                format!("{}... and N{}\n", &l[..a], &l[b..])
            }
            _ => format!("{l}\n"),
        })
        .collect()
}

/// Run the ksc binary from the repository root, with the shared cache,
/// [`QUICK_CFLAGS`], [`OMP_WAIT`] and [`MAX_STACK`].
pub fn ksc(args: &[&str]) -> Output {
    ksc_env(args, &[])
}

/// [`ksc`] with extra environment variables.
pub fn ksc_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("KSC_CACHE_DIR", cache_dir())
        .env("KSC_CFLAGS", QUICK_CFLAGS)
        .env(OMP_WAIT.0, OMP_WAIT.1)
        .env(MAX_STACK.0, MAX_STACK.1)
        .envs(env.iter().copied())
        .output()
        .expect("cannot start ksc")
}

/// `f` of every item, on as many threads as the machine has cores, in the
/// items' order. The tests that run a program per file spend their time in
/// the C compiler: run one after another they would leave cores idle while
/// the rest of the suite has finished.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().unwrap()[i] = Some(r);
            });
        }
    });
    results.into_inner().unwrap().into_iter().map(|r| r.expect("every item is mapped")).collect()
}

pub fn blessing() -> bool {
    std::env::var_os("KSC_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Compare `actual` with the contents of `expected_path`; with KSC_BLESS=1,
/// write it instead. Returns a description of the mismatch, if any.
pub fn expect_file(expected_path: &Path, actual: &str) -> Option<String> {
    let full = root().join(expected_path);
    if blessing() {
        std::fs::write(&full, actual).unwrap_or_else(|e| panic!("cannot write {}: {e}", full.display()));
        return None;
    }
    match std::fs::read_to_string(&full) {
        Ok(expected) if expected == actual => None,
        Ok(expected) => Some(format!(
            "{}: output differs (re-bless with KSC_BLESS=1 if the change is intended)\n{}",
            expected_path.display(),
            diff(&expected, actual)
        )),
        Err(_) => Some(format!("{}: missing (create it with KSC_BLESS=1)\nactual:\n{actual}", expected_path.display())),
    }
}

/// A small line diff: the first differing lines with context.
pub fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = e.iter().zip(&a).position(|(x, y)| x != y).unwrap_or(e.len().min(a.len()));
    let mut out = String::new();
    for i in first..(first + 6).min(e.len().max(a.len())) {
        if let Some(x) = e.get(i) {
            out.push_str(&format!("  -{x}\n"));
        }
        if let Some(y) = a.get(i) {
            out.push_str(&format!("  +{y}\n"));
        }
    }
    out
}

/// Fail with every collected failure.
pub fn report(what: &str, failures: Vec<String>, total: usize) {
    if !failures.is_empty() {
        panic!("{} of {total} {what} failed:\n\n{}", failures.len(), failures.join("\n\n"));
    }
}

/// A `.ks` expression of type `t` with pseudo-random Floats (vectors of 4
/// elements, Integers 2); `seed` is a `.ks` Integer expression. `None` for
/// types it cannot make.
pub fn ks_value(t: &ksc_ir::Type, seed: &str, depth: usize) -> Option<String> {
    use ksc_ir::Type;
    Some(match t {
        Type::Float => format!("(sub ($ranhashdoub {seed}) 0.3)"),
        Type::Integer => "2".into(),
        Type::Bool => "true".into(),
        Type::Tuple(ts) => {
            let parts: Option<Vec<String>> =
                ts.iter().enumerate().map(|(j, t)| ks_value(t, &format!("(add (mul 8 {seed}) {j})"), depth)).collect();
            format!("(tuple {})", parts?.join(" "))
        }
        Type::Tensor(1, e) => {
            let i = format!("i{depth}");
            let elem = ks_value(e, &format!("(add (mul 8 {seed}) {i})"), depth + 1)?;
            format!("(build 4 (lam ({i} : Integer) {elem}))")
        }
        _ => return None,
    })
}

/// The numbers in a program's output.
pub fn numbers(s: &str) -> Vec<f64> {
    s.split(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c))).filter_map(|w| w.parse().ok()).collect()
}

/// Do two outputs hold the same numbers, within 1e-5 relative (native
/// code adds cotangents in another order than the interpreter), and some?
pub fn same_numbers(a: &str, b: &str) -> bool {
    let (na, nb) = (numbers(a), numbers(b));
    !na.is_empty() && na.len() == nb.len() && na.iter().zip(&nb).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + x.abs()))
}

/// `text` (already analysed) with a `main` that prints, for every `gdef
/// rev` of it, `[rev f]` and `[jac f]` (declared if `text` does not) at
/// three points: the file's `f$at` point if it has one, else values of
/// `ks_value` seeded from `1000 * (first + k)` for the k-th `gdef rev`.
/// The program and the number of `gdef rev`s; None if there is nothing to
/// print.
pub fn rev_program(text: &str, analysis: &ksc_types::Analysis, first: usize) -> Option<(String, usize)> {
    let mut prints = Vec::new();
    let mut gdefs = String::new();
    let mut calls = first;
    for d in &analysis.source.decls {
        let ksc_ir::Decl::Gdef(g) = d else { continue };
        if g.derivation != ksc_ir::Derivation::Rev {
            continue;
        }
        let jac_declared =
            analysis.source.decls.iter().any(
                |d| matches!(d, ksc_ir::Decl::Gdef(h) if h.fun == g.fun && h.derivation == ksc_ir::Derivation::Jac),
            );
        if !jac_declared {
            gdefs.push_str(&format!("\n(gdef jac {})", g.fun));
        }
        let sig = analysis.table.get(&g.fun)?;
        let has_at = g.fun.derivs.is_empty()
            && analysis
                .source
                .decls
                .iter()
                .any(|d| matches!(d, ksc_ir::Decl::Def(x) if x.name.base == format!("{}$at", g.fun.base)));
        for trial in 0..3 {
            let seed = format!("{}", 1000 * calls + 10 * trial + 1);
            let x = if has_at { Some(format!("({}$at)", g.fun.base)) } else { ks_value(&sig.arg_ty, &seed, 0) };
            let dr = sig.ret_ty.tangent().and_then(|t| ks_value(&t, &format!("(add 7 {seed})"), 0));
            let (Some(x), Some(dr)) = (x, dr) else { continue };
            prints.push(format!("\"[rev {0}] {trial}: \" ([rev {0}] {x} {dr}) \"\\n\"", g.fun));
            prints.push(format!("\"[jac {0}] {trial}: \" ([jac {0}] {x}) \"\\n\"", g.fun));
        }
        calls += 1;
    }
    if prints.is_empty() {
        return None;
    }
    let main = format!("\n(def main Integer () (print {}))\n", prints.join("\n    "));
    Some((format!("{text}{gdefs}{main}"), calls - first))
}

/// `$KSC_CFLAGS` for native runs that exercise `reuse.rs` at every size:
/// the default flags, with the runtime's `KSRT_REUSE_MIN_BYTES` (1 MiB,
/// which no test's vectors reach) at 0.
pub fn reuse_always_cflags() -> String {
    format!("{} -DKSRT_REUSE_MIN_BYTES=0", ksc_codegen_c::driver::DEFAULT_CFLAGS)
}
