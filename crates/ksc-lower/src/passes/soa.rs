//! Vectors of tuples of numbers become one vector per component
//! (`split-tuple-vectors`): structures of arrays (dF~'s memory layout,
//! seed 000 section 5).
//!
//! A tensor of tuples is stored as an array of structures (`ks_t2ff *`),
//! so a loop reading one component reads every component's bytes, and
//! the C compiler vectorises a loop over it with shuffles. Reverse mode
//! makes such tensors where the primal zipped vectors into tuples (a
//! `scan` over `build n (lam i (tuple a[i] b[i]))`): the cotangent of the
//! pairs, stored by the backward loop, then read component by component
//! into the cotangents of `a` and `b`. When a tensor of tuples of numbers
//! is allocated in the function and is only stored into, loaded from and
//! measured (`dim`), it is allocated as one tensor per component, of the
//! same sizes: a store of a tuple stores each component (the tuple's own
//! operands where it is a `pack` of values that cannot change), a load
//! loads each component and packs them (a `field` of the load is the
//! component's load itself; what is left unread goes with `dce`), a `dim`
//! measures the first component. The values are the same; only the layout
//! changes. `elide-vector-copies` (`copies.rs`) then removes a loop that
//! only copies a component into a fresh vector (snapshot
//! `split_tuple_vectors`).
//!
//! Assumes: a tensor allocated here has no other name (an alias would be
//! made by a statement that mentions it, which disqualifies it); the
//! operands of a `pack` that are not mutable variables keep their values
//! (SSA).

use ksc_ir::pass::Pass;
use ksc_ir::Type;
use rustc_hash::FxHashMap;

use super::LoopCx;
use crate::ir::*;
use crate::visit::{definitions, fresh_let, only_stored_loaded_measured, push_var, stmt_operands_mut, walk, walk_mut};

/// The `split-tuple-vectors` pass.
pub struct SplitTupleVectors;

impl Pass<Func, LoopCx<'_>> for SplitTupleVectors {
    fn name(&self) -> &'static str {
        "split-tuple-vectors"
    }

    /// Whether a tensor was split.
    fn run(&self, f: &mut Func, cx: &LoopCx<'_>) -> bool {
        let split = split_tuple_vectors(f);
        if split {
            // The components of loads that nothing reads.
            super::dce::dce(f, cx.effectful);
        }
        split
    }
}

/// The components of a tuple whose components are all numbers or
/// Booleans (at least two), if it is one.
fn scalar_components(t: &Type) -> Option<&[Type]> {
    match t {
        Type::Tuple(cs)
            if cs.len() >= 2 && cs.iter().all(|c| matches!(c, Type::Float | Type::Integer | Type::Bool)) =>
        {
            Some(cs)
        }
        _ => None,
    }
}

/// The tensors of tuples that may be split: allocated here, and mentioned
/// only as the tensor of stores, loads and `dim`s.
fn candidates(f: &Func) -> FxHashMap<VarId, Vec<Type>> {
    let only = only_stored_loaded_measured(&f.body);
    let mut out: FxHashMap<VarId, Vec<Type>> = FxHashMap::default();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(v, Rhs::Alloc { elem, .. }) = s {
            if let Some(cs) = scalar_components(elem).filter(|_| only.contains(v)) {
                out.insert(*v, cs.to_vec());
            }
        }
    });
    out
}

/// Splits the tensors the module's doc describes; whether there were any.
fn split_tuple_vectors(f: &mut Func) -> bool {
    let cands = candidates(f);
    if cands.is_empty() {
        return false;
    }
    // The component tensors of each split tensor.
    let mut parts: FxHashMap<VarId, Vec<VarId>> = FxHashMap::default();
    let mut keys: Vec<VarId> = cands.keys().copied().collect();
    keys.sort();
    for t in keys {
        let Type::Tensor(rank, _) = f.vars[t.0 as usize].ty.clone() else { continue };
        let name = f.vars[t.0 as usize].name.clone();
        let ids = cands[&t]
            .iter()
            .map(|c| {
                let ty = Type::Tensor(rank, Box::new(c.clone()));
                push_var(&mut f.vars, VarInfo { ty, name: name.clone(), mutable: false })
            })
            .collect();
        parts.insert(t, ids);
    }
    let defs = definitions(&f.body);
    let mut rw =
        Rewrite { parts, defs, loaded: FxHashMap::default(), renamed: FxHashMap::default(), vars: &mut f.vars };
    let mut body = std::mem::take(&mut f.body);
    rw.block(&mut body);
    let renamed = rw.renamed;
    walk_mut(&mut body, &mut |s| {
        for o in stmt_operands_mut(s) {
            if let Op::Var(v) = o {
                if let Some(c) = renamed.get(v) {
                    *v = *c;
                }
            }
        }
    });
    f.body = body;
    true
}

