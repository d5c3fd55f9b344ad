//! The loop-IR pipeline (`passes/mod.rs`).

use ksc_ir::Type;
use ksc_lower::ir::*;
use ksc_lower::passes::{names, PIPELINE};

fn func(vars: Vec<Type>, body: Block) -> Func {
    Func::for_tests(vars, body)
}

/// The command line validates `--skip-pass` against these: every pass
/// of the pipeline, each once, in the order they first run.
#[test]
fn names_are_the_pipelines_passes_each_once() {
    let names = names();
    assert_eq!(PIPELINE.len(), 23);
    assert_eq!(names.len(), 21, "{names:?}");
    assert_eq!(PIPELINE.iter().filter(|p| p.name() == "fold-alloc-dims").count(), 2);
    assert_eq!(PIPELINE.iter().filter(|p| p.name() == "cse").count(), 2);
    assert_eq!(names.first(), Some(&"share-guarded"));
    assert_eq!(names.last(), Some(&"place-arena-scopes"));
    for n in &names {
        assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{n}");
        assert!(PIPELINE.iter().any(|p| p.name() == *n));
    }
}

/// A function prints alone as in its module, but for its callees.
#[test]
fn a_function_prints_alone_as_in_its_module() {
    let call = Stmt::Let(VarId(2), Rhs::Call { func: FuncId(0), args: vec![Op::Var(VarId(0))], frame: None });
    let f = func(vec![Type::Float, Type::Integer, Type::Float], vec![call, Stmt::Return(Op::Var(VarId(2)))]);
    let m = Module { funcs: vec![f.clone()], ..Module::default() };
    assert_eq!(m.pretty_func(&f).replace("call f(", "call fn#0("), f.pretty());
    assert!(f.pretty().contains("%2 = call fn#0(%0)"), "{}", f.pretty());
}
