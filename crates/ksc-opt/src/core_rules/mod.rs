//! The rules of Core IR (knossos-reference.md 6.2 and 6.3), one table of
//! named, directed rewrites, each stated in one line.
//!
//! # What "semantics-preserving" means here
//!
//! A rewrite never changes the value or the output (`print`, `$trace`) of an
//! evaluation that succeeds. It may remove a run-time failure (an index out
//! of range in code whose value is not needed, a `sumbuild` of an empty
//! range that becomes a `build`), as every optimiser that drops unused pure
//! code does, but never introduces one. `print` and `$trace` (and calls of
//! functions that may reach them, see [`Globals`](crate::Globals)) are the
//! effects: they are never dropped, duplicated, or reordered. Floats are
//! assumed finite where a zero annihilates (`ts_scale 0.0 y` is zero, as in
//! the linear-map laws), exactly as the original did.
//!
//! Every rule is capture-avoiding: a binder that moves over a term mentioning
//! its name is renamed to a fresh `ksc$` name. Rules that would need a value
//! they cannot build do not fire.
//!
//! # Where things are
//!
//! Each rule is one entry ([`CoreRule`]: name, head, one-line statement),
//! and its entry, its rewrite and the generator of its random instances
//! ([`CoreRule::instance`]) sit together in the file of its theme:
//!
//! | file | rules |
//! |---|---|
//! | `lets.rs` | `let-*` of any right side: atoms, dead, used once, linear maps, a let of a let |
//! | `tuple.rs` | lets of literal tuples, `get` of a literal tuple |
//! | `vector_lets.rs` | lets of `build` and `constVec` substituted where they are read |
//! | `floating.rs` | `let`, `if` and `assert` floated out of arguments and conditions |
//! | `vector.rs` | `index`, `size`, `sum` and `build` of vectors written out |
//! | `loops.rs` | `sumbuild` of tuples, known sums in `$buildSum`, invariant parts of a `fold`'s elements |
//! | `tangent.rs` | `ts_add`, `ts_scale`, `ts_dot` with zeros and ones; let-bound zeros |
//! | `conditional.rs` | `if` and `assert` of literals, `if` of equal branches |
//! | `ring.rs` | dF~'s rules: a Float minus itself, a condition tested again in its own branch, a sum over a one-hot term |
//! | `fold.rs` | constant folding of arithmetic and comparisons |
//! | `shape.rs` | `shape` pushed into its argument |
//! | `inline.rs` | inlining marked and small calls |
//!
//! The cost heuristics (thresholds, cost predicates) that decide whether a
//! rewrite pays are in [`heuristics`], apart from the identities; the
//! helpers the generators share are in [`instances`]; the helpers the
//! rewrites share are at the end of this file.
//!
//! The table [`CORE_RULES`] lists the entries in the order they are tried
//! (see its documentation); to add a rule, write its entry, rewrite and
//! generator in its theme file and put the entry in the table.
//!
//! An entry is one rewrite, except a few that cover related cases under one
//! name: `ts-dot-zero` (either operand zero), `fold-float`, `fold-integer`
//! and `fold-compare` (each operator of their kind), `shape-build` (`build`
//! and `constVec`), `shape-tangent` (`ts_add`, `ts_scale`, `ts_neg`) and
//! `sumbuild-tuple` (a tuple, or a tuple under small `let`s). Their names
//! are what traces print and what tests and callers ask for by name
//! ([`core_rule`]), so splitting one would change both.
//!
//! The property tests (`tests/core_rules.rs`) evaluate random instances of
//! every rule before and after it with the reference interpreter.

use ksc_ir::builder::Builder;
use ksc_ir::term;
use ksc_ir::{Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type, Var};

use crate::rule::Ctx;

mod conditional;
mod floating;
mod fold;
pub mod heuristics;
mod inline;
pub mod instances;
mod lets;
mod loops;
mod ring;
mod shape;
mod tangent;
mod tuple;
mod vector;
mod vector_lets;

