//! The strategy language (seed 001): schedules written as S-expressions, by
//! programs (`(strategy NAME BODY)`, `(strategy (NAME PARAM ...) BODY)`) and
//! by ksc itself: its schedules are defined in `schedules.ks`, shipped in
//! this crate and read at start-up, in the same language.
//!
//! ```text
//! BODY := id | fail | anf | cse
//!       | (rules ITEM ...)              the rules of the items in order, first match
//!       | (seq S S ...) | (lchoice S S ...)
//!       | (try S) | (repeat S) | (one S) | (all S) | (topDown S) | (bottomUp S)
//!       | (normalize S) | (normalize S FUEL)
//!       | (in-def FUN S)                S on the definition FUN only (`f`, `"[rev f]"`), id elsewhere
//!       | NAME | (NAME S ...)           a named strategy applied to its arguments
//!       | PARAM                         a parameter of the strategy being defined
//! ITEM := core | map-laws | application-laws | user      rule sets
//!       | RULE | "RULE"                 a Core rule, a law, or a program's rule
//!       | (except ITEM RULE ...)       ITEM without those rules (an ablation)
//! ```
//!
//! The combinators are [`crate::strategy`]'s. Named strategies may call each
//! other and themselves, in any order of declaration: a call is unfolded
//! when it runs, its arguments put for its parameters. A program's strategy
//! with the name of one of ksc's replaces it for that program (same number
//! of parameters), including where ksc's other schedules call it; the
//! derived-function pipeline runs its schedules by name
//! ([`Schedules::get`]), so a program can change them.
//!
//! Recursion is bounded when it runs: a strategy call nested deeper than
//! [`MAX_CALL_DEPTH`], or more calls than the run's work
//! ([`crate::Options::work`]), fails there with a warning
//! ([`crate::WarningKind::CallLimit`]) instead of hanging.

use std::sync::{Arc, OnceLock};

use ksc_ir::{STerm, StrategyDecl};
use rustc_hash::FxHashMap;

use crate::rule::{is_application_law, is_map_law, Rule, RuleSet};
use crate::strategy::Strategy;

/// The deepest nesting of named strategy calls a run allows.
pub const MAX_CALL_DEPTH: u32 = 10_000;

/// ksc's own schedules, in the strategy language.
pub const SCHEDULES_KS: &str = include_str!("schedules.ks");

/// The rule sets `(rules ...)` names.
pub const RULE_SETS: [&str; 4] = ["core", "map-laws", "application-laws", "user"];

/// The combinators, with how many strategies each takes (`None`: two or
/// more).
const COMBINATORS: [(&str, Option<usize>); 13] = [
    ("id", Some(0)),
    ("fail", Some(0)),
    ("anf", Some(0)),
    ("cse", Some(0)),
    ("seq", None),
    ("lchoice", None),
    ("try", Some(1)),
    ("repeat", Some(1)),
    ("one", Some(1)),
    ("all", Some(1)),
    ("topDown", Some(1)),
    ("bottomUp", Some(1)),
    ("normalize", Some(1)),
];

/// A problem with a strategy declaration: the declaration (its index among
/// those given) and the node of its body (pre-order, as
/// [`STerm::pre_order`]; `None` for the declaration's name).
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptError {
    pub decl: usize,
    pub node: Option<usize>,
    pub message: String,
}

/// A named strategy: its parameters and its body, whose parameters are
/// [`Strategy::Param`]s.
#[derive(Clone, Debug)]
struct Template {
    params: usize,
    body: Strategy,
}

/// Named strategies, ready to run: each call of one unfolds it.
#[derive(Debug, Default)]
pub struct Library {
    templates: FxHashMap<String, Template>,
    /// The names, in order of declaration (ksc's first).
    names: Vec<String>,
}

