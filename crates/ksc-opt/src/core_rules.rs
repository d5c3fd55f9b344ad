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
//! The property tests (`tests/core_rules.rs`) evaluate random instances of
//! every rule before and after it with the reference interpreter.

use ksc_ir::{Callee, Expr, ExprId, FunName, Lit, Pat, Prim, Type, Var};
use ksc_linmap::witness::is_own_tangent;

use crate::rule::Ctx;
use crate::term::{self, is_zero, numeric_leaves, occurrences, Occurrences};

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

/// A rule of Core IR.
pub struct CoreRule {
    pub name: &'static str,
    /// The rule in one line, with its side conditions.
    pub statement: &'static str,
    /// Which of knossos-reference.md's groups it belongs to.
    pub group: &'static str,
    pub head: Head,
    pub rewrite: CoreRewrite,
}

/// The rule with this name.
pub fn core_rule(name: &str) -> Option<&'static CoreRule> {
    CORE_RULES.iter().find(|r| r.name == name)
}

// ---------------------------------------------------------------------------
// Helpers.

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
    ksc_linmap::builder::call_of(ctx.b.body, e, p)
}

/// `(lam (v : T) body)` at `e`.
fn lam_parts(ctx: &Ctx, e: ExprId) -> Option<(Var, Type, ExprId)> {
    match ctx.expr(e) {
        Expr::Lam(v, t, b) => Some((v.clone(), t.clone(), *b)),
        _ => None,
    }
}

/// A call whose argument components may be moved around: not a primitive
/// that reads its literal argument tuple as separate arguments, not
/// `$inline` (whose argument must stay a call).
fn movable_callee(c: &Callee) -> bool {
    match c {
        Callee::Prim(p) => !p.splats_arguments() && *p != Prim::Inline,
        Callee::Fun(_) => true,
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

/// `add`/`sub`/`mul`/`div` of two Integers, checked (None: overflow or
/// division by zero, which must stay a run-time error).
fn int_arith(f: &FunName) -> Option<fn(i64, i64) -> Option<i64>> {
    let ii = Type::Tuple(vec![Type::Integer, Type::Integer]);
    if !f.derivs.is_empty() || f.base_ty.as_ref() != Some(&ii) {
        return None;
    }
    Some(match f.base.as_str() {
        "add" => i64::checked_add,
        "sub" => i64::checked_sub,
        "mul" => i64::checked_mul,
        // Truncating division, as the native prelude's.
        "div" => |a, b| if b == 0 { None } else { a.checked_div(b) },
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

// ---------------------------------------------------------------------------
// Let rules.

/// `let x = a in b ⇒ b[x := a]` for an atom `a` (variable, literal, `$dummy`).
fn let_atom(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if !ctx.is_atomic(r) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

/// `let p = e in b ⇒ b` when no variable of `p` occurs in `b` and `e` has no effect.
fn let_dead(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, r, b) = let_parts(ctx, e)?;
    if p.vars().iter().any(|v| ctx.is_free(v, b)) || !ctx.pure(r) {
        return None;
    }
    Some(b)
}

/// `let x = e in b ⇒ b[x := e]` when `x` occurs once in `b`, not under a lambda, and `e` has no effect.
fn let_once(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if ctx.is_atomic(r) || !ctx.pure(r) {
        return None;
    }
    if occurrences(ctx.cache, ctx.b.body, &x, b) != Occurrences::Once {
        return None;
    }
    if matches!(ctx.expr(r), Expr::Tuple(es) if es.len() != 1) && term::splatted(ctx.cache, ctx.b.body, &x, b) {
        // `let t = (tuple a b) in (print t)` prints one tuple, not two values.
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

/// Is `e` a linear map built from combinators over atoms (free to rebuild anywhere)?
fn cheap_linear_map(ctx: &Ctx, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match ctx.expr(x) {
            Expr::Var(_) | Expr::Lit(_) | Expr::Dummy(_) => {}
            Expr::Tuple(es) => stack.extend(es),
            Expr::Call(Callee::Prim(p), a)
                if p.is_linear_map() && !matches!(p, Prim::LmApply | Prim::LmApplyR | Prim::LmFold | Prim::LmScan) =>
            {
                stack.push(*a)
            }
            _ => return false,
        }
    }
    matches!(ctx.ty(e), Type::LM(..))
}

/// `let m = L in b ⇒ b[m := L]` for a linear map `L` made of combinators over atoms.
fn let_linear_map(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(m), r, b) = let_parts(ctx, e)? else { return None };
    if ctx.is_atomic(r) || !cheap_linear_map(ctx, r) {
        return None;
    }
    Some(ctx.substitute(b, &[(m, r)], true))
}

/// `let p = (let q = a in b) in c ⇒ let q = a in let p = b in c` (q renamed if free in c).
fn let_float_let(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (p, r, c) = let_parts(ctx, e)?;
    let (q, a, b) = let_parts(ctx, r)?;
    let (q, b) = rename_pat_avoiding(ctx, &q, b, &[c], p.vars());
    let inner = let_(ctx, p, b, c);
    Some(let_(ctx, q, a, inner))
}

/// `let (a1 .. an) = (tuple e1 .. en) in b ⇒ let a1 = e1 in .. let an = en in b` (renaming ai free in a later ej).
fn let_tuple_split(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Tuple(vs), r, b) = let_parts(ctx, e)? else { return None };
    let Expr::Tuple(es) = ctx.expr(r).clone() else { return None };
    if es.len() != vs.len() {
        return None;
    }
    let mut names = vs.clone();
    let mut renames = Vec::new();
    for j in 0..vs.len() {
        if es[j + 1..].iter().any(|&later| ctx.is_free(&vs[j], later)) {
            let fresh = ctx.fresh_like(&vs[j]);
            renames.push((vs[j].clone(), fresh.clone()));
            names[j] = fresh;
        }
    }
    let mut out = ctx.rename(b, &renames);
    for (v, rhs) in names.into_iter().zip(es).rev() {
        out = let_(ctx, Pat::Var(v), rhs, out);
    }
    Some(out)
}

/// `let x = (tuple e1 .. en) in b` with n >= 2, when b does not pass x to a
/// primitive that reads a literal tuple as several arguments: x, the
/// components and b.
fn let_bound_tuple(ctx: &mut Ctx, e: ExprId) -> Option<(Var, ExprId, Vec<ExprId>, ExprId)> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let Expr::Tuple(es) = ctx.expr(r).clone() else { return None };
    if es.len() < 2 || term::splatted(ctx.cache, ctx.b.body, &x, b) {
        return None;
    }
    Some((x, r, es, b))
}

/// `let x = (tuple e1 .. en) in b ⇒ let xi = ei in .. b[x := (tuple a1 ..
/// an)]`, naming (fresh xi) the components that are not atoms, so that
/// projections of x see them. (Substituting at once: a `let x = (tuple x1
/// ..)` left behind would be undone by `let-once`.)
fn let_tuple_var(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (x, _, es, b) = let_bound_tuple(ctx, e)?;
    if es.iter().all(|&c| ctx.is_atomic(c)) {
        return None;
    }
    let mut named = Vec::new();
    let atoms: Vec<ExprId> = es
        .into_iter()
        .map(|c| {
            if ctx.is_atomic(c) {
                return c;
            }
            let n = ctx.fresh_like(&x);
            let ty = ctx.ty(c);
            named.push((n.clone(), c));
            ctx.alloc(Expr::Var(n), ty)
        })
        .collect();
    let tuple = ctx.b.tuple(atoms);
    let mut out = ctx.substitute(b, &[(x, tuple)], false);
    for (n, c) in named.into_iter().rev() {
        out = let_(ctx, Pat::Var(n), c, out);
    }
    Some(out)
}

/// `let x = (tuple a1 .. an) in b ⇒ b[x := (tuple a1 .. an)]` for atoms ai
/// (copying atoms costs nothing; tuples are not stored), unless b passes x
/// to a primitive that reads a literal tuple as several arguments.
fn let_tuple_atoms(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (x, r, es, b) = let_bound_tuple(ctx, e)?;
    if !es.iter().all(|&c| ctx.is_atomic(c)) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

/// `let x = constVec n a in b ⇒ b[x := constVec n a]` for an atom a and a
/// size n without effect, when b uses x only as the vector of `index` and
/// `size` (which the `constVec` rules then simplify): a zero tangent read
/// element by element becomes the zero itself.
fn let_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, a] = prim_args(ctx, r, Prim::ConstVec)?[..] else { return None };
    if !ctx.pure(n) || !ctx.is_atomic(a) || !only_indexed(ctx, &x, b) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

/// The most nodes the element of a `build` may have for `let-build` to
/// compute it where it is read instead of storing it.
const SMALL_ELEMENT: usize = 16;

/// `let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)]` when `b`
/// reads `x` at most [`LET_BUILD_READS`] times, as the vector of `index` or
/// `size` (which `index-build` and `size-build` then take apart), `n` is an
/// atom and `e` is small, pure and calls no function with a body and no
/// loop: the element is computed where it is read instead of stored
/// (reverse mode makes such vectors of partial cotangents).
fn let_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, f] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    let (_, _, elem) = lam_parts(ctx, f)?;
    if !ctx.is_atomic(n) || !ctx.pure(r) || !small_element(ctx, elem) || !only_indexed(ctx, &x, b) {
        return None;
    }
    if !(1..=LET_BUILD_READS).contains(&free_count(ctx, &x, b)) {
        return None;
    }
    // An element computing more than arithmetic (`exp`, ..) read under two
    // lambdas of b (loops nested in b, as a read in an inner loop of
    // `[jac f]`'s column loop) would be computed again in every run of the
    // outer one.
    if costly_call(ctx, elem) && lambda_depth(ctx, &x, b) >= 2 {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

/// Does `e` call a function other than scalar arithmetic (see
/// [`crate::share::costly`])?
fn costly_call(ctx: &Ctx, e: ExprId) -> bool {
    let body: &ksc_ir::Body = &*ctx.b.body;
    let mut stack = vec![e];
    while let Some(y) = stack.pop() {
        if matches!(body.exprs[y], Expr::Call(Callee::Fun(_), _)) && crate::share::costly(body, y) {
            return true;
        }
        stack.extend(term::children(&body.exprs[y]));
    }
    false
}

/// The most lambdas of `e` around a free occurrence of `x`.
fn lambda_depth(ctx: &mut Ctx, x: &str, e: ExprId) -> usize {
    match ctx.expr(e).clone() {
        Expr::Var(_) => 0,
        Expr::Lam(v, _, b) if v != x && ctx.is_free(x, b) => 1 + lambda_depth(ctx, x, b),
        Expr::Lam(..) => 0,
        Expr::Let(p, r, b) => {
            let inner = if p.vars().iter().any(|v| v == x) { 0 } else { lambda_depth(ctx, x, b) };
            lambda_depth(ctx, x, r).max(inner)
        }
        other => term::children(&other).into_iter().map(|c| lambda_depth(ctx, x, c)).max().unwrap_or(0),
    }
}

/// `let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)]` when `b`
/// reads `x` once, as `index j x` in the body of a `build n (lam j ..)` or
/// `sumbuild n (lam j ..)` over the same `n`, a loop under no other lambda
/// of `b`: it asks for every element once, so `index-build` then fuses the
/// two loops and the vector is never stored. (The tangent of a `sumbuild`
/// is such a loop over the vector of its terms' tangents, behind a test of
/// its size.) Where the loop is not reached the vector is not computed:
/// it is pure.
fn let_build_loop(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, _] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    if !ctx.is_atomic(n) || !ctx.pure(r) || free_count(ctx, &x, b) != 1 {
        return None;
    }
    let mut reads = Vec::new();
    if !lazy_reads(ctx, &x, b, &mut Vec::new(), &mut Vec::new(), &mut reads) {
        return None;
    }
    let [Read { loops, by_loop_index: true }] = &reads[..] else { return None };
    if !matches!(loops[..], [m] if ctx.alpha_eq(m, n)) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], true))
}

