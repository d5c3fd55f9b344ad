//! Register blocking of sums (unroll-and-jam, `jam-sums`).
//!
//! A loop whose every iteration computes a Float sum in an inner loop
//! (`build m (lam j (.. sumbuild t (lam i e) ..))`: the rows of a
//! matrix-vector product, of a triangular product) adds each term to the
//! sum before it, so each addition waits for the one before: the loop runs
//! at one term per addition latency (4 cycles on x86). The order of the
//! additions is the sum's value, so neither ksc nor the C compiler may
//! reorder them; but the sums of different rows are independent. Such a
//! loop runs in blocks of [`JAM`] rows: the block's sums advance together
//! in one inner loop (each row's terms still added in its own order, so
//! every sum is bit for bit what it was), and then each row does the rest
//! of its iteration with its sum. GMM's objective at d = 64 is 1.7 times
//! faster for it.
//!
//! ```text
//! for j < n { P(j); if c(j) { Q(j); acc = a0(j); for i < t(j) { ..; acc := acc + x(i, j) } R(j, acc) } S(j) }
//! ```
//!
//! becomes
//!
//! ```text
//! for b < n / 8 {
//!   j0 = 8 b; j1 = j0 + 1; ..; jammed = false
//!   P'(j0) .. P'(j7)                    (what the sums need of P, per row)
//!   if c(j0) && .. && c(j7) {           (and every check before the sum)
//!     Q'(j0) .. Q'(j7)
//!     if min t(jk) >= 8 {
//!       acc0 = a0(j0); ..; for i < min t { x(i, j0) .. x(i, j7) added; keep acc0 .. acc7 }
//!       body(j0), its sum going on from acc0 at term min t; .. body(j7)
//!       jammed = true
//!     }
//!   }
//!   if !jammed { for k < 8: body(j0 + k) }
//! }
//! for k < n - 8 (n / 8): body(8 (n / 8) + k)
//! ```
//!
//! What runs ahead of a row's own iteration (its part of P and Q and its
//! sum) only computes: lets without effects that cannot fail, loads
//! included, and values an `if` of such lets chooses (copied per row, each
//! row taking its own branch). A row's lets after a test (an `if` on the way, or a check,
//! which a load after it may rely on) run only once every row of the block
//! passed that test, so nothing is read that the row would not read. The
//! rows' own iterations then run in order, so their effects (stores,
//! checks, prints) happen as before. The sums must not read what the body
//! writes (no tensor the body stores into, no variable it assigns). The
//! only checks a sum may have are index checks `0 <= a + i < m` (and the
//! checked additions `a + i` they test): every row tests them for the
//! block's terms at once (`a >= 0`, `m >= 0`, `min t <= m - a`) and the
//! terms run together without them; a row failing the test runs row by
//! row, where its check fails as before. A sum with other checks (an index
//! `i / 2`, an overflow) is left alone, so checked code has fewer such
//! loops than `--unchecked` code.

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{
    count_stmts, defined_in, definitions, fresh_let, lets_of, push_var, rename_in, rewrite_loops, stmt_operands, walk,
};

/// Rows per block.
const JAM: i64 = 8;
/// A block runs jammed only when every row's sum has at least this many
/// terms (else it runs row by row): fewer do not pay for the set-up.
const JAM_MIN_TERMS: i64 = 8;
/// The largest loop body (statements, nested ones included) jammed: it is
/// copied ten times (eight rows, row by row, and after the last block).
const JAM_BODY: usize = 48;

type Map = FxHashMap<VarId, VarId>;

/// The `jam-sums` pass.
pub struct JamSums;

impl Pass<Func, LoopCx<'_>> for JamSums {
    fn name(&self) -> &'static str {
        "jam-sums"
    }

    /// Whether a loop was jammed.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        jam_sums(f)
    }
}

/// Jams every loop of the function that qualifies (innermost first);
/// whether there was one.
fn jam_sums(f: &mut Func) -> bool {
    let defs = definitions(&f.body);
    let body = std::mem::take(&mut f.body);
    let mut changed = false;
    let vars = &mut f.vars;
    f.body = rewrite_loops(body, &mut |s| {
        let Stmt::For { idx, n, pre, body, reset } = s else { unreachable!("a loop") };
        match plan(idx, &n, &body, vars, &defs) {
            Some(sum) => {
                changed = true;
                jam(idx, n, pre, body, reset, &sum, vars)
            }
            None => vec![Stmt::For { idx, n, pre, body, reset }],
        }
    });
    changed
}