/// The kind of node a rule can apply to (checked before the rule runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    Let,
    If,
    Assert,
    /// A call of this primitive.
    Prim(Prim),
    /// A call of any function or primitive.
    AnyCall,
    /// A call of a global function.
    Fun,
}

impl Head {
    /// Can a node of this kind have this head?
    pub fn may_match(self, key: crate::rule::HeadKey) -> bool {
        use crate::rule::HeadKey as K;
        match (self, key) {
            (Head::Let, K::Let) | (Head::If, K::If) | (Head::Assert, K::Assert) => true,
            (Head::Prim(p), K::Prim(q)) => p == q,
            (Head::AnyCall, K::Prim(_) | K::Fun) => true,
            (Head::Fun, K::Fun) => true,
            _ => false,
        }
    }

    pub fn matches(self, e: &Expr) -> bool {
        match (self, e) {
            (Head::Let, Expr::Let(..)) | (Head::If, Expr::If(..)) | (Head::Assert, Expr::Assert(..)) => true,
            (Head::Prim(p), Expr::Call(Callee::Prim(q), _)) => p == *q,
            (Head::AnyCall, Expr::Call(..)) => true,
            (Head::Fun, Expr::Call(Callee::Fun(_), _)) => true,
            _ => false,
        }
    }
}

pub type CoreRewrite = fn(&mut Ctx, ExprId) -> Option<ExprId>;

/// Builds a random instance of a rule's left side (inside some context)
/// into the builder's body, and returns its root.
pub type Instance = fn(&mut instances::G, &mut Builder) -> ExprId;

/// A rule of Core IR.
pub struct CoreRule {
    pub name: &'static str,
    /// The rule in one line, with its side conditions.
    pub statement: &'static str,
    /// Which of knossos-reference.md's groups it belongs to.
    pub group: &'static str,
    pub head: Head,
    pub rewrite: CoreRewrite,
    /// A random instance of the left side, for the property tests, which
    /// evaluate it before and after the rule (and require the rule to fire
    /// on enough of them).
    pub instance: Instance,
}

/// The Core rules whose result may differ from the term's in its last bits
/// (every other rule gives the same bits): the property tests compare
/// their values within a relative 1e-12.
pub const ROUNDING: &[&str] = &["distribute"];

/// The rule with this name.
pub fn core_rule(name: &str) -> Option<&'static CoreRule> {
    CORE_RULES.iter().find(|r| r.name == name)
}

const LET: &str = "let (reference 6.2)";
const FLOAT: &str = "floating (reference 6.3)";
const TUPLE: &str = "tuples (reference 6.3)";
const VEC: &str = "vectors (reference 6.3)";
const TANGENT: &str = "tangent arithmetic (reference 6.3)";
const IF: &str = "conditionals (reference 6.3)";
const FOLD: &str = "constant folding (reference 6.3)";
const INLINE: &str = "inlining (reference 6.3)";
const SHAPE: &str = "shapes (reference 5.6)";
const RING: &str = "ring (dF~, seed 000, 4.1)";

