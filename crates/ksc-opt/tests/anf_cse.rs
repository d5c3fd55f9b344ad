//! A-normal form and common-subexpression elimination on examples, as
//! printed `.ks` (snapshots), each also evaluated before and after.

use crate::common;

use common::{checked, defs_with, run, same_value, short_def, user_def};
use ksc_eval::Value;
use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Def, ExprId};
use ksc_opt::{anf, cse, optimise_def, DefMap, Globals, Options, Schedules};

/// `passes` run on `f`'s body (given the builder, the globals, the root
/// and the parameters), which returns the roots to show: each printed,
/// each checked against the original on `arg`.
fn after_passes(
    text: &str,
    f: &str,
    arg: Value,
    passes: impl FnOnce(&mut Builder, &Globals, ExprId, &[String]) -> Vec<ExprId>,
) -> Vec<String> {
    let a = checked(text);
    let before = user_def(&a, f);
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let globals = Globals::new(&map);
    let params: Vec<String> = before.params.iter().map(|p| p.name.clone()).collect();
    let mut d = before.clone();
    let mut fresh = 0;
    let roots = {
        let mut b = Builder::new(&mut d.body, &mut fresh);
        passes(&mut b, &globals, d.root, &params)
    };
    roots
        .into_iter()
        .map(|root| {
            let (body, root) = term::compact(&d.body, root);
            let x = Def { body, root, ..before.clone() };
            check_same(&a, &before, &x, arg.clone());
            short_def(&x)
        })
        .collect()
}

/// ANF, then CSE, of `f`: both printed, each checked against the original on `arg`.
fn anf_cse(text: &str, f: &str, arg: Value) -> (String, String) {
    let shown = after_passes(text, f, arg, |b, globals, root, params| {
        let r1 = anf(b, root, params);
        let r2 = cse(b, globals, r1, params);
        vec![r1, r2]
    });
    (shown[0].clone(), shown[1].clone())
}

fn check_same(a: &ksc_types::Analysis, before: &Def, after: &Def, arg: Value) {
    let (vb, ob) = run(&defs_with(a, before), &before.name, arg.clone());
    let (va, oa) = run(&defs_with(a, after), &after.name, arg);
    let (vb, va) = (vb.expect("original runs"), va.expect("rewritten runs"));
    assert!(same_value(&vb, &va) && ob == oa, "{vb} {ob:?} became {va} {oa:?}");
}

fn xy(x: f64, y: f64) -> Value {
    Value::tuple(vec![Value::Float(x), Value::Float(y)])
}

#[test]
fn anf_names_every_intermediate_value_and_cse_shares_the_repeated_one() {
    let text = "(def f Float ((x : Float) (y : Float)) (mul (add x y) (sub (add x y) (mul 2.0 x))))";
    let (anf, cse) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(
        anf,
        "(let ((ksc$t1 (add x y))
      (ksc$t2 (add x y))
      (ksc$t3 (mul 2.0 x))
      (ksc$t4 (sub ksc$t2 ksc$t3)))
  (mul ksc$t1 ksc$t4))"
    );
    assert_eq!(
        cse,
        "(let ((ksc$t1 (add x y))
      (ksc$t3 (mul 2.0 x))
      (ksc$t4 (sub ksc$t1 ksc$t3)))
  (mul ksc$t1 ksc$t4))"
    );
}

#[test]
fn branches_and_lambda_bodies_are_normalised_locally() {
    let text = "(def f (Vec Float) ((x : Float) (n : Integer))
                  (build n (lam (i : Integer)
                    (if (gt x 0.0) (mul (to_float i) (add x 1.0)) (add x 1.0)))))";
    let (anf, cse) = anf_cse(text, "f", Value::tuple(vec![Value::Float(2.0), Value::Integer(3)]));
    assert_eq!(
        anf,
        "(build n
  (lam (i : Integer)
    (if (gt x 0.0)
        (let ((ksc$t1 (to_float i)) (ksc$t2 (add x 1.0))) (mul ksc$t1 ksc$t2))
        (add x 1.0))))"
    );
    // Nothing is shared between the branches, nothing leaves the lambda.
    assert_eq!(cse, anf);
}

