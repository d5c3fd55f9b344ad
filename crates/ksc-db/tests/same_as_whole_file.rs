//! Checking declaration by declaration through the database gives what the
//! whole-file checker gives, for every example and every bad input.

use std::path::Path;

fn ks_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            ks_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "ks") {
            out.push(p);
        }
    }
}

#[test]
fn every_file_checks_as_with_the_whole_file_checker() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    ks_files(&root.join("ksc-examples"), &mut files);
    ks_files(&root.join("tests/bad"), &mut files);
    assert!(files.len() > 50, "found {} files", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let whole = ksc_types::analyze(&text);
        let db = ksc_db::analyze(&text);
        let name = path.display();
        // The database adds what derivation reports after the checker's.
        assert!(
            db.diagnostics.len() >= whole.diagnostics.len()
                && db.diagnostics[..whole.diagnostics.len()] == whole.diagnostics[..],
            "{name}: {:#?}\n{:#?}",
            db.diagnostics,
            whole.diagnostics
        );
        let print = |a: &ksc_types::Analysis| ksc_ir::Program { decls: a.source.decls.clone() }.to_string();
        assert_eq!(print(&db), print(&whole), "{name}");
        assert_eq!(db.source.spans, whole.source.spans, "{name}");
        let names = |a: &ksc_types::Analysis| a.defs().iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        if !whole.has_errors() {
            assert_eq!(names(&db)[..names(&whole).len()], names(&whole)[..], "{name}");
        }
    }
}
