//! Run-time values and their print format (knossos-reference.md 7.7).

use std::fmt;
use std::rc::Rc;

use ksc_ir::ExprId;

/// A run-time value. Compound values are reference-counted and immutable
/// (copy on write), so cloning a value is cheap.
#[derive(Clone, Debug)]
pub enum Value {
    Integer(i64),
    Float(f64),
    Bool(bool),
    String(Rc<str>),
    /// A tuple; `()` (unit) is the empty tuple.
    Tuple(Rc<[Value]>),
    Tensor(Rc<Tensor>),
    /// A lambda with its captured environment.
    Closure(Rc<Closure>),
    /// A linear map (see `linmap.rs`).
    LinMap(Rc<crate::linmap::LinMap>),
    /// A vector made by `$tapePush`: the first `len` elements of a buffer
    /// shared by the versions of one tape. Appending to the latest version
    /// (`len` is the buffer's length) pushes in place; any other version
    /// copies its prefix first, so every version keeps its elements. Every
    /// operation but `$tapePush`, `index` and `size` sees it as the
    /// vector of its elements (`Value::dense`).
    Tape(Rc<std::cell::RefCell<Vec<Value>>>, usize),
    /// A tensor that is zero but for a few entries: a `deltaVec` (one-hot)
    /// and sums of them, whose cost is that of their entries, as in native
    /// code, which adds them into its accumulator in place. `ts_add`,
    /// `ts_scale`, `ts_neg`, `index` and `size` work on the entries; every
    /// other operation sees the dense tensor (`Value::try_dense`), and no
    /// value leaves the interpreter sparse.
    Sparse(Rc<Sparse>),
}

/// The value of a [`Value::Sparse`]: a tensor of `shape` whose elements
/// are `fill` (a zero, negated or scaled as the dense tensor's zeros would
/// be) but at the flat positions of `entries`, where they are the entries'
/// values. Invariants: positions are in range and strictly increasing,
/// values are shaped like `fill`, and there are at most half as many
/// entries as elements (a larger sum is made dense).
#[derive(Clone, Debug)]
pub struct Sparse {
    pub(crate) shape: Vec<usize>,
    pub(crate) fill: Value,
    pub(crate) entries: Vec<(usize, Value)>,
}

impl Sparse {
    pub(crate) fn new(shape: Vec<usize>, fill: Value, entries: Vec<(usize, Value)>) -> Sparse {
        Sparse { shape, fill, entries }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements of the dense tensor.
    pub fn len(&self) -> usize {
        num_elements(&self.shape).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dense tensor (one unit of work per element), or the error of
    /// an allocation past the limit on memory.
    pub fn to_dense(&self) -> Result<Tensor, String> {
        let n = self.len();
        let mut data = crate::ops::alloc_elements(n)?;
        data.resize(n, self.fill.clone());
        Ok(self.filled(data))
    }

    /// `data` (the fill, `len` times) with the entries written in.
    fn filled(&self, mut data: Vec<Value>) -> Tensor {
        for (k, v) in &self.entries {
            data[*k] = v.clone();
        }
        Tensor { shape: self.shape.clone(), data }
    }

    /// The element at flat position `k` (in range).
    pub(crate) fn element(&self, k: usize) -> &Value {
        crate::ops::count_work(1);
        match self.entries.binary_search_by_key(&k, |(j, _)| *j) {
            Ok(i) => &self.entries[i].1,
            Err(_) => &self.fill,
        }
    }

    /// The elementwise sum, as of the dense tensors: the fills add, and so
    /// do the elements at each position listed on either side (a merge of
    /// the two lists). The shapes must be equal.
    pub(crate) fn plus(&self, other: &Sparse) -> Result<Sparse, String> {
        let add = |x: &Value, y: &Value| -> Result<Value, String> {
            let mut v = x.clone();
            crate::ops::add_in_place(&mut v, y)?;
            Ok(v)
        };
        let (xs, ys) = (&self.entries, &other.entries);
        let mut entries = Vec::with_capacity(xs.len() + ys.len());
        let (mut i, mut j) = (0, 0);
        while i < xs.len() || j < ys.len() {
            let (kx, ky) = (xs.get(i).map_or(usize::MAX, |e| e.0), ys.get(j).map_or(usize::MAX, |e| e.0));
            let k = kx.min(ky);
            let x = if kx == k { &xs[i].1 } else { &self.fill };
            let y = if ky == k { &ys[j].1 } else { &other.fill };
            entries.push((k, add(x, y)?));
            i += usize::from(kx == k);
            j += usize::from(ky == k);
        }
        Ok(Sparse { shape: self.shape.clone(), fill: add(&self.fill, &other.fill)?, entries })
    }
}

/// A tensor of rank `shape.len() >= 1`, elements stored row-major (last index
/// fastest). Tensors of tensors are ragged: their elements are `Tensor` values
/// of possibly different sizes.
///
/// Invariant: `data.len()` is the product of `shape`. Every operation checks
/// it where it matters, so a malformed tensor built by hand gives an error,
/// never a panic.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<Value>,
}

/// A lambda value: the lambda expression (in the body of a definition of the
/// interpreter that made it) and the values of the variables in scope there.
#[derive(Debug)]
pub struct Closure {
    /// Index of the definition whose body contains the lambda.
    pub(crate) def: u32,
    /// The `Lam` expression.
    pub(crate) lam: ExprId,
    /// The enclosing frame, slot by slot.
    pub(crate) env: Vec<Value>,
}

impl Tensor {
    /// A rank-1 tensor.
    pub fn vector(data: Vec<Value>) -> Tensor {
        Tensor { shape: vec![data.len()], data }
    }

