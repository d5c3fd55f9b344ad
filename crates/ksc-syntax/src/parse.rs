//! The parser from S-expressions to the surface syntax tree ([`crate::ast`]),
//! following the grammar of the original Knossos compiler
//! (`knossos-reference.md`, section 1).
//!
//! Error handling: every parsing function returns `Err(Failed)` after it has
//! reported its error (or when it met an [`Atom::Invalid`], which the reader
//! has already reported). Sub-parts that do not depend on each other (the name,
//! type, parameters and body of a `def`; the arguments of a call) are all
//! parsed, so independent errors are all reported, while a part that failed is
//! never looked at again, so errors do not cascade. A declaration with an
//! error is skipped; the next one is parsed as usual.
//!
//! A top-level form whose brackets the reader had to guess (unclosed or
//! mismatched) is parsed with the parser's own errors suppressed: it is kept if
//! it parses, and otherwise skipped, the reader's error being the one to fix.

use crate::ast::*;
use crate::sexpr::{Atom, Bracket, SExpr, SExprKind, MAX_DEPTH};

/// The highest rank a `Tensor` type may have. A rank is a number of
/// dimensions, and later stages make things proportional to it (the index
/// type `Tuple Integer ..` of a rank-n tensor, n sizes in its C struct), so
/// a rank written in the source is bounded, as the nesting of brackets is.
pub const MAX_RANK: usize = 32;

/// The most `let` bindings an expression may be inside. A `let` of n
/// bindings nests its body n levels deep in Core IR, whose passes (checking,
/// derivation, optimisation, interpretation, lowering to loops) recurse on
/// that nesting, so the bound plays for `let` chains the part [`MAX_DEPTH`]
/// plays for brackets: every pass of ksc survives the deepest program the
/// parser accepts (the binary runs them on a thread with a large stack).
pub const MAX_LET_DEPTH: usize = 10_000;
use crate::SyntaxError;

/// Words that cannot be variables, parameters or function names.
pub const RESERVED: [&str; 17] = [
    "def", "edef", "rule", "let", "if", "assert", "call", "tuple", ":", "$dummy", "Integer", "Float", "Vec", "Lam",
    "String", "true", "false",
];

/// The type keywords, for "did you mean" suggestions.
// pub for the integration tests (tests/parse_internals.rs), through `crate::testing`.
pub const TYPE_WORDS: [&str; 9] = ["Integer", "Float", "String", "Bool", "Vec", "Tensor", "Tuple", "LM", "Lam"];
const TYPE_CONSTRUCTORS: [&str; 5] = ["Vec", "Tensor", "Tuple", "LM", "Lam"];
const BASE_TYPES: [&str; 4] = ["Integer", "Float", "String", "Bool"];
const DECL_WORDS: [&str; 5] = ["def", "edef", "gdef", "rule", "strategy"];

/// Parse the top-level forms read from `text`.
// pub for the integration tests (tests/parse_internals.rs), through `crate::testing`.
pub fn parse_forms(text: &str, forms: &[SExpr]) -> (SourceFile, Vec<SyntaxError>) {
    let mut p = Parser { text, errors: Vec::new(), suppress: false, depth: 0, lets: 0 };
    let mut decls = Vec::new();
    for form in forms {
        p.suppress = !form.brackets_balanced();
        p.depth = 0;
        if let Ok(decl) = p.decl(form) {
            decls.push(decl);
        }
    }
    (SourceFile { decls }, p.errors)
}

/// Marks a failed parse whose error has already been reported.
struct Failed;

type PResult<T> = Result<T, Failed>;

/// All results, or `Failed` if any failed (after all were computed).
fn all<T>(results: Vec<PResult<T>>) -> PResult<Vec<T>> {
    results.into_iter().collect()
}

/// Whether `s` is a reserved word.
pub fn is_reserved(s: &str) -> bool {
    RESERVED.contains(&s)
}

/// An element of a list in expression position: a single S-expression, or a
/// sign symbol followed by an unsigned number (`- 3`), read as one literal.
#[derive(Clone, Copy)]
enum Item<'a> {
    One(&'a SExpr),
    Signed(&'a SExpr, &'a SExpr),
}

impl Item<'_> {
    fn span(self) -> Span {
        match self {
            Item::One(e) => e.span,
            Item::Signed(sign, num) => sign.span.cover(num.span),
        }
    }
}

/// Edit distance between two short words: insertions, deletions,
/// substitutions and transpositions of adjacent characters each cost 1
/// (optimal string alignment distance). Shared with the type checker's
/// "did you mean" notes.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j] = distance between a[..i] and b[..j]
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The closest candidate that differs only in letter case, or is a prefix of
/// the word or the word of it (3 letters at least), or differs by one edit, or
/// by two edits in a word of at least 5 characters: a "did you mean" note.
// pub for the integration tests (tests/parse_internals.rs), through `crate::testing`.
pub fn suggest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let len = word.chars().count();
    if len > 20 {
        return None;
    }
    if let Some(c) = candidates.iter().find(|c| c.eq_ignore_ascii_case(word)) {
        return Some(c);
    }
    // `Vector` for `Vec`, `Int` for `Integer`, `Lambda` for `Lam`.
    let lower = word.to_ascii_lowercase();
    let prefix = |long: &str, short: &str| short.len() >= 3 && long.starts_with(short);
    if let Some(c) = candidates.iter().find(|c| {
        let c_lower = c.to_ascii_lowercase();
        prefix(&lower, &c_lower) || prefix(&c_lower, &lower)
    }) {
        return Some(c);
    }
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|&(d, _)| d == 1 || (d == 2 && len >= 5))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn did_you_mean(word: &str, candidates: &[&str]) -> Option<String> {
    suggest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

struct Parser<'t> {
    text: &'t str,
    errors: Vec<SyntaxError>,
    /// Do not record errors (the current form's brackets are broken).
    suppress: bool,
    /// Current nesting depth of expressions, types and names.
    depth: usize,
    /// The number of `let` bindings around the current expression.
    lets: usize,
}

