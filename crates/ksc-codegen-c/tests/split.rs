//! Which statements of a long function are written as parts (`split.rs`).

use ksc_codegen_c::split::{interface, parse_max_stmts, plan_within, Interface, Plan, MAX_STMTS_VAR};
use ksc_ir::Type;
use ksc_lower::ir::{Block, Func, Op, Rhs, Stmt, VarId};

const C: VarId = VarId(2);
const I: VarId = VarId(3);
const ACC: VarId = VarId(4);
const X: VarId = VarId(5);

/// `k` statements defining variables from 10 on (`at` apart from
/// other fillers).
fn filler(at: u32, k: u32) -> Block {
    (0..k).map(|j| Stmt::Let(VarId(at + j), Rhs::Copy(Op::Float(1.0)))).collect()
}

fn func(body: Block) -> Func {
    let mut types = vec![Type::Float, Type::Integer, Type::Bool, Type::Integer, Type::Float, Type::Float];
    types.resize(400, Type::Float);
    let mut f = Func::for_tests(types, body);
    f.vars[ACC.0 as usize].mutable = true;
    f
}

fn serial(_: VarId, _: &Op, _: &Block) -> bool {
    false
}

fn chosen(f: &Func, plan: &Plan) -> Vec<usize> {
    f.body.iter().enumerate().filter(|(_, s)| plan.part(s).is_some()).map(|(k, _)| k).collect()
}

#[test]
fn a_function_within_the_bound_is_not_split() {
    let f = func(vec![Stmt::If { cond: Op::Var(C), then: filler(10, 30), els: vec![] }]);
    assert!(plan_within(&f, 40, &serial).parts.is_empty());
}

#[test]
fn parts_outside_loops_come_first_then_the_largest() {
    let in_loop = Stmt::If { cond: Op::Var(C), then: filler(100, 18), els: vec![] };
    let body = vec![
        Stmt::If { cond: Op::Var(C), then: filler(10, 8), els: vec![] },
        Stmt::If { cond: Op::Var(C), then: filler(20, 12), els: vec![] },
        // A loop too large for a part: a part is made of its body's `if`.
        Stmt::For { idx: I, n: Op::Var(VarId(1)), pre: vec![], body: vec![in_loop, Stmt::Keep(vec![])], reset: false },
    ];
    let f = func(body);
    // 9 + 13 + 21 = 43 statements; parts of 5 to 20: the `if`s outside
    // the loop (13, then 9) bring it to 23, then the `if` in the loop.
    let plan = plan_within(&f, 20, &serial);
    assert_eq!(chosen(&f, &plan), vec![0, 1]);
    let Stmt::For { body, .. } = &f.body[2] else { unreachable!() };
    assert!(plan.part(&body[0]).is_some());
    assert_eq!(plan.part(&f.body[1]), Some(0), "the largest first");
    // A bound the whole loop fits in: it is the part (no call per
    // iteration), and the rest is within the bound.
    let plan = plan_within(&f, 25, &serial);
    assert_eq!(chosen(&f, &plan), vec![2]);
}

#[test]
fn what_returns_or_copies_down_to_an_outer_loop_is_not_a_part() {
    let mut returns = filler(10, 20);
    returns.push(Stmt::Return(Op::Float(0.0)));
    let mut copies = filler(40, 20);
    copies.push(Stmt::CopyDown { mark: X, vars: vec![ACC] });
    let body = vec![
        Stmt::If { cond: Op::Var(C), then: returns, els: vec![] },
        Stmt::For {
            idx: I,
            n: Op::Int(4),
            pre: vec![],
            body: vec![Stmt::If { cond: Op::Var(C), then: copies, els: vec![] }],
            reset: false,
        },
    ];
    let f = func(body);
    let plan = plan_within(&f, 30, &serial);
    // The loop may be a part (its copy-down is in a loop of its own);
    // the `if` that returns and the one in the loop may not.
    assert_eq!(chosen(&f, &plan), vec![1]);
}

#[test]
fn a_parallel_loops_body_is_a_function_already() {
    let body = vec![Stmt::For { idx: I, n: Op::Var(VarId(1)), pre: vec![], body: filler(10, 60), reset: false }];
    let f = func(body);
    assert!(plan_within(&f, 20, &|_, _, _| true).parts.is_empty());
    assert!(plan_within(&f, 20, &serial).parts.is_empty(), "a loop of 61 statements is too large a part");
}

