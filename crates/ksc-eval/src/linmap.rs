//! Linear-map values and their semantics: application, reverse application,
//! and materialisation as a dense matrix over the flattened tangent spaces
//! (linear-maps-and-ad.md 1, seed 003 figures 3 to 5, knossos-reference.md
//! 4.1 and 5.2).
//!
//! A map from the tangent space of S to that of T is built only by the
//! combinators of `ksc_ir::Prim`; the values that give shapes ("witnesses")
//! are primal values of S or T. Tangent values contain Floats where the primal
//! has Floats and units `()` where it has Integers, Bools or Strings.

use std::rc::Rc;

use ksc_ir::prim::Accumulators;

use crate::ops;
use crate::value::{Closure, Tensor, Value};

/// A linear map, as built by the `lm*` primitives.
#[derive(Debug)]
pub enum LinMap {
    /// `lmZero (s, t)`
    Zero {
        source: Value,
        target: Value,
    },
    /// `lmOne t`
    One(Value),
    /// `lmScale (t, k)`
    Scale(Value, f64),
    /// `lmScaleR v`: `r -> r * v`
    ScaleR(Value),
    /// `lmDot v`: `dx -> <v, dx>`
    Dot(Value),
    Add(Rc<LinMap>, Rc<LinMap>),
    /// `f` after `g`.
    Compose(Rc<LinMap>, Rc<LinMap>),
    VCat(Vec<Rc<LinMap>>),
    HCat(Vec<Rc<LinMap>>),
    /// `lmVCatV (s, v)`: a tensor of maps, each from S.
    VCatV {
        source: Value,
        maps: Rc<Tensor>,
    },
    /// `lmHCatV (t, v)`: a tensor of maps, each to T.
    HCatV {
        target: Value,
        maps: Rc<Tensor>,
    },
    Transpose(Rc<LinMap>),
    /// `lmIndex (i, v)`: selects element `index` of tensors shaped like `vector`.
    Index {
        index: Value,
        vector: Value,
    },
    /// `lmGet$i$n t`: selects component `index` (0-based) of tuples shaped like `tuple`.
    Get {
        index: usize,
        tuple: Value,
    },
    /// `lmFold (s, f, df, acc, v)`, or `lmScan` (the same arguments), or
    /// `lmScanBlocks`: the map to the accumulators `kept` (the last, all
    /// n + 1, or the n after the first).
    Fold {
        scope: Value,
        f: Rc<Closure>,
        df: Rc<Closure>,
        acc: Value,
        vector: Rc<Tensor>,
        kept: Accumulators,
    },
}

/// The tangent of a primal value: Floats kept, Integers, Bools and Strings
/// become units, structure preserved. Used where a primal value plays the
/// role of a tangent (`lmScaleR v`, `lmDot v`).
pub(crate) fn to_tangent(v: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::Float(x) => Value::Float(*x),
        Value::Integer(_) | Value::Bool(_) | Value::String(_) => Value::unit(),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(to_tangent).collect::<Result<_, _>>()?),
        Value::Tensor(t) => Value::Tensor(Rc::new(Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(to_tangent).collect::<Result<_, _>>()?,
        })),
        Value::Closure(_) | Value::LinMap(_) => return Err(format!("{} has no tangent", v.kind())),
        Value::Tape(..) | Value::Sparse(_) => to_tangent(&v.try_dense()?)?,
    })
}

/// The zero tangent shaped like a primal (or tangent) value.
pub(crate) fn zero_tangent(v: &Value) -> Result<Value, String> {
    Ok(ops::ts_scale(0.0, to_tangent(v)?))
}

/// The Float components of a tangent value, in order (the flattening used
/// for dense matrices).
pub fn flatten_tangent(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Float(x) => out.push(*x),
        Value::Tuple(xs) => xs.iter().for_each(|x| flatten_tangent(x, out)),
        Value::Tensor(t) => t.data.iter().for_each(|x| flatten_tangent(x, out)),
        Value::Tape(..) | Value::Sparse(_) => flatten_tangent(&v.dense(), out),
        _ => {}
    }
}

