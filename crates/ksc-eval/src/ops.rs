//! Value-level operations shared by the primitives: the tangent-space
//! arithmetic (`ts_add`, `ts_scale`, `ts_dot`, `ts_neg`), zeros, defaults and
//! shapes. They report failures as plain messages; the evaluator attaches the
//! location.

use std::rc::Rc;

use ksc_ir::Type;

use crate::value::{fmt_size, Sparse, Tensor, Value};

pub(crate) const OVERFLOW: &str = "integer overflow";

thread_local! {
    /// Element work done on this thread (see `Interpreter::operations`).
    static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `n` units of element work: elements made, copied or combined.
pub(crate) fn count_work(n: usize) {
    WORK.with(|w| w.set(w.get().wrapping_add(n as u64)));
    count_span(n as u64);
}

thread_local! {
    /// The span on this thread: the operations and element work on the
    /// longest chain of dependent steps so far (see `Interpreter::span`).
    static SPAN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `n` steps on the current chain (the calls the machine counts;
/// element work counts itself).
pub(crate) fn count_span(n: u64) {
    SPAN.with(|s| s.set(s.get().wrapping_add(n)));
}

/// The span so far (wrapping: compare two readings with `wrapping_sub`).
pub(crate) fn span_done() -> u64 {
    SPAN.with(|s| s.get())
}

/// Sets the span (to a reading of [`span_done`]).
pub(crate) fn set_span(to: u64) {
    SPAN.with(|s| s.set(to));
}

/// A loop whose iterations are independent, for the span: every iteration
/// starts where the loop started, and the loop ends where its longest
/// iteration ended. The loops that native code may run on a team
/// (`build`, `map`, the passes of `$scanBlocks` over blocks) are counted
/// so; everything else (sums, folds, the carries between blocks) is a
/// chain. Taking back work (`uncount_work`) does not shorten the span, so
/// the span is an upper bound.
pub(crate) struct ParSpan {
    start: u64,
    longest: u64,
}

impl ParSpan {
    /// Starts the loop at the current span.
    pub(crate) fn begin() -> ParSpan {
        let s = span_done();
        ParSpan { start: s, longest: s }
    }

    /// Allocates the loop's result of `n` elements ([`alloc_elements`]),
    /// which counts as one step on the chain (its elements are made by the
    /// iterations), and starts the loop after it.
    pub(crate) fn alloc(n: usize) -> Result<(ParSpan, Vec<Value>), String> {
        let mut par = ParSpan::begin();
        let data = alloc_elements(n)?;
        par.set_up(1);
        Ok((par, data))
    }

    /// Counts what ran since `begin` (the allocation of the result,
    /// whose size counts as work) as `steps` on the chain instead.
    pub(crate) fn set_up(&mut self, steps: u64) {
        self.start = self.start.wrapping_add(steps);
        self.longest = self.start;
        set_span(self.start);
    }

    /// Ends an iteration: keeps its end if it is the latest, and starts the
    /// next one where the loop started.
    pub(crate) fn next(&mut self) {
        let s = span_done();
        if s.wrapping_sub(self.start) > self.longest.wrapping_sub(self.start) {
            self.longest = s;
        }
        set_span(self.start);
    }

    /// Ends the loop where its longest iteration ended.
    pub(crate) fn end(mut self) {
        self.next();
        set_span(self.longest);
    }
}

/// Takes back `n` units of element work counted before (see `count_loads`).
pub(crate) fn uncount_work(n: usize) {
    WORK.with(|w| w.set(w.get().wrapping_sub(n as u64)));
}

/// The element work done on this thread so far (wrapping: compare two
/// readings with `wrapping_sub`).
pub(crate) fn work_done() -> u64 {
    WORK.with(|w| w.get())
}

thread_local! {
    /// The reading of [`work_done`] past which applying a linear map gives
    /// up (`Interpreter::structural_pattern`), if any.
    static WORK_LIMIT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with linear-map application limited to `budget` more units
/// of work ([`over_work_limit`]).
pub(crate) fn with_work_limit<T>(budget: u64, f: impl FnOnce() -> T) -> T {
    let before = WORK_LIMIT.with(|l| l.replace(Some(work_done().saturating_add(budget))));
    let out = f();
    WORK_LIMIT.with(|l| l.set(before));
    out
}

/// Has the work done passed the limit [`with_work_limit`] set?
pub(crate) fn over_work_limit() -> bool {
    WORK_LIMIT.with(|l| l.get()).is_some_and(|limit| work_done() > limit)
}

/// The tensor to write into: `t` itself when nothing else holds it, else a
/// copy (counted).
fn tensor_mut(t: &mut Rc<Tensor>) -> &mut Tensor {
    if Rc::strong_count(t) > 1 {
        count_work(t.data.len());
    }
    Rc::make_mut(t)
}

/// Reserves room for `n` elements, or explains why it cannot. Sizes given
/// to primitives are checked against the limit on a tensor's elements
/// first (`prims::tensor_count`); this only turns a failing allocation
/// into an error instead of an abort, and keeps the heap within the limit
/// on memory (`ksc_ir::limits::check_memory`).
pub(crate) fn alloc_elements(n: usize) -> Result<Vec<Value>, String> {
    count_work(n);
    ksc_ir::limits::check_memory(n, n.saturating_mul(std::mem::size_of::<Value>()))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| format!("out of memory allocating a tensor of {n} elements"))?;
    Ok(v)
}

/// `ts_add a b`: adds `b` to `a` in place, elementwise through tuples and
/// tensors. A unit operand on either side is the identity (a tangent of a
/// discrete value); Integers add (checked); other discrete values keep `a`.
/// Shared parts of `a` are copied on write.
pub(crate) fn add_in_place(a: &mut Value, b: &Value) -> Result<(), String> {
    if b.is_unit() {
        return Ok(());
    }
    if a.is_unit() {
        *a = b.clone();
        return Ok(());
    }
    if let Value::Tape(..) = b {
        return add_in_place(a, &b.dense());
    }
    if let Value::Tape(..) = a {
        *a = a.dense();
    }
    if let Value::Sparse(xs) = a {
        // A sum of one-hots stays sparse while it may have at most half as
        // many entries as elements, and while what is added to it is not
        // much smaller than it (an accumulator of one-hots, which would be
        // merged anew for each, is made dense once and added into in
        // place); past that, or added a dense tensor, it is made dense.
        if let Value::Sparse(ys) = b {
            same_size(&xs.shape, &ys.shape)?;
            let (m, k) = (xs.entries.len(), ys.entries.len());
            // One-hots added in increasing order (a sum over a range of
            // positions, as reverse mode's of a slice): appended in place,
            // while the sum is not shared and stays sparse.
            let after = match (xs.entries.last(), ys.entries.first()) {
                (Some((last, _)), Some((first, _))) => first > last,
                _ => true,
            };
            if after && is_zero(&ys.fill) && 2 * (m + k) <= xs.len() {
                if let Some(x) = Rc::get_mut(xs) {
                    count_work(k);
                    for (i, y) in &ys.entries {
                        let mut v = x.fill.clone();
                        add_in_place(&mut v, y)?;
                        x.entries.push((*i, v));
                    }
                    return Ok(());
                }
            }
            let accumulating = m > 16 && 8 * k < m;
            if 2 * (m + k) <= xs.len() && !accumulating {
                count_work(xs.entries.len() + ys.entries.len());
                *a = Value::Sparse(Rc::new(xs.plus(ys)?));
                return Ok(());
            }
        }
        *a = Value::Tensor(Rc::new(xs.to_dense()?));
    }
    if let Value::Sparse(ys) = b {
        if !is_zero(&ys.fill) {
            return add_in_place(a, &b.try_dense()?);
        }
    }
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => *x += y,
        (Value::Integer(x), Value::Integer(y)) => *x = x.checked_add(*y).ok_or(OVERFLOW)?,
        (Value::Bool(_), Value::Bool(_)) | (Value::String(_), Value::String(_)) => {}
        (Value::Tuple(xs), Value::Tuple(ys)) => {
            if xs.len() != ys.len() {
                return Err(format!("`ts_add` of tuples of {} and {} components", xs.len(), ys.len()));
            }
            for (x, y) in Rc::make_mut(xs).iter_mut().zip(ys.iter()) {
                add_in_place(x, y)?;
            }
        }
        (Value::Tensor(xt), Value::Tensor(yt)) => {
            xt.check()?;
            yt.check()?;
            if xt.shape != yt.shape {
                return Err(format!(
                    "`ts_add` of tensors of different sizes: {} and {}",
                    fmt_size(&xt.shape),
                    fmt_size(&yt.shape)
                ));
            }
            count_work(yt.data.len());
            for (x, y) in tensor_mut(xt).data.iter_mut().zip(&yt.data) {
                add_in_place(x, y)?;
            }
        }
        (Value::Tensor(xt), Value::Sparse(ys)) => {
            xt.check()?;
            same_size(&xt.shape, &ys.shape)?;
            // Adding zeros leaves an element as it is (a -0.0 too, as native
            // code, which adds a one-hot in place, leaves it).
            let xt = tensor_mut(xt);
            count_work(ys.entries.len());
            for (k, y) in &ys.entries {
                add_in_place(&mut xt.data[*k], y)?;
            }
        }
        (a, b) => return Err(format!("`ts_add` cannot add {} to {}", b.kind(), a.kind())),
    }
    Ok(())
}

/// Is `v` a zero (every Float `0.0` or `-0.0`, every Integer 0)?
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Float(x) => *x == 0.0,
        Value::Integer(i) => *i == 0,
        Value::Tuple(xs) => xs.iter().all(is_zero),
        Value::Tensor(t) => t.data.iter().all(is_zero),
        _ => true,
    }
}