impl Library {
    /// The body of `name` with `args` for its parameters; None if there is
    /// no such strategy or the arguments do not match.
    pub(crate) fn unfold(&self, name: &str, args: &[Strategy]) -> Option<Strategy> {
        let t = self.templates.get(name)?;
        if t.params != args.len() {
            return None;
        }
        Some(if args.is_empty() { t.body.clone() } else { substitute(&t.body, args) })
    }

    /// The names of its strategies, in order of declaration.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// How many parameters `name` takes, if it is one of these.
    pub fn params(&self, name: &str) -> Option<usize> {
        self.templates.get(name).map(|t| t.params)
    }
}

/// `s` with `args[i]` for each `Param(i)`.
fn substitute(s: &Strategy, args: &[Strategy]) -> Strategy {
    let go = |x: &Strategy| Box::new(substitute(x, args));
    match s {
        Strategy::Param(i, _) => args[*i].clone(),
        Strategy::Seq(a, b) => Strategy::Seq(go(a), go(b)),
        Strategy::LChoice(a, b) => Strategy::LChoice(go(a), go(b)),
        Strategy::Try(x) => Strategy::Try(go(x)),
        Strategy::Repeat(x) => Strategy::Repeat(go(x)),
        Strategy::One(x) => Strategy::One(go(x)),
        Strategy::All(x) => Strategy::All(go(x)),
        Strategy::TopDown(x) => Strategy::TopDown(go(x)),
        Strategy::BottomUp(x) => Strategy::BottomUp(go(x)),
        Strategy::Normalize(x, fuel) => Strategy::Normalize(go(x), *fuel),
        Strategy::Call(name, xs) => Strategy::Call(name.clone(), xs.iter().map(|x| substitute(x, args)).collect()),
        Strategy::In(lib, x) => Strategy::In(lib.clone(), go(x)),
        Strategy::InDef(name, x) => Strategy::InDef(name.clone(), go(x)),
        Strategy::Id | Strategy::Fail | Strategy::Rule(_) | Strategy::Rules(_) | Strategy::Anf | Strategy::Cse => {
            s.clone()
        }
    }
}

/// The schedules of a program: ksc's (`schedules.ks`), those the program
/// declares (replacing ksc's of the same name), and the program's rules.
#[derive(Clone, Debug)]
pub struct Schedules {
    lib: Arc<Library>,
    user: RuleSet,
    /// ksc's schedules the program replaces.
    replaced: Vec<String>,
}

impl Schedules {
    /// ksc's schedules, for a program without rules or strategies.
    pub fn builtin() -> Schedules {
        static BUILTIN: OnceLock<Schedules> = OnceLock::new();
        BUILTIN.get_or_init(|| Schedules::read(&[], &RuleSet::new("user")).0).clone()
    }

    /// ksc's schedules and a program's `strategy` declarations, over its
    /// rules; the problems of the declarations (a declaration with one is
    /// left out).
    pub fn program(decls: &[&StrategyDecl], user: &RuleSet) -> (Schedules, Vec<ScriptError>) {
        if decls.is_empty() && user.is_empty() {
            return (Schedules::builtin(), Vec::new());
        }
        Schedules::read(decls, user)
    }

