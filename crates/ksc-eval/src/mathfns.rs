//! `exp` and `log` as ksc computes them, in both backends.
//!
//! Native code calls `ksrt_exp` and `ksrt_log` of the C runtime
//! (`ksc-codegen-c/src/ksc_runtime.h`), which are these functions written
//! in C operation for operation: the same IEEE additions, multiplications,
//! divisions and bit manipulations in the same order, no fused
//! multiply-add (the runtime is compiled with `-ffp-contract=off`), so the
//! interpreter and native code give the same bits. They are branch-free
//! (special cases are selected, not branched to), so the C compiler
//! vectorises a loop that calls them; libm's `exp` and `log` are calls it
//! cannot vectorise without changing their results.
//!
//! Both are fdlibm's algorithms (Sun Microsystems, 1993, as musl has them):
//! an argument reduction by ln 2 and a polynomial in the reduced argument.
//! Their error is below 1 ulp of the correctly rounded result over the
//! whole range, subnormal results and arguments included (the tests check
//! it against a double-double reference); libm's are within 0.5 ulp and a
//! bit, so results may differ from libm's in the last bit.

// The constants are fdlibm's, written as it publishes them (more digits
// than a double holds; each rounds to the double fdlibm uses), so that they
// can be checked against it. INV_LN2 is LOG2_E.
#![allow(clippy::excessive_precision, clippy::approx_constant)]

const SHIFTER: f64 = 6755399441055744.0; // 1.5 * 2^52: x + SHIFTER - SHIFTER rounds x to an integer
const LN2_HI: f64 = 6.93147180369123816490e-01; // 0x3fe62e42fee00000: k * LN2_HI is exact for |k| < 2^11
const LN2_LO: f64 = 1.90821492927058770002e-10; // 0x3dea39ef35793c76

/// The integer `k` (|k| < 2^51) that `kd` holds, from its bits after adding
/// [`SHIFTER`] (no float-to-integer conversion, which vectorises badly).
fn int_of(kd: f64) -> i64 {
    (kd + SHIFTER).to_bits().wrapping_sub(SHIFTER.to_bits()) as i64
}

/// 2^k for -1022 <= k <= 1023.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// e^x, within 1 ulp; `exp(NaN)` is NaN, overflow is +inf, underflow 0.
pub fn exp(x: f64) -> f64 {
    const INV_LN2: f64 = 1.44269504088896338700e+00;
    const P1: f64 = 1.66666666666666019037e-01;
    const P2: f64 = -2.77777777770155933842e-03;
    const P3: f64 = 6.61375632143793436117e-05;
    const P4: f64 = -1.65339022054652515390e-06;
    const P5: f64 = 4.13813679705723846039e-08;
    // Past 709.8 the result overflows, below -745.2 it is 0: the clamped
    // argument keeps k in range, and NaN computes from 0.
    let mut xc = if x > 709.8 { 709.8 } else { x };
    xc = if xc < -745.2 { -745.2 } else { xc };
    xc = if xc.is_nan() { 0.0 } else { xc };
    // x = k ln2 + r, |r| <= ln2 / 2, r = hi - lo.
    let kd = xc * INV_LN2 + SHIFTER;
    let kd = kd - SHIFTER;
    let hi = xc - kd * LN2_HI;
    let lo = kd * LN2_LO;
    let r = hi - lo;
    // e^r = 1 + r + r c / (2 - c), c = r - r^2 (P1 + r^2 (P2 + ...)).
    let rr = r * r;
    let c = r - rr * (P1 + rr * (P2 + rr * (P3 + rr * (P4 + rr * P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    // y 2^k as y 2^k1 2^k2 (each factor normal; the product rounds once,
    // where it is subnormal or overflows).
    let k1d = kd * 0.5 + SHIFTER;
    let k1d = k1d - SHIFTER;
    let k2d = kd - k1d;
    let res = y * pow2(int_of(k1d)) * pow2(int_of(k2d));
    let res = if x > 709.8 { x * f64::from_bits(0x7fe0000000000000) } else { res }; // x 2^1023: +inf
    if x.is_nan() {
        x + x
    } else {
        res
    }
}

/// The natural logarithm, within 1 ulp; `log 0` is -inf, `log` of a
/// negative number or NaN is NaN, `log inf` is inf.
pub fn log(x: f64) -> f64 {
    const LG1: f64 = 6.666666666666735130e-01;
    const LG2: f64 = 3.999999999940941908e-01;
    const LG3: f64 = 2.857142874366239149e-01;
    const LG4: f64 = 2.222219843214978396e-01;
    const LG5: f64 = 1.818357216161805012e-01;
    const LG6: f64 = 1.531383769920937332e-01;
    const LG7: f64 = 1.479819860511658591e-01;
    const MIN_NORMAL: f64 = 2.2250738585072014e-308;
    // A subnormal x is scaled by 2^54 first.
    let sub = x < MIN_NORMAL;
    let xs = if sub { x * 18014398509481984.0 } else { x };
    let kadj: i64 = if sub { -54 } else { 0 };
    // x = 2^k m, sqrt(2)/2 < m < sqrt(2).
    let u = xs.to_bits();
    let hx = (u >> 32).wrapping_add(0x3ff00000 - 0x3fe6a09e);
    let k = ((hx >> 20) as i64) - 0x3ff + kadj;
    let hx = (hx & 0x000fffff) + 0x3fe6a09e;
    let m = f64::from_bits((hx << 32) | (u & 0xffffffff));
    // log(1 + f) = f - f^2/2 + s (f^2/2 + R), s = f / (2 + f).
    let f = m - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    // k as a double without an integer-to-float conversion.
    let dk = f64::from_bits(SHIFTER.to_bits().wrapping_add(k as u64)) - SHIFTER;
    let res = s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
    let res = if x == f64::INFINITY { x } else { res };
    let res = if x == 0.0 { f64::NEG_INFINITY } else { res };
    if x < 0.0 || x.is_nan() {
        f64::NAN
    } else {
        res
    }
}
