//! The strategy language (`ksc_opt::script`): ksc's schedules read from
//! `schedules.ks` are the strategies they were written as in Rust; named
//! strategies that recurse compute what the built-in traversals do; a
//! program's strategy replaces ksc's of its name; recursion that does not
//! end stops with a warning.

use ksc_ir::builder::Builder;
use ksc_ir::{Body, StrategyDecl};
use ksc_opt::core_rules::instances::{Rng, G, HELPERS};
use ksc_opt::schedule::{core_cleanup, push_apply, simplify_lm, user_rules_pass};
use ksc_opt::strategy::{bottom_up, rules, top_down, try_, Strategy};
use ksc_opt::{DefMap, Globals, Options, Rewriter, RuleSet, Schedules, WarningKind, CORE_RULES};

use crate::common::checked;

fn program(text: &str) -> (Schedules, Vec<ksc_opt::ScriptError>) {
    let ds = ksc_opt::script::read_strategies(text).expect("strategies");
    let refs: Vec<&StrategyDecl> = ds.iter().collect();
    Schedules::program(&refs, &RuleSet::new("user"))
}

#[test]
fn ksc_schedules_are_read_from_schedules_ks() {
    let builtin = Schedules::builtin();
    let def = |name: &str| builtin.definition(name).expect("a schedule of ksc's").to_string();
    assert_eq!(def("simplify-lm"), "normalize(rules(map-laws+core))");
    assert_eq!(def("push-apply"), "normalize(rules(application-laws+map-laws+core))");
    assert_eq!(def("core-cleanup"), "normalize(rules(core))");
    assert_eq!(def("user-rules"), "bottomUp(try(rules(user)))");
    assert_eq!(def("inline-marked"), "normalize(rules(inline-marked+let-tuple-split))");
    // What the optimiser runs: calls of them, by name.
    let names = [simplify_lm(), push_apply(), core_cleanup(), user_rules_pass(&RuleSet::new("user"))];
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    assert_eq!(names, ["simplify-lm", "push-apply", "core-cleanup", "user-rules"]);
    // The rule sets hold every rule of their parts, in order.
    let Some(Strategy::Normalize(inner, None)) = builtin.definition("push-apply") else { panic!("normalize") };
    let Strategy::Rules(set) = *inner else { panic!("rules") };
    let laws = ksc_linmap::LAWS.len();
    assert!(set.len() > CORE_RULES.len() && set.len() <= CORE_RULES.len() + laws);
    assert_eq!(set.rules()[set.len() - CORE_RULES.len()].name(), CORE_RULES[0].name);
}

/// Applies each strategy to the same random terms (the Core rules'
/// instances): the results must be the same terms, up to the names of the
/// variables the rules bind.
fn agree(a: &Strategy, b: &Strategy) {
    let a_defs = checked(HELPERS);
    let helpers: Vec<&ksc_ir::Def> = a_defs.defs();
    let map = DefMap::new(helpers.iter().copied());
    let globals = Globals::new(&map);
    let mut compared = 0;
    for (k, r) in CORE_RULES.iter().enumerate() {
        for seed in 0..4u64 {
            let mut rng = Rng::new(seed * 7919 + k as u64);
            let mut body = Body::new();
            let mut fresh = 0;
            let mut bl = Builder::new(&mut body, &mut fresh);
            let root = {
                let mut g = G::new(&mut rng);
                (r.instance)(&mut g, &mut bl)
            };
            let mut results = Vec::new();
            for s in [a, b] {
                let mut rw = Rewriter::with_options(&globals, Options::default());
                let out = rw.apply(s, &mut bl, root);
                assert!(rw.warnings().is_empty(), "{:?}", rw.warnings());
                results.push(out);
            }
            let same = match (results[0], results[1]) {
                (Some(x), Some(y)) => ksc_ir::term::alpha_eq(bl.body, x, bl.body, y),
                (x, y) => x.is_none() && y.is_none(),
            };
            let show = |o: Option<ksc_ir::ExprId>| o.map(|o| ksc_ir::print::print_expr(bl.body, o));
            assert!(
                same,
                "{a} and {b} differ on an instance of {}: {:?} and {:?}",
                r.name,
                show(results[0]),
                show(results[1])
            );
            compared += 1;
        }
    }
    assert!(compared > 100);
}

