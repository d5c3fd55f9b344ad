//! The primitives table: built-in functions with their own typing rules
//! (knossos-reference.md 3.1). Prelude functions such as `add` or `exp` are not
//! primitives; they are ordinary monomorphic functions of the built-in prelude.

use std::fmt;

use crate::types::Type;

/// The block size B of the association tree of `reduce` and `scan`, the
/// one order every backend follows (so results are bit-identical whatever
/// runs them, and a parallel implementation at any thread count computes
/// the same: blocks in parallel, a short pass over the block results).
///
/// `reduce OP E V`, n = size V: if n <= B, the left fold
/// `((E ⊙ V0) ⊙ V1) ⊙ ...`. Otherwise V is cut into m = ceil(n / B) blocks
/// of B elements (the last shorter); s_k is block k's result in runs
/// ([`REDUCE_RUNS`]); then the s_k are combined as a balanced tree: pairwise
/// (s0 ⊙ s1), (s2 ⊙ s3), ..., an odd last one carried up unchanged, level
/// after level until one remains. The empty vector gives E.
///
/// `scan OP E V` (inclusive): if n <= B, the left scan from E. Otherwise,
/// with the same blocks and s_k, the carries c_0 = E, c_(k+1) = c_k ⊙ s_k
/// (left to right), and element i of block k is the left fold from c_k
/// over V[kB..=i]: `((c_k ⊙ V_kB) ⊙ ...) ⊙ V_i`. Both passes over the
/// blocks run their steps in lanes where the accumulator is numbers
/// ([`SCAN_LANES`]).
pub const REDUCE_BLOCK: i64 = 1024;

/// The number L of blocks of `scan` (`$scanBlocks`) that advance
/// together, when the accumulator holds only numbers and Booleans
/// ([`scans_in_lanes`]): in each pass over the blocks (the results of all
/// blocks but the last, then each block from its carry), the full blocks
/// (of [`REDUCE_BLOCK`] elements) go in groups of L consecutive blocks,
/// the lanes, which advance together in the order [`lane_rounds`] gives
/// (lane l running [`SCAN_LANE_SKEW`] steps behind lane l - 1); the blocks
/// left over go one at a time. Each block is still the left fold (or
/// scan) over its elements, so the values are those of one block at a
/// time; only the order of the steps between blocks changes (which the
/// interpreter follows too, so a failing step fails in both backends at
/// the same element). A step depends on the one before in its block, so
/// one block at a time waits the operator's latency per element (the
/// affine-map monoid's multiply-add: 8 cycles); L blocks' chains overlap.
pub const SCAN_LANES: i64 = 4;

/// How many steps lane l of a group ([`SCAN_LANES`]) runs behind lane
/// l - 1. Blocks are [`REDUCE_BLOCK`] elements apart, a multiple of 4 KiB
/// for elements of 4 bytes or more, so lanes at the same step read and
/// write addresses equal modulo 4 KiB: in one set of the level-1 cache,
/// whose 8 ways the lanes' streams (two inputs and two outputs each for
/// the affine-map monoid's gradient: 16) exceed, and the loads wait on
/// stores to other lanes' addresses (4K aliasing). Eight steps (a cache
/// line of Floats) apart, each lane's streams have sets of their own: the
/// recurrence's gradient took 0.36 of its time (AMD EPYC with AVX-512, n
/// = 10^6 and 10^7, one thread; docs/native.md).
pub const SCAN_LANE_SKEW: i64 = 8;

/// The order of the steps of one group of `lanes` whole blocks of `scan`
/// (`$scanBlocks`, [`SCAN_LANES`]): `lane_rounds(lanes)` rounds, round r
/// running, for each lane l in turn, the lane's step [`lane_step`]`(r, l)`
/// if it has one. Lane l runs [`SCAN_LANE_SKEW`] steps behind lane l - 1,
/// so every block's steps run in its order, each once.
pub fn lane_rounds(lanes: i64) -> i64 {
    REDUCE_BLOCK + (lanes - 1) * SCAN_LANE_SKEW
}

/// The step lane l runs in round r of its group ([`lane_rounds`]), if any:
/// r - l skew when that is in `0 .. B`.
pub fn lane_step(r: i64, l: i64) -> Option<i64> {
    let j = r - l * SCAN_LANE_SKEW;
    (0..REDUCE_BLOCK).contains(&j).then_some(j)
}

/// Does `scan` over accumulators of this type run its blocks in lanes
/// ([`SCAN_LANES`])? Only numbers, Booleans and tuples of them: their
/// steps need no memory (a tensor accumulator's steps allocate, and each
/// block's would be kept apart).
pub fn scans_in_lanes(t: &Type) -> bool {
    match t {
        Type::Float | Type::Integer | Type::Bool => true,
        Type::Tuple(ts) => ts.iter().all(scans_in_lanes),
        _ => false,
    }
}

