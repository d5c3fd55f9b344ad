//! Writing a new vector into the memory of one that dies as it is read
//! (`reuse-dead-vectors`).
//!
//! A reverse pass often ends in a loop that reads a vector it computed
//! itself, element `i` in iteration `i`, to build its result: `g[i] = k *
//! e[i]` (LSE's gradient scales the exponentials it stored). When nothing
//! reads `e` after that loop and nothing else holds `e`'s memory, `g` can
//! be written where `e` is, as hand-written code does: one buffer instead
//! of two, half the memory traffic of that loop. Such an allocation
//! becomes [`Rhs::Reuse`]: `e`'s memory when `e` has exactly as many
//! elements and they are large (run-time tests; the C runtime's
//! `KSRT_REUSE_MIN_BYTES`: a small vector stays in cache anyway, and GCC
//! vectorises the loop only when its input and output are not the same
//! memory), else fresh memory.
//!
//! The conditions, for `t = alloc [n]` at position `p` of a block and a
//! vector `v` read in the loop that fills `t`:
//! - `v` is *owned*: every value that may hold its memory (its alias
//!   class: the variables copied from one another by `let`, `set` and
//!   `mut`'s initial value) comes from an allocation of this function, and
//!   is only read by `load` and `dim`, written by `store` and `+=`, or
//!   deep-copied; never passed to a call, packed into a tuple, stored into
//!   another tensor, returned, pushed to a tape or copied down;
//! - no other allocation of the function takes `v`'s memory (two vectors
//!   filled in one loop from the same dying one, as an `unzip` fills its
//!   components, would share it: the second's stores overwrote the
//!   first's);
//! - every member of the class is defined before `p`, in the same block
//!   or in blocks nested in its statements (so none outlives the block);
//! - both are vectors of the same element type, which holds no tensors;
//! - from `p` on, nothing but the filling loops uses `t`, and nothing uses
//!   the class, but `dim` (sizes never change) and, in those loops, loads: a filling
//!   loop runs over `n`, stores `t` only at its index `i`, and reads the
//!   class only as `load m[i]`, in statements before the first one that
//!   stores `t` (so iteration `i` reads `v[i]` before overwriting it, and
//!   never reads another element). The filling loops are the statement
//!   after `p` that first uses `t`, possibly versioned (an `if` whose
//!   branches hold copies of the loop).
//!
//! The pass runs last, when no later optimisation may move a load of `v`
//! past a store of `t` on the belief that they are distinct.

use ksc_ir::pass::Pass;
use rustc_hash::{FxHashMap, FxHashSet};

use super::LoopCx;
use crate::ir::{needs_heap, Block, Func, Op, Rhs, Stmt, VarId};
use crate::visit::{defined_in, nested_blocks, stmt_operands, walk};

/// The `reuse-dead-vectors` pass.
pub struct ReuseDeadVectors;

impl Pass<Func, LoopCx<'_>> for ReuseDeadVectors {
    fn name(&self) -> &'static str {
        "reuse-dead-vectors"
    }

    /// Whether an allocation now reuses a vector's memory.
    fn run(&self, f: &mut Func, _: &LoopCx<'_>) -> bool {
        reuse_dead_vectors(f)
    }
}

/// Rewrites the allocations that can take the memory of a vector dying in
/// the loop that fills them; whether there were any.
fn reuse_dead_vectors(f: &mut Func) -> bool {
    let classes = owned_classes(f);
    if classes.is_empty() {
        return false;
    }
    rewrite_block(&mut f.body, f.vars.as_slice(), &classes, &mut FxHashSet::default())
}

/// The alias classes of owned vectors: each class's members and element
/// type, by member.
struct Classes {
    of: FxHashMap<VarId, usize>,
    members: Vec<Vec<VarId>>,
    elem: Vec<ksc_ir::Type>,
}

