//! Mutual recursion as self-recursion (seed 004): a function `f` in a
//! cycle of calls with others (`f` calls `g`, `g` calls `f`, as a program
//! writes it with `g` declared ahead by an `edef`) is differentiated with
//! those others inlined into it, round by round, until its only recursive
//! calls are calls of `f` itself. The split passes then tape it as they
//! tape any self-recursion (`tape.rs`), so reverse mode is linear in the
//! depth; differentiated as written, `[rev f]` called `[rev g]`, which
//! computed `f`'s primal again, which computed `g`'s: quadratic.
//!
//! Each function of the cycle gets its own such form when it is
//! differentiated (`[rev g]` inlines `f` into `g`). A partner that is
//! recursive by itself too (`g` also calls `g`) is inlined a bounded
//! number of rounds; what is left after them is called as written.

use rustc_hash::FxHashSet;

use ksc_ir::builder::Builder;
use ksc_ir::{term, Callee, Def, Expr, ExprId, FunName, Pat};

use crate::Program;

/// Rounds of inlining (a cycle of k functions needs k - 1).
const ROUNDS: usize = 8;
/// The most functions searched for a path back to `f`.
const SEARCH: usize = 10_000;

/// The functions `f` calls that call it back.
pub fn partners<P: Program + ?Sized>(program: &P, f: &Def) -> Vec<FunName> {
    term::callees(f).into_iter().filter(|g| *g != f.name && reaches(program, g, &f.name)).collect()
}

/// `f` with `partners` (the functions that call it back) inlined, or None
/// if there are none.
pub fn self_recursive(program: &dyn Program, f: &Def, partners: &[FunName]) -> Option<Def> {
    if partners.is_empty() {
        return None;
    }
    let mut d = f.clone();
    let mut fresh = term::fresh_floor(&d.body, d.root, d.params.iter().map(|p| &p.name));
    for _ in 0..ROUNDS {
        let calls = calls_of(&d, partners);
        if calls.is_empty() {
            break;
        }
        let mut b = Builder::new(&mut d.body, &mut fresh);
        for (e, g, arg) in calls {
            let Some(gd) = program.written(&g) else { continue };
            if gd.body.ty(gd.root).contains_unknown() || gd.ret_ty != *b.body.ty(e) {
                continue;
            }
            // `let params = arg in body of g`, in place of the call (its
            // type is the call's).
            let (pat, body) = term::inlined_body(&mut b, gd);
            b.body.exprs[e] = Expr::Let(pat.unwrap_or(Pat::Tuple(Vec::new())), arg, body);
        }
    }
    Some(d)
}

/// Does a chain of calls of written functions lead from `g` to `f`?
fn reaches<P: Program + ?Sized>(program: &P, g: &FunName, f: &FunName) -> bool {
    let mut seen: FxHashSet<FunName> = FxHashSet::default();
    let mut work = vec![g.clone()];
    while let Some(h) = work.pop() {
        if seen.len() > SEARCH || !seen.insert(h.clone()) {
            continue;
        }
        for c in program.callees(&h) {
            if c == *f {
                return true;
            }
            work.push(c);
        }
    }
    false
}

/// The calls of `partners` in `d`'s tree: (node, callee, argument).
fn calls_of(d: &Def, partners: &[FunName]) -> Vec<(ExprId, FunName, ExprId)> {
    let mut out = Vec::new();
    let mut stack = vec![d.root];
    while let Some(x) = stack.pop() {
        if let Expr::Call(Callee::Fun(g), arg) = &d.body.exprs[x] {
            if partners.contains(g) {
                out.push((x, g.clone(), *arg));
            }
        }
        stack.extend(term::children(&d.body.exprs[x]));
    }
    out
}
