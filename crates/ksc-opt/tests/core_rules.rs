//! Every Core rule preserves evaluation: for random instances of its left
//! side (random sub-terms over parameters, with shadowed names, effects and
//! run-time failures among them), the program before and after the rule
//! evaluates, in the reference interpreter, to the same value with the same
//! output whenever the original succeeds; and the rule must actually fire on
//! enough of its instances, so the test cannot pass vacuously. The table is
//! iterated: a rule without a generator fails the test.

mod common;

use common::terms::{ff, let_tuple, random_args, test_def, vf, Rng, G};
use common::{checked, run, same_value};
use ksc_eval::Value;
use ksc_ir::{Body, Def, Expr, ExprId, FunName, Lit, Prim, Type};
use ksc_linmap::builder::Builder;
use ksc_opt::strategy::{normalize_with_fuel, rule};
use ksc_opt::{core_rule, DefMap, Globals, Options, Rewriter, Rule, CORE_RULES};

/// Helper functions the inlining rules can inline.
const HELPERS: &str = "
(def sq Float (z : Float) (mul z z))
(def twice Float ((p : Float) (q : Float)) (add p (mul 2.0 q)))
(def noisy Float (z : Float) ($trace (add z 1.0)))
(def fact Integer (k : Integer) (if (lt k 1) 1 (mul k (fact (sub k 1)))))
(def dbl (Vec Float) (v : Vec Float) (build (size v) (lam (i : Integer) (mul 2.0 (index i v)))))
(def [shape dbl] Integer (v : Vec Float) (size v))
(def firsts (Vec Float) ((v : Vec Float) (k : Integer))
  (build (if (lt k (size v)) k (size v)) (lam (i : Integer) (mul (index i v) (to_float k)))))
(def nested (Vec (Vec Float)) (v : Vec Float)
  (build (size v) (lam (i : Integer) (firsts v i))))
";

type Template = fn(&mut G, &mut Builder) -> ExprId;

fn dummy(b: &mut Builder, t: Type) -> ExprId {
    b.body.alloc_typed(Expr::Dummy(t.clone()), t)
}

fn lit_bool(b: &mut Builder, x: bool) -> ExprId {
    b.body.alloc_typed(Expr::Lit(Lit::Bool(x)), Type::Bool)
}

fn with_var(g: &mut G, name: &str, t: Type, f: impl FnOnce(&mut G) -> ExprId) -> ExprId {
    g.env.push((name.to_string(), t));
    let r = f(g);
    g.env.pop();
    r
}

/// `let b = e0 in let c = e1 in f`: names from the binder pool in scope.
fn outer(g: &mut G, b: &mut Builder, f: impl FnOnce(&mut G, &mut Builder) -> ExprId) -> ExprId {
    let e0 = g.expr(b, &Type::Float, 1);
    let e1 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 1));
    g.env.push(("b".into(), Type::Float));
    g.env.push(("c".into(), Type::Float));
    let inner = f(g, b);
    g.env.pop();
    g.env.pop();
    let l = b.let_("c", e1, inner);
    b.let_("b", e0, l)
}

fn float_or_vec(g: &mut G) -> Type {
    if g.rng.chance(50) {
        Type::Float
    } else {
        vf()
    }
}

fn zero_of(g: &mut G, b: &mut Builder, t: &Type) -> ExprId {
    if *t == Type::Float {
        return b.float(0.0);
    }
    let n = g.size(b, 1);
    let z = b.float(0.0);
    b.prim(Prim::ConstVec, vec![n, z])
}

/// `f z`, or half the time `let ksc$z = z in f ksc$z` (a zero the rules
/// know by its let), or a variable that a let between rebinds to a value
/// that is not zero.
fn let_bound_zero(g: &mut G, b: &mut Builder, z: ExprId, f: impl FnOnce(&mut Builder, ExprId) -> ExprId) -> ExprId {
    if g.rng.chance(50) {
        return f(b, z);
    }
    let ty = b.ty(z);
    let zv = b.var("ksc$z", ty.clone());
    let inner = f(b, zv);
    if g.rng.chance(25) {
        let other = g.expr(b, &ty, 1);
        let rebound = b.let_("ksc$z", other, inner);
        return b.let_("ksc$z", z, rebound);
    }
    b.let_("ksc$z", z, inner)
}

fn call(b: &mut Builder, name: &str, arg: Type, ret: Type, args: Vec<ExprId>) -> ExprId {
    b.call(FunName::typed(name, arg), args, ret)
}

/// `let x = t in (get$1$2 x) + sum (get$2$2 x) + e` for a pair `t` of a
/// Float and a vector, `e` sometimes rebinding or printing `x`.
fn tuple_uses(g: &mut G, b: &mut Builder, t: ExprId) -> ExprId {
    let ty = b.ty(t);
    let body = with_var(g, "x", ty.clone(), |g| {
        let x1 = b.var("x", ty.clone());
        let p = b.prim(Prim::Get { index: 1, arity: 2 }, vec![x1]);
        let x2 = b.var("x", ty.clone());
        let v = b.prim(Prim::Get { index: 2, arity: 2 }, vec![x2]);
        let q = b.prim(Prim::Sum, vec![v]);
        let other = if g.rng.chance(20) {
            // `print x` prints one tuple: x must not become a literal tuple there.
            let x4 = b.var("x", ty.clone());
            let p = b.prim(Prim::Print, vec![x4]);
            call(b, "to_float", Type::Integer, Type::Float, vec![p])
        } else if g.rng.chance(30) {
            let (e, w) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 1));
            let pair = b.tuple(vec![e, w]);
            let x3 = b.var("x", ty.clone());
            let inner = b.prim(Prim::Get { index: 1, arity: 2 }, vec![x3]);
            b.let_("x", pair, inner)
        } else {
            g.expr(b, &Type::Float, 2)
        };
        let pq = call(b, "add", ff(), Type::Float, vec![p, q]);
        call(b, "add", ff(), Type::Float, vec![pq, other])
    });
    b.let_("x", t, body)
}