/// The number of Floats in `v` (`$tangentDim`).
pub fn tangent_dim(v: &Value) -> usize {
    match v {
        Value::Float(_) => 1,
        Value::Tuple(xs) => xs.iter().map(tangent_dim).sum(),
        Value::Tensor(t) => t.data.iter().map(tangent_dim).sum(),
        Value::Tape(..) | Value::Sparse(_) => tangent_dim(&v.dense()),
        _ => 0,
    }
}

/// The tangent shaped like `x` whose every Float is 1.0 (the discrete
/// parts' are `()`): the direction the cost measurements use.
pub fn tangent_ones(x: &Value) -> Value {
    match x {
        Value::Float(_) => Value::Float(1.0),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(tangent_ones).collect()),
        Value::Tensor(t) => {
            Value::Tensor(Rc::new(Tensor { shape: t.shape.clone(), data: t.data.iter().map(tangent_ones).collect() }))
        }
        Value::Tape(..) | Value::Sparse(_) => tangent_ones(&x.dense()),
        _ => Value::unit(),
    }
}

/// The tangent shaped like `x` that is 1.0 at its `k`-th Float and 0.0
/// elsewhere (`$tangentBasis`); `next` counts the Floats passed.
pub fn tangent_basis(x: &Value, k: i64, next: &mut i64) -> Value {
    match x {
        Value::Float(_) => {
            *next += 1;
            Value::Float(if *next - 1 == k { 1.0 } else { 0.0 })
        }
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(|v| tangent_basis(v, k, next)).collect()),
        Value::Tensor(t) => Value::Tensor(Rc::new(Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(|v| tangent_basis(v, k, next)).collect(),
        })),
        Value::Tape(..) | Value::Sparse(_) => tangent_basis(&x.dense(), k, next),
        _ => Value::unit(),
    }
}

/// A tangent shaped like `like` whose Float components are taken from `xs`
/// in order.
fn unflatten(like: &Value, xs: &mut impl Iterator<Item = f64>) -> Value {
    match like {
        Value::Float(_) => Value::Float(xs.next().unwrap_or(0.0)),
        Value::Tuple(cs) => Value::Tuple(cs.iter().map(|c| unflatten(c, xs)).collect()),
        Value::Tape(..) | Value::Sparse(_) => unflatten(&like.dense(), xs),
        Value::Tensor(t) => Value::Tensor(Rc::new(Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(|c| unflatten(c, xs)).collect(),
        })),
        v => v.clone(),
    }
}

fn as_map(v: &Value) -> Result<Rc<LinMap>, String> {
    match v {
        Value::LinMap(m) => Ok(m.clone()),
        v => Err(format!("expected a linear map, found {}", v.kind())),
    }
}

fn as_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(x) => Ok(*x),
        v => Err(format!("expected a Float tangent, found {}", v.kind())),
    }
}

fn components(v: &Value, n: usize, what: &str) -> Result<Rc<[Value]>, String> {
    match v {
        Value::Tuple(xs) if xs.len() == n => Ok(xs.clone()),
        v => Err(format!("{what}: expected a tuple of {n} components, found {}", v.kind())),
    }
}

fn tensor_like(v: &Value, shape: &[usize], what: &str) -> Result<Rc<Tensor>, String> {
    match &v.try_dense()? {
        Value::Tensor(t) if t.shape == shape => Ok(t.clone()),
        Value::Tensor(t) => Err(format!("{what}: a tensor of size {:?} where size {:?} was expected", t.shape, shape)),
        v => Err(format!("{what}: expected a tensor, found {}", v.kind())),
    }
}

/// A dense matrix, row-major: `rows` = dimension of the target tangent
/// space, `cols` = dimension of the source tangent space.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f64>,
}

impl Matrix {
    pub fn get(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.cols + c]
    }

    pub fn transpose(&self) -> Matrix {
        let mut data = Vec::with_capacity(self.data.len());
        for c in 0..self.cols {
            for r in 0..self.rows {
                data.push(self.get(r, c));
            }
        }
        Matrix { rows: self.cols, cols: self.rows, data }
    }
}

