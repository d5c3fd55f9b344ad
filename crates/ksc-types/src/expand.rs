//! The expansion of `reduce` and `scan` into Core IR every later stage
//! knows (`fold`, `$scanBlocks`, `build`, `index`, `size`, `if`, Integer
//! arithmetic, `let`), computing exactly the association tree documented
//! at [`ksc_ir::prim::REDUCE_BLOCK`].
//!
//! It runs at the end of checking a declaration without errors
//! ([`crate::check::Checker::check_decl`]), the one step every consumer
//! goes through (`analyze`, and the database's `checked` query), so the
//! interpreter, AD, `ksc deriv` and lowering all see the expansion and
//! none of them knows `reduce` or `scan`. `reduce` becomes folds over
//! its blocks (each in the runs of `ksc_ir::prim::REDUCE_RUNS`, which
//! derivation reads as the block's left fold: [`runs_for_derivation`])
//! and the tree over their results; `scan` becomes the
//! primitive `$scanBlocks`, which every backend computes in the blocked
//! order itself. Natively, the loops over `reduce`'s blocks (and over them
//! in its reverse pass) and `$scanBlocks`' two passes over blocks run on
//! every core; its carries (a step per block) serially. Derivation
//! differentiates `$scanBlocks` itself (forward mode is a `$scanBlocks`
//! of pairs, seed 002's JVP; reverse mode is serial), except where it
//! reads it as the left scan it equals ([`scans_for_derivation`]).
//!
//! The expansion is rewritten in place at the call's node, so that node
//! keeps its span; one application of the operator reuses the operator's
//! own body (keeping its spans); the others are copies, a fixed number of
//! them (5 for `reduce`, none for `scan`, and 11 or 10 more with
//! `--check-monoids`), so the expansion is linear in the operator's size.
//! New nodes are located at the declaration; the check's assertion takes
//! the operator's lambda node, and so its location.

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::prim::{REDUCE_BLOCK, REDUCE_RUNS};
use ksc_ir::term::{deep_copy, fresh_floor};
use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Lit, Pat, Prim, Type, Var};

/// Expands every `reduce` and `scan` of the tree at `root` (whose types are
/// known), innermost first. `params` are the names bound around the tree.
///
/// With `check_monoids` (`ksc run --check-monoids`), each expansion first
/// checks the monoid laws on the values it meets ([`monoid_check`]).
pub fn expand_body(body: &mut Body, root: ExprId, params: &[Var], check_monoids: bool) {
    let calls = calls_post_order(body, root);
    if calls.is_empty() {
        return;
    }
    let mut fresh = fresh_floor(body, root, params.iter());
    for e in calls {
        expand_call(body, &mut fresh, e, check_monoids);
    }
}

/// The `reduce`/`scan` calls of the tree, children before parents.
fn calls_post_order(body: &Body, root: ExprId) -> Vec<ExprId> {
    let mut out = Vec::new();
    let mut stack = vec![(root, false)];
    while let Some((x, done)) = stack.pop() {
        if done {
            if matches!(body.exprs[x], Expr::Call(Callee::Prim(Prim::Reduce | Prim::ScanInclusive), _)) {
                out.push(x);
            }
            continue;
        }
        stack.push((x, true));
        for c in ksc_ir::core::children(&body.exprs[x]) {
            stack.push((c, false));
        }
    }
    out
}

fn expand_call(body: &mut Body, fresh: &mut u32, e: ExprId, check_monoids: bool) {
    let Some((p, args)) = prim_call(body, e) else { return };
    let [op, init, vec] = args[..] else { return };
    let Expr::Lam(param, pair_ty, op_body) = body.exprs[op].clone() else { return };
    let t = body.ty(init).clone();
    if t.contains_unknown() || body.ty(e).contains_unknown() {
        return;
    }
    let arg = match &body.exprs[e] {
        Expr::Call(_, a) => *a,
        _ => return,
    };
    let op_lam = op;
    let mut b = Builder::new(body, fresh);
    let reducing = p == Prim::Reduce;
    let mut copies = if reducing { 5 } else { 1 };
    // The check's assertion takes the operator's node (and so its
    // location): the lambda is not needed once its body is placed.
    let check = check_monoids.then_some(Check { at: op_lam, reduce: reducing });
    if check.is_some() {
        copies += check_applications(reducing);
    }
    let mut op = Op { param, pair_ty, bodies: vec![op_body] };
    for _ in 1..copies {
        let c = deep_copy(&mut b, op_body);
        op.bodies.push(c);
    }
    let new = if reducing {
        reduce(&mut b, &mut op, &t, init, vec, check)
    } else {
        scan(&mut b, &mut op, &t, init, vec, check)
    };
    let node = b.body.exprs[new].clone();
    let ty = b.ty(new);
    // The call's node becomes the expansion; the nodes it leaves behind
    // (its argument tuple and the operator's lambda) become `()`, so that
    // nothing reachable is shared with them.
    b.body.exprs[e] = node;
    b.body.types.insert(e, ty);
    debug_assert!(op.bodies.is_empty(), "every copy of the operator is placed");
    let dead = if check_monoids { vec![new, arg] } else { vec![new, arg, op_lam] };
    for dead in dead {
        b.body.exprs[dead] = Expr::Tuple(Vec::new());
        b.body.types.insert(dead, Type::unit());
    }
}

/// The operator: its parameter and the bodies not yet placed (the
/// original first, then copies).
struct Op {
    param: Var,
    pair_ty: Type,
    bodies: Vec<ExprId>,
}

impl Op {
    /// The next unused body.
    fn take(&mut self) -> ExprId {
        assert!(!self.bodies.is_empty(), "the expansion used more copies of the operator than it made");
        self.bodies.remove(0)
    }

