//! Loops copied per outcome of a test that does not change in them
//! (`unswitch-invariant-branches`).
//!
//! A function inlined into a loop keeps its tests, and a test of a value
//! computed before the loop (hoisted there by `licm`) is made again in
//! every iteration: the Rodrigues rotation of `project.ks`, `if theta <> 0
//! { the rotation } else { its first-order form }`, whose angle is the
//! camera's, in the loop over points. Both branches are then in the body,
//! and the C compiler vectorises neither (GCC 12 did not copy that loop
//! per outcome itself). So an innermost
//! loop whose body has an `if c` at its top, with `c` defined outside the
//! loop and not assigned in it, becomes
//!
//! ```text
//! if c { for i < n { body, its tests of c replaced by their then branches } }
//! else { for i < n { body, its tests of c replaced by their else branches } }
//! ```
//!
//! (the second copy's variables renamed). When the loop's preheader
//! computes `c`, the preheader runs first (under `n > 0`, as it would) and
//! the test after it. The same statements run, in the same order, in
//! every iteration; only the test of `c` is made once (reading a variable:
//! nothing to fail or to reorder). `project.ks`'s objective at N = 10^4,
//! with its points a vector of triples, was 4.2 times the hand-written C's
//! time, now the C's (file test
//! `unswitch_invariant_branches.loops`).
//!
//! Only loops of at most [`UNSWITCHED_BODY`] statements (the body is
//! copied) with nothing else that stops vectorisation (anything that may
//! fail: a call, a check, checked arithmetic; a print: copies of LSTM's
//! reverse loops, which add into vectors under checks, gained nothing), one test a loop (its copies are not unswitched
//! again).

use ksc_ir::pass::Pass;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{after_preheader, any_stmt, count_stmts, defined_in, may_fail, renamed, rewrite_loops, variant};

/// The `unswitch-invariant-branches` pass.
pub struct UnswitchInvariantBranches;

impl Pass<Func, LoopCx<'_>> for UnswitchInvariantBranches {
    fn name(&self) -> &'static str {
        "unswitch-invariant-branches"
    }

    /// Whether a loop was copied.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let body = std::mem::take(&mut f.body);
        let mut changed = false;
        let vars = &mut f.vars;
        f.body = rewrite_loops(body, &mut |s| {
            let Stmt::For { idx, n, pre, body, reset } = s else { unreachable!("a loop") };
            let Some(c) = invariant_test(&body) else { return vec![Stmt::For { idx, n, pre, body, reset }] };
            changed = true;
            // A test of a value of the preheader is made after it, which
            // then runs before both loops (when the loop runs: n > 0).
            let lifted = defined_in(&pre).contains(&c);
            let (pre, lifted_pre) = if lifted { (Vec::new(), pre) } else { (pre, Vec::new()) };
            let taken = |then: bool| body.iter().cloned().flat_map(|s| decided(s, c, then)).collect();
            let yes = Stmt::For { idx, n: n.clone(), pre: pre.clone(), body: taken(true), reset };
            let no = renamed(Stmt::For { idx, n: n.clone(), pre, body: taken(false), reset }, vars);
            let unswitched = Stmt::If { cond: Op::Var(c), then: vec![yes], els: vec![no] };
            let mut out = Vec::new();
            after_preheader(&n, lifted_pre, vec![unswitched], vars, &mut out);
            out
        });
        changed
    }
}

/// The most statements of a loop body the pass copies.
const UNSWITCHED_BODY: usize = 120;

/// The variable of the first `if` at the top of a loop's body that the
/// body does not define or assign (it may be the preheader's), if the loop
/// is innermost, its body small enough to copy and without anything else
/// that keeps the C compiler from vectorising it: nothing that may fail (a
/// call, a check, checked arithmetic) or print.
fn invariant_test(body: &Block) -> Option<VarId> {
    if count_stmts(body) > UNSWITCHED_BODY
        || body.iter().any(may_fail)
        || any_stmt(body, &mut |s| matches!(s, Stmt::For { .. } | Stmt::Print { .. } | Stmt::TailCall(_)))
    {
        return None;
    }
    let inside = variant(body, &[]);
    body.iter().find_map(|s| match s {
        Stmt::If { cond: Op::Var(c), .. } if !inside.contains(c) => Some(*c),
        _ => None,
    })
}

/// The statement with its test of `c` decided: an `if c` at the top
/// replaced by the branch `then` says.
fn decided(s: Stmt, c: VarId, then: bool) -> Block {
    match s {
        Stmt::If { cond: Op::Var(v), then: t, els } if v == c => {
            if then {
                t
            } else {
                els
            }
        }
        s => vec![s],
    }
}