/// The most reads of a vector whose small element `let-build` copies to
/// where it is read: a few recomputations of a small element cost less
/// than storing the vector and loading it back (the reverse pass of `sub`
/// of vectors reads its pairs of cotangents twice).
const LET_BUILD_READS: usize = 3;

/// The most reads of the vector for which `let-build-lazy` copies the
/// element to where it is read.
const LAZY_READS: usize = 4;

/// `let x = build n (lam i e) in b ⇒ let c = lt cost n in let x' = if c
/// (constVec 0 $dummy) (build n (lam i e)) in b[x := if c (build n (lam i
/// e)) x']` when `e` is expensive (with a loop or a call of a function with
/// a body), pure, and `b` reads `x` only by `index` (at most
/// [`LAZY_READS`] times) and `size`, each read under at most two `build` or
/// `sumbuild` loops whose sizes are atoms bound outside `b`. `cost` is how
/// many elements the reads ask for (the sum over reads of the product of
/// their loops' sizes): when it is less than `n`, the elements are computed
/// where they are read (`index-build` takes the copies apart), else the
/// vector is built as before. Forward mode over the columns of a Jacobian
/// makes such vectors: the tangents of every vertex of a model, of which
/// the residuals read a few.
fn let_build_lazy(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    let [n, f] = prim_args(ctx, r, Prim::Build)?[..] else { return None };
    let (_, _, elem) = lam_parts(ctx, f)?;
    // Elements of a type with a tangent: values, not linear maps.
    if !ctx.is_atomic(n) || !expensive(ctx, elem) || ctx.ty(elem).tangent().is_none() || !ctx.pure(r) {
        return None;
    }
    let mut reads = Vec::new();
    if !lazy_reads(ctx, &x, b, &mut Vec::new(), &mut Vec::new(), &mut reads)
        || reads.is_empty()
        || reads.len() > LAZY_READS
    {
        return None;
    }
    // A read in a loop of n iterations asks for at least n elements.
    if reads.iter().flat_map(|r| &r.loops).any(|&m| ctx.alpha_eq(m, n)) {
        return None;
    }
    // Reads of literal counts that ask for every element: the test would
    // fold to false and give back the build this started from.
    let asked = reads.iter().try_fold(0i64, |sum, r| {
        let per_read = r.loops.iter().try_fold(1i64, |p, &m| Some(p.saturating_mul(int_lit(ctx, m)?)))?;
        Some(sum.saturating_add(per_read))
    });
    if let (Some(asked), Some(size)) = (asked, int_lit(ctx, n)) {
        if asked >= size {
            return None;
        }
    }
    let mut cost = None;
    for Read { loops, .. } in reads {
        let mut term = None;
        for m in loops {
            let m = ctx.b.copy(m);
            term = Some(match term {
                None => m,
                Some(t) => ctx.b.int_op("mul", t, m),
            });
        }
        let term = term.unwrap_or_else(|| ctx.b.integer(1));
        cost = Some(match cost {
            None => term,
            Some(c) => ctx.b.int_op("add", c, term),
        });
    }
    let n_copy = ctx.b.copy(n);
    let test = ctx.b.int_test("lt", cost?, n_copy);
    let c = ctx.fresh_like("ksc$lazy");
    let stored = ctx.fresh_like(&x);
    let vec_ty = ctx.ty(r);
    let elem_ty = ctx.ty(elem);
    let cv = ctx.alloc(Expr::Var(c.clone()), Type::Bool);
    let zero = ctx.b.integer(0);
    let dummy = ctx.alloc(Expr::Dummy(elem_ty.clone()), elem_ty);
    let empty = ctx.b.prim(Prim::ConstVec, vec![zero, dummy]);
    let rhs = ctx.alloc(Expr::If(cv, empty, r), vec_ty.clone());
    let cv2 = ctx.alloc(Expr::Var(c.clone()), Type::Bool);
    let sv = ctx.alloc(Expr::Var(stored.clone()), vec_ty.clone());
    let fresh = ctx.b.copy(r);
    let read = ctx.alloc(Expr::If(cv2, fresh, sv), vec_ty);
    let body = ctx.substitute(b, &[(x, read)], false);
    let body = read_through_if(ctx, body, &c);
    let inner = let_(ctx, Pat::Var(stored), rhs, body);
    Some(let_(ctx, Pat::Var(c), test, inner))
}

/// Rewrites `index j (if c v w) ⇒ if c (index j v) (index j w)` and `size
/// (if c v w) ⇒ if c (size v) (size w)` for the variable `c` in the tree at
/// `e`, so that `index-build` and `size-build` see the build (`j` need not
/// be an atom: only one branch evaluates it).
fn read_through_if(ctx: &mut Ctx, e: ExprId, c: &str) -> ExprId {
    let node = ctx.expr(e).clone();
    let kids = term::children(&node);
    let new: Vec<ExprId> = kids.iter().map(|&k| read_through_if(ctx, k, c)).collect();
    let e = if new == kids {
        e
    } else {
        let ty = ctx.ty(e);
        let n = term::with_children(&node, &new);
        ctx.alloc(n, ty)
    };
    for p in [Prim::Index, Prim::Size] {
        let Some(args) = prim_args(ctx, e, p) else { continue };
        let Some(&v) = args.last() else { continue };
        let Expr::If(cond, t, f) = ctx.expr(v).clone() else { continue };
        if !matches!(ctx.expr(cond), Expr::Var(y) if y == c) {
            continue;
        }
        let ty = ctx.ty(e);
        let branch = |ctx: &mut Ctx, w: ExprId, copy: bool| {
            let mut a: Vec<ExprId> = args.iter().map(|&x| if copy { ctx.b.copy(x) } else { x }).collect();
            *a.last_mut().unwrap() = w;
            ctx.prim(p, a)
        };
        let (Some(t), Some(f)) = (branch(ctx, t, false), branch(ctx, f, true)) else { continue };
        return ctx.alloc(Expr::If(cond, t, f), ty);
    }
    e
}

/// Does `e` contain a loop or a call of a function with a body?
fn expensive(ctx: &Ctx, e: ExprId) -> bool {
    let body: &ksc_ir::Body = &*ctx.b.body;
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Lam(..) => return true,
            Expr::Call(Callee::Fun(g), _) if ctx.globals.has_def(g) => return true,
            other => stack.extend(term::children(other)),
        }
    }
    false
}

/// A read `index j x` found by [`lazy_reads`]: the sizes of the `build` /
/// `sumbuild` loops around it (outermost first), and whether `j` is the
/// innermost loop's index.
struct Read {
    loops: Vec<ExprId>,
    by_loop_index: bool,
}

/// Collects, for every read `index j x` of the free `x` in `e`, the sizes of
/// the `build`/`sumbuild` loops around it (inside `e`); `loops` are those
/// around `e` (each with the position of its index in `bound`) and `bound`
/// the variables bound between the top and `e`.
/// False when `x` is used otherwise, or read under another lambda, under
/// more than two loops, or under a loop whose size is not an atom bound
/// outside the top.
fn lazy_reads(
    ctx: &mut Ctx,
    x: &str,
    e: ExprId,
    loops: &mut Vec<(ExprId, usize)>,
    bound: &mut Vec<Var>,
    reads: &mut Vec<Read>,
) -> bool {
    let is_x = |ctx: &Ctx, v: ExprId| matches!(ctx.expr(v), Expr::Var(y) if y == x);
    if let Some([i, v]) = prim_args(ctx, e, Prim::Index).as_deref() {
        if is_x(ctx, *v) {
            // By the innermost loop's index: the name bound at that loop's
            // position of `bound`, not bound again by a let since.
            let by_loop_index = loops.last().is_some_and(
                |&(_, at)| matches!(ctx.expr(*i), Expr::Var(j) if bound.iter().rposition(|v| v == j) == Some(at)),
            );
            reads.push(Read { loops: loops.iter().map(|&(m, _)| m).collect(), by_loop_index });
            return lazy_reads(ctx, x, *i, loops, bound, reads);
        }
    }
    if let Some([v]) = prim_args(ctx, e, Prim::Size).as_deref() {
        if is_x(ctx, *v) {
            return true;
        }
    }
    let loop_parts = prim_args(ctx, e, Prim::Build).or_else(|| prim_args(ctx, e, Prim::Sumbuild));
    if let Some(&[m, f]) = loop_parts.as_deref() {
        if let Some((j, _, lb)) = lam_parts(ctx, f) {
            if !lazy_reads(ctx, x, m, loops, bound, reads) {
                return false;
            }
            if j == x || !ctx.is_free(x, lb) {
                return true;
            }
            let outside = match ctx.expr(m) {
                Expr::Var(v) => !bound.contains(v),
                Expr::Lit(_) => true,
                _ => false,
            };
            if !outside || loops.len() == 2 {
                return false;
            }
            loops.push((m, bound.len()));
            bound.push(j);
            let ok = lazy_reads(ctx, x, lb, loops, bound, reads);
            bound.pop();
            loops.pop();
            return ok;
        }
    }
    match ctx.expr(e).clone() {
        Expr::Var(v) => v != x,
        Expr::Let(p, r, b) => {
            if !lazy_reads(ctx, x, r, loops, bound, reads) {
                return false;
            }
            let vars = p.vars();
            if vars.iter().any(|v| v == x) {
                return true;
            }
            let depth = bound.len();
            bound.extend(vars.iter().cloned());
            let ok = lazy_reads(ctx, x, b, loops, bound, reads);
            bound.truncate(depth);
            ok
        }
        Expr::Lam(v, _, b) => v == x || !ctx.is_free(x, b),
        other => term::children(&other).into_iter().all(|c| lazy_reads(ctx, x, c, loops, bound, reads)),
    }
}

