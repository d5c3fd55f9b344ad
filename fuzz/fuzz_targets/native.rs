//! Native code agrees with the interpreter: a well-typed program with a
//! `main` (and integer literals up to 1000, so runs stay small) is run by
//! the interpreter and compiled through C and run; both succeed with the
//! same output (numbers within 1e-5) or both fail at run time, and neither
//! panics, emits C that does not compile, or crashes. Inputs are mutated
//! by type-preserving swaps half the time. The C compiler runs once per
//! compared input, so this target runs a few inputs a second.
#![no_main]

use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let Some(text) = ksc_fuzz::text(data) else { return };
    let dir = std::env::var_os("KSC_FUZZ_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ksc-fuzz-native"));
    let _ = std::fs::create_dir_all(&dir);
    if ksc_fuzz::native_against_interpreter(&text, &dir) {
        // One line per compared program, for run.sh's summary.
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("compared")) {
            let _ = writeln!(f, "{}", text.len());
        }
    }
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    ksc_fuzz::mutate(data, size, max_size, seed)
});
