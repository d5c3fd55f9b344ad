//! Every program in `ksc-examples/` and `ksc-examples/adbench/` runs and
//! prints exactly its `.expected` file. Re-bless with `KSC_BLESS=1 cargo
//! test --test examples`. (The benchmark programs run natively only here:
//! the GMM one takes minutes in a debug build's interpreter.)

mod common;

use common::{expect_file, ks_files, ksc, report};

#[test]
fn examples_run_with_expected_output() {
    let mut files = ks_files("ksc-examples");
    files.extend(ks_files("ksc-examples/adbench"));
    let mut failures = Vec::new();
    for f in &files {
        let path = f.to_str().unwrap();
        let out = ksc(&["run", path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !stderr.is_empty() {
            failures.push(format!("{path}: `ksc run` failed ({}):\n{stderr}", out.status));
            continue;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        if let Some(m) = expect_file(&f.with_extension("expected"), &stdout) {
            failures.push(m);
        }
    }
    report("examples", failures, files.len());
}

#[test]
fn there_are_enough_examples() {
    assert!(ks_files("ksc-examples").len() >= 40);
}
