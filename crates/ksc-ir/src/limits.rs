//! The resource limits that both backends enforce the same way (the
//! README's "Limits" lists them all).
//!
//! The only limit set here is the number of elements of a tensor: every
//! primitive that makes a tensor of a size it is given (`build`,
//! `constVec`, `deltaVec`, `diag`, `$concatN`, `$buildSum`) or of the
//! total size of tensors (`$concat`) refuses a size of more elements, in
//! the interpreter and in native code alike, before allocating and whether
//! or not the optimiser would have materialised the tensor (a fused
//! `index 5 (build 1000000000000 f)` fails as the interpreter's does). The
//! error names the primitive and the size and is located at the call.
//!
//! The binary sets the limit from `KSC_MAX_ELEMENTS` before anything runs
//! ([`set_max_elements`]); native code gets it as a constant when it is
//! lowered.
//!
//! Memory is limited too (`KSC_MAX_MEMORY` bytes, by default half the
//! machine's physical memory), so that no program exhausts the machine:
//! natively the arena may not grow past it, and the interpreter refuses a
//! tensor that would take its heap past it ([`check_memory`]; the binary
//! counts the heap's bytes with its allocator and reports them through
//! [`note_heap`]). The two backends lay values out differently (an
//! interpreter element is a tagged value, a native one 8 bytes, and native
//! code fuses tensors away), so where a program reaches this limit differs
//! between them; the limit on elements is the one they share exactly.
//!
//! The depth of nested (non-tail) calls has no bound of its own: a call
//! fails with "recursion too deep" when the native stack would pass
//! `KSC_MAX_STACK` bytes ([`max_stack`], by default half the memory limit),
//! reserved as address space and backed by memory only as calls reach it.
//! The interpreter's frames are larger than native code's, so it reaches
//! the limit at a smaller depth.

use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};

/// The default number of elements a tensor may have: 2^28 (2 GiB of
/// Floats natively).
pub const DEFAULT_MAX_ELEMENTS: u64 = 1 << 28;

/// The environment variable that sets the limit.
pub const MAX_ELEMENTS_VAR: &str = "KSC_MAX_ELEMENTS";

static MAX_ELEMENTS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_ELEMENTS);

/// The most elements a tensor may have.
pub fn max_elements() -> u64 {
    MAX_ELEMENTS.load(Ordering::Relaxed)
}

/// Sets the limit (for the whole process), at most [`MAX_MAX_ELEMENTS`].
pub fn set_max_elements(n: u64) {
    MAX_ELEMENTS.store(n.min(MAX_MAX_ELEMENTS), Ordering::Relaxed);
}

/// The largest limit that may be set: 2^31 elements (16 GiB of Floats).
/// Native code adds up the sizes of up to that many tensors of up to that
/// many elements (`$concat`), which must fit in an Integer.
pub const MAX_MAX_ELEMENTS: u64 = 1 << 31;

/// Reads a value of `KSC_MAX_ELEMENTS`: a positive decimal Integer (`_`
/// separators allowed) of at most [`MAX_MAX_ELEMENTS`].
pub fn parse_max_elements(text: &str) -> Result<u64, String> {
    let digits: String = text.trim().chars().filter(|&c| c != '_').collect();
    match digits.parse::<u64>() {
        Ok(n) if (1..=MAX_MAX_ELEMENTS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{MAX_ELEMENTS_VAR} must be a number of elements from 1 to 2^31 ({MAX_MAX_ELEMENTS}), not `{text}`"
        )),
    }
}

/// The environment variable that sets the limit on memory, in bytes.
pub const MAX_MEMORY_VAR: &str = "KSC_MAX_MEMORY";

static MAX_MEMORY: AtomicU64 = AtomicU64::new(u64::MAX);
/// The heap's bytes in use, but for each thread's [`PENDING`] bytes (a
/// block freed by another thread than the one that allocated it can make
/// this negative for a while).
static HEAP_IN_USE: AtomicIsize = AtomicIsize::new(0);

/// Bytes this thread allocated (less those it freed) since it last added
/// them to [`HEAP_IN_USE`]. A shared counter updated by every allocation
/// cost a fifth of the time of checking a 10,000-call chain under
/// `gdef rev` (the `lock add` of each allocation and free), so each thread
/// hands its count over once it reaches [`PENDING_FLUSH`] bytes either way.
const PENDING_FLUSH: isize = 1 << 20;

