//! Unswitching a loop on a test of a value from outside it (`passes/unswitch.rs`).

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use ksc_lower::ir::*;
use ksc_lower::passes::unswitch::UnswitchInvariantBranches;
use ksc_lower::passes::LoopCx;

const C: VarId = VarId(0);
const X: VarId = VarId(1);
const I: VarId = VarId(2);
const T: VarId = VarId(3);
const U: VarId = VarId(4);
const V: VarId = VarId(5);
const W: VarId = VarId(6);

fn func(body: Block) -> Func {
    let f = Type::Float;
    Func::for_tests(vec![Type::Bool, Type::vec(f.clone()), Type::Integer, f.clone(), f.clone(), f.clone(), f], body)
}

/// `for i < 10 { t = x[i]; mut u; if c { u := t * 2 } else { u := t + 1 }; x[i] = u }`
/// (`v` holds the then branch's product, `w` the else branch's sum).
fn looped(cond: Op) -> Block {
    vec![Stmt::For {
        idx: I,
        n: Op::Int(10),
        pre: vec![],
        body: vec![
            Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
            Stmt::DeclMut(U, None),
            Stmt::If {
                cond,
                then: vec![Stmt::Let(V, Rhs::Bin(BinOp::FMul, Op::Var(T), Op::Float(2.0))), Stmt::Set(U, Op::Var(V))],
                els: vec![Stmt::Let(W, Rhs::Bin(BinOp::FAdd, Op::Var(T), Op::Float(1.0))), Stmt::Set(U, Op::Var(W))],
            },
            Stmt::Store { arr: Op::Var(X), idx: Op::Var(I), val: Op::Var(U) },
        ],
        reset: false,
    }]
}

#[test]
fn a_test_of_a_value_from_outside_the_loop_is_made_once() {
    let mut f = func(looped(Op::Var(C)));
    assert!(UnswitchInvariantBranches.run(&mut f, &LoopCx { effectful: &[], heap_ret: &[] }));
    let [Stmt::If { cond: Op::Var(c), then, els }] = &f.body[..] else { panic!("{:?}", f.body) };
    assert_eq!(*c, C);
    for (copy, op) in [(then, BinOp::FMul), (els, BinOp::FAdd)] {
        let [Stmt::For { body, .. }] = &copy[..] else { panic!("{copy:?}") };
        assert_eq!(body.len(), 5, "{body:?}");
        assert!(matches!(&body[2], Stmt::Let(_, Rhs::Bin(o, _, _)) if *o == op), "{body:?}");
    }
    assert_eq!(ksc_lower::visit::scope_error(&f), None);
}

#[test]
fn a_test_of_a_value_of_the_loop_stays() {
    // The test's value computed in the body, or assigned there.
    let mut body = looped(Op::Var(V));
    if let Stmt::For { body, .. } = &mut body[0] {
        body.insert(0, Stmt::Let(V, Rhs::Bin(BinOp::ILt, Op::Var(I), Op::Int(5))));
    }
    let mut f = func(body);
    let cx = LoopCx { effectful: &[], heap_ret: &[] };
    assert!(!UnswitchInvariantBranches.run(&mut f, &cx));
    let mut assigned = looped(Op::Var(C));
    if let Stmt::For { body, .. } = &mut assigned[0] {
        body.push(Stmt::Set(C, Op::Bool(true)));
    }
    let mut f = func(assigned);
    assert!(!UnswitchInvariantBranches.run(&mut f, &cx));
}