/// The inner sum of a loop body, and what its rows compute ahead.
struct Sum {
    /// The `if`s on the way to it: (position in its block, then-branch?).
    path: Vec<(usize, bool)>,
    /// The sum's loop's position in its block.
    at: usize,
    acc: VarId,
    init: Op,
    idx: VarId,
    terms: Op,
    /// The sum's loop body as the rows run it together: lets, and last
    /// `acc := acc + x` (its checks hold: `ranges`).
    step: Block,
    /// (a, m): each row's indices a + i must lie in 0 .. m (or be at least
    /// 0) for the block's terms, tested before they run together.
    ranges: Vec<(Op, Option<Op>)>,
    /// Its preheader: lets.
    pre: Block,
    /// The tests on the way to the sum, in order, and the sum last; with
    /// each, the positions in its block of the lets that the sums and the
    /// tests need and that come before it (and after the one before).
    stops: Vec<(Stop, Vec<usize>)>,
}

/// A point on the way to a row's sum, where every row of a block must pass
/// for the block to go on (else it runs row by row).
#[derive(Clone, Copy)]
struct Stop {
    /// The depth of its block on the path, and its position there.
    depth: usize,
    at: usize,
    kind: StopKind,
}

#[derive(Clone, Copy, PartialEq)]
enum StopKind {
    /// The path goes into this branch of an `if`.
    Branch(bool),
    /// A check: what follows may rely on it (a load in range).
    Check,
    /// The sum's loop.
    Sum,
}

/// A let that may run ahead: no effect, no allocation, cannot fail.
pub(crate) fn computes(rhs: &Rhs) -> bool {
    rhs.is_pure() && !rhs.can_fail()
}

/// A call of a library function (`exp`, `log`, `pow`, ...): a term with
/// one takes longer than its addition, and eight rows' sums would live in
/// memory across the calls (no register survives a call), so such a sum
/// is not blocked.
fn calls_library(rhs: &Rhs) -> bool {
    matches!(
        rhs,
        Rhs::Un(UnOp::Math(m), ..) if !matches!(m, MathFn::Fabs | MathFn::Sqrt)
    ) || matches!(rhs, Rhs::Un(UnOp::RanHashDoub, ..) | Rhs::Bin(BinOp::FPowI, ..))
}

/// A sum's loop, as the block's rows run it together.
struct SumLoop {
    acc: VarId,
    /// Its body without its checks, its checked additions unchecked.
    fast: Block,
    /// What its checks ask, (a, m) for an index a + i: that 0 <= a + i (<
    /// m, if there is an m) for every term i of the block (a and m do not
    /// depend on i).
    ranges: Vec<(Op, Option<Op>)>,
}