#[test]
fn cse_uses_a_value_computed_outside_a_lambda_inside_it_but_not_the_reverse() {
    let text = "(def f Float ((x : Float) (n : Integer))
                  (let (a (add x 1.0))
                  (let (v (build n (lam (i : Integer) (mul (add x 1.0) (add x 2.0)))))
                    (add (sum v) (add x 2.0)))))";
    let (_, cse) = anf_cse(text, "f", Value::tuple(vec![Value::Float(2.0), Value::Integer(3)]));
    assert_eq!(
        cse,
        "(let ((a (add x 1.0))
      (v (build n (lam (i : Integer) (let (ksc$t2 (add x 2.0)) (mul a ksc$t2)))))
      (ksc$t3 (sum v))
      (ksc$t4 (add x 2.0)))
  (add ksc$t3 ksc$t4))"
    );
}

#[test]
fn effects_are_not_merged() {
    let text = "(def f Float ((x : Float) (y : Float)) (add ($trace (mul x y)) ($trace (mul x y))))";
    let (_, cse) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(
        cse,
        "(let ((ksc$t1 (mul x y))
      (ksc$t2 ($trace ksc$t1))
      (ksc$t4 ($trace ksc$t1)))
  (add ksc$t2 ksc$t4))"
    );
}

#[test]
fn a_shadowed_variable_is_not_confused_with_the_outer_one() {
    let text = "(def f Float ((x : Float) (y : Float)) (let (a (add x 1.0)) (let (x 5.0) (mul a (add x 1.0)))))";
    let (_, cse) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(cse, "(let ((a (add x 1.0)) (ksc$x2 5.0) (ksc$t1 (add ksc$x2 1.0))) (mul a ksc$t1))");
}

#[test]
fn lets_float_out_of_arguments_and_right_sides() {
    let text = "(def f Float ((x : Float) (y : Float))
                  (add (let (a (mul x x)) (add a 1.0)) (let (b (let (c (mul y y)) (sub c 1.0))) (mul b b))))";
    let (anf, _) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(
        anf,
        "(let ((a (mul x x))
      (ksc$t1 (add a 1.0))
      (c (mul y y))
      (b (sub c 1.0))
      (ksc$t2 (mul b b)))
  (add ksc$t1 ksc$t2))"
    );
}

#[test]
fn a_floated_binder_whose_name_is_used_elsewhere_is_renamed() {
    // The second argument's `a` is the parameter, not the floated binder.
    let text = "(def f Float ((a : Float) (y : Float)) (add (let (a (mul y y)) (add a 1.0)) a))";
    let (anf, _) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(anf, "(let ((ksc$a1 (mul y y)) (ksc$t2 (add ksc$a1 1.0))) (add ksc$t2 a))");
}

#[test]
fn optimise_def_runs_the_whole_pipeline() {
    let text = "(def f Float ((x : Float) (y : Float))
                  (let (unused (mul x 100.0))
                    (mul (add x (mul 2.0 3.0)) (sub (add x (mul 2.0 3.0)) (sum (build 3 (lam (i : Integer) y)))))))";
    let d = optimised(text, "f", xy(1.0, 2.0));
    assert_eq!(
        short_def(&d),
        "(let (ksc$t1 (add x 6.0)) (mul ksc$t1 (sub ksc$t1 (sumbuild 3 (lam (i : Integer) y)))))"
    );
    // The arena holds only the result.
    let mut reachable = 0;
    let mut stack = vec![d.root];
    while let Some(e) = stack.pop() {
        reachable += 1;
        stack.extend(term::children(&d.body.exprs[e]));
    }
    assert_eq!(reachable, d.body.exprs.len());
}

#[test]
fn a_build_read_at_every_element_reaches_a_normal_form() {
    // `let-build-lazy` used to rewrite it to a test `lt 2 2` that folds to
    // false and gives the build back: 100000 rewrites and a warning.
    let text = "(def g Float (x : Float) (sumbuild 3 (lam (j : Integer) (sin (mul x (to_float j))))))
                (def f Float (x : Float)
                  (let (w (build 2 (lam (k : Integer) (g (add x (to_float k))))))
                    (add (index 0 w) (index 1 w))))";
    optimised(text, "f", Value::Float(0.3));
}

/// `f` through `optimise_def`, which must reach a normal form (no
/// warning), checked against the original on `arg`.
fn optimised(text: &str, f: &str, arg: Value) -> Def {
    let a = checked(text);
    let before = user_def(&a, f);
    let mut d = before.clone();
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let report = optimise_def(&mut d, &Schedules::builtin(), &Globals::new(&map), &Options::default());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    check_same(&a, &before, &d, arg);
    d
}

