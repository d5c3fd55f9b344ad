//! The linear-map algebra of ksc: the combinators are Core IR primitives
//! (`ksc_ir::Prim::Lm*`, typed there, evaluated in `ksc-eval`); this crate
//! owns their laws as one table of named rewrite rules ([`laws::LAWS`]),
//! shapes read off maps ([`witness`]), and the property checks of every law
//! against the dense semantics ([`check`]), driven by random well-typed
//! terms ([`spec`]). Terms are built with [`ksc_ir::builder`].

#[cfg(feature = "check")]
pub mod check;
pub mod laws;
pub mod spec;
pub mod witness;

pub use laws::{law, Law, LAWS};
