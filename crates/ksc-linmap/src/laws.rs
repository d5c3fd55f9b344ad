//! The laws of linear maps, each once, as data: seed 003 figure 4
//! (properties), figure 5 (transposition and reverse application), the
//! application semantics of figure 4, and knossos-reference.md 4.2 and 4.3.
//!
//! Every law is a directed rewrite (left side to right side) that never
//! makes code worse: it removes a combinator, or moves work to where it can
//! be shared, or turns a map application into ordinary arithmetic. A law
//! whose right side repeats a sub-term of the left is marked `duplicates`:
//! the optimiser applies it only where that sub-term is atomic. A law that
//! needs a shape gets it from the maps involved (`witness.rs`) and does not
//! fire when the shape is unknown.
//!
//! The same table drives the optimiser and the property tests (`check.rs`):
//! every law carries a generator of random instances of its left side.

use quickcheck::{Arbitrary, Gen};

use ksc_ir::{Expr, ExprId, Lit, Prim, Type};

use crate::spec::{MapSpec, Numbers, Shape};
use crate::witness::{is_own_tangent, source_of, target_of};
use ksc_ir::builder::{call_of, Builder};
use ksc_ir::prim::Accumulators;

/// A random instance of a law's left side.
#[derive(Clone, Debug)]
pub enum Instance {
    /// A linear map: both sides are compared as dense matrices.
    Map(MapSpec),
    /// `lmApply m dx`: both sides are tangents.
    Apply(MapSpec, Numbers),
    /// `lmApplyR dr m`: both sides are cotangents.
    ApplyR(Numbers, MapSpec),
}

pub type Rewrite = fn(&mut Builder, ExprId) -> Option<ExprId>;

pub struct Law {
    pub name: &'static str,
    /// The law in one line.
    pub statement: &'static str,
    /// Where it comes from / what it is about.
    pub group: &'static str,
    /// The right side repeats a sub-term of the left side.
    pub duplicates: bool,
    /// Rewrites an instance of the left side at the given expression into
    /// the right side, or returns None if the expression is not an instance
    /// (or a side condition fails).
    pub rewrite: Rewrite,
    /// A random instance of the left side.
    pub instance: fn(&mut Gen) -> Instance,
}

const PROPS: &str = "properties (seed 003 fig. 4; reference 4.2)";
const TRANS: &str = "transposition (seed 003 fig. 5; reference 4.3)";
const APPLY: &str = "application (seed 003 fig. 4; reference 4.2)";
const APPLYR: &str = "reverse application (seed 003 fig. 5; reference 4.3)";
const FOLDS: &str = "maps of loops (reference 5.2; seed 002 section 3.2)";

// ---------------------------------------------------------------------------
// Matching helpers.

fn args(b: &Builder, e: ExprId, p: Prim) -> Option<Vec<ExprId>> {
    call_of(b.body, e, p)
}

fn is(b: &Builder, e: ExprId, p: Prim) -> bool {
    args(b, e, p).is_some()
}

fn float_lit(b: &Builder, e: ExprId) -> Option<f64> {
    match b.expr(e) {
        Expr::Lit(Lit::Float(x)) => Some(*x),
        _ => None,
    }
}

fn tensor_rank(t: &Type) -> Option<usize> {
    match t {
        Type::Tensor(n, _) => Some(*n),
        _ => None,
    }
}

fn lm_types(t: &Type) -> Option<(Type, Type)> {
    match t {
        Type::LM(s, t) => Some(((**s).clone(), (**t).clone())),
        _ => None,
    }
}

fn transpose(b: &mut Builder, m: ExprId) -> ExprId {
    b.prim(Prim::LmTranspose, vec![m])
}

fn compose(b: &mut Builder, f: ExprId, g: ExprId) -> ExprId {
    b.prim(Prim::LmCompose, vec![f, g])
}

fn apply(b: &mut Builder, m: ExprId, x: ExprId) -> ExprId {
    b.prim(Prim::LmApply, vec![m, x])
}

fn apply_r(b: &mut Builder, r: ExprId, m: ExprId) -> ExprId {
    b.prim(Prim::LmApplyR, vec![r, m])
}

/// `ts_add` of several tangents (at least one).
fn sum(b: &mut Builder, xs: Vec<ExprId>) -> ExprId {
    let mut it = xs.into_iter();
    let first = it.next().expect("sum of nothing");
    it.fold(first, |acc, x| b.prim(Prim::TsAdd, vec![acc, x]))
}

/// Component `i` (0-based) of an n-tuple expression (a literal tuple's
/// component itself, else a projection of a copy).
fn component(b: &mut Builder, t: ExprId, i: usize, n: usize) -> ExprId {
    if let Expr::Tuple(es) = b.expr(t) {
        if es.len() == n {
            return es[i];
        }
    }
    let t = b.copy(t);
    b.prim(Prim::Get { index: i as u32 + 1, arity: n as u32 }, vec![t])
}

/// `(index i v)` of a copy of v; for a vector written out as `constVec n m`
/// or `build n (λj. m)`, the element itself.
fn index_of(b: &mut Builder, i: ExprId, v: ExprId) -> ExprId {
    match ksc_ir::builder::prim_call(b.body, v) {
        Some((Prim::ConstVec, a)) => return b.copy(a[1]),
        Some((Prim::Build, a)) => {
            if let Expr::Lam(j, _, m) = b.expr(a[1]).clone() {
                let (i, m) = (b.copy(i), b.copy(m));
                return b.let_(&j, i, m);
            }
        }
        _ => {}
    }
    let (i, v) = (b.copy(i), b.copy(v));
    b.prim(Prim::Index, vec![i, v])
}

/// `size v`; for a vector written out, its size expression.
fn size_of(b: &mut Builder, v: ExprId) -> ExprId {
    match ksc_ir::builder::prim_call(b.body, v) {
        Some((Prim::ConstVec | Prim::Build, a)) => b.copy(a[0]),
        _ => {
            let v = b.copy(v);
            b.prim(Prim::Size, vec![v])
        }
    }
}

/// Like `Builder::share`, but a vector written out (`constVec`, `build`) is
/// not bound to a variable: its elements are taken from it directly.
fn share_vec(b: &mut Builder, v: ExprId, body: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
    if matches!(ksc_ir::builder::prim_call(b.body, v), Some((Prim::ConstVec | Prim::Build, _))) {
        body(b, v)
    } else {
        b.share(v, "v", body)
    }
}

/// `Σ_i f(i)` over a rank-1 size `n`, with `zero` for n = 0.
/// `Σ_i f(i)` over the index space of size `n` (an Integer, or a tuple of
/// Integers for rank > 1), with `zero` when it is empty.
fn sum_over(b: &mut Builder, n: ExprId, zero: ExprId, f: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
    let ity = b.ty(n);
    let i = b.fresh_name("i");
    let iv = b.var(&i, ity.clone());
    let body = f(b, iv);
    let lam = b.lam(&i, ity.clone(), body);
    let n1 = b.copy(n);
    let s = b.prim(Prim::Sumbuild, vec![n1, lam]);
    // Empty if some dimension is zero.
    let rank = ity.index_rank().unwrap_or(1) as u32;
    let mut empty = None;
    for k in 1..=rank {
        let nk = b.copy(n);
        let dim = if rank == 1 { nk } else { b.prim(Prim::Get { index: k, arity: rank }, vec![nk]) };
        let z = b.integer(0);
        let is_zero = b.prim(Prim::Eq, vec![dim, z]);
        empty = Some(match empty {
            None => is_zero,
            Some(acc) => b.call(
                ksc_ir::FunName::typed("or", Type::Tuple(vec![Type::Bool, Type::Bool])),
                vec![acc, is_zero],
                Type::Bool,
            ),
        });
    }
    let empty = empty.unwrap_or_else(|| b.body.alloc_typed(Expr::Lit(ksc_ir::Lit::Bool(false)), Type::Bool));
    let ty = b.ty(s);
    b.body.alloc_typed(Expr::If(empty, zero, s), ty)
}

