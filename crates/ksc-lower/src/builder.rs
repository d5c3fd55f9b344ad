//! Building one function's loop IR: variables, nested blocks, and
//! hash-consing of pure computations (common subexpressions are shared as
//! they are built).

use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::ir::{Block, IOp, Op, Rhs, Stmt, VarId, VarInfo};
use crate::visit::any_stmt;

/// A function under construction.
#[derive(Default)]
pub(crate) struct FnBuilder {
    pub vars: Vec<VarInfo>,
    /// The open blocks, innermost last.
    blocks: Vec<Block>,
    /// One hash-consing table per open block: a pure right-hand side
    /// computed in a block is reused in it and in the blocks it contains.
    cse: Vec<FxHashMap<Rhs, VarId>>,
    /// Tensors written in place (`Store`, `Accum`): their loads are never shared.
    written: FxHashSet<VarId>,
    /// Integer variables known to be >= 0 (sizes, loop indices).
    nonneg: FxHashSet<VarId>,
    /// Loop indices and the bound they stay below.
    bounds: FxHashMap<VarId, Op>,
    /// Conditions already checked, per open block.
    checked: Vec<FxHashSet<Op>>,
    /// Results of whole-vector reductions (`max`/`imax`: the best value
    /// and its index) of a vector, per open block, for the other to reuse.
    reductions: Vec<FxHashMap<VarId, (Op, Op)>>,
    /// Tensors filled with zeros (a `constVec` of zeros computed), not
    /// written since, and tuples packed from zeros: adding one into an
    /// accumulator adds nothing.
    zeros: FxHashSet<VarId>,
    /// Fresh tensors bound to a `.ks` variable (or one component of it)
    /// whose only use is still to come: that use may add into them in place.
    owned: FxHashMap<VarId, (String, Option<usize>)>,
    /// Tensors allocated with constant sizes, and those sizes (a tensor's
    /// sizes never change): their `dim`s are the constants, so a loop
    /// over such a tensor of one element is none (`open_nest`).
    const_dims: FxHashMap<VarId, Vec<i64>>,
}

impl FnBuilder {
    pub fn new() -> FnBuilder {
        FnBuilder {
            blocks: vec![Vec::new()],
            cse: vec![FxHashMap::default()],
            checked: vec![FxHashSet::default()],
            reductions: vec![FxHashMap::default()],
            ..FnBuilder::default()
        }
    }

    /// A loop index: `0 <= i < bound`.
    pub fn loop_index(&mut self, i: VarId, bound: Op) {
        self.nonneg.insert(i);
        self.bounds.insert(i, bound);
    }

    fn nonneg_op(&self, o: &Op) -> bool {
        match o {
            Op::Int(i) => *i >= 0,
            Op::Var(v) => self.nonneg.contains(v),
            _ => false,
        }
    }