/// `for i < t { lets; acc := acc + x }` with a Float `acc` read only there
/// (and a preheader of lets that compute, if any), calling no library
/// function. Its lets compute, but
/// for index checks `0 <= a + i < m` (or either half) and the checked
/// additions `a + i` they test, which hold for all terms when they hold at
/// both ends: the rows test them before they run together.
fn sum_loop(s: &Stmt, vars: &[VarInfo]) -> Option<SumLoop> {
    let Stmt::For { idx: i, pre, body, reset: false, .. } = s else { return None };
    let Some(Stmt::Set(acc, Op::Var(t))) = body.last() else { return None };
    if !pre.iter().all(|s| matches!(s, Stmt::Let(_, rhs) if computes(rhs))) {
        return None;
    }
    let info = &vars[acc.0 as usize];
    if !info.mutable || info.ty != Type::Float {
        return None;
    }
    let lets = lets_of(body);
    let step_var = |o: &Op| matches!(o, Op::Var(v) if lets.contains_key(v) || v == i);
    // An index a + i (or i), with a not computed in the loop: a.
    let offset = |x: &Op| -> Option<Op> {
        match x {
            Op::Var(v) if v == i => Some(Op::Int(0)),
            Op::Var(v) => match lets.get(v)? {
                Rhs::IChecked(IOp::Add, a, Op::Var(w), _)
                | Rhs::Bin(BinOp::IAddNoCheck, a, Op::Var(w))
                | Rhs::IChecked(IOp::Add, Op::Var(w), a, _)
                | Rhs::Bin(BinOp::IAddNoCheck, Op::Var(w), a)
                    if w == i && !step_var(a) =>
                {
                    Some(a.clone())
                }
                _ => None,
            },
            _ => None,
        }
    };
    let mut ranges: Vec<(Op, Option<Op>)> = Vec::new();
    let mut tested: FxHashSet<VarId> = FxHashSet::default();
    let mut fast = Vec::new();
    let mut reads = 0;
    let mut adds = false;
    for s in &body[..body.len() - 1] {
        match s {
            Stmt::Let(_, rhs) if calls_library(rhs) => return None,
            Stmt::Let(v, rhs) if computes(rhs) => {
                reads += rhs.operands().iter().filter(|o| ***o == Op::Var(*acc)).count();
                if v == t {
                    adds = matches!(rhs, Rhs::Bin(BinOp::FAdd, a, b) if (*a == Op::Var(*acc)) != (*b == Op::Var(*acc)));
                }
                fast.push(s.clone());
            }
            // A checked a + i: safe where a range check on it holds.
            Stmt::Let(v, Rhs::IChecked(IOp::Add, ..)) => {
                let a = offset(&Op::Var(*v))?;
                fast.push(Stmt::Let(*v, Rhs::Bin(BinOp::IAddNoCheck, a, Op::Var(*i))));
            }
            Stmt::Check { cond, .. } => {
                // Its conjuncts, each `x < m` or `x >= 0` of an index x.
                let mut work = vec![cond.clone()];
                while let Some(c) = work.pop() {
                    let Op::Var(c) = c else { return None };
                    match lets.get(&c)? {
                        Rhs::Bin(BinOp::And, p, q) => work.extend([p.clone(), q.clone()]),
                        Rhs::Bin(BinOp::ILt, x, m) if !step_var(m) => {
                            ranges.push((offset(x)?, Some(m.clone())));
                            tested.extend(x.var());
                        }
                        Rhs::Bin(BinOp::IGe, x, Op::Int(0)) => ranges.push((offset(x)?, None)),
                        _ => return None,
                    }
                }
            }
            _ => return None,
        }
    }
    // Every checked addition is tested against an upper bound.
    let unchecked = body.iter().all(|s| match s {
        Stmt::Let(v, rhs @ Rhs::IChecked(IOp::Add, ..)) if rhs.can_fail() => tested.contains(v),
        _ => true,
    });
    fast.push(Stmt::Set(*acc, Op::Var(*t)));
    (adds && reads == 1 && unchecked).then_some(SumLoop { acc: *acc, fast, ranges })
}

/// The first sum loop in `block` or its branches: its position, and the
/// path to it.
fn find_sum(block: &Block, vars: &[VarInfo], path: &mut Vec<(usize, bool)>) -> Option<(usize, SumLoop)> {
    for (k, s) in block.iter().enumerate() {
        match s {
            Stmt::For { .. } => {
                if let Some(sum) = sum_loop(s, vars) {
                    return Some((k, sum));
                }
            }
            Stmt::If { then, els, .. } => {
                for (branch, b) in [(true, then), (false, els)] {
                    path.push((k, branch));
                    if let Some(at) = find_sum(b, vars, path) {
                        return Some(at);
                    }
                    path.pop();
                }
            }
            _ => {}
        }
    }
    None
}

/// The blocks on the path: the body, then each branch taken.
fn levels<'b>(body: &'b Block, path: &[(usize, bool)]) -> Vec<&'b Block> {
    let mut out = vec![body];
    for &(k, branch) in path {
        let Stmt::If { then, els, .. } = &out.last().expect("the body")[k] else {
            unreachable!("the path goes through ifs")
        };
        out.push(if branch { then } else { els });
    }
    out
}

/// The variables (and what they were copied, projected or loaded from)
/// that a tensor operand may be.
pub(crate) fn roots(v: VarId, defs: &FxHashMap<VarId, Rhs>, out: &mut FxHashSet<VarId>) {
    if !out.insert(v) {
        return;
    }
    let from: Vec<&Op> = match defs.get(&v) {
        Some(Rhs::Copy(a) | Rhs::Field(a, _) | Rhs::Load { arr: a, .. }) => vec![a],
        Some(Rhs::Pack(xs, _)) => xs.iter().collect(),
        _ => vec![],
    };
    for a in from.into_iter().filter_map(Op::var) {
        roots(a, defs, out);
    }
}

