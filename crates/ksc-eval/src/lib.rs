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
//! Nested (non-tail) calls recurse on the native stack, with no bound on
//! their number: only the bytes of stack they use are bounded
//! ([`Interpreter::set_stack_limit`], default [`DEFAULT_STACK_LIMIT`]), past
//! which a call fails with "recursion too deep". Run the interpreter on a
//! thread whose stack is comfortably larger than that limit (`ksc run
//! --interp` sizes both from `KSC_MAX_STACK`).

mod eval;
mod linmap;
pub mod mathfns;
mod native;
mod ops;
mod prims;
mod value;

use std::fmt;
use std::io::Write;

use ksc_ir::{Def, ExprId, FunName};

pub use crate::linmap::{flatten_tangent, tangent_basis, tangent_dim, tangent_ones, LinMap, Matrix};
pub use crate::native::{native_prelude, ranhash, ranhashdoub, NativeFn, NativeImpl};
pub use crate::value::{format_float, Closure, Tensor, Value};

/// The interpreter's helpers on values, with its messages, for other
/// evaluators of Core IR's semantics (the categorical language's).
pub mod support {
    pub use crate::ops::{dummy, zero_from_shape, zero_like};
    pub use crate::prims::{
        count, index_at, index_components, int, iterations, new_tensor, pair, sizes, tensor, tensor_count,
    };
    pub use crate::value::{fmt_index, fmt_size};
}

/// Internals the integration tests check directly (`tests/properties.rs`,
/// `tests/native.rs`); not part of the API.
#[doc(hidden)]
pub mod testing {
    pub use crate::native::digamma;
    pub use crate::ops::{ts_add, ts_dot, ts_scale};
}

/// The default bound on the native stack one top-level call may use, in
/// bytes: nested calls fail with "recursion too deep" past it. For the
/// library's users (the tests evaluating derivatives at random points,
/// some of which recurse forever): about 20,000 nested calls, as deep as
/// the old fixed bound of 10,000 and as quick to stop a runaway recursion
/// (whose levels may each cost more as it goes, as a tape copied per
/// level). `ksc run --interp` sets the limit from `KSC_MAX_STACK`, by
/// default gigabytes.
pub const DEFAULT_STACK_LIMIT: usize = 32 << 20;

/// Native stack the interpreter may use beyond its limit before it checks
/// again: what a nested call's arguments, and a body's expressions nested
/// without a call, take (the front end bounds their nesting). A thread
/// running the interpreter needs at least the limit plus this.
pub const STACK_SLACK: usize = 256 << 20;

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
    /// Calling frames beyond `stack`, not listed (the outermost of a native
    /// run's deep recursion: its runtime reports the innermost 10,000).
    pub elided: usize,
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
    stack_limit: usize,
    /// Calls evaluated so far, over all runs (see [`Interpreter::operations`]).
    ops: u64,
    /// The runs' spans, added ([`Interpreter::span`]).
    span: u64,
    /// The operations a top-level call may do ([`Interpreter::set_call_limit`]).
    ops_limit: u64,
}

impl<'a> Interpreter<'a> {
    /// The work done since the interpreter was made, over all runs: a
    /// deterministic measure of what a program costs, used to check the
    /// cost of derivatives. It counts
    /// - each call (of functions, prelude functions and primitives other
    ///   than the tuple projections `get$i$n`, which compiled code does not
    ///   execute);
    /// - the loads of loops: `fold`, `$scan`, `$scanSum`, `map` and `map2`
    ///   read each element of the vectors they are given, one each as
    ///   `index` is, except a vector written in place as a `build` (the
    ///   backend fuses it into the loop, which computes the element
    ///   instead);
    /// - element work: each element of a tensor made (`build`, `constVec`,
    ///   `$scan`'s results, ...) or copied (a shared tensor written into, a
    ///   tape's prefix, a sparse tensor made dense), each element of the
    ///   tensors that `ts_add`, `ts_scale`, `ts_neg`, `ts_dot`, `sum` and
    ///   `sumbuild`'s accumulation combine (a scalar operation is its call),
    ///   each element a prelude function reads of a vector (`dot`, a
    ///   matrix-vector product), each element compared by `eq`; and one per
    ///   entry of a one-hot vector (`deltaVec`), which is kept sparse
    ///   (`Value::Sparse`) until something needs it dense; a `build` fused
    ///   into the loop that reads it counts no elements.
    ///
    /// So a program whose interpretation does quadratic work has a
    /// quadratic count, whatever the number of its calls.
    pub fn operations(&self) -> u64 {
        self.ops
    }

