//! The integration tests of `ksc-cl`, in one test binary (`cargo test -p ksc-cl --test cl`;
//! one module per theme, e.g. `cargo test -p ksc-cl --test cl random_terms::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'.

mod random_terms;
mod robust;
mod round_trip;
