//! Loop versioning for range guards (`version-range-guards`).
//!
//! Reverse mode adds into a vector at an index it cannot prove in range
//! (`deltaVec`'s "out of range adds nothing"), so a loop `for i < n { x =
//! a + i; if (x >= 0 && x < m) { .. } }` (with `a` and `m` invariant)
//! tests every iteration, and the C compiler does not vectorise it. Such a
//! loop becomes `if (a >= 0 && m >= 0 && n <= m - a) { the loop without
//! the test } else { the loop }`: the test is made once, and in range the
//! loop is straight. The copy's variables are renamed. When the loop's
//! preheader computes `a` or `m`, the preheader runs first (under `n > 0`,
//! as it would) and the test after it.
//!
//! A check `x <= m` with `x = idx + x0`, x0 >= 1 a constant (`$concatN`'s
//! counter, read as the index by `scalar-small-tensors`), is versioned the
//! same way, with `a = x0 - 1`: in range, the loop runs without it; else
//! the loop with it fails where it did.
//!
//! A checked build (the default) checks every index a loop reads:
//! `check (i < m)`, and `check (x >= 0 && x < m)` with `x = i + a` (an
//! overflow-checked add; `a` invariant, or `k * b` that the body computes
//! with an overflow check). Each holds in every iteration when its range
//! does, so the copy of a versioned loop runs without all of them (and
//! with those adds and products unchecked: in range they cannot
//! overflow), the test before the loop being the conjunction of their
//! ranges' tests (after the preheader when it computes an offset: the
//! gates of LSTM's gradient read their weights at `i + 2 n`, `2 n` an
//! overflow-checked product that LICM moved there; the checked gradient
//! took 1.37 times the unchecked one's time, now 1.02 to 1.05). A loop with no
//! range guard is versioned for its checks only if the copy is then left
//! without anything that may fail (one left would still stop
//! vectorisation), with a body of at most
//! [`CHECKED_BODY`] statements: LSTM's objective in a checked build took
//! 2.8 times the unchecked build's time (its gates' loops, eight index
//! checks each, did not vectorise), then 1.03 to 1.05 times (its gradient
//! 0.93 to 1.0 of its time before), now 1.1 (0.87 against 0.79 ms; the
//! runtime's `tanh` is always inlined since GCC stopped inlining it there); the cost is C compile time, as the
//! copies are vectorised too: the checked build of lstm.ks, whose C is 20%
//! longer, takes 30 to 50% more CPU.
//!
//! Assumes: `a` and `m` are defined neither in the body nor assigned in
//! it; `n <= m - a` cannot overflow once `a >= 0` and `m >= 0`. Only
//! innermost loops, with bodies of at most [`VERSIONED_BODY`] statements
//! (the body is copied).

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{after_preheader, count_stmts, fresh_let, lets_of, may_fail, renamed, variant};

/// The `version-range-guards` pass.
pub struct VersionRangeGuards;

impl Pass<Func, LoopCx<'_>> for VersionRangeGuards {
    fn name(&self) -> &'static str {
        "version-range-guards"
    }

    /// Whether a loop was versioned.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        let body = std::mem::take(&mut f.body);
        let mut changed = false;
        f.body = version_block(body, &mut f.vars, &mut changed);
        changed
    }
}

/// The most statements of a loop body that the pass copies.
const VERSIONED_BODY: usize = 40;

/// The most statements of a loop body copied for its index checks alone
/// (a checked build's: LSTM's gates, 60 statements with eight checks).
const CHECKED_BODY: usize = 80;

/// The offset `a` of a range `idx + a`: an invariant operand, or `k * b`
/// (a constant `k >= 1`, `b` invariant) that the body computes with an
/// overflow check (`3 * b`, LSTM's third gate), which the test before the
/// loop computes again, after testing `0 <= b <= i64::MAX / k`.
#[derive(Clone, Debug, PartialEq)]
enum Offset {
    Op(Op),
    Scaled(Op, i64),
}

