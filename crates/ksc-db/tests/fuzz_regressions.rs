//! Every input the fuzzer (`fuzz/`, issue 38) found to break ksc is replayed
//! through the property of the target that found it: the same functions
//! the fuzz targets call (`fuzz/src/props.rs`, included here, so this test
//! runs on stable without the fuzzer).
//!
//! `tests/fuzz-regressions/TARGET/*` (TARGET: reader, checker, derive,
//! native) must pass. `tests/fuzz-regressions/open/TARGET/*` are findings
//! not fixed yet; `cargo test -p ksc-db --test db fuzz_regressions -- --ignored`
//! replays them (each one that passes can move up a directory).

#[allow(dead_code)]
use crate::props;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-regressions")
}

/// The reproducers of `dir/TARGET/`, sorted (README files are not inputs).
fn reproducers(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for target in ["reader", "checker", "derive", "native"] {
        let Ok(entries) = std::fs::read_dir(dir.join(target)) else { continue };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
        files.sort();
        out.extend(files.into_iter().map(|f| (target.to_string(), f)));
    }
    out
}

/// Replays one reproducer through its target's property, on a thread with
/// the stack `ksc` gives the interpreter's caller (the main thread's 8 MiB).
fn replay(target: &str, path: &Path) -> Result<(), String> {
    let data = std::fs::read(path).unwrap();
    let scratch = std::env::temp_dir().join(format!("ksc-fuzz-regressions-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let target = target.to_string();
    let worker = std::thread::Builder::new().stack_size(8 << 20).spawn(move || {
        let text = String::from_utf8_lossy(&data).into_owned();
        match target.as_str() {
            "reader" => props::read(&data),
            "checker" => props::check(&text),
            "derive" => {
                props::derive_all(&text);
            }
            "native" => {
                props::native_against_interpreter(&text, &scratch);
            }
            _ => unreachable!(),
        }
    });
    worker.unwrap().join().map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

fn replay_all(dir: &Path) -> (usize, Vec<String>) {
    let files = reproducers(dir);
    let failures: Vec<String> =
        files.iter().filter_map(|(t, f)| replay(t, f).err().map(|m| format!("{} ({t}): {m}", f.display()))).collect();
    (files.len(), failures)
}

#[test]
fn fuzz_findings_stay_fixed() {
    let (n, failures) = replay_all(&root());
    assert!(n > 0, "no reproducers found in {}", root().display());
    assert!(failures.is_empty(), "{} of {n} fuzz reproducers fail:\n{}", failures.len(), failures.join("\n"));
}

#[test]
#[ignore = "open fuzz findings: replay with --ignored"]
fn open_fuzz_findings() {
    let (n, failures) = replay_all(&root().join("open"));
    assert!(
        failures.is_empty(),
        "{} of {n} open fuzz reproducers still fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
