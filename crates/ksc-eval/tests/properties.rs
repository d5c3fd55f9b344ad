//! Property tests of the value-level operations.

use quickcheck::{quickcheck, TestResult};

use ksc_eval::support::zero_like;
use ksc_eval::testing::{ts_add, ts_dot, ts_scale};
use ksc_eval::{format_float, native_prelude, Value};
use ksc_ir::{FunName, Type};

fn vector(xs: &[f64]) -> Value {
    Value::vector(xs.iter().map(|&x| Value::Float(x)).collect())
}

/// `%g` keeps 6 significant digits: reading the text back is within half
/// a unit of the 6th digit, and there are at most 6 digits.
fn format_float_round_trips(x: f64) -> TestResult {
    if !x.is_finite() {
        return TestResult::discard();
    }
    let s = format_float(x);
    let back: f64 = s.parse().unwrap();
    let digits = s.split('e').next().unwrap().chars().filter(char::is_ascii_digit).collect::<String>();
    let significant = digits.trim_start_matches('0').len();
    TestResult::from_bool((back - x).abs() <= x.abs() * 5.0000001e-6 && significant <= 6)
}

/// Checked Integer arithmetic agrees with i128 arithmetic or reports overflow.
fn integer_arithmetic_is_checked(a: i64, b: i64) -> bool {
    let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
    let arg = Value::tuple(vec![Value::Integer(a), Value::Integer(b)]);
    type Exact = fn(i128, i128) -> Option<i128>;
    let ops: [(&str, Exact); 4] = [
        ("add", |a, b| Some(a + b)),
        ("sub", |a, b| Some(a - b)),
        ("mul", |a, b| Some(a * b)),
        ("div", |a, b| if b == 0 { None } else { Some(a / b) }),
    ];
    ops.iter().all(|(name, exact)| {
        let f = native_prelude(&FunName::typed(*name, ii.clone())).unwrap();
        match (f.call(&arg), exact(a as i128, b as i128)) {
            (Ok(Value::Integer(r)), Some(e)) => r as i128 == e,
            (Err(m), Some(e)) => m == "integer overflow" && i64::try_from(e).is_err(),
            (Err(m), None) => m == "division by zero",
            _ => false,
        }
    })
}

/// ts_dot is bilinear and symmetric; ts_add of a zero is the identity.
fn tangent_algebra(xs: Vec<(f64, f64, f64)>, k: f64) -> TestResult {
    let ok = |x: f64| x.is_finite() && x.abs() < 1e6;
    if !ok(k) || xs.iter().any(|&(a, b, c)| !(ok(a) && ok(b) && ok(c))) {
        return TestResult::discard();
    }
    let a = vector(&xs.iter().map(|t| t.0).collect::<Vec<_>>());
    let b = vector(&xs.iter().map(|t| t.1).collect::<Vec<_>>());
    let c = vector(&xs.iter().map(|t| t.2).collect::<Vec<_>>());
    // Rounding errors are relative to the size of the terms summed.
    let scale_abc: f64 = xs.iter().map(|(a, b, c)| (a.abs() + b.abs()) * c.abs()).sum();
    let scale_kab: f64 = xs.iter().map(|(a, b, _)| (k * a * b).abs()).sum();
    let close = |x: f64, y: f64, scale: f64| (x - y).abs() <= 1e-12 * (1.0 + scale);
    let ab_c = ts_dot(&ts_add(a.clone(), &b).unwrap(), &c).unwrap();
    let ac_bc = ts_dot(&a, &c).unwrap() + ts_dot(&b, &c).unwrap();
    let ka_b = ts_dot(&ts_scale(k, a.clone()), &b).unwrap();
    let k_ab = k * ts_dot(&a, &b).unwrap();
    TestResult::from_bool(
        close(ab_c, ac_bc, scale_abc)
            && close(ka_b, k_ab, scale_kab)
            && ts_dot(&a, &b).unwrap() == ts_dot(&b, &a).unwrap()
            && ts_add(a.clone(), &zero_like(&a)).unwrap() == a,
    )
}

#[test]
fn format_float_round_trips_prop() {
    quickcheck(format_float_round_trips as fn(f64) -> TestResult);
}

#[test]
fn integer_arithmetic_is_checked_prop() {
    quickcheck(integer_arithmetic_is_checked as fn(i64, i64) -> bool);
}

#[test]
fn tangent_algebra_prop() {
    quickcheck(tangent_algebra as fn(Vec<(f64, f64, f64)>, f64) -> TestResult);
}
