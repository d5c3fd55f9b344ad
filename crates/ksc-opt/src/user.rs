//! User rules: `(rule "name" ((v : T) ..) lhs rhs)` (knossos-reference.md
//! 6.4).
//!
//! The left side is matched structurally against a term of the body being
//! rewritten. The rule's parameters are pattern variables: one matches any
//! expression of its declared type; a repeated one matches alpha-equal
//! expressions (which must have no effect, as one of them is dropped).
//! Literals match equal literals, calls match calls of the identical
//! function (same name, base type and result type), lambdas and lets match
//! up to renaming of their binders, `if`, `assert` and tuples match
//! structurally. A pattern variable inside a binder of the left side must
//! not capture that binder's variable; one in a position that is not always
//! evaluated (an `if` branch, an `assert` body, a lambda body) matches only
//! atoms, so binding it before the rewritten term does not move work.
//!
//! The rewrite is `let v1 = m1 in .. let vk = mk in rhs`, the matched
//! expressions bound in the order they are evaluated in the left side, to
//! fresh names (so no match can capture another); atoms are substituted
//! directly (which is what the `let-atom` rule would do next).

use ksc_ir::term::{self, Cache};
use ksc_ir::{Body, Expr, ExprId, Param, Pat, Var};

use crate::rule::Ctx;

/// A user rule ready to match.
#[derive(Clone, Debug)]
pub struct UserRule {
    name: String,
    params: Vec<Param>,
    body: Body,
    lhs: ExprId,
    rhs: ExprId,
    /// Parameter indices in the order of their first occurrence in the lhs.
    order: Vec<usize>,
    text: String,
}

