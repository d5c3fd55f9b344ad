//! Function names (`names.rs`).

use ksc_ir::{Derivation, FunName, Type};

#[test]
fn display() {
    let f = FunName::typed("f", Type::Tuple(vec![Type::Float, Type::Integer]));
    assert_eq!(f.to_string(), "[f (Tuple Float Integer)]");
    let g = f.derived(Derivation::Rev).derived(Derivation::Shape);
    assert_eq!(g.to_string(), "[shape [rev [f (Tuple Float Integer)]]]");
    assert_eq!(g.short(), "[shape [rev f]]");
    assert_eq!(g.inner().unwrap().1.short(), "[rev f]");
}
