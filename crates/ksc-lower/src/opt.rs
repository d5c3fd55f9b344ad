//! Optimisations on the loop IR: values shared between `if`s on the same
//! condition, loop-invariant code motion, common subexpressions, dead code,
//! and the arena's stack discipline.
//!
//! Fusion and scalar replacement of tuples happen earlier, during lowering
//! (`lower.rs`), where the structure of `build` and `tuple` is still visible;
//! hash-consing also runs during lowering (`builder.rs`) and again here,
//! after hoisting has moved computations next to each other.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::ir::*;

/// Runs every optimisation on every function.
pub fn optimize(m: &mut Module) {
    let effectful = effectful_funcs(m);
    let heap_ret: Vec<bool> = m.funcs.iter().map(|f| needs_heap(&f.ret)).collect();
    for f in &mut m.funcs {
        optimize_func(f, &effectful, &heap_ret);
    }
}

/// Runs every optimisation on one function. `effectful[k]`: may the
/// function `FuncId(k)` print? `heap_ret[k]`: does its result hold tensors?
pub fn optimize_func(f: &mut Func, effectful: &[bool], heap_ret: &[bool]) {
    share_guarded(f);
    let written = written_arrays(&f.body);
    let cx = Cx { effectful, written: &written, vars: &f.vars };
    let body = std::mem::take(&mut f.body);
    f.body = licm_block(body, &cx);
    cse(f);
    fold_alloc_dims(f);
    dce(f, effectful);
    fold_alloc_dims(f);
    fuse_consumers(f, effectful);
    forward_packed_tensors(f);
    version_range_guards(f);
    crate::jam::jam_sums(f);
    first_adds_into_zeros(f);
    elide_copy_downs(f);
    crate::reuse::reuse_dead_vectors(f);
    place_arena_scopes(f, heap_ret);
    debug_assert!(scope_error(f).is_none(), "{}: {}", f.name, scope_error(f).unwrap_or_default());
}

/// Which functions print, directly or through calls.
fn effectful_funcs(m: &Module) -> Vec<bool> {
    fn prints(b: &Block) -> bool {
        b.iter().any(|s| match s {
            Stmt::Print { .. } => true,
            Stmt::For { pre, body, .. } => prints(pre) || prints(body),
            Stmt::If { then, els, .. } => prints(then) || prints(els),
            _ => false,
        })
    }
    let mut eff: Vec<bool> = m.funcs.iter().map(|f| prints(&f.body)).collect();
    loop {
        let mut changed = false;
        for (i, f) in m.funcs.iter().enumerate() {
            if !eff[i] && calls(&f.body).iter().any(|c| eff[c.0 as usize]) {
                eff[i] = true;
                changed = true;
            }
        }
        if !changed {
            return eff;
        }
    }
}

fn calls(b: &Block) -> Vec<FuncId> {
    let mut out = Vec::new();
    walk(b, &mut |s| {
        if let Stmt::Let(_, Rhs::Call { func, .. }) = s {
            out.push(*func);
        }
    });
    out
}

/// Calls `f` on every statement, nested ones included.
pub fn walk(b: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in b {
        f(s);
        match s {
            Stmt::For { pre, body, .. } => {
                walk(pre, f);
                walk(body, f);
            }
            Stmt::If { then, els, .. } => {
                walk(then, f);
                walk(els, f);
            }
            _ => {}
        }
    }
}

pub(crate) fn walk_mut(b: &mut [Stmt], f: &mut impl FnMut(&mut Stmt)) {
    for s in b {
        f(s);
        match s {
            Stmt::For { pre, body, .. } => {
                walk_mut(pre, f);
                walk_mut(body, f);
            }
            Stmt::If { then, els, .. } => {
                walk_mut(then, f);
                walk_mut(els, f);
            }
            _ => {}
        }
    }
}

/// Calls `f` on every block directly nested in `b`'s statements (loop
/// preheaders and bodies, branches).
fn nested_blocks(b: &mut Block, f: &mut impl FnMut(&mut Block)) {
    for s in b.iter_mut() {
        match s {
            Stmt::For { pre, body, .. } => {
                f(pre);
                f(body);
            }
            Stmt::If { then, els, .. } => {
                f(then);
                f(els);
            }
            _ => {}
        }
    }
}

/// Tensors written in place (their loads cannot move or be shared).
fn written_arrays(b: &[Stmt]) -> FxHashSet<VarId> {
    let mut out = FxHashSet::default();
    walk(b, &mut |s| match s {
        Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } => {
            out.insert(*a);
        }
        _ => {}
    });
    out
}

/// Every operand a statement reads (not those of nested blocks).
pub fn stmt_operands(s: &Stmt) -> Vec<&Op> {
    match s {
        Stmt::Let(_, r) => r.operands(),
        Stmt::DeclMut(_, o) => o.iter().collect(),
        Stmt::Set(_, o) | Stmt::Return(o) => vec![o],
        Stmt::For { n, .. } => vec![n],
        Stmt::If { cond, .. } => vec![cond],
        Stmt::Store { arr, idx, val } | Stmt::Accum { arr, idx, val, .. } => vec![arr, idx, val],
        Stmt::Check { cond, err, .. } => {
            let mut v = vec![cond];
            v.extend(err_operands(err));
            v
        }
        Stmt::Fail { err, .. } => err_operands(err),
        Stmt::Print { val, .. } => vec![val],
        Stmt::TailCall(args) | Stmt::Keep(args) => args.iter().collect(),
        Stmt::CopyDown { .. } | Stmt::Reset(_) => vec![],
    }
}

fn err_operands(e: &ErrorKind) -> Vec<&Op> {
    match e {
        ErrorKind::IndexOutOfRange { index, size } => index.iter().chain(size).collect(),
        ErrorKind::NegativeSize { size, .. } | ErrorKind::SumbuildEmpty { size } | ErrorKind::TooLarge { size, .. } => {
            size.iter().collect()
        }
        ErrorKind::Sizes { a, b, .. } => a.iter().chain(b).collect(),
        ErrorKind::Diag { rows, cols } => vec![rows, cols],
        ErrorKind::MatVec { rows, cols, n } => vec![rows, cols, n],
        ErrorKind::Assert | ErrorKind::Message(_) => vec![],
    }
}

fn stmt_operands_mut(s: &mut Stmt) -> Vec<&mut Op> {
    match s {
        Stmt::Let(_, r) => r.operands_mut(),
        Stmt::DeclMut(_, o) => o.iter_mut().collect(),
        Stmt::Set(_, o) | Stmt::Return(o) => vec![o],
        Stmt::For { n, .. } => vec![n],
        Stmt::If { cond, .. } => vec![cond],
        Stmt::Store { arr, idx, val } | Stmt::Accum { arr, idx, val, .. } => vec![arr, idx, val],
        Stmt::Check { cond, err, .. } => {
            let mut v = vec![cond];
            v.extend(err.operands_mut());
            v
        }
        Stmt::Fail { err, .. } => err.operands_mut(),
        Stmt::Print { val, .. } => vec![val],
        Stmt::TailCall(args) | Stmt::Keep(args) => args.iter_mut().collect(),
        Stmt::CopyDown { .. } | Stmt::Reset(_) => vec![],
    }
}

/// The variables a block defines (nested blocks included).
pub(crate) fn defined_in(b: &[Stmt]) -> FxHashSet<VarId> {
    let mut out = FxHashSet::default();
    walk(b, &mut |s| match s {
        Stmt::Let(v, _) | Stmt::DeclMut(v, _) => {
            out.insert(*v);
        }
        Stmt::For { idx, .. } => {
            out.insert(*idx);
        }
        _ => {}
    });
    out
}

struct Cx<'a> {
    effectful: &'a [bool],
    written: &'a FxHashSet<VarId>,
    vars: &'a [VarInfo],
}

impl Cx<'_> {
    fn mutable(&self, o: &Op) -> bool {
        matches!(o, Op::Var(v) if self.vars[v.0 as usize].mutable)
    }
}

/// How a statement may be moved out of a loop.
enum Motion {
    /// Pure and cannot fail: may run whether or not the loop does.
    Free,
    /// May fail (a checked operation, a load, a check, a call): may run
    /// once before the loop, only if the loop runs at least once, and only
    /// if nothing observable or failing precedes it in the loop body.
    Guarded,
    Stay,
}

fn motion(s: &Stmt, cx: &Cx) -> Motion {
    match s {
        Stmt::Let(_, r) => match r {
            Rhs::Alloc { .. } | Rhs::DeepCopy(_) | Rhs::Mark | Rhs::TapePush { .. } => Motion::Stay,
            Rhs::Call { func, .. } => {
                if cx.effectful[func.0 as usize] {
                    Motion::Stay
                } else {
                    Motion::Guarded
                }
            }
            Rhs::Load { arr, .. } => match arr {
                Op::Var(a) if cx.written.contains(a) => Motion::Stay,
                _ => Motion::Guarded,
            },
            Rhs::IChecked(_, _, _, site) if *site != SiteId::UNCHECKED => Motion::Guarded,
            Rhs::Un(UnOp::INeg, _, Some(_)) => Motion::Guarded,
            _ => Motion::Free,
        },
        Stmt::Check { .. } => Motion::Guarded,
        _ => Motion::Stay,
    }
}