    /// `(lam (param : (Tuple T T)) body)`, for a `fold` or `$scan`.
    fn lam(&mut self, b: &mut Builder) -> ExprId {
        let body = self.take();
        b.lam(&self.param.clone(), self.pair_ty.clone(), body)
    }

    /// `x ⊙ y`: `(let (param (tuple x y)) body)`.
    fn apply(&mut self, b: &mut Builder, x: ExprId, y: ExprId) -> ExprId {
        let pair = b.tuple(vec![x, y]);
        let body = self.take();
        let ty = b.ty(body);
        b.body.alloc_typed(Expr::Let(Pat::Var(self.param.clone()), pair, body), ty)
    }
}

/// Names bound by the expansion, with their types, to read them again.
#[derive(Clone)]
struct V(String, Type);

impl V {
    fn bind(b: &mut Builder, hint: &str, rhs: ExprId) -> V {
        let name = b.fresh_name(hint);
        V(name, b.ty(rhs))
    }
    fn get(&self, b: &mut Builder) -> ExprId {
        b.var(&self.0, self.1.clone())
    }
}

/// `let x = rhs in body(x)`.
fn let_in(b: &mut Builder, hint: &str, rhs: ExprId, body: impl FnOnce(&mut Builder, V) -> ExprId) -> ExprId {
    let v = V::bind(b, hint, rhs);
    let inner = body(b, v.clone());
    b.let_(&v.0, rhs, inner)
}

/// `(build size (lam (i : Integer) body(i)))`.
fn build_v(b: &mut Builder, size: ExprId, body: impl FnOnce(&mut Builder, V) -> ExprId) -> ExprId {
    let i = V(b.fresh_name("i"), Type::Integer);
    let inner = body(b, i.clone());
    let lam = b.lam(&i.0, Type::Integer, inner);
    b.prim(Prim::Build, vec![size, lam])
}

fn int(b: &mut Builder, x: i64) -> ExprId {
    b.integer(x)
}

/// The common start: `let v = V in let e = E in let n = size v in
/// if n <= B then small else large`.
fn blocked(
    b: &mut Builder,
    init: ExprId,
    vec: ExprId,
    small: impl FnOnce(&mut Builder, &V, &V, &V) -> ExprId,
    large: impl FnOnce(&mut Builder, &V, &V, &V, &V) -> ExprId,
    guard: impl FnOnce(&mut Builder, &V, &V, &V, ExprId) -> ExprId,
) -> ExprId {
    let_in(b, "v", vec, |b, v| {
        let_in(b, "e", init, |b, e| {
            let vv = v.get(b);
            let size = b.prim(Prim::Size, vec![vv]);
            let_in(b, "n", size, |b, n| {
                let (nn, bb) = (n.get(b), int(b, REDUCE_BLOCK));
                let test = b.int_test("lte", nn, bb);
                let s = small(b, &v, &e, &n);
                // m = (n + B - 1) / B blocks.
                let (nn, bm1, bb) = (n.get(b), int(b, REDUCE_BLOCK - 1), int(b, REDUCE_BLOCK));
                let num = b.int_op("add", nn, bm1);
                let m = b.int_op("div", num, bb);
                let l = let_in(b, "m", m, |b, m| large(b, &v, &e, &n, &m));
                let body = b.if_(test, s, l);
                guard(b, &v, &e, &n, body)
            })
        })
    })
}

/// Block k of v, its elements lo .. lo + len, with lo = k B and len =
/// min(B, n - lo) bound to variables, passed to `then`.
fn with_block(b: &mut Builder, n: &V, k: &V, then: impl FnOnce(&mut Builder, &V, &V) -> ExprId) -> ExprId {
    let (kk, bb) = (k.get(b), int(b, REDUCE_BLOCK));
    let lo = b.int_op("mul", kk, bb);
    let_in(b, "lo", lo, |b, lo| {
        let (nn, l0) = (n.get(b), lo.get(b));
        let rest = b.int_op("sub", nn, l0);
        let_in(b, "r", rest, |b, r| {
            let (rr, bb) = (r.get(b), int(b, REDUCE_BLOCK));
            let short = b.int_test("lt", rr, bb);
            let (rr, bb) = (r.get(b), int(b, REDUCE_BLOCK));
            let len = b.if_(short, rr, bb);
            let_in(b, "len", len, |b, len| then(b, &lo, &len))
        })
    })
}

/// s = the block results: `build m (lam k (runs OP e block_k))`.
fn block_sums(b: &mut Builder, op: &mut Op, t: &Type, v: &V, e: &V, n: &V, m: &V) -> ExprId {
    let op = std::cell::RefCell::new(op);
    let mm = m.get(b);
    build_v(b, mm, |b, k| with_block(b, n, &k, |b, lo, len| runs(b, &mut op.borrow_mut(), t, e, (v, lo, len))))
}

/// The name hint of the variable a block's runs are bound to: derivation
/// finds them by it ([`runs_for_derivation`]).
const RUNS_HINT: &str = "runs";

