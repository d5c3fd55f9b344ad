//! How lowering decides what to inline (`lower.rs`).

use ksc_lower::lower::{expanded_sizes, in_cycles, INLINE_EXPANDED};

#[test]
fn expanded_sizes_count_what_is_inlined_in_turn() {
    // f_k calls f_(k-1) twice (10 nodes each): 10, 30, 70, ... capped
    // just over the largest size that decides.
    let doubling: Vec<Vec<usize>> = (0..12).map(|k| if k == 0 { vec![] } else { vec![k - 1, k - 1] }).collect();
    let sizes = expanded_sizes(&[10; 12], &doubling, &|_| true);
    assert_eq!(sizes[..4], [10, 30, 70, 150]);
    assert_eq!(sizes[11], INLINE_EXPANDED + 1);
    // A call that is not inlined (recursive, external) adds nothing.
    assert_eq!(expanded_sizes(&[10; 12], &doubling, &|k| k != 2)[..4], [10, 30, 10, 10]);
    // A chain of 100 000 calls, walked without recursion.
    let chain: Vec<Vec<usize>> = (0..100_000).map(|i| if i == 0 { vec![] } else { vec![i - 1] }).collect();
    let sizes = expanded_sizes(&vec![1; 100_000], &chain, &|_| true);
    assert_eq!((sizes[9], sizes[99_999]), (10, INLINE_EXPANDED + 1));
}

#[test]
fn nodes_on_cycles_of_calls() {
    // 0 -> 1 -> 2 -> 1 (a cycle), 2 -> 3, 4 -> 4, 5 -> 0.
    let g = vec![vec![1], vec![2], vec![1, 3], vec![], vec![4], vec![0]];
    assert_eq!(in_cycles(&g), vec![false, true, true, false, true, false]);
    // A chain of 100 000 calls: none is recursive (the search per node
    // it replaced took 5 * 10^9 steps here).
    let chain: Vec<Vec<usize>> = (0..100_000).map(|i| if i == 0 { vec![] } else { vec![i - 1] }).collect();
    assert!(in_cycles(&chain).iter().all(|r| !r));
    let ring: Vec<Vec<usize>> = (0..1000).map(|i| vec![(i + 1) % 1000]).collect();
    assert!(in_cycles(&ring).iter().all(|&r| r));
}
