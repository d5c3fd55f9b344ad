//! Which queries re-execute after an edit (rust-analyzer's habit): the
//! exact list, compared sorted (salsa validates dependencies in an order
//! that is its own business). After every edit the incremental result is
//! also compared with a compilation from scratch.

use ksc_db::{analysis, derived_functions, file_diagnostics, Database, SourceFile};

const PROGRAM: &str = r#"; A small program with two derivatives.
(def sq Float (x : Float) (mul x x))
; Too big to inline (more than 12 nodes).
(def wave Float (x : Float) (add (mul 3.0 (mul x (sub x 1.0))) (add (sin (mul 2.0 x)) (cos (mul x 0.5)))))
(def cube Float (x : Float) (add (mul x (sq x)) (wave x)))
(def shift Float (x : Float) (add x 1.0))
(def shifted Float (x : Float) (shift x))
(gdef rev [cube Float])
(gdef fwd [shifted Float])
(def main Integer () (print (cube 2.0) (shifted 1.0)))
"#;

/// Compiles everything (diagnostics, derivatives, the whole analysis) and
/// returns the queries that executed, sorted, checking them against
/// salsa's `WillExecute` events.
fn compile(db: &Database, file: SourceFile) -> Vec<String> {
    let _ = analysis(db, file);
    executed(db)
}

fn executed(db: &Database) -> Vec<String> {
    let e = db.take_executed();
    assert_eq!(e.events, e.queries.len(), "every executed query describes itself: {:?}", e.queries);
    let mut q = e.queries;
    q.sort();
    q
}

/// The incremental result equals a compilation from scratch.
fn assert_same_as_scratch(db: &Database, file: SourceFile) {
    let inc = analysis(db, file);
    let scratch = ksc_db::analyze(file.text(db));
    assert_eq!(inc.diagnostics, scratch.diagnostics);
    let print = |a: &ksc_types::Analysis| {
        let mut decls = a.source.decls.clone();
        decls.extend(a.derived.iter().cloned().map(ksc_ir::Decl::Def));
        ksc_ir::Program { decls }.to_string()
    };
    assert_eq!(print(&inc), print(&scratch));
    assert_eq!(inc.source.spans, scratch.source.spans);
}

fn edit(db: &mut Database, file: SourceFile, from: &str, to: &str) {
    let text = file.text(db).clone();
    assert_eq!(text.matches(from).count(), 1, "`{from}` occurs once");
    db.set_text(file, text.replace(from, to));
}

