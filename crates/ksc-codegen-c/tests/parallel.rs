//! Which loops run on a team of threads, and what a loop costs (`parallel.rs`).

use ksc_codegen_c::parallel::{cost, independent, PAR_MIN_WORK};
use ksc_ir::Type;
use ksc_lower::ir::*;

fn func(vars: Vec<Type>, body: Block) -> Func {
    Func::for_tests(vars, body)
}

const OUT: VarId = VarId(0);
const I: VarId = VarId(2);
const X: VarId = VarId(3);
const ACC: VarId = VarId(4);

fn vars() -> Vec<Type> {
    vec![Type::vec(Type::Float), Type::Integer, Type::Integer, Type::Float, Type::Float, Type::vec(Type::Float)]
}

fn never(_: FuncId) -> bool {
    false
}

#[test]
fn a_build_writing_its_own_element_is_independent() {
    let body = vec![
        Stmt::Let(X, Rhs::Un(UnOp::ToFloat, Op::Var(I), None)),
        Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(I), val: Op::Var(X) },
    ];
    let f = func(vars(), vec![]);
    assert!(independent(&f, I, &body, &never));
}

#[test]
fn writing_another_element_or_an_outer_variable_is_not() {
    let f = func(vars(), vec![]);
    let other = vec![Stmt::Store { arr: Op::Var(OUT), idx: Op::Int(0), val: Op::Float(1.0) }];
    assert!(!independent(&f, I, &other, &never));
    let sum = vec![Stmt::Set(ACC, Op::Float(1.0))];
    assert!(!independent(&f, I, &sum, &never));
    let accum = vec![Stmt::Accum { arr: Op::Var(OUT), idx: Op::Int(3), val: Op::Float(1.0), site: SiteId(0) }];
    assert!(!independent(&f, I, &accum, &never));
}

#[test]
fn printing_directly_or_through_a_call_is_not() {
    let f = func(vars(), vec![]);
    let print = vec![Stmt::Print { val: Op::Var(I), ty: Type::Integer }];
    assert!(!independent(&f, I, &print, &never));
    let call = vec![Stmt::Let(X, Rhs::Call { func: FuncId(1), args: vec![], frame: None })];
    assert!(independent(&f, I, &call, &never));
    assert!(!independent(&f, I, &call, &|g| g == FuncId(1)));
}

#[test]
fn a_mutable_of_its_own_and_an_array_of_its_own_are_private() {
    let f = func(vars(), vec![]);
    let body = vec![
        Stmt::DeclMut(ACC, Some(Op::Float(0.0))),
        Stmt::Let(VarId(5), Rhs::Alloc { dims: vec![Op::Int(3)], elem: Type::Float }),
        Stmt::Store { arr: Op::Var(VarId(5)), idx: Op::Int(1), val: Op::Float(2.0) },
        Stmt::Set(ACC, Op::Float(1.0)),
        Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(I), val: Op::Var(ACC) },
    ];
    assert!(independent(&f, I, &body, &never));
}

#[test]
fn reading_another_element_of_what_it_writes_is_a_dependence() {
    // out[i] = out[i - 1] + 1, as a scan written in place.
    let f = func(vars(), vec![]);
    let prev = VarId(5);
    let body = |at: Op| {
        vec![
            Stmt::Let(prev, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(I), Op::Int(-1))),
            Stmt::Let(X, Rhs::Load { arr: Op::Var(OUT), idx: at }),
            Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(I), val: Op::Var(X) },
        ]
    };
    assert!(!independent(&f, I, &body(Op::Var(prev)), &never));
    assert!(independent(&f, I, &body(Op::Var(I)), &never));
}

#[test]
fn a_build_of_vectors_stays_serial() {
    let f = func(vars(), vec![]);
    let body = vec![
        Stmt::Let(VarId(5), Rhs::Alloc { dims: vec![Op::Int(3)], elem: Type::Float }),
        Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(I), val: Op::Var(VarId(5)) },
    ];
    assert!(!independent(&f, I, &body, &never));
}

#[test]
fn a_row_of_a_matrix_written_from_a_nested_loop_is_its_own() {
    // for i < 300 { r = i * n; for j < n { at = r + j; out[at] = 1.0 } }
    let (r, j, at, n) = (VarId(6), VarId(7), VarId(8), Op::Var(VarId(1)));
    let mut vs = vars();
    vs.extend([Type::Integer, Type::Integer, Type::Integer]);
    let f = func(vs, vec![]);
    let row = |n2: Op, add: Op| {
        vec![
            Stmt::Let(r, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(I), n.clone())),
            Stmt::For {
                idx: j,
                n: n2,
                pre: vec![],
                body: vec![
                    Stmt::Let(at, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(r), add)),
                    Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(at), val: Op::Float(1.0) },
                ],
                reset: false,
            },
        ]
    };
    assert!(independent(&f, I, &row(n.clone(), Op::Var(j)), &never));
    // A column loop longer than the row, or a constant offset, could
    // reach the next row.
    assert!(!independent(&f, I, &row(Op::Int(1000), Op::Var(j)), &never));
    assert!(!independent(&f, I, &row(n.clone(), Op::Int(1)), &never));
}