impl Parser<'_> {
    // ------------------------------------------------------------ utilities

    fn error(&mut self, span: Span, message: impl Into<String>) -> Failed {
        self.error_note(span, message, None::<String>)
    }

    fn error_note(&mut self, span: Span, message: impl Into<String>, note: Option<impl Into<String>>) -> Failed {
        if !self.suppress {
            let mut e = SyntaxError::new(span, message);
            e.note = note.map(Into::into);
            self.errors.push(e);
        }
        Failed
    }

    /// The source text of a span, shortened to its first line and 40 chars,
    /// for quoting in messages.
    fn snippet(&self, span: Span) -> String {
        let full = self.text.get(span.range()).unwrap_or("");
        let first_line = full.lines().next().unwrap_or("");
        let mut out: String = first_line.chars().take(40).collect();
        if out.len() < full.len() {
            out.push_str(" ...");
        }
        out
    }

    /// Run `f` one nesting level deeper, refusing beyond [`MAX_DEPTH`].
    fn nested<T>(&mut self, span: Span, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        if self.depth >= MAX_DEPTH {
            return Err(self.too_deep(span));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// Group the elements of a list in expression position, merging a lone
    /// sign with the unsigned number after it (the original reads `- 3` as -3).
    fn items<'a>(&self, xs: &'a [SExpr]) -> Vec<Item<'a>> {
        let mut out = Vec::with_capacity(xs.len());
        let mut i = 0;
        while i < xs.len() {
            if let (Some("-" | "+"), Some(next)) = (xs[i].as_symbol(), xs.get(i + 1)) {
                let unsigned =
                    self.text.get(next.span.range()).is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()));
                if unsigned && matches!(next.kind, SExprKind::Atom(Atom::Integer(_) | Atom::Float(_))) {
                    out.push(Item::Signed(&xs[i], next));
                    i += 2;
                    continue;
                }
            }
            out.push(Item::One(&xs[i]));
            i += 1;
        }
        out
    }

    /// Report a wrong number of parts in a form like `(def NAME ...)`.
    /// `parts` names the expected parts after the keyword; `found` are the
    /// spans of the parts present.
    fn arity(&mut self, form: Span, keyword: &str, parts: &[&str], found: &[Span]) -> PResult<()> {
        let template = format!("`({keyword} {})`", parts.join(" "));
        if found.len() < parts.len() {
            let missing = describe_part(parts[found.len()]);
            let msg = format!("incomplete `{keyword}`: the {missing} is missing; expected {template}");
            return Err(self.error(form, msg));
        }
        if found.len() > parts.len() {
            let extra = found[parts.len()].cover(found[found.len() - 1]);
            let n = found.len() - parts.len();
            let msg = format!(
                "too many parts in `{keyword}`: expected {template}, found {} more: `{}`",
                n,
                self.snippet(extra)
            );
            return Err(self.error(extra, msg));
        }
        Ok(())
    }

    // --------------------------------------------------------- declarations

    fn decl(&mut self, form: &SExpr) -> PResult<Decl> {
        let expected =
            "expected a declaration `(def ...)`, `(edef ...)`, `(gdef ...)`, `(rule ...)` or `(strategy ...)`";
        if form.is_invalid() {
            return Err(Failed);
        }
        let Some(items) = form.as_paren_list() else {
            let msg = format!("{expected}, found `{}`", self.snippet(form.span));
            return Err(self.error(form.span, msg));
        };
        let Some(head) = items.first() else {
            return Err(self.error(form.span, format!("{expected}, found `()`")));
        };
        match head.as_symbol() {
            Some("def") => self.def(form.span, items).map(Decl::Def),
            Some("edef") => self.edef(form.span, items).map(Decl::Edef),
            Some("gdef") => self.gdef(form.span, items).map(Decl::Gdef),
            Some("rule") => self.rule(form.span, items).map(Decl::Rule),
            Some("strategy") => self.strategy(form.span, items).map(Decl::Strategy),
            _ if head.is_invalid() => Err(Failed),
            Some(word) => {
                let note = did_you_mean(word, &DECL_WORDS)
                    .or_else(|| Some("expressions can only appear inside a `def` or a `rule`".to_string()));
                let msg = format!(
                    "expected a declaration keyword `def`, `edef`, `gdef`, `rule` or `strategy`, found `{word}`"
                );
                Err(self.error_note(head.span, msg, note))
            }
            None => {
                let msg = format!("{expected}, found `{}`", self.snippet(form.span));
                Err(self.error(form.span, msg))
            }
        }
    }

    /// `(def NAME RET_TYPE PARAMS BODY)`
    fn def(&mut self, span: Span, items: &[SExpr]) -> PResult<Def> {
        let rest = &items[1..];
        if rest.len() == 3 && looks_like_params(&rest[1]) {
            let msg = "the return type of this `def` is missing: expected `(def NAME RETURN_TYPE PARAMS BODY)`";
            return Err(self.error(rest[1].span, msg));
        }
        let body_items = self.items(rest.get(3..).unwrap_or(&[]));
        let found: Vec<Span> = rest.iter().take(3).map(|e| e.span).chain(body_items.iter().map(|i| i.span())).collect();
        self.arity(span, "def", &["NAME", "RETURN_TYPE", "PARAMS", "BODY"], &found)?;
        let name = self.fun_name(&rest[0]);
        let ret_ty = self.ty(&rest[1]);
        let params = self.params(&rest[2]);
        let body = self.expr_item(body_items[0]);
        Ok(Def { name: name?, ret_ty: ret_ty?, params: params?, body: body?, span })
    }

    /// `(edef NAME RET_TYPE ARG_TYPE)`
    fn edef(&mut self, span: Span, items: &[SExpr]) -> PResult<Edef> {
        let rest = &items[1..];
        let found: Vec<Span> = rest.iter().map(|e| e.span).collect();
        self.arity(span, "edef", &["NAME", "RETURN_TYPE", "ARGUMENT_TYPE"], &found)?;
        let name = self.fun_name(&rest[0]);
        let ret_ty = self.ty(&rest[1]);
        let arg_ty = self.edef_arg_ty(&rest[2]);
        Ok(Edef { name: name?, ret_ty: ret_ty?, arg_ty: arg_ty?, span })
    }

    /// `(gdef DERIVATION FUN)` or `(gdef DERIVATION FUN SCHEDULE)`
    fn gdef(&mut self, span: Span, items: &[SExpr]) -> PResult<Gdef> {
        let rest = &items[1..];
        let found: Vec<Span> = rest.iter().map(|e| e.span).collect();
        let parts: &[&str] =
            if found.len() >= 3 { &["DERIVATION", "FUNCTION", "SCHEDULE"] } else { &["DERIVATION", "FUNCTION"] };
        self.arity(span, "gdef", parts, &found)?;
        let derivation = self.gdef_derivation(&rest[0]);
        let fun = self.fun_name(&rest[1]);
        let schedule = rest.get(2).map(|s| self.ident(s, "strategy name")).transpose();
        Ok(Gdef { derivation: derivation?, derivation_span: rest[0].span, fun: fun?, schedule: schedule?, span })
    }

    fn gdef_derivation(&mut self, e: &SExpr) -> PResult<Derivation> {
        let valid = "`fwd`, `rev`, `CL`, `shape`, `suffwdpass`, `sufrevpass` or `sufrev`";
        match e.as_symbol() {
            Some("D") => Err(self.error(e.span, "there is no `gdef D`; `[D f]` is derived by `gdef fwd` / `gdef rev`")),
            Some(word) => match Derivation::from_keyword(word) {
                Some(d) => Ok(d),
                None => {
                    let candidates: Vec<&str> = Derivation::ALL[1..].iter().map(|d| d.keyword()).collect();
                    let note = did_you_mean(word, &candidates);
                    Err(self.error_note(e.span, format!("unknown derivation `{word}`: expected {valid}"), note))
                }
            },
            None if e.is_invalid() => Err(Failed),
            None => {
                let msg = format!("expected a derivation ({valid}), found `{}`", self.snippet(e.span));
                Err(self.error(e.span, msg))
            }
        }
    }

    /// `(rule "NAME" PARAMS LHS RHS)`
    fn rule(&mut self, span: Span, items: &[SExpr]) -> PResult<Rule> {
        let rest = &items[1..];
        let sides = self.items(rest.get(2..).unwrap_or(&[]));
        let found: Vec<Span> = rest.iter().take(2).map(|e| e.span).chain(sides.iter().map(|i| i.span())).collect();
        self.arity(span, "rule", &["\"NAME\"", "PARAMS", "LHS", "RHS"], &found)?;
        let name = match &rest[0].kind {
            SExprKind::Atom(Atom::String(s)) => Ok(s.clone()),
            SExprKind::Atom(Atom::Invalid) => Err(Failed),
            _ => {
                let msg =
                    format!("expected the rule's name as a string `\"name\"`, found `{}`", self.snippet(rest[0].span));
                Err(self.error(rest[0].span, msg))
            }
        };
        let params = self.params(&rest[1]);
        let lhs = self.expr_item(sides[0]);
        let rhs = self.expr_item(sides[1]);
        Ok(Rule { name: name?, name_span: rest[0].span, params: params?, lhs: lhs?, rhs: rhs?, span })
    }

    /// `(strategy NAME BODY)` or `(strategy (NAME PARAM ...) BODY)`; the
    /// body is kept as read (`ksc_opt::script` reads it).
    fn strategy(&mut self, span: Span, items: &[SExpr]) -> PResult<Strategy> {
        let rest = &items[1..];
        let found: Vec<Span> = rest.iter().map(|e| e.span).collect();
        self.arity(span, "strategy", &["NAME", "BODY"], &found)?;
        let (name, params) = match rest[0].as_paren_list() {
            Some([]) => {
                let msg = "expected the strategy's name, or `(NAME PARAM ...)`, found `()`";
                return Err(self.error(rest[0].span, msg));
            }
            Some([head, ps @ ..]) => {
                let name = self.ident(head, "strategy name");
                let params: Vec<PResult<Ident>> = ps.iter().map(|p| self.ident(p, "strategy parameter")).collect();
                (name?, params.into_iter().collect::<PResult<Vec<_>>>()?)
            }
            None => (self.ident(&rest[0], "strategy name")?, Vec::new()),
        };
        if rest[1].is_invalid() {
            return Err(Failed);
        }
        Ok(Strategy { name, params, body: rest[1].clone(), span })
    }

    // ---------------------------------------------------------------- types

    /// A type in atomic position: `Integer`, `Float`, `String`, `Bool`, or a
    /// parenthesised compound type.
    fn ty(&mut self, e: &SExpr) -> PResult<Type> {
        let span = e.span;
        match &e.kind {
            SExprKind::Atom(Atom::Symbol(s)) => {
                let kind = match s.as_str() {
                    "Integer" => TypeKind::Integer,
                    "Float" => TypeKind::Float,
                    "String" => TypeKind::String,
                    "Bool" => TypeKind::Bool,
                    c if TYPE_CONSTRUCTORS.contains(&c) => {
                        let example = match c {
                            "Vec" => "(Vec T)",
                            "Tensor" => "(Tensor N T)",
                            "Tuple" => "(Tuple T1 T2 ...)",
                            "LM" => "(LM S T)",
                            _ => "(Lam S T)",
                        };
                        let msg = format!("`{c}` needs parentheses here: write `{example}`");
                        return Err(self.error(span, msg));
                    }
                    other => {
                        let note = did_you_mean(other, &TYPE_WORDS);
                        return Err(self.error_note(span, format!("expected a type, found `{other}`"), note));
                    }
                };
                Ok(Type { kind, span })
            }
            SExprKind::Atom(Atom::Invalid) => Err(Failed),
            SExprKind::List { bracket: Bracket::Paren, items, .. } => {
                if self.depth >= MAX_DEPTH {
                    return Err(self.too_deep(span));
                }
                self.depth += 1;
                let result = self.ty_compound(items, span);
                self.depth -= 1;
                result
            }
            _ => {
                let msg = format!("expected a type, found `{}`", self.snippet(span));
                Err(self.error(span, msg))
            }
        }
    }

    /// The inside of a compound type: `Vec T`, `Tensor n T`, `Tuple T*`,
    /// `LM S T`, `Lam S T` or a single `T`. `span` covers the whole type.
    #[inline(never)]
    fn ty_compound(&mut self, items: &[SExpr], span: Span) -> PResult<Type> {
        let Some(head) = items.first() else {
            let note = Some("the empty tuple type is written `(Tuple)`");
            return Err(self.error_note(span, "expected a type, found `()`", note));
        };
        let args = &items[1..];
        let kind = match head.as_symbol() {
            Some("Vec") => {
                self.type_args(span, "Vec", 1, "(Vec T)", args.len())?;
                TypeKind::Tensor(1, Box::new(self.ty(&args[0])?))
            }
            Some("Tensor") => {
                if args.len() != 2 {
                    let parts = plural(args.len(), "part", "parts");
                    let msg = format!("`Tensor` takes a rank and an element type, found {parts}: write `(Tensor N T)`");
                    return Err(self.error(span, msg));
                }
                let rank = match &args[0].kind {
                    SExprKind::Atom(Atom::Integer(n)) if (1..=MAX_RANK as i64).contains(n) => {
                        usize::try_from(*n).map_err(|_| Failed)
                    }
                    SExprKind::Atom(Atom::Integer(n)) if *n > MAX_RANK as i64 => {
                        let msg = format!("the rank of a `Tensor` is at most {MAX_RANK}, found {n}");
                        Err(self.error(args[0].span, msg))
                    }
                    SExprKind::Atom(Atom::Invalid) => Err(Failed),
                    _ => {
                        let found = self.snippet(args[0].span);
                        let msg = format!("the rank of a `Tensor` must be a positive integer, found `{found}`");
                        Err(self.error(args[0].span, msg))
                    }
                };
                let elem = self.ty(&args[1]);
                TypeKind::Tensor(rank?, Box::new(elem?))
            }
            Some("Tuple") => {
                let tys = args.iter().map(|a| self.ty(a)).collect();
                TypeKind::Tuple(all(tys)?)
            }
            Some(c @ ("LM" | "Lam")) => {
                self.type_args(span, c, 2, &format!("({c} S T)"), args.len())?;
                let (s, t) = (self.ty(&args[0]), self.ty(&args[1]));
                let (s, t) = (Box::new(s?), Box::new(t?));
                if c == "LM" {
                    TypeKind::LM(s, t)
                } else {
                    TypeKind::Lam(s, t)
                }
            }
            // `(T)` is just `T`.
            _ if items.len() == 1 => self.ty(head)?.kind,
            _ if head.is_invalid() => return Err(Failed),
            Some(word) if word.starts_with(|c: char| c.is_ascii_uppercase()) && !BASE_TYPES.contains(&word) => {
                let msg =
                    format!("expected a type constructor `Vec`, `Tensor`, `Tuple`, `LM` or `Lam`, found `{word}`");
                let note = did_you_mean(word, &TYPE_CONSTRUCTORS);
                return Err(self.error_note(head.span, msg, note));
            }
            _ => {
                let msg = format!("expected a type, found `{}`", self.snippet(span));
                let looks_like_types = items.iter().all(|t| match &t.kind {
                    SExprKind::Atom(Atom::Symbol(s)) => s.starts_with(|c: char| c.is_ascii_uppercase()),
                    SExprKind::List { bracket, .. } => *bracket == Bracket::Paren,
                    _ => false,
                });
                let components = self.snippet(items[0].span.cover(items[items.len() - 1].span));
                let note = looks_like_types.then(|| format!("a tuple type is written `(Tuple {components})`"));
                return Err(self.error_note(span, msg, note));
            }
        };
        Ok(Type { kind, span })
    }

    /// Check the number of type arguments of a type constructor.
    fn type_args(&mut self, span: Span, what: &str, n: usize, usage: &str, found: usize) -> PResult<()> {
        if found == n {
            return Ok(());
        }
        let msg = format!("`{what}` takes {}, found {found}: write `{usage}`", plural(n, "type", "types"));
        Err(self.error(span, msg))
    }

    /// The argument type of an `edef`: an atomic type, or (extension, as
    /// accepted by ksc-mlir) `(T1 .. Tn)` with n >= 2, read as `(Tuple T1 .. Tn)`.
    fn edef_arg_ty(&mut self, e: &SExpr) -> PResult<Type> {
        if let Some(items) = e.as_paren_list() {
            let is_constructor =
                items.first().and_then(SExpr::as_symbol).is_some_and(|s| TYPE_CONSTRUCTORS.contains(&s));
            if items.len() >= 2 && !is_constructor {
                let tys = self.nested(e.span, |p| all(items.iter().map(|t| p.ty(t)).collect()))?;
                return Ok(Type { kind: TypeKind::Tuple(tys), span: e.span });
            }
        }
        self.ty(e)
    }

    // ----------------------------------------------------------- parameters

    /// `(x : T)` (single form), or `()` / `((x : S) (y : T) ...)` (list form).
    fn params(&mut self, e: &SExpr) -> PResult<Params> {
        let span = e.span;
        let Some(items) = e.as_paren_list() else {
            if e.is_invalid() {
                return Err(Failed);
            }
            let msg = format!("expected parameters `(x : T)` or `((x : S) (y : T))`, found `{}`", self.snippet(span));
            return Err(self.error(span, msg));
        };
        if items.len() >= 2 && items[1].is_symbol(":") {
            let param = self.param_items(items, span)?;
            return Ok(Params { params: vec![param], form: ParamsForm::Single, span });
        }
        if let Some(glued) = self.glued_colon(items) {
            return Err(glued);
        }
        let params = items.iter().map(|item| self.param(item)).collect();
        Ok(Params { params: all(params)?, form: ParamsForm::List, span })
    }

    /// One parameter `(x : T)`.
    fn param(&mut self, e: &SExpr) -> PResult<Param> {
        if let Some(items) = e.as_paren_list() {
            if items.len() >= 2 && items[1].is_symbol(":") {
                return self.param_items(items, e.span);
            }
            if let Some(glued) = self.glued_colon(items) {
                return Err(glued);
            }
        }
        if e.is_invalid() {
            return Err(Failed);
        }
        let msg = format!("expected a parameter `(x : T)`, found `{}`", self.snippet(e.span));
        Err(self.error(e.span, msg))
    }

    /// The items `x : T...` of a parameter (`items[1]` is `:`); `span` covers
    /// the parenthesised parameter.
    fn param_items(&mut self, items: &[SExpr], span: Span) -> PResult<Param> {
        let name = self.ident(&items[0], "parameter name");
        let ty = match &items[2..] {
            [] => Err(self.error(items[1].span, "missing type after `:` in parameter `(x : T)`")),
            // `x : Tuple` is the empty tuple type; `x : Vec` reports its missing argument.
            [one] if !one.as_symbol().is_some_and(|s| TYPE_CONSTRUCTORS.contains(&s)) => self.ty(one),
            many => {
                let ty_span = many[0].span.cover(many[many.len() - 1].span);
                self.nested(ty_span, |p| p.ty_compound(many, ty_span))
            }
        };
        Ok(Param { name: name?, ty: ty?, span })
    }

    /// Report `x:Float` (a name containing a colon) among the first items of
    /// what should be a parameter.
    fn glued_colon(&mut self, items: &[SExpr]) -> Option<Failed> {
        let glued = items.iter().take(2).find(|e| e.as_symbol().is_some_and(|s| s != ":" && s.contains(':')))?;
        let text = glued.as_symbol().unwrap_or_default();
        let msg = format!(
            "expected a parameter `(x : T)`, found the single name `{text}`: the `:` must be separated by spaces"
        );
        let note = Some(format!("`:` is a name character, so `{text}` is one name; write `(x : Float)`"));
        Some(self.error_note(glued.span, msg, note))
    }

    // ---------------------------------------------------------------- names

    /// A variable, parameter or function name: a symbol that is not reserved.
    fn ident(&mut self, e: &SExpr, role: &str) -> PResult<Ident> {
        match &e.kind {
            SExprKind::Atom(Atom::Symbol(s)) if is_reserved(s) => {
                Err(self.error(e.span, format!("`{s}` is a reserved word and cannot be used as a {role}")))
            }
            SExprKind::Atom(Atom::Symbol(s)) => Ok(Ident { text: s.clone(), span: e.span }),
            SExprKind::Atom(Atom::Invalid) => Err(Failed),
            _ => {
                let msg = format!("expected a {role}, found `{}`", self.snippet(e.span));
                Err(self.error(e.span, msg))
            }
        }
    }

    /// A function name: `f`, `[f T]` or `[DERIV name]`.
    fn fun_name(&mut self, e: &SExpr) -> PResult<FunName> {
        let span = e.span;
        let expected = "expected a function name `f`, `[f T]` or `[DERIVATION f]`";
        match &e.kind {
            SExprKind::Atom(Atom::Symbol(_) | Atom::Invalid) => {
                let name = self.ident(e, "function name")?;
                Ok(FunName { kind: FunNameKind::Base { name, base_ty: None }, span })
            }
            SExprKind::List { bracket: Bracket::Square, items, .. } => self.nested(span, |p| {
                let [head, arg] = items.as_slice() else {
                    let msg = format!("{expected}, found `{}`", p.snippet(span));
                    return Err(p.error(span, msg));
                };
                let Some(word) = head.as_symbol() else {
                    if head.is_invalid() {
                        return Err(Failed);
                    }
                    let msg = format!("{expected}, found `{}`", p.snippet(span));
                    return Err(p.error(span, msg));
                };
                if let Some(derivation) = Derivation::from_keyword(word) {
                    let inner = p.fun_name(arg)?;
                    return Ok(FunName { kind: FunNameKind::Derived { derivation, inner: Box::new(inner) }, span });
                }
                // `[word X]`: a base name with its type if X looks like a type,
                // otherwise a misspelt derivation.
                let looks_like_type = match &arg.kind {
                    SExprKind::Atom(Atom::Symbol(s)) => s.starts_with(|c: char| c.is_ascii_uppercase()),
                    SExprKind::List { bracket, .. } => *bracket == Bracket::Paren,
                    _ => true,
                };
                if !looks_like_type {
                    let keywords: Vec<&str> = Derivation::ALL.iter().map(|d| d.keyword()).collect();
                    let msg = format!("unknown derivation `{word}`: expected one of `{}`", keywords.join("`, `"));
                    let note = did_you_mean(word, &keywords);
                    return Err(p.error_note(head.span, msg, note));
                }
                let name = p.ident(head, "function name");
                let base_ty = p.ty(arg);
                Ok(FunName { kind: FunNameKind::Base { name: name?, base_ty: Some(base_ty?) }, span })
            }),
            _ => {
                let msg = format!("{expected}, found `{}`", self.snippet(span));
                Err(self.error(span, msg))
            }
        }
    }

    // ---------------------------------------------------------- expressions
    //
    // The functions on the recursive path (`expr`, `list_expr`, the special
    // forms, `call`, `exprs`, `expr_item`) keep their stack frames small, so
    // that [`MAX_DEPTH`] levels fit comfortably in a thread's default stack:
    // each form has its own non-inlined function, and every message is built
    // in a cold helper.

    #[inline(always)]
    fn expr_item(&mut self, item: Item<'_>) -> PResult<Expr> {
        match item {
            Item::One(e) => self.expr(e),
            Item::Signed(sign, num) => {
                let negative = sign.is_symbol("-");
                let lit = match num.kind {
                    SExprKind::Atom(Atom::Integer(n)) => Literal::Integer(if negative { n.wrapping_neg() } else { n }),
                    SExprKind::Atom(Atom::Float(f)) => Literal::Float(if negative { -f } else { f }),
                    // `items` only pairs signs with numbers.
                    _ => return self.expr(num),
                };
                Ok(Expr { kind: ExprKind::Lit(lit), span: item.span() })
            }
        }
    }

    /// Parse all the expressions of a list slice (after sign merging).
    fn exprs(&mut self, xs: &[SExpr]) -> PResult<Vec<Expr>> {
        let items = self.items(xs);
        let mut out = Vec::with_capacity(items.len());
        let mut failed = false;
        for item in items {
            match self.expr_item(item) {
                Ok(e) => out.push(e),
                Err(Failed) => failed = true,
            }
        }
        if failed {
            Err(Failed)
        } else {
            Ok(out)
        }
    }

    #[inline(always)]
    fn expr(&mut self, e: &SExpr) -> PResult<Expr> {
        match &e.kind {
            SExprKind::List { bracket: Bracket::Paren, items, .. } => {
                if self.depth >= MAX_DEPTH {
                    return Err(self.too_deep(e.span));
                }
                self.depth += 1;
                let result = self.list_expr(e.span, items);
                self.depth -= 1;
                result
            }
            _ => self.atom_expr(e),
        }
    }

    /// An expression that is not a parenthesised list.
    #[inline(never)]
    fn atom_expr(&mut self, e: &SExpr) -> PResult<Expr> {
        let span = e.span;
        let kind = match &e.kind {
            SExprKind::Atom(Atom::Integer(n)) => ExprKind::Lit(Literal::Integer(*n)),
            SExprKind::Atom(Atom::Float(f)) => ExprKind::Lit(Literal::Float(*f)),
            SExprKind::Atom(Atom::String(s)) => ExprKind::Lit(Literal::String(s.clone())),
            SExprKind::Atom(Atom::Symbol(s)) if s == "true" => ExprKind::Lit(Literal::Bool(true)),
            SExprKind::Atom(Atom::Symbol(s)) if s == "false" => ExprKind::Lit(Literal::Bool(false)),
            SExprKind::Atom(Atom::Symbol(s)) if s == ":" => {
                let note = Some("`:` only separates a parameter from its type, as in `(x : Float)`");
                return Err(self.error_note(span, "unexpected `:` in an expression", note));
            }
            SExprKind::Atom(_) => ExprKind::Var(self.ident(e, "variable name")?),
            SExprKind::List { bracket: Bracket::Square, .. } => {
                let msg = format!("expected an expression, found the function name `{}`", self.snippet(span));
                let note = Some("a function is called by putting its name first in parentheses, e.g. `([rev f] x dr)`");
                return Err(self.error_note(span, msg, note));
            }
            SExprKind::List { bracket: Bracket::Paren, items, .. } => return self.list_expr(span, items),
        };
        Ok(Expr { kind, span })
    }

    /// A parenthesised expression: a special form or a call.
    #[inline(never)]
    fn list_expr(&mut self, span: Span, items: &[SExpr]) -> PResult<Expr> {
        let Some(head) = items.first() else {
            return Err(self.bad_head(span, None));
        };
        let rest = &items[1..];
        let kind = match head.as_symbol() {
            Some("if") => self.if_expr(span, rest),
            Some("assert") => self.assert_expr(span, rest),
            Some("tuple") => self.exprs(rest).map(ExprKind::Tuple),
            Some("lam") => self.lam(span, rest),
            Some("$dummy") => self.dummy(span, rest),
            Some("let") => self.let_expr(span, rest),
            Some(word) if is_reserved(word) => Err(self.reserved_head(head, word)),
            _ => self.call(head, rest),
        }?;
        Ok(Expr { kind, span })
    }

    /// `(head args...)` where head is not a keyword.
    #[inline(always)]
    fn call(&mut self, head: &SExpr, rest: &[SExpr]) -> PResult<ExprKind> {
        let fun = match &head.kind {
            SExprKind::Atom(Atom::Symbol(_)) | SExprKind::List { bracket: Bracket::Square, .. } => self.fun_name(head),
            // Already reported; the arguments may still hold independent errors.
            SExprKind::Atom(Atom::Invalid) => Err(Failed),
            _ => return Err(self.bad_head(head.span, Some(head))),
        };
        let args = self.exprs(rest);
        Ok(ExprKind::Call { fun: fun?, args: args? })
    }

    #[inline(never)]
    fn if_expr(&mut self, span: Span, rest: &[SExpr]) -> PResult<ExprKind> {
        let args = self.exprs(rest);
        match <[Expr; 3]>::try_from(args?) {
            Ok([c, t, e]) => Ok(ExprKind::If { cond: Box::new(c), then_branch: Box::new(t), else_branch: Box::new(e) }),
            Err(args) => Err(self.wrong_count(span, "if", 3, "(condition, then, else)", args.len())),
        }
    }

    #[inline(never)]
    fn assert_expr(&mut self, span: Span, rest: &[SExpr]) -> PResult<ExprKind> {
        let args = self.exprs(rest);
        match <[Expr; 2]>::try_from(args?) {
            Ok([c, b]) => Ok(ExprKind::Assert { cond: Box::new(c), body: Box::new(b) }),
            Err(args) => Err(self.wrong_count(span, "assert", 2, "(condition, body)", args.len())),
        }
    }

    #[inline(never)]
    fn dummy(&mut self, span: Span, rest: &[SExpr]) -> PResult<ExprKind> {
        match rest {
            [t] => Ok(ExprKind::Dummy(self.ty(t)?)),
            _ => Err(self.error(span, format!("`$dummy` takes exactly one type, found {}", rest.len()))),
        }
    }

    /// `(lam (x : T) body)`; `rest` is what follows `lam`.
    #[inline(never)]
    fn lam(&mut self, span: Span, rest: &[SExpr]) -> PResult<ExprKind> {
        let Some(binder) = rest.first() else {
            return Err(self.error(span, "`lam` takes exactly one typed parameter `(x : T)` and a body, found nothing"));
        };
        let param = match binder.as_paren_list() {
            Some(items) if items.len() >= 2 && items[1].is_symbol(":") => self.param_items(items, binder.span),
            _ => Err(self.bad_lam_binder(binder)),
        };
        let body = self.single_body(span, "lam", &rest[1..]);
        Ok(ExprKind::Lam { param: param?, body: Box::new(body?) })
    }

    /// The one body expression of a `lam` or `let`, after sign merging.
    fn single_body(&mut self, span: Span, keyword: &'static str, xs: &[SExpr]) -> PResult<Expr> {
        let items = self.items(xs);
        match items.as_slice() {
            [one] => self.expr_item(*one),
            _ => Err(self.wrong_body_count(span, keyword, &items)),
        }
    }

    /// `(let BIND body)`; `rest` is what follows `let`.
    #[inline(never)]
    fn let_expr(&mut self, span: Span, rest: &[SExpr]) -> PResult<ExprKind> {
        let Some(bind) = rest.first() else {
            return Err(
                self.error(span, "`let` needs bindings and a body: `(let (x e) body)` or `(let ((x e) ...) body)`")
            );
        };
        let bindings = self.bindings(bind);
        // The body is inside every binding (Core IR nests one `let` per binding).
        let n = bindings.as_ref().map_or(0, Vec::len);
        self.lets += n;
        let body = self.single_body(span, "let", &rest[1..]);
        self.lets -= n;
        Ok(ExprKind::Let { bindings: bindings?, body: Box::new(body?) })
    }

    /// The bindings of a `let`, resolving the ambiguity as the original does:
    /// a two-element list whose first element is a name or a list of names is
    /// ONE binding; anything else is a list of bindings.
    #[inline(never)]
    fn bindings(&mut self, bind: &SExpr) -> PResult<Vec<Binding>> {
        let Some(b) = bind.as_paren_list() else {
            return Err(self.bad_bindings(bind));
        };
        let Some(first) = b.first() else {
            return Ok(Vec::new());
        };
        let rhs = self.items(&b[1..]);
        let names_only = || first.as_paren_list().is_some_and(|names| names.iter().all(|n| n.as_symbol().is_some()));
        if first.as_symbol().is_some() || (rhs.len() == 1 && names_only()) {
            // `(x e)` or `((a b) e)`: one binding. (With a name first, any
            // other count is an error: a list of bindings cannot start with a name.)
            if self.lets >= MAX_LET_DEPTH {
                return Err(self.too_many_lets(bind.span));
            }
            return Ok(vec![self.binding(bind.span, first, &rhs)?]);
        }
        let mut out = Vec::with_capacity(b.len());
        let mut failed = false;
        for (j, item) in b.iter().enumerate() {
            // The j-th binding's expression is inside the j bindings before it.
            if self.lets + j >= MAX_LET_DEPTH {
                return Err(self.too_many_lets(item.span));
            }
            self.lets += j;
            let binding = self.binding_item(item);
            self.lets -= j;
            match binding {
                Ok(binding) => out.push(binding),
                Err(Failed) => failed = true,
            }
        }
        if failed {
            Err(Failed)
        } else {
            Ok(out)
        }
    }

    /// One binding `(pat e)` of a binding list.
    fn binding_item(&mut self, e: &SExpr) -> PResult<Binding> {
        match e.as_paren_list() {
            Some([pat, rest @ ..]) => {
                let rhs = self.items(rest);
                self.binding(e.span, pat, &rhs)
            }
            _ => Err(self.bad_binding(e)),
        }
    }

    /// A binding from its pattern and right-hand side; `span` covers it.
    fn binding(&mut self, span: Span, pat: &SExpr, rhs: &[Item<'_>]) -> PResult<Binding> {
        let pattern = self.pattern(pat);
        let rhs = match rhs {
            [one] => self.expr_item(*one),
            _ => Err(self.wrong_binding_count(span, pat, rhs.len())),
        };
        Ok(Binding { pat: pattern?, rhs: rhs?, span })
    }

    /// `x` or a flat tuple pattern `(a b c)`.
    fn pattern(&mut self, e: &SExpr) -> PResult<Pattern> {
        let Some(names) = e.as_paren_list() else {
            return Ok(Pattern::Var(self.ident(e, "variable name")?));
        };
        let idents = names
            .iter()
            .map(|n| {
                if n.as_list().is_some() {
                    let msg = format!("tuple patterns are flat lists of names, found `{}`", self.snippet(n.span));
                    Err(self.error(n.span, msg))
                } else {
                    self.ident(n, "variable name")
                }
            })
            .collect();
        Ok(Pattern::Tuple(all(idents)?, e.span))
    }

    // ------------------------------------------- cold helpers for messages

    #[cold]
    #[inline(never)]
    fn too_many_lets(&mut self, span: Span) -> Failed {
        let msg = format!("more than {MAX_LET_DEPTH} `let` bindings around this expression");
        let note =
            Some("each binding of a `let` nests what follows it one level deeper; split the function into several");
        self.error_note(span, msg, note)
    }

    #[cold]
    fn too_deep(&mut self, span: Span) -> Failed {
        self.error(span, format!("nesting deeper than {MAX_DEPTH} levels"))
    }

    /// An empty list (`head` = None) or a list whose head cannot start an
    /// expression.
    #[cold]
    #[inline(never)]
    fn bad_head(&mut self, span: Span, head: Option<&SExpr>) -> Failed {
        let Some(head) = head else {
            let note = Some("the empty tuple is written `(tuple)`");
            return self.error_note(span, "expected an expression, found `()`", note);
        };
        let msg = format!("expected a function name or keyword after `(`, found `{}`", self.snippet(head.span));
        let note = if head.as_list().is_some() {
            "the head of a call must be a function name: there is no syntax for calling a computed function"
        } else {
            "a tuple is written `(tuple e1 e2 ...)`"
        };
        self.error_note(span, msg, Some(note))
    }

    #[cold]
    #[inline(never)]
    fn reserved_head(&mut self, head: &SExpr, word: &str) -> Failed {
        let (msg, note) = match word {
            "def" | "edef" | "rule" => (format!("`{word}` is only allowed at the top level of a file"), None),
            "true" | "false" => (format!("`{word}` is a literal, not a function"), None),
            ":" => (
                "unexpected `:` at the head of an expression".to_string(),
                Some("`:` only separates a parameter from its type, as in `(x : Float)`"),
            ),
            "Integer" | "Float" | "String" | "Vec" | "Lam" => (
                format!("`{word}` is a type, not a function"),
                Some("for a placeholder value of a type `T`, write `($dummy T)`"),
            ),
            _ => (format!("`{word}` is a reserved word and cannot be used as a function name"), None),
        };
        self.error_note(head.span, msg, note)
    }

    /// Wrong number of arguments of `if` / `assert`.
    #[cold]
    #[inline(never)]
    fn wrong_count(&mut self, span: Span, keyword: &str, expected: usize, what: &str, found: usize) -> Failed {
        let msg = format!("`{keyword}` takes {expected} arguments {what}, found {found}");
        let usage = if keyword == "if" { "(if CONDITION THEN ELSE)" } else { "(assert CONDITION BODY)" };
        self.error_note(span, msg, Some(format!("expected `{usage}`")))
    }

    #[cold]
    #[inline(never)]
    fn wrong_body_count(&mut self, span: Span, keyword: &str, items: &[Item<'_>]) -> Failed {
        let usage = if keyword == "lam" { "`(lam (x : T) BODY)`" } else { "`(let BINDINGS BODY)`" };
        let [first, extra @ ..] = items else {
            let after = if keyword == "lam" { "its parameter `(x : T)`" } else { "its bindings" };
            return self.error(span, format!("`{keyword}` needs a body after {after}: expected {usage}"));
        };
        let extra_span = extra[0].span().cover(extra[extra.len() - 1].span());
        if keyword == "lam" {
            if let Item::One(e) = first {
                if e.as_paren_list().is_some_and(|items| items.len() >= 2 && items[1].is_symbol(":")) {
                    let msg = format!(
                        "`lam` takes exactly one typed parameter `(x : T)`: expected its body, found another parameter `{}`",
                        self.snippet(e.span)
                    );
                    let note =
                        Some("for several parameters take one tuple: `(lam (xy : Tuple S T) (let ((x y) xy) ...))`");
                    return self.error_note(e.span, msg, note);
                }
            }
        }
        let msg = format!("`{keyword}` takes one body expression, found {}: expected {usage}", items.len());
        let note = (keyword == "let").then_some("to bind several variables write `(let ((x e1) (y e2)) body)`");
        self.error_note(extra_span, msg, note)
    }

    #[cold]
    #[inline(never)]
    fn bad_lam_binder(&mut self, binder: &SExpr) -> Failed {
        if binder.is_invalid() {
            return Failed;
        }
        if let Some(items) = binder.as_paren_list() {
            if let Some(glued) = self.glued_colon(items) {
                return glued;
            }
        }
        let msg = format!("`lam` takes exactly one typed parameter `(x : T)`, found `{}`", self.snippet(binder.span));
        let several =
            binder.as_paren_list().is_some_and(|items| items.first().and_then(SExpr::as_paren_list).is_some());
        let note =
            several.then_some("for several parameters take one tuple: `(lam (xy : Tuple S T) (let ((x y) xy) ...))`");
        self.error_note(binder.span, msg, note)
    }

    #[cold]
    #[inline(never)]
    fn bad_bindings(&mut self, bind: &SExpr) -> Failed {
        if bind.is_invalid() {
            return Failed;
        }
        let msg = format!("expected `let` bindings `(x e)` or `((x e) ...)`, found `{}`", self.snippet(bind.span));
        self.error(bind.span, msg)
    }

    #[cold]
    #[inline(never)]
    fn bad_binding(&mut self, e: &SExpr) -> Failed {
        if e.is_invalid() {
            return Failed;
        }
        let msg = format!("expected a `let` binding `(x e)`, found `{}`", self.snippet(e.span));
        self.error(e.span, msg)
    }

    #[cold]
    #[inline(never)]
    fn wrong_binding_count(&mut self, span: Span, pat: &SExpr, found: usize) -> Failed {
        let what = if pat.as_symbol().is_some() { "name" } else { "pattern" };
        let msg = format!("a `let` binding `(x e)` needs exactly one expression after the {what}, found {found}");
        self.error(span, msg)
    }
}

/// How to name a missing part of a declaration in a message.
fn describe_part(part: &str) -> &str {
    match part {
        "NAME" | "\"NAME\"" => "name",
        "RETURN_TYPE" => "return type",
        "ARGUMENT_TYPE" => "argument type",
        "PARAMS" => "parameter list",
        "BODY" => "body",
        "DERIVATION" => "derivation",
        "FUNCTION" => "function name",
        "LHS" => "left-hand side",
        "RHS" => "right-hand side",
        other => other,
    }
}

/// Whether an S-expression looks like a parameter list (to diagnose a `def`
/// without a return type).
fn looks_like_params(e: &SExpr) -> bool {
    let is_param = |items: &[SExpr]| items.len() >= 2 && items[1].is_symbol(":");
    match e.as_paren_list() {
        Some(items) => is_param(items) || items.iter().all(|i| i.as_paren_list().is_some_and(is_param)),
        None => false,
    }
}
