//! Which loops run on every core: a `for` whose iterations are independent
//! becomes an OpenMP team (the runtime's "parallel loops" section), each
//! thread running a contiguous range of iterations on its own arena.
//!
//! A loop `for i < n { body }` qualifies when, wherever in its body:
//! - every tensor written (`store`, `+=`) is made in the body, or is
//!   written in iteration `i`'s own slab (element `i`, the row `i` of a
//!   rank-2 or higher tensor, or a block `[i s, i s + len)` with `len <= s`
//!   provably: [`in_own_slab`]), so iteration `i` writes
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
//! A fold, a `sumbuild` and an accumulation of reverse mode into elements
//! other iterations also add to therefore stay serial (their order, and so
//! their rounding, are part of the result); `build`, the loops of
//! derivative code that fill one element per iteration, and those that add
//! into a slab no other iteration touches (the blocks of `reduce`'s
//! reverse pass, each adding its elements' cotangents) run in parallel:
//! every element sees the same additions in the same order, so results
//! are identical at any number of threads. The estimate of one
//! iteration's work ([`cost`]) lets the runtime keep small loops serial.

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
    walk_guarded(body, &mut Vec::new(), &mut |s, guards| {
        let r = match s {
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: at }) if written.contains(a) => {
                in_own_slab(&binds, idx, at, guards)
            }
            // Passed whole to a call, or copied: read at any element.
            Stmt::Let(_, r) if !matches!(r, Rhs::Load { .. } | Rhs::Dim { .. }) => {
                !r.operands().iter().any(|o| matches!(o, Op::Var(a) if written.contains(a)))
                    && !matches!(r, Rhs::Call { func, .. } if prints(*func))
            }
            Stmt::Store { arr, idx: at, val } | Stmt::Accum { arr, idx: at, val, .. } => match arr {
                Op::Var(a) if own.contains(a) => true,
                Op::Var(_) => in_own_slab(&binds, idx, at, guards) && !ksc_lower::ir::needs_heap(&f.op_ty(val)),
                _ => false,
            },
            Stmt::Set(v, _) => own.contains(v),
            Stmt::Reset(m) => own.contains(m),
            Stmt::CopyDown { mark, vars } => own.contains(mark) && vars.iter().all(|v| own.contains(v)),
            Stmt::Let(_, Rhs::TapePush { tape, .. }) => matches!(tape, Op::Var(t) if own.contains(t)),
            Stmt::Print { .. } | Stmt::Return(_) | Stmt::TailCall(_) => false,
            _ => true,
        };
        ok &= r;
    });
    ok
}

