//! The primitives (knossos-reference.md 3.1 and 7.7).

use std::rc::Rc;

use ksc_ir::{Callee, Expr, ExprId, Prim, Type};

use crate::eval::{Compiled, Lambda, Machine, R};
use crate::linmap::{CallClosure, LinMap, LmFail};
use crate::ops::{self, add_in_place, alloc_elements, count_work, zero_from_shape, zero_like, OVERFLOW};
use crate::value::Closure;
use crate::value::{flat_index, fmt_size, index_value_of, num_elements, Sparse, Tensor, Value};

/// The most arguments a primitive of fixed arity takes (`$check`).
const MAX_ARITY: usize = 5;

/// The number of argument values a primitive of fixed arity takes (the
/// splatting primitives evaluate their arguments themselves).
fn arity(p: Prim) -> usize {
    p.arity().unwrap_or(1)
}

/// The evaluated arguments of a primitive. A lambda written in the argument
/// list is not evaluated; it is recorded to be applied in the current frame.
struct PrimArgs {
    vals: [Value; MAX_ARITY],
    lams: [Option<ExprId>; MAX_ARITY],
}

impl PrimArgs {
    fn take(&mut self, i: usize) -> Value {
        self.vals.get_mut(i).map_or(Value::unit(), |v| std::mem::replace(v, Value::Integer(0)))
    }

    fn get(&self, i: usize) -> &Value {
        const UNIT: &Value = &Value::Integer(0);
        self.vals.get(i).unwrap_or(UNIT)
    }
}

pub fn int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Integer(i) => Ok(*i),
        _ => Err(format!("internal error: expected an Integer, found {}", v.kind())),
    }
}

fn float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(x) => Ok(*x),
        _ => Err(format!("internal error: expected a Float, found {}", v.kind())),
    }
}

pub fn tensor(v: &Value) -> Result<Rc<Tensor>, String> {
    match v {
        Value::Tensor(t) => {
            t.check()?;
            Ok(t.clone())
        }
        Value::Tape(..) => match v.dense() {
            Value::Tensor(t) => Ok(t),
            _ => unreachable!(),
        },
        Value::Sparse(s) => Ok(Rc::new(s.to_dense()?)),
        _ => Err(format!("internal error: expected a tensor, found {}", v.kind())),
    }
}

/// The components of an index value: an Integer or a tuple of Integers.
pub fn index_components(v: &Value) -> Result<Vec<i64>, String> {
    match v {
        Value::Integer(i) => Ok(vec![*i]),
        Value::Tuple(vs) if !vs.is_empty() => vs.iter().map(int).collect(),
        _ => Err(format!("internal error: expected an index, found {}", v.kind())),
    }
}