/// Does the loop `for idx < n { body }` qualify, and with what sum?
fn plan(idx: VarId, n: &Op, body: &Block, vars: &[VarInfo], defs: &FxHashMap<VarId, Rhs>) -> Option<Sum> {
    if matches!(n, Op::Int(k) if *k < JAM) || count_stmts(body) > JAM_BODY {
        return None;
    }
    // What the rows write, and nothing the copies cannot repeat.
    let mut written = FxHashSet::default();
    let mut assigned = FxHashSet::default();
    let mut plain = true;
    walk(body, &mut |s| match s {
        Stmt::Store { arr: Op::Var(a), .. } => {
            written.insert(*a);
        }
        Stmt::Set(v, _) => {
            assigned.insert(*v);
        }
        Stmt::Accum { .. }
        | Stmt::Keep(_)
        | Stmt::CopyDown { .. }
        | Stmt::Reset(_)
        | Stmt::Return(_)
        | Stmt::TailCall(_) => plain = false,
        Stmt::Let(_, Rhs::Mark | Rhs::TapePush { .. }) => plain = false,
        _ => {}
    });
    if !plain {
        return None;
    }
    let mut path = Vec::new();
    let (at, SumLoop { acc, fast, ranges }) = find_sum(body, vars, &mut path)?;
    let blocks = levels(body, &path);
    let last = blocks[blocks.len() - 1];
    let Stmt::For { idx: i, n: terms, body: step, pre, .. } = &last[at] else { unreachable!("a sum loop") };
    if matches!(terms, Op::Int(k) if *k < JAM_MIN_TERMS) {
        return None;
    }
    // Its start: declared before it in its block, not assigned in between.
    let decl = last[..at].iter().position(|s| matches!(s, Stmt::DeclMut(v, _) if *v == acc))?;
    let Stmt::DeclMut(_, Some(init)) = &last[decl] else { return None };
    let mut set_between = false;
    walk(&last[decl + 1..at], &mut |s| set_between |= matches!(s, Stmt::Set(v, _) if *v == acc));
    if set_between {
        return None;
    }
    // The stops: the checks and the way on in each block of the path.
    let mut stops: Vec<(Stop, Vec<usize>)> = Vec::new();
    for (depth, b) in blocks.iter().enumerate() {
        let (end, kind) = match path.get(depth) {
            Some(&(k, branch)) => (k, StopKind::Branch(branch)),
            None => (at, StopKind::Sum),
        };
        for (p, s) in b[..end].iter().enumerate() {
            match s {
                Stmt::Check { .. } => stops.push((Stop { depth, at: p, kind: StopKind::Check }, Vec::new())),
                // A failure, or a check nested in a loop or branch
                // aside (which what follows may rely on): not this loop.
                Stmt::Fail { .. } | Stmt::For { .. } | Stmt::If { .. } => {
                    let mut fails = false;
                    walk(std::slice::from_ref(s), &mut |s| {
                        fails |= matches!(s, Stmt::Check { .. } | Stmt::Fail { .. })
                    });
                    if fails {
                        return None;
                    }
                }
                _ => {}
            }
        }
        stops.push((Stop { depth, at: end, kind }, Vec::new()));
    }
    // What the sums and the tests read: computed ahead (lets of the path's
    // blocks before the way on), or from outside the loop, unassigned.
    let inside = defined_in(body);
    let mut step_vars = defined_in(step);
    let pre_lets = lets_of(pre);
    let mut work: Vec<VarId> = Vec::new();
    let mut loads: Vec<VarId> = Vec::new();
    let reads = |rhs: &Rhs, work: &mut Vec<VarId>, loads: &mut Vec<VarId>| {
        if let Rhs::Load { arr: Op::Var(a), .. } = rhs {
            loads.push(*a);
        }
        work.extend(rhs.operands().into_iter().filter_map(Op::var));
    };
    for s in step {
        match s {
            Stmt::Let(_, rhs) => reads(rhs, &mut work, &mut loads),
            s => work.extend(stmt_operands(s).into_iter().filter_map(Op::var)),
        }
    }
    work.extend([terms, init].into_iter().filter_map(Op::var));
    for (stop, _) in &stops {
        match &blocks[stop.depth][stop.at] {
            Stmt::If { cond, .. } | Stmt::Check { cond, .. } => work.extend(cond.var()),
            _ => {}
        }
    }
    let mut seen = FxHashSet::default();
    while let Some(v) = work.pop() {
        if v == idx || v == acc || v == *i || step_vars.contains(&v) || !seen.insert(v) {
            continue;
        }
        if !inside.contains(&v) {
            if assigned.contains(&v) {
                return None;
            }
            continue;
        }
        if let Some(rhs) = pre_lets.get(&v) {
            reads(rhs, &mut work, &mut loads);
            continue;
        }
        // A let (or a value an `if` chooses) before the way on, computed
        // at the first stop after it.
        let (stop, p) = stops.iter().enumerate().find_map(|(k, (stop, _))| {
            let from = match k.checked_sub(1).map(|k| stops[k].0) {
                Some(before) if before.depth == stop.depth => before.at + 1,
                _ => 0,
            };
            let b = blocks[stop.depth];
            (from..stop.at).find(|&p| matches!(&b[p], Stmt::Let(w, _) | Stmt::DeclMut(w, _) if *w == v)).map(|p| (k, p))
        })?;
        let b = blocks[stops[stop].0.depth];
        match &b[p] {
            Stmt::Let(_, rhs) if computes(rhs) => {
                reads(rhs, &mut work, &mut loads);
                stops[stop].1.push(p);
            }
            // `mut v; if c { ..; v := x } else { ..; v := y }`, the only
            // assignments of v, with branches of lets that compute.
            Stmt::DeclMut(_, init) => {
                let q = (p + 1..stops[stop].0.at).find(|&q| {
                    let mut sets = false;
                    walk(std::slice::from_ref(&b[q]), &mut |s| sets |= matches!(s, Stmt::Set(w, _) if *w == v));
                    sets
                })?;
                let Stmt::If { cond, then, els } = &b[q] else { return None };
                let mut sets_in_body = 0;
                walk(body, &mut |s| sets_in_body += matches!(s, Stmt::Set(w, _) if *w == v) as usize);
                let mut branch_sets = 0;
                for s in then.iter().chain(els) {
                    match s {
                        Stmt::Let(_, rhs) if computes(rhs) => reads(rhs, &mut work, &mut loads),
                        Stmt::Set(w, x) if *w == v => {
                            branch_sets += 1;
                            work.extend(x.var());
                        }
                        _ => return None,
                    }
                }
                if branch_sets != sets_in_body {
                    return None;
                }
                work.extend(init.iter().filter_map(Op::var).chain(cond.var()));
                // (What the branches define is theirs.)
                step_vars.extend(defined_in(then).into_iter().chain(defined_in(els)));
                stops[stop].1.extend([p, q]);
            }
            _ => return None,
        }
    }
    // The sums read no tensor the rows write.
    let mut bases = FxHashSet::default();
    for a in loads {
        roots(a, defs, &mut bases);
    }
    if bases.iter().any(|b| written.contains(b) || assigned.contains(b)) {
        return None;
    }
    for (_, lets) in &mut stops {
        lets.sort_unstable();
    }
    Some(Sum {
        path,
        at,
        acc,
        init: init.clone(),
        idx: *i,
        terms: terms.clone(),
        step: fast,
        ranges,
        pre: pre.clone(),
        stops,
    })
}