    /// The span of the runs since the interpreter was made (added over
    /// runs): the operations of [`Interpreter::operations`] on the longest
    /// chain of steps that depend on each other, the depth a machine of
    /// unbounded cores would need. The iterations of the loops that native
    /// code may run on a team of threads are independent chains: `build`
    /// (and `map`, `map2`), whose iterations each count their own work and
    /// whose result's allocation counts one (as `unzip`'s columns of an
    /// element do); and the two passes of
    /// `$scanBlocks` over its blocks (a block being a chain of its steps).
    /// Everything else is one chain: sums (their order is their value),
    /// folds, the carries between `scan`'s blocks, calls. So `reduce`'s
    /// span, whose blocks are a `build` and whose tree combines them in
    /// log levels, is at most a constant (a block's) plus a term in
    /// log n; a `scan`'s adds its carries, one per block of
    /// `ksc_ir::prim::REDUCE_BLOCK` elements. The span is an upper bound:
    /// a `build` fused into the loop that reads it keeps its span, and the
    /// element work of operations on whole tensors (`ts_add` of vectors, a
    /// `constVec`, a one-hot made dense) counts on the chain, though
    /// native code may run it on a team.
    pub fn span(&self) -> u64 {
        self.span
    }

    /// Prepares the definitions to run. Their bodies must be resolved: every
    /// called `FunName` has its base type. Calls of names without a
    /// definition go to the native prelude ([`native_prelude`]), or fail
    /// when run.
    pub fn new(defs: impl IntoIterator<Item = &'a Def>) -> Self {
        Interpreter {
            prog: eval::Prog::new(defs),
            stack: Vec::new(),
            stack_limit: DEFAULT_STACK_LIMIT,
            ops: 0,
            span: 0,
            ops_limit: u64::MAX,
        }
    }

    /// Makes each top-level call fail once it has done `ops` operations
    /// (the count of [`Interpreter::operations`]), at its next call of a
    /// function: a tail recursion runs in constant stack, so a loop that
    /// never ends is not stopped by the stack limit. For tests that run
    /// programs they did not write (random mutants).
    pub fn set_call_limit(&mut self, ops: u64) {
        self.ops_limit = ops;
    }

    /// Sets the bound on the native stack a call may use, in bytes: the
    /// only bound on the depth of nested calls (tail calls do not nest). The
    /// running thread's stack must be larger by [`STACK_SLACK`].
    pub fn set_stack_limit(&mut self, bytes: usize) {
        self.stack_limit = bytes;
    }

    /// Is there a definition (not a native function) of this name?
    pub fn is_defined(&self, name: &FunName) -> bool {
        self.prog.by_name.contains_key(name)
    }

    /// Runs `f` on a machine over this interpreter's program (output of any
    /// `print` inside is discarded).
    #[allow(clippy::result_large_err)] // built once per failed run, like `call`
    fn with_machine<T>(
        &mut self,
        f: impl FnOnce(&mut eval::Machine) -> Result<T, linmap::LmFail>,
    ) -> Result<T, RuntimeError> {
        let stack = std::mem::take(&mut self.stack);
        let mut sink = std::io::sink();
        let mut machine = eval::Machine::new(&self.prog, stack, &mut sink, self.stack_limit);
        machine.ops_limit = self.ops_limit;
        let (work, span) = (ops::work_done(), ops::span_done());
        let result = f(&mut machine);
        self.ops += machine.ops + ops::work_done().wrapping_sub(work);
        self.span += ops::span_done().wrapping_sub(span);
        self.stack = machine.stack;
        self.stack.clear();
        result.map_err(|e| match e {
            linmap::LmFail::Here(message) => RuntimeError { message, location: None, stack: Vec::new(), elided: 0 },
            linmap::LmFail::Inner(e) => *e,
        })
    }

