//! The loop IR: explicit loops over SSA scalars, tensors as (sizes, data)
//! pairs, allocation from an arena, loads, stores and in-place accumulation.
//!
//! A [`Func`] is a tree of [`Block`]s. Every value is a [`VarId`] defined
//! once by [`Stmt::Let`] (SSA), except the few variables declared mutable by
//! [`Stmt::DeclMut`]: accumulators of loops and the results of `if`, which
//! are assigned by [`Stmt::Set`] and always copied into an SSA variable once
//! the loop or `if` is done. Tuples have been scalar-replaced: a tuple exists
//! as a value only where the C ABI needs one (arguments and results of calls,
//! elements of tensors), built by [`Rhs::Pack`] and taken apart by
//! [`Rhs::Field`].
//!
//! Types are Core [`Type`]s (never `Lam`, `LM` or `Unknown`).

use std::fmt;
use std::hash::{Hash, Hasher};

use ksc_ir::{ExprId, FunName, Type};

/// A variable of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// A place in the source program where a run-time error or a call happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(pub u32);

impl SiteId {
    /// The site of unchecked (wrapping) Integer arithmetic, which cannot fail.
    pub const UNCHECKED: SiteId = SiteId(u32::MAX);
}

/// A function of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(pub u32);

/// A source location: an expression of a definition's body, and the site of
/// the call it was inlined into (for the "called from" frames of a run-time
/// error), if it was inlined in a non-tail position.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    pub fun: FunName,
    pub expr: ExprId,
    pub inlined_at: Option<SiteId>,
}

/// An operand: a variable or a constant.
#[derive(Clone, Debug)]
pub enum Op {
    Var(VarId),
    Float(f64),
    Int(i64),
    Bool(bool),
    Str(String),
    /// The unit value `()`.
    Unit,
}

impl PartialEq for Op {
    fn eq(&self, o: &Op) -> bool {
        match (self, o) {
            (Op::Var(a), Op::Var(b)) => a == b,
            (Op::Float(a), Op::Float(b)) => a.to_bits() == b.to_bits(),
            (Op::Int(a), Op::Int(b)) => a == b,
            (Op::Bool(a), Op::Bool(b)) => a == b,
            (Op::Str(a), Op::Str(b)) => a == b,
            (Op::Unit, Op::Unit) => true,
            _ => false,
        }
    }
}
impl Eq for Op {}
impl Hash for Op {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Op::Var(v) => v.hash(h),
            Op::Float(x) => x.to_bits().hash(h),
            Op::Int(i) => i.hash(h),
            Op::Bool(b) => b.hash(h),
            Op::Str(s) => s.hash(h),
            Op::Unit => {}
        }
    }
}

impl Op {
    pub fn var(&self) -> Option<VarId> {
        match self {
            Op::Var(v) => Some(*v),
            _ => None,
        }
    }
}

/// Unary operations. None of them can fail, except `INeg` (overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    FNeg,
    INeg,
    Not,
    ToFloat,
    BoolToFloat,
    /// A function of libm (`sin`, `cos`, `cosh`, `tanh`, `sqrt`, `erf`,
    /// `fabs`) or of the runtime (`exp`, `log`: branch-free, so that loops
    /// calling them vectorise; `lgamma`, `digamma`).
    Math(MathFn),
    /// `$ranhashdoub`.
    RanHashDoub,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Exp,
    Log,
    Sin,
    Cos,
    Cosh,
    Tanh,
    Sqrt,
    Erf,
    Lgamma,
    Digamma,
    Fabs,
}

impl MathFn {
    /// Every variant, for the loop-IR reader (`parse.rs`), which finds a
    /// function by its printed name: a variant missing here prints but
    /// does not read back.
    pub const ALL: [MathFn; 11] = [
        MathFn::Exp,
        MathFn::Log,
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Cosh,
        MathFn::Tanh,
        MathFn::Sqrt,
        MathFn::Erf,
        MathFn::Lgamma,
        MathFn::Digamma,
        MathFn::Fabs,
    ];

    pub fn c_name(self) -> &'static str {
        match self {
            MathFn::Exp => "ksrt_exp",
            MathFn::Log => "ksrt_log",
            MathFn::Sin => "sin",
            MathFn::Cos => "cos",
            MathFn::Cosh => "cosh",
            MathFn::Tanh => "ksrt_tanh",
            MathFn::Sqrt => "sqrt",
            MathFn::Erf => "erf",
            MathFn::Lgamma => "ksrt_lgamma",
            MathFn::Digamma => "ksrt_digamma",
            MathFn::Fabs => "fabs",
        }
    }
}

