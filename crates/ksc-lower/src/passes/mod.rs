//! The loop-IR optimiser: its passes, one per file, and the pipeline that
//! runs them on each function.
//!
//! [`PIPELINE`] lists the passes in the order they run; [`optimize_func`]
//! runs them through [`ksc_ir::pass::Runner`], which skips the passes the
//! user skipped (`--skip-pass`), checks after each pass in debug builds
//! that every variable is read in its scope ([`scope_error`]), and prints
//! the function after the passes named by `--dump-after`.
//!
//! Fusion and scalar replacement of tuples happen earlier, during lowering
//! (`lower.rs`), where the structure of `build` and `tuple` is still
//! visible; hash-consing also runs during lowering (`builder.rs`) and
//! again here ([`cse`]), after hoisting has moved computations next to
//! each other. The traversal helpers the passes share are in
//! [`crate::visit`].
//!
//! Each pass's `run` says whether it changed the function. A pass that
//! could not tell cheaply would say `true`, never a wrong `false`; every
//! pass here tells exactly (`ksc-db`'s `tests/loop_passes.rs` checks the
//! `false`s on every example).

pub mod alloc_dims;
pub mod arena;
pub mod copies;
pub mod copy_down;
pub mod cse;
pub mod dce;
pub mod distribute;
pub mod first_adds;
pub mod fuse;
pub mod guarded;
pub mod interchange;
pub mod jam;
pub mod licm;
pub mod max_exps;
pub mod nest;
pub mod packed;
pub mod reuse;
pub mod scalars;
pub mod soa;
pub mod unswitch;
pub mod version;

use ksc_ir::pass::{Pass, Runner};

use crate::ir::*;
pub use crate::visit::scope_error;
use crate::visit::{any_stmt, walk};

/// What the loop-IR passes know of the rest of the module.
pub struct LoopCx<'a> {
    /// `effectful[k]`: may the function `FuncId(k)` print (directly or
    /// through calls)?
    pub effectful: &'a [bool],
    /// `heap_ret[k]`: does the result of `FuncId(k)` hold tensors?
    pub heap_ret: &'a [bool],
}

/// A loop-IR pass, for every lifetime of its context.
pub type LoopPass = dyn for<'a> Pass<Func, LoopCx<'a>> + Sync;

/// The loop-IR pipeline, in the order the passes run.
pub static PIPELINE: &[&LoopPass] = &[
    &guarded::ShareGuarded,
    &licm::Licm,
    &cse::Cse,
    &max_exps::ShareMaxExps,
    &alloc_dims::FoldAllocDims,
    &scalars::ScalarSmallTensors,
    &dce::Dce,
    // Again: DCE removed what hid more of them.
    &alloc_dims::FoldAllocDims,
    // Again: the sizes read from allocations make comparisons of a size
    // with itself (`ts_add`'s checks), which CSE folds.
    &cse::Cse,
    &fuse::FuseConsumers,
    &packed::ForwardPackedTensors,
    &unswitch::UnswitchInvariantBranches,
    &nest::VersionCheckedNests,
    &version::VersionRangeGuards,
    &interchange::InterchangeSums,
    &jam::JamSums,
    &distribute::DistributeRecurrences,
    &first_adds::FirstAddsIntoZeros,
    &soa::SplitTupleVectors,
    &copies::ElideVectorCopies,
    &copy_down::ElideCopyDowns,
    // Last but for the arena: no later pass may move a load of the dying
    // vector past a store of the new one.
    &reuse::ReuseDeadVectors,
    &arena::PlaceArenaScopes,
];

/// The names of the pipeline's passes, each once, in the order they
/// first run (for `--skip-pass` and `--dump-after` to check theirs).
pub fn names() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for p in PIPELINE {
        if !out.contains(&p.name()) {
            out.push(p.name());
        }
    }
    out
}

/// Switches of the lowering that `--skip-pass` turns off (they are not
/// passes: nothing to print after them, so `--dump-after` does not take
/// them).
///
/// - `fuse-builds`: a `build` without effects is delayed, read where it is
///   consumed (`index`, `size`, `sum`, ...: `lower.rs`) instead of
///   stored. Off, every `build` is stored when it is met.
pub const SWITCHES: &[&str] = &["fuse-builds"];

/// Runs the pipeline on every function.
pub fn optimize(m: &mut Module) {
    let effectful = effectful_funcs(m);
    let heap_ret: Vec<bool> = m.funcs.iter().map(|f| needs_heap(&f.ret)).collect();
    for f in &mut m.funcs {
        optimize_func(f, &effectful, &heap_ret);
    }
}

/// Runs the pipeline on one function. `effectful[k]`: may the function
/// `FuncId(k)` print? `heap_ret[k]`: does its result hold tensors?
pub fn optimize_func(f: &mut Func, effectful: &[bool], heap_ret: &[bool]) {
    let cx = LoopCx { effectful, heap_ret };
    let runner = Runner { cx: &cx, unit_name: |f: &Func| f.name.to_string(), print: Func::pretty, verify: scope_error };
    for p in PIPELINE {
        runner.run(*p, f);
    }
}

/// Which functions of the module print, directly or through calls (the
/// `effectful` of [`LoopCx`]).
pub fn effectful_funcs(m: &Module) -> Vec<bool> {
    let prints = |b: &Block| any_stmt(b, &mut |s| matches!(s, Stmt::Print { .. }));
    let mut eff: Vec<bool> = m.funcs.iter().map(|f| prints(&f.body)).collect();
    loop {
        let mut changed = false;
        for (i, f) in m.funcs.iter().enumerate() {
            if !eff[i] && calls(&f.body).iter().any(|c| eff[c.0 as usize]) {
                eff[i] = true;
                changed = true;
            }
        }
        if !changed {
            return eff;
        }
    }
}

/// The functions a block calls.
fn calls(b: &Block) -> Vec<FuncId> {
    let mut out = Vec::new();
    walk(b, &mut |s| {
        if let Stmt::Let(_, Rhs::Call { func, .. }) = s {
            out.push(*func);
        }
    });
    out
}
