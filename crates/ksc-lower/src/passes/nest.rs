//! Versioning of a checked build's loop nests (`version-checked-nests`).
//!
//! `version-range-guards` versions innermost loops. A nest whose inner
//! loop reads the elements of a vector of vectors (HT's skinning: for
//! each vertex v, a sum over the bones b of `transforms[b][k] * x_v`,
//! k < 12, weighted by `weights[nb v + b]`) checks, in its inner loop,
//! sizes that change with b (`k < size transforms[b]`), and in its outer
//! loop the vertex's coordinates (`3 v + j < size base_positions`, with
//! overflow-checked products): no copy of the inner loop is free of checks,
//! and the outer loop, with checks in it, is not the loop nest the
//! unchecked build interchanges and vectorises. HT's objective took 2.1
//! times the unchecked build's time; versioned, the same time (its
//! Jacobian, whose nests have other checks, is unchanged).
//!
//! Every check of such a nest holds in every iteration when a test made
//! once before the nest does: the nest becomes `if (test) { the nest
//! without its checks } else { the nest }` (the copy's variables renamed).
//! What the test covers, each statement of the nest that may fail:
//!
//! - a check of a condition computed outside the nest: the condition;
//! - a check `x < m` or `x >= 0 && x < m`, m computed outside the nest,
//!   with x an affine form of the loop indices: a sum of constants,
//!   variables from outside the nest, and loop indices, each multiplied
//!   by a constant and at most one variable from outside (all of them
//!   tested >= 0): the largest value x takes over the box of the loops'
//!   ranges is less than m (computed with saturating products, each addend
//!   tested below 2^60 and at most 8 of them, so their sum cannot
//!   overflow);
//! - checked additions and products with such affine values: in range
//!   they cannot overflow (the same bound), so the copy has them
//!   unchecked;
//! - a check `k < size (arr[j])`, k a constant, arr from outside the
//!   nest, j the index of a loop of the nest over `size arr`: k is less
//!   than the least size of arr's elements, computed by a loop before the
//!   test.
//!
//! Anything else that may fail (a call, a division, a negation with a
//! site, a check of another form) leaves the nest as it is. When the test
//! fails, the nest runs with its checks and fails where it did. The outer
//! loop's preheader (invariant values and checks, run once before the
//! first iteration) stays as it is in both versions; the test reads none
//! of its values. Only nests of two levels (an outer loop whose inner
//! loops, in its body or its branches, are innermost), of at most
//! [`NEST_STMTS`] statements (the nest is copied).

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::*;
use crate::visit::{count_stmts, defined_in, fresh_let, nested_blocks, renamed, rewrite_loops, walk};

/// The `version-checked-nests` pass.
pub struct VersionCheckedNests;

impl Pass<Func, LoopCx<'_>> for VersionCheckedNests {
    fn name(&self) -> &'static str {
        "version-checked-nests"
    }

    /// Whether a nest was versioned.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        let mut changed = false;
        let vars = &mut f.vars;
        // Innermost first: a nest of three levels has its inner two
        // versioned, and is then no nest of two levels itself.
        f.body = rewrite_loops(std::mem::take(&mut f.body), &mut |s| match Nest::plan(&s, vars) {
            Some(test) => {
                changed = true;
                test.version(s, vars)
            }
            None => vec![s],
        });
        if changed {
            // The conditions only the copies' checks read.
            super::dce::dce(f, cx.effectful);
        }
        changed
    }
}

/// The most statements of a nest the pass copies.
const NEST_STMTS: usize = 400;

/// The most addends of an affine bound (each below 2^60: their sum fits).
const MAX_ADDENDS: usize = 8;

/// A factor of an affine form: a non-negative constant times at most one
/// variable from outside the nest.
#[derive(Clone, Debug, PartialEq)]
struct Coef {
    k: i64,
    var: Option<VarId>,
}

/// `Σ coef * (1, or a loop index)`: constants and loop terms.
#[derive(Clone, Debug, Default, PartialEq)]
struct Affine {
    terms: Vec<(Coef, Option<VarId>)>,
}