#[test]
fn cse_reads_a_tuple_patterns_components_from_projections_and_back() {
    // `(a b) = p` after `u = get$1$2 p`: a is u; `v = get$2$2 p` after the
    // pattern: v is b.
    let text = "(def f Float (p : Tuple Float Float)
                  (let ((u (get$1$2 p)) ((a b) p) (v (get$2$2 p))) (add (mul u a) (mul v b))))";
    let (_, cse) = anf_cse(text, "f", xy(3.0, 4.0));
    assert_eq!(cse, "(let ((u (get$1$2 p))\n      ((a b) p)\n      (ksc$t1 (mul u u))\n      (ksc$t2 (mul b b)))\n  (add ksc$t1 ksc$t2))");
    // A pattern of an expression: a later projection of that expression
    // (split by A-normal form) reads the pattern's variable.
    let text = "(def f Float (q : Tuple (Tuple Float Float) Float)
                  (let (((a b) (get$1$2 q)) (c (get$2$2 (get$1$2 q)))) (mul b c)))";
    let arg = Value::tuple(vec![xy(3.0, 4.0), Value::Float(5.0)]);
    let (_, cse) = anf_cse(text, "f", arg);
    assert_eq!(cse, "(let (((a b) (get$1$2 q)) (ksc$t1 (tuple a b)) (c (get$2$2 ksc$t1))) (mul b c))");
}

/// ANF and CSE, `fuse_loops`, ANF and CSE of `f` (what forward mode
/// runs): how many pairs were fused and the result printed, checked
/// against the original on `arg`.
fn fused(text: &str, f: &str, arg: Value) -> (usize, String) {
    between_cse(text, f, arg, ksc_opt::fuse_loops)
}

/// ANF and CSE, `pass`, ANF and CSE of `f`: what `pass` returns (how many
/// things it changed) and the result printed, checked against the
/// original on `arg`.
fn between_cse(text: &str, f: &str, arg: Value, pass: fn(&mut Builder, &Globals, ExprId) -> usize) -> (usize, String) {
    let mut n = 0;
    let shown = after_passes(text, f, arg, |b, globals, root, params| {
        let r = anf(b, root, params);
        let r = cse(b, globals, r, params);
        n = pass(b, globals, r);
        let r = anf(b, r, params);
        vec![cse(b, globals, r, params)]
    });
    (n, shown[0].clone())
}

fn vec_arg(xs: &[f64]) -> Value {
    Value::vector(xs.iter().map(|&x| Value::Float(x)).collect())
}

#[test]
fn sumbuilds_over_one_range_are_fused_and_their_bodies_share_values() {
    // (program, argument, fusions, `sumbuild`s and `exp`s left)
    let cases = [
        (
            "(def f (Tuple Float Float) (v : Vec Float)
               (let ((a (sumbuild (size v) (lam (i : Integer) (exp (index i v)))))
                     (b (sumbuild (size v) (lam (j : Integer) (mul (exp (index j v)) 2.0)))))
                 (tuple a b)))",
            vec_arg(&[0.5, 1.5, -2.0]),
            1,
            1,
            1,
        ),
        // The loops in the fused loop are fused in turn.
        (
            "(def f (Tuple Float Float) (v : Vec Float)
               (tuple (sumbuild 3 (lam (k : Integer) (sumbuild 2 (lam (j : Integer) (exp (index (add k j) v))))))
                      (sumbuild 3 (lam (k : Integer) (sumbuild 2 (lam (j : Integer) (sin (exp (index (add k j) v)))))))))",
            vec_arg(&[0.5, 1.5, -2.0, 0.25, 3.0]),
            2,
            2,
            1,
        ),
    ];
    for (text, arg, fusions, loops, exps) in cases {
        let (n, out) = fused(text, "f", arg);
        assert_eq!((n, out.matches("sumbuild").count(), out.matches("exp").count()), (fusions, loops, exps), "{out}");
    }
}

#[test]
fn a_guarded_tangent_loop_is_fused_with_the_loop_before_it() {
    // The first sumbuild fails on an empty range, so the guard never
    // gives 0.0 after it.
    let text = "(def f (Tuple Float Float) (v : Vec Float)
                  (let ((n (size v))
                        (a (sumbuild n (lam (i : Integer) (exp (index i v)))))
                        (b (if (eq n 0) 0.0 (sumbuild n (lam (j : Integer) (cos (index j v)))))))
                    (tuple a b)))";
    let (n, out) = fused(text, "f", vec_arg(&[0.5, 1.5]));
    assert_eq!(n, 1, "{out}");
    assert!(!out.contains("if"), "{out}");
}