/// A block's result in the order of [`REDUCE_RUNS`]: the block of `len`
/// elements cut into R runs of `r = len / R` elements, the last run
/// taking the rest; each run folded from E, all runs a step at a time
/// (`fold` over j < r of `build R (lam l (acc_l ⊙ block[l r + j]))`), the
/// rest then folded into the last run's, and the runs' results combined
/// left to right. Native code runs a step's R applications as one loop,
/// which the C compiler vectorises where the operator allows (the
/// `exp`s of log-sum-exp's monoid); a left fold over the block is a chain
/// of dependent applications, one at a time.
///
/// The block is `(v, lo, len)`: elements lo .. lo + len of v, read where
/// the runs use them (`index (add lo i) v`), so that the elements of a
/// view such as `build n (lam i (tuple (index i x) 1.0))` are read from x
/// and no copy of the block is made. (A `build` of the block, read by the
/// steps and by the rest, was stored: every element written and read
/// again, 16 MB per call of log-sum-exp's objective at n = 10^6.) The
/// runs' first `let` binds `(tuple lo len)`, which only derivation reads
/// ([`block_fold`]: the fold over the block); v itself is not bound again
/// (that made native code store v).
fn runs(b: &mut Builder, op: &mut Op, t: &Type, e: &V, (v, lo, len): (&V, &V, &V)) -> ExprId {
    let lanes = REDUCE_RUNS;
    // Bound to a variable named from RUNS_HINT, for derivation to find.
    let bounds = {
        let parts = vec![lo.get(b), len.get(b)];
        b.tuple(parts)
    };
    let whole = let_in(b, "blk", bounds, |b, _| {
        let elem = |b: &mut Builder, i: ExprId| {
            let l0 = lo.get(b);
            let at = b.int_op("add", l0, i);
            let vv = v.get(b);
            b.prim(Prim::Index, vec![at, vv])
        };
        let (ll, rr) = (len.get(b), int(b, lanes));
        let r = b.int_op("div", ll, rr);
        let_in(b, "run", r, |b, run| {
            // The runs a step at a time, over the steps' numbers j;
            // the accumulator is the vector of the runs' results so
            // far, and step j applies the R runs to their j-th elements.
            let acc_ty = Type::vec(t.clone());
            let w_ty = Type::Tuple(vec![acc_ty, Type::Integer]);
            let w = V(b.fresh_name("w"), w_ty.clone());
            let rr = int(b, lanes);
            let step = build_v(b, rr, |b, l| {
                let (ww, li) = (w.get(b), l.get(b));
                let accs = b.prim(Prim::Get { index: 1, arity: 2 }, vec![ww]);
                let acc = b.prim(Prim::Index, vec![li, accs]);
                let (li, ru) = (l.get(b), run.get(b));
                let first = b.int_op("mul", li, ru);
                let ww = w.get(b);
                let j = b.prim(Prim::Get { index: 2, arity: 2 }, vec![ww]);
                let at = b.int_op("add", first, j);
                let x = elem(b, at);
                op.apply(b, acc, x)
            });
            let lam = b.lam(&w.0, w_ty, step);
            let rr = int(b, lanes);
            let start = build_v(b, rr, |b, _| e.get(b));
            let ru = run.get(b);
            let steps = build_v(b, ru, |b, j| j.get(b));
            let folded = b.prim(Prim::Fold, vec![lam, start, steps]);
            let_in(b, "lanes", folded, |b, lanes_v| {
                // The rest, [R r, len), into the last run.
                let (ru, rr) = (run.get(b), int(b, lanes));
                let done = b.int_op("mul", ru, rr);
                let_in(b, "done", done, |b, done| {
                    let (ll, dd) = (len.get(b), done.get(b));
                    let left = b.int_op("sub", ll, dd);
                    let rest = build_v(b, left, |b, i| {
                        let (dd, ii) = (done.get(b), i.get(b));
                        let at = b.int_op("add", dd, ii);
                        elem(b, at)
                    });
                    let lam = op.lam(b);
                    let (last, lv) = (int(b, lanes - 1), lanes_v.get(b));
                    let last_acc = b.prim(Prim::Index, vec![last, lv]);
                    let last_run = b.prim(Prim::Fold, vec![lam, last_acc, rest]);
                    let_in(b, "last", last_run, |b, last_v| {
                        // ((run_0 ⊙ run_1) ⊙ ...) ⊙ run_(R-1).
                        let n1 = int(b, lanes - 1);
                        let others = build_v(b, n1, |b, i| {
                            let (ii, one) = (i.get(b), int(b, 1));
                            let at = b.int_op("add", ii, one);
                            let (at2, last) = (b.copy(at), int(b, lanes - 1));
                            let before_last = b.int_test("lt", at2, last);
                            let lv = lanes_v.get(b);
                            let run_i = b.prim(Prim::Index, vec![at, lv]);
                            let lr = last_v.get(b);
                            b.if_(before_last, run_i, lr)
                        });
                        let lam = op.lam(b);
                        let (zero, lv) = (int(b, 0), lanes_v.get(b));
                        let first = b.prim(Prim::Index, vec![zero, lv]);
                        b.prim(Prim::Fold, vec![lam, first, others])
                    })
                })
            })
        })
    });
    let_in(b, RUNS_HINT, whole, |b, r| r.get(b))
}