#[test]
fn a_part_reads_what_is_defined_outside_and_writes_the_mutables_it_assigns() {
    let s = Stmt::If {
        cond: Op::Var(C),
        then: vec![
            Stmt::Let(X, Rhs::Bin(ksc_lower::ir::BinOp::FAdd, Op::Var(VarId(0)), Op::Var(ACC))),
            Stmt::Set(ACC, Op::Var(X)),
        ],
        els: vec![Stmt::Keep(vec![Op::Var(ACC)])],
    };
    let f = func(vec![Stmt::DeclMut(ACC, Some(Op::Float(0.0))), s.clone()]);
    let io = interface(&f, &Plan::default(), &f.body[1..2]);
    assert_eq!(io.inputs, vec![VarId(0), C], "X is its own; ACC is passed by address");
    assert_eq!(io.outputs, vec![ACC]);
    assert!(io.results.is_empty());
}

/// `k` statements, each adding 1 to the one before (from `at`, the
/// first reading `from`).
fn chain(from: VarId, at: u32, k: u32) -> Block {
    (0..k)
        .map(|j| {
            let prev = if j == 0 { from } else { VarId(at + j - 1) };
            Stmt::Let(VarId(at + j), Rhs::Bin(ksc_lower::ir::BinOp::FAdd, Op::Var(prev), Op::Float(1.0)))
        })
        .collect()
}

#[test]
fn long_straight_line_code_is_cut_into_runs_of_half_the_bound() {
    // 100 statements and a return, no loop or branch: runs of at most 20.
    let mut body = chain(VarId(0), 10, 100);
    body.push(Stmt::Return(Op::Var(VarId(109))));
    let f = func(body);
    let plan = plan_within(&f, 40, &serial);
    let mut runs: Vec<(usize, usize)> =
        f.body.iter().enumerate().filter_map(|(i, s)| plan.run(s).map(|(_, len)| (i, len))).collect();
    runs.sort();
    assert_eq!(runs, vec![(0, 20), (20, 20), (40, 20), (60, 20), (80, 20)], "the return is not in a run");
    // A run passes on what a later statement reads: its last value.
    let io = interface(&f, &plan, &f.body[20..40]);
    assert_eq!(io, Interface { inputs: vec![VarId(29)], outputs: vec![], results: vec![VarId(49)] });
}

#[test]
fn runs_are_cut_in_branches_but_not_in_loops() {
    let mut then = chain(VarId(0), 10, 60);
    then.push(Stmt::Set(ACC, Op::Var(VarId(69))));
    let body = vec![
        Stmt::DeclMut(ACC, Some(Op::Float(0.0))),
        Stmt::If { cond: Op::Var(C), then, els: vec![] },
        Stmt::For { idx: I, n: Op::Var(VarId(1)), pre: vec![], body: chain(I, 200, 60), reset: false },
        Stmt::Return(Op::Var(ACC)),
    ];
    let f = func(body);
    let plan = plan_within(&f, 40, &serial);
    let Stmt::If { then, .. } = &f.body[1] else { unreachable!() };
    let Stmt::For { body: in_loop, .. } = &f.body[2] else { unreachable!() };
    assert_eq!(plan.run(&then[0]).map(|(_, len)| len), Some(20));
    assert!(in_loop.iter().all(|s| plan.run(s).is_none()), "a loop's body stays whole");
    // The branch's last run assigns ACC, declared outside it.
    let io = interface(&f, &plan, &then[40..61]);
    assert_eq!(io.outputs, vec![ACC]);
    // The first run of the body: the declaration of ACC, which later
    // statements assign, is a result, but the body is too short a run.
    assert!(plan.run(&f.body[0]).is_none());
    let io = interface(&f, &plan, &f.body[0..1]);
    assert_eq!(io.results, vec![ACC]);
}

#[test]
fn the_bound_from_the_environment_is_checked() {
    assert_eq!(parse_max_stmts(" 600 "), Ok(600));
    assert!(parse_max_stmts("0").is_err());
    assert!(parse_max_stmts("many").unwrap_err().contains(MAX_STMTS_VAR));
}
