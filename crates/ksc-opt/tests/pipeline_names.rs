//! The pipeline's pass names (a unit test of `pipeline/mod.rs` before; the
//! crate's lib has `test = false`, see Cargo.toml).

/// The names the command line selects passes by, in the order they
/// first run: renaming or adding a pass changes what users type.
#[test]
fn the_pipeline_names_its_passes_in_order() {
    assert_eq!(
        ksc_opt::pipeline::names(),
        [
            "simplify",
            "share-loop-values",
            "mark-paired-calls",
            "inline-paired",
            "scan-extras",
            "fuse-scan-extras",
            "mark-calls-in-loops",
            "hoist-loop-invariants",
            "hoist-inner-invariants"
        ]
    );
}

/// The lib has `test = false` (Cargo.toml): a `#[cfg(test)]` module in its
/// sources would never run under `cargo test --workspace`. Fails if one
/// appears, so that it is moved here or the lib's tests are turned back on.
#[test]
fn the_lib_has_no_unit_tests_that_cargo_would_skip() {
    fn visit(dir: &std::path::Path, found: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                visit(&p, found);
            } else if p.extension().is_some_and(|x| x == "rs")
                && std::fs::read_to_string(&p).unwrap().contains("#[cfg(test)]")
            {
                found.push(p.display().to_string());
            }
        }
    }
    let mut found = Vec::new();
    visit(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut found);
    assert!(found.is_empty(), "unit tests that `cargo test` skips (test = false): {found:?}");
}
