//! When the C compiler is given link-time optimisation (`driver.rs`).

use ksc_codegen_c::driver::{optimises, split_flags, uses_lto, Artefact, CcConfig, LTO_MIN_LINES};

#[test]
fn lto_only_when_optimising() {
    let yes = |s: &str| optimises(&split_flags(s));
    assert!(yes("-O3 -march=native"));
    assert!(yes("-O0 -O2"));
    assert!(yes("-O"));
    assert!(!yes("-O2 -O0"));
    assert!(!yes("-Og"));
    assert!(!yes("-march=native"));
}

#[test]
fn no_lto_for_objects_small_programs_or_unoptimised_code() {
    let cfg = CcConfig { cc: "cc".into(), cflags: split_flags("-O3"), cache_dir: None, link: Vec::new() };
    let big = "int x;\n".repeat(LTO_MIN_LINES);
    assert!(!uses_lto(&big, Artefact::Object, &cfg));
    assert!(!uses_lto("int x;\n", Artefact::SharedLibrary, &cfg));
    let unoptimised = CcConfig { cflags: split_flags("-O0"), ..cfg };
    assert!(!uses_lto(&big, Artefact::Executable, &unoptimised));
}