/// Can this statement fail or have an observable effect (a barrier for
/// guarded hoisting)?
fn is_barrier(s: &Stmt) -> bool {
    match s {
        Stmt::Let(_, r) => r.can_fail() || matches!(r, Rhs::Load { .. }),
        Stmt::Check { .. } | Stmt::Fail { .. } | Stmt::Print { .. } | Stmt::Accum { .. } => true,
        Stmt::For { pre, body, .. } => pre.iter().chain(body).any(is_barrier),
        Stmt::If { then, els, .. } => then.iter().chain(els).any(is_barrier),
        _ => false,
    }
}

/// Loop-invariant code motion, innermost loops first.
fn licm_block(block: Block, cx: &Cx) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let body = licm_block(body, cx);
                let mut inside = defined_in(&body);
                inside.insert(idx);
                let mut free = Vec::new();
                let mut guarded = pre;
                let mut rest = Vec::new();
                let mut barrier = false;
                let mut guarded_defs: FxHashSet<VarId> = FxHashSet::default();
                for s in body {
                    let invariant = stmt_operands(&s).iter().all(|o| match o {
                        Op::Var(v) => !inside.contains(v) && !cx.mutable(o),
                        _ => true,
                    });
                    let after_guarded =
                        stmt_operands(&s).iter().any(|o| matches!(o, Op::Var(v) if guarded_defs.contains(v)));
                    let m = match (invariant, motion(&s, cx)) {
                        (false, _) => Motion::Stay,
                        (true, Motion::Free) if after_guarded => Motion::Guarded,
                        (true, m) => m,
                    };
                    match m {
                        Motion::Free => {
                            if let Stmt::Let(v, _) = &s {
                                inside.remove(v);
                            }
                            free.push(s);
                        }
                        Motion::Guarded if !barrier => {
                            if let Stmt::Let(v, _) = &s {
                                inside.remove(v);
                                guarded_defs.insert(*v);
                            }
                            guarded.push(s);
                        }
                        _ => {
                            barrier |= is_barrier(&s);
                            rest.push(s);
                        }
                    }
                }
                out.extend(free);
                out.push(Stmt::For { idx, n, pre: guarded, body: rest, reset });
            }
            Stmt::If { cond, then, els } => {
                out.push(Stmt::If { cond, then: licm_block(then, cx), els: licm_block(els, cx) });
            }
            s => out.push(s),
        }
    }
    out
}

/// Values shared between branches of `if`s on the same condition. A
/// reverse pass recomputes the primal values of a branch (`if c` in the
/// primal, `if c` again where its cotangents are computed, often in a loop
/// over rows): a pure computation of a branch of a later `if c` equal to
/// one of the same branch of an earlier `if c` that dominates it reads the
/// earlier one's value, which that branch stores in a mutable variable
/// declared before it. (CSE cannot share them: the earlier value is local
/// to its branch.) Only scalars, computations that cannot fail, and
/// operands that are not mutable.
fn share_guarded(f: &mut Func) {
    let mut plan = GuardPlan::default();
    let mut visible: Vec<(VarId, bool, Rhs, VarId)> = Vec::new();
    plan_guarded(&f.body, &f.vars, &mut visible, &mut plan);
    if plan.replace.is_empty() {
        return;
    }
    // A mutable variable for each value read later.
    let mut exports: FxHashMap<VarId, VarId> = FxHashMap::default();
    let mut sources: Vec<VarId> = plan.replace.values().copied().collect();
    sources.sort();
    sources.dedup();
    for v in sources {
        let ty = f.vars[v.0 as usize].ty.clone();
        let name = f.vars[v.0 as usize].name.clone();
        exports.insert(v, VarId(f.vars.len() as u32));
        f.vars.push(VarInfo { ty, name, mutable: true });
    }
    let body = std::mem::take(&mut f.body);
    f.body = rewrite_guarded(body, &f.vars, &plan, &exports);
}

#[derive(Default)]
struct GuardPlan {
    /// A later computation -> the earlier value it reads.
    replace: FxHashMap<VarId, VarId>,
}

/// The zero of a scalar type (the initial value of an export).
fn scalar_zero(t: &ksc_ir::Type) -> Option<Op> {
    match t {
        ksc_ir::Type::Float => Some(Op::Float(0.0)),
        ksc_ir::Type::Integer => Some(Op::Int(0)),
        ksc_ir::Type::Bool => Some(Op::Bool(false)),
        _ => None,
    }
}

/// Finds the shared values: `visible` holds (condition, branch, the
/// computation with operands renamed to the values they share, its value)
/// for the branches of `if`s that dominate the current statement.
fn plan_guarded(block: &Block, vars: &[VarInfo], visible: &mut Vec<(VarId, bool, Rhs, VarId)>, plan: &mut GuardPlan) {
    let depth = visible.len();
    for s in block {
        match s {
            Stmt::For { pre, body, .. } => {
                plan_guarded(pre, vars, visible, plan);
                plan_guarded(body, vars, visible, plan);
            }
            Stmt::If { cond: Op::Var(c), then, els } if !vars[c.0 as usize].mutable => {
                let mut added = Vec::new();
                for (branch, b) in [(true, then), (false, els)] {
                    for t in b {
                        let Stmt::Let(x, rhs) = t else { continue };
                        if scalar_zero(&vars[x.0 as usize].ty).is_none()
                            || !rhs.is_pure()
                            || rhs.can_fail()
                            || matches!(rhs, Rhs::Load { .. } | Rhs::Copy(_))
                            || rhs.operands().iter().any(|o| matches!(o, Op::Var(w) if vars[w.0 as usize].mutable))
                        {
                            continue;
                        }
                        // Operands renamed to the earlier values they read.
                        let mut key = rhs.clone();
                        for o in key.operands_mut() {
                            if let Op::Var(w) = o {
                                if let Some(&e) = plan.replace.get(w) {
                                    *o = Op::Var(e);
                                }
                            }
                        }
                        let earlier = visible
                            .iter()
                            .find(|(c2, b2, k, _)| c2 == c && *b2 == branch && *k == key)
                            .map(|(_, _, _, v)| *v);
                        match earlier {
                            Some(v) => {
                                plan.replace.insert(*x, v);
                            }
                            None => added.push((*c, branch, key, *x)),
                        }
                    }
                    // `if`s nested in the branch see what dominates it.
                    plan_guarded(b, vars, visible, plan);
                }
                visible.extend(added);
            }
            Stmt::If { then, els, .. } => {
                plan_guarded(then, vars, visible, plan);
                plan_guarded(els, vars, visible, plan);
            }
            _ => {}
        }
    }
    visible.truncate(depth);
}

