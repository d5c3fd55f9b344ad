//! First additions into zeros become stores (`first-adds-into-zeros`).
//!
//! A tensor of Floats just filled with zeros and then added into at
//! constant indices (reverse mode's cotangent of a vector whose elements a
//! tuple's components were read from, one `deltaVec` per component): the
//! first addition at an index loads the zero the fill has just stored,
//! and that load waits for the fill's vector stores to retire. It becomes
//! a store of `0.0 + v`, the same value (signed zeros included), with no
//! load (snapshot `first_adds`).
//!
//! The same for a loop's additions: after the fill (of Floats, or of
//! tuples of them), a loop `for k < n` whose body adds into the tensor once,
//! at index k or `n - 1 - k` (reverse mode's one-hot terms of a backward
//! scan, `ksc_ad`'s RFold of a scan over a monoid), directly, under a
//! test that the index is in range, or in each branch of an `if` (the
//! step at the first element, which reads the identity for its
//! accumulator, is a branch of its own): every element is added into exactly
//! once, the first addition at it, so its load reads the fill's zero. The
//! load becomes that zero, and the fill goes (snapshot `first_adds_loop`).
//!
//! Assumes: only a fill right after the allocation counts, so the tensor
//! has no other name; only the statements of its block and of the
//! branches of `if`s in it are followed (an index first written in a
//! branch counts as written after the `if`), and anything else that
//! mentions the tensor, but loads and `dim`s, ends the search.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{any_stmt, definitions, fresh_let, mentions};

/// The `first-adds-into-zeros` pass.
pub struct FirstAddsIntoZeros;

impl Pass<Func, LoopCx<'_>> for FirstAddsIntoZeros {
    fn name(&self) -> &'static str {
        "first-adds-into-zeros"
    }

    /// Whether an addition became a store (each takes a new variable), or
    /// a loop's loads became zeros.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let before = f.vars.len();
        let loops = first_adds_into_zeros(f);
        loops || f.vars.len() > before
    }
}

/// Rewrites the first additions the module's doc describes; whether a
/// loop's did.
fn first_adds_into_zeros(f: &mut Func) -> bool {
    /// Follows `b` from statement `from` on, with the constant indices of
    /// `a` written so far; false if something else touches `a`.
    fn follow(b: &mut Block, from: usize, a: VarId, written: &mut FxHashSet<i64>, vars: &mut Vec<VarInfo>) -> bool {
        let mut p = from;
        while p < b.len() {
            match &mut b[p] {
                Stmt::Store { arr: Op::Var(x), idx: Op::Int(k), .. } if *x == a => {
                    written.insert(*k);
                }
                Stmt::Accum { arr: Op::Var(x), idx: Op::Int(k), val, .. } if *x == a && written.insert(*k) => {
                    let (k, val) = (*k, val.clone());
                    first_add_stored(b, p, a, Op::Int(k), val, vars);
                    p += 1;
                }
                Stmt::Accum { arr: Op::Var(x), idx: Op::Int(_), .. } if *x == a => {}
                Stmt::If { then, els, .. } => {
                    let (mut w1, mut w2) = (written.clone(), written.clone());
                    if !(follow(then, 0, a, &mut w1, vars) && follow(els, 0, a, &mut w2, vars)) {
                        return false;
                    }
                    written.extend(w1);
                    written.extend(w2);
                }
                // Reads see the same values as before.
                Stmt::Let(_, Rhs::Load { .. } | Rhs::Dim { .. }) => {}
                s if mentions(s, a) => return false,
                _ => {}
            }
            p += 1;
        }
        true
    }
    fn block(b: &mut Block, vars: &mut Vec<VarInfo>, defs: &FxHashMap<VarId, Rhs>, changed: &mut bool) {
        let mut p = 0;
        while p < b.len() {
            // The alloc right before the fill, or before the zero it stores.
            let zero_first = |q: usize| matches!(&b[q], Stmt::Let(_, Rhs::Pack(..)));
            let alloc_at = p.checked_sub(1).map(|q| if q > 0 && zero_first(q) { q - 1 } else { q });
            if let Some((a, zero, n)) = alloc_at.and_then(|q| zero_fill(&b[q], &b[p], defs)) {
                if covered_once(b, p + 1, (a, &zero, &n), defs, vars) {
                    b.remove(p);
                    *changed = true;
                    continue;
                }
                if matches!(zero, Op::Float(_)) {
                    follow(b, p + 1, a, &mut FxHashSet::default(), vars);
                }
            }
            match &mut b[p] {
                Stmt::For { pre, body, .. } => {
                    block(pre, vars, defs, changed);
                    block(body, vars, defs, changed);
                }
                Stmt::If { then, els, .. } => {
                    block(then, vars, defs, changed);
                    block(els, vars, defs, changed);
                }
                _ => {}
            }
            p += 1;
        }
    }
    let defs = definitions(&f.body);
    let mut changed = false;
    block(&mut f.body, &mut f.vars, &defs, &mut changed);
    changed
}