/// A random instance (inside some context) of each rule's left side.
fn template(rule: &str) -> Option<Template> {
    Some(match rule {
        "let-atom" => |g, b| {
            // let b = e0 in let c = e1 in let a = atom in e[a]: the atom is often
            // `b` or `c`, and e often rebinds it around a use of `a`.
            outer(g, b, |g, b| {
                let t = float_or_vec(g);
                let r = g.atom(b, &t);
                let rebind = match b.expr(r) {
                    ksc_ir::Expr::Var(w) if g.rng.chance(70) => Some(w.clone()),
                    _ => None,
                };
                let body = with_var(g, "a", t.clone(), |g| match rebind {
                    Some(w) => {
                        let e = g.expr(b, &Type::Float, 1);
                        let inner = with_var(g, &w, Type::Float, |g| {
                            let a = b.var("a", t.clone());
                            let use_a = if t == Type::Float {
                                a
                            } else {
                                let s = b.prim(Prim::Size, vec![a]);
                                call(b, "to_float", Type::Integer, Type::Float, vec![s])
                            };
                            let other = g.expr(b, &Type::Float, 2);
                            call(b, "add", ff(), Type::Float, vec![use_a, other])
                        });
                        b.let_(&w, e, inner)
                    }
                    None => g.expr(b, &Type::Float, 4),
                });
                b.let_("a", r, body)
            })
        },
        "let-dead" => |g, b| {
            let r = g.expr(b, &Type::Float, 2);
            let body = g.expr(b, &Type::Float, 3);
            b.let_("a", r, body)
        },
        "let-once" => |g, b| {
            // let b = e0 in let c = e1 in let a = e[b c] in (let b = .. in a * ..)
            outer(g, b, |g, b| {
                let rebound = *g.rng.pick(&["b", "c"]);
                let r0 = g.expr(b, &Type::Float, 2);
                let w = b.var(rebound, Type::Float);
                let r = call(b, "add", ff(), Type::Float, vec![w, r0]);
                let e = g.expr(b, &Type::Float, 1);
                let inner = with_var(g, rebound, Type::Float, |g| {
                    let other = g.expr(b, &Type::Float, 2);
                    let a = b.var("a", Type::Float);
                    call(b, "mul", ff(), Type::Float, vec![other, a])
                });
                let body = b.let_(rebound, e, inner);
                b.let_("a", r, body)
            })
        },
        "let-linear-map" => |g, b| {
            let d = dummy(b, Type::Float);
            let k = g.atom(b, &Type::Float);
            let m = b.prim(Prim::LmScale, vec![d, k]);
            let lm = Type::lm(Type::Float, Type::Float);
            let (x1, x2) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            let (a1, a2) = (b.var("a", lm.clone()), b.var("a", lm));
            let y1 = b.prim(Prim::LmApply, vec![a1, x1]);
            let y2 = b.prim(Prim::LmApply, vec![a2, x2]);
            let body = call(b, "add", ff(), Type::Float, vec![y1, y2]);
            b.let_("a", m, body)
        },
        "let-float-let" => |g, b| {
            // let b = e0 in let a = (let b = e1 in e2) in e3: e3 sees the outer b.
            let e0 = g.expr(b, &Type::Float, 2);
            let inner = with_var(g, "b", Type::Float, |g| {
                let e1 = g.expr(b, &Type::Float, 2);
                let e2 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 2));
                let rhs = b.let_("b", e1, e2);
                let e3 = with_var(g, "a", Type::Float, |g| {
                    let x = g.expr(b, &Type::Float, 2);
                    let bv = b.var("b", Type::Float);
                    call(b, "add", ff(), Type::Float, vec![x, bv])
                });
                b.let_("a", rhs, e3)
            });
            b.let_("b", e0, inner)
        },
        "let-tuple-split" => |g, b| {
            // let a = e0 in let (a b) = (tuple e1 e2[a]) in e3[a b]
            let e0 = g.expr(b, &Type::Float, 2);
            let inner = with_var(g, "a", Type::Float, |g| {
                let e1 = g.expr(b, &Type::Float, 2);
                let av = b.var("a", Type::Float);
                let e2x = g.expr(b, &Type::Float, 1);
                let e2 = call(b, "add", ff(), Type::Float, vec![av, e2x]);
                let t = b.tuple(vec![e1, e2]);
                g.env.push(("a".into(), Type::Float));
                g.env.push(("b".into(), Type::Float));
                let e3 = g.expr(b, &Type::Float, 3);
                g.env.pop();
                g.env.pop();
                let_tuple(b, &["a", "b"], t, e3)
            });
            b.let_("a", e0, inner)
        },
        "let-tuple-var" => |g, b| {
            // let x = (tuple e1 e2) in (get$1$2 x) + sum (get$2$2 x) + e3,
            // the components often traced (their order is observable).
            let (mut e1, mut e2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
            if g.rng.chance(50) {
                e1 = b.prim(Prim::Trace, vec![e1]);
                e2 = b.prim(Prim::Trace, vec![e2]);
            }
            let t = b.tuple(vec![e1, e2]);
            tuple_uses(g, b, t)
        },
        "let-tuple-atoms" => |g, b| {
            let (a1, a2) = (g.atom(b, &Type::Float), g.atom(b, &vf()));
            let t = b.tuple(vec![a1, a2]);
            tuple_uses(g, b, t)
        },
        "let-constvec" => |g, b| {
            // let x = constVec n a in (index i x) + to_float (size x) + e, e
            // sometimes rebinding x.
            let (n, a) = (g.expr(b, &Type::Integer, 2), g.atom(b, &Type::Float));
            let cv = b.prim(Prim::ConstVec, vec![n, a]);
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
            b.let_("x", cv, body)
        },
        "let-float-arg" => |g, b| {
            // let b = e0 in (add e (let b = e1 in e2)) or (add (let ..) e): the other argument sees the outer b.
            let e0 = g.expr(b, &Type::Float, 1);
            let inner = with_var(g, "b", Type::Float, |g| {
                let other = g.expr(b, &Type::Float, 2);
                let e1 = g.expr(b, &Type::Float, 2);
                let e2 = with_var(g, "b", Type::Float, |g| g.expr(b, &Type::Float, 2));
                let l = b.let_("b", e1, e2);
                let args = if g.rng.chance(50) { vec![l, other] } else { vec![other, l] };
                call(b, "sub", ff(), Type::Float, args)
            });
            b.let_("b", e0, inner)
        },
        "if-float-arg" => |g, b| {
            let c = g.expr(b, &Type::Bool, 2);
            let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            let i = b.body.alloc_typed(Expr::If(c, t, f), Type::Float);
            let x = g.atom(b, &Type::Float);
            call(b, "mul", ff(), Type::Float, vec![x, i])
        },
        "assert-float-arg" => |g, b| {
            let c = g.expr(b, &Type::Bool, 1);
            let e = g.expr(b, &Type::Float, 2);
            let a = b.body.alloc_typed(Expr::Assert(c, e), Type::Float);
            let x = g.expr(b, &Type::Float, 1);
            call(b, "add", ff(), Type::Float, vec![a, x])
        },
        "let-float-cond" => |g, b| {
            let e0 = g.expr(b, &Type::Float, 1);
            let inner = with_var(g, "a", Type::Float, |g| {
                let e1 = g.expr(b, &Type::Float, 2);
                let c = with_var(g, "a", Type::Float, |g| g.expr(b, &Type::Bool, 2));
                let cond = b.let_("a", e1, c);
                let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
                b.body.alloc_typed(Expr::If(cond, t, f), Type::Float)
            });
            b.let_("a", e0, inner)
        },
        "let-float-assert" => |g, b| {
            let e0 = g.expr(b, &Type::Float, 1);
            let inner = with_var(g, "a", Type::Float, |g| {
                let e1 = g.expr(b, &Type::Float, 2);
                let c = with_var(g, "a", Type::Float, |g| g.expr(b, &Type::Bool, 2));
                let cond = b.let_("a", e1, c);
                let body = g.expr(b, &Type::Float, 2);
                b.body.alloc_typed(Expr::Assert(cond, body), Type::Float)
            });
            b.let_("a", e0, inner)
        },
        "get-tuple" => |g, b| {
            let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
            let t = b.tuple(vec![p, q]);
            if g.rng.chance(50) {
                b.prim(Prim::Get { index: 1, arity: 2 }, vec![t])
            } else {
                let v = b.prim(Prim::Get { index: 2, arity: 2 }, vec![t]);
                b.prim(Prim::Sum, vec![v])
            }
        },
        "index-build" => |g, b| {
            let n = g.size(b, 1);
            let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
            let i = g.expr(b, &Type::Integer, 1);
            b.prim(Prim::Index, vec![i, v])
        },
        "size-build" => |g, b| {
            let n = g.size(b, 1);
            let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
            b.prim(Prim::Size, vec![v])
        },
        "size-constvec" => |g, b| {
            let n = g.size(b, 1);
            let x = g.expr(b, &Type::Float, 2);
            let v = b.prim(Prim::ConstVec, vec![n, x]);
            b.prim(Prim::Size, vec![v])
        },
        "size-sumbuild" => |g, b| {
            let n = g.size(b, 1);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| g.expr(b, &vf(), 2));
            let lam = b.lam(&i, Type::Integer, body);
            let v = b.prim(Prim::Sumbuild, vec![n, lam]);
            b.prim(Prim::Size, vec![v])
        },
        "get-index-let-build" => |g, b| {
            // let x = build n (lam j (let r = e in (tuple p q))) in get$k (index i x),
            // one component a trivial read of r.
            let n = g.size(b, 1);
            let j = g.name();
            let f = with_var(g, &j, Type::Integer, |g| {
                let r = g.expr(b, &Type::Float, 1);
                let t = with_var(g, "r", Type::Float, |g| {
                    let rv = b.var("r", Type::Float);
                    let p = if g.rng.chance(50) {
                        rv
                    } else {
                        let k = g.lit_float(b);
                        G::fun(b, "mul", ff(), Type::Float, vec![rv, k])
                    };
                    let q = g.expr(b, &Type::Float, 2);
                    b.tuple(if g.rng.chance(50) { vec![p, q] } else { vec![q, p] })
                });
                b.let_("r", r, t)
            });
            let lam = b.lam(&j, Type::Integer, f);
            let v = b.prim(Prim::Build, vec![n, lam]);
            let pairs = Type::vec(ff());
            let body = with_var(g, "x", pairs.clone(), |g| {
                let i = g.expr(b, &Type::Integer, 1);
                let xv = b.var("x", pairs);
                let at = b.prim(Prim::Index, vec![i, xv]);
                let k = 1 + g.rng.below(2) as u32;
                b.prim(Prim::Get { index: k, arity: 2 }, vec![at])
            });
            b.let_("x", v, body)
        },
        "size-deltavec" => |g, b| {
            let (n, i, x) = (g.size(b, 1), g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Float, 2));
            let v = b.prim(Prim::DeltaVec, vec![n, i, x]);
            b.prim(Prim::Size, vec![v])
        },
        "index-constvec" => |g, b| {
            let n = g.size(b, 1);
            let x = g.expr(b, &Type::Float, 2);
            let v = b.prim(Prim::ConstVec, vec![n, x]);
            let i = g.expr(b, &Type::Integer, 1);
            b.prim(Prim::Index, vec![i, v])
        },
        "sum-build" => |g, b| {
            let n = g.size(b, 1);
            let v = g.build_with(b, n, |g, b| g.expr(b, &Type::Float, 2));
            b.prim(Prim::Sum, vec![v])
        },
        "sumbuild-tuple" => |g, b| {
            let n = g.size(b, 1);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| {
                if g.rng.chance(50) {
                    let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 1));
                    return b.tuple(vec![p, q]);
                }
                // Under a let, with a deltaVec component.
                let r = g.expr(b, &Type::Float, 1);
                let t = with_var(g, "a", Type::Float, |g| {
                    let p = g.expr(b, &Type::Float, 2);
                    let (m, j, x) = (g.size(b, 1), g.expr(b, &Type::Integer, 1), g.expr(b, &Type::Float, 2));
                    let q = b.prim(Prim::DeltaVec, vec![m, j, x]);
                    b.tuple(vec![p, q])
                });
                b.let_("a", r, t)
            });
            let lam = b.lam(&i, Type::Integer, body);
            b.prim(Prim::Sumbuild, vec![n, lam])
        },
        "sum-deltavec" => |g, b| {
            if g.rng.chance(30) {
                let n = b.integer(3);
                let i = b.integer(g.rng.below(3) as i64);
                let x = g.expr(b, &Type::Float, 2);
                let d = b.prim(Prim::DeltaVec, vec![n, i, x]);
                return b.prim(Prim::Sum, vec![d]);
            }
            // build n (lam i (sum (deltaVec n i e))): i is in range.
            let n = g.size(b, 1);
            let n2 = ksc_opt::term::deep_copy(b, n);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| {
                let iv = b.var(&i, Type::Integer);
                let x = g.expr(b, &Type::Float, 2);
                let d = b.prim(Prim::DeltaVec, vec![n2, iv, x]);
                b.prim(Prim::Sum, vec![d])
            });
            let lam = b.lam(&i, Type::Integer, body);
            b.prim(Prim::Build, vec![n, lam])
        },
        "sumbuild-deltavec" => |g, b| {
            let n = g.size(b, 1);
            let n2 = ksc_opt::term::deep_copy(b, n);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| {
                let iv = b.var(&i, Type::Integer);
                let x = g.expr(b, &Type::Float, 2);
                b.prim(Prim::DeltaVec, vec![n2, iv, x])
            });
            let lam = b.lam(&i, Type::Integer, body);
            b.prim(Prim::Sumbuild, vec![n, lam])
        },
        "build-index-same" => |g, b| {
            // A copy of a vector variable at its own indices, its size
            // known three ways: the size its let built it with, a variable
            // bound to its size, or `size v` in place; and (so the side
            // conditions are exercised) sometimes a size that differs, or
            // a variable rebound in between.
            let n0 = g.size(b, 1);
            let e = with_var(g, "ksc$idx", Type::Integer, |g| g.expr(b, &Type::Float, 1));
            let lam = b.lam("ksc$idx", Type::Integer, e);
            let n_var = b.var("ksc$n", Type::Integer);
            let made = b.prim(Prim::Build, vec![n_var, lam]);
            let copy_of = |g: &mut G, b: &mut Builder, size: ExprId| {
                g.build_with(b, size, |g, b| {
                    let (i, _) = g.env.last().cloned().unwrap();
                    let iv = b.var(&i, Type::Integer);
                    let vv = b.var("ksc$v", vf());
                    b.prim(Prim::Index, vec![iv, vv])
                })
            };
            g.env.push(("ksc$n".into(), Type::Integer));
            g.env.push(("ksc$v".into(), vf()));
            let body = match g.rng.below(5) {
                0 => {
                    let n = b.var("ksc$n", Type::Integer);
                    copy_of(g, b, n)
                }
                1 => {
                    let vv = b.var("ksc$v", vf());
                    let size = b.prim(Prim::Size, vec![vv]);
                    let inner = {
                        let m = b.var("ksc$m", Type::Integer);
                        copy_of(g, b, m)
                    };
                    b.let_("ksc$m", size, inner)
                }
                2 => {
                    let vv = b.var("ksc$v", vf());
                    let size = b.prim(Prim::Size, vec![vv]);
                    copy_of(g, b, size)
                }
                3 => {
                    let other = g.size(b, 1);
                    copy_of(g, b, other)
                }
                _ => {
                    // n rebound between v's let and the copy.
                    let other = g.size(b, 1);
                    let inner = {
                        let n = b.var("ksc$n", Type::Integer);
                        copy_of(g, b, n)
                    };
                    b.let_("ksc$n", other, inner)
                }
            };
            g.env.pop();
            g.env.pop();
            let with_v = b.let_("ksc$v", made, body);
            b.let_("ksc$n", n0, with_v)
        },
        "build-const" => |g, b| {
            let n = g.size(b, 1);
            // The body does not mention the index.
            let x = g.expr(b, &Type::Float, 2);
            let lam = b.lam("ksc$idx", Type::Integer, x);
            b.prim(Prim::Build, vec![n, lam])
        },
        "buildsum-known-sums" => |g, b| {
            // let y = sumbuild n (lam j T_j) in (sometimes rebinding what
            // T reads) let c = $buildSum n 0.0 (lam i (let r = T_i scaled
            // in (tuple a (tuple s1 ..)))) in (sum of c's parts): each sum
            // part T_i times factors without i, or (not the rule's) a
            // product of two terms or a term plus something.
            let shape = g.rng.below(4);
            let term = |b: &mut Builder, i: &str| -> ExprId {
                let iv = b.var(i, Type::Integer);
                let fi = call(b, "to_float", Type::Integer, Type::Float, vec![iv]);
                match shape {
                    0 => {
                        let v = b.var("v", vf());
                        b.prim(Prim::Index, vec![iv, v])
                    }
                    1 => {
                        let v = b.var("v", vf());
                        let vi = b.prim(Prim::Index, vec![iv, v]);
                        let x = b.var("x", Type::Float);
                        call(b, "mul", ff(), Type::Float, vec![vi, x])
                    }
                    2 => {
                        let y = b.var("y", Type::Float);
                        call(b, "add", ff(), Type::Float, vec![fi, y])
                    }
                    _ => call(b, "mul", ff(), Type::Float, vec![fi, fi]),
                }
            };
            let n = if g.rng.chance(60) {
                let v = b.var("v", vf());
                b.prim(Prim::Size, vec![v])
            } else {
                b.var("n", Type::Integer)
            };
            let t_j = term(b, "ksc$j");
            let lam_j = b.lam("ksc$j", Type::Integer, t_j);
            let sum = b.prim(Prim::Sumbuild, vec![n, lam_j]);
            let k = 1 + g.rng.below(2) as usize;
            g.env.push(("ksc$y".into(), Type::Float));
            let loop_ = with_var(g, "ksc$i", Type::Integer, |g| {
                let t_i = term(b, "ksc$i");
                let c = g.expr(b, &Type::Float, 1);
                let r = match g.rng.below(4) {
                    0 => b.prim(Prim::TsScale, vec![t_i, c]),
                    1 => call(b, "mul", ff(), Type::Float, vec![c, t_i]),
                    2 => call(b, "div", ff(), Type::Float, vec![t_i, c]),
                    _ => call(b, "neg", Type::Float, Type::Float, vec![t_i]),
                };
                g.env.push(("ksc$r".into(), Type::Float));
                let parts: Vec<ExprId> = (0..k)
                    .map(|_| {
                        let rv = b.var("ksc$r", Type::Float);
                        let c2 = g.expr(b, &Type::Float, 1);
                        match g.rng.below(5) {
                            0 => rv,
                            1 => b.prim(Prim::TsScale, vec![c2, rv]),
                            2 => call(b, "mul", ff(), Type::Float, vec![rv, c2]),
                            // Not linear in one term.
                            3 => {
                                let rv2 = b.var("ksc$r", Type::Float);
                                call(b, "mul", ff(), Type::Float, vec![rv, rv2])
                            }
                            _ => call(b, "add", ff(), Type::Float, vec![rv, c2]),
                        }
                    })
                    .collect();
                let a = g.expr(b, &Type::Float, 2);
                g.env.pop();
                let sum_part = b.tuple(parts);
                let pair = b.tuple(vec![a, sum_part]);
                let body = b.let_("ksc$r", r, pair);
                let lam_i = b.lam("ksc$i", Type::Integer, body);
                let zeros: Vec<ExprId> = (0..k).map(|_| b.float(0.0)).collect();
                let z = b.tuple(zeros);
                b.prim(Prim::BuildSum, vec![n, z, lam_i])
            });
            let ty = b.ty(loop_);
            let use_ = {
                let cv = b.var("ksc$c", ty.clone());
                let elems = b.prim(Prim::Get { index: 1, arity: 2 }, vec![cv]);
                let total = b.prim(Prim::Sum, vec![elems]);
                (1..=k as u32).fold(total, |acc, j| {
                    let cv = b.var("ksc$c", ty.clone());
                    let sums = b.prim(Prim::Get { index: 2, arity: 2 }, vec![cv]);
                    let sj = b.prim(Prim::Get { index: j, arity: k as u32 }, vec![sums]);
                    call(b, "add", ff(), Type::Float, vec![acc, sj])
                })
            };
            let mut body = b.let_("ksc$c", loop_, use_);
            g.env.pop();
            // What T reads, sometimes bound again between the sum and the loop.
            if g.rng.chance(20) {
                let (name, ty) = g.rng.pick(&[("x", Type::Float), ("y", Type::Float), ("v", vf())]).clone();
                let other = g.expr(b, &ty, 1);
                body = b.let_(name, other, body);
            }
            b.let_("ksc$y", sum, body)
        },
        "fold-invariant-element" => |g, b| {
            // A fold over a build of 2 or 3 Floats per element, each
            // mentioning the build's index or not (the rule moves those
            // that do not, if pure, into the step; an element without the
            // index could read an outer variable the step's pattern shadows).
            let n = g.size(b, 1);
            let k = 2 + g.rng.below(2) as usize;
            let comps: Vec<ExprId> = (0..k)
                .map(|_| {
                    if g.rng.chance(50) {
                        with_var(g, "ksc$idx", Type::Integer, |g| {
                            let i = b.var("ksc$idx", Type::Integer);
                            let x = g.expr(b, &Type::Float, 2);
                            let fi = call(b, "to_float", Type::Integer, Type::Float, vec![i]);
                            call(b, "add", ff(), Type::Float, vec![x, fi])
                        })
                    } else {
                        g.expr(b, &Type::Float, 2)
                    }
                })
                .collect();
            let elem = b.tuple(comps);
            let lam = b.lam("ksc$idx", Type::Integer, elem);
            let v = b.prim(Prim::Build, vec![n, lam]);
            let xs_ty = Type::Tuple(vec![Type::Float; k]);
            let p_ty = Type::Tuple(vec![Type::Float, xs_ty.clone()]);
            let (p, acc, xs) = (g.name(), g.name(), "ksc$xs".to_string());
            let names: Vec<String> = (1..=k).map(|j| format!("x{j}")).collect();
            let step = with_var(g, &p, p_ty.clone(), |g| {
                with_var(g, &acc, Type::Float, |g| {
                    with_var(g, &xs, xs_ty.clone(), |g| {
                        for x in &names {
                            g.env.push((x.clone(), Type::Float));
                        }
                        let body = g.expr(b, &Type::Float, 3);
                        g.env.truncate(g.env.len() - k);
                        let refs: Vec<&str> = names.iter().map(|x| x.as_str()).collect();
                        let xsv = b.var(&xs, xs_ty.clone());
                        let body = let_tuple(b, &refs, xsv, body);
                        let pv = b.var(&p, p_ty.clone());
                        let_tuple(b, &[&acc, &xs], pv, body)
                    })
                })
            });
            let f = b.lam(&p, p_ty, step);
            let a = g.expr(b, &Type::Float, 1);
            b.prim(Prim::Fold, vec![f, a, v])
        },
        "let-build" => |g, b| {
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
        },
        "let-build-loop" => |g, b| {
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
        },
        "let-build-lazy" => |g, b| {
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
                        let k =
                            if g.rng.chance(60) { b.integer(g.rng.below(3) as i64) } else { g.atom(b, &Type::Integer) };
                        let lam = b.lam(name, Type::Integer, read);
                        read = b.prim(Prim::Sumbuild, vec![k, lam]);
                    }
                    acc = b.prim(Prim::TsAdd, vec![read, acc]);
                }
                acc
            });
            b.let_("x", v, body)
        },
        "let-zero" => |g, b| {
            // let x = 0 in ts_add e (ts_add x e'), the zero of a Float or a
            // vector of atom size; e and e' may use x otherwise.
            let t = float_or_vec(g);
            let z = if t == Type::Float {
                b.float(0.0)
            } else {
                let n = g.atom(b, &Type::Integer);
                let zero = b.float(0.0);
                b.prim(Prim::ConstVec, vec![n, zero])
            };
            let body = with_var(g, "x", t.clone(), |g| {
                let e1 = g.expr(b, &t, 2);
                let x = b.var("x", t.clone());
                let e2 = g.expr(b, &t, 1);
                let inner = b.prim(Prim::TsAdd, vec![x, e2]);
                b.prim(Prim::TsAdd, vec![e1, inner])
            });
            b.let_("x", z, body)
        },
        "ts-add-tuple" => |g, b| {
            let (a1, a2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
            let (b1, b2) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
            let x = b.tuple(vec![a1, a2]);
            let y = b.tuple(vec![b1, b2]);
            b.prim(Prim::TsAdd, vec![x, y])
        },
        "ts-add-zero-right" => |g, b| {
            let t = float_or_vec(g);
            let x = g.expr(b, &t, 2);
            let z = zero_of(g, b, &t);
            let_bound_zero(g, b, z, |b, z| b.prim(Prim::TsAdd, vec![x, z]))
        },
        "ts-add-zero-left" => |g, b| {
            let t = float_or_vec(g);
            let x = g.expr(b, &t, 2);
            let z = zero_of(g, b, &t);
            let_bound_zero(g, b, z, |b, z| b.prim(Prim::TsAdd, vec![z, x]))
        },
        "ts-scale-one" => |g, b| {
            let t = float_or_vec(g);
            let x = g.expr(b, &t, 2);
            let one = b.float(1.0);
            b.prim(Prim::TsScale, vec![one, x])
        },
        "ts-scale-zero" => |g, b| {
            let t = float_or_vec(g);
            let x = g.expr(b, &t, 2);
            let zero = b.float(0.0);
            b.prim(Prim::TsScale, vec![zero, x])
        },
        "ts-scale-of-zero" => |g, b| {
            let t = float_or_vec(g);
            let k = g.expr(b, &Type::Float, 2);
            let z = zero_of(g, b, &t);
            b.prim(Prim::TsScale, vec![k, z])
        },
        "ts-dot-zero" => |g, b| {
            let x = g.expr(b, &vf(), 2);
            let z = zero_of(g, b, &vf());
            let args = if g.rng.chance(50) { vec![x, z] } else { vec![z, x] };
            b.prim(Prim::TsDot, args)
        },
        "if-true" | "if-false" => |g, b| {
            let c = g.rng.chance(50);
            let c = lit_bool(b, c);
            let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
        },
        "if-same" => |g, b| {
            let c = g.expr(b, &Type::Bool, 2);
            let t = g.expr(b, &Type::Float, 3);
            let f = ksc_opt::term::deep_copy(b, t);
            b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
        },
        "assert-true" => |g, b| {
            let c = lit_bool(b, true);
            let e = g.expr(b, &Type::Float, 2);
            b.body.alloc_typed(Expr::Assert(c, e), Type::Float)
        },
        "fold-float" => |g, b| {
            let (p, q) = (g.lit_float(b), g.lit_float(b));
            let op = *g.rng.pick(&["add", "sub", "mul", "div"]);
            let folded = call(b, op, ff(), Type::Float, vec![p, q]);
            let x = g.expr(b, &Type::Float, 2);
            call(b, "add", ff(), Type::Float, vec![folded, x])
        },
        "fold-integer" => |g, b| {
            let big = [i64::MAX, i64::MIN, 3, -7, 0, 2];
            let p = b.integer(*g.rng.pick(&big));
            let q = b.integer(*g.rng.pick(&big));
            let op = *g.rng.pick(&["add", "sub", "mul", "div"]);
            let folded = call(b, op, common::terms::ii(), Type::Integer, vec![p, q]);
            let x = g.expr(b, &Type::Integer, 1);
            call(b, "sub", common::terms::ii(), Type::Integer, vec![folded, x])
        },
        "fold-compare" => |g, b| {
            // Literals, or an Integer variable compared with itself.
            let mut bound = None;
            let c = match g.rng.below(3) {
                0 => {
                    let (p, q) = (g.lit_float(b), g.lit_float(b));
                    let op = *g.rng.pick(&["lt", "gt", "lte", "gte"]);
                    call(b, op, ff(), Type::Bool, vec![p, q])
                }
                1 => {
                    let (p, q) = (g.lit_int(b), g.lit_int(b));
                    b.prim(Prim::Eq, vec![p, q])
                }
                _ => {
                    let k = g.name();
                    bound = Some((k.clone(), g.expr(b, &Type::Integer, 1)));
                    let (p, q) = (b.var(&k, Type::Integer), b.var(&k, Type::Integer));
                    match g.rng.below(6) {
                        0 => b.prim(Prim::Eq, vec![p, q]),
                        1 => b.prim(Prim::Ne, vec![p, q]),
                        _ => {
                            let op = *g.rng.pick(&["lt", "gt", "lte", "gte"]);
                            call(b, op, common::terms::ii(), Type::Bool, vec![p, q])
                        }
                    }
                }
            };
            let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            let e = b.body.alloc_typed(Expr::If(c, t, f), Type::Float);
            match bound {
                Some((k, rhs)) => b.let_(&k, rhs, e),
                None => e,
            }
        },
        "lt-index-size" => |g, b| {
            // build n (lam i (if (lt i n) t f)): always t.
            let n = g.size(b, 1);
            let n2 = ksc_opt::term::deep_copy(b, n);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| {
                let iv = b.var(&i, Type::Integer);
                let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
                let c = call(b, "lt", ii, Type::Bool, vec![iv, n2]);
                let (t, f) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
                b.body.alloc_typed(Expr::If(c, t, f), Type::Float)
            });
            let lam = b.lam(&i, Type::Integer, body);
            b.prim(Prim::Build, vec![n, lam])
        },
        "shape-trivial" => |g, b| {
            let x = if g.rng.chance(50) {
                g.expr(b, &Type::Float, 3)
            } else {
                let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Integer, 2));
                b.tuple(vec![p, q])
            };
            b.prim(Prim::Shape, vec![x])
        },
        "shape-tuple" => |g, b| {
            let p = g.expr(b, &vf(), 2);
            let t = float_or_vec(g);
            let q = g.expr(b, &t, 2);
            let x = b.tuple(vec![p, q]);
            b.prim(Prim::Shape, vec![x])
        },
        "shape-build" => |g, b| {
            // Elements of trivial shape (Float) or not (vectors); build or constVec.
            let n = g.size(b, 1);
            let t = float_or_vec(g);
            let v = if g.rng.chance(70) {
                g.build_with(b, n, |g, b| g.expr(b, &t, 2))
            } else {
                let x = g.expr(b, &t, 2);
                b.prim(Prim::ConstVec, vec![n, x])
            };
            b.prim(Prim::Shape, vec![v])
        },
        "shape-sumbuild" => |g, b| {
            let n = g.size(b, 1);
            let i = g.name();
            let body = with_var(g, &i, Type::Integer, |g| g.expr(b, &vf(), 2));
            let lam = b.lam(&i, Type::Integer, body);
            let v = b.prim(Prim::Sumbuild, vec![n, lam]);
            b.prim(Prim::Shape, vec![v])
        },
        "shape-tangent" => |g, b| {
            let x = match g.rng.below(3) {
                0 => {
                    let (p, q) = (g.expr(b, &vf(), 2), g.expr(b, &vf(), 2));
                    b.prim(Prim::TsAdd, vec![p, q])
                }
                1 => {
                    let (k, v) = (g.expr(b, &Type::Float, 2), g.expr(b, &vf(), 2));
                    b.prim(Prim::TsScale, vec![k, v])
                }
                _ => {
                    let v = g.expr(b, &vf(), 2);
                    b.prim(Prim::TsNeg, vec![v])
                }
            };
            b.prim(Prim::Shape, vec![x])
        },
        "shape-call" => |g, b| {
            let v = g.expr(b, &vf(), 3);
            let c = call(b, "dbl", vf(), vf(), vec![v]);
            b.prim(Prim::Shape, vec![c])
        },
        "shape-inline" => |g, b| {
            // The shape of a call of a function without a shape function:
            // a vector's size, or a vector of vectors' sizes.
            let v = g.expr(b, &vf(), 3);
            if g.rng.chance(50) {
                let k = g.expr(b, &Type::Integer, 2);
                let c = call(b, "firsts", Type::Tuple(vec![vf(), Type::Integer]), vf(), vec![v, k]);
                let s = b.prim(Prim::Shape, vec![c]);
                call(b, "to_float", Type::Integer, Type::Float, vec![s])
            } else {
                let c = call(b, "nested", vf(), Type::vec(vf()), vec![v]);
                let s = b.prim(Prim::Shape, vec![c]);
                let n = b.prim(Prim::Size, vec![s]);
                call(b, "to_float", Type::Integer, Type::Float, vec![n])
            }
        },
        "inline-marked" => |g, b| {
            let x = g.expr(b, &Type::Float, 2);
            let c = call(b, "sq", Type::Float, Type::Float, vec![x]);
            b.prim(Prim::Inline, vec![c])
        },
        "inline-small" => |g, b| {
            let (p, q) = (g.expr(b, &Type::Float, 2), g.expr(b, &Type::Float, 2));
            let t = call(b, "twice", ff(), Type::Float, vec![p, q]);
            let z = g.expr(b, &Type::Float, 1);
            let nz = call(b, "noisy", Type::Float, Type::Float, vec![z]);
            call(b, "add", ff(), Type::Float, vec![t, nz])
        },
        _ => return None,
    })
}