/// `lmFold (s, f, df, a, v) ⊙ (ds, (da, dv))` (or `lmScan`, `lmScanBlocks`,
/// as `kept` says): the same loop over the pairs (value, tangent), each
/// step `((a, da), (x, dx)) -> (f (a, x), df (a, x) ⊙ (ds, (da, dx)))`,
/// from `(a, da)`; the tangents of its accumulators (knossos-reference.md
/// 5.2; for a monoid's scan, seed 002 section 3.2: the step is then the
/// paired monoid's operation, whose identity is `(e, 0)`).
fn apply_fold(b: &mut Builder, e: ExprId, kept: Accumulators) -> Option<ExprId> {
    let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
    let [_, f, df, acc, v] = args(b, m, kept.map_prim())?[..] else { return None };
    let (Expr::Lam(fp, t_ty, fbody), Expr::Lam(dp, _, dbody)) = (b.expr(f).clone(), b.expr(df).clone()) else {
        return None;
    };
    let Type::Tuple(ax) = &t_ty else { return None };
    let [a_ty, x_ty] = &ax[..] else { return None };
    let pair = |t: &Type| Some(Type::Tuple(vec![t.clone(), t.tangent()?]));
    let p_ty = Type::Tuple(vec![pair(a_ty)?, pair(x_ty)?]);
    Some(b.share(x, "dx", |b, x| {
        share_vec(b, v, |b, v| {
            let rest = component(b, x, 1, 2);
            // The loop's vector: build (size v) (λi. (v[i], dv[i])).
            let n = size_of(b, v);
            let pairs = b.build(n, |b, i| {
                let vi = index_of(b, i, v);
                let rest = b.copy(rest);
                let dv = b.prim(Prim::Get { index: 2, arity: 2 }, vec![rest]);
                let dvi = index_of(b, i, dv);
                b.tuple(vec![vi, dvi])
            });
            // The step, its parameter p = ((a, da), (x, dx)).
            let p = b.fresh_name("p");
            let part = |b: &mut Builder, outer: u32, inner: u32| {
                let pv = b.var(&p, p_ty.clone());
                let o = b.prim(Prim::Get { index: outer, arity: 2 }, vec![pv]);
                b.prim(Prim::Get { index: inner, arity: 2 }, vec![o])
            };
            let t = b.fresh_name("t");
            let (a, xi) = (part(b, 1, 1), part(b, 2, 1));
            let t_val = b.tuple(vec![a, xi]);
            let tv = b.var(&t, t_ty.clone());
            let value = b.let_(&fp, tv, fbody);
            let tv = b.var(&t, t_ty.clone());
            let map = b.let_(&dp, tv, dbody);
            let ds = component(b, x, 0, 2);
            let ds = b.copy(ds);
            let (da, dxi) = (part(b, 1, 2), part(b, 2, 2));
            let inner = b.tuple(vec![da, dxi]);
            let dst = b.tuple(vec![ds, inner]);
            let tangent = apply(b, map, dst);
            let step = b.tuple(vec![value, tangent]);
            let step = b.let_(&t, t_val, step);
            let lam = b.lam(&p, p_ty.clone(), step);
            let rest = b.copy(rest);
            let da0 = b.prim(Prim::Get { index: 1, arity: 2 }, vec![rest]);
            let init = b.tuple(vec![acc, da0]);
            let looped = b.prim(kept.value_prim(), vec![lam, init, pairs]);
            match kept {
                Accumulators::Last => b.prim(Prim::Get { index: 2, arity: 2 }, vec![looped]),
                _ => b.share(looped, "accs", |b, accs| {
                    let n = size_of(b, accs);
                    b.build(n, |b, i| {
                        let ai = index_of(b, i, accs);
                        b.prim(Prim::Get { index: 2, arity: 2 }, vec![ai])
                    })
                }),
            }
        })
    }))
}

