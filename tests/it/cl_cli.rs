//! `ksc cl`: the CL term of a function, and its type with `--check`.

use crate::common::ksc;

fn cl(args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["cl"];
    all.extend_from_slice(args);
    let out = ksc(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_the_term_pruned_to_free_variables_and_its_type() {
    let (ok, stdout, stderr) = cl(&["ksc-examples/gdef_cl.ks", "clamp", "--check"]);
    assert!(ok, "{stderr}");
    // The unused third parameter is pruned away first; the condition sees
    // only x and lo.
    assert!(stdout.starts_with("(comp\n  (P 1 2 4 / 4)\n  (if\n"), "{stdout}");
    assert!(
        stdout.contains("(comp (P 1 3 / 3) (tuple (F get$2$2) (F get$1$2)) (F [lt (Tuple Float Float)]))"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("; clamp : (Tuple Float Float Integer Float) => Float"), "{stdout}");
    // Without --check, no type line.
    let (ok, plain, _) = cl(&["ksc-examples/gdef_cl.ks", "clamp"]);
    assert!(ok && !plain.contains("; clamp"), "{plain}");
    assert_eq!(stdout.strip_suffix("; clamp : (Tuple Float Float Integer Float) => Float\n"), Some(plain.as_str()));
}

#[test]
fn build_sumbuild_fold_and_lets_have_their_forms() {
    let (ok, matvec, stderr) = cl(&["ksc-examples/gdef_cl.ks", "matvec"]);
    assert!(ok, "{stderr}");
    // sumbuild is the sum of a build, as in the original's translation.
    assert!(matvec.starts_with("(build\n  (comp (P 1 / 2) (F get$1$1) (F size))\n  (i : Integer)"), "{matvec}");
    assert!(matvec.contains("(j : Integer)") && matvec.trim_end().ends_with("(F sum)))"), "{matvec}");
    let (ok, stats, _) = cl(&["ksc-examples/gdef_cl.ks", "stats", "--check"]);
    assert!(ok);
    // One parameter: its environment is the 1-tuple (tuple id).
    assert!(
        stats.starts_with("(comp\n  (tuple id)\n  (fold (acc_x : Tuple (Tuple Float Float Integer) Float)"),
        "{stats}"
    );
    assert!(stats.contains("(let (smn : Tuple Float Float Integer)"), "{stats}");
    let (ok, poly, _) = cl(&["ksc-examples/gdef_cl.ks", "poly"]);
    assert!(ok && poly.starts_with("(let (a : Float)\n  (comp (P 1 / 2) (F get$1$1) (F [sq Float]))"), "{poly}");
}

#[test]
fn derived_functions_by_full_name() {
    let (ok, stdout, stderr) = cl(&["ksc-examples/gdef_cl.ks", "[CL [fact Integer]]", "--check"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("(F [fact Integer])"), "[CL fact] calls fact:\n{stdout}");
    assert!(stdout.ends_with("; [CL fact] : Integer => Integer\n"), "{stdout}");
}

/// A tensor of lambdas type-checks and runs, but CL has no function
/// values. (A lambda bound by `let` is written in where it is applied, as
/// derivation does, and translates.)
const TWICE: &str = "(def twice (Vec Float) (v : Vec Float)\n  (let (gs (build 1 (lam (i : Integer) (lam (x : Float) (mul x 2.0))))) (map (index 0 gs) v)))\n";

/// Writes `text` to a fresh file and runs `ksc` on it with `args` after the path.
fn on_file(name: &str, text: &str, args: &[&str]) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("ksc-cl-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.ks"));
    std::fs::write(&file, text).unwrap();
    let mut all = vec![args[0], file.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    let out = ksc(&all);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn gdef_cl_of_what_cl_cannot_express_is_a_located_error() {
    let text = format!("{TWICE}\n(gdef CL [twice (Vec Float)])\n");
    let out = on_file("gdef", &text, &["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cannot derive `[CL twice]`: CL: a lambda that is not an argument of a primitive: CL has no function values"),
        "{stderr}"
    );
    assert!(stderr.contains("gdef.ks:4:1") && stderr.contains("(gdef CL [twice (Vec Float)])"), "{stderr}");
}

#[test]
fn what_cl_cannot_express_is_an_error() {
    let out = on_file("twice", TWICE, &["cl", "twice"]);
    let (ok, stdout, stderr) = (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(!ok && stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("error: `twice` cannot be translated to CL: a lambda that is not an argument of a primitive"),
        "{stderr}"
    );
    let out = ksc(&["cl", "ksc-examples/gdef_cl.ks", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no function `nosuch`"));
}

/// A lambda bound by `let`, or passed to a function that applies it, is
/// written in where it is applied (as derivation reads the function), so
/// CL expresses it.
#[test]
fn lambdas_written_in_translate() {
    let text = "(def apply Float ((f : Lam Float Float) (x : Float)) (f x))\n\
                (def twice (Vec Float) (v : Vec Float)\n  (let (g (lam (x : Float) (mul x 2.0))) (map g v)))\n\
                (def h Float (x : Float) (apply (lam (y : Float) (sin y)) x))\n";
    for f in ["twice", "h"] {
        let out = on_file(f, text, &["cl", f, "--check"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{f}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("$apply") && stdout.contains(&format!("; {f} :")), "{stdout}");
    }
}
