//! No input makes the reader or the type checker panic: random bytes, and
//! random mutations of every example program.

use crate::common::{ks_files, root};
use quickcheck::{Arbitrary, QuickCheck, TestResult};

fn analyze_never_panics(text: &str) -> bool {
    let analysis = ksc_types::analyze(text);
    // Every diagnostic points into its file.
    analysis.diagnostics.iter().all(|d| {
        let len = match d.file {
            ksc_types::FileRef::Source => text.len(),
            ksc_types::FileRef::Prelude => ksc_types::PRELUDE_SOURCE.len(),
        };
        d.span.start <= d.span.end && (d.span.end as usize) <= len
    })
}

#[test]
fn random_bytes_never_panic() {
    fn prop(bytes: Vec<u8>) -> bool {
        analyze_never_panics(&String::from_utf8_lossy(&bytes))
    }
    QuickCheck::new().tests(2000).quickcheck(prop as fn(Vec<u8>) -> bool);
}

/// Characters that matter to the grammar, so mutations hit interesting cases.
const INTERESTING: &[&str] = &[
    "(", ")", "[", "]", "\"", ";", "#|", "|#", " ", "\n", "-", "1", "1.5", "1e", "x", ":", "let", "if", "lam", "tuple",
    "def", "edef", "gdef", "rule", "Float", "Vec", "Tensor", "$dummy", "get$1$2", "build", "index", "0x", "\\", "true",
];

#[derive(Clone, Debug)]
struct Mutation {
    example: usize,
    edits: Vec<(u32, u8, u8)>,
}

impl Arbitrary for Mutation {
    fn arbitrary(g: &mut quickcheck::Gen) -> Mutation {
        let n = usize::arbitrary(g) % 6 + 1;
        Mutation { example: usize::arbitrary(g), edits: (0..n).map(|_| <(u32, u8, u8)>::arbitrary(g)).collect() }
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Mutation>> {
        let example = self.example;
        Box::new(self.edits.shrink().map(move |edits| Mutation { example, edits }))
    }
}

fn mutate(text: &str, m: &Mutation) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for &(pos, kind, what) in &m.edits {
        if chars.is_empty() {
            break;
        }
        let at = pos as usize % chars.len();
        match kind % 4 {
            0 => {
                chars.remove(at);
            }
            1 => {
                let s = INTERESTING[what as usize % INTERESTING.len()];
                chars.splice(at..at, s.chars());
            }
            2 => {
                let end = (at + what as usize % 40).min(chars.len());
                let dup: Vec<char> = chars[at..end].to_vec();
                chars.splice(at..at, dup);
            }
            _ => {
                let end = (at + what as usize % 40).min(chars.len());
                chars.drain(at..end);
            }
        }
    }
    chars.into_iter().collect()
}

fn examples() -> &'static [String] {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        ks_files("ksc-examples").iter().map(|f| std::fs::read_to_string(root().join(f)).unwrap()).collect()
    })
}

#[test]
fn mutated_examples_never_panic() {
    fn prop(m: Mutation) -> TestResult {
        let texts = examples();
        TestResult::from_bool(analyze_never_panics(&mutate(&texts[m.example % texts.len()], &m)))
    }
    QuickCheck::new().tests(3000).quickcheck(prop as fn(Mutation) -> TestResult);
}
