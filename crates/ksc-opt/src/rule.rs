//! Rules: one type for the linear-map laws of `ksc_linmap::LAWS` (used from
//! that table directly), the Core rules of [`crate::core_rules::CORE_RULES`],
//! and the user's `(rule ...)` declarations; and [`RuleSet`], an ordered set
//! of named rules tried first-match.
//!
//! A rule rewrites at the root of the term it is given, or does not apply.
//! The engine checks every result: a rewrite that would change the term's
//! type is refused (and reported), so a rule can never make a well-typed
//! term ill-typed.

use std::fmt;
use std::sync::Arc;

use ksc_ir::builder::{prim_call, Builder};
use ksc_ir::pass::skips_rule;
use ksc_ir::term::{self, Cache};
use ksc_ir::{Callee, Expr, ExprId, Type};
use ksc_linmap::{Law, LAWS};

use crate::core_rules::{CoreRule, CORE_RULES};
use crate::engine::Options;
use crate::globals::Globals;
use crate::scope::Scope;
use crate::user::UserRule;

/// Where a rule comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// A law of linear maps (`ksc_linmap::LAWS`).
    Law,
    /// A rule of Core IR ([`CORE_RULES`]).
    Core,
    /// A `(rule ...)` of the program.
    User,
}

impl fmt::Display for RuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleKind::Law => "law",
            RuleKind::Core => "core",
            RuleKind::User => "user",
        })
    }
}

/// Everything a rule may use while rewriting one node.
pub struct Ctx<'r, 'b, 'g> {
    /// Allocates typed nodes in the body being rewritten.
    pub b: &'r mut Builder<'b>,
    /// The binders above the node.
    pub scope: &'r Scope,
    pub globals: &'r Globals<'g>,
    /// Free variables and effects of nodes of this body.
    pub cache: &'r mut Cache,
    pub options: &'r Options,
}

impl Ctx<'_, '_, '_> {
    pub fn expr(&self, e: ExprId) -> &Expr {
        &self.b.body.exprs[e]
    }

    pub fn ty(&self, e: ExprId) -> Type {
        self.b.ty(e)
    }

    /// Evaluating `e` has no effect (it may still fail or not terminate).
    pub fn pure(&mut self, e: ExprId) -> bool {
        !self.cache.has_effect(self.b.body, self.globals, e)
    }

    pub fn is_free(&mut self, x: &str, e: ExprId) -> bool {
        self.cache.is_free(self.b.body, x, e)
    }

    pub fn is_atomic(&self, e: ExprId) -> bool {
        term::is_atomic(self.b.body, e)
    }

    pub fn alpha_eq(&self, a: ExprId, b: ExprId) -> bool {
        term::alpha_eq(self.b.body, a, self.b.body, b)
    }

    /// Capture-avoiding substitution (see [`term::substitute`]).
    pub fn substitute(&mut self, e: ExprId, map: &[(ksc_ir::Var, ExprId)], move_first: bool) -> ExprId {
        term::substitute(self.b, self.cache, e, map, move_first)
    }

    /// Capture-avoiding renaming of free variables.
    pub fn rename(&mut self, e: ExprId, renames: &[(ksc_ir::Var, ksc_ir::Var)]) -> ExprId {
        term::rename(self.b, self.cache, e, renames)
    }

    /// A fresh name derived from `v`.
    pub fn fresh_like(&mut self, v: &str) -> ksc_ir::Var {
        self.b.fresh_name(&term::hint_of(v))
    }

    pub fn alloc(&mut self, e: Expr, ty: Type) -> ExprId {
        self.b.body.alloc_typed(e, ty)
    }

    /// A call of primitive `p` on these arguments, or None if the
    /// primitive's typing rule rejects them (never panics).
    pub fn prim(&mut self, p: ksc_ir::Prim, args: Vec<ExprId>) -> Option<ExprId> {
        let tys: Vec<Type> = args.iter().map(|&a| self.ty(a)).collect();
        let ty = p.result_type(&tys).ok()?;
        if p.splats_arguments() && args.len() == 1 && matches!(self.expr(args[0]), Expr::Tuple(_)) {
            return None;
        }
        let arg = if args.len() == 1 { args[0] } else { self.b.tuple(args) };
        Some(self.alloc(Expr::Call(Callee::Prim(p), arg), ty))
    }
}

