//! Seed 002's Theorem 3.7 for a scan over a monoid: the pieces of reverse
//! mode's blocked backward pass that do not depend on the transposer
//! ([`crate::rev`] puts them together).
//!
//! The cotangent of `$scanBlocks OP E V`'s accumulators obeys a linear
//! recurrence running right to left: with `g_i` the cotangent of result i
//! and `r` the results' incoming cotangent, `g_(n-1) = r[n-1]` and
//! `g_(i-1) = M_i g_i + r[i-1]`, where `M_i` is the transpose of OP's
//! derivative in its accumulator at step i. Each step is an affine map
//! `x ↦ M x + c`, and affine maps compose associatively, so the `g` are a
//! scan over the affine-map monoid (the paper's ⊗ with `roll_left` and
//! `roll_right` being the reversal of the vector), which `$scanBlocks` runs
//! in its parallel blocks and lanes like any other monoid.
//!
//! The matrices are materialised: the cotangent type must be a tuple of
//! Floats (k of them, at most [`MAX_FLOATS`]). Only the entries that can be
//! non-zero are kept: [`seed_dependence`] reads, from the transposed step
//! written with a symbolic seed, which seed components each component of
//! the accumulator's cotangent can depend on (the pattern P of `M`); the
//! products of such matrices are non-zero at most on the reflexive and
//! transitive closure of P ([`closure`]), the state pattern. The affine
//! recurrence `h_t = a_t h_(t-1) + b_t` has a diagonal M, so its state is
//! 2 + 2 Floats, not 4 + 2.

use rustc_hash::FxHashMap;

use ksc_ir::builder::Builder;
use ksc_ir::{Body, Callee, Expr, ExprId, Pat, Prim, Type};

/// The largest cotangent (in Floats) whose recurrence is run as a scan of
/// its affine maps: a state of up to k² + k Floats per element.
pub(crate) const MAX_FLOATS: usize = 6;

/// The paths (1-based `get` indices) to the leaves of a type built from
/// tuples and Floats, in order; `None` if it holds anything else. The empty
/// tuple has no leaves.
// pub for the integration tests (tests/rscan.rs), through `crate::testing`.
pub fn float_leaves(ty: &Type) -> Option<Vec<Vec<u32>>> {
    fn go(ty: &Type, path: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) -> bool {
        match ty {
            Type::Float => {
                out.push(path.clone());
                true
            }
            Type::Tuple(ts) => ts.iter().enumerate().all(|(i, t)| {
                path.push(i as u32 + 1);
                let ok = go(t, path, out);
                path.pop();
                ok
            }),
            _ => false,
        }
    }
    let mut out = Vec::new();
    go(ty, &mut Vec::new(), &mut out).then_some(out)
}

/// The number of leaves [`seed_dependence`] tracks in a value of this type:
/// a tuple's are its components', anything else is one.
pub(crate) fn leaf_count(ty: &Type) -> usize {
    match ty {
        Type::Tuple(ts) => ts.iter().map(leaf_count).sum(),
        _ => 1,
    }
}

/// For each leaf of `e`'s value, the set (a bit mask) of the components of
/// the variable `seed` (of a type whose [`leaf_count`] is at most 64) it
/// may depend on. Conservative: a call's results depend on everything its
/// arguments do, a branch's on both branches and its test.
pub(crate) fn seed_dependence(body: &Body, e: ExprId, seed: &str, seed_leaves: usize) -> Vec<u64> {
    let mut env: FxHashMap<String, Vec<u64>> = FxHashMap::default();
    env.insert(seed.to_string(), (0..seed_leaves).map(|m| 1u64 << m).collect());
    deps(body, e, &mut env)
}

