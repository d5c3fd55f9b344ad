//! The status line's words for the database's queries.

use ksc_db::progress::describe;

#[test]
fn queries_in_words() {
    assert_eq!(describe("loop_unit([rev [f Float]])").as_deref(), Some("lowering [rev [f Float]]"));
    assert_eq!(describe("optimised([rev [g (Tuple (Vec Float) Integer)]])").as_deref(), Some("optimising [rev [g]]"));
    assert_eq!(describe("derived_one([fwd g])").as_deref(), Some("deriving [fwd g]"));
    assert_eq!(describe("is_defined(f)"), None);
    assert_eq!(describe("analysis"), None);
}
