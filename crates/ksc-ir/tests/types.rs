//! Types: printing, tangent and shape types, index types.

use ksc_ir::Type;

#[test]
fn display_is_ks_syntax() {
    let t = Type::Tuple(vec![Type::vec(Type::Float), Type::tensor(2, Type::Integer), Type::unit()]);
    assert_eq!(t.to_string(), "(Tuple (Vec Float) (Tensor 2 Integer) (Tuple))");
    assert_eq!(Type::lm(Type::Float, Type::vec(Type::Float)).to_string(), "(LM Float (Vec Float))");
}

#[test]
fn tangent_types() {
    let t = Type::Tuple(vec![Type::Float, Type::Integer]);
    assert_eq!(t.tangent(), Some(Type::Tuple(vec![Type::Float, Type::unit()])));
    assert_eq!(Type::vec(Type::Bool).tangent(), Some(Type::vec(Type::unit())));
    assert_eq!(Type::lam(Type::Float, Type::Float).tangent(), None);
}

#[test]
fn shape_types() {
    // The example of knossos-reference.md 5.6.
    let t = Type::Tuple(vec![Type::vec(Type::Float), Type::Float, Type::vec(Type::vec(Type::Float))]);
    assert_eq!(t.shape(), Some(Type::Tuple(vec![Type::Integer, Type::unit(), Type::vec(Type::Integer)])));
    assert_eq!(Type::tensor(2, Type::Float).shape(), Some(Type::Tuple(vec![Type::Integer; 2])));
}

#[test]
fn index_types() {
    assert_eq!(Type::index_type(1), Type::Integer);
    assert_eq!(Type::index_type(3).index_rank(), Some(3));
    assert_eq!(Type::Tuple(vec![Type::Integer]).index_rank(), None);
}