/// Applies the plan: exports declared before their `if` and set after
/// their definition; later computations read them.
fn rewrite_guarded(block: Block, vars: &[VarInfo], plan: &GuardPlan, exports: &FxHashMap<VarId, VarId>) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::Let(x, _) if plan.replace.contains_key(&x) => {
                out.push(Stmt::Let(x, Rhs::Copy(Op::Var(exports[&plan.replace[&x]]))));
            }
            Stmt::Let(x, rhs) => {
                out.push(Stmt::Let(x, rhs));
                if let Some(&m) = exports.get(&x) {
                    out.push(Stmt::Set(m, Op::Var(x)));
                }
            }
            Stmt::For { idx, n, pre, body, reset } => out.push(Stmt::For {
                idx,
                n,
                pre: rewrite_guarded(pre, vars, plan, exports),
                body: rewrite_guarded(body, vars, plan, exports),
                reset,
            }),
            Stmt::If { cond, then, els } => {
                for b in [&then, &els] {
                    for t in b {
                        if let Stmt::Let(x, _) = t {
                            if let Some(&m) = exports.get(x) {
                                let zero = scalar_zero(&vars[x.0 as usize].ty);
                                out.push(Stmt::DeclMut(m, zero));
                            }
                        }
                    }
                }
                let then = rewrite_guarded(then, vars, plan, exports);
                let els = rewrite_guarded(els, vars, plan, exports);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// Common subexpressions: a pure computation equal to one that dominates
/// it is replaced by that one's variable.
fn cse(f: &mut Func) {
    let written = written_arrays(&f.body);
    let mut subst: FxHashMap<VarId, Op> = FxHashMap::default();
    let mut scopes: Vec<FxHashMap<Rhs, VarId>> = vec![FxHashMap::default()];
    let body = std::mem::take(&mut f.body);
    f.body = cse_block(body, &f.vars, &written, &mut subst, &mut scopes);
}

fn cse_block(
    block: Block,
    vars: &[VarInfo],
    written: &FxHashSet<VarId>,
    subst: &mut FxHashMap<VarId, Op>,
    scopes: &mut Vec<FxHashMap<Rhs, VarId>>,
) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for mut s in block {
        for o in stmt_operands_mut(&mut s) {
            if let Op::Var(v) = o {
                if let Some(r) = subst.get(v) {
                    *o = r.clone();
                }
            }
        }
        match s {
            Stmt::Let(v, rhs) => {
                let shareable = rhs.is_pure()
                    && !matches!(&rhs, Rhs::Load { arr: Op::Var(a), .. } if written.contains(a))
                    && rhs.operands().iter().all(|o| !matches!(o, Op::Var(w) if vars[w.0 as usize].mutable));
                if let Rhs::Copy(o) = &rhs {
                    if !matches!(o, Op::Var(w) if vars[w.0 as usize].mutable) {
                        subst.insert(v, o.clone());
                        continue;
                    }
                }
                if shareable {
                    if let Some(&w) = scopes.iter().rev().find_map(|t| t.get(&rhs)) {
                        subst.insert(v, Op::Var(w));
                        continue;
                    }
                    scopes.last_mut().expect("a scope").insert(rhs.clone(), v);
                }
                out.push(Stmt::Let(v, rhs));
            }
            Stmt::For { idx, n, pre, body, reset } => {
                scopes.push(FxHashMap::default());
                let pre = cse_block(pre, vars, written, subst, scopes);
                scopes.push(FxHashMap::default());
                let body = cse_block(body, vars, written, subst, scopes);
                scopes.pop();
                scopes.pop();
                out.push(Stmt::For { idx, n, pre, body, reset });
            }
            Stmt::If { cond, then, els } => {
                scopes.push(FxHashMap::default());
                let then = cse_block(then, vars, written, subst, scopes);
                scopes.pop();
                scopes.push(FxHashMap::default());
                let els = cse_block(els, vars, written, subst, scopes);
                scopes.pop();
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// Dead code, by liveness: a statement is needed if it has an effect
/// (returns, prints, checks, calls an effectful function, writes a tensor it
/// did not allocate, manages the arena) or defines a variable a needed
/// statement reads; a loop or branch is needed if a statement in it is, and
/// then its size or condition is read. The rest goes: unused computations,
/// mutable variables assigned only from themselves (an accumulator whose
/// total nobody reads), tensors allocated and written but never read (a
/// reverse pass whose caller keeps one of its cotangents builds the others
/// so), and variables only copied down.
fn dce(f: &mut Func, effectful: &[bool]) {
    // Fresh tensors: allocated or copied here, so written through no other
    // name (an alias would be made by a statement reading the tensor).
    let mut fresh: FxHashSet<VarId> = FxHashSet::default();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(v, Rhs::Alloc { .. } | Rhs::DeepCopy(_)) = s {
            fresh.insert(*v);
        }
    });
    loop {
        let mut live: FxHashSet<VarId> = FxHashSet::default();
        loop {
            let before = live.len();
            mark_needed(&f.body, &mut live, &fresh, &f.vars, effectful);
            if live.len() == before {
                break;
            }
        }
        let used = |v: &VarId| live.contains(v);
        let before = count_stmts(&f.body);
        let body = std::mem::take(&mut f.body);
        f.body = dce_block(body, &used, &fresh, &f.vars, effectful);
        if count_stmts(&f.body) == before {
            return;
        }
    }
}

/// The variables a statement (not a loop or branch) defines or writes.
fn stmt_defines(s: &Stmt) -> Option<VarId> {
    match s {
        Stmt::Let(v, _) | Stmt::DeclMut(v, _) | Stmt::Set(v, _) => Some(*v),
        Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } => Some(*a),
        _ => None,
    }
}

/// Is the statement (not a loop or branch) needed whatever is live?
fn is_root(s: &Stmt, fresh: &FxHashSet<VarId>, vars: &[VarInfo], effectful: &[bool]) -> bool {
    match s {
        Stmt::Let(_, Rhs::Call { func, .. }) => effectful[func.0 as usize],
        Stmt::Let(..) | Stmt::DeclMut(..) => false,
        Stmt::Set(v, _) => !vars[v.0 as usize].mutable,
        Stmt::Store { arr, .. } | Stmt::Accum { arr, .. } => !matches!(arr, Op::Var(a) if fresh.contains(a)),
        _ => true,
    }
}

/// Marks live the variables that the needed statements of `b` read;
/// returns whether `b` has a needed statement.
fn mark_needed(
    b: &Block,
    live: &mut FxHashSet<VarId>,
    fresh: &FxHashSet<VarId>,
    vars: &[VarInfo],
    effectful: &[bool],
) -> bool {
    let mut any = false;
    for s in b {
        let needed = match s {
            Stmt::For { n, pre, body, .. } => {
                let inner =
                    mark_needed(pre, live, fresh, vars, effectful) | mark_needed(body, live, fresh, vars, effectful);
                if inner {
                    if let Op::Var(v) = n {
                        live.insert(*v);
                    }
                }
                inner
            }
            Stmt::If { cond, then, els } => {
                let inner =
                    mark_needed(then, live, fresh, vars, effectful) | mark_needed(els, live, fresh, vars, effectful);
                if inner {
                    if let Op::Var(v) = cond {
                        live.insert(*v);
                    }
                }
                inner
            }
            _ => {
                let needed = is_root(s, fresh, vars, effectful) || stmt_defines(s).is_some_and(|v| live.contains(&v));
                if needed {
                    for o in stmt_operands(s) {
                        if let Op::Var(v) = o {
                            live.insert(*v);
                        }
                    }
                    match s {
                        Stmt::CopyDown { mark, .. } | Stmt::Reset(mark) => {
                            live.insert(*mark);
                        }
                        _ => {}
                    }
                }
                needed
            }
        };
        any |= needed;
    }
    any
}

pub(crate) fn count_stmts(b: &Block) -> usize {
    let mut n = 0;
    walk(b, &mut |_| n += 1);
    n
}

fn dce_block(
    block: Block,
    used: &dyn Fn(&VarId) -> bool,
    fresh: &FxHashSet<VarId>,
    vars: &[VarInfo],
    effectful: &[bool],
) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::Let(v, rhs) if !used(&v) => {
                let removable = match &rhs {
                    Rhs::Call { func, .. } => !effectful[func.0 as usize],
                    _ => true,
                };
                if !removable {
                    out.push(Stmt::Let(v, rhs));
                }
            }
            Stmt::DeclMut(v, o) => {
                if used(&v) {
                    out.push(Stmt::DeclMut(v, o));
                }
            }
            Stmt::Set(v, o) => {
                if used(&v) || !vars[v.0 as usize].mutable {
                    out.push(Stmt::Set(v, o));
                }
            }
            Stmt::For { idx, n, pre, body, reset } => {
                let pre = dce_block(pre, used, fresh, vars, effectful);
                let body = dce_block(body, used, fresh, vars, effectful);
                if !(pre.is_empty() && body.is_empty()) {
                    out.push(Stmt::For { idx, n, pre, body, reset });
                }
            }
            Stmt::If { cond, then, els } => {
                let then = dce_block(then, used, fresh, vars, effectful);
                let els = dce_block(els, used, fresh, vars, effectful);
                if !(then.is_empty() && els.is_empty()) {
                    out.push(Stmt::If { cond, then, els });
                }
            }
            // A fresh tensor that is never read.
            Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. }
                if fresh.contains(&a) && !used(&a) => {}
            Stmt::CopyDown { mark, mut vars } => {
                vars.retain(|v| used(v));
                out.push(Stmt::CopyDown { mark, vars });
            }
            s => out.push(s),
        }
    }
    out
}

/// Does running this block allocate from the arena?
fn allocates(b: &Block, heap_ret: &[bool]) -> bool {
    let mut a = false;
    walk(b, &mut |s| match s {
        Stmt::Let(_, Rhs::Alloc { .. } | Rhs::Reuse { .. } | Rhs::DeepCopy(_) | Rhs::TapePush { .. }) => a = true,
        Stmt::Let(_, Rhs::Call { func, .. }) if heap_ret[func.0 as usize] => a = true,
        Stmt::Print { .. } => {}
        _ => {}
    });
    a
}

/// Can memory allocated while running this block be reachable after it?
fn escapes(b: &Block, vars: &[VarInfo]) -> bool {
    let local = defined_in(b);
    let mut e = false;
    walk(b, &mut |s| match s {
        // A mutable variable declared inside the block dies with it.
        Stmt::Set(k, _) if local.contains(k) => {}
        Stmt::Store { val: Op::Var(v), .. } | Stmt::Set(_, Op::Var(v)) if needs_heap(&vars[v.0 as usize].ty) => {
            e = true
        }
        Stmt::CopyDown { .. } => e = true,
        // A record written into a tape that may outlive the block.
        Stmt::Let(_, Rhs::TapePush { .. }) => e = true,
        _ => {}
    });
    e
}

/// Does a statement (nested ones included) mention `v`: as an operand, as
/// the variable a `Set` assigns, or as the mark or a variable of a
/// copy-down or reset?
fn mentions(s: &Stmt, v: VarId) -> bool {
    let mut found = false;
    walk(std::slice::from_ref(s), &mut |s| {
        found |= stmt_operands(s).iter().any(|o| **o == Op::Var(v))
            || matches!(s, Stmt::CopyDown { mark, vars } if *mark == v || vars.contains(&v))
            || matches!(s, Stmt::Reset(m) if *m == v)
            || matches!(s, Stmt::Set(k, _) if *k == v);
    });
    found
}

/// The right-hand sides of the lets of a block (not of nested blocks).
pub(crate) fn lets_of(b: &[Stmt]) -> FxHashMap<VarId, &Rhs> {
    b.iter()
        .filter_map(|s| match s {
            Stmt::Let(v, r) => Some((*v, r)),
            _ => None,
        })
        .collect()
}

/// The right-hand sides of a function's SSA definitions.
pub(crate) fn definitions(b: &Block) -> FxHashMap<VarId, Rhs> {
    let mut out = FxHashMap::default();
    walk(b, &mut |s| {
        if let Stmt::Let(v, r) = s {
            out.insert(*v, r.clone());
        }
    });
    out
}

