//! What the database's tests share.

use std::path::{Path, PathBuf};

/// Every `.ks` file under these directories of the repository, recursively.
pub fn ks_files(dirs: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "ks") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = Vec::new();
    for d in dirs {
        walk(&root.join(d), &mut out);
    }
    out
}

/// What `ksc build` exports: every definition of the file in force, and
/// every derived function.
pub fn exported(a: &ksc_types::Analysis) -> Vec<ksc_ir::FunName> {
    let defs = a.defs();
    a.source
        .decls
        .iter()
        .filter_map(|d| if let ksc_ir::Decl::Def(d) = d { Some(d.name.clone()) } else { None })
        .filter(|n| defs.iter().any(|d| d.name == *n))
        .chain(a.derived.iter().map(|d| d.name.clone()))
        .collect()
}
