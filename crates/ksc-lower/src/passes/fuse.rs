//! Producer-consumer fusion (`fuse-consumers`).
//!
//! A loop `for c < n { ..; store t[c] = x }` that fills a vector `t`,
//! followed in the same block by loops `for j < m { .. load t[j] .. }`
//! that read it only at their index, becomes one loop: each consumer's
//! body runs in the producer's iteration on `x` (under `if c < m` unless
//! `m` is `n`). When no read of `t` is left, `t` is neither stored nor
//! allocated, and the element's copy-down goes: it is used up in its
//! iteration. This is what reverse mode of a loop inside a loop needs: the
//! inner backward pass makes one cotangent per component, which the
//! consumers add into the outer accumulators.
//!
//! Assumes, and checks: `m <= n` is known (`m` is `n` up to copies,
//! `min(n, _)`, or checked equal to `n` in between); the producer prints
//! nothing; the consumers have no preheader, no calls, prints or
//! allocations, read nothing computed or assigned from the producer on
//! (copies of earlier values are read as those values), assign no
//! variable from outside, and write accumulators (by store or `+=`, into
//! vectors or their rows) that nothing else in between touches and no
//! other consumer writes: each
//! element of an accumulator then gets the same additions in the same
//! order. A fused consumer's size check may report before a failure later
//! in the producer's iterations would have.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashMap;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{
    any_stmt, defined_in, definitions, drop_unused_mark, mentions, nested_blocks, stmt_operands, stmt_operands_mut,
    walk, walk_mut,
};

/// The `fuse-consumers` pass.
pub struct FuseConsumers;

impl Pass<Func, LoopCx<'_>> for FuseConsumers {
    fn name(&self) -> &'static str {
        "fuse-consumers"
    }

    /// Whether a consumer was fused.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        fuse_consumers(f, cx.effectful)
    }
}

/// Fuses the consumers the module's doc describes; whether there were any.
fn fuse_consumers(f: &mut Func, effectful: &[bool]) -> bool {
    let cx = Fusion { defs: definitions(&f.body), effectful };
    let mut body = std::mem::take(&mut f.body);
    let changed = fuse_in(&mut body, &cx, &mut f.vars);
    f.body = body;
    changed
}

/// What fusion reads of the function and the module.
struct Fusion<'a> {
    defs: FxHashMap<VarId, Rhs>,
    /// May function k print (directly or through calls)?
    effectful: &'a [bool],
}

/// Fuses in `b` and the blocks nested in it; whether anything was fused.
fn fuse_in(b: &mut Block, cx: &Fusion, vars: &mut Vec<VarInfo>) -> bool {
    let mut changed = false;
    nested_blocks(b, &mut |inner| changed |= fuse_in(inner, cx, vars));
    let mut p = 0;
    while p < b.len() {
        changed |= fuse_at(b, p, cx, vars);
        p += 1;
    }
    changed
}

/// `o`, or the value it is a copy of (through copies).
fn copy_root(defs: &FxHashMap<VarId, Rhs>, o: &Op) -> Op {
    let mut o = o.clone();
    while let Op::Var(v) = o {
        match defs.get(&v) {
            Some(Rhs::Copy(c)) => o = c.clone(),
            _ => break,
        }
    }
    o
}

/// The bound `c < m` a consumer of `m` iterations needs inside a producer
/// of `n` (`None`: none, `m` is `n`), if `m <= n` is known; `between` are
/// the statements from the producer to the consumer.
fn consumer_guard(m: &Op, n: &Op, defs: &FxHashMap<VarId, Rhs>, between: &[Stmt]) -> Option<Option<Op>> {
    // Through copies (`fold_alloc_dims` leaves `dim`s as copies of sizes).
    if copy_root(defs, m) == copy_root(defs, n) {
        return Some(None);
    }
    let Op::Var(mv) = m else { return None };
    // min(a, b) = if a < b then a else b, with n one of them.
    if let Some(Rhs::Select(Op::Var(c), a, b2)) = defs.get(mv) {
        if matches!(defs.get(c), Some(Rhs::Bin(BinOp::ILt, x, y)) if x == a && y == b2) && (a == n || b2 == n) {
            return Some(Some(m.clone()));
        }
    }
    // Checked equal to n before the consumer.
    let equal = |o: &Op| matches!(o, Op::Var(k) if matches!(defs.get(k), Some(Rhs::Bin(BinOp::IEq, x, y)) if (x == m && y == n) || (x == n && y == m)));
    between.iter().any(|s| matches!(s, Stmt::Check { cond, .. } if equal(cond))).then(|| Some(m.clone()))
}