/// Binary operations. The integer operations `IAdd`, `ISub`, `IMul` and
/// `IDiv` are checked (overflow, division by zero) and carry the site to
/// blame in [`Rhs::IChecked`]; everything here cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// `a < b ? b : a` (C++ `std::max`).
    FMax,
    /// `pow(a, (double)b)` with an Integer exponent.
    FPowI,
    FLt,
    FLe,
    FGt,
    FGe,
    FEq,
    ILt,
    ILe,
    IGt,
    IGe,
    IEq,
    /// Boolean and string equality.
    BEq,
    SEq,
    And,
    Or,
    /// Unchecked integer addition and multiplication, for index arithmetic
    /// whose operands are known to be in range.
    IAddNoCheck,
    IMulNoCheck,
    /// The product of two non-negative Integers, saturating at 2^63 - 1
    /// (a tensor's number of elements, compared with the limit).
    IMulSat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// The right-hand side of an SSA definition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rhs {
    Copy(Op),
    Un(UnOp, Op, Option<SiteId>),
    Bin(BinOp, Op, Op),
    /// Checked integer arithmetic: overflow and division by zero are
    /// run-time errors at the site.
    IChecked(IOp, Op, Op, SiteId),
    /// `c ? a : b`.
    Select(Op, Op, Op),
    /// A call of a function of the module. `frame` is the site pushed on the
    /// shadow call stack while it runs (none for calls in tail position).
    Call {
        func: FuncId,
        args: Vec<Op>,
        frame: Option<SiteId>,
    },
    /// A fresh tensor of these sizes with uninitialised elements.
    Alloc {
        dims: Vec<Op>,
        elem: Type,
    },
    /// A tensor of these sizes (one) with uninitialised elements, in the
    /// memory of the vector `dead` when that has as many elements, else in
    /// fresh memory. `dead` dies as the new tensor is filled (`reuse.rs`).
    Reuse {
        dead: Op,
        dims: Vec<Op>,
        elem: Type,
    },
    /// Element `idx` (row-major, flat) of a tensor.
    Load {
        arr: Op,
        idx: Op,
    },
    /// Size `dim` of a tensor.
    Dim {
        arr: Op,
        dim: usize,
    },
    /// The tuple of these components, as one value of type `ty`.
    Pack(Vec<Op>, Type),
    /// Component `i` of a tuple value.
    Field(Op, usize),
    /// A deep copy of a value (its tensors copied into fresh memory).
    DeepCopy(Op),
    /// The arena's current top, for a later `Reset`.
    Mark,
    /// `$tapePush`: the vector `tape` (of `elem`s) with `val` appended, in
    /// place when `tape` is the latest version of a tape (see the runtime's
    /// `ksrt_tape_reserve`), else in a fresh buffer.
    TapePush {
        tape: Op,
        val: Op,
        elem: Type,
    },
}

impl Rhs {
    /// Can evaluating this fail at run time (in checked mode)? Integer
    /// arithmetic at `SiteId::UNCHECKED` wraps, and so does a negation
    /// without a site; a division fails only by 0 or (overflow) by -1.
    pub fn can_fail(&self) -> bool {
        match self {
            Rhs::IChecked(IOp::Div, _, b, _) => !matches!(b, Op::Int(k) if *k != 0 && *k != -1),
            Rhs::IChecked(_, _, _, site) => *site != SiteId::UNCHECKED,
            Rhs::Un(UnOp::INeg, _, site) => site.is_some(),
            Rhs::Call { .. } => true,
            _ => false,
        }
    }

    /// Is this a pure computation of its operands (same operands, same
    /// value; no effect, no allocation)? Calls are judged separately.
    pub fn is_pure(&self) -> bool {
        !matches!(
            self,
            Rhs::Alloc { .. }
                | Rhs::Reuse { .. }
                | Rhs::Call { .. }
                | Rhs::DeepCopy(_)
                | Rhs::Mark
                | Rhs::TapePush { .. }
        )
    }

