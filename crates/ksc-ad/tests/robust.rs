//! Differentiating any well-typed program never fails with an internal
//! error: random mutations of the AD examples that still type-check are
//! differentiated (every `gdef`), and every error must be a user-facing one
//! ("not supported", "no derivative", ...), never "internal error".

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

fn examples() -> &'static [String] {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ksc-examples/ad");
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files.iter().filter(|p| p.extension().is_some_and(|x| x == "ks")).map(|p| std::fs::read_to_string(p).unwrap()).collect()
    })
}

/// Token-level mutations that tend to keep programs well typed: swap one
/// prelude function or literal for another of the same type.
const SWAPS: &[(&str, &str)] = &[
    ("mul", "add"),
    ("add", "sub"),
    ("sin", "cos"),
    ("exp", "tanh"),
    ("log", "sqrt"),
    ("1.0", "2.5"),
    ("0.0", "-1.5"),
    ("gt", "lt"),
    ("sumbuild", "sumbuild"),
    ("(index i v)", "(index 0 v)"),
    ("(mul x y)", "(mul y x)"),
    ("x", "y"),
];

#[derive(Clone, Debug)]
struct Case {
    file: usize,
    swaps: Vec<(usize, usize)>,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let n = usize::arbitrary(g) % 4 + 1;
        Case { file: usize::arbitrary(g), swaps: (0..n).map(|_| (usize::arbitrary(g), usize::arbitrary(g))).collect() }
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Case>> {
        let file = self.file;
        Box::new(self.swaps.shrink().map(move |swaps| Case { file, swaps }))
    }
}

fn mutate(text: &str, case: &Case) -> String {
    let mut t = text.to_string();
    for &(which, at) in &case.swaps {
        let (from, to) = SWAPS[which % SWAPS.len()];
        let hits: Vec<usize> = t.match_indices(from).map(|(i, _)| i).collect();
        if hits.is_empty() {
            continue;
        }
        let i = hits[at % hits.len()];
        t.replace_range(i..i + from.len(), to);
    }
    t
}

#[test]
fn differentiating_well_typed_mutants_never_hits_an_internal_error() {
    fn prop(case: Case) -> TestResult {
        let texts = examples();
        let text = mutate(&texts[case.file % texts.len()], &case);
        let analysis = ksc_types::analyze(&text);
        if analysis.has_errors() {
            return TestResult::discard();
        }
        let requests: Vec<_> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
        let derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
        match derived.errors.iter().find(|(_, e)| e.message.contains("internal error")) {
            Some((n, e)) => TestResult::error(format!("{n}: {}\n{text}", e.message)),
            None => TestResult::passed(),
        }
    }
    QuickCheck::new().tests(200).max_tests(2000).quickcheck(prop as fn(Case) -> TestResult);
}
