//! The repository's `.ks` files: every example program parses without a
//! syntax error, and no file (the bad programs included) breaks the parser.

use crate::common;

use common::{all_spans, render_errors, span_ok};
use std::path::{Path, PathBuf};

fn ks_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "ks"));
    files.sort();
    files
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn example_programs_parse_without_errors() {
    let files = ks_files(&repo().join("ksc-examples"));
    assert!(!files.is_empty(), "no example programs found");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let (file, errors) = ksc_syntax::parse_source(&text);
        assert!(errors.is_empty(), "{}:\n{}", path.display(), render_errors(&text, &errors));
        assert!(!file.decls.is_empty(), "{}", path.display());
        assert!(all_spans(&file).into_iter().all(|s| span_ok(&text, s)));
    }
}

#[test]
fn bad_programs_give_sound_results() {
    for path in ks_files(&repo().join("tests/bad")) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let (file, errors) = ksc_syntax::parse_source(&text);
        assert!(errors.iter().all(|e| span_ok(&text, e.span)), "{}", path.display());
        assert!(all_spans(&file).into_iter().all(|s| span_ok(&text, s)), "{}", path.display());
    }
}
