//! Every example program type-checks without diagnostics, and every program
//! of the bad-input corpus gets at least one error or passes checking only to
//! fail at run time (`run_*`, `no_main`, `main_with_parameters`).

use std::path::PathBuf;

fn files(dir: &str) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ks"))
        .collect();
    v.sort();
    v
}

#[test]
fn examples_check_cleanly() {
    let mut bad = Vec::new();
    for f in files("ksc-examples") {
        let a = ksc_types::analyze(&std::fs::read_to_string(&f).unwrap());
        if !a.diagnostics.is_empty() {
            bad.push(format!("{}: {:#?}", f.display(), a.diagnostics));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn bad_programs_fail_to_check_unless_they_fail_at_run_time() {
    let mut bad = Vec::new();
    for f in files("tests/bad") {
        let name = f.file_stem().unwrap().to_str().unwrap().to_string();
        if name.starts_with("strategy_") {
            // What a strategy means is the strategy language's (ksc-opt,
            // through the database: `tests/it/bad_input.rs` runs these).
            continue;
        }
        let a = ksc_types::analyze(&std::fs::read_to_string(&f).unwrap());
        // `native_`: check, and run in the interpreter; native code refuses
        // them (a lambda it cannot hold) before writing C. `derive_`: check;
        // derivation (after checking) refuses them.
        let runtime = name.starts_with("run_")
            || name.starts_with("native_")
            || name.starts_with("derive_")
            || name == "no_main"
            || name == "main_with_parameters";
        if a.has_errors() == runtime {
            bad.push(format!("{name}: errors = {}: {:?}", a.has_errors(), a.diagnostics));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
