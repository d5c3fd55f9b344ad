//! Core IR of ksc: types, structured names, expressions in arena bodies, the
//! primitives table with its typing rules, and a pretty printer that writes
//! valid `.ks`.
//!
//! This crate depends on nothing else of ksc and does no I/O.

pub mod builder;
pub mod builtin;
pub mod core;
pub mod limits;
pub mod names;
pub mod pass;
pub mod prim;
pub mod print;
pub mod types;

pub use crate::builtin::Builtin;
pub use crate::core::{Body, Callee, Decl, Def, Edef, Expr, ExprId, Gdef, Lit, Param, Pat, Program, Rule, Var};
pub use crate::names::{Derivation, FunName};
pub use crate::prim::Prim;
pub use crate::types::Type;
