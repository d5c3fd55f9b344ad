//! Memory of derivation is linear in the program's size: `[rev f]` of an
//! expression nested n deep, derived and optimised, peaks at a heap
//! proportional to n. It was quadratic twice over: the optimiser kept a
//! full free-variable vector per node (n^2 names over a let chain that
//! reads n variables), and copy-on-write rewriting left the copies of the
//! chain that every `let-atom` substitution makes in the arena (n^2
//! nodes); 400 deep passed 3 GB. Measured with this test binary's own
//! allocator, so the figures are counts of bytes, not times.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ksc_ir::FunName;

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One measurement at a time (the counters are the process's).
static SERIAL: Mutex<()> = Mutex::new(());

/// `(def f Float (x : Float) (add x (add x ... x)))`, `depth` deep, with
/// `(gdef rev [f Float])`.
fn nested(depth: usize) -> String {
    let mut e = String::from("x");
    for _ in 0..depth {
        e = format!("(add x {e})");
    }
    format!("(def f Float (x : Float) {e})\n(gdef rev [f Float])\n")
}

/// The peak heap, above what was in use before, of deriving and
/// optimising the `gdef`s of `text`.
fn peak_of_derivation(text: &str) -> usize {
    let analysis = ksc_types::analyze(text);
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let requests: Vec<FunName> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
    assert!(derived.errors.is_empty(), "{:?}", derived.errors);
    let warnings = ksc_opt::pipeline::optimise_all(&mut derived.defs, &analysis.defs(), &[], &[]);
    assert!(warnings.is_empty(), "{warnings:?}");
    PEAK.load(Ordering::Relaxed) - base
}

#[test]
fn deriving_a_deeply_nested_expression_takes_linear_memory() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let small = peak_of_derivation(&nested(100));
    let big = peak_of_derivation(&nested(400));
    // 13 MB and 19 MB when written (most of it the arena, which the
    // optimiser lets grow to 50 000 nodes before compacting it). Without
    // the compaction 400 deep took 120 MB, 9 times 100 deep; without the
    // shared free-variable sets, over 3 GB.
    assert!(big < 190 << 20, "400 deep: peak {} MB", big >> 20);
    assert!(big < 8 * small, "100 deep: {} KB, 400 deep: {} KB: not linear", small >> 10, big >> 10);
}