fn new_var(vars: &mut Vec<VarInfo>, like: VarId, mutable: bool) -> VarId {
    let info = VarInfo { mutable, ..vars[like.0 as usize].clone() };
    push_var(vars, info)
}

fn mapped(o: &Op, m: &Map) -> Op {
    match o {
        Op::Var(v) => Op::Var(*m.get(v).unwrap_or(v)),
        o => o.clone(),
    }
}

/// A copy of the statements with fresh variables and the reads of `map`'s
/// variables renamed.
fn copy(b: &[Stmt], vars: &mut Vec<VarInfo>, map: Map) -> (Block, Map) {
    let mut c = b.to_vec();
    let m = rename_in(&mut c, vars, map);
    (c, m)
}

/// `test && c` (or `c`), the conjunction's statement added to `out`.
fn and(test: &mut Option<Op>, c: Op, out: &mut Block, vars: &mut Vec<VarInfo>) {
    *test = Some(match test.take() {
        None => c,
        Some(t) => {
            let (s, x) = fresh_let(vars, Rhs::Bin(BinOp::And, t, c), Type::Bool);
            out.push(s);
            x
        }
    });
}

/// Copies the lets (and values chosen by `if`s) for the rows, whose
/// variables `maps` map: a let that depends on the row (reads a variable
/// of `rowwise`) once per row, the others once, for all.
fn per_row(lets: &[Stmt], maps: &mut [Map], rowwise: &mut FxHashSet<VarId>, vars: &mut Vec<VarInfo>) -> Block {
    let mut out = Vec::new();
    for s in lets {
        // (The declaration and `if` of a value chosen by an `if`: copied
        // for every row.)
        let mut reads: Vec<VarId> = Vec::new();
        walk(std::slice::from_ref(s), &mut |s| reads.extend(stmt_operands(s).into_iter().filter_map(Op::var)));
        let defined: Vec<VarId> = defined_in(std::slice::from_ref(s)).into_iter().collect();
        let rows = if !matches!(s, Stmt::Let(..)) || reads.iter().any(|w| rowwise.contains(w)) {
            rowwise.extend(defined.iter().copied());
            maps.len()
        } else {
            1
        };
        for m in &mut maps[..rows] {
            let (c, m2) = copy(std::slice::from_ref(s), vars, std::mem::take(m));
            out.extend(c);
            *m = m2;
        }
        for v in defined {
            let first = maps[0][&v];
            for m in &mut maps[rows..] {
                m.insert(v, first);
            }
        }
    }
    out
}