    /// [`Schedules::program`], read anew.
    fn read(decls: &[&StrategyDecl], user: &RuleSet) -> (Schedules, Vec<ScriptError>) {
        let builtin = builtin_decls();
        let mut errors = Vec::new();
        // Which declaration defines each name: the program's replace ksc's.
        let mut defining: FxHashMap<&str, (bool, usize)> = FxHashMap::default();
        let mut names: Vec<String> = Vec::new();
        for (i, d) in builtin.iter().enumerate() {
            defining.insert(&d.name, (false, i));
            names.push(d.name.clone());
        }
        let mut own: FxHashMap<&str, usize> = FxHashMap::default();
        for (i, d) in decls.iter().enumerate() {
            let reserved = COMBINATORS.iter().any(|(c, _)| *c == d.name) || d.name == "rules";
            if reserved {
                let message = format!("`{}` is a combinator of the strategy language and cannot be redefined", d.name);
                errors.push(ScriptError { decl: i, node: None, message });
                continue;
            }
            if let Some(first) = own.insert(&d.name, i) {
                let message = format!("the strategy `{}` is already declared (declaration {})", d.name, first + 1);
                errors.push(ScriptError { decl: i, node: None, message });
                continue;
            }
            match defining.get(d.name.as_str()) {
                Some(&(false, b)) if builtin[b].params.len() != d.params.len() => {
                    let message = format!(
                        "`{}` replaces ksc's schedule of that name, which takes {} strategies (parameters), not {}",
                        d.name,
                        builtin[b].params.len(),
                        d.params.len()
                    );
                    errors.push(ScriptError { decl: i, node: None, message });
                    continue;
                }
                Some(_) => {}
                None => names.push(d.name.clone()),
            }
            defining.insert(&d.name, (true, i));
        }
        let arity: FxHashMap<&str, usize> = defining
            .iter()
            .map(|(n, &(prog, i))| (*n, if prog { decls[i].params.len() } else { builtin[i].params.len() }))
            .collect();
        let mut lib = Library { templates: FxHashMap::default(), names };
        let resolve = |d: &StrategyDecl| {
            let mut r = Resolver { params: &d.params, arity: &arity, user, pos: 0, errors: Vec::new() };
            let body = r.term(&d.body);
            (body, r.errors)
        };
        for (&name, &(prog, i)) in &defining {
            let (mut body, found) = resolve(if prog { decls[i] } else { &builtin[i] });
            if prog {
                errors.extend(found.into_iter().map(|(node, message)| ScriptError {
                    decl: i,
                    node: Some(node),
                    message,
                }));
                // A replacement of ksc's schedule that does not read keeps
                // ksc's (its errors are reported; nothing runs without one).
                if body.is_none() {
                    if let Some(b) = builtin.iter().find(|b| b.name == name) {
                        body = resolve(b).0;
                    }
                }
            } else {
                assert!(found.is_empty(), "schedules.ks: {name}: {found:?}");
            }
            if let Some(body) = body {
                let params = if prog { decls[i].params.len() } else { builtin[i].params.len() };
                lib.templates.insert(name.to_string(), Template { params, body });
            }
        }
        // A strategy of the program whose body failed is gone: calls of it
        // fail (with the error reported where it is declared).
        lib.names.retain(|n| lib.templates.contains_key(n));
        errors.sort_by_key(|e| (e.decl, e.node));
        let replaced = builtin
            .iter()
            .filter(|b| defining.get(b.name.as_str()).is_some_and(|&(prog, _)| prog))
            .map(|b| b.name.clone())
            .collect();
        (Schedules { lib: Arc::new(lib), user: user.clone(), replaced }, errors)
    }

    /// The strategy `name` (without arguments), ready to run: a call of it
    /// with the library in scope (so the trace names it).
    pub fn get(&self, name: &str) -> Option<Strategy> {
        (self.lib.params(name) == Some(0))
            .then(|| Strategy::In(self.lib.clone(), Box::new(Strategy::Call(Arc::from(name), Vec::new()))))
    }

    /// The body of the strategy `name` (without parameters), as declared.
    pub fn definition(&self, name: &str) -> Option<Strategy> {
        self.lib.unfold(name, &[])
    }

    /// [`Schedules::get`] of one of ksc's schedules, which every library has.
    pub fn schedule(&self, name: &str) -> Strategy {
        self.get(name).unwrap_or_else(|| panic!("`{name}` is one of ksc's schedules (schedules.ks)"))
    }

    /// Does the program replace ksc's schedule `name`?
    pub fn replaces(&self, name: &str) -> bool {
        self.replaced.iter().any(|r| r == name)
    }

    /// Is there a `user-rules` to run: the program's rules, or its own
    /// `user-rules`?
    pub fn runs_user_rules(&self) -> bool {
        !self.user.is_empty() || self.replaces("user-rules")
    }

