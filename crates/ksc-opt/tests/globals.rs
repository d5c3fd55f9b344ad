//! `Globals`: the facts (effects, recursion) of a program's functions,
//! and the linear work of finding them. (Unit tests of `globals.rs`
//! before; the crate's lib has `test = false`, see Cargo.toml.)

use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Param, Prim, Type};
use ksc_opt::{Defs, Facts, Globals};

struct Listed(Vec<Def>);

impl Defs for Listed {
    fn def(&self, name: &FunName) -> Option<&Def> {
        self.0.iter().find(|d| d.name == *name)
    }
}

fn name(i: usize) -> FunName {
    FunName::typed(format!("f{i}"), Type::Float)
}

/// `f i` calls each of `calls`, and prints if `prints`.
fn def(i: usize, calls: &[usize], prints: bool) -> Def {
    let mut body = Body::new();
    let mut parts: Vec<ExprId> = calls
        .iter()
        .map(|&c| {
            let x = body.alloc_typed(Expr::Var("x".into()), Type::Float);
            body.alloc_typed(Expr::Call(Callee::Fun(name(c)), x), Type::Float)
        })
        .collect();
    if prints {
        let x = body.alloc_typed(Expr::Var("x".into()), Type::Float);
        parts.push(body.alloc_typed(Expr::Call(Callee::Prim(Prim::Print), x), Type::Integer));
    }
    let root = body.alloc(Expr::Tuple(parts));
    Def { name: name(i), params: vec![Param { name: "x".into(), ty: Type::Float }], ret_ty: Type::Float, body, root }
}

#[test]
fn facts_of_cycles_and_what_reaches_them() {
    // 0 -> 1 -> 2 -> 1 (a cycle), 2 -> 3 (prints), 4 -> 4, 5 alone.
    let defs = Listed(vec![
        def(0, &[1], false),
        def(1, &[2], false),
        def(2, &[1, 3], false),
        def(3, &[], true),
        def(4, &[4], false),
        def(5, &[], false),
    ]);
    let g = Globals::new(&defs);
    let f = |i| g.facts(&name(i));
    assert_eq!(f(0), Facts { effect: true, recursive: false });
    assert_eq!(f(1), Facts { effect: true, recursive: true });
    assert_eq!(f(2), Facts { effect: true, recursive: true });
    assert_eq!(f(3), Facts { effect: true, recursive: false });
    assert_eq!(f(4), Facts { effect: false, recursive: true });
    assert_eq!(f(5), Facts { effect: false, recursive: false });
    // Asked in the other order, from scratch.
    let g = Globals::new(&defs);
    for i in (0..6).rev() {
        g.facts(&name(i));
    }
    assert_eq!(g.facts(&name(0)), Facts { effect: true, recursive: false });
    assert_eq!(g.facts(&name(2)), Facts { effect: true, recursive: true });
}

/// The facts of every function of a chain of n calls cost O(n) body
/// scans, asked in any order (a search per function asked for was
/// O(n^2): about n^2 / 2 scans here).
#[test]
fn facts_of_a_chain_cost_linear_work() {
    let n = 3000;
    let defs = Listed((0..n).map(|i| if i == 0 { def(0, &[], true) } else { def(i, &[i - 1], false) }).collect());
    let g = Globals::new(&defs);
    for i in 0..n {
        assert!(g.facts(&name(i)).effect);
    }
    let g2 = Globals::new(&defs);
    for i in (0..n).rev() {
        assert!(!g2.facts(&name(i)).recursive);
    }
    assert!(g.scans_so_far() <= 2 * n, "{} scans", g.scans_so_far());
    assert!(g2.scans_so_far() <= 2 * n, "{} scans", g2.scans_so_far());
}