/// The loop `for idx < n { body }` (with preheader `pre`) jammed.
fn jam(idx: VarId, n: Op, pre: Block, body: Block, reset: bool, sum: &Sum, vars: &mut Vec<VarInfo>) -> Block {
    let int = Type::Integer;
    let mut out = Vec::new();
    let (s, blocks) = fresh_let(vars, Rhs::IChecked(IOp::Div, n.clone(), Op::Int(JAM), SiteId::UNCHECKED), int.clone());
    out.push(s);
    let b = new_var(vars, idx, false);
    let mut each = Vec::new();
    let (s, j0) = fresh_let(vars, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(b), Op::Int(JAM)), int.clone());
    each.push(s);
    let mut rows = vec![j0.clone()];
    for r in 1..JAM {
        let (s, jr) = fresh_let(vars, Rhs::Bin(BinOp::IAddNoCheck, j0.clone(), Op::Int(r)), int.clone());
        each.push(s);
        rows.push(jr);
    }
    let maps: Vec<Map> = rows.iter().map(|r| [(idx, r.var().expect("a row variable"))].into_iter().collect()).collect();
    // `done`: the block ran jammed; else it runs row by row.
    vars.push(VarInfo { ty: Type::Bool, name: Some("jammed".into()), mutable: true });
    let done = VarId(vars.len() as u32 - 1);
    each.push(Stmt::DeclMut(done, Some(Op::Bool(false))));
    let cx = Jam { idx, body: &body, sum, reset, j0: &j0, done };
    each.extend(cx.level(0, maps, &mut [idx].into_iter().collect(), vars));
    let (s, not_done) = fresh_let(vars, Rhs::Un(UnOp::Not, Op::Var(done), None), Type::Bool);
    each.push(s);
    each.push(Stmt::If { cond: not_done, then: cx.row_by_row(vars), els: Vec::new() });
    out.push(Stmt::For { idx: b, n: blocks.clone(), pre: Vec::new(), body: each, reset });
    // The rows after the last block: the loop as it was.
    let (s, start) = fresh_let(vars, Rhs::Bin(BinOp::IMulNoCheck, blocks, Op::Int(JAM)), int.clone());
    out.push(s);
    let (s, left) = fresh_let(vars, Rhs::IChecked(IOp::Sub, n.clone(), start.clone(), SiteId::UNCHECKED), int);
    out.push(s);
    let k = new_var(vars, idx, false);
    let mut rest = vec![Stmt::Let(idx, Rhs::Bin(BinOp::IAddNoCheck, start, Op::Var(k)))];
    rest.extend(body);
    out.push(Stmt::For { idx: k, n: left, pre: Vec::new(), body: rest, reset });
    if pre.is_empty() {
        return out;
    }
    // The preheader runs if the loop runs at least once, as before.
    let (s, some) = fresh_let(vars, Rhs::Bin(BinOp::IGt, n, Op::Int(0)), Type::Bool);
    let mut then = pre;
    then.extend(out);
    vec![s, Stmt::If { cond: some, then, els: Vec::new() }]
}

