//! `ksc run --check-monoids`: each program of `tests/monoids/` runs with the
//! check in the interpreter and natively, and both give exactly its
//! `.expected` (stdout, then stderr, then the exit code): a broken law is
//! reported with its values and located at the operator; lawful monoids
//! print what they print without the check. Re-bless with `KSC_BLESS=1`.

use crate::common::{expect_file, ks_files, ksc, par_map, report};

/// stdout, stderr and the exit code of a run.
fn transcript(args: &[&str]) -> String {
    let out = ksc(args);
    format!(
        "{}{}exit code {}\n",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code().map_or("none".to_string(), |c| c.to_string())
    )
}

#[test]
fn broken_monoid_laws_are_found_in_both_backends() {
    let files = ks_files("tests/monoids");
    let results = par_map(&files, |f| {
        let path = f.to_str().unwrap();
        let interp = transcript(&["run", "--interp", "--check-monoids", path]);
        let native = transcript(&["run", "--check-monoids", path]);
        let mut failures = Vec::new();
        if interp != native {
            failures.push(format!("{path}: the backends differ\ninterpreter:\n{interp}\nnative:\n{native}"));
        }
        failures.extend(expect_file(&f.with_extension("expected"), &interp));
        // Lawful programs print the same without the check.
        if interp.ends_with("exit code 0\n") {
            let plain = transcript(&["run", "--interp", path]);
            if plain != interp {
                failures.push(format!("{path}: the check changed the output\nwithout:\n{plain}\nwith:\n{interp}"));
            }
        }
        failures
    });
    report("monoid checks", results.into_iter().flatten().collect(), files.len());
}
