//! Traversal and def-use helpers on the loop IR, shared by the lowering
//! (`lib.rs` renumbering), the passes (`passes/`) and the C emitter: walks
//! over statements and their nested blocks, the operands a statement
//! reads, the variables a block defines, renaming to fresh variables, and
//! the scope check the pass pipeline runs after every pass in debug
//! builds.
//!
//! Nothing here changes what a function computes; the helpers that
//! rewrite (`rename_in`, `drop_unused_mark`) are told exactly what to
//! change.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::ir::*;

/// The site a statement names (for its run-time error or its call's
/// frame), if any: the one list of them, for renumbering ([`site_mut`]) and
/// for the C emitter's site maps ([`site`]). The patterns bind by
/// reference, shared or mutable as the statement is.
macro_rules! stmt_site {
    ($s:expr) => {
        match $s {
            Stmt::Let(_, Rhs::Un(_, _, Some(x)) | Rhs::IChecked(_, _, _, x)) => Some(x),
            Stmt::Let(_, Rhs::Call { frame: Some(x), .. }) => Some(x),
            Stmt::Accum { site: x, .. } | Stmt::Check { site: x, .. } | Stmt::Fail { site: x, .. } => Some(x),
            _ => None,
        }
    };
}

/// The site a statement names, to change.
pub fn site_mut(s: &mut Stmt) -> Option<&mut SiteId> {
    stmt_site!(s)
}