    /// The operands, in order.
    pub fn operands(&self) -> Vec<&Op> {
        match self {
            Rhs::Copy(a) | Rhs::Un(_, a, _) | Rhs::Field(a, _) | Rhs::DeepCopy(a) => vec![a],
            Rhs::Dim { arr, .. } => vec![arr],
            Rhs::Bin(_, a, b) | Rhs::IChecked(_, a, b, _) => vec![a, b],
            Rhs::Load { arr, idx } => vec![arr, idx],
            Rhs::Select(c, a, b) => vec![c, a, b],
            Rhs::Call { args, .. } | Rhs::Pack(args, _) => args.iter().collect(),
            Rhs::Alloc { dims, .. } => dims.iter().collect(),
            Rhs::Reuse { dead, dims, .. } => std::iter::once(dead).chain(dims).collect(),
            Rhs::TapePush { tape, val, .. } => vec![tape, val],
            Rhs::Mark => vec![],
        }
    }

    pub fn operands_mut(&mut self) -> Vec<&mut Op> {
        match self {
            Rhs::Copy(a) | Rhs::Un(_, a, _) | Rhs::Field(a, _) | Rhs::DeepCopy(a) => vec![a],
            Rhs::Dim { arr, .. } => vec![arr],
            Rhs::Bin(_, a, b) | Rhs::IChecked(_, a, b, _) => vec![a, b],
            Rhs::Load { arr, idx } => vec![arr, idx],
            Rhs::Select(c, a, b) => vec![c, a, b],
            Rhs::Call { args, .. } | Rhs::Pack(args, _) => args.iter_mut().collect(),
            Rhs::Alloc { dims, .. } => dims.iter_mut().collect(),
            Rhs::Reuse { dead, dims, .. } => std::iter::once(dead).chain(dims.iter_mut()).collect(),
            Rhs::TapePush { tape, val, .. } => vec![tape, val],
            Rhs::Mark => vec![],
        }
    }
}

/// What went wrong, for a run-time error. The message is the interpreter's,
/// with the operands' values filled in.
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// `assertion failed`
    Assert,
    /// `index out of range: index I in a tensor of size S`
    IndexOutOfRange { index: Vec<Op>, size: Vec<Op> },
    /// `` `PRIM` with a negative size S ``
    NegativeSize { prim: String, size: Vec<Op> },
    /// `` `sumbuild` of an empty range (size S) ``
    SumbuildEmpty { size: Vec<Op> },
    /// `` `PRIM` of size S is too large: more than L elements ..``
    /// (`ksc_ir::limits`; `limit` is the limit when lowered).
    TooLarge { prim: String, size: Vec<Op>, limit: u64 },
    /// `WHAT: A and B`, e.g. `` `ts_add` of tensors of different sizes: 2 and 3 ``
    Sizes { what: String, a: Vec<Op>, b: Vec<Op> },
    /// `` `diag` needs as many rows as columns, but has R rows and C columns ``
    Diag { rows: Op, cols: Op },
    /// `` `mul` of a matrix of size (R,C) and a vector of size N ``
    MatVec { rows: Op, cols: Op, n: Op },
    /// A message without operands.
    Message(String),
}

