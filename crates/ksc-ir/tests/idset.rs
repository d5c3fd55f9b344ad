//! Persistent sets of variables (`idset.rs`).

use ksc_ir::idset::IdSet;
use std::collections::BTreeSet;

/// A small deterministic generator (no dependency for a test).
fn lcg(seed: &mut u64) -> u32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 33) as u32
}

/// Unions, intersections and removals agree with a BTreeSet on random elements, near
/// and far apart, and keep a canonical shape (equal sets list equally).
#[test]
fn agrees_with_a_btreeset() {
    let mut seed = 7;
    for round in 0..200 {
        let spread = [70, 300, 5000, u32::MAX][round % 4];
        let mut sets: Vec<(IdSet, BTreeSet<u32>)> = vec![(IdSet::new(), BTreeSet::new())];
        for _ in 0..60 {
            let x = lcg(&mut seed) % spread;
            let i = lcg(&mut seed) as usize % sets.len();
            let j = lcg(&mut seed) as usize % sets.len();
            let (s, r) = match lcg(&mut seed) % 4 {
                0 => {
                    let mut r = sets[i].1.clone();
                    r.insert(x);
                    (sets[i].0.union(&IdSet::singleton(x)), r)
                }
                1 => {
                    let mut r = sets[i].1.clone();
                    let y = *r.iter().next().unwrap_or(&x);
                    r.remove(&y);
                    (sets[i].0.without(y), r)
                }
                2 => {
                    let r: BTreeSet<u32> = sets[i].1.union(&sets[j].1).copied().collect();
                    (sets[i].0.union(&sets[j].0), r)
                }
                _ => {
                    let r: BTreeSet<u32> = sets[i].1.intersection(&sets[j].1).copied().collect();
                    (sets[i].0.intersection(&sets[j].0), r)
                }
            };
            assert_eq!(s.to_vec(), r.iter().copied().collect::<Vec<_>>());
            assert_eq!(s.len(), r.len());
            for y in r.iter().take(5) {
                assert!(s.contains(*y));
            }
            assert!(r.contains(&x) == s.contains(x));
            sets.push((s, r));
        }
    }
}

/// Removing an absent element or adding a present one shares the set.
#[test]
fn unchanged_sets_are_shared() {
    let s = (0..200).fold(IdSet::new(), |s, x| s.union(&IdSet::singleton(x * 3)));
    assert!(s.without(1).same(&s));
    assert!(s.union(&IdSet::singleton(3)).same(&s));
    let t = s.without(3);
    assert!(!t.same(&s) && !t.contains(3) && t.len() == 199);
    assert!(s.union(&t).same(&s));
}
