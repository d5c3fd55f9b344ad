//! The command-line and end-to-end tests of `ksc`, in one test binary
//! (`cargo test --test it`; one module per theme, e.g. `cargo test --test it
//! native::`). One binary links once and runs every test on the same pool
//! of threads, so a long native test overlaps the short ones instead of
//! running after them; compiled C is shared through `common::cache_dir`.

mod ad_cli;
mod bad_input;
mod cl_cli;
mod common;
mod cost_native;
mod emit_ks;
mod externals;
mod inspect;
mod laws_cli;
mod monoids;
mod mutate;
mod native;
mod native_mutants;
mod passes;
mod python;
mod random_input;
mod reduce_tree;
mod round_trip;
mod sharing;
mod watch;
mod workspace;