/// The number R of runs a block of `reduce` is folded in: a block of len
/// elements is cut into R runs of r = floor(len / R) elements, in order,
/// the last run also taking the len - R r elements after them; each run is
/// the left fold from E over its elements, and the block's result is
/// `((run_0 ⊙ run_1) ⊙ ...) ⊙ run_(R-1)`. The order of the elements is
/// kept (OP need not commute). The runs advance together, a step of R
/// independent applications at a time, which native code runs as one
/// loop that the C compiler vectorises where the operator allows: the
/// objective of log-sum-exp's `(max, sum of exp)` monoid, whose `exp`s a
/// left fold computes one at a time, takes 0.41 to 0.43 of the time it
/// took with a left fold per block (n = 10^6 and 10^7, AMD EPYC with
/// AVX-512; 64 runs gave 0.45 to 0.49). Derivation reads a block as its
/// left fold (`ksc_types::expand::runs_for_derivation`).
pub const REDUCE_RUNS: i64 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prim {
    Build,
    Sumbuild,
    BuildFromSparse,
    BuildFromSparseTupled,
    Fold,
    /// `$scan f acc v`: the n + 1 accumulators of `fold f acc v`, the first
    /// being `acc` (not in the original; reverse mode of `fold` stores them).
    Scan,
    /// `$scanSum f a z v` with `f : (acc, elem) -> (acc', term)`: the n + 1
    /// accumulators of the fold of `f` over `v` from `a`, and `z` plus the
    /// sum of the terms (not in the original; reverse mode of `fold` carries
    /// the accumulator's cotangent and sums the scope's with it).
    ScanSum,
    /// `$scanBlocks OP E V`: `scan OP E V` in its blocked order
    /// ([`REDUCE_BLOCK`]), which the expansion of `scan` writes
    /// (`ksc_types::expand`): the results s_k of all blocks but the last,
    /// the carries c_0 = E, c_(k+1) = c_k ⊙ s_k, then each block scanned
    /// from its carry (for n <= B: the left scan from E). Native code runs
    /// the first and last passes, over blocks, on every core. Its map is
    /// `lmScanBlocks`; a scan whose OP calls the function differentiated
    /// (and every scan in `[CL f]`) is read as the left scan `$scan OP E V`
    /// without its first element, which equals it by the monoid laws
    /// (`ksc_types::expand::scans_for_derivation`).
    ScanBlocks,
    /// `reduce OP E V` with `OP : (T, T) -> T` associative and `E` its
    /// identity: `E ⊙ V[0] ⊙ ... ⊙ V[n-1]` in the association tree of
    /// [`REDUCE_BLOCK`]. It exists only between parsing and
    /// the end of checking: the checker expands it into `fold`/`build`
    /// (`ksc_types::expand`), so later stages never see it.
    Reduce,
    /// `scan OP E V`: the inclusive scan, element i being
    /// `E ⊙ V[0] ⊙ ... ⊙ V[i]`, in the blocked order of
    /// [`REDUCE_BLOCK`]; expanded by the checker like `reduce`.
    ScanInclusive,
    /// `$buildSum n z (lam i (tuple e s))`: `(tuple (build n (lam i e)) (ts_add z
    /// (sum of the s)))` in one loop (not in the original; reverse mode of a
    /// loop that both reads a vector at its index and other variables
    /// builds the one cotangent and sums the others with it).
    BuildSum,
    /// `$tapePush t r`: the vector `t` with `r` appended (not in the
    /// original; the forward pass of split reverse mode records each call of
    /// a function on a tape). It runs in place, in constant amortised time,
    /// when `t` is the latest version of a tape it made (the generated code
    /// threads one tape through the calls); otherwise it copies.
    TapePush,
    /// `$tangentDim x : Integer`: the number of Floats in `x`, the dimension
    /// of its tangent space (not in the original; `[jac f]` sizes its matrix).
    TangentDim,
    /// `$tangentBasis x k`: the tangent shaped like `x` that is 1.0 at its
    /// `k`-th Float (in the order of `$tangentFlatten`) and 0.0 elsewhere;
    /// all zeros when `k` is outside `0 .. $tangentDim x`.
    TangentBasis,
    /// `$tangentFlatten v : Vec Float`: the Floats of `v` in order (depth
    /// first, tuples left to right, tensors row-major; other leaves skipped).
    TangentFlatten,
    /// `$concat ts : Vec T` for `ts : Vec (Tensor d T)`: the tensors'
    /// elements (row-major) one tensor after the other (not in the
    /// original; `[jacsparse f]` assembles its arrays with it).
    Concat,
    /// `$concatN n ts`: `$concat ts`, which must hold `n` elements in all
    /// (an error if not). With a tuple of sizes `(tuple m n ..)`, the same
    /// elements in row-major order in a tensor of that shape. Natively each
    /// tensor of `ts` is computed and copied into the result in turn, its
    /// temporaries freed, so `ts` is never stored (`[jacsparse f]` writes
    /// the blocks' values with it, `[jac f]` the rows of reverse mode).
    ConcatN,
    Map,
    Map2,
    Index,
    Size,
    Sum,
    Shape,
    Unzip,
    ConstVec,
    DeltaVec,
    Diag,
    VecInit,
    TsAdd,
    TsScale,
    TsDot,
    TsNeg,
    Eq,
    Ne,
    Delta,
    Print,
    Trace,
    Check,
    Copydown,
    Inline,
    /// `$apply f x`: the lambda `f : Lam S T` applied to `x : S`, written
    /// `(f x)` for a variable `f` of a lambda type (seed 004's higher-order
    /// functions). Derivation and lowering first write the lambda in
    /// (`ksc_ir::lambdas`) and reduce the application to a `let`.
    Apply,
    /// `get$i$n`: the i-th (1-based) component of an n-tuple.
    Get {
        index: u32,
        arity: u32,
    },

    // Linear maps (knossos-reference.md 4, linear-maps-and-ad.md 1). A map
    // `LM S T` goes from the tangent space of S to that of T. Arguments that
    // are *values* of S or T ("witnesses") give the shapes of zeros.
    /// `lmZero (s, t) : LM S T`, the zero map.
    LmZero,
    /// `lmOne t : LM T T`, the identity.
    LmOne,
    /// `lmScale (t, k) : LM T T`, `dx -> k * dx`.
    LmScale,
    /// `lmScaleR v : LM Float T`, `r -> r * v`.
    LmScaleR,
    /// `lmDot v : LM T Float`, `dx -> <v, dx>`.
    LmDot,
    /// `lmAdd (m1, m2) : LM S T`, the pointwise sum.
    LmAdd,
    /// `lmCompose (f, g) : LM A C` for `f : LM B C`, `g : LM A B`: f after g.
    LmCompose,
    /// `lmVCat (m1, .., mn) : LM S (Tuple T1 .. Tn)`, n >= 1.
    LmVCat,
    /// `lmHCat (m1, .., mn) : LM (Tuple S1 .. Sn) T`, n >= 1.
    LmHCat,
    /// `lmVCatV (s, v) : LM S (Tensor d T)` for `v : Tensor d (LM S T)`.
    LmVCatV,
    /// `lmHCatV (t, v) : LM (Tensor d S) T` for `v : Tensor d (LM S T)`.
    LmHCatV,
    /// `lmTranspose m : LM T S` for `m : LM S T`.
    LmTranspose,
    /// `lmIndex (i, v) : LM (Tensor d T) T`: selects element i. Its
    /// transpose is the one-hot injection.
    LmIndex,
    /// `lmGet$i$n t : LM (Tuple T1 .. Tn) Ti`: selects component i.
    LmGet {
        index: u32,
        arity: u32,
    },
    /// `lmFold (s, f, df, acc, v) : LM (Tuple S (Tuple A (Vec B))) A`: the
    /// derivative of `fold f acc v` in a scope with parameter `s`, where
    /// `df : Lam (Tuple A B) (LM (Tuple S (Tuple A B)) A)` is the derivative of `f`.
    LmFold,
    /// `lmScan (s, f, df, acc, v) : LM (Tuple S (Tuple A (Vec B))) (Vec A)`:
    /// the derivative of `$scan f acc v` (all n + 1 accumulators), with the
    /// arguments of `lmFold`.
    LmScan,
    /// `lmScanBlocks (s, f, df, acc, v) : LM (Tuple S (Tuple A (Vec B)))
    /// (Vec A)`: the derivative of `$scanBlocks f acc v` (the n accumulators
    /// after the first, the scan of a monoid), with the arguments of
    /// `lmFold`. As a map it is `lmScan` without its first row; because f
    /// is associative with left identity `acc`, its application is itself
    /// a `$scanBlocks`, over the pairs (value, tangent) (seed 002 section
    /// 3.2), so forward mode keeps the scan's parallel blocks.
    LmScanBlocks,
    /// `lmApply (m, dx) : dT` for `m : LM S T`, `dx : dS`.
    LmApply,
    /// `lmApplyR (dr, m) : dS` for `m : LM S T`, `dr : dT`.
    LmApplyR,
}

