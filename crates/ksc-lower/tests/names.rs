//! The C names of functions and types (`names.rs`).

use ksc_ir::{Derivation, FunName, Type};
use ksc_lower::names::{c_names, mangle_type};

#[test]
fn mangling_follows_the_original() {
    let ff = Type::Tuple(vec![Type::Float, Type::Float]);
    let fv = Type::Tuple(vec![Type::Float, Type::vec(Type::Float)]);
    let mul_ff = FunName::typed("mul", ff.clone());
    let mul_fv = FunName::typed("mul", fv);
    let rev_mul = mul_ff.derived(Derivation::Rev);
    let f = FunName::typed("f", Type::Float);
    let rev_f = f.derived(Derivation::Rev);
    let main = FunName::typed("main", Type::unit());
    let odd = FunName::typed("my-fun?", Type::Float);
    let names = c_names(&[&mul_ff, &mul_fv, &rev_mul, &f, &rev_f, &main, &odd]);
    assert_eq!(names, ["mul$aff", "mul$afT1f", "rev$mul", "f", "rev$f", "ks$main", "my_x2d_fun_x3f_"]);
    assert_eq!(mangle_type(&Type::Tuple(vec![Type::Integer, Type::tensor(2, Type::Float)])), "t2iT2f");
}