/// for i < m { r = i * 1024; for t < rounds { j = t + c;
///   [ge = j >= 0; if ge {] [lt = j < 1024; if lt {] at = r + j; out[at] = 1.0 [}] [}] } }
/// (a lane of `scan`'s blocks, behind the one before by -c steps).
fn lane(rounds: Op, c: i64, ge: bool, lt: bool) -> (Func, Block) {
    let (r, t, j, at, g, l) = (VarId(6), VarId(7), VarId(8), VarId(9), VarId(10), VarId(11));
    let mut vs = vars();
    vs.extend([Type::Integer, Type::Integer, Type::Integer, Type::Integer, Type::Bool, Type::Bool]);
    let f = func(vs, vec![]);
    // c = 0: j is t itself (the first lane).
    let (mut body, j) = match c {
        0 => (vec![], t),
        _ => (vec![Stmt::Let(j, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(t), Op::Int(c)))], j),
    };
    let mut inner = vec![
        Stmt::Let(at, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(r), Op::Var(j))),
        Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(at), val: Op::Float(1.0) },
    ];
    if lt {
        body.push(Stmt::Let(l, Rhs::Bin(BinOp::ILt, Op::Var(j), Op::Int(1024))));
        inner = vec![Stmt::If { cond: Op::Var(l), then: inner, els: vec![] }];
    }
    if ge {
        body.push(Stmt::Let(g, Rhs::Bin(BinOp::IGe, Op::Var(j), Op::Int(0))));
        inner = vec![Stmt::If { cond: Op::Var(g), then: inner, els: vec![] }];
    }
    body.extend(inner);
    let outer = vec![
        Stmt::Let(r, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(I), Op::Int(1024))),
        Stmt::For { idx: t, n: rounds, pre: vec![], body, reset: false },
    ];
    (f, outer)
}

#[test]
fn a_lane_of_blocks_running_behind_is_its_own() {
    let own = |rounds: Op, c, ge, lt| {
        let (f, body) = lane(rounds, c, ge, lt);
        independent(&f, I, &body, &never)
    };
    // Behind by 8, in 1048 rounds: guarded both ways, or only from
    // below when the rounds end with the block.
    assert!(own(Op::Int(1048), -8, true, true));
    assert!(own(Op::Int(1032), -8, true, false));
    assert!(own(Op::Int(1000), 24, false, false));
    // The first lane: its index itself, guarded from above.
    assert!(own(Op::Int(1048), 0, false, true));
    assert!(!own(Op::Int(1048), 0, false, false));
    // Without the guard that keeps it in its block.
    assert!(!own(Op::Int(1048), -8, false, true));
    assert!(!own(Op::Int(1048), -8, true, false));
    assert!(!own(Op::Int(1000), 25, false, false));
    assert!(!own(Op::Var(VarId(1)), 0, false, false));
}

#[test]
fn the_elements_of_an_unrolled_iteration_are_its_own() {
    // for i < m { r = i * 8; out[r] = 1.0; at = r + c; out[at] = 1.0 }
    // (unroll-and-jam's eight elements per iteration, c < 8).
    let (r, at) = (VarId(6), VarId(7));
    let mut vs = vars();
    vs.extend([Type::Integer, Type::Integer]);
    let f = func(vs, vec![]);
    let unrolled = |stride: Op, c: i64| {
        vec![
            Stmt::Let(r, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(I), stride)),
            Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(r), val: Op::Float(1.0) },
            Stmt::Let(at, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(r), Op::Int(c))),
            Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(at), val: Op::Float(1.0) },
        ]
    };
    assert!(independent(&f, I, &unrolled(Op::Int(8), 7), &never));
    // The next iteration's first element, one before the slab, or a
    // stride that is not known.
    assert!(!independent(&f, I, &unrolled(Op::Int(8), 8), &never));
    assert!(!independent(&f, I, &unrolled(Op::Int(8), -1), &never));
    assert!(!independent(&f, I, &unrolled(Op::Var(VarId(1)), 1), &never));
    // A stride of 0: every iteration writes element 0.
    let zero = vec![
        Stmt::Let(r, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(I), Op::Int(0))),
        Stmt::Store { arr: Op::Var(OUT), idx: Op::Var(r), val: Op::Float(1.0) },
    ];
    assert!(!independent(&f, I, &zero, &never));
}