/// The site a statement names.
pub fn site(s: &Stmt) -> Option<SiteId> {
    stmt_site!(s).copied()
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

/// Does `f` hold of a statement, nested ones included? (Stops at the
/// first.)
pub(crate) fn any_stmt(b: &[Stmt], f: &mut impl FnMut(&Stmt) -> bool) -> bool {
    b.iter().any(|s| {
        f(s) || match s {
            Stmt::For { pre, body, .. } => any_stmt(pre, f) || any_stmt(body, f),
            Stmt::If { then, els, .. } => any_stmt(then, f) || any_stmt(els, f),
            _ => false,
        }
    })
}

/// Calls `f` on every statement, nested ones included, mutably.
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
pub(crate) fn nested_blocks(b: &mut Block, f: &mut impl FnMut(&mut Block)) {
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

/// `b` with every loop replaced by what `f` makes of it, innermost first:
/// `f` gets the loop (`Stmt::For`, its preheader and body already
/// rewritten) and returns the statements that take its place.
pub(crate) fn rewrite_loops(b: Block, f: &mut impl FnMut(Stmt) -> Vec<Stmt>) -> Block {
    let mut out = Vec::with_capacity(b.len());
    for s in b {
        match s {
            Stmt::For { idx, n, pre, body, reset } => {
                let (pre, body) = (rewrite_loops(pre, f), rewrite_loops(body, f));
                out.extend(f(Stmt::For { idx, n, pre, body, reset }));
            }
            Stmt::If { cond, then, els } => {
                let (then, els) = (rewrite_loops(then, f), rewrite_loops(els, f));
                out.push(Stmt::If { cond, then, els });
            }
            s => out.push(s),
        }
    }
    out
}

/// Tensors written in place (their loads cannot move or be shared).
pub(crate) fn written_arrays(b: &[Stmt]) -> FxHashSet<VarId> {
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

/// The operands an error's message reports.
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

/// [`stmt_operands`], to rewrite them.
pub(crate) fn stmt_operands_mut(s: &mut Stmt) -> Vec<&mut Op> {
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
pub fn defined_in(b: &[Stmt]) -> FxHashSet<VarId> {
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

/// The variables a statement (not a loop or branch) defines or writes.
pub(crate) fn stmt_defines(s: &Stmt) -> Option<VarId> {
    match s {
        Stmt::Let(v, _) | Stmt::DeclMut(v, _) | Stmt::Set(v, _) => Some(*v),
        Stmt::Store { arr: Op::Var(a), .. } | Stmt::Accum { arr: Op::Var(a), .. } => Some(*a),
        _ => None,
    }
}

/// The number of statements, nested ones included.
pub fn count_stmts(b: &Block) -> usize {
    let mut n = 0;
    walk(b, &mut |_| n += 1);
    n
}

/// Calls `f` with each variable a statement itself (not its nested
/// blocks) mentions, once per mention: as an operand, as the variable a
/// `Set` assigns, or as the mark or a variable of a copy-down or reset.
pub fn stmt_mentions(s: &Stmt, f: &mut impl FnMut(VarId)) {
    for o in stmt_operands(s) {
        if let Op::Var(v) = o {
            f(*v);
        }
    }
    match s {
        Stmt::Set(v, _) | Stmt::Reset(v) => f(*v),
        Stmt::CopyDown { mark, vars } => {
            f(*mark);
            vars.iter().for_each(|v| f(*v));
        }
        _ => {}
    }
}

/// Does a statement (nested ones included) mention `v` ([`stmt_mentions`])?
pub(crate) fn mentions(s: &Stmt, v: VarId) -> bool {
    any_stmt(std::slice::from_ref(s), &mut |s| {
        let mut found = false;
        stmt_mentions(s, &mut |w| found |= w == v);
        found
    })
}

/// The variables mentioned only as the tensor of stores, loads and `dim`s
/// (never copied, packed, passed, returned or assigned: a tensor among
/// them that the function allocates has no other name).
pub(crate) fn only_stored_loaded_measured(b: &Block) -> FxHashSet<VarId> {
    let mut seen = FxHashSet::default();
    let mut bad = FxHashSet::default();
    walk(b, &mut |s| {
        let tensor = match s {
            Stmt::Store { arr, .. } | Stmt::Let(_, Rhs::Load { arr, .. } | Rhs::Dim { arr, .. }) => Some(arr),
            _ => None,
        };
        for o in stmt_operands(s) {
            if let Op::Var(v) = o {
                if tensor.is_some_and(|t| std::ptr::eq(t, o)) {
                    seen.insert(*v);
                } else {
                    bad.insert(*v);
                }
            }
        }
        match s {
            Stmt::CopyDown { vars, .. } => bad.extend(vars),
            Stmt::Set(v, _) => {
                bad.insert(*v);
            }
            _ => {}
        }
    });
    seen.retain(|v| !bad.contains(v));
    seen
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

/// A new variable described by `info`.
pub(crate) fn push_var(vars: &mut Vec<VarInfo>, info: VarInfo) -> VarId {
    vars.push(info);
    VarId(vars.len() as u32 - 1)
}

/// `let v = rhs` with a fresh `v` of type `ty`: the statement and `v`.
pub(crate) fn fresh_let(vars: &mut Vec<VarInfo>, rhs: Rhs, ty: ksc_ir::Type) -> (Stmt, Op) {
    let v = push_var(vars, VarInfo { ty, name: None, mutable: false });
    (Stmt::Let(v, rhs), Op::Var(v))
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

/// The statement with every variable it defines renamed to a fresh one.
pub(crate) fn renamed(mut s: Stmt, vars: &mut Vec<VarInfo>) -> Stmt {
    rename_in(std::slice::from_mut(&mut s), vars, FxHashMap::default());
    s
}

/// What is not invariant in a loop: the variables its body and preheader
/// define, and the mutable variables its body assigns.
pub(crate) fn variant(body: &Block, pre: &[Stmt]) -> FxHashSet<VarId> {
    let mut inside = defined_in(body);
    inside.extend(defined_in(pre));
    walk(body, &mut |s| {
        if let Stmt::Set(v, _) = s {
            inside.insert(*v);
        }
    });
    inside
}

/// May the statement (a loop body's) fail?
pub(crate) fn may_fail(s: &Stmt) -> bool {
    match s {
        Stmt::Let(_, r) => r.can_fail(),
        Stmt::Check { .. } | Stmt::Fail { .. } => true,
        Stmt::For { pre, body, .. } => pre.iter().chain(body).any(may_fail),
        Stmt::If { then, els, .. } => then.iter().chain(els).any(may_fail),
        _ => false,
    }
}

/// Pushes to `out` the statements `stmts` that replace a loop of `n`
/// iterations (copies of it, and what chooses between them) whose
/// preheader `lifted_pre` was taken out of the loops because they test
/// one of its values: it runs first, only when the loop would run (`n >
/// 0`, as a preheader does), and `stmts` after it. Without a lifted
/// preheader, `stmts` alone.
pub(crate) fn after_preheader(n: &Op, lifted_pre: Block, stmts: Block, vars: &mut Vec<VarInfo>, out: &mut Block) {
    if lifted_pre.is_empty() {
        out.extend(stmts);
        return;
    }
    let (ne, runs) = fresh_let(vars, Rhs::Bin(BinOp::IGt, n.clone(), Op::Int(0)), ksc_ir::Type::Bool);
    let mut then = lifted_pre;
    then.extend(stmts);
    out.push(ne);
    out.push(Stmt::If { cond: runs, then, els: vec![] });
}

/// Removes `let mark = mark` from `body` when nothing else mentions it.
pub(crate) fn drop_unused_mark(body: &mut Block, mark: VarId) {
    if !body.iter().any(|s| mentions(s, mark)) {
        body.retain(|s| !matches!(s, Stmt::Let(v, Rhs::Mark) if *v == mark));
    }
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
