//! What the fuzz targets of `fuzz_targets/` share: the properties and input
//! guards (`props.rs`, which the test suite replays reproducers through),
//! and the mutator that keeps programs well typed more often than byte
//! edits do.

mod props;
pub use props::*;

/// Swaps that tend to keep a program well typed: one prelude function or
/// literal for another of the same type (those of `tests/it/native_mutants.rs`,
/// and a few more).
pub const SWAPS: &[(&str, &str)] = &[
    ("mul", "add"),
    ("add", "sub"),
    ("sub", "mul"),
    ("div", "mul"),
    ("sin", "cos"),
    ("cos", "sin"),
    ("exp", "tanh"),
    ("tanh", "exp"),
    ("log", "sqrt"),
    ("sqrt", "log"),
    ("1.0", "2.5"),
    ("0.0", "-1.5"),
    ("2.0", "0.0"),
    ("1.5", "1e300"),
    ("2.5", "-0.0"),
    (" 1)", " 0)"),
    (" 0)", " 2)"),
    (" 2)", " 1)"),
    (" 3)", " 0)"),
    (" 1)", " -1)"),
    (" 2)", " 7)"),
    ("gt", "lt"),
    ("lt", "gte"),
    ("lte", "gte"),
    ("eq", "ne"),
    ("true", "false"),
    ("false", "true"),
    ("max", "min"),
    ("min", "max"),
];

/// A small deterministic generator (xorshift64*) seeded by libFuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The mutator of the derivation and native targets: half the time one to
/// three type-preserving swaps of `SWAPS`, otherwise libFuzzer's own byte
/// mutations (which explore the rest, and mostly make ill-typed text).
pub fn mutate(data: &mut [u8], size: usize, max_size: usize, seed: u32) -> usize {
    let mut rng = Rng((seed as u64) << 1 | 1);
    if rng.below(2) == 0 {
        if let Ok(text) = std::str::from_utf8(&data[..size]) {
            let mut t = text.to_string();
            for _ in 0..1 + rng.below(3) {
                let (from, to) = SWAPS[rng.below(SWAPS.len())];
                let hits: Vec<usize> = t.match_indices(from).map(|(i, _)| i).collect();
                if !hits.is_empty() {
                    let i = hits[rng.below(hits.len())];
                    t.replace_range(i..i + from.len(), to);
                }
            }
            if t != text && t.len() <= max_size {
                data[..t.len()].copy_from_slice(t.as_bytes());
                return t.len();
            }
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
}