/// Two folds over one vector, one step calling `g` and the other `[fwdt
/// g]`, the second's accumulator bound between them (the let moves above
/// the first fold), fused into one fold of pairs; not when that let reads
/// the first fold's value.
#[test]
fn folds_over_one_vector_are_fused_moving_what_the_second_needs_above_the_first() {
    let program = |init: &str| {
        format!(
            "(def g Float (x : Float) (sin x))
             (def [fwdt g] (Tuple Float Float) ((x : Float) (dx : Float)) (tuple (sin x) (mul (cos x) dx)))
             (def f (Tuple Float Float) (v : Vec Float)
               (let ((c (to_float (size v)))
                     (a (fold (lam (acc_x : Tuple Float Float) (let ((acc x) acc_x) (add acc (g (mul x acc))))) 1.0 v))
                     (a0 {init})
                     (p (fold (lam (q : Tuple (Tuple Float Float) Float)
                                (let (((acc da) (get$1$2 q)) (x (get$2$2 q)) (r ([fwdt g] (mul x acc) (mul x da))))
                                  (tuple (add acc (get$1$2 r)) (add da (get$2$2 r)))))
                              a0 v)))
                 (tuple a (get$2$2 p))))"
        )
    };
    let (n, out) = fused(&program("(tuple (mul c 2.0) 0.5)"), "f", vec_arg(&[0.5, 1.5, -2.0]));
    assert_eq!((n, out.matches("(fold").count()), (1, 1), "{out}");
    let (n, out) = fused(&program("(tuple (mul a 2.0) 0.5)"), "f", vec_arg(&[0.5, 1.5, -2.0]));
    assert_eq!((n, out.matches("(fold").count()), (0, 2), "{out}");
    // The let the second fold needs rebinds a name the first one reads:
    // moved above it as written, it would change what the first reads.
    let shadowing = "(def g Float (x : Float) (sin x))
         (def [fwdt g] (Tuple Float Float) ((x : Float) (dx : Float)) (tuple (sin x) (mul (cos x) dx)))
         (def f (Tuple Float Float) ((v : Vec Float) (c : Float))
           (let ((a (fold (lam (acc_x : Tuple Float Float) (let ((acc x) acc_x) (add acc (g (mul x c))))) 1.0 v))
                 (c (mul c 3.0))
                 (p (fold (lam (q : Tuple (Tuple Float Float) Float)
                            (let (((acc da) (get$1$2 q)) (x (get$2$2 q)) (r ([fwdt g] (mul x acc) (mul x da))))
                              (tuple (add acc (get$1$2 r)) (add da (get$2$2 r)))))
                          (tuple c 0.5) v)))
             (tuple a (get$2$2 p))))";
    // (`fused` checks the value against the original's.)
    let arg = Value::tuple(vec![vec_arg(&[0.5, 1.5, -2.0]), Value::Float(0.7)]);
    // CSE renames the rebinding first: the folds are fused.
    let (n, out) = fused(shadowing, "f", arg.clone());
    assert_eq!((n, out.matches("(fold").count()), (1, 1), "{out}");
    // Without CSE, the let cannot move: they are not.
    let mut n = 0;
    let out = after_passes(shadowing, "f", arg, |b, globals, root, params| {
        let r = anf(b, root, params);
        n = ksc_opt::fuse_loops(b, globals, r);
        vec![r]
    });
    assert_eq!((n, out[0].matches("(fold").count()), (0, 2), "{}", out[0]);
}

