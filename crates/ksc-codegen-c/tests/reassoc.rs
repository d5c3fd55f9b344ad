//! Which sums and maxima `--reassociate` reorders (`reassoc.rs`).

use ksc_codegen_c::reassoc::{plain_maximum, reductions, PlainMax, Reductions};
use ksc_ir::Type;
use ksc_lower::ir::*;

const X: VarId = VarId(0);
const I: VarId = VarId(1);
const S: VarId = VarId(2);
const M: VarId = VarId(3);
const T: VarId = VarId(4);
const C: VarId = VarId(5);
const U: VarId = VarId(6);

fn func() -> Func {
    let f = Type::Float;
    Func::for_tests(vec![Type::vec(f.clone()), Type::Integer, f.clone(), f.clone(), f.clone(), f.clone(), f], vec![])
}

/// `t = x[i]; c = s; u = c + t; s := u`.
fn sum_body() -> Block {
    vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(C, Rhs::Copy(Op::Var(S))),
        Stmt::Let(U, Rhs::Bin(BinOp::FAdd, Op::Var(C), Op::Var(T))),
        Stmt::Set(S, Op::Var(U)),
    ]
}

#[test]
fn a_loop_adding_into_a_float_is_a_sum() {
    assert_eq!(reductions(&func(), I, &sum_body()).sums, vec![S]);
    // The operands the other way round, and `s` read directly.
    let body = vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(U, Rhs::Bin(BinOp::FAdd, Op::Var(T), Op::Var(S))),
        Stmt::Set(S, Op::Var(U)),
    ];
    assert_eq!(reductions(&func(), I, &body).sums, vec![S]);
}

#[test]
fn a_loop_keeping_the_largest_float_takes_a_maximum() {
    let body = vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(C, Rhs::Bin(BinOp::FGt, Op::Var(T), Op::Var(M))),
        Stmt::If { cond: Op::Var(C), then: vec![Stmt::Set(M, Op::Var(T))], els: vec![] },
    ];
    assert_eq!(reductions(&func(), I, &body), Reductions { sums: vec![], maxima: vec![M] });
    let fmax = vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(U, Rhs::Bin(BinOp::FMax, Op::Var(M), Op::Var(T))),
        Stmt::Set(M, Op::Var(U)),
    ];
    assert_eq!(reductions(&func(), I, &fmax).maxima, vec![M]);
}

/// `t = x[i]; c = t > m; if c { m := t }`.
fn max_body() -> Block {
    vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(C, Rhs::Bin(BinOp::FGt, Op::Var(T), Op::Var(M))),
        Stmt::If { cond: Op::Var(C), then: vec![Stmt::Set(M, Op::Var(T))], els: vec![] },
    ]
}

#[test]
fn a_loop_that_only_keeps_a_maximum_is_plain() {
    let plain = PlainMax { m: M, t: Op::Var(T), at: None, update: 2 };
    assert_eq!(plain_maximum(&func(), I, &max_body()), Some(plain));
    let fmax = vec![
        Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }),
        Stmt::Let(U, Rhs::Bin(BinOp::FMax, Op::Var(M), Op::Var(T))),
        Stmt::Set(M, Op::Var(U)),
    ];
    assert_eq!(plain_maximum(&func(), I, &fmax), Some(PlainMax { m: M, t: Op::Var(T), at: None, update: 2 }));
    // The term chosen by a branch of the body's own (a fused `if`).
    let chosen = vec![
        Stmt::DeclMut(T, Some(Op::Float(0.0))),
        Stmt::If {
            cond: Op::Bool(true),
            then: vec![Stmt::Let(U, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) }), Stmt::Set(T, Op::Var(U))],
            els: vec![Stmt::Set(T, Op::Float(1.0))],
        },
        Stmt::Let(C, Rhs::Bin(BinOp::FGt, Op::Var(T), Op::Var(M))),
        Stmt::If { cond: Op::Var(C), then: vec![Stmt::Set(M, Op::Var(T))], els: vec![] },
    ];
    assert_eq!(plain_maximum(&func(), I, &chosen), Some(PlainMax { m: M, t: Op::Var(T), at: None, update: 3 }));
}