/// For each law whose right side repeats a sub-term of its left side, the
/// position (in the arguments as written of the left side's root call) of
/// the repeated operand. Such a law is applied only where that operand is
/// atomic, so it never duplicates work. A duplicating law missing here is
/// never applied (a test checks the table covers `LAWS`).
pub const DUPLICATED_OPERAND: &[(&str, usize)] = &[
    // m ∘ (n1 ⋈ .. ⋈ nk) = (m ∘ n1) ⋈ .. ⋈ (m ∘ nk): m, the first argument of lmCompose.
    ("compose-hcat-right", 0),
    // (m1 × .. × mk) ∘ n = (m1 ∘ n) × .. × (mk ∘ n): n, the second argument of lmCompose.
    ("compose-vcat-left", 1),
];

/// The operand a duplicating law would repeat at `e`, if the law is known.
fn duplicated_operand(law: &Law, b: &Builder, e: ExprId) -> Option<ExprId> {
    let &(_, k) = DUPLICATED_OPERAND.iter().find(|(n, _)| *n == law.name)?;
    let (_, args) = prim_call(b.body, e)?;
    args.get(k).copied()
}

/// Is this a law that simplifies maps (properties and transposition)?
pub fn is_map_law(law: &Law) -> bool {
    law.group.starts_with("properties") || law.group.starts_with("transposition")
}

/// Is this a law that applies a map (`lmApply`, `lmApplyR`)?
pub fn is_application_law(law: &Law) -> bool {
    law.group.starts_with("application") || law.group.starts_with("reverse application")
}

/// The kind of a node, as far as choosing rules goes: rules whose left side
/// has another kind at its root are not tried there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeadKey {
    Let,
    If,
    Assert,
    /// A call of a primitive (`get$i$n` and `lmGet$i$n` with index and arity 0).
    Prim(ksc_ir::Prim),
    /// A call of a global function.
    Fun,
    /// A variable, literal, tuple, lambda or `$dummy`.
    Other,
}

impl HeadKey {
    pub fn of(e: &Expr) -> HeadKey {
        match e {
            Expr::Let(..) => HeadKey::Let,
            Expr::If(..) => HeadKey::If,
            Expr::Assert(..) => HeadKey::Assert,
            Expr::Call(Callee::Prim(p), _) => HeadKey::Prim(match p {
                ksc_ir::Prim::Get { .. } => ksc_ir::Prim::Get { index: 0, arity: 0 },
                ksc_ir::Prim::LmGet { .. } => ksc_ir::Prim::LmGet { index: 0, arity: 0 },
                p => *p,
            }),
            Expr::Call(Callee::Fun(_), _) => HeadKey::Fun,
            _ => HeadKey::Other,
        }
    }
}