/// Every Core rule, in the order they are tried.
///
/// The order is part of the optimiser: a rule set tries its rules in this
/// order at each node and the first that applies fires, so where two rules
/// match the same node the earlier one wins, and the trace names it. For
/// instance `let-atom` comes before `let-dead` (an unused atom), `let-once`
/// before the tuple and vector `let` rules, the floating rules before every
/// other rule of a call (a call's `let`, `if` or `assert` argument floats
/// out before the call's own rules look at it), `ts-add-tuple` before the
/// zero rules (a tuple of zeros) and `shape-trivial` before the other shape
/// rules. The themes interleave here; keep this order when moving entries
/// between files, and put a new rule where it should win over the rules
/// after it.
pub static CORE_RULES: &[CoreRule] = &[
    lets::LET_ATOM,
    lets::LET_DEAD,
    lets::LET_ONCE,
    lets::LET_LINEAR_MAP,
    lets::LET_FLOAT_LET,
    tuple::LET_TUPLE_SPLIT,
    tuple::LET_TUPLE_VAR,
    tuple::LET_TUPLE_ATOMS,
    vector_lets::LET_BUILD,
    vector_lets::LET_BUILD_LOOP,
    vector_lets::LET_BUILD_LAZY,
    tangent::LET_ZERO,
    vector_lets::LET_CONSTVEC,
    vector_lets::LET_DELTAVEC,
    vector_lets::LET_COLUMNS,
    floating::LET_FLOAT_ARG,
    floating::IF_FLOAT_ARG,
    floating::ASSERT_FLOAT_ARG,
    floating::LET_FLOAT_COND,
    floating::LET_FLOAT_ASSERT,
    tuple::GET_TUPLE,
    vector::INDEX_BUILD,
    vector::GET_INDEX_LET_BUILD,
    vector::SIZE_BUILD,
    vector::SIZE_CONSTVEC,
    vector::SIZE_SUMBUILD,
    vector::SIZE_DELTAVEC,
    vector::SIZE_SCAN,
    vector::INDEX_CONSTVEC,
    vector::INDEX_DELTAVEC,
    vector_lets::INDEX_CONCATN_BUILD,
    tangent::FLATTEN_VEC,
    vector::SUM_BUILD,
    loops::SUMBUILD_TUPLE,
    vector::SUM_DELTAVEC,
    vector::SUMBUILD_DELTAVEC,
    ring::SUMBUILD_ONE_HOT,
    vector::BUILD_INDEX_SAME,
    vector::BUILD_CONST,
    loops::BUILDSUM_KNOWN_SUMS,
    loops::FOLD_INVARIANT_ELEMENT,
    tangent::TS_ADD_TUPLE,
    tangent::TS_ADD_ZERO_RIGHT,
    tangent::TS_ADD_ZERO_LEFT,
    tangent::TS_SCALE_ONE,
    tangent::TS_SCALE_ZERO,
    tangent::TS_SCALE_OF_ZERO,
    tangent::TS_DOT_ZERO,
    ring::TS_DOT_DELTAVEC,
    ring::TANGENT_BASIS_ONE_HOT,
    ring::TANGENT_BASIS_TUPLE,
    ring::RING_CANCEL,
    ring::DISTRIBUTE,
    conditional::IF_TRUE,
    conditional::IF_FALSE,
    conditional::IF_SAME,
    ring::IF_KNOWN_COND,
    ring::MUL_IF_ZERO,
    ring::SCALE_IF_ZERO,
    ring::MUL_ZERO,
    ring::ADD_IF_SAME,
    conditional::ASSERT_TRUE,
    fold::FOLD_FLOAT,
    fold::FOLD_INTEGER,
    fold::FOLD_COMPARE,
    fold::LT_INDEX_SIZE,
    shape::SHAPE_TRIVIAL,
    shape::SHAPE_TUPLE,
    shape::SHAPE_BUILD,
    shape::SHAPE_SUMBUILD,
    shape::SHAPE_TANGENT,
    shape::SHAPE_CALL,
    shape::SHAPE_INLINE,
    inline::INLINE_MARKED,
    inline::INLINE_SMALL,
];

// ---------------------------------------------------------------------------
// Helpers of the rewrites.

fn let_parts(ctx: &Ctx, e: ExprId) -> Option<(Pat, ExprId, ExprId)> {
    match ctx.expr(e) {
        Expr::Let(p, r, b) => Some((p.clone(), *r, *b)),
        _ => None,
    }
}

/// The callee and argument components of a call (see
/// [`term::call_components`]).
fn call_parts(ctx: &Ctx, e: ExprId) -> Option<(Callee, Vec<ExprId>, bool)> {
    match ctx.expr(e) {
        Expr::Call(c, a) => {
            let (comps, tupled) = term::call_components(ctx.b.body, *a);
            Some((c.clone(), comps, tupled))
        }
        _ => None,
    }
}

