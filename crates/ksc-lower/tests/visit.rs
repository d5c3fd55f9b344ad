//! The scope check (`visit.rs`).

use ksc_lower::parse::parse_module;
use ksc_lower::visit::scope_error;

/// The scope check the optimiser runs after every pass in debug builds
/// finds a read of a loop's variable after the loop. A test in Rust, not a
/// file test: the file tests run this check after their pass and must
/// pass it, so they cannot show it failing.
#[test]
fn the_scope_check_finds_a_read_outside_its_loop() {
    let text = "fn f (%0:a: (Vec Float), %1:n: Integer) -> Float {\n  mut %2:s = 0.0\n  \
                for %3:i < %1 {\n    %4 = load %0[%3]\n    %5 = fadd %2, %4\n    %2 := %5\n  }\n  \
                %6 = %2\n  return %6\n}\n";
    let in_scope = parse_module(text).unwrap();
    assert_eq!(scope_error(&in_scope.funcs[0]), None);
    let outside = parse_module(&text.replace("%6 = %2", "%6 = %4")).unwrap();
    assert_eq!(scope_error(&outside.funcs[0]), Some("%4 read out of its scope".to_string()));
}
