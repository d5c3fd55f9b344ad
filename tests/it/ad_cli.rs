//! `ksc jacobian` and `ksc deriv` on the AD examples.

use crate::common::ksc;

/// The standard output of a `ksc` run that must succeed.
fn stdout_of(args: &[&str]) -> String {
    let out = ksc(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ksc {}: {}\n{stdout}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn jacobian_at_a_point_is_the_dense_matrix() {
    let stdout =
        stdout_of(&["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", "(tuple 2.0 (Vec_init 0.0 1.0 3.0))"]);
    // d(a sin v_i)/da = sin v_i, d/dv_i = a cos v_i; rows and columns
    // labelled by the result's and the parameters' components.
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        rows,
        [
            "                  a  v[0]    v[1]      v[2]",
            "result[0]         0     2       0         0",
            "result[1]  0.841471     0  1.0806         0",
            "result[2]   0.14112     0       0  -1.97998",
        ],
        "{stdout}"
    );
}

#[test]
fn jacobian_at_a_point_in_csv_and_json() {
    let at = ["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", "(tuple 2.0 (Vec_init 0.0 1.0 3.0))"];
    let csv = stdout_of(&[&at[..], &["--format", "csv"]].concat());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], ",\"a\",\"v[0]\",\"v[1]\",\"v[2]\"", "{csv}");
    assert!(lines[2].starts_with("\"result[1]\",0.8414709848078965,0.0,1.0806046117362795,"), "{csv}");
    assert_eq!(lines.len(), 4, "{csv}");
    let json = stdout_of(&[&at[..], &["--format", "json"]].concat());
    assert!(json.starts_with('{') && json.trim_end().ends_with('}'), "only the JSON: {json}");
    assert!(json.contains("\"rows\": [\"result[0]\", \"result[1]\", \"result[2]\"]"), "{json}");
}

#[test]
fn a_jacobian_too_wide_to_print_is_summarised() {
    // ba_reproj: 2 x 17 (the camera's 11 parameters, the point, the weight,
    // the feature).
    let stdout = stdout_of(&[
        "jacobian",
        "ksc-examples/adbench/ba.ks",
        "ba_reproj",
        "--at",
        "(tuple (Vec_init 0.1 0.2 0.3 1.0 2.0 3.0 4.0 5.0 6.0 0.01 0.02) (Vec_init 1.0 2.0 10.0) 0.9 (Vec_init 3.0 4.0))",
    ]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].ends_with(": 2 x 17") && lines[1].starts_with("; too large to print: 30 nonzeros of 34"),
        "{stdout}"
    );
    assert_eq!(lines[3], "result.1 / cam[1] = 3.71799", "{stdout}");
}

#[test]
fn jacobian_sparsity_pattern() {
    let stdout = stdout_of(&[
        "jacobian",
        "ksc-examples/ad/vectors.ks",
        "scaled",
        "--at",
        "(tuple 2.0 (Vec_init 0.0 1.0 3.0))",
        "--sparsity",
    ]);
    // sin 0 = 0: the first row depends only on its element.
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(rows, [".#..", "#.#.", "#..#"], "{stdout}");
}

#[test]
fn jacobian_prints_linear_map_combinators() {
    let stdout = stdout_of(&["jacobian", "ksc-examples/ad/scalar.ks", "poly"]);
    assert!(stdout.starts_with("(def [D [poly (Tuple Float Float)]] (LM (Tuple Float Float) Float)"), "{stdout}");
    assert!(stdout.contains("lmCompose") && stdout.contains("lmScale"), "{stdout}");
}

