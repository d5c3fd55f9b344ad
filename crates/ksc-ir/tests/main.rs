//! The tests of `ksc-ir`, in one test binary (`cargo test -p ksc-ir --test
//! ir`; one module per source file, e.g. `prim::`). They were unit tests;
//! here, the lib has `test = false`, so that `cargo test` does not compile
//! it a second time as a test harness.

mod builtin;
mod core_ir;
mod idset;
mod limits;
mod names;
mod prim;
mod print;
mod types;