/// Versions the loops of `block` (see the module's doc); sets `changed`
/// when it versions one.
fn version_block(block: Block, vars: &mut Vec<VarInfo>, changed: &mut bool) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let body = version_block(body, vars, changed);
                let pre = version_block(pre, vars, changed);
                let inner_loop = body.iter().any(|s| matches!(s, Stmt::For { .. }));
                // A guard whose offset or size the preheader computes is
                // tested after the preheader, which then runs before both
                // loops (under the loop's own `n > 0`).
                let guard = if inner_loop || count_stmts(&body) > VERSIONED_BODY {
                    None
                } else if let Some(g) = range_guard(&body, &pre, idx) {
                    Some((g, false))
                } else if !pre.is_empty() {
                    range_guard(&body, &[], idx).map(|g| (g, true))
                } else {
                    // (Reached without a preheader only.)
                    bound_check(&body, idx).map(|g| (g, false))
                };
                // The index checks of the body (all of them: one left in
                // the loop stops its vectorisation as a guard does), with
                // the range guard found or without one.
                let guard = match guard {
                    Some(((straight, a, m), lifted)) => {
                        let inside = variant(&body, if lifted { &[] } else { &pre });
                        let (straight, mut checks) = strip_index_checks(straight, idx, &inside);
                        checks.insert(0, (Offset::Op(a), m));
                        Some((straight, checks, lifted))
                    }
                    // Copied for its checks alone only where the copy is
                    // left without anything that may fail (a check left
                    // in it would still stop vectorisation).
                    // Checks reading what the preheader computes (an
                    // offset `2 n`, LSTM's gradient) are tested after it,
                    // as a guard's are.
                    None if !inner_loop && count_stmts(&body) <= CHECKED_BODY => {
                        let copy = |pre: &[Stmt]| {
                            let (straight, checks) = strip_index_checks(body.clone(), idx, &variant(&body, pre));
                            (!checks.is_empty() && !straight.iter().any(may_fail)).then_some((straight, checks))
                        };
                        copy(&pre)
                            .map(|(s, c)| (s, c, false))
                            .or_else(|| (!pre.is_empty()).then(|| copy(&[])).flatten().map(|(s, c)| (s, c, true)))
                    }
                    None => None,
                };
                match guard {
                    Some((straight, ranges, lifted)) => {
                        *changed = true;
                        // ok = a >= 0 && m >= 0 && n <= m - a (no overflow
                        // when both are >= 0), for every range (a, m).
                        let mut test = Vec::new();
                        let let_ = |rhs: Rhs, ty: ksc_ir::Type, test: &mut Block, vars: &mut Vec<VarInfo>| {
                            let (s, v) = fresh_let(vars, rhs, ty);
                            test.push(s);
                            v
                        };
                        let mut ok = None;
                        let and = |this: Op, ok: &mut Option<Op>, test: &mut Block, vars: &mut Vec<VarInfo>| {
                            *ok = Some(match ok.take() {
                                None => this,
                                Some(before) => {
                                    let_(Rhs::Bin(BinOp::And, before, this), ksc_ir::Type::Bool, test, vars)
                                }
                            });
                        };
                        for (a, m) in ranges {
                            let a = match a {
                                Offset::Op(a) => a,
                                Offset::Scaled(b, k) => {
                                    // 0 <= b <= MAX / k: k * b does not overflow.
                                    let b_ok = let_(
                                        Rhs::Bin(BinOp::IGe, b.clone(), Op::Int(0)),
                                        ksc_ir::Type::Bool,
                                        &mut test,
                                        vars,
                                    );
                                    let small = let_(
                                        Rhs::Bin(BinOp::ILe, b.clone(), Op::Int(i64::MAX / k)),
                                        ksc_ir::Type::Bool,
                                        &mut test,
                                        vars,
                                    );
                                    and(b_ok, &mut ok, &mut test, vars);
                                    and(small, &mut ok, &mut test, vars);
                                    let_(
                                        Rhs::IChecked(IOp::Mul, Op::Int(k), b, SiteId::UNCHECKED),
                                        ksc_ir::Type::Integer,
                                        &mut test,
                                        vars,
                                    )
                                }
                            };
                            let a_ok =
                                let_(Rhs::Bin(BinOp::IGe, a.clone(), Op::Int(0)), ksc_ir::Type::Bool, &mut test, vars);
                            let m_ok =
                                let_(Rhs::Bin(BinOp::IGe, m.clone(), Op::Int(0)), ksc_ir::Type::Bool, &mut test, vars);
                            let room = let_(
                                Rhs::IChecked(IOp::Sub, m.clone(), a.clone(), SiteId::UNCHECKED),
                                ksc_ir::Type::Integer,
                                &mut test,
                                vars,
                            );
                            let fits = let_(Rhs::Bin(BinOp::ILe, n.clone(), room), ksc_ir::Type::Bool, &mut test, vars);
                            let both = let_(Rhs::Bin(BinOp::And, a_ok, m_ok), ksc_ir::Type::Bool, &mut test, vars);
                            let this = let_(Rhs::Bin(BinOp::And, both, fits), ksc_ir::Type::Bool, &mut test, vars);
                            and(this, &mut ok, &mut test, vars);
                        }
                        let ok = ok.expect("a range to test");
                        let (pre, lifted_pre) = if lifted { (Vec::new(), pre) } else { (pre, Vec::new()) };
                        let fast =
                            renamed(Stmt::For { idx, n: n.clone(), pre: pre.clone(), body: straight, reset }, vars);
                        let versioned = Stmt::If {
                            cond: ok,
                            then: vec![fast],
                            els: vec![Stmt::For { idx, n: n.clone(), pre, body, reset }],
                        };
                        test.push(versioned);
                        after_preheader(&n, lifted_pre, test, vars, &mut out);
                    }
                    None => out.push(Stmt::For { idx, n, pre, body, reset }),
                }
            }
            Stmt::If { cond, then, els } => {
                let then = version_block(then, vars, changed);
                let els = version_block(els, vars, changed);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// In a loop body over `idx`: a statement `if (x >= 0 && x < m) { .. }`
/// with no else (at the top of the body or in its branches), where `x = a +
/// idx` (or `idx`) is defined next to it and `a`, `m` are defined neither in
/// the body nor in the loop's preheader `pre` (the test goes before the
/// loop): the body with that statement replaced by its branch, `a` and `m`.
fn range_guard(body: &Block, pre: &[Stmt], idx: VarId) -> Option<(Block, Op, Op)> {
    strip_guard(body, idx, &variant(body, pre))
}

fn strip_guard(block: &Block, idx: VarId, inside: &FxHashSet<VarId>) -> Option<(Block, Op, Op)> {
    let r = Reads::new(block, idx, inside);
    let guard = |s: &Stmt| -> Option<(Op, Op)> {
        let Stmt::If { cond, els, .. } = s else { return None };
        if !els.is_empty() {
            return None;
        }
        let (x, m) = r.range_test(cond)?;
        match r.offset(x)? {
            (Offset::Op(a), _) => Some((a, m.clone())),
            (Offset::Scaled(..), _) => None,
        }
    };
    for (at, s) in block.iter().enumerate() {
        if let Some((a, m)) = guard(s) {
            let Stmt::If { then, .. } = s else { unreachable!("the guard is an if") };
            let mut out = block[..at].to_vec();
            out.extend(then.iter().cloned());
            out.extend(block[at + 1..].iter().cloned());
            return Some((out, a, m));
        }
    }
    // In a branch.
    for (at, s) in block.iter().enumerate() {
        let Stmt::If { cond, then, els } = s else { continue };
        let (then, els, a, m) = match (strip_guard(then, idx, inside), strip_guard(els, idx, inside)) {
            (Some((t, a, m)), _) => (t, els.clone(), a, m),
            (None, Some((e, a, m))) => (then.clone(), e, a, m),
            (None, None) => continue,
        };
        let mut out = block.clone();
        out[at] = Stmt::If { cond: cond.clone(), then, els };
        return Some((out, a, m));
    }
    None
}

/// In a loop body over `idx` (without a preheader): a check `x <= m`
/// directly in it (a `$concatN`'s "more elements than its size", once its
/// counter is read as `idx + k0`: `scalar-small-tensors`), where `x = idx
/// + x0` through lets adding constants, `x0 >= 1`, and `m` is defined
/// neither in the body nor assigned in it: it holds in every iteration
/// when `n <= m - (x0 - 1)` (and `m >= 0`), the test of a range guard
/// with `a = x0 - 1`. The body without the check, a and m.
fn bound_check(body: &Block, idx: VarId) -> Option<(Block, Op, Op)> {
    let inside = variant(body, &[]);
    let defs = lets_of(body);
    // x as idx + x0.
    let offset = |x: &Op| -> Option<i64> {
        let mut x = x.clone();
        let mut x0: i64 = 0;
        loop {
            let Op::Var(v) = &x else { return None };
            if *v == idx {
                return Some(x0);
            }
            match defs.get(v)? {
                Rhs::Bin(BinOp::IAddNoCheck, y, Op::Int(d)) | Rhs::Bin(BinOp::IAddNoCheck, Op::Int(d), y) => {
                    x0 = x0.checked_add(*d)?;
                    x = y.clone();
                }
                _ => return None,
            }
        }
    };
    let (at, x0, m) = body.iter().enumerate().find_map(|(at, s)| {
        let Stmt::Check { cond: Op::Var(c), .. } = s else { return None };
        let Some(Rhs::Bin(BinOp::ILe, x, m)) = defs.get(c) else { return None };
        let x0 = offset(x).filter(|&x0| x0 >= 1)?;
        (!matches!(m, Op::Var(v) if inside.contains(v) || *v == idx)).then(|| (at, x0, m.clone()))
    })?;
    let mut out = body.clone();
    out.remove(at);
    Some((out, Op::Int(x0 - 1), m))
}

/// What the guards of a loop body over `idx` are read from: the body's
/// definitions, and `inside` (what is not invariant: [`variant`]).
struct Reads<'b> {
    defs: FxHashMap<VarId, &'b Rhs>,
    idx: VarId,
    inside: &'b FxHashSet<VarId>,
}