    /// A tensor of the given shape, if `data` has the right number of elements.
    pub fn new(shape: Vec<usize>, data: Vec<Value>) -> Option<Tensor> {
        (!shape.is_empty() && num_elements(&shape) == Some(data.len())).then_some(Tensor { shape, data })
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Checks the invariant `data.len() == product(shape)`.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.shape.is_empty() && num_elements(&self.shape) == Some(self.data.len()) {
            Ok(())
        } else {
            Err(format!("malformed tensor: shape {} but {} elements", fmt_size(&self.shape), self.data.len()))
        }
    }

    /// The size as a value: `Integer` for rank 1, a tuple of Integers otherwise.
    pub fn size_value(&self) -> Value {
        index_value_of(self.shape.iter().map(|&n| n as i64))
    }

    /// The row-major position of a multi-index, bounds-checked.
    pub fn flat_index(&self, idx: &[i64]) -> Result<usize, String> {
        self.check()?;
        flat_index(&self.shape, idx)
    }
}

/// The row-major position of a multi-index in a tensor of this shape,
/// bounds-checked.
pub(crate) fn flat_index(shape: &[usize], idx: &[i64]) -> Result<usize, String> {
    if idx.len() != shape.len() {
        return Err(format!("an index of rank {} used on a tensor of rank {}", idx.len(), shape.len()));
    }
    let mut flat = 0usize;
    for (&i, &n) in idx.iter().zip(shape) {
        match usize::try_from(i) {
            Ok(i) if i < n => flat = flat * n + i,
            _ => {
                return Err(format!(
                    "index out of range: index {} in a tensor of size {}",
                    fmt_index(idx),
                    fmt_size(shape)
                ))
            }
        }
    }
    Ok(flat)
}

/// The number of elements of a tensor of this shape, if it fits in `usize`.
pub(crate) fn num_elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n))
}