/// What linear-map semantics needs from the evaluator: calling closures
/// (for `lmFold`).
pub(crate) trait CallClosure {
    fn call_closure(&mut self, c: &Closure, arg: Value) -> Result<Value, LmFail>;
}

/// An error of linear-map evaluation: a message, or an error from inside a
/// closure with its own location.
/// Why applying a linear map stopped past its work limit.
pub(crate) const OVER_WORK_LIMIT: &str =
    "applying its combinators to each column took more operations than allowed (a shared sub-map is applied once per path to it)";

pub(crate) enum LmFail {
    Here(String),
    Inner(Box<crate::RuntimeError>),
}

impl From<String> for LmFail {
    fn from(m: String) -> LmFail {
        LmFail::Here(m)
    }
}

type LR<T> = Result<T, LmFail>;

impl LinMap {
    /// The zero tangent of the source space.
    pub(crate) fn source_zero(&self) -> Result<Value, String> {
        Ok(match self {
            LinMap::Zero { source, .. } => zero_tangent(source)?,
            LinMap::One(t) | LinMap::Scale(t, _) => zero_tangent(t)?,
            LinMap::ScaleR(_) => Value::Float(0.0),
            LinMap::Dot(v) => zero_tangent(v)?,
            LinMap::Add(m, _) => m.source_zero()?,
            LinMap::Compose(_, g) => g.source_zero()?,
            LinMap::VCat(ms) => ms.first().ok_or("an empty lmVCat")?.source_zero()?,
            LinMap::HCat(ms) => Value::Tuple(ms.iter().map(|m| m.source_zero()).collect::<Result<_, _>>()?),
            LinMap::VCatV { source, .. } => zero_tangent(source)?,
            LinMap::HCatV { maps, .. } => Value::Tensor(Rc::new(Tensor {
                shape: maps.shape.clone(),
                data: maps.data.iter().map(|m| as_map(m)?.source_zero()).collect::<Result<_, _>>()?,
            })),
            LinMap::Transpose(m) => m.target_zero()?,
            LinMap::Index { vector, .. } => zero_tangent(vector)?,
            LinMap::Get { tuple, .. } => zero_tangent(tuple)?,
            LinMap::Fold { scope, acc, vector, .. } => Value::Tuple(
                vec![
                    zero_tangent(scope)?,
                    Value::Tuple(vec![zero_tangent(acc)?, zero_tangent(&Value::Tensor(vector.clone()))?].into()),
                ]
                .into(),
            ),
        })
    }

    /// The zero tangent of the target space.
    pub(crate) fn target_zero(&self) -> Result<Value, String> {
        Ok(match self {
            LinMap::Zero { target, .. } => zero_tangent(target)?,
            LinMap::One(t) | LinMap::Scale(t, _) => zero_tangent(t)?,
            LinMap::ScaleR(v) => zero_tangent(v)?,
            LinMap::Dot(_) => Value::Float(0.0),
            LinMap::Add(m, _) => m.target_zero()?,
            LinMap::Compose(f, _) => f.target_zero()?,
            LinMap::VCat(ms) => Value::Tuple(ms.iter().map(|m| m.target_zero()).collect::<Result<_, _>>()?),
            LinMap::HCat(ms) => ms.first().ok_or("an empty lmHCat")?.target_zero()?,
            LinMap::VCatV { maps, .. } => Value::Tensor(Rc::new(Tensor {
                shape: maps.shape.clone(),
                data: maps.data.iter().map(|m| as_map(m)?.target_zero()).collect::<Result<_, _>>()?,
            })),
            LinMap::HCatV { target, .. } => zero_tangent(target)?,
            LinMap::Transpose(m) => m.source_zero()?,
            LinMap::Index { index, vector } => match vector {
                Value::Tensor(t) => zero_tangent(&crate::prims::index_value(t, index)?)?,
                v => return Err(format!("`lmIndex` of {}", v.kind())),
            },
            LinMap::Get { index, tuple } => match tuple {
                Value::Tuple(xs) if *index < xs.len() => zero_tangent(&xs[*index])?,
                v => return Err(format!("`lmGet` of {}", v.kind())),
            },
            LinMap::Fold { acc, kept: Accumulators::Last, .. } => zero_tangent(acc)?,
            LinMap::Fold { acc, vector, kept, .. } => {
                let z = zero_tangent(acc)?;
                let n = kept.count(vector.data.len());
                Value::Tensor(Rc::new(Tensor { shape: vec![n], data: vec![z; n] }))
            }
        })
    }

