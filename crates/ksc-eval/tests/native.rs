//! The native functions' own maths.

use ksc_eval::testing::digamma;

#[test]
fn digamma_values() {
    // ψ(1) = -γ, ψ(1/2) = -γ - 2 ln 2, ψ(7.25) = ψ(1/4) + Σ_{k<7} 1/(k + 1/4),
    // ψ(-1.5) by reflection, ψ(100) from the series.
    let gamma = 0.5772156649015329;
    let cases = [
        (1.0, -gamma),
        (0.5, -gamma - 2.0 * 2f64.ln()),
        (
            7.25,
            -gamma - std::f64::consts::FRAC_PI_2 - 3.0 * 2f64.ln()
                + (0..7).map(|k| 1.0 / (k as f64 + 0.25)).sum::<f64>(),
        ),
        (-1.5, 0.7031566406452432),
        (100.0, 4.600161852738087),
    ];
    for (x, want) in cases {
        assert!((digamma(x) - want).abs() < 1e-12, "digamma({x}) = {} not {want}", digamma(x));
    }
    assert!(digamma(0.0).is_nan() && digamma(-2.0).is_nan());
}
