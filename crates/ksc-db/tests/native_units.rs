//! Lowering each definition in its own query and linking the units gives
//! the module the whole-program lowering gives, for every example: the
//! same functions (same loop IR, same numbering) and the same sites; and
//! the C made function by function is the C of that module.

use crate::common;

use ksc_db::{native_module, Database};
use ksc_ir::FunName;

#[test]
fn linked_units_are_the_whole_program_lowering() {
    let mut compared = 0;
    for path in common::ks_files(&["ksc-examples"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        let db = Database::new();
        let file = db.add_file(text.clone());
        let a = ksc_db::analysis(&db, file);
        if a.has_errors() {
            continue;
        }
        // `main`, and (as `ksc build` exports them) every definition of the
        // file and every derived function.
        let mut root_sets: Vec<Vec<FunName>> = Vec::new();
        if let Some(m) = a.main() {
            root_sets.push(vec![m.name.clone()]);
        }
        let defs = a.defs();
        root_sets.push(common::exported(&a));
        for roots in root_sets {
            for checked in [true, false] {
                let opts = ksc_lower::Options { checked, ..ksc_lower::Options::default() };
                let whole = ksc_lower::compile(&defs, &roots, opts, true);
                let linked = native_module(&db, file, roots.clone(), checked);
                match (whole, linked) {
                    (Ok(w), Ok(l)) => {
                        assert_eq!(w.sites, l.sites, "{}: sites", path.display());
                        assert_eq!(w.funcs.len(), l.funcs.len(), "{}", path.display());
                        for (x, y) in w.funcs.iter().zip(&l.funcs) {
                            assert_eq!(x, y, "{}: {}", path.display(), x.name);
                        }
                        assert_eq!(w, *l, "{}", path.display());
                        // And the C made function by function is the C.
                        let locations = ksc_db::site_locations(&w.sites, &a, "p.ks", &text);
                        let target = ksc_codegen_c::Target::Library;
                        let c = ksc_codegen_c::emit(&w, &locations, target, checked, "p.h");
                        let by_function =
                            ksc_db::c_unit(&db, file, "p.ks".into(), roots.clone(), checked, target, "p.h".into());
                        assert_eq!(Ok(&c), by_function.as_ref(), "{}", path.display());
                        compared += w.funcs.len();
                    }
                    (Err(e), Err(f)) => assert_eq!(e.to_string(), *f, "{}", path.display()),
                    (w, l) => panic!("{}: {:?} vs {:?}", path.display(), w.map(|_| ()), l.as_ref().map(|_| ())),
                }
            }
        }
    }
    assert!(compared > 500, "compared {compared} functions");
}

/// `line_col` (the sites' lines and columns) counts characters, not bytes.
/// (It was the crate's only unit test; see `test = false` in Cargo.toml.)
#[test]
fn line_and_column() {
    use ksc_db::line_col;
    assert_eq!(line_col("ab\ncd", 0), (1, 1));
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
    assert_eq!(line_col("é\nx", 3), (2, 1));
    assert_eq!(line_col("ab\n", 3), (2, 1));
    assert_eq!(line_col("ab", 9), (1, 3));
}
