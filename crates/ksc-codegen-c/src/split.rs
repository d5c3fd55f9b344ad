//! Large functions written as several C functions (issue 35).
//!
//! The C compiler's time on a function grows faster than its length (its
//! data-flow problems are over all of the function's blocks and
//! variables): HT's Jacobians, functions of 5,000 and 7,000 lines, took 0.45
//! ms of GCC's time per line at `-O3` where functions of 2,000 lines took
//! 0.2. So a function of more than [`MAX_STMTS`] statements has some of its
//! loops and branches written as functions of their own, its *parts*,
//! which it calls: the largest first among those not in a loop (called
//! once per call of the function), then those in the fewest loops, until
//! what is left of it is within the bound. A part is a statement (a `for`
//! or an `if`) of [`MIN_STMTS`] to [`MAX_STMTS`] statements; it takes the
//! variables it reads as parameters, and those it assigns that are declared
//! outside it (the mutable variables: accumulators, an `if`'s results) by
//! address. Parts are never inlined back (`noinline`), push no frame on the
//! shadow call stack (a run-time error reads as before) and count no work
//! (`KS_WORK` is per block, and blocks are unchanged), so the program does
//! what it did, in the same order.
//!
//! Not parts: a statement that returns or makes a self tail call (it ends
//! the function), one with a copy-down not in a loop of its own (the
//! copy-down weighs its innermost loop, which would be outside), and what a
//! loop running on a team holds (that loop is a function of its own
//! already, `parallel.rs`).
//!
//! A function still over the bound then has its long straight-line code
//! cut: each block not in a loop (the body, and the branches of its `if`s)
//! is cut into *runs*, consecutive statements of about half the bound
//! each, each run a part. A run's results, the variables it defines that
//! are read after it, are declared by the caller and passed by address
//! too. Without this, reverse mode of a program whose calls were all
//! inlined (the doubling family `f_k x = f_(k-1) (f_(k-1) x)` at k = 14:
//! 49,000 lines, every forward value live until the reverse pass reads it)
//! was one function on which GCC's register allocator and combiner took
//! minutes.

use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_lower::ir::{Block, Func, Op, Rhs, Stmt, VarId};

/// A function of more statements than this (nested ones included; a
/// parallel loop's body, a function of its own, not) is split.
pub const MAX_STMTS: usize = 1200;

/// The fewest statements of a part (or a quarter of the bound, if less):
/// a smaller one would save the C compiler little and cost a call.
pub const MIN_STMTS: usize = 48;

/// The environment variable that sets the bound instead of [`MAX_STMTS`]
/// (the tests set a small one, so that the examples run split into many
/// parts).
pub const MAX_STMTS_VAR: &str = "KSC_SPLIT_STMTS";

static MAX: AtomicUsize = AtomicUsize::new(MAX_STMTS);

/// The bound in force ([`MAX_STMTS`] unless [`set_max_stmts`] said).
pub fn max_stmts() -> usize {
    MAX.load(Ordering::Relaxed)
}

pub fn set_max_stmts(n: usize) {
    MAX.store(n, Ordering::Relaxed);
}

/// The value of [`MAX_STMTS_VAR`]: a number of statements, 8 to 10^9.
pub fn parse_max_stmts(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (8..=1_000_000_000).contains(&n) => Ok(n),
        _ => Err(format!("{MAX_STMTS_VAR} must be a number of statements from 8 to 1000000000, not `{text}`")),
    }
}

/// The parts of a function, by the address of their first statement (the
/// function is not changed while its C is written): each part's number
/// and how many statements of its block it is (one for a loop or branch,
/// more for a run).
#[derive(Default)]
pub struct Plan {
    // pub for the integration tests (tests/split.rs).
    #[doc(hidden)]
    pub parts: FxHashMap<*const Stmt, (usize, usize)>,
    /// How many times each variable is used in the function
    /// ([`mentions`]), if it has runs (to find their results).
    uses: FxHashMap<VarId, usize>,
}

impl Plan {
    /// The number of the part that starts at `s`.
    pub fn part(&self, s: &Stmt) -> Option<usize> {
        self.run(s).map(|(k, _)| k)
    }

    /// The number and the length of the part that starts at `s`.
    pub fn run(&self, s: &Stmt) -> Option<(usize, usize)> {
        self.parts.get(&(s as *const Stmt)).copied()
    }
}

/// What a statement is, for choosing parts, computed bottom-up once.
struct Facts {
    /// It returns or makes a self tail call.
    ends: bool,
    /// It has a copy-down not inside one of its own loops.
    loose_copy_down: bool,
}

/// The parts of `f` ([`Plan`]); `parallel(idx, body)` says whether the
/// loop `for idx .. { body }` runs on a team (and so is a function of its
/// own) when not inside another such loop.
pub fn plan(f: &Func, parallel: &dyn Fn(VarId, &Op, &Block) -> bool) -> Plan {
    plan_within(f, max_stmts(), parallel)
}

