//! Let-bound vectors: a `let` of a `build` or `constVec` is substituted into
//! the places that read it, so that `index-build` and `size-build` take the
//! copies apart and the vector is never stored. Whether that pays (how
//! small the element, how many reads, under how many loops) is decided by
//! [`super::heuristics`].

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Expr, ExprId, Pat, Prim, Type, Var};

use super::heuristics::{
    costly_call, expensive, lambda_depth, lazy_reads, small_element, trivial, Read, LAZY_READS, LET_BUILD_READS,
};
use super::instances::{call, ff, vf, with_var, G};
use super::{free_count, int_lit, lam_parts, let_, let_parts, only_indexed, prim_args, CoreRule, Head, VEC};
use crate::rule::Ctx;

pub(super) const LET_BUILD: CoreRule = CoreRule {
    name: "let-build",
    statement: "let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)] when b reads x at \
        most 3 times, by index or size, n is an atom and e is small, pure, without loops or \
        calls of functions with a body, and (if e calls more than arithmetic, as exp) no read \
        is under two lambdas of b",
    group: VEC,
    head: Head::Let,
    rewrite: let_build,
    instance: let_build_instance,
};

/// `let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)]` when `b`
/// reads `x` at most [`LET_BUILD_READS`] times, as the vector of `index` or
/// `size` (which `index-build` and `size-build` then take apart), `n` is an
/// atom and `e` is small, pure and calls no function with a body and no
/// loop: the element is computed where it is read instead of stored
/// (reverse mode makes such vectors of partial cotangents).
fn let_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, f] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    let (_, _, elem) = lam_parts(ctx, f)?;
    if !ctx.is_atomic(n) || !ctx.pure(r) || !small_element(ctx, elem) || !only_indexed(ctx, &x, b) {
        return None;
    }
    if !(1..=LET_BUILD_READS).contains(&free_count(ctx, &x, b)) {
        return None;
    }
    // An element computing more than arithmetic (`exp`, ..) read under two
    // lambdas of b (loops nested in b, as a read in an inner loop of
    // `[jac f]`'s column loop) would be computed again in every run of the
    // outer one.
    if costly_call(ctx, elem) && lambda_depth(ctx, &x, b) >= 2 {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

fn let_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = build n (lam i e) in e' with one read of x (index or
    // size), sometimes inside a loop; e small, e' may rebind x.
    let n = g.atom(b, &Type::Integer);
    let e = with_var(g, "ksc$idx", Type::Integer, |g| g.expr(b, &Type::Float, 1));
    let lam = b.lam("ksc$idx", Type::Integer, e);
    let v = b.prim(Prim::Build, vec![n, lam]);
    let body = with_var(g, "x", vf(), |g| {
        let i = g.expr(b, &Type::Integer, 1);
        let x = b.var("x", vf());
        let read = if g.rng.chance(25) {
            let s = b.prim(Prim::Size, vec![x]);
            call(b, "to_float", Type::Integer, Type::Float, vec![s])
        } else {
            b.prim(Prim::Index, vec![i, x])
        };
        if g.rng.chance(50) {
            // Read in a loop over the first k elements.
            let k = g.atom(b, &Type::Integer);
            let lam = b.lam("ksc$q", Type::Integer, read);
            let s = b.prim(Prim::Sumbuild, vec![k, lam]);
            let e2 = g.expr(b, &Type::Float, 1);
            b.prim(Prim::TsAdd, vec![s, e2])
        } else {
            let e2 = g.expr(b, &Type::Float, 2);
            b.prim(Prim::TsAdd, vec![read, e2])
        }
    });
    b.let_("x", v, body)
}

pub(super) const LET_BUILD_LOOP: CoreRule = CoreRule {
    name: "let-build-loop",
    statement: "let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)] when b reads x \
        once, as index j x in a build or sumbuild over n with index j that is under no other \
        lambda, and e is pure",
    group: VEC,
    head: Head::Let,
    rewrite: let_build_loop,
    instance: let_build_loop_instance,
};