    /// The program's rules.
    pub fn user(&self) -> &RuleSet {
        &self.user
    }

    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }
}

/// The declarations of `schedules.ks`, read once.
fn builtin_decls() -> &'static [StrategyDecl] {
    static DECLS: OnceLock<Vec<StrategyDecl>> = OnceLock::new();
    DECLS.get_or_init(|| read_strategies(SCHEDULES_KS).unwrap_or_else(|e| panic!("schedules.ks: {e}")))
}

/// The `strategy` declarations of a text that holds nothing else (as
/// `schedules.ks`), or what is wrong with it.
pub fn read_strategies(text: &str) -> Result<Vec<StrategyDecl>, String> {
    let (file, errors) = ksc_syntax::parse_source(text);
    if let Some(e) = errors.first() {
        return Err(e.message.clone());
    }
    file.decls
        .iter()
        .map(|d| match d {
            ksc_syntax::ast::Decl::Strategy(s) => Ok(StrategyDecl::from_ast(s).0),
            _ => Err("a declaration that is not a strategy".to_string()),
        })
        .collect()
}

/// Reads one strategy body, noting problems by the pre-order position of
/// their node.
struct Resolver<'a> {
    params: &'a [String],
    arity: &'a FxHashMap<&'a str, usize>,
    user: &'a RuleSet,
    /// The pre-order position of the next node.
    pos: usize,
    errors: Vec<(usize, String)>,
}