/// How many times `x` occurs free in `e`, written (under lambdas too).
fn free_count(ctx: &Ctx, x: &str, e: ExprId) -> usize {
    let mut count = 0;
    walk_free(&*ctx.b.body, x, e, &mut |_, node| match node {
        Expr::Var(v) if v == x => {
            count += 1;
            Some(Vec::new())
        }
        _ => None,
    });
    count
}

/// Walks the nodes of `e` in the scope of the free `x` (a binder of `x`
/// hides its body): `visit` returns the children to go on with, or None
/// for all of them.
fn walk_free(body: &ksc_ir::Body, x: &str, e: ExprId, visit: &mut dyn FnMut(ExprId, &Expr) -> Option<Vec<ExprId>>) {
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        let node = &body.exprs[e];
        if let Some(next) = visit(e, node) {
            stack.extend(next);
            continue;
        }
        match node {
            Expr::Let(p, r, b) => {
                stack.push(*r);
                if !p.vars().iter().any(|v| v == x) {
                    stack.push(*b);
                }
            }
            Expr::Lam(v, _, b) => {
                if v != x {
                    stack.push(*b);
                }
            }
            other => stack.extend(term::children(other)),
        }
    }
}

/// Is the tree at `e` at most `cap` nodes, each of which `ok` accepts?
fn small_tree(ctx: &Ctx, e: ExprId, cap: usize, ok: impl Fn(ExprId) -> bool) -> bool {
    let mut stack = vec![e];
    let mut nodes = 0;
    while let Some(x) = stack.pop() {
        nodes += 1;
        if nodes > cap || !ok(x) {
            return false;
        }
        stack.extend(term::children(ctx.expr(x)));
    }
    true
}

/// Is the tree at `e` at most [`SMALL_ELEMENT`] nodes, without loops and
/// calls of functions that have a body?
fn small_element(ctx: &Ctx, e: ExprId) -> bool {
    small_tree(ctx, e, SMALL_ELEMENT, |_| true) && !expensive(ctx, e)
}

/// `let x = Z in b ⇒ b[x := Z]` for a known zero `Z` whose sizes are atoms,
/// when `b` uses `x` only as an operand of `ts_add` (which the zero rules
/// then drop) or as the vector of `index` and `size`: uses where a zero
/// costs nothing, so copying it does not redo work.
fn let_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Pat::Var(x), r, b) = let_parts(ctx, e)? else { return None };
    if !is_zero(ctx.b.body, r) || !zero_of_atoms(ctx.b.body, r) || !ctx.pure(r) || !only_uses(ctx, &x, b, true) {
        return None;
    }
    Some(ctx.substitute(b, &[(x, r)], false))
}

/// Are the sizes of the `constVec`s of a known zero atoms?
fn zero_of_atoms(body: &ksc_ir::Body, e: ExprId) -> bool {
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match &body.exprs[x] {
            Expr::Tuple(es) => stack.extend(es),
            Expr::Call(Callee::Prim(Prim::ConstVec), arg) => match &body.exprs[*arg] {
                Expr::Tuple(es) if es.len() == 2 && term::is_atomic(body, es[0]) => stack.push(es[1]),
                _ => return false,
            },
            _ => {}
        }
    }
    true
}

/// `ts_add (tuple a1 .. an) (tuple b1 .. bn) ⇒ tuple (ts_add a1 b1) .. (ts_add
/// an bn)` when no component has an effect.
fn ts_add_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, y] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    let (Expr::Tuple(xs), Expr::Tuple(ys)) = (ctx.b.expr(x).clone(), ctx.b.expr(y).clone()) else { return None };
    if xs.len() != ys.len() || xs.is_empty() || !xs.iter().chain(&ys).all(|&c| ctx.pure(c)) {
        return None;
    }
    let sums = xs.into_iter().zip(ys).map(|(a, b)| ctx.b.prim(Prim::TsAdd, vec![a, b])).collect();
    Some(ctx.b.tuple(sums))
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
    walk_free(body, x, e, &mut |e, node| match node {
        Expr::Var(v) if v == x => {
            ok = false;
            Some(Vec::new())
        }
        Expr::Call(Callee::Prim(Prim::TsAdd), arg) if added => match ksc_linmap::builder::call_of(body, e, Prim::TsAdd)
        {
            Some(args) => Some(args.into_iter().filter(|&a| !is_x(a)).collect()),
            None => Some(vec![*arg]),
        },
        Expr::Call(Callee::Prim(p @ (Prim::Index | Prim::Size)), arg) => {
            let args = ksc_linmap::builder::call_of(body, e, *p).unwrap_or_default();
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

// ---------------------------------------------------------------------------
// Floating binding forms out of strict positions.

/// The first argument component of call `e` that satisfies `is`, if every
/// component before it has no effect (so it may be evaluated first).
fn first_component(ctx: &mut Ctx, e: ExprId, is: fn(&Expr) -> bool) -> Option<(Callee, Vec<ExprId>, bool, usize)> {
    let (c, comps, tupled) = call_parts(ctx, e)?;
    if !movable_callee(&c) {
        return None;
    }
    let k = comps.iter().position(|&x| is(ctx.expr(x)))?;
    if !comps[..k].iter().all(|&x| ctx.pure(x)) {
        return None;
    }
    Some((c, comps, tupled, k))
}

/// `f (.., let p = e in b, ..) ⇒ let p = e in f (.., b, ..)` (earlier arguments without effect; p renamed if free in the others).
fn let_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, mut comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::Let(..)))?;
    let (p, r, b) = let_parts(ctx, comps[k])?;
    let others: Vec<ExprId> = comps.iter().enumerate().filter(|(i, _)| *i != k).map(|(_, &x)| x).collect();
    let (p, b) = rename_pat_avoiding(ctx, &p, b, &others, &[]);
    comps[k] = b;
    let call = term::rebuild_call(ctx.b, e, comps, tupled);
    Some(let_(ctx, p, r, call))
}

/// `f (.., if c a b, ..) ⇒ if c (f (.., a, ..)) (f (.., b, ..))` when the other arguments are atoms.
fn if_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::If(..)))?;
    if comps.iter().enumerate().any(|(i, &x)| i != k && !ctx.is_atomic(x)) {
        return None;
    }
    let Expr::If(c, a, b) = ctx.expr(comps[k]).clone() else { return None };
    let mut then_comps = comps.clone();
    then_comps[k] = a;
    let mut else_comps: Vec<ExprId> = Vec::with_capacity(comps.len());
    for (i, &x) in comps.iter().enumerate() {
        else_comps.push(if i == k { b } else { copy_atom(ctx, x) });
    }
    let t = term::rebuild_call(ctx.b, e, then_comps, tupled);
    let f = term::rebuild_call(ctx.b, e, else_comps, tupled);
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::If(c, t, f), ty))
}

/// `f (.., assert c x, ..) ⇒ assert c (f (.., x, ..))` (earlier arguments without effect).
fn assert_float_arg(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (_, mut comps, tupled, k) = first_component(ctx, e, |x| matches!(x, Expr::Assert(..)))?;
    let Expr::Assert(c, x) = ctx.expr(comps[k]).clone() else { return None };
    comps[k] = x;
    let call = term::rebuild_call(ctx.b, e, comps, tupled);
    let ty = ctx.ty(e);
    Some(ctx.alloc(Expr::Assert(c, call), ty))
}

/// `if (let p = e in c) t f ⇒ let p = e in if c t f`, and the same for the condition of `assert` (p renamed if free in the rest).
fn let_float_cond(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let node = ctx.expr(e).clone();
    let (cond, rest) = match &node {
        Expr::If(c, t, f) => (*c, vec![*t, *f]),
        Expr::Assert(c, b) => (*c, vec![*b]),
        _ => return None,
    };
    let (p, r, c) = let_parts(ctx, cond)?;
    let (p, c) = rename_pat_avoiding(ctx, &p, c, &rest, &[]);
    let ty = ctx.ty(e);
    let inner = match node {
        Expr::If(..) => ctx.alloc(Expr::If(c, rest[0], rest[1]), ty),
        _ => ctx.alloc(Expr::Assert(c, rest[0]), ty),
    };
    Some(let_(ctx, p, r, inner))
}

// ---------------------------------------------------------------------------
// Tuples.

/// `get$i$n (tuple e1 .. en) ⇒ ei` when the other components have no effect.
fn get_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Get { index, arity }), a) = ctx.expr(e).clone() else { return None };
    let Expr::Tuple(es) = ctx.expr(a).clone() else { return None };
    if es.len() != arity as usize || index == 0 || index > arity {
        return None;
    }
    let i = index as usize - 1;
    if es.iter().enumerate().any(|(j, &x)| j != i && !ctx.pure(x)) {
        return None;
    }
    Some(es[i])
}

// ---------------------------------------------------------------------------
// Vectors.

/// `index i (build n (lam j e)) ⇒ let j = i in e` when `n` and `e` have no effect.
fn index_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [i, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    let (j, _, body) = lam_parts(ctx, f)?;
    if !ctx.pure(n) || !ctx.pure(body) {
        return None;
    }
    Some(let_(ctx, Pat::Var(j), i, body))
}

/// Is `e` a few nodes of reads and arithmetic: variables, literals,
/// `index`, `get`, `size`, `ts_scale`/`ts_neg` and the scalar `add`, `sub`,
/// `mul`, `neg` (what is cheaper to compute again than to load from a
/// vector of tuples)?
fn trivial(ctx: &Ctx, e: ExprId) -> bool {
    small_tree(ctx, e, TRIVIAL_NODES, |x| match ctx.expr(x) {
        Expr::Var(_) | Expr::Lit(_) | Expr::Tuple(_) => true,
        Expr::Call(Callee::Prim(Prim::Index | Prim::Get { .. } | Prim::Size | Prim::TsScale | Prim::TsNeg), _) => true,
        Expr::Call(Callee::Fun(f), _) => {
            f.derivs.is_empty()
                && matches!(f.base.as_str(), "add" | "sub" | "mul" | "neg")
                && matches!(ctx.ty(x), Type::Float | Type::Integer)
        }
        _ => false,
    })
}

/// The most nodes of a [`trivial`] expression.
const TRIVIAL_NODES: usize = 8;