/// What the test before a nest is made of.
#[derive(Default)]
struct Test {
    /// Conditions computed outside the nest.
    conds: Vec<Op>,
    /// (affine x, m): the largest x is less than m (m None: just fits).
    bounds: Vec<(Affine, Option<Op>)>,
    /// (k, arr, loop bound): k is less than the least size of arr's
    /// elements.
    sizes: Vec<(i64, Op, Op)>,
    /// The loops of the nest: index and trip count.
    loops: FxHashMap<VarId, Op>,
}

/// The analysis of one nest.
struct Nest<'v> {
    /// The function's variables.
    vars: &'v [VarInfo],
    /// The nest's SSA definitions.
    defs: FxHashMap<VarId, Rhs>,
    /// What the nest defines or assigns.
    inside: FxHashSet<VarId>,
    /// The loops: index and trip count.
    loops: FxHashMap<VarId, Op>,
}

impl Nest<'_> {
    /// The test that frees the nest `s` of its checks, if every statement
    /// that may fail is covered.
    fn plan(s: &Stmt, vars: &[VarInfo]) -> Option<Test> {
        let Stmt::For { idx, n, body, .. } = s else { return None };
        if count_stmts(body) > NEST_STMTS {
            return None;
        }
        // The inner loops, in the body or its branches: innermost.
        fn inner(b: &Block, loops: &mut FxHashMap<VarId, Op>) -> bool {
            b.iter().all(|s| match s {
                Stmt::For { idx, n, pre, body, .. } => {
                    let mut deeper = false;
                    walk(pre, &mut |s| deeper |= matches!(s, Stmt::For { .. }));
                    walk(body, &mut |s| deeper |= matches!(s, Stmt::For { .. }));
                    loops.insert(*idx, n.clone());
                    !deeper
                }
                Stmt::If { then, els, .. } => inner(then, loops) && inner(els, loops),
                _ => true,
            })
        }
        let mut loops = FxHashMap::default();
        if !inner(body, &mut loops) || loops.is_empty() {
            return None;
        }
        loops.insert(*idx, n.clone());
        let nest = std::slice::from_ref(s);
        let mut inside = defined_in(nest);
        let mut defs = FxHashMap::default();
        walk(nest, &mut |s| match s {
            Stmt::Let(v, r) => {
                defs.insert(*v, r.clone());
            }
            Stmt::Set(v, _) => {
                inside.insert(*v);
            }
            _ => {}
        });
        // Loop trip counts come from outside the nest.
        if loops.values().any(|n| matches!(n, Op::Var(v) if inside.contains(v))) {
            return None;
        }
        let me = Nest { defs, inside, loops, vars };
        let mut test = Test::default();
        let mut ok = true;
        let mut checks = 0;
        // (The outer loop's preheader runs as it is in both versions.)
        walk(body, &mut |s| {
            if !ok {
                return;
            }
            match s {
                Stmt::Check { cond, .. } => {
                    checks += 1;
                    ok = me.cover(cond, &mut test);
                }
                Stmt::Let(v, Rhs::IChecked(IOp::Add | IOp::Mul, _, _, site)) if *site != SiteId::UNCHECKED => {
                    match me.affine(&Op::Var(*v)) {
                        Some(a) => test.bounds.push((a, None)),
                        None => ok = false,
                    }
                }
                Stmt::Let(_, r) if r.can_fail() => ok = false,
                Stmt::Fail { .. } | Stmt::Accum { .. } | Stmt::TailCall(_) | Stmt::Return(_) => ok = false,
                _ => {}
            }
        });
        test.loops = me.loops;
        (ok && checks > 0).then_some(test)
    }

    fn outside(&self, o: &Op) -> bool {
        match o {
            Op::Var(v) => !self.inside.contains(v),
            _ => true,
        }
    }

    /// Adds to `test` what makes the check of `cond` hold everywhere in
    /// the nest; false if it cannot.
    fn cover(&self, cond: &Op, test: &mut Test) -> bool {
        if self.outside(cond) {
            test.conds.push(cond.clone());
            return true;
        }
        let Op::Var(c) = cond else { return false };
        match self.defs.get(c) {
            Some(Rhs::Bin(BinOp::And, a, b)) => self.cover(a, test) && self.cover(b, test),
            // x >= 0: every part of x is (the test checks the variables).
            Some(Rhs::Bin(BinOp::IGe, x, Op::Int(0))) => match self.affine(x) {
                Some(a) => {
                    test.bounds.push((a, None));
                    true
                }
                None => false,
            },
            Some(Rhs::Bin(BinOp::ILt, Op::Int(k), d)) => self.cover_size(*k, d, test),
            Some(Rhs::Bin(BinOp::ILt, x, m)) if self.outside(m) => match self.affine(x) {
                Some(a) => {
                    test.bounds.push((a, Some(m.clone())));
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// `k < d` with d = `size (arr[j])`, j a loop index of the nest over
    /// `size arr`.
    fn cover_size(&self, k: i64, d: &Op, test: &mut Test) -> bool {
        let Op::Var(d) = d else { return false };
        let Some(Rhs::Dim { arr: Op::Var(t), dim: 0 }) = self.defs.get(d) else { return false };
        let Some(Rhs::Load { arr, idx: Op::Var(j) }) = self.defs.get(t) else { return false };
        let Some(n) = self.loops.get(j) else { return false };
        // A vector (of vectors): its loads' flat indices are its elements'.
        let Op::Var(a) = arr else { return false };
        if !self.outside(arr) || !matches!(self.vars[a.0 as usize].ty, Type::Tensor(1, _)) {
            return false;
        }
        test.sizes.push((k, arr.clone(), n.clone()));
        true
    }

    /// The affine form of `x` (see the module), if it has one.
    fn affine(&self, x: &Op) -> Option<Affine> {
        let one = |var| Coef { k: 1, var };
        match x {
            Op::Int(k) if *k >= 0 => Some(Affine { terms: vec![(Coef { k: *k, var: None }, None)] }),
            Op::Var(v) if self.loops.contains_key(v) => Some(Affine { terms: vec![(one(None), Some(*v))] }),
            Op::Var(v) if !self.inside.contains(v) => Some(Affine { terms: vec![(one(Some(*v)), None)] }),
            Op::Var(v) => match self.defs.get(v)? {
                Rhs::IChecked(IOp::Add, a, b, _) | Rhs::Bin(BinOp::IAddNoCheck, a, b) => {
                    let (mut a, b) = (self.affine(a)?, self.affine(b)?);
                    a.terms.extend(b.terms);
                    (a.terms.len() <= MAX_ADDENDS).then_some(a)
                }
                Rhs::IChecked(IOp::Mul, a, b, _) | Rhs::Bin(BinOp::IMulNoCheck, a, b) => {
                    // A factor: a constant or a variable from outside.
                    let factor = |o: &Op| match o {
                        Op::Int(k) if *k >= 0 => Some(Coef { k: *k, var: None }),
                        Op::Var(v) if !self.inside.contains(v) && !self.loops.contains_key(v) => Some(one(Some(*v))),
                        _ => None,
                    };
                    let (c, other) = match (factor(a), factor(b)) {
                        (Some(c), _) => (c, b),
                        (None, Some(c)) => (c, a),
                        (None, None) => return None,
                    };
                    let mut out = self.affine(other)?;
                    for (coef, _) in &mut out.terms {
                        coef.k = coef.k.checked_mul(c.k)?;
                        coef.var = match (coef.var, c.var) {
                            (v, None) | (None, v) => v,
                            (Some(_), Some(_)) => return None,
                        };
                    }
                    Some(out)
                }
                Rhs::Copy(o) => self.affine(o),
                _ => None,
            },
            _ => None,
        }
    }
}

impl Test {
    /// The test and the two versions of `nest`. (A value or condition the
    /// test needs twice is made once: `TestBuilder`.)
    fn version(self, nest: Stmt, vars: &mut Vec<VarInfo>) -> Block {
        let mut b = TestBuilder { vars, out: Vec::new(), ok: None, made: FxHashMap::default(), conds: Vec::new() };
        for c in &self.conds {
            b.and(c.clone());
        }
        // The variables of the affine forms are >= 0.
        for (a, _) in &self.bounds {
            for v in a.terms.iter().filter_map(|(c, _)| c.var) {
                let ge = b.let_(Rhs::Bin(BinOp::IGe, Op::Var(v), Op::Int(0)), Type::Bool);
                b.and(ge);
            }
        }
        for (a, m) in &self.bounds {
            let max = b.largest(a, &self.loops);
            if let Some(m) = m {
                let lt = b.let_(Rhs::Bin(BinOp::ILt, max, m.clone()), Type::Bool);
                b.and(lt);
            }
        }
        // One loop per vector of vectors, for the largest constant.
        let mut sizes: Vec<(i64, Op, Op)> = Vec::new();
        for (k, arr, n) in self.sizes {
            match sizes.iter_mut().find(|(_, a, m)| *a == arr && *m == n) {
                Some(entry) => entry.0 = entry.0.max(k),
                None => sizes.push((k, arr, n)),
            }
        }
        for (k, arr, n) in &sizes {
            let least = b.least_size(arr, n);
            let lt = b.let_(Rhs::Bin(BinOp::ILt, Op::Int(*k), least), Type::Bool);
            b.and(lt);
        }
        // (Checks of constants in range need no test.)
        let ok = b.ok.take().unwrap_or(Op::Bool(true));
        let fast = renamed(unchecked(nest.clone()), b.vars);
        b.out.push(Stmt::If { cond: ok, then: vec![fast], els: vec![nest] });
        b.out
    }
}

/// The statements of the test, and its conjunction so far.
struct TestBuilder<'v> {
    vars: &'v mut Vec<VarInfo>,
    out: Block,
    ok: Option<Op>,
    /// The values computed so far, by their definition (each once).
    made: FxHashMap<Rhs, Op>,
    /// The conditions in the conjunction.
    conds: Vec<Op>,
}

impl TestBuilder<'_> {
    fn let_(&mut self, rhs: Rhs, ty: Type) -> Op {
        if let Some(v) = self.made.get(&rhs) {
            return v.clone();
        }
        let (s, v) = fresh_let(self.vars, rhs.clone(), ty);
        self.out.push(s);
        self.made.insert(rhs, v.clone());
        v
    }

    fn and(&mut self, c: Op) {
        if self.conds.contains(&c) {
            return;
        }
        self.conds.push(c.clone());
        self.ok = Some(match self.ok.take() {
            None => c,
            Some(before) => self.let_(Rhs::Bin(BinOp::And, before, c), Type::Bool),
        });
    }

    /// The largest value of `a` over the loops' ranges, each addend tested
    /// below 2^60 (so that the sum of at most [`MAX_ADDENDS`] fits).
    fn largest(&mut self, a: &Affine, loops: &FxHashMap<VarId, Op>) -> Op {
        let mut sum: Option<Op> = None;
        for (c, idx) in &a.terms {
            let mut addend = Op::Int(c.k);
            // (A product by 1 is its other factor.)
            let times = |b: &mut Self, a: Op, x: Op| match a {
                Op::Int(1) => x,
                a => b.let_(Rhs::Bin(BinOp::IMulSat, a, x), Type::Integer),
            };
            if let Some(v) = c.var {
                addend = times(self, addend, Op::Var(v));
            }
            if let Some(i) = idx {
                // The last index, n - 1, or 0 for an empty loop (whose
                // checks never run).
                let n = loops[i].clone();
                let last = self.let_(Rhs::IChecked(IOp::Sub, n, Op::Int(1), SiteId::UNCHECKED), Type::Integer);
                let neg = self.let_(Rhs::Bin(BinOp::ILt, last.clone(), Op::Int(0)), Type::Bool);
                let last = self.let_(Rhs::Select(neg, Op::Int(0), last), Type::Integer);
                addend = times(self, addend, last);
            }
            match addend {
                Op::Int(k) if k < 1 << 60 => {}
                _ => {
                    let small = self.let_(Rhs::Bin(BinOp::ILt, addend.clone(), Op::Int(1 << 60)), Type::Bool);
                    self.and(small);
                }
            }
            sum = Some(match sum {
                None => addend,
                Some(s) => self.let_(Rhs::Bin(BinOp::IAddNoCheck, s, addend), Type::Integer),
            });
        }
        sum.unwrap_or(Op::Int(0))
    }

    /// The least size of the first `n` elements of the vector of vectors
    /// `arr` (of all of them if it has fewer; i64::MAX if none), by a
    /// loop.
    fn least_size(&mut self, arr: &Op, n: &Op) -> Op {
        let size = self.let_(Rhs::Dim { arr: arr.clone(), dim: 0 }, Type::Integer);
        let fewer = self.let_(Rhs::Bin(BinOp::ILt, size.clone(), n.clone()), Type::Bool);
        let count = self.let_(Rhs::Select(fewer, size, n.clone()), Type::Integer);
        let acc = crate::visit::push_var(self.vars, VarInfo { ty: Type::Integer, name: None, mutable: true });
        self.out.push(Stmt::DeclMut(acc, Some(Op::Int(i64::MAX))));
        let j = crate::visit::push_var(self.vars, VarInfo { ty: Type::Integer, name: None, mutable: false });
        let Op::Var(a) = arr else { unreachable!("a vector variable") };
        let Type::Tensor(1, elem) = &self.vars[a.0 as usize].ty else { unreachable!("a vector of vectors") };
        let elem_ty = (**elem).clone();
        let mut body = Vec::new();
        let let_ = |rhs: Rhs, ty: Type, body: &mut Block, vars: &mut Vec<VarInfo>| {
            let (s, v) = fresh_let(vars, rhs, ty);
            body.push(s);
            v
        };
        let e = let_(Rhs::Load { arr: arr.clone(), idx: Op::Var(j) }, elem_ty, &mut body, self.vars);
        let d = let_(Rhs::Dim { arr: e, dim: 0 }, Type::Integer, &mut body, self.vars);
        let lt = let_(Rhs::Bin(BinOp::ILt, d.clone(), Op::Var(acc)), Type::Bool, &mut body, self.vars);
        let least = let_(Rhs::Select(lt, d, Op::Var(acc)), Type::Integer, &mut body, self.vars);
        body.push(Stmt::Set(acc, least));
        self.out.push(Stmt::For { idx: j, n: count, pre: vec![], body, reset: false });
        self.let_(Rhs::Copy(Op::Var(acc)), Type::Integer)
    }
}

/// The nest without its checks, its checked additions and products
/// wrapping (the test before it covers them all). (The conditions only the
/// checks read go with `dce`, after the pass.)
fn unchecked(mut s: Stmt) -> Stmt {
    fn strip(b: &mut Block) {
        b.retain(|s| !matches!(s, Stmt::Check { .. }));
        for s in b.iter_mut() {
            if let Stmt::Let(_, Rhs::IChecked(IOp::Add | IOp::Mul, _, _, site)) = s {
                *site = SiteId::UNCHECKED;
            }
        }
        nested_blocks(b, &mut strip);
    }
    if let Stmt::For { body, .. } = &mut s {
        strip(body);
        // An inner loop's preheader that can no longer fail goes before
        // the loop (computed even when the loop does not run): the
        // nest is then the one `interchange-sums` takes.
        let mut out = Vec::with_capacity(body.len());
        for mut t in std::mem::take(body) {
            if let Stmt::For { pre, .. } = &mut t {
                // Arithmetic only: a load there may be in range only
                // when the loop runs.
                let arithmetic = |r: &Rhs| {
                    matches!(r, Rhs::Copy(_) | Rhs::Bin(..) | Rhs::Select(..) | Rhs::Dim { .. } | Rhs::IChecked(..))
                        && !r.can_fail()
                };
                if pre.iter().all(|p| matches!(p, Stmt::Let(_, r) if arithmetic(r))) {
                    out.append(pre);
                }
            }
            out.push(t);
        }
        *body = out;
    }
    s
}