/// `let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)]` when `b`
/// reads `x` once, as `index j x` in the body of a `build n (lam j ..)` or
/// `sumbuild n (lam j ..)` over the same `n`, a loop under no other lambda
/// of `b`: it asks for every element once, so `index-build` then fuses the
/// two loops and the vector is never stored. (The tangent of a `sumbuild`
/// is such a loop over the vector of its terms' tangents, behind a test of
/// its size.) Where the loop is not reached the vector is not computed:
/// it is pure.
fn let_build_loop(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, _] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    if !ctx.is_atomic(n) || !ctx.pure(r) || free_count(ctx, &x, b) != 1 {
        return None;
    }
    let mut reads = Vec::new();
    if !lazy_reads(ctx, &x, b, &mut Vec::new(), &mut Vec::new(), &mut reads) {
        return None;
    }
    let [Read { loops, by_loop_index: true }] = &reads[..] else { return None };
    if !matches!(loops[..], [m] if ctx.alpha_eq(m, n)) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

fn let_build_loop_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = build n (lam i e) in e' where e' reads x in a sumbuild
    // or build, mostly over the same n and by its index (else over
    // another size or at another index), sometimes behind an `if`,
    // sometimes under a let that rebinds the index; e' may rebind x.
    let n = if g.rng.chance(60) { b.integer(1 + g.rng.below(4) as i64) } else { g.atom(b, &Type::Integer) };
    let e = with_var(g, "ksc$idx", Type::Integer, |g| g.expr(b, &Type::Float, 2));
    let lam = b.lam("ksc$idx", Type::Integer, e);
    let v = b.prim(Prim::Build, vec![n, lam]);
    let body = with_var(g, "x", vf(), |g| {
        let m = if g.rng.chance(80) { b.copy(n) } else { g.atom(b, &Type::Integer) };
        let read = with_var(g, "ksc$q", Type::Integer, |g| {
            let i = if g.rng.chance(80) { b.var("ksc$q", Type::Integer) } else { g.expr(b, &Type::Integer, 1) };
            let x = b.var("x", vf());
            let mut read = b.prim(Prim::Index, vec![i, x]);
            let e3 = g.expr(b, &Type::Float, 1);
            read = b.prim(Prim::TsAdd, vec![read, e3]);
            if g.rng.chance(20) {
                // The index rebound: a read at another place.
                let j = g.expr(b, &Type::Integer, 1);
                read = b.let_("ksc$q", j, read);
            }
            read
        });
        let lam = b.lam("ksc$q", Type::Integer, read);
        let mut sum = if g.rng.chance(70) {
            b.prim(Prim::Sumbuild, vec![m, lam])
        } else {
            let built = b.prim(Prim::Build, vec![m, lam]);
            b.prim(Prim::Sum, vec![built])
        };
        if g.rng.chance(50) {
            let c = g.expr(b, &Type::Bool, 1);
            let other = g.expr(b, &Type::Float, 1);
            sum = b.body.alloc_typed(Expr::If(c, other, sum), Type::Float);
        }
        let e2 = g.expr(b, &Type::Float, 1);
        b.prim(Prim::TsAdd, vec![sum, e2])
    });
    b.let_("x", v, body)
}

pub(super) const LET_BUILD_LAZY: CoreRule = CoreRule {
    name: "let-build-lazy",
    statement: "let x = build n (lam i e) in b ⇒ let c = lt cost n in let x' = if c (constVec \
        0 $dummy) (build n (lam i e)) in b[x := if c (build n (lam i e)) x'] when e is \
        expensive and pure and b reads x by index at most 4 times (cost elements: the sum of \
        the sizes of the loops around each read) and by size",
    group: VEC,
    head: Head::Let,
    rewrite: let_build_lazy,
    instance: let_build_lazy_instance,
};

