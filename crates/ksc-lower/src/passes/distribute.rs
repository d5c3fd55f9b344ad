//! Loop distribution around recurrences (`distribute-recurrences`).
//!
//! A sequential loop (one that carries values from each iteration to the
//! next) runs its iterations one at a time, and the C compiler does not
//! vectorise it. When it also computes `exp`, `log` or `tanh` of a carried value
//! (through cheap operations) and no carried value that feeds the math
//! depends on it, the expensive part need not wait: the reverse
//! pass of a fold over `reduce`'s log-sum-exp monoid recomputes, per
//! element, `big = max m x; e1 = exp (m - big); e2 = exp (x - big); s :=
//! s e1 + t e2; m := big`. Only the maximum `m` is needed before the
//! `exp`s, and it is a chain of one `max` per element; run one at a time,
//! each `exp` costs its whole latency (about 40 cycles). Such a loop, when
//! it has at least [`MIN_ITERATIONS`] iterations, runs in chunks of
//! [`CHUNK`] iterations, each chunk as three loops:
//!
//! ```text
//! if n >= MIN_ITERATIONS {
//!   for c < ceil(n / CHUNK) {               (pre: the loop's preheader)
//!     lo = c CHUNK; len = min(CHUNK, n - lo)
//!     for j < len { i = lo + j; T_m[j] = m; A(i) }     the recurrences the math needs (m)
//!     for j < len { i = lo + j; m = T_m[j]; U_h[j] = B(i) }  the math, independent iterations
//!     for j < len { i = lo + j; m = T_m[j]; h = U_h[j]; C(i) }  the rest: the body, reading them
//!   }
//! } else { the loop as it was }
//! ```
//!
//! A is what the carried variables read by the math's inputs need (their
//! assignments and everything those read, across iterations: here `m :=
//! max m x`); B is the math (each `exp`, `log` and `tanh` that is not itself part
//! of a recurrence) with what it reads within its iteration; C is the
//! original body without A's assignments, reading the carried values and
//! the math from the chunk's arrays. The second loop has no carried value,
//! so the C compiler vectorises it (the runtime's `exp`, `log` and `tanh`
//! are branch-free); the other two are chains of cheap operations. Each
//! operation is done as before, on the same values, in the same order
//! within its chain: the results are the same to the bit.
//!
//! Only loops that could not fail or have an effect halfway are split: a
//! body of lets that compute (no allocation, no check, no call, nothing
//! that may fail), stores into tensors the loop does not read, mutable
//! variables declared in the body, and assignments of carried variables,
//! each assigned once, after every read of it (the value a fold's step
//! reads is the one before its assignment). The carried variables A
//! computes, and the math, are scalars; A holds no math; the body is at
//! most [`MAX_BODY`] statements (it is copied three times). Math that
//! reads no carried value is left where it is: the processor already runs
//! later iterations' math while the loop's chain waits (`sum (exp v)`,
//! split, measured 7 to 16% slower).

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{fresh_let, rename_in, stmt_operands};

/// Iterations per chunk: the chunk's arrays (8 bytes per iteration each)
/// stay in the first-level cache.
pub const CHUNK: i64 = 256;
/// The largest loop body split (statements).
const MAX_BODY: usize = 64;
/// A loop runs split only if it has at least this many iterations (tested
/// where it starts; a loop of fewer known iterations is left alone).
const MIN_ITERATIONS: i64 = 64;

/// What adds a chunk loop's statements: given the variables, the body so
/// far, the map of the original body's variables, and the index in the
/// chunk.
type Make<'m> = dyn FnMut(&mut Vec<VarInfo>, &mut Block, &mut FxHashMap<VarId, VarId>, &Op) + 'm;

/// The `distribute-recurrences` pass.
pub struct DistributeRecurrences;

impl Pass<Func, LoopCx<'_>> for DistributeRecurrences {
    fn name(&self) -> &'static str {
        "distribute-recurrences"
    }

    /// Whether a loop was split.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        let body = std::mem::take(&mut f.body);
        let mut changed = false;
        f.body = in_block(body, &mut f.vars, &mut changed);
        // The copies' share of what the body computed for the others (the
        // third loop's of the recurrences, the tuples `forwarded` left
        // unread) is dead.
        if changed {
            super::dce::dce(f, cx.effectful);
        }
        changed
    }
}