    /// Counts one application of a combinator, and fails past the work
    /// limit ([`ops::with_work_limit`]).
    fn step() -> LR<()> {
        ops::count_work(1);
        if ops::over_work_limit() {
            return Err(LmFail::Here(OVER_WORK_LIMIT.to_string()));
        }
        Ok(())
    }

    /// `m ⊙ dx`
    pub(crate) fn apply(&self, ev: &mut impl CallClosure, dx: Value) -> LR<Value> {
        Self::step()?;
        Ok(match self {
            LinMap::Zero { target, .. } => zero_tangent(target)?,
            LinMap::One(_) => dx,
            LinMap::Scale(_, k) => ops::ts_scale(*k, dx),
            LinMap::ScaleR(v) => ops::ts_scale(as_float(&dx)?, to_tangent(v)?),
            LinMap::Dot(v) => Value::Float(ops::ts_dot(&to_tangent(v)?, &dx)?),
            LinMap::Add(m1, m2) => {
                let a = m1.apply(ev, dx.clone())?;
                ops::ts_add(a, &m2.apply(ev, dx)?)?
            }
            LinMap::Compose(f, g) => {
                let y = g.apply(ev, dx)?;
                f.apply(ev, y)?
            }
            LinMap::VCat(ms) => {
                Value::Tuple(ms.iter().map(|m| m.apply(ev, dx.clone())).collect::<LR<Vec<_>>>()?.into())
            }
            LinMap::HCat(ms) => {
                let parts = components(&dx, ms.len(), "the tangent of an lmHCat")?;
                let mut sum = self.target_zero()?;
                for (m, x) in ms.iter().zip(parts.iter()) {
                    sum = ops::ts_add(sum, &m.apply(ev, x.clone())?)?;
                }
                sum
            }
            LinMap::VCatV { maps, .. } => {
                let mut data = Vec::with_capacity(maps.data.len());
                for m in &maps.data {
                    data.push(as_map(m)?.apply(ev, dx.clone())?);
                }
                Value::Tensor(Rc::new(Tensor { shape: maps.shape.clone(), data }))
            }
            LinMap::HCatV { target, maps } => {
                let xs = tensor_like(&dx, &maps.shape, "the tangent of an lmHCatV")?;
                let mut sum = zero_tangent(target)?;
                for (m, x) in maps.data.iter().zip(&xs.data) {
                    sum = ops::ts_add(sum, &as_map(m)?.apply(ev, x.clone())?)?;
                }
                sum
            }
            LinMap::Transpose(m) => m.apply_r(ev, dx)?,
            LinMap::Index { index, .. } => match &dx.try_dense()? {
                Value::Tensor(t) => crate::prims::index_value(t, index)?,
                v => return Err(LmFail::Here(format!("`lmIndex` applied to {}", v.kind()))),
            },
            LinMap::Get { index, tuple } => {
                let n = match tuple {
                    Value::Tuple(xs) => xs.len(),
                    _ => 0,
                };
                components(&dx, n, "the tangent of an lmGet")?[*index].clone()
            }
            LinMap::Fold { f, df, acc, vector, kept, .. } => {
                // FFold: carry (acc, dacc) forwards (keeping every dacc for a scan).
                let scan = *kept != Accumulators::Last;
                let ds_dx = components(&dx, 2, "the tangent of an lmFold")?;
                let ds = ds_dx[0].clone();
                let dacc_dv = components(&ds_dx[1], 2, "the tangent of an lmFold")?;
                let mut dacc = dacc_dv[0].clone();
                let dv = tensor_like(&dacc_dv[1], &vector.shape, "the vector tangent of an lmFold")?;
                let mut a = acc.clone();
                let mut all = Vec::new();
                for (x, dxi) in vector.data.iter().zip(&dv.data) {
                    let t = Value::Tuple(vec![a.clone(), x.clone()].into());
                    let m = as_map(&ev.call_closure(df, t.clone())?)?;
                    if scan {
                        all.push(dacc.clone());
                    }
                    let dt = Value::Tuple(vec![dacc, dxi.clone()].into());
                    dacc = m.apply(ev, Value::Tuple(vec![ds.clone(), dt].into()))?;
                    a = ev.call_closure(f, t)?;
                }
                if scan {
                    all.push(dacc);
                    if *kept == Accumulators::AfterFirst {
                        all.remove(0);
                    }
                    Value::Tensor(Rc::new(Tensor { shape: vec![all.len()], data: all }))
                } else {
                    dacc
                }
            }
        })
    }

