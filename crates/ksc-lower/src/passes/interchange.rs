//! Several sums per row, interchanged (`interchange-sums`).
//!
//! A loop whose every iteration computes several Float sums over the same
//! inner range (`build n (lam v (.. sumbuild m (lam b (tuple ..)) ..))`:
//! HT's skinning, each vertex the weighted sum over the bones of their
//! transforms applied to it, three coordinates at once) runs the inner
//! loop per row: its terms are computed one row at a time, the C compiler
//! cannot vectorise across rows (the sums are in order), and each term
//! reads the same inner data again (a bone's transform) for every row.
//! Such a loop is interchanged, a chunk of [`CHUNK`] rows at a time: the
//! chunk's sums live in vectors, one element per row, and the inner range
//! goes outside the rows.
//!
//! ```text
//! for v < n { P(v); mut a1 = e1 .. ak = ek; for b < m { S(v, b); a1 := a1 + x1; ..; ak := ak + xk } Q(v, a1 .. ak) }
//! ```
//!
//! becomes (the arena reset after each chunk, so memory does not grow
//! with n)
//!
//! ```text
//! for c < ceil(n / CHUNK) {
//!   lo = c CHUNK; len = min(CHUNK, n - lo); A1 = alloc [CHUNK] .. Ak = alloc [CHUNK]
//!   for r < len { v = lo + r; P(v); A1[r] = e1; ..; Ak[r] = ek }        (P's checks: here)
//!   for b < m { S0(b); for r < len { v = lo + r; P'(v); S(v, b); A1[r] = A1[r] + x1; .. } }
//!   for r < len { v = lo + r; P(v); mut a1 = A1[r] .. ak = Ak[r]; Q(v, a1 .. ak) }
//! }
//! ```
//!
//! (P' is what S reads of P, what nothing reads going with `dce`; S0 is
//! what S computes the same for every row, moved out of it). Each sum
//! adds the same terms in the same order, so its value is the same to the
//! bit; the rows' loops are independent, and the C compiler vectorises
//! the middle one; the chunks are independent too (`parallel.rs` gives
//! them teams). HT's objective: 1.7 times faster on one core.
//!
//! Conditions: the loop does not reset the arena (a preheader, of
//! invariant values that may fail, goes before the three loops, all of
//! them under `if n > 0`); n
//! and m are not constants below [`MIN_ROWS`] and [`MIN_TERMS`], and m is
//! the same for every row (defined outside the loop); the body is P, the
//! inner loop, then Q, none of them with a loop or a branch. P has lets
//! that compute (no effect, no allocation, cannot fail), the sums'
//! declarations, and checks of conditions defined outside the loop (they
//! fail, if at all, in the first row, before anything else could). The
//! inner loop's body has lets that compute and, for each sum, `a := a + x`
//! (its only read of `a`); there are at least two sums (one sum per row is
//! `jam-sums`'), at most [`MAX_SUMS`]. Q has lets that compute and stores,
//! and nothing P or the inner loop reads is a tensor Q stores into (the
//! rows' terms now all run before any row's Q). So nothing fails but P's
//! checks, and moving the terms ahead of the Qs changes no value read.

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use super::jam::{computes, roots};
use super::LoopCx;
use crate::ir::*;
use crate::visit::{defined_in, definitions, fresh_let, push_var, rename_in, rewrite_loops, stmt_operands, walk};

/// A loop of fewer rows (a constant count) is left as it is.
const MIN_ROWS: i64 = 64;
/// A loop of fewer terms per sum (a constant count) is left as it is.
const MIN_TERMS: i64 = 4;
/// The most sums per row (each becomes a vector).
const MAX_SUMS: usize = 8;
/// Rows per chunk: the sums' vectors (8 bytes a row each) stay in the
/// first- or second-level cache, and memory does not grow with the rows.
const CHUNK: i64 = 1024;

/// The `interchange-sums` pass.
pub struct InterchangeSums;