fn strings(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn setup() -> (Database, SourceFile) {
    let db = Database::new();
    let file = db.add_file(PROGRAM.to_string());
    let cold = compile(&db, file);
    assert!(cold.contains(&"prelude".to_string()));
    assert!(cold.contains(&"gdef_derived(gdef rev [cube Float])".to_string()), "{cold:#?}");
    assert!(analysis(&db, file).diagnostics.is_empty(), "{:?}", analysis(&db, file).diagnostics);
    (db, file)
}

#[test]
fn editing_a_body_rederives_only_what_depends_on_it() {
    let (mut db, file) = setup();
    edit(&mut db, file, "(mul x x)", "(mul x (mul 1.0 x))");
    assert_eq!(
        compile(&db, file),
        strings(&[
            "parse_file",
            // The edited definition: its signature is recomputed (and is
            // unchanged, so no caller is re-checked), its body re-checked.
            "signature(def sq)",
            "checked(def sq)",
            "item_diagnostics(def sq)",
            // What the backends run of it (the program has no rules: the
            // checked definition as it is).
            "written(def sq)",
            // The text after the edit moved: the located table (for
            // run-time error positions) is rebuilt, nothing is re-checked.
            "located_scopes",
            "def_of([sq Float])",
            "is_defined([sq Float])",
            // [D sq] and [rev sq] are derived again. [rev cube] is not: its
            // derivation reads only that `sq` has a definition, and which
            // callees call `cube` back (mutual recursion): none, as before
            // (the edited function's own calls and partners are recomputed).
            "callees_of([sq Float])",
            "recursion_partners([sq Float])",
            "jacobian_of([sq Float])",
            "derived_one([rev [sq Float]])",
            "closure([rev [cube Float]])",
            // `sq` is small: the optimiser of [rev cube] inlines it, so
            // [rev cube] is optimised again. It inlines [rev sq] too, which
            // nothing calls then: it is not optimised (nor kept).
            "small_def_of([sq Float])",
            "optimised([rev [cube Float]])",
            // Whether [rev sq] is small enough to inline into [rev cube]
            // (two limits: with its primal call, and alone; chain.rs).
            "small_def_of([rev [sq Float]])",
            "small_def_of([rev [sq Float]])",
            // The edited body's derivative has `(1.0 x) dr + x dr`, which
            // `distribute` makes `(1.0 x + x) dr`: the optimiser asks
            // whether that `add` is a definition it could inline (it is
            // the built-in, a first ask since the edit).
            "small_def_of([add (Tuple Float Float)])",
            // Whether they print or recurse: the request's facts are
            // computed again, the same, so nothing reads them again.
            "request_facts([rev [cube Float]])",
            // [fwd shifted] is not derived again.
            "gdef_derived(gdef rev [cube Float])",
            "file_diagnostics",
            "derived_functions",
            "analysis",
        ])
    );
    assert_same_as_scratch(&db, file);

    // `wave` is too big to inline, and so is [rev wave], which [rev cube]
    // calls. Editing `wave` derives and optimises [rev wave] again, and
    // nothing of [rev cube].
    edit(&mut db, file, "(cos (mul x 0.5))", "(cos (mul x 0.25))");
    assert_eq!(
        compile(&db, file),
        strings(&[
            "parse_file",
            "signature(def wave)",
            "checked(def wave)",
            "item_diagnostics(def wave)",
            "written(def wave)",
            "located_scopes",
            "def_of([wave Float])",
            "is_defined([wave Float])",
            "callees_of([wave Float])",
            "recursion_partners([wave Float])",
            "jacobian_of([wave Float])",
            "derived_one([rev [wave Float]])",
            "closure([rev [cube Float]])",
            "optimised([rev [wave Float]])",
            "small_def_of([rev [wave Float]])",
            "small_def_of([rev [wave Float]])",
            "request_facts([rev [cube Float]])",
            "gdef_derived(gdef rev [cube Float])",
            "file_diagnostics",
            "derived_functions",
            "analysis",
        ])
    );
    assert_same_as_scratch(&db, file);

    // The other derivative depends on `shift` alone. [fwd shift] is
    // derived and optimised again, but the derivative of `x + c` does not
    // depend on `c`: the optimised result is the same, so nothing after it
    // runs again, and [fwd shifted] is not touched.
    edit(&mut db, file, "(add x 1.0)", "(add x 2.0)");
    assert_eq!(
        compile(&db, file),
        strings(&[
            "parse_file",
            "signature(def shift)",
            "checked(def shift)",
            "item_diagnostics(def shift)",
            "written(def shift)",
            "def_of([shift Float])",
            "is_defined([shift Float])",
            "callees_of([shift Float])",
            "recursion_partners([shift Float])",
            "jacobian_of([shift Float])",
            "derived_one([fwd [shift Float]])",
            "closure([fwd [shifted Float]])",
            "optimised([fwd [shift Float]])",
            "small_def_of([fwd [shift Float]])",
            "request_facts([fwd [shifted Float]])",
            "analysis",
        ])
    );
    assert_same_as_scratch(&db, file);

    // A change that changes [fwd shift]; [fwd shifted] calls it (it is too
    // big to inline) and is not optimised again.
    edit(&mut db, file, "(add x 2.0)", "(mul x 2.0)");
    assert_eq!(
        compile(&db, file),
        strings(&[
            "parse_file",
            "signature(def shift)",
            "checked(def shift)",
            "item_diagnostics(def shift)",
            "written(def shift)",
            "def_of([shift Float])",
            "is_defined([shift Float])",
            // `shift`'s calls change: whether `shifted` is mutually
            // recursive is asked again (it is not, as before; [fwd shifted]
            // is not derived again).
            "callees_of([shift Float])",
            "recursion_partners([shift Float])",
            "recursion_partners([shifted Float])",
            "jacobian_of([shift Float])",
            "derived_one([fwd [shift Float]])",
            "closure([fwd [shifted Float]])",
            "optimised([fwd [shift Float]])",
            "small_def_of([fwd [shift Float]])",
            // `shift` now calls `mul`, which is new to [fwd shift]: the
            // request's facts change, and are read again.
            "request_facts([fwd [shifted Float]])",
            "facts_of([shift Float])",
            "facts_of([fwd [shift Float]])",
            "facts_of([mul (Tuple Float Float)])",
            "gdef_derived(gdef fwd [shifted Float])",
            "file_diagnostics",
            "derived_functions",
            "analysis",
        ])
    );
    assert_same_as_scratch(&db, file);

    // `main` is derived by nothing.
    edit(&mut db, file, "(cube 2.0)", "(cube 3.0)");
    assert_eq!(
        compile(&db, file),
        strings(&[
            "parse_file",
            "signature(def main)",
            "checked(def main)",
            "item_diagnostics(def main)",
            "written(def main)",
            "analysis"
        ])
    );
    assert_same_as_scratch(&db, file);
}

#[test]
fn moving_text_reruns_parsing_and_nothing_that_reads_only_core_ir() {
    let (mut db, file) = setup();
    // A comment, blank lines and spaces inside bodies: every declaration moves.
    edit(&mut db, file, "; A small program", "; A longer comment\n\n; about a small program");
    edit(&mut db, file, "(mul x (sq x))", "(mul   x\n   (sq x))");
    edit(&mut db, file, "(sin (mul 2.0 x))", "(sin\n  (mul 2.0 x))");
    let _ = file_diagnostics(&db, file);
    let _ = derived_functions(&db, file);
    assert_eq!(executed(&db), strings(&["parse_file"]));
    // The analysis carries the positions (for run-time errors): it and the
    // located table are rebuilt, nothing is checked or derived again.
    assert_eq!(compile(&db, file), strings(&["located_scopes", "analysis"]));
    assert_same_as_scratch(&db, file);
}

#[test]
fn changing_a_signature_rechecks_the_declarations_that_see_it() {
    let (mut db, file) = setup();
    // Another result type: `shifted` sees a different `shift`.
    edit(&mut db, file, "(def shift Float (x : Float) (add x 1.0))", "(def shift Bool (x : Float) true)");
    let diagnostics = &analysis(&db, file).diagnostics;
    let messages: Vec<&str> = diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(messages, ["the body of `shifted` has the wrong type"], "{diagnostics:#?}");
    assert_eq!(
        executed(&db),
        strings(&[
            "parse_file",
            "signature(def shift)",
            "file_scopes",
            "located_scopes",
            // Every scope is recomputed; those before `shift` compare equal.
            "scope(def sq)",
            "scope(def wave)",
            "scope(def cube)",
            "scope(def shift)",
            "scope(def shifted)",
            "scope(gdef rev [cube Float])",
            "scope(gdef fwd [shifted Float])",
            "scope(def main)",
            // The declarations whose scope holds the new signature are
            // re-checked (a scope is the whole table, so `gdef rev cube`
            // and `main` are too); `sq`, `wave` and `cube` are not.
            "checked(def shift)",
            "checked(def shifted)",
            "checked(gdef rev [cube Float])",
            "checked(gdef fwd [shifted Float])",
            "checked(def main)",
            "item_diagnostics(def shift)",
            "item_diagnostics(def shifted)",
            "declared_names",
            "located_declared_names",
            // With an error, nothing is derived.
            "file_diagnostics",
            "analysis",
        ])
    );
    assert_same_as_scratch(&db, file);
}

#[test]
fn renaming_makes_diagnostics_appear_and_disappear() {
    let (mut db, file) = setup();
    edit(&mut db, file, "(def shift Float", "(def shoft Float");
    let d = &analysis(&db, file).diagnostics;
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].message, "function `[shift Float]` is not in scope");
    assert_eq!(d[0].notes, ["did you mean `shoft`?"]);
    let at = d[0].span.start as usize;
    assert!(file.text(&db)[at..].starts_with("(shift x)"));
    assert_same_as_scratch(&db, file);

    // Renaming the caller's use too makes it go away.
    edit(&mut db, file, "(shift x)", "(shoft x)");
    assert_eq!(analysis(&db, file).diagnostics, []);
    assert_same_as_scratch(&db, file);

    // And back: still clean, and the derivative is the one of `shift` again.
    edit(&mut db, file, "(def shoft Float", "(def shift Float");
    edit(&mut db, file, "(shoft x)", "(shift x)");
    assert_eq!(analysis(&db, file).diagnostics, []);
    assert_same_as_scratch(&db, file);
}

