//! A tensor only packed into a tuple to be added elsewhere is not made
//! (`forward-packed-tensors`).
//!
//! Reverse mode's backward loops make, per iteration, a tuple of cotangent
//! parts (`elem := pack (.., t, ..)`), and the consumer loops that
//! `fuse-consumers` moved into that iteration add its parts into the
//! accumulators (`for j < m { acc[j] += load (field elem.k)[j] }`). When
//! `t = alloc [n]` is filled by a loop `for q < n { B; store t[q] = x }`
//! and every read of `t` is such a consumer's load, B is copied into each
//! consumer in place of the load (its variables renamed) and the filling
//! loop goes: `acc[j] += x` gets the same values in the same order, and
//! no per-iteration copy is made. Then the projections are only measured:
//! their size is `n`, and `t` is neither packed (a dummy `()` takes its
//! place in the tuple) nor allocated.
//!
//! Assumes, and checks: B only computes (no stores, checks, calls or
//! allocations, no loops, no operation that may fail) and reads only
//! tensors allocated in the function, never copied or aliased, that
//! nothing writes after the filling loop, and no mutable variable of its
//! surroundings; the tuple is held by one mutable variable, assigned
//! once, only copied, and the copies only projected; each consumer's
//! bound `m` is checked equal to `dim` of the field it loads. Runs after
//! `fuse-consumers`, which makes this shape.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{defined_in, definitions, nested_blocks, rename_in, stmt_operands, walk, walk_mut, written_arrays};

/// The `forward-packed-tensors` pass.
pub struct ForwardPackedTensors;

impl Pass<Func, LoopCx<'_>> for ForwardPackedTensors {
    fn name(&self) -> &'static str {
        "forward-packed-tensors"
    }

    /// Whether a tensor was forwarded.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        forward_packed_tensors(f)
    }
}

/// Forwards the tensors the module's doc describes; whether there were
/// any.
fn forward_packed_tensors(f: &mut Func) -> bool {
    let defs = definitions(&f.body);
    let (mut uses, mut sets, mut as_array) = (FxHashMap::default(), FxHashMap::default(), FxHashMap::default());
    walk(&f.body, &mut |s| {
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                *uses.entry(*v).or_insert(0usize) += 1;
            }
        }
        match s {
            Stmt::Set(v, _) => *sets.entry(*v).or_insert(0usize) += 1,
            // (A copy-down reads its variables' tensors.)
            Stmt::CopyDown { vars, .. } => {
                for v in vars {
                    *uses.entry(*v).or_insert(0usize) += 1;
                }
            }
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), .. } | Rhs::Dim { arr: Op::Var(a), .. })
            | Stmt::Store { arr: Op::Var(a), .. }
            | Stmt::Accum { arr: Op::Var(a), .. } => *as_array.entry(*a).or_insert(0usize) += 1,
            _ => {}
        }
    });
    let cx = Packed { defs: &defs, uses: &uses, sets: &sets, as_array: &as_array };
    let mut body = std::mem::take(&mut f.body);
    let changed = forward_packed_in(&mut body, &cx, &mut f.vars);
    f.body = body;
    changed
}

struct Packed<'a> {
    defs: &'a FxHashMap<VarId, Rhs>,
    uses: &'a FxHashMap<VarId, usize>,
    sets: &'a FxHashMap<VarId, usize>,
    /// Uses as the tensor of a load, `dim`, store or `+=`.
    as_array: &'a FxHashMap<VarId, usize>,
}

impl Packed<'_> {
    fn uses(&self, v: VarId) -> usize {
        self.uses.get(&v).copied().unwrap_or(0)
    }

    /// A tensor allocated in the function and only ever indexed, measured
    /// or written through its own variable (no copy of it could alias it).
    fn private(&self, a: VarId) -> bool {
        matches!(self.defs.get(&a), Some(Rhs::Alloc { .. }))
            && self.uses(a) == self.as_array.get(&a).copied().unwrap_or(0)
    }
}

/// Forwards in `block` and the blocks nested in it; whether it forwarded
/// any tensor.
fn forward_packed_in(block: &mut Block, cx: &Packed, vars: &mut Vec<VarInfo>) -> bool {
    let mut changed = false;
    nested_blocks(block, &mut |b| changed |= forward_packed_in(b, cx, vars));
    let mut p = 0;
    while p < block.len() {
        match packed_plan(block, p, cx, vars) {
            Some(plan) => {
                apply_packed(block, p, plan, vars);
                changed = true;
            }
            None => p += 1,
        }
    }
    changed
}

/// What [`ForwardPackedTensors`] does for the loop at `block[p]`: its
/// index, its body without the store, the value stored, and the field
/// variables whose loads it replaces.
struct PackedPlan {
    q: VarId,
    b: Block,
    x: Op,
    fields: FxHashSet<VarId>,
    /// The tensor, its size, and the tuple it is packed into.
    t: VarId,
    n: Op,
    pk: VarId,
}