/// `let x = build n (lam i e) in b ⇒ let c = lt cost n in let x' = if c
/// (constVec 0 $dummy) (build n (lam i e)) in b[x := if c (build n (lam i
/// e)) x']` when `e` is expensive (with a loop or a call of a function with
/// a body), pure, and `b` reads `x` only by `index` (at most
/// [`LAZY_READS`] times) and `size`, each read under at most two `build` or
/// `sumbuild` loops whose sizes are atoms bound outside `b`. `cost` is how
/// many elements the reads ask for (the sum over reads of the product of
/// their loops' sizes): when it is less than `n`, the elements are computed
/// where they are read (`index-build` takes the copies apart), else the
/// vector is built as before. Forward mode over the columns of a Jacobian
/// makes such vectors: the tangents of every vertex of a model, of which
/// the residuals read a few.
fn let_build_lazy(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, f] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    let (_, _, elem) = lam_parts(ctx, f)?;
    // Elements of a type with a tangent: values, not linear maps.
    if !ctx.is_atomic(n) || !expensive(ctx, elem) || ctx.ty(elem).tangent().is_none() || !ctx.pure(r) {
        return None;
    }
    let mut reads = Vec::new();
    if !lazy_reads(ctx, &x, b, &mut Vec::new(), &mut Vec::new(), &mut reads)
        || reads.is_empty()
        || reads.len() > LAZY_READS
    {
        return None;
    }
    // A read in a loop of n iterations asks for at least n elements.
    if reads.iter().flat_map(|r| &r.loops).any(|&m| ctx.alpha_eq(m, n)) {
        return None;
    }
    // Reads of literal counts that ask for every element: the test would
    // fold to false and give back the build this started from.
    let asked = reads.iter().try_fold(0i64, |sum, r| {
        let per_read = r.loops.iter().try_fold(1i64, |p, &m| Some(p.saturating_mul(int_lit(ctx, m)?)))?;
        Some(sum.saturating_add(per_read))
    });
    if let (Some(asked), Some(size)) = (asked, int_lit(ctx, n)) {
        if asked >= size {
            return None;
        }
    }
    let mut cost = None;
    for Read { loops, .. } in reads {
        let mut term = None;
        for m in loops {
            let m = ctx.b.copy(m);
            term = Some(match term {
                None => m,
                Some(t) => ctx.b.int_op("mul", t, m),
            });
        }
        let term = term.unwrap_or_else(|| ctx.b.integer(1));
        cost = Some(match cost {
            None => term,
            Some(c) => ctx.b.int_op("add", c, term),
        });
    }
    let n_copy = ctx.b.copy(n);
    let test = ctx.b.int_test("lt", cost?, n_copy);
    let c = ctx.fresh_like("ksc$lazy");
    let stored = ctx.fresh_like(&x);
    let vec_ty = ctx.ty(r);
    let elem_ty = ctx.ty(elem);
    let cv = ctx.alloc(Expr::Var(c.clone()), Type::Bool);
    let zero = ctx.b.integer(0);
    let dummy = ctx.alloc(Expr::Dummy(elem_ty.clone()), elem_ty);
    let empty = ctx.b.prim(Prim::ConstVec, vec![zero, dummy]);
    let rhs = ctx.alloc(Expr::If(cv, empty, r), vec_ty.clone());
    let cv2 = ctx.alloc(Expr::Var(c.clone()), Type::Bool);
    let sv = ctx.alloc(Expr::Var(stored.clone()), vec_ty.clone());
    let fresh = ctx.b.copy(r);
    let read = ctx.alloc(Expr::If(cv2, fresh, sv), vec_ty);
    let body = ctx.substitute(b, &[(x, read)], false);
    let body = read_through_if(ctx, body, &c);
    let inner = let_(ctx, Pat::Var(stored), rhs, body);
    Some(let_(ctx, Pat::Var(c), test, inner))
}

/// Rewrites `index j (if c v w) ⇒ if c (index j v) (index j w)` and `size
/// (if c v w) ⇒ if c (size v) (size w)` for the variable `c` in the tree at
/// `e`, so that `index-build` and `size-build` see the build (`j` need not
/// be an atom: only one branch evaluates it).
fn read_through_if(ctx: &mut Ctx, e: ExprId, c: &str) -> ExprId {
    let node = ctx.expr(e).clone();
    let kids = term::children(&node);
    let new: Vec<ExprId> = kids.iter().map(|&k| read_through_if(ctx, k, c)).collect();
    let e = if new[..] == kids[..] {
        e
    } else {
        let ty = ctx.ty(e);
        let n = term::with_children(&node, &new);
        ctx.alloc(n, ty)
    };
    for p in [Prim::Index, Prim::Size] {
        let Some(args) = prim_args(ctx, e, p) else { continue };
        let Some(&v) = args.last() else { continue };
        let Expr::If(cond, t, f) = ctx.expr(v).clone() else { continue };
        if !matches!(ctx.expr(cond), Expr::Var(y) if y == c) {
            continue;
        }
        let ty = ctx.ty(e);
        let branch = |ctx: &mut Ctx, w: ExprId, copy: bool| {
            let mut a: Vec<ExprId> = args.iter().map(|&x| if copy { ctx.b.copy(x) } else { x }).collect();
            *a.last_mut().unwrap() = w;
            ctx.prim(p, a)
        };
        let (Some(t), Some(f)) = (branch(ctx, t, false), branch(ctx, f, true)) else { continue };
        return ctx.alloc(Expr::If(cond, t, f), ty);
    }
    e
}

