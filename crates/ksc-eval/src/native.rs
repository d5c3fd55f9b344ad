//! Native implementations of the built-in prelude's `edef`s
//! (knossos-reference.md 3.2): one per [`Builtin`].

use std::fmt;
use std::rc::Rc;

use ksc_ir::{Builtin, FunName};

use crate::ops::OVERFLOW;
use crate::value::{fmt_size, Tensor, Value};

/// The signature of a native implementation: it receives the components of
/// its argument (the argument itself if its type is not a tuple) and returns
/// the result or an error message.
pub type NativeImpl = fn(&[Value]) -> Result<Value, String>;

/// A natively implemented function.
#[derive(Clone, Copy)]
pub struct NativeFn {
    /// How many components the argument is split into: the arity of a tuple
    /// argument type, 1 otherwise.
    pub arity: usize,
    pub imp: NativeImpl,
}

impl fmt::Debug for NativeFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NativeFn(arity {})", self.arity)
    }
}

impl NativeFn {
    /// Applies the function to its (whole) argument.
    pub fn call(&self, arg: &Value) -> Result<Value, String> {
        if self.arity == 1 {
            return (self.imp)(std::slice::from_ref(arg));
        }
        match arg {
            Value::Tuple(vs) if vs.len() == self.arity => (self.imp)(vs),
            _ => Err(format!("expected a tuple of {} components, found {}", self.arity, arg.kind())),
        }
    }
}

extern "C" {
    fn erf(x: f64) -> f64;
    /// `lgamma` without the write to the global `signgam` (same result).
    fn lgamma_r(x: f64, sign: *mut i32) -> f64;
}

fn c_erf(x: f64) -> f64 {
    // SAFETY: a pure libm function of one double.
    unsafe { erf(x) }
}

/// The digamma function ψ = (log Γ)', the derivative of `lgamma`: the
/// reflection ψ(x) = ψ(1 - x) - π / tan(π x) for x < 0, the recurrence
/// ψ(x) = ψ(x + 1) - 1/x up to x >= 10, then the asymptotic series. The C
/// runtime's `ksrt_digamma` does the same operations in the same order.
pub fn digamma(x: f64) -> f64 {
    if x.is_nan() || (x <= 0.0 && x == x.floor()) {
        return f64::NAN;
    }
    if x < 0.0 {
        let pi = std::f64::consts::PI;
        return digamma(1.0 - x) - pi / (pi * x).tan();
    }
    let (mut x, mut r) = (x, 0.0);
    while x < 10.0 {
        r -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    let t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0 + f * (-1.0 / 132.0)))));
    r + x.ln() - 0.5 / x + t
}

fn c_lgamma(x: f64) -> f64 {
    let mut sign = 0i32;
    // SAFETY: libm's reentrant lgamma; `sign` is a valid place for its output.
    unsafe { lgamma_r(x, &mut sign) }
}

/// The "ranhash" mixer of `$ranhashdoub`.
pub fn ranhash(v: u64) -> u64 {
    let mut v = v.wrapping_mul(3935559000370003845).wrapping_add(2691343689449507681);
    v ^= v >> 21;
    v ^= v << 37;
    v ^= v >> 4;
    v = v.wrapping_mul(4768777513237032717);
    v ^= v << 20;
    v ^= v >> 41;
    v ^= v << 5;
    v
}

/// `$ranhashdoub`: a hash-based pseudo-random Float in [0, 1).
pub fn ranhashdoub(seed: i64) -> f64 {
    // The constant exactly as in the original's C++ (2^-64 rounded).
    #[allow(clippy::excessive_precision)]
    const SCALE: f64 = 5.42101086242752217e-20;
    SCALE * ranhash(seed as u64) as f64
}

fn bad(want: &str, args: &[Value]) -> String {
    let found: Vec<&str> = args.iter().map(Value::kind).collect();
    format!("internal error: expected {want}, found {}", found.join(", "))
}

fn float1(a: &[Value]) -> Result<f64, String> {
    match a {
        [Value::Float(x)] => Ok(*x),
        _ => Err(bad("a Float", a)),
    }
}

fn floats2(a: &[Value]) -> Result<(f64, f64), String> {
    match a {
        [Value::Float(x), Value::Float(y)] => Ok((*x, *y)),
        _ => Err(bad("two Floats", a)),
    }
}

