//! The loop-IR pipeline run pass by pass on every example and snapshot:
//! a pass that says it changed nothing left the function as it was (the
//! contract of `Pass::run` that pipelines repeating a pass rely on), and
//! the passes run one by one give what `ksc_lower::compile` gives.

use crate::common;

use ksc_db::Database;
use ksc_lower::ir::needs_heap;
use ksc_lower::passes::{effectful_funcs, LoopCx, PIPELINE};

#[test]
fn a_pass_that_reports_no_change_changed_nothing() {
    let (mut runs, mut changed) = (0, 0);
    for path in common::ks_files(&["ksc-examples", "tests/snapshots"]) {
        let db = Database::new();
        let file = db.add_file(std::fs::read_to_string(&path).unwrap());
        let a = ksc_db::analysis(&db, file);
        if a.has_errors() {
            continue;
        }
        let defs = a.defs();
        let roots = common::exported(&a);
        let opts = ksc_lower::Options::default();
        let (Ok(mut m), Ok(whole)) =
            (ksc_lower::compile(&defs, &roots, opts, false), ksc_lower::compile(&defs, &roots, opts, true))
        else {
            continue;
        };
        let effectful = effectful_funcs(&m);
        let heap_ret: Vec<bool> = m.funcs.iter().map(|f| needs_heap(&f.ret)).collect();
        let cx = LoopCx { effectful: &effectful, heap_ret: &heap_ret };
        for f in &mut m.funcs {
            for p in PIPELINE {
                let before = f.clone();
                runs += 1;
                if p.run(f, &cx) {
                    changed += 1;
                } else {
                    assert_eq!(*f, before, "{}: `{}` changed {} but said not", path.display(), p.name(), f.name);
                }
            }
        }
        assert_eq!(m, whole, "{}", path.display());
    }
    assert!(runs > 5000 && changed > 500, "{runs} runs, {changed} changed something");
}

/// `--skip-pass NAME` and `--dump-after NAME` select a pass of either
/// pipeline by name: no name may mean a pass of both.
#[test]
fn the_two_pipelines_name_their_passes_apart() {
    let loops = ksc_lower::passes::names();
    for n in ksc_opt::pipeline::names() {
        assert!(!loops.contains(&n), "`{n}` names a pass of both pipelines");
    }
}