#[test]
fn diagnostics_move_with_their_text() {
    let (mut db, file) = setup();
    edit(&mut db, file, "(print (cube 2.0)", "(print (cube 2)");
    let before = analysis(&db, file).diagnostics.clone();
    assert_eq!(before.len(), 1, "{before:#?}");
    let _ = executed(&db);
    edit(&mut db, file, "; A small program", ";;;; A small program");
    let after = analysis(&db, file).diagnostics.clone();
    assert_eq!(after[0].span.start, before[0].span.start + 3);
    // Only the declaration with a diagnostic reads its positions again.
    let ran = executed(&db);
    assert!(ran.contains(&"item_diagnostics(def main)".to_string()), "{ran:#?}");
    assert!(!ran.iter().any(|q| q.starts_with("checked")), "{ran:#?}");
    assert_same_as_scratch(&db, file);
}

/// Everything of the file, as a library exports it: its definitions and
/// the derived functions.
fn library_roots(db: &Database, file: SourceFile) -> Vec<ksc_ir::FunName> {
    let a = analysis(db, file);
    let mut roots: Vec<ksc_ir::FunName> = a
        .source
        .decls
        .iter()
        .filter_map(|d| if let ksc_ir::Decl::Def(d) = d { Some(d.name.clone()) } else { None })
        .collect();
    roots.extend(a.derived.iter().map(|d| d.name.clone()));
    roots
}