/// Calls `f` on every statement, nested ones included, with the branch
/// conditions that hold there (as [`Binds`]' guards).
fn walk_guarded(b: &Block, guards: &mut Guards, f: &mut impl FnMut(&Stmt, &Guards)) {
    for s in b {
        f(s, guards);
        match s {
            Stmt::For { pre, body, .. } => {
                walk_guarded(pre, guards, f);
                walk_guarded(body, guards, f);
            }
            Stmt::If { cond, then, els } => {
                for (taken, side) in [(true, then), (false, els)] {
                    guards.push((cond.clone(), taken));
                    walk_guarded(side, guards, f);
                    guards.pop();
                }
            }
            _ => {}
        }
    }
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

/// What the body binds: each `let`'s right-hand side, each nested loop's
/// trip count, and each of its mutable variables' assigned values (its
/// initial value included) with the branch conditions that held there
/// (`(cond, taken)`, outermost first).
#[derive(Default)]
struct Binds {
    lets: FxHashMap<VarId, Rhs>,
    loops: FxHashMap<VarId, Op>,
    sets: FxHashMap<VarId, Vec<(Op, Guards)>>,
}

type Guards = Vec<(Op, bool)>;

fn binds(body: &Block) -> Binds {
    let mut out = Binds::default();
    walk_guarded(body, &mut Vec::new(), &mut |s, guards| match s {
        Stmt::Let(v, r) => {
            out.lets.insert(*v, r.clone());
        }
        Stmt::DeclMut(v, init) => {
            let sets = out.sets.entry(*v).or_default();
            sets.extend(init.iter().map(|x| (x.clone(), guards.clone())));
        }
        Stmt::Set(v, x) => {
            if let Some(sets) = out.sets.get_mut(v) {
                sets.push((x.clone(), guards.clone()));
            }
        }
        Stmt::For { idx, n, .. } => {
            out.loops.insert(*idx, n.clone());
        }
        _ => {}
    });
    out
}

/// Is the Integer `x` at most `s` wherever it is read (under `guards`)?
/// It is when it is `s`, a constant not above a constant `s`, a copy or a
/// select of such values, a mutable variable of the body every assignment
/// of which is such a value where it is made, or bounded by a condition
/// that holds (`x < y`, `!(y < x)`, ... with `y` at most `s`): the length
/// `min(n - lo, B)` of a block of `reduce` or `scan`, which the lowering
/// writes as a branch. `depth` bounds the search (a mutable variable may
/// be assigned from itself).
fn at_most(b: &Binds, x: &Op, s: &Op, guards: &[(Op, bool)], depth: u32) -> bool {
    if x == s {
        return true;
    }
    if let (Op::Int(a), Op::Int(c)) = (x, s) {
        return a <= c;
    }
    if depth == 0 {
        return false;
    }
    // A mutable variable may change between a test and a read: only
    // immutable values are bounded by conditions.
    let fixed = |o: &Op| !matches!(o, Op::Var(v) if b.sets.contains_key(v));
    let bounded_by_guard = fixed(x)
        && guards.iter().any(|(c, taken)| {
            let Op::Var(c) = c else { return false };
            let Some(Rhs::Bin(op, l, r)) = b.lets.get(c) else { return false };
            let bound = match (op, taken) {
                (BinOp::ILt | BinOp::ILe, true) if l == x => r,
                (BinOp::IGt | BinOp::IGe, true) if r == x => l,
                (BinOp::ILt | BinOp::ILe, false) if r == x => l,
                (BinOp::IGt | BinOp::IGe, false) if l == x => r,
                _ => return false,
            };
            fixed(bound) && at_most(b, bound, s, &[], depth - 1)
        });
    if bounded_by_guard {
        return true;
    }
    let Op::Var(v) = x else { return false };
    if let Some(sets) = b.sets.get(v) {
        return sets.iter().all(|(y, g)| at_most(b, y, s, g, depth - 1));
    }
    match b.lets.get(v) {
        Some(Rhs::Copy(y)) => at_most(b, y, s, guards, depth - 1),
        Some(Rhs::Select(c, y, z)) => [(y, true), (z, false)].into_iter().all(|(o, taken)| {
            let mut g = guards.to_vec();
            g.push((c.clone(), taken));
            at_most(b, o, s, &g, depth - 1)
        }),
        _ => false,
    }
}

/// `a + b` or `a * b` of Integers, checked (a failed check stops the
/// program) or not: `Some((a, b))` if `r` is that operation.
fn int_op(r: Option<&Rhs>, add: bool) -> Option<(&Op, &Op)> {
    match (r?, add) {
        (Rhs::Bin(BinOp::IAddNoCheck, a, b), true)
        | (Rhs::IChecked(IOp::Add, a, b, _), true)
        | (Rhs::Bin(BinOp::IMulNoCheck, a, b), false)
        | (Rhs::IChecked(IOp::Mul, a, b, _), false) => Some((a, b)),
        _ => None,
    }
}

/// Does the flat index `at` lie in iteration `i`'s own slab of a tensor,
/// `[i*t, (i+1)*t)` for some t? It does when `at` is `i` itself, or
/// `(x * s) + j` with x in its own slab of `t` and j the index of a loop of
/// the body over `0 .. m`, m at most s (the slab then has `t*s` elements):
/// the flat index of element `(i, j, ...)` of a rank-2 or higher `build`,
/// whose lowering writes rows from nested loops, or element j of block i
/// of a `reduce` or `scan` (and of their derivatives' accumulations). With
/// a constant s >= 1, j may also be a constant in `0 .. s` (or absent, 0):
/// the elements of a loop unrolled s times, as unroll-and-jam writes them;
/// or `t + c` with t the index of a loop over `0 .. m`, c a constant, `0 <=
/// t + c` (c >= 0, or a guard `t + c >= 0` holds at `at`: `guards`, as in
/// [`Binds`]) and `t + c < s` (constants m + c <= s, or a guard `t + c <
/// y` with y at most s): a lane of `scan`'s blocks, which runs behind the
/// one before (`ksc_ir::prim::lane_step`).
fn in_own_slab(b: &Binds, i: VarId, at: &Op, guards: &[(Op, bool)]) -> bool {
    let Op::Var(v) = at else { return false };
    if *v == i {
        return true;
    }
    // x * s with x in its own slab: Some(s).
    let start = |o: &Op| -> Option<Op> {
        let Op::Var(r) = o else { return None };
        let (x, s) = int_op(b.lets.get(r), false)?;
        in_own_slab(b, i, x, &[]).then(|| s.clone())
    };
    if let Some(Op::Int(s)) = start(at) {
        return s >= 1;
    }
    let Some((x, y)) = int_op(b.lets.get(v), true) else { return false };
    let row_and_column = |row: &Op, col: &Op| {
        let Some(s) = start(row) else { return false };
        match (col, &s) {
            (Op::Int(c), Op::Int(s)) => 0 <= *c && c < s,
            // j = t + c (or t), t a loop's index over 0 .. m, c a
            // constant, with 0 <= j and j < s by the bounds or by guards:
            // a lane of `scan`'s blocks (`ksc_ir::prim::lane_step`).
            (Op::Var(j), _) => {
                let (t, c) = match b.lets.get(j) {
                    Some(Rhs::Bin(BinOp::IAddNoCheck, Op::Var(t), Op::Int(c))) => (t, c),
                    _ => (j, &0),
                };
                let Some(m) = b.loops.get(t) else { return false };
                if *c == 0 && at_most(b, m, &s, &[], 8) {
                    return true;
                }
                let guarded = |want: BinOp, bound: &dyn Fn(&Op) -> bool| {
                    guards.iter().any(|(g, taken)| {
                        *taken
                            && matches!(g, Op::Var(g) if matches!(b.lets.get(g),
                                Some(Rhs::Bin(op, Op::Var(x), y)) if *op == want && x == j && bound(y)))
                    })
                };
                let from_zero = *c >= 0 || guarded(BinOp::IGe, &|y| matches!(y, Op::Int(0)));
                let below = match (m, &s) {
                    (Op::Int(m), Op::Int(s)) if m.checked_add(*c).is_some_and(|e| e <= *s) => true,
                    _ => guarded(BinOp::ILt, &|y| at_most(b, y, &s, &[], 8)),
                };
                from_zero && below
            }
            _ => false,
        }
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
/// unknown here), a branch its larger side, a nested loop its trip count's
/// runs of its body: the count if it is a constant, or the constant it is
/// provably at most (the length `min(n - k B, B)` of a block of `reduce` or
/// `scan`: B), else 16 (known only at run time).
pub fn cost(b: &Block) -> u64 {
    cost_in(b, &binds(b))
}

fn cost_in(b: &Block, binds: &Binds) -> u64 {
    b.iter()
        .map(|s| match s {
            Stmt::For { n, pre, body, .. } => {
                runs(binds, n).saturating_mul(cost_in(body, binds)).saturating_add(1 + cost_in(pre, binds))
            }
            Stmt::If { then, els, .. } => 1 + cost_in(then, binds).max(cost_in(els, binds)),
            Stmt::Let(_, Rhs::Call { .. }) => 50,
            _ => 1,
        })
        .fold(0u64, u64::saturating_add)
}

/// The runs [`cost`] counts for a nested loop of trip count `n`.
fn runs(b: &Binds, n: &Op) -> u64 {
    if let Op::Int(c) = n {
        return u64::try_from(*c).unwrap_or(0);
    }
    // The constants that make up n (a select's or an assignment's), the
    // least that bounds it.
    let mut constants = Vec::new();
    let mut work = vec![n.clone()];
    let mut seen = rustc_hash::FxHashSet::default();
    while let Some(x) = work.pop() {
        if constants.len() > 8 || seen.len() > 32 {
            break;
        }
        match &x {
            Op::Int(c) if *c >= 0 => constants.push(*c),
            // (A mutable variable may be assigned from itself.)
            Op::Var(v) if !seen.insert(*v) => {}
            Op::Var(v) => match (b.lets.get(v), b.sets.get(v)) {
                (Some(Rhs::Copy(y)), _) => work.push(y.clone()),
                (Some(Rhs::Select(_, y, z)), _) => work.extend([y.clone(), z.clone()]),
                (_, Some(sets)) => work.extend(sets.iter().map(|(y, _)| y.clone())),
                _ => {}
            },
            _ => {}
        }
    }
    constants.sort_unstable();
    constants.into_iter().find(|&c| at_most(b, n, &Op::Int(c), &[], 8)).map_or(16, |c| u64::try_from(c).unwrap_or(0))
}