/// An index or size as written in `.ks`: `3` or `(2,3)`.
pub fn fmt_index(idx: &[i64]) -> String {
    match idx {
        [i] => i.to_string(),
        _ => format!("({})", idx.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
    }
}

pub fn fmt_size(shape: &[usize]) -> String {
    fmt_index(&shape.iter().map(|&n| n as i64).collect::<Vec<_>>())
}

/// An index value: `Integer` for rank 1, a tuple of Integers otherwise.
pub(crate) fn index_value_of(mut components: impl ExactSizeIterator<Item = i64>) -> Value {
    if components.len() == 1 {
        Value::Integer(components.next().unwrap_or(0))
    } else {
        Value::Tuple(components.map(Value::Integer).collect())
    }
}

impl Value {
    /// The unit value `()`.
    pub fn unit() -> Value {
        Value::Tuple(Rc::from(Vec::new()))
    }

    /// What a variable's slot holds once its value has moved out (after
    /// its last use): a value no operation takes for another, so a wrong
    /// read would be an error, not a silent unit.
    pub(crate) fn moved() -> Value {
        Value::String(Rc::from("<moved>"))
    }

    pub fn tuple(components: Vec<Value>) -> Value {
        Value::Tuple(Rc::from(components))
    }

    /// A rank-1 tensor of these elements.
    pub fn vector(elements: Vec<Value>) -> Value {
        Value::Tensor(Rc::new(Tensor::vector(elements)))
    }

    pub fn string(s: &str) -> Value {
        Value::String(Rc::from(s))
    }

    /// A tape or a sparse tensor as the tensor of its elements (a copy,
    /// counted as work); other values as they are. Making a sparse tensor
    /// dense fails past the limit on memory.
    pub fn try_dense(&self) -> Result<Value, String> {
        match self {
            Value::Sparse(s) => Ok(Value::Tensor(Rc::new(s.to_dense()?))),
            v => Ok(v.dense()),
        }
    }

    /// [`Value::try_dense`] where no error can be reported (printing,
    /// equality, what leaves the interpreter): past the limit on memory,
    /// the tensor is allocated all the same (its number of elements was
    /// checked against the limit on elements when it was made).
    pub fn dense(&self) -> Value {
        match self {
            Value::Tape(buf, len) => {
                crate::ops::count_work(*len);
                Value::Tensor(Rc::new(Tensor::vector(buf.borrow()[..*len].to_vec())))
            }
            Value::Sparse(s) => Value::Tensor(Rc::new(s.to_dense().unwrap_or_else(|_| {
                crate::ops::count_work(s.len());
                s.filled(vec![s.fill.clone(); s.len()])
            }))),
            v => v.clone(),
        }
    }

    /// The value with every sparse tensor and tape inside it made dense:
    /// what leaves the interpreter, and what native functions are given
    /// ([`Value::dense`] of each).
    pub fn densified(self) -> Value {
        self.densify_with(&|v| Ok(v.dense())).unwrap_or_else(|_| unreachable!("`dense` cannot fail"))
    }

    /// [`Value::densified`] within the limit on memory ([`Value::try_dense`]
    /// of each): what `print` writes.
    pub fn try_densified(self) -> Result<Value, String> {
        self.densify_with(&Value::try_dense)
    }

    fn densify_with(self, dense: &dyn Fn(&Value) -> Result<Value, String>) -> Result<Value, String> {
        fn has_sparse(v: &Value) -> bool {
            match v {
                Value::Sparse(_) | Value::Tape(..) => true,
                Value::Tuple(xs) => xs.iter().any(has_sparse),
                Value::Tensor(t) => t.data.iter().any(has_sparse),
                _ => false,
            }
        }
        if !has_sparse(&self) {
            return Ok(self);
        }
        Ok(match self {
            Value::Tuple(xs) => {
                Value::Tuple(xs.iter().map(|x| x.clone().densify_with(dense)).collect::<Result<_, _>>()?)
            }
            Value::Tensor(t) => Value::Tensor(Rc::new(Tensor {
                shape: t.shape.clone(),
                data: t.data.iter().map(|x| x.clone().densify_with(dense)).collect::<Result<_, _>>()?,
            })),
            v => dense(&v)?.densify_with(dense)?,
        })
    }

    /// `$tapePush t r`: `t` with `r` appended, in place when `t` is the
    /// latest version of its tape.
    pub fn tape_push(t: &Value, r: Value) -> Result<Value, String> {
        match t {
            Value::Tape(buf, len) if buf.borrow().len() == *len => {
                buf.borrow_mut().push(r);
                Ok(Value::Tape(buf.clone(), len + 1))
            }
            Value::Tape(buf, len) => {
                crate::ops::count_work(*len);
                let mut v = buf.borrow()[..*len].to_vec();
                v.push(r);
                Ok(Value::Tape(Rc::new(std::cell::RefCell::new(v)), len + 1))
            }
            Value::Sparse(_) => Value::tape_push(&t.try_dense()?, r),
            Value::Tensor(t) if t.rank() == 1 => {
                crate::ops::count_work(t.data.len());
                let mut v = t.data.clone();
                v.push(r);
                let n = v.len();
                Ok(Value::Tape(Rc::new(std::cell::RefCell::new(v)), n))
            }
            v => Err(format!("internal error: `$tapePush` of {}", v.kind())),
        }
    }

    pub fn is_unit(&self) -> bool {
        matches!(self, Value::Tuple(vs) if vs.is_empty())
    }

    /// A short description of the kind of value, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Integer(_) => "an Integer",
            Value::Float(_) => "a Float",
            Value::Bool(_) => "a Bool",
            Value::String(_) => "a String",
            Value::Tuple(vs) if vs.is_empty() => "the unit value",
            Value::Tuple(_) => "a tuple",
            Value::Tensor(_) | Value::Tape(..) | Value::Sparse(_) => "a tensor",
            Value::Closure(_) => "a lambda",
            Value::LinMap(_) => "a linear map",
        }
    }
}