/// [`plan`] with a bound of `max` statements.
pub fn plan_within(f: &Func, max: usize, parallel: &dyn Fn(VarId, &Op, &Block) -> bool) -> Plan {
    let mut facts: FxHashMap<*const Stmt, Facts> = FxHashMap::default();
    facts_of(&f.body, &mut facts);
    let mut chosen: FxHashSet<*const Stmt> = FxHashSet::default();
    let mut order = Vec::new();
    let bounds = (MIN_STMTS.min(max / 4).max(2), max);
    let total = loop {
        let mut best: Option<(usize, usize, *const Stmt)> = None;
        let total = sizes(&f.body, 0, bounds, &chosen, &facts, parallel, &mut best);
        if total <= max {
            break total;
        }
        let Some((_, _, s)) = best else { break total };
        chosen.insert(s);
        order.push(s);
    };
    let mut parts: Vec<(*const Stmt, usize)> = order.iter().map(|&s| (s, 1)).collect();
    if total > max {
        let cuts = Cuts { chunk: (max / 2).max(bounds.0), least: bounds.0, chosen: &chosen, facts: &facts, parallel };
        cuts.block(&f.body, &mut parts);
    }
    let mut uses = FxHashMap::default();
    if parts.iter().any(|&(_, len)| len > 1) {
        mentions(&f.body, &mut uses);
    }
    Plan { parts: parts.into_iter().enumerate().map(|(k, (s, len))| (s, (k, len))).collect(), uses }
}

/// Cutting the straight-line code of blocks not in a loop into runs
/// (see the module).
struct Cuts<'a> {
    /// The most statements of a run (nested ones included).
    chunk: usize,
    /// The fewest.
    least: usize,
    chosen: &'a FxHashSet<*const Stmt>,
    facts: &'a FxHashMap<*const Stmt, Facts>,
    parallel: &'a dyn Fn(VarId, &Op, &Block) -> bool,
}

impl Cuts<'_> {
    /// Cuts `b` (not in a loop) and the branches in it into runs, noted in
    /// `out` as (first statement, length); the statements `b` then counts.
    fn block(&self, b: &Block, out: &mut Vec<(*const Stmt, usize)>) -> usize {
        let mut total = 0;
        // The run being gathered: its first statement's index, its weight.
        let mut run: Option<(usize, usize)> = None;
        let close = |run: &mut Option<(usize, usize)>, end: usize, total: &mut usize, out: &mut Vec<_>| {
            if let Some((start, weight)) = run.take() {
                if weight >= self.least && end - start >= 2 {
                    out.push((&b[start] as *const Stmt, end - start));
                    *total += 1;
                } else {
                    *total += weight;
                }
            }
        };
        for (i, s) in b.iter().enumerate() {
            let p = s as *const Stmt;
            let facts = self.facts.get(&p);
            let barrier = self.chosen.contains(&p) || facts.is_some_and(|f| f.ends || f.loose_copy_down);
            let weight = if self.chosen.contains(&p) {
                1
            } else {
                match s {
                    Stmt::For { .. } => {
                        // Its size as written (an empty range of part sizes:
                        // no part is sought).
                        let mut best = None;
                        sizes(
                            std::slice::from_ref(s),
                            0,
                            (usize::MAX, 0),
                            self.chosen,
                            self.facts,
                            self.parallel,
                            &mut best,
                        )
                    }
                    Stmt::If { then, els, .. } => 1 + self.block(then, out) + self.block(els, out),
                    _ => 1,
                }
            };
            if barrier || weight > self.chunk {
                close(&mut run, i, &mut total, out);
                total += weight;
                continue;
            }
            match &mut run {
                Some((_, w)) if *w + weight <= self.chunk => *w += weight,
                _ => {
                    close(&mut run, i, &mut total, out);
                    run = Some((i, weight));
                }
            }
        }
        close(&mut run, b.len(), &mut total, out);
        total
    }
}

fn facts_of(b: &Block, out: &mut FxHashMap<*const Stmt, Facts>) -> Facts {
    let mut acc = Facts { ends: false, loose_copy_down: false };
    for s in b {
        let f = match s {
            Stmt::Return(_) | Stmt::TailCall(_) => Facts { ends: true, loose_copy_down: false },
            Stmt::CopyDown { .. } => Facts { ends: false, loose_copy_down: true },
            Stmt::For { pre, body, .. } => {
                let p = facts_of(pre, out);
                let b = facts_of(body, out);
                Facts { ends: p.ends || b.ends, loose_copy_down: p.loose_copy_down }
            }
            Stmt::If { then, els, .. } => {
                let t = facts_of(then, out);
                let e = facts_of(els, out);
                Facts { ends: t.ends || e.ends, loose_copy_down: t.loose_copy_down || e.loose_copy_down }
            }
            _ => Facts { ends: false, loose_copy_down: false },
        };
        acc.ends |= f.ends;
        acc.loose_copy_down |= f.loose_copy_down;
        out.insert(s as *const Stmt, f);
    }
    acc
}

