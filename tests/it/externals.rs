//! External functions: `edef`s no built-in implements, defined in C files
//! given with `--link`. `tests/externals/derivatives.ks` declares functions
//! and their derivatives with `edef`; its derived functions call those
//! (checked against finite differences by the program itself), natively,
//! with exactly `derivatives.expected` (re-bless with `KSC_BLESS=1`).

use crate::common::{expect_file, ksc, root, work_dir, QUICK_CFLAGS};

const PROGRAM: &str = "tests/externals/derivatives.ks";
const C_FILE: &str = "tests/externals/derivatives.c";

#[test]
fn derived_functions_call_the_declared_derivatives_linked_in_c() {
    let out = ksc(&["run", "--cflags", QUICK_CFLAGS, PROGRAM, "--link", C_FILE]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("finite differences: 1\n"), "{stdout}");
    if let Some(diff) = expect_file(&root().join("tests/externals/derivatives.expected"), &stdout) {
        panic!("{diff}");
    }
}

#[test]
fn a_missing_definition_is_located_at_its_edef_with_its_c_prototype() {
    let out = ksc(&["run", "--cflags", QUICK_CFLAGS, PROGRAM]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no file given with `--link` defines `softsq`"), "{stderr}");
    // Each external function, at its declaration, with the C it needs.
    for (at, proto) in [
        ("derivatives.ks:6:7", "double softsq(ks_arena *A, double x);"),
        ("derivatives.ks:11:7", "ks_t2ff rev$wmul(ks_arena *A, double x_0_0, double x_0_1, double x_1);"),
        ("derivatives.ks:13:7", "ks_T1f scaled(ks_arena *A, double x_0, ks_T1f x_1);"),
    ] {
        assert!(stderr.contains(at), "{at} in\n{stderr}");
        assert!(stderr.contains(proto), "{proto} in\n{stderr}");
    }
    assert!(!stderr.contains("bug in ksc"), "{stderr}");
    // A linked file that does not compile is the user's, not ksc's.
    let dir = work_dir("externals");
    let bad = dir.join("bad.c");
    std::fs::write(&bad, "double softsq(\n").unwrap();
    let out = ksc(&["run", "--cflags", QUICK_CFLAGS, PROGRAM, "--link", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed on the files given with `--link`"), "{stderr}");
    assert!(!stderr.contains("bug in ksc"), "{stderr}");
    // The interpreter cannot run them, and says so.
    let out = ksc(&["run", "--interp", PROGRAM]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("has no definition to run: it is only declared"), "{stderr}");
}

#[test]
fn a_library_declares_its_external_functions_and_links_them() {
    let dir = work_dir("externals-so");
    let d = dir.to_str().unwrap();
    let out = ksc(&["build", "--emit", "so", "--force", "--cflags", QUICK_CFLAGS, "-o", d, PROGRAM, "--link", C_FILE]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header = std::fs::read_to_string(dir.join("derivatives.h")).unwrap();
    assert!(header.contains("/* External functions"), "{header}");
    assert!(header.contains("double fwd$wmul(ks_arena *A, double x_0_0, double x_0_1, double x_1_0, double x_1_1);"));
    assert!(header.contains("void *ks_arena_alloc(ks_arena *A, int64_t bytes);"));
    // The exported functions include g's derivatives, not the externals'
    // definitions (the user's, linked in).
    assert!(header.contains("double g(ks_arena *A, double x, double y);"), "{header}");
    let exported = header.split("/* External functions").next().unwrap();
    assert!(!exported.contains("double softsq("), "{header}");
}

#[test]
fn a_derivative_not_declared_is_named_at_the_gdef_needing_it() {
    let out = ksc(&["check", "tests/externals/missing_derivative.ks"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("but not `[fwd [ex Float]]`, which derived code calls: declare it too"), "{stderr}");
    assert!(stderr.contains("missing_derivative.ks:6:1"), "at `(gdef fwd [g Float])`:\n{stderr}");
    // Reverse mode alone has what it needs.
    assert_eq!(stderr.matches("error: cannot derive").count(), 1, "{stderr}");
}