/// Every primitive with a fixed name, and that name.
const NAMED: &[(Prim, &str)] = &[
    (Prim::Build, "build"),
    (Prim::Sumbuild, "sumbuild"),
    (Prim::BuildFromSparse, "buildFromSparse"),
    (Prim::BuildFromSparseTupled, "buildFromSparseTupled"),
    (Prim::Fold, "fold"),
    (Prim::Scan, "$scan"),
    (Prim::BuildSum, "$buildSum"),
    (Prim::ScanSum, "$scanSum"),
    (Prim::ScanBlocks, "$scanBlocks"),
    (Prim::Reduce, "reduce"),
    (Prim::ScanInclusive, "scan"),
    (Prim::TapePush, "$tapePush"),
    (Prim::TangentDim, "$tangentDim"),
    (Prim::TangentBasis, "$tangentBasis"),
    (Prim::TangentFlatten, "$tangentFlatten"),
    (Prim::Concat, "$concat"),
    (Prim::ConcatN, "$concatN"),
    (Prim::Map, "map"),
    (Prim::Map2, "map2"),
    (Prim::Index, "index"),
    (Prim::Size, "size"),
    (Prim::Sum, "sum"),
    (Prim::Shape, "shape"),
    (Prim::Unzip, "unzip"),
    (Prim::ConstVec, "constVec"),
    (Prim::DeltaVec, "deltaVec"),
    (Prim::Diag, "diag"),
    (Prim::VecInit, "Vec_init"),
    (Prim::TsAdd, "ts_add"),
    (Prim::TsScale, "ts_scale"),
    (Prim::TsDot, "ts_dot"),
    (Prim::TsNeg, "ts_neg"),
    (Prim::Eq, "eq"),
    (Prim::Ne, "ne"),
    (Prim::Delta, "delta"),
    (Prim::Print, "print"),
    (Prim::Trace, "$trace"),
    (Prim::Check, "$check"),
    (Prim::Copydown, "$copydown"),
    (Prim::Inline, "$inline"),
    (Prim::Apply, "$apply"),
    (Prim::LmZero, "lmZero"),
    (Prim::LmOne, "lmOne"),
    (Prim::LmScale, "lmScale"),
    (Prim::LmScaleR, "lmScaleR"),
    (Prim::LmDot, "lmDot"),
    (Prim::LmAdd, "lmAdd"),
    (Prim::LmCompose, "lmCompose"),
    (Prim::LmVCat, "lmVCat"),
    (Prim::LmHCat, "lmHCat"),
    (Prim::LmVCatV, "lmVCatV"),
    (Prim::LmHCatV, "lmHCatV"),
    (Prim::LmTranspose, "lmTranspose"),
    (Prim::LmIndex, "lmIndex"),
    (Prim::LmFold, "lmFold"),
    (Prim::LmScan, "lmScan"),
    (Prim::LmScanBlocks, "lmScanBlocks"),
    (Prim::LmApply, "lmApply"),
    (Prim::LmApplyR, "lmApplyR"),
];