fn reduce(b: &mut Builder, op: &mut Op, t: &Type, init: ExprId, vec: ExprId, check: Option<Check>) -> ExprId {
    let op = std::cell::RefCell::new(op);
    blocked(
        b,
        init,
        vec,
        |b, v, e, _n| {
            let lam = op.borrow_mut().lam(b);
            let (ee, vv) = (e.get(b), v.get(b));
            b.prim(Prim::Fold, vec![lam, ee, vv])
        },
        |b, v, e, n, m| {
            let s = block_sums(b, &mut op.borrow_mut(), t, v, e, n, m);
            let_in(b, "s", s, |b, s| {
                let levels = levels(b, m);
                let_in(b, "levels", levels, |b, levels| {
                    // fold over the levels, the accumulator the vector of
                    // partial results, halving each level.
                    let w_ty = Type::Tuple(vec![Type::vec(t.clone()), Type::Integer]);
                    let w = V(b.fresh_name("w"), w_ty.clone());
                    let ww = w.get(b);
                    let a = b.prim(Prim::Get { index: 1, arity: 2 }, vec![ww]);
                    let step = let_in(b, "a", a, |b, a| {
                        let aa = a.get(b);
                        let h = b.prim(Prim::Size, vec![aa]);
                        let_in(b, "h", h, |b, h| {
                            let (hh, one, two) = (h.get(b), int(b, 1), int(b, 2));
                            let up = b.int_op("add", hh, one);
                            let half = b.int_op("div", up, two);
                            build_v(b, half, |b, i| {
                                let (two, ii) = (int(b, 2), i.get(b));
                                let i2 = b.int_op("mul", two, ii);
                                let_in(b, "i2", i2, |b, i2| {
                                    let (x, one) = (i2.get(b), int(b, 1));
                                    let next = b.int_op("add", x, one);
                                    let_in(b, "i3", next, |b, i3| {
                                        let (x, hh) = (i3.get(b), h.get(b));
                                        let pair = b.int_test("lt", x, hh);
                                        let (x, aa) = (i2.get(b), a.get(b));
                                        let left = b.prim(Prim::Index, vec![x, aa]);
                                        let (y, aa) = (i3.get(b), a.get(b));
                                        let right = b.prim(Prim::Index, vec![y, aa]);
                                        let both = op.borrow_mut().apply(b, left, right);
                                        let (x, aa) = (i2.get(b), a.get(b));
                                        let carried = b.prim(Prim::Index, vec![x, aa]);
                                        b.if_(pair, both, carried)
                                    })
                                })
                            })
                        })
                    });
                    let lam = b.lam(&w.0, w_ty, step);
                    let ss = s.get(b);
                    let ll = levels.get(b);
                    let range = build_v(b, ll, |b, l| l.get(b));
                    let tree = b.prim(Prim::Fold, vec![lam, ss, range]);
                    let zero = int(b, 0);
                    b.prim(Prim::Index, vec![zero, tree])
                })
            })
        },
        |b, v, e, n, body| match check {
            Some(c) => monoid_check(b, &mut op.borrow_mut(), t, v, e, n, c, body),
            None => body,
        },
    )
}

/// The number of levels of the balanced tree over m >= 2 results:
/// ceil(log2 m), as `get$1$2 (fold (lam (w : ((Integer, Integer), Integer))
/// (let c = get$1$2 w in if (get$2$2 c) < m then (c1 + 1, c2 * 2) else c))
/// (0, 1) (build 63 (lam i i)))`.
fn levels(b: &mut Builder, m: &V) -> ExprId {
    let c_ty = Type::Tuple(vec![Type::Integer, Type::Integer]);
    let w_ty = Type::Tuple(vec![c_ty.clone(), Type::Integer]);
    let w = V(b.fresh_name("w"), w_ty.clone());
    let ww = w.get(b);
    let c = b.prim(Prim::Get { index: 1, arity: 2 }, vec![ww]);
    let step = let_in(b, "c", c, |b, c| {
        let cc = c.get(b);
        let p = b.prim(Prim::Get { index: 2, arity: 2 }, vec![cc]);
        let mm = m.get(b);
        let more = b.int_test("lt", p, mm);
        let cc = c.get(b);
        let count = b.prim(Prim::Get { index: 1, arity: 2 }, vec![cc]);
        let one = int(b, 1);
        let count = b.int_op("add", count, one);
        let cc = c.get(b);
        let p = b.prim(Prim::Get { index: 2, arity: 2 }, vec![cc]);
        let two = int(b, 2);
        let p = b.int_op("mul", p, two);
        let next = b.tuple(vec![count, p]);
        let same = c.get(b);
        b.if_(more, next, same)
    });
    let lam = b.lam(&w.0, w_ty, step);
    let (z, o) = (int(b, 0), int(b, 1));
    let start = b.tuple(vec![z, o]);
    let n63 = int(b, 63);
    let range = build_v(b, n63, |b, i| i.get(b));
    let f = b.prim(Prim::Fold, vec![lam, start, range]);
    b.prim(Prim::Get { index: 1, arity: 2 }, vec![f])
}

/// `scan OP E V` is the primitive `$scanBlocks OP E V`, which every
/// backend computes in the blocked order of [`REDUCE_BLOCK`] (native code
/// running its passes over blocks on every core), after the monoid check
/// with `--check-monoids`.
fn scan(b: &mut Builder, op: &mut Op, t: &Type, init: ExprId, vec: ExprId, check: Option<Check>) -> ExprId {
    let Some(check) = check else {
        let lam = op.lam(b);
        return b.prim(Prim::ScanBlocks, vec![lam, init, vec]);
    };
    let_in(b, "v", vec, |b, v| {
        let_in(b, "e", init, |b, e| {
            let vv = v.get(b);
            let size = b.prim(Prim::Size, vec![vv]);
            let_in(b, "n", size, |b, n| {
                let lam = op.lam(b);
                let (ee, vv) = (e.get(b), v.get(b));
                let body = b.prim(Prim::ScanBlocks, vec![lam, ee, vv]);
                monoid_check(b, op, t, &v, &e, &n, check, body)
            })
        })
    })
}