/// The statements of `b` as the function will be written (a part and a
/// parallel loop's body count as one), noting in `best` the best part not
/// yet chosen: the fewest enclosing loops, then the most statements.
fn sizes(
    b: &[Stmt],
    loops: usize,
    bounds: (usize, usize),
    chosen: &FxHashSet<*const Stmt>,
    facts: &FxHashMap<*const Stmt, Facts>,
    parallel: &dyn Fn(VarId, &Op, &Block) -> bool,
    best: &mut Option<(usize, usize, *const Stmt)>,
) -> usize {
    let mut total = 0;
    for s in b {
        let p = s as *const Stmt;
        if chosen.contains(&p) {
            total += 1;
            continue;
        }
        let n = match s {
            Stmt::For { idx, n, pre, body, .. } => {
                let inner = if parallel(*idx, n, body) {
                    1
                } else {
                    sizes(body, loops + 1, bounds, chosen, facts, parallel, best)
                };
                1 + sizes(pre, loops, bounds, chosen, facts, parallel, best) + inner
            }
            Stmt::If { then, els, .. } => {
                1 + sizes(then, loops, bounds, chosen, facts, parallel, best)
                    + sizes(els, loops, bounds, chosen, facts, parallel, best)
            }
            _ => 1,
        };
        if matches!(s, Stmt::For { .. } | Stmt::If { .. }) && (bounds.0..=bounds.1).contains(&n) {
            let ok = facts.get(&p).is_some_and(|f| !f.ends && !f.loose_copy_down);
            let better = match best {
                None => true,
                Some((l, m, _)) => loops < *l || (loops == *l && n > *m),
            };
            if ok && better {
                *best = Some((loops, n, p));
            }
        }
        total += n;
    }
    total
}

/// What a part, the statements `part` of a block of `f` split by `plan`,
/// passes: the variables it reads that are defined outside it (by
/// value); the mutable ones declared outside it that it assigns (by
/// address); and its results, the variables it declares (not in a nested
/// block) that are read or assigned outside it (by address, declared by
/// the caller). Each sorted.
pub fn interface(f: &Func, plan: &Plan, part: &[Stmt]) -> Interface {
    let own = ksc_lower::visit::defined_in(part);
    let mut read: Vec<VarId> = Vec::new();
    let mut written: Vec<VarId> = Vec::new();
    ksc_lower::visit::walk(part, &mut |s| {
        for o in ksc_lower::visit::stmt_operands(s) {
            if let Op::Var(v) = o {
                read.push(*v);
            }
        }
        match s {
            Stmt::Set(v, _) => written.push(*v),
            Stmt::CopyDown { mark, vars } => {
                read.push(*mark);
                written.extend(vars);
            }
            Stmt::Reset(m) => read.push(*m),
            Stmt::Keep(vs) => written.extend(vs.iter().filter_map(Op::var).filter(|v| f.vars[v.0 as usize].mutable)),
            _ => {}
        }
    });
    let outside = |v: &VarId| !own.contains(v);
    let mut results: Vec<VarId> = Vec::new();
    let declared: FxHashSet<VarId> = part
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(v, _) | Stmt::DeclMut(v, _) => Some(*v),
            _ => None,
        })
        .collect();
    if !declared.is_empty() {
        let mut inside = FxHashMap::default();
        mentions(part, &mut inside);
        results = declared.into_iter().filter(|v| plan.uses.get(v) > inside.get(v)).collect();
        results.sort();
    }
    written.retain(outside);
    written.sort();
    written.dedup();
    read.retain(|v| outside(v) && written.binary_search(v).is_err());
    read.sort();
    read.dedup();
    Interface { inputs: read, outputs: written, results }
}

/// A part's parameters ([`interface`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Interface {
    pub inputs: Vec<VarId>,
    pub outputs: Vec<VarId>,
    pub results: Vec<VarId>,
}

/// Counts each variable's mentions in `b` (nested blocks included:
/// `ksc_lower::visit::stmt_mentions`).
fn mentions(b: &[Stmt], out: &mut FxHashMap<VarId, usize>) {
    ksc_lower::visit::walk(b, &mut |s| {
        ksc_lower::visit::stmt_mentions(s, &mut |v| *out.entry(v).or_insert(0) += 1);
    });
}

/// The variables of `f` that hold arena marks (C type `ks_mark`).
pub fn marks(f: &Func) -> FxHashSet<VarId> {
    let mut out: FxHashSet<VarId> = f.entry_mark.into_iter().collect();
    ksc_lower::visit::walk(&f.body, &mut |s| {
        if let Stmt::Let(v, Rhs::Mark) = s {
            out.insert(*v);
        }
    });
    out
}
