//! Core IR of ksc: types, structured names, expressions in arena bodies, the
//! primitives table with its typing rules, and a pretty printer that writes
//! valid `.ks`; and the toolkit every later stage builds and reads Core IR
//! with: typed construction ([`builder`]), traversal, free variables and
//! effects, copying, substitution and fresh names ([`term`], with the
//! persistent sets of [`idset`]).
//!
//! This crate depends on nothing else of ksc and does no I/O.

pub mod builder;
pub mod builtin;
pub mod core;
pub mod idset;
pub mod lambdas;
pub mod limits;
pub mod names;
pub mod pass;
pub mod prim;
pub mod print;
pub mod term;
pub mod types;

pub use crate::builtin::Builtin;
pub use crate::core::{
    stamp, AssertFrom, Body, Callee, Decl, Def, Edef, Expr, ExprId, Gdef, Lit, Param, Pat, Program, Rule, STerm,
    StrategyDecl, Var,
};
pub use crate::names::{Derivation, FunName};
pub use crate::prim::Prim;
pub use crate::types::Type;