    /// `dr ⊙ᴿ m`
    pub(crate) fn apply_r(&self, ev: &mut impl CallClosure, dr: Value) -> LR<Value> {
        Self::step()?;
        Ok(match self {
            LinMap::Zero { source, .. } => zero_tangent(source)?,
            LinMap::One(_) => dr,
            LinMap::Scale(_, k) => ops::ts_scale(*k, dr),
            LinMap::ScaleR(v) => Value::Float(ops::ts_dot(&to_tangent(v)?, &dr)?),
            LinMap::Dot(v) => ops::ts_scale(as_float(&dr)?, to_tangent(v)?),
            LinMap::Add(m1, m2) => {
                let a = m1.apply_r(ev, dr.clone())?;
                ops::ts_add(a, &m2.apply_r(ev, dr)?)?
            }
            LinMap::Compose(f, g) => {
                let y = f.apply_r(ev, dr)?;
                g.apply_r(ev, y)?
            }
            LinMap::VCat(ms) => {
                let parts = components(&dr, ms.len(), "the cotangent of an lmVCat")?;
                let mut sum = self.source_zero()?;
                for (m, r) in ms.iter().zip(parts.iter()) {
                    sum = ops::ts_add(sum, &m.apply_r(ev, r.clone())?)?;
                }
                sum
            }
            LinMap::HCat(ms) => {
                Value::Tuple(ms.iter().map(|m| m.apply_r(ev, dr.clone())).collect::<LR<Vec<_>>>()?.into())
            }
            LinMap::VCatV { source, maps } => {
                let rs = tensor_like(&dr, &maps.shape, "the cotangent of an lmVCatV")?;
                let mut sum = zero_tangent(source)?;
                for (m, r) in maps.data.iter().zip(&rs.data) {
                    sum = ops::ts_add(sum, &as_map(m)?.apply_r(ev, r.clone())?)?;
                }
                sum
            }
            LinMap::HCatV { maps, .. } => {
                let mut data = Vec::with_capacity(maps.data.len());
                for m in &maps.data {
                    data.push(as_map(m)?.apply_r(ev, dr.clone())?);
                }
                Value::Tensor(Rc::new(Tensor { shape: maps.shape.clone(), data }))
            }
            LinMap::Transpose(m) => m.apply(ev, dr)?,
            LinMap::Index { index, vector } => {
                // The one-hot injection: zero everywhere but at `index`.
                let mut z = zero_tangent(vector)?;
                if let Value::Tensor(t) = &mut z {
                    let k = crate::prims::flat_position(t, index)?;
                    let t = Rc::make_mut(t);
                    t.data[k] = ops::ts_add(t.data[k].clone(), &dr)?;
                }
                z
            }
            LinMap::Get { index, tuple } => {
                let mut parts: Vec<Value> = match zero_tangent(tuple)? {
                    Value::Tuple(xs) => xs.to_vec(),
                    v => return Err(LmFail::Here(format!("`lmGet` of {}", v.kind()))),
                };
                let slot = parts.get_mut(*index).ok_or_else(|| "`lmGet` out of range".to_string())?;
                *slot = ops::ts_add(slot.clone(), &dr)?;
                Value::Tuple(parts.into())
            }
            LinMap::Fold { scope, f, df, acc, vector, kept } => {
                // RFold: a forward sweep storing the accumulators, then a
                // backward sweep accumulating the scope's cotangent. A
                // scan's cotangent has a part for every accumulator, added
                // to the accumulator's cotangent as the sweep reaches it.
                let mut accs = Vec::with_capacity(vector.data.len());
                let mut a = acc.clone();
                for x in &vector.data {
                    accs.push(a.clone());
                    a = ev.call_closure(f, Value::Tuple(vec![a, x.clone()].into()))?;
                }
                let n = vector.data.len();
                // The cotangent of accumulator k (none for the first of an
                // `lmScanBlocks`, which it does not keep).
                let rs = match kept {
                    Accumulators::Last => None,
                    _ => Some(tensor_like(&dr, &[kept.count(n)], "the cotangent of a scan's map")?),
                };
                let part = |k: usize| match (kept, &rs) {
                    (Accumulators::AfterFirst, Some(rs)) => k.checked_sub(1).map(|k| rs.data[k].clone()),
                    (_, rs) => rs.as_ref().map(|rs| rs.data[k].clone()),
                };
                let mut r = match (kept, part(n)) {
                    (Accumulators::Last, _) => dr,
                    (_, Some(last)) => last,
                    // An `lmScanBlocks` over no elements keeps nothing.
                    (_, None) => zero_tangent(acc)?,
                };
                let mut dscope = zero_tangent(scope)?;
                let mut dv = Vec::with_capacity(n);
                for (k, (a, x)) in accs.into_iter().zip(&vector.data).enumerate().rev() {
                    let m = as_map(&ev.call_closure(df, Value::Tuple(vec![a, x.clone()].into()))?)?;
                    let d = components(&m.apply_r(ev, r)?, 2, "the cotangent of a fold step")?;
                    dscope = ops::ts_add(dscope, &d[0])?;
                    let dt = components(&d[1], 2, "the cotangent of a fold step")?;
                    r = match part(k) {
                        Some(rk) => ops::ts_add(dt[0].clone(), &rk)?,
                        None => dt[0].clone(),
                    };
                    dv.push(dt[1].clone());
                }
                dv.reverse();
                let dv = Value::Tensor(Rc::new(Tensor { shape: vector.shape.clone(), data: dv }));
                Value::Tuple(vec![dscope, Value::Tuple(vec![r, dv].into())].into())
            }
        })
    }

