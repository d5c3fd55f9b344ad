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

/// Run the ksc binary from the repository root.
pub fn ksc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ksc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .expect("cannot start ksc")
}

pub fn blessing() -> bool {
    std::env::var_os("KSC_BLESS").is_some_and(|v| v != "0")
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