/// A named rewrite rule.
#[derive(Clone)]
pub enum Rule {
    Law(&'static Law),
    Core(&'static CoreRule),
    User(Arc<UserRule>),
}

impl Rule {
    pub fn name(&self) -> &str {
        match self {
            Rule::Law(l) => l.name,
            Rule::Core(c) => c.name,
            Rule::User(u) => u.name(),
        }
    }

    pub fn kind(&self) -> RuleKind {
        match self {
            Rule::Law(_) => RuleKind::Law,
            Rule::Core(_) => RuleKind::Core,
            Rule::User(_) => RuleKind::User,
        }
    }

    /// The rule in one line.
    pub fn statement(&self) -> String {
        match self {
            Rule::Law(l) => l.statement.to_string(),
            Rule::Core(c) => c.statement.to_string(),
            Rule::User(u) => u.statement(),
        }
    }

    /// May the rule apply at a node of this kind? (False means it cannot.)
    pub fn may_match(&self, key: HeadKey) -> bool {
        match self {
            Rule::Law(_) => matches!(key, HeadKey::Prim(p) if p.is_linear_map()),
            Rule::Core(c) => c.head.may_match(key),
            Rule::User(u) => u.may_match(key),
        }
    }

    /// Rewrites at `e`, or None where the rule does not apply. (The engine
    /// checks the result's type; see [`crate::engine`].)
    pub(crate) fn rewrite(&self, ctx: &mut Ctx, e: ExprId) -> Option<ExprId> {
        match self {
            Rule::Law(law) => {
                let Expr::Call(Callee::Prim(p), _) = ctx.expr(e) else { return None };
                if !p.is_linear_map() {
                    return None;
                }
                if law.duplicates && !ctx.is_atomic(duplicated_operand(law, ctx.b, e)?) {
                    return None;
                }
                (law.rewrite)(ctx.b, e)
            }
            Rule::Core(c) => {
                if !c.head.matches(ctx.expr(e)) {
                    return None;
                }
                (c.rewrite)(ctx, e)
            }
            Rule::User(u) => u.rewrite(ctx, e),
        }
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rule {}: {}", self.kind(), self.name(), self.statement())
    }
}

/// An ordered set of rules with a name (for traces and schedules). Applied
/// as a strategy ([`crate::strategy::rules`]) the first rule that applies
/// fires.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    name: String,
    rules: Vec<Rule>,
}

impl RuleSet {
    pub fn new(name: impl Into<String>) -> RuleSet {
        RuleSet { name: name.into(), rules: Vec::new() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn push(&mut self, r: Rule) {
        self.rules.push(r);
    }

    /// This set followed by the rules of `other`, under a new name.
    pub fn then(mut self, other: &RuleSet, name: impl Into<String>) -> RuleSet {
        self.rules.extend(other.rules.iter().cloned());
        self.name = name.into();
        self
    }

    /// The first rule of this name.
    pub fn get(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name() == name)
    }

    /// The rules of this set that satisfy `keep`.
    pub fn filter(&self, name: impl Into<String>, keep: impl Fn(&Rule) -> bool) -> RuleSet {
        RuleSet { name: name.into(), rules: self.rules.iter().filter(|r| keep(r)).cloned().collect() }
    }

    /// Every Core rule, in table order, but those the user left out
    /// (`--skip-rule`, `--ablate`: [`ksc_ir::pass::skips_rule`]).
    pub fn core() -> RuleSet {
        let rules = CORE_RULES.iter().filter(|r| !skips_rule(r.name)).map(Rule::Core).collect();
        RuleSet { name: "core".to_string(), rules }
    }

    /// The laws of `ksc_linmap::LAWS` that satisfy `keep`, in table order,
    /// but those the user left out. Duplicating laws among them apply only
    /// where the repeated operand is atomic (see [`DUPLICATED_OPERAND`]).
    pub fn laws(name: impl Into<String>, keep: impl Fn(&Law) -> bool) -> RuleSet {
        let rules = LAWS.iter().filter(|l| keep(l) && !skips_rule(l.name)).map(Rule::Law).collect();
        RuleSet { name: name.into(), rules }
    }

    /// The program's `(rule ...)` declarations, in order. A declaration that
    /// cannot be used as a rule (ill-typed, or its right side mentions a
    /// parameter its left side does not bind) is left out and returned with
    /// the reason.
    pub fn user<'a>(decls: impl IntoIterator<Item = &'a ksc_ir::Rule>) -> (RuleSet, Vec<(String, String)>) {
        let mut set = RuleSet::new("user");
        let mut rejected = Vec::new();
        for r in decls {
            match UserRule::new(r) {
                Ok(u) => set.push(Rule::User(Arc::new(u))),
                Err(why) => rejected.push((r.name.clone(), why)),
            }
        }
        (set, rejected)
    }
}
