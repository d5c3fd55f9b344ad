//! The loop IR of ksc and the lowering of LM-free Core IR into it.
//!
//! ```text
//! Core IR (checked, LM-free) ─lower─▶ loop IR ─optimize─▶ loop IR ─▶ ksc-codegen-c
//! ```
//!
//! - [`ir`]: the loop IR (explicit loops, SSA scalars, tensors, arena marks)
//!   and its printer.
//! - [`lower`]: lowering with fusion of `build` into its consumers, inlining,
//!   scalar replacement of tuples, in-place accumulation, hash-consing.
//! - `accum`: in-place accumulation of sums through tuples, `if`, `let`
//!   and projections of their terms.
//! - [`opt`]: loop-invariant code motion, CSE, DCE, arena scopes.
//! - [`names`]: C names of definitions (the original's mangling).
//!
//! [`compile`] runs the whole pipeline.

mod accum;
mod builder;
pub mod ir;
pub mod lower;
pub mod names;
pub mod opt;
mod prims;

pub use ir::Module;
pub use lower::{LowerError, Options};

use ksc_ir::{Def, FunName};

/// Lowers the definitions `roots` (and what they call) and optimises the
/// result. With `optimize` false, the loop IR is as lowered (fusion,
/// inlining and hash-consing included, since they happen during lowering).
pub fn compile(defs: &[&Def], roots: &[FunName], opts: Options, optimize: bool) -> Result<Module, LowerError> {
    let mut m = lower::lower_program(defs, roots, opts)?;
    if optimize {
        opt::optimize(&mut m);
    }
    Ok(m)
}
