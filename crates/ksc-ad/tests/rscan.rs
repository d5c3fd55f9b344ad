//! The patterns of the scans that run a recurrence of affine maps (`rscan.rs`).

use ksc_ad::testing::{closure, entries, float_leaves};
use ksc_ir::Type;

#[test]
fn closure_of_a_chain_is_upper_triangular() {
    // 0 <- 1 <- 2: row 0 reads 1, row 1 reads 2.
    let s = closure(&[0b010, 0b100, 0]);
    assert_eq!(s, vec![0b111, 0b110, 0b100]);
    assert_eq!(entries(&s), vec![(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]);
}

#[test]
fn closure_of_a_diagonal_is_itself() {
    assert_eq!(closure(&[0b01, 0b10]), vec![0b01, 0b10]);
    assert_eq!(closure(&[0, 0]), vec![0b01, 0b10]);
}

#[test]
fn only_floats_and_tuples_have_leaves() {
    let t = Type::Tuple(vec![Type::Float, Type::Tuple(vec![Type::Float, Type::unit()])]);
    assert_eq!(float_leaves(&t), Some(vec![vec![1], vec![2, 1]]));
    assert_eq!(float_leaves(&Type::Float), Some(vec![vec![]]));
    assert_eq!(float_leaves(&Type::vec(Type::Float)), None);
    assert_eq!(float_leaves(&Type::Tuple(vec![Type::Float, Type::Integer])), None);
}
