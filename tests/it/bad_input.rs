//! Every program in `tests/bad/` is rejected with a precise diagnostic: exit
//! code 1, a `file:line:column` location, the texts named on its first lines
//! (`; expect: ...`, one per line), and exactly the rendered diagnostics of its `.stderr`
//! file. Re-bless with `KSC_BLESS=1 cargo test --test bad_input`.

use crate::common::{expect_file, ks_files, ksc, report, root};

#[test]
fn bad_programs_get_precise_diagnostics() {
    let files = ks_files("tests/bad");
    let mut failures = Vec::new();
    for f in &files {
        let path = f.to_str().unwrap();
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        let expects: Vec<String> = text
            .lines()
            .map_while(|l| l.strip_prefix("; expect:"))
            .map(|e| e.trim().to_lowercase())
            .collect();
        if expects.is_empty() {
            failures.push(format!("{path}: the first line must be `; expect: <text>`"));
            continue;
        }
        let out = ksc(&["run", path]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.code() != Some(1) {
            failures.push(format!("{path}: expected exit code 1, got {}\n{stderr}", out.status));
            continue;
        }
        if let Some(missing) = expects.iter().find(|e| !stderr.to_lowercase().contains(e.as_str())) {
            failures.push(format!("{path}: the diagnostics do not mention `{missing}`:\n{stderr}"));
            continue;
        }
        let located = format!("{path}:");
        if !stderr.contains(&located) {
            failures.push(format!("{path}: the diagnostics do not name a location in the file:\n{stderr}"));
            continue;
        }
        if let Some(m) = expect_file(&f.with_extension("stderr"), &stderr) {
            failures.push(m);
        }
    }
    report("bad programs", failures, files.len());
}