fn deps(body: &Body, e: ExprId, env: &mut FxHashMap<String, Vec<u64>>) -> Vec<u64> {
    let width = || leaf_count(body.ty(e));
    let all = |d: &[u64]| d.iter().fold(0, |a, b| a | b);
    match &body.exprs[e] {
        Expr::Lit(_) | Expr::Dummy(_) => vec![0; width()],
        Expr::Var(x) => env.get(x).cloned().unwrap_or_else(|| vec![0; width()]),
        Expr::Tuple(es) => es.iter().flat_map(|&c| deps(body, c, env)).collect(),
        Expr::Let(pat, rhs, rest) => {
            let d = deps(body, *rhs, env);
            let bound: Vec<(String, Vec<u64>)> = match pat {
                Pat::Var(x) => vec![(x.clone(), d)],
                Pat::Tuple(xs) => {
                    let tys = match body.ty(*rhs) {
                        Type::Tuple(ts) if ts.len() == xs.len() => ts.clone(),
                        _ => vec![Type::Unknown; xs.len()],
                    };
                    let mut at = 0;
                    xs.iter()
                        .zip(&tys)
                        .map(|(x, t)| {
                            let w = leaf_count(t);
                            let part = d.get(at..at + w).map(<[u64]>::to_vec).unwrap_or_else(|| vec![all(&d); w]);
                            at += w;
                            (x.clone(), part)
                        })
                        .collect()
                }
            };
            let saved: Vec<(String, Option<Vec<u64>>)> =
                bound.into_iter().map(|(x, d)| (x.clone(), env.insert(x, d))).collect();
            let out = deps(body, *rest, env);
            for (x, old) in saved.into_iter().rev() {
                match old {
                    Some(d) => env.insert(x, d),
                    None => env.remove(&x),
                };
            }
            out
        }
        Expr::If(c, t, f) => {
            let c = all(&deps(body, *c, env));
            let (t, f) = (deps(body, *t, env), deps(body, *f, env));
            t.iter().zip(&f).map(|(a, b)| a | b | c).collect()
        }
        Expr::Assert(c, rest, _) => {
            let c = all(&deps(body, *c, env));
            deps(body, *rest, env).into_iter().map(|d| d | c).collect()
        }
        Expr::Lam(x, ty, rest) => {
            let old = env.insert(x.clone(), vec![0; leaf_count(ty)]);
            let d = all(&deps(body, *rest, env));
            match old {
                Some(o) => env.insert(x.clone(), o),
                None => env.remove(x),
            };
            vec![d; width()]
        }
        Expr::Call(Callee::Prim(Prim::Get { index, .. }), arg) => {
            let d = deps(body, *arg, env);
            match body.ty(*arg) {
                Type::Tuple(ts) if (*index as usize) <= ts.len() => {
                    let at: usize = ts[..*index as usize - 1].iter().map(leaf_count).sum();
                    let w = leaf_count(&ts[*index as usize - 1]);
                    d.get(at..at + w).map(<[u64]>::to_vec).unwrap_or_else(|| vec![all(&d); w])
                }
                _ => vec![all(&d); width()],
            }
        }
        // The tangent-space operations act leaf by leaf.
        Expr::Call(Callee::Prim(p @ (Prim::TsAdd | Prim::TsNeg | Prim::TsScale)), arg) => {
            let w = width();
            let d = deps(body, *arg, env);
            match (p, d.len()) {
                (Prim::TsNeg, n) if n == w => d,
                (Prim::TsAdd, n) if n == 2 * w => (0..w).map(|l| d[l] | d[w + l]).collect(),
                (Prim::TsScale, n) if n == w + 1 => d[1..].iter().map(|x| x | d[0]).collect(),
                _ => vec![all(&d); w],
            }
        }
        Expr::Call(_, arg) => {
            let d = all(&deps(body, *arg, env));
            vec![d; width()]
        }
    }
}

/// The reflexive and transitive closure of a k x k pattern (`p[l]` the
/// columns of row l, as a bit mask): where products of identities and
/// matrices of pattern `p` can be non-zero.
// pub for the integration tests (tests/rscan.rs), through `crate::testing`.
pub fn closure(p: &[u64]) -> Vec<u64> {
    let k = p.len();
    let mut s: Vec<u64> = (0..k).map(|l| p[l] | (1 << l)).collect();
    loop {
        let next: Vec<u64> =
            (0..k).map(|l| (0..k).filter(|&q| s[l] >> q & 1 == 1).fold(s[l], |acc, q| acc | s[q])).collect();
        if next == s {
            return s;
        }
        s = next;
    }
}

/// The entries (row, column) of a pattern, row by row: the layout of a
/// matrix in the scan's state.
// pub for the integration tests (tests/rscan.rs), through `crate::testing`.
pub fn entries(s: &[u64]) -> Vec<(usize, usize)> {
    let k = s.len();
    (0..k).flat_map(|l| (0..k).filter(move |&m| s[l] >> m & 1 == 1).map(move |m| (l, m))).collect()
}