#[test]
fn loops_that_depend_on_each_other_or_on_an_effect_between_them_are_not_fused() {
    let dependent = "(def f (Tuple Float Float) (v : Vec Float)
                       (let ((a (sumbuild (size v) (lam (i : Integer) (exp (index i v)))))
                             (b (sumbuild (size v) (lam (j : Integer) (mul a (index j v))))))
                         (tuple a b)))";
    let (n, out) = fused(dependent, "f", vec_arg(&[0.5, 1.5]));
    assert_eq!((n, out.matches("sumbuild").count()), (0, 2), "{out}");
    let printing = "(def f (Tuple Float Float) (v : Vec Float)
                      (let ((a (sumbuild (size v) (lam (i : Integer) (exp (index i v)))))
                            (p (print \"between\"))
                            (b (sumbuild (size v) (lam (j : Integer) (sin (index j v))))))
                        (tuple a b)))";
    let (n, out) = fused(printing, "f", vec_arg(&[0.5, 1.5]));
    assert_eq!((n, out.matches("sumbuild").count()), (0, 2), "{out}");
    let sizes = "(def f (Tuple Float Float) ((v : Vec Float) (w : Vec Float))
                   (tuple (sumbuild (size v) (lam (i : Integer) (exp (index i v))))
                          (sumbuild (size w) (lam (j : Integer) (exp (index j w))))))";
    let arg = Value::tuple(vec![vec_arg(&[0.5, 1.5]), vec_arg(&[2.0])]);
    let (n, out) = fused(sizes, "f", arg);
    assert_eq!((n, out.matches("sumbuild").count()), (0, 2), "{out}");
    // Builds only where one body's `[fwdt g]` gives the other's `g`.
    let builds = "(def f (Tuple (Vec Float) (Vec Float)) (v : Vec Float)
                    (tuple (build (size v) (lam (i : Integer) (exp (index i v))))
                           (build (size v) (lam (j : Integer) (sin (index j v))))))";
    let (n, out) = fused(builds, "f", vec_arg(&[0.5, 1.5]));
    assert_eq!((n, out.matches("build").count()), (0, 2), "{out}");
}

/// ANF and CSE, `merge_ifs`, ANF and CSE of `f` (what reverse mode runs):
/// how many pairs of `if`s were merged and the result printed, checked
/// against the original on `arg`.
fn merged_ifs(text: &str, f: &str, arg: Value) -> (usize, String) {
    between_cse(text, f, arg, ksc_opt::merge_ifs)
}

#[test]
fn ifs_on_one_test_are_merged_and_their_branches_share_values() {
    // Reverse mode's shape: the primal's `if`, then the reverse pass's on
    // the same test, recomputing the branch's values (here the sums).
    let text = "(def f Float ((v : Vec Float) (d : Float))
                  (let ((r (if (lt (size v) 3) (sum v) (sumbuild (size v) (lam (i : Integer) (exp (index i v))))))
                        (k (mul d 2.0))
                        (g (if (lt (size v) 3) (mul k (sum v))
                               (mul (div k r) (sumbuild (size v) (lam (j : Integer) (exp (index j v))))))))
                    (add r g)))";
    for xs in [&[0.5, 1.5][..], &[0.5, 1.5, -2.0, 0.25]] {
        let arg = Value::tuple(vec![vec_arg(xs), Value::Float(0.75)]);
        let (n, out) = merged_ifs(text, "f", arg);
        assert_eq!(n, 1, "{out}");
        assert_eq!(
            (out.matches("(if").count(), out.matches("(sumbuild").count(), out.matches("(sum ").count()),
            (1, 1, 1),
            "{out}"
        );
    }
}

#[test]
fn ifs_on_other_tests_or_across_an_effect_or_a_rebinding_are_not_merged() {
    let arg = || Value::tuple(vec![vec_arg(&[0.5, 1.5]), Value::Float(0.75)]);
    let other_test = "(def f Float ((v : Vec Float) (d : Float))
                        (let ((r (if (lt (size v) 3) (sum v) d))
                              (g (if (lt (size v) 4) (mul 2.0 (sum v)) d)))
                          (add r g)))";
    let printing = "(def f Float ((v : Vec Float) (d : Float))
                      (let ((r (if (lt d 3.0) (sum v) d))
                            (p (print \"between\"))
                            (g (if (lt d 3.0) (mul 2.0 (sum v)) d)))
                        (add r g)))";
    // The second test's `d` is another variable than the first's.
    let rebinding = "(def f Float ((v : Vec Float) (d : Float))
                       (let ((r (if (lt d 1.0) (sum v) d))
                             (d (mul d 2.0))
                             (g (if (lt d 1.0) (mul 2.0 (sum v)) d)))
                         (add r g)))";
    for text in [other_test, printing, rebinding] {
        let (n, out) = merged_ifs(text, "f", arg());
        assert_eq!((n, out.matches("(if").count()), (0, 2), "{out}");
    }
}
