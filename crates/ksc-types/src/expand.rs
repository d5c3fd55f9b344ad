//! The expansion of `reduce` and `scan` into Core IR every later stage
//! knows (`fold`, `$scan`, `build`, `index`, `size`, `if`, Integer
//! arithmetic, `let`), computing exactly the association tree documented at
//! [`ksc_ir::prim::REDUCE_BLOCK`].
//!
//! It runs at the end of checking a declaration without errors
//! ([`crate::check::Checker::check_decl`]), the one step every consumer
//! goes through (`analyze`, and the database's `checked` query), so the
//! interpreter, AD, `ksc deriv` and lowering all see the expansion and
//! none of them knows `reduce` or `scan`. Derivatives are therefore those
//! of the folds (sequential), and native code is serial.
//!
//! The expansion is rewritten in place at the call's node, so that node
//! keeps its span; one application of the operator reuses the operator's
//! own body (keeping its spans); the others are copies, a fixed number of
//! them (3 for `reduce`, 4 for `scan`), so the expansion is linear in the
//! operator's size. New nodes are located at the declaration.

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::prim::REDUCE_BLOCK;
use ksc_ir::term::{deep_copy, fresh_floor};
use ksc_ir::{Body, Callee, Expr, ExprId, Pat, Prim, Type, Var};

/// Expands every `reduce` and `scan` of the tree at `root` (whose types are
/// known), innermost first. `params` are the names bound around the tree.
pub fn expand_body(body: &mut Body, root: ExprId, params: &[Var]) {
    let calls = calls_post_order(body, root);
    if calls.is_empty() {
        return;
    }
    let mut fresh = fresh_floor(body, root, params.iter());
    for e in calls {
        expand_call(body, &mut fresh, e);
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

fn expand_call(body: &mut Body, fresh: &mut u32, e: ExprId) {
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
    let copies = if p == Prim::Reduce { 3 } else { 4 };
    let mut op = Op { param, pair_ty, bodies: vec![op_body] };
    for _ in 1..copies {
        let c = deep_copy(&mut b, op_body);
        op.bodies.push(c);
    }
    let new =
        if p == Prim::Reduce { reduce(&mut b, &mut op, &t, init, vec) } else { scan(&mut b, &mut op, &t, init, vec) };
    let node = b.body.exprs[new].clone();
    let ty = b.ty(new);
    // The call's node becomes the expansion; the nodes it leaves behind
    // (its argument tuple and the operator's lambda) become `()`, so that
    // nothing reachable is shared with them.
    b.body.exprs[e] = node;
    b.body.types.insert(e, ty);
    debug_assert!(op.bodies.is_empty(), "every copy of the operator is placed");
    for dead in [new, arg, op_lam] {
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

fn if_(b: &mut Builder, c: ExprId, t: ExprId, f: ExprId) -> ExprId {
    let ty = b.ty(t);
    b.body.alloc_typed(Expr::If(c, t, f), ty)
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
                if_(b, test, s, l)
            })
        })
    })
}

/// Block k of v: `(build len (lam j (index (add lo j) v)))`, with
/// lo = k B and len = min(B, n - lo), passed to `then`.
fn with_block(b: &mut Builder, v: &V, n: &V, k: &V, then: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
    let (kk, bb) = (k.get(b), int(b, REDUCE_BLOCK));
    let lo = b.int_op("mul", kk, bb);
    let_in(b, "lo", lo, |b, lo| {
        let (nn, l0) = (n.get(b), lo.get(b));
        let rest = b.int_op("sub", nn, l0);
        let_in(b, "r", rest, |b, r| {
            let (rr, bb) = (r.get(b), int(b, REDUCE_BLOCK));
            let short = b.int_test("lt", rr, bb);
            let (rr, bb) = (r.get(b), int(b, REDUCE_BLOCK));
            let len = if_(b, short, rr, bb);
            let block = build_v(b, len, |b, j| {
                let (l1, jj) = (lo.get(b), j.get(b));
                let at = b.int_op("add", l1, jj);
                let vv = v.get(b);
                b.prim(Prim::Index, vec![at, vv])
            });
            then(b, block)
        })
    })
}

/// s = the block results: `build m (lam k (fold OP e block_k))`.
fn block_sums(b: &mut Builder, op: &mut Op, v: &V, e: &V, n: &V, m: &V) -> ExprId {
    let mm = m.get(b);
    build_v(b, mm, |b, k| {
        with_block(b, v, n, &k, |b, block| {
            let lam = op.lam(b);
            let ee = e.get(b);
            b.prim(Prim::Fold, vec![lam, ee, block])
        })
    })
}