/// `f` with each block of a `reduce` (its runs, bound to a variable named
/// from [`RUNS_HINT`]) read, for derivation, as the left fold over the
/// block that it equals by the monoid laws, as [`scans_for_derivation`]
/// reads a scan: derivatives keep the loops over blocks they had before
/// the runs. Derived in the runs' own form (with the steps' elements in a
/// vector), reverse mode stored a vector per step and its cotangent: 300
/// bytes per element of `reduce`'s vector (80 for the fold), the gradient
/// of log-sum-exp at n = 10^7 6 to 13 times slower for the page faults. A
/// derivative's own primal values of the block are then those of the
/// fold, rounded differently from the runs' by the order of the
/// operations. A block whose expansion a user's rule rewrote is
/// differentiated as it is. None if `f` has no `reduce` blocks.
pub fn runs_for_derivation(f: &Def) -> Option<Def> {
    let prefix = format!("ksc${RUNS_HINT}");
    let sites: Vec<ExprId> = f
        .body
        .exprs
        .iter()
        .filter(|(_, e)| {
            matches!(e, Expr::Let(Pat::Var(v), _, _)
                if v.strip_prefix(&prefix).is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit())))
        })
        .map(|(x, _)| x)
        .collect();
    if sites.is_empty() {
        return None;
    }
    let mut d = f.clone();
    let mut fresh = fresh_floor(&d.body, d.root, d.params.iter().map(|p| &p.name));
    let mut changed = false;
    for e in sites {
        let Expr::Let(p, rhs, body) = d.body.exprs[e].clone() else { continue };
        let mut b = Builder::new(&mut d.body, &mut fresh);
        if let Some(fold) = block_fold(&mut b, rhs) {
            d.body.exprs[e] = Expr::Let(p, fold, body);
            changed = true;
        }
    }
    changed.then_some(d)
}

/// The left fold `fold OP e block` that [`runs`]' expression `rhs` (`let
/// blk = (tuple lo len) in .. fold OP first others`, reading the block's
/// elements as `index (add lo i) v`) equals.
fn block_fold(b: &mut Builder, rhs: ExprId) -> Option<ExprId> {
    let (binds, result) = ksc_ir::term::let_chain(b.body, rhs);
    let (Pat::Var(_), bounds) = binds.first()?.clone() else { return None };
    let Expr::Tuple(parts) = &b.body.exprs[bounds] else { return None };
    let [lo, len] = parts[..] else { return None };
    let Expr::Var(lo_name) = &b.body.exprs[lo] else { return None };
    // v: the vector of the runs' reads `index (add lo _) v`.
    let mut stack = vec![rhs];
    let mut v = None;
    while let Some(x) = stack.pop() {
        if let Some((Prim::Index, args)) = prim_call(b.body, x) {
            if let [at, vec] = args[..] {
                let reads_lo = match &b.body.exprs[at] {
                    Expr::Call(Callee::Fun(f), a) if f.base == "add" => {
                        matches!(b.body.call_args(*a)[..], [x, _] if matches!(&b.body.exprs[x], Expr::Var(n) if n == lo_name))
                    }
                    _ => false,
                };
                if reads_lo && matches!(b.body.exprs[vec], Expr::Var(_)) {
                    v = Some(vec);
                    break;
                }
            }
        }
        stack.extend(ksc_ir::core::children(&b.body.exprs[x]));
    }
    let v = b.copy(v?);
    let block = build_v(b, len, |b, j| {
        let jj = j.get(b);
        let at = b.int_op("add", lo, jj);
        b.prim(Prim::Index, vec![at, v])
    });
    let (Prim::Fold, args) = prim_call(b.body, result)? else { return None };
    let op = *args.first()?;
    // The identity: the runs' start, `build R (lam _ e)`.
    let e = binds.iter().find_map(|(_, r)| {
        let (Prim::Fold, fargs) = prim_call(b.body, *r)? else { return None };
        let (Prim::Build, bargs) = prim_call(b.body, *fargs.get(1)?)? else { return None };
        match &b.body.exprs[*bargs.get(1)?] {
            Expr::Lam(_, _, x) if matches!(b.body.exprs[*x], Expr::Var(_)) => Some(*x),
            _ => None,
        }
    })?;
    Some(b.prim(Prim::Fold, vec![op, e, block]))
}

/// `f` with its `$scanBlocks OP E V` (a `scan`) written as the left scan
/// they equal by the monoid laws, `let c = $scan OP E V in build (size V)
/// (lam i (index (i + 1) c))`, if it has one: all of them, or with
/// `only_recursive` those whose OP calls f (whose calls a tape records
/// only in a `fold` or `$scan`). Derivation otherwise differentiates
/// `$scanBlocks` itself (its map `lmScanBlocks`, whose forward mode is a
/// `$scanBlocks` of pairs); `[CL f]`, which knows no `$scanBlocks`, reads
/// all of them so. Derivatives may associate differently from the primal,
/// as seed 002's do.
pub fn scans_for_derivation(f: &Def, only_recursive: bool) -> Option<Def> {
    let calls_f = |lam: ExprId| {
        let mut stack = vec![lam];
        while let Some(x) = stack.pop() {
            if matches!(&f.body.exprs[x], Expr::Call(Callee::Fun(g), _) if *g == f.name) {
                return true;
            }
            stack.extend(ksc_ir::core::children(&f.body.exprs[x]));
        }
        false
    };
    let calls: Vec<ExprId> = f
        .body
        .exprs
        .iter()
        .filter(|(_, e)| matches!(e, Expr::Call(Callee::Prim(Prim::ScanBlocks), _)))
        .map(|(x, _)| x)
        .filter(|&x| !only_recursive || prim_call(&f.body, x).is_some_and(|(_, args)| calls_f(args[0])))
        .collect();
    if calls.is_empty() {
        return None;
    }
    let mut d = f.clone();
    let mut fresh = fresh_floor(&d.body, d.root, d.params.iter().map(|p| &p.name));
    for e in calls {
        let Some((_, args)) = prim_call(&d.body, e) else { continue };
        let [lam, init, vec] = args[..] else { continue };
        let Expr::Call(_, arg) = d.body.exprs[e] else { continue };
        let mut b = Builder::new(&mut d.body, &mut fresh);
        let left = let_in(&mut b, "v", vec, |b, v| {
            let vv = v.get(b);
            let all = b.prim(Prim::Scan, vec![lam, init, vv]);
            let_in(b, "c", all, |b, c| {
                let vv = v.get(b);
                let n = b.prim(Prim::Size, vec![vv]);
                build_v(b, n, |b, i| {
                    let (ii, one) = (i.get(b), int(b, 1));
                    let at = b.int_op("add", ii, one);
                    let cc = c.get(b);
                    b.prim(Prim::Index, vec![at, cc])
                })
            })
        });
        let node = b.body.exprs[left].clone();
        let ty = b.ty(left);
        b.body.exprs[e] = node;
        b.body.types.insert(e, ty);
        for dead in [left, arg] {
            b.body.exprs[dead] = Expr::Tuple(Vec::new());
            b.body.types.insert(dead, Type::unit());
        }
    }
    Some(d)
}