impl ErrorKind {
    pub fn operands_mut(&mut self) -> Vec<&mut Op> {
        match self {
            ErrorKind::IndexOutOfRange { index, size } => index.iter_mut().chain(size.iter_mut()).collect(),
            ErrorKind::NegativeSize { size, .. }
            | ErrorKind::SumbuildEmpty { size }
            | ErrorKind::TooLarge { size, .. } => size.iter_mut().collect(),
            ErrorKind::Sizes { a, b, .. } => a.iter_mut().chain(b.iter_mut()).collect(),
            ErrorKind::Diag { rows, cols } => vec![rows, cols],
            ErrorKind::MatVec { rows, cols, n } => vec![rows, cols, n],
            ErrorKind::Assert | ErrorKind::Message(_) => vec![],
        }
    }
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `let v = rhs` (SSA).
    Let(VarId, Rhs),
    /// Declares a mutable variable, with its initial value if it has one.
    DeclMut(VarId, Option<Op>),
    /// Assigns a mutable variable.
    Set(VarId, Op),
    /// `for idx in 0..n { body }`. `pre` holds loop-invariant computations
    /// that may fail, hoisted by LICM: they run once before the loop, and
    /// only if it runs at least once. With `reset`, the arena is reset after
    /// every iteration to where it was before the first (nothing allocated
    /// in an iteration outlives it).
    For {
        idx: VarId,
        n: Op,
        pre: Block,
        body: Block,
        reset: bool,
    },
    If {
        cond: Op,
        then: Block,
        els: Block,
    },
    /// `arr[idx] = val` (flat index) on a tensor being built.
    Store {
        arr: Op,
        idx: Op,
        val: Op,
    },
    /// `arr[idx] += val`: in-place accumulation into a scalar element
    /// (Integer additions are checked and blame `site`).
    Accum {
        arr: Op,
        idx: Op,
        val: Op,
        site: SiteId,
    },
    /// Fails with `err` at `site` unless `cond` holds.
    Check {
        cond: Op,
        site: SiteId,
        err: ErrorKind,
    },
    /// Fails unconditionally.
    Fail {
        site: SiteId,
        err: ErrorKind,
    },
    /// Writes a value in the original's print format (a `$trace` is a
    /// print of `Trace[`, the value and `]\n`).
    Print {
        val: Op,
        ty: Type,
    },
    /// Copies the values of these mutable variables to where `mark` points
    /// and resets the arena just after them (a fold's accumulator between
    /// iterations), so a loop whose state holds tensors runs in constant
    /// memory.
    CopyDown {
        mark: VarId,
        vars: Vec<VarId>,
    },
    /// Resets the arena to a mark.
    Reset(VarId),
    /// Returns from the function (only at the end of the function's body or
    /// of a branch in tail position).
    Return(Op),
    /// A self tail call: assigns the parameters and starts the body again.
    TailCall(Vec<Op>),
    /// Nothing happens, but the C compiler must not assume it knows these
    /// (mutable Float) variables' values across it: emitted as an empty
    /// `asm` that reads and writes them in registers (x86-64 and AArch64
    /// with GCC or Clang; nothing elsewhere). It ends each iteration of a
    /// register-blocked reduction (`jam.rs`), whose independent sums are
    /// already the parallelism the loop needs: GCC would otherwise
    /// vectorise each sum in order, one lane at a time, which is slower
    /// than the plain scalar loop.
    Keep(Vec<Op>),
}

pub type Block = Vec<Stmt>;

/// Information about a variable.
#[derive(Clone, Debug, PartialEq)]
pub struct VarInfo {
    pub ty: Type,
    /// The source variable it holds, if any (for readable C).
    pub name: Option<String>,
    pub mutable: bool,
}

/// A function: the lowering of one definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Func {
    pub name: FunName,
    /// The C name (see `names::c_names`).
    pub c_name: String,
    pub params: Vec<VarId>,
    pub ret: Type,
    pub vars: Vec<VarInfo>,
    pub body: Block,
    /// Does the body end in self tail calls (a loop)?
    pub loops: bool,
    /// The arena mark taken on entry, if the function resets the arena
    /// before returning (its result needs no heap) or copies its tensor
    /// parameters down on a self tail call.
    pub entry_mark: Option<VarId>,
    /// An external function (a user's `edef`): no body; calls of it call
    /// the C function `c_name` the user links, with the exported calling
    /// convention (the arena, then every parameter as its leaves).
    pub external: bool,
}

impl Func {
    /// A function `f` of two parameters (`VarId(0)`, `VarId(1)`) with
    /// variables of types `vars` (the parameters first) and `body`, for the
    /// tests of passes over the loop IR, this crate's and the backends'.
    #[doc(hidden)]
    pub fn for_tests(vars: Vec<Type>, body: Block) -> Func {
        Func {
            name: ksc_ir::FunName::plain("f"),
            c_name: "f".into(),
            params: vec![VarId(0), VarId(1)],
            ret: Type::Float,
            vars: vars.into_iter().map(|ty| VarInfo { ty, name: None, mutable: false }).collect(),
            body,
            loops: false,
            entry_mark: None,
            external: false,
        }
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
}

/// A whole program in loop IR.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Module {
    pub funcs: Vec<Func>,
    pub sites: Vec<Site>,
    /// The function `main`, if the module was built to run it.
    pub main: Option<FuncId>,
}

impl Module {
    pub fn func(&self, f: FuncId) -> &Func {
        &self.funcs[f.0 as usize]
    }
}

/// Does a value of this type need heap memory ([`Type::holds_tensor`])?
pub fn needs_heap(t: &Type) -> bool {
    t.holds_tensor()
}

// ---------------------------------------------------------------------------
// Printing, for snapshots and `ksc build --emit loops`.

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Var(v) => write!(f, "%{}", v.0),
            Op::Float(x) => write!(f, "{x:?}"),
            Op::Int(i) => write!(f, "{i}"),
            Op::Bool(b) => write!(f, "{b}"),
            Op::Str(s) => write!(f, "{s:?}"),
            Op::Unit => f.write_str("()"),
        }
    }
}