    /// Folds constants and facts about sizes and loop indices.
    fn fold(&self, rhs: &Rhs) -> Option<Op> {
        use crate::ir::BinOp as B;
        // Checked arithmetic that cannot fail: adding 0, multiplying by 1.
        if let Rhs::IChecked(op, a, b, _) = rhs {
            return match (op, a, b) {
                (IOp::Add, Op::Int(0), x) | (IOp::Add | IOp::Sub, x, Op::Int(0)) => Some(x.clone()),
                (IOp::Mul, Op::Int(1), x) | (IOp::Mul | IOp::Div, x, Op::Int(1)) => Some(x.clone()),
                _ => None,
            };
        }
        if let Rhs::Dim { arr: Op::Var(t), dim } = rhs {
            return self.const_dims.get(t).and_then(|d| d.get(*dim)).map(|&n| Op::Int(n));
        }
        let Rhs::Bin(op, a, b) = rhs else { return None };
        match (op, a, b) {
            (B::IGe, x, Op::Int(0)) if self.nonneg_op(x) => Some(Op::Bool(true)),
            (B::ILt, Op::Var(i), n) if self.bounds.get(i) == Some(n) => Some(Op::Bool(true)),
            (B::IGt, Op::Int(x), Op::Int(y)) => Some(Op::Bool(x > y)),
            (B::IGe, Op::Int(x), Op::Int(y)) => Some(Op::Bool(x >= y)),
            (B::ILt, Op::Int(x), Op::Int(y)) => Some(Op::Bool(x < y)),
            (B::ILe, Op::Int(x), Op::Int(y)) => Some(Op::Bool(x <= y)),
            (B::IEq, Op::Int(x), Op::Int(y)) => Some(Op::Bool(x == y)),
            (B::IEq, x, y) if x == y => Some(Op::Bool(true)),
            (B::And, Op::Bool(true), x) | (B::And, x, Op::Bool(true)) => Some(x.clone()),
            (B::And, Op::Bool(false), _) | (B::And, _, Op::Bool(false)) => Some(Op::Bool(false)),
            (B::IAddNoCheck, Op::Int(0), x) | (B::IAddNoCheck, x, Op::Int(0)) => Some(x.clone()),
            (B::IMulNoCheck, Op::Int(1), x) | (B::IMulNoCheck, x, Op::Int(1)) => Some(x.clone()),
            (B::IMulNoCheck, Op::Int(0), _) | (B::IMulNoCheck, _, Op::Int(0)) => Some(Op::Int(0)),
            (B::IMulSat, Op::Int(x), Op::Int(y)) if *x >= 0 && *y >= 0 => Some(Op::Int(x.saturating_mul(*y))),
            _ => None,
        }
    }

    pub fn var(&mut self, ty: Type, name: Option<&str>, mutable: bool) -> VarId {
        self.vars.push(VarInfo { ty, name: name.map(sanitize_hint), mutable });
        VarId(self.vars.len() as u32 - 1)
    }

    pub fn ty(&self, v: VarId) -> &Type {
        &self.vars[v.0 as usize].ty
    }