/// for i < m { lo = i * 1024; r = n - lo; c = r < 1024; mut len;
///   if c { len := r } else { len := ELSE }; l = len;
///   for j < l { at = lo + j; out[at] += 1.0 } }
/// (a block of `reduce`'s derivative, checked arithmetic): block i
/// writes `[1024 i, 1024 i + len)`, its own slab when len <= 1024.
fn block(els: Op, taken_when_short: bool) -> (Func, Block) {
    let (lo, r, c, len, l, j, at) = (VarId(6), VarId(7), VarId(8), VarId(9), VarId(10), VarId(11), VarId(12));
    let mut vs = vars();
    vs.extend(std::iter::repeat_n(Type::Integer, 7));
    vs[8] = Type::Bool;
    let n = Op::Var(VarId(1));
    let site = SiteId(0);
    let (short, long) = (vec![Stmt::Set(len, Op::Var(r))], vec![Stmt::Set(len, els)]);
    let (then, els) = if taken_when_short { (short, long) } else { (long, short) };
    let body = vec![
        Stmt::Let(lo, Rhs::IChecked(IOp::Mul, Op::Var(I), Op::Int(1024), site)),
        Stmt::Let(r, Rhs::IChecked(IOp::Sub, n, Op::Var(lo), site)),
        Stmt::Let(c, Rhs::Bin(BinOp::ILt, Op::Var(r), Op::Int(1024))),
        Stmt::DeclMut(len, None),
        Stmt::If { cond: Op::Var(c), then, els },
        Stmt::Let(l, Rhs::Copy(Op::Var(len))),
        Stmt::For {
            idx: j,
            n: Op::Var(l),
            pre: vec![],
            body: vec![
                Stmt::Let(at, Rhs::IChecked(IOp::Add, Op::Var(lo), Op::Var(j), site)),
                Stmt::Accum { arr: Op::Var(OUT), idx: Op::Var(at), val: Op::Float(1.0), site },
            ],
            reset: false,
        },
    ];
    (func(vs, vec![]), body)
}

#[test]
fn a_block_no_longer_than_its_stride_is_its_own() {
    let (f, body) = block(Op::Int(1024), true);
    assert!(independent(&f, I, &body, &never));
    let (f, body) = block(Op::Int(512), true);
    assert!(independent(&f, I, &body, &never));
    // A block that may be longer than the stride, or whose length is
    // the remainder when that is not shorter, reaches the next block.
    let (f, body) = block(Op::Int(1025), true);
    assert!(!independent(&f, I, &body, &never));
    let (f, body) = block(Op::Int(1024), false);
    assert!(!independent(&f, I, &body, &never));
}

/// The threshold below which a constant trip count gets no team is the
/// runtime's default.
#[test]
fn the_threshold_is_the_runtimes() {
    assert!(ksc_codegen_c::emit::RUNTIME_H.contains(&format!("#define KSRT_PAR_MIN_WORK {PAR_MIN_WORK}\n")));
}

#[test]
fn cost_weighs_calls_and_nested_loops() {
    let inner = vec![Stmt::Let(X, Rhs::Copy(Op::Float(1.0)))];
    let nested = |n: Op| Stmt::For { idx: VarId(9), n, pre: vec![], body: inner.clone(), reset: false };
    let call = Stmt::Let(X, Rhs::Call { func: FuncId(1), args: vec![], frame: None });
    // A constant trip count is counted as it is; one known only at run
    // time as 16 runs.
    assert_eq!(cost(&vec![nested(Op::Int(4)), call.clone()]), 1 + 4 + 50);
    assert_eq!(cost(&vec![nested(Op::Var(VarId(1))), call]), 1 + 16 + 50);
    // A block of `reduce` or `scan`, min(n - k B, B) long: B runs of
    // its body (2 statements; before the loop, 4 statements, a branch
    // of 2 and a copy).
    let (_, body) = block(Op::Int(1024), true);
    assert_eq!(cost(&body), 4 + 2 + 1 + (1 + 1024 * 2));
    // A length not bounded by a constant (the remainder where it is at
    // least B, or a size known only at run time): 16 runs.
    let (_, body) = block(Op::Int(1024), false);
    assert_eq!(cost(&body), 4 + 2 + 1 + (1 + 16 * 2));
    let (_, body) = block(Op::Var(VarId(1)), true);
    assert_eq!(cost(&body), 4 + 2 + 1 + (1 + 16 * 2));
    // A trip count assigned from itself (a mutable variable's value
    // carried round a loop) ends the search: 16 runs.
    let m = VarId(4);
    let body = vec![
        Stmt::DeclMut(m, None),
        Stmt::Set(m, Op::Var(m)),
        Stmt::Let(VarId(3), Rhs::Copy(Op::Var(m))),
        Stmt::For { idx: VarId(9), n: Op::Var(VarId(3)), pre: vec![], body: inner.clone(), reset: false },
    ];
    assert_eq!(cost(&body), 3 + 1 + 16);
}