fn ints2(a: &[Value]) -> Result<(i64, i64), String> {
    match a {
        [Value::Integer(x), Value::Integer(y)] => Ok((*x, *y)),
        _ => Err(bad("two Integers", a)),
    }
}

fn bools2(a: &[Value]) -> Result<(bool, bool), String> {
    match a {
        [Value::Bool(x), Value::Bool(y)] => Ok((*x, *y)),
        _ => Err(bad("two Bools", a)),
    }
}

/// The elements of a vector of Floats.
fn float_vec(v: &Value) -> Result<Vec<f64>, String> {
    if let Value::Tensor(t) = v {
        crate::ops::count_work(t.data.len());
    }
    match v {
        Value::Tensor(t) if t.rank() == 1 => t
            .data
            .iter()
            .map(|x| match x {
                Value::Float(x) => Ok(*x),
                _ => Err(bad("a vector of Floats", std::slice::from_ref(v))),
            })
            .collect(),
        _ => Err(bad("a vector of Floats", std::slice::from_ref(v))),
    }
}

fn float_vec1(a: &[Value]) -> Result<Vec<f64>, String> {
    match a {
        [v] => float_vec(v),
        _ => Err(bad("a vector of Floats", a)),
    }
}

/// The position of the first maximum (C++ `imax`: strictly greater wins).
fn imax(xs: &[f64]) -> Result<usize, String> {
    let Some((&first, rest)) = xs.split_first() else {
        return Err("`imax` of an empty vector".to_string());
    };
    let (mut best, mut at) = (first, 0);
    for (i, &x) in rest.iter().enumerate() {
        if x > best {
            best = x;
            at = i + 1;
        }
    }
    Ok(at)
}

/// Integer division truncating toward zero, with the errors C would crash on.
fn int_div(x: i64, y: i64) -> Result<i64, String> {
    if y == 0 {
        return Err("division by zero".to_string());
    }
    x.checked_div(y).ok_or_else(|| OVERFLOW.to_string())
}

/// Matrix-vector product of `(Tensor 2 Float)` and `(Vec Float)`.
fn mat_vec(a: &[Value]) -> Result<Value, String> {
    let [Value::Tensor(m), v] = a else {
        return Err(bad("a matrix and a vector", a));
    };
    m.check()?;
    crate::ops::count_work(m.data.len());
    let v = float_vec(v)?;
    let &[rows, cols] = m.shape.as_slice() else {
        return Err(bad("a matrix and a vector", a));
    };
    if cols != v.len() {
        return Err(format!("`mul` of a matrix of size {} and a vector of size {}", fmt_size(&m.shape), v.len()));
    }
    let mut out = Vec::with_capacity(rows);
    if cols == 0 {
        out.resize(rows, Value::Float(0.0));
    } else {
        for row in m.data.chunks(cols) {
            let mut sum = 0.0;
            for (x, y) in row.iter().zip(&v) {
                match x {
                    Value::Float(x) => sum += x * y,
                    _ => return Err(bad("a matrix of Floats", a)),
                }
            }
            out.push(Value::Float(sum));
        }
    }
    Ok(Value::Tensor(Rc::new(Tensor::vector(out))))
}

/// The native implementation of a built-in prelude function, if there is one.
/// `name` must have no derivations and its base type must be known.
pub fn native_prelude(name: &FunName) -> Option<NativeFn> {
    let builtin = Builtin::resolve(name)?;
    Some(NativeFn { arity: builtin.arity(), imp: implementation(builtin) })
}

/// Macros keep the table below one line per function.
macro_rules! float_unary {
    ($f:expr) => {
        |a: &[Value]| -> Result<Value, String> { Ok(Value::Float(($f)(float1(a)?))) }
    };
}
macro_rules! float_binary {
    ($f:expr) => {
        |a: &[Value]| -> Result<Value, String> {
            let (x, y) = floats2(a)?;
            Ok(Value::from(($f)(x, y)))
        }
    };
}
macro_rules! int_binary {
    ($f:expr) => {
        |a: &[Value]| -> Result<Value, String> {
            let (x, y) = ints2(a)?;
            Ok(Value::from(($f)(x, y)?))
        }
    };
}
macro_rules! int_compare {
    ($f:expr) => {
        |a: &[Value]| -> Result<Value, String> {
            let (x, y) = ints2(a)?;
            Ok(Value::Bool(($f)(&x, &y)))
        }
    };
}

