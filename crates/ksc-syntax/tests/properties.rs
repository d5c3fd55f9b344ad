//! Property tests: on arbitrary input (random bytes, random token soup, and
//! random mutations of realistic programs) the reader and parser never panic,
//! every span they return lies within the text on char boundaries, errors are
//! sorted, nothing is dropped silently, and what parses without errors prints
//! back to text that parses to the same tree.

use crate::common;

use common::*;
use ksc_syntax::sexpr::{read_sexprs, SExpr, SExprKind};
use ksc_syntax::{parse_source, Span};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

/// Characters worth inserting: brackets, quotes, escapes, comment markers,
/// signs, digits, the colon, non-ASCII and control characters.
const INTERESTING: &[char] = &[
    '(', ')', '[', ']', '"', '\\', ';', '#', '|', '\n', ' ', ':', '-', '+', '.', 'e', '0', '1', 'x', 'o', '&', '{',
    'é', 'λ', '\u{0}', '\u{7f}', '\u{a0}', '\u{FEFF}', '\t', '\r',
];

/// Fragments for token soup.
const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "(",
    ")",
    "\"",
    "\\",
    ";",
    "\n",
    " ",
    " ",
    "#|",
    "|#",
    "def",
    "edef",
    "gdef",
    "rule",
    "let",
    "if",
    "assert",
    "lam",
    "tuple",
    "$dummy",
    ":",
    "x",
    "y",
    "f",
    "Float",
    "Integer",
    "Vec",
    "Tensor",
    "Tuple",
    "LM",
    "Lam",
    "Bool",
    "String",
    "rev",
    "D",
    "shape",
    "1",
    "-",
    "+",
    "1.",
    "2.5e3",
    "0x1F",
    "0o7",
    "99999999999999999999",
    "\"s\\n\"",
    "\"\\q\"",
    "é",
    "{",
    "x:Float",
    "true",
];

/// A QuickCheck runner with a given input size and number of tests.
fn qc(size: usize, tests: u64) -> QuickCheck {
    QuickCheck::new().rng(Gen::new(size)).tests(tests)
}

/// A test input; `Debug` prints the text itself so failures are readable.
#[derive(Clone)]
struct Input(String);

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Input {
    fn shrink_text(&self) -> Box<dyn Iterator<Item = Input>> {
        Box::new(self.0.shrink().map(Input))
    }
}

/// Random bytes, made into text.
#[derive(Clone, Debug)]
struct Bytes(Input);