fn let_build_lazy_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = build n (lam i (sumbuild k (lam j e))) in e' with one to
    // three reads of x (index, some size), some inside one or two
    // loops of atom sizes; e' may rebind x.
    // Mostly in range: a size of 1 to 4 and reads by the loop index.
    let n = if g.rng.chance(70) { b.integer(1 + g.rng.below(4) as i64) } else { g.atom(b, &Type::Integer) };
    let e = with_var(g, "ksc$idx", Type::Integer, |g| {
        let k = g.atom(b, &Type::Integer);
        let inner = with_var(g, "ksc$j", Type::Integer, |g| g.expr(b, &Type::Float, 1));
        let lam = b.lam("ksc$j", Type::Integer, inner);
        let s = b.prim(Prim::Sumbuild, vec![k, lam]);
        let e2 = g.expr(b, &Type::Float, 1);
        b.prim(Prim::TsAdd, vec![s, e2])
    });
    let lam = b.lam("ksc$idx", Type::Integer, e);
    let v = b.prim(Prim::Build, vec![n, lam]);
    let body = with_var(g, "x", vf(), |g| {
        let reads = 1 + g.rng.below(3);
        let mut acc = g.expr(b, &Type::Float, 1);
        for _ in 0..reads {
            let loops = g.rng.below(3);
            let names = ["ksc$q", "ksc$r"];
            for name in &names[..loops as usize] {
                g.env.push((name.to_string(), Type::Integer));
            }
            let x = b.var("x", vf());
            let mut read = if g.rng.chance(20) {
                let s = b.prim(Prim::Size, vec![x]);
                call(b, "to_float", Type::Integer, Type::Float, vec![s])
            } else {
                let i = if loops > 0 && g.rng.chance(70) {
                    b.var(names[loops as usize - 1], Type::Integer)
                } else {
                    g.expr(b, &Type::Integer, 1)
                };
                b.prim(Prim::Index, vec![i, x])
            };
            for name in names[..loops as usize].iter().rev() {
                g.env.pop();
                let k = if g.rng.chance(60) { b.integer(g.rng.below(3) as i64) } else { g.atom(b, &Type::Integer) };
                let lam = b.lam(name, Type::Integer, read);
                read = b.prim(Prim::Sumbuild, vec![k, lam]);
            }
            acc = b.prim(Prim::TsAdd, vec![read, acc]);
        }
        acc
    });
    b.let_("x", v, body)
}

pub(super) const LET_CONSTVEC: CoreRule = CoreRule {
    name: "let-constvec",
    statement: "let x = constVec n a in b ⇒ b[x := constVec n a] for an atom a and n without \
        effect, when b uses x only as the vector of index and size",
    group: VEC,
    head: Head::Let,
    rewrite: let_constvec,
    instance: let_constvec_instance,
};

/// `let x = constVec n a in b ⇒ b[x := constVec n a]` for an atom a and a
/// size n without effect, when b uses x only as the vector of `index` and
/// `size` (which the `constVec` rules then simplify): a zero tangent read
/// element by element becomes the zero itself.
fn let_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, a] = prim_args(ctx, r, Prim::ConstVec)?[..] else { return None };
    if !ctx.pure(n) || !ctx.is_atomic(a) || !only_indexed(ctx, &x, b) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

pub(super) const LET_DELTAVEC: CoreRule = CoreRule {
    name: "let-deltavec",
    statement: "let x = deltaVec n i a in b ⇒ b[x := deltaVec n i a] for an atom a (a Float), i a few reads and \
        arithmetic, and n without effect, when b uses x only as the vector of index and size",
    group: VEC,
    head: Head::Let,
    rewrite: let_deltavec,
    instance: let_deltavec_instance,
};

