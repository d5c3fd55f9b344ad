//! The cost tests' second backend: every family of `crates/ksc-ad/tests/
//! cost.rs` compiled to C with work counting (`-DKS_COUNT_WORK`: every
//! block run counts one and one per number it loads, stores or adds into,
//! an element that is a tuple counting its components, and the runtime
//! counts the elements it fills and copies; see
//! `ksc_runtime.h`), and `f`, `[fwd f]` and `[rev f]` run at n and 4n by a
//! C driver through the library's header. Each count is asserted linear in
//! n (at 4n at most 4.5 times that at n), and within a constant of f's, so
//! a derivative that native code runs in quadratic time (or a backend that
//! copies where the interpreter shares) fails here even when the
//! interpreter's count holds.
//!
//! The constants are looser than the interpreter's: this count weighs
//! memory traffic and nothing else (arithmetic is free), so a derivative,
//! which stores intermediates and reads them back, weighs more against a
//! primal whose work is arithmetic, and the primal's unroll-and-jam (rows
//! of a mat-vec summed together, reading the vector once for eight rows)
//! saves loads its derivatives do not. Measured: forward mode at most 4.3
//! times f (mat-vec), reverse mode at most 11.9 (the recursive chain, a
//! tail recursion whose primal is arithmetic on one Float, 1 per step,
//! and whose reverse pass stores and reads back its states, pairs of
//! Float and Integer; the recurrent network 9.2; mat-mat 8.1). Until
//! 2026-12-02 a tuple loaded or stored counted one, as a number does, and
//! the bound was 9 (the chain's pairs then counted one each, two fewer
//! per step: about 9.9, within 9 f + 200; the network 7.7). Stored as one
//! vector per component (`split-tuple-vectors`), the same words counted
//! twice as much, so the count now weighs words, whatever the layout, and
//! the bound is 12.

use std::fmt::Write as _;
use std::process::Command;

use ksc_ir::Type;

use crate::common::{ksc, par_map, work_dir, QUICK_CFLAGS};

#[path = "../../crates/ksc-ad/tests/cost/families.rs"]
mod families;
use families::Family;

/// The additive constant and the factors of the bounds: `fwd <= FWD f + C`,
/// `rev <= REV f + C`.
const C: u64 = 200;
const FWD: u64 = 5;
const REV: u64 = 12;

/// A stand-in for n in a family's input, replaced by the input function's
/// parameter, so one build serves every n.
const N_MARK: &str = "987654321";

/// `(f x)`'s argument's leaves, spread as the C ABI spreads tuples: C
/// expressions for the components of the value `x` of type `ty`.
fn leaves(ty: &Type, x: &str, out: &mut Vec<String>) {
    match ty {
        Type::Tuple(ts) => {
            for (k, t) in ts.iter().enumerate() {
                leaves(t, &format!("{x}.f{k}"), out);
            }
        }
        _ => out.push(x.to_string()),
    }
}

/// A `.ks` expression for the tangent of ones shaped like the value `x` of
/// type `ty` (what the interpreter's test gives `[fwd f]` and `[rev f]`).
fn ones(ty: &Type, x: &str) -> String {
    match ty {
        Type::Float => "1.0".into(),
        Type::Tuple(ts) => {
            let n = ts.len();
            let parts: Vec<String> =
                ts.iter().enumerate().map(|(k, t)| ones(t, &format!("(get${}${n} {x})", k + 1))).collect();
            format!("(tuple {})", parts.join(" "))
        }
        Type::Tensor(1, e) => {
            format!("(build (size {x}) (lam (ksc_i : Integer) {}))", ones(e, &format!("(index ksc_i {x})")))
        }
        _ => "(tuple)".into(),
    }
}

