//! Mutations of `.ks` text that tend to keep a program well typed, shared
//! by the native mutants test (`native_mutants.rs`) and the fuzzer's
//! mutator (`fuzz/src/lib.rs` includes this file).

/// Swaps that tend to keep a program well typed: one prelude function or
/// literal for another of the same type.
pub const SWAPS: &[(&str, &str)] = &[
    ("mul", "add"),
    ("add", "sub"),
    ("sub", "mul"),
    ("div", "mul"),
    ("sin", "cos"),
    ("exp", "tanh"),
    ("log", "sqrt"),
    ("1.0", "2.5"),
    ("0.0", "-1.5"),
    ("2.0", "0.0"),
    (" 1)", " 0)"),
    (" 0)", " 2)"),
    (" 2)", " 1)"),
    (" 3)", " 0)"),
    ("gt", "lt"),
    ("lte", "gte"),
    ("eq", "ne"),
    ("true", "false"),
];

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One to three swaps of `swaps`, each at a random place its left side
/// occurs (none where it does not).
pub fn mutate(text: &str, rng: &mut Rng, swaps: &[(&str, &str)]) -> String {
    let mut t = text.to_string();
    for _ in 0..1 + rng.below(3) {
        let (from, to) = swaps[rng.below(swaps.len())];
        let hits: Vec<usize> = t.match_indices(from).map(|(i, _)| i).collect();
        if !hits.is_empty() {
            let i = hits[rng.below(hits.len())];
            t.replace_range(i..i + from.len(), to);
        }
    }
    t
}