fn ops(xs: &[Op]) -> String {
    xs.iter().map(Op::to_string).collect::<Vec<_>>().join(", ")
}

impl Module {
    /// The module as text: one block per function, statements indented by
    /// nesting. Variables print as `%N` followed by the source name they
    /// hold, if any (`%3:x`) where they are defined.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        for func in &self.funcs {
            out.push_str(&self.pretty_func(func));
            out.push('\n');
        }
        out
    }

    /// One function of the module as text (as [`Module::pretty`] prints
    /// it).
    pub fn pretty_func(&self, func: &Func) -> String {
        func.print(Some(self))
    }
}

impl Func {
    /// The function as text, as [`Module::pretty`] prints it but for the
    /// functions it calls, which print as `fn#k` (`FuncId(k)`): without
    /// its module it does not know their names.
    pub fn pretty(&self) -> String {
        self.print(None)
    }

    fn print(&self, m: Option<&Module>) -> String {
        let func = self;
        let mut p = Printer { m, f: func, out: String::new() };
        let params: Vec<String> = func.params.iter().map(|&v| format!("{}: {}", p.def(v), func.ty(v))).collect();
        p.out.push_str(&format!("fn {} ({}) -> {}", func.c_name, params.join(", "), func.ret));
        if func.external {
            p.out.push_str(" external");
        }
        if func.loops {
            p.out.push_str(" loops");
        }
        if let Some(m) = func.entry_mark {
            p.out.push_str(&format!(" entry-mark {}", p.def(m)));
        }
        p.out.push_str(" {\n");
        p.block(&func.body, 1);
        p.out.push_str("}\n");
        p.out
    }
}

struct Printer<'a> {
    /// The module, for the names of called functions (without it they
    /// print as `fn#k`).
    m: Option<&'a Module>,
    f: &'a Func,
    out: String,
}

impl Printer<'_> {
    fn def(&self, v: VarId) -> String {
        match &self.f.vars[v.0 as usize].name {
            Some(n) => format!("%{}:{n}", v.0),
            None => format!("%{}", v.0),
        }
    }

    fn site(&self, s: SiteId) -> String {
        format!("@{}", s.0)
    }

    fn rhs(&self, r: &Rhs) -> String {
        match r {
            Rhs::Copy(a) => a.to_string(),
            Rhs::Un(op, a, _) => format!("{} {a}", un_name(*op)),
            Rhs::Bin(op, a, b) => format!("{} {a}, {b}", bin_name(*op)),
            Rhs::IChecked(op, a, b, s) => format!("{}.checked {a}, {b} {}", iop_name(*op), self.site(*s)),
            Rhs::Select(c, a, b) => format!("select {c}, {a}, {b}"),
            Rhs::Call { func, args, frame } => {
                let frame = frame.map(|s| format!(" {}", self.site(s))).unwrap_or_default();
                let name = match self.m {
                    Some(m) => m.func(*func).c_name.clone(),
                    None => format!("fn#{}", func.0),
                };
                format!("call {name}({}){frame}", ops(args))
            }
            Rhs::Alloc { dims, elem } => format!("alloc [{}] of {elem}", ops(dims)),
            Rhs::Reuse { dead, dims, elem } => format!("alloc [{}] of {elem} in {dead}", ops(dims)),
            Rhs::Load { arr, idx } => format!("load {arr}[{idx}]"),
            Rhs::Dim { arr, dim } => format!("dim {arr}.{dim}"),
            Rhs::Pack(xs, _) => format!("pack ({})", ops(xs)),
            Rhs::Field(a, i) => format!("field {a}.{i}"),
            Rhs::DeepCopy(a) => format!("deepcopy {a}"),
            Rhs::Mark => "mark".to_string(),
            Rhs::TapePush { tape, val, .. } => format!("tape_push {tape}, {val}"),
        }
    }

    fn block(&mut self, b: &Block, depth: usize) {
        for s in b {
            self.stmt(s, depth);
        }
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn stmt(&mut self, s: &Stmt, d: usize) {
        match s {
            Stmt::Let(v, r) => {
                let t = format!("{} = {}", self.def(*v), self.rhs(r));
                self.line(d, &t)
            }
            Stmt::DeclMut(v, o) => {
                let t = match o {
                    Some(o) => format!("mut {} = {o}", self.def(*v)),
                    None => format!("mut {}", self.def(*v)),
                };
                self.line(d, &t)
            }
            Stmt::Set(v, o) => self.line(d, &format!("%{} := {o}", v.0)),
            Stmt::For { idx, n, pre, body, reset } => {
                if !pre.is_empty() {
                    self.line(d, &format!("if {n} > 0 (hoisted) {{"));
                    self.block(pre, d + 1);
                    self.line(d, "}");
                }
                let r = if *reset { " reset-each-iteration" } else { "" };
                let t = format!("for {} < {n}{r} {{", self.def(*idx));
                self.line(d, &t);
                self.block(body, d + 1);
                self.line(d, "}");
            }
            Stmt::If { cond, then, els } => {
                self.line(d, &format!("if {cond} {{"));
                self.block(then, d + 1);
                if !els.is_empty() {
                    self.line(d, "} else {");
                    self.block(els, d + 1);
                }
                self.line(d, "}");
            }
            Stmt::Store { arr, idx, val } => self.line(d, &format!("store {arr}[{idx}] = {val}")),
            Stmt::Accum { arr, idx, val, .. } => self.line(d, &format!("{arr}[{idx}] += {val}")),
            Stmt::Check { cond, site, err } => {
                let t = format!("check {cond} {} {}", self.site(*site), err_name(err));
                self.line(d, &t)
            }
            Stmt::Fail { site, err } => {
                let t = format!("fail {} {}", self.site(*site), err_name(err));
                self.line(d, &t)
            }
            Stmt::Print { val, .. } => self.line(d, &format!("print {val}")),
            Stmt::CopyDown { mark, vars } => {
                let vs: Vec<String> = vars.iter().map(|v| format!("%{}", v.0)).collect();
                self.line(d, &format!("copydown %{} <- {}", mark.0, vs.join(", ")))
            }
            Stmt::Reset(m) => self.line(d, &format!("reset %{}", m.0)),
            Stmt::Return(o) => self.line(d, &format!("return {o}")),
            Stmt::TailCall(args) => self.line(d, &format!("tailcall ({})", ops(args))),
            Stmt::Keep(vs) => self.line(d, &format!("keep ({})", ops(vs))),
        }
    }
}