/// `r ⊙ᴿ lmFold (s, f, df, a, v)` (or `lmScan`, `lmScanBlocks`, as `kept`
/// says): RFold (seed 003 figure 15). The accumulators are stored with
/// `$scan f a v`; a `fold` then visits the steps backwards, its state the
/// accumulator's cotangent with the scope's and the vector's summed so far:
/// step i adds r's part for the accumulator after it (for a scan: part
/// i + 1 of `lmScan`'s n + 1, part i of `lmScanBlocks`' n), transposes
/// `df (acc_i, v_i)` at that cotangent, and adds the element's cotangent
/// as `r_i ⊙ᴿ lmIndex (i, v)`. `lmScan`'s part 0, for the first
/// accumulator, is added to the accumulator's cotangent at the end.
fn applyr_fold(b: &mut Builder, e: ExprId, kept: Accumulators) -> Option<ExprId> {
    let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
    let [s, f, df, acc, v] = args(b, m, kept.map_prim())?[..] else { return None };
    let Expr::Lam(dp, _, dbody) = b.expr(df).clone() else { return None };
    let (s_ty, a_ty, v_ty) = (b.ty(s), b.ty(acc), b.ty(v));
    let (ds_ty, da_ty, dv_ty) = (s_ty.tangent()?, a_ty.tangent()?, v_ty.tangent()?);
    let state_ty = Type::Tuple(vec![da_ty.clone(), Type::Tuple(vec![ds_ty, dv_ty])]);
    let q_ty = Type::Tuple(vec![state_ty.clone(), Type::Integer]);
    Some(b.share(r, "r", |b, r| {
        b.share(s, "s", |b, s| {
            b.share(acc, "a", |b, acc| {
                b.share(v, "v", |b, v| {
                    let (a1, v1) = (b.copy(acc), b.copy(v));
                    let accs = b.prim(Prim::Scan, vec![f, a1, v1]);
                    b.share(accs, "accs", |b, accs| {
                        let n = size_of(b, v);
                        b.share(n, "n", |b, n| {
                            // The step, its parameter q = ((da, (ds, dv)), k).
                            let q = b.fresh_name("q");
                            let get = |b: &mut Builder, e: ExprId, i: u32, n: u32| {
                                b.prim(Prim::Get { index: i, arity: n }, vec![e])
                            };
                            let qv = b.var(&q, q_ty.clone());
                            let k = get(b, qv, 2, 2);
                            let (n1, one) = (b.copy(n), b.integer(1));
                            let last = b.int_op("sub", n1, one);
                            let i = b.int_op("sub", last, k);
                            let step = b.share(i, "i", |b, i| {
                                let qv = b.var(&q, q_ty.clone());
                                let state = get(b, qv, 1, 2);
                                let da = get(b, state, 1, 2);
                                let da = match kept {
                                    Accumulators::Last => da,
                                    Accumulators::All | Accumulators::AfterFirst => {
                                        let mut part = b.copy(i);
                                        if kept == Accumulators::All {
                                            let one = b.integer(1);
                                            part = b.int_op("add", part, one);
                                        }
                                        let r1 = b.copy(r);
                                        let ri = b.prim(Prim::Index, vec![part, r1]);
                                        b.prim(Prim::TsAdd, vec![da, ri])
                                    }
                                };
                                let (ai, vi) = (index_of(b, i, accs), index_of(b, i, v));
                                let at = b.tuple(vec![ai, vi]);
                                let map = b.let_(&dp, at, dbody);
                                let d = apply_r(b, da, map);
                                b.share(d, "d", |b, d| {
                                    let d1 = b.copy(d);
                                    let dt = get(b, d1, 2, 2);
                                    let da_i = get(b, dt, 1, 2);
                                    let qv = b.var(&q, q_ty.clone());
                                    let sums = get(b, qv, 1, 2);
                                    let sums = get(b, sums, 2, 2);
                                    b.share(sums, "sums", |b, sums| {
                                        let s1 = b.copy(sums);
                                        let ds = get(b, s1, 1, 2);
                                        let d2 = b.copy(d);
                                        let ds_i = get(b, d2, 1, 2);
                                        let ds = b.prim(Prim::TsAdd, vec![ds, ds_i]);
                                        let s2 = b.copy(sums);
                                        let dv = get(b, s2, 2, 2);
                                        let d3 = b.copy(d);
                                        let dt = get(b, d3, 2, 2);
                                        let dx_i = get(b, dt, 2, 2);
                                        let (i1, v2) = (b.copy(i), b.copy(v));
                                        let at_i = b.prim(Prim::LmIndex, vec![i1, v2]);
                                        let one_hot = apply_r(b, dx_i, at_i);
                                        let dv = b.prim(Prim::TsAdd, vec![dv, one_hot]);
                                        let sums = b.tuple(vec![ds, dv]);
                                        b.tuple(vec![da_i, sums])
                                    })
                                })
                            });
                            {
                                let lam = b.lam(&q, q_ty.clone(), step);
                                let r0 = match kept {
                                    Accumulators::Last => b.copy(r),
                                    _ => {
                                        let a2 = b.copy(acc);
                                        b.zero_tangent(a2)
                                    }
                                };
                                let (s1, v3) = (b.copy(s), b.copy(v));
                                let (zs, zv) = (b.zero_tangent(s1), b.zero_tangent(v3));
                                let zeros = b.tuple(vec![zs, zv]);
                                let init = b.tuple(vec![r0, zeros]);
                                let n2 = b.copy(n);
                                let ks = b.build(n2, |_, k| k);
                                let out = b.prim(Prim::Fold, vec![lam, init, ks]);
                                b.share(out, "out", |b, out| {
                                    let o1 = b.copy(out);
                                    let mut da = get(b, o1, 1, 2);
                                    if kept == Accumulators::All {
                                        let (zero, r2) = (b.integer(0), b.copy(r));
                                        let r_0 = b.prim(Prim::Index, vec![zero, r2]);
                                        da = b.prim(Prim::TsAdd, vec![da, r_0]);
                                    }
                                    let o2 = b.copy(out);
                                    let sums = get(b, o2, 2, 2);
                                    b.share(sums, "sums", |b, sums| {
                                        let s1 = b.copy(sums);
                                        let ds = get(b, s1, 1, 2);
                                        let s2 = b.copy(sums);
                                        let dv = get(b, s2, 2, 2);
                                        let inner = b.tuple(vec![da, dv]);
                                        b.tuple(vec![ds, inner])
                                    })
                                })
                            }
                        })
                    })
                })
            })
        })
    }))
}

// ---------------------------------------------------------------------------
// Instance helpers.

fn shape(g: &mut Gen) -> Shape {
    Shape::arbitrary(g, 2)
}

fn float_shape(g: &mut Gen) -> Shape {
    fn floats(s: Shape) -> Shape {
        match s {
            Shape::Int => Shape::Float,
            Shape::Vec(n, e) => Shape::Vec(n, Box::new(floats(*e))),
            Shape::Tuple(ss) => Shape::Tuple(ss.into_iter().map(floats).collect()),
            s => s,
        }
    }
    floats(shape(g))
}

/// One to three maps out of `s`, each into a fresh shape (the blocks of
/// a vertical concatenation).
fn maps_from(g: &mut Gen, s: &Shape) -> Vec<MapSpec> {
    (0..arity(g))
        .map(|_| {
            let t = shape(g);
            map(g, s, &t)
        })
        .collect()
}

/// One to three maps into `t`, each out of a fresh shape (the blocks
/// of a horizontal concatenation).
fn maps_into(g: &mut Gen, t: &Shape) -> Vec<MapSpec> {
    (0..arity(g))
        .map(|_| {
            let s = shape(g);
            map(g, &s, t)
        })
        .collect()
}

fn map(g: &mut Gen, s: &Shape, t: &Shape) -> MapSpec {
    MapSpec::arbitrary(g, s, t, 2)
}

fn arity(g: &mut Gen) -> usize {
    usize::arbitrary(g) % 3 + 1
}

fn scale_k(g: &mut Gen) -> f64 {
    (i8::arbitrary(g) % 8) as f64 / 2.0
}

use MapSpec as M;

fn bx(m: MapSpec) -> Box<MapSpec> {
    Box::new(m)
}

// ---------------------------------------------------------------------------
// The table.

