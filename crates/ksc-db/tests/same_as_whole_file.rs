//! Checking declaration by declaration through the database gives what the
//! whole-file checker gives, for every example and every bad input (with
//! the program's rules applied to its definitions, which the database does
//! as it checks them and the whole-file checker, without the optimiser,
//! leaves to [`with_rules`]).

use crate::common;

/// The whole-file checker's result with the program's rules applied to its
/// definitions, as the database's `checked` does.
fn with_rules(mut a: ksc_types::Analysis) -> ksc_types::Analysis {
    use ksc_ir::Decl;
    if a.has_errors() {
        return a;
    }
    let (schedules, declared) = schedules_and_names(&a.source.decls);
    let names = ksc_opt::pipeline::Declared(&|base| declared.iter().any(|n| n == base));
    for d in &mut a.source.decls {
        if let Decl::Def(def) = d {
            ksc_opt::pipeline::rewrite_written(def, &schedules, &names);
        }
    }
    a
}

/// The program's schedules, and the base names it declares.
fn schedules_and_names(decls: &[ksc_ir::Decl]) -> (ksc_opt::Schedules, Vec<String>) {
    use ksc_ir::Decl;
    let rules: Vec<&ksc_ir::Rule> =
        decls.iter().filter_map(|d| if let Decl::Rule(r) = d { Some(r) } else { None }).collect();
    let strategies: Vec<&ksc_ir::StrategyDecl> =
        decls.iter().filter_map(|d| if let Decl::Strategy(s) = d { Some(s) } else { None }).collect();
    let (schedules, _) = ksc_opt::pipeline::program_schedules(&rules, &strategies);
    let declared = decls
        .iter()
        .filter_map(|d| match d {
            Decl::Def(d) => Some(d.name.base.clone()),
            Decl::Edef(d) => Some(d.name.base.clone()),
            _ => None,
        })
        .collect();
    (schedules, declared)
}

/// The database's definitions that call derived functions are rewritten
/// again knowing those functions' bodies (`ksc_db::queries::written`):
/// the same here, with the database's derived functions.
fn knowing_derived(mut whole: ksc_types::Analysis, db: &ksc_types::Analysis) -> ksc_types::Analysis {
    use ksc_ir::Decl;
    if whole.has_errors() {
        return whole;
    }
    let (schedules, declared) = schedules_and_names(&whole.source.decls);
    struct WithDerived<'a>(&'a [ksc_ir::Def], &'a [String]);
    impl ksc_opt::Defs for WithDerived<'_> {
        fn def(&self, name: &ksc_ir::FunName) -> Option<&ksc_ir::Def> {
            self.0.iter().find(|d| d.name == *name)
        }
        fn has_def(&self, name: &ksc_ir::FunName) -> bool {
            self.def(name).is_some() || self.1.contains(&name.base)
        }
    }
    let program = WithDerived(&db.derived, &declared);
    for d in &mut whole.source.decls {
        if let Decl::Def(def) = d {
            if ksc_ir::term::callees(def).iter().any(|f| !f.derivs.is_empty()) {
                ksc_opt::pipeline::rewrite_written(def, &schedules, &program);
            }
        }
    }
    whole
}

#[test]
fn every_file_checks_as_with_the_whole_file_checker() {
    let files = common::ks_files(&["ksc-examples", "tests/bad"]);
    assert!(files.len() > 50, "found {} files", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let db = ksc_db::analyze(&text);
        let whole = knowing_derived(with_rules(ksc_types::analyze(&text)), &db);
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

/// Deriving and optimising each derived function by its own queries gives
/// what deriving a `gdef`'s functions together gives (`ksc_ad`'s
/// `derive_requested` and `optimise`), for every example.
#[test]
fn every_derived_function_is_the_one_derived_all_at_once() {
    use ksc_ir::Decl;
    let show = |d: &ksc_ir::Def| ksc_ir::Program { decls: vec![Decl::Def(d.clone())] }.to_string();
    let mut compared = 0;
    for path in common::ks_files(&["ksc-examples"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        let whole = with_rules(ksc_types::analyze(&text));
        if whole.has_errors() {
            continue;
        }
        let db = ksc_db::analyze(&text);
        let name = path.display();
        let defs = whole.defs();
        let rules: Vec<&ksc_ir::Rule> =
            whole.source.decls.iter().filter_map(|d| if let Decl::Rule(r) = d { Some(r) } else { None }).collect();
        let strategies: Vec<&ksc_ir::StrategyDecl> =
            whole.source.decls.iter().filter_map(|d| if let Decl::Strategy(s) = d { Some(s) } else { None }).collect();
        let mut expected: Vec<(String, String)> = Vec::new();
        for decl in &whole.source.decls {
            let Decl::Gdef(g) = decl else { continue };
            let request = g.fun.derived(g.derivation);
            let mut derived = ksc_ad::derive_requested(&defs, std::slice::from_ref(&request));
            if !derived.errors.is_empty() {
                continue;
            }
            ksc_opt::pipeline::optimise_all(&mut derived.defs, &defs, &rules, &strategies);
            if let Some(s) = &g.schedule {
                // The gdef's own schedule, on the function it asks for.
                let snapshot = derived.defs.clone();
                let map = ksc_opt::DefMap::new(defs.iter().copied().chain(snapshot.iter()));
                let globals = ksc_opt::Globals::new(&map);
                let (schedules, _) = ksc_opt::pipeline::program_schedules(&rules, &strategies);
                for d in derived.defs.iter_mut().filter(|d| d.name == request) {
                    ksc_opt::pipeline::apply_schedule(d, &globals, &schedules, s).expect("a known schedule");
                }
            }
            ksc_opt::pipeline::keep_called(&mut derived.defs, &request);
            for d in derived.defs {
                let key = d.name.to_string();
                if !expected.iter().any(|(k, _)| *k == key) {
                    expected.push((key, show(&d)));
                }
            }
        }
        let mut got: Vec<(String, String)> = db.derived.iter().map(|d| (d.name.to_string(), show(d))).collect();
        expected.sort();
        got.sort();
        for (e, g) in expected.iter().zip(&got) {
            assert_eq!(e, g, "{name}");
        }
        assert_eq!(expected.len(), got.len(), "{name}");
        compared += got.len();
    }
    assert!(compared > 100, "compared {compared} derived functions");
}
