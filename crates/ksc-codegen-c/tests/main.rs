//! The tests of `ksc-codegen-c`, in one test binary (`cargo test -p
//! ksc-codegen-c --test codegen`; one module per source file, e.g.
//! `parallel::`). They were unit tests; here, the lib has `test = false`,
//! so that `cargo test` does not compile it a second time as a test harness.

mod driver;
mod parallel;
mod reassoc;
mod split;