impl<'b> Reads<'b> {
    fn new(body: &'b [Stmt], idx: VarId, inside: &'b FxHashSet<VarId>) -> Reads<'b> {
        Reads { defs: lets_of(body), idx, inside }
    }

    fn invariant(&self, o: &Op) -> bool {
        match o {
            Op::Var(v) => !self.inside.contains(v) && *v != self.idx,
            _ => true,
        }
    }

    fn def(&self, o: &Op) -> Option<&'b Rhs> {
        match o {
            Op::Var(v) => self.defs.get(v).copied(),
            _ => None,
        }
    }

    /// `x >= 0 && x < m` with `m` invariant: x and m.
    fn range_test(&self, cond: &Op) -> Option<(&'b Op, &'b Op)> {
        let Rhs::Bin(BinOp::And, p, q) = self.def(cond)? else { return None };
        let (Rhs::Bin(BinOp::IGe, x, Op::Int(0)), Rhs::Bin(BinOp::ILt, x2, m)) = (self.def(p)?, self.def(q)?) else {
            return None;
        };
        (x == x2 && self.invariant(m)).then_some((x, m))
    }

    /// x as `idx + a` (or `idx`): a, and the variables of its checked add
    /// and (`Offset::Scaled`) multiplication, which cannot overflow in range.
    fn offset(&self, x: &Op) -> Option<(Offset, Vec<VarId>)> {
        let Op::Var(v) = x else { return None };
        if *v == self.idx {
            return Some((Offset::Op(Op::Int(0)), Vec::new()));
        }
        let (a, checked) = match self.def(x)? {
            Rhs::IChecked(IOp::Add, a, Op::Var(i), _) | Rhs::IChecked(IOp::Add, Op::Var(i), a, _) if *i == self.idx => {
                (a, true)
            }
            Rhs::Bin(BinOp::IAddNoCheck, a, Op::Var(i)) | Rhs::Bin(BinOp::IAddNoCheck, Op::Var(i), a)
                if *i == self.idx =>
            {
                (a, false)
            }
            _ => return None,
        };
        let mut unchecked: Vec<VarId> = checked.then_some(*v).into_iter().collect();
        if self.invariant(a) {
            return Some((Offset::Op(a.clone()), unchecked));
        }
        // k * b computed in the body, with an overflow check.
        let Op::Var(w) = a else { return None };
        match self.def(a)? {
            Rhs::IChecked(IOp::Mul, Op::Int(k), b, _) | Rhs::IChecked(IOp::Mul, b, Op::Int(k), _)
                if *k >= 1 && self.invariant(b) =>
            {
                unchecked.push(*w);
                Some((Offset::Scaled(b.clone(), *k), unchecked))
            }
            _ => None,
        }
    }
}

