//! Every program in `tests/bad/` is rejected with a precise diagnostic: exit
//! code 1, a `file:line:column` location, the texts named on its first lines
//! (`; expect: ...`, one per line), and exactly the rendered diagnostics of its `.stderr`
//! file. Re-bless with `KSC_BLESS=1 cargo test --test it bad_input`.

use crate::common::{expect_file, ks_files, ksc, report, root};

#[test]
fn bad_programs_get_precise_diagnostics() {
    let files = ks_files("tests/bad");
    let mut failures = Vec::new();
    for f in &files {
        let path = f.to_str().unwrap();
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        let expects: Vec<String> =
            text.lines().map_while(|l| l.strip_prefix("; expect:")).map(|e| e.trim().to_lowercase()).collect();
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
        if let Some(m) = expect_file(&f.with_extension("stderr"), &crate::common::hide_frame_count(&stderr)) {
            failures.push(m);
        }
    }
    report("bad programs", failures, files.len());
}

/// A `let` of n bindings is flat in brackets but n deep in Core IR, which
/// every pass recurses on: 15 000 bindings overflowed the checker's stack.
/// Beyond `ksc_syntax::MAX_LET_DEPTH` bindings around an expression the
/// program gets a located diagnostic; the deepest program accepted goes
/// through every pass: checking, the interpreter, lowering to loops and
/// native code.
#[test]
fn let_chains_are_bounded_and_the_deepest_accepted_runs() {
    let dir = std::env::temp_dir().join(format!("ksc-deep-lets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chain = |n: usize| {
        let binds: Vec<String> = (0..n)
            .map(|i| if i == 0 { "(x0 x)".to_string() } else { format!("(x{i} (add x{} 1.0))", i - 1) })
            .collect();
        format!(
            "(def f Float (x : Float)\n  (let ({})\n    x{}))\n(def main Integer () (print (f 1.0) \"\\n\"))\n",
            binds.join("\n"),
            n - 1
        )
    };
    // Too deep: one located error, exit code 1, no crash.
    let deep = dir.join("too_deep.ks");
    std::fs::write(&deep, chain(15_000)).unwrap();
    let out = ksc(&["check", deep.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("more than 10000 `let` bindings around this expression"), "{stderr}");
    assert!(stderr.contains("too_deep.ks:10002:1"), "{stderr}");
    // The deepest accepted.
    let ok = dir.join("deepest.ks");
    std::fs::write(&ok, chain(ksc_syntax::MAX_LET_DEPTH)).unwrap();
    for args in [&["check"][..], &["run", "--interp"], &["run"]] {
        let mut args = args.to_vec();
        args.push(ok.to_str().unwrap());
        let out = ksc(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ksc {args:?}: {stderr}");
        if args[0] == "run" {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "10000\n", "ksc {args:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Checking is linear in the number of declarations: every declaration's
/// scope was a copy of the table of all those before it (1000 trivial
/// definitions took 1.2 GB, 4000 took 17 GB). 20 000 definitions, each
/// calling the one before, are checked within 3 GB of address space (the
/// quadratic copies would need hundreds of GB); no clock is read.
#[test]
fn checking_many_definitions_stays_within_a_memory_bound() {
    let dir = std::env::temp_dir().join(format!("ksc-many-defs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("many.ks");
    let mut text = String::from("(def f0 Float (x : Float) (mul x 2.0))\n");
    for i in 1..20_000 {
        text.push_str(&format!("(def f{i} Float (x : Float) (f{} x))\n", i - 1));
    }
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v 3000000 && exec \"{}\" check \"{}\"", env!("CARGO_BIN_EXE_ksc"), path.display()))
        .output()
        .expect("cannot start sh");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