#[test]
fn a_maximum_beside_other_effects_is_not_plain() {
    // A store, a check, a print, a call, a sum beside it.
    let mut stored = max_body();
    stored.push(Stmt::Store { arr: Op::Var(U), idx: Op::Var(I), val: Op::Var(T) });
    let mut checked = max_body();
    checked.insert(1, Stmt::Check { cond: Op::Bool(true), site: SiteId::UNCHECKED, err: ErrorKind::Assert });
    let mut printed = max_body();
    printed.push(Stmt::Print { val: Op::Var(T), ty: Type::Float });
    let mut called = max_body();
    called.insert(0, Stmt::Let(U, Rhs::Call { func: FuncId(0), args: vec![], frame: None }));
    let mut summed = max_body();
    summed.extend(sum_body().into_iter().skip(1));
    for body in [stored, checked, printed, called, summed] {
        assert_eq!(plain_maximum(&func(), I, &body), None, "{body:?}");
    }
    // The term defined in a branch only.
    let inner = vec![
        Stmt::If {
            cond: Op::Bool(true),
            then: vec![Stmt::Let(T, Rhs::Load { arr: Op::Var(X), idx: Op::Var(I) })],
            els: vec![],
        },
        Stmt::Let(C, Rhs::Bin(BinOp::FGt, Op::Var(T), Op::Var(M))),
        Stmt::If { cond: Op::Var(C), then: vec![Stmt::Set(M, Op::Var(T))], els: vec![] },
    ];
    assert_eq!(plain_maximum(&func(), I, &inner), None);
}

#[test]
fn a_sum_may_store_its_terms_each_in_its_own_element() {
    // `$buildSum`: store t at i and add it.
    let mut body = sum_body();
    body.push(Stmt::Store { arr: Op::Var(M), idx: Op::Var(I), val: Op::Var(T) });
    assert_eq!(reductions(&func(), I, &body).sums, vec![S]);
    // Not at another element, nor into a tensor the loop reads.
    let none = Reductions::default();
    let mut other = sum_body();
    other.push(Stmt::Store { arr: Op::Var(M), idx: Op::Int(0), val: Op::Var(T) });
    assert_eq!(reductions(&func(), I, &other), none);
    let mut read = sum_body();
    read.push(Stmt::Store { arr: Op::Var(X), idx: Op::Var(I), val: Op::Var(T) });
    assert_eq!(reductions(&func(), I, &read), none);
}

#[test]
fn partial_sums_read_or_other_effects_keep_the_order() {
    let none = Reductions::default();
    // The partial sum stored, or read by the next term.
    let mut stored = sum_body();
    stored.push(Stmt::Store { arr: Op::Var(M), idx: Op::Var(I), val: Op::Var(U) });
    assert_eq!(reductions(&func(), I, &stored), none);
    let mut read = sum_body();
    read.insert(0, Stmt::Let(T, Rhs::Bin(BinOp::FMul, Op::Var(S), Op::Float(2.0))));
    read.remove(1);
    assert_eq!(reductions(&func(), I, &read), none);
    // A product, a subtraction, a print, a call.
    for op in [BinOp::FMul, BinOp::FSub] {
        let mut b = sum_body();
        b[2] = Stmt::Let(U, Rhs::Bin(op, Op::Var(C), Op::Var(T)));
        assert_eq!(reductions(&func(), I, &b), none);
    }
    let mut print = sum_body();
    print.push(Stmt::Print { val: Op::Var(T), ty: Type::Float });
    assert_eq!(reductions(&func(), I, &print), none);
    let mut call = sum_body();
    call[0] = Stmt::Let(T, Rhs::Call { func: FuncId(0), args: vec![], frame: None });
    assert_eq!(reductions(&func(), I, &call), none);
    // Assigned only under a condition: not once per iteration.
    let mut cond = sum_body();
    let set = cond.pop().unwrap_or(Stmt::Reset(S));
    cond.push(Stmt::If { cond: Op::Bool(true), then: vec![set], els: vec![] });
    assert_eq!(reductions(&func(), I, &cond), none);
}
