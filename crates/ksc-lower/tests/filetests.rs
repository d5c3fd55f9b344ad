//! The loop IR's text format and the passes' file tests.
//!
//! - Every loop-IR snapshot (`tests/snapshots/*.loops` at the repository's
//!   root) parses, and prints back as it was.
//! - Each file of `tests/filetests/` is a test of one pass, in the style
//!   of Cranelift's file tests: a header naming the pass (`; pass: licm`)
//!   and saying what the test shows (more `;` lines), the input functions
//!   as `Module::pretty` prints them, a line `; after:`, and the functions
//!   as they are after that pass alone. The input must print back as it
//!   is written; the pass runs on each function (with the scope check
//!   after it), and the result must be the expected text. `KSC_BLESS=1`
//!   rewrites the expected text instead.

use std::path::{Path, PathBuf};

use ksc_lower::ir::{needs_heap, Module};
use ksc_lower::parse::parse_module;
use ksc_lower::passes::{effectful_funcs, names, LoopCx, PIPELINE};
use ksc_lower::visit::scope_error;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "loops"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_snapshot_prints_back_as_it_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/snapshots");
    let paths = files(&dir);
    assert!(paths.len() >= 20, "{} snapshots", paths.len());
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap();
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!m.funcs.is_empty(), "{}", p.display());
        let again = m.pretty();
        if again != text {
            let line = again.lines().zip(text.lines()).position(|(a, b)| a != b);
            panic!("{}: printed back differently, first at line {:?}", p.display(), line.map(|l| l + 1));
        }
        // And what it parses to prints and parses to the same module.
        assert_eq!(parse_module(&again).as_ref(), Ok(&m), "{}", p.display());
    }
}

fn bless() -> bool {
    std::env::var_os("KSC_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The pass a file test runs, its input, and the expected text.
fn split(text: &str) -> Result<(&str, &str, &str), String> {
    let pass = text.lines().find_map(|l| l.strip_prefix("; pass: ")).ok_or("no `; pass: NAME` line")?.trim();
    let (input, expected) = text.split_once("\n; after:\n").ok_or("no `; after:` line")?;
    Ok((pass, input, expected))
}

/// The module after running the pass named `pass` on each function.
fn run(pass: &str, mut m: Module) -> Result<Module, String> {
    let p = PIPELINE.iter().find(|p| p.name() == pass).ok_or_else(|| format!("no pass `{pass}`"))?;
    let effectful = effectful_funcs(&m);
    let heap_ret: Vec<bool> = m.funcs.iter().map(|f| needs_heap(&f.ret)).collect();
    let cx = LoopCx { effectful: &effectful, heap_ret: &heap_ret };
    for f in &mut m.funcs {
        p.run(f, &cx);
        if let Some(e) = scope_error(f) {
            return Err(format!("{} after `{pass}`: {e}", f.c_name));
        }
    }
    Ok(m)
}

#[test]
fn passes_do_what_their_file_tests_expect() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut failures = Vec::new();
    let mut tested = std::collections::BTreeSet::new();
    for p in files(&dir) {
        let text = std::fs::read_to_string(&p).unwrap();
        let outcome = split(&text).and_then(|(pass, input, expected)| {
            let m = parse_module(input).map_err(|e| e.to_string())?;
            let body = input.lines().filter(|l| !l.starts_with(';')).collect::<Vec<_>>().join("\n");
            if m.pretty().trim() != body.trim() {
                return Err(format!("the input does not print back as written:\n{}", m.pretty()));
            }
            let actual = run(pass, m)?.pretty();
            tested.insert(pass.to_string());
            if actual.trim() == expected.trim() {
                Ok(None)
            } else if bless() {
                Ok(Some(format!("{input}\n; after:\n{actual}")))
            } else {
                Err(format!("after `{pass}`, expected\n{expected}\nbut got\n{actual}\n(re-bless with KSC_BLESS=1)"))
            }
        });
        match outcome {
            Ok(Some(blessed)) => std::fs::write(&p, blessed).unwrap(),
            Ok(None) => {}
            Err(e) => failures.push(format!("{}: {e}", p.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Every pass of the pipeline has a file test (they replace the
    // passes' hand-built unit tests).
    for pass in names() {
        assert!(tested.contains(pass), "no file test of `{pass}`");
    }
}