impl Pass<Func, LoopCx<'_>> for InterchangeSums {
    fn name(&self) -> &'static str {
        "interchange-sums"
    }

    /// Whether a loop was interchanged.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        let defs = definitions(&f.body);
        let body = std::mem::take(&mut f.body);
        let mut changed = false;
        let vars = &mut f.vars;
        f.body = rewrite_loops(body, &mut |s| {
            let Stmt::For { idx, n, pre, body, reset } = s else { unreachable!("a loop") };
            match plan(idx, &n, &body, reset, vars, &defs) {
                Some(p) => {
                    changed = true;
                    interchange(idx, n, pre, body, p, vars)
                }
                None => vec![Stmt::For { idx, n, pre, body, reset }],
            }
        });
        if changed {
            // What the middle loop's copy of P computes and nothing reads.
            super::dce::dce(f, cx.effectful);
        }
        changed
    }
}

/// What [`interchange`] needs of a loop that qualifies.
struct Plan {
    /// The inner loop's position in the body.
    at: usize,
    /// The sums: each one's variable, and the let of its addition.
    sums: Vec<(VarId, VarId)>,
}

/// Does `for idx < n { body }` qualify (the module's conditions)?
fn plan(idx: VarId, n: &Op, body: &Block, reset: bool, vars: &[VarInfo], defs: &FxHashMap<VarId, Rhs>) -> Option<Plan> {
    if reset || matches!(n, Op::Int(k) if *k < MIN_ROWS) {
        return None;
    }
    let at = body.iter().position(|s| matches!(s, Stmt::For { .. }))?;
    let Stmt::For { n: m, pre: ipre, body: step, reset: false, .. } = &body[at] else { return None };
    let inside = defined_in(body);
    let invariant = |o: &Op| o.var().is_none_or(|v| v != idx && !inside.contains(&v));
    if !ipre.is_empty() || matches!(m, Op::Int(k) if *k < MIN_TERMS) || !invariant(m) {
        return None;
    }
    // The inner loop: lets that compute, and `a := a + x` per sum.
    let in_step = defined_in(step);
    let mut sums: Vec<(VarId, VarId)> = Vec::new();
    for s in step {
        match s {
            Stmt::Let(_, rhs) if computes(rhs) => {}
            Stmt::Set(a, Op::Var(t)) if in_step.contains(t) => {
                let Rhs::Bin(BinOp::FAdd, x, y) = defs.get(t)? else { return None };
                if (*x == Op::Var(*a)) == (*y == Op::Var(*a)) || sums.iter().any(|(b, _)| b == a) {
                    return None;
                }
                sums.push((*a, *t));
            }
            _ => return None,
        }
    }
    if sums.len() < 2 || sums.len() > MAX_SUMS {
        return None;
    }
    // Each sum: a mutable Float declared in P with its start, read in the
    // inner loop only by its addition, assigned nowhere else.
    for &(a, t) in &sums {
        let info = &vars[a.0 as usize];
        if !info.mutable || info.ty != Type::Float {
            return None;
        }
        let declared = body[..at].iter().any(|s| matches!(s, Stmt::DeclMut(v, Some(_)) if *v == a));
        let reads = step
            .iter()
            .filter(|s| matches!(s, Stmt::Let(v, _) if *v != t) && stmt_operands(s).contains(&&Op::Var(a)))
            .count();
        if !declared || reads > 0 {
            return None;
        }
    }
    let is_sum = |v: &VarId| sums.iter().any(|(a, _)| a == v);
    // P: lets that compute (reading no sum), the sums' declarations, and
    // checks of conditions defined outside the loop.
    for s in &body[..at] {
        let ok = match s {
            Stmt::Let(_, rhs) => computes(rhs) && !rhs.operands().iter().any(|o| o.var().is_some_and(|v| is_sum(&v))),
            Stmt::DeclMut(v, Some(_)) => is_sum(v),
            Stmt::Check { cond, .. } => invariant(cond),
            _ => false,
        };
        if !ok {
            return None;
        }
    }
    // Q: lets that compute, and stores.
    let mut stored = FxHashSet::default();
    for s in &body[at + 1..] {
        match s {
            Stmt::Let(_, rhs) if computes(rhs) => {}
            Stmt::Store { arr: Op::Var(a), .. } => roots(*a, defs, &mut stored),
            _ => return None,
        }
    }
    // Nothing P or the inner loop loads is a tensor Q stores into.
    let mut loads_stored = false;
    walk(&body[..at + 1], &mut |s| {
        if let Stmt::Let(_, Rhs::Load { arr: Op::Var(a), .. }) = s {
            let mut from = FxHashSet::default();
            roots(*a, defs, &mut from);
            loads_stored |= !from.is_disjoint(&stored);
        }
    });
    (!loads_stored).then_some(Plan { at, sums })
}