fn in_block(block: Block, vars: &mut Vec<VarInfo>, changed: &mut bool) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let pre = in_block(pre, vars, changed);
                let body = in_block(body, vars, changed);
                // A loop of a few iterations gains nothing; one without
                // math or too large is not looked at further.
                let short = matches!(n, Op::Int(k) if k < MIN_ITERATIONS);
                let candidate = !reset
                    && !short
                    && body.len() <= MAX_BODY
                    && body.iter().any(|s| matches!(s, Stmt::Let(_, r) if is_math(r)));
                let flat = candidate.then(|| forwarded(&body, vars)).flatten();
                match flat.as_ref().and_then(|b| Some((b, plan(b, vars)?))) {
                    Some((flat, p)) => {
                        *changed = true;
                        // Fewer iterations than MIN_ITERATIONS run as they did.
                        let (s, long) =
                            fresh_let(vars, Rhs::Bin(BinOp::IGe, n.clone(), Op::Int(MIN_ITERATIONS)), Type::Bool);
                        out.push(s);
                        let then = split(idx, n.clone(), pre.clone(), flat, &p, vars);
                        out.push(Stmt::If { cond: long, then, els: vec![Stmt::For { idx, n, pre, body, reset }] });
                    }
                    None => out.push(Stmt::For { idx, n, pre, body, reset }),
                }
            }
            Stmt::If { cond, then, els } => {
                let then = in_block(then, vars, changed);
                let els = in_block(els, vars, changed);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// How a loop body splits (statements by position in the body).
struct Plan {
    /// The carried variables the first loop computes.
    upstream: Vec<VarId>,
    /// The statements of the first loop.
    first: FxHashSet<usize>,
    /// The statements of the second loop (the math and what it reads).
    second: FxHashSet<usize>,
    /// The math: lets the second loop computes and the third reads.
    math: Vec<usize>,
}

fn is_math(rhs: &Rhs) -> bool {
    matches!(rhs, Rhs::Un(UnOp::Math(MathFn::Exp | MathFn::Log | MathFn::Tanh), ..))
}

/// A carried value stored per iteration in the chunk's array: a number.
fn scalar(t: &Type) -> bool {
    matches!(t, Type::Float | Type::Integer)
}

/// The loop body (if it has no nested block) with each component read
/// from a tuple made in the iteration (`field (pack ..)`, through copies
/// and the body's own mutable variables assigned once) read from the
/// component itself: a fold's step packs its new accumulator, assigns it,
/// and reads its components back, and each component should depend only
/// on what computes it.
fn forwarded(body: &Block, vars: &[VarInfo]) -> Option<Block> {
    let mut value: FxHashMap<VarId, Op> = FxHashMap::default();
    let mut packs: FxHashMap<VarId, Vec<Op>> = FxHashMap::default();
    let mut inner = FxHashSet::default();
    let mut set_once: FxHashMap<VarId, usize> = FxHashMap::default();
    for s in body {
        match s {
            Stmt::For { .. } | Stmt::If { .. } => return None,
            Stmt::DeclMut(v, None) => {
                inner.insert(*v);
            }
            Stmt::Set(v, _) => *set_once.entry(*v).or_default() += 1,
            _ => {}
        }
    }
    // What a variable holds: the operand it copies, followed.
    let resolve = |value: &FxHashMap<VarId, Op>, o: &Op| {
        let mut o = o.clone();
        while let Op::Var(v) = &o {
            match value.get(v) {
                Some(next) => o = next.clone(),
                None => break,
            }
        }
        o
    };
    let mut out = Vec::with_capacity(body.len());
    for s in body {
        let s = match s {
            Stmt::Let(x, Rhs::Copy(Op::Var(t))) if inner.contains(t) && value.contains_key(t) => {
                Stmt::Let(*x, Rhs::Copy(value[t].clone()))
            }
            Stmt::Let(x, Rhs::Field(o, i)) => match resolve(&value, o) {
                Op::Var(y) if packs.get(&y).is_some_and(|ops| *i < ops.len()) => {
                    Stmt::Let(*x, Rhs::Copy(packs[&y][*i].clone()))
                }
                _ => s.clone(),
            },
            s => s.clone(),
        };
        match &s {
            Stmt::Let(x, Rhs::Copy(o)) if !matches!(o, Op::Var(v) if vars[v.0 as usize].mutable) => {
                value.insert(*x, resolve(&value, o));
            }
            Stmt::Let(x, Rhs::Pack(ops, _)) => {
                packs.insert(*x, ops.clone());
            }
            Stmt::Set(t, o) if inner.contains(t) && set_once.get(t) == Some(&1) => {
                value.insert(*t, resolve(&value, o));
            }
            _ => {}
        }
        out.push(s);
    }
    Some(out)
}

fn plan(body: &Block, vars: &[VarInfo]) -> Option<Plan> {
    // What the body is made of, and which variables are which.
    let mut inner: FxHashMap<VarId, usize> = FxHashMap::default();
    let mut stored = FxHashSet::default();
    let mut loaded = FxHashSet::default();
    let mut sets: FxHashMap<VarId, Vec<usize>> = FxHashMap::default();
    for (k, s) in body.iter().enumerate() {
        match s {
            Stmt::Let(_, rhs) if rhs.is_pure() && !rhs.can_fail() => {
                if let Rhs::Load { arr: Op::Var(a), .. } = rhs {
                    loaded.insert(*a);
                }
            }
            Stmt::DeclMut(v, _) => {
                inner.insert(*v, k);
            }
            Stmt::Set(v, _) => sets.entry(*v).or_default().push(k),
            Stmt::Store { arr: Op::Var(a), .. } => {
                stored.insert(*a);
            }
            _ => return None,
        }
    }
    if !loaded.is_disjoint(&stored) {
        return None;
    }
    let carried: FxHashMap<VarId, usize> =
        sets.iter().filter(|(v, _)| !inner.contains_key(v)).map(|(v, ks)| (*v, ks[0])).collect();
    if carried.is_empty() || carried.keys().any(|v| sets[v].len() != 1) {
        return None;
    }
    // Each statement's dependences within its iteration, and the carried
    // variables it reads (their values from the iteration before).
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); body.len()];
    let mut reads_carried: Vec<Vec<VarId>> = vec![Vec::new(); body.len()];
    let mut def_at: FxHashMap<VarId, usize> = FxHashMap::default();
    let mut set_at: FxHashMap<VarId, usize> = FxHashMap::default();
    for (k, s) in body.iter().enumerate() {
        for o in stmt_operands(s) {
            let Op::Var(v) = o else { continue };
            if let Some(&d) = def_at.get(v).or_else(|| set_at.get(v)) {
                deps[k].push(d);
            } else if carried.contains_key(v) {
                reads_carried[k].push(*v);
            }
        }
        match s {
            Stmt::Let(v, _) => {
                def_at.insert(*v, k);
            }
            Stmt::DeclMut(v, _) => {
                set_at.insert(*v, k);
            }
            Stmt::Set(v, _) => {
                if let Some(&d) = inner.get(v) {
                    deps[k].push(d);
                }
                // A carried variable read after its assignment: the third
                // loop, which does not assign it, could not read it.
                if carried.contains_key(v) && body[k + 1..].iter().any(|s| reads(s, *v)) {
                    return None;
                }
                set_at.insert(*v, k);
            }
            _ => {}
        }
    }
    // The statements `from` needs, within its iteration (`across`: and in
    // the iterations before, through the carried variables).
    let needs = |from: &[usize], across: bool| {
        let mut seen = FxHashSet::default();
        let mut stack: Vec<usize> = from.to_vec();
        while let Some(k) = stack.pop() {
            let before = deps[k].iter().copied();
            let carried_before = reads_carried[k].iter().map(|v| carried[v]).filter(|_| across);
            for d in before.chain(carried_before.collect::<Vec<_>>()) {
                if seen.insert(d) {
                    stack.push(d);
                }
            }
        }
        seen
    };
    let is_math_at = |k: usize| matches!(&body[k], Stmt::Let(_, r) if is_math(r));
    let float_let = |k: usize| matches!(&body[k], Stmt::Let(v, _) if vars[v.0 as usize].ty == Type::Float);
    // The math that is not part of a recurrence.
    let math: Vec<usize> =
        (0..body.len()).filter(|&k| is_math_at(k) && float_let(k) && !needs(&[k], true).contains(&k)).collect();
    if math.is_empty() {
        return None;
    }
    let mut second = needs(&math, false);
    second.extend(math.iter().copied());
    // The carried variables the math reads, and what computes them.
    let read: FxHashSet<VarId> = second.iter().flat_map(|&k| reads_carried[k].iter().copied()).collect();
    let sets_read: Vec<usize> = read.iter().map(|v| carried[v]).collect();
    let mut first = needs(&sets_read, true);
    first.extend(sets_read);
    if first.iter().any(|&k| is_math_at(k)) {
        return None;
    }
    let mut upstream: Vec<VarId> = carried.iter().filter(|(_, k)| first.contains(k)).map(|(v, _)| *v).collect();
    upstream.sort();
    // Math that reads no carried value runs ahead of the loop's chains
    // already (the processor starts later iterations' math while the
    // chain waits): `sum (exp v)`, split, measured 7 to 16% slower.
    if upstream.is_empty() || upstream.iter().any(|v| !scalar(&vars[v.0 as usize].ty)) {
        return None;
    }
    // The second loop reads no carried variable but those the first gives.
    if second.iter().flat_map(|&k| reads_carried[k].iter()).any(|v| !upstream.contains(v)) {
        return None;
    }
    Some(Plan { upstream, first, second, math })
}