/// `get$k$n (index i x) ⇒ let j = i in (the lets it needs) ek` when a `let`
/// in scope binds `x = build m (lam j (let .. in (tuple e1 .. en)))`, `i`
/// has no effect, and `ek` and the lets it needs are [`trivial`] and mean
/// here what they meant at the `let` (their free variables are not bound
/// again in between). Reverse mode makes such vectors of tuples (each
/// element's parts of a loop's cotangents) and reads each part in a loop of
/// its own: the part is computed where it is read (often a read of another
/// vector), not loaded from the strided tuples, which are then dead.
fn get_index_let_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Get { index, arity }), a) = ctx.expr(e).clone() else { return None };
    let [i, x] = prim_args(ctx, a, Prim::Index)?[..] else { return None };
    let Expr::Var(xn) = ctx.expr(x).clone() else { return None };
    let (pos, binding) = ctx.scope.lookup(&xn)?;
    let value = binding.value?;
    let [_, f] = prim_args(ctx, value, Prim::Build)?[..] else { return None };
    let (j, _, body) = lam_parts(ctx, f)?;
    let (lets, inner) = term::let_chain(ctx.b.body, body);
    let Expr::Tuple(es) = ctx.expr(inner).clone() else { return None };
    if es.len() != arity as usize || index == 0 || index > arity || !ctx.pure(i) {
        return None;
    }
    let ek = es[index as usize - 1];
    if !trivial(ctx, ek) {
        return None;
    }
    // The lets ek needs, innermost first: each trivial, with a variable.
    let mut need: Vec<Var> = ctx.cache.free_vars(ctx.b.body, ek).to_vec();
    let mut kept = Vec::new();
    for (p, r) in lets.iter().rev() {
        let Pat::Var(v) = p else { return None };
        if need.contains(v) {
            if !trivial(ctx, *r) {
                return None;
            }
            need.retain(|w| w != v);
            need.extend(ctx.cache.free_vars(ctx.b.body, *r).iter().cloned());
            kept.push((p.clone(), *r));
        }
    }
    // Free variables other than j must mean what they meant at the let.
    if need.iter().any(|v| *v != j && ctx.scope.lookup(v).is_some_and(|(p, _)| p >= pos)) {
        return None;
    }
    let copies = kept.into_iter().rev().map(|(p, r)| (p, term::deep_copy(ctx.b, r))).collect();
    let ek = term::deep_copy(ctx.b, ek);
    let t = term::wrap(ctx.b, copies, ek);
    Some(let_(ctx, Pat::Var(j), i, t))
}

/// `size (build n f) ⇒ n` when the body of `f` has no effect.
fn size_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    ctx.pure(f).then_some(n)
}

/// `size (constVec n x) ⇒ n` when `x` has no effect.
fn size_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, x] = prim_args(ctx, v, Prim::ConstVec)?[..] else { return None };
    ctx.pure(x).then_some(n)
}

/// `size (sumbuild n (lam i e)) ⇒ let i = 0 in size e` when `n` and `e`
/// have no effect: the elements a sumbuild adds have one size (reverse mode
/// asks for the size of a primal sumbuild of vectors to shape its
/// cotangent, and would otherwise compute the whole sum for it).
fn size_sumbuild(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(n) || !ctx.pure(body) {
        return None;
    }
    let zero = ctx.alloc(Expr::Lit(Lit::Integer(0)), Type::Integer);
    let s = ctx.prim(Prim::Size, vec![body])?;
    Some(let_(ctx, Pat::Var(i), zero, s))
}

/// `size (deltaVec n i x) ⇒ n` when `i` and `x` have no effect.
fn size_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Size)?[0];
    let [n, i, x] = prim_args(ctx, v, Prim::DeltaVec)?[..] else { return None };
    (ctx.pure(i) && ctx.pure(x)).then_some(n)
}

/// `index i (constVec n x) ⇒ x` when `i` and `n` have no effect.
fn index_constvec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [i, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
    let [n, x] = prim_args(ctx, v, Prim::ConstVec)?[..] else { return None };
    (ctx.pure(i) && ctx.pure(n)).then_some(x)
}

/// `sum (build n f) ⇒ sumbuild n f`.
fn sum_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Sum)?[0];
    let [n, f] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    ctx.prim(Prim::Sumbuild, vec![n, f])
}

/// The most `let`s that [`sumbuild_tuple`] copies into each component's
/// loop.
const SPLIT_LETS: usize = 6;

/// `sumbuild n (lam i (tuple e1 .. ek)) ⇒ tuple (sumbuild n (lam i e1)) ..
/// (sumbuild n (lam i ek))` when the body has no effect (n let-bound if not
/// atomic). The tuple may also be under `let`s, copied into each component
/// (`let`-dead then drops those it does not use), when one component is a
/// `deltaVec` and the `let`s are few and small, without loops or calls of
/// functions with a body: a term of reverse mode's loops, whose one-hot
/// component, on its own, is added into its accumulator in place
/// (lowering), where a sum of the tuples would add whole vectors per
/// iteration.
fn sumbuild_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    let (lets, inner) = term::let_chain(ctx.b.body, body);
    if lets.len() > SPLIT_LETS || lets.iter().any(|(_, r)| !small_element(ctx, *r)) {
        return None;
    }
    let Expr::Tuple(es) = ctx.expr(inner).clone() else { return None };
    if !ctx.pure(body) || (es.is_empty() && !ctx.pure(n)) {
        return None;
    }
    if !lets.is_empty() && !es.iter().any(|&x| prim_args(ctx, x, Prim::DeltaVec).is_some()) {
        return None;
    }
    // Each component's sumbuild is typed like the whole one's.
    if ity != ctx.ty(n) || es.iter().any(|&x| ctx.ty(x).contains_unknown()) {
        return None;
    }
    Some(share(ctx, n, "n", |ctx, n| {
        let parts = es
            .iter()
            .enumerate()
            .map(|(k, &x)| {
                let n = copy_atom(ctx, n);
                let copies = lets
                    .iter()
                    .map(|(p, r)| (p.clone(), if k == 0 { *r } else { term::deep_copy(ctx.b, *r) }))
                    .collect();
                let t = term::wrap(ctx.b, copies, x);
                let l = lam(ctx, &i, &ity, t);
                let ty = ctx.ty(x);
                let arg = ctx.b.tuple(vec![n, l]);
                ctx.alloc(Expr::Call(Callee::Prim(Prim::Sumbuild), arg), ty)
            })
            .collect();
        ctx.b.tuple(parts)
    }))
}

/// `sum (deltaVec n i e) ⇒ e` when `i` is known to lie in `0 .. n` and the elements are numbers.
fn sum_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let v = prim_args(ctx, e, Prim::Sum)?[0];
    let [n, i, x] = prim_args(ctx, v, Prim::DeltaVec)?[..] else { return None };
    if !numeric_leaves(&ctx.ty(x)) || !ctx.pure(n) || !ctx.pure(i) || !index_in_range(ctx, i, n) {
        return None;
    }
    Some(x)
}

/// `sumbuild n (lam i (deltaVec n i e)) ⇒ build n (lam i e)` when the elements are numbers (the two n alike, i not free in the inner n).
fn sumbuild_deltavec(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    let [m, j, x] = prim_args(ctx, body, Prim::DeltaVec)?[..] else { return None };
    if !matches!(ctx.expr(j), Expr::Var(w) if *w == i) || ctx.is_free(&i, m) || !ctx.alpha_eq(n, m) || !ctx.pure(m) {
        return None;
    }
    if !numeric_leaves(&ctx.ty(x)) {
        return None;
    }
    let l = lam(ctx, &i, &ity, x);
    ctx.prim(Prim::Build, vec![n, l])
}

/// `build n (lam i e) ⇒ constVec n e` when `i` is not free in `e`, `e` has no effect, and `e` cannot fail or `n` is a positive literal.
fn build_const(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Build)?[..] else { return None };
    let (i, _, body) = lam_parts(ctx, f)?;
    if ctx.is_free(&i, body) || !ctx.pure(body) {
        return None;
    }
    let positive = match ctx.expr(n).clone() {
        Expr::Lit(Lit::Integer(k)) => k > 0,
        Expr::Tuple(ks) => ks.iter().all(|&k| int_lit(ctx, k).is_some_and(|k| k > 0)),
        _ => false,
    };
    if !positive && !cannot_fail(ctx, body) {
        return None;
    }
    ctx.prim(Prim::ConstVec, vec![n, body])
}

/// `fold (lam (p : Tuple A (Tuple B1 .. Bk)) s) a (build n (lam (i :
/// Integer) (tuple e1 .. ek)))`: the components `ej` that do not mention
/// `i` and have no effect move into the step (each was evaluated once per
/// element, now once per step), and the fold runs over a build of the
/// others (one: itself; more: their tuple, read through `q`, fresh):
/// `fold (lam (q : Tuple A B') (let (p (tuple (get$1$2 q) (tuple .. ej ..
/// (get$r$m (get$2$2 q)) ..))) s)) a (build n (lam i e'))`. Forward mode
/// folds over (element, tangent) pairs whose tangent is a known zero; in
/// the step, the zero then annihilates what it scales.
fn fold_invariant_element(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [f, a, v] = prim_args(ctx, e, Prim::Fold)?[..] else { return None };
    let (p, pty, step) = lam_parts(ctx, f)?;
    let [n, g] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
    let (i, ity, elem) = lam_parts(ctx, g)?;
    let Expr::Tuple(es) = ctx.expr(elem).clone() else { return None };
    let Type::Tuple(ab) = pty.clone() else { return None };
    if ity != Type::Integer || ab.len() != 2 {
        return None;
    }
    let invariant: Vec<bool> = es.iter().map(|&x| !ctx.is_free(&i, x) && ctx.pure(x)).collect();
    let kept: Vec<ExprId> = es.iter().zip(&invariant).filter(|(_, &inv)| !inv).map(|(&x, _)| x).collect();
    if kept.is_empty() || kept.len() == es.len() {
        return None;
    }
    let m = kept.len() as u32;
    let elem2 = if m == 1 { kept[0] } else { ctx.b.tuple(kept) };
    let elem_ty = ctx.ty(elem2);
    let g2 = lam(ctx, &i, &ity, elem2);
    let v2 = ctx.prim(Prim::Build, vec![n, g2])?;
    let q = ctx.fresh_like(&p);
    let q_ty = Type::Tuple(vec![ab[0].clone(), elem_ty.clone()]);
    let get = |ctx: &mut Ctx, x: ExprId, k: u32, n: u32| ctx.prim(Prim::Get { index: k, arity: n }, vec![x]);
    let mut parts = Vec::new();
    let mut r = 0;
    for (&x, inv) in es.iter().zip(invariant) {
        if inv {
            parts.push(x);
            continue;
        }
        r += 1;
        let qv = ctx.alloc(Expr::Var(q.clone()), q_ty.clone());
        let y = get(ctx, qv, 2, 2)?;
        parts.push(if m == 1 { y } else { get(ctx, y, r, m)? });
    }
    let qv = ctx.alloc(Expr::Var(q.clone()), q_ty.clone());
    let acc = get(ctx, qv, 1, 2)?;
    let x = ctx.b.tuple(parts);
    let pv = ctx.b.tuple(vec![acc, x]);
    let body = let_(ctx, Pat::Var(p), pv, step);
    let f2 = lam(ctx, &q, &q_ty, body);
    ctx.prim(Prim::Fold, vec![f2, a, v2])
}