/// Where and what [`monoid_check`] checks.
#[derive(Clone, Copy)]
struct Check {
    /// The node the assertion is put at: the operator's lambda, so a broken
    /// law is reported at the operator.
    at: ExprId,
    /// `reduce` (E must be a two-sided identity) or `scan` (a left one).
    reduce: bool,
}

/// The relative tolerance of the laws on Floats: `x` and `y` agree when
/// `|x - y| <= MONOID_TOLERANCE * max(1, |x|, |y|)`, or they are equal (the
/// same infinity), or both are NaN. Other scalars must be equal; tuples
/// and tensors agree when their shapes do and every component agrees.
pub const MONOID_TOLERANCE: f64 = 1e-8;

/// The applications of the operator [`monoid_check`] makes per element:
/// the running value, the identity (left, and right for `reduce`), and
/// associativity on two triples, 4 each.
fn check_applications(reduce: bool) -> usize {
    1 + if reduce { 2 } else { 1 } + 8
}

/// `let r = (fold step (tuple E 0) (build n (lam i i))) in
/// (assert (eq (get$2$2 r) 0) body)`, the assertion at the operator: for
/// each element x_i of the vector in order, while no law has failed, with
/// acc = E ⊙ x_0 ⊙ ... ⊙ x_(i-1) (left to right), `step` checks
/// - E ⊙ x_i = x_i, and x_i ⊙ E = x_i for `reduce`;
/// - (acc ⊙ x_i) ⊙ x_(i+1) = acc ⊙ (x_i ⊙ x_(i+1)) (running values: the
///   association tree meets values like them);
/// - (x_i ⊙ x_(i+1)) ⊙ x_(i+2) = x_i ⊙ (x_(i+1) ⊙ x_(i+2)),
///
/// equal within [`MONOID_TOLERANCE`] for Floats. The first failure prints
/// the law and the values (on stdout, like `print`), and the assertion
/// then stops the program at the operator.
#[allow(clippy::too_many_arguments)]
fn monoid_check(b: &mut Builder, op: &mut Op, t: &Type, v: &V, e: &V, n: &V, check: Check, body: ExprId) -> ExprId {
    let prim = if check.reduce { "reduce" } else { "scan" };
    let w_ty = Type::Tuple(vec![Type::Tuple(vec![t.clone(), Type::Integer]), Type::Integer]);
    let w = V(b.fresh_name("w"), w_ty.clone());
    let ww = w.get(b);
    let state = b.prim(Prim::Get { index: 1, arity: 2 }, vec![ww]);
    let step = let_in(b, "st", state, |b, st| {
        let stv = st.get(b);
        let bad = b.prim(Prim::Get { index: 2, arity: 2 }, vec![stv]);
        let zero = int(b, 0);
        let failed = b.prim(Prim::Ne, vec![bad, zero]);
        let keep = st.get(b);
        let ww = w.get(b);
        let i = b.prim(Prim::Get { index: 2, arity: 2 }, vec![ww]);
        let go = let_in(b, "i", i, |b, i| {
            let (ii, vv) = (i.get(b), v.get(b));
            let x = b.prim(Prim::Index, vec![ii, vv]);
            let_in(b, "x", x, |b, x| {
                let stv = st.get(b);
                let acc = b.prim(Prim::Get { index: 1, arity: 2 }, vec![stv]);
                let_in(b, "acc", acc, |b, acc| {
                    let (aa, xx) = (acc.get(b), x.get(b));
                    let next = op.apply(b, aa, xx);
                    // Each law is an Integer, 1 when it failed (and said
                    // so); a law is checked only if those before it held.
                    enum Law {
                        Identity { left: bool },
                        Associative { with_acc: bool },
                    }
                    let mut laws = vec![Law::Identity { left: true }];
                    if check.reduce {
                        laws.push(Law::Identity { left: false });
                    }
                    laws.extend([Law::Associative { with_acc: true }, Law::Associative { with_acc: false }]);
                    let verdict = V(b.fresh_name("failed"), Type::Integer);
                    let mut lets = Vec::new();
                    for (k, law) in laws.into_iter().enumerate() {
                        let this = match law {
                            Law::Identity { left } => identity(b, op, t, prim, left, e, &x),
                            Law::Associative { with_acc } => {
                                associative(b, op, t, prim, v, n, &i, with_acc.then_some(&acc))
                            }
                        };
                        let rhs = if k == 0 {
                            this
                        } else {
                            let (prev, zero) = (verdict.get(b), int(b, 0));
                            let held = b.prim(Prim::Eq, vec![prev, zero]);
                            let one = int(b, 1);
                            b.if_(held, this, one)
                        };
                        lets.push(rhs);
                    }
                    let next_v = V(b.fresh_name("next"), t.clone());
                    let (nn, ff) = (next_v.get(b), verdict.get(b));
                    let mut out = b.tuple(vec![nn, ff]);
                    out = b.let_(&next_v.0, next, out);
                    for rhs in lets.into_iter().rev() {
                        out = b.let_(&verdict.0, rhs, out);
                    }
                    out
                })
            })
        });
        b.if_(failed, keep, go)
    });
    let lam = b.lam(&w.0, w_ty, step);
    let (ee, zero) = (e.get(b), int(b, 0));
    let start = b.tuple(vec![ee, zero]);
    let nn = n.get(b);
    let range = build_v(b, nn, |b, i| i.get(b));
    let r = b.prim(Prim::Fold, vec![lam, start, range]);
    let_in(b, "checked", r, |b, r| {
        let rr = r.get(b);
        let bad = b.prim(Prim::Get { index: 2, arity: 2 }, vec![rr]);
        let zero = int(b, 0);
        let ok = b.prim(Prim::Eq, vec![bad, zero]);
        let ty = b.ty(body);
        b.body.exprs[check.at] = Expr::Assert(ok, body, None);
        b.body.types.insert(check.at, ty);
        check.at
    })
}