fn same_size(a: &[usize], b: &[usize]) -> Result<(), String> {
    if a == b {
        Ok(())
    } else {
        Err(format!("`ts_add` of tensors of different sizes: {} and {}", fmt_size(a), fmt_size(b)))
    }
}

/// `ts_add a b`, reusing `a`'s storage when it is not shared.
// pub for the integration tests (tests/properties.rs), through `crate::testing`.
pub fn ts_add(mut a: Value, b: &Value) -> Result<Value, String> {
    add_in_place(&mut a, b)?;
    Ok(a)
}

/// `ts_scale k v`: multiplies every Float inside `v` by `k`; discrete values
/// are unchanged.
// pub for the integration tests (tests/properties.rs), through `crate::testing`.
pub fn ts_scale(k: f64, mut v: Value) -> Value {
    scale_in_place(k, &mut v);
    v
}

fn scale_in_place(k: f64, v: &mut Value) {
    match v {
        Value::Float(x) => *x *= k,
        Value::Tuple(xs) => Rc::make_mut(xs).iter_mut().for_each(|x| scale_in_place(k, x)),
        Value::Tensor(t) => {
            count_work(t.data.len());
            tensor_mut(t).data.iter_mut().for_each(|x| scale_in_place(k, x))
        }
        Value::Sparse(s) => {
            count_work(s.entries.len());
            let s = sparse_mut(s);
            s.entries.iter_mut().for_each(|(_, x)| scale_in_place(k, x));
            scale_in_place(k, &mut s.fill)
        }
        Value::Tape(..) => {
            *v = v.dense();
            scale_in_place(k, v)
        }
        _ => {}
    }
}

