//! Small tensors held as their elements (`scalar-small-tensors`).
//!
//! A sparse Jacobian's values are built row by row from each row's own
//! Jacobian, which for a function of one number is a 1 x 1 tensor whose
//! one column is a vector of one element, each filled through a `$concatN`
//! counter (`mut pos = 0; store t[pos] = x; pos := pos + 1`): two arena
//! allocations per row (`vadd_jacsparse`, BA's weight error), which the C
//! compiler cannot remove. Two steps, within each block:
//!
//! 1. Integers known in the block: a mutable Integer declared in the block
//!    with a constant, and assigned only constants or sums of constants
//!    there (directly, not in a nested loop or branch, whose assignments
//!    make it unknown after them), and a `let` of a constant or of such a
//!    sum, are read as the constant where the block reads them directly.
//! 2. A tensor of at most [`MAX_ELEMS`] numbers that the block allocates
//!    with constant sizes, and that is mentioned only by the block's own
//!    stores and loads at constant indices (and `dim`s), goes: a load is a
//!    copy of the value last stored at its index. (A load before any store
//!    at its index, an index out of range or a stored value that is a
//!    mutable variable leaves the tensor as it is.)
//! 3. A counter known when a loop of the block starts, which the loop's
//!    body adds a constant c to once an iteration (`$concatN` writing one
//!    element a row), is read as `i c + k0` in iteration i up to that
//!    addition: the stores' indices are then the loop's, and
//!    `version-range-guards` tests its "more elements than its size" check
//!    once, before the loop.
//!
//! Values are those the loads read before; nothing that could fail moves.
//! DCE then removes the counters and checks that read only constants.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{mentions, nested_blocks, only_stored_loaded_measured, push_var, stmt_operands_mut, walk};

/// The most elements of a tensor held as its elements.
const MAX_ELEMS: i64 = 16;

/// The `scalar-small-tensors` pass.
pub struct ScalarSmallTensors;

impl Pass<Func, LoopCx<'_>> for ScalarSmallTensors {
    fn name(&self) -> &'static str {
        "scalar-small-tensors"
    }

    /// Whether a read became a constant or a tensor went.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let only = only_stored_loaded_measured(&f.body);
        let mut changed = false;
        block(&mut f.body, &mut f.vars, &only, &mut changed);
        changed
    }
}

fn block(b: &mut Block, vars: &mut Vec<VarInfo>, only: &FxHashSet<VarId>, changed: &mut bool) {
    nested_blocks(b, &mut |nb| block(nb, vars, only, changed));
    known_integers(b, vars, changed);
    let small: Vec<(VarId, i64)> = b
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(t, Rhs::Alloc { dims, elem }) if only.contains(t) && !needs_heap(elem) => {
                let mut n: i64 = 1;
                for d in dims {
                    let Op::Int(k) = d else { return None };
                    n = n.checked_mul((*k).max(0))?;
                }
                (n <= MAX_ELEMS).then_some((*t, n))
            }
            _ => None,
        })
        .collect();
    for (t, n) in small {
        *changed |= as_elements(b, vars, t, n);
    }
}

/// Step 1 of the module on the statements directly in `b`.
fn known_integers(b: &mut Block, vars: &mut Vec<VarInfo>, changed: &mut bool) {
    let mut known: FxHashMap<VarId, i64> = FxHashMap::default();
    for s in b.iter_mut() {
        // Operands read here (a loop's count, a branch's condition too, but
        // not what nested blocks read; a `keep` names mutable Floats).
        let keep = matches!(s, Stmt::Keep(_));
        for o in stmt_operands_mut(s).into_iter().filter(|_| !keep) {
            if let Op::Var(v) = o {
                if let Some(&k) = known.get(v) {
                    *o = Op::Int(k);
                    *changed = true;
                }
            }
        }
        if let Stmt::For { idx, pre, body, .. } = s {
            *changed |= counters_of_loop(*idx, pre, body, &known, vars);
        }
        match s {
            Stmt::DeclMut(v, init) => match init {
                Some(Op::Int(k)) if vars[v.0 as usize].ty == ksc_ir::Type::Integer => {
                    known.insert(*v, *k);
                }
                _ => {
                    known.remove(v);
                }
            },
            Stmt::Set(v, o) => match o {
                Op::Int(k) if known.contains_key(v) => {
                    known.insert(*v, *k);
                }
                _ => {
                    known.remove(v);
                }
            },
            Stmt::Let(x, Rhs::Copy(Op::Int(k))) => {
                known.insert(*x, *k);
            }
            Stmt::Let(x, Rhs::Bin(BinOp::IAddNoCheck, Op::Int(a), Op::Int(c))) => {
                known.insert(*x, a.wrapping_add(*c));
            }
            Stmt::For { .. } | Stmt::If { .. } | Stmt::CopyDown { .. } => {
                walk(std::slice::from_ref(s), &mut |n| match n {
                    Stmt::Set(v, _) => {
                        known.remove(v);
                    }
                    Stmt::CopyDown { vars, .. } => {
                        for v in vars {
                            known.remove(v);
                        }
                    }
                    _ => {}
                });
            }
            _ => {}
        }
    }
}