/// `a = alloc [n] of T; for i < n { a[i] = z }` (so nothing else refers
/// to a yet), T Float or a tuple of Floats and z its zero (`0.0`, or a
/// variable bound to a pack of them): (a, z, n).
fn zero_fill(alloc: &Stmt, fill: &Stmt, defs: &FxHashMap<VarId, Rhs>) -> Option<(VarId, Op, Op)> {
    let Stmt::Let(a, Rhs::Alloc { dims, .. }) = alloc else { return None };
    let Stmt::For { idx, n, pre, body, .. } = fill else { return None };
    let [Stmt::Store { arr: Op::Var(x), idx: Op::Var(i), val }] = &body[..] else { return None };
    let zero = |o: &Op| matches!(o, Op::Float(z) if *z == 0.0 && z.is_sign_positive());
    let zeros = match val {
        Op::Var(z) => matches!(defs.get(z), Some(Rhs::Pack(ops, _)) if ops.iter().all(zero)),
        o => zero(o),
    };
    (x == a && i == idx && pre.is_empty() && zeros && dims[..] == [n.clone()]).then(|| (*a, val.clone(), n.clone()))
}

/// Is the first statement from `from` on that mentions `a` (a tensor of n
/// zeros, `zero` each) a loop `for k < n` that adds into `a` once per
/// iteration, at k or n - 1 - k (`isub (isub n 1) k`), directly or under
/// `if 0 <= idx < n`? Then every element's first addition is that one: its
/// load becomes `zero`, and true (the caller drops the fill).
fn covered_once(
    b: &mut Block,
    from: usize,
    (a, zero, n): (VarId, &Op, &Op),
    defs: &FxHashMap<VarId, Rhs>,
    vars: &mut Vec<VarInfo>,
) -> bool {
    let Some(p) = (from..b.len()).find(|&p| mentions(&b[p], a)) else { return false };
    let Stmt::For { idx: k, n: m, pre, body, .. } = &mut b[p] else { return false };
    if m != n
        || pre.iter().any(|s| mentions(s, a))
        || any_stmt(body, &mut |s| matches!(s, Stmt::Return(_) | Stmt::TailCall(_)))
    {
        return false;
    }
    let k = *k;
    let sub = |o: &Op| match o {
        Op::Var(v) => match defs.get(v) {
            Some(Rhs::IChecked(IOp::Sub, x, y, _)) => Some((x.clone(), y.clone())),
            _ => None,
        },
        _ => None,
    };
    // Index k, or n - 1 - k.
    let covers = |at: &Op| {
        *at == Op::Var(k)
            || sub(at).is_some_and(|(last, j)| j == Op::Var(k) && sub(&last) == Some((n.clone(), Op::Int(1))))
    };
    // `0 <= at && at < n`.
    let in_range = |c: &Op, at: &Op| {
        let Op::Var(c) = c else { return false };
        let Some(Rhs::Bin(BinOp::And, x, y)) = defs.get(c) else { return false };
        let test = |o: &Op| match o {
            Op::Var(t) => defs.get(t).cloned(),
            _ => None,
        };
        let lo = Rhs::Bin(BinOp::IGe, at.clone(), Op::Int(0));
        let hi = Rhs::Bin(BinOp::ILt, at.clone(), n.clone());
        let (tx, ty) = (test(x), test(y));
        (tx.as_ref() == Some(&lo) && ty.as_ref() == Some(&hi)) || (tx.as_ref() == Some(&hi) && ty.as_ref() == Some(&lo))
    };
    if !adds_once(body, a, &covers, &in_range) {
        return false;
    }
    zero_first_adds(body, a, zero, vars);
    true
}