/// The sparse tensor to write into: `s` itself when nothing else holds it,
/// else a copy (counted).
fn sparse_mut(s: &mut Rc<Sparse>) -> &mut Sparse {
    if Rc::strong_count(s) > 1 {
        count_work(s.entries.len());
    }
    Rc::make_mut(s)
}

/// `ts_neg v`: negates every Float and Integer inside `v`.
pub(crate) fn ts_neg(mut v: Value) -> Result<Value, String> {
    neg_in_place(&mut v)?;
    Ok(v)
}

fn neg_in_place(v: &mut Value) -> Result<(), String> {
    match v {
        Value::Float(x) => *x = -*x,
        Value::Integer(i) => *i = i.checked_neg().ok_or(OVERFLOW)?,
        Value::Tuple(xs) => Rc::make_mut(xs).iter_mut().try_for_each(neg_in_place)?,
        Value::Tensor(t) => {
            count_work(t.data.len());
            tensor_mut(t).data.iter_mut().try_for_each(neg_in_place)?
        }
        Value::Sparse(s) => {
            count_work(s.entries.len());
            let s = sparse_mut(s);
            s.entries.iter_mut().try_for_each(|(_, x)| neg_in_place(x))?;
            neg_in_place(&mut s.fill)?
        }
        Value::Tape(..) => {
            *v = v.dense();
            neg_in_place(v)?
        }
        _ => {}
    }
    Ok(())
}

