//! The integration tests of `ksc-db`, in one test binary (`cargo test -p ksc-db --test db`;
//! one module per theme, e.g. `cargo test -p ksc-db --test db fuzz_regressions::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'.

mod chain_work;
mod common;
mod fuzz_regressions;
mod incremental;
mod loop_passes;
mod native_units;
mod one_hot_gradient;
mod progress;
// Shared with the fuzz targets, which use the parts these tests do not.
#[allow(dead_code)]
#[path = "../../../fuzz/src/props.rs"]
mod props;
mod same_as_whole_file;
