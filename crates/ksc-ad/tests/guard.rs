//! Derivations run guarded: a panic in one is an error, not a crash.

use ksc_ad::{guard, panic_is_guarded, AdError};

/// A panic inside a derivation is an error value, and the thread knows
/// it is guarded while it runs (the binary's panic hook stays silent).
#[test]
fn a_guarded_panic_is_an_error() {
    assert!(!panic_is_guarded());
    let r: Result<(), AdError> = guard(|| {
        assert!(panic_is_guarded());
        panic!("ill-typed");
    });
    assert!(r.unwrap_err().message.contains("internal error (a ksc bug): ill-typed"));
    assert!(!panic_is_guarded());
}