/// The counts of f, [fwd f] and [rev f] at each n of `sizes`, from one
/// build of the family with work counting.
fn native_costs(fam: &Family, sizes: &[usize]) -> Result<Vec<(u64, u64, u64)>, String> {
    let arg = &fam.arg_ty;
    let analysis = ksc_types::analyze(&fam.program);
    let ret =
        analysis.defs().iter().find(|d| d.name.base == "f").map(|d| d.ret_ty.clone()).ok_or("the family has no f")?;
    let (dt, rt) = (arg.tangent().ok_or("no tangent type")?, ret.tangent().ok_or("no tangent type")?);
    let input =
        (fam.input)(N_MARK.parse().unwrap()).replace(&format!("{N_MARK}.0"), "(to_float n)").replace(N_MARK, "n");
    let text = format!(
        "{}\n(gdef fwd [f {arg}])\n(gdef rev [f {arg}])\n(def input {arg} ((n : Integer)) {input})\n(def dinput {dt} ((x : {arg})) {})\n(def dresult {rt} ((y : {ret})) {})\n",
        fam.program,
        ones(arg, "x"),
        ones(&ret, "y")
    );
    let name: String = fam.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let dir = work_dir(&format!("cost_native/{name}"));
    let ks = dir.join("p.ks");
    std::fs::write(&ks, text).map_err(|e| e.to_string())?;
    let out = ksc(&["build", ks.to_str().unwrap(), "--emit", "c", "-o", dir.to_str().unwrap()]);
    if !out.status.success() {
        return Err(format!("ksc build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let spread = |ty: &Type, x: &str| {
        let mut v = Vec::new();
        leaves(ty, x, &mut v);
        v.iter().map(|l| format!(", {l}")).collect::<String>()
    };
    let (xs, dxs, ys, drs) = (spread(arg, "x"), spread(&dt, "dx"), spread(&ret, "y"), spread(&rt, "dr"));
    let mut driver = String::from(
        "#include <inttypes.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include \"p.h\"\nextern uint64_t ks_work_count;\n",
    );
    writeln!(
        driver,
        "static void check(ks_arena *A) {{ if (ks_arena_error(A)) {{ fprintf(stderr, \"%s\\n\", ks_arena_error_message(A)); exit(1); }} }}
int main(int argc, char **argv) {{
    ks_arena *A = ks_arena_new();
    for (int k = 1; k < argc; k++) {{
        int64_t n = atoll(argv[k]);
        __typeof__(input(A, n)) x = input(A, n); check(A);
        __typeof__(dinput(A{xs})) dx = dinput(A{xs}); check(A);
        __typeof__(f(A{xs})) y = f(A{xs}); check(A);
        __typeof__(dresult(A{ys})) dr = dresult(A{ys}); check(A);
        uint64_t c0 = ks_work_count;
        f(A{xs}); check(A);
        uint64_t c1 = ks_work_count;
        fwd$f(A{xs}{dxs}); check(A);
        uint64_t c2 = ks_work_count;
        rev$f(A{xs}{drs}); check(A);
        uint64_t c3 = ks_work_count;
        printf(\"%\" PRIu64 \" %\" PRIu64 \" %\" PRIu64 \"\\n\", c1 - c0, c2 - c1, c3 - c2);
    }}
    ks_arena_free(A);
    return 0;
}}"
    )
    .ok();
    std::fs::write(dir.join("driver.c"), driver).map_err(|e| e.to_string())?;
    let exe = dir.join("driver");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .current_dir(&dir)
        .args(QUICK_CFLAGS.split_whitespace())
        .args(["-DKS_COUNT_WORK", "-o", exe.to_str().unwrap(), "driver.c", "p.c", "-lm"])
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !built.status.success() {
        return Err(format!("{cc} failed: {}", String::from_utf8_lossy(&built.stderr)));
    }
    let run = Command::new(&exe)
        .args(sizes.iter().map(usize::to_string))
        .output()
        .map_err(|e| format!("cannot run the driver: {e}"))?;
    if !run.status.success() {
        return Err(format!("the driver failed: {}", String::from_utf8_lossy(&run.stderr)));
    }
    let text = String::from_utf8_lossy(&run.stdout);
    let rows: Vec<(u64, u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let v: Vec<u64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        })
        .collect();
    if rows.len() != sizes.len() {
        return Err(format!("unexpected driver output: {text}"));
    }
    Ok(rows)
}

/// Every family at n and 4n (and the families of loops reading captured
/// vectors at 500 and 2000) is linear and within the bounds, but for the
/// known quadratic ones (`families::KNOWN_QUADRATIC`), asserted quadratic
/// until they are fixed.
#[test]
fn derivatives_cost_a_small_constant_times_the_function_in_native_code() {
    let mut all: Vec<(Family, [usize; 2])> = Vec::new();
    let mut add = |fams: Vec<Family>, sizes: [usize; 2]| all.extend(fams.into_iter().map(|f| (f, sizes)));
    add(families::families(), [50, 200]);
    add(families::recursion_in_loops(), [50, 200]);
    add(families::loops_in_loops(), [50, 200]);
    add(families::recursion_in_folds(), [50, 200]);
    add(vec![families::recurrent_network()], [50, 200]);
    add(families::captured_reads(), [500, 2000]);
    // Sizes at which both runs have a group of lanes (at least four whole
    // blocks: `ksc_ir::prim::SCAN_LANES`), whose rounds and guards the
    // counter weighs, so the two counts are of the same code.
    add(families::reductions(), [5000, 20000]);
    let results = par_map(&all, |(fam, sizes)| native_costs(fam, sizes));
    let mut failures = Vec::new();
    for ((fam, [n, m]), r) in all.iter().zip(results) {
        let rows = match r {
            Ok(rows) => rows,
            Err(e) => {
                failures.push(format!("{}: {e}", fam.name));
                continue;
            }
        };
        let [(p1, f1, r1), (p4, f4, r4)] = [rows[0], rows[1]];
        for (k, (p, f, r)) in [(n, rows[0]), (m, rows[1])] {
            println!(
                "{:<18} n={k:<5} f={p:<8} fwd={f:<8} rev={r:<8} fwd/f={:.2} rev/f={:.2}",
                fam.name,
                f as f64 / p as f64,
                r as f64 / p as f64
            );
        }
        let linear = |a: u64, b: u64| 2 * b <= 9 * a;
        let what = format!("{}: f {p1} and {p4}, fwd {f1} and {f4}, rev {r1} and {r4} at n = {n} and {m}", fam.name);
        if p1 == 0 || f1 == 0 || r1 == 0 {
            failures.push(format!("{what}: no work counted (is KS_WORK still emitted?)"));
            continue;
        }
        if families::known_quadratic(fam.name, true) {
            if linear(r1, r4) {
                failures.push(format!("{what}: reverse mode is linear now: remove it from KNOWN_QUADRATIC"));
            }
            continue;
        }
        let within = |p: u64, f: u64, r: u64| f <= FWD * p + C && r <= REV * p + C;
        if !(linear(p1, p4) && linear(f1, f4) && linear(r1, r4) && within(p1, f1, r1) && within(p4, f4, r4)) {
            failures.push(what);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
