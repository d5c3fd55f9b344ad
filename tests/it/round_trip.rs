//! Printing then re-reading any program gives the same program: for every
//! example, both the program as written and the checked program (whose names
//! are printed fully qualified, `[add (Tuple Float Float)]`).

use crate::common::{ks_files, report, root};
use ksc_ir::Program;

fn lowered(text: &str) -> Result<Program, String> {
    let (ast, errors) = ksc_syntax::parse_source(text);
    if !errors.is_empty() {
        return Err(format!("{errors:?}"));
    }
    Ok(Program { decls: ksc_types::lower::lower_file(&ast).0 })
}

fn example_texts() -> Vec<(String, String)> {
    ks_files("ksc-examples")
        .into_iter()
        .map(|f| (f.display().to_string(), std::fs::read_to_string(root().join(&f)).unwrap()))
        .collect()
}

#[test]
fn printed_programs_read_back_the_same() {
    let examples = example_texts();
    let mut failures = Vec::new();
    for (path, text) in &examples {
        let first = lowered(text).unwrap_or_else(|e| panic!("{path} does not parse: {e}"));
        let printed = first.to_string();
        match lowered(&printed) {
            Ok(second) if second == first => {}
            Ok(_) => {
                failures.push(format!("{path}: re-reading the printed program gives a different program:\n{printed}"))
            }
            Err(e) => failures.push(format!("{path}: the printed program does not parse: {e}\n{printed}")),
        }
        // Printing is deterministic and idempotent.
        if let Ok(second) = lowered(&printed) {
            if second.to_string() != printed {
                failures.push(format!("{path}: printing is not idempotent"));
            }
        }
    }
    report("round trips", failures, examples.len());
}

#[test]
fn printed_checked_programs_check_to_the_same_program() {
    let examples = example_texts();
    let mut failures = Vec::new();
    for (path, text) in &examples {
        let first = ksc_types::analyze(text);
        assert!(!first.has_errors(), "{path} has errors: {:?}", first.diagnostics);
        let printed = Program { decls: first.source.decls.clone() }.to_string();
        let second = ksc_types::analyze(&printed);
        if second.has_errors() {
            failures
                .push(format!("{path}: the printed checked program has errors: {:?}\n{printed}", second.diagnostics));
        } else if second.source.decls != first.source.decls {
            failures.push(format!("{path}: the printed checked program checks to a different program:\n{printed}"));
        }
    }
    report("checked round trips", failures, examples.len());
}
