//! `reduce` and `scan` follow the association tree documented at
//! `ksc_ir::prim::REDUCE_BLOCK` (and, for `reduce`'s blocks,
//! `REDUCE_RUNS`): the interpreter's results for Float sums
//! of 5000 elements equal, bit for bit, the tree computed here in Rust,
//! and differ from the plain left fold (so the tree is really used).

use ksc_eval::{Interpreter, Value};
use ksc_ir::prim::{REDUCE_BLOCK, REDUCE_RUNS};
use ksc_ir::{FunName, Type};

const SRC: &str = "
(def r Float (v : Vec Float)
  (reduce (lam (p : Tuple Float Float) (add (get$1$2 p) (get$2$2 p))) 0.0 v))
(def s (Vec Float) (v : Vec Float)
  (scan (lam (p : Tuple Float Float) (add (get$1$2 p) (get$2$2 p))) 0.0 v))
";

/// Values of very different magnitudes, so the order of the additions
/// shows in the last bits.
fn input(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i as f64) * 0.7).sin() * 10f64.powi((i % 9) as i32 - 3)).collect()
}

/// A block's result, written out: R runs of `len / R` elements (the last
/// also taking the rest), each a left fold from E, combined left to right.
fn runs(e: f64, c: &[f64]) -> f64 {
    let r = REDUCE_RUNS as usize;
    let run = c.len() / r;
    let mut acc = vec![e; r];
    for j in 0..run {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += c[l * run + j];
        }
    }
    for x in &c[r * run..] {
        acc[r - 1] += x;
    }
    acc[1..].iter().fold(acc[0], |a, x| a + x)
}

/// The tree, written out: blocks of B, each in runs, then the block
/// results combined pairwise, an odd last one carried up; a vector of at
/// most B elements is the left fold from E.
fn tree_reduce(e: f64, v: &[f64]) -> f64 {
    blocks_reduce(e, v, runs)
}

/// The blocked tree with each block's result given by `block`.
fn blocks_reduce(e: f64, v: &[f64], block: fn(f64, &[f64]) -> f64) -> f64 {
    let b = REDUCE_BLOCK as usize;
    if v.len() <= b {
        return v.iter().fold(e, |a, x| a + x);
    }
    let mut level: Vec<f64> = v.chunks(b).map(|c| block(e, c)).collect();
    while level.len() > 1 {
        level = level.chunks(2).map(|p| if p.len() == 2 { p[0] + p[1] } else { p[0] }).collect();
    }
    level[0]
}

/// The blocked scan: carries c_0 = E, c_(k+1) = c_k + s_k, and each block
/// scanned from its carry.
fn tree_scan(e: f64, v: &[f64]) -> Vec<f64> {
    let b = REDUCE_BLOCK as usize;
    let mut out = Vec::with_capacity(v.len());
    if v.len() <= b {
        let mut a = e;
        for x in v {
            a += x;
            out.push(a);
        }
        return out;
    }
    let mut carry = e;
    for c in v.chunks(b) {
        let s = c.iter().fold(e, |a, x| a + x);
        let mut a = carry;
        for x in c {
            a += x;
            out.push(a);
        }
        carry += s;
    }
    out
}

fn call(name: &str, v: &[f64]) -> Value {
    let analysis = ksc_types::analyze(SRC);
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let mut interp = Interpreter::new(analysis.defs());
    let arg = Value::vector(v.iter().map(|&x| Value::Float(x)).collect());
    let mut out = Vec::new();
    interp.call(&FunName::typed(name, Type::vec(Type::Float)), arg, &mut out).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    match v {
        Value::Tensor(t) => t.data.iter().map(|x| if let Value::Float(f) = x { *f } else { panic!("{x}") }).collect(),
        v => panic!("not a vector: {v}"),
    }
}

#[test]
fn reduce_follows_the_documented_tree_bit_for_bit() {
    let v = input(5000);
    let got = match call("r", &v) {
        Value::Float(x) => x,
        v => panic!("{v}"),
    };
    let tree = tree_reduce(0.0, &v);
    let left = v.iter().fold(0.0, |a, x| a + x);
    assert_eq!(got.to_bits(), tree.to_bits(), "interpreter {got:e}, tree {tree:e}");
    assert_ne!(tree.to_bits(), left.to_bits(), "this input does not tell the tree from the left fold");
    // Small inputs are the left fold; the empty vector is E.
    for n in [0, 1, 7, REDUCE_BLOCK as usize] {
        let v = input(n);
        let got = call("r", &v);
        assert_eq!(got, Value::Float(v.iter().fold(0.0, |a, x| a + x)), "n = {n}");
    }
}

/// Derivation reads each block as its left fold
/// (`ksc_types::expand::runs_for_derivation`): the definition it
/// differentiates computes, bit for bit, the tree with left folds over the
/// blocks, which differs from the runs' tree.
#[test]
fn derivation_reads_each_block_as_its_left_fold() {
    let v = input(5000);
    let analysis = ksc_types::analyze(SRC);
    let r = analysis.defs().into_iter().find(|d| d.name.base == "r").unwrap().clone();
    let read = ksc_types::expand::runs_for_derivation(&r).expect("r has runs");
    let mut interp = Interpreter::new([&read]);
    let arg = Value::vector(v.iter().map(|&x| Value::Float(x)).collect());
    let got = match interp.call(&r.name, arg, &mut Vec::new()).unwrap() {
        Value::Float(x) => x,
        v => panic!("{v}"),
    };
    let folds = blocks_reduce(0.0, &v, |e, c| c.iter().fold(e, |a, x| a + x));
    assert_eq!(got.to_bits(), folds.to_bits(), "read for derivation {got:e}, folds per block {folds:e}");
    assert_ne!(got.to_bits(), tree_reduce(0.0, &v).to_bits(), "this input does not tell the runs from the folds");
}

/// The scan of 5000 elements (five blocks) runs a group of four whole
/// blocks in lanes (`SCAN_LANES`) in each pass, and the rest one at a
/// time: each block's values are still its own left scan, bit for bit.
#[test]
fn scan_follows_the_documented_blocks_bit_for_bit() {
    let v = input(5000);
    let got = floats(&call("s", &v));
    let want = tree_scan(0.0, &v);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "element {i}: interpreter {g:e}, blocked scan {w:e}");
    }
    let mut left = 0.0;
    let plain: Vec<f64> = v
        .iter()
        .map(|x| {
            left += x;
            left
        })
        .collect();
    assert!(plain.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()), "the blocks make no difference here");
    assert!(floats(&call("s", &[])).is_empty());
}
