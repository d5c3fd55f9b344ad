//! Building one function's loop IR: variables, nested blocks, and
//! hash-consing of pure computations (common subexpressions are shared as
//! they are built).

use ksc_ir::Type;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::ir::{Block, Op, Rhs, Stmt, VarId, VarInfo};

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
}

impl FnBuilder {
    pub fn new() -> FnBuilder {
        FnBuilder { blocks: vec![Vec::new()], cse: vec![FxHashMap::default()], ..FnBuilder::default() }
    }

    pub fn var(&mut self, ty: Type, name: Option<&str>, mutable: bool) -> VarId {
        self.vars.push(VarInfo { ty, name: name.map(sanitize_hint), mutable });
        VarId(self.vars.len() as u32 - 1)
    }

    pub fn ty(&self, v: VarId) -> &Type {
        &self.vars[v.0 as usize].ty
    }

    pub fn op_ty(&self, o: &Op) -> Type {
        match o {
            Op::Var(v) => self.ty(*v).clone(),
            Op::Float(_) => Type::Float,
            Op::Int(_) => Type::Integer,
            Op::Bool(_) => Type::Bool,
            Op::Str(_) => Type::String,
            Op::Unit => Type::unit(),
        }
    }

    pub fn emit(&mut self, s: Stmt) {
        match &s {
            Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } => {
                self.written.insert(*a);
            }
            _ => {}
        }
        self.blocks.last_mut().expect("an open block").push(s);
    }

    pub fn push_block(&mut self) {
        self.blocks.push(Vec::new());
        self.cse.push(FxHashMap::default());
    }

    pub fn pop_block(&mut self) -> Block {
        self.cse.pop();
        self.blocks.pop().expect("an open block")
    }

    /// The finished top-level block.
    pub fn finish(mut self) -> (Block, Vec<VarInfo>) {
        let b = self.blocks.pop().unwrap_or_default();
        (b, self.vars)
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
        let share = self.shareable(&rhs);
        if share {
            for table in self.cse.iter().rev() {
                if let Some(&v) = table.get(&rhs) {
                    return Op::Var(v);
                }
            }
        }
        let v = self.var(ty, name, false);
        if share {
            self.cse.last_mut().expect("an open block").insert(rhs.clone(), v);
        }
        self.emit(Stmt::Let(v, rhs));
        Op::Var(v)
    }
}

/// A variable name usable inside a C identifier: letters, digits and `_`.
fn sanitize_hint(name: &str) -> String {
    let s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    s.trim_matches('_').to_string()
}