/// The size a `let` in scope gave the vector variable `v`: `build n ..`,
/// `constVec n ..`, or the first component of a variable bound to
/// `$buildSum n ..`; with the scope position of the binding whose right
/// side holds `n` (its variables mean there what they meant before it).
fn let_bound_size(ctx: &Ctx, v: &str) -> Option<(ExprId, usize)> {
    let (pos, binding) = ctx.scope.lookup(v)?;
    let value = binding.value?;
    if let Some(args) = prim_args(ctx, value, Prim::Build).or_else(|| prim_args(ctx, value, Prim::ConstVec)) {
        return Some((args[0], pos));
    }
    let [pair] = prim_args(ctx, value, Prim::Get { index: 1, arity: 2 })?[..] else { return None };
    let Expr::Var(c) = ctx.expr(pair) else { return None };
    let (cpos, cb) = ctx.scope.lookup(c)?;
    if cpos >= pos {
        return None;
    }
    Some((prim_args(ctx, cb.value?, Prim::BuildSum)?[0], cpos))
}

/// `build n (lam q (index q v)) ⇒ v` for a vector variable `v` whose size
/// is known to be `n`: `n` is `size v`, or a variable bound to `size v`, or
/// the variable `v`'s `let` gave as its size (reverse mode makes such
/// copies of a loop's cotangent vector).
fn build_index_same(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, f] = prim_args(ctx, e, Prim::Build)?[..] else { return None };
    let (q, _, body) = lam_parts(ctx, f)?;
    let [i, v] = prim_args(ctx, body, Prim::Index)?[..] else { return None };
    let (Expr::Var(iq), Expr::Var(vn)) = (ctx.expr(i).clone(), ctx.expr(v).clone()) else { return None };
    if iq != q || vn == q || ctx.ty(v) != ctx.ty(e) {
        return None;
    }
    let is_v = |ctx: &Ctx, x: ExprId| matches!(ctx.expr(x), Expr::Var(w) if *w == vn);
    let sized = |ctx: &Ctx, x: ExprId| prim_args(ctx, x, Prim::Size).is_some_and(|a| is_v(ctx, a[0]));
    let same = match ctx.expr(n).clone() {
        _ if sized(ctx, n) => true,
        Expr::Var(nn) => {
            let bound_before = |ctx: &Ctx, x: &str, at: usize| ctx.scope.lookup(x).is_none_or(|(p, _)| p < at);
            // v was made with size n, n meaning the same there as here.
            let made = let_bound_size(ctx, &vn).is_some_and(|(size, at)| {
                matches!(ctx.expr(size), Expr::Var(m) if *m == nn) && bound_before(ctx, &nn, at)
            });
            // n was bound to `size v`, v meaning the same there as here.
            let measured = ctx
                .scope
                .lookup(&nn)
                .and_then(|(p, b)| Some((p, b.value?)))
                .is_some_and(|(p, value)| sized(ctx, value) && bound_before(ctx, &vn, p));
            made || measured
        }
        _ => false,
    };
    same.then_some(v)
}

/// How a Float expression of a loop's body depends on the loop: not at all
/// (its value is the same in every iteration), or linearly through one
/// term (the expression is that term scaled by factors of the first kind:
/// `ts_scale`, `mul`, `neg`, `ts_neg` and `div` by such a factor, through
/// the body's own `let`s).
enum Dependence {
    Invariant,
    Linear(ExprId),
}

/// A loop body's index `i` and its own `let`s (name, right side; None for
/// a tuple pattern's names), innermost last.
struct LoopBody<'a> {
    i: &'a str,
    locals: &'a [(Var, Option<ExprId>)],
}

impl LoopBody<'_> {
    /// Does `e` read the index or a name the body binds?
    fn reads(&self, ctx: &mut Ctx, e: ExprId) -> bool {
        ctx.is_free(self.i, e) || self.locals.iter().any(|(v, _)| ctx.is_free(v, e))
    }

    /// Whether the body binds `v`, and then the right side of its `let`
    /// (None for a name a tuple pattern binds).
    fn local(&self, v: &str) -> Option<Option<ExprId>> {
        self.locals.iter().rev().find(|(w, _)| w == v).map(|(_, rhs)| *rhs)
    }

    /// `c` for `index j (build m (lam k c))` with `c` reading nothing of
    /// the loop (reverse mode's broadcast cotangent, read at the index).
    fn invariant_read(&self, ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
        let [_, v] = prim_args(ctx, e, Prim::Index)?[..] else { return None };
        let [_, g] = prim_args(ctx, v, Prim::Build)?[..] else { return None };
        let (k, _, c) = lam_parts(ctx, g)?;
        (!ctx.is_free(&k, c) && !self.reads(ctx, c)).then_some(c)
    }

    /// The two operands of a Float product or quotient `e` (and whether it
    /// divides), or the operand of a negation.
    fn factors(ctx: &Ctx, e: ExprId) -> Option<(Vec<ExprId>, bool)> {
        if ctx.ty(e) != Type::Float {
            return None;
        }
        let pair = |a: ExprId| match ctx.expr(a) {
            Expr::Tuple(xs) if xs.len() == 2 => Some(xs.clone()),
            _ => None,
        };
        let builtin = |f: &FunName| ctx.globals.is_builtin(f) && f.derivs.is_empty();
        match ctx.expr(e) {
            Expr::Call(Callee::Prim(Prim::TsScale), a) => Some((pair(*a)?, false)),
            Expr::Call(Callee::Prim(Prim::TsNeg), a) => Some((vec![*a], false)),
            Expr::Call(Callee::Fun(f), a)
                if builtin(f) && matches!(f.base.as_str(), "mul" | "div") && float_arith(f).is_some() =>
            {
                Some((pair(*a)?, f.base == "div"))
            }
            Expr::Call(Callee::Fun(f), a) if builtin(f) && f.base == "neg" && ctx.ty(*a) == Type::Float => {
                Some((vec![*a], false))
            }
            _ => None,
        }
    }

    /// [`Dependence`] of `e`; None when neither (a product of two terms).
    fn dependence(&self, ctx: &mut Ctx, e: ExprId) -> Option<Dependence> {
        if !self.reads(ctx, e) || self.invariant_read(ctx, e).is_some() {
            return Some(Dependence::Invariant);
        }
        if let Expr::Var(v) = ctx.expr(e).clone() {
            if let Some(rhs) = self.local(&v) {
                return self.dependence(ctx, rhs?);
            }
        }
        let Some((xs, divides)) = Self::factors(ctx, e) else { return Some(Dependence::Linear(e)) };
        let mut term = None;
        for (k, &x) in xs.iter().enumerate() {
            if let Dependence::Linear(t) = self.dependence(ctx, x)? {
                if term.is_some() || (divides && k == 1) {
                    return None;
                }
                term = Some(t);
            }
        }
        Some(term.map_or(Dependence::Invariant, Dependence::Linear))
    }

    /// `e` with its term `t` replaced by `y` and its invariant reads
    /// written out, so it stands outside the loop.
    fn replace(&self, ctx: &mut Ctx, e: ExprId, t: ExprId, y: ExprId) -> Option<ExprId> {
        if e == t {
            return Some(y);
        }
        // Invariant parts are copied: a node stands in one place.
        if !self.reads(ctx, e) {
            return Some(ctx.b.copy(e));
        }
        if let Some(c) = self.invariant_read(ctx, e) {
            return Some(ctx.b.copy(c));
        }
        if let Expr::Var(v) = ctx.expr(e).clone() {
            return self.replace(ctx, self.local(&v)??, t, y);
        }
        let (xs, _) = Self::factors(ctx, e)?;
        let parts = xs.into_iter().map(|x| self.replace(ctx, x, t, y)).collect::<Option<Vec<_>>>()?;
        let arg = if parts.len() == 1 { parts[0] } else { ctx.b.tuple(parts) };
        let Expr::Call(callee, _) = ctx.expr(e).clone() else { return None };
        Some(ctx.alloc(Expr::Call(callee, arg), Type::Float))
    }
}

/// `$buildSum n z (lam i B) ⇒ tuple (build n (lam i A)) S'` where `B` is
/// `(tuple A S)` under `let`s, `z` is `0.0` or a tuple of them, and each
/// Float component of the sum part `S` depends on the loop linearly
/// through one term `T` (see [`Dependence`]) whose sum `sumbuild n (lam i
/// T)` a `let` in scope has bound to `y` (with `T`'s variables meaning the
/// same there): `S'` is `S` with each `T` replaced by its `y`, the
/// factors taken out of the sum. Reverse mode makes this of a sum whose
/// terms are read again: log-sum-exp's cotangent of the maximum sums the
/// cotangents of `exp (x_i - max)` scaled by the same factor, which is
/// the sum of the exponentials (already computed) times that factor. The
/// rounding differs from summing the scaled terms (one multiplication
/// instead of n), and an empty loop's sum may become a zero of the other
/// sign.
fn buildsum_known_sums(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [n, z, f] = prim_args(ctx, e, Prim::BuildSum)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(body) {
        return None;
    }
    // The body's lets, and its pair.
    let (lets, at) = term::let_chain(ctx.b.body, body);
    let Expr::Tuple(pair) = ctx.expr(at).clone() else { return None };
    let [a, sum_part] = pair[..] else { return None };
    let locals: Vec<(Var, Option<ExprId>)> = lets
        .iter()
        .flat_map(|(p, rhs)| p.vars().iter().map(move |v| (v.clone(), matches!(p, Pat::Var(_)).then_some(*rhs))))
        .collect();
    // Each name the lets bind means that let everywhere after it: bound
    // once, not the index, and read by no right side before its own.
    for (k, (v, _)) in locals.iter().enumerate() {
        let own = lets.iter().position(|(p, _)| p.vars().contains(v)).unwrap_or(0);
        if *v == i || locals[..k].iter().any(|(w, _)| w == v) || lets[..=own].iter().any(|(_, r)| ctx.is_free(v, *r)) {
            return None;
        }
    }
    let (parts, zeros) = match (ctx.expr(sum_part).clone(), ctx.expr(z).clone()) {
        (Expr::Tuple(ps), Expr::Tuple(zs)) if ps.len() == zs.len() => (ps, zs),
        (Expr::Tuple(_), _) | (_, Expr::Tuple(_)) => return None,
        _ => (vec![sum_part], vec![z]),
    };
    let positive_zero = |ctx: &Ctx, x: ExprId| float_lit(ctx, x).is_some_and(|v| v == 0.0 && v.is_sign_positive());
    if !zeros.iter().all(|&x| positive_zero(ctx, x)) || parts.iter().any(|&x| ctx.ty(x) != Type::Float) {
        return None;
    }
    let lb = LoopBody { i: &i, locals: &locals };
    let mut sums = Vec::new();
    for &part in &parts {
        let Dependence::Linear(t) = lb.dependence(ctx, part)? else { return None };
        // The term with the body's lets put in: it reads only i and what
        // stands outside the loop.
        let mut full = t;
        for (v, rhs) in locals.iter().rev() {
            if ctx.is_free(v, full) {
                full = ctx.substitute(full, &[(v.clone(), (*rhs)?)], false);
            }
        }
        if locals.iter().any(|(v, _)| ctx.is_free(v, full)) {
            return None;
        }
        let lam_t = lam(ctx, &i, &ity, full);
        let n_copy = ctx.b.copy(n);
        let wanted = ctx.prim(Prim::Sumbuild, vec![n_copy, lam_t])?;
        // A let in scope bound that sum, and nothing it reads is bound
        // again since.
        let found = ctx.scope.bindings().iter().enumerate().rev().find_map(|(pos, binding)| {
            let value = binding.value?;
            (ctx.alpha_eq(value, wanted) && ctx.scope.lookup(&binding.name).is_some_and(|(p, _)| p == pos))
                .then(|| (pos, binding.name.clone()))
        })?;
        let later: Vec<Var> = ctx.scope.bindings()[found.0 + 1..].iter().map(|b| b.name.clone()).collect();
        if later.iter().any(|v| ctx.is_free(v, wanted)) {
            return None;
        }
        let y = ctx.alloc(Expr::Var(found.1), Type::Float);
        sums.push(lb.replace(ctx, part, t, y)?);
    }
    let elems = term::wrap(ctx.b, lets, a);
    let g = lam(ctx, &i, &ity, elems);
    let built = ctx.prim(Prim::Build, vec![n, g])?;
    let summed = if matches!(ctx.expr(sum_part), Expr::Tuple(_)) { ctx.b.tuple(sums) } else { sums[0] };
    Some(ctx.b.tuple(vec![built, summed]))
}

