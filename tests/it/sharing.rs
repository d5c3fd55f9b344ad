//! Native code agrees with the interpreter on random programs whose vectors
//! of vectors share storage: rows that are one vector held many times
//! (`build n (lam i r)`, `constVec n r`, a one-hot's hit), rows read out of
//! other such values (`index k m`), and let-bound values used again, added
//! with `ts_add`, `sum`, `sumbuild` and scaled. Native code adds in place
//! wherever it may; adding into storage that something else still reads
//! changes that reader (it did: `ksc-examples/nested_accumulation.ks`). The
//! interpreter's values never share, so it is the reference: each function
//! prints its result and then the two vectors every function is given,
//! which must not change.
//!
//! The same for reverse derivatives of random Floats of such values, whose
//! cotangents are added where the primal shares rows.
//!
//! All functions go in one program, compiled once. `KSC_SHARING=N` sets the
//! number of functions (default 40, and a fifth as many derivatives),
//! `KSC_SHARING_SEED` the seed.

use crate::common::{self, report, work_dir};
use crate::mutate::Rng;

/// Rows per vector of vectors, and elements per row.
const ROWS: usize = 2;
const COLS: usize = 3;

struct Gen {
    rng: Rng,
    /// For fresh names of lambda and let variables.
    next: usize,
}

/// The variables in scope: vectors (`Vec Float`) and vectors of vectors.
#[derive(Clone, Default)]
struct Scope {
    rows: Vec<String>,
    tables: Vec<String>,
}

impl Gen {
    fn name(&mut self, hint: &str) -> String {
        self.next += 1;
        format!("{hint}{}", self.next)
    }

    /// A `Vec Float` of `COLS` elements.
    fn row(&mut self, depth: usize, sc: &Scope) -> String {
        let leaf = depth == 0 || self.rng.below(3) == 0;
        if leaf {
            return match self.rng.below(4) {
                0 | 1 => sc.rows[self.rng.below(sc.rows.len())].clone(),
                2 => format!("(constVec {COLS} 1.5)"),
                _ => match sc.tables.is_empty() {
                    true => "r".into(),
                    false => format!("(index {} {})", self.rng.below(ROWS), sc.tables[self.rng.below(sc.tables.len())]),
                },
            };
        }
        match self.rng.below(4) {
            0 => format!("(index {} {})", self.rng.below(ROWS), self.table(depth - 1, sc)),
            1 => format!("(ts_add {} {})", self.row(depth - 1, sc), self.row(depth - 1, sc)),
            2 => {
                let i = self.name("i");
                format!("(build {COLS} (lam ({i} : Integer) (add (index {i} {}) 1.0)))", self.row(depth - 1, sc))
            }
            _ => {
                let v = self.name("v");
                let rhs = self.row(depth - 1, sc);
                let mut inner = sc.clone();
                inner.rows.push(v.clone());
                format!("(let ({v} {rhs}) {})", self.row(depth - 1, &inner))
            }
        }
    }

    /// A `Vec (Vec Float)` of `ROWS` rows.
    fn table(&mut self, depth: usize, sc: &Scope) -> String {
        let leaf = depth == 0 || self.rng.below(4) == 0;
        if leaf {
            if !sc.tables.is_empty() && self.rng.below(2) == 0 {
                return sc.tables[self.rng.below(sc.tables.len())].clone();
            }
            let i = self.name("i");
            return format!("(build {ROWS} (lam ({i} : Integer) {}))", self.row(0, sc));
        }
        let d = depth - 1;
        match self.rng.below(9) {
            0 => {
                let i = self.name("i");
                format!("(build {ROWS} (lam ({i} : Integer) {}))", self.row(d, sc))
            }
            1 => {
                let i = self.name("i");
                let k = self.rng.below(ROWS);
                format!(
                    "(build {ROWS} (lam ({i} : Integer) (if (eq {i} {k}) {} {})))",
                    self.row(d, sc),
                    self.row(d, sc)
                )
            }
            2 => format!("(constVec {ROWS} {})", self.row(d, sc)),
            3 => format!("(deltaVec {ROWS} {} {})", self.rng.below(ROWS), self.row(d, sc)),
            4 | 5 => format!("(ts_add {} {})", self.table(d, sc), self.table(d, sc)),
            6 => {
                let j = self.name("j");
                match self.rng.below(2) {
                    0 => format!("(sumbuild 2 (lam ({j} : Integer) {}))", self.table(d, sc)),
                    _ => format!("(sum (build 2 (lam ({j} : Integer) {})))", self.table(d, sc)),
                }
            }
            7 => format!("(ts_scale 2.0 {})", self.table(d, sc)),
            8 if self.rng.below(2) == 0 => {
                // A fold whose step adds into its accumulator.
                let (w, acc, k) = (self.name("w"), self.name("acc"), self.name("k"));
                let start = self.table(d, sc);
                let mut inner = sc.clone();
                inner.tables.push(acc.clone());
                let step = self.table(d, &inner);
                format!(
                    "(fold (lam ({w} : Tuple (Vec (Vec Float)) Integer)\n    (let ({acc} (get$1$2 {w})) (ts_add {acc} {step})))\n    {start} (build 2 (lam ({k} : Integer) {k})))"
                )
            }
            _ => {
                let a = self.name("a");
                let rhs = self.table(d, sc);
                let mut inner = sc.clone();
                inner.tables.push(a.clone());
                format!("(let ({a} {rhs}) {})", self.table(d, &inner))
            }
        }
    }
}