/// Does every run of `b` add into `a` exactly once, at an index `covers`
/// accepts? The one statement of `b` that mentions `a` is the addition
/// (`load_store`), or an `if` testing that its index is in range around
/// it, or an `if` each of whose branches does so (reverse mode's step at
/// the first element, in a branch of its own).
fn adds_once(b: &Block, a: VarId, covers: &dyn Fn(&Op) -> bool, in_range: &dyn Fn(&Op, &Op) -> bool) -> bool {
    let at_top: Vec<usize> = (0..b.len()).filter(|&q| mentions(&b[q], a)).collect();
    match at_top[..] {
        [q] => match &b[q] {
            Stmt::If { cond, then, els } if els.is_empty() => {
                load_store(then, a).is_some_and(|at| covers(&at) && in_range(cond, &at))
            }
            Stmt::If { then, els, .. } => adds_once(then, a, covers, in_range) && adds_once(els, a, covers, in_range),
            _ => load_store(b, a).is_some_and(|at| covers(&at)),
        },
        _ => load_store(b, a).is_some_and(|at| covers(&at)),
    }
}

/// Rewrites the additions [`adds_once`] found: loads from `a` become
/// `zero`, and `a[idx] += val` a store of `0.0 + val`.
fn zero_first_adds(b: &mut Block, a: VarId, zero: &Op, vars: &mut Vec<VarInfo>) {
    let at_top: Vec<usize> = (0..b.len()).filter(|&q| mentions(&b[q], a)).collect();
    if let [q] = at_top[..] {
        if let Stmt::If { then, els, .. } = &mut b[q] {
            zero_first_adds(then, a, zero, vars);
            zero_first_adds(els, a, zero, vars);
            return;
        }
    }
    let mut q = 0;
    while q < b.len() {
        match &mut b[q] {
            Stmt::Let(_, r @ Rhs::Load { arr: Op::Var(_), .. }) if loads_from(r, a) => *r = Rhs::Copy(zero.clone()),
            Stmt::Accum { arr: Op::Var(x), idx, val, .. } if *x == a => {
                let (idx, val) = (idx.clone(), val.clone());
                first_add_stored(b, q, a, idx, val, vars);
                q += 1;
            }
            _ => {}
        }
        q += 1;
    }
}

/// Replaces statement `p` of `b`, the first `a[idx] += val` into a zero,
/// with `t = 0.0 + val; a[idx] = t` (the same value, signed zeros
/// included, without loading the zero).
fn first_add_stored(b: &mut Block, p: usize, a: VarId, idx: Op, val: Op, vars: &mut Vec<VarInfo>) {
    let (sum, t) = fresh_let(vars, Rhs::Bin(BinOp::FAdd, Op::Float(0.0), val), ksc_ir::Type::Float);
    b[p] = sum;
    b.insert(p + 1, Stmt::Store { arr: Op::Var(a), idx, val: t });
}

/// Is `r` a load from `a`?
fn loads_from(r: &Rhs, a: VarId) -> bool {
    matches!(r, Rhs::Load { arr: Op::Var(x), .. } if *x == a)
}

/// A block whose only mentions of `a` are one load `a[at]`, then one store
/// `a[at] = ..` (an addition into the element), or one `a[at] += ..` (of a
/// Float): at.
fn load_store(b: &Block, a: VarId) -> Option<Op> {
    let uses: Vec<&Stmt> = b.iter().filter(|s| mentions(s, a)).collect();
    match uses[..] {
        [Stmt::Accum { arr: Op::Var(x), idx, val, .. }] if x == &a && *val != Op::Var(a) => Some(idx.clone()),
        [Stmt::Let(_, Rhs::Load { arr: Op::Var(x), idx: i }), Stmt::Store { arr: Op::Var(y), idx: j, .. }]
            if x == &a && y == &a && i == j =>
        {
            Some(i.clone())
        }
        _ => None,
    }
}