// ---------------------------------------------------------------------------
// Tangent arithmetic.

/// Is `z` a known zero without effect: written out, or a variable that a
/// `let` in scope binds to one? (Reverse mode binds the zero cotangents of
/// a loop's outer variables once and adds them in every iteration.)
fn known_zero(ctx: &mut Ctx, z: ExprId) -> bool {
    let bound = match ctx.b.expr(z) {
        Expr::Var(v) => ctx.scope.lookup(v).and_then(|(_, binding)| binding.value),
        _ => Some(z),
    };
    bound.is_some_and(|r| is_zero(ctx.b.body, r) && ctx.pure(r))
}

/// `ts_add x 0 ⇒ x` for a known zero without effect.
fn ts_add_zero_right(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, z] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    known_zero(ctx, z).then_some(x)
}

/// `ts_add 0 y ⇒ y` for a known zero without effect, when `y` has the result's type.
fn ts_add_zero_left(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [z, y] = prim_args(ctx, e, Prim::TsAdd)?[..] else { return None };
    (known_zero(ctx, z) && ctx.ty(y) == ctx.ty(e)).then_some(y)
}

/// `ts_scale 1.0 x ⇒ x`.
fn ts_scale_one(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, x] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    (float_lit(ctx, k)? == 1.0).then_some(x)
}

/// `ts_scale 0.0 y ⇒ zero shaped like y` when `y` has no effect and is made of Floats.
fn ts_scale_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, y] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    if float_lit(ctx, k)? != 0.0 || !ctx.pure(y) || !is_own_tangent(&ctx.ty(y)) || is_zero(ctx.b.body, y) {
        return None;
    }
    Some(ctx.b.zero_tangent(y))
}

/// `ts_scale k 0 ⇒ 0` for a known zero, when `k` has no effect.
fn ts_scale_of_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [k, z] = prim_args(ctx, e, Prim::TsScale)?[..] else { return None };
    (is_zero(ctx.b.body, z) && ctx.pure(k)).then_some(z)
}

/// `ts_dot 0 y ⇒ 0.0` and `ts_dot x 0 ⇒ 0.0` for a known zero, when the other operand has no effect.
fn ts_dot_zero(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let [x, y] = prim_args(ctx, e, Prim::TsDot)?[..] else { return None };
    let zero = (is_zero(ctx.b.body, x) || is_zero(ctx.b.body, y)) && ctx.pure(x) && ctx.pure(y);
    zero.then(|| ctx.b.float(0.0))
}

// ---------------------------------------------------------------------------
// Conditionals.

/// `if true t e ⇒ t`.
fn if_true(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, t, _) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(true))).then_some(t)
}

/// `if false t e ⇒ e`.
fn if_false(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, _, f) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(false))).then_some(f)
}

/// `if c t t' ⇒ t` when the branches are alpha-equal and `c` has no effect.
fn if_same(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::If(c, t, f) = ctx.expr(e).clone() else { return None };
    (ctx.pure(c) && ctx.alpha_eq(t, f)).then_some(t)
}

/// `assert true e ⇒ e`.
fn assert_true(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Assert(c, b) = ctx.expr(e).clone() else { return None };
    matches!(ctx.expr(c), Expr::Lit(Lit::Bool(true))).then_some(b)
}

// ---------------------------------------------------------------------------
// Constant folding.

/// `add`/`sub`/`mul`/`div` of two Float literals (the built-ins) ⇒ the literal result, when finite.
fn fold_float(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let result = match (&c, &comps[..]) {
        (Callee::Fun(f), [a, b]) if ctx.globals.is_builtin(f) => {
            float_arith(f)?(float_lit(ctx, *a)?, float_lit(ctx, *b)?)
        }
        (Callee::Fun(f), [a])
            if f.base == "neg"
                && f.derivs.is_empty()
                && f.base_ty == Some(Type::Float)
                && ctx.globals.is_builtin(f) =>
        {
            -float_lit(ctx, *a)?
        }
        (Callee::Prim(Prim::TsAdd), [a, b]) => float_lit(ctx, *a)? + float_lit(ctx, *b)?,
        (Callee::Prim(Prim::TsScale), [a, b]) => float_lit(ctx, *a)? * float_lit(ctx, *b)?,
        _ => return None,
    };
    result.is_finite().then(|| ctx.b.float(result))
}

/// `add`/`sub`/`mul`/`div` of two Integer literals (the built-ins) ⇒ the literal result, unless it overflows or divides by zero.
fn fold_integer(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (Callee::Fun(f), comps, _) = call_parts(ctx, e)? else { return None };
    if !ctx.globals.is_builtin(&f) {
        return None;
    }
    let result = match &comps[..] {
        [a, b] => int_arith(&f)?(int_lit(ctx, *a)?, int_lit(ctx, *b)?)?,
        [a] if f.base == "neg" && f.derivs.is_empty() && f.base_ty == Some(Type::Integer) => {
            int_lit(ctx, *a)?.checked_neg()?
        }
        _ => return None,
    };
    Some(ctx.b.integer(result))
}

