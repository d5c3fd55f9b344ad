//! Random arguments for the property tests' test definition, whose
//! parameters (`x y : Float`, `n : Integer`, `v : Vec Float`) and random
//! bodies come from [`ksc_opt::core_rules::instances`].

use ksc_opt::core_rules::instances::Rng;

/// Random arguments for the parameters.
pub fn random_args(rng: &mut Rng) -> ksc_eval::Value {
    use ksc_eval::Value;
    let f = |r: &mut Rng| Value::Float(*r.pick(&[0.0, 1.0, -1.5, 2.5, 0.25]));
    let x = f(rng);
    let y = f(rng);
    let n = Value::Integer(rng.below(4) as i64);
    let len = rng.below(4) as usize;
    let v = Value::vector((0..len).map(|_| f(rng)).collect());
    Value::tuple(vec![x, y, n, v])
}