fn checked(r: Option<i64>) -> Result<i64, String> {
    r.ok_or_else(|| OVERFLOW.to_string())
}

/// The interpreter's implementation of a built-in.
fn implementation(b: Builtin) -> NativeImpl {
    use Builtin as B;
    let imp: NativeImpl = match b {
        B::ToFloat => |a| match a {
            [Value::Integer(i)] => Ok(Value::Float(*i as f64)),
            _ => Err(bad("an Integer", a)),
        },
        B::BoolToFloat => |a| match a {
            [Value::Bool(b)] => Ok(Value::Float(if *b { 1.0 } else { 0.0 })),
            _ => Err(bad("a Bool", a)),
        },
        B::FNeg => float_unary!(|x: f64| -x),
        B::INeg => |a| match a {
            [Value::Integer(i)] => Ok(Value::Integer(checked(i.checked_neg())?)),
            _ => Err(bad("an Integer", a)),
        },
        B::FAdd => float_binary!(|x: f64, y: f64| x + y),
        B::FSub => float_binary!(|x: f64, y: f64| x - y),
        B::FMul => float_binary!(|x: f64, y: f64| x * y),
        B::FDiv => float_binary!(|x: f64, y: f64| x / y),
        B::IAdd => int_binary!(|x: i64, y: i64| checked(x.checked_add(y))),
        B::ISub => int_binary!(|x: i64, y: i64| checked(x.checked_sub(y))),
        B::IMul => int_binary!(|x: i64, y: i64| checked(x.checked_mul(y))),
        B::IDiv => int_binary!(int_div),
        B::MatVec => mat_vec,
        B::Pow => |a| match a {
            [Value::Float(x), Value::Integer(n)] => Ok(Value::Float(x.powf(*n as f64))),
            _ => Err(bad("a Float and an Integer", a)),
        },
        // C++ `std::max(a, b)` is `a < b ? b : a`, which differs from
        // `f64::max` when an operand is NaN.
        B::FMax => float_binary!(|x: f64, y: f64| if x < y { y } else { x }),
        B::FGt => float_binary!(|x: f64, y: f64| x > y),
        B::FLt => float_binary!(|x: f64, y: f64| x < y),
        B::FGte => float_binary!(|x: f64, y: f64| x >= y),
        B::FLte => float_binary!(|x: f64, y: f64| x <= y),
        B::IGt => int_compare!(i64::gt),
        B::ILt => int_compare!(i64::lt),
        B::IGte => int_compare!(i64::ge),
        B::ILte => int_compare!(i64::le),
        B::Or => |a| bools2(a).map(|(x, y)| Value::Bool(x || y)),
        B::And => |a| bools2(a).map(|(x, y)| Value::Bool(x && y)),
        B::Log => float_unary!(crate::mathfns::log),
        B::Exp => float_unary!(crate::mathfns::exp),
        B::Sin => float_unary!(f64::sin),
        B::Cos => float_unary!(f64::cos),
        B::Cosh => float_unary!(f64::cosh),
        B::Tanh => float_unary!(crate::mathfns::tanh),
        B::Sqrt => float_unary!(f64::sqrt),
        B::Abs => float_unary!(f64::abs),
        B::Erf => float_unary!(c_erf),
        B::Lgamma => float_unary!(c_lgamma),
        B::Digamma => float_unary!(digamma),
        B::RanHashDoub => |a| match a {
            [Value::Integer(i)] => Ok(Value::Float(ranhashdoub(*i))),
            _ => Err(bad("an Integer", a)),
        },
        B::Dot => |a| {
            let [x, y] = a else {
                return Err(bad("two vectors of Floats", a));
            };
            let (x, y) = (float_vec(x)?, float_vec(y)?);
            if x.len() != y.len() {
                return Err(format!("`dot` of vectors of sizes {} and {}", x.len(), y.len()));
            }
            Ok(Value::Float(x.iter().zip(&y).fold(0.0, |acc, (x, y)| acc + x * y)))
        },
        B::IMax => |a| Ok(Value::Integer(imax(&float_vec1(a)?)? as i64)),
        B::VMax => |a| {
            let xs = float_vec1(a)?;
            let i = imax(&xs).map_err(|_| "`max` of an empty vector".to_string())?;
            Ok(Value::Float(xs.get(i).copied().unwrap_or(f64::NAN)))
        },
    };
    imp
}