    fn as_linear_map(m: &Value) -> Result<std::rc::Rc<LinMap>, linmap::LmFail> {
        match m {
            Value::LinMap(m) => Ok(m.clone()),
            v => Err(linmap::LmFail::Here(format!("expected a linear map, found {}", v.kind()))),
        }
    }

    /// `m ⊙ dx` for a linear-map value `m` made by this interpreter.
    #[allow(clippy::result_large_err)]
    pub fn apply_linear_map(&mut self, m: &Value, dx: Value) -> Result<Value, RuntimeError> {
        self.with_machine(|mc| Self::as_linear_map(m)?.apply(mc, dx)).map(Value::densified)
    }

    /// `dr ⊙ᴿ m` for a linear-map value `m` made by this interpreter.
    #[allow(clippy::result_large_err)]
    pub fn apply_linear_map_r(&mut self, dr: Value, m: &Value) -> Result<Value, RuntimeError> {
        self.with_machine(|mc| Self::as_linear_map(m)?.apply_r(mc, dr)).map(Value::densified)
    }

    /// The linear map as a dense matrix over the flattened tangent spaces
    /// (rows: target, columns: source).
    #[allow(clippy::result_large_err)]
    pub fn dense_matrix(&mut self, m: &Value) -> Result<Matrix, RuntimeError> {
        self.with_machine(|mc| Self::as_linear_map(m)?.dense(mc))
    }

    /// Which entries of the linear map's matrix ([`Interpreter::dense_matrix`])
    /// can be nonzero at all, row-major: those its combinators carry a
    /// column to, even by a factor that is zero here (`lmScale` by 0, a
    /// zero of `lmDot`'s vector). Computed as the matrix of basis vectors
    /// whose one is NaN, which every product and sum propagates (`lmFold`'s
    /// closures run on such tangents too). Applying the combinators applies
    /// a shared sub-map once per path to it, which can be far more work
    /// than the Jacobian's: past `budget` units of work (the count of
    /// [`Interpreter::operations`], each combinator applied counting one)
    /// it gives up with an error, the same on every machine.
    #[allow(clippy::result_large_err)]
    pub fn structural_pattern(&mut self, m: &Value, budget: u64) -> Result<(usize, usize, Vec<bool>), RuntimeError> {
        let mx = ops::with_work_limit(budget, || {
            self.with_machine(|mc| Self::as_linear_map(m)?.dense_seeded(mc, f64::NAN))
        })?;
        Ok((mx.rows, mx.cols, mx.data.iter().map(|x| x.is_nan() || *x != 0.0).collect()))
    }

    /// The zero tangents of the source and target spaces of a linear map.
    #[allow(clippy::result_large_err)]
    pub fn linear_map_spaces(&mut self, m: &Value) -> Result<(Value, Value), RuntimeError> {
        self.with_machine(|_| {
            let m = Self::as_linear_map(m)?;
            Ok((m.source_zero()?, m.target_zero()?))
        })
    }

    /// Calls the function `name` (a definition or a native prelude function)
    /// with its argument (the tuple of the arguments if it takes n != 1).
    /// Output of `print` and `$trace` goes to `out`.
    // The error is returned by value (the front end maps it to a diagnostic);
    // it is built only once per failed run, so its size does not matter.
    #[allow(clippy::result_large_err)]
    pub fn call(&mut self, name: &FunName, arg: Value, out: &mut dyn Write) -> Result<Value, RuntimeError> {
        let stack = std::mem::take(&mut self.stack);
        let mut machine = eval::Machine::new(&self.prog, stack, out, self.stack_limit);
        machine.ops_limit = self.ops_limit;
        let (work, span) = (ops::work_done(), ops::span_done());
        let result = machine.call_top(name, arg).map(Value::densified);
        self.ops += machine.ops + ops::work_done().wrapping_sub(work);
        self.span += ops::span_done().wrapping_sub(span);
        self.stack = machine.stack;
        self.stack.clear();
        result.map_err(|e| *e)
    }
}