/// The vectors a consumer writes (by store or `+=`), through the rows it
/// loaded: the variables defined outside it that they come from.
fn written_bases(cb: &Block, defs: &FxHashMap<VarId, Rhs>) -> Option<Vec<VarId>> {
    let inside = defined_in(cb);
    let mut out = Vec::new();
    let mut ok = true;
    walk(cb, &mut |s| {
        if let Stmt::Store { arr, .. } | Stmt::Accum { arr, .. } = s {
            let mut a = arr.clone();
            while let Op::Var(v) = a {
                if !inside.contains(&v) {
                    out.push(v);
                    return;
                }
                match defs.get(&v) {
                    Some(Rhs::Load { arr, .. }) => a = arr.clone(),
                    _ => break,
                }
            }
            ok = false;
        }
    });
    ok.then_some(out)
}

/// Fuses the consumers of the loop at `b[p]`, if it is a producer; whether
/// it fused any.
fn fuse_at(b: &mut Block, p: usize, cx: &Fusion, vars: &mut Vec<VarInfo>) -> bool {
    let defs = &cx.defs;
    let Stmt::For { idx: c, n, body: pb, .. } = &b[p] else { return false };
    let (c, n) = (*c, n.clone());
    // A consumer's failing check must not come before output the producer
    // would have printed.
    let prints = any_stmt(pb, &mut |s| {
        matches!(s, Stmt::Print { .. })
            || matches!(s, Stmt::Let(_, Rhs::Call { func, .. }) if cx.effectful.get(func.0 as usize).copied().unwrap_or(true))
    });
    if prints {
        return false;
    }
    let Some(Stmt::Store { arr: Op::Var(t), idx: Op::Var(ci), val }) = pb.last() else { return false };
    let (t, val) = (*t, val.clone());
    if matches!(n, Op::Var(v) if vars[v.0 as usize].mutable) {
        return false;
    }
    if *ci != c || pb.iter().filter(|s| mentions(s, t)).count() != 1 {
        return false;
    }
    // `t` is made before the producer, `alloc [n]`, and read after it only by
    // consumers (its size, read by `dim`, is `n` after `fold_alloc_dims`).
    if b[..p].iter().any(|s| {
        mentions(s, t) && !matches!(s, Stmt::Let(v, Rhs::Alloc { dims, .. }) if *v == t && *dims == [n.clone()])
    }) || !b[..p].iter().any(|s| matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == t))
    {
        return false;
    }
    let mut fused: Vec<(usize, Option<Op>, Block)> = Vec::new();
    let mut written: Vec<VarId> = Vec::new();
    for q in p + 1..b.len() {
        if !mentions(&b[q], t) {
            continue;
        }
        let Stmt::For { idx: j, n: m, pre, body: cb, .. } = &b[q] else { return false };
        if !pre.is_empty() {
            return false;
        }
        // Reads `t` only at its index, at its top level.
        let reads_ok = cb.iter().all(|s| match s {
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx }) if *a == t => *idx == Op::Var(*j),
            s => !mentions(s, t),
        });
        let Some(guard) = consumer_guard(m, &n, defs, &b[p + 1..q]) else { return false };
        let Some(bases) = written_bases(cb, defs) else { return false };
        let mut simple = true;
        walk(cb, &mut |s| {
            simple &= !matches!(
                s,
                Stmt::Let(
                    _,
                    Rhs::Call { .. } | Rhs::Alloc { .. } | Rhs::DeepCopy(_) | Rhs::TapePush { .. } | Rhs::Mark
                ) | Stmt::Print { .. }
                    | Stmt::Return(_)
                    | Stmt::TailCall(_)
                    | Stmt::CopyDown { .. }
                    | Stmt::Reset(_)
            );
        });
        // What it reads from outside: nothing the producer or the
        // statements in between define or assign, nothing mutable.
        let inside = defined_in(cb);
        let between = defined_in(&b[p..q]);
        let outside = |v: &VarId| !vars[v.0 as usize].mutable && !between.contains(v);
        // Copies made in between of values from before are read as those.
        let alias = |v: &VarId| {
            let r = copy_root(defs, &Op::Var(*v));
            let usable = between.contains(v) && r != Op::Var(*v) && !matches!(&r, Op::Var(w) if !outside(w));
            usable.then_some(r)
        };
        let mut independent = true;
        walk(cb, &mut |s| {
            // An assignment of a variable from outside (`equal := false`
            // in a loop comparing two vectors) would run in the producer's
            // iterations, maybe before the variable is declared.
            if let Stmt::Set(v, _) = s {
                independent &= inside.contains(v);
            }
            for o in stmt_operands(s) {
                if let Op::Var(v) = o {
                    if !inside.contains(v) && *v != *j && *v != t {
                        independent &= outside(v) || alias(v).is_some();
                    }
                }
            }
        });
        // Its accumulators: touched by nothing from the producer to it, and
        // by no other consumer.
        let untouched = bases
            .iter()
            .all(|&a| !written.contains(&a) && !b[p..q].iter().any(|s| mentions(s, a)) && !vars[a.0 as usize].mutable);
        // The guard's bound is known before the producer starts.
        let bound_known = match &guard {
            Some(Op::Var(v)) => outside(v),
            _ => true,
        };
        if !reads_ok || !simple || !independent || !untouched || !bound_known {
            return false;
        }
        written.extend(bases);
        let mut cb = cb.clone();
        let j = *j;
        walk_mut(&mut cb, &mut |s| {
            if let Stmt::Let(_, r @ Rhs::Load { .. }) = s {
                if matches!(r, Rhs::Load { arr: Op::Var(a), .. } if *a == t) {
                    *r = Rhs::Copy(val.clone());
                }
            }
            for o in stmt_operands_mut(s) {
                if *o == Op::Var(j) {
                    *o = Op::Var(c);
                } else if let Some(a) = match o {
                    Op::Var(v) => alias(v),
                    _ => None,
                } {
                    *o = a;
                }
            }
        });
        fused.push((q, guard, cb));
    }
    if fused.is_empty() {
        return false;
    }
    // Consumers written into accumulators nothing else reads in between;
    // move them into the producer, in order.
    let mut extra: Block = Vec::new();
    for (_, guard, cb) in &fused {
        match guard {
            None => extra.extend(cb.iter().cloned()),
            Some(m) => {
                let g = VarId(vars.len() as u32);
                vars.push(VarInfo { ty: ksc_ir::Type::Bool, name: None, mutable: false });
                extra.push(Stmt::Let(g, Rhs::Bin(BinOp::ILt, Op::Var(c), m.clone())));
                extra.push(Stmt::If { cond: Op::Var(g), then: cb.clone(), els: Vec::new() });
            }
        }
    }
    for (q, _, _) in fused.iter().rev() {
        b.remove(*q);
    }
    let left = b[p + 1..].iter().any(|s| mentions(s, t));
    let Stmt::For { body: pb, .. } = &mut b[p] else { return true };
    if left {
        pb.extend(extra);
        return true;
    }
    // `t` is not read any more: the element is used up in its iteration.
    pb.pop();
    if let Some(cd) =
        pb.iter().position(|s| matches!(s, Stmt::CopyDown { vars, .. } if vars.iter().all(|k| val == Op::Var(*k))))
    {
        let Stmt::CopyDown { mark, .. } = pb.remove(cd) else { unreachable!() };
        drop_unused_mark(pb, mark);
    }
    pb.extend(extra);
    b.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == t));
    true
}