/// `ts_dot a b`: the sum of the products of corresponding Float leaves, left
/// to right. Discrete leaves contribute 0, and so does a unit on either side.
// pub for the integration tests (tests/properties.rs), through `crate::testing`.
pub fn ts_dot(a: &Value, b: &Value) -> Result<f64, String> {
    Ok(match (a, b) {
        (Value::Float(x), Value::Float(y)) => x * y,
        // Over every element in order, as native code sums (an infinite
        // element times a zero is NaN).
        (Value::Sparse(_) | Value::Tape(..), _) => ts_dot(&a.try_dense()?, b)?,
        (_, Value::Sparse(_) | Value::Tape(..)) => ts_dot(a, &b.try_dense()?)?,
        (Value::Tuple(xs), Value::Tuple(ys)) if xs.is_empty() || ys.is_empty() => 0.0,
        (Value::Tuple(xs), Value::Tuple(ys)) => {
            if xs.len() != ys.len() {
                return Err(format!("`ts_dot` of tuples of {} and {} components", xs.len(), ys.len()));
            }
            let mut sum = 0.0;
            for (x, y) in xs.iter().zip(ys.iter()) {
                sum += ts_dot(x, y)?;
            }
            sum
        }
        (Value::Tensor(xt), Value::Tensor(yt)) => {
            xt.check()?;
            yt.check()?;
            if xt.shape != yt.shape {
                return Err(format!(
                    "`ts_dot` of tensors of different sizes: {} and {}",
                    fmt_size(&xt.shape),
                    fmt_size(&yt.shape)
                ));
            }
            count_work(xt.data.len());
            let mut sum = 0.0;
            for (x, y) in xt.data.iter().zip(&yt.data) {
                sum += ts_dot(x, y)?;
            }
            sum
        }
        _ => 0.0,
    })
}

/// A zero shaped like `v`: 0.0 for Floats, 0 for Integers, `false`, `""`,
/// tuples and tensors of zeros of the same structure.
pub fn zero_like(v: &Value) -> Value {
    match v {
        Value::Float(_) => Value::Float(0.0),
        Value::Integer(_) => Value::Integer(0),
        Value::Bool(_) => Value::Bool(false),
        Value::String(_) => Value::string(""),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(zero_like).collect()),
        Value::Tensor(t) => {
            count_work(t.data.len());
            Value::Tensor(Rc::new(Tensor { shape: t.shape.clone(), data: t.data.iter().map(zero_like).collect() }))
        }
        Value::Closure(_) | Value::LinMap(_) => v.clone(),
        Value::Tape(..) => zero_like(&v.dense()),
        // A sparse zero: no entries.
        Value::Sparse(s) => Value::Sparse(Rc::new(Sparse::new(s.shape.clone(), zero_like(&s.fill), Vec::new()))),
    }
}

/// `$dummy T`: the default value of a type (empty tensors of the right rank).
pub fn dummy(ty: &Type) -> Result<Value, String> {
    Ok(match ty {
        Type::Integer => Value::Integer(0),
        Type::Float => Value::Float(0.0),
        Type::Bool => Value::Bool(false),
        Type::String => Value::string(""),
        Type::Tuple(ts) => Value::Tuple(ts.iter().map(dummy).collect::<Result<_, _>>()?),
        Type::Tensor(rank, _) => Value::Tensor(Rc::new(Tensor { shape: vec![0; (*rank).max(1)], data: Vec::new() })),
        Type::Lam(..) | Type::LM(..) | Type::Unknown => {
            return Err(format!("there is no default value of type `{ty}`"))
        }
    })
}