impl Resolver<'_> {
    fn error(&mut self, at: usize, message: String) -> Option<Strategy> {
        self.errors.push((at, message));
        None
    }

    /// Skips the nodes of `t` (its subtree).
    fn skip(&mut self, t: &STerm) {
        self.pos += t.pre_order().len();
    }

    fn term(&mut self, t: &STerm) -> Option<Strategy> {
        let at = self.pos;
        match t {
            STerm::Symbol(s) => {
                self.pos += 1;
                self.name(at, s, &[])
            }
            STerm::List(items) => {
                self.pos += 1;
                let Some((head, args)) = items.split_first() else {
                    return self.error(at, "expected a strategy, found `()`".to_string());
                };
                let STerm::Symbol(word) = head else {
                    self.skip(head);
                    args.iter().for_each(|a| self.skip(a));
                    return self.error(at, format!("expected a combinator or a strategy's name first, found `{head}`"));
                };
                self.pos += 1;
                match word.as_str() {
                    "rules" => self.rules(at, args),
                    "in-def" => self.in_def(at, args),
                    "normalize" if args.len() == 2 => {
                        let s = self.term(&args[0]);
                        let fuel_at = self.pos;
                        self.pos += 1;
                        match &args[1] {
                            STerm::Integer(n) if *n > 0 && *n <= i64::from(u32::MAX) => {
                                Some(Strategy::Normalize(Box::new(s?), Some(*n as u32)))
                            }
                            other => {
                                self.skip_rest(other);
                                self.error(
                                    fuel_at,
                                    format!("expected the fuel, a positive whole number of rewrites, found `{other}`"),
                                )
                            }
                        }
                    }
                    _ => {
                        let mut parts = Vec::new();
                        let mut ok = true;
                        for a in args {
                            match self.term(a) {
                                Some(s) => parts.push(s),
                                None => ok = false,
                            }
                        }
                        if !ok {
                            // Still checked: the name and how many it takes.
                            self.name(at, word, &vec![Strategy::Fail; args.len()]);
                            return None;
                        }
                        self.name(at, word, &parts)
                    }
                }
            }
            other => {
                self.pos += 1;
                self.error(at, format!("expected a strategy, found `{other}`"))
            }
        }
    }

    /// `(in-def FUN S)`: FUN a written function's name (`f`, `"[f (Vec
    /// Float)]"`) or a derived one's (`"[rev f]"`), as a symbol or a string.
    fn in_def(&mut self, at: usize, args: &[STerm]) -> Option<Strategy> {
        let [fun, s] = args else {
            args.iter().for_each(|a| self.skip(a));
            return self.error(
                at,
                match args.len() {
                    1 => "`in-def` takes a function's name and one strategy, found 1 argument".to_string(),
                    n => format!("`in-def` takes a function's name and one strategy, found {n} arguments"),
                },
            );
        };
        let fun_at = self.pos;
        self.pos += 1;
        let name = match fun {
            STerm::Symbol(n) | STerm::String(n) => Some(n.clone()),
            other => {
                self.skip_rest(other);
                self.error(fun_at, format!("expected a function's name (`f`, or `\"[rev f]\"`), found `{other}`"));
                None
            }
        };
        let s = self.term(s)?;
        Some(Strategy::InDef(Arc::from(name?.as_str()), Box::new(s)))
    }

    /// After the first node of `t` is counted: the rest of its subtree.
    fn skip_rest(&mut self, t: &STerm) {
        self.pos += t.pre_order().len() - 1;
    }

    /// A combinator, parameter or named strategy applied to `args`.
    fn name(&mut self, at: usize, word: &str, args: &[Strategy]) -> Option<Strategy> {
        let n = args.len();
        if let Some(&(_, arity)) = COMBINATORS.iter().find(|(c, _)| *c == word) {
            let ok = match arity {
                Some(k) => n == k,
                None => n >= 2,
            };
            if !ok {
                let wanted = match arity {
                    Some(0) => "no strategies".to_string(),
                    Some(1) => "one strategy".to_string(),
                    Some(k) => format!("{k} strategies"),
                    None => "two or more strategies".to_string(),
                };
                let also = if word == "normalize" { " (and optionally its fuel)" } else { "" };
                return self.error(at, format!("`{word}` takes {wanted}{also}, found {n}"));
            }
            let mut xs = args.iter().cloned();
            let mut one = || Box::new(xs.next().expect("arity checked"));
            return Some(match word {
                "id" => Strategy::Id,
                "fail" => Strategy::Fail,
                "anf" => Strategy::Anf,
                "cse" => Strategy::Cse,
                "try" => Strategy::Try(one()),
                "repeat" => Strategy::Repeat(one()),
                "one" => Strategy::One(one()),
                "all" => Strategy::All(one()),
                "topDown" => Strategy::TopDown(one()),
                "bottomUp" => Strategy::BottomUp(one()),
                "normalize" => Strategy::Normalize(one(), None),
                // Right-nested: (seq a b c) is seq(a, seq(b, c)).
                "seq" | "lchoice" => {
                    let mut parts = args.to_vec();
                    let mut acc = parts.pop().expect("two or more");
                    while let Some(p) = parts.pop() {
                        acc = if word == "seq" {
                            Strategy::Seq(Box::new(p), Box::new(acc))
                        } else {
                            Strategy::LChoice(Box::new(p), Box::new(acc))
                        };
                    }
                    acc
                }
                _ => unreachable!("every combinator is listed"),
            });
        }
        if let Some(i) = self.params.iter().position(|p| p == word) {
            if n > 0 {
                return self.error(at, format!("`{word}` is a parameter: a strategy, not applied to others"));
            }
            return Some(Strategy::Param(i, Arc::from(word)));
        }
        match self.arity.get(word) {
            Some(&k) if k == n => Some(Strategy::Call(Arc::from(word), args.to_vec())),
            Some(&k) => {
                let plural = if k == 1 { "strategy" } else { "strategies" };
                self.error(at, format!("the strategy `{word}` takes {k} {plural}, found {n}"))
            }
            None if word == "rules" => self.error(at, "`rules` names one or more rule sets or rules".to_string()),
            None if word == "in-def" => self.error(at, "`in-def` takes a function's name and one strategy".to_string()),
            None => self.error(
                at,
                format!(
                    "unknown strategy `{word}`: expected a combinator ({}), `rules`, `in-def`, a parameter or a \
                     declared strategy",
                    COMBINATORS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
                ),
            ),
        }
    }

    /// `(rules ITEM ...)`.
    fn rules(&mut self, at: usize, items: &[STerm]) -> Option<Strategy> {
        if items.is_empty() {
            return self.error(at, "`rules` names one or more rule sets or rules, found none".to_string());
        }
        let mut set: Option<RuleSet> = None;
        let mut names = Vec::new();
        let mut ok = true;
        for item in items {
            let Some((part, name)) = self.item(item) else {
                ok = false;
                continue;
            };
            names.push(name);
            set = Some(match set {
                None => part,
                Some(s) => s.then(&part, names.join("+")),
            });
        }
        if !ok {
            return None;
        }
        Some(Strategy::Rules(Arc::new(set?)))
    }

    /// One item of `rules`: a rule set, a rule, or `(except ITEM RULE
    /// ...)`, the item without those rules; with its name.
    fn item(&mut self, item: &STerm) -> Option<(RuleSet, String)> {
        let item_at = self.pos;
        self.pos += 1;
        let (word, quoted) = match item {
            STerm::Symbol(s) => (s.as_str(), false),
            STerm::String(s) => (s.as_str(), true),
            STerm::List(parts) if matches!(parts.first(), Some(STerm::Symbol(h)) if h == "except") => {
                self.pos += 1;
                let Some((inner, rest)) = parts[1..].split_first() else {
                    self.error(item_at, "`except` takes a rule set, then the rules to leave out".to_string());
                    return None;
                };
                let base = self.item(inner);
                let mut dropped = Vec::new();
                let mut ok = base.is_some();
                for r in rest {
                    let at = self.pos;
                    let Some((part, name)) = self.item(r) else {
                        ok = false;
                        continue;
                    };
                    match &base {
                        Some((set, _)) if part.rules().iter().all(|p| set.get(p.name()).is_some()) => {
                            dropped.extend(part.rules().iter().map(|p| p.name().to_string()));
                        }
                        Some((_, base_name)) => {
                            self.error(at, format!("`{name}` is not among the rules of `{base_name}`"));
                            ok = false;
                        }
                        None => {}
                    }
                }
                let (set, base_name) = base.filter(|_| ok)?;
                let name = format!("{base_name} except {}", dropped.join(" "));
                return Some((set.filter(name.clone(), |r| !dropped.iter().any(|d| d == r.name())), name));
            }
            other => {
                self.skip_rest(other);
                self.error(item_at, format!("expected a rule set, a rule's name or `(except ...)`, found `{other}`"));
                return None;
            }
        };
        match self.rule_set(word, quoted) {
            Some(part) => Some((part, word.to_string())),
            None => {
                let message = format!(
                    "unknown rule or rule set `{item}`: the rule sets are {}, and a rule is named as in `ksc deriv --trace`",
                    RULE_SETS.join(", ")
                );
                self.error(item_at, message);
                None
            }
        }
    }

    /// A rule set or one rule, as a set.
    fn rule_set(&self, word: &str, quoted: bool) -> Option<RuleSet> {
        if !quoted {
            match word {
                "core" => return Some(RuleSet::core()),
                "map-laws" => return Some(RuleSet::laws("map-laws", is_map_law)),
                "application-laws" => return Some(RuleSet::laws("application-laws", is_application_law)),
                "user" => return Some(self.user.filter("user", |_| true)),
                _ => {}
            }
            let one = crate::core_rules::core_rule(word)
                .map(Rule::Core)
                .or_else(|| ksc_linmap::LAWS.iter().find(|l| l.name == word).map(Rule::Law));
            if let Some(r) = one {
                // A rule the user left out (`--skip-rule`) is an empty set.
                let mut s = RuleSet::new(word);
                if !ksc_ir::pass::skips_rule(word) {
                    s.push(r);
                }
                return Some(s);
            }
        }
        let r = self.user.get(word)?;
        let mut s = RuleSet::new(word);
        s.push(r.clone());
        Some(s)
    }
}