/// `let x = deltaVec n i a in b ⇒ b[x := deltaVec n i a]` (see
/// [`LET_DELTAVEC`]): a one-hot direction bound once and read element by
/// element (forward mode over one-hot directions, a derivative inlined
/// into the loop over the directions) is read where it is used, where
/// `index-deltavec` makes each read a test of the position and the
/// iteration rules take the sums over it away. Reads that stay a
/// `deltaVec` are made of an atom, a position that costs a few operations
/// (`[jac f]`'s column less an offset) and n, which has no effect.
fn let_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, i, a] = prim_args(ctx, r, Prim::DeltaVec)?[..] else { return None };
    if ctx.ty(a) != Type::Float || !ctx.pure(n) || !trivial(ctx, i) || !ctx.is_atomic(a) || !only_indexed(ctx, &x, b) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

fn let_deltavec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let n = g.expr(b, &Type::Integer, 2);
    let (i, a) = (g.atom(b, &Type::Integer), g.atom(b, &Type::Float));
    let dv = b.prim(Prim::DeltaVec, vec![n, i, a]);
    read_by_index_and_size(g, b, dv)
}

/// `let x = v in (index i x) + to_float (size x) + e`, e sometimes
/// rebinding x: what `let-constvec` and `let-deltavec` substitute into.
fn read_by_index_and_size(g: &mut G, b: &mut Builder, v: ExprId) -> ExprId {
    let body = with_var(g, "x", vf(), |g| {
        let i = g.expr(b, &Type::Integer, 1);
        let x1 = b.var("x", vf());
        let p = b.prim(Prim::Index, vec![i, x1]);
        let x2 = b.var("x", vf());
        let s = b.prim(Prim::Size, vec![x2]);
        let q = call(b, "to_float", Type::Integer, Type::Float, vec![s]);
        let e = g.expr(b, &Type::Float, 2);
        let pq = call(b, "add", ff(), Type::Float, vec![p, q]);
        call(b, "add", ff(), Type::Float, vec![pq, e])
    });
    b.let_("x", v, body)
}

fn let_constvec_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (n, a) = (g.expr(b, &Type::Integer, 2), g.atom(b, &Type::Float));
    let cv = b.prim(Prim::ConstVec, vec![n, a]);
    read_by_index_and_size(g, b, cv)
}

pub(super) const LET_COLUMNS: CoreRule = CoreRule {
    name: "let-columns",
    statement: "let x = $concatN (tuple n s) (build n (lam c (let .. in build s (lam r e)))) in b ⇒ b[x := ..] \
        when n and s are atoms, the vectors pure, e without loops or calls of functions with a body, the lets \
        small scalar values that do not read r, and b reads x once, as index (tuple p q) x in a build over \
        (tuple s n) or (tuple n s) under no other lambda",
    group: VEC,
    head: Head::Let,
    rewrite: let_columns,
    instance: let_columns_instance,
};

/// `[jac f]` by columns stacks its columns (`$concatN` of a `build` over
/// the columns of `build`s over the rows) and reads the stack transposed
/// into the matrix, element by element: each column is built, copied and
/// read again (see [`LET_COLUMNS`]). When the columns are `build`s, the
/// stack is read where it is used, so `index-concatn-build` computes each
/// element of the matrix where it is stored: one pass. The read is once
/// per element of a loop over as many elements as the stack has, so no
/// more entries are computed than the stack held.
fn let_columns(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let Stacked { n, s, e: element, .. } = stacked_builds(ctx, r)?;
    // An element with loops or calls keeps its columns: `[jac f]`'s passes
    // move the work that does not depend on the column out of the loop
    // over the columns (`hoist-inner-invariants`), which needs that loop.
    if !ctx.is_atomic(n) || !ctx.is_atomic(s) || !ctx.pure(r) || expensive(ctx, element) || free_count(ctx, &x, b) != 1
    {
        return None;
    }
    let mut loops = Vec::new();
    let Ok(Some(size)) = transposed_read(ctx, &x, b, &mut loops) else { return None };
    let Expr::Tuple(dims) = ctx.expr(size).clone() else { return None };
    let same = |ctx: &Ctx, a: ExprId, b: ExprId| ctx.alpha_eq(a, b);
    let matches = match dims[..] {
        [a, b2] => (same(ctx, a, s) && same(ctx, b2, n)) || (same(ctx, a, n) && same(ctx, b2, s)),
        _ => false,
    };
    matches.then(|| ctx.substitute(b, &[(x, r)], true))
}

