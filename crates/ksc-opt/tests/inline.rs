//! `inline-small` counts what inlining brings in: a small function whose
//! small callees, inlined in turn, make it big is not inlined. Without
//! that, a chain of small functions (`g1` calls `g0`, `g2` calls `g1`,
//! ...) was inlined whole wherever its last function was called, so every
//! derivative of `gN` held a copy of the chain and a program of n such
//! functions optimised in time and space quadratic in n.

use crate::common;

use common::{checked, short_def, user_def};
use ksc_opt::{optimise_def, DefMap, Globals, Options, Schedules};

/// `g0 x = x * x`, `gk x = sin (g(k-1) x)`, and `f x = g(n-1) x`.
fn chain(n: usize) -> String {
    let mut text = String::from("(def g0 Float (x : Float) (mul x x))\n");
    for k in 1..n {
        text.push_str(&format!("(def g{k} Float (x : Float) (sin (g{} x)))\n", k - 1));
    }
    text.push_str(&format!("(def f Float (x : Float) (g{} x))\n", n - 1));
    text
}

/// `f` of [`chain`] optimised: its body printed, and its number of nodes.
fn optimised_f(n: usize) -> (String, usize) {
    let a = checked(&chain(n));
    let mut d = user_def(&a, "f");
    let defs = a.defs();
    let map = DefMap::new(defs.iter().copied());
    let report = optimise_def(&mut d, &Schedules::builtin(), &Globals::new(&map), &Options::default());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    (short_def(&d), d.body.exprs.len())
}

#[test]
fn a_chain_of_small_functions_is_not_inlined_whole() {
    // Three levels come to at most 12 nodes: inlined, as before.
    let (short, _) = optimised_f(3);
    assert!(short.contains("(sin (sin (mul x x)))"), "{short}");
    // 300 levels: the call is not inlined (its chain is too big), so the
    // body stays a call, where it was 300 `sin`s.
    let (long, nodes) = optimised_f(300);
    assert_eq!(long, "(g299 x)");
    assert!(nodes < 5, "{nodes} nodes");
}
