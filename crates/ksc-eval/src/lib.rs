//! The reference interpreter of Core IR: the semantics every other stage of
//! ksc is tested against.
//!
//! ```
//! use ksc_eval::{Interpreter, Value};
//! use ksc_ir::{Def, FunName, Type};
//!
//! let defs: Vec<Def> = Vec::new(); // the checked program, from the front end
//! let mut interp = Interpreter::new(&defs);
//! let add = FunName::typed("add", Type::Tuple(vec![Type::Float, Type::Float]));
//! let arg = Value::tuple(vec![Value::Float(1.5), Value::Float(2.0)]);
//! let result = interp.call(&add, arg, &mut std::io::stdout()).unwrap();
//! assert_eq!(result.to_string(), "3.5");
//! ```
//!
//! Evaluation is strict and left to right; `Float` is `f64` and `Integer` is
//! `i64` with checked arithmetic. Values print in the original's format
//! (knossos-reference.md 7.7). Every failure of a running program (a failed
//! `assert`, an index out of range, integer overflow, division by zero,
//! recursion too deep, ...) is a [`RuntimeError`] that points at the Core
//! expression that failed; evaluation never panics.
//!
//! Deep recursion needs native stack: run the interpreter on a thread with a
//! stack comfortably larger than [`Interpreter::set_stack_limit`] (default
//! [`DEFAULT_STACK_LIMIT`]), e.g. 512 MiB.

mod eval;
mod native;
mod ops;
mod prims;
mod value;

#[cfg(test)]
mod tests;

use std::fmt;
use std::io::Write;

use ksc_ir::{Def, ExprId, FunName};

pub use crate::native::{native_prelude, ranhash, ranhashdoub, NativeFn, NativeImpl};
pub use crate::value::{format_float, Closure, Tensor, Value};

/// The default bound on nested (non-tail) calls.
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// The default bound on the native stack one top-level call may use, in bytes.
pub const DEFAULT_STACK_LIMIT: usize = 256 << 20;

/// A failure of a running program.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeError {
    pub message: String,
    /// The expression that failed, in the body of the named definition (none
    /// for a failure of the top-level call itself).
    pub location: Option<(FunName, ExprId)>,
    /// The call sites the failure happened under, innermost first. Tail calls
    /// leave no call site.
    pub stack: Vec<(FunName, ExprId)>,
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuntimeError {}

/// An interpreter for a set of definitions.
pub struct Interpreter<'a> {
    prog: eval::Prog<'a>,
    /// The value stack, kept between calls to reuse its allocation.
    stack: Vec<Value>,
    max_depth: usize,
    stack_limit: usize,
}

impl<'a> Interpreter<'a> {
    /// Prepares the definitions to run. Their bodies must be resolved: every
    /// called `FunName` has its base type. Calls of names without a
    /// definition go to the native prelude ([`native_prelude`]), or fail
    /// when run.
    pub fn new(defs: impl IntoIterator<Item = &'a Def>) -> Self {
        Interpreter {
            prog: eval::Prog::new(defs),
            stack: Vec::new(),
            max_depth: DEFAULT_MAX_DEPTH,
            stack_limit: DEFAULT_STACK_LIMIT,
        }
    }

    /// Sets the bound on nested calls (tail calls do not nest).
    pub fn set_max_depth(&mut self, depth: usize) {
        self.max_depth = depth;
    }

    /// Sets the bound on the native stack a call may use, in bytes. It must
    /// be comfortably below the stack size of the running thread.
    pub fn set_stack_limit(&mut self, bytes: usize) {
        self.stack_limit = bytes;
    }

    /// Is there a definition (not a native function) of this name?
    pub fn is_defined(&self, name: &FunName) -> bool {
        self.prog.by_name.contains_key(name)
    }

    /// Calls the function `name` (a definition or a native prelude function)
    /// with its argument (the tuple of the arguments if it takes n != 1).
    /// Output of `print` and `$trace` goes to `out`.
    // The error is returned by value (the front end maps it to a diagnostic);
    // it is built only once per failed run, so its size does not matter.
    #[allow(clippy::result_large_err)]
    pub fn call(
        &mut self,
        name: &FunName,
        arg: Value,
        out: &mut dyn Write,
    ) -> Result<Value, RuntimeError> {
        let stack = std::mem::take(&mut self.stack);
        let mut machine =
            eval::Machine::new(&self.prog, stack, out, self.max_depth, self.stack_limit);
        let result = machine.call_top(name, arg);
        self.stack = machine.stack;
        self.stack.clear();
        result.map_err(|e| *e)
    }
}
