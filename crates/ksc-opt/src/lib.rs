//! The rewrite engine of ksc.
//!
//! Rewrites are rules ([`Rule`]): the linear-map laws of
//! [`ksc_linmap::LAWS`], the Core rules of [`CORE_RULES`] and the program's
//! `(rule ...)` declarations. Which rules are tried where, and in what order,
//! is written with strategy combinators ([`strategy`], seed 001: `id`,
//! `fail`, `seq`, `lchoice`, `try`, `repeat`, `one`, `all`, `topDown`,
//! `bottomUp`, `normalize`), interpreted over Core IR bodies by
//! [`Rewriter`]. Named schedules ([`schedule`]) are short strategy
//! expressions; [`optimise_def`] runs a whole definition through them and
//! through [`anf()`] and [`cse()`].
//!
//! ```
//! use ksc_ir::{Body, Type};
//! use ksc_ir::builder::Builder;
//! use ksc_opt::{apply, schedule};
//!
//! let mut body = Body::new();
//! let mut fresh = 0;
//! let mut b = Builder::new(&mut body, &mut fresh);
//! // (if true x 0.0) simplifies to x.
//! let x = b.var("x", Type::Float);
//! let zero = b.float(0.0);
//! let t = b.body.alloc_typed(ksc_ir::Expr::Lit(ksc_ir::Lit::Bool(true)), Type::Bool);
//! let e = b.body.alloc_typed(ksc_ir::Expr::If(t, x, zero), Type::Float);
//! let out = apply(&schedule::core_cleanup(), &mut b, e).unwrap();
//! assert_eq!(ksc_ir::print::print_expr(&body, out), "x");
//! ```
//!
//! Terms are never mutated: rewriting allocates new nodes in the body's
//! arena (copy-on-write), each typed through the [`ksc_ir::builder::Builder`];
//! a rule whose result would have another type does not fire. Traversals and
//! passes are iterative, so deeply nested bodies do not overflow the stack.

pub mod ablation;
pub mod anf;
pub mod core_rules;
pub mod cse;
pub mod engine;
pub mod fuse;
pub mod globals;
pub mod pipeline;
pub mod residuals;
pub mod rule;
pub mod schedule;
pub mod scope;
pub mod script;
pub mod share;
pub mod strategy;
pub mod user;

pub use anf::anf;
pub use core_rules::{core_rule, CoreRule, Head, CORE_RULES};
pub use cse::cse;
pub use engine::{apply, rewrites_on_this_thread, Fired, NormalizeRun, Options, Rewriter, Warning, WarningKind};
pub use fuse::{fuse_loops, merge_ifs};
pub use globals::{DefMap, Defs, Facts, Globals, Lookup, Measure};
pub use residuals::{fuse_scan_extras, scan_extras};
pub use rule::{Ctx, Rule, RuleKind, RuleSet};
pub use schedule::{optimise_def, Report};
pub use script::{Schedules, ScriptError};
pub use share::{costly, folds_from_scans, share_loop_values};
pub use strategy::Strategy;
pub use user::UserRule;
