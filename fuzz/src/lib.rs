//! What the fuzz targets of `fuzz_targets/` share: the properties and input
//! guards (`props.rs`, which the test suite replays reproducers through),
//! and the mutator that keeps programs well typed more often than byte
//! edits do.

mod props;
pub use props::*;

#[path = "../../tests/it/mutate.rs"]
mod swaps;
use swaps::{Rng, SWAPS};

/// Swaps the fuzzer makes besides the test suite's `SWAPS`: the other
/// direction of some, and literals at the edges of the ranges.
pub const MORE_SWAPS: &[(&str, &str)] = &[
    ("cos", "sin"),
    ("tanh", "exp"),
    ("sqrt", "log"),
    ("1.5", "1e300"),
    ("2.5", "-0.0"),
    (" 1)", " -1)"),
    (" 2)", " 7)"),
    ("lt", "gte"),
    ("false", "true"),
    ("max", "min"),
    ("min", "max"),
];

/// The mutator of the derivation and native targets: half the time one to
/// three type-preserving swaps of `SWAPS`, otherwise libFuzzer's own byte
/// mutations (which explore the rest, and mostly make ill-typed text).
pub fn mutate(data: &mut [u8], size: usize, max_size: usize, seed: u32) -> usize {
    let mut rng = Rng((seed as u64) << 1 | 1);
    if rng.below(2) == 0 {
        if let Ok(text) = std::str::from_utf8(&data[..size]) {
            let all: Vec<(&str, &str)> = SWAPS.iter().chain(MORE_SWAPS).copied().collect();
            let t = swaps::mutate(text, &mut rng, &all);
            if t != text && t.len() <= max_size {
                data[..t.len()].copy_from_slice(t.as_bytes());
                return t.len();
            }
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
}