pub static LAWS: &[Law] = &[
    // ----- Properties -----
    Law {
        name: "compose-zero-left",
        statement: "0 ∘ m = 0",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [f, m] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let z = args(b, f, Prim::LmZero)?;
            let s = source_of(b, m)?;
            let t = b.copy(z[1]);
            Some(b.prim(Prim::LmZero, vec![s, t]))
        },
        instance: |g| {
            let (a, bb, c) = (shape(g), shape(g), shape(g));
            Instance::Map(M::Compose(bx(M::Zero(bb.clone(), c)), bx(map(g, &a, &bb))))
        },
    },
    Law {
        name: "compose-zero-right",
        statement: "m ∘ 0 = 0",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [m, z] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let z = args(b, z, Prim::LmZero)?;
            let t = target_of(b, m)?;
            let s = b.copy(z[0]);
            Some(b.prim(Prim::LmZero, vec![s, t]))
        },
        instance: |g| {
            let (a, bb, c) = (shape(g), shape(g), shape(g));
            Instance::Map(M::Compose(bx(map(g, &bb, &c)), bx(M::Zero(a, bb))))
        },
    },
    Law {
        name: "compose-one-left",
        statement: "1 ∘ m = m",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [f, m] = args(b, e, Prim::LmCompose)?[..] else { return None };
            is(b, f, Prim::LmOne).then_some(m)
        },
        instance: |g| {
            let (a, bb) = (shape(g), shape(g));
            Instance::Map(M::Compose(bx(M::One(bb.clone())), bx(map(g, &a, &bb))))
        },
    },
    Law {
        name: "compose-one-right",
        statement: "m ∘ 1 = m",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [m, g] = args(b, e, Prim::LmCompose)?[..] else { return None };
            is(b, g, Prim::LmOne).then_some(m)
        },
        instance: |g| {
            let (a, bb) = (shape(g), shape(g));
            Instance::Map(M::Compose(bx(map(g, &a, &bb)), bx(M::One(a))))
        },
    },
    Law {
        name: "add-zero-right",
        statement: "m ⊕ 0 = m",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [m, z] = args(b, e, Prim::LmAdd)?[..] else { return None };
            is(b, z, Prim::LmZero).then_some(m)
        },
        instance: |g| {
            let (a, bb) = (shape(g), shape(g));
            Instance::Map(M::Add(bx(map(g, &a, &bb)), bx(M::Zero(a, bb))))
        },
    },
    Law {
        name: "add-zero-left",
        statement: "0 ⊕ m = m",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [z, m] = args(b, e, Prim::LmAdd)?[..] else { return None };
            is(b, z, Prim::LmZero).then_some(m)
        },
        instance: |g| {
            let (a, bb) = (shape(g), shape(g));
            Instance::Map(M::Add(bx(M::Zero(a.clone(), bb.clone())), bx(map(g, &a, &bb))))
        },
    },
    Law {
        name: "compose-hcat-right",
        statement: "m ∘ (n1 ⋈ .. ⋈ nk) = (m ∘ n1) ⋈ .. ⋈ (m ∘ nk)",
        group: PROPS,
        duplicates: true,
        rewrite: |b, e| {
            let [m, h] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let ns = args(b, h, Prim::LmHCat)?;
            let parts = ns
                .into_iter()
                .enumerate()
                .map(|(i, n)| {
                    let m = if i == 0 { m } else { b.copy(m) };
                    compose(b, m, n)
                })
                .collect();
            Some(b.prim(Prim::LmHCat, parts))
        },
        instance: |g| {
            let (t, c) = (shape(g), shape(g));
            let srcs: Vec<Shape> = (0..arity(g)).map(|_| shape(g)).collect();
            let ns = srcs.iter().map(|s| map(g, s, &t)).collect();
            Instance::Map(M::Compose(bx(map(g, &t, &c)), bx(M::HCat(ns))))
        },
    },
    Law {
        name: "compose-vcat-left",
        statement: "(m1 × .. × mk) ∘ n = (m1 ∘ n) × .. × (mk ∘ n)",
        group: PROPS,
        duplicates: true,
        rewrite: |b, e| {
            let [v, n] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let ms = args(b, v, Prim::LmVCat)?;
            let parts = ms
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let n = if i == 0 { n } else { b.copy(n) };
                    compose(b, m, n)
                })
                .collect();
            Some(b.prim(Prim::LmVCat, parts))
        },
        instance: |g| {
            let (a, s) = (shape(g), shape(g));
            let tgts: Vec<Shape> = (0..arity(g)).map(|_| shape(g)).collect();
            let ms = tgts.iter().map(|t| map(g, &s, t)).collect();
            Instance::Map(M::Compose(bx(M::VCat(ms)), bx(map(g, &a, &s))))
        },
    },
    Law {
        name: "compose-hcat-vcat",
        statement: "(m1 ⋈ .. ⋈ mk) ∘ (n1 × .. × nk) = (m1 ∘ n1) ⊕ .. ⊕ (mk ∘ nk)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [h, v] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let (ms, ns) = (args(b, h, Prim::LmHCat)?, args(b, v, Prim::LmVCat)?);
            if ms.len() != ns.len() {
                return None;
            }
            let parts: Vec<ExprId> = ms.into_iter().zip(ns).map(|(m, n)| compose(b, m, n)).collect();
            let mut it = parts.into_iter();
            let first = it.next()?;
            Some(it.fold(first, |acc, x| b.prim(Prim::LmAdd, vec![acc, x])))
        },
        instance: |g| {
            let (a, c) = (shape(g), shape(g));
            let mids: Vec<Shape> = (0..arity(g)).map(|_| shape(g)).collect();
            let ms = mids.iter().map(|s| map(g, s, &c)).collect();
            let ns = mids.iter().map(|s| map(g, &a, s)).collect();
            Instance::Map(M::Compose(bx(M::HCat(ms)), bx(M::VCat(ns))))
        },
    },
    Law {
        name: "compose-scales",
        statement: "S(k1) ∘ S(k2) = S(k1 * k2)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [f, g] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let (s1, s2) = (args(b, f, Prim::LmScale)?, args(b, g, Prim::LmScale)?);
            let k = b.mul_float(s1[1], s2[1]);
            let t = b.copy(s2[0]);
            Some(b.prim(Prim::LmScale, vec![t, k]))
        },
        instance: |g| {
            let t = shape(g);
            Instance::Map(M::Compose(bx(M::Scale(t.clone(), scale_k(g))), bx(M::Scale(t, scale_k(g)))))
        },
    },
    Law {
        name: "add-scales",
        statement: "S(k1) ⊕ S(k2) = S(k1 + k2)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [f, g] = args(b, e, Prim::LmAdd)?[..] else { return None };
            let (s1, s2) = (args(b, f, Prim::LmScale)?, args(b, g, Prim::LmScale)?);
            let k = b.add_float(s1[1], s2[1]);
            let t = b.copy(s1[0]);
            Some(b.prim(Prim::LmScale, vec![t, k]))
        },
        instance: |g| {
            let t = shape(g);
            Instance::Map(M::Add(bx(M::Scale(t.clone(), scale_k(g))), bx(M::Scale(t, scale_k(g)))))
        },
    },
    Law {
        name: "compose-assoc",
        statement: "(f ∘ g) ∘ h = f ∘ (g ∘ h)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [fg, h] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let [f, g] = args(b, fg, Prim::LmCompose)?[..] else { return None };
            let gh = compose(b, g, h);
            Some(compose(b, f, gh))
        },
        instance: |g| {
            let (a, bb, c, d) = (shape(g), shape(g), shape(g), shape(g));
            let (f, g2, h) = (map(g, &c, &d), map(g, &bb, &c), map(g, &a, &bb));
            Instance::Map(M::Compose(bx(M::Compose(bx(f), bx(g2))), bx(h)))
        },
    },
    Law {
        name: "vcat-of-zeros",
        statement: "0 × .. × 0 = 0",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let ms = args(b, e, Prim::LmVCat)?;
            let zs = ms.iter().map(|&m| args(b, m, Prim::LmZero)).collect::<Option<Vec<_>>>()?;
            let s = b.copy(zs[0][0]);
            let ts = zs.iter().map(|z| b.copy(z[1])).collect();
            let t = b.tuple(ts);
            Some(b.prim(Prim::LmZero, vec![s, t]))
        },
        instance: |g| {
            let s = shape(g);
            Instance::Map(M::VCat((0..arity(g)).map(|_| M::Zero(s.clone(), shape(g))).collect()))
        },
    },
    Law {
        name: "hcat-of-zeros",
        statement: "0 ⋈ .. ⋈ 0 = 0",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let ms = args(b, e, Prim::LmHCat)?;
            let zs = ms.iter().map(|&m| args(b, m, Prim::LmZero)).collect::<Option<Vec<_>>>()?;
            let ss = zs.iter().map(|z| b.copy(z[0])).collect();
            let s = b.tuple(ss);
            let t = b.copy(zs[0][1]);
            Some(b.prim(Prim::LmZero, vec![s, t]))
        },
        instance: |g| {
            let t = shape(g);
            Instance::Map(M::HCat((0..arity(g)).map(|_| M::Zero(shape(g), t.clone())).collect()))
        },
    },
    Law {
        name: "add-hcats",
        statement: "(p1 ⋈ .. ⋈ pk) ⊕ (q1 ⋈ .. ⋈ qk) = (p1 ⊕ q1) ⋈ .. ⋈ (pk ⊕ qk)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [p, q] = args(b, e, Prim::LmAdd)?[..] else { return None };
            let (ps, qs) = (args(b, p, Prim::LmHCat)?, args(b, q, Prim::LmHCat)?);
            if ps.len() != qs.len() {
                return None;
            }
            let parts = ps.into_iter().zip(qs).map(|(p, q)| b.prim(Prim::LmAdd, vec![p, q])).collect();
            Some(b.prim(Prim::LmHCat, parts))
        },
        instance: |g| {
            let t = shape(g);
            let ss: Vec<Shape> = (0..arity(g)).map(|_| shape(g)).collect();
            let ps = ss.iter().map(|s| map(g, s, &t)).collect();
            let qs = ss.iter().map(|s| map(g, s, &t)).collect();
            Instance::Map(M::Add(bx(M::HCat(ps)), bx(M::HCat(qs))))
        },
    },
    Law {
        name: "add-vcats",
        statement: "(p1 × .. × pk) ⊕ (q1 × .. × qk) = (p1 ⊕ q1) × .. × (pk ⊕ qk)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [p, q] = args(b, e, Prim::LmAdd)?[..] else { return None };
            let (ps, qs) = (args(b, p, Prim::LmVCat)?, args(b, q, Prim::LmVCat)?);
            if ps.len() != qs.len() {
                return None;
            }
            let parts = ps.into_iter().zip(qs).map(|(p, q)| b.prim(Prim::LmAdd, vec![p, q])).collect();
            Some(b.prim(Prim::LmVCat, parts))
        },
        instance: |g| {
            let s = shape(g);
            let ts: Vec<Shape> = (0..arity(g)).map(|_| shape(g)).collect();
            let ps = ts.iter().map(|t| map(g, &s, t)).collect();
            let qs = ts.iter().map(|t| map(g, &s, t)).collect();
            Instance::Map(M::Add(bx(M::VCat(ps)), bx(M::VCat(qs))))
        },
    },
    Law {
        name: "scale-by-one",
        statement: "S(1) = 1",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [t, k] = args(b, e, Prim::LmScale)?[..] else { return None };
            (float_lit(b, k)? == 1.0).then(|| b.prim(Prim::LmOne, vec![t]))
        },
        instance: |g| Instance::Map(M::Scale(shape(g), 1.0)),
    },
    Law {
        name: "scale-by-zero",
        statement: "S(0) = 0",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [t, k] = args(b, e, Prim::LmScale)?[..] else { return None };
            if float_lit(b, k)? != 0.0 {
                return None;
            }
            let t2 = b.copy(t);
            Some(b.prim(Prim::LmZero, vec![t, t2]))
        },
        instance: |g| Instance::Map(M::Scale(shape(g), 0.0)),
    },
    Law {
        name: "compose-dot-scaler",
        statement: "Dot(u) ∘ ScaleR(v) = S(<u, v>)",
        group: PROPS,
        duplicates: false,
        rewrite: |b, e| {
            let [f, g] = args(b, e, Prim::LmCompose)?[..] else { return None };
            let (u, v) = (args(b, f, Prim::LmDot)?[0], args(b, g, Prim::LmScaleR)?[0]);
            if !is_own_tangent(&b.ty(u)) {
                return None;
            }
            let k = b.prim(Prim::TsDot, vec![u, v]);
            let w = b.float(0.0);
            Some(b.prim(Prim::LmScale, vec![w, k]))
        },
        instance: |g| {
            let s = float_shape(g);
            Instance::Map(M::Compose(
                bx(M::Dot(s.clone(), Numbers::arbitrary(g))),
                bx(M::ScaleR(s, Numbers::arbitrary(g))),
            ))
        },
    },
    // ----- Transposition -----
    Law {
        name: "transpose-compose",
        statement: "(m1 ∘ m2)ᵀ = m2ᵀ ∘ m1ᵀ",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let c = args(b, e, Prim::LmTranspose)?[0];
            let [m1, m2] = args(b, c, Prim::LmCompose)?[..] else { return None };
            let (t2, t1) = (transpose(b, m2), transpose(b, m1));
            Some(compose(b, t2, t1))
        },
        instance: |g| {
            let (a, bb, c) = (shape(g), shape(g), shape(g));
            Instance::Map(M::Transpose(bx(M::Compose(bx(map(g, &bb, &c)), bx(map(g, &a, &bb))))))
        },
    },
    Law {
        name: "transpose-vcat",
        statement: "(m1 × .. × mk)ᵀ = m1ᵀ ⋈ .. ⋈ mkᵀ",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let v = args(b, e, Prim::LmTranspose)?[0];
            let ms = args(b, v, Prim::LmVCat)?;
            let ts = ms.into_iter().map(|m| transpose(b, m)).collect();
            Some(b.prim(Prim::LmHCat, ts))
        },
        instance: |g| {
            let s = shape(g);
            let ms = maps_from(g, &s);
            Instance::Map(M::Transpose(bx(M::VCat(ms))))
        },
    },
    Law {
        name: "transpose-hcat",
        statement: "(m1 ⋈ .. ⋈ mk)ᵀ = m1ᵀ × .. × mkᵀ",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let h = args(b, e, Prim::LmTranspose)?[0];
            let ms = args(b, h, Prim::LmHCat)?;
            let ts = ms.into_iter().map(|m| transpose(b, m)).collect();
            Some(b.prim(Prim::LmVCat, ts))
        },
        instance: |g| {
            let t = shape(g);
            let ms = maps_into(g, &t);
            Instance::Map(M::Transpose(bx(M::HCat(ms))))
        },
    },
    Law {
        name: "transpose-add",
        statement: "(m1 ⊕ m2)ᵀ = m1ᵀ ⊕ m2ᵀ",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let a = args(b, e, Prim::LmTranspose)?[0];
            let [m1, m2] = args(b, a, Prim::LmAdd)?[..] else { return None };
            let (t1, t2) = (transpose(b, m1), transpose(b, m2));
            Some(b.prim(Prim::LmAdd, vec![t1, t2]))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::Map(M::Transpose(bx(M::Add(bx(map(g, &s, &t)), bx(map(g, &s, &t))))))
        },
    },
    Law {
        name: "transpose-zero",
        statement: "0ᵀ = 0",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let z = args(b, e, Prim::LmTranspose)?[0];
            let [s, t] = args(b, z, Prim::LmZero)?[..] else { return None };
            Some(b.prim(Prim::LmZero, vec![t, s]))
        },
        instance: |g| Instance::Map(M::Transpose(bx(M::Zero(shape(g), shape(g))))),
    },
    Law {
        name: "transpose-one",
        statement: "1ᵀ = 1",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            is(b, m, Prim::LmOne).then_some(m)
        },
        instance: |g| Instance::Map(M::Transpose(bx(M::One(shape(g))))),
    },
    Law {
        name: "transpose-scale",
        statement: "S(k)ᵀ = S(k)",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            is(b, m, Prim::LmScale).then_some(m)
        },
        instance: |g| Instance::Map(M::Transpose(bx(M::Scale(shape(g), scale_k(g))))),
    },
    Law {
        name: "transpose-transpose",
        statement: "(mᵀ)ᵀ = m",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let t = args(b, e, Prim::LmTranspose)?[0];
            Some(args(b, t, Prim::LmTranspose)?[0])
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::Map(M::Transpose(bx(M::Transpose(bx(map(g, &s, &t))))))
        },
    },
    Law {
        name: "transpose-vcatv",
        statement: "V(v)ᵀ = H(map (·)ᵀ v)",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            let [s, v] = args(b, m, Prim::LmVCatV)?[..] else { return None };
            let maps = share_vec(b, v, |b, v| {
                let n = size_of(b, v);
                b.build(n, |b, i| {
                    let x = index_of(b, i, v);
                    transpose(b, x)
                })
            });
            Some(b.prim(Prim::LmHCatV, vec![s, maps]))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::Map(M::Transpose(bx(M::VCatV(s.clone(), t.clone(), (0..n).map(|_| map(g, &s, &t)).collect()))))
        },
    },
    Law {
        name: "transpose-hcatv",
        statement: "H(v)ᵀ = V(map (·)ᵀ v)",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            let [t, v] = args(b, m, Prim::LmHCatV)?[..] else { return None };
            let maps = share_vec(b, v, |b, v| {
                let n = size_of(b, v);
                b.build(n, |b, i| {
                    let x = index_of(b, i, v);
                    transpose(b, x)
                })
            });
            Some(b.prim(Prim::LmVCatV, vec![t, maps]))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::Map(M::Transpose(bx(M::HCatV(t.clone(), s.clone(), (0..n).map(|_| map(g, &s, &t)).collect()))))
        },
    },
    Law {
        name: "transpose-scaler",
        statement: "ScaleR(v)ᵀ = Dot(v)",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            let v = args(b, m, Prim::LmScaleR)?[0];
            Some(b.prim(Prim::LmDot, vec![v]))
        },
        instance: |g| Instance::Map(M::Transpose(bx(M::ScaleR(shape(g), Numbers::arbitrary(g))))),
    },
    Law {
        name: "transpose-dot",
        statement: "Dot(v)ᵀ = ScaleR(v)",
        group: TRANS,
        duplicates: false,
        rewrite: |b, e| {
            let m = args(b, e, Prim::LmTranspose)?[0];
            let v = args(b, m, Prim::LmDot)?[0];
            Some(b.prim(Prim::LmScaleR, vec![v]))
        },
        instance: |g| Instance::Map(M::Transpose(bx(M::Dot(shape(g), Numbers::arbitrary(g))))),
    },
    // ----- Application -----
    Law {
        name: "apply-compose",
        statement: "(f ∘ g) ⊙ x = f ⊙ (g ⊙ x)",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let [f, g] = args(b, m, Prim::LmCompose)?[..] else { return None };
            let gx = apply(b, g, x);
            Some(apply(b, f, gx))
        },
        instance: |g| {
            let (a, bb, c) = (shape(g), shape(g), shape(g));
            Instance::Apply(M::Compose(bx(map(g, &bb, &c)), bx(map(g, &a, &bb))), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-vcat",
        statement: "(m1 × .. × mk) ⊙ x = (m1 ⊙ x, .., mk ⊙ x)",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let ms = args(b, m, Prim::LmVCat)?;
            Some(b.share(x, "dx", |b, x| {
                let parts = ms
                    .into_iter()
                    .map(|m| {
                        let x = b.copy(x);
                        apply(b, m, x)
                    })
                    .collect();
                b.tuple(parts)
            }))
        },
        instance: |g| {
            let s = shape(g);
            let ms = maps_from(g, &s);
            Instance::Apply(M::VCat(ms), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-hcat",
        statement: "(m1 ⋈ .. ⋈ mk) ⊙ (x1, .., xk) = m1 ⊙ x1 + .. + mk ⊙ xk",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let ms = args(b, m, Prim::LmHCat)?;
            let n = ms.len();
            Some(b.share(x, "dx", |b, x| {
                let parts = ms
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let xi = component(b, x, i, n);
                        apply(b, m, xi)
                    })
                    .collect();
                sum(b, parts)
            }))
        },
        instance: |g| {
            let t = shape(g);
            let ms = maps_into(g, &t);
            Instance::Apply(M::HCat(ms), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-add",
        statement: "(m1 ⊕ m2) ⊙ x = m1 ⊙ x + m2 ⊙ x",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let [m1, m2] = args(b, m, Prim::LmAdd)?[..] else { return None };
            Some(b.share(x, "dx", |b, x| {
                let x2 = b.copy(x);
                let (y1, y2) = (apply(b, m1, x), apply(b, m2, x2));
                b.prim(Prim::TsAdd, vec![y1, y2])
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::Apply(M::Add(bx(map(g, &s, &t)), bx(map(g, &s, &t))), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-zero",
        statement: "0 ⊙ x = 0",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, _] = args(b, e, Prim::LmApply)?[..] else { return None };
            let [_, t] = args(b, m, Prim::LmZero)?[..] else { return None };
            Some(b.zero_tangent(t))
        },
        instance: |g| Instance::Apply(M::Zero(shape(g), shape(g)), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-one",
        statement: "1 ⊙ x = x",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            is(b, m, Prim::LmOne).then_some(x)
        },
        instance: |g| Instance::Apply(M::One(shape(g)), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-scale",
        statement: "S(k) ⊙ x = k * x",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let k = args(b, m, Prim::LmScale)?[1];
            Some(b.prim(Prim::TsScale, vec![k, x]))
        },
        instance: |g| Instance::Apply(M::Scale(shape(g), scale_k(g)), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-scaler",
        statement: "ScaleR(v) ⊙ x = x * v",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let v = args(b, m, Prim::LmScaleR)?[0];
            is_own_tangent(&b.ty(v)).then(|| b.prim(Prim::TsScale, vec![x, v]))
        },
        instance: |g| Instance::Apply(M::ScaleR(float_shape(g), Numbers::arbitrary(g)), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-dot",
        statement: "Dot(v) ⊙ x = <v, x>",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let v = args(b, m, Prim::LmDot)?[0];
            is_own_tangent(&b.ty(v)).then(|| b.prim(Prim::TsDot, vec![v, x]))
        },
        instance: |g| Instance::Apply(M::Dot(float_shape(g), Numbers::arbitrary(g)), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-vcatv",
        statement: "V(v) ⊙ x = build (size v) (λi. v[i] ⊙ x)",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let [_, v] = args(b, m, Prim::LmVCatV)?[..] else { return None };
            Some(b.share(x, "dx", |b, x| {
                share_vec(b, v, |b, v| {
                    let n = size_of(b, v);
                    b.build(n, |b, i| {
                        let vi = index_of(b, i, v);
                        let x = b.copy(x);
                        apply(b, vi, x)
                    })
                })
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::Apply(
                M::VCatV(s.clone(), t.clone(), (0..n).map(|_| map(g, &s, &t)).collect()),
                Numbers::arbitrary(g),
            )
        },
    },
    Law {
        name: "apply-hcatv",
        statement: "H(v) ⊙ x = Σ_i v[i] ⊙ x[i]",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let [t, v] = args(b, m, Prim::LmHCatV)?[..] else { return None };
            tensor_rank(&b.ty(v))?;
            Some(b.share(x, "dx", |b, x| {
                share_vec(b, v, |b, v| {
                    let n = size_of(b, v);
                    let zero = b.zero_tangent(t);
                    b.share(n, "n", |b, n| {
                        sum_over(b, n, zero, |b, i| {
                            let vi = index_of(b, i, v);
                            let xi = index_of(b, i, x);
                            apply(b, vi, xi)
                        })
                    })
                })
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::Apply(
                M::HCatV(t.clone(), s.clone(), (0..n).map(|_| map(g, &s, &t)).collect()),
                Numbers::arbitrary(g),
            )
        },
    },
    Law {
        name: "apply-transpose",
        statement: "mᵀ ⊙ x = x ⊙ᴿ m",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [t, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let m = args(b, t, Prim::LmTranspose)?[0];
            Some(apply_r(b, x, m))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::Apply(M::Transpose(bx(map(g, &s, &t))), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-index",
        statement: "Index(i) ⊙ x = x[i]",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let i = args(b, m, Prim::LmIndex)?[0];
            Some(b.prim(Prim::Index, vec![i, x]))
        },
        instance: |g| {
            let n = usize::arbitrary(g) % 3 + 1;
            Instance::Apply(M::Index(usize::arbitrary(g) % n, Shape::Vec(n, Box::new(shape(g)))), Numbers::arbitrary(g))
        },
    },
    Law {
        name: "apply-get",
        statement: "Get_i ⊙ x = x.i",
        group: APPLY,
        duplicates: false,
        rewrite: |b, e| {
            let [m, x] = args(b, e, Prim::LmApply)?[..] else { return None };
            let Some((Prim::LmGet { index, arity }, _)) = ksc_ir::builder::prim_call(b.body, m) else { return None };
            Some(b.prim(Prim::Get { index, arity }, vec![x]))
        },
        instance: |g| {
            let n = arity(g);
            Instance::Apply(
                M::Get(usize::arbitrary(g) % n, Shape::Tuple((0..n).map(|_| shape(g)).collect())),
                Numbers::arbitrary(g),
            )
        },
    },
    // ----- Reverse application -----
    Law {
        name: "applyr-compose",
        statement: "r ⊙ᴿ (f ∘ g) = (r ⊙ᴿ f) ⊙ᴿ g",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [f, g] = args(b, m, Prim::LmCompose)?[..] else { return None };
            let rf = apply_r(b, r, f);
            Some(apply_r(b, rf, g))
        },
        instance: |g| {
            let (a, bb, c) = (shape(g), shape(g), shape(g));
            Instance::ApplyR(Numbers::arbitrary(g), M::Compose(bx(map(g, &bb, &c)), bx(map(g, &a, &bb))))
        },
    },
    Law {
        name: "applyr-vcat",
        statement: "(r1, .., rk) ⊙ᴿ (m1 × .. × mk) = r1 ⊙ᴿ m1 + .. + rk ⊙ᴿ mk",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let ms = args(b, m, Prim::LmVCat)?;
            let n = ms.len();
            Some(b.share(r, "dr", |b, r| {
                let parts = ms
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let ri = component(b, r, i, n);
                        apply_r(b, ri, m)
                    })
                    .collect();
                sum(b, parts)
            }))
        },
        instance: |g| {
            let s = shape(g);
            let ms = maps_from(g, &s);
            Instance::ApplyR(Numbers::arbitrary(g), M::VCat(ms))
        },
    },
    Law {
        name: "applyr-hcat",
        statement: "r ⊙ᴿ (m1 ⋈ .. ⋈ mk) = (r ⊙ᴿ m1, .., r ⊙ᴿ mk)",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let ms = args(b, m, Prim::LmHCat)?;
            Some(b.share(r, "dr", |b, r| {
                let parts = ms
                    .into_iter()
                    .map(|m| {
                        let r = b.copy(r);
                        apply_r(b, r, m)
                    })
                    .collect();
                b.tuple(parts)
            }))
        },
        instance: |g| {
            let t = shape(g);
            let ms = maps_into(g, &t);
            Instance::ApplyR(Numbers::arbitrary(g), M::HCat(ms))
        },
    },
    Law {
        name: "applyr-add",
        statement: "r ⊙ᴿ (m1 ⊕ m2) = r ⊙ᴿ m1 + r ⊙ᴿ m2",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [m1, m2] = args(b, m, Prim::LmAdd)?[..] else { return None };
            Some(b.share(r, "dr", |b, r| {
                let r2 = b.copy(r);
                let (y1, y2) = (apply_r(b, r, m1), apply_r(b, r2, m2));
                b.prim(Prim::TsAdd, vec![y1, y2])
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::ApplyR(Numbers::arbitrary(g), M::Add(bx(map(g, &s, &t)), bx(map(g, &s, &t))))
        },
    },
    Law {
        name: "applyr-zero",
        statement: "r ⊙ᴿ 0 = 0",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [_, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [s, _] = args(b, m, Prim::LmZero)?[..] else { return None };
            Some(b.zero_tangent(s))
        },
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), M::Zero(shape(g), shape(g))),
    },
    Law {
        name: "applyr-one",
        statement: "r ⊙ᴿ 1 = r",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            is(b, m, Prim::LmOne).then_some(r)
        },
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), M::One(shape(g))),
    },
    Law {
        name: "applyr-scale",
        statement: "r ⊙ᴿ S(k) = k * r",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let k = args(b, m, Prim::LmScale)?[1];
            Some(b.prim(Prim::TsScale, vec![k, r]))
        },
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), M::Scale(shape(g), scale_k(g))),
    },
    Law {
        name: "applyr-scaler",
        statement: "r ⊙ᴿ ScaleR(v) = <r, v>",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let v = args(b, m, Prim::LmScaleR)?[0];
            is_own_tangent(&b.ty(v)).then(|| b.prim(Prim::TsDot, vec![r, v]))
        },
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), M::ScaleR(float_shape(g), Numbers::arbitrary(g))),
    },
    Law {
        name: "applyr-dot",
        statement: "r ⊙ᴿ Dot(v) = r * v",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let v = args(b, m, Prim::LmDot)?[0];
            is_own_tangent(&b.ty(v)).then(|| b.prim(Prim::TsScale, vec![r, v]))
        },
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), M::Dot(float_shape(g), Numbers::arbitrary(g))),
    },
    Law {
        name: "applyr-transpose",
        statement: "r ⊙ᴿ mᵀ = m ⊙ r",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, t] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let m = args(b, t, Prim::LmTranspose)?[0];
            Some(apply(b, m, r))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            Instance::ApplyR(Numbers::arbitrary(g), M::Transpose(bx(map(g, &s, &t))))
        },
    },
    Law {
        name: "applyr-vcatv",
        statement: "r ⊙ᴿ V(v) = Σ_i r[i] ⊙ᴿ v[i]",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [s, v] = args(b, m, Prim::LmVCatV)?[..] else { return None };
            tensor_rank(&b.ty(v))?;
            Some(b.share(r, "dr", |b, r| {
                share_vec(b, v, |b, v| {
                    let n = size_of(b, v);
                    let zero = b.zero_tangent(s);
                    b.share(n, "n", |b, n| {
                        sum_over(b, n, zero, |b, i| {
                            let vi = index_of(b, i, v);
                            let ri = index_of(b, i, r);
                            apply_r(b, ri, vi)
                        })
                    })
                })
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::ApplyR(
                Numbers::arbitrary(g),
                M::VCatV(s.clone(), t.clone(), (0..n).map(|_| map(g, &s, &t)).collect()),
            )
        },
    },
    Law {
        name: "applyr-hcatv",
        statement: "r ⊙ᴿ H(v) = build (size v) (λi. r ⊙ᴿ v[i])",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [_, v] = args(b, m, Prim::LmHCatV)?[..] else { return None };
            Some(b.share(r, "dr", |b, r| {
                share_vec(b, v, |b, v| {
                    let n = size_of(b, v);
                    b.build(n, |b, i| {
                        let vi = index_of(b, i, v);
                        let r = b.copy(r);
                        apply_r(b, r, vi)
                    })
                })
            }))
        },
        instance: |g| {
            let (s, t) = (shape(g), shape(g));
            let n = usize::arbitrary(g) % 3;
            Instance::ApplyR(
                Numbers::arbitrary(g),
                M::HCatV(t.clone(), s.clone(), (0..n).map(|_| map(g, &s, &t)).collect()),
            )
        },
    },
    Law {
        name: "applyr-index",
        statement: "r ⊙ᴿ Index(i, v) = one-hot(i, r) shaped like v",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let [i, v] = args(b, m, Prim::LmIndex)?[..] else { return None };
            let (_, elem) = lm_types(&b.ty(m))?;
            // Elements of one shape (Floats, tuples of them): the zero of
            // `r` is every element's, so the one-hot is a `deltaVec`, which
            // both backends keep sparse.
            if elem.tangent().is_some_and(|t| t.shape_is_trivial()) {
                let n = size_of(b, v);
                return Some(b.prim(Prim::DeltaVec, vec![n, i, r]));
            }
            // Ragged elements: the zeros take each element's own shape.
            Some(b.share(r, "dr", |b, r| {
                b.share(i, "i", |b, i| {
                    share_vec(b, v, |b, v| {
                        let n = size_of(b, v);
                        b.build(n, |b, k| {
                            let (k1, i1) = (b.copy(k), b.copy(i));
                            let hit = b.prim(Prim::Eq, vec![k1, i1]);
                            let r = b.copy(r);
                            let vk = index_of(b, k, v);
                            let zero = b.zero_tangent(vk);
                            let ty = b.ty(r);
                            b.body.alloc_typed(Expr::If(hit, r, zero), ty)
                        })
                    })
                })
            }))
        },
        instance: |g| {
            let n = usize::arbitrary(g) % 3 + 1;
            Instance::ApplyR(
                Numbers::arbitrary(g),
                M::Index(usize::arbitrary(g) % n, Shape::Vec(n, Box::new(shape(g)))),
            )
        },
    },
    Law {
        name: "applyr-get",
        statement: "r ⊙ᴿ Get_i(t) = (0, .., r, .., 0) shaped like t",
        group: APPLYR,
        duplicates: false,
        rewrite: |b, e| {
            let [r, m] = args(b, e, Prim::LmApplyR)?[..] else { return None };
            let Some((Prim::LmGet { index, arity }, a)) = ksc_ir::builder::prim_call(b.body, m) else { return None };
            let t = a[0];
            Some(b.share(t, "t", |b, t| {
                let parts = (0..arity as usize)
                    .map(|k| {
                        if k + 1 == index as usize {
                            r
                        } else {
                            let c = component(b, t, k, arity as usize);
                            let c = b.copy(c);
                            b.zero_tangent(c)
                        }
                    })
                    .collect();
                b.tuple(parts)
            }))
        },
        instance: |g| {
            let n = arity(g);
            Instance::ApplyR(
                Numbers::arbitrary(g),
                M::Get(usize::arbitrary(g) % n, Shape::Tuple((0..n).map(|_| shape(g)).collect())),
            )
        },
    },
    Law {
        name: "apply-fold",
        statement: "lmFold(s, f, df, a, v) ⊙ (ds, (da, dv)) = get$2 (fold (λ((a, da), (x, dx)). (f (a, x), df (a, x) ⊙ (ds, (da, dx)))) (a, da) (zip v dv))",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| apply_fold(b, e, Accumulators::Last),
        instance: |g| Instance::Apply(MapSpec::arbitrary_fold(g, Accumulators::Last), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-scan",
        statement: "lmScan(s, f, df, a, v) ⊙ x = the tangents of $scan of apply-fold's step from (a, da) over (zip v dv)",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| apply_fold(b, e, Accumulators::All),
        instance: |g| Instance::Apply(MapSpec::arbitrary_fold(g, Accumulators::All), Numbers::arbitrary(g)),
    },
    Law {
        name: "apply-scanblocks",
        statement: "lmScanBlocks(s, f, df, e, v) ⊙ x = the tangents of $scanBlocks of the paired monoid (apply-fold's step) from (e, de) over (zip v dv)",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| apply_fold(b, e, Accumulators::AfterFirst),
        instance: |g| Instance::Apply(MapSpec::arbitrary_fold(g, Accumulators::AfterFirst), Numbers::arbitrary(g)),
    },
    Law {
        name: "applyr-fold",
        statement: "r ⊙ᴿ lmFold(s, f, df, a, v) = (ds, (da, dv)) of a fold over the steps backwards from (r, 0, 0), over the accumulators of $scan f a v: step i transposes df (acc_i, v_i) at the accumulator's cotangent, adds its scope part to ds and its element part one-hot to dv",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| applyr_fold(b, e, Accumulators::Last),
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), MapSpec::arbitrary_fold(g, Accumulators::Last)),
    },
    Law {
        name: "applyr-scan",
        statement: "r ⊙ᴿ lmScan(s, f, df, a, v) = applyr-fold's loop from (0, 0, 0), adding r[i + 1] to the accumulator's cotangent before step i, and r[0] after the last",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| applyr_fold(b, e, Accumulators::All),
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), MapSpec::arbitrary_fold(g, Accumulators::All)),
    },
    Law {
        name: "applyr-scanblocks",
        statement: "r ⊙ᴿ lmScanBlocks(s, f, df, e, v) = applyr-fold's loop from (0, 0, 0), adding r[i] to the accumulator's cotangent before step i (the scan read as the left scan it equals)",
        group: FOLDS,
        duplicates: false,
        rewrite: |b, e| applyr_fold(b, e, Accumulators::AfterFirst),
        instance: |g| Instance::ApplyR(Numbers::arbitrary(g), MapSpec::arbitrary_fold(g, Accumulators::AfterFirst)),
    },
];

/// The law with this name.
pub fn law(name: &str) -> Option<&'static Law> {
    LAWS.iter().find(|l| l.name == name)
}
