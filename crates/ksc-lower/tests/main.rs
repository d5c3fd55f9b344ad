//! The tests of `ksc-lower`, in one test binary (`cargo test -p ksc-lower
//! --test lower`; one module per file, e.g. `filetests::`): one binary
//! links once. `filetests` and `limits` test the crate as a whole; the
//! other modules were unit tests, here because the lib has `test = false`,
//! so that `cargo test` does not compile it a second time as a test harness.

mod filetests;
mod limits;
mod lower;
mod names;
mod parse;
mod passes;
mod unswitch;
mod visit;