/// Does the statement read `v`?
fn reads(s: &Stmt, v: VarId) -> bool {
    stmt_operands(s).iter().any(|o| **o == Op::Var(v))
}

/// The loop `for idx < n { body }` (preheader `pre`) split as `p` says.
fn split(idx: VarId, n: Op, pre: Block, body: &Block, p: &Plan, vars: &mut Vec<VarInfo>) -> Block {
    let int = Type::Integer;
    let mut out = Vec::new();
    let array = |vars: &mut Vec<VarInfo>, elem: Type, out: &mut Block| {
        let ty = Type::vec(elem.clone());
        let (s, a) = fresh_let(vars, Rhs::Alloc { dims: vec![Op::Int(CHUNK)], elem }, ty);
        out.push(s);
        a
    };
    let mut carried = Vec::new();
    for &v in &p.upstream {
        let ty = vars[v.0 as usize].ty.clone();
        carried.push((v, array(vars, ty, &mut out)));
    }
    let math: Vec<(usize, Op)> = p.math.iter().map(|&k| (k, array(vars, Type::Float, &mut out))).collect();
    let (s, up) = fresh_let(vars, Rhs::Bin(BinOp::IAddNoCheck, n.clone(), Op::Int(CHUNK - 1)), int.clone());
    out.push(s);
    let (s, chunks) = fresh_let(vars, Rhs::IChecked(IOp::Div, up, Op::Int(CHUNK), SiteId::UNCHECKED), int.clone());
    out.push(s);
    // The preheader is copied (the loop also runs as it was): its own
    // variables, which the body reads.
    let mut pre = pre;
    let pre_vars = rename_in(&mut pre, vars, FxHashMap::default());
    let c = new_index(vars);
    let mut chunk = Vec::new();
    let (s, lo) = fresh_let(vars, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(c), Op::Int(CHUNK)), int.clone());
    chunk.push(s);
    let (s, rest) = fresh_let(vars, Rhs::IChecked(IOp::Sub, n, lo.clone(), SiteId::UNCHECKED), int.clone());
    chunk.push(s);
    let (s, short) = fresh_let(vars, Rhs::Bin(BinOp::ILt, rest.clone(), Op::Int(CHUNK)), Type::Bool);
    chunk.push(s);
    let (s, len) = fresh_let(vars, Rhs::Select(short, rest, Op::Int(CHUNK)), int.clone());
    chunk.push(s);
    // One loop over the chunk: `i = lo + j`, then `make` (given the map
    // of the body's variables so far and j) adds its statements.
    let inner = |vars: &mut Vec<VarInfo>, make: &mut Make| {
        let j = new_index(vars);
        let mut b = Vec::new();
        let (s, i) = fresh_let(vars, Rhs::Bin(BinOp::IAddNoCheck, lo.clone(), Op::Var(j)), int.clone());
        b.push(s);
        let mut map = pre_vars.clone();
        map.insert(idx, i.var().expect("a variable"));
        make(vars, &mut b, &mut map, &Op::Var(j));
        Stmt::For { idx: j, n: len.clone(), pre: Vec::new(), body: b, reset: false }
    };
    // The carried values, as the iteration reads them, from the chunk's
    // arrays (second and third loops).
    let load_carried = |vars: &mut Vec<VarInfo>, b: &mut Block, map: &mut FxHashMap<VarId, VarId>, j: &Op| {
        for (v, arr) in &carried {
            let ty = vars[v.0 as usize].ty.clone();
            let (s, x) = fresh_let(vars, Rhs::Load { arr: arr.clone(), idx: j.clone() }, ty);
            b.push(s);
            map.insert(*v, x.var().expect("a variable"));
        }
    };
    // First: the carried values stored, then their recurrences.
    chunk.push(inner(vars, &mut |vars, b, map, j| {
        for (v, arr) in &carried {
            let ty = vars[v.0 as usize].ty.clone();
            let (s, x) = fresh_let(vars, Rhs::Copy(Op::Var(*v)), ty);
            b.push(s);
            b.push(Stmt::Store { arr: arr.clone(), idx: j.clone(), val: x });
        }
        let mut part: Block =
            body.iter().enumerate().filter(|(k, _)| p.first.contains(k)).map(|(_, s)| s.clone()).collect();
        *map = rename_in(&mut part, vars, std::mem::take(map));
        b.extend(part);
    }));
    // Second: the math.
    chunk.push(inner(vars, &mut |vars, b, map, j| {
        load_carried(vars, b, map, j);
        let mut part: Block =
            body.iter().enumerate().filter(|(k, _)| p.second.contains(k)).map(|(_, s)| s.clone()).collect();
        let renamed = rename_in(&mut part, vars, std::mem::take(map));
        b.extend(part);
        for (k, arr) in &math {
            let Stmt::Let(v, _) = &body[*k] else { unreachable!("math is a let") };
            b.push(Stmt::Store { arr: arr.clone(), idx: j.clone(), val: Op::Var(renamed[v]) });
        }
    }));
    // Third: the rest, reading the carried values and the math.
    chunk.push(inner(vars, &mut |vars, b, map, j| {
        load_carried(vars, b, map, j);
        let mut part: Block = Vec::new();
        for (k, s) in body.iter().enumerate() {
            match s {
                Stmt::Set(v, _) if p.upstream.contains(v) => {}
                Stmt::Let(v, _) if p.math.contains(&k) => {
                    let arr = &math.iter().find(|(m, _)| *m == k).expect("its array").1;
                    part.push(Stmt::Let(*v, Rhs::Load { arr: arr.clone(), idx: j.clone() }));
                }
                s => part.push(s.clone()),
            }
        }
        rename_in(&mut part, vars, std::mem::take(map));
        b.extend(part);
    }));
    out.push(Stmt::For { idx: c, n: Op::Var(chunks.var().expect("a variable")), pre, body: chunk, reset: false });
    out
}

fn new_index(vars: &mut Vec<VarInfo>) -> VarId {
    vars.push(VarInfo { ty: Type::Integer, name: Some("i".into()), mutable: false });
    VarId(vars.len() as u32 - 1)
}