#[test]
fn recursive_strategies_compute_what_the_built_in_traversals_do() {
    let (lib, errors) = program(
        "(strategy (myTopDown s) (lchoice s (one (myTopDown s))))
         (strategy (myBottomUp s) (seq (all (myBottomUp s)) s))
         (strategy td (myTopDown (rules core)))
         (strategy bu (myBottomUp (try (rules core))))",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let core = || rules(RuleSet::core());
    agree(&lib.get("td").expect("td"), &top_down(core()));
    agree(&lib.get("bu").expect("bu"), &bottom_up(try_(core())));
}

#[test]
fn a_program_strategy_replaces_ksc_schedule_of_its_name() {
    let (lib, errors) = program("(strategy push-apply (normalize (rules core)))");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(lib.definition("push-apply").expect("push-apply").to_string(), "normalize(rules(core))");
    assert_eq!(lib.definition("simplify-lm").expect("simplify-lm").to_string(), "normalize(rules(map-laws+core))");
    // `except` leaves rules out (an ablation), and names only rules of its set.
    let (lib, errors) = program("(strategy ablated (rules (except core ring-cancel sumbuild-one-hot)))");
    assert!(errors.is_empty(), "{errors:?}");
    let Some(Strategy::Rules(set)) = lib.definition("ablated") else { panic!("rules") };
    assert_eq!(set.len(), CORE_RULES.len() - 2);
    assert!(set.get("ring-cancel").is_none() && set.get("let-once").is_some());
    let (_, errors) = program("(strategy bad (rules (except core map-laws)))");
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("`map-laws` is not among the rules of `core`"), "{errors:?}");
    // Replacing one takes the same parameters (none).
    let (_, errors) = program("(strategy (push-apply s) s)");
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("replaces ksc's schedule"), "{errors:?}");
}

#[test]
fn errors_name_the_node_in_pre_order() {
    let (lib, errors) = program(
        "(strategy ok id)
         (strategy bad (seq (rules core nosuch) (try) (normalize id 0)))
         (strategy ok (rules core))
         (strategy seq id)",
    );
    let got: Vec<(usize, Option<usize>, &str)> =
        errors.iter().map(|e| (e.decl, e.node, e.message.split(':').next().unwrap_or(""))).collect();
    // Pre-order of bad's body: 0 (seq ..), 1 seq, 2 (rules ..), 3 rules,
    // 4 core, 5 nosuch, 6 (try), 7 try, 8 (normalize ..), 9 normalize,
    // 10 id, 11 0.
    assert_eq!(
        got,
        vec![
            (1, Some(5), "unknown rule or rule set `nosuch`"),
            (1, Some(6), "`try` takes one strategy, found 0"),
            (1, Some(11), "expected the fuel, a positive whole number of rewrites, found `0`"),
            (2, None, "the strategy `ok` is already declared (declaration 1)"),
            (3, None, "`seq` is a combinator of the strategy language and cannot be redefined"),
        ]
    );
    assert!(lib.get("ok").is_some() && lib.get("bad").is_none());
}