/// Which accumulators of a fold over n elements a fold-like map's target
/// holds: the derivative of `fold` (the last), of `$scan` (all n + 1) or
/// of `$scanBlocks` (the n after the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accumulators {
    Last,
    All,
    AfterFirst,
}

impl Accumulators {
    /// The primitive that computes these accumulators' values.
    pub fn value_prim(self) -> Prim {
        match self {
            Accumulators::Last => Prim::Fold,
            Accumulators::All => Prim::Scan,
            Accumulators::AfterFirst => Prim::ScanBlocks,
        }
    }

    /// The fold-like map of their derivative.
    pub fn map_prim(self) -> Prim {
        match self {
            Accumulators::Last => Prim::LmFold,
            Accumulators::All => Prim::LmScan,
            Accumulators::AfterFirst => Prim::LmScanBlocks,
        }
    }

    /// The kind of a loop's value primitive (`fold`, `$scan`, `$scanBlocks`).
    pub fn of_value(p: Prim) -> Option<Accumulators> {
        [Accumulators::Last, Accumulators::All, Accumulators::AfterFirst].into_iter().find(|k| k.value_prim() == p)
    }

    /// How many accumulators over n elements.
    pub fn count(self, n: usize) -> usize {
        match self {
            Accumulators::Last => 1,
            Accumulators::All => n + 1,
            Accumulators::AfterFirst => n,
        }
    }
}

impl Prim {
    /// The primitive with this surface name, including the `get$i$n` family.
    pub fn from_name(name: &str) -> Option<Prim> {
        if let Some(&(p, _)) = NAMED.iter().find(|(_, n)| *n == name) {
            return Some(p);
        }
        let (rest, lm) = match name.strip_prefix("get$") {
            Some(rest) => (rest, false),
            None => (name.strip_prefix("lmGet$")?, true),
        };
        let (i, n) = rest.split_once('$')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0');
        if !digits(i) || !digits(n) {
            return None;
        }
        let (index, arity) = (i.parse().ok()?, n.parse().ok()?);
        Some(if lm { Prim::LmGet { index, arity } } else { Prim::Get { index, arity } })
    }

    /// May a program define a function of this primitive's name? `reduce`
    /// and `scan` are newer than programs that name their own functions so
    /// (`ksc-examples/user_names_scan.ks`): where a function of that name
    /// is in scope, a call means the function.
    pub fn user_may_define(self) -> bool {
        matches!(self, Prim::Reduce | Prim::ScanInclusive)
    }

    /// Is this a linear-map primitive (a combinator or an application)?
    pub fn is_linear_map(self) -> bool {
        matches!(
            self,
            Prim::LmZero
                | Prim::LmOne
                | Prim::LmScale
                | Prim::LmScaleR
                | Prim::LmDot
                | Prim::LmAdd
                | Prim::LmCompose
                | Prim::LmVCat
                | Prim::LmHCat
                | Prim::LmVCatV
                | Prim::LmHCatV
                | Prim::LmTranspose
                | Prim::LmIndex
                | Prim::LmGet { .. }
                | Prim::LmFold
                | Prim::LmScan
                | Prim::LmScanBlocks
                | Prim::LmApply
                | Prim::LmApplyR
        )
    }

    /// The accumulators a fold-like map (`lmFold`, `lmScan`,
    /// `lmScanBlocks`) maps to; None for any other primitive.
    pub fn fold_map_kind(self) -> Option<Accumulators> {
        Some(match self {
            Prim::LmFold => Accumulators::Last,
            Prim::LmScan => Accumulators::All,
            Prim::LmScanBlocks => Accumulators::AfterFirst,
            _ => return None,
        })
    }

