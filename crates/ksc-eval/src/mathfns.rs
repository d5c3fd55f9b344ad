//! `exp`, `log` and `tanh` as ksc computes them, in both backends.
//!
//! Native code calls `ksrt_exp`, `ksrt_log` and `ksrt_tanh` of the C runtime
//! (`ksc-codegen-c/src/ksc_runtime.h`), which are these functions written
//! in C operation for operation: the same IEEE additions, multiplications,
//! divisions and bit manipulations in the same order, no fused
//! multiply-add (the runtime is compiled with `-ffp-contract=off`), so the
//! interpreter and native code give the same bits. They are branch-free
//! (special cases are selected, not branched to), so the C compiler
//! vectorises a loop that calls them; libm's `exp` and `log` are calls it
//! cannot vectorise without changing their results.
//!
//! `exp` and `log` are fdlibm's algorithms (Sun Microsystems, 1993, as musl has them):
//! an argument reduction by ln 2 and a polynomial in the reduced argument.
//! Their error is below 1 ulp of the correctly rounded result over the
//! whole range, subnormal results and arguments included (the tests check
//! it against a double-double reference); libm's are within 0.5 ulp and a
//! bit, so results may differ from libm's in the last bit. `tanh` is
//! Cephes' rational approximation below 0.625 and `1 - 2 / (e^2|x| + 1)`
//! above, the latter with `e^2|x|`, the sum and the quotient carried to
//! about twice the precision so that its error stays below 1 ulp too.

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
    let (u, kd) = exp_reduced(x);
    let y = 1.0 - u;
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

/// e^x as `(1 - u) 2^k`: `(u, k)` with |u| < 0.42 and k an integer, for
/// -745.2 <= x <= 709.8 (outside, x is clamped to that range; NaN computes
/// as 0). `1 - u` rounded is within 1 ulp of e^(x - k ln 2); `u` itself
/// carries the bits that rounding drops, which [`tanh`] uses.
fn exp_reduced(x: f64) -> (f64, f64) {
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
    ((lo - (r * c) / (2.0 - c)) - hi, kd)
}

/// The hyperbolic tangent, within 1 ulp; `tanh(±inf)` is ±1, `tanh(NaN)`
/// NaN, and the sign of zero is kept.
pub fn tanh(x: f64) -> f64 {
    // Cephes' tanh.c (Stephen L. Moshier, 1984): tanh x = x + x^3 P(x^2) /
    // Q(x^2) for |x| < 0.625.
    const P0: f64 = -9.64399179425052238628e-1;
    const P1: f64 = -9.92877231001918586564e1;
    const P2: f64 = -1.61468768441708447952e3;
    const Q0: f64 = 1.12811678491632931402e2;
    const Q1: f64 = 2.23548839060100448583e3;
    const Q2: f64 = 4.84406305325125486048e3;
    // Beyond 20, tanh rounds to 1 (1 - tanh 20 < 2^-54); the clamp keeps
    // e^2z finite.
    let z = f64::from_bits(x.to_bits() & 0x7fff_ffff_ffff_ffff);
    let z = if z > 20.0 { 20.0 } else { z };
    let s = x * x;
    let s = if z >= 0.625 { 0.0 } else { s };
    let small = x + x * s * (((P0 * s + P1) * s + P2) / (((s + Q0) * s + Q1) * s + Q2));
    // |x| >= 0.625: tanh z = 1 - 2 / d, d = e^2z + 1, with e^2z = (eh + el)
    // 2^k and d = dh + dl (2Sum; eh >= 1), the quotient q = 2 / dh corrected
    // by its exact remainder (Dekker's product: no fused multiply-add, so
    // that the C compiler's code for any machine gives these bits), and
    // 1 - q by 2Sum again.
    let (u, kd) = exp_reduced(2.0 * z);
    let p = pow2(int_of(kd));
    let yh = 1.0 - u;
    let yl = (1.0 - yh) - u;
    let (eh, el) = (yh * p, yl * p);
    let dh = eh + 1.0;
    let dl = ((eh - dh) + 1.0) + el;
    let q = 2.0 / dh;
    let (ph, pl) = two_prod(q, dh);
    let rem = (2.0 - ph) - pl; // 2 - q dh, exactly
    let corr = (rem - q * dl) * (0.5 * q); // 2 / d = q + corr, closely (q / 2 ~ 1 / dh)
    let th = 1.0 - q;
    let tl = (1.0 - th) - q;
    let large = th + (tl - corr);
    let large = if x < 0.0 { -large } else { large };
    let t = if z >= 0.625 { large } else { small };
    let t = if x == 0.0 { x } else { t }; // -0 + (-0 R) would be +0
    if x.is_nan() {
        x + x
    } else {
        t
    }
}

/// a b = p + e exactly (Dekker's product; no overflow here: |a|, |b| < 2^60).
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
}

/// a = h + l, each with at most 26 significant bits (Veltkamp's split).
fn split(a: f64) -> (f64, f64) {
    let c = 134217729.0 * a; // 2^27 + 1
    let h = c - (c - a);
    (h, a - h)
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