fn packed_plan(block: &Block, p: usize, cx: &Packed, vars: &[VarInfo]) -> Option<PackedPlan> {
    let Stmt::For { idx: q, n, pre, body, .. } = &block[p] else { return None };
    let (Stmt::Store { arr: Op::Var(t), idx: Op::Var(qi), val: x }, b) = body.split_last()? else { return None };
    let Some(Rhs::Alloc { dims, .. }) = cx.defs.get(t) else { return None };
    if !pre.is_empty() || qi != q || dims.len() != 1 || dims[0] != *n || cx.uses(*t) != 2 {
        return None;
    }
    // t is packed (once) into a tuple that one mutable variable holds.
    let rest = &block[p + 1..];
    let (pk, k) = rest.iter().find_map(|s| match s {
        Stmt::Let(pk, Rhs::Pack(ops, _)) => ops.iter().position(|o| *o == Op::Var(*t)).map(|k| (*pk, k)),
        _ => None,
    })?;
    let elem = rest.iter().find_map(|s| match s {
        Stmt::Set(e, Op::Var(v)) if *v == pk => Some(*e),
        _ => None,
    })?;
    if cx.uses(pk) != 1 || !vars[elem.0 as usize].mutable || cx.sets.get(&elem) != Some(&1) {
        return None;
    }
    // B only computes, reading fresh tensors nothing writes after the loop.
    let inside = defined_in(b);
    let written_after = written_arrays(rest);
    let mut ok = true;
    walk(b, &mut |s| {
        ok &= match s {
            Stmt::Let(_, r) => {
                let loads_fresh = match r {
                    Rhs::Load { arr: Op::Var(a), .. } => cx.private(*a) && !written_after.contains(a),
                    Rhs::Load { .. } => false,
                    _ => true,
                };
                r.is_pure() && !r.can_fail() && !matches!(r, Rhs::Un(_, _, Some(_))) && loads_fresh
            }
            Stmt::DeclMut(..) | Stmt::Set(..) | Stmt::If { .. } => true,
            _ => false,
        };
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                ok &= !vars[v.0 as usize].mutable || inside.contains(v);
            }
        }
    });
    if !ok {
        return None;
    }
    // The variable is only copied, the copies only projected, and the
    // projections of t's part only measured and loaded by consumers.
    let mut copies = FxHashSet::default();
    walk(rest, &mut |s| {
        if let Stmt::Let(c, Rhs::Copy(Op::Var(e))) = s {
            if *e == elem {
                copies.insert(*c);
            }
        }
    });
    let (mut fields, mut projections) = (FxHashSet::default(), FxHashMap::default());
    walk(rest, &mut |s| {
        if let Stmt::Let(fv, Rhs::Field(Op::Var(c), j)) = s {
            if copies.contains(c) {
                *projections.entry(*c).or_insert(0usize) += 1;
                if *j == k {
                    fields.insert(*fv);
                }
            }
        }
    });
    if cx.uses(elem) != copies.len() || copies.iter().any(|c| cx.uses(*c) != projections.get(c).copied().unwrap_or(0)) {
        return None;
    }
    let dim_of = |d: &Op, fv: VarId| matches!(d, Op::Var(d) if matches!(cx.defs.get(d), Some(Rhs::Dim { arr: Op::Var(a), dim: 0 }) if *a == fv));
    let mut measured = FxHashMap::default();
    let mut consumers = FxHashMap::default();
    walk(rest, &mut |s| match s {
        Stmt::Let(_, Rhs::Dim { arr: Op::Var(a), .. }) if fields.contains(a) => {
            *measured.entry(*a).or_insert(0usize) += 1
        }
        Stmt::For { idx: q2, n: m, body, .. } => {
            for s in body {
                if let Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: Op::Var(i) }) = s {
                    if fields.contains(a) && i == q2 {
                        // m is checked equal to dim a.
                        if checked_equal(rest, m, *a, &dim_of, cx) {
                            *consumers.entry(*a).or_insert(0usize) += 1;
                        }
                    }
                }
            }
        }
        _ => {}
    });
    let all_consumed = fields.iter().all(|a| {
        let c = consumers.get(a).copied().unwrap_or(0);
        c == 1 && cx.uses(*a) == 1 + measured.get(a).copied().unwrap_or(0)
    });
    (!fields.is_empty() && all_consumed).then(|| PackedPlan {
        q: *q,
        b: b.to_vec(),
        x: x.clone(),
        fields,
        t: *t,
        n: n.clone(),
        pk,
    })
}

/// Is there, anywhere in `rest`, a check that `m == dim a`?
fn checked_equal(rest: &[Stmt], m: &Op, a: VarId, dim_of: &dyn Fn(&Op, VarId) -> bool, cx: &Packed) -> bool {
    let mut found = false;
    walk(rest, &mut |c| {
        if let Stmt::Check { cond: Op::Var(cv), .. } = c {
            found |= matches!(cx.defs.get(cv),
                Some(Rhs::Bin(BinOp::IEq, l, r)) if (l == m && dim_of(r, a)) || (r == m && dim_of(l, a)));
        }
    });
    found
}

fn apply_packed(block: &mut Block, p: usize, plan: PackedPlan, vars: &mut Vec<VarInfo>) {
    block.remove(p);
    walk_mut(&mut block[p..], &mut |s| {
        let Stmt::For { idx: q2, body, .. } = s else { return };
        let Some(at) = body.iter().position(|s| {
            matches!(s, Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: Op::Var(i) }) if plan.fields.contains(a) && i == q2)
        }) else {
            return;
        };
        let Stmt::Let(e, _) = body[at] else { return };
        let mut copy = plan.b.clone();
        let map = rename_in(&mut copy, vars, FxHashMap::from_iter([(plan.q, *q2)]));
        let x = match &plan.x {
            Op::Var(v) => Op::Var(map.get(v).copied().unwrap_or(*v)),
            o => o.clone(),
        };
        copy.push(Stmt::Let(e, Rhs::Copy(x)));
        body.splice(at..=at, copy);
    });
    walk_mut(&mut block[p..], &mut |s| match s {
        Stmt::Let(_, r) if matches!(&*r, Rhs::Dim { arr: Op::Var(a), .. } if plan.fields.contains(a)) => {
            *r = Rhs::Copy(plan.n.clone())
        }
        Stmt::Let(v, Rhs::Pack(ops, _)) if *v == plan.pk => {
            for o in ops.iter_mut().filter(|o| **o == Op::Var(plan.t)) {
                *o = Op::Unit;
            }
        }
        _ => {}
    });
    block.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == plan.t));
}
