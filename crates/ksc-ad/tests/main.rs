//! The integration tests of `ksc-ad`, in one test binary (`cargo test -p ksc-ad --test ad`;
//! one module per theme, e.g. `cargo test -p ksc-ad --test ad cost::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'.

mod common;
mod cost;
#[path = "cost/families.rs"]
mod families;
mod gradients;
mod robust;