fn reduce(b: &mut Builder, op: &mut Op, t: &Type, init: ExprId, vec: ExprId) -> ExprId {
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
            let s = block_sums(b, &mut op.borrow_mut(), v, e, n, m);
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
                                        if_(b, pair, both, carried)
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
        if_(b, more, next, same)
    });
    let lam = b.lam(&w.0, w_ty, step);
    let (z, o) = (int(b, 0), int(b, 1));
    let start = b.tuple(vec![z, o]);
    let n63 = int(b, 63);
    let range = build_v(b, n63, |b, i| i.get(b));
    let f = b.prim(Prim::Fold, vec![lam, start, range]);
    b.prim(Prim::Get { index: 1, arity: 2 }, vec![f])
}

fn scan(b: &mut Builder, op: &mut Op, t: &Type, init: ExprId, vec: ExprId) -> ExprId {
    let op = std::cell::RefCell::new(op);
    blocked(
        b,
        init,
        vec,
        |b, v, e, n| {
            // build n (lam i (index (i + 1) ($scan OP e v)))
            let lam = op.borrow_mut().lam(b);
            let (ee, vv) = (e.get(b), v.get(b));
            let all = b.prim(Prim::Scan, vec![lam, ee, vv]);
            let_in(b, "c", all, |b, c| {
                let nn = n.get(b);
                build_v(b, nn, |b, i| {
                    let (ii, one) = (i.get(b), int(b, 1));
                    let at = b.int_op("add", ii, one);
                    let cc = c.get(b);
                    b.prim(Prim::Index, vec![at, cc])
                })
            })
        },
        |b, v, e, n, m| {
            let s = block_sums(b, &mut op.borrow_mut(), v, e, n, m);
            let_in(b, "s", s, |b, s| {
                // The carries c_0 = e, c_(k+1) = c_k ⊙ s_k.
                let lam = op.borrow_mut().lam(b);
                let (ee, ss) = (e.get(b), s.get(b));
                let carries = b.prim(Prim::Scan, vec![lam, ee, ss]);
                let_in(b, "c", carries, |b, c| {
                    // One left scan over all n elements in which each block
                    // starts again from its carry: acc_i = (c_k if i = kB,
                    // else acc_(i-1)) ⊙ V[i]. The same operations as
                    // scanning each block from its carry, but flat: its
                    // reverse mode reads the carries at i / B (one-hots of
                    // T) instead of a vector of blocks (one-hots of vectors,
                    // each a dense zero for every other block).
                    let w_ty = Type::Tuple(vec![t.clone(), Type::Integer]);
                    let w = V(b.fresh_name("w"), w_ty.clone());
                    let ww = w.get(b);
                    let acc = b.prim(Prim::Get { index: 1, arity: 2 }, vec![ww]);
                    let ww = w.get(b);
                    let i = b.prim(Prim::Get { index: 2, arity: 2 }, vec![ww]);
                    let step = let_in(b, "i", i, |b, i| {
                        let (ii, bb) = (i.get(b), int(b, REDUCE_BLOCK));
                        let k = b.int_op("div", ii, bb);
                        let_in(b, "k", k, |b, k| {
                            let (kk, bb) = (k.get(b), int(b, REDUCE_BLOCK));
                            let lo = b.int_op("mul", kk, bb);
                            let ii = i.get(b);
                            let first = b.prim(Prim::Eq, vec![ii, lo]);
                            let (kk, cc) = (k.get(b), c.get(b));
                            let carry = b.prim(Prim::Index, vec![kk, cc]);
                            let start = if_(b, first, carry, acc);
                            let (ii, vv) = (i.get(b), v.get(b));
                            let x = b.prim(Prim::Index, vec![ii, vv]);
                            op.borrow_mut().apply(b, start, x)
                        })
                    });
                    let lam = b.lam(&w.0, w_ty, step);
                    let (ee, nn) = (e.get(b), n.get(b));
                    let range = build_v(b, nn, |b, i| i.get(b));
                    let all = b.prim(Prim::Scan, vec![lam, ee, range]);
                    let_in(b, "all", all, |b, all| {
                        let nn = n.get(b);
                        build_v(b, nn, |b, i| {
                            let (ii, one) = (i.get(b), int(b, 1));
                            let at = b.int_op("add", ii, one);
                            let aa = all.get(b);
                            b.prim(Prim::Index, vec![at, aa])
                        })
                    })
                })
            })
        },
    )
}
