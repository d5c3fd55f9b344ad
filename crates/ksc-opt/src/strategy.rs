//! Strategy combinators (seed 001, after Visser's Stratego and ELEVATE): a
//! strategy tries to rewrite a term and either succeeds with a new term or
//! fails. Rules are strategies that rewrite at the root only; traversals lift
//! a strategy to sub-terms. Schedules are short expressions over these, and
//! [`crate::engine`] interprets them over Core IR bodies.
//!
//! | combinator | meaning |
//! |---|---|
//! | `id` | succeeds, term unchanged |
//! | `fail` | fails |
//! | `rule(r)` | rewrites the root with `r`, fails where `r` does not apply |
//! | `seq(s1, s2)` | `s1`, then `s2` on its result; fails if either fails |
//! | `lchoice(s1, s2)` | `s1` if it succeeds, else `s2` |
//! | `try_(s)` | `lchoice(s, id)` |
//! | `repeat(s)` | `s` as often as it succeeds (never fails) |
//! | `one(s)` | `s` on the first child where it succeeds; fails on leaves |
//! | `all(s)` | `s` on every child; fails if it fails on one; succeeds on leaves |
//! | `top_down(s)` | `lchoice(s, one(top_down(s)))`: the first pre-order position where `s` applies |
//! | `bottom_up(s)` | `seq(all(bottom_up(s)), s)`: children first, then the node |
//! | `normalize(s)` | `repeat(top_down(s))`, bounded by fuel |
//! | `rules(set)` | the rules of `set` in order, first match: `lchoice(r1, lchoice(r2, ..))` |
//! | `name(s1, ..)` | a named strategy of the library in scope ([`crate::script`]), unfolded when it runs |
//! | `anf`, `cse` | the term at the node in A-normal form ([`crate::anf()`]); its common subexpressions computed once ([`crate::cse()`]); always succeed |
//!
//! The children of a node are those of Core IR, except that the literal
//! argument tuple of a call is looked through: its components are the
//! call's children, and the tuple itself is never a rewrite site (the
//! "argument-tuple invariant": `print` and `Vec_init` take a literal tuple's
//! components as separate arguments, so it must stay literal).

use std::fmt;
use std::sync::Arc;

use crate::rule::{Rule, RuleSet};
use crate::script::Library;

/// A rewriting strategy.
#[derive(Clone)]
pub enum Strategy {
    Id,
    Fail,
    Rule(Rule),
    Seq(Box<Strategy>, Box<Strategy>),
    LChoice(Box<Strategy>, Box<Strategy>),
    Try(Box<Strategy>),
    Repeat(Box<Strategy>),
    One(Box<Strategy>),
    All(Box<Strategy>),
    TopDown(Box<Strategy>),
    BottomUp(Box<Strategy>),
    /// `repeat(top_down(s))` with at most `fuel` rewrites (None: the
    /// engine's default, [`crate::Options::fuel`]); running out of fuel
    /// stops with the term reached and a warning, never a hang.
    Normalize(Box<Strategy>, Option<u32>),
    /// The rules of a set, first match.
    Rules(Arc<RuleSet>),
    /// A call of a named strategy of the library in scope (the innermost
    /// [`Strategy::In`]), with its arguments: unfolded when it runs.
    Call(Arc<str>, Vec<Strategy>),
    /// A parameter (its position and name) of a named strategy's body;
    /// unfolding a call replaces it by the argument.
    Param(usize, Arc<str>),
    /// A strategy with a library of named strategies in scope.
    In(Arc<Library>, Box<Strategy>),
    /// The term in A-normal form (succeeds).
    Anf,
    /// The term with its common subexpressions computed once (succeeds).
    Cse,
    /// The strategy on the definitions of this name (a written function's,
    /// `f` or `[f T]`, or a derived one's as ksc prints it, `[rev f]`);
    /// elsewhere the term unchanged (succeeds).
    InDef(Arc<str>, Box<Strategy>),
}

pub fn id() -> Strategy {
    Strategy::Id
}

pub fn fail() -> Strategy {
    Strategy::Fail
}

pub fn rule(r: Rule) -> Strategy {
    Strategy::Rule(r)
}

pub fn seq(a: Strategy, b: Strategy) -> Strategy {
    Strategy::Seq(Box::new(a), Box::new(b))
}

pub fn lchoice(a: Strategy, b: Strategy) -> Strategy {
    Strategy::LChoice(Box::new(a), Box::new(b))
}

/// `try` (a keyword in Rust).
pub fn try_(s: Strategy) -> Strategy {
    Strategy::Try(Box::new(s))
}

pub fn repeat(s: Strategy) -> Strategy {
    Strategy::Repeat(Box::new(s))
}

pub fn one(s: Strategy) -> Strategy {
    Strategy::One(Box::new(s))
}

pub fn all(s: Strategy) -> Strategy {
    Strategy::All(Box::new(s))
}

pub fn top_down(s: Strategy) -> Strategy {
    Strategy::TopDown(Box::new(s))
}

pub fn bottom_up(s: Strategy) -> Strategy {
    Strategy::BottomUp(Box::new(s))
}

pub fn normalize(s: Strategy) -> Strategy {
    Strategy::Normalize(Box::new(s), None)
}

pub fn normalize_with_fuel(s: Strategy, fuel: u32) -> Strategy {
    Strategy::Normalize(Box::new(s), Some(fuel))
}

pub fn rules(set: RuleSet) -> Strategy {
    Strategy::Rules(Arc::new(set))
}

/// Written as the combinator expression: `normalize(lchoice(rules(lm-laws), rules(core)))`.
impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Id => f.write_str("id"),
            Strategy::Fail => f.write_str("fail"),
            Strategy::Rule(r) => write!(f, "rule({})", r.name()),
            Strategy::Seq(a, b) => write!(f, "seq({a}, {b})"),
            Strategy::LChoice(a, b) => write!(f, "lchoice({a}, {b})"),
            Strategy::Try(s) => write!(f, "try({s})"),
            Strategy::Repeat(s) => write!(f, "repeat({s})"),
            Strategy::One(s) => write!(f, "one({s})"),
            Strategy::All(s) => write!(f, "all({s})"),
            Strategy::TopDown(s) => write!(f, "topDown({s})"),
            Strategy::BottomUp(s) => write!(f, "bottomUp({s})"),
            Strategy::Normalize(s, None) => write!(f, "normalize({s})"),
            Strategy::Normalize(s, Some(n)) => write!(f, "normalize({s}, fuel {n})"),
            Strategy::Rules(set) => write!(f, "rules({})", set.name()),
            Strategy::Call(name, args) if args.is_empty() => f.write_str(name),
            Strategy::Call(name, args) => {
                write!(f, "{name}(")?;
                for (k, a) in args.iter().enumerate() {
                    if k > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Strategy::Param(_, name) => f.write_str(name),
            Strategy::In(_, s) => write!(f, "{s}"),
            Strategy::Anf => f.write_str("anf"),
            Strategy::Cse => f.write_str("cse"),
            Strategy::InDef(name, s) => write!(f, "inDef({name}, {s})"),
        }
    }
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
