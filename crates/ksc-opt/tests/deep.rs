//! Bodies nested thousands deep are rewritten without overflowing the
//! stack: every pass runs on a thread with a deliberately small stack (a
//! recursive walk over such a body would need far more), and the result is
//! evaluated against the original (on a big stack: the reference
//! interpreter is recursive).

use crate::common;

use common::{run, same_value};
use ksc_eval::Value;
use ksc_ir::builder::Builder;
use ksc_ir::{Body, Def, Expr, ExprId, FunName, Param, Type};
use ksc_opt::schedule::{core_cleanup, push_apply, simplify_lm, user_rules_pass};
use ksc_opt::strategy::{bottom_up, top_down, try_};
use ksc_opt::{anf, cse, optimise_def, DefMap, Globals, Options, Rewriter, RuleSet, Schedules, Strategy};

const DEPTH: usize = 3000;
const SMALL_STACK: usize = 512 * 1024;

fn ff() -> Type {
    Type::Tuple(vec![Type::Float, Type::Float])
}

fn add(b: &mut Builder, x: ExprId, y: ExprId) -> ExprId {
    b.call(FunName::typed("add", ff()), vec![x, y], Type::Float)
}

fn def(body: Body, root: ExprId) -> Def {
    Def {
        name: FunName::typed("deep", Type::Float),
        params: vec![Param { name: "x".into(), ty: Type::Float }],
        ret_ty: Type::Float,
        body,
        root,
    }
}

/// `let a0 = x in let a1 = a0 + 1 in .. in a(N-1) + a(N-2)`.
fn let_chain() -> Def {
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let x = b.var("x", Type::Float);
    let mut rhs = vec![x];
    for k in 1..DEPTH {
        let prev = b.var(&format!("a{}", k - 1), Type::Float);
        let one = b.float(1.0);
        rhs.push(add(&mut b, prev, one));
    }
    let (p, q) = (b.var(&format!("a{}", DEPTH - 1), Type::Float), b.var(&format!("a{}", DEPTH - 2), Type::Float));
    let mut e = add(&mut b, p, q);
    for k in (0..DEPTH).rev() {
        e = b.let_(&format!("a{k}"), rhs[k], e);
    }
    def(body, e)
}

/// `(add (add (.. (add x 1.0) ..) 1.0) (mul 0.0 ..))`: nested calls and ifs.
fn nested_calls() -> Def {
    let mut body = Body::new();
    let mut fresh = 0;
    let mut b = Builder::new(&mut body, &mut fresh);
    let mut e = b.var("x", Type::Float);
    for k in 0..DEPTH {
        let one = b.float(1.0);
        e = add(&mut b, e, one);
        if k % 3 == 0 {
            // (if true e e') with e' alpha-equal: if-true fires.
            let t = b.body.alloc_typed(Expr::Lit(ksc_ir::Lit::Bool(true)), Type::Bool);
            let zero = b.float(0.0);
            e = b.body.alloc_typed(Expr::If(t, e, zero), Type::Float);
        }
    }
    def(body, e)
}

/// Runs `f` on a thread with a small stack.
fn small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new().stack_size(SMALL_STACK).spawn_scoped(s, f).unwrap().join().unwrap()
    })
}

/// Evaluates `deep` of both on a big stack and compares.
fn same_result(before: &Def, after: &Def) {
    let (b, a) = (before.clone(), after.clone());
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            let arg = Value::Float(0.5);
            let (vb, _) = run(&[&b], &b.name, arg.clone());
            let (va, _) = run(&[&a], &a.name, arg);
            let (vb, va) = (vb.expect("original runs"), va.expect("rewritten runs"));
            assert!(same_value(&vb, &va), "{vb} became {va}");
        })
        .unwrap()
        .join()
        .unwrap();
}

fn with_strategy(d: &Def, s: &Strategy) -> Def {
    let mut d = d.clone();
    small_stack(|| {
        let no_defs: Vec<Def> = Vec::new();
        let map = DefMap::new(no_defs.iter());
        let globals = Globals::new(&map);
        let mut fresh = 0;
        let mut b = Builder::new(&mut d.body, &mut fresh);
        let mut rw = Rewriter::new(&globals);
        let root = rw.apply(s, &mut b, d.root).unwrap_or(d.root);
        assert!(rw.warnings().is_empty(), "{:?}", rw.warnings());
        d.root = root;
        d
    })
}

#[test]
fn a_deep_let_chain_is_simplified_and_optimised() {
    let d = let_chain();
    let cleaned = with_strategy(&d, &core_cleanup());
    same_result(&d, &cleaned);
    // Every let but the two shared ones was inlined.
    let lets =
        cleaned.body.exprs.iter().filter(|(id, e)| matches!(e, Expr::Let(..)) && reachable(&cleaned, *id)).count();
    assert_eq!(lets, 1);
    for s in
        [simplify_lm(), push_apply(), top_down(ksc_opt::strategy::fail()), bottom_up(try_(ksc_opt::strategy::id()))]
    {
        let out = with_strategy(&d, &s);
        same_result(&d, &out);
    }
    let optimised = small_stack(|| {
        let mut d = d.clone();
        let no_defs: Vec<Def> = Vec::new();
        let map = DefMap::new(no_defs.iter());
        let r = optimise_def(&mut d, &Schedules::builtin(), &Globals::new(&map), &Options::default());
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        d
    });
    same_result(&d, &optimised);
}

#[test]
fn deeply_nested_calls_go_through_anf_cse_and_the_rules() {
    let d = nested_calls();
    let normal = small_stack(|| {
        let mut d = d.clone();
        let globals = Globals::unknown();
        let mut fresh = 0;
        let mut b = Builder::new(&mut d.body, &mut fresh);
        let params = vec!["x".to_string()];
        let r = anf(&mut b, d.root, &params);
        let r = cse(&mut b, &globals, r, &params);
        let r = ksc_opt::apply(&core_cleanup(), &mut b, r).unwrap();
        let r = ksc_opt::apply(&user_rules_pass(&RuleSet::default()), &mut b, r).unwrap();
        d.root = r;
        d
    });
    same_result(&d, &normal);
    // The ifs are gone.
    assert!(!normal.body.exprs.iter().any(|(id, e)| matches!(e, Expr::If(..)) && reachable(&normal, id)));
}

fn reachable(d: &Def, target: ExprId) -> bool {
    let mut stack = vec![d.root];
    while let Some(e) = stack.pop() {
        if e == target {
            return true;
        }
        stack.extend(ksc_ir::term::children(&d.body.exprs[e]));
    }
    false
}
