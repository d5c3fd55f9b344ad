//! The primitives: names, typing rules, and the lanes of `scan`.

use ksc_ir::prim::{lane_rounds, lane_step, REDUCE_BLOCK, SCAN_LANES, SCAN_LANE_SKEW};
use ksc_ir::{Prim, Type};

/// Every lane's steps run each once, in order, and lane l is
/// `SCAN_LANE_SKEW` steps behind lane l - 1.
#[test]
fn lanes_run_each_block_in_order() {
    for lanes in [1, 2, SCAN_LANES] {
        let mut next = vec![0i64; lanes as usize];
        for r in 0..lane_rounds(lanes) {
            for l in 0..lanes {
                if let Some(j) = lane_step(r, l) {
                    assert_eq!(next[l as usize], j, "lane {l} of {lanes}");
                    next[l as usize] += 1;
                }
            }
        }
        assert!(next.iter().all(|&n| n == REDUCE_BLOCK));
    }
    assert_eq!(lane_step(SCAN_LANE_SKEW, 1), Some(0));
    assert_eq!(lane_step(SCAN_LANE_SKEW - 1, 1), None);
}

#[test]
fn names_round_trip() {
    // Every fixed name (`Prim::names`, the table `from_name` reads) reads
    // as a primitive that prints as it, and names one primitive only.
    let names: Vec<&str> = Prim::names().collect();
    for n in &names {
        let p = Prim::from_name(n).unwrap_or_else(|| panic!("{n}"));
        assert_eq!(p.to_string(), *n);
    }
    assert_eq!(names.iter().collect::<std::collections::HashSet<_>>().len(), names.len(), "{names:?}");
    assert_eq!(Prim::from_name("get$2$3"), Some(Prim::Get { index: 2, arity: 3 }));
    assert_eq!(Prim::from_name("get$2$"), None);
    assert_eq!(Prim::from_name("get$02$3"), None);
    assert_eq!(Prim::from_name("add"), None);
}

#[test]
fn typing_rules() {
    let lam = |a: Type, b: Type| Type::lam(a, b);
    let t = Prim::Build.result_type(&[Type::Integer, lam(Type::Integer, Type::Float)]).unwrap();
    assert_eq!(t, Type::vec(Type::Float));
    let i2 = Type::index_type(2);
    let t = Prim::Build.result_type(&[i2.clone(), lam(i2.clone(), Type::Float)]).unwrap();
    assert_eq!(t, Type::tensor(2, Type::Float));
    assert_eq!(Prim::Index.result_type(&[i2.clone(), t.clone()]).unwrap(), Type::Float);
    assert!(Prim::Index.result_type(&[Type::Integer, t.clone()]).is_err());
    assert_eq!(Prim::Size.result_type(&[t]).unwrap(), i2);
    let fold = Prim::Fold.result_type(&[
        lam(Type::Tuple(vec![Type::Float, Type::Float]), Type::Float),
        Type::Float,
        Type::vec(Type::Float),
    ]);
    assert_eq!(fold.unwrap(), Type::Float);
    // reduce and scan: the operator's pair fixes T, any T.
    let t = Type::Tuple(vec![Type::Float, Type::vec(Type::Integer)]);
    let op = lam(Type::Tuple(vec![t.clone(), t.clone()]), t.clone());
    let args = [op.clone(), t.clone(), Type::vec(t.clone())];
    assert_eq!(Prim::Reduce.result_type(&args).unwrap(), t);
    assert_eq!(Prim::ScanInclusive.result_type(&args).unwrap(), Type::vec(t.clone()));
    assert!(Prim::Reduce.result_type(&[op.clone(), Type::Float, Type::vec(t.clone())]).is_err());
    assert!(Prim::Reduce.result_type(&[op.clone(), t.clone(), Type::vec(Type::Float)]).is_err());
    assert!(Prim::Reduce.result_type(&[op, t.clone(), t.clone()]).is_err());
    let half = lam(Type::Tuple(vec![t.clone(), Type::Float]), t.clone());
    assert!(Prim::ScanInclusive.result_type(&[half, t.clone(), Type::vec(t.clone())]).is_err());
    let wrong_result = lam(Type::Tuple(vec![t.clone(), t.clone()]), Type::Float);
    assert!(Prim::ScanInclusive.result_type(&[wrong_result, t.clone(), Type::vec(t)]).is_err());
    // A single tuple-typed argument stands for the argument list.
    let pair = Type::Tuple(vec![Type::Float, Type::Float]);
    assert_eq!(Prim::TsAdd.result_type(std::slice::from_ref(&pair)).unwrap(), Type::Float);
    assert_eq!(Prim::Get { index: 2, arity: 2 }.result_type(std::slice::from_ref(&pair)).unwrap(), Type::Float);
    assert!(Prim::Get { index: 3, arity: 2 }.result_type(&[pair]).is_err());
    assert!(Prim::Build.result_type(&[Type::Integer]).is_err());
}