/// The program of `count` random functions, `derived` random Floats of a
/// vector of vectors with their reverse derivatives (whose cotangents are
/// such values, added where the primal shares rows), and a `main` printing
/// each one's result, then its arguments, a line each.
fn program(count: usize, derived: usize, seed: u64) -> String {
    let mut g = Gen { rng: Rng((seed ^ 0x9E37_79B9_7F4A_7C15).max(1)), next: 0 };
    let sc = Scope { rows: vec!["r".into(), "s".into()], tables: Vec::new() };
    let mut text = String::new();
    for k in 0..count {
        let body = g.table(4, &sc);
        text.push_str(&format!("(def f{k} (Vec (Vec Float)) ((r : Vec Float) (s : Vec Float))\n  {body})\n"));
    }
    let sc = Scope { rows: vec!["r".into()], tables: vec!["m".into()] };
    for k in 0..derived {
        let (a, b, i) = (g.table(3, &sc), g.table(3, &sc), g.name("i"));
        text.push_str(&format!(
            "(def g{k} Float ((m : Vec (Vec Float)) (r : Vec Float))\n  \
             (sum (build {ROWS} (lam ({i} : Integer) (dot (index {i} {a}) (index {i} {b}))))))\n\
             (gdef rev [g{k} (Tuple (Vec (Vec Float)) (Vec Float))])\n"
        ));
    }
    text.push_str("(def main Integer ()\n  (let ((r (build 3 (lam (i : Integer) (to_float i))))\n");
    text.push_str("        (s (build 3 (lam (i : Integer) (add 3.0 (to_float i)))))\n");
    text.push_str(
        "        (m (build 2 (lam (i : Integer) (build 3 (lam (j : Integer) (to_float (add i j))))))))\n    (print",
    );
    for k in 0..count {
        text.push_str(&format!("\n      \"f{k} \" (f{k} r s) \" \" r \" \" s \"\\n\""));
    }
    for k in 0..derived {
        text.push_str(&format!("\n      \"g{k} \" ([rev g{k}] (tuple m r) 1.0) \" \" m \" \" r \"\\n\""));
    }
    text.push_str(")))\n");
    text
}

/// The same line: the same text, or for a derivative (`g..`), the same
/// numbers within 1e-5 (native code adds cotangents in another order).
fn same_line(a: &str, b: &str) -> bool {
    a == b || (a.starts_with('g') && common::same_numbers(a, b))
}

#[test]
fn shared_rows_are_added_into_only_where_nothing_else_reads_them() {
    let count = std::env::var("KSC_SHARING").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let derived = count / 5;
    let seed = std::env::var("KSC_SHARING_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20261203);
    let dir = work_dir("sharing");
    let path = dir.join("sharing.ks");
    std::fs::write(&path, program(count, derived, seed)).expect("cannot write the program");
    let path = path.to_str().expect("a UTF-8 path");
    let interp = common::ksc(&["run", "--interp", path]);
    assert!(interp.status.success(), "the interpreter failed on {path}: {}", String::from_utf8_lossy(&interp.stderr));
    let expected = String::from_utf8_lossy(&interp.stdout).into_owned();
    assert_eq!(expected.lines().count(), count + derived, "{expected}");
    let mut failures = Vec::new();
    // Checked at `-O0`; unchecked with the default `-O3` and vectors'
    // memory reused at every size, as `native.rs` runs the examples.
    let reuse = common::reuse_always_cflags();
    for (unchecked, flags) in [(false, common::QUICK_CFLAGS), (true, reuse.as_str())] {
        let mode: &[&str] = if unchecked { &["run", "--unchecked"] } else { &["run"] };
        let out = common::ksc_env(&[mode, &[path]].concat(), &[("KSC_CFLAGS", flags)]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            failures.push(format!("`ksc {}` failed: {}", mode.join(" "), String::from_utf8_lossy(&out.stderr)));
        } else if stdout.lines().count() != expected.lines().count() {
            failures.push(format!(
                "`ksc {}` on {path} printed {} lines, not {}",
                mode.join(" "),
                stdout.lines().count(),
                expected.lines().count()
            ));
        } else if let Some(l) = expected.lines().zip(stdout.lines()).find(|(a, b)| !same_line(a, b)) {
            failures.push(format!(
                "`ksc {}` on {path} (seed {seed}) first differs from the interpreter at\n  {}\n  {}",
                mode.join(" "),
                l.0,
                l.1
            ));
        }
    }
    report("native runs of shared rows", failures, 2);
}
