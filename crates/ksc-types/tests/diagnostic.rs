//! Edit distances and "did you mean" suggestions (`diagnostic.rs`).

use ksc_types::diagnostic::{edit_distance, similar_names};

#[test]
fn distances() {
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("add", "add"), 0);
    assert_eq!(edit_distance("lenght", "length"), 1);
}

#[test]
fn suggestions() {
    assert_eq!(similar_names("lenght", ["length", "height", "x"]), vec!["length"]);
    assert!(similar_names("x", ["alpha", "beta"]).is_empty());
    assert_eq!(similar_names("ad", ["add", "and", "abs"]), vec!["add", "and"]);
}