/// `dim t.k` of a tensor `t = alloc [n0, n1, ..]` is `nk` (when `nk` is a
/// number or an immutable variable); of a copy `t = deepcopy u` it is
/// `dim u.k` (for an immutable `u`). So a size check does not keep a
/// tensor alive that nothing else reads (an accumulator copied from a
/// fresh tensor, whose sizes `ts_add` checks).
fn fold_alloc_dims(f: &mut Func) {
    let mut dims: FxHashMap<VarId, Vec<Op>> = FxHashMap::default();
    let mut copies: FxHashMap<VarId, VarId> = FxHashMap::default();
    let vars = &f.vars;
    let immutable = |v: &VarId| !vars[v.0 as usize].mutable;
    walk(&f.body, &mut |s| match s {
        Stmt::Let(v, Rhs::Alloc { dims: d, .. }) => {
            dims.insert(*v, d.clone());
        }
        Stmt::Let(v, Rhs::DeepCopy(Op::Var(u))) if immutable(u) => {
            copies.insert(*v, *u);
        }
        _ => {}
    });
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::Let(_, r @ Rhs::Dim { .. }) = s {
            let Rhs::Dim { arr: Op::Var(a), dim } = r else { return };
            let dim = *dim;
            let mut src = *a;
            while let Some(u) = copies.get(&src) {
                src = *u;
            }
            match dims.get(&src).and_then(|d| d.get(dim)) {
                Some(o) if !matches!(o, Op::Var(v) if !immutable(v)) => *r = Rhs::Copy(o.clone()),
                _ if src != *a => *r = Rhs::Dim { arr: Op::Var(src), dim },
                _ => {}
            }
        }
    });
}

/// The most statements of a loop body that `version_range_guards` copies.
const VERSIONED_BODY: usize = 40;

/// Loop versioning for range guards. Reverse mode adds into a vector at an
/// index that it cannot prove in range (`deltaVec`'s "out of range adds
/// nothing"), so a loop `for i < n { x = a + i; if (x >= 0 && x < m) { .. } }`
/// (a and m invariant) tests every iteration, and the C compiler does not
/// vectorise it. Such a loop becomes `if (a >= 0 && m >= 0 && n <= m - a)
/// { the loop without the test } else { the loop }`: the test is made once,
/// and in range the loop is straight. The copy's variables are renamed.
/// When the preheader computes `a` or `m`, it runs first (under `n > 0`,
/// as it would) and the test after it. Innermost loops, bodies of at most
/// [`VERSIONED_BODY`] statements.
fn version_range_guards(f: &mut Func) {
    let body = std::mem::take(&mut f.body);
    f.body = version_block(body, &mut f.vars);
}

fn version_block(block: Block, vars: &mut Vec<VarInfo>) -> Block {
    let mut out = Vec::with_capacity(block.len());
    for s in block {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let body = version_block(body, vars);
                let pre = version_block(pre, vars);
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
                    None
                };
                match guard {
                    Some(((straight, a, m), lifted)) => {
                        // ok = a >= 0 && m >= 0 && n <= m - a (no overflow when both are >= 0).
                        let mut test = Vec::new();
                        let let_ = |rhs: Rhs, ty: ksc_ir::Type, test: &mut Block, vars: &mut Vec<VarInfo>| {
                            let (s, v) = fresh_let(vars, rhs, ty);
                            test.push(s);
                            v
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
                        let ok = let_(Rhs::Bin(BinOp::And, both, fits), ksc_ir::Type::Bool, &mut test, vars);
                        let (pre, lifted_pre) = if lifted { (Vec::new(), pre) } else { (pre, Vec::new()) };
                        let fast =
                            renamed(Stmt::For { idx, n: n.clone(), pre: pre.clone(), body: straight, reset }, vars);
                        let nonempty = lifted
                            .then(|| fresh_let(vars, Rhs::Bin(BinOp::IGt, n.clone(), Op::Int(0)), ksc_ir::Type::Bool));
                        let versioned =
                            Stmt::If { cond: ok, then: vec![fast], els: vec![Stmt::For { idx, n, pre, body, reset }] };
                        match nonempty {
                            Some((ne, cond)) => {
                                let mut then = lifted_pre;
                                then.extend(test);
                                then.push(versioned);
                                out.push(ne);
                                out.push(Stmt::If { cond, then, els: vec![] });
                            }
                            None => {
                                out.extend(test);
                                out.push(versioned);
                            }
                        }
                    }
                    None => out.push(Stmt::For { idx, n, pre, body, reset }),
                }
            }
            Stmt::If { cond, then, els } => {
                let then = version_block(then, vars);
                let els = version_block(els, vars);
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// `let v = rhs` with a fresh `v` of type `ty`: the statement and `v`.
pub(crate) fn fresh_let(vars: &mut Vec<VarInfo>, rhs: Rhs, ty: ksc_ir::Type) -> (Stmt, Op) {
    vars.push(VarInfo { ty, name: None, mutable: false });
    let v = VarId(vars.len() as u32 - 1);
    (Stmt::Let(v, rhs), Op::Var(v))
}

/// In a loop body over `idx`: a statement `if (x >= 0 && x < m) { .. }`
/// with no else (at the top of the body or in its branches), where `x = a +
/// idx` (or `idx`) is defined next to it and `a`, `m` are defined neither in
/// the body nor in the loop's preheader `pre` (the test goes before the
/// loop): the body with that statement replaced by its branch, `a` and `m`.
fn range_guard(body: &Block, pre: &[Stmt], idx: VarId) -> Option<(Block, Op, Op)> {
    // (And the mutable variables they assign: not invariant either.)
    let mut inside = defined_in(body);
    inside.extend(defined_in(pre));
    walk(body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            inside.insert(*v);
        }
    });
    strip_guard(body, idx, &inside)
}

fn strip_guard(block: &Block, idx: VarId, inside: &FxHashSet<VarId>) -> Option<(Block, Op, Op)> {
    let defs = lets_of(block);
    let invariant = |o: &Op| match o {
        Op::Var(v) => !inside.contains(v) && *v != idx,
        _ => true,
    };
    let def = |o: &Op| match o {
        Op::Var(v) => defs.get(v).copied(),
        _ => None,
    };
    let guard = |s: &Stmt| -> Option<(Op, Op)> {
        let Stmt::If { cond, els, .. } = s else { return None };
        if !els.is_empty() {
            return None;
        }
        let Rhs::Bin(BinOp::And, p, q) = def(cond)? else { return None };
        let (Rhs::Bin(BinOp::IGe, x, Op::Int(0)), Rhs::Bin(BinOp::ILt, x2, m)) = (def(p)?, def(q)?) else {
            return None;
        };
        if x != x2 || !invariant(m) {
            return None;
        }
        let a = match x {
            Op::Var(v) if *v == idx => Op::Int(0),
            _ => match def(x)? {
                Rhs::IChecked(IOp::Add, a, Op::Var(i), _)
                | Rhs::IChecked(IOp::Add, Op::Var(i), a, _)
                | Rhs::Bin(BinOp::IAddNoCheck, a, Op::Var(i))
                | Rhs::Bin(BinOp::IAddNoCheck, Op::Var(i), a)
                    if *i == idx && invariant(a) =>
                {
                    a.clone()
                }
                _ => return None,
            },
        };
        Some((a, m.clone()))
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

/// The statement with every variable it defines renamed to a fresh one.
fn renamed(mut s: Stmt, vars: &mut Vec<VarInfo>) -> Stmt {
    rename_in(std::slice::from_mut(&mut s), vars, FxHashMap::default());
    s
}

/// Renames every variable the statements define to a fresh one, and the
/// variables of `map` (read, not defined, here) as it says; the mapping.
pub(crate) fn rename_in(
    b: &mut [Stmt],
    vars: &mut Vec<VarInfo>,
    mut map: FxHashMap<VarId, VarId>,
) -> FxHashMap<VarId, VarId> {
    for v in defined_in(b) {
        vars.push(vars[v.0 as usize].clone());
        map.insert(v, VarId(vars.len() as u32 - 1));
    }
    let re = |v: &mut VarId| {
        if let Some(w) = map.get(v) {
            *v = *w;
        }
    };
    walk_mut(b, &mut |s| {
        for o in stmt_operands_mut(s) {
            if let Op::Var(v) = o {
                re(v);
            }
        }
        match s {
            Stmt::Let(v, _) | Stmt::DeclMut(v, _) | Stmt::Set(v, _) | Stmt::Reset(v) => re(v),
            Stmt::For { idx, .. } => re(idx),
            Stmt::CopyDown { mark, vars } => {
                re(mark);
                vars.iter_mut().for_each(re);
            }
            _ => {}
        }
    });
    map
}

/// A tensor only packed into a tuple to be added elsewhere is not made.
/// Reverse mode's backward loops make, per iteration, a tuple of cotangent
/// parts (`elem := pack (.., t, ..)`), and the consumer loops that
/// [`fuse_consumers`] moved into that iteration add its parts into the
/// accumulators (`for j < m { acc[j] += load (field elem.k)[j] }`). When
/// `t = alloc [n]` is filled by a loop `for q < n { B; store t[q] = x }`
/// whose body B only computes (no stores, checks, calls or allocations, no
/// loops, reading tensors allocated in the function, never copied, that
/// nothing writes after it, and no mutable variable of its surroundings),
/// and every read
/// of `t` is such a consumer's load (with `m` checked equal to `dim t`), B
/// is copied into each consumer in place of the load and the filling loop
/// goes: `acc[j] += x` gets the same values in the same order, and no
/// per-iteration copy is made. Then the projections are only measured:
/// their size is `n`, and `t` is neither packed (a dummy takes its place in
/// the tuple) nor allocated.
fn forward_packed_tensors(f: &mut Func) {
    let defs = definitions(&f.body);
    let (mut uses, mut sets, mut as_array) = (FxHashMap::default(), FxHashMap::default(), FxHashMap::default());
    walk(&f.body, &mut |s| {
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                *uses.entry(*v).or_insert(0usize) += 1;
            }
        }
        match s {
            Stmt::Set(v, _) => *sets.entry(*v).or_insert(0usize) += 1,
            // (A copy-down reads its variables' tensors.)
            Stmt::CopyDown { vars, .. } => {
                for v in vars {
                    *uses.entry(*v).or_insert(0usize) += 1;
                }
            }
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), .. } | Rhs::Dim { arr: Op::Var(a), .. })
            | Stmt::Store { arr: Op::Var(a), .. }
            | Stmt::Accum { arr: Op::Var(a), .. } => *as_array.entry(*a).or_insert(0usize) += 1,
            _ => {}
        }
    });
    let cx = Packed { defs: &defs, uses: &uses, sets: &sets, as_array: &as_array };
    let mut body = std::mem::take(&mut f.body);
    forward_packed_in(&mut body, &cx, &mut f.vars);
    f.body = body;
}