/// A size argument as a shape; negative sizes are errors.
pub fn sizes(v: &Value, prim: impl std::fmt::Display) -> Result<Vec<usize>, String> {
    let components = index_components(v)?;
    components
        .iter()
        .map(|&n| usize::try_from(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("`{prim}` with a negative size {}", crate::value::fmt_index(&components)))
}

/// The number of elements of a shape.
pub fn count(shape: &[usize]) -> Result<usize, String> {
    num_elements(shape).ok_or_else(|| OVERFLOW.to_string())
}

/// The number of indices of an iteration space (`sumbuild`,
/// `buildFromSparse`), saturating: it makes no tensor, so it has no limit,
/// and a count past `usize::MAX` loops as long as native code's nested
/// loops do (an empty size anywhere makes it empty).
pub fn iterations(shape: &[usize]) -> usize {
    shape.iter().fold(1usize, |acc, &n| acc.saturating_mul(n))
}

/// The number of elements of a tensor that `prim` makes of this shape, or
/// the error of a size over the limit (`ksc_ir::limits`), checked before
/// anything is allocated or computed, as native code does.
pub fn tensor_count(shape: &[usize], prim: impl std::fmt::Display) -> Result<usize, String> {
    let size: Vec<i64> = shape.iter().map(|&n| i64::try_from(n).unwrap_or(i64::MAX)).collect();
    let n = ksc_ir::limits::check_elements(&prim.to_string(), &size)?;
    usize::try_from(n).map_err(|_| OVERFLOW.to_string())
}

/// The `k`-th index (row-major) of an index space of this shape, as a value.
pub fn index_at(mut k: usize, shape: &[usize]) -> Value {
    if let [_] = shape {
        return Value::Integer(k as i64);
    }
    let mut idx = vec![0i64; shape.len()];
    for (slot, &n) in idx.iter_mut().zip(shape).rev() {
        if n > 0 {
            *slot = (k % n) as i64;
            k /= n;
        }
    }
    index_value_of(idx.into_iter())
}

/// `index i t`, bounds-checked.
pub(crate) fn index_value(t: &Tensor, i: &Value) -> Result<Value, String> {
    index(t, i)
}

/// The position of index `i` in the elements of `t`, bounds-checked.
pub(crate) fn flat_position(t: &Tensor, i: &Value) -> Result<usize, String> {
    let k = match (i, t.shape.as_slice()) {
        (Value::Integer(i), [n]) => match usize::try_from(*i) {
            Ok(k) if k < *n => k,
            _ => return Err(format!("index out of range: index {i} in a tensor of size {n}")),
        },
        _ => t.flat_index(&index_components(i)?)?,
    };
    if k < t.data.len() {
        Ok(k)
    } else {
        Err("internal error: malformed tensor".to_string())
    }
}

/// `index i t`, bounds-checked.
fn index(t: &Tensor, i: &Value) -> Result<Value, String> {
    let flat = match (i, t.shape.as_slice()) {
        // The common case, without allocating.
        (Value::Integer(i), [n]) => match usize::try_from(*i) {
            Ok(k) if k < *n && k < t.data.len() => k,
            _ => return Err(format!("index out of range: index {i} in a tensor of size {n}")),
        },
        _ => t.flat_index(&index_components(i)?)?,
    };
    t.data.get(flat).cloned().ok_or_else(|| "internal error: malformed tensor".to_string())
}

/// The pair `(a, b)`, in one allocation.
pub fn pair(a: Value, b: Value) -> Value {
    Value::Tuple(Rc::new([a, b]))
}

pub fn new_tensor(shape: Vec<usize>, data: Vec<Value>) -> Value {
    Value::Tensor(Rc::new(Tensor { shape, data }))
}

/// The operation count's loads of a loop primitive: reading an element of
/// a vector the loop is given counts one, as `index` does, unless the vector
/// is written in place as a `build`, which the backend fuses into the loop:
/// the element is computed there, neither stored nor loaded, so the
/// elements the interpreter's `build` made are not counted either. (So for
/// `unzip` of a `build`, whose columns the backend writes in place: `unzip`
/// counts the elements it writes, no loads.)
fn count_loads(cx: &Compiled, p: Prim, arg: ExprId, args: &PrimArgs) -> u64 {
    let read: &[usize] = match p {
        Prim::Unzip => &[0],
        Prim::Fold | Prim::Scan | Prim::ScanBlocks => &[2],
        Prim::ScanSum => &[3],
        Prim::Map => &[1],
        Prim::Map2 => &[1, 2],
        _ => return 0,
    };
    let body = &cx.def.body;
    let written = body.call_args(arg);
    let mut loads = 0;
    for &k in read {
        let len = match args.get(k) {
            Value::Tensor(t) => t.data.len(),
            Value::Tape(_, len) => *len,
            Value::Sparse(s) => s.len(),
            _ => 0,
        };
        match written.get(k).map(|&e| &body.exprs[e]) {
            Some(Expr::Call(Callee::Prim(Prim::Build), _)) => ops::uncount_work(len),
            _ if p == Prim::Unzip => {}
            _ => loads += len as u64,
        }
    }
    loads
}

impl<'p, 'a, 'o> Machine<'p, 'a, 'o> {
    /// Evaluates a call of a primitive.
    #[inline(never)]
    pub(crate) fn eval_prim(
        &mut self,
        cx: &'p Compiled<'a>,
        base: usize,
        call: ExprId,
        p: Prim,
        arg: ExprId,
    ) -> R<Value> {
        match p {
            Prim::Print => return self.print(cx, base, call, arg),
            Prim::VecInit => {
                let mut vs = Vec::new();
                for c in cx.def.body.call_args(arg) {
                    vs.push(self.eval(cx, base, c, false)?);
                }
                return Ok(Value::vector(vs));
            }
            Prim::LmVCat | Prim::LmHCat => {
                let mut maps = Vec::new();
                for c in cx.def.body.call_args(arg) {
                    match self.eval(cx, base, c, false)? {
                        Value::LinMap(m) => maps.push(m),
                        v => return Err(self.fail(cx, call, format!("`{p}` of {}", v.kind()))),
                    }
                }
                let m = if p == Prim::LmVCat { LinMap::VCat(maps) } else { LinMap::HCat(maps) };
                return Ok(Value::LinMap(Rc::new(m)));
            }
            _ => {}
        }
        let mut args = self.prim_args(cx, base, call, arg, arity(p))?;
        let loads = count_loads(cx, p, arg, &args);
        self.ops += loads;
        // On the span, a loop whose iterations are independent reads in each
        // iteration its own elements: `map`'s one (or two), a block's of
        // `$scanBlocks` (in each of its two passes).
        let block = ksc_ir::prim::REDUCE_BLOCK as u64;
        ops::count_span(match p {
            Prim::Map | Prim::Map2 => loads.min(2),
            Prim::ScanBlocks => loads.min(2 * block),
            _ => loads,
        });
        let r = self.prim(cx, base, call, p, arg, &mut args);
        // Errors from inside a lambda already have their location.
        r.map_err(|e| match e {
            Fail::Here(m) => self.fail(cx, call, m),
            Fail::Inner(e) => e,
        })
    }

    /// Evaluates the arguments of a primitive of fixed arity `k`: the
    /// components of a literal k-tuple, or the components of the value of a
    /// single k-tuple argument (a single argument if k = 1).
    fn prim_args(&mut self, cx: &'p Compiled<'a>, base: usize, call: ExprId, arg: ExprId, k: usize) -> R<PrimArgs> {
        let mut args = PrimArgs {
            vals: [Value::Integer(0), Value::Integer(0), Value::Integer(0), Value::Integer(0), Value::Integer(0)],
            lams: [None; MAX_ARITY],
        };
        if k == 1 {
            args.vals[0] = self.eval(cx, base, arg, false)?;
            return Ok(args);
        }
        match &cx.def.body.exprs[arg] {
            Expr::Tuple(es) if es.len() == k => {
                for ((val, lam), &c) in args.vals.iter_mut().zip(&mut args.lams).zip(es) {
                    if matches!(cx.def.body.exprs[c], Expr::Lam(..)) {
                        *lam = Some(c);
                    } else {
                        *val = self.eval(cx, base, c, false)?;
                    }
                }
            }
            _ => match self.eval(cx, base, arg, false)? {
                Value::Tuple(vs) if vs.len() == k => {
                    for (val, v) in args.vals.iter_mut().zip(vs.iter()) {
                        *val = v.clone();
                    }
                }
                v => {
                    return Err(self.fail(
                        cx,
                        call,
                        format!("internal error: expected {k} arguments, found {}", v.kind()),
                    ))
                }
            },
        }
        Ok(args)
    }

    /// Opens argument `i` as a lambda.
    fn lambda(&mut self, cx: &'p Compiled<'a>, base: usize, args: &PrimArgs, i: usize) -> Result<Lambda<'p, 'a>, Fail> {
        let opened = match (args.lams.get(i).copied().flatten(), args.get(i)) {
            (Some(lam), _) => self.open_in_frame(cx, base, lam),
            (None, Value::Closure(c)) => self.open_closure(c),
            (None, v) => return Err(Fail::Here(format!("internal error: expected a lambda, found {}", v.kind()))),
        };
        opened.ok_or_else(|| Fail::Here("internal error: a lambda out of its scope".to_string()))
    }

    /// Applies a lambda once and pops its frame.
    fn apply_once(
        &mut self,
        cx: &'p Compiled<'a>,
        base: usize,
        args: &PrimArgs,
        i: usize,
        x: Value,
    ) -> Result<Value, Fail> {
        let l = self.lambda(cx, base, args, i)?;
        let r = self.apply(&l, x)?;
        self.close(l);
        Ok(r)
    }

    fn prim(
        &mut self,
        cx: &'p Compiled<'a>,
        base: usize,
        call: ExprId,
        p: Prim,
        arg: ExprId,
        args: &mut PrimArgs,
    ) -> Result<Value, Fail> {
        let body = &cx.def.body;
        Ok(match p {
            Prim::Build => {
                let shape = sizes(args.get(0), p)?;
                let n = tensor_count(&shape, p)?;
                let (mut par, mut data) = ops::ParSpan::alloc(n)?;
                let l = self.lambda(cx, base, args, 1)?;
                for k in 0..n {
                    data.push(self.apply(&l, index_at(k, &shape))?);
                    par.next();
                }
                par.end();
                self.close(l);
                new_tensor(shape, data)
            }
            Prim::Sumbuild => {
                let shape = sizes(args.get(0), p)?;
                let n = iterations(&shape);
                if n == 0 {
                    return Err(Fail::Here(format!("`sumbuild` of an empty range (size {})", fmt_size(&shape))));
                }
                let l = self.lambda(cx, base, args, 1)?;
                let mut acc = self.apply(&l, index_at(0, &shape))?;
                for k in 1..n {
                    let v = self.apply(&l, index_at(k, &shape))?;
                    add_in_place(&mut acc, &v)?;
                }
                self.close(l);
                acc
            }
            Prim::ScanSum => {
                let v = tensor(args.get(3))?;
                let mut accs = alloc_elements(tensor_count(&[v.len().saturating_add(1)], p)?)?;
                let mut acc = args.take(1);
                let mut total = args.take(2);
                let l = self.lambda(cx, base, args, 0)?;
                for x in &v.data {
                    accs.push(acc.clone());
                    let Value::Tuple(r) = self.apply(&l, pair(acc, x.clone()))? else {
                        return Err(Fail::Here("the lambda of `$scanSum` returned something other than a pair".into()));
                    };
                    let [a, s] = &r[..] else {
                        return Err(Fail::Here("the lambda of `$scanSum` returned something other than a pair".into()));
                    };
                    acc = a.clone();
                    add_in_place(&mut total, s)?;
                }
                self.close(l);
                accs.push(acc);
                Value::Tuple(vec![Value::vector(accs), total].into())
            }
            Prim::BuildSum => {
                let shape = sizes(args.get(0), p)?;
                let n = tensor_count(&shape, p)?;
                let mut data = alloc_elements(n)?;
                let mut acc = args.take(1);
                let l = self.lambda(cx, base, args, 2)?;
                for k in 0..n {
                    let Value::Tuple(es) = self.apply(&l, index_at(k, &shape))? else {
                        return Err(Fail::Here(
                            "the lambda of `$buildSum` returned something other than a pair".into(),
                        ));
                    };
                    let [e, s] = &es[..] else {
                        return Err(Fail::Here(
                            "the lambda of `$buildSum` returned something other than a pair".into(),
                        ));
                    };
                    data.push(e.clone());
                    add_in_place(&mut acc, s)?;
                }
                self.close(l);
                Value::Tuple(vec![new_tensor(shape, data), acc].into())
            }
            Prim::Fold => {
                let v = tensor(args.get(2))?;
                let mut acc = args.take(1);
                let l = self.lambda(cx, base, args, 0)?;
                for x in &v.data {
                    acc = self.apply(&l, pair(acc, x.clone()))?;
                }
                self.close(l);
                acc
            }
            Prim::Scan => {
                let v = tensor(args.get(2))?;
                let mut accs = alloc_elements(tensor_count(&[v.len().saturating_add(1)], p)?)?;
                let mut acc = args.take(1);
                let l = self.lambda(cx, base, args, 0)?;
                for x in &v.data {
                    accs.push(acc.clone());
                    acc = self.apply(&l, pair(acc, x.clone()))?;
                }
                self.close(l);
                accs.push(acc);
                Value::vector(accs)
            }
            Prim::ScanBlocks => {
                // `scan`'s blocked order (`ksc_ir::prim::REDUCE_BLOCK`): the
                // results of all blocks but the last, the carries, then each
                // block from its carry, in that order, whole blocks in lanes
                // (`SCAN_LANES`) where the accumulator is numbers, as native
                // code runs them (so a failing step fails first in the same
                // pass and at the same element).
                let v = tensor(args.get(2))?;
                let e = args.take(1);
                let l = self.lambda(cx, base, args, 0)?;
                let b = ksc_ir::prim::REDUCE_BLOCK as usize;
                let in_lanes = matches!(body.ty(call), Type::Tensor(_, t) if ksc_ir::prim::scans_in_lanes(t));
                let lanes = if in_lanes { ksc_ir::prim::SCAN_LANES as usize } else { 1 };
                let blocks: Vec<&[Value]> = v.data.chunks(b).collect();
                let before_last = blocks.len().saturating_sub(1);
                let starts = vec![e.clone(); before_last];
                let sums = self.scan_blocks_pass(&l, &blocks[..before_last], starts, lanes, None)?;
                let mut carries = Vec::with_capacity(blocks.len().max(1));
                carries.push(e);
                for s in sums {
                    let next = self.apply(&l, pair(carries[carries.len() - 1].clone(), s))?;
                    carries.push(next);
                }
                carries.truncate(blocks.len());
                let (_, mut out) = ops::ParSpan::alloc(v.len())?;
                out.resize(v.len(), Value::unit());
                self.scan_blocks_pass(&l, &blocks, carries, lanes, Some(&mut out))?;
                self.close(l);
                Value::vector(out)
            }
            Prim::Apply => {
                let x = args.take(1);
                self.apply_once(cx, base, args, 0, x)?
            }
            Prim::Map => {
                let v = tensor(args.get(1))?;
                let (mut par, mut data) = ops::ParSpan::alloc(v.len())?;
                let l = self.lambda(cx, base, args, 0)?;
                for x in &v.data {
                    data.push(self.apply(&l, x.clone())?);
                    par.next();
                }
                par.end();
                self.close(l);
                new_tensor(v.shape.clone(), data)
            }
            Prim::Map2 => {
                let (a, b) = (tensor(args.get(1))?, tensor(args.get(2))?);
                if a.shape != b.shape {
                    return Err(Fail::Here(format!(
                        "`map2` of tensors of different sizes: {} and {}",
                        fmt_size(&a.shape),
                        fmt_size(&b.shape)
                    )));
                }
                let (mut par, mut data) = ops::ParSpan::alloc(a.len())?;
                let l = self.lambda(cx, base, args, 0)?;
                for (x, y) in a.data.iter().zip(&b.data) {
                    data.push(self.apply(&l, pair(x.clone(), y.clone()))?);
                    par.next();
                }
                par.end();
                self.close(l);
                new_tensor(a.shape.clone(), data)
            }
            Prim::Index => match args.get(1) {
                Value::Tensor(t) => index(t, args.get(0))?,
                Value::Tape(buf, len) => {
                    let i = int(args.get(0))?;
                    match usize::try_from(i).ok().filter(|&k| k < *len) {
                        Some(k) => buf.borrow()[k].clone(),
                        None => {
                            return Err(Fail::Here(format!("index out of range: index {i} in a tensor of size {len}")))
                        }
                    }
                }
                Value::Sparse(s) => {
                    let idx = index_components(args.get(0))?;
                    s.element(flat_index(s.shape(), &idx)?).clone()
                }
                v => return Err(Fail::Here(format!("internal error: expected a tensor, found {}", v.kind()))),
            },
            Prim::Size => match args.get(0) {
                Value::Tape(_, len) => Value::Integer(*len as i64),
                Value::Sparse(s) => index_value_of(s.shape().iter().map(|&n| n as i64)),
                v => tensor(v)?.size_value(),
            },
            Prim::TapePush => {
                // The tape grows by one record: within the limit on elements.
                let len = match args.get(0) {
                    Value::Tape(_, len) => *len,
                    v => tensor(v)?.len(),
                };
                tensor_count(&[len.saturating_add(1)], p)?;
                Value::tape_push(args.get(0), args.get(1).clone())?
            }
            Prim::Sum => {
                let v = tensor(args.get(0))?;
                let Some((first, rest)) = v.data.split_first() else {
                    return Err(Fail::Here("`sum` of an empty tensor".to_string()));
                };
                let mut acc = first.clone();
                for x in rest {
                    add_in_place(&mut acc, x)?;
                }
                acc
            }
            Prim::Shape => ops::shape_of(args.get(0), body.ty(arg))?,
            Prim::TangentDim => Value::Integer(crate::linmap::tangent_dim(args.get(0)) as i64),
            Prim::TangentBasis => crate::linmap::tangent_basis(args.get(0), int(args.get(1))?, &mut 0),
            Prim::TangentFlatten => {
                tensor_count(&[crate::linmap::tangent_dim(args.get(0))], p)?;
                let mut xs = Vec::new();
                crate::linmap::flatten_tangent(args.get(0), &mut xs);
                count_work(xs.len());
                new_tensor(vec![xs.len()], xs.into_iter().map(Value::Float).collect())
            }
            Prim::Concat => {
                // The total size first, checked against the limit.
                let mut total = 0usize;
                for x in &tensor(args.get(0))?.data {
                    total = total.saturating_add(tensor(x)?.data.len());
                }
                let mut data = alloc_elements(tensor_count(&[total], p)?)?;
                for x in &tensor(args.get(0))?.data {
                    data.extend(tensor(x)?.data.iter().cloned());
                }
                new_tensor(vec![data.len()], data)
            }
            Prim::ConcatN => {
                // The checks and messages of the native code, which copies
                // tensor after tensor into n places.
                let shape = sizes(args.get(0), p)?;
                let n = tensor_count(&shape, p)?;
                let mut data = alloc_elements(n)?;
                for x in &tensor(args.get(1))?.data {
                    let x = tensor(x)?;
                    if data.len() + x.data.len() > n {
                        return Err(Fail::Here(format!(
                            "`$concatN` of tensors of more elements than its size (elements so far, size): {} and {n}",
                            data.len() + x.data.len()
                        )));
                    }
                    data.extend(x.data.iter().cloned());
                }
                if data.len() != n {
                    return Err(Fail::Here(format!(
                        "`$concatN` of tensors of fewer elements than its size (elements, size): {} and {n}",
                        data.len()
                    )));
                }
                new_tensor(shape, data)
            }
            Prim::Unzip => {
                let v = tensor(args.get(0))?;
                let n = match (body.ty(call), v.data.first()) {
                    (Type::Tuple(ts), _) => ts.len(),
                    (_, Some(Value::Tuple(vs))) => vs.len(),
                    _ => 0,
                };
                // Native code writes the columns in the loop that makes the
                // elements (one element's columns on each chain of the span).
                let mut par = ops::ParSpan::begin();
                count_work(v.len().saturating_mul(n));
                par.set_up(n as u64);
                let mut columns: Vec<Vec<Value>> = (0..n).map(|_| Vec::with_capacity(v.len())).collect();
                for x in &v.data {
                    match x {
                        Value::Tuple(vs) if vs.len() == n => {
                            for (col, c) in columns.iter_mut().zip(vs.iter()) {
                                col.push(c.clone());
                            }
                        }
                        _ => return Err(Fail::Here(format!("internal error: `unzip` of {}", x.kind()))),
                    }
                }
                Value::Tuple(columns.into_iter().map(|data| new_tensor(v.shape.clone(), data)).collect())
            }
            Prim::ConstVec => {
                let shape = sizes(args.get(0), p)?;
                let n = tensor_count(&shape, p)?;
                // A tensor of zeros is kept sparse (no entries), as reverse
                // mode's zero cotangents are: adding it into an accumulator
                // costs nothing, as natively, where adding a known zero is
                // skipped (the zero carries' cotangent in each step of a
                // blocked scan's reverse pass was n (m + 1) element work).
                if numeric_zero(args.get(1)) {
                    count_work(1);
                    return Ok(Value::Sparse(Rc::new(Sparse::new(shape, args.take(1), Vec::new()))));
                }
                let mut data = alloc_elements(n)?;
                data.resize(n, args.take(1));
                new_tensor(shape, data)
            }
            Prim::DeltaVec => {
                let shape = sizes(args.get(0), p)?;
                let idx = index_components(args.get(1))?;
                let v = args.take(2);
                tensor_count(&shape, p)?;
                // Sparse: one entry, or none out of range (all zeros).
                let entries = match flat_index(&shape, &idx) {
                    Ok(k) => vec![(k, v.clone())],
                    Err(_) => Vec::new(),
                };
                count_work(1);
                Value::Sparse(Rc::new(Sparse::new(shape, zero_like(&v), entries)))
            }
            Prim::Diag => {
                let (rows, cols) = (int(args.get(0))?, int(args.get(1))?);
                if rows != cols {
                    return Err(Fail::Here(format!(
                        "`diag` needs as many rows as columns, but has {rows} rows and {cols} columns"
                    )));
                }
                let n = usize::try_from(rows).map_err(|_| format!("`diag` with a negative size {rows}"))?;
                // Refuse a result too large to build before building any of it.
                tensor_count(&[n, n], p)?;
                let mut out = alloc_elements(n)?;
                let l = self.lambda(cx, base, args, 2)?;
                for i in 0..n {
                    let d = self.apply(&l, Value::Integer(i as i64))?;
                    let zero = zero_like(&d);
                    let mut row = alloc_elements(n)?;
                    row.resize(n, zero);
                    if let Some(slot) = row.get_mut(i) {
                        *slot = d;
                    }
                    out.push(Value::vector(row));
                }
                self.close(l);
                new_tensor(vec![n], out)
            }
            Prim::BuildFromSparse => {
                let elem_ty = match body.ty(call) {
                    Type::Tensor(_, e) => (**e).clone(),
                    _ => Type::Unknown,
                };
                let mut result = zeros_of_shape(args.get(0), &elem_ty)?;
                let space = sizes(args.get(1), p)?;
                let l = self.lambda(cx, base, args, 2)?;
                for k in 0..iterations(&space) {
                    let entry = self.apply(&l, index_at(k, &space))?;
                    accumulate(&mut result, &entry)?;
                }
                self.close(l);
                Value::Tensor(Rc::new(result))
            }
            Prim::BuildFromSparseTupled => {
                let shapes = match args.get(0) {
                    Value::Tuple(vs) => vs.clone(),
                    v => {
                        return Err(Fail::Here(format!(
                            "internal error: expected a tuple of shapes, found {}",
                            v.kind()
                        )))
                    }
                };
                let elem_tys: Vec<Type> = match body.ty(call) {
                    Type::Tuple(ts) => ts
                        .iter()
                        .map(|t| match t {
                            Type::Tensor(_, e) => (**e).clone(),
                            _ => Type::Unknown,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let mut results = shapes
                    .iter()
                    .enumerate()
                    .map(|(j, sh)| zeros_of_shape(sh, elem_tys.get(j).unwrap_or(&Type::Unknown)))
                    .collect::<Result<Vec<_>, _>>()?;
                let space = sizes(args.get(1), p)?;
                let l = self.lambda(cx, base, args, 2)?;
                for k in 0..iterations(&space) {
                    match self.apply(&l, index_at(k, &space))? {
                        Value::Tuple(entries) if entries.len() == results.len() => {
                            for (result, entry) in results.iter_mut().zip(entries.iter()) {
                                accumulate(result, entry)?;
                            }
                        }
                        v => {
                            return Err(Fail::Here(format!(
                                "internal error: expected a tuple of {} (index, value) pairs, found {}",
                                results.len(),
                                v.kind()
                            )))
                        }
                    }
                }
                self.close(l);
                Value::Tuple(results.into_iter().map(|t| Value::Tensor(Rc::new(t))).collect())
            }
            // A one-hot plus a tensor: the one-hot is added into the tensor
            // (in place if nothing else holds it), as native code does.
            Prim::TsAdd if matches!((args.get(0), args.get(1)), (Value::Sparse(_), Value::Tensor(_))) => {
                let one_hot = args.take(0);
                ops::ts_add(args.take(1), &one_hot)?
            }
            Prim::TsAdd => ops::ts_add(args.take(0), args.get(1))?,
            Prim::TsScale => ops::ts_scale(float(args.get(0))?, args.take(1)),
            Prim::TsDot => Value::Float(ops::ts_dot(args.get(0), args.get(1))?),
            Prim::TsNeg => ops::ts_neg(args.take(0))?,
            Prim::Eq | Prim::Ne => {
                if let Value::Tensor(t) = args.get(0) {
                    count_work(t.data.len());
                }
                Value::Bool((args.get(0) == args.get(1)) == (p == Prim::Eq))
            }
            Prim::Delta => {
                let v = args.take(2);
                if args.get(0) == args.get(1) {
                    v
                } else {
                    zero_like(&v)
                }
            }
            Prim::Trace => {
                let v = args.take(0);
                self.write(format_args!("Trace[{v}]\n"))?;
                v
            }
            Prim::Check => {
                let (x, dx, dr) = (args.take(2), args.take(3), args.take(4));
                let l = self.lambda(cx, base, args, 0)?;
                let fx = self.apply(&l, x.clone())?;
                let fx_dx = self.apply(&l, ops::ts_add(x.clone(), &dx)?)?;
                self.close(l);
                let df = ops::ts_add(fx_dx, &ops::ts_scale(-1.0, fx))?;
                let d1 = ops::ts_dot(&df, &dr)?;
                let grad = self.apply_once(cx, base, args, 1, pair(x, dr))?;
                let d2 = ops::ts_dot(&grad, &dx)?;
                Value::Float((d1 - d2).abs() / (d1.abs() + d2.abs()))
            }
            Prim::Copydown | Prim::Inline => args.take(0),
            // The checker expands both into `fold` and `build`
            // (`ksc_types::expand`); one left here is a compiler bug.
            Prim::Reduce | Prim::ScanInclusive => {
                return Err(Fail::Here(format!("internal error: `{p}` was not expanded after checking")))
            }
            Prim::Get { index, arity } => match args.take(0) {
                // An unshared tuple gives its component up.
                Value::Tuple(mut vs) if vs.len() == arity as usize && index >= 1 => {
                    let k = index as usize - 1;
                    match Rc::get_mut(&mut vs) {
                        Some(owned) if k < owned.len() => std::mem::replace(&mut owned[k], Value::moved()),
                        _ => vs
                            .get(k)
                            .cloned()
                            .ok_or_else(|| format!("internal error: `{p}` of a tuple of {} components", vs.len()))?,
                    }
                }
                v => return Err(Fail::Here(format!("internal error: `{p}` of {}", v.kind()))),
            },
            Prim::LmZero => lm(LinMap::Zero { source: args.take(0), target: args.take(1) }),
            Prim::LmOne => lm(LinMap::One(args.take(0))),
            Prim::LmScale => lm(LinMap::Scale(args.take(0), float(args.get(1))?)),
            Prim::LmScaleR => lm(LinMap::ScaleR(args.take(0))),
            Prim::LmDot => lm(LinMap::Dot(args.take(0))),
            Prim::LmAdd => lm(LinMap::Add(map_arg(args.get(0))?, map_arg(args.get(1))?)),
            Prim::LmCompose => lm(LinMap::Compose(map_arg(args.get(0))?, map_arg(args.get(1))?)),
            Prim::LmVCatV => lm(LinMap::VCatV { source: args.take(0), maps: tensor(args.get(1))? }),
            Prim::LmHCatV => lm(LinMap::HCatV { target: args.take(0), maps: tensor(args.get(1))? }),
            Prim::LmTranspose => lm(LinMap::Transpose(map_arg(args.get(0))?)),
            Prim::LmIndex => {
                let vector = args.take(1);
                // Check the index now, so a bad one fails where it is written.
                flat_position(&*tensor(&vector)?, args.get(0))?;
                lm(LinMap::Index { index: args.take(0), vector })
            }
            Prim::LmGet { index, arity } => match args.get(0) {
                Value::Tuple(vs) if vs.len() == arity as usize => {
                    lm(LinMap::Get { index: index as usize - 1, tuple: args.take(0) })
                }
                v => return Err(Fail::Here(format!("`{p}` of {}", v.kind()))),
            },
            Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks => {
                let f = self.closure_arg(cx, base, args, 1)?;
                let df = self.closure_arg(cx, base, args, 2)?;
                let kept = p.fold_map_kind().expect("a fold-like map");
                lm(LinMap::Fold { scope: args.take(0), f, df, acc: args.take(3), vector: tensor(args.get(4))?, kept })
            }
            Prim::LmApply => {
                let m = map_arg(args.get(0))?;
                m.apply(self, args.take(1)).map_err(Fail::from)?
            }
            Prim::LmApplyR => {
                let m = map_arg(args.get(1))?;
                m.apply_r(self, args.take(0)).map_err(Fail::from)?
            }
            Prim::Print | Prim::VecInit | Prim::LmVCat | Prim::LmHCat => {
                return Err(Fail::Here(format!("internal error: `{p}`")))
            }
        })
    }

    /// One pass of `$scanBlocks` over `blocks`, each from its start: whole
    /// blocks in groups of `lanes` advancing together
    /// (`ksc_ir::prim::lane_rounds`), the rest one at a time
    /// (`ksc_ir::prim::SCAN_LANES`). Each block's
    /// result; with `out`, each step's accumulator at its element's index.
    fn scan_blocks_pass(
        &mut self,
        l: &Lambda<'p, 'a>,
        blocks: &[&[Value]],
        mut accs: Vec<Value>,
        lanes: usize,
        mut out: Option<&mut Vec<Value>>,
    ) -> Result<Vec<Value>, Fail> {
        let b = ksc_ir::prim::REDUCE_BLOCK as usize;
        let whole = blocks.iter().take_while(|x| x.len() == b).count();
        let grouped = if lanes > 1 { whole / lanes * lanes } else { 0 };
        // The blocks are independent: on the span, each is its own chain
        // of steps, and the pass ends with the longest.
        let start = ops::span_done();
        let mut chains = vec![0u64; blocks.len()];
        let mut step = |this: &mut Self, accs: &mut [Value], k: usize, j: usize| -> Result<(), Fail> {
            let acc = std::mem::replace(&mut accs[k], Value::unit());
            accs[k] = this.apply(l, pair(acc, blocks[k][j].clone()))?;
            if let Some(out) = out.as_deref_mut() {
                out[k * b + j] = accs[k].clone();
            }
            chains[k] += ops::span_done().wrapping_sub(start);
            ops::set_span(start);
            Ok(())
        };
        for g in (0..grouped).step_by(lanes.max(1)) {
            for r in 0..ksc_ir::prim::lane_rounds(lanes as i64) {
                for l in 0..lanes {
                    if let Some(j) = ksc_ir::prim::lane_step(r, l as i64) {
                        step(self, &mut accs, g + l, j as usize)?;
                    }
                }
            }
        }
        for (k, block) in blocks.iter().enumerate().skip(grouped) {
            for j in 0..block.len() {
                step(self, &mut accs, k, j)?;
            }
        }
        ops::set_span(start.wrapping_add(chains.into_iter().max().unwrap_or(0)));
        Ok(accs)
    }

    /// `print a b c`: evaluates and writes each argument in turn.
    fn print(&mut self, cx: &'p Compiled<'a>, base: usize, call: ExprId, arg: ExprId) -> R<Value> {
        let parts = cx.def.body.call_args(arg);
        for &c in &parts {
            let v = self.eval(cx, base, c, false)?;
            // Printed as its elements: a one-hot made dense, within the
            // limit on memory.
            let v = self.at(cx, call, v.try_densified())?;
            let r = self.write(format_args!("{v}"));
            self.at(cx, call, r)?;
        }
        Ok(Value::Integer(parts.len() as i64 - 1))
    }

    fn write(&mut self, text: std::fmt::Arguments) -> Result<(), String> {
        self.out.write_fmt(text).map_err(|e| format!("cannot write the output: {e}"))
    }
}

/// A failure inside a primitive: a message about the primitive call itself,
/// or an error from inside a lambda, which has its own location.
enum Fail {
    Here(String),
    Inner(Box<crate::RuntimeError>),
}

impl From<String> for Fail {
    fn from(m: String) -> Fail {
        Fail::Here(m)
    }
}

impl From<LmFail> for Fail {
    fn from(e: LmFail) -> Fail {
        match e {
            LmFail::Here(m) => Fail::Here(m),
            LmFail::Inner(e) => Fail::Inner(e),
        }
    }
}

fn lm(m: LinMap) -> Value {
    Value::LinMap(Rc::new(m))
}

fn map_arg(v: &Value) -> Result<Rc<LinMap>, String> {
    match v {
        Value::LinMap(m) => Ok(m.clone()),
        v => Err(format!("internal error: expected a linear map, found {}", v.kind())),
    }
}

impl<'p, 'a, 'o> Machine<'p, 'a, 'o> {
    /// Argument `i` as a closure value (a written lambda is closed over the
    /// current frame).
    fn closure_arg(
        &mut self,
        cx: &'p Compiled<'a>,
        base: usize,
        args: &PrimArgs,
        i: usize,
    ) -> Result<Rc<Closure>, Fail> {
        let v = match args.lams.get(i).copied().flatten() {
            Some(lam) => self.make_closure(cx, base, lam)?,
            None => args.get(i).clone(),
        };
        match v {
            Value::Closure(c) => Ok(c),
            v => Err(Fail::Here(format!("internal error: expected a lambda, found {}", v.kind()))),
        }
    }
}

impl CallClosure for Machine<'_, '_, '_> {
    fn call_closure(&mut self, c: &Closure, arg: Value) -> Result<Value, LmFail> {
        let Some(l) = self.open_closure(c) else {
            return Err(LmFail::Here("internal error: a lambda out of its scope".to_string()));
        };
        let r = self.apply(&l, arg);
        self.close(l);
        r.map_err(LmFail::Inner)
    }
}

impl From<Box<crate::RuntimeError>> for Fail {
    fn from(e: Box<crate::RuntimeError>) -> Fail {
        Fail::Inner(e)
    }
}

/// The zero-initialised result of `buildFromSparse`: a tensor shaped like the
/// shape tensor `sh`, each element a zero of `elem_ty` of the element's shape.
fn zeros_of_shape(sh: &Value, elem_ty: &Type) -> Result<Tensor, String> {
    let sh = tensor(sh)?;
    Ok(Tensor { shape: sh.shape.clone(), data: sh.data.iter().map(|s| zero_from_shape(s, elem_ty)).collect() })
}

/// Adds one `(index, value)` entry of `buildFromSparse` into the result.
fn accumulate(result: &mut Tensor, entry: &Value) -> Result<(), String> {
    let Value::Tuple(pair) = entry else {
        return Err(format!("internal error: expected an (index, value) pair, found {}", entry.kind()));
    };
    let [i, v] = &pair[..] else {
        return Err(format!("internal error: expected an (index, value) pair, found {} components", pair.len()));
    };
    let k = result.flat_index(&index_components(i)?)?;
    match result.data.get_mut(k) {
        Some(slot) => add_in_place(slot, v),
        None => Err("internal error: malformed tensor".to_string()),
    }
}

/// Is `v` a numeric zero: a Float `0.0` or `-0.0`, an Integer 0, or a
/// tuple of them? Not `()` (tensors of units are shapes, which
/// `buildFromSparse` reads) and not a tensor (a sparse tensor stays at the
/// top of a value, never an element of a dense one).
fn numeric_zero(v: &Value) -> bool {
    match v {
        Value::Float(x) => *x == 0.0,
        Value::Integer(i) => *i == 0,
        Value::Tuple(xs) => !xs.is_empty() && xs.iter().all(numeric_zero),
        _ => false,
    }
}
