//! The integration tests of `ksc-syntax`, in one test binary (`cargo test -p ksc-syntax --test syntax`;
//! one module per theme, e.g. `cargo test -p ksc-syntax --test syntax corpus::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'.

mod common;
mod corpus;
mod parse;
mod properties;