struct Packed<'a> {
    defs: &'a FxHashMap<VarId, Rhs>,
    uses: &'a FxHashMap<VarId, usize>,
    sets: &'a FxHashMap<VarId, usize>,
    /// Uses as the tensor of a load, `dim`, store or `+=`.
    as_array: &'a FxHashMap<VarId, usize>,
}

impl Packed<'_> {
    fn uses(&self, v: VarId) -> usize {
        self.uses.get(&v).copied().unwrap_or(0)
    }

    /// A tensor allocated in the function and only ever indexed, measured
    /// or written through its own variable (no copy of it could alias it).
    fn private(&self, a: VarId) -> bool {
        matches!(self.defs.get(&a), Some(Rhs::Alloc { .. }))
            && self.uses(a) == self.as_array.get(&a).copied().unwrap_or(0)
    }
}

fn forward_packed_in(block: &mut Block, cx: &Packed, vars: &mut Vec<VarInfo>) {
    nested_blocks(block, &mut |b| forward_packed_in(b, cx, vars));
    let mut p = 0;
    while p < block.len() {
        match packed_plan(block, p, cx, vars) {
            Some(plan) => apply_packed(block, p, plan, vars),
            None => p += 1,
        }
    }
}

/// What [`forward_packed_tensors`] does for the loop at `block[p]`: its
/// index, its body without the store, the value stored, and the field
/// variables whose loads it replaces.
struct PackedPlan {
    q: VarId,
    b: Block,
    x: Op,
    fields: FxHashSet<VarId>,
    /// The tensor, its size, and the tuple it is packed into.
    t: VarId,
    n: Op,
    pk: VarId,
}

fn packed_plan(block: &Block, p: usize, cx: &Packed, vars: &[VarInfo]) -> Option<PackedPlan> {
    let Stmt::For { idx: q, n, pre, body, .. } = &block[p] else { return None };
    let (Stmt::Store { arr: Op::Var(t), idx: Op::Var(qi), val: x }, b) = body.split_last()? else { return None };
    let Some(Rhs::Alloc { dims, .. }) = cx.defs.get(t) else { return None };
    if !pre.is_empty() || qi != q || dims.len() != 1 || dims[0] != *n || cx.uses(*t) != 2 {
        return None;
    }
    // t is packed (once) into a tuple that one mutable variable holds.
    let rest = &block[p + 1..];
    let (pk, k) = rest.iter().find_map(|s| match s {
        Stmt::Let(pk, Rhs::Pack(ops, _)) => ops.iter().position(|o| *o == Op::Var(*t)).map(|k| (*pk, k)),
        _ => None,
    })?;
    let elem = rest.iter().find_map(|s| match s {
        Stmt::Set(e, Op::Var(v)) if *v == pk => Some(*e),
        _ => None,
    })?;
    if cx.uses(pk) != 1 || !vars[elem.0 as usize].mutable || cx.sets.get(&elem) != Some(&1) {
        return None;
    }
    // B only computes, reading fresh tensors nothing writes after the loop.
    let inside = defined_in(b);
    let written_after = written_arrays(rest);
    let mut ok = true;
    walk(b, &mut |s| {
        ok &= match s {
            Stmt::Let(_, r) => {
                let loads_fresh = match r {
                    Rhs::Load { arr: Op::Var(a), .. } => cx.private(*a) && !written_after.contains(a),
                    Rhs::Load { .. } => false,
                    _ => true,
                };
                r.is_pure() && !r.can_fail() && !matches!(r, Rhs::Un(_, _, Some(_))) && loads_fresh
            }
            Stmt::DeclMut(..) | Stmt::Set(..) | Stmt::If { .. } => true,
            _ => false,
        };
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                ok &= !vars[v.0 as usize].mutable || inside.contains(v);
            }
        }
    });
    if !ok {
        return None;
    }
    // The variable is only copied, the copies only projected, and the
    // projections of t's part only measured and loaded by consumers.
    let mut copies = FxHashSet::default();
    walk(rest, &mut |s| {
        if let Stmt::Let(c, Rhs::Copy(Op::Var(e))) = s {
            if *e == elem {
                copies.insert(*c);
            }
        }
    });
    let (mut fields, mut projections) = (FxHashSet::default(), FxHashMap::default());
    walk(rest, &mut |s| {
        if let Stmt::Let(fv, Rhs::Field(Op::Var(c), j)) = s {
            if copies.contains(c) {
                *projections.entry(*c).or_insert(0usize) += 1;
                if *j == k {
                    fields.insert(*fv);
                }
            }
        }
    });
    if cx.uses(elem) != copies.len() || copies.iter().any(|c| cx.uses(*c) != projections.get(c).copied().unwrap_or(0)) {
        return None;
    }
    let dim_of = |d: &Op, fv: VarId| matches!(d, Op::Var(d) if matches!(cx.defs.get(d), Some(Rhs::Dim { arr: Op::Var(a), dim: 0 }) if *a == fv));
    let mut measured = FxHashMap::default();
    let mut consumers = FxHashMap::default();
    walk(rest, &mut |s| match s {
        Stmt::Let(_, Rhs::Dim { arr: Op::Var(a), .. }) if fields.contains(a) => {
            *measured.entry(*a).or_insert(0usize) += 1
        }
        Stmt::For { idx: q2, n: m, body, .. } => {
            for s in body {
                if let Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: Op::Var(i) }) = s {
                    if fields.contains(a) && i == q2 {
                        // m is checked equal to dim a.
                        if checked_equal(rest, m, *a, &dim_of, cx) {
                            *consumers.entry(*a).or_insert(0usize) += 1;
                        }
                    }
                }
            }
        }
        _ => {}
    });
    let all_consumed = fields.iter().all(|a| {
        let c = consumers.get(a).copied().unwrap_or(0);
        c == 1 && cx.uses(*a) == 1 + measured.get(a).copied().unwrap_or(0)
    });
    (!fields.is_empty() && all_consumed).then(|| PackedPlan {
        q: *q,
        b: b.to_vec(),
        x: x.clone(),
        fields,
        t: *t,
        n: n.clone(),
        pk,
    })
}

/// Is there, anywhere in `rest`, a check that `m == dim a`?
fn checked_equal(rest: &[Stmt], m: &Op, a: VarId, dim_of: &dyn Fn(&Op, VarId) -> bool, cx: &Packed) -> bool {
    let mut found = false;
    walk(rest, &mut |c| {
        if let Stmt::Check { cond: Op::Var(cv), .. } = c {
            found |= matches!(cx.defs.get(cv),
                Some(Rhs::Bin(BinOp::IEq, l, r)) if (l == m && dim_of(r, a)) || (r == m && dim_of(l, a)));
        }
    });
    found
}

fn apply_packed(block: &mut Block, p: usize, plan: PackedPlan, vars: &mut Vec<VarInfo>) {
    block.remove(p);
    walk_mut(&mut block[p..], &mut |s| {
        let Stmt::For { idx: q2, body, .. } = s else { return };
        let Some(at) = body.iter().position(|s| {
            matches!(s, Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: Op::Var(i) }) if plan.fields.contains(a) && i == q2)
        }) else {
            return;
        };
        let Stmt::Let(e, _) = body[at] else { return };
        let mut copy = plan.b.clone();
        let map = rename_in(&mut copy, vars, FxHashMap::from_iter([(plan.q, *q2)]));
        let x = match &plan.x {
            Op::Var(v) => Op::Var(map.get(v).copied().unwrap_or(*v)),
            o => o.clone(),
        };
        copy.push(Stmt::Let(e, Rhs::Copy(x)));
        body.splice(at..=at, copy);
    });
    walk_mut(&mut block[p..], &mut |s| match s {
        Stmt::Let(_, r) if matches!(&*r, Rhs::Dim { arr: Op::Var(a), .. } if plan.fields.contains(a)) => {
            *r = Rhs::Copy(plan.n.clone())
        }
        Stmt::Let(v, Rhs::Pack(ops, _)) if *v == plan.pk => {
            for o in ops.iter_mut().filter(|o| **o == Op::Var(plan.t)) {
                *o = Op::Unit;
            }
        }
        _ => {}
    });
    block.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == plan.t));
}