#[test]
fn recursion_that_does_not_end_stops_with_a_warning() {
    // Deep recursion uses the stack of the compiler's threads (1 GiB).
    let run = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let (lib, errors) = program(
                "(strategy spin (seq id spin))
                 (strategy expo (seq (try expo) (try expo)))",
            );
            assert!(errors.is_empty(), "{errors:?}");
            let no_defs: Vec<ksc_ir::Def> = Vec::new();
            let map = DefMap::new(no_defs.iter());
            let globals = Globals::new(&map);
            let mut out = Vec::new();
            for name in ["spin", "expo"] {
                let mut body = Body::new();
                let mut fresh = 0;
                let mut b = Builder::new(&mut body, &mut fresh);
                let root = b.float(1.0);
                let options = Options { work: 100_000, ..Options::default() };
                let mut rw = Rewriter::with_options(&globals, options);
                let r = rw.apply(&lib.schedule(name), &mut b, root);
                let kinds: Vec<WarningKind> = rw.warnings().iter().map(|w| w.kind).collect();
                out.push((name, r.is_some(), kinds));
            }
            out
        })
        .expect("thread");
    let out = run.join().expect("no panic");
    assert_eq!(out, vec![("spin", false, vec![WarningKind::CallLimit]), ("expo", true, vec![WarningKind::CallLimit])]);
}

#[test]
fn anf_and_cse_are_strategies() {
    // `(mul x x)` twice is computed once after `(seq anf cse)`; the
    // function's value is unchanged.
    let a = checked(
        "(def f Float (x : Float) (let (y (mul x x)) (add (mul x x) (mul y (mul x x)))))\n\
         (strategy share (seq anf cse))",
    );
    let strategies: Vec<&StrategyDecl> =
        a.source.decls.iter().filter_map(|d| if let ksc_ir::Decl::Strategy(s) = d { Some(s) } else { None }).collect();
    let (schedules, errors) = Schedules::program(&strategies, &RuleSet::new("user"));
    assert!(errors.is_empty(), "{errors:?}");
    let mut f = crate::common::user_def(&a, "f");
    let before = f.clone();
    let map = DefMap::new(a.defs());
    let globals = Globals::new(&map);
    let run = ksc_opt::pipeline::apply_schedule(&mut f, &globals, &schedules, "share").expect("share");
    assert!(run.succeeded);
    let text = ksc_ir::print::print_def(&f);
    assert_eq!(text.matches("[mul (Tuple Float Float)] x x").count(), 1, "{text}");
    let (vb, _) = crate::common::run(&[&before], &before.name, ksc_eval::Value::Float(1.5));
    let (va, _) = crate::common::run(&[&f], &f.name, ksc_eval::Value::Float(1.5));
    assert_eq!(vb.expect("runs"), va.expect("runs"));
}

#[test]
fn in_def_runs_its_strategy_on_the_definitions_it_names_only() {
    // `(in-def f S)` rewrites f's body; g's is left as it is (and the run
    // succeeds there). A derived function is named as ksc prints it.
    let a = checked(
        "(def f Float (x : Float) (let (y (mul x x)) y))\n\
         (def g Float (x : Float) (let (y (mul x x)) y))\n\
         (strategy tidy (in-def f (normalize (rules core))))\n\
         (strategy typed (in-def \"[g Float]\" (normalize (rules core))))",
    );
    let strategies: Vec<&StrategyDecl> =
        a.source.decls.iter().filter_map(|d| if let ksc_ir::Decl::Strategy(s) = d { Some(s) } else { None }).collect();
    let (schedules, errors) = Schedules::program(&strategies, &RuleSet::new("user"));
    assert!(errors.is_empty(), "{errors:?}");
    let map = DefMap::new(a.defs());
    let globals = Globals::new(&map);
    let rewritten = |name: &str, strategy: &str| {
        let mut d = crate::common::user_def(&a, name);
        let run = ksc_opt::pipeline::apply_schedule(&mut d, &globals, &schedules, strategy).expect("runs");
        assert!(run.succeeded);
        ksc_ir::print::print_def(&d)
    };
    assert!(!rewritten("f", "tidy").contains("let"), "f is rewritten");
    assert!(rewritten("g", "tidy").contains("let"), "g is not");
    assert!(!rewritten("g", "typed").contains("let"), "g by its typed name");
    let rev_f = ksc_opt::engine::def_names(&ksc_ir::FunName::plain("f").derived(ksc_ir::Derivation::Rev));
    assert!(rev_f.iter().any(|n| n == "[rev f]"), "{rev_f:?}");
}
