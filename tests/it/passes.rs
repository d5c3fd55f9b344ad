//! `--skip-pass`, `--skip-rule`, `--ablate` and `--dump-after`: every
//! optimisation pass of both pipelines, and every group of optimisations,
//! can be left out, and the program still computes what its `.expected`
//! says (a pass or rule is an optimisation, never needed for correctness),
//! so skipping passes one at a time bisects a miscompile; and the IR after
//! a pass can be printed.

use crate::common::{ksc, par_map, report};

/// The passes `ksc build --help` offers for `--skip-pass`.
fn pass_names() -> Vec<String> {
    let out = ksc(&["build", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("[possible values: simplify"))
        .expect("`--skip-pass` lists its passes in `--help`");
    let list = line.trim().trim_start_matches("[possible values: ").trim_end_matches(']');
    list.split(", ").map(str::to_string).collect()
}

/// The derived-function passes come first in the list, up to the first
/// loop-IR pass.
const FIRST_LOOP_PASS: &str = "share-guarded";

/// Runs `example` with `flags` (natively unless `interp`), and says what
/// is wrong if the output is not the example's `.expected`.
fn run_with(example: &str, flags: &[&str], interp: bool) -> Option<String> {
    let file = format!("ksc-examples/{example}.ks");
    let mut args = vec!["run", file.as_str()];
    args.extend(flags);
    if interp {
        args.push("--interp");
    } else {
        // Only what ksc writes is under test; the C compiler's optimiser is not.
        args.extend(["--cflags", "-O0"]);
    }
    let out = ksc(&args);
    let expected = std::fs::read_to_string(crate::common::root().join(format!("ksc-examples/{example}.expected")))
        .expect("the example has its .expected");
    let stdout = String::from_utf8_lossy(&out.stdout);
    (!out.status.success() || stdout != expected).then(|| {
        format!(
            "{file} {} with {}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
            if interp { "interpreted" } else { "native" },
            flags.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn run_without(example: &str, pass: &str, interp: bool) -> Option<String> {
    run_with(example, &["--skip-pass", pass], interp)
}

#[test]
fn every_pass_can_be_skipped_without_changing_what_programs_compute() {
    let names = pass_names();
    let split = names.iter().position(|n| n == FIRST_LOOP_PASS).expect("the loop-IR passes are offered");
    let (derived, loops) = names.split_at(split);
    assert!(derived.len() >= 8 && loops.len() >= 13, "passes offered: {names:?}");
    // Examples whose derivatives go through every derived-function pass
    // (reverse mode with scans, Jacobians, recursion, split passes).
    let ad = ["gdef_fwd_rev", "gdef_fold", "gdef_jac", "gdef_recursion", "gdef_split_passes"];
    let mut jobs: Vec<(&str, &str, bool)> = Vec::new();
    for p in derived {
        jobs.extend(ad.iter().map(|e| (*e, p.as_str(), true)));
        jobs.extend(["gdef_fold", "gdef_jac"].iter().map(|e| (*e, p.as_str(), false)));
    }
    for p in loops {
        jobs.extend(["gdef_fold", "matrix_vector"].iter().map(|e| (*e, p.as_str(), false)));
    }
    let failures: Vec<String> =
        par_map(&jobs, |&(e, p, interp)| run_without(e, p, interp)).into_iter().flatten().collect();
    report("runs with a pass skipped", failures, jobs.len());
}

#[test]
fn skipping_a_pass_changes_what_it_would_have_changed() {
    // The simplifier on a derived function.
    let with = ksc(&["deriv", "ksc-examples/gdef_fold.ks", "prod"]);
    let without = ksc(&["deriv", "ksc-examples/gdef_fold.ks", "prod", "--skip-pass", "simplify"]);
    assert!(with.status.success() && without.status.success());
    assert!(with.stdout != without.stdout, "--skip-pass simplify left `ksc deriv`'s output unchanged");
    // Dead code elimination on the loop IR (there is some in a fold's
    // reverse pass).
    let dir = crate::common::work_dir("skip-pass-dce");
    let d = dir.to_str().unwrap();
    let a = ksc(&["build", "ksc-examples/gdef_fold.ks", "--emit", "loops", "-o", &format!("{d}/a")]);
    let b =
        ksc(&["build", "ksc-examples/gdef_fold.ks", "--emit", "loops", "-o", &format!("{d}/b"), "--skip-pass", "dce"]);
    assert!(a.status.success() && b.status.success());
    let read = |sub: &str| std::fs::read_to_string(dir.join(sub).join("gdef_fold.loops")).unwrap();
    assert!(read("a") != read("b"), "--skip-pass dce left the loop IR unchanged");
}

#[test]
fn dump_after_prints_each_function_after_the_pass() {
    let out = ksc(&["deriv", "ksc-examples/gdef_fold.ks", "prod", "--dump-after", "simplify"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("; after simplify on [rev [prod (Vec Float)]]\n(def [rev [prod (Vec Float)]]"), "{err}");
    let dir = crate::common::work_dir("dump-after");
    let out = ksc(&[
        "build",
        "ksc-examples/gdef_fold.ks",
        "--emit",
        "loops",
        "-o",
        dir.to_str().unwrap(),
        "--dump-after",
        "licm",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("; after licm on ") && err.contains("\nfn "), "{err}");
}

#[test]
fn an_unknown_pass_is_a_usage_error_that_lists_the_passes() {
    let out = ksc(&["run", "ksc-examples/gdef_fold.ks", "--skip-pass", "no-such-pass"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-pass") && err.contains("simplify") && err.contains("licm"), "{err}");
}

/// The groups `ksc build --help` offers for `--ablate`.
fn ablation_names() -> Vec<String> {
    let out = ksc(&["build", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let start = help.find("--ablate <GROUP>").expect("`--ablate` is in `--help`");
    let rest = &help[start..];
    let end = rest.find("--dump-after").unwrap_or(rest.len());
    rest[..end]
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- ")?.split(':').next().map(str::to_string))
        .collect()
}

#[test]
fn every_ablation_keeps_what_programs_compute() {
    let names = ablation_names();
    assert_eq!(names, ["fusion", "licm", "df-rules", "parallel-reverse"], "the ablations offered");
    // Derivatives through every pipeline (reverse mode with folds and
    // scans, Jacobians, the one-hot gradients of strategies.ks) and the
    // benchmark's micro-benchmarks, natively and interpreted.
    let examples = ["gdef_fold", "gdef_jac", "gdef_scan_zip", "strategies", "adbench/micro"];
    let mut jobs = Vec::new();
    for a in &names {
        for e in examples {
            jobs.extend([(e, a.as_str(), true), (e, a.as_str(), false)]);
        }
    }
    let failures: Vec<String> =
        par_map(&jobs, |&(e, a, interp)| run_with(e, &["--ablate", a], interp)).into_iter().flatten().collect();
    report("runs with an ablation", failures, jobs.len());
}

#[test]
fn skipping_a_rule_or_a_group_changes_what_it_would_have_rewritten() {
    let deriv = |extra: &[&str]| {
        let mut args = vec!["deriv", "ksc-examples/adbench/lse.ks", "lse_objective", "--mode", "rev"];
        args.extend(extra);
        let out = ksc(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let with = deriv(&[]);
    let without = deriv(&["--ablate", "fusion"]);
    assert!(with != without, "--ablate fusion left `ksc deriv`'s output unchanged:\n{with}");
    // A rule named in a strategy is left out too.
    let dir = crate::common::work_dir("skip-rule-by-name");
    let file = dir.join("f.ks");
    std::fs::write(&file, "(def f Float (x : Float) (index 1 (build 3 (lam (i : Integer) (mul x (to_float i))))))\n")
        .unwrap();
    let fired = |extra: &[&str]| {
        let mut args = vec!["deriv", file.to_str().unwrap(), "f", "--mode", "fwd", "--skip-pass", "simplify"];
        args.extend(["--schedule", "(normalize (rules let-build index-build))"]);
        args.extend(extra);
        let out = ksc(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let with = fired(&[]);
    assert!(with.contains("let-build x1, index-build x1"), "{with}");
    let without = fired(&["--skip-rule", "let-build"]);
    assert!(without.contains("no rule fired"), "{without}");
}

#[test]
fn an_unknown_rule_or_group_is_a_usage_error_that_lists_them() {
    let out = ksc(&["run", "ksc-examples/gdef_fold.ks", "--skip-rule", "no-such-rule"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-rule") && err.contains("index-build") && err.contains("compose-one-left"), "{err}");
    let out = ksc(&["run", "ksc-examples/gdef_fold.ks", "--ablate", "everything"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fusion") && err.contains("df-rules"), "{err}");
}