/// Producer-consumer fusion. A loop `for c < n { ..; store t[c] = x }` that
/// fills a vector `t`, followed in the same block by loops `for j < m {
/// .. load t[j] .. }` that read it only at their index (reverse mode's
/// per-component cotangents, added into their accumulators afterwards),
/// becomes one loop: each consumer's body runs in the producer's iteration
/// on `x` (under `if c < m`). When no read of `t` is left, `t` is neither
/// stored nor allocated, and the element's copy-down goes (it is used up in
/// its iteration). Only when `m <= n` is known (`m` is `n`, `min(n, _)`, or
/// checked equal to `n` in between), the producer prints nothing,
/// consumers have no calls, prints or allocations, read nothing computed
/// or assigned after the producer starts, and write accumulators (by store
/// or `+=`, into vectors or their rows) that nothing else in between
/// touches: each element of an accumulator then gets the same additions in
/// the same order.
fn fuse_consumers(f: &mut Func, effectful: &[bool]) {
    let cx = Fusion { defs: definitions(&f.body), effectful };
    let mut body = std::mem::take(&mut f.body);
    fuse_in(&mut body, &cx, &mut f.vars);
    f.body = body;
}

/// What fusion reads of the function and the module.
struct Fusion<'a> {
    defs: FxHashMap<VarId, Rhs>,
    /// May function k print (directly or through calls)?
    effectful: &'a [bool],
}

fn fuse_in(b: &mut Block, cx: &Fusion, vars: &mut Vec<VarInfo>) {
    nested_blocks(b, &mut |inner| fuse_in(inner, cx, vars));
    let mut p = 0;
    while p < b.len() {
        fuse_at(b, p, cx, vars);
        p += 1;
    }
}

/// `o`, or the value it is a copy of (through copies).
fn copy_root(defs: &FxHashMap<VarId, Rhs>, o: &Op) -> Op {
    let mut o = o.clone();
    while let Op::Var(v) = o {
        match defs.get(&v) {
            Some(Rhs::Copy(c)) => o = c.clone(),
            _ => break,
        }
    }
    o
}

/// Removes `let mark = mark` from `body` when nothing else mentions it.
fn drop_unused_mark(body: &mut Block, mark: VarId) {
    if !body.iter().any(|s| mentions(s, mark)) {
        body.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Mark) if *v == mark));
    }
}

/// The bound `c < m` a consumer of `m` iterations needs inside a producer
/// of `n` (`None`: none, `m` is `n`), if `m <= n` is known; `between` are
/// the statements from the producer to the consumer.
fn consumer_guard(m: &Op, n: &Op, defs: &FxHashMap<VarId, Rhs>, between: &[Stmt]) -> Option<Option<Op>> {
    // Through copies (`fold_alloc_dims` leaves `dim`s as copies of sizes).
    if copy_root(defs, m) == copy_root(defs, n) {
        return Some(None);
    }
    let Op::Var(mv) = m else { return None };
    // min(a, b) = if a < b then a else b, with n one of them.
    if let Some(Rhs::Select(Op::Var(c), a, b2)) = defs.get(mv) {
        if matches!(defs.get(c), Some(Rhs::Bin(BinOp::ILt, x, y)) if x == a && y == b2) && (a == n || b2 == n) {
            return Some(Some(m.clone()));
        }
    }
    // Checked equal to n before the consumer.
    let equal = |o: &Op| matches!(o, Op::Var(k) if matches!(defs.get(k), Some(Rhs::Bin(BinOp::IEq, x, y)) if (x == m && y == n) || (x == n && y == m)));
    between.iter().any(|s| matches!(s, Stmt::Check { cond, .. } if equal(cond))).then(|| Some(m.clone()))
}

/// The vectors a consumer writes (by store or `+=`), through the rows it
/// loaded: the variables defined outside it that they come from.
fn written_bases(cb: &Block, defs: &FxHashMap<VarId, Rhs>) -> Option<Vec<VarId>> {
    let inside = defined_in(cb);
    let mut out = Vec::new();
    let mut ok = true;
    walk(cb, &mut |s| {
        if let Stmt::Store { arr, .. } | Stmt::Accum { arr, .. } = s {
            let mut a = arr.clone();
            while let Op::Var(v) = a {
                if !inside.contains(&v) {
                    out.push(v);
                    return;
                }
                match defs.get(&v) {
                    Some(Rhs::Load { arr, .. }) => a = arr.clone(),
                    _ => break,
                }
            }
            ok = false;
        }
    });
    ok.then_some(out)
}

fn fuse_at(b: &mut Block, p: usize, cx: &Fusion, vars: &mut Vec<VarInfo>) {
    let defs = &cx.defs;
    let Stmt::For { idx: c, n, body: pb, .. } = &b[p] else { return };
    let (c, n) = (*c, n.clone());
    // A consumer's failing check must not come before output the producer
    // would have printed.
    let mut prints = false;
    walk(pb, &mut |s| {
        prints |= matches!(s, Stmt::Print { .. })
            || matches!(s, Stmt::Let(_, Rhs::Call { func, .. }) if cx.effectful.get(func.0 as usize).copied().unwrap_or(true));
    });
    if prints {
        return;
    }
    let Some(Stmt::Store { arr: Op::Var(t), idx: Op::Var(ci), val }) = pb.last() else { return };
    let (t, val) = (*t, val.clone());
    if matches!(n, Op::Var(v) if vars[v.0 as usize].mutable) {
        return;
    }
    if *ci != c || pb.iter().filter(|s| mentions(s, t)).count() != 1 {
        return;
    }
    // `t` is made before the producer, `alloc [n]`, and read after it only by
    // consumers (its size, read by `dim`, is `n` after `fold_alloc_dims`).
    if b[..p].iter().any(|s| {
        mentions(s, t) && !matches!(s, Stmt::Let(v, Rhs::Alloc { dims, .. }) if *v == t && *dims == [n.clone()])
    }) || !b[..p].iter().any(|s| matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == t))
    {
        return;
    }
    let mut fused: Vec<(usize, Option<Op>, Block)> = Vec::new();
    let mut written: Vec<VarId> = Vec::new();
    for q in p + 1..b.len() {
        if !mentions(&b[q], t) {
            continue;
        }
        let Stmt::For { idx: j, n: m, pre, body: cb, .. } = &b[q] else { return };
        if !pre.is_empty() {
            return;
        }
        // Reads `t` only at its index, at its top level.
        let reads_ok = cb.iter().all(|s| match s {
            Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx }) if *a == t => *idx == Op::Var(*j),
            s => !mentions(s, t),
        });
        let Some(guard) = consumer_guard(m, &n, defs, &b[p + 1..q]) else { return };
        let Some(bases) = written_bases(cb, defs) else { return };
        let mut simple = true;
        walk(cb, &mut |s| {
            simple &= !matches!(
                s,
                Stmt::Let(
                    _,
                    Rhs::Call { .. } | Rhs::Alloc { .. } | Rhs::DeepCopy(_) | Rhs::TapePush { .. } | Rhs::Mark
                ) | Stmt::Print { .. }
                    | Stmt::Return(_)
                    | Stmt::TailCall(_)
                    | Stmt::CopyDown { .. }
                    | Stmt::Reset(_)
            );
        });
        // What it reads from outside: nothing the producer or the
        // statements in between define or assign, nothing mutable.
        let inside = defined_in(cb);
        let between = defined_in(&b[p..q]);
        let outside = |v: &VarId| !vars[v.0 as usize].mutable && !between.contains(v);
        // Copies made in between of values from before are read as those.
        let alias = |v: &VarId| {
            let r = copy_root(defs, &Op::Var(*v));
            let usable = between.contains(v) && r != Op::Var(*v) && !matches!(&r, Op::Var(w) if !outside(w));
            usable.then_some(r)
        };
        let mut independent = true;
        walk(cb, &mut |s| {
            for o in stmt_operands(s) {
                if let Op::Var(v) = o {
                    if !inside.contains(v) && *v != *j && *v != t {
                        independent &= outside(v) || alias(v).is_some();
                    }
                }
            }
        });
        // Its accumulators: touched by nothing from the producer to it, and
        // by no other consumer.
        let untouched = bases
            .iter()
            .all(|&a| !written.contains(&a) && !b[p..q].iter().any(|s| mentions(s, a)) && !vars[a.0 as usize].mutable);
        // The guard's bound is known before the producer starts.
        let bound_known = match &guard {
            Some(Op::Var(v)) => outside(v),
            _ => true,
        };
        if !reads_ok || !simple || !independent || !untouched || !bound_known {
            return;
        }
        written.extend(bases);
        let mut cb = cb.clone();
        let j = *j;
        walk_mut(&mut cb, &mut |s| {
            if let Stmt::Let(_, r @ Rhs::Load { .. }) = s {
                if matches!(r, Rhs::Load { arr: Op::Var(a), .. } if *a == t) {
                    *r = Rhs::Copy(val.clone());
                }
            }
            for o in stmt_operands_mut(s) {
                if *o == Op::Var(j) {
                    *o = Op::Var(c);
                } else if let Some(a) = match o {
                    Op::Var(v) => alias(v),
                    _ => None,
                } {
                    *o = a;
                }
            }
        });
        fused.push((q, guard, cb));
    }
    if fused.is_empty() {
        return;
    }
    // Consumers written into accumulators nothing else reads in between;
    // move them into the producer, in order.
    let mut extra: Block = Vec::new();
    for (_, guard, cb) in &fused {
        match guard {
            None => extra.extend(cb.iter().cloned()),
            Some(m) => {
                let g = VarId(vars.len() as u32);
                vars.push(VarInfo { ty: ksc_ir::Type::Bool, name: None, mutable: false });
                extra.push(Stmt::Let(g, Rhs::Bin(BinOp::ILt, Op::Var(c), m.clone())));
                extra.push(Stmt::If { cond: Op::Var(g), then: cb.clone(), els: Vec::new() });
            }
        }
    }
    for (q, _, _) in fused.iter().rev() {
        b.remove(*q);
    }
    let left = b[p + 1..].iter().any(|s| mentions(s, t));
    let Stmt::For { body: pb, .. } = &mut b[p] else { return };
    if left {
        pb.extend(extra);
        return;
    }
    // `t` is not read any more: the element is used up in its iteration.
    pb.pop();
    if let Some(cd) =
        pb.iter().position(|s| matches!(s, Stmt::CopyDown { vars, .. } if vars.iter().all(|k| val == Op::Var(*k))))
    {
        let Stmt::CopyDown { mark, .. } = pb.remove(cd) else { unreachable!() };
        drop_unused_mark(pb, mark);
    }
    pb.extend(extra);
    b.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Alloc { .. }) if *v == t));
}