/// The parts of `$concatN (tuple n s) (build n' (lam c (let .. in build s'
/// (lam r e))))` with n' and s' the same as n and s, and lets (if any) of
/// small pure values that do not read r.
fn stacked_builds(ctx: &mut Ctx, v: ExprId) -> Option<Stacked> {
    let [shape, vectors] = prim_args(ctx, v, Prim::ConcatN)?[..] else { return None };
    let Expr::Tuple(dims) = ctx.expr(shape).clone() else { return None };
    let [n, s] = dims[..] else { return None };
    let [n2, f] = prim_args(ctx, vectors, Prim::Build)?[..] else { return None };
    let (c, _, mut column) = lam_parts(ctx, f)?;
    let mut lets = Vec::new();
    while let Expr::Let(p, rhs, b) = ctx.expr(column).clone() {
        // Scalars only: a vector (a basis tangent) would be made again for
        // every entry.
        if !ctx.pure(rhs) || !small_element(ctx, rhs) || ctx.ty(rhs).holds_tensor() {
            return None;
        }
        lets.push((p, rhs));
        column = b;
    }
    let [s2, g] = prim_args(ctx, column, Prim::Build)?[..] else { return None };
    let (row, _, e) = lam_parts(ctx, g)?;
    let moves_in = lets.iter().all(|(p, rhs)| !p.vars().contains(&row) && !ctx.is_free(&row, *rhs));
    (moves_in && ctx.alpha_eq(n, n2) && ctx.alpha_eq(s, s2)).then_some(Stacked { n, s, c, row, lets, e })
}

/// Stacked builds (see [`stacked_builds`]).
struct Stacked {
    n: ExprId,
    s: ExprId,
    c: Var,
    row: Var,
    /// Small values each column binds before its build: computed again for
    /// each element where the stack is read element by element.
    lets: Vec<(Pat, ExprId)>,
    e: ExprId,
}

/// Where the one free `x` of `e` is read: Ok(Some(size)) when it is read
/// as `index (tuple ..) x` under exactly one lambda, a `build`'s of that
/// size; Ok(None) when `e` does not mention it; Err otherwise. `loops`: the
/// lambdas around `e`, each with its build's size if it is one.
fn transposed_read(ctx: &mut Ctx, x: &str, e: ExprId, loops: &mut Vec<Option<ExprId>>) -> Result<Option<ExprId>, ()> {
    if !ctx.is_free(x, e) {
        return Ok(None);
    }
    if let Some([i, v]) = prim_args(ctx, e, Prim::Index).as_deref() {
        if matches!(ctx.expr(*v), Expr::Var(y) if y == x) {
            if !matches!(ctx.expr(*i), Expr::Tuple(_)) || ctx.is_free(x, *i) {
                return Err(());
            }
            return match loops[..] {
                [Some(size)] => Ok(Some(size)),
                _ => Err(()),
            };
        }
    }
    if let Some([m, f]) = prim_args(ctx, e, Prim::Build).as_deref() {
        if let Some((j, _, lb)) = lam_parts(ctx, *f) {
            if ctx.is_free(x, *m) || j == x {
                return Err(());
            }
            loops.push(Some(*m));
            let found = transposed_read(ctx, x, lb, loops);
            loops.pop();
            return found;
        }
    }
    match ctx.expr(e).clone() {
        Expr::Var(_) => Err(()),
        Expr::Lam(v, _, b) => {
            if v == x {
                return Ok(None);
            }
            loops.push(None);
            let found = transposed_read(ctx, x, b, loops);
            loops.pop();
            found
        }
        Expr::Let(p, r, b) => {
            let in_r = transposed_read(ctx, x, r, loops)?;
            if in_r.is_some() || p.vars().iter().any(|v| v == x) {
                return Ok(in_r);
            }
            transposed_read(ctx, x, b, loops)
        }
        other => {
            for c in term::children(&other) {
                if let Some(size) = transposed_read(ctx, x, c, loops)? {
                    return Ok(Some(size));
                }
            }
            Ok(None)
        }
    }
}