/// Step 3 of the module for the loop `for i < n { body }` (with its
/// preheader `pre`), in a block where the mutable Integers `known` hold
/// constants when it starts: a counter k among them that the body assigns
/// once, directly (not in a nested loop or branch), and the preheader not
/// at all, as `x = k + c; k := x` with c a constant, holds `k0 + i c` in
/// iteration i until that assignment, and is read so there (`let k' = i +
/// k0`, or `i * c + k0`, first in the body); whether one was.
fn counters_of_loop(
    i: VarId,
    pre: &Block,
    body: &mut Block,
    known: &FxHashMap<VarId, i64>,
    vars: &mut Vec<VarInfo>,
) -> bool {
    let mut counters: Vec<(VarId, i64, i64)> = Vec::new();
    for (&k, &k0) in known {
        if !vars[k.0 as usize].mutable || pre.iter().any(|s| mentions(s, k)) {
            continue;
        }
        // Where the body assigns k, and from what.
        let mut sets = 0;
        walk(body, &mut |s| match s {
            Stmt::Set(v, _) if *v == k => sets += 1,
            Stmt::CopyDown { vars, .. } if vars.contains(&k) => sets += 2,
            _ => {}
        });
        if sets != 1 {
            continue;
        }
        let Some(at) = body.iter().position(|s| matches!(s, Stmt::Set(v, _) if *v == k)) else { continue };
        let Stmt::Set(_, Op::Var(x)) = &body[at] else { continue };
        let step = body[..at].iter().find_map(|s| match s {
            Stmt::Let(y, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(v), Op::Int(c))) if y == x && *v == k => Some(*c),
            _ => None,
        });
        if let Some(c) = step {
            counters.push((k, k0, c));
        }
    }
    counters.sort();
    let changed = !counters.is_empty();
    for (k, k0, c) in counters {
        let int =
            |vars: &mut Vec<VarInfo>| push_var(vars, VarInfo { ty: ksc_ir::Type::Integer, name: None, mutable: false });
        let now = int(vars);
        let mut first = Vec::new();
        let scaled = match c {
            1 => Op::Var(i),
            _ => {
                let v = int(vars);
                first.push(Stmt::Let(v, Rhs::Bin(BinOp::IMulNoCheck, Op::Var(i), Op::Int(c))));
                Op::Var(v)
            }
        };
        first.push(Stmt::Let(now, Rhs::Bin(BinOp::IAddNoCheck, scaled, Op::Int(k0))));
        // The reads before the assignment (where it is now: the counters
        // before this one put their lets first).
        let at = body.iter().position(|s| matches!(s, Stmt::Set(v, _) if *v == k)).expect("the counter's assignment");
        for s in &mut body[..at] {
            for o in stmt_operands_mut(s) {
                if matches!(o, Op::Var(v) if *v == k) {
                    *o = Op::Var(now);
                }
            }
        }
        body.splice(0..0, first);
    }
    changed
}

/// Step 2 of the module for the tensor `t` of `n` elements allocated in
/// `b`; whether it went.
fn as_elements(b: &mut Block, vars: &[VarInfo], t: VarId, n: i64) -> bool {
    let is_t = |o: &Op| matches!(o, Op::Var(v) if *v == t);
    // Mentioned only directly in `b`, by stores and loads at constant
    // indices within its size (and `dim`s), each load after a store at its
    // index of a value that does not change.
    let mut stored: FxHashSet<i64> = FxHashSet::default();
    for s in b.iter() {
        let ok = match s {
            Stmt::For { .. } | Stmt::If { .. } => !mentions(s, t),
            Stmt::Store { arr, idx, val } if is_t(arr) => match idx {
                Op::Int(k) if (0..n).contains(k) && !matches!(val, Op::Var(v) if vars[v.0 as usize].mutable) => {
                    stored.insert(*k);
                    true
                }
                _ => false,
            },
            Stmt::Let(_, Rhs::Load { arr, idx }) if is_t(arr) => matches!(idx, Op::Int(k) if stored.contains(k)),
            _ => true,
        };
        if !ok {
            return false;
        }
    }
    let mut dims: Vec<Op> = Vec::new();
    let mut now: FxHashMap<i64, Op> = FxHashMap::default();
    let mut out = Vec::with_capacity(b.len());
    for s in std::mem::take(b) {
        match s {
            Stmt::Let(v, Rhs::Alloc { dims: d, .. }) if v == t => dims = d,
            Stmt::Store { arr, idx: Op::Int(k), val } if is_t(&arr) => {
                now.insert(k, val);
            }
            Stmt::Let(x, Rhs::Load { arr, idx: Op::Int(k) }) if is_t(&arr) => {
                out.push(Stmt::Let(x, Rhs::Copy(now[&k].clone())));
            }
            Stmt::Let(x, Rhs::Dim { arr, dim }) if is_t(&arr) => {
                out.push(Stmt::Let(x, Rhs::Copy(dims[dim].clone())));
            }
            s => out.push(s),
        }
    }
    *b = out;
    true
}