/// Compiles through C and returns the native stage's queries that ran.
fn compile_native(db: &Database, file: SourceFile) -> Vec<String> {
    let roots = library_roots(db, file);
    let c =
        ksc_db::c_unit(db, file, "p.ks".to_string(), roots, true, ksc_codegen_c::Target::Library, "p.h".to_string());
    assert!(c.is_ok(), "{c:?}");
    executed(db)
        .into_iter()
        .filter(|q| {
            [
                "lowering_facts",
                "lowering_body",
                "loop_unit",
                "module_layout",
                "layout_row",
                "callee_sig",
                "native_module",
            ]
            .iter()
            .chain(&["linked_function", "c_function", "c_unit"])
            .any(|s| q.starts_with(s))
        })
        .collect()
}

#[test]
fn editing_a_body_lowers_again_what_inlines_it() {
    let (mut db, file) = setup();
    let cold = compile_native(&db, file);
    assert!(cold.contains(&"loop_unit([shifted Float])".to_string()), "{cold:#?}");

    // Lowering inlines small definitions: `wave` is inlined into `cube`,
    // and `cube` into `main`. [rev wave] (changed too) is called once, by
    // [rev cube], but the library exports it, so it is not inlined (that
    // would be a copy): [rev cube] is lowered again (its body is picked
    // again) but the same, and only what it reads of [rev wave]'s
    // signature is read again.
    edit(&mut db, file, "(cos (mul x 0.5))", "(cos (mul x 0.25))");
    let _ = analysis(&db, file);
    assert_eq!(
        compile_native(&db, file),
        strings(&[
            "lowering_facts",
            "lowering_body([wave Float])",
            // Derived functions' bodies are picked from the file's list of
            // them, which changed: each is picked again, and only [rev wave]
            // is different ([rev sq], inlined into [rev cube], is not one).
            "lowering_body([rev [wave Float]])",
            "lowering_body([rev [cube Float]])",
            "lowering_body([fwd [shift Float]])",
            "lowering_body([fwd [shifted Float]])",
            "loop_unit([wave Float])",
            "loop_unit([cube Float])",
            "loop_unit([main (Tuple)])",
            "loop_unit([rev [wave Float]])",
            "loop_unit([rev [cube Float]])",
            // The module is numbered again, the same: only the functions
            // whose units changed are linked again, and their C made again.
            "module_layout",
            "linked_function([wave Float])",
            "linked_function([cube Float])",
            "linked_function([main (Tuple)])",
            "linked_function([rev [wave Float]])",
            "callee_sig([rev [wave Float]])",
            "c_function([wave Float])",
            "c_function([cube Float])",
            "c_function([main (Tuple)])",
            "c_function([rev [wave Float]])",
            "c_unit",
        ])
    );
    assert_same_as_scratch(&db, file);

    // A comment: the C of the file is put together again (its site table
    // has line numbers), nothing is lowered again, no function's C is made
    // again.
    edit(&mut db, file, "; A small program", "; A small\n; program");
    let _ = analysis(&db, file);
    assert_eq!(compile_native(&db, file), strings(&["lowering_facts", "c_unit"]));
}

#[test]
fn the_derivatives_of_a_function_share_its_jacobian() {
    let db = Database::new();
    let text = "(def f Float (x : Float) (mul x (sin x)))\n(gdef fwd [f Float])\n(gdef rev [f Float])\n";
    let file = db.add_file(text.to_string());
    let ran = compile(&db, file);
    let count = |q: &str| ran.iter().filter(|r| *r == q).count();
    assert_eq!(count("jacobian_of([f Float])"), 1, "{ran:#?}");
    assert_eq!(count("derived_one([fwd [f Float]])"), 1, "{ran:#?}");
    assert_eq!(count("derived_one([rev [f Float]])"), 1, "{ran:#?}");
    assert_same_as_scratch(&db, file);
}

