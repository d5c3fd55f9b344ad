//! Helpers shared by the AD tests: random points, flattening, and the
//! dense matrix of a sparse Jacobian.

#![allow(dead_code)]

use ksc_eval::{Tensor, Value};
use ksc_ir::Type;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

pub fn random_value(t: &Type, rng: &mut Rng) -> Value {
    match t {
        Type::Float => Value::Float(0.3 + rng.next()),
        Type::Integer => Value::Integer(2),
        Type::Bool => Value::Bool(true),
        Type::Tuple(ts) => Value::Tuple(ts.iter().map(|t| random_value(t, rng)).collect()),
        Type::Tensor(n, e) => {
            let shape = vec![3; *n];
            let data = (0..3usize.pow(*n as u32)).map(|_| random_value(e, rng)).collect();
            Value::Tensor(std::rc::Rc::new(Tensor { shape, data }))
        }
        t => panic!("no random values of type {t}"),
    }
}

pub fn flat(v: &Value) -> Vec<f64> {
    let mut out = Vec::new();
    ksc_eval::flatten_tangent(v, &mut out);
    out
}

/// The dense m x n matrix of a `[jacsparse f]` result (duplicate entries
/// summed), and its number of entries; or what is wrong with its layout
/// (columns out of range or out of order, inconsistent sizes).
pub fn densify(v: &Value, m: usize, n: usize) -> Result<(Vec<f64>, usize), String> {
    let ints = |v: &Value| -> Vec<i64> {
        let Value::Tensor(t) = v else { return vec![] };
        t.data.iter().map(|x| if let Value::Integer(i) = x { *i } else { -1 }).collect()
    };
    let Value::Tuple(parts) = v else { return Err("not a tuple".into()) };
    let [shape, offsets, columns, values] = &parts[..] else { return Err("not 4 parts".into()) };
    let (offsets, columns, values) = (ints(offsets), ints(columns), flat(values));
    if flat_ints(shape) != [m as i64, n as i64] {
        return Err(format!("shape {shape}, not ({m}, {n})"));
    }
    if offsets.len() != m + 1 || offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err("bad row offsets".into());
    }
    let nnz = offsets[m] as usize;
    if columns.len() != nnz || values.len() != nnz || columns.iter().any(|&c| c < 0 || c as usize >= n) {
        return Err("bad columns or values".into());
    }
    let mut dense = vec![0.0; m * n];
    for r in 0..m {
        let row = offsets[r] as usize..offsets[r + 1] as usize;
        if columns[row.clone()].windows(2).any(|w| w[0] > w[1]) {
            return Err(format!("the columns of row {r} are not in ascending order"));
        }
        for k in row {
            dense[r * n + columns[k] as usize] += values[k];
        }
    }
    Ok((dense, nnz))
}

pub fn flat_ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Integer(i) => vec![*i],
        Value::Tuple(xs) => xs.iter().flat_map(flat_ints).collect(),
        _ => vec![],
    }
}

/// A tangent shaped like `x` with random Floats.
pub fn random_tangent(x: &Value, rng: &mut Rng) -> Value {
    match x {
        Value::Float(_) => Value::Float(rng.next()),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(|v| random_tangent(v, rng)).collect()),
        Value::Tensor(t) => Value::Tensor(std::rc::Rc::new(Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(|v| random_tangent(v, rng)).collect(),
        })),
        _ => Value::unit(),
    }
}

/// `x + h * dx` on the Float leaves.
pub fn perturb(x: &Value, dx: &Value, h: f64) -> Value {
    match (x, dx) {
        (Value::Float(a), Value::Float(d)) => Value::Float(a + h * d),
        (Value::Tuple(xs), Value::Tuple(ds)) if xs.len() == ds.len() => {
            Value::Tuple(xs.iter().zip(ds.iter()).map(|(a, d)| perturb(a, d, h)).collect())
        }
        (Value::Tensor(xt), Value::Tensor(dt)) => Value::Tensor(std::rc::Rc::new(Tensor {
            shape: xt.shape.clone(),
            data: xt.data.iter().zip(&dt.data).map(|(a, d)| perturb(a, d, h)).collect(),
        })),
        (x, _) => x.clone(),
    }
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