impl Classes {
    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

fn find(parent: &mut FxHashMap<VarId, VarId>, v: VarId) -> VarId {
    let mut r = v;
    while let Some(&p) = parent.get(&r) {
        if p == r {
            break;
        }
        r = p;
    }
    parent.insert(v, r);
    r
}

/// The owned alias classes of the function's vectors (see the module's doc).
fn owned_classes(f: &Func) -> Classes {
    let heap = |v: VarId| needs_heap(&f.vars[v.0 as usize].ty);
    let is_vec = |v: VarId| matches!(&f.vars[v.0 as usize].ty, ksc_ir::Type::Tensor(1, e) if !needs_heap(e));
    let mut parent: FxHashMap<VarId, VarId> = FxHashMap::default();
    let union = |parent: &mut FxHashMap<VarId, VarId>, a: VarId, b: VarId| {
        let (ra, rb) = (find(parent, a), find(parent, b));
        parent.insert(ra, rb);
    };
    // A mutable tensor's value: another tensor (same class), `()` (a
    // dummy, no memory), or anything else (not owned).
    let source = |parent: &mut FxHashMap<VarId, VarId>, spoiled: &mut FxHashSet<VarId>, v: VarId, o: &Op| match o {
        Op::Var(u) => union(parent, v, *u),
        Op::Unit => {}
        _ => {
            spoiled.insert(v);
        }
    };
    // Tensors that may share memory with something this function does not
    // own: parameters, loaded, called, selected, packed, returned, ...
    let mut spoiled: FxHashSet<VarId> = f.params.iter().copied().collect();
    // Tensors defined by an allocation or a copy of a tensor variable, and
    // mutable tensors: the possible members of owned classes.
    let mut known: FxHashSet<VarId> = FxHashSet::default();
    let mut elem: FxHashMap<VarId, ksc_ir::Type> = FxHashMap::default();
    walk(&f.body, &mut |s| {
        match s {
            Stmt::Let(v, Rhs::Alloc { dims, elem: e }) if is_vec(*v) && dims.len() == 1 => {
                known.insert(*v);
                elem.insert(*v, e.clone());
            }
            Stmt::Let(v, Rhs::Copy(Op::Var(u))) if heap(*u) => {
                known.insert(*v);
                union(&mut parent, *v, *u);
            }
            Stmt::Let(v, _) if heap(*v) => {
                spoiled.insert(*v);
            }
            Stmt::DeclMut(v, init) if heap(*v) => {
                known.insert(*v);
                if let Some(o) = init {
                    source(&mut parent, &mut spoiled, *v, o);
                }
            }
            Stmt::Set(v, o) if heap(*v) => source(&mut parent, &mut spoiled, *v, o),
            _ => {}
        }
        // The operands a statement may read a tensor as without sharing
        // its memory further (or only within its class, by the edges above).
        let allowed: Vec<&Op> = match s {
            Stmt::Let(_, Rhs::Load { arr, .. } | Rhs::Dim { arr, .. } | Rhs::DeepCopy(arr) | Rhs::Copy(arr)) => {
                vec![arr]
            }
            Stmt::Store { arr, .. } | Stmt::Accum { arr, .. } => vec![arr],
            Stmt::DeclMut(_, Some(o)) | Stmt::Set(_, o) => vec![o],
            _ => vec![],
        };
        for o in stmt_operands(s) {
            if let Op::Var(u) = o {
                if heap(*u) && !allowed.iter().any(|a| std::ptr::eq(*a, o)) {
                    spoiled.insert(*u);
                }
            }
        }
        if let Stmt::CopyDown { vars, .. } = s {
            spoiled.extend(vars.iter().copied());
        }
    });
    let everyone: FxHashSet<VarId> = known.iter().chain(parent.keys()).copied().collect();
    let mut groups: FxHashMap<VarId, Vec<VarId>> = FxHashMap::default();
    for v in everyone {
        let r = find(&mut parent, v);
        groups.entry(r).or_default().push(v);
    }
    let mut out = Classes { of: FxHashMap::default(), members: Vec::new(), elem: Vec::new() };
    let mut groups: Vec<Vec<VarId>> = groups.into_values().collect();
    groups.iter_mut().for_each(|g| g.sort());
    groups.sort();
    for members in groups {
        let elems: Vec<&ksc_ir::Type> = members.iter().filter_map(|m| elem.get(m)).collect();
        let owned = members.iter().all(|m| known.contains(m) && !spoiled.contains(m) && is_vec(*m));
        if owned && elems.first().is_some_and(|e| elems.iter().all(|x| x == e)) {
            let k = out.members.len();
            for m in &members {
                out.of.insert(*m, k);
            }
            out.elem.push(elems[0].clone());
            out.members.push(members);
        }
    }
    out
}

/// Does the statement itself (not its nested blocks) use a member of the
/// class other than by `dim` (a tensor's size never changes), or assign
/// one?
fn own_uses(s: &Stmt, class: &[VarId]) -> bool {
    let dim = matches!(s, Stmt::Let(_, Rhs::Dim { .. }));
    (!dim && stmt_operands(s).iter().any(|o| matches!(o, Op::Var(v) if class.contains(v))))
        || matches!(s, Stmt::Set(k, _) if class.contains(k))
}

/// Does the statement (nested ones included) satisfy `ok` throughout?
fn all(s: &Stmt, mut ok: impl FnMut(&Stmt) -> bool) -> bool {
    let mut good = true;
    walk(std::slice::from_ref(s), &mut |s| good &= ok(s));
    good
}

/// Does the statement (nested ones included) use the class other than
/// by `dim`?
fn uses(s: &Stmt, class: &[VarId]) -> bool {
    !all(s, |s| !own_uses(s, class))
}

/// Does the statement (nested ones included) read the class only by
/// `load`, and by `load` only at index `i` if given?
fn only_loads(s: &Stmt, class: &[VarId], i: Option<VarId>) -> bool {
    all(s, |s| match s {
        Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx }) if class.contains(a) => i.is_none_or(|i| *idx == Op::Var(i)),
        s => !own_uses(s, class),
    })
}

