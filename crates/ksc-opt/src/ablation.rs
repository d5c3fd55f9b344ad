//! Ablations: named groups of optimisations switched off together (`ksc
//! build|run|deriv --ablate NAME`), to measure what each group buys, as
//! dF~ (seed 000, section 5) measures fusion and loop-invariant code
//! motion. The benchmark harness times ksc with each of them beside ksc
//! with everything on (`benches/run.py`, the "ablations" table).
//!
//! An ablation is a list of Core rules (and laws) left out of every rule
//! set and schedule, as `--skip-rule` leaves one out, and a list of passes
//! (of the derived-function pipeline or the loop IR) and switches of the
//! lowering not run, as `--skip-pass` does. Rules only make code better or
//! leave it as it was (they preserve meaning, `core_rules`), so an ablated
//! build computes the same values, more slowly or not.
//!
//! The C compiler still runs its own optimisations (gcc's `-O3` moves
//! loop invariants and fuses nothing across allocations), so an ablation
//! measures what ksc adds to them.

/// A group of optimisations switched off together.
pub struct Ablation {
    /// The name `--ablate` takes.
    pub name: &'static str,
    /// What is switched off, in one sentence (for `--help` and the docs).
    pub what: &'static str,
    /// Core rules left out of every rule set.
    pub rules: &'static [&'static str],
    /// Passes of either pipeline not run, and switches of the lowering
    /// turned off (`ksc_lower::passes::SWITCHES`).
    pub passes: &'static [&'static str],
}

/// Every ablation.
pub static ABLATIONS: &[Ablation] = &[
    Ablation {
        name: "fusion",
        what: "producer-consumer fusion: dF~'s fusion rules (figure 7c: index and size of a build) and ksc's \
               forms of them (sum of a build, a let-bound build read where it is used, [jac f]'s columns \
               computed where the matrix stores them), the lowering's reading of a build where it is consumed \
               instead of storing it (fuse-builds), and the loop IR's fuse-consumers",
        rules: &[
            "index-build",
            "size-build",
            "sum-build",
            "get-index-let-build",
            "let-build",
            "let-build-loop",
            "let-build-lazy",
            "let-columns",
            "index-concatn-build",
        ],
        passes: &["fuse-builds", "fuse-consumers"],
    },
    Ablation {
        name: "licm",
        what: "ksc's loop-invariant code motion: the invariant parts of a fold's elements (fold-invariant-element), \
               the Jacobians' hoisting of primal work out of the column loop (hoist-loop-invariants, \
               hoist-inner-invariants) and the loop IR's licm",
        rules: &["fold-invariant-element"],
        passes: &["hoist-loop-invariants", "hoist-inner-invariants", "licm"],
    },
    Ablation {
        name: "df-rules",
        what: "the rules of dF~ section 4.1 that ksc added (issue 43 item 1): ring cancellation and \
               distributivity, products and sums of conditionals and zeros, a condition tested again in its own \
               branch, and the iteration rules over one-hot terms (reads of and dot products with a one-hot \
               vector, and sums over them)",
        rules: &[
            "ring-cancel",
            "distribute",
            "mul-if-zero",
            "scale-if-zero",
            "mul-zero",
            "add-if-same",
            "if-known-cond",
            "sumbuild-one-hot",
            "index-deltavec",
            "let-deltavec",
            "ts-dot-deltavec",
            "tangent-basis-one-hot",
            "tangent-basis-tuple",
        ],
        passes: &[],
    },
    Ablation {
        name: "parallel-reverse",
        what: "seed 002's parallel reverse mode of scan (Theorem 3.7): the backward pass of a scan over a monoid \
               whose cotangent is a few Floats runs serially instead of as a scan of affine maps in parallel \
               blocks (the switch parallel-scan-reverse)",
        rules: &[],
        passes: &["parallel-scan-reverse"],
    },
];

/// The ablation of this name.
pub fn ablation(name: &str) -> Option<&'static Ablation> {
    ABLATIONS.iter().find(|a| a.name == name)
}