/// `lt`/`gt`/`lte`/`gte` of two Float or Integer literals, and `eq`/`ne` of Integer, Bool or String literals ⇒ the Bool.
/// Also a comparison of an Integer variable with itself (`lt n n ⇒ false`, `lte n n ⇒ true`, ...).
fn fold_compare(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let [a, b] = comps[..] else { return None };
    let (la, lb) = match (ctx.expr(a), ctx.expr(b)) {
        (Expr::Lit(x), Expr::Lit(y)) => (x.clone(), y.clone()),
        (Expr::Var(x), Expr::Var(y)) if x == y && ctx.ty(a) == Type::Integer => (Lit::Integer(0), Lit::Integer(0)),
        _ => return None,
    };
    let value = match &c {
        Callee::Prim(p @ (Prim::Eq | Prim::Ne)) => {
            let same = match (&la, &lb) {
                (Lit::Integer(_), Lit::Integer(_))
                | (Lit::Bool(_), Lit::Bool(_))
                | (Lit::String(_), Lit::String(_)) => la == lb,
                _ => return None,
            };
            same == (*p == Prim::Eq)
        }
        Callee::Fun(f) if f.derivs.is_empty() && ctx.globals.is_builtin(f) => {
            use std::cmp::Ordering::*;
            let o = match (&la, &lb) {
                (Lit::Integer(i), Lit::Integer(j)) => Some(i.cmp(j)),
                // None for a NaN: every comparison is false, as in the native prelude.
                (Lit::Float(x), Lit::Float(y)) => x.partial_cmp(y),
                _ => return None,
            };
            match f.base.as_str() {
                "lt" => o == Some(Less),
                "gt" => o == Some(Greater),
                "lte" => matches!(o, Some(Less | Equal)),
                "gte" => matches!(o, Some(Greater | Equal)),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(ctx.alloc(Expr::Lit(Lit::Bool(value)), Type::Bool))
}

/// `lt i n ⇒ true` (built-in, Integers) when `i` is the index of a `build` or `sumbuild` of size `n`.
fn lt_index_size(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let (c, comps, _) = call_parts(ctx, e)?;
    let Callee::Fun(f) = &c else { return None };
    if f.base != "lt" || !f.derivs.is_empty() || !ctx.globals.is_builtin(f) {
        return None;
    }
    let [i, n] = comps[..] else { return None };
    if ctx.ty(i) != Type::Integer || !index_in_range(ctx, i, n) {
        return None;
    }
    Some(ctx.alloc(Expr::Lit(Lit::Bool(true)), Type::Bool))
}

// ---------------------------------------------------------------------------
// Inlining.

/// `f a ⇒ let params = a in body` for a definition of `f` whose body is fully typed.
fn inline_call(ctx: &mut Ctx, call: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Fun(f), arg) = ctx.expr(call).clone() else { return None };
    let def = ctx.globals.def(&f)?;
    // Only definitions that checked cleanly.
    let mut stack = vec![def.root];
    while let Some(x) = stack.pop() {
        if def.body.ty(x).contains_unknown() {
            return None;
        }
        stack.extend(term::children(&def.body.exprs[x]));
    }
    if def.ret_ty != ctx.ty(call) {
        return None;
    }
    let body = term::copy_tree(ctx.b.body, Some(&def.body), def.root);
    // Fresh names from now on must not be among the callee's `ksc$` names
    // (a binder renamed to avoid capture would collide with one of them).
    term::bump_fresh(ctx.b, body);
    let pat = match &def.params[..] {
        [] => {
            if ctx.pure(arg) {
                return Some(body);
            }
            Pat::Var(ctx.b.fresh_name("unit"))
        }
        [p] => Pat::Var(p.name.clone()),
        ps => Pat::Tuple(ps.iter().map(|p| p.name.clone()).collect()),
    };
    Some(let_(ctx, pat, arg, body))
}

/// `$inline (f a) ⇒ let params = a in body of f` (always, when f's definition is known).
fn inline_marked(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Prim(Prim::Inline), call) = ctx.expr(e).clone() else { return None };
    inline_call(ctx, call)
}

/// `f a ⇒ let params = a in body of f` when f is not recursive and its
/// body is small, counting the bodies of the small functions it calls
/// (which are inlined in turn) ([`crate::Globals::expanded_size`]).
fn inline_small(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let Expr::Call(Callee::Fun(f), _) = ctx.expr(e).clone() else { return None };
    ctx.globals.small_def(&f, ctx.options.inline_size, crate::Measure::Tree)?;
    if ctx.globals.is_recursive(&f) {
        return None;
    }
    // Small with the small calls it brings in inlined too: the engine goes
    // on to inline those, so a chain of small functions (g1 calls g0, g2
    // calls g1, ...) was inlined whole, and every derivative of gN held
    // a copy of the chain (quadratic in the program).
    ctx.globals.expanded_size(&f, ctx.options.inline_size, ctx.options.inline_size)?;
    inline_call(ctx, e)
}

// ---------------------------------------------------------------------------
// Shapes (reference 5.6). `let`, `if` and `assert` around the argument of
// `shape` float out with the floating rules; these push `shape` into the
// rest, so the shape is computed without the values where it can be.

/// The argument of `shape` at `e`.
fn shape_arg(ctx: &Ctx, e: ExprId) -> Option<ExprId> {
    Some(prim_args(ctx, e, Prim::Shape)?[0])
}

/// `shape e ⇒ ()` when `e`'s type has a trivial shape (scalars, tuples of
/// scalars) and `e` has no effect.
fn shape_trivial(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    if !ctx.ty(x).shape_is_trivial() || !ctx.pure(x) {
        return None;
    }
    Some(ctx.b.tuple(Vec::new()))
}

/// `shape (tuple e1 .. en) ⇒ tuple (shape e1) .. (shape en)`.
fn shape_tuple(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Tuple(es) = ctx.expr(x).clone() else { return None };
    if ctx.ty(x).shape_is_trivial() {
        return None;
    }
    let shapes = es.into_iter().map(|c| ctx.prim(Prim::Shape, vec![c])).collect::<Option<Vec<_>>>()?;
    Some(ctx.b.tuple(shapes))
}

/// `shape (build n (lam i e)) ⇒ n` when e's shape is trivial and e has no
/// effect; `⇒ build n (lam i (shape e))` otherwise. The same for `constVec`.
fn shape_build(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    if let Some([n, f]) = prim_args(ctx, x, Prim::Build).as_deref() {
        let (n, f) = (*n, *f);
        let (i, ity, body) = lam_parts(ctx, f)?;
        if ctx.ty(body).shape_is_trivial() {
            return ctx.pure(body).then_some(n);
        }
        let s = ctx.prim(Prim::Shape, vec![body])?;
        let l = lam(ctx, &i, &ity, s);
        return ctx.prim(Prim::Build, vec![n, l]);
    }
    let [n, v] = prim_args(ctx, x, Prim::ConstVec)?[..] else { return None };
    if ctx.ty(v).shape_is_trivial() {
        return ctx.pure(v).then_some(n);
    }
    let s = ctx.prim(Prim::Shape, vec![v])?;
    ctx.prim(Prim::ConstVec, vec![n, s])
}

/// `shape (sumbuild n (lam i e)) ⇒ let i = 0 in shape e` when e has no
/// effect: every term of a sum that succeeds has the same shape.
fn shape_sumbuild(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let [_, f] = prim_args(ctx, x, Prim::Sumbuild)?[..] else { return None };
    let (i, ity, body) = lam_parts(ctx, f)?;
    if ity != Type::Integer || !ctx.pure(body) {
        return None;
    }
    let zero = ctx.alloc(Expr::Lit(Lit::Integer(0)), Type::Integer);
    let s = ctx.prim(Prim::Shape, vec![body])?;
    Some(let_(ctx, Pat::Var(i), zero, s))
}

/// `shape (ts_add a b) ⇒ shape a` when b has no effect; `shape (ts_scale k
/// v)`, `shape (ts_neg v) ⇒ shape v` (k without effect).
fn shape_tangent(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let (p, args) = ksc_linmap::builder::prim_call(ctx.b.body, x)?;
    let (keep, drop) = match (p, &args[..]) {
        (Prim::TsAdd, [a, b]) => (*a, Some(*b)),
        (Prim::TsScale, [k, v]) => (*v, Some(*k)),
        (Prim::TsNeg, [v]) => (*v, None),
        _ => return None,
    };
    if ctx.ty(keep) != ctx.ty(x) || drop.is_some_and(|d| !ctx.pure(d)) {
        return None;
    }
    ctx.prim(Prim::Shape, vec![keep])
}

/// `shape (f a) ⇒ [shape f] a` when the program defines `[shape f]` (a
/// user-written shape function, or one a `gdef shape` derived), unless
/// that definition is itself the shape of a call of f.
fn shape_call(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Call(Callee::Fun(f), a) = ctx.expr(x).clone() else { return None };
    let name = f.derived(ksc_ir::Derivation::Shape);
    let def = ctx.globals.def(&name)?;
    if def.ret_ty != ctx.ty(e) || def.arg_ty() != ctx.ty(a) || shape_of_call_of(def, &f) {
        return None;
    }
    let ty = def.ret_ty.clone();
    Some(ctx.alloc(Expr::Call(Callee::Fun(name), a), ty))
}

/// The most nodes a function may have for `shape-inline`.
const SHAPE_INLINE: usize = 2000;

/// `shape (f a) ⇒ shape ($inline (f a))` when f has a body of at most
/// [`SHAPE_INLINE`] nodes, is not recursive, prints nothing and has no
/// `[shape f]` (then `shape-call` applies): the shape rules then compute
/// the shape of f's result without its values where they can (`[jac f]`
/// sizes its matrix so, without running f).
fn shape_inline(ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
    let x = shape_arg(ctx, e)?;
    let Expr::Call(Callee::Fun(f), _) = ctx.expr(x).clone() else { return None };
    if ctx.globals.def(&f.derived(ksc_ir::Derivation::Shape)).is_some() || ctx.globals.is_recursive(&f) || !ctx.pure(x)
    {
        return None;
    }
    ctx.globals.small_def(&f, SHAPE_INLINE, crate::Measure::Tree)?;
    let inlined = ctx.prim(Prim::Inline, vec![x])?;
    ctx.prim(Prim::Shape, vec![inlined])
}

/// Does `def` contain `shape (f ..)` (possibly through `$inline`)?
fn shape_of_call_of(def: &ksc_ir::Def, f: &FunName) -> bool {
    let calls_f = |e: ExprId| {
        let e = match &def.body.exprs[e] {
            Expr::Call(Callee::Prim(Prim::Inline), inner) => *inner,
            _ => e,
        };
        matches!(&def.body.exprs[e], Expr::Call(Callee::Fun(g), _) if g == f)
    };
    let mut stack = vec![def.root];
    while let Some(x) = stack.pop() {
        if let Expr::Call(Callee::Prim(Prim::Shape), a) = &def.body.exprs[x] {
            if calls_f(*a) {
                return true;
            }
        }
        stack.extend(term::children(&def.body.exprs[x]));
    }
    false
}

// ---------------------------------------------------------------------------
// The table.

const LET: &str = "let (reference 6.2)";
const FLOAT: &str = "floating (reference 6.3)";
const TUPLE: &str = "tuples (reference 6.3)";
const VEC: &str = "vectors (reference 6.3)";
const TANGENT: &str = "tangent arithmetic (reference 6.3)";
const IF: &str = "conditionals (reference 6.3)";
const FOLD: &str = "constant folding (reference 6.3)";
const INLINE: &str = "inlining (reference 6.3)";
const SHAPE: &str = "shapes (reference 5.6)";

/// Every Core rule, in the order they are tried.
pub static CORE_RULES: &[CoreRule] = &[
    CoreRule { name: "let-atom", statement: "let x = a in b ⇒ b[x := a] for a variable, literal or $dummy a", group: LET, head: Head::Let, rewrite: let_atom },
    CoreRule { name: "let-dead", statement: "let p = e in b ⇒ b when p's variables are not free in b and e has no effect", group: LET, head: Head::Let, rewrite: let_dead },
    CoreRule { name: "let-once", statement: "let x = e in b ⇒ b[x := e] when x occurs once in b, not under a lambda, and e has no effect", group: LET, head: Head::Let, rewrite: let_once },
    CoreRule { name: "let-linear-map", statement: "let m = L in b ⇒ b[m := L] for a linear map L built by combinators over atoms", group: LET, head: Head::Let, rewrite: let_linear_map },
    CoreRule { name: "let-float-let", statement: "let p = (let q = a in b) in c ⇒ let q = a in let p = b in c (q renamed if free in c)", group: LET, head: Head::Let, rewrite: let_float_let },
    CoreRule { name: "let-tuple-split", statement: "let (a1 .. an) = (tuple e1 .. en) in b ⇒ let a1 = e1 in .. let an = en in b", group: TUPLE, head: Head::Let, rewrite: let_tuple_split },
    CoreRule { name: "let-tuple-var", statement: "let x = (tuple e1 .. en) in b ⇒ let xi = ei .. in b[x := (tuple a1 .. an)], naming (fresh xi) the ei that are not atoms, when b does not splat x", group: TUPLE, head: Head::Let, rewrite: let_tuple_var },
    CoreRule { name: "let-tuple-atoms", statement: "let x = (tuple a1 .. an) in b ⇒ b[x := (tuple a1 .. an)] for atoms ai, when b does not splat x", group: TUPLE, head: Head::Let, rewrite: let_tuple_atoms },
    CoreRule { name: "let-build", statement: "let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)] when b reads x at most 3 times, by index or size, n is an atom and e is small, pure, without loops or calls of functions with a body, and (if e calls more than arithmetic, as exp) no read is under two lambdas of b", group: VEC, head: Head::Let, rewrite: let_build },
    CoreRule { name: "let-build-loop", statement: "let x = build n (lam i e) in b ⇒ b[x := build n (lam i e)] when b reads x once, as index j x in a build or sumbuild over n with index j that is under no other lambda, and e is pure", group: VEC, head: Head::Let, rewrite: let_build_loop },
    CoreRule { name: "let-build-lazy", statement: "let x = build n (lam i e) in b ⇒ let c = lt cost n in let x' = if c (constVec 0 $dummy) (build n (lam i e)) in b[x := if c (build n (lam i e)) x'] when e is expensive and pure and b reads x by index at most 4 times (cost elements: the sum of the sizes of the loops around each read) and by size", group: VEC, head: Head::Let, rewrite: let_build_lazy },
    CoreRule { name: "let-zero", statement: "let x = Z in b ⇒ b[x := Z] for a known zero Z (constVec sizes atoms) when b uses x only as an operand of ts_add or the vector of index and size", group: TANGENT, head: Head::Let, rewrite: let_zero },
    CoreRule { name: "let-constvec", statement: "let x = constVec n a in b ⇒ b[x := constVec n a] for an atom a and n without effect, when b uses x only as the vector of index and size", group: VEC, head: Head::Let, rewrite: let_constvec },
    CoreRule { name: "let-float-arg", statement: "f (.., let p = e in b, ..) ⇒ let p = e in f (.., b, ..) when earlier arguments have no effect", group: FLOAT, head: Head::AnyCall, rewrite: let_float_arg },
    CoreRule { name: "if-float-arg", statement: "f (.., if c a b, ..) ⇒ if c (f (.., a, ..)) (f (.., b, ..)) when the other arguments are atoms", group: FLOAT, head: Head::AnyCall, rewrite: if_float_arg },
    CoreRule { name: "assert-float-arg", statement: "f (.., assert c x, ..) ⇒ assert c (f (.., x, ..)) when earlier arguments have no effect", group: FLOAT, head: Head::AnyCall, rewrite: assert_float_arg },
    CoreRule { name: "let-float-cond", statement: "if (let p = e in c) t f ⇒ let p = e in if c t f (p renamed if free in t or f)", group: FLOAT, head: Head::If, rewrite: let_float_cond },
    CoreRule { name: "let-float-assert", statement: "assert (let p = e in c) b ⇒ let p = e in assert c b (p renamed if free in b)", group: FLOAT, head: Head::Assert, rewrite: let_float_cond },
    CoreRule { name: "get-tuple", statement: "get$i$n (tuple e1 .. en) ⇒ ei when the other components have no effect", group: TUPLE, head: Head::AnyCall, rewrite: get_tuple },
    CoreRule { name: "index-build", statement: "index i (build n (lam j e)) ⇒ let j = i in e when n and e have no effect", group: VEC, head: Head::Prim(Prim::Index), rewrite: index_build },
    CoreRule { name: "get-index-let-build", statement: "get$k$n (index i x) ⇒ let j = i in ek (with the lets it needs) when a let in scope binds x = build m (lam j (let .. in (tuple e1 .. en))), i has no effect and ek is a few reads and arithmetic meaning the same here", group: VEC, head: Head::AnyCall, rewrite: get_index_let_build },
    CoreRule { name: "size-build", statement: "size (build n f) ⇒ n when f's body has no effect", group: VEC, head: Head::Prim(Prim::Size), rewrite: size_build },
    CoreRule { name: "size-constvec", statement: "size (constVec n x) ⇒ n when x has no effect", group: VEC, head: Head::Prim(Prim::Size), rewrite: size_constvec },
    CoreRule { name: "size-sumbuild", statement: "size (sumbuild n (lam i e)) ⇒ let i = 0 in size e when n and e have no effect", group: VEC, head: Head::Prim(Prim::Size), rewrite: size_sumbuild },
    CoreRule { name: "size-deltavec", statement: "size (deltaVec n i x) ⇒ n when i and x have no effect", group: VEC, head: Head::Prim(Prim::Size), rewrite: size_deltavec },
    CoreRule { name: "index-constvec", statement: "index i (constVec n x) ⇒ x when i and n have no effect", group: VEC, head: Head::Prim(Prim::Index), rewrite: index_constvec },
    CoreRule { name: "sum-build", statement: "sum (build n f) ⇒ sumbuild n f", group: VEC, head: Head::Prim(Prim::Sum), rewrite: sum_build },
    CoreRule { name: "sumbuild-tuple", statement: "sumbuild n (lam i (tuple e1 .. ek)) ⇒ tuple (sumbuild n (lam i e1)) .. when the body has no effect; the tuple may be under small lets (copied into each component) when a component is a deltaVec", group: VEC, head: Head::Prim(Prim::Sumbuild), rewrite: sumbuild_tuple },
    CoreRule { name: "sum-deltavec", statement: "sum (deltaVec n i e) ⇒ e when i is known to be in 0..n and e is made of numbers", group: VEC, head: Head::Prim(Prim::Sum), rewrite: sum_deltavec },
    CoreRule { name: "sumbuild-deltavec", statement: "sumbuild n (lam i (deltaVec n i e)) ⇒ build n (lam i e) when e is made of numbers", group: VEC, head: Head::Prim(Prim::Sumbuild), rewrite: sumbuild_deltavec },
    CoreRule { name: "build-index-same", statement: "build n (lam q (index q v)) ⇒ v for a variable v whose size is known to be n (n is size v, a variable bound to size v, or the size v's let built it with)", group: VEC, head: Head::Prim(Prim::Build), rewrite: build_index_same },
    CoreRule { name: "build-const", statement: "build n (lam i e) ⇒ constVec n e when i is not free in e, e has no effect and cannot fail (or n > 0)", group: VEC, head: Head::Prim(Prim::Build), rewrite: build_const },
    CoreRule { name: "buildsum-known-sums", statement: "$buildSum n 0.0 (lam i (tuple a s)) ⇒ tuple (build n (lam i a)) s' when each Float component of s is a term t scaled by factors without i (ts_scale, mul, neg, div by them) and a let in scope binds y = sumbuild n (lam i t): s' is s with t replaced by y", group: VEC, head: Head::Prim(Prim::BuildSum), rewrite: buildsum_known_sums },
    CoreRule { name: "fold-invariant-element", statement: "fold (lam p s) a (build n (lam i (tuple e1 .. ek))) ⇒ fold (lam q (let p = (tuple (get$1$2 q) (tuple .. ej ..)) in s)) a (build n (lam i e')) for the components ej without i and effect (e' the others, read from get$2$2 q)", group: VEC, head: Head::Prim(Prim::Fold), rewrite: fold_invariant_element },
    CoreRule { name: "ts-add-tuple", statement: "ts_add (tuple a1 .. an) (tuple b1 .. bn) ⇒ tuple (ts_add a1 b1) .. (ts_add an bn) when no component has an effect", group: TANGENT, head: Head::Prim(Prim::TsAdd), rewrite: ts_add_tuple },
    CoreRule { name: "ts-add-zero-right", statement: "ts_add x 0 ⇒ x (0 a known zero, or a variable let-bound to one)", group: TANGENT, head: Head::Prim(Prim::TsAdd), rewrite: ts_add_zero_right },
    CoreRule { name: "ts-add-zero-left", statement: "ts_add 0 y ⇒ y when y has the result's type (0 a known zero, or a variable let-bound to one)", group: TANGENT, head: Head::Prim(Prim::TsAdd), rewrite: ts_add_zero_left },
    CoreRule { name: "ts-scale-one", statement: "ts_scale 1.0 x ⇒ x", group: TANGENT, head: Head::Prim(Prim::TsScale), rewrite: ts_scale_one },
    CoreRule { name: "ts-scale-zero", statement: "ts_scale 0.0 y ⇒ the zero shaped like y, when y has no effect and is made of Floats", group: TANGENT, head: Head::Prim(Prim::TsScale), rewrite: ts_scale_zero },
    CoreRule { name: "ts-scale-of-zero", statement: "ts_scale k 0 ⇒ 0 when k has no effect", group: TANGENT, head: Head::Prim(Prim::TsScale), rewrite: ts_scale_of_zero },
    CoreRule { name: "ts-dot-zero", statement: "ts_dot 0 y ⇒ 0.0, ts_dot x 0 ⇒ 0.0 when the other operand has no effect", group: TANGENT, head: Head::Prim(Prim::TsDot), rewrite: ts_dot_zero },
    CoreRule { name: "if-true", statement: "if true t e ⇒ t", group: IF, head: Head::If, rewrite: if_true },
    CoreRule { name: "if-false", statement: "if false t e ⇒ e", group: IF, head: Head::If, rewrite: if_false },
    CoreRule { name: "if-same", statement: "if c t t' ⇒ t when t and t' are alpha-equal and c has no effect", group: IF, head: Head::If, rewrite: if_same },
    CoreRule { name: "assert-true", statement: "assert true e ⇒ e", group: IF, head: Head::Assert, rewrite: assert_true },
    CoreRule { name: "fold-float", statement: "add/sub/mul/div/neg of Float literals (built-ins), ts_add/ts_scale of Float literals ⇒ the literal, when finite", group: FOLD, head: Head::AnyCall, rewrite: fold_float },
    CoreRule { name: "fold-integer", statement: "add/sub/mul/div/neg of Integer literals (built-ins) ⇒ the literal, unless it overflows or divides by zero", group: FOLD, head: Head::Fun, rewrite: fold_integer },
    CoreRule { name: "fold-compare", statement: "lt/gt/lte/gte of number literals, eq/ne of Integer, Bool or String literals, any of an Integer variable with itself ⇒ the Bool", group: FOLD, head: Head::AnyCall, rewrite: fold_compare },
    CoreRule { name: "lt-index-size", statement: "lt i n ⇒ true when i is the index of a build or sumbuild of size n", group: FOLD, head: Head::Fun, rewrite: lt_index_size },
    CoreRule { name: "shape-trivial", statement: "shape e ⇒ () when e's type has a trivial shape and e has no effect", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_trivial },
    CoreRule { name: "shape-tuple", statement: "shape (tuple e1 .. en) ⇒ tuple (shape e1) .. (shape en)", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_tuple },
    CoreRule { name: "shape-build", statement: "shape (build n (lam i e)) ⇒ n when e has a trivial shape and no effect, else build n (lam i (shape e)); the same for constVec", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_build },
    CoreRule { name: "shape-sumbuild", statement: "shape (sumbuild n (lam i e)) ⇒ let i = 0 in shape e when e has no effect", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_sumbuild },
    CoreRule { name: "shape-tangent", statement: "shape (ts_add a b) ⇒ shape a, shape (ts_scale k v) ⇒ shape v, shape (ts_neg v) ⇒ shape v, when the dropped operand has no effect", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_tangent },
    CoreRule { name: "shape-call", statement: "shape (f a) ⇒ [shape f] a when the program defines [shape f] other than as the shape of f", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_call },
    CoreRule { name: "shape-inline", statement: "shape (f a) ⇒ shape ($inline (f a)) when f has a body of at most 2000 nodes, is not recursive, has no effect and no [shape f]", group: SHAPE, head: Head::Prim(Prim::Shape), rewrite: shape_inline },
    CoreRule { name: "inline-marked", statement: "$inline (f a) ⇒ let params = a in (body of f)", group: INLINE, head: Head::Prim(Prim::Inline), rewrite: inline_marked },
    CoreRule { name: "inline-small", statement: "f a ⇒ let params = a in (body of f) when f is not recursive and its body is small (with the small functions it calls inlined in turn)", group: INLINE, head: Head::Fun, rewrite: inline_small },
];