/// Is `s` (a statement after `t = alloc [n]`) a region of filling loops
/// that may overwrite `class` (see the module's doc)? Every loop in it
/// that uses `t` or the class is a filling loop; nothing else in it
/// uses them but `dim`.
fn fills(s: &Stmt, t: VarId, n: &Op, class: &[VarId]) -> bool {
    let one = std::slice::from_ref(&t);
    match s {
        Stmt::For { idx, n: m, pre, body, .. } if uses(s, one) || uses(s, class) => {
            if m != n || pre.iter().any(|p| uses(p, one) || uses(p, class)) {
                return false;
            }
            let Some(first) = body.iter().position(|b| uses(b, one)) else { return false };
            // Before the first store: the class only loaded at i.
            body[..first].iter().all(|b| only_loads(b, class, Some(*idx)))
                // From it on: t only stored at i, the class not read.
                && body[first..].iter().all(|b| {
                    !uses(b, class)
                        && all(b, |s| match s {
                            Stmt::Store { arr: Op::Var(a), idx: at, val } if *a == t => *at == Op::Var(*idx) && *val != Op::Var(t),
                            s => !own_uses(s, one),
                        })
                })
        }
        Stmt::If { then, els, .. } => then.iter().chain(els).all(|s| fills(s, t, n, class)),
        s => !uses(s, one) && !uses(s, class),
    }
}

/// Rewrites the allocations of `b` and the blocks nested in it; whether
/// it rewrote one. `taken`: the classes whose memory an allocation already
/// takes (each gives it to one: two vectors filled in one loop from the
/// same dying one would otherwise share its memory).
fn rewrite_block(b: &mut Block, vars: &[crate::ir::VarInfo], classes: &Classes, taken: &mut FxHashSet<usize>) -> bool {
    let mut changed = false;
    nested_blocks(b, &mut |inner| changed |= rewrite_block(inner, vars, classes, taken));
    for p in 0..b.len() {
        let Stmt::Let(t, Rhs::Alloc { dims, elem }) = &b[p] else { continue };
        if dims.len() != 1 || !matches!(&vars[t.0 as usize].ty, ksc_ir::Type::Tensor(1, _)) {
            continue;
        }
        let (t, n, elem) = (*t, dims[0].clone(), elem.clone());
        // The statement that first uses t: the filling loops.
        let Some(q) = (p + 1..b.len()).find(|&q| uses(&b[q], std::slice::from_ref(&t))) else { continue };
        let mut candidates = Vec::new();
        walk(std::slice::from_ref(&b[q]), &mut |s| {
            if let Stmt::For { idx, body, .. } = s {
                walk(body, &mut |s| {
                    if let Stmt::Let(_, Rhs::Load { arr: Op::Var(a), idx: Op::Var(j) }) = s {
                        if j == idx {
                            candidates.push(*a);
                        }
                    }
                });
            }
        });
        if candidates.is_empty() {
            continue;
        }
        let defined_before = defined_in(&b[..p]);
        let chosen = candidates.into_iter().find_map(|v| {
            let k = *classes.of.get(&v)?;
            let class = &classes.members[k];
            let ok = !taken.contains(&k)
                && classes.elem[k] == elem
                && class.iter().all(|m| defined_before.contains(m))
                && b[p + 1..q].iter().all(|s| only_loads(s, class, None))
                && fills(&b[q], t, &n, class)
                && b[q + 1..].iter().all(|s| !uses(s, class));
            ok.then_some((v, k))
        });
        if let Some((v, k)) = chosen {
            taken.insert(k);
            b[p] = Stmt::Let(t, Rhs::Reuse { dead: Op::Var(v), dims: vec![n], elem });
            changed = true;
        }
    }
    changed
}
