//! The built-in functions of the prelude (`builtin.rs`).

use ksc_ir::builtin::TABLE;
use ksc_ir::{Builtin, FunName, Type};

#[test]
fn every_builtin_resolves_from_its_name_and_no_derivative_does() {
    for &(b, _, _) in TABLE {
        assert_eq!(Builtin::resolve(&b.name()), Some(b), "{b:?}");
        assert_eq!(Builtin::resolve(&b.name().derived(ksc_ir::Derivation::Rev)), None);
    }
    assert_eq!(Builtin::resolve(&FunName::typed("add", Type::Float)), None);
    assert_eq!(Builtin::resolve(&FunName::plain("exp")), None);
    assert_eq!(Builtin::FAdd.arity(), 2);
    assert_eq!(Builtin::Exp.arity(), 1);
}