/// Seed 003's demo: the Jacobian of `f2 x = (x * x) * 3` simplifies to one
/// `lmScale` by its derivative.
#[test]
fn jacobian_of_f2_simplifies_to_one_scale() {
    let stdout = stdout_of(&["jacobian", "ksc-examples/ad/scalar.ks", "f2"]);
    let body = stdout.lines().skip(1).collect::<Vec<_>>().join(" ");
    assert_eq!(body.trim(), "(lmScale x ([mul (Tuple Float Float)] 3.0 ([add (Tuple Float Float)] x x))))", "{stdout}");
    let raw = ksc(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--raw"]);
    assert!(String::from_utf8_lossy(&raw.stdout).contains("lmHCat"), "--raw is unsimplified");
    let trace = ksc(&["jacobian", "ksc-examples/ad/scalar.ks", "f2", "--trace"]);
    let rules = String::from_utf8_lossy(&trace.stderr);
    assert!(rules.contains("compose-hcat-vcat") && rules.contains("compose-scales"), "{rules}");
    // Each rule with the strategy it fired in, each normalize with its fuel.
    assert!(rules.contains("law compose-scales (in push-apply)"), "{rules}");
    assert!(rules.contains(";   its normalize of push-apply: 14 rewrites of its fuel of 100000"), "{rules}");
}

#[test]
fn deriv_prints_the_reverse_derivative_and_its_callees() {
    let stdout = stdout_of(&["deriv", "ksc-examples/ad/calls.ks", "both", "--mode", "rev"]);
    assert!(stdout.contains("(def [rev [both (Tuple Float Float)]]"), "{stdout}");
    // [rev cube] and [rev sq] are inlined into it with their primal calls
    // (`chain.rs`): called by nothing then, they are not kept.
    assert!(!stdout.contains("[rev [cube Float]]") && !stdout.contains("[rev [sq Float]]"), "{stdout}");
    assert!(!stdout.contains("(lm"), "no linear map survives in a derived function:\n{stdout}");
}

/// Reverse mode of the doubling family (`f_k x = f_(k-1) (f_(k-1) x)`,
/// k = 11) is simplified to the end: `let-once` substitutes a binding only
/// into a use at most 64 nodes below it, since the substitution copies the
/// path down to the use (its inlined reverse passes nest 7,500 deep, and
/// the simplifier stopped at its work bound with a warning).
#[test]
fn deep_reverse_passes_are_simplified_without_reaching_the_work_bound() {
    let dir = crate::common::work_dir("doubling_deriv");
    let mut text = "(def f0 Float (x : Float) (mul 1.1 (sin x)))\n".to_string();
    for j in 1..11 {
        text += &format!("(def f{j} Float (x : Float) (f{i} (f{i} x)))\n", i = j - 1);
    }
    text += "(def f Float (x : Float) (f10 (f10 x)))\n";
    let path = dir.join("doubling.ks");
    std::fs::write(&path, text).unwrap();
    let out = ksc(&["deriv", path.to_str().unwrap(), "f", "--mode", "rev"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{}: {stderr}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("(def [rev [f Float]]"));
}

#[test]
fn unknown_function_is_reported() {
    let out = ksc(&["deriv", "ksc-examples/ad/calls.ks", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no function `nosuch`"));
}

#[test]
fn shape_derivative_uses_the_shape_rules_and_user_shape_functions() {
    // [shape stats] for stats v = (sum v, cumsum v): the sum has a trivial
    // shape, and the user's [shape cumsum] gives the size, so no value is
    // computed.
    let stdout = stdout_of(&["deriv", "ksc-examples/gdef_shape.ks", "stats", "--mode", "shape"]);
    let body = stdout.lines().skip(1).collect::<Vec<_>>().join(" ");
    assert_eq!(body.trim(), "(tuple (tuple) (size ksc$x)))", "{stdout}");
}

#[test]
fn deriv_prints_the_sparse_jacobian_and_its_blocks() {
    let stdout = stdout_of(&["deriv", "ksc-examples/gdef_jacsparse.ks", "laplace", "--mode", "jacsparse"]);
    let defs: Vec<&str> = stdout.split("\n\n").collect();
    assert!(
        defs[0].starts_with("(def [jacsparse [laplace (Vec Float)]] (Tuple (Tuple Integer Integer) (Vec Integer) (Vec Integer) (Vec Float))"),
        "{stdout}"
    );
    // One block function for the stencil's elements, of the three values it
    // reads, whose Jacobian is taken per element.
    assert!(
        defs[0].contains("[jac1 [ksc$jacsparse$laplace$1 (Tuple (Tuple Float Float Float) Integer)]]"),
        "{}",
        defs[0]
    );
    // Its Jacobian inlines the block itself, which nothing else calls.
    assert!(
        stdout.contains(
            "(def [jac1 [ksc$jacsparse$laplace$1 (Tuple (Tuple Float Float Float) Integer)]] (Tensor 2 Float)"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("(def [ksc$jacsparse$laplace$1 "), "{stdout}");
    // The stencil reads i, i + 2, i + 1: its columns are sorted at run time.
    assert!(defs[0].contains("ksc$sortedBlock"), "{}", defs[0]);
}

#[test]
fn reverse_mode_computes_a_primal_value_of_two_loops_once() {
    // GMM's primal loop over clusters computes qtimesx, and so would the
    // loop of its cotangents: the first stores it for the second.
    let stdout = stdout_of(&["deriv", "ksc-examples/adbench/gmm.ks", "gmm_objective", "--mode", "rev"]);
    let rev = stdout.split("\n\n").next().unwrap();
    assert_eq!(rev.matches("([qtimesx ").count(), 1, "{rev}");
    assert!(rev.contains("(unzip"), "{rev}");
}

#[test]
fn reverse_mode_of_a_fold_reads_its_value_from_the_stored_accumulators() {
    // LSTM's folds over time and over layers: reverse mode stores their
    // accumulators with `$scan`; the primal fold is not run a second time,
    // and the zero cotangents of the sequence and the parameters are not
    // added in every step. The step's `lstm_predict` and its reverse pass
    // are inlined together (`chain.rs`), so `[rev lstm_objective]` has the
    // scan over time and the one over layers, whose last accumulator is the
    // step's prediction.
    let stdout = stdout_of(&["deriv", "ksc-examples/adbench/lstm.ks", "lstm_objective", "--mode", "rev"]);
    // `[rev lstm_predict]` and `[rev lstm_model]` are inlined into it, so
    // nothing calls them and they are not kept.
    let defs: Vec<&str> = stdout.split("\n\n").filter(|d| d.starts_with("(def [rev [lstm_")).collect();
    assert_eq!(defs.len(), 1, "{stdout}");
    assert_eq!(defs[0].matches("($scan").count() - defs[0].matches("($scanSum").count(), 2, "{}", defs[0]);
    assert!(!defs[0].contains("(fold"), "{}", defs[0]);
    assert!(!defs[0].contains("[rev [lstm_predict") && !defs[0].contains("[rev [lstm_model"), "{}", defs[0]);
    // The step's only additions: two one-hot rows of the sequence's
    // cotangent, and the two parts of the prediction's.
    let step = defs[0].split("($scanSum").nth(1).unwrap();
    assert_eq!(step.matches("(ts_add").count(), 2, "{step}");
}

#[test]
fn deriv_prints_the_whole_jacobian() {
    let stdout = stdout_of(&["deriv", "ksc-examples/gdef_jac.ks", "scale_sq", "--mode", "jac"]);
    assert!(stdout.contains("(def [jac [scale_sq (Tuple Float (Vec Float))]] (Tensor 2 Float)"), "{stdout}");
    // Both ways, chosen at run time (the vector's size is not in its type),
    // with the derivatives inlined into the loops: by columns, each entry
    // computed where the matrix stores it (its direction a one-hot of the
    // tuple's components: `tangent-basis-tuple`, then `let-columns`); by
    // rows, one row at a time.
    // The first definition printed is [jac f]; the callees' follow.
    let jac = stdout.split("\n\n").next().unwrap();
    let by_columns = jac.contains("(build (tuple ksc$shape ksc$n)") && jac.contains("(ksc$column (get$2$2");
    assert!(by_columns && jac.contains("(lam (ksc$row : Integer)"), "{jac}");
    assert!(!jac.contains("$tangentBasis") && !jac.contains("$concatN (tuple ksc$n"), "{jac}");
    assert!(!jac.contains("[fwd ") && !jac.contains("[rev "), "{jac}");
}

#[test]
fn deriv_of_a_derived_function_by_its_short_name() {
    // nested.ks requests [rev sinprod] and [fwd [rev sinprod]]: forward over
    // reverse of a fold, printed by naming the derived function.
    let stdout = stdout_of(&["deriv", "ksc-examples/ad/nested.ks", "[rev sinprod]", "--mode", "fwd"]);
    assert!(stdout.starts_with("(def [fwd [rev [sinprod (Vec Float)]]]"), "{stdout}");
    let full = stdout_of(&["deriv", "ksc-examples/ad/nested.ks", "[rev [sinprod (Vec Float)]]", "--mode", "fwd"]);
    assert_eq!(full, stdout);
    // A derivative no gdef requests is not found, and the message says how
    // to name one.
    let none = ksc(&["deriv", "ksc-examples/ad/nested.ks", "[fwd sinprod]", "--mode", "rev"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("`gdef`"), "{}", String::from_utf8_lossy(&none.stderr));
}

#[test]
fn at_errors_are_shown_in_the_at_text() {
    // A syntax error and a type error of `--at` point into its own text,
    // not into an internal wrapper definition.
    for (at, expect) in [("(tuple 2.0 (Vec_init 0.0 1.0 3.0)", "--at:1:1"), ("(tuple 2.0 3.0)", "--at:1:")] {
        let out = ksc(&["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", at]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expect), "{at}: {stderr}");
        assert!(!stderr.contains("ksc$at") && !stderr.contains("<--at>"), "{at}: {stderr}");
        assert!(stderr.contains("is not a value of type"), "{at}: {stderr}");
    }
    // Nothing in `--at` can end the definition it is checked in.
    let out = ksc(&["jacobian", "ksc-examples/ad/vectors.ks", "scaled", "--at", "1.0) (def g Float () 2.0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--at:1:"), "{stderr}");
}

/// `ts_add` of values with Integer parts, whose tangents are not of their
/// own type, is differentiated (its Jacobian built an ill-typed `lmHCat`
/// and panicked), in a tuple and in a vector of tuples: the Jacobians at a
/// point (in the interpreter) are the analytic ones, and the shipped
/// example `prim_ts_ops.ks` has one.
#[test]
fn ts_add_with_integer_parts_is_differentiated() {
    let dir = crate::common::work_dir("ts_add");
    let path = dir.join("ts_add.ks");
    std::fs::write(
        &path,
        "(def f Float (x : Float) (get$1$2 (ts_add (tuple x 7) (tuple (mul x x) (tuple)))))
(gdef rev [f Float])
(def g Float (v : Vec Float)
  (let (p (ts_add (build (size v) (lam (i : Integer) (tuple (index i v) i)))
                  (build (size v) (lam (i : Integer) (tuple (sin (index i v)) (tuple))))))
    (sumbuild (size p) (lam (i : Integer) (mul (get$1$2 (index i p)) (get$1$2 (index i p)))))))
(gdef rev [g (Vec Float)])
",
    )
    .unwrap();
    let file = path.to_str().unwrap();
    // d(x + x^2)/dx = 1 + 2x at 0.5.
    let stdout = stdout_of(&["jacobian", file, "f", "--at", "0.5"]);
    assert_eq!(stdout.lines().nth(2), Some("result  2"), "{stdout}");
    // d(sum (v_i + sin v_i)^2)/dv_i = 2 (v_i + sin v_i)(1 + cos v_i).
    let stdout = stdout_of(&["jacobian", file, "g", "--at", "(Vec_init 0.5 1.0)", "--format", "csv"]);
    let row: Vec<f64> = stdout.lines().nth(1).unwrap().split(',').skip(1).map(|x| x.parse().unwrap()).collect();
    let want: Vec<f64> = [0.5f64, 1.0].iter().map(|v| 2.0 * (v + v.sin()) * (1.0 + v.cos())).collect();
    assert!(row.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-4), "{stdout}");
    let out = ksc(&["check", file]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ksc(&["jacobian", "ksc-examples/prim_ts_ops.ks", "main"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The rows of `ksc deriv --cost`'s tables, as `(function, numbers)`: the
/// `;` lines after each heading `; function ...` up to the blank `;`.
fn cost_rows(stdout: &str) -> Vec<(String, Vec<f64>)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("; ") else {
            in_table = false;
            continue;
        };
        if rest.starts_with("function ") {
            in_table = true;
        } else if in_table {
            // Names such as `[rev sqnorm]` hold a space: the numbers are the
            // fields after the name's closing bracket (or its first word).
            let (name, numbers) = match rest.strip_prefix('[') {
                Some(_) => {
                    let end = rest.rfind(']').unwrap() + 1;
                    (&rest[..end], &rest[end..])
                }
                None => rest.split_once(' ').unwrap(),
            };
            rows.push((name.to_string(), numbers.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN)).collect()));
        }
    }
    rows
}

/// The operation counts of f and of `[MODE f]` at the vector 0, 1, .., n-1.
fn counts(func: &str, mode: &str, n: usize) -> (u64, u64, String) {
    let at = format!("(build {n} (lam (i : Integer) (to_float i)))");
    let stdout = stdout_of(&["deriv", "ksc-examples/ad/vectors.ks", func, "--mode", mode, "--cost", "--at", &at]);
    let rows = cost_rows(&stdout);
    let count = |name: &str| {
        let (_, nums) = rows.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no row {name}:\n{stdout}"));
        nums[0] as u64
    };
    (count(func), count(&format!("[{mode} {func}]")), stdout)
}

/// `ksc deriv --cost --at`: after the derived functions, `;` comments
/// (the output stays `.ks`): the operation counts of f and of its
/// derivative at the point with their ratio, then each printed derived
/// function's loops, allocations and lines of C. The counts are
/// deterministic: [rev sqnorm] does more than sqnorm, and both grow by
/// about 4 when the vector does (linear work plus a constant).
#[test]
fn deriv_cost_counts_operations_and_native_code() {
    let (f, rev, stdout) = counts("sqnorm", "rev", 32);
    let text: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    let first_comment = text.iter().position(|l| l.starts_with(';')).unwrap();
    assert!(text[0].starts_with("(def [rev [sqnorm (Vec Float)]]"), "{stdout}");
    assert!(text[first_comment..].iter().all(|l| l.starts_with(';')), "the table is comments:\n{stdout}");
    assert!(stdout.contains("cotangent: 1.0 for every Float of the result"), "{stdout}");
    assert!(rev > f && f > 32, "{stdout}");
    let rows = cost_rows(&stdout);
    // sqnorm, [rev sqnorm] (count, ratio, span); [rev sqnorm] (loops,
    // allocations, lines of C): its loop IR is one loop filling one new
    // vector. sqnorm's sum is one chain: most of its work is on its span;
    // [rev sqnorm]'s build of 2 x[i] dr is 32 independent iterations.
    assert_eq!(rows.len(), 3, "{stdout}");
    assert_eq!(rows[0].1[..2], [f as f64, 1.0], "{stdout}");
    assert!(rows[0].1[2] > 32.0 && rows[0].1[2] <= f as f64, "{stdout}");
    assert_eq!(rows[1].1[0], rev as f64);
    assert!((rows[1].1[1] - rev as f64 / f as f64).abs() < 0.01, "{stdout}");
    assert!(rows[1].1[2] < 32.0, "{stdout}");
    assert_eq!(rows[2].0, "[rev sqnorm]");
    assert_eq!(rows[2].1[..2], [1.0, 1.0], "{stdout}");
    assert!(rows[2].1[2] > 5.0, "{stdout}");
    for mode in ["fwd", "rev", "jac"] {
        let (f1, d1, _) = counts("sqnorm", mode, 32);
        let (f4, d4, out) = counts("sqnorm", mode, 128);
        for (a, b) in [(f1, f4), (d1, d4)] {
            let scale = b as f64 / a as f64;
            assert!((3.6..=4.05).contains(&scale), "{mode}: {a} at 32, {b} at 128:\n{out}");
        }
    }
    // [jac sqnorm] uses [fwd sqnorm] and [rev sqnorm]: a row for each
    // function printed.
    let (_, _, stdout) = counts("sqnorm", "jac", 4);
    let names: Vec<String> = cost_rows(&stdout).into_iter().skip(2).map(|(n, _)| n).collect();
    let printed: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("(def "))
        .map(|l| {
            let full = &l[..l.find("]]").unwrap() + 2];
            full.replace("[sqnorm (Vec Float)]", "sqnorm")
        })
        .collect();
    assert_eq!(names, printed, "{stdout}");
}

/// `--cost` needs a point, and `--at` is for `--cost`: usage errors; a
/// derivative `--cost` cannot run at the point is refused; an `--at` of
/// the wrong type is shown in `--at`.
#[test]
fn deriv_cost_usage() {
    let file = "ksc-examples/ad/vectors.ks";
    for args in [
        &["deriv", file, "sqnorm", "--cost"][..],
        &["deriv", file, "sqnorm", "--at", "(Vec_init 1.0)"],
        &["deriv", file, "sqnorm", "--mode", "sufrevpass", "--cost", "--at", "(Vec_init 1.0)"],
    ] {
        let out = ksc(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = ksc(&["deriv", file, "sqnorm", "--cost", "--at", "(Vec_init 1 2)"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--at:1:1") && stderr.contains("but `sqnorm` takes `(Vec Float)`"), "{stderr}");
}

/// `ksc deriv --cost` counts what the cost tests bound
/// (`crates/ksc-ad/tests/cost.rs`): f, `[fwd f]` at the point with the
/// tangent of ones and `[rev f]` with the cotangent of ones, derived and
/// optimised as those tests do, run by the interpreter.
#[test]
fn deriv_cost_is_the_cost_tests_measure() {
    use ksc_eval::{Interpreter, Value};
    use ksc_ir::{Derivation, FunName};
    let file = "ksc-examples/ad/vectors.ks";
    let text = std::fs::read_to_string(crate::common::root().join(file)).unwrap();
    for (func, ty, at) in [
        ("sqnorm", "(Vec Float)", "(build 20 (lam (i : Integer) (to_float i)))"),
        ("gather", "(Tuple (Vec Float) (Vec Float))", "(tuple (Vec_init 1.0 2.0 3.0) (Vec_init 0.5 -1.0 2.0))"),
        (
            "matvec",
            "(Tuple (Vec (Vec Float)) (Vec Float))",
            "(tuple (build 3 (lam (i : Integer) (Vec_init 1.0 2.0))) (Vec_init 3.0 4.0))",
        ),
    ] {
        // The library's counts, as the cost tests take them.
        let program = format!("{text}\n(def ksc$point {ty} () {at})\n");
        let mut analysis = ksc_types::analyze(&program);
        assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
        let requests: Vec<FunName> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
        let mut derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
        assert!(derived.errors.is_empty(), "{:?}", derived.errors);
        ksc_opt::pipeline::optimise_all(&mut derived.defs, &analysis.defs(), &[], &[]);
        analysis.derived = derived.defs;
        let defs = analysis.defs();
        let mut interp = Interpreter::new(defs.iter().copied());
        let mut measure = |name: &FunName, arg: Value| {
            let before = interp.operations();
            let v = interp.call(name, arg, &mut std::io::sink()).unwrap();
            (v, interp.operations() - before)
        };
        let (x, _) = measure(&FunName::typed("ksc$point", ksc_ir::Type::unit()), Value::unit());
        let f =
            analysis.defs().into_iter().find(|d| d.name.base == func && d.name.derivs.is_empty()).unwrap().name.clone();
        let (y, primal) = measure(&f, x.clone());
        let (_, fwd) =
            measure(&f.derived(Derivation::Fwd), Value::Tuple(vec![x.clone(), ksc_eval::tangent_ones(&x)].into()));
        let (_, rev) = measure(&f.derived(Derivation::Rev), Value::Tuple(vec![x, ksc_eval::tangent_ones(&y)].into()));
        for (mode, want) in [("fwd", fwd), ("rev", rev)] {
            let stdout = stdout_of(&["deriv", file, func, "--mode", mode, "--cost", "--at", at]);
            let rows = cost_rows(&stdout);
            assert_eq!((rows[0].1[0] as u64, rows[1].1[0] as u64), (primal, want), "{func} {mode}:\n{stdout}");
        }
    }
}

#[test]
fn a_program_strategy_replaces_a_schedule_and_deriv_tries_one() {
    // Without the Core rules, push-apply leaves the derivative's lets.
    let dir = crate::common::work_dir("strategies");
    let path = dir.join("pa.ks");
    let program = "(def f Float (x : Float) (mul (sin x) (add x 0.0)))\n(gdef fwd [f Float])\n";
    std::fs::write(&path, program).expect("write");
    let p = path.to_str().expect("utf-8 path");
    let plain = stdout_of(&["deriv", p, "f", "--mode", "fwd"]);
    assert!(!plain.contains("(let"), "{plain}");
    let replaced = format!("{program}(strategy push-apply (normalize (rules application-laws map-laws)))\n");
    std::fs::write(&path, replaced).expect("write");
    let own = stdout_of(&["deriv", p, "f", "--mode", "fwd"]);
    assert!(own.contains("(let"), "{own}");
    // A gdef's schedule runs on its function after the optimisation: here
    // the Core rules again, which take the lets out.
    let scheduled = format!("{program}(strategy push-apply (normalize (rules application-laws map-laws)))\n")
        .replace("(gdef fwd [f Float])", "(gdef fwd [f Float] core-cleanup)");
    std::fs::write(&path, scheduled).expect("write");
    let tidied = stdout_of(&["deriv", p, "f", "--mode", "fwd"]);
    assert!(!tidied.contains("(let") && tidied != own, "{tidied}");
    // `--schedule` runs a strategy of the file after optimisation: the
    // example's recursive `first-place`, twice.
    let out = ksc(&["deriv", "ksc-examples/strategies.ks", "f", "--mode", "rev", "--schedule", "tidy"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("schedule tidy on [rev [f Float]]: succeeded"), "{stderr}");
    // A strategy written out on the command line, calling the file's.
    let out = ksc(&["deriv", "ksc-examples/strategies.ks", "f", "--schedule", "(twice (try (rules core)))"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("schedule command-line on [rev [f Float]]"), "{stderr}");
    let out = ksc(&["deriv", "ksc-examples/strategies.ks", "f", "--schedule", "(twice frob)"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown strategy `frob`"));
    let out = ksc(&["deriv", "ksc-examples/strategies.ks", "f", "--schedule", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`nosuch` is not a strategy") && stderr.contains("push-apply, core-cleanup"), "{stderr}");
    let out = ksc(&["deriv", "ksc-examples/strategies.ks", "f", "--schedule", "twice"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn rules_apply_to_written_functions_in_both_backends() {
    // A rule the program promises (here a false one, to see it fire): it
    // rewrites the function the user wrote, in the interpreter and natively.
    let dir = crate::common::work_dir("rules_on_written");
    let path = dir.join("lie.ks");
    let program = "(rule \"lie\" (x : Float) (sin x) (cos x))\n\
                   (def f Float (x : Float) (sin x))\n\
                   (def main Integer () (print (f 0.0) \"\\n\"))\n";
    std::fs::write(&path, program).expect("write");
    let p = path.to_str().expect("utf-8 path");
    assert_eq!(stdout_of(&["run", "--interp", p]), "1\n");
    assert_eq!(stdout_of(&["run", p]), "1\n");
    // A program's own `user-rules` runs on what it wrote even without
    // rules: here the Core rules, which take the `if true` away.
    let program = "(strategy user-rules (normalize (rules core)))\n\
                   (def g Float (x : Float) (if true (mul x 2.0) x))\n\
                   (def main Integer () (print (g 2.0) \"\\n\"))\n";
    std::fs::write(&path, program).expect("write");
    let out = dir.join("out");
    stdout_of(&["build", p, "--emit", "ks", "-o", out.to_str().expect("utf-8 path"), "--force"]);
    let emitted = std::fs::read_to_string(out.join("lie.ks")).expect("emitted");
    let g = emitted.split("(def [g Float]").nth(1).expect("g").split("(def").next().expect("its body");
    assert!(!g.contains("if"), "{emitted}");
}