    pub fn emit(&mut self, s: Stmt) {
        if let Stmt::Check { cond, .. } = &s {
            // A condition already checked here, or true, needs no check.
            if *cond == Op::Bool(true) || self.checked.iter().any(|c| c.contains(cond)) {
                return;
            }
            self.checked.last_mut().expect("an open block").insert(cond.clone());
        }
        match &s {
            Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } => {
                self.written.insert(*a);
                self.zeros.remove(a);
            }
            _ => {}
        }
        self.blocks.last_mut().expect("an open block").push(s);
    }

    pub fn push_block(&mut self) {
        self.blocks.push(Vec::new());
        self.cse.push(FxHashMap::default());
        self.checked.push(FxHashSet::default());
        self.reductions.push(FxHashMap::default());
    }

    /// Is code being emitted in a loop's body or a branch (a block inside
    /// the function's own)?
    pub fn nested(&self) -> bool {
        self.blocks.len() > 1
    }

    pub fn pop_block(&mut self) -> Block {
        self.cse.pop();
        self.checked.pop();
        self.reductions.pop();
        self.blocks.pop().expect("an open block")
    }

    /// The arena's mark at the start of a loop's iteration whose values
    /// live on the heap (`heap`), to copy them down to; else none.
    pub fn mark_if(&mut self, heap: bool) -> Option<VarId> {
        if !heap {
            return None;
        }
        match self.let_(Rhs::Mark, Type::Integer, Some("mark")) {
            Op::Var(m) => Some(m),
            _ => None,
        }
    }

    /// The values an iteration computed since statement `start`, with the
    /// iteration's mark: if it allocated, those on the heap are copied down
    /// to the mark, which frees its temporaries. (A value read from memory
    /// older than the iteration, when it allocated nothing, is kept where it
    /// is: there is nothing to free.) Returns the values to store.
    pub fn copy_down_since(&mut self, mark: Option<VarId>, start: usize, values: Vec<(Op, Type)>) -> Vec<Op> {
        let Some(m) = mark.filter(|_| self.allocates_since(start)) else {
            return values.into_iter().map(|(o, _)| o).collect();
        };
        let mut keep = Vec::new();
        let out = values
            .into_iter()
            .map(|(o, t)| {
                if !crate::ir::needs_heap(&t) {
                    return o;
                }
                let k = self.var(t, Some("elem"), true);
                self.emit(Stmt::DeclMut(k, Some(o)));
                keep.push(k);
                Op::Var(k)
            })
            .collect();
        self.emit(Stmt::CopyDown { mark: m, vars: keep });
        out
    }

    /// The operands of the tuple that the statements of the innermost open
    /// block from `start` on assign to the mutable variable `v`, when they
    /// assign it once, last, at their top level, a `pack` made among them
    /// of operands that are not mutable (so they keep their values).
    pub fn packed_set(&self, v: VarId, start: usize) -> Option<Vec<Op>> {
        let b = self.blocks.last()?;
        let since = &b[start.min(b.len())..];
        let (Stmt::Set(w, Op::Var(p)), rest) = since.split_last()? else { return None };
        if *w != v {
            return None;
        }
        let mut sets = 0;
        crate::visit::walk(rest, &mut |s| sets += matches!(s, Stmt::Set(x, _) if *x == v) as usize);
        if sets > 0 {
            return None;
        }
        let ops = rest.iter().find_map(|s| match s {
            Stmt::Let(x, Rhs::Pack(ops, _)) if x == p => Some(ops.clone()),
            _ => None,
        })?;
        let keeps = |o: &Op| !matches!(o, Op::Var(x) if self.vars[x.0 as usize].mutable);
        ops.iter().all(keeps).then_some(ops)
    }

    /// The number of statements in the innermost open block so far.
    pub fn position(&self) -> usize {
        self.blocks.last().map_or(0, Vec::len)
    }

    /// May the statements of the innermost open block from `start` on
    /// allocate arena memory (an allocation, a call, a copy)?
    pub fn allocates_since(&self, start: usize) -> bool {
        self.blocks.last().is_some_and(|b| allocates(&b[start.min(b.len())..]))
    }

    /// Do the statements of the innermost open block from `start` on
    /// append to a tape?
    pub fn pushes_tape_since(&self, start: usize) -> bool {
        self.blocks.last().is_some_and(|b| pushes_tape(&b[start.min(b.len())..]))
    }

    /// The finished top-level block.
    pub fn finish(mut self) -> (Block, Vec<VarInfo>) {
        let b = self.blocks.pop().unwrap_or_default();
        (b, self.vars)
    }

    /// The (best value, index) of vector `v` computed in this block or one
    /// containing it, unless `v` has been written in place since.
    pub fn reduction(&self, v: VarId) -> Option<(Op, Op)> {
        if self.written.contains(&v) || self.vars[v.0 as usize].mutable {
            return None;
        }
        self.reductions.iter().rev().find_map(|t| t.get(&v).cloned())
    }

    /// Tensor `v`, bound to the variable `name` (its component `comp`), is
    /// fresh storage and that variable's only use is still to come.
    pub fn own(&mut self, v: VarId, name: &str, comp: Option<usize>) {
        self.owned.insert(v, (name.to_string(), comp));
    }

    /// The tensors owned now (see [`FnBuilder::own`]), to lower the other
    /// branch of an `if` from the same state.
    pub fn owned_now(&self) -> FxHashMap<VarId, (String, Option<usize>)> {
        self.owned.clone()
    }

    /// After the branches of an `if`, lowered from `before`: each branch
    /// ends with the tensors it did not hand over (`then` and the current
    /// state), and what either handed over is handed over.
    pub fn restore_owned(&mut self, before: FxHashMap<VarId, (String, Option<usize>)>) {
        self.owned = before;
    }

    /// The tensors owned after both branches: those neither handed over.
    pub fn join_owned(&mut self, then: &FxHashMap<VarId, (String, Option<usize>)>) {
        self.owned.retain(|v, o| then.get(v) == Some(o));
    }

    /// Is `v` the tensor [`FnBuilder::own`] recorded for `name` (component
    /// `comp`)? It is handed over once: the answer is yes at most once.
    pub fn take_owned(&mut self, v: VarId, name: &str, comp: Option<usize>) -> bool {
        let mine = self.owned.get(&v).is_some_and(|(n, c)| n == name && *c == comp);
        if mine {
            self.owned.remove(&v);
        }
        mine
    }

    /// Tensor `v` has just been filled with zeros.
    pub fn remember_zeros(&mut self, v: VarId) {
        self.zeros.insert(v);
    }

    /// Is `v` a tensor of zeros (filled, and not written since), or a
    /// tuple packed from zeros?
    pub fn is_zeros(&self, v: VarId) -> bool {
        self.zeros.contains(&v) && !self.vars[v.0 as usize].mutable
    }

    pub fn remember_reduction(&mut self, v: VarId, best: Op, at: Op) {
        self.reductions.last_mut().expect("an open block").insert(v, (best, at));
    }

    fn shareable(&self, rhs: &Rhs) -> bool {
        if !rhs.is_pure() {
            return false;
        }
        if let Rhs::Load { arr: Op::Var(a), .. } = rhs {
            if self.written.contains(a) {
                return false;
            }
        }
        rhs.operands().iter().all(|o| match o {
            Op::Var(v) => !self.vars[v.0 as usize].mutable,
            _ => true,
        })
    }

    /// `let v = rhs`, sharing an earlier identical pure computation.
    pub fn let_(&mut self, rhs: Rhs, ty: Type, name: Option<&str>) -> Op {
        if let Rhs::Copy(o) = &rhs {
            if !matches!(o, Op::Var(v) if self.vars[v.0 as usize].mutable) {
                return o.clone();
            }
        }
        // A fold to a mutable variable's name would read its value later,
        // where an assignment may have changed it: only values fold.
        if let Some(o) = self.fold(&rhs).filter(|o| !matches!(o, Op::Var(v) if self.vars[v.0 as usize].mutable)) {
            return o;
        }
        let nonneg = matches!(rhs, Rhs::Dim { .. });
        let share = self.shareable(&rhs);
        if share {
            for table in self.cse.iter().rev() {
                if let Some(&v) = table.get(&rhs) {
                    return Op::Var(v);
                }
            }
        }
        // A tensor element of a tensor of zeros is a view that may be
        // written through: the tensor is no longer known to be zeros.
        if let Rhs::Load { arr: Op::Var(a), .. } = &rhs {
            if crate::ir::needs_heap(&ty) {
                self.zeros.remove(a);
            }
        }
        let v = self.var(ty, name, false);
        if nonneg {
            self.nonneg.insert(v);
        }
        if let Rhs::Alloc { dims, .. } = &rhs {
            let consts: Option<Vec<i64>> =
                dims.iter().map(|d| if let Op::Int(n) = d { Some(*n) } else { None }).collect();
            if let Some(c) = consts {
                self.const_dims.insert(v, c);
            }
        }
        // A tuple packed from zeros is zero (a `constVec`'s element: its
        // tensor is then known to be zeros too).
        if let Rhs::Pack(ops, _) = &rhs {
            let zero = |o: &Op| match o {
                Op::Float(x) => *x == 0.0,
                Op::Int(k) => *k == 0,
                Op::Var(a) => self.is_zeros(*a),
                _ => false,
            };
            if !ops.is_empty() && ops.iter().all(zero) {
                self.zeros.insert(v);
            }
        }
        if share {
            self.cse.last_mut().expect("an open block").insert(rhs.clone(), v);
        }
        self.emit(Stmt::Let(v, rhs));
        Op::Var(v)
    }
}

/// May these statements allocate arena memory (an allocation, a call, a
/// copy)? Calls count too: they are also the statements that may cost much.
pub(crate) fn allocates(block: &[Stmt]) -> bool {
    any_stmt(block, &mut |s| {
        matches!(s, Stmt::Let(_, Rhs::Alloc { .. } | Rhs::Call { .. } | Rhs::DeepCopy(_)) | Stmt::CopyDown { .. })
    })
}

/// Do these statements append to a tape (`$tapePush`)?
pub(crate) fn pushes_tape(block: &[Stmt]) -> bool {
    any_stmt(block, &mut |s| matches!(s, Stmt::Let(_, Rhs::TapePush { .. })))
}

/// A variable name usable inside a C identifier: letters, digits and `_`.
fn sanitize_hint(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    s.trim_matches('_').to_string()
}
