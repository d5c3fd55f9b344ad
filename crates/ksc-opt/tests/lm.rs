//! The linear-map schedules: random maps simplified by `simplify_lm` keep
//! their dense matrix; applications pushed by `push_apply` keep their value
//! and leave no linear map behind; duplicating laws apply only to atomic
//! operands, and the table of duplicated operands covers every duplicating
//! law.

use crate::common;

use common::short;
use ksc_eval::{Interpreter, Value};
use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Prim, Type};
use ksc_linmap::spec::{MapSpec, Numbers, Shape};
use ksc_linmap::{law, LAWS};
use ksc_opt::rule::DUPLICATED_OPERAND;
use ksc_opt::schedule::{push_apply, simplify_lm};
use ksc_opt::strategy::{rule, top_down};
use ksc_opt::{apply, Rule, Strategy};
use quickcheck::Gen;

fn def_of(name: &str, body: &Body, root: ExprId) -> Def {
    let (body, root) = term::compact(body, root);
    Def { name: FunName::typed(name, Type::unit()), params: Vec::new(), ret_ty: body.ty(root).clone(), body, root }
}

fn eval<'d>(defs: &'d [Def], name: &str) -> (Interpreter<'d>, Value) {
    let mut interp = Interpreter::new(defs.iter());
    let v = interp.call(&FunName::typed(name, Type::unit()), Value::unit(), &mut std::io::sink()).expect("runs");
    (interp, v)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (a.abs() + b.abs()).max(1.0)
}

/// Does any linear-map primitive remain in the tree?
fn has_linear_maps(body: &Body, root: ExprId) -> bool {
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        if let Expr::Call(Callee::Prim(p), _) = &body.exprs[e] {
            if p.is_linear_map() {
                return true;
            }
        }
        stack.extend(term::children(&body.exprs[e]));
    }
    false
}

fn tree_size(body: &Body, root: ExprId) -> usize {
    let mut n = 0;
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        n += 1;
        stack.extend(term::children(&body.exprs[e]));
    }
    n
}

#[test]
fn every_duplicating_law_has_its_duplicated_operand_listed() {
    for l in LAWS.iter().filter(|l| l.duplicates) {
        assert!(DUPLICATED_OPERAND.iter().any(|(n, _)| *n == l.name), "law {} is not in DUPLICATED_OPERAND", l.name);
    }
    for (n, _) in DUPLICATED_OPERAND {
        assert!(law(n).is_some_and(|l| l.duplicates), "{n} is not a duplicating law");
    }
}

#[test]
fn simplify_lm_keeps_the_matrix_of_random_maps() {
    let mut simplified = 0;
    let mut smaller = 0;
    for seed in 0..300u64 {
        let mut g = Gen::from_size_and_seed(1 + (seed as usize / 50).min(2), seed * 2654435761);
        let (s, t) = (Shape::arbitrary(&mut g, 2), Shape::arbitrary(&mut g, 2));
        let m = MapSpec::arbitrary(&mut g, &s, &t, 3);
        if !m.well_formed() {
            continue;
        }
        let mut body = Body::new();
        let mut fresh = 0;
        let mut b = Builder::new(&mut body, &mut fresh);
        let before = m.build(&mut b);
        let text = short(b.body, before);
        let after = apply(&simplify_lm(), &mut b, before).expect("normalize succeeds");
        assert_eq!(b.ty(before), b.ty(after));
        if after != before {
            simplified += 1;
        }
        if tree_size(&body, after) < tree_size(&body, before) {
            smaller += 1;
        }
        let defs = [def_of("before", &body, before), def_of("after", &body, after)];
        let (mut interp, vb) = eval(&defs, "before");
        let va =
            interp.call(&FunName::typed("after", Type::unit()), Value::unit(), &mut std::io::sink()).expect("runs");
        let (db, da) = (interp.dense_matrix(&vb).expect("dense"), interp.dense_matrix(&va).expect("dense"));
        assert_eq!((db.rows, db.cols), (da.rows, da.cols), "{text}");
        for (x, y) in db.data.iter().zip(&da.data) {
            assert!(close(*x, *y), "{text}\nbecame\n{}\n{:?} vs {:?}", short(&body, after), db.data, da.data);
        }
    }
    assert!(simplified > 100 && smaller > 100, "simplified {simplified}, smaller {smaller}");
}

