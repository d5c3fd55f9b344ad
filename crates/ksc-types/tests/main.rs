//! The tests of `ksc-types`, in one test binary (`cargo test -p ksc-types
//! --test types`; one module per file, e.g. `examples_check::`): one binary
//! links once. `prelude` and `diagnostic` were unit tests, here because the
//! lib has `test = false`, so that `cargo test` does not compile it a
//! second time as a test harness.

mod diagnostic;
mod examples_check;
mod prelude;