/// A value of a Floats-and-tuples type from its leaves, in [`float_leaves`]
/// order.
pub(crate) fn from_leaves(b: &mut Builder, ty: &Type, leaves: &mut impl Iterator<Item = ExprId>) -> ExprId {
    match ty {
        Type::Tuple(ts) => {
            let parts = ts.iter().map(|t| from_leaves(b, t, leaves)).collect();
            b.tuple(parts)
        }
        _ => leaves.next().unwrap_or_else(|| b.float(0.0)),
    }
}

/// Leaf `path` of the value of the variable `x` (a chain of `get`s).
pub(crate) fn leaf(b: &mut Builder, x: &str, ty: &Type, path: &[u32]) -> ExprId {
    let mut e = b.var(x, ty.clone());
    let mut t = ty.clone();
    for &i in path {
        let Type::Tuple(ts) = t else { break };
        e = b.prim(Prim::Get { index: i, arity: ts.len() as u32 }, vec![e]);
        t = ts[i as usize - 1].clone();
    }
    e
}

/// The type of the scan's state: A's entries on the state pattern, then
/// c's `k` leaves, all flat (a vector of it is then stored as one vector
/// per component, `split-tuple-vectors`, and the entries nothing reads
/// after the scan are not stored).
pub(crate) fn state_type(entries: usize, k: usize) -> Type {
    Type::Tuple(vec![Type::Float; entries + k])
}

/// The affine-map monoid's operator on states `(A, c)` (A's entries on the
/// state pattern `s`, then c's leaves; [`state_type`]): `(A1, c1) ⊙ (A2,
/// c2) = (A2 A1, A2 c1 + c2)`, the map `x ↦ A2 (A1 x + c1) + c2`, applying
/// the first and then the second. Products skip the pattern's zeros; sums
/// run in ascending order of the inner index.
pub(crate) fn compose(b: &mut Builder, s: &[u64]) -> ExprId {
    let ents = entries(s);
    let k = s.len();
    let width = ents.len() + k;
    let at: FxHashMap<(usize, usize), usize> = ents.iter().enumerate().map(|(i, &lm)| (lm, i)).collect();
    let st_ty = state_type(ents.len(), k);
    let p = b.fresh_name("aff");
    let pair_ty = Type::Tuple(vec![st_ty.clone(), st_ty.clone()]);
    let sides = [b.fresh_name("st"), b.fresh_name("st")];
    let part = |b: &mut Builder, side: usize, e: usize| {
        let v = b.var(&sides[side], st_ty.clone());
        b.prim(Prim::Get { index: e as u32 + 1, arity: width as u32 }, vec![v])
    };
    // Σ_q A2[l][q] * y(q) over the q where A2[l][q] is kept, in order, with
    // y(q) the component of the first state that A2[l][q] multiplies (an
    // entry of A1 on row q, or c1's leaf q); None where no term is kept.
    let row_times = |b: &mut Builder, l: usize, y: &dyn Fn(usize) -> Option<usize>| {
        let mut sum: Option<ExprId> = None;
        for q in 0..k {
            let (Some(&x), Some(y)) = (at.get(&(l, q)), y(q)) else { continue };
            let (x, y) = (part(b, 1, x), part(b, 0, y));
            let t = b.mul_float(x, y);
            sum = Some(match sum {
                Some(acc) => b.add_float(acc, t),
                None => t,
            });
        }
        sum
    };
    let mut out = Vec::new();
    for &(l, m) in &ents {
        let sum = row_times(b, l, &|q| at.get(&(q, m)).copied());
        out.push(sum.unwrap_or_else(|| b.float(0.0)));
    }
    for l in 0..k {
        let sum = row_times(b, l, &|q| Some(ents.len() + q));
        let c2 = part(b, 1, ents.len() + l);
        out.push(match sum {
            Some(acc) => b.add_float(acc, c2),
            None => c2,
        });
    }
    let mut body = b.tuple(out);
    for side in (0..2).rev() {
        let pv = b.var(&p, pair_ty.clone());
        let st = b.prim(Prim::Get { index: side as u32 + 1, arity: 2 }, vec![pv]);
        body = b.let_(&sides[side], st, body);
    }
    b.lam(&p, pair_ty, body)
}

/// The monoid's identity `(I, 0)` on the state pattern `s`.
pub(crate) fn identity(b: &mut Builder, s: &[u64]) -> ExprId {
    let mut parts: Vec<ExprId> = entries(s).into_iter().map(|(l, m)| b.float(if l == m { 1.0 } else { 0.0 })).collect();
    parts.extend((0..s.len()).map(|_| b.float(0.0)));
    b.tuple(parts)
}