/// Runs both programs on a few random arguments; a failure message if
/// they differ where the original succeeds. Counts original successes.
fn compare(before: &Def, after: &Def, helpers: &[&Def], rng: &mut Rng, ok: &mut usize) -> Option<String> {
    let name = before.name.clone();
    for _ in 0..3 {
        let arg = random_args(rng);
        let mut defs_b: Vec<&Def> = vec![before];
        defs_b.extend(helpers);
        let mut defs_a: Vec<&Def> = vec![after];
        defs_a.extend(helpers);
        let (rb, ob) = run(&defs_b, &name, arg.clone());
        let (ra, oa) = run(&defs_a, &name, arg.clone());
        let Ok(vb) = rb else { continue };
        match ra {
            Ok(va) if same_value(&vb, &va) && ob == oa => *ok += 1,
            Ok(va) => return Some(format!("on {arg}: {vb} printing {ob:?} became {va} printing {oa:?}")),
            Err(e) => return Some(format!("on {arg}: {vb} became the error {e}")),
        }
    }
    None
}

fn check_rule(name: &str, template: Template, helpers: &[&Def], globals: &Globals) -> Result<usize, String> {
    let r = Rule::Core(core_rule(name).expect("rule"));
    let strategy = normalize_with_fuel(rule(r), 40);
    let mut fired = 0;
    let mut ok = 0;
    for seed in 0..400u64 {
        if ok >= 60 {
            break;
        }
        let mut rng = Rng::new(seed * 7919 + name.len() as u64 * 104729 + name.bytes().map(u64::from).sum::<u64>());
        let mut body = Body::new();
        let mut fresh = 0;
        let mut b = Builder::new(&mut body, &mut fresh);
        let root = {
            let mut g = G::new(&mut rng);
            template(&mut g, &mut b)
        };
        let before = test_def(b.body, root);
        let options = Options { trace: true, ..Options::default() };
        let mut rw = Rewriter::with_options(globals, options);
        let out = rw.apply(&strategy, &mut b, root).expect("normalize succeeds");
        if let Some(w) = rw.warnings().first() {
            return Err(format!("warning: {w}\n{}", ksc_ir::print::print_expr(b.body, root)));
        }
        if !rw.trace().iter().any(|f| f.rule == name) {
            continue;
        }
        fired += 1;
        let after = test_def(b.body, out);
        if let Some(problem) = compare(&before, &after, helpers, &mut rng, &mut ok) {
            return Err(format!(
                "rule {name} changed the meaning of\n{}\ninto\n{}\n{problem}",
                ksc_ir::print::print_expr(&before.body, before.root),
                ksc_ir::print::print_expr(&after.body, after.root)
            ));
        }
    }
    if fired < 20 || ok < 20 {
        return Err(format!("rule {name} fired on only {fired} instances, {ok} comparisons where the original ran"));
    }
    Ok(ok)
}

#[test]
fn every_core_rule_preserves_evaluation() {
    let a = checked(HELPERS);
    let helpers: Vec<&Def> = a.defs();
    let map = DefMap::new(helpers.iter().copied());
    let globals = Globals::new(&map);
    let mut failures = Vec::new();
    for r in CORE_RULES {
        let Some(t) = template(r.name) else {
            failures.push(format!("rule {} has no instance generator in this test", r.name));
            continue;
        };
        match check_rule(r.name, t, &helpers, &globals) {
            Ok(n) => eprintln!("{:20} {n} comparisons", r.name),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rule_names_are_unique_and_stated() {
    let mut names: Vec<&str> = CORE_RULES.iter().map(|r| r.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), CORE_RULES.len());
    assert!(CORE_RULES.iter().all(|r| !r.statement.is_empty() && !r.statement.contains('\n')));
}

/// `Value` arguments for hand-written checks.
pub fn floats(xs: &[f64]) -> Value {
    Value::tuple(xs.iter().map(|&x| Value::Float(x)).collect())
}
