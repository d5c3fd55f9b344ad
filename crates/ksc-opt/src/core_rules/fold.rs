//! Constant folding: arithmetic and comparisons of literals as the
//! built-ins compute them (never folding what would fail or overflow at
//! run time), and `lt i n` for the index `i` of a loop of size `n`.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, FunName, Lit, Prim, Type};

use super::instances::{call, ff, ii, with_var, G};
use super::{call_parts, float_arith, float_lit, index_in_range, int_lit, CoreRule, Head, FOLD};
use crate::rule::Ctx;

pub(super) const FOLD_FLOAT: CoreRule = CoreRule {
    name: "fold-float",
    statement: "add/sub/mul/div/neg of Float literals (built-ins), ts_add/ts_scale of Float \
        literals ⇒ the literal, when finite",
    group: FOLD,
    head: Head::AnyCall,
    rewrite: fold_float,
    instance: fold_float_instance,
};

/// `add`/`sub`/`mul`/`div` of two Float literals (the built-ins) ⇒ the literal result, when finite.
fn fold_float(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let result = match (&c, &comps[..]) {
        (Callee::Fun(f), [a, b]) if ctx.globals.is_builtin(f) => {
            float_arith(f)?(float_lit(ctx, *a)?, float_lit(ctx, *b)?)
        }
        (Callee::Fun(f), [a])
            if f.base == "neg"
                && f.derivs.is_empty()
                && f.base_ty == Some(Type::Float)
                && ctx.globals.is_builtin(f) =>
        {
            -float_lit(ctx, *a)?
        }
        (Callee::Prim(Prim::TsAdd), [a, b]) => float_lit(ctx, *a)? + float_lit(ctx, *b)?,
        (Callee::Prim(Prim::TsScale), [a, b]) => float_lit(ctx, *a)? * float_lit(ctx, *b)?,
        _ => return None,
    };
    result.is_finite().then(|| ctx.b.float(result))
}

fn fold_float_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let (p, q) = (g.lit_float(b), g.lit_float(b));
    let op = *g.rng.pick(&["add", "sub", "mul", "div"]);
    let folded = call(b, op, ff(), Type::Float, vec![p, q]);
    let x = g.expr(b, &Type::Float, 2);
    call(b, "add", ff(), Type::Float, vec![folded, x])
}

pub(super) const FOLD_INTEGER: CoreRule = CoreRule {
    name: "fold-integer",
    statement: "add/sub/mul/div/neg of Integer literals (built-ins) ⇒ the literal, unless it \
        overflows or divides by zero",
    group: FOLD,
    head: Head::Fun,
    rewrite: fold_integer,
    instance: fold_integer_instance,
};

/// `add`/`sub`/`mul`/`div` of two Integer literals (the built-ins) ⇒ the literal result, unless it
/// overflows or divides by zero.
fn fold_integer(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Callee::Fun(f), comps, _) = call_parts(ctx, e)? else { return None };
    if !ctx.globals.is_builtin(&f) {
        return None;
    }
    let result = match &comps[..] {
        [a, b] => int_arith(&f)?(int_lit(ctx, *a)?, int_lit(ctx, *b)?)?,
        [a] if f.base == "neg" && f.derivs.is_empty() && f.base_ty == Some(Type::Integer) => {
            int_lit(ctx, *a)?.checked_neg()?
        }
        _ => return None,
    };
    Some(ctx.b.integer(result))
}

/// `add`/`sub`/`mul`/`div` of two Integers, checked (None: overflow or
/// division by zero, which must stay a run-time error).
fn int_arith(f: &FunName) -> Option<fn(i64, i64) -> Option<i64>> {
    let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
    if !f.derivs.is_empty() || f.base_ty.as_ref() != Some(&ii) {
        return None;
    }
    Some(match f.base.as_str() {
        "add" => i64::checked_add,
        "sub" => i64::checked_sub,
        "mul" => i64::checked_mul,
        // Truncating division, as the native prelude's.
        "div" => |a, b| if b == 0 { None } else { a.checked_div(b) },
        _ => return None,
    })
}

