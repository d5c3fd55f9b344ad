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
        if !crate::common::blessing() {
            if let Some(m) = expect_file(&f.with_extension("expected"), &String::from_utf8_lossy(&run.stdout)) {
                failures.push(m);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    report("emitted programs", failures, files.len());
}

#[test]
fn a_build_never_overwrites_its_input_or_files_that_are_not_its_own() {
    let dir = std::env::temp_dir().join(format!("ksc-emit-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = "; a comment that must survive\n(def main Integer () (let (u (print 1.5 \"\\n\")) 0))\n";
    let input = dir.join("prog.ks");
    std::fs::write(&input, source).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ksc"))
            .args(args)
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .env("KSC_CACHE_DIR", dir.join("cache"))
            .output()
            .unwrap()
    };
    // `--emit ks` in the input's directory would write prog.ks over it.
    for args in [&["build", "prog.ks", "--emit", "ks"][..], &["build", "prog.ks", "--emit", "ks", "--force"][..]] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("not writing `./prog.ks`: it is the input file"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&input).unwrap(), source);
    }
    // An input without an extension is the executable's name.
    std::fs::write(dir.join("noext"), source).unwrap();
    let out = run(&["build", "noext", "--emit", "exe"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("noext")).unwrap(), source);
    // A file ksc did not write is kept, and nothing else is written.
    std::fs::write(dir.join("prog.c"), "int mine;\n").unwrap();
    let out = run(&["build", "prog.ks", "--emit", "c"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not writing `./prog.c`: it exists and was not written by ksc"), "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.join("prog.c")).unwrap(), "int mine;\n");
    assert!(!dir.join("prog.h").exists());
    // With --force it is replaced; ksc's own files are replaced by a new
    // build (every kind, twice).
    assert!(run(&["build", "prog.ks", "--emit", "c", "--force"]).status.success());
    for emit in ["c", "so", "obj", "exe", "loops"] {
        for _ in 0..2 {
            let out = run(&["build", "prog.ks", "--emit", emit]);
            assert!(out.status.success(), "--emit {emit}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let out = run(&["build", "prog.ks", "--emit", "ks", "-o", "out"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(run(&["build", "prog.ks", "--emit", "ks", "-o", "out"]).status.success());
    // The emitted program's own build in its directory is refused too.
    let out = run(&["build", "out/prog.ks", "--emit", "ks", "-o", "out"]);
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
