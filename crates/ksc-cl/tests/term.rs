//! How CL terms print.

use ksc_cl::{Cl, Fun, Konst};
use ksc_ir::{Callee, Lit, Type};

#[test]
fn printed_form() {
    let add = Fun {
        callee: Callee::Fun(ksc_ir::FunName::typed("add", Type::Tuple(vec![Type::Float, Type::Float]))),
        src: Type::Tuple(vec![Type::Float, Type::Float]),
        tgt: Type::Float,
    };
    let env = Type::Tuple(vec![Type::Float, Type::Float]);
    let x = Cl::Fun(Fun::projection(0, &env).unwrap());
    let t = Cl::comp(
        Cl::Prune { keep: vec![0, 2], of: 3 },
        Cl::comp(
            Cl::Tuple(vec![x, Cl::comp(Cl::Prune { keep: vec![], of: 2 }, Cl::Konst(Konst::Lit(Lit::Float(1.0))))]),
            Cl::Fun(add),
        ),
    );
    assert_eq!(t.flat(), "(comp (P 1 3 / 3) (tuple (F get$1$2) (comp (P / 2) (K 1.0))) (F [add (Tuple Float Float)]))");
    assert_eq!(t.size(), 9);
    assert!(t.short(10).ends_with(" ..."));
}
