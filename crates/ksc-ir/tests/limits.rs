//! The limit on elements (`limits.rs`).

use ksc_ir::limits::{element_count, parse_max_elements, too_large_message};

#[test]
fn counts_saturate_and_messages_name_the_size() {
    assert_eq!(element_count(&[1 << 32, 1 << 32]), u64::MAX);
    assert_eq!(element_count(&[0, 1 << 40]), 0);
    assert_eq!(element_count(&[3, 4]), 12);
    assert_eq!(
        too_large_message("build", &[1 << 32, 1 << 32], 5),
        "`build` of size (4294967296,4294967296) is too large: more than 5 elements (the limit, KSC_MAX_ELEMENTS)"
    );
    assert_eq!(parse_max_elements("1_000").unwrap(), 1000);
    assert!(parse_max_elements("0").is_err());
    assert!(parse_max_elements("-3").is_err());
    assert!(parse_max_elements("lots").is_err());
}