/// A loop iteration that takes a mark and copies the values it keeps down
/// to it, but allocates nothing other than those values (fresh tensors of
/// numbers, allocated once per iteration, outside any nested loop, and
/// tuples of them), has no temporaries to free: the copy-down (two copies
/// of every kept tensor) and the mark are removed. A `build` of vectors
/// each built afresh is the common case.
fn elide_copy_downs(f: &mut Func) {
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::For { body, .. } = s {
            elide_copy_down(body);
        }
    });
}

fn elide_copy_down(body: &mut Block) {
    let Some(cd) = body.iter().position(|s| matches!(s, Stmt::CopyDown { .. })) else { return };
    let Stmt::CopyDown { mark, vars } = &body[cd] else { return };
    let (mark, vars) = (*mark, vars.clone());
    let Some(start) = body[..cd].iter().position(|s| matches!(s, Stmt::Let(v, Rhs::Mark) if *v == mark)) else {
        return;
    };
    let range = &body[start + 1..cd];
    // What the kept variables hold: their values, and the components of
    // the tuples and copies among them.
    let mut parts: FxHashMap<VarId, Vec<VarId>> = FxHashMap::default();
    let mut work: Vec<VarId> = Vec::new();
    let var = |o: &Op| if let Op::Var(w) = o { Some(*w) } else { None };
    walk(range, &mut |s| match s {
        Stmt::Let(v, Rhs::Pack(ops, _)) => {
            parts.insert(*v, ops.iter().filter_map(var).collect());
        }
        Stmt::Let(v, Rhs::Copy(o)) => {
            parts.insert(*v, var(o).into_iter().collect());
        }
        Stmt::DeclMut(k, Some(Op::Var(v))) | Stmt::Set(k, Op::Var(v)) if vars.contains(k) => work.push(*v),
        _ => {}
    });
    let mut kept: FxHashSet<VarId> = FxHashSet::default();
    while let Some(v) = work.pop() {
        if kept.insert(v) {
            work.extend(parts.get(&v).into_iter().flatten());
        }
    }
    fn only_kept(b: &[Stmt], kept: &FxHashSet<VarId>, in_loop: bool) -> bool {
        b.iter().all(|s| match s {
            Stmt::Let(v, Rhs::Alloc { elem, .. }) => !in_loop && kept.contains(v) && !needs_heap(elem),
            Stmt::Let(_, Rhs::DeepCopy(_) | Rhs::TapePush { .. } | Rhs::Call { .. }) => false,
            Stmt::For { pre, body, .. } => only_kept(pre, kept, true) && only_kept(body, kept, true),
            Stmt::If { then, els, .. } => only_kept(then, kept, in_loop) && only_kept(els, kept, in_loop),
            Stmt::CopyDown { .. } | Stmt::Reset(_) => false,
            _ => true,
        })
    }
    if !only_kept(range, &kept, false) {
        return;
    }
    body.remove(cd);
    drop_unused_mark(body, mark);
}

/// The arena's stack discipline: a loop whose iterations allocate only
/// temporaries resets the arena after each iteration; a function whose
/// result needs no heap resets it before returning; a loop by self tail
/// calls resets it (or copies its tensor parameters down) before each
/// iteration.
fn place_arena_scopes(f: &mut Func, heap_ret: &[bool]) {
    let vars = f.vars.clone();
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::For { body, reset, .. } = s {
            *reset = allocates(body, heap_ret) && !escapes(body, &vars);
        }
    });
    if allocates(&f.body, heap_ret) && (!needs_heap(&f.ret) || f.loops) {
        let m = VarId(f.vars.len() as u32);
        f.vars.push(VarInfo { ty: ksc_ir::Type::Integer, name: Some("entry".into()), mutable: false });
        f.entry_mark = Some(m);
    }
}

/// A tensor of Floats just filled with zeros and then added into at
/// constant indices (reverse mode's cotangent of a vector that a tuple's
/// components were read from, one `deltaVec` per component): the first
/// addition at an index loads the zero the fill has just stored, and that
/// load waits for the fill's (vector) stores to retire. It becomes a store
/// of `0.0 + v`, the same value (signed zeros included), with no load.
/// Only a fill right after the allocation counts (so the tensor has no
/// other name), and only statements of its block and the branches of
/// `if`s in it are followed; anything else that mentions the tensor ends
/// the search.
fn first_adds_into_zeros(f: &mut Func) {
    /// `a = alloc [n] of Float; for i < n { a[i] = 0.0 }` (so nothing else
    /// refers to a yet): a.
    fn zero_fill(alloc: &Stmt, fill: &Stmt) -> Option<VarId> {
        let Stmt::Let(a, Rhs::Alloc { dims, elem: ksc_ir::Type::Float }) = alloc else { return None };
        let Stmt::For { idx, n, pre, body, .. } = fill else { return None };
        match &body[..] {
            [Stmt::Store { arr: Op::Var(x), idx: Op::Var(i), val: Op::Float(z) }]
                if x == a
                    && dims[..] == [n.clone()]
                    && pre.is_empty()
                    && i == idx
                    && *z == 0.0
                    && z.is_sign_positive() =>
            {
                Some(*a)
            }
            _ => None,
        }
    }
    /// Follows `b` from statement `from` on, with the constant indices of
    /// `a` written so far; false if something else touches `a`.
    fn follow(b: &mut Block, from: usize, a: VarId, written: &mut FxHashSet<i64>, vars: &mut Vec<VarInfo>) -> bool {
        let mut p = from;
        while p < b.len() {
            match &mut b[p] {
                Stmt::Store { arr: Op::Var(x), idx: Op::Int(k), .. } if *x == a => {
                    written.insert(*k);
                }
                Stmt::Accum { arr: Op::Var(x), idx: Op::Int(k), val, .. } if *x == a && written.insert(*k) => {
                    let (k, val) = (*k, val.clone());
                    let t = VarId(vars.len() as u32);
                    vars.push(VarInfo { ty: ksc_ir::Type::Float, name: None, mutable: false });
                    b[p] = Stmt::Let(t, Rhs::Bin(BinOp::FAdd, Op::Float(0.0), val));
                    b.insert(p + 1, Stmt::Store { arr: Op::Var(a), idx: Op::Int(k), val: Op::Var(t) });
                    p += 1;
                }
                Stmt::Accum { arr: Op::Var(x), idx: Op::Int(_), .. } if *x == a => {}
                Stmt::If { then, els, .. } => {
                    let (mut w1, mut w2) = (written.clone(), written.clone());
                    if !(follow(then, 0, a, &mut w1, vars) && follow(els, 0, a, &mut w2, vars)) {
                        return false;
                    }
                    written.extend(w1);
                    written.extend(w2);
                }
                // Reads see the same values as before.
                Stmt::Let(_, Rhs::Load { .. } | Rhs::Dim { .. }) => {}
                s if mentions(s, a) => return false,
                _ => {}
            }
            p += 1;
        }
        true
    }
    fn block(b: &mut Block, vars: &mut Vec<VarInfo>) {
        let mut p = 0;
        while p < b.len() {
            if let Some(a) = p.checked_sub(1).and_then(|q| zero_fill(&b[q], &b[p])) {
                follow(b, p + 1, a, &mut FxHashSet::default(), vars);
            }
            match &mut b[p] {
                Stmt::For { pre, body, .. } => {
                    block(pre, vars);
                    block(body, vars);
                }
                Stmt::If { then, els, .. } => {
                    block(then, vars);
                    block(els, vars);
                }
                _ => {}
            }
            p += 1;
        }
    }
    block(&mut f.body, &mut f.vars);
}