/// `if agree then 0 else (print message; 1)`.
fn verdict(b: &mut Builder, agree: ExprId, message: Vec<ExprId>) -> ExprId {
    let said = b.prim(Prim::Print, message);
    let (zero, one) = (int(b, 0), int(b, 1));
    let name = b.fresh_name("said");
    let failed = b.let_(&name, said, one);
    b.if_(agree, zero, failed)
}

fn text(b: &mut Builder, s: &str) -> ExprId {
    b.body.alloc_typed(Expr::Lit(Lit::String(s.to_string())), Type::String)
}

/// `E ⊙ x = x` (`left`) or `x ⊙ E = x`, as an Integer (1 when it failed).
#[allow(clippy::too_many_arguments)]
fn identity(b: &mut Builder, op: &mut Op, t: &Type, prim: &str, left: bool, e: &V, x: &V) -> ExprId {
    let (ee, xx) = (e.get(b), x.get(b));
    let applied = if left { op.apply(b, ee, xx) } else { op.apply(b, xx, ee) };
    let_in(b, "got", applied, |b, got| {
        let (gg, xx) = (got.get(b), x.get(b));
        let same = agree(b, t, gg, xx);
        let (side, law) = if left { ("left", "E ⊙ x") } else { ("right", "x ⊙ E") };
        let head =
            text(b, &format!("--check-monoids: E is not a {side} identity of the operator of `{prim}`:\n  x = "));
        let xx = x.get(b);
        let mid = text(b, &format!("\n  {law} = "));
        let gg = got.get(b);
        let tail = text(b, "\n");
        verdict(b, same, vec![head, xx, mid, gg, tail])
    })
}

/// `(a ⊙ b) ⊙ c = a ⊙ (b ⊙ c)` for (acc, x_i, x_(i+1)) (`acc` given) or
/// (x_i, x_(i+1), x_(i+2)), as an Integer (1 when it failed); 0 past the
/// end of the vector.
#[allow(clippy::too_many_arguments)]
fn associative(b: &mut Builder, op: &mut Op, t: &Type, prim: &str, v: &V, n: &V, i: &V, acc: Option<&V>) -> ExprId {
    let reach = if acc.is_some() { 1 } else { 2 };
    let (ii, k) = (i.get(b), int(b, reach));
    let last = b.int_op("add", ii, k);
    let nn = n.get(b);
    let inside = b.int_test("lt", last, nn);
    // The triple's elements: acc or x_i, then the next ones of v.
    let elem = |b: &mut Builder, off: i64| {
        let (ii, o) = (i.get(b), int(b, off));
        let at = b.int_op("add", ii, o);
        let vv = v.get(b);
        b.prim(Prim::Index, vec![at, vv])
    };
    let a0 = match acc {
        Some(acc) => acc.get(b),
        None => elem(b, 0),
    };
    let first_off = if acc.is_some() { 0 } else { 1 };
    let checked = let_in(b, "a", a0, |b, a| {
        let b0 = elem(b, first_off);
        let_in(b, "b", b0, |b, bv| {
            let c0 = elem(b, first_off + 1);
            let_in(b, "c", c0, |b, c| {
                let (aa, bb) = (a.get(b), bv.get(b));
                let ab = op.apply(b, aa, bb);
                let cc = c.get(b);
                let left = op.apply(b, ab, cc);
                let (bb, cc) = (bv.get(b), c.get(b));
                let bc = op.apply(b, bb, cc);
                let aa = a.get(b);
                let right = op.apply(b, aa, bc);
                let_in(b, "l", left, |b, l| {
                    let_in(b, "r", right, |b, r| {
                        let (ll, rr) = (l.get(b), r.get(b));
                        let same = agree(b, t, ll, rr);
                        let which =
                            if acc.is_some() { "the value so far, x_i, x_(i+1)" } else { "x_i, x_(i+1), x_(i+2)" };
                        let parts: Vec<(String, &V)> = vec![
                            (
                                format!(
                                    "--check-monoids: the operator of `{prim}` is not associative on {which}:\n  a = "
                                ),
                                &a,
                            ),
                            ("\n  b = ".to_string(), &bv),
                            ("\n  c = ".to_string(), &c),
                            ("\n  (a ⊙ b) ⊙ c = ".to_string(), &l),
                            ("\n  a ⊙ (b ⊙ c) = ".to_string(), &r),
                        ];
                        let mut message = Vec::new();
                        for (s, x) in parts {
                            message.push(text(b, &s));
                            message.push(x.get(b));
                        }
                        message.push(text(b, "\n"));
                        verdict(b, same, message)
                    })
                })
            })
        })
    });
    let zero = int(b, 0);
    b.if_(inside, checked, zero)
}