struct Rewrite<'a> {
    parts: FxHashMap<VarId, Vec<VarId>>,
    defs: FxHashMap<VarId, Rhs>,
    /// The component loads of each load of a split tensor.
    loaded: FxHashMap<VarId, Vec<VarId>>,
    /// The fields of those loads, each read as the component's load.
    renamed: FxHashMap<VarId, VarId>,
    vars: &'a mut Vec<VarInfo>,
}

impl Rewrite<'_> {
    fn block(&mut self, b: &mut Block) {
        let old = std::mem::take(b);
        for mut s in old {
            match &mut s {
                Stmt::For { pre, body, .. } => {
                    self.block(pre);
                    self.block(body);
                }
                Stmt::If { then, els, .. } => {
                    self.block(then);
                    self.block(els);
                }
                _ => {}
            }
            self.stmt(s, b);
        }
    }

    /// Appends `s`, rewritten, to `out`.
    fn stmt(&mut self, s: Stmt, out: &mut Block) {
        let part = |parts: &FxHashMap<VarId, Vec<VarId>>, o: &Op| match o {
            Op::Var(v) => parts.get(v).cloned(),
            _ => None,
        };
        match s {
            Stmt::Let(t, Rhs::Alloc { dims, .. }) if self.parts.contains_key(&t) => {
                for &p in &self.parts[&t] {
                    out.push(Stmt::Let(p, Rhs::Alloc { dims: dims.clone(), elem: self.component_ty(p) }));
                }
            }
            Stmt::Store { arr, idx, val } if part(&self.parts, &arr).is_some() => {
                let ps = part(&self.parts, &arr).unwrap_or_default();
                // The tuple's own operands, where it is a pack of values
                // that cannot change before the store.
                let ops = match &val {
                    Op::Var(p) => match self.defs.get(p) {
                        Some(Rhs::Pack(ops, _))
                            if ops.iter().all(|o| !matches!(o, Op::Var(w) if self.vars[w.0 as usize].mutable)) =>
                        {
                            Some(ops.clone())
                        }
                        _ => None,
                    },
                    _ => None,
                };
                for (k, p) in ps.into_iter().enumerate() {
                    let v = match &ops {
                        Some(ops) => ops[k].clone(),
                        None => {
                            let ty = self.component_ty(p);
                            let (l, v) = fresh_let(self.vars, Rhs::Field(val.clone(), k), ty);
                            out.push(l);
                            v
                        }
                    };
                    out.push(Stmt::Store { arr: Op::Var(p), idx: idx.clone(), val: v });
                }
            }
            Stmt::Let(x, Rhs::Load { arr, idx }) if part(&self.parts, &arr).is_some() => {
                let ps = part(&self.parts, &arr).unwrap_or_default();
                let mut comps = Vec::new();
                for p in ps {
                    let ty = self.component_ty(p);
                    let (l, v) = fresh_let(self.vars, Rhs::Load { arr: Op::Var(p), idx: idx.clone() }, ty);
                    out.push(l);
                    comps.push(v);
                }
                let ids = comps.iter().filter_map(Op::var).collect();
                let ty = self.vars[x.0 as usize].ty.clone();
                out.push(Stmt::Let(x, Rhs::Pack(comps, ty)));
                self.loaded.insert(x, ids);
            }
            Stmt::Let(y, Rhs::Field(Op::Var(x), k)) if self.loaded.contains_key(&x) => {
                // y is the component's load (which dominates every use of
                // y), named as y was.
                let c = self.loaded[&x][k];
                if self.vars[c.0 as usize].name.is_none() {
                    self.vars[c.0 as usize].name = self.vars[y.0 as usize].name.clone();
                }
                self.renamed.insert(y, c);
            }
            Stmt::Let(d, Rhs::Dim { arr, dim }) if part(&self.parts, &arr).is_some() => {
                let p = part(&self.parts, &arr).unwrap_or_default()[0];
                out.push(Stmt::Let(d, Rhs::Dim { arr: Op::Var(p), dim }));
            }
            s => out.push(s),
        }
    }

    /// The element type of a component tensor.
    fn component_ty(&self, p: VarId) -> Type {
        match &self.vars[p.0 as usize].ty {
            Type::Tensor(_, e) => (**e).clone(),
            t => t.clone(),
        }
    }
}
