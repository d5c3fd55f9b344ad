//! Which loops run on every core: a `for` whose iterations are independent
//! becomes an OpenMP team (the runtime's "parallel loops" section), each
//! thread running a contiguous range of iterations on its own arena.
//!
//! A loop `for i < n { body }` qualifies when, wherever in its body:
//! - every tensor written (`store`, `+=`) is made in the body, or is
//!   written in iteration `i`'s own slab (element `i`, or the row `i` of a
//!   rank-2 or higher tensor: [`in_own_slab`]), so iteration `i` writes
//!   only what no other iteration writes or reads, with values that hold
//!   no tensors (which would live in the thread's arena); a tensor of the
//!   surroundings it writes is read only in the same slab (never whole,
//!   never another iteration's element);
//! - every mutable variable assigned, every mark reset or copied down to,
//!   and every tape pushed onto is the body's own;
//! - nothing prints (no `print`, no call of a function that may print:
//!   the output's order is the serial loop's) and nothing returns or
//!   tail-calls out of the loop.
//!
//! A fold, a `sumbuild` and every accumulation of reverse mode therefore
//! stay serial (their order, and so their rounding, are part of the
//! result); `build` and the loops of derivative code that fill one element
//! per iteration run in parallel, with results identical at any number of
//! threads. The estimate of one iteration's work ([`cost`]) lets the
//! runtime keep small loops serial.

use ksc_lower::ir::*;
use ksc_lower::visit::{defined_in, walk};
use rustc_hash::FxHashMap;

/// Can `for idx < n { body }` of `f` run its iterations in parallel?
/// `prints(g)`: may the function `g` print?
pub fn independent(f: &Func, idx: VarId, body: &Block, prints: &dyn Fn(FuncId) -> bool) -> bool {
    let own = defined_in(body);
    let binds = binds(body);
    // Tensors of the surroundings the loop writes: it may read them only
    // in its own slab (a read of another iteration's element is a
    // dependence, as in a scan written in place).
    let mut written = rustc_hash::FxHashSet::default();
    walk(body, &mut |s| {
        if let Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } = s {
            if !own.contains(a) {
                written.insert(*a);
            }
        }
    });
    let mut ok = true;
    walk(body, &mut |s| {
        ok &= match s {
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: at }) if written.contains(a) => in_own_slab(&binds, idx, at),
            // Passed whole to a call, or copied: read at any element.
            Stmt::Let(_, r) if !matches!(r, Rhs::Load { .. } | Rhs::Dim { .. }) => {
                !r.operands().iter().any(|o| matches!(o, Op::Var(a) if written.contains(a)))
                    && !matches!(r, Rhs::Call { func, .. } if prints(*func))
            }
            Stmt::Store { arr, idx: at, val } | Stmt::Accum { arr, idx: at, val, .. } => match arr {
                Op::Var(a) if own.contains(a) => true,
                Op::Var(_) => in_own_slab(&binds, idx, at) && !ksc_lower::ir::needs_heap(&f.op_ty(val)),
                _ => false,
            },
            Stmt::Set(v, _) => own.contains(v),
            Stmt::Reset(m) => own.contains(m),
            Stmt::CopyDown { mark, vars } => own.contains(mark) && vars.iter().all(|v| own.contains(v)),
            Stmt::Let(_, Rhs::TapePush { tape, .. }) => matches!(tape, Op::Var(t) if own.contains(t)),
            Stmt::Print { .. } | Stmt::Return(_) | Stmt::TailCall(_) => false,
            _ => true,
        };
    });
    ok
}

/// The variables `for idx < n { body }` reads from around it (and `n`),
/// in order: the parameters of the function its iterations become.
pub fn captured(body: &Block, idx: VarId, n: &Op) -> Vec<VarId> {
    let own = defined_in(body);
    let mut out: Vec<VarId> = Vec::new();
    let mut note = |o: &Op| {
        if let Op::Var(v) = o {
            if *v != idx && !own.contains(v) {
                out.push(*v);
            }
        }
    };
    note(n);
    walk(body, &mut |s| {
        for o in ksc_lower::visit::stmt_operands(s) {
            note(o);
        }
    });
    out.sort();
    out.dedup();
    out
}

