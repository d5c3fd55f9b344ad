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
//! Assumes: only a fill right after the allocation counts, so the tensor
//! has no other name; only the statements of its block and of the
//! branches of `if`s in it are followed (an index first written in a
//! branch counts as written after the `if`), and anything else that
//! mentions the tensor, but loads and `dim`s, ends the search.

use ksc_ir::pass::Pass;
use rustc_hash::FxHashSet;

use super::LoopCx;
use crate::ir::*;
use crate::visit::mentions;

/// The `first-adds-into-zeros` pass.
pub struct FirstAddsIntoZeros;

impl Pass<Func, LoopCx<'_>> for FirstAddsIntoZeros {
    fn name(&self) -> &'static str {
        "first-adds-into-zeros"
    }

    /// Whether an addition became a store (each takes a new variable).
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let before = f.vars.len();
        first_adds_into_zeros(f);
        f.vars.len() > before
    }
}

/// Rewrites the first additions the module's doc describes.
fn first_adds_into_zeros(f: &mut Func) {
    /// `a = alloc [n] of Float; for i < n { a[i] = 0.0 }` (so nothing else
    /// refers to a yet): a.
    fn zero_fill(alloc: &Stmt, fill: &Stmt) -> Option<VarId> {
        let Stmt::Let(a, Rhs::Alloc { dims, elem: ksc_ir::Type::Float }) = alloc else { return None };
        let Stmt::For { idx, n, pre, body, .. } = fill else { return None };
        match &body[..] {
            [Stmt::Store { arr: Op::Var(x), idx: Op::Var(i), val: Op::Float(z) }]
                if x == a
                    && dims[..] == [n.clone()]
                    && pre.is_empty()
                    && i == idx
                    && *z == 0.0
                    && z.is_sign_positive() =>
            {
                Some(*a)
            }
            _ => None,
        }
    }
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
                    let t = VarId(vars.len() as u32);
                    vars.push(VarInfo { ty: ksc_ir::Type::Float, name: None, mutable: false });
                    b[p] = Stmt::Let(t, Rhs::Bin(BinOp::FAdd, Op::Float(0.0), val));
                    b.insert(p + 1, Stmt::Store { arr: Op::Var(a), idx: Op::Int(k), val: Op::Var(t) });
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
    fn block(b: &mut Block, vars: &mut Vec<VarInfo>) {
        let mut p = 0;
        while p < b.len() {
            if let Some(a) = p.checked_sub(1).and_then(|q| zero_fill(&b[q], &b[p])) {
                follow(b, p + 1, a, &mut FxHashSet::default(), vars);
            }
            match &mut b[p] {
                Stmt::For { pre, body, .. } => {
                    block(pre, vars);
                    block(body, vars);
                }
                Stmt::If { then, els, .. } => {
                    block(then, vars);
                    block(els, vars);
                }
                _ => {}
            }
            p += 1;
        }
    }
    block(&mut f.body, &mut f.vars);
}