thread_local! {
    static PENDING: Cell<isize> = const { Cell::new(0) };
}

/// The most bytes the interpreter's heap may hold (no limit until the
/// binary sets one).
pub fn max_memory() -> u64 {
    MAX_MEMORY.load(Ordering::Relaxed)
}

/// Sets the limit on memory (for the whole process).
pub fn set_max_memory(bytes: u64) {
    MAX_MEMORY.store(bytes, Ordering::Relaxed);
}

/// Reads a value of the variable `var` (`KSC_MAX_MEMORY`,
/// `KSC_MAX_STACK`): a positive decimal number of bytes.
pub fn parse_bytes(var: &str, text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{var} must be a positive number of bytes, not `{text}`")),
    }
}

/// The environment variable that sets the limit on the native stack a
/// program's calls may use, in bytes: the bound on the depth of nested
/// (non-tail) calls in both backends.
pub const MAX_STACK_VAR: &str = "KSC_MAX_STACK";

/// 0: half of [`max_memory`].
static MAX_STACK: AtomicU64 = AtomicU64::new(0);

/// The most bytes of native stack a program's nested calls may use before
/// one fails with "recursion too deep": `KSC_MAX_STACK`, else half the
/// memory limit (native code's runtime, `ksrt_max_stack`, computes the
/// same).
pub fn max_stack() -> u64 {
    match MAX_STACK.load(Ordering::Relaxed) {
        0 => max_memory() / 2,
        n => n,
    }
}

/// Sets the limit on the stack (for the whole process).
pub fn set_max_stack(bytes: u64) {
    MAX_STACK.store(bytes, Ordering::Relaxed);
}

/// Records `bytes` more (`grown`) or fewer bytes in use by the heap (the
/// binary's allocator calls this). The shared count lags each thread's by
/// less than [`PENDING_FLUSH`] bytes, which the limit, a number of
/// gigabytes, can afford.
pub fn note_heap(bytes: usize, grown: bool) {
    let bytes = bytes as isize;
    let delta = if grown { bytes } else { -bytes };
    // A thread being torn down has no PENDING any more: count directly.
    let flushed = PENDING.try_with(|p| {
        let now = p.get() + delta;
        if now.abs() < PENDING_FLUSH {
            p.set(now);
            0
        } else {
            p.set(0);
            now
        }
    });
    let flush = flushed.unwrap_or(delta);
    if flush != 0 {
        HEAP_IN_USE.fetch_add(flush, Ordering::Relaxed);
    }
}

/// Checks that `bytes` more for a tensor of `elements` elements keep the
/// heap within [`max_memory`].
pub fn check_memory(elements: usize, bytes: usize) -> Result<(), String> {
    let (max, in_use) = (max_memory(), HEAP_IN_USE.load(Ordering::Relaxed).max(0) as u64);
    if in_use.saturating_add(bytes as u64) > max {
        return Err(format!(
            "out of memory: a tensor of {elements} elements ({bytes} bytes) would take the interpreter's heap \
             ({in_use} bytes) past its limit of {max} bytes ({MAX_MEMORY_VAR})"
        ));
    }
    Ok(())
}

/// The number of elements of a tensor of these sizes, saturating at
/// `u64::MAX` (negative sizes are refused before this is asked).
pub fn element_count(size: &[i64]) -> u64 {
    size.iter().fold(1u64, |acc, &d| acc.saturating_mul(u64::try_from(d).unwrap_or(0)))
}

/// The error of a tensor of more than `limit` elements: `` `PRIM` of size
/// S is too large: more than L elements ``. Native code prints the same.
pub fn too_large_message(prim: &str, size: &[i64], limit: u64) -> String {
    let size = match size {
        [n] => n.to_string(),
        _ => format!("({})", size.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
    };
    format!("`{prim}` of size {size} is too large: more than {limit} elements (the limit, {MAX_ELEMENTS_VAR})")
}

/// Checks a tensor's size against the limit.
pub fn check_elements(prim: &str, size: &[i64]) -> Result<u64, String> {
    let limit = max_elements();
    let n = element_count(size);
    if n > limit {
        Err(too_large_message(prim, size, limit))
    } else {
        Ok(n)
    }
}