/// The arguments of a call of primitive `p` at `e` (as written).
fn prim_args(ctx: &Ctx, e: ExprId, p: Prim) -> Option<Vec<ExprId>> {
    ksc_ir::builder::call_of(ctx.b.body, e, p)
}

/// `(lam (v : T) body)` at `e`.
fn lam_parts(ctx: &Ctx, e: ExprId) -> Option<(Var, Type, ExprId)> {
    match ctx.expr(e) {
        Expr::Lam(v, t, b) => Some((v.clone(), t.clone(), *b)),
        _ => None,
    }
}

fn lam(ctx: &mut Ctx, v: &str, t: &Type, body: ExprId) -> ExprId {
    let ty = Type::lam(t.clone(), ctx.ty(body));
    ctx.alloc(Expr::Lam(v.to_string(), t.clone(), body), ty)
}

fn let_(ctx: &mut Ctx, p: Pat, rhs: ExprId, body: ExprId) -> ExprId {
    let ty = ctx.ty(body);
    ctx.alloc(Expr::Let(p, rhs, body), ty)
}

fn float_lit(ctx: &Ctx, e: ExprId) -> Option<f64> {
    match ctx.expr(e) {
        Expr::Lit(Lit::Float(x)) => Some(*x),
        _ => None,
    }
}

fn int_lit(ctx: &Ctx, e: ExprId) -> Option<i64> {
    match ctx.expr(e) {
        Expr::Lit(Lit::Integer(i)) => Some(*i),
        _ => None,
    }
}

/// Renames the variables of pattern `p` that occur free in any of `others`
/// (and are not in `keep`) to fresh names, in `p` and in `scope_body` (the
/// expression `p` already scopes over). Returns the new pattern and body.
fn rename_pat_avoiding(ctx: &mut Ctx, p: &Pat, scope_body: ExprId, others: &[ExprId], keep: &[Var]) -> (Pat, ExprId) {
    let mut renames: Vec<(Var, Var)> = Vec::new();
    for v in p.vars() {
        if keep.contains(v) {
            continue;
        }
        if others.iter().any(|&o| ctx.is_free(v, o)) {
            let fresh = ctx.fresh_like(v);
            renames.push((v.clone(), fresh));
        }
    }
    if renames.is_empty() {
        return (p.clone(), scope_body);
    }
    let rn = |v: &Var| renames.iter().find(|(a, _)| a == v).map_or(v.clone(), |(_, b)| b.clone());
    let new_p = match p {
        Pat::Var(v) => Pat::Var(rn(v)),
        Pat::Tuple(vs) => Pat::Tuple(vs.iter().map(rn).collect()),
    };
    let body = ctx.rename(scope_body, &renames);
    (new_p, body)
}

/// Can evaluating `e` not fail (so evaluating it where the original did not
/// cannot introduce a run-time error)? Atoms, lambdas, tuples and lets of
/// such, projections of tuples, and Float arithmetic of the native prelude.
fn cannot_fail(ctx: &Ctx, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match ctx.expr(x) {
            Expr::Lit(_) | Expr::Var(_) | Expr::Dummy(_) | Expr::Lam(..) => {}
            Expr::Tuple(es) => stack.extend(es),
            Expr::Let(_, r, b) => stack.extend([*r, *b]),
            Expr::Call(Callee::Prim(Prim::Get { .. }), a) => stack.push(*a),
            Expr::Call(Callee::Fun(f), a) if float_arith(f).is_some() && ctx.globals.is_builtin(f) => stack.push(*a),
            _ => return false,
        }
    }
    true
}

/// `add`/`sub`/`mul`/`div` of two Floats, by name.
fn float_arith(f: &FunName) -> Option<fn(f64, f64) -> f64> {
    let ff = Type::Tuple(vec![Type::Float, Type::Float]);
    if !f.derivs.is_empty() || f.base_ty.as_ref() != Some(&ff) {
        return None;
    }
    Some(match f.base.as_str() {
        "add" => |a, b| a + b,
        "sub" => |a, b| a - b,
        "mul" => |a, b| a * b,
        "div" => |a, b| a / b,
        _ => return None,
    })
}