fn let_columns_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // let x = $concatN (tuple n s) (build n (lam c (build s (lam r e))))
    // in build (tuple s n) (lam ij (index (tuple (get$2$2 ij) (get$1$2 ij)) x)),
    // sometimes over (tuple n s) read in order, sometimes adding e'.
    let (n, s) = (b.integer(1 + g.rng.below(3) as i64), b.integer(1 + g.rng.below(3) as i64));
    let stacked = stack_of_builds(g, b, n, s);
    let mty = Type::tensor(2, Type::Float);
    let ij_ty = Type::Tuple(vec![Type::Integer, Type::Integer]);
    let transposed = g.rng.chance(70);
    let body = with_var(g, "x", mty.clone(), |g| {
        let read = with_var(g, "ksc$ij", ij_ty.clone(), |g| {
            let ij = b.var("ksc$ij", ij_ty.clone());
            let (k1, k2) = if transposed { (2, 1) } else { (1, 2) };
            let p = b.prim(Prim::Get { index: k1, arity: 2 }, vec![ij]);
            let ij = b.var("ksc$ij", ij_ty.clone());
            let q = b.prim(Prim::Get { index: k2, arity: 2 }, vec![ij]);
            let pq = b.tuple(vec![p, q]);
            let x = b.var("x", mty.clone());
            let read = b.prim(Prim::Index, vec![pq, x]);
            if g.rng.chance(30) {
                let e = g.expr(b, &Type::Float, 1);
                b.prim(Prim::TsAdd, vec![read, e])
            } else {
                read
            }
        });
        let lam = b.lam("ksc$ij", ij_ty.clone(), read);
        let (a, c) = if transposed { (b.copy(s), b.copy(n)) } else { (b.copy(n), b.copy(s)) };
        let size = b.tuple(vec![a, c]);
        b.prim(Prim::Build, vec![size, lam])
    });
    b.let_("x", stacked, body)
}

/// `$concatN (tuple n s) (build n (lam c (build s (lam r e))))`, e reading
/// c and r.
fn stack_of_builds(g: &mut G, b: &mut Builder, n: ExprId, s: ExprId) -> ExprId {
    let column = with_var(g, "ksc$c", Type::Integer, |g| {
        let inner = with_var(g, "ksc$r", Type::Integer, |g| g.expr(b, &Type::Float, 2));
        let lam = b.lam("ksc$r", Type::Integer, inner);
        let s2 = b.copy(s);
        b.prim(Prim::Build, vec![s2, lam])
    });
    let lam = b.lam("ksc$c", Type::Integer, column);
    let n2 = b.copy(n);
    let columns = b.prim(Prim::Build, vec![n2, lam]);
    let (n3, s3) = (b.copy(n), b.copy(s));
    let shape = b.tuple(vec![n3, s3]);
    b.prim(Prim::ConcatN, vec![shape, columns])
}

pub(super) const INDEX_CONCATN_BUILD: CoreRule = CoreRule {
    name: "index-concatn-build",
    statement: "index (tuple p q) ($concatN (tuple n s) (build n (lam c (let .. in build s (lam r e))))) ⇒ let \
        (c, r) = (tuple p q) in let .. in e when n, s, p, q and e have no effect, and the lets bind small pure \
        scalar values that do not read r",
    group: VEC,
    head: Head::Prim(Prim::Index),
    rewrite: index_concatn_build,
    instance: index_concatn_build_instance,
};

/// An element of stacked `build`s of one size is its `build`s' element
/// (see [`INDEX_CONCATN_BUILD`]; where the sizes disagree the stack
/// failed, and the rewrite does not).
fn index_concatn_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [pq, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let Stacked { n, s, c, row: r, lets, e: element } = stacked_builds(ctx, v)?;
    if !matches!(ctx.expr(pq), Expr::Tuple(xs) if xs.len() == 2)
        || ![pq, n, s, element].into_iter().all(|x| ctx.pure(x))
    {
        return None;
    }
    // The column's lets, inside the element.
    let mut body = element;
    for (p, rhs) in lets.into_iter().rev() {
        body = let_(ctx, p, rhs, body);
    }
    if c == r {
        // The rows' index hides the columns'.
        let Expr::Tuple(xs) = ctx.expr(pq).clone() else { return None };
        return Some(let_(ctx, Pat::Var(r), xs[1], body));
    }
    Some(let_(ctx, Pat::Tuple(vec![c, r]), pq, body))
}

fn index_concatn_build_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (n, s) = (b.integer(1 + g.rng.below(3) as i64), b.integer(1 + g.rng.below(3) as i64));
    let stacked = stack_of_builds(g, b, n, s);
    let (p, q) = (g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Integer, 1));
    let pq = b.tuple(vec![p, q]);
    b.prim(Prim::Index, vec![pq, stacked])
}
