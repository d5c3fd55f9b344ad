//! The integration tests of `ksc-ad`, in one test binary (`cargo test -p ksc-ad --test ad`;
//! one module per theme, e.g. `cargo test -p ksc-ad --test ad cost::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'. The crate's unit tests are
//! modules here too (`guard`, `hoist`, `rscan`): the lib has `test = false`,
//! so that `cargo test` does not compile it a second time as a test harness.

mod common;
mod cost;
#[path = "cost/families.rs"]
mod families;
mod gradients;
mod guard;
mod hoist;
mod robust;
mod rscan;