/// Is the index `i` known to lie in `0 .. n` where `i` and `n` stand?
/// Literals, or the index variable of an enclosing `build`/`sumbuild` whose
/// size is `n` (alpha-equal, with the same free variables in scope).
fn index_in_range(ctx: &mut Ctx, i: ExprId, n: ExprId) -> bool {
    if let (Some(i), Some(n)) = (int_lit(ctx, i), int_lit(ctx, n)) {
        return 0 <= i && i < n;
    }
    let Expr::Var(v) = ctx.expr(i).clone() else { return false };
    let Some((_, binding)) = ctx.scope.lookup(&v) else { return false };
    let Some(range) = binding.range else { return false };
    if !ctx.alpha_eq(range.size, n) {
        return false;
    }
    // Every free variable of `n` must mean here what it meant at the size.
    let fv = ctx.cache.free_vars(ctx.b.body, n);
    fv.iter().all(|w| ctx.scope.lookup(w).is_none_or(|(pos, _)| pos < range.visible))
}

/// Binds `e` to a fresh variable unless it is atomic; `body` gets an atomic
/// expression to copy as often as it likes.
fn share(ctx: &mut Ctx, e: ExprId, hint: &str, body: impl FnOnce(&mut Ctx, ExprId) -> ExprId) -> ExprId {
    if ctx.is_atomic(e) {
        return body(ctx, e);
    }
    let name = ctx.b.fresh_name(hint);
    let ty = ctx.ty(e);
    let v = ctx.alloc(Expr::Var(name.clone()), ty);
    let inner = body(ctx, v);
    let_(ctx, Pat::Var(name), e, inner)
}

/// A copy of an atomic expression.
fn copy_atom(ctx: &mut Ctx, e: ExprId) -> ExprId {
    term::deep_copy(ctx.b, e)
}

/// How many times `x` occurs free in `e`, written (under lambdas too).
fn free_count(ctx: &Ctx, x: &str, e: ExprId) -> usize {
    let mut count = 0;
    term::walk_free(&*ctx.b.body, x, e, &mut |_, node| match node {
        Expr::Var(v) if v == x => {
            count += 1;
            Some(Vec::new())
        }
        _ => None,
    });
    count
}

/// Is every free occurrence of `x` in `e` the vector argument of `index` or
/// `size`?
fn only_indexed(ctx: &Ctx, x: &str, e: ExprId) -> bool {
    only_uses(ctx, x, e, false)
}

/// Is every free occurrence of `x` in `e` the vector argument of `index` or
/// `size` (or, with `added`, an operand of `ts_add`)?
fn only_uses(ctx: &Ctx, x: &str, e: ExprId, added: bool) -> bool {
    let body: &ksc_ir::Body = &*ctx.b.body;
    let is_x = |a: ExprId| matches!(&body.exprs[a], Expr::Var(w) if w == x);
    let mut ok = true;
    term::walk_free(body, x, e, &mut |e, node| match node {
        Expr::Var(v) if v == x => {
            ok = false;
            Some(Vec::new())
        }
        Expr::Call(Callee::Prim(Prim::TsAdd), arg) if added => match ksc_ir::builder::call_of(body, e, Prim::TsAdd) {
            Some(args) => Some(args.into_iter().filter(|&a| !is_x(a)).collect()),
            None => Some(vec![*arg]),
        },
        Expr::Call(Callee::Prim(p @ (Prim::Index | Prim::Size)), arg) => {
            let args = ksc_ir::builder::call_of(body, e, *p).unwrap_or_default();
            let vector = if *p == Prim::Index { args.get(1) } else { args.first() };
            match vector {
                Some(&v) if is_x(v) => Some(args.iter().copied().filter(|&a| a != v).collect()),
                _ => Some(vec![*arg]),
            }
        }
        _ => None,
    });
    ok
}