#[test]
fn push_apply_leaves_no_linear_map_and_keeps_the_value() {
    let mut pushed = 0;
    for seed in 0..300u64 {
        let mut g = Gen::from_size_and_seed(1 + (seed as usize / 50).min(2), seed * 40503 + 7);
        let (s, t) = (Shape::arbitrary(&mut g, 2), Shape::arbitrary(&mut g, 2));
        let m = MapSpec::arbitrary(&mut g, &s, &t, 3);
        if !m.well_formed() {
            continue;
        }
        let reverse = seed % 2 == 1;
        let mut body = Body::new();
        let mut fresh = 0;
        let mut b = Builder::new(&mut body, &mut fresh);
        let map = m.build(&mut b);
        let mut numbers = Numbers::arbitrary(&mut g);
        let before = if reverse {
            let r = m.target().tangent_value(&mut b, &mut numbers);
            b.prim(Prim::LmApplyR, vec![r, map])
        } else {
            let x = m.source().tangent_value(&mut b, &mut numbers);
            b.prim(Prim::LmApply, vec![map, x])
        };
        let text = short(b.body, before);
        let after = apply(&push_apply(), &mut b, before).expect("normalize succeeds");
        if has_linear_maps(&body, after) {
            // Only maps this crate cannot apply without their definition remain.
            continue;
        }
        pushed += 1;
        let defs = [def_of("before", &body, before), def_of("after", &body, after)];
        let (mut interp, vb) = eval(&defs, "before");
        let va =
            interp.call(&FunName::typed("after", Type::unit()), Value::unit(), &mut std::io::sink()).expect("runs");
        let (mut fb, mut fa) = (Vec::new(), Vec::new());
        ksc_eval::flatten_tangent(&vb, &mut fb);
        ksc_eval::flatten_tangent(&va, &mut fa);
        assert_eq!(fb.len(), fa.len(), "{text}");
        for (x, y) in fb.iter().zip(&fa) {
            assert!(close(*x, *y), "{text}\nbecame\n{}\n{fb:?} vs {fa:?}", short(&body, after));
        }
    }
    assert!(pushed > 200, "only {pushed} applications became LM-free");
}

fn law_strategy(name: &str) -> Strategy {
    top_down(rule(Rule::Law(law(name).expect("law"))))
}

#[test]
fn a_duplicating_law_applies_only_to_an_atomic_operand() {
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let vf = Type::Tuple(vec![Type::Float, Type::Float]);
    let lm = |s: Type, t: Type| Type::lm(s, t);
    // m ∘ (n1 ⋈ n2) with m = lmScale 0.0 (mul x x), not atomic.
    let build = |b: &mut Builder, atomic: bool| {
        let w = b.float(0.0);
        let m = if atomic {
            b.var("m", lm(Type::Float, Type::Float))
        } else {
            let x = b.var("x", Type::Float);
            let x2 = b.var("x", Type::Float);
            let k = b.mul_float(x, x2);
            b.prim(Prim::LmScale, vec![w, k])
        };
        let n1 = b.var("n1", lm(Type::Float, Type::Float));
        let n2 = b.var("n2", lm(Type::Float, Type::Float));
        let h = b.prim(Prim::LmHCat, vec![n1, n2]);
        b.prim(Prim::LmCompose, vec![m, h])
    };
    let e = build(&mut b, false);
    assert_eq!(apply(&law_strategy("compose-hcat-right"), &mut b, e), None);
    let e = build(&mut b, true);
    let out = apply(&law_strategy("compose-hcat-right"), &mut b, e).expect("applies to an atom");
    assert_eq!(short(&body, out), "(lmHCat (lmCompose m n1) (lmCompose m n2))");
    assert_eq!(body.ty(out), &lm(vf, Type::Float));
}

#[test]
fn a_jacobian_simplifies_to_its_essentials() {
    // [D f] of f x = 2 * x at x, as AD would build it: compositions with
    // identities, additions of zeros.
    let text = "(def jac (LM Float Float) (x : Float)
                  (let (g (lmCompose (lmOne 0.0) (lmScale 0.0 2.0)))
                    (lmAdd (lmCompose g (lmOne 0.0)) (lmZero 0.0 0.0))))";
    let a = common::checked(text);
    let mut d = common::user_def(&a, "jac");
    let mut fresh = 0;
    let mut b = Builder::new(&mut d.body, &mut fresh);
    let out = apply(&simplify_lm(), &mut b, d.root).unwrap();
    assert_eq!(short(b.body, out), "(lmScale 0.0 2.0)");
    // Applied to dx: plain arithmetic.
    let dx = b.var("x", Type::Float);
    let applied = b.prim(Prim::LmApply, vec![out, dx]);
    let out = apply(&push_apply(), &mut b, applied).unwrap();
    assert_eq!(short(b.body, out), "(ts_scale 2.0 x)");
}

#[test]
fn the_trace_records_rules_in_order_with_before_and_after() {
    let text =
        "(def jac (LM Float Float) (x : Float) (lmCompose (lmOne 0.0) (lmAdd (lmScale 0.0 x) (lmZero 0.0 0.0))))";
    let a = common::checked(text);
    let mut d = common::user_def(&a, "jac");
    let mut fresh = 0;
    let mut b = Builder::new(&mut d.body, &mut fresh);
    let globals = ksc_opt::Globals::unknown();
    let mut rw = ksc_opt::Rewriter::with_options(&globals, ksc_opt::Options { trace: true, ..Default::default() });
    let out = rw.apply(&simplify_lm(), &mut b, d.root).unwrap();
    assert_eq!(short(b.body, out), "(lmScale 0.0 x)");
    let fired: Vec<(&str, &str, &str)> =
        rw.trace().iter().map(|f| (f.rule.as_str(), f.before.as_str(), f.after.as_str())).collect();
    assert_eq!(
        fired,
        vec![
            (
                "compose-one-left",
                "(lmCompose (lmOne 0.0) (lmAdd (lmScale 0.0 x) (lmZero 0.0 0.0)))",
                "(lmAdd (lmScale 0.0 x) (lmZero 0.0 0.0))"
            ),
            ("add-zero-right", "(lmAdd (lmScale 0.0 x) (lmZero 0.0 0.0))", "(lmScale 0.0 x)"),
        ]
    );
    assert!(rw.trace().iter().all(|f| f.kind == ksc_opt::RuleKind::Law));
}