/// Do `x` and `y` of type `t` agree (see [`MONOID_TOLERANCE`])? A Bool.
fn agree(b: &mut Builder, t: &Type, x: ExprId, y: ExprId) -> ExprId {
    let_in(b, "p", x, |b, p| {
        let_in(b, "q", y, |b, q| match t {
            Type::Float => {
                let (pp, qq) = (p.get(b), q.get(b));
                let equal = b.prim(Prim::Eq, vec![pp, qq]);
                let (pp, qq) = (p.get(b), q.get(b));
                let diff = b.call(FunName::typed("sub", ff()), vec![pp, qq], Type::Float);
                let diff = abs(b, diff);
                let pp = p.get(b);
                let ap = abs(b, pp);
                let qq = q.get(b);
                let aq = abs(b, qq);
                let big = b.call(FunName::typed("max", ff()), vec![ap, aq], Type::Float);
                let one = b.float(1.0);
                let big = b.call(FunName::typed("max", ff()), vec![one, big], Type::Float);
                let tol = b.float(MONOID_TOLERANCE);
                let bound = b.mul_float(tol, big);
                let close = b.call(FunName::typed("lte", ff()), vec![diff, bound], Type::Bool);
                let (pp, pp2) = (p.get(b), p.get(b));
                let pnan = b.prim(Prim::Ne, vec![pp, pp2]);
                let (qq, qq2) = (q.get(b), q.get(b));
                let qnan = b.prim(Prim::Ne, vec![qq, qq2]);
                let nans = bool_op(b, "and", pnan, qnan);
                let near = bool_op(b, "or", close, nans);
                bool_op(b, "or", equal, near)
            }
            Type::Tuple(ts) => {
                let arity = ts.len() as u32;
                let mut all = b.body.alloc_typed(Expr::Lit(Lit::Bool(true)), Type::Bool);
                for (k, tk) in ts.iter().enumerate().rev() {
                    let get = Prim::Get { index: k as u32 + 1, arity };
                    let pp = p.get(b);
                    let pk = b.prim(get, vec![pp]);
                    let qq = q.get(b);
                    let qk = b.prim(get, vec![qq]);
                    let this = agree(b, tk, pk, qk);
                    // Components after a disagreeing one are not compared.
                    let no = b.body.alloc_typed(Expr::Lit(Lit::Bool(false)), Type::Bool);
                    all = b.if_(this, all, no);
                }
                all
            }
            Type::Tensor(rank, elem) => {
                let pp = p.get(b);
                let sp = b.prim(Prim::Size, vec![pp]);
                let qq = q.get(b);
                let sq = b.prim(Prim::Size, vec![qq]);
                let same_size = b.prim(Prim::Eq, vec![sp, sq]);
                let pp = p.get(b);
                let size = b.prim(Prim::Size, vec![pp]);
                let every = let_in(b, "sz", size, |b, sz| {
                    // The number of elements, to skip an empty tensor
                    // (`sumbuild` of an empty range is an error).
                    let count = if *rank == 1 {
                        sz.get(b)
                    } else {
                        let mut c = int(b, 1);
                        for k in 0..*rank {
                            let s = sz.get(b);
                            let d = b.prim(Prim::Get { index: k as u32 + 1, arity: *rank as u32 }, vec![s]);
                            c = b.int_op("mul", c, d);
                        }
                        c
                    };
                    let (c0, zero) = (count, int(b, 0));
                    let empty = b.prim(Prim::Eq, vec![c0, zero]);
                    let ix_ty = if *rank == 1 { Type::Integer } else { Type::Tuple(vec![Type::Integer; *rank]) };
                    let ix = V(b.fresh_name("ix"), ix_ty.clone());
                    let (i1, pp) = (ix.get(b), p.get(b));
                    let pe = b.prim(Prim::Index, vec![i1, pp]);
                    let (i2, qq) = (ix.get(b), q.get(b));
                    let qe = b.prim(Prim::Index, vec![i2, qq]);
                    let this = agree(b, elem, pe, qe);
                    let (zero, one) = (int(b, 0), int(b, 1));
                    let miss = b.if_(this, zero, one);
                    let lam = b.lam(&ix.0, ix_ty, miss);
                    let ss = sz.get(b);
                    let misses = b.prim(Prim::Sumbuild, vec![ss, lam]);
                    let zero = int(b, 0);
                    let none = b.prim(Prim::Eq, vec![misses, zero]);
                    let yes = b.body.alloc_typed(Expr::Lit(Lit::Bool(true)), Type::Bool);
                    b.if_(empty, yes, none)
                });
                let no = b.body.alloc_typed(Expr::Lit(Lit::Bool(false)), Type::Bool);
                b.if_(same_size, every, no)
            }
            _ => {
                let (pp, qq) = (p.get(b), q.get(b));
                b.prim(Prim::Eq, vec![pp, qq])
            }
        })
    })
}

fn ff() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

fn abs(b: &mut Builder, x: ExprId) -> ExprId {
    b.call(FunName::typed("abs", Type::Float), vec![x], Type::Float)
}

fn bool_op(b: &mut Builder, op: &str, x: ExprId, y: ExprId) -> ExprId {
    b.call(FunName::typed(op, Type::Tuple(vec![Type::Bool, Type::Bool])), vec![x, y], Type::Bool)
}