/// Structural equality; floats compare with `==` (so NaN differs from
/// itself), lambdas by identity.
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Integer(a), Value::Integer(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Tuple(a), Value::Tuple(b)) => a == b,
            (Value::Tensor(a), Value::Tensor(b)) => a == b,
            (Value::Closure(a), Value::Closure(b)) => Rc::ptr_eq(a, b),
            (Value::LinMap(a), Value::LinMap(b)) => Rc::ptr_eq(a, b),
            (Value::Tape(..) | Value::Sparse(_), _) | (_, Value::Tape(..) | Value::Sparse(_)) => {
                self.dense() == other.dense()
            }
            _ => false,
        }
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Integer(i)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// The original's print format: floats as C's `%g`, Bools as `1`/`0`,
/// strings raw, tuples as their components separated by `,` without brackets,
/// tensors as `[e0, e1, ...]` nested per dimension.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Integer(i) => write!(f, "{i}"),
            Value::Float(x) => f.write_str(&format_float(*x)),
            Value::Bool(b) => f.write_str(if *b { "1" } else { "0" }),
            Value::String(s) => f.write_str(s),
            Value::Tuple(vs) => {
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    fmt::Display::fmt(v, f)?;
                }
                Ok(())
            }
            Value::Tensor(t) => t.fmt(f),
            Value::Closure(_) => f.write_str("<lambda>"),
            Value::LinMap(_) => f.write_str("<linear map>"),
            Value::Tape(..) | Value::Sparse(_) => fmt::Display::fmt(&self.dense(), f),
        }
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_dims(f, &self.shape, &self.data)
    }
}

/// Writes `data` as a tensor of shape `shape`, one bracket level per dimension.
fn fmt_dims(f: &mut fmt::Formatter<'_>, shape: &[usize], data: &[Value]) -> fmt::Result {
    f.write_str("[")?;
    match shape {
        [] | [_] => {
            for (i, v) in data.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                fmt::Display::fmt(v, f)?;
            }
        }
        [rows, inner @ ..] => {
            let stride = num_elements(inner).unwrap_or(0);
            for i in 0..*rows {
                if i > 0 {
                    f.write_str(", ")?;
                }
                let start = i.saturating_mul(stride);
                let chunk = data.get(start..start.saturating_add(stride)).unwrap_or(&[]);
                fmt_dims(f, inner, chunk)?;
            }
        }
    }
    f.write_str("]")
}

/// Formats a float as C's `printf("%g", x)` does (6 significant digits; the
/// style of `%e` if the decimal exponent is below -4 or at least 6, else that
/// of `%f`; trailing zeros removed). NaN prints as `nan` whatever its sign
/// bit (glibc would print `-nan`): the sign of a NaN depends on how it was
/// computed (x86's `0.0 / 0.0` is negative, a C compiler's folded one
/// positive), so printing it would make the backends disagree.
pub fn format_float(x: f64) -> String {
    const PRECISION: i32 = 6;
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    // The exponent C uses is that of the `%e` form after rounding to
    // PRECISION significant digits. Rust's exact formatting rounds half to
    // even on the exact binary value, as glibc does.
    let e_form = format!("{:.*e}", (PRECISION - 1) as usize, x);
    let (mantissa, exp) = e_form.split_once('e').unwrap_or((&e_form, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{}{:02}", strip_trailing_zeros(mantissa), sign, exp.unsigned_abs())
    } else {
        let fixed = format!("{:.*}", (PRECISION - 1 - exp) as usize, x);
        strip_trailing_zeros(&fixed).to_string()
    }
}

/// Removes trailing zeros after a decimal point, and the point if nothing
/// follows it.
fn strip_trailing_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}