    /// The map as a dense matrix: column j is the map applied to the j-th
    /// basis vector of the flattened source space.
    pub(crate) fn dense(&self, ev: &mut impl CallClosure) -> LR<Matrix> {
        self.dense_seeded(ev, 1.0)
    }

    /// [`LinMap::dense`] with `seed` for the basis vectors' one: with NaN,
    /// an entry is NaN wherever the map carries the column to it at all
    /// (NaN times 0 is NaN), its structural pattern.
    pub(crate) fn dense_seeded(&self, ev: &mut impl CallClosure, seed: f64) -> LR<Matrix> {
        let source = self.source_zero()?;
        let mut flat = Vec::new();
        flatten_tangent(&source, &mut flat);
        let cols = flat.len();
        let rows = {
            let mut t = Vec::new();
            flatten_tangent(&self.target_zero()?, &mut t);
            t.len()
        };
        let mut data = vec![0.0; rows * cols];
        for j in 0..cols {
            let basis = unflatten(&source, &mut (0..cols).map(|k| if k == j { seed } else { 0.0 }));
            let mut col = Vec::with_capacity(rows);
            flatten_tangent(&self.apply(ev, basis)?, &mut col);
            if col.len() != rows {
                return Err(LmFail::Here(format!(
                    "a linear map claims {rows} output dimensions but produced {}",
                    col.len()
                )));
            }
            for (i, x) in col.into_iter().enumerate() {
                data[i * cols + j] = x;
            }
        }
        Ok(Matrix { rows, cols, data })
    }
}