/// The loops of the module's doc for `for idx < n { body }`, chunk by
/// chunk (with its preheader `pre`: then all of it under `if n > 0`, the
/// preheader first, as it ran only before a first iteration).
fn interchange(idx: VarId, n: Op, pre: Block, mut body: Block, plan: Plan, vars: &mut Vec<VarInfo>) -> Block {
    let Plan { at, sums } = plan;
    let q = body.split_off(at + 1);
    let Some(Stmt::For { idx: b, n: m, body: step, .. }) = body.pop() else { unreachable!("the inner loop") };
    let p = body;
    let int = Type::Integer;
    let mut out = Vec::new();
    // The chunks: c < ceil(n / CHUNK), rows lo .. lo + len.
    let (s, up) = fresh_let(vars, Rhs::Bin(BinOp::IAddNoCheck, n.clone(), Op::Int(CHUNK - 1)), int.clone());
    out.push(s);
    let (s, chunks) = fresh_let(vars, Rhs::IChecked(IOp::Div, up, Op::Int(CHUNK), SiteId::UNCHECKED), int.clone());
    out.push(s);
    let index =
        |vars: &mut Vec<VarInfo>| push_var(vars, VarInfo { ty: Type::Integer, name: Some("i".into()), mutable: false });
    let c = index(vars);
    let mut chunk = Vec::new();
    let (s, lo) = fresh_let(vars, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(c), Op::Int(CHUNK)), int.clone());
    chunk.push(s);
    let (s, rest) = fresh_let(vars, Rhs::IChecked(IOp::Sub, n.clone(), lo.clone(), SiteId::UNCHECKED), int.clone());
    chunk.push(s);
    let (s, short) = fresh_let(vars, Rhs::Bin(BinOp::ILt, rest.clone(), Op::Int(CHUNK)), Type::Bool);
    chunk.push(s);
    let (s, len) = fresh_let(vars, Rhs::Select(short, rest, Op::Int(CHUNK)), int.clone());
    chunk.push(s);
    // A vector per sum, of a chunk's rows.
    let arrays: Vec<VarId> = sums
        .iter()
        .map(|&(a, _)| {
            let name = vars[a.0 as usize].name.clone();
            let ty = Type::Tensor(1, Box::new(Type::Float));
            let arr = push_var(vars, VarInfo { ty, name, mutable: false });
            chunk.push(Stmt::Let(arr, Rhs::Alloc { dims: vec![Op::Int(CHUNK)], elem: Type::Float }));
            arr
        })
        .collect();
    let array_of = |a: VarId| arrays[sums.iter().position(|(s, _)| *s == a).expect("a sum")];
    // A loop over the chunk's rows r, row v = lo + r.
    let rows = |r: VarId, v: VarId, body: Block| {
        let mut b = vec![Stmt::Let(v, Rhs::Bin(BinOp::IAddNoCheck, lo.clone(), Op::Var(r)))];
        b.extend(body);
        Stmt::For { idx: r, n: len.clone(), pre: Vec::new(), body: b, reset: false }
    };
    // Each row's starts (P's checks here: the first row's are the loop's
    // first failure).
    let (r1, v1) = (index(vars), index(vars));
    let mut first: Block = p.iter().filter(|s| !matches!(s, Stmt::DeclMut(..))).cloned().collect();
    let map = rename_in(&mut first, vars, FxHashMap::from_iter([(idx, v1)]));
    for s in &p {
        if let Stmt::DeclMut(a, Some(e)) = s {
            let e = match e {
                Op::Var(x) => Op::Var(*map.get(x).unwrap_or(x)),
                e => e.clone(),
            };
            first.push(Stmt::Store { arr: Op::Var(array_of(*a)), idx: Op::Var(r1), val: e });
        }
    }
    chunk.push(rows(r1, v1, first));
    // The terms: for each b, the chunk's rows.
    let (v2, r2) = (index(vars), index(vars));
    let mut terms: Block = p.iter().filter(|s| matches!(s, Stmt::Let(..))).cloned().collect();
    let map = rename_in(&mut terms, vars, FxHashMap::from_iter([(idx, v2)]));
    let mut loaded: FxHashMap<VarId, VarId> = FxHashMap::default();
    for &(a, _) in &sums {
        let (l, x) = fresh_let(vars, Rhs::Load { arr: Op::Var(array_of(a)), idx: Op::Var(r2) }, Type::Float);
        terms.push(l);
        loaded.insert(a, x.var().expect("a variable"));
    }
    let mut step = step;
    for s in step.iter_mut() {
        if let Stmt::Let(_, rhs) = s {
            for o in rhs.operands_mut() {
                if let Op::Var(v) = o {
                    if let Some(w) = map.get(v).or(loaded.get(v)) {
                        *v = *w;
                    }
                }
            }
        }
    }
    // What the step computes the same for every row (a bone's transform,
    // loaded) is computed once per b, before the rows: it computes, and
    // reads no tensor the loop writes (only the sums' vectors).
    let mut variant = defined_in(&terms);
    variant.insert(v2);
    let mut per_b = Vec::new();
    for s in step {
        match s {
            Stmt::Set(a, t) => terms.push(Stmt::Store { arr: Op::Var(array_of(a)), idx: Op::Var(r2), val: t }),
            Stmt::Let(v, rhs) if !rhs.operands().iter().any(|o| o.var().is_some_and(|w| variant.contains(&w))) => {
                per_b.push(Stmt::Let(v, rhs))
            }
            s => {
                if let Stmt::Let(v, _) = &s {
                    variant.insert(*v);
                }
                terms.push(s)
            }
        }
    }
    per_b.push(rows(r2, v2, terms));
    chunk.push(Stmt::For { idx: b, n: m, pre: Vec::new(), body: per_b, reset: false });
    // The rest of each row, from its sums.
    let r3 = index(vars);
    let mut last = Vec::new();
    for s in p {
        match s {
            Stmt::Check { .. } => {}
            Stmt::DeclMut(a, Some(_)) => {
                let (l, x) = fresh_let(vars, Rhs::Load { arr: Op::Var(array_of(a)), idx: Op::Var(r3) }, Type::Float);
                last.push(l);
                last.push(Stmt::DeclMut(a, Some(x)));
            }
            s => last.push(s),
        }
    }
    last.extend(q);
    chunk.push(rows(r3, idx, last));
    // Each chunk's vectors are freed after it.
    out.push(Stmt::For { idx: c, n: chunks, pre: Vec::new(), body: chunk, reset: true });
    if pre.is_empty() {
        return out;
    }
    let (test, runs) = fresh_let(vars, Rhs::Bin(BinOp::IGt, n, Op::Int(0)), Type::Bool);
    vec![test, Stmt::If { cond: runs, then: pre.into_iter().chain(out).collect(), els: Vec::new() }]
}
