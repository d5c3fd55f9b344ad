//! `ksc build --emit ks` writes the program with its derived functions as
//! `.ks` that ksc reads, checks and runs again with identical output: for
//! every example.

use crate::common::{expect_file, ks_files, ksc, report};

#[test]
fn emitted_ks_runs_with_the_same_output() {
    let files = ks_files("ksc-examples");
    let dir = std::env::temp_dir().join(format!("ksc-emit-ks-{}", std::process::id()));
    let out_dir = dir.to_str().unwrap();
    let mut failures = Vec::new();
    for f in &files {
        let path = f.to_str().unwrap();
        let built = ksc(&["build", path, "--emit", "ks", "-o", out_dir]);
        if !built.status.success() {
            failures.push(format!("{path}: `ksc build --emit ks` failed:\n{}", String::from_utf8_lossy(&built.stderr)));
            continue;
        }
        let emitted = dir.join(f.file_name().unwrap());
        let run = ksc(&["run", "--interp", emitted.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        if !run.status.success() || !stderr.is_empty() {
            failures.push(format!("{path}: the emitted program fails:\n{stderr}"));
            continue;
        }
        // Compare with the original's expected output (never re-blessed from here).
        if std::env::var_os("KSC_BLESS").is_none() {
            if let Some(m) = expect_file(&f.with_extension("expected"), &String::from_utf8_lossy(&run.stdout)) {
                failures.push(m);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    report("emitted programs", failures, files.len());
}
