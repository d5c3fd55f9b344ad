//! The integration tests of `ksc-opt`, in one test binary (`cargo test -p ksc-opt --test opt`;
//! one module per theme, e.g. `cargo test -p ksc-opt --test opt anf_cse::`): one binary
//! links once, and its tests share the machine's cores instead of each
//! file's tests running after the others'.

mod ablation;
mod anf_cse;
mod capture;
mod combinators;
mod common;
mod confluence;
mod core_rules;
mod deep;
mod globals;
mod inline;
mod lm;
mod pipeline_names;
mod script;
mod side_conditions;
mod user_rules;