/// Checks that every variable a statement reads or assigns is in scope: a
/// parameter, or defined before it in its block or an enclosing one (a
/// loop's index and preheader in its body). The first violation, if any.
pub fn scope_error(f: &Func) -> Option<String> {
    /// The variables in scope, in the order they came in (each defined
    /// once), and as a set.
    #[derive(Default)]
    struct Scope {
        order: Vec<VarId>,
        set: FxHashSet<VarId>,
    }
    impl Scope {
        fn push(&mut self, v: VarId) {
            self.order.push(v);
            self.set.insert(v);
        }
        fn truncate(&mut self, d: usize) {
            for v in self.order.drain(d..) {
                self.set.remove(&v);
            }
        }
    }
    /// The statements in `scope`, which gains what they define.
    fn stmts(b: &[Stmt], scope: &mut Scope) -> Option<String> {
        for s in b {
            let mut reads: Vec<VarId> = stmt_operands(s).into_iter().filter_map(Op::var).collect();
            match s {
                Stmt::Set(v, _) | Stmt::Reset(v) => reads.push(*v),
                Stmt::CopyDown { mark, vars } => reads.extend(std::iter::once(mark).chain(vars)),
                _ => {}
            }
            if let Some(v) = reads.iter().find(|v| !scope.set.contains(v)) {
                return Some(format!("%{} read out of its scope", v.0));
            }
            let e = match s {
                Stmt::Let(v, _) | Stmt::DeclMut(v, _) => {
                    scope.push(*v);
                    None
                }
                // The preheader's values are the body's.
                Stmt::For { idx, pre, body, .. } => {
                    let d = scope.order.len();
                    let e = stmts(pre, scope).or_else(|| {
                        scope.push(*idx);
                        stmts(body, scope)
                    });
                    scope.truncate(d);
                    e
                }
                Stmt::If { then, els, .. } => nested(then, scope).or_else(|| nested(els, scope)),
                _ => None,
            };
            if e.is_some() {
                return e;
            }
        }
        None
    }
    fn nested(b: &[Stmt], scope: &mut Scope) -> Option<String> {
        let d = scope.order.len();
        let e = stmts(b, scope);
        scope.truncate(d);
        e
    }
    let mut scope = Scope::default();
    for &v in f.params.iter().chain(&f.entry_mark) {
        scope.push(v);
    }
    stmts(&f.body, &mut scope)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksc_ir::Type;

    fn func(vars: Vec<Type>, body: Block) -> Func {
        Func {
            name: ksc_ir::FunName::plain("f"),
            c_name: "f".into(),
            params: vec![VarId(0), VarId(1)],
            ret: Type::Float,
            vars: vars.into_iter().map(|ty| VarInfo { ty, name: None, mutable: false }).collect(),
            body,
            loops: false,
            entry_mark: None,
        }
    }

    /// `for i < n { t = a * a; u = t + i }` hoists `t`, and a pure value
    /// unused after DCE disappears.
    #[test]
    fn licm_hoists_invariants_and_dce_removes_dead_code() {
        let (a, n, i, t, u, dead) = (VarId(0), VarId(1), VarId(2), VarId(3), VarId(4), VarId(5));
        let body = vec![
            Stmt::Let(dead, Rhs::Bin(BinOp::FAdd, Op::Var(a), Op::Float(1.0))),
            Stmt::For {
                idx: i,
                n: Op::Var(n),
                pre: vec![],
                body: vec![
                    Stmt::Let(t, Rhs::Bin(BinOp::FMul, Op::Var(a), Op::Var(a))),
                    Stmt::Let(u, Rhs::Un(UnOp::ToFloat, Op::Var(i), None)),
                    Stmt::Print { val: Op::Var(u), ty: Type::Float },
                    Stmt::Print { val: Op::Var(t), ty: Type::Float },
                ],
                reset: false,
            },
            Stmt::Return(Op::Float(0.0)),
        ];
        let mut m = Module {
            funcs: vec![func(
                vec![Type::Float, Type::Integer, Type::Integer, Type::Float, Type::Float, Type::Float],
                body,
            )],
            ..Module::default()
        };
        optimize(&mut m);
        let f = &m.funcs[0];
        assert!(matches!(&f.body[0], Stmt::Let(v, _) if *v == t), "{}", m.pretty());
        assert!(matches!(&f.body[1], Stmt::For { body, .. } if body.len() == 3), "{}", m.pretty());
        assert_eq!(f.body.len(), 3, "{}", m.pretty());
    }

    /// `t` filled from a fresh `src`, packed into `elem`, and added into
    /// `acc` by a consumer through a field of a copy of `elem`; `between`
    /// goes after the filling loop.
    fn packed(between: Vec<Stmt>) -> Func {
        let v = |k: u32| Op::Var(VarId(k));
        let vf = Type::Tensor(1, Box::new(Type::Float));
        let pair = Type::Tuple(vec![vf.clone(), Type::Float]);
        let alloc = |k: u32| Stmt::Let(VarId(k), Rhs::Alloc { dims: vec![v(0)], elem: Type::Float });
        let mut body = vec![
            alloc(2),
            Stmt::For {
                idx: VarId(16),
                n: v(0),
                pre: vec![],
                body: vec![Stmt::Store { arr: v(2), idx: v(16), val: Op::Float(1.0) }],
                reset: false,
            },
            alloc(3),
            Stmt::For {
                idx: VarId(4),
                n: v(0),
                pre: vec![],
                body: vec![
                    Stmt::Let(VarId(5), Rhs::Load { arr: v(2), idx: v(4) }),
                    Stmt::Let(VarId(6), Rhs::Bin(BinOp::FMul, v(5), Op::Float(2.0))),
                    Stmt::Store { arr: v(3), idx: v(4), val: v(6) },
                ],
                reset: false,
            },
        ];
        body.extend(between);
        body.extend([
            Stmt::Let(VarId(7), Rhs::Pack(vec![v(3), Op::Float(0.0)], pair.clone())),
            Stmt::DeclMut(VarId(8), None),
            Stmt::Set(VarId(8), v(7)),
            Stmt::Let(VarId(9), Rhs::Copy(v(8))),
            Stmt::Let(VarId(10), Rhs::Field(v(9), 0)),
            Stmt::Let(VarId(11), Rhs::Dim { arr: v(1), dim: 0 }),
            Stmt::Let(VarId(12), Rhs::Dim { arr: v(10), dim: 0 }),
            Stmt::Let(VarId(13), Rhs::Bin(BinOp::IEq, v(11), v(12))),
            Stmt::Check { cond: v(13), site: SiteId(0), err: ErrorKind::Assert },
            Stmt::For {
                idx: VarId(14),
                n: v(11),
                pre: vec![],
                body: vec![
                    Stmt::Let(VarId(15), Rhs::Load { arr: v(10), idx: v(14) }),
                    Stmt::Accum { arr: v(1), idx: v(14), val: v(15), site: SiteId(0) },
                ],
                reset: false,
            },
            Stmt::Return(Op::Float(0.0)),
        ]);
        let tys = [
            Type::Integer,
            vf.clone(),
            vf.clone(),
            vf.clone(),
            Type::Integer,
            Type::Float,
            Type::Float,
            pair.clone(),
            pair.clone(),
            pair,
            vf,
            Type::Integer,
            Type::Integer,
            Type::Bool,
            Type::Integer,
            Type::Float,
            Type::Integer,
        ];
        let mut f = func(tys.to_vec(), body);
        f.vars[8].mutable = true;
        f
    }

    /// The consumer computes `2 * src[j]` itself, and `t` is neither filled
    /// nor allocated: the tuple holds a dummy, the size check reads `n`.
    #[test]
    fn a_packed_tensor_only_added_elsewhere_is_not_filled() {
        let mut f = packed(vec![]);
        forward_packed_tensors(&mut f);
        let text = Module { funcs: vec![f], ..Module::default() }.pretty();
        assert!(!text.contains("store %3["), "{text}");
        assert!(!text.contains("load %10["), "{text}");
        assert!(!text.contains("%3 = alloc") && text.contains("pack ((), 0") && text.contains("%12 = %0"), "{text}");
        let consumer = text.split("for %14").nth(1).unwrap_or_default();
        assert!(consumer.contains("load %2[%14]") && consumer.contains("fmul"), "{text}");
    }

    /// Not when what the filling loop reads is written before the consumer.
    #[test]
    fn a_packed_tensor_whose_source_changes_is_filled() {
        let mut f = packed(vec![Stmt::Store { arr: Op::Var(VarId(2)), idx: Op::Int(0), val: Op::Float(5.0) }]);
        forward_packed_tensors(&mut f);
        let text = Module { funcs: vec![f], ..Module::default() }.pretty();
        assert!(text.contains("store %3[") && text.contains("load %10["), "{text}");
    }

    /// Two identical pure computations hoisted from two loops are shared.
    #[test]
    fn cse_shares_equal_computations() {
        let (a, n, i, t1, t2) = (VarId(0), VarId(1), VarId(2), VarId(3), VarId(4));
        let body = vec![
            Stmt::Let(t1, Rhs::Un(UnOp::Math(MathFn::Exp), Op::Var(a), None)),
            Stmt::For {
                idx: i,
                n: Op::Var(n),
                pre: vec![],
                body: vec![
                    Stmt::Let(t2, Rhs::Un(UnOp::Math(MathFn::Exp), Op::Var(a), None)),
                    Stmt::Print { val: Op::Var(t2), ty: Type::Float },
                ],
                reset: false,
            },
            Stmt::Return(Op::Var(t1)),
        ];
        let mut m = Module {
            funcs: vec![func(vec![Type::Float, Type::Integer, Type::Integer, Type::Float, Type::Float], body)],
            ..Module::default()
        };
        optimize(&mut m);
        let text = m.pretty();
        assert_eq!(text.matches("exp").count(), 1, "{text}");
        assert!(text.contains("print %3"), "{text}");
    }
}
