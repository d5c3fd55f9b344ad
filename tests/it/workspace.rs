//! Facts about the workspace itself.

use crate::common::root;

/// A crate whose lib has `test = false` (its Cargo.toml says why: a
/// unit-test build is a second full compilation of it) must not have a
/// `#[cfg(test)]` module: `cargo test --workspace` would never build or run
/// it. Fails if one appears, so that it is moved to the crate's test binary
/// or the lib's tests are turned back on.
#[test]
fn libs_without_unit_tests_have_none_that_cargo_would_skip() {
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
    let mut untested = 0;
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = e.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        // `test = false` in the `[lib]` section.
        let mut section = "";
        let lib_untested = manifest.lines().map(str::trim).any(|l| {
            if l.starts_with('[') {
                section = l;
            }
            section == "[lib]" && l == "test = false"
        });
        if lib_untested {
            untested += 1;
            visit(&dir.join("src"), &mut found);
        }
    }
    assert!(untested >= 2, "expected ksc-db and ksc-opt to have `test = false`, found {untested} crates");
    assert!(found.is_empty(), "unit tests that `cargo test` skips (test = false): {found:?}");
}