/// The best type we can tell from a value alone, for the rare expression
/// whose static type is unknown. Elements of empty tensors are `Unknown`.
fn type_of_value(v: &Value) -> Type {
    match v {
        Value::Integer(_) => Type::Integer,
        Value::Float(_) => Type::Float,
        Value::Bool(_) => Type::Bool,
        Value::String(_) => Type::String,
        Value::Tuple(xs) => Type::Tuple(xs.iter().map(type_of_value).collect()),
        Value::Tensor(t) => Type::tensor(t.rank(), t.data.first().map(type_of_value).unwrap_or(Type::Unknown)),
        Value::Closure(_) | Value::LinMap(_) => Type::Unknown,
        Value::Tape(..) => type_of_value(&v.dense()),
        Value::Sparse(s) => Type::tensor(s.shape.len(), type_of_value(&s.fill)),
    }
}

/// `shape x`, the compressed shape (knossos-reference.md 5.6), directed by
/// the static type of `x`: scalars and tuples of scalars give `()`; a tensor
/// of elements with trivial shape gives its size; otherwise the structure is
/// kept (tuples component-wise, tensors mapped).
pub(crate) fn shape_of(v: &Value, ty: &Type) -> Result<Value, String> {
    if ty.contains_unknown() {
        // Only for ill-typed input: guess from the value (`Unknown` element
        // types of empty tensors count as trivial).
        return shape_known(v, &type_of_value(v));
    }
    shape_known(v, ty)
}

fn shape_known(v: &Value, ty: &Type) -> Result<Value, String> {
    if ty.shape_is_trivial() {
        return Ok(Value::unit());
    }
    if let Value::Tape(..) | Value::Sparse(_) = v {
        return shape_known(&v.try_dense()?, ty);
    }
    match (ty, v) {
        (Type::Tuple(ts), Value::Tuple(xs)) if ts.len() == xs.len() => {
            Ok(Value::Tuple(xs.iter().zip(ts).map(|(x, t)| shape_known(x, t)).collect::<Result<_, _>>()?))
        }
        (Type::Tensor(_, e), Value::Tensor(t)) if e.shape_is_trivial() => {
            t.check()?;
            Ok(t.size_value())
        }
        (Type::Tensor(_, e), Value::Tensor(t)) => {
            t.check()?;
            let data = t.data.iter().map(|x| shape_known(x, e)).collect::<Result<_, _>>()?;
            Ok(Value::Tensor(Rc::new(Tensor { shape: t.shape.clone(), data })))
        }
        _ => Err(format!("`shape` of {} whose type is `{ty}`", v.kind())),
    }
}

/// The zero of type `ty` whose uncompressed shape is `sh` (scalars have shape
/// `()`, tuples a tuple of shapes, tensors a tensor of shapes), for
/// `buildFromSparse`.
pub fn zero_from_shape(sh: &Value, ty: &Type) -> Value {
    match (ty, sh) {
        (Type::Float, _) => Value::Float(0.0),
        (Type::Integer, _) => Value::Integer(0),
        (Type::Bool, _) => Value::Bool(false),
        (Type::String, _) => Value::string(""),
        (Type::Tuple(ts), Value::Tuple(ss)) if ts.len() == ss.len() => {
            Value::Tuple(ss.iter().zip(ts).map(|(s, t)| zero_from_shape(s, t)).collect())
        }
        (Type::Tuple(ts), _) => Value::Tuple(ts.iter().map(|t| zero_from_shape(&Value::unit(), t)).collect()),
        (Type::Tensor(_, e), Value::Tensor(st)) => Value::Tensor(Rc::new(Tensor {
            shape: st.shape.clone(),
            data: st.data.iter().map(|s| zero_from_shape(s, e)).collect(),
        })),
        (Type::Tensor(rank, _), _) => {
            Value::Tensor(Rc::new(Tensor { shape: vec![0; (*rank).max(1)], data: Vec::new() }))
        }
        // Unknown static type: follow the shape value, scalars being Floats.
        (_, Value::Tuple(ss)) if !ss.is_empty() => {
            Value::Tuple(ss.iter().map(|s| zero_from_shape(s, &Type::Unknown)).collect())
        }
        (_, Value::Tensor(st)) => Value::Tensor(Rc::new(Tensor {
            shape: st.shape.clone(),
            data: st.data.iter().map(|s| zero_from_shape(s, &Type::Unknown)).collect(),
        })),
        _ => Value::Float(0.0),
    }
}