    /// The fixed surface names, for "did you mean" suggestions.
    pub fn names() -> impl Iterator<Item = &'static str> {
        NAMED.iter().map(|(_, n)| *n)
    }

    /// Does this primitive take its arguments as written (see
    /// `Body::call_args`) rather than as one tuple value?
    pub fn splats_arguments(self) -> bool {
        matches!(self, Prim::Print | Prim::VecInit | Prim::LmVCat | Prim::LmHCat)
    }

    /// Does evaluating this primitive have an effect besides its result?
    pub fn has_effect(self) -> bool {
        matches!(self, Prim::Print | Prim::Trace)
    }

    /// The number of arguments, or None for the primitives that take any
    /// number (as written, see [`Prim::splats_arguments`]).
    pub fn arity(self) -> Option<usize> {
        match self {
            Prim::Build
            | Prim::Sumbuild
            | Prim::Index
            | Prim::ConstVec
            | Prim::TsAdd
            | Prim::TsScale
            | Prim::TsDot
            | Prim::Eq
            | Prim::Ne
            | Prim::Map
            | Prim::Apply
            | Prim::TangentBasis
            | Prim::TapePush
            | Prim::ConcatN => Some(2),
            Prim::Fold
            | Prim::Scan
            | Prim::Reduce
            | Prim::ScanInclusive
            | Prim::ScanBlocks
            | Prim::BuildSum
            | Prim::Map2
            | Prim::Delta
            | Prim::DeltaVec
            | Prim::Diag
            | Prim::BuildFromSparse
            | Prim::BuildFromSparseTupled => Some(3),
            Prim::Check => Some(5),
            Prim::ScanSum => Some(4),
            Prim::Size
            | Prim::Sum
            | Prim::Shape
            | Prim::Unzip
            | Prim::TsNeg
            | Prim::Trace
            | Prim::TangentDim
            | Prim::TangentFlatten
            | Prim::Concat
            | Prim::Copydown
            | Prim::Inline
            | Prim::Get { .. } => Some(1),
            Prim::LmZero
            | Prim::LmScale
            | Prim::LmAdd
            | Prim::LmCompose
            | Prim::LmVCatV
            | Prim::LmHCatV
            | Prim::LmIndex
            | Prim::LmApply
            | Prim::LmApplyR => Some(2),
            Prim::LmOne | Prim::LmScaleR | Prim::LmDot | Prim::LmTranspose | Prim::LmGet { .. } => Some(1),
            Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks => Some(5),
            Prim::Print | Prim::VecInit | Prim::LmVCat | Prim::LmHCat => None,
        }
    }

    /// The result type of the primitive applied to arguments of these types.
    ///
    /// `args` are the argument types as written: the components of a literal
    /// tuple argument, or the single argument's type. A primitive of fixed
    /// arity k >= 2 also accepts one argument of a k-tuple type.
    pub fn result_type(self, args: &[Type]) -> Result<Type, String> {
        let arity = self.arity();
        let expanded;
        let args: &[Type] = match (arity, args) {
            (Some(k), [Type::Tuple(ts)]) if k >= 2 && ts.len() == k => {
                expanded = ts.clone();
                &expanded
            }
            // A one-argument primitive applied to several arguments means the tuple of them.
            (Some(1), _) if args.len() != 1 => {
                expanded = vec![Type::Tuple(args.to_vec())];
                &expanded
            }
            _ => args,
        };
        if let Some(k) = arity {
            if args.len() != k {
                return Err(format!("`{self}` takes {k} arguments, but {} were given", args.len()));
            }
        }
        if args.iter().any(Type::contains_unknown) && !matches!(self, Prim::Print) {
            // An argument already failed to check: say nothing more.
            return Ok(self.result_type_with_unknowns(args));
        }
        prim_result_type(self, args)
    }

    /// A best guess of the result type when some argument type is unknown.
    fn result_type_with_unknowns(self, args: &[Type]) -> Type {
        prim_result_type(self, args).unwrap_or(Type::Unknown)
    }
}

fn expect_index(what: &str, t: &Type) -> Result<usize, String> {
    t.index_rank()
        .ok_or_else(|| format!("{what} must be an index: `Integer` or a tuple of Integers, but it has type `{t}`"))
}

fn expect_lam<'a>(what: &str, t: &'a Type) -> Result<(&'a Type, &'a Type), String> {
    match t {
        Type::Lam(a, b) => Ok((a, b)),
        _ => Err(format!("{what} must be a lambda `(lam (x : T) ...)`, but it has type `{t}`")),
    }
}

fn expect_lm<'a>(what: &str, t: &'a Type) -> Result<(&'a Type, &'a Type), String> {
    match t {
        Type::LM(s, t) => Ok((s, t)),
        _ => Err(format!("{what} must be a linear map `(LM S T)`, but it has type `{t}`")),
    }
}

fn expect_tensor<'a>(what: &str, t: &'a Type) -> Result<(usize, &'a Type), String> {
    match t {
        Type::Tensor(n, e) => Ok((*n, e)),
        _ => Err(format!("{what} must be a tensor, but it has type `{t}`")),
    }
}

fn expect_eq(what: &str, expected: &Type, found: &Type) -> Result<(), String> {
    if expected.compatible(found) {
        Ok(())
    } else {
        Err(format!("{what} must have type `{expected}`, but it has type `{found}`"))
    }
}