impl UserRule {
    /// Prepares a checked rule, or says why it cannot be used.
    pub fn new(r: &ksc_ir::Rule) -> Result<UserRule, String> {
        for (side, root) in [("left", r.lhs), ("right", r.rhs)] {
            let mut stack = vec![root];
            while let Some(x) = stack.pop() {
                if r.body.ty(x).contains_unknown() || !r.body.types.contains_idx(x) {
                    return Err(format!("its {side} side did not type-check"));
                }
                stack.extend(term::children(&r.body.exprs[x]));
            }
        }
        if r.body.ty(r.lhs) != r.body.ty(r.rhs) {
            return Err(format!("its sides have different types, `{}` and `{}`", r.body.ty(r.lhs), r.body.ty(r.rhs)));
        }
        let mut cache = Cache::new();
        let lhs_free = cache.free_vars(&r.body, r.lhs);
        let rhs_free = cache.free_vars(&r.body, r.rhs);
        for v in rhs_free.iter() {
            if !lhs_free.contains(v) {
                return Err(format!("its right side uses `{v}`, which its left side does not bind"));
            }
        }
        let order = first_occurrences(&r.body, r.lhs, &r.params);
        let text =
            format!("{} ⇒ {}", ksc_ir::print::print_expr(&r.body, r.lhs), ksc_ir::print::print_expr(&r.body, r.rhs));
        Ok(UserRule {
            name: r.name.clone(),
            params: r.params.clone(),
            body: r.body.clone(),
            lhs: r.lhs,
            rhs: r.rhs,
            order,
            text,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn statement(&self) -> String {
        self.text.clone()
    }

    /// Can the left side match a node of this kind? (A bare pattern
    /// variable matches anything.)
    pub fn may_match(&self, key: crate::rule::HeadKey) -> bool {
        match &self.body.exprs[self.lhs] {
            Expr::Var(_) => true,
            e => crate::rule::HeadKey::of(e) == key,
        }
    }

    /// Matches the left side at `e` and builds the right side.
    pub(crate) fn rewrite(&self, ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
        let assign = self.matches(ctx, e)?;
        let rhs = term::copy_tree(ctx.b.body, Some(&self.body), self.rhs);
        let mut map: Vec<(Var, ExprId)> = Vec::new();
        let mut lets: Vec<(Var, ExprId)> = Vec::new();
        for &k in &self.order {
            let m = assign[k]?;
            let p = &self.params[k];
            if ctx.is_atomic(m) {
                map.push((p.name.clone(), m));
            } else {
                let fresh = ctx.fresh_like(&p.name);
                let v = ctx.alloc(Expr::Var(fresh.clone()), p.ty.clone());
                map.push((p.name.clone(), v));
                lets.push((fresh, m));
            }
        }
        let mut out = ctx.substitute(rhs, &map, false);
        for (v, m) in lets.into_iter().rev() {
            let ty = ctx.ty(out);
            out = ctx.alloc(Expr::Let(Pat::Var(v), m, out), ty);
        }
        Some(out)
    }

    /// The expression each parameter matched at `e`, or None if the left
    /// side does not match.
    fn matches(&self, ctx: &mut Ctx, e: ExprId) -> Option<Vec<Option<ExprId>>> {
        enum Task {
            Match(ExprId, ExprId, bool),
            Push(Vec<(Var, Var)>),
            Pop(usize),
        }
        let pat = &self.body;
        let mut assign: Vec<Option<ExprId>> = vec![None; self.params.len()];
        // Binders of the lhs and the target binders they correspond to.
        let mut env: Vec<(Var, Var)> = Vec::new();
        let mut tasks = vec![Task::Match(self.lhs, e, false)];
        while let Some(t) = tasks.pop() {
            let (p, t, lazy) = match t {
                Task::Match(p, t, lazy) => (p, t, lazy),
                Task::Push(pairs) => {
                    env.extend(pairs);
                    continue;
                }
                Task::Pop(n) => {
                    env.truncate(env.len() - n);
                    continue;
                }
            };
            let target = ctx.expr(t).clone();
            let ok = match (&pat.exprs[p], &target) {
                (Expr::Var(v), _) => {
                    if let Some(i) = env.iter().rposition(|(pv, _)| pv == v) {
                        matches!(&target, Expr::Var(w) if env.iter().rposition(|(_, tw)| tw == w) == Some(i))
                    } else if let Some(k) = self.params.iter().position(|q| q.name == *v) {
                        self.bind(ctx, &mut assign, k, t, lazy, &env)
                    } else {
                        false
                    }
                }
                (Expr::Lit(a), Expr::Lit(b)) => a == b,
                (Expr::Dummy(a), Expr::Dummy(b)) => a == b,
                (Expr::Call(f, a), Expr::Call(g, b)) => {
                    tasks.push(Task::Match(*a, *b, lazy));
                    f == g && pat.ty(p) == &ctx.ty(t)
                }
                (Expr::Tuple(ps), Expr::Tuple(ts)) => {
                    tasks.extend(ps.iter().zip(ts).rev().map(|(a, b)| Task::Match(*a, *b, lazy)));
                    ps.len() == ts.len()
                }
                (Expr::Let(pp, pr, pb), Expr::Let(tp, tr, tb)) => {
                    let shape = match (pp, tp) {
                        (Pat::Var(_), Pat::Var(_)) => true,
                        (Pat::Tuple(a), Pat::Tuple(b)) => a.len() == b.len(),
                        _ => false,
                    };
                    let pairs: Vec<(Var, Var)> = pp.vars().iter().cloned().zip(tp.vars().iter().cloned()).collect();
                    let n = pairs.len();
                    tasks.extend([
                        Task::Pop(n),
                        Task::Match(*pb, *tb, lazy),
                        Task::Push(pairs),
                        Task::Match(*pr, *tr, lazy),
                    ]);
                    shape
                }
                (Expr::If(c, x, y), Expr::If(d, u, w)) => {
                    tasks.extend([Task::Match(*y, *w, true), Task::Match(*x, *u, true), Task::Match(*c, *d, lazy)]);
                    true
                }
                (Expr::Assert(c, x, _), Expr::Assert(d, u, _)) => {
                    tasks.extend([Task::Match(*x, *u, true), Task::Match(*c, *d, lazy)]);
                    true
                }
                (Expr::Lam(v, s, b), Expr::Lam(w, t2, b2)) => {
                    tasks.extend([Task::Pop(1), Task::Match(*b, *b2, true), Task::Push(vec![(v.clone(), w.clone())])]);
                    s == t2
                }
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        Some(assign)
    }

    /// Binds parameter `k` to target `t` (or checks a repeated one).
    fn bind(
        &self,
        ctx: &mut Ctx,
        assign: &mut [Option<ExprId>],
        k: usize,
        t: ExprId,
        lazy: bool,
        env: &[(Var, Var)],
    ) -> bool {
        if ctx.ty(t) != self.params[k].ty {
            return false;
        }
        // The match must not mention a variable bound inside the lhs.
        let fv = ctx.cache.free_vars(ctx.b.body, t);
        if fv.iter().any(|w| env.iter().any(|(_, tw)| tw == w)) {
            return false;
        }
        if lazy && !ctx.is_atomic(t) {
            return false;
        }
        match assign[k] {
            None => {
                assign[k] = Some(t);
                true
            }
            Some(prev) => ctx.alpha_eq(prev, t) && ctx.pure(prev) && ctx.pure(t),
        }
    }
}

/// The parameters that occur free in the lhs, in pre-order (evaluation
/// order) of their first occurrence.
fn first_occurrences(body: &Body, lhs: ExprId, params: &[Param]) -> Vec<usize> {
    let mut order = Vec::new();
    let mut bound: Vec<Var> = Vec::new();
    enum Task {
        Visit(ExprId),
        Push(Vec<Var>),
        Pop(usize),
    }
    let mut tasks = vec![Task::Visit(lhs)];
    while let Some(t) = tasks.pop() {
        let x = match t {
            Task::Visit(x) => x,
            Task::Push(vs) => {
                bound.extend(vs);
                continue;
            }
            Task::Pop(n) => {
                bound.truncate(bound.len() - n);
                continue;
            }
        };
        let node = &body.exprs[x];
        match node {
            Expr::Var(v) if !bound.contains(v) => {
                if let Some(k) = params.iter().position(|p| p.name == *v) {
                    if !order.contains(&k) {
                        order.push(k);
                    }
                }
            }
            Expr::Let(p, r, b) => {
                let n = p.vars().len();
                tasks.extend([Task::Pop(n), Task::Visit(*b), Task::Push(p.vars().to_vec()), Task::Visit(*r)]);
            }
            Expr::Lam(v, _, b) => tasks.extend([Task::Pop(1), Task::Visit(*b), Task::Push(vec![v.clone()])]),
            _ => tasks.extend(term::children(node).into_iter().rev().map(Task::Visit)),
        }
    }
    order
}