/// What `ksc jacobian` and `ksc deriv` ask for, without a `gdef`: the
/// simplified `[D f]`, and a derived function with those it needs.
#[test]
fn jacobians_and_requests_without_a_gdef_are_queries() {
    use ksc_db::{derive_request, simplified_jacobian, Request};
    let (mut db, file) = setup();
    let cube = ksc_ir::FunName::typed("cube", ksc_ir::Type::Float);
    let jacobian = |db: &Database| {
        ksc_ir::print::print_def(&simplified_jacobian(db, file, cube.clone(), false).as_ref().unwrap().0 .0)
    };
    let before = jacobian(&db);
    // The simplifier inlines the small `sq` (its value, `x * x`).
    assert!(before.contains("([mul (Tuple Float Float)] x x)") && !before.contains("([sq Float] x)"), "{before}");
    // [D cube] itself was derived for `gdef rev [cube Float]`: only its
    // simplification runs, asking the optimiser's questions about callees.
    let mut asked = vec!["simplified_jacobian([cube Float])", "closure([D [cube Float]])"];
    for g in ["[sq Float]", "[wave Float]", "[D [sq Float]]", "[D [wave Float]]", "[mul (Tuple Float Float)]"] {
        asked.extend([format!("small_def_of({g})").leak() as &str, format!("facts_of({g})").leak()]);
    }
    for g in ["[D [sq Float]]", "[D [wave Float]]"] {
        asked.extend([format!("def_of({g})").leak() as &str, format!("is_defined({g})").leak()]);
    }
    asked.push("facts_of([add (Tuple Float Float)])");
    asked.push("request_facts([D [cube Float]])");
    assert_eq!(executed(&db), strings(&asked));
    // Asked again: nothing runs.
    assert_eq!(jacobian(&db), before);
    assert_eq!(executed(&db), strings(&[]));
    // An edit of an unrelated function: nothing of it runs again.
    edit(&mut db, file, "(add x 1.0)", "(add x 2.0)");
    assert_eq!(jacobian(&db), before);
    assert!(!executed(&db).iter().any(|q| q.starts_with("simplified_jacobian")));
    // An edit of the inlined `sq`: simplified again, to something else.
    edit(&mut db, file, "(mul x x)", "(mul x (mul x x))");
    let after = jacobian(&db);
    assert_ne!(after, before);
    assert!(executed(&db).contains(&"simplified_jacobian([cube Float])".to_string()));

    // [fwd cube] has no gdef: derived and optimised for the request, with
    // [fwd sq] and [fwd wave], and the same as the whole-program derivation.
    let fwd = cube.derived(ksc_ir::Derivation::Fwd);
    let out = derive_request(&db, Request::new(&db, file, fwd.clone()));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let names: Vec<String> = out.defs.iter().map(|d| d.name.to_string()).collect();
    let a = analysis(&db, file);
    let written = a.defs();
    let mut whole = ksc_ad::derive_requested(&written, std::slice::from_ref(&fwd));
    ksc_opt::pipeline::optimise_all(&mut whole.defs, &written, &[], &[]);
    let print = |defs: &[ksc_ir::Def]| defs.iter().map(ksc_ir::print::print_def).collect::<Vec<_>>();
    assert_eq!(print(&out.defs), print(&whole.defs), "{names:?}");
    assert!(names.contains(&"[fwd [cube Float]]".to_string()), "{names:?}");
}

#[test]
fn a_strategy_replacing_a_schedule_reoptimises_the_derivatives() {
    let (mut db, file) = setup();
    let text = file.text(&db).clone();
    db.set_text(file, format!("{text}(strategy push-apply (normalize (rules core)))\n"));
    let ran = compile(&db, file);
    for q in ["user_strategies", "strategy_errors", "optimised([rev [cube Float]])", "optimised([fwd [shifted Float]])"]
    {
        assert!(ran.contains(&q.to_string()), "{q} did not run: {ran:#?}");
    }
    assert_same_as_scratch(&db, file);
    // A strategy with an error is reported where it is.
    edit(&mut db, file, "(rules core)", "(rules core frob)");
    let a = analysis(&db, file);
    assert_eq!(a.diagnostics.len(), 1, "{:?}", a.diagnostics);
    let d = &a.diagnostics[0];
    assert!(d.message.contains("unknown rule or rule set `frob`"), "{}", d.message);
    let at = file.text(&db).find("frob").expect("frob");
    assert_eq!(d.span.start as usize, at);
    assert_same_as_scratch(&db, file);
}