struct Jam<'a> {
    idx: VarId,
    body: &'a Block,
    sum: &'a Sum,
    reset: bool,
    j0: &'a Op,
    /// Set once the block ran jammed.
    done: VarId,
}

impl Jam<'_> {
    /// The block's rows one after the other, as the loop ran them.
    fn row_by_row(&self, vars: &mut Vec<VarInfo>) -> Block {
        let k = new_var(vars, self.idx, false);
        let j = new_var(vars, self.idx, false);
        let (copied, _) = copy(self.body, vars, [(self.idx, j)].into_iter().collect());
        let mut b = vec![Stmt::Let(j, Rhs::Bin(BinOp::IAddNoCheck, self.j0.clone(), Op::Var(k)))];
        b.extend(copied);
        vec![Stmt::For { idx: k, n: Op::Int(JAM), pre: Vec::new(), body: b, reset: self.reset }]
    }

    /// Stop `k` on the way to the sums: each row's lets before it computed
    /// ahead, then the test that every row goes on (if one does not, the
    /// block is not `done` and runs row by row). `rowwise`: the variables
    /// whose value depends on the row.
    fn level(&self, k: usize, mut maps: Vec<Map>, rowwise: &mut FxHashSet<VarId>, vars: &mut Vec<VarInfo>) -> Block {
        let (stop, lets) = &self.sum.stops[k];
        let block = levels(self.body, &self.sum.path)[stop.depth];
        let lets: Block = lets.iter().map(|&p| block[p].clone()).collect();
        let mut out = per_row(&lets, &mut maps, rowwise, vars);
        // The rows' tests (or terms) that differ.
        let distinct = |o: &Op, maps: &[Map]| {
            let mut ops: Vec<Op> = Vec::new();
            for m in maps {
                let x = mapped(o, m);
                if !ops.contains(&x) {
                    ops.push(x);
                }
            }
            ops
        };
        let mut test: Option<Op> = None;
        let then = match (stop.kind, &block[stop.at]) {
            (StopKind::Branch(_), Stmt::If { cond, .. }) | (StopKind::Check, Stmt::Check { cond, .. }) => {
                let branch = stop.kind != StopKind::Branch(false);
                for mut c in distinct(cond, &maps) {
                    if !branch {
                        let (s, nc) = fresh_let(vars, Rhs::Un(UnOp::Not, c, None), Type::Bool);
                        out.push(s);
                        c = nc;
                    }
                    and(&mut test, c, &mut out, vars);
                }
                self.level(k + 1, maps, rowwise, vars)
            }
            _ => {
                // The fewest terms of the rows' sums.
                let terms = distinct(&self.sum.terms, &maps);
                let mut fewest = terms[0].clone();
                for t in &terms[1..] {
                    let (s, lt) = fresh_let(vars, Rhs::Bin(BinOp::ILt, t.clone(), fewest.clone()), Type::Bool);
                    out.push(s);
                    let (s, m) = fresh_let(vars, Rhs::Select(lt, t.clone(), fewest), Type::Integer);
                    out.push(s);
                    fewest = m;
                }
                let (s, enough) =
                    fresh_let(vars, Rhs::Bin(BinOp::IGe, fewest.clone(), Op::Int(JAM_MIN_TERMS)), Type::Bool);
                out.push(s);
                test = Some(enough);
                self.jammed(maps, fewest, rowwise, vars)
            }
        };
        out.push(Stmt::If { cond: test.expect("a test"), then, els: Vec::new() });
        out
    }

    /// The rows' sums together, then each row's iteration with its sum.
    fn jammed(&self, mut maps: Vec<Map>, fewest: Op, rowwise: &mut FxHashSet<VarId>, vars: &mut Vec<VarInfo>) -> Block {
        let s = self.sum;
        // The sum's preheader (it runs: every row has terms).
        let mut head = per_row(&s.pre, &mut maps, rowwise, vars);
        // Every row's indices a + i in 0 .. m for i < fewest: a >= 0, m >=
        // 0 (so m - a cannot overflow) and fewest <= m - a.
        let mut ranges: Vec<(Op, Option<Op>)> = Vec::new();
        for m in &maps {
            for (a, lim) in &s.ranges {
                let r = (mapped(a, m), lim.as_ref().map(|l| mapped(l, m)));
                if !ranges.contains(&r) {
                    ranges.push(r);
                }
            }
        }
        let mut test: Option<Op> = None;
        for (a, lim) in ranges {
            for x in std::iter::once(&a).chain(&lim) {
                if !matches!(x, Op::Int(k) if *k >= 0) {
                    let (s, ok) = fresh_let(vars, Rhs::Bin(BinOp::IGe, x.clone(), Op::Int(0)), Type::Bool);
                    head.push(s);
                    and(&mut test, ok, &mut head, vars);
                }
            }
            let Some(lim) = lim else { continue };
            let room = if a == Op::Int(0) {
                lim
            } else {
                let (s, room) = fresh_let(vars, Rhs::IChecked(IOp::Sub, lim, a, SiteId::UNCHECKED), Type::Integer);
                head.push(s);
                room
            };
            let (s, fits) = fresh_let(vars, Rhs::Bin(BinOp::ILe, fewest.clone(), room), Type::Bool);
            head.push(s);
            and(&mut test, fits, &mut head, vars);
        }
        let mut out = Vec::new();
        let accs: Vec<VarId> = maps.iter().map(|_| new_var(vars, s.acc, true)).collect();
        for (m, a) in maps.iter().zip(&accs) {
            out.push(Stmt::DeclMut(*a, Some(mapped(&s.init, m))));
        }
        // The rows' steps at term `i`: what depends neither on the row nor
        // on the sum computed once.
        let i = new_var(vars, s.idx, false);
        let mut ms: Vec<Map> = maps
            .iter()
            .zip(&accs)
            .map(|(m, a)| {
                let mut m = m.clone();
                m.insert(s.acc, *a);
                m.insert(s.idx, i);
                m
            })
            .collect();
        let mut rowwise = rowwise.clone();
        rowwise.insert(s.acc);
        let Some(Stmt::Set(_, last)) = s.step.last() else { unreachable!("a sum's step") };
        let mut together = per_row(&s.step[..s.step.len() - 1], &mut ms, &mut rowwise, vars);
        for (m, a) in ms.iter().zip(&accs) {
            together.push(Stmt::Set(*a, mapped(last, m)));
        }
        together.push(Stmt::Keep(accs.iter().map(|a| Op::Var(*a)).collect()));
        out.push(Stmt::For { idx: i, n: fewest.clone(), pre: Vec::new(), body: together, reset: false });
        // Each row's iteration, its sum's loop replaced by its sum.
        let mut template = self.body.clone();
        let mut block = &mut template;
        for &(k, branch) in &s.path {
            let Stmt::If { then, els, .. } = &mut block[k] else { unreachable!("the path goes through ifs") };
            block = if branch { then } else { els };
        }
        // The row's sum goes on from its first `fewest` terms.
        let placeholder = new_var(vars, s.acc, false);
        let Stmt::For { idx: i, n: terms, pre, body: step, reset } =
            std::mem::replace(&mut block[s.at], Stmt::Set(s.acc, Op::Var(placeholder)))
        else {
            unreachable!("a sum loop")
        };
        let (st, left) =
            fresh_let(vars, Rhs::IChecked(IOp::Sub, terms, fewest.clone(), SiteId::UNCHECKED), Type::Integer);
        let k = new_var(vars, i, false);
        let mut rest = vec![Stmt::Let(i, Rhs::Bin(BinOp::IAddNoCheck, fewest, Op::Var(k)))];
        rest.extend(step);
        block.splice(s.at + 1..s.at + 1, [st, Stmt::For { idx: k, n: left, pre, body: rest, reset }]);
        for (r, a) in accs.iter().enumerate() {
            let j = maps[r][&self.idx];
            out.extend(copy(&template, vars, [(self.idx, j), (placeholder, *a)].into_iter().collect()).0);
        }
        out.push(Stmt::Set(self.done, Op::Bool(true)));
        match test {
            Some(cond) => head.push(Stmt::If { cond, then: out, els: Vec::new() }),
            None => head.extend(out),
        }
        head
    }
}
