//! The categorical language CL of seed 003 (sections 6 and 7, figures 9 to
//! 11; knossos-reference.md 5.5): point-free terms that make a function's
//! structure explicit.
//!
//! - [`term`]: the terms ([`Cl`]) and their printed form;
//! - [`check`]: the typing rules (figure 11), [`type_of`];
//! - [`eval`]: the semantics (figure 10), [`eval()`] over the interpreter's
//!   values, calling global functions through a [`Runtime`]
//!   ([`InterpRuntime`] runs them in the interpreter);
//! - [`to_cl`]: Core IR to CL with pruning to free variables, [`def_to_cl`];
//! - [`from_cl`]: CL back to Core IR, [`cl_to_def`].
//!
//! `[CL f]` ([`cl_def`]) is `f` translated to CL and back. Every failure is
//! a [`ClError`] value naming what is not supported or ill-formed; nothing
//! here panics on bad input.

pub mod check;
pub mod eval;
pub mod from_cl;
pub mod runtime;
pub mod term;
pub mod to_cl;

use std::fmt;

use ksc_ir::{Def, Derivation, Type};

pub use check::{check, type_of, Signatures};
pub use eval::{eval, Runtime};
pub use from_cl::cl_to_def;
pub use runtime::InterpRuntime;
pub use term::{Cl, ClArg, ClLam, Fun, Konst};
pub use to_cl::def_to_cl;

/// The deepest nesting of Core IR expressions the translation to CL
/// accepts (a chain of `let`s nests one level per binding).
pub const MAX_DEPTH: usize = 10_000;

/// The deepest nesting of CL terms the type checker, the evaluator and the
/// translation back accept (a Core level takes a few CL levels).
pub const MAX_TERM_DEPTH: usize = 4 * MAX_DEPTH;

/// The stack [`on_big_stack`] gives: the passes recurse on the nesting of
/// expressions and terms, a few KiB per level.
pub const STACK_SIZE: usize = 512 << 20;

/// Runs `f` on a thread with a [`STACK_SIZE`] stack (or here, if no thread
/// can be made), so deep terms up to [`MAX_DEPTH`] do not overflow the
/// caller's stack. [`cl_def`] runs on one; callers of the other passes on
/// deep terms should too (the property tests run on a big stack).
pub fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut f = Some(f);
    let spawned = std::thread::scope(|s| {
        let job = &mut f;
        let handle =
            std::thread::Builder::new().stack_size(STACK_SIZE).spawn_scoped(s, move || job.take().map(|f| f()));
        match handle {
            Ok(h) => match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(_) => None,
        }
    });
    match (spawned, f) {
        (Some(r), _) => r,
        (None, Some(f)) => f(),
        (None, None) => unreachable!("the job ran or was kept"),
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A construct of Core IR that CL cannot express.
    Unsupported,
    /// An ill-typed CL term.
    Type,
    /// A failure while evaluating a term (the program's, or an unsupported
    /// primitive).
    Eval,
    /// Input that is not a well-formed, type-checked definition or term.
    Malformed,
}

/// An error of the translations, the type checker or the evaluator.
#[derive(Clone, Debug, PartialEq)]
pub struct ClError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ClError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ClError {
        ClError { kind, message: message.into() }
    }
}

impl fmt::Display for ClError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClError {}

/// `[CL f]`: the definition `f` translated to CL and back, named `[CL f]`
/// (on a big stack).
pub fn cl_def(f: &Def) -> Result<Def, ClError> {
    on_big_stack(|| {
        let c = def_to_cl(f)?;
        cl_to_def(&c, f.name.derived(Derivation::CL), &f.params, &f.ret_ty)
    })
}

/// The type `S ⇒ T` of a definition's CL term: its argument and result types.
pub fn def_type(f: &Def) -> (Type, Type) {
    (f.arg_ty(), f.ret_ty.clone())
}

/// `base`, or `base_k` for the first k that makes it new to `names` (where
/// it is then recorded).
fn fresh_name(names: &mut rustc_hash::FxHashSet<ksc_ir::Var>, base: &str) -> ksc_ir::Var {
    let mut k = 0usize;
    loop {
        let name = if k == 0 { base.to_string() } else { format!("{base}_{k}") };
        if names.insert(name.clone()) {
            return name;
        }
        k += 1;
    }
}
