//! The integration tests of `ksc-cl`, in one test binary (`cargo test -p ksc-cl --test cl`;
//! one module per theme, e.g. `cargo test -p ksc-cl --test cl random_terms::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'. The crate's unit test is a
//! module here too (`term`): the lib has `test = false`, so that `cargo
//! test` does not compile it a second time as a test harness.

mod random_terms;
mod robust;
mod round_trip;
mod term;