/// The index checks at the top of a loop body over `idx` that hold in
/// every iteration when ranges hold: `check (idx < m)` and `check (x >= 0
/// && x < m)` with `x = idx + a` (or `idx`), `a` and `m` not in `inside`
/// (invariant). The body without them, with each such `x` added without
/// an overflow check (in range it cannot overflow: `x < m`), and the
/// ranges `(a, m)` (`(0, m)` for `idx < m`).
fn strip_index_checks(body: Block, idx: VarId, inside: &FxHashSet<VarId>) -> (Block, Vec<(Offset, Op)>) {
    let r = Reads::new(&body, idx, inside);
    let range = |cond: &Op| -> Option<(Offset, Op, Vec<VarId>)> {
        if let Some(Rhs::Bin(BinOp::ILt, Op::Var(i), m)) = r.def(cond) {
            return (*i == idx && r.invariant(m)).then(|| (Offset::Op(Op::Int(0)), m.clone(), Vec::new()));
        }
        let (x, m) = r.range_test(cond)?;
        let (a, unchecked) = r.offset(x)?;
        Some((a, m.clone(), unchecked))
    };
    let mut ranges = Vec::new();
    let mut unchecked_adds = FxHashSet::default();
    let mut dropped = FxHashSet::default();
    for (k, s) in body.iter().enumerate() {
        if let Stmt::Check { cond, .. } = s {
            if let Some((a, m, add)) = range(cond) {
                ranges.push((a, m));
                unchecked_adds.extend(add);
                dropped.insert(k);
            }
        }
    }
    let mut out: Block = body.into_iter().enumerate().filter(|(k, _)| !dropped.contains(k)).map(|(_, s)| s).collect();
    // In range (the test passed) these cannot overflow.
    for s in &mut out {
        if let Stmt::Let(v, rhs) = s {
            if unchecked_adds.contains(v) {
                match rhs {
                    Rhs::IChecked(IOp::Add, a, b, _) => *rhs = Rhs::Bin(BinOp::IAddNoCheck, a.clone(), b.clone()),
                    Rhs::IChecked(IOp::Mul, _, _, site) => *site = SiteId::UNCHECKED,
                    _ => {}
                }
            }
        }
    }
    (out, ranges)
}
