//! Derivation never panics: every function of a well-typed text gets each
//! derivation `ksc deriv` makes (fwd, rev, split passes, shape, jac, jac1,
//! jacsparse, CL) and its `[D f]` simplified, as `ksc jacobian` prints it;
//! what cannot be derived is an error value. Inputs are mutated by
//! type-preserving swaps half the time, so most stay well typed.
#![no_main]

use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| {
    let Some(text) = ksc_fuzz::text(data) else { return };
    ksc_fuzz::derive_all(&text);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    ksc_fuzz::mutate(data, size, max_size, seed)
});
