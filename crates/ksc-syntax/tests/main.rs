//! The integration tests of `ksc-syntax`, in one test binary (`cargo test -p ksc-syntax --test syntax`;
//! one module per theme, e.g. `cargo test -p ksc-syntax --test syntax corpus::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'. The crate's unit tests are
//! modules here too (`parse_internals`, `sexpr`): the lib has `test = false`,
//! so that `cargo test` does not compile it a second time as a test harness.

mod common;
mod corpus;
mod parse;
mod parse_internals;
mod properties;
mod sexpr;