fn prim_result_type(p: Prim, a: &[Type]) -> Result<Type, String> {
    use Type as T;
    Ok(match p {
        Prim::Get { index, arity } => {
            if index == 0 || index > arity {
                return Err(format!("`{p}` selects component {index} of {arity}, which does not exist"));
            }
            match &a[0] {
                T::Tuple(ts) if ts.len() == arity as usize => ts[index as usize - 1].clone(),
                t => return Err(format!("`{p}` needs a tuple of {arity} components, but its argument has type `{t}`")),
            }
        }
        Prim::Build | Prim::Sumbuild => {
            let rank = expect_index("the size (first argument)", &a[0])?;
            let (x, body) = expect_lam("the second argument", &a[1])?;
            expect_eq("the lambda's parameter", &a[0], x)?;
            if p == Prim::Build {
                T::tensor(rank, body.clone())
            } else {
                body.clone()
            }
        }
        Prim::BuildSum => {
            let rank = expect_index("the size (first argument)", &a[0])?;
            let (x, body) = expect_lam("the third argument", &a[2])?;
            expect_eq("the lambda's parameter", &a[0], x)?;
            match body {
                T::Tuple(ts) if ts.len() == 2 => {
                    expect_eq("the second component of the lambda's result (a term of the sum)", &a[1], &ts[1])?;
                    T::Tuple(vec![T::tensor(rank, ts[0].clone()), a[1].clone()])
                }
                t => {
                    return Err(format!(
                        "the lambda of `$buildSum` must return a pair (element, term), but it returns `{t}`"
                    ))
                }
            }
        }
        Prim::ScanSum => {
            let (x, body) = expect_lam("the first argument of `$scanSum`", &a[0])?;
            let (rank, elem) = expect_tensor("the fourth argument of `$scanSum`", &a[3])?;
            if rank != 1 {
                return Err(format!("`$scanSum` runs over a vector, but its fourth argument has type `{}`", a[3]));
            }
            let want = T::Tuple(vec![a[1].clone(), elem.clone()]);
            expect_eq("the lambda's parameter (accumulator, element)", &want, x)?;
            expect_eq(
                "the lambda's result (new accumulator, term)",
                &T::Tuple(vec![a[1].clone(), a[2].clone()]),
                body,
            )?;
            T::Tuple(vec![T::vec(a[1].clone()), a[2].clone()])
        }
        Prim::Reduce | Prim::ScanInclusive | Prim::ScanBlocks => {
            // OP fixes T; the identity and the vector's elements must agree.
            let (x, body) = expect_lam(&format!("the operator (first argument) of `{p}`"), &a[0])?;
            let t = match x {
                T::Tuple(ts) if ts.len() == 2 && ts[0].compatible(&ts[1]) => &ts[0],
                _ => {
                    return Err(format!(
                        "the operator's parameter must be a pair `(Tuple T T)` of one type, but it has type `{x}`"
                    ))
                }
            };
            expect_eq("the operator's result (the type of its parameter's components)", t, body)?;
            expect_eq("the identity (second argument), like the operator,", t, &a[1])?;
            let elem = match &a[2] {
                T::Tensor(1, e) => e,
                other => {
                    return Err(format!(
                        "the third argument of `{p}` must be a vector `(Vec {t})`, but it has type `{other}`"
                    ))
                }
            };
            expect_eq("the elements of the vector (third argument)", t, elem)?;
            if p != Prim::Reduce {
                T::vec(t.clone())
            } else {
                t.clone()
            }
        }
        Prim::Fold | Prim::Scan => {
            let (x, body) = expect_lam(&format!("the first argument of `{p}`"), &a[0])?;
            let (rank, elem) = expect_tensor(&format!("the third argument of `{p}`"), &a[2])?;
            if rank != 1 {
                return Err(format!("`{p}` runs over a vector, but its third argument has type `{}`", a[2]));
            }
            let want = T::Tuple(vec![a[1].clone(), elem.clone()]);
            expect_eq("the lambda's parameter (accumulator, element)", &want, x)?;
            expect_eq("the lambda's result (the new accumulator)", &a[1], body)?;
            if p == Prim::Scan {
                T::vec(a[1].clone())
            } else {
                a[1].clone()
            }
        }
        Prim::Apply => {
            let (x, body) = expect_lam("the function applied", &a[0])?;
            expect_eq("the argument", x, &a[1])?;
            body.clone()
        }
        Prim::Map => {
            let (x, body) = expect_lam("the first argument of `map`", &a[0])?;
            let (rank, elem) = expect_tensor("the second argument of `map`", &a[1])?;
            expect_eq("the lambda's parameter", elem, x)?;
            T::tensor(rank, body.clone())
        }
        Prim::Map2 => {
            let (x, body) = expect_lam("the first argument of `map2`", &a[0])?;
            let (r1, e1) = expect_tensor("the second argument of `map2`", &a[1])?;
            let (r2, e2) = expect_tensor("the third argument of `map2`", &a[2])?;
            if r1 != r2 {
                return Err(format!("`map2` needs tensors of equal rank, found `{}` and `{}`", a[1], a[2]));
            }
            expect_eq("the lambda's parameter", &T::Tuple(vec![e1.clone(), e2.clone()]), x)?;
            T::tensor(r1, body.clone())
        }
        Prim::Index => {
            let (rank, elem) = expect_tensor("the second argument of `index`", &a[1])?;
            expect_eq("the index (first argument)", &T::index_type(rank), &a[0])?;
            elem.clone()
        }
        Prim::Size => T::index_type(expect_tensor("the argument of `size`", &a[0])?.0),
        Prim::TapePush => {
            let (rank, elem) = expect_tensor("the first argument of `$tapePush`", &a[0])?;
            if rank != 1 {
                return Err(format!("`$tapePush` appends to a vector, but its first argument has type `{}`", a[0]));
            }
            expect_eq("the record (second argument)", elem, &a[1])?;
            a[0].clone()
        }
        Prim::Sum => expect_tensor("the argument of `sum`", &a[0])?.1.clone(),
        Prim::Shape => a[0].shape().ok_or_else(|| format!("values of type `{}` have no shape", a[0]))?,
        Prim::TangentDim | Prim::TangentFlatten => {
            a[0].tangent().ok_or_else(|| format!("values of type `{}` have no tangent", a[0]))?;
            if p == Prim::TangentDim {
                T::Integer
            } else {
                T::tensor(1, T::Float)
            }
        }
        Prim::TangentBasis => {
            expect_eq("the position (second argument)", &T::Integer, &a[1])?;
            a[0].tangent().ok_or_else(|| format!("values of type `{}` have no tangent", a[0]))?
        }
        Prim::Concat => match expect_tensor("the argument of `$concat`", &a[0])? {
            (1, T::Tensor(_, elem)) => T::vec((**elem).clone()),
            _ => return Err(format!("`$concat` needs a vector of tensors, found `{}`", a[0])),
        },
        Prim::ConcatN => {
            let rank = expect_index("the size (first argument) of `$concatN`", &a[0])?;
            match expect_tensor("the second argument of `$concatN`", &a[1])? {
                (1, T::Tensor(_, elem)) => T::tensor(rank, (**elem).clone()),
                _ => return Err(format!("`$concatN` needs a vector of tensors, found `{}`", a[1])),
            }
        }
        Prim::Unzip => {
            let (rank, elem) = expect_tensor("the argument of `unzip`", &a[0])?;
            match elem {
                T::Tuple(ts) => T::Tuple(ts.iter().map(|t| T::tensor(rank, t.clone())).collect()),
                t => return Err(format!("`unzip` needs a tensor of tuples, but its elements have type `{t}`")),
            }
        }
        Prim::ConstVec => T::tensor(expect_index("the size (first argument)", &a[0])?, a[1].clone()),
        Prim::DeltaVec => {
            let rank = expect_index("the size (first argument)", &a[0])?;
            expect_eq("the index (second argument)", &a[0], &a[1])?;
            T::tensor(rank, a[2].clone())
        }
        Prim::Diag => {
            expect_eq("the number of rows", &T::Integer, &a[0])?;
            expect_eq("the number of columns", &T::Integer, &a[1])?;
            let (x, body) = expect_lam("the third argument of `diag`", &a[2])?;
            expect_eq("the lambda's parameter", &T::Integer, x)?;
            T::vec(T::vec(body.clone()))
        }
        Prim::BuildFromSparse => {
            let (rank, _) = expect_tensor("the shape (first argument)", &a[0])?;
            expect_index("the number of entries (second argument)", &a[1])?;
            let (x, body) = expect_lam("the third argument", &a[2])?;
            expect_eq("the lambda's parameter", &a[1], x)?;
            match body {
                T::Tuple(ts) if ts.len() == 2 => {
                    expect_eq("the index the lambda returns", &T::index_type(rank), &ts[0])?;
                    T::tensor(rank, ts[1].clone())
                }
                t => return Err(format!("the lambda must return a pair (index, value), but returns `{t}`")),
            }
        }
        Prim::BuildFromSparseTupled => {
            let shapes = match &a[0] {
                T::Tuple(ts) => ts,
                t => return Err(format!("the shapes (first argument) must be a tuple of tensors, found `{t}`")),
            };
            expect_index("the number of entries (second argument)", &a[1])?;
            let (x, body) = expect_lam("the third argument", &a[2])?;
            expect_eq("the lambda's parameter", &a[1], x)?;
            let pairs = match body {
                T::Tuple(ps) if ps.len() == shapes.len() => ps,
                t => {
                    return Err(format!(
                        "the lambda must return a tuple of {} (index, value) pairs, but returns `{t}`",
                        shapes.len()
                    ))
                }
            };
            let mut out = Vec::new();
            for (sh, pair) in shapes.iter().zip(pairs) {
                let (rank, _) = expect_tensor("each shape", sh)?;
                match pair {
                    T::Tuple(iv) if iv.len() == 2 => {
                        expect_eq("each index the lambda returns", &T::index_type(rank), &iv[0])?;
                        out.push(T::tensor(rank, iv[1].clone()));
                    }
                    t => {
                        return Err(format!(
                            "each component the lambda returns must be a pair (index, value), found `{t}`"
                        ))
                    }
                }
            }
            T::Tuple(out)
        }
        Prim::VecInit => {
            let Some(first) = a.first() else {
                return Err("`Vec_init` needs at least one element".to_string());
            };
            for t in &a[1..] {
                expect_eq("every element of `Vec_init`", first, t)?;
            }
            T::vec(first.clone())
        }
        Prim::TsAdd => {
            let dt = a[0].tangent().ok_or_else(|| format!("values of type `{}` have no tangent", a[0]))?;
            if !(a[1].compatible(&a[0]) || a[1].compatible(&dt)) {
                return Err(format!(
                    "`ts_add` adds a tangent `{dt}` to a value of type `{}`, but the second argument has type `{}`",
                    a[0], a[1]
                ));
            }
            a[0].clone()
        }
        Prim::TsScale => {
            expect_eq("the scale (first argument of `ts_scale`)", &T::Float, &a[0])?;
            a[1].clone()
        }
        Prim::TsDot => {
            expect_eq("the second argument of `ts_dot`", &a[0], &a[1])?;
            T::Float
        }
        Prim::TsNeg | Prim::Trace | Prim::Copydown | Prim::Inline => a[0].clone(),
        Prim::Eq | Prim::Ne => {
            expect_eq("the second operand", &a[0], &a[1])?;
            if matches!(a[0], T::Lam(..) | T::LM(..)) {
                return Err(format!("values of type `{}` cannot be compared", a[0]));
            }
            T::Bool
        }
        Prim::Delta => {
            expect_index("the first index of `delta`", &a[0])?;
            expect_eq("the second index of `delta`", &a[0], &a[1])?;
            a[2].clone()
        }
        Prim::Print => T::Integer,
        Prim::LmZero => T::lm(a[0].clone(), a[1].clone()),
        Prim::LmOne => T::lm(a[0].clone(), a[0].clone()),
        Prim::LmScale => {
            expect_eq("the scale (second argument of `lmScale`)", &T::Float, &a[1])?;
            T::lm(a[0].clone(), a[0].clone())
        }
        Prim::LmScaleR => T::lm(T::Float, a[0].clone()),
        Prim::LmDot => T::lm(a[0].clone(), T::Float),
        Prim::LmAdd => {
            let (s, t) = expect_lm("the first argument of `lmAdd`", &a[0])?;
            expect_eq("the second argument of `lmAdd`", &a[0], &a[1])?;
            T::lm(s.clone(), t.clone())
        }
        Prim::LmCompose => {
            let (b, c) = expect_lm("the first argument of `lmCompose`", &a[0])?;
            let (a0, b2) = expect_lm("the second argument of `lmCompose`", &a[1])?;
            if !b.compatible(b2) {
                return Err(format!(
                    "`lmCompose f g` needs the source of f to be the target of g, but f goes from `{b}` and g to `{b2}`"
                ));
            }
            T::lm(a0.clone(), c.clone())
        }
        Prim::LmVCat | Prim::LmHCat => {
            if a.is_empty() {
                return Err(format!("`{p}` needs at least one linear map"));
            }
            let maps: Vec<(&Type, &Type)> =
                a.iter().map(|m| expect_lm(&format!("every argument of `{p}`"), m)).collect::<Result<_, _>>()?;
            if p == Prim::LmVCat {
                for (s, _) in &maps[1..] {
                    expect_eq("the source of every map of `lmVCat`", maps[0].0, s)?;
                }
                T::lm(maps[0].0.clone(), T::Tuple(maps.iter().map(|(_, t)| (*t).clone()).collect()))
            } else {
                for (_, t) in &maps[1..] {
                    expect_eq("the target of every map of `lmHCat`", maps[0].1, t)?;
                }
                T::lm(T::Tuple(maps.iter().map(|(s, _)| (*s).clone()).collect()), maps[0].1.clone())
            }
        }
        Prim::LmVCatV | Prim::LmHCatV => {
            let (rank, elem) = expect_tensor(&format!("the second argument of `{p}`"), &a[1])?;
            let (s, t) = expect_lm(&format!("the elements of the second argument of `{p}`"), elem)?;
            if p == Prim::LmVCatV {
                expect_eq("the source witness (first argument of `lmVCatV`)", s, &a[0])?;
                T::lm(s.clone(), T::tensor(rank, t.clone()))
            } else {
                expect_eq("the target witness (first argument of `lmHCatV`)", t, &a[0])?;
                T::lm(T::tensor(rank, s.clone()), t.clone())
            }
        }
        Prim::LmTranspose => {
            let (s, t) = expect_lm("the argument of `lmTranspose`", &a[0])?;
            T::lm(t.clone(), s.clone())
        }
        Prim::LmIndex => {
            let (rank, elem) = expect_tensor("the second argument of `lmIndex`", &a[1])?;
            expect_eq("the index (first argument of `lmIndex`)", &T::index_type(rank), &a[0])?;
            T::lm(a[1].clone(), elem.clone())
        }
        Prim::LmGet { index, arity } => {
            if index == 0 || index > arity {
                return Err(format!("`{p}` selects component {index} of {arity}, which does not exist"));
            }
            match &a[0] {
                T::Tuple(ts) if ts.len() == arity as usize => T::lm(a[0].clone(), ts[index as usize - 1].clone()),
                t => return Err(format!("`{p}` needs a tuple of {arity} components, but its argument has type `{t}`")),
            }
        }
        Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks => {
            // (s : S, f : Lam (A,B) A, df : Lam (A,B) (LM (S,(A,B)) A), acc : A, v : Vec B)
            let (x, body) = expect_lam(&format!("the second argument of `{p}`"), &a[1])?;
            let (dx, dbody) = expect_lam(&format!("the third argument of `{p}`"), &a[2])?;
            let (rank, elem) = expect_tensor(&format!("the fifth argument of `{p}`"), &a[4])?;
            if rank != 1 {
                return Err(format!("`{p}` runs over a vector, but its fifth argument has type `{}`", a[4]));
            }
            if p == Prim::LmScanBlocks {
                // A monoid's scan: its elements are accumulators.
                expect_eq("the elements of `lmScanBlocks`' vector", &a[3], elem)?;
            }
            let ab = T::Tuple(vec![a[3].clone(), elem.clone()]);
            expect_eq("the fold function's parameter", &ab, x)?;
            expect_eq("the fold function's result", &a[3], body)?;
            expect_eq("the derivative's parameter", &ab, dx)?;
            let want = T::lm(T::Tuple(vec![a[0].clone(), ab.clone()]), a[3].clone());
            expect_eq("the derivative's result", &want, dbody)?;
            let source = T::Tuple(vec![a[0].clone(), T::Tuple(vec![a[3].clone(), a[4].clone()])]);
            let target = if p == Prim::LmFold { a[3].clone() } else { T::vec(a[3].clone()) };
            T::lm(source, target)
        }
        Prim::LmApply => {
            let (s, t) = expect_lm("the first argument of `lmApply`", &a[0])?;
            let ds = s.tangent().ok_or_else(|| format!("values of type `{s}` have no tangent"))?;
            expect_eq("the tangent (second argument of `lmApply`)", &ds, &a[1])?;
            t.tangent().ok_or_else(|| format!("values of type `{t}` have no tangent"))?
        }
        Prim::LmApplyR => {
            let (s, t) = expect_lm("the second argument of `lmApplyR`", &a[1])?;
            let dt = t.tangent().ok_or_else(|| format!("values of type `{t}` have no tangent"))?;
            expect_eq("the cotangent (first argument of `lmApplyR`)", &dt, &a[0])?;
            s.tangent().ok_or_else(|| format!("values of type `{s}` have no tangent"))?
        }
        Prim::Check => {
            let (s, t) = expect_lam("the function (first argument of `$check`)", &a[0])?;
            let (srt, ds) = expect_lam("the reverse derivative (second argument of `$check`)", &a[1])?;
            let dt = t.tangent().ok_or_else(|| format!("values of type `{t}` have no tangent"))?;
            let dst = s.tangent().ok_or_else(|| format!("values of type `{s}` have no tangent"))?;
            expect_eq("the reverse derivative's parameter", &T::Tuple(vec![(*s).clone(), dt.clone()]), srt)?;
            expect_eq("the reverse derivative's result", &dst, ds)?;
            expect_eq("the point (third argument)", s, &a[2])?;
            expect_eq("the direction (fourth argument)", &dst, &a[3])?;
            expect_eq("the output tangent (fifth argument)", &dt, &a[4])?;
            T::Float
        }
    })
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prim::Get { index, arity } => write!(f, "get${index}${arity}"),
            Prim::LmGet { index, arity } => write!(f, "lmGet${index}${arity}"),
            p => {
                let name = NAMED.iter().find(|(q, _)| q == p).map(|(_, n)| *n).unwrap_or("?");
                f.write_str(name)
            }
        }
    }
}
