//! Reverse mode of a chain of calls without recomputing the callees.
//!
//! `[rev f]` computes a callee's value, `y = g a`, in its primal part and
//! calls `[rev g] (a, r)` in its reverse part; `[rev g]` computes g's
//! primal again (its own callees' values, for their reverse passes). In a
//! chain of calls g1 <- g2 <- ... <- gD each level is recomputed by every
//! level above it: reverse mode costs D times the primal, not a constant.
//!
//! A `[rev g] (a, r)` whose `g a` (the same argument, written the same)
//! `[rev f]` also computes in the same lambda body (or both outside
//! lambdas), with g not recursive (a recursive g has its tape), has both
//! calls marked `$inline`: the next optimisation inlines them, and CSE
//! computes g's primal values once, for both. The inlined `[rev g]` has the
//! same pattern with g's callees, so marking and inlining go on, level by
//! level, until nothing is marked or the body reaches [`BUDGET`] nodes
//! (beyond it, levels are recomputed as before), at most [`CHAIN_LEVELS`]
//! levels. A level is the pipeline's
//! `inline-paired` pass: in a body without lambdas only the inlining, ANF
//! and CSE, with the simplifier once after the last level (a simplifier
//! run per level cost a chain of n calls 17 runs per `[rev gk]`). A small `[rev g]`
//! ([`SMALL_REV`]) is inlined without a pair: the small `g` was inlined
//! into the primal, so no call is left to pair it with, and the loop
//! before may compute its primal value. This runs after the loops'
//! values are shared (`share_loop_values`), which reads a loop's primal
//! call from the loop before it, so no `g a` is left to pair there; and the
//! sharing runs again afterwards, on what inlining exposed (LSTM: the
//! inlined `[rev lstm_predict]` of the step re-runs the layer fold, read
//! from the `$scan` of its reverse pass instead).

use crate::Measure;
use ksc_ir::{Callee, Def, Derivation, Expr, ExprId, FunName, Prim};

/// The most nodes `[rev f]`'s body may have for more calls to be inlined
/// into it.
pub const BUDGET: usize = 20_000;

/// The most runs of the passes that follow a chain's inlining into the
/// values its scans keep (`scan_extras`, `fuse_scan_extras`).
pub const MAX_LEVELS: usize = 16;

/// The most levels of a chain of calls inlined (optimiser runs): enough
/// that [`BUDGET`] is what stops a chain of small functions. At 16, the
/// levels below the sixteenth were recomputed by each level above: `[rev
/// f]` of a chain of 64 loops cost 3.13 times f, and of 640 scalar
/// functions 19.8 times; now 1.66 and 2.20 (the latter past the budget).
/// Deriving them takes longer (0.76 s to 2.4 s from ks to C for a chain of
/// 160 scalar functions, whose C is smaller: 49k lines, 61k before).
pub const CHAIN_LEVELS: usize = 256;

/// The most nodes a reverse pass without a paired primal call may have to
/// be inlined: a small one (`[rev sigmoid]`) computes again a value of the
/// primal that the loop before has (the `exp` of an inlined `sigmoid`),
/// which, inlined, the loops' sharing can read from there.
pub const SMALL_REV: usize = 100;

/// The most nodes a callee may have to be inlined.
pub const CALLEE: usize = 6_000;

/// Marks the paired calls of `[rev f]` (see the module) with `$inline`;
/// whether it marked any.
pub fn mark_paired_calls(def: &mut Def, globals: &crate::Globals) -> bool {
    if !Measure::Arena.at_most(def, BUDGET) {
        return false;
    }
    // The calls, primal ones and reverse passes, with the lambda they are
    // in (None outside lambdas).
    type Calls = Vec<(ExprId, FunName, ExprId, Option<ExprId>)>;
    let (mut primal, mut reverse): (Calls, Calls) = (Vec::new(), Vec::new());
    let mut stack = vec![(def.root, None)];
    while let Some((e, lam)) = stack.pop() {
        let mut inner = lam;
        match &def.body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Inline), _) => continue,
            Expr::Lam(..) => inner = Some(e),
            Expr::Call(Callee::Fun(h), arg) => match h.inner() {
                None => primal.push((e, h.clone(), *arg, lam)),
                Some((Derivation::Rev, g)) => {
                    if let Expr::Tuple(xs) = &def.body.exprs[*arg] {
                        if let [a, _] = xs[..] {
                            reverse.push((e, g, a, lam));
                        }
                    }
                }
                _ => {}
            },
            _ => {}
        }
        stack.extend(ksc_ir::term::children(&def.body.exprs[e]).into_iter().map(|c| (c, inner)));
    }
    let small = |g: &FunName, limit, measure| globals.small_def(g, limit, measure).is_some();
    let mut marked = Vec::new();
    for (r, g, a, lam) in &reverse {
        if globals.is_recursive(g) {
            continue;
        }
        let rev = g.derived(Derivation::Rev);
        let pair = primal.iter().find(|(_, h, arg, l)| h == g && l == lam && def.body.same_tree(*arg, &def.body, *a));
        match pair {
            Some(&(p, ..)) if small(g, CALLEE, Measure::Arena) && small(&rev, CALLEE, Measure::Arena) => {
                marked.extend([*r, p])
            }
            None if small(&rev, SMALL_REV, Measure::Tree) => marked.push(*r),
            _ => {}
        }
    }
    marked.sort();
    marked.dedup();
    for &e in &marked {
        ksc_ir::term::mark_inline(&mut def.body, e);
    }
    !marked.is_empty()
}