impl Arbitrary for Bytes {
    fn arbitrary(g: &mut Gen) -> Bytes {
        let bytes = Vec::<u8>::arbitrary(g);
        Bytes(Input(String::from_utf8_lossy(&bytes).into_owned()))
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Bytes>> {
        Box::new(self.0.shrink_text().map(Bytes))
    }
}

/// A random sequence of language fragments.
#[derive(Clone, Debug)]
struct Soup(Input);

impl Arbitrary for Soup {
    fn arbitrary(g: &mut Gen) -> Soup {
        let n = usize::arbitrary(g) % (g.size() + 1);
        let text: String = (0..n).filter_map(|_| g.choose(FRAGMENTS).copied()).collect();
        Soup(Input(text))
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Soup>> {
        Box::new(self.0.shrink_text().map(Soup))
    }
}

/// One of the sample programs with a few random edits: deleting, inserting
/// or duplicating characters.
#[derive(Clone, Debug)]
struct Mutated(Input);

impl Arbitrary for Mutated {
    fn arbitrary(g: &mut Gen) -> Mutated {
        let base = g.choose(&PROGRAMS).copied().unwrap_or_default();
        let mut chars: Vec<char> = base.chars().collect();
        let edits = 1 + usize::arbitrary(g) % 6;
        for _ in 0..edits {
            let pos = usize::arbitrary(g) % (chars.len() + 1);
            match u8::arbitrary(g) % 3 {
                0 if pos < chars.len() => {
                    chars.remove(pos);
                }
                1 => {
                    let c = g.choose(INTERESTING).copied().unwrap_or('(');
                    chars.insert(pos, c);
                }
                _ if pos < chars.len() => {
                    let c = chars[pos];
                    chars.insert(pos, c);
                }
                _ => {}
            }
        }
        Mutated(Input(chars.into_iter().collect()))
    }
    // Shrinking a whole program character by character is slow and rarely
    // clearer than the mutated program itself.
}

/// Every S-expression span, iteratively.
fn sexpr_spans(forms: &[SExpr]) -> Vec<Span> {
    let mut out = Vec::new();
    let mut todo: Vec<&SExpr> = forms.iter().collect();
    while let Some(e) = todo.pop() {
        out.push(e.span);
        if let SExprKind::List { items, .. } = &e.kind {
            todo.extend(items.iter());
        }
    }
    out
}

/// The invariants that must hold for any text.
fn invariants(input: Input) -> TestResult {
    match check(&input.0) {
        Ok(()) => TestResult::passed(),
        Err(message) => TestResult::error(format!("{message}\ninput: {:?}", input.0)),
    }
}

fn check(text: &str) -> Result<(), String> {
    let (forms, read_errors) = read_sexprs(text);
    let (file, errors) = parse_source(text);

    if let Some(e) = errors.iter().find(|e| !span_ok(text, e.span)) {
        return Err(format!("error span {:?} outside the text or not on char boundaries: {e:?}", e.span));
    }
    if let Some(s) = sexpr_spans(&forms).into_iter().find(|s| !span_ok(text, *s)) {
        return Err(format!("S-expression span {s:?} outside the text"));
    }
    if let Some(s) = all_spans(&file).into_iter().find(|s| !span_ok(text, *s)) {
        return Err(format!("syntax tree span {s:?} outside the text"));
    }
    if !errors.windows(2).all(|w| w[0].span.start <= w[1].span.start) {
        return Err("errors are not sorted by position".into());
    }
    if !read_errors.iter().all(|e| errors.contains(e)) {
        return Err("a reader error is missing from parse_source's errors".into());
    }
    if errors.is_empty() && file.decls.len() != forms.len() {
        return Err("a top-level form was dropped without an error".into());
    }
    if errors.iter().any(|e| e.message.is_empty()) {
        return Err("an error without a message".into());
    }
    if parse_source(text) != (file.clone(), errors.clone()) {
        return Err("parsing is not deterministic".into());
    }
    // What parses without errors prints back to text that parses the same.
    if errors.is_empty() {
        let printed: String = file.decls.iter().map(|d| decl(d) + "\n").collect();
        let (again, again_errors) = parse_source(&printed);
        if !again_errors.is_empty() {
            return Err(format!("the printed program has errors: {again_errors:?}\n{printed}"));
        }
        let reprinted: String = again.decls.iter().map(|d| decl(d) + "\n").collect();
        if reprinted != printed {
            return Err(format!("printing is not stable:\n{printed}\nvs\n{reprinted}"));
        }
    }
    Ok(())
}

#[test]
fn random_strings_never_break_the_parser() {
    qc(200, 2000).quickcheck(invariants as fn(Input) -> TestResult);
}

#[test]
fn random_bytes_never_break_the_parser() {
    fn prop(b: Bytes) -> TestResult {
        invariants(b.0)
    }
    qc(200, 2000).quickcheck(prop as fn(Bytes) -> TestResult);
}

#[test]
fn random_token_soup_never_breaks_the_parser() {
    fn prop(s: Soup) -> TestResult {
        invariants(s.0)
    }
    qc(60, 3000).quickcheck(prop as fn(Soup) -> TestResult);
}

#[test]
fn mutated_programs_never_break_the_parser() {
    fn prop(m: Mutated) -> TestResult {
        invariants(m.0)
    }
    qc(100, 3000).quickcheck(prop as fn(Mutated) -> TestResult);
}

/// The mutations produce both programs that still parse (so the round trip
/// is exercised on many shapes) and programs with errors (so recovery is).
#[test]
fn mutations_produce_both_valid_and_invalid_programs() {
    let mut g = Gen::new(100);
    let (mut valid, mut invalid) = (0, 0);
    for _ in 0..500 {
        let Mutated(Input(text)) = Mutated::arbitrary(&mut g);
        if parse_source(&text).1.is_empty() {
            valid += 1
        } else {
            invalid += 1
        }
    }
    assert!(valid >= 20 && invalid >= 20, "valid {valid}, invalid {invalid}");
}

#[test]
fn sample_programs_satisfy_the_invariants_and_round_trip() {
    for program in PROGRAMS {
        let result = invariants(Input(program.to_string()));
        assert!(!result.is_failure() && !result.is_error(), "{program}");
    }
}

impl Arbitrary for Input {
    fn arbitrary(g: &mut Gen) -> Input {
        Input(String::arbitrary(g))
    }
    fn shrink(&self) -> Box<dyn Iterator<Item = Input>> {
        self.shrink_text()
    }
}