/// What the body binds: each `let`'s right-hand side, and each nested
/// loop's trip count.
#[derive(Default)]
struct Binds {
    lets: FxHashMap<VarId, Rhs>,
    loops: FxHashMap<VarId, Op>,
}

fn binds(body: &Block) -> Binds {
    let mut out = Binds::default();
    walk(body, &mut |s| match s {
        Stmt::Let(v, r) => {
            out.lets.insert(*v, r.clone());
        }
        Stmt::For { idx, n, .. } => {
            out.loops.insert(*idx, n.clone());
        }
        _ => {}
    });
    out
}

/// Does the flat index `at` lie in iteration `i`'s own slab of a tensor,
/// `[i*t, (i+1)*t)` for some t? It does when `at` is `i` itself, or
/// `(x * s) + j` with x in its own slab of `t` and j the index of a loop of
/// the body over `0 .. s` (the slab then has `t*s` elements): the flat
/// index of element `(i, j, ...)` of a rank-2 or higher `build`, whose
/// lowering writes rows from nested loops.
fn in_own_slab(b: &Binds, i: VarId, at: &Op) -> bool {
    let Op::Var(v) = at else { return false };
    if *v == i {
        return true;
    }
    let Some(Rhs::Bin(BinOp::IAddNoCheck, x, y)) = b.lets.get(v) else { return false };
    let row_and_column = |row: &Op, col: &Op| {
        let (Op::Var(r), Op::Var(j)) = (row, col) else { return false };
        let Some(Rhs::Bin(BinOp::IMulNoCheck, x, s)) = b.lets.get(r) else { return false };
        b.loops.get(j) == Some(s) && in_own_slab(b, i, x)
    };
    row_and_column(x, y) || row_and_column(y, x)
}

/// The runtime's default threshold of work for a team
/// (`KSRT_PAR_MIN_WORK`): a loop whose trip count is a constant `n` with
/// `n * cost(body)` below it gets no team version, which would only make
/// the C longer (a team version is a second copy of the loop).
pub const PAR_MIN_WORK: u64 = 100_000;

/// Can a loop of `n` iterations of `body` (`n` known when compiling) have
/// enough work for a team?
pub fn worth_a_team(n: i64, body: &Block) -> bool {
    u64::try_from(n).unwrap_or(0).saturating_mul(cost(body)) >= PAR_MIN_WORK
}

/// Units of work of one run of a block, for the runtime's threshold
/// (`KSRT_PAR_MIN_WORK`): one per statement, a call 50 (its body is
/// unknown here), a nested loop 16 runs of its body (its trip count is
/// known only at run time), a branch its larger side.
pub fn cost(b: &Block) -> u64 {
    b.iter()
        .map(|s| match s {
            Stmt::For { pre, body, .. } => 1 + cost(pre) + 16 * cost(body),
            Stmt::If { then, els, .. } => 1 + cost(then).max(cost(els)),
            Stmt::Let(_, Rhs::Call { .. }) => 50,
            _ => 1,
        })
        .fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksc_ir::Type;

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

    /// The threshold below which a constant trip count gets no team is the
    /// runtime's default.
    #[test]
    fn the_threshold_is_the_runtimes() {
        assert!(crate::emit::RUNTIME_H.contains(&format!("#define KSRT_PAR_MIN_WORK {PAR_MIN_WORK}\n")));
    }

    #[test]
    fn cost_weighs_calls_and_nested_loops() {
        let inner = vec![Stmt::Let(X, Rhs::Copy(Op::Float(1.0)))];
        let body = vec![
            Stmt::For { idx: VarId(9), n: Op::Int(4), pre: vec![], body: inner, reset: false },
            Stmt::Let(X, Rhs::Call { func: FuncId(1), args: vec![], frame: None }),
        ];
        assert_eq!(cost(&body), 1 + 16 + 50);
    }
}