fn err_name(e: &ErrorKind) -> String {
    match e {
        ErrorKind::Assert => "assert".into(),
        ErrorKind::IndexOutOfRange { .. } => "index-out-of-range".into(),
        ErrorKind::NegativeSize { prim, .. } => format!("negative-size({prim})"),
        ErrorKind::SumbuildEmpty { .. } => "sumbuild-empty".into(),
        ErrorKind::TooLarge { prim, .. } => format!("too-large({prim})"),
        ErrorKind::Sizes { what, .. } => format!("sizes({what})"),
        ErrorKind::Diag { .. } => "diag".into(),
        ErrorKind::MatVec { .. } => "matvec".into(),
        ErrorKind::Message(m) => format!("{m:?}"),
    }
}

fn un_name(op: UnOp) -> String {
    match op {
        UnOp::FNeg => "fneg".into(),
        UnOp::INeg => "ineg.checked".into(),
        UnOp::Not => "not".into(),
        UnOp::ToFloat => "to_float".into(),
        UnOp::BoolToFloat => "bool_to_float".into(),
        UnOp::Math(m) => m.c_name().trim_start_matches("ksrt_").into(),
        UnOp::RanHashDoub => "ranhashdoub".into(),
    }
}

fn bin_name(op: BinOp) -> &'static str {
    match op {
        BinOp::FAdd => "fadd",
        BinOp::FSub => "fsub",
        BinOp::FMul => "fmul",
        BinOp::FDiv => "fdiv",
        BinOp::FMax => "fmax",
        BinOp::FPowI => "fpowi",
        BinOp::FLt => "flt",
        BinOp::FLe => "fle",
        BinOp::FGt => "fgt",
        BinOp::FGe => "fge",
        BinOp::FEq => "feq",
        BinOp::ILt => "ilt",
        BinOp::ILe => "ile",
        BinOp::IGt => "igt",
        BinOp::IGe => "ige",
        BinOp::IEq => "ieq",
        BinOp::BEq => "beq",
        BinOp::SEq => "seq",
        BinOp::And => "and",
        BinOp::Or => "or",
        BinOp::IAddNoCheck => "iadd",
        BinOp::IMulNoCheck => "imul",
        BinOp::IMulSat => "imul.sat",
    }
}

fn iop_name(op: IOp) -> &'static str {
    match op {
        IOp::Add => "iadd",
        IOp::Sub => "isub",
        IOp::Mul => "imul",
        IOp::Div => "idiv",
    }
}