fn fold_integer_instance(g: &mut G, b: &mut Builder) -> ExprId {
    let big = [i64::MAX, i64::MIN, 3, -7, 0, 2];
    let p = b.integer(*g.rng.pick(&big));
    let q = b.integer(*g.rng.pick(&big));
    let op = *g.rng.pick(&["add", "sub", "mul", "div"]);
    let folded = call(b, op, ii(), Type::Integer, vec![p, q]);
    let x = g.expr(b, &Type::Integer, 1);
    call(b, "sub", ii(), Type::Integer, vec![folded, x])
}

pub(super) const FOLD_COMPARE: CoreRule = CoreRule {
    name: "fold-compare",
    statement: "lt/gt/lte/gte of number literals, eq/ne of Integer, Bool or String literals, \
        any of an Integer variable with itself ⇒ the Bool",
    group: FOLD,
    head: Head::AnyCall,
    rewrite: fold_compare,
    instance: fold_compare_instance,
};

/// `lt`/`gt`/`lte`/`gte` of two Float or Integer literals, and `eq`/`ne` of Integer, Bool or String
/// literals ⇒ the Bool.
/// Also a comparison of an Integer variable with itself (`lt n n ⇒ false`, `lte n n ⇒ true`, ...).
fn fold_compare(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let [a, b] = comps[..] else { return None };
    let (la, lb) = match (ctx.expr(a), ctx.expr(b)) {
        (Expr::Lit(x), Expr::Lit(y)) => (x.clone(), y.clone()),
        (Expr::Var(x), Expr::Var(y)) if x == y && ctx.ty(a) == Type::Integer => (Lit::Integer(0), Lit::Integer(0)),
        _ => return None,
    };
    let value = match &c {
        Callee::Prim(p @ (Prim::Eq | Prim::Ne)) => {
            let same = match (&la, &lb) {
                (Lit::Integer(_), Lit::Integer(_))
                | (Lit::Bool(_), Lit::Bool(_))
                | (Lit::String(_), Lit::String(_)) => la == lb,
                _ => return None,
            };
            same == (*p == Prim::Eq)
        }
        Callee::Fun(f) if f.derivs.is_empty() && ctx.globals.is_builtin(f) => {
            use std::cmp::Ordering::*;
            let o = match (&la, &lb) {
                (Lit::Integer(i), Lit::Integer(j)) => Some(i.cmp(j)),
                // None for a NaN: every comparison is false, as in the native prelude.
                (Lit::Float(x), Lit::Float(y)) => x.partial_cmp(y),
                _ => return None,
            };
            match f.base.as_str() {
                "lt" => o == Some(Less),
                "gt" => o == Some(Greater),
                "lte" => matches!(o, Some(Less | Equal)),
                "gte" => matches!(o, Some(Greater | Equal)),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(ctx.alloc(Expr::Lit(Lit::Bool(value)), Type::Bool))
}

fn fold_compare_instance(g: &mut G, b: &mut Builder) -> ExprId {
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
                    call(b, op, ii(), Type::Bool, vec![p, q])
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
}

pub(super) const LT_INDEX_SIZE: CoreRule = CoreRule {
    name: "lt-index-size",
    statement: "lt i n ⇒ true when i is the index of a build or sumbuild of size n",
    group: FOLD,
    head: Head::Fun,
    rewrite: lt_index_size,
    instance: lt_index_size_instance,
};

/// `lt i n ⇒ true` (built-in, Integers) when `i` is the index of a `build` or `sumbuild` of size
/// `n`.
fn lt_index_size(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let Callee::Fun(f) = &c else { return None };
    if f.base != "lt" || !f.derivs.is_empty() || !ctx.globals.is_builtin(f) {
        return None;
    }
    let [i, n] = comps[..] else { return None };
    if ctx.ty(i) != Type::Integer || !index_in_range(ctx, i, n) {
        return None;
    }
    Some(ctx.alloc(Expr::Lit(Lit::Bool(true)), Type::Bool))
}

fn lt_index_size_instance(g: &mut G, b: &mut Builder) -> ExprId {
    // build n (lam i (if (lt i n) t f)): always t.
    let n = g.size(b, 1);
    let n2 = term::deep_copy(b, n);
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
}
