//! The inputs, the tracked declaration items, and the queries.

use std::fmt;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use ksc_ir::{Body, Decl, Def, Derivation, Expr, ExprId, FunName, Rule};
use ksc_syntax::Span;
use ksc_types::check::Checker;
use ksc_types::lower::{self, DeclSpans};
use ksc_types::{Analysis, CheckedFile, Diagnostic, FileRef, GlobalTable, SigKind};

use crate::Db;

/// The user's file: its text.
#[salsa::input(debug)]
pub struct SourceFile {
    #[returns(ref)]
    pub text: String,
    /// Expand `reduce` and `scan` with a run-time check of their monoid
    /// laws (`ksc run --check-monoids`).
    #[default]
    pub check_monoids: bool,
}

/// The built-in prelude's text, set once at high durability.
#[salsa::input(debug)]
pub struct PreludeText {
    #[returns(ref)]
    pub text: String,
}

/// The kind of a declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemKind {
    Def,
    Edef,
    Gdef,
    Rule,
    Strategy,
}

/// What identifies a declaration across edits: its kind and its name as
/// written (salsa adds the occurrence among equal keys, so two overloads
/// `(def mul ...)` are the first and second `def mul`). Not its position,
/// so editing one declaration leaves the identity of the others.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ItemKey {
    pub kind: ItemKind,
    pub name: String,
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ItemKind::Def => "def",
            ItemKind::Edef => "edef",
            ItemKind::Gdef => "gdef",
            ItemKind::Rule => "rule",
            ItemKind::Strategy => "strategy",
        };
        write!(f, "{kind} {}", self.name)
    }
}

fn item_key(d: &Decl) -> ItemKey {
    match d {
        Decl::Def(d) => ItemKey { kind: ItemKind::Def, name: d.name.to_string() },
        Decl::Edef(d) => ItemKey { kind: ItemKind::Edef, name: d.name.to_string() },
        Decl::Gdef(g) => ItemKey { kind: ItemKind::Gdef, name: format!("{} {}", g.derivation.keyword(), g.fun) },
        Decl::Rule(r) => ItemKey { kind: ItemKind::Rule, name: format!("{:?}", r.name) },
        Decl::Strategy(s) => ItemKey { kind: ItemKind::Strategy, name: s.name.clone() },
    }
}

/// One declaration of a file. Its identity is the file and its [`ItemKey`]
/// (plus occurrence); its Core IR, span map and index are separate tracked
/// fields, so a query reading only the Core IR is not invalidated when the
/// declaration moves.
#[salsa::tracked(debug)]
pub struct Item<'db> {
    #[returns(copy)]
    pub file: SourceFile,
    #[returns(ref)]
    pub key: ItemKey,
    /// The declaration as lowered (names as written, no types, no positions).
    #[tracked]
    #[returns(ref)]
    pub decl: Decl,
    /// Where its parts are in the file.
    #[tracked]
    #[returns(ref)]
    pub spans: DeclSpans,
    /// Its position among the file's declarations.
    #[tracked]
    #[returns(copy)]
    pub index: usize,
}

/// A file read: its declarations, its syntax errors, and the base names of
/// declarations that could not be read.
#[derive(Debug, PartialEq, salsa::SalsaValue)]
pub struct ParsedFile<'db> {
    pub items: Vec<Item<'db>>,
    pub syntax: Vec<Diagnostic>,
    pub unreadable: std::sync::Arc<rustc_hash::FxHashSet<String>>,
}

/// Reads and lowers the file (the only query reading its text).
#[salsa::tracked(returns(ref))]
pub fn parse_file(db: &dyn Db, file: SourceFile) -> ParsedFile<'_> {
    db.log_execution("parse_file".to_string());
    let text = file.text(db);
    let (ast, errors) = ksc_syntax::parse_source(text);
    let syntax: Vec<Diagnostic> = errors.into_iter().map(|e| Diagnostic::syntax(FileRef::Source, e)).collect();
    let (decls, spans) = lower::lower_file(&ast);
    let unreadable = std::sync::Arc::new(if syntax.is_empty() {
        Default::default()
    } else {
        ksc_types::unreadable_declarations(text, &decls)
    });
    let items = decls
        .into_iter()
        .zip(spans)
        .enumerate()
        .map(|(i, (d, s))| {
            let key = item_key(&d);
            Item::new(db, file, key, d, s, i)
        })
        .collect();
    ParsedFile { items, syntax, unreadable }
}

/// The checked prelude and the table of its functions.
#[derive(Clone, Copy, Debug)]
pub struct Prelude {
    pub file: &'static CheckedFile,
    pub table: &'static GlobalTable,
}

impl PartialEq for Prelude {
    fn eq(&self, o: &Prelude) -> bool {
        std::ptr::eq(self.file, o.file) && std::ptr::eq(self.table, o.table)
    }
}

/// The prelude, checked. The built-in text is checked once per process
/// (`ksc_types::builtin_prelude`); another text is checked here and kept
/// for the rest of the process (only tests use other preludes).
#[salsa::tracked(returns(copy))]
pub fn prelude(db: &dyn Db) -> Prelude {
    db.log_execution("prelude".to_string());
    let text = db.prelude_input().text(db);
    if text == ksc_types::PRELUDE_SOURCE {
        let (file, table) = ksc_types::builtin_prelude();
        return Prelude { file, table };
    }
    let (ast, _) = ksc_syntax::parse_source(text);
    let (mut decls, spans) = lower::lower_file(&ast);
    let mut table = GlobalTable::default();
    Checker::new(&mut table, FileRef::Prelude).check_file(&mut decls, &spans);
    Prelude { file: Box::leak(Box::new(CheckedFile { decls, spans })), table: Box::leak(Box::new(table)) }
}

/// What other declarations see of a declaration: a `def` with its body
/// replaced by a placeholder of its result type, an `edef` or `gdef` as it
/// is; a rule declares nothing. Re-executes when the body is edited, and
/// compares equal unless the signature changed, so callers are not
/// re-checked.
#[salsa::tracked(returns(ref))]
pub fn signature<'db>(db: &'db dyn Db, item: Item<'db>) -> Option<Decl> {
    db.log_execution(format!("signature({})", item.key(db)));
    match item.decl(db) {
        Decl::Def(d) => {
            let mut body = Body::new();
            let root = body.alloc(Expr::Dummy(d.ret_ty.clone()));
            Some(Decl::Def(Def {
                name: d.name.clone(),
                params: d.params.clone(),
                ret_ty: d.ret_ty.clone(),
                body,
                root,
            }))
        }
        d @ (Decl::Edef(_) | Decl::Gdef(_)) => Some(d.clone()),
        Decl::Rule(_) | Decl::Strategy(_) => None,
    }
}

/// The scope of each declaration of a file: the table of the functions
/// declared before it (prelude included), the full name each declaration
/// registers, and the table after the whole file.
#[derive(Debug, PartialEq)]
pub struct Scopes {
    pub before: Vec<GlobalTable>,
    pub resolved: Vec<Option<FunName>>,
    pub table: GlobalTable,
}

/// Registers the signatures of a file in order. Unlocated, every origin in
/// the file is declaration 0 at an empty span, so the tables do not change
/// when text moves; located, they are the real ones (for diagnostics and
/// for finding run-time errors).
fn register_signatures(db: &dyn Db, file: SourceFile, located: bool) -> Scopes {
    let parsed = parse_file(db, file);
    let mut table = prelude(db).table.clone();
    let mut layers = ksc_types::Layers::new(&table);
    let mut checker = Checker::new(&mut table, FileRef::Source);
    checker.unreadable = parsed.unreadable.clone();
    let sigs: Vec<(Item<'_>, Option<&Decl>)> =
        parsed.items.iter().map(|&it| (it, signature(db, it).as_ref())).collect();
    for (it, sig) in &sigs {
        if let Some(base) = sig.and_then(declared_base_name) {
            checker.declared_in_file(base, if located { it.spans(db).name } else { Span::default() });
        }
    }
    checker.table.start_journal();
    let mut resolved = Vec::with_capacity(sigs.len());
    let unlocated = DeclSpans::default();
    for (i, (it, sig)) in sigs.iter().enumerate() {
        resolved.push(sig.map(|s| {
            let mut d = s.clone();
            if located {
                checker.check_decl(i, &mut d, it.spans(db));
            } else {
                checker.check_decl(0, &mut d, &unlocated);
            }
            declared_name(&d)
        }));
        // What declaration i registered: layer i + 1, seen from i + 1 on.
        layers.push(checker.table.take_journal());
    }
    drop(checker);
    let layers = std::sync::Arc::new(layers);
    // Declaration i sees layers 0 (the prelude) to i.
    let before = (0..sigs.len()).map(|i| layers.view(i + 1)).collect();
    Scopes { before, resolved: resolved.into_iter().map(Option::flatten).collect(), table }
}

/// The base name a `def` or `edef` declares.
fn declared_base_name(d: &Decl) -> Option<&str> {
    match d {
        Decl::Def(Def { name, .. }) | Decl::Edef(ksc_ir::Edef { name, .. }) => Some(&name.base),
        _ => None,
    }
}

/// The base names the file's `def`s and `edef`s declare (for the note that
/// a function is declared later in the file), without positions; shared
/// by the checkers of all its declarations.
#[salsa::tracked(returns(ref))]
pub fn declared_names(db: &dyn Db, file: SourceFile) -> std::sync::Arc<FxHashMap<String, Span>> {
    db.log_execution("declared_names".to_string());
    let mut names = FxHashMap::default();
    for &it in &parse_file(db, file).items {
        if let Some(base) = signature(db, it).as_ref().and_then(declared_base_name) {
            names.entry(base.to_string()).or_insert(Span::default());
        }
    }
    std::sync::Arc::new(names)
}

/// [`declared_names`] with the spans of the names (for diagnostics).
#[salsa::tracked(returns(ref))]
pub fn located_declared_names(db: &dyn Db, file: SourceFile) -> std::sync::Arc<FxHashMap<String, Span>> {
    db.log_execution("located_declared_names".to_string());
    let mut names = FxHashMap::default();
    for &it in &parse_file(db, file).items {
        if let Some(base) = signature(db, it).as_ref().and_then(declared_base_name) {
            names.entry(base.to_string()).or_insert(it.spans(db).name);
        }
    }
    std::sync::Arc::new(names)
}

fn declared_name(d: &Decl) -> Option<FunName> {
    match d {
        Decl::Def(d) if d.name.base_ty.is_some() => Some(d.name.clone()),
        Decl::Edef(d) if d.name.base_ty.is_some() => Some(d.name.clone()),
        _ => None,
    }
}

/// The scopes of a file's declarations, without positions.
#[salsa::tracked(returns(ref))]
pub fn file_scopes(db: &dyn Db, file: SourceFile) -> Scopes {
    db.log_execution("file_scopes".to_string());
    register_signatures(db, file, false)
}

/// The scopes of a file's declarations with their positions (for
/// diagnostics and the run-time error locations of [`analysis`]).
#[salsa::tracked(returns(ref))]
pub fn located_scopes(db: &dyn Db, file: SourceFile) -> Scopes {
    db.log_execution("located_scopes".to_string());
    register_signatures(db, file, true)
}

/// The table of functions one declaration sees (the functions declared
/// before it). Compares equal, and so stops invalidation, when an edit
/// elsewhere did not change it.
#[salsa::tracked(returns(ref))]
pub fn scope<'db>(db: &'db dyn Db, item: Item<'db>) -> GlobalTable {
    db.log_execution(format!("scope({})", item.key(db)));
    file_scopes(db, item.file(db)).before[item.index(db)].clone()
}

/// Structural equality of two bodies, types included (the `PartialEq` of
/// Core IR compares expression trees only).
fn same_body(a: &Body, b: &Body) -> bool {
    a.exprs.len() == b.exprs.len() && a.exprs.iter().eq(b.exprs.iter()) && a.types.iter().eq(b.types.iter())
}

fn same_def(a: &Def, b: &Def) -> bool {
    a.name == b.name && a.params == b.params && a.ret_ty == b.ret_ty && a.root == b.root && same_body(&a.body, &b.body)
}

fn same_decl(a: &Decl, b: &Decl) -> bool {
    match (a, b) {
        (Decl::Def(x), Decl::Def(y)) => same_def(x, y),
        (Decl::Rule(x), Decl::Rule(y)) => TypedRule(x.clone()) == TypedRule(y.clone()),
        _ => a == b,
    }
}

/// A checked definition (compared with its types).
#[derive(Clone, Debug)]
pub struct TypedDef(pub Def);

impl PartialEq for TypedDef {
    fn eq(&self, o: &TypedDef) -> bool {
        same_def(&self.0, &o.0)
    }
}

/// A declaration after checking: names resolved, types filled in; `clean`
/// if checking reported nothing.
#[derive(Clone, Debug)]
pub struct Checked {
    pub decl: Decl,
    pub clean: bool,
    /// What rewriting a definition with the program's rules warned of (a
    /// schedule that ran out of fuel).
    pub warnings: Vec<String>,
}

impl PartialEq for Checked {
    fn eq(&self, o: &Checked) -> bool {
        self.clean == o.clean && self.warnings == o.warnings && same_decl(&self.decl, &o.decl)
    }
}

/// Checks one declaration against its scope, without positions: it reads
/// the declaration's Core IR, its scope and the names the file declares,
/// not its span map.
#[salsa::tracked(returns(ref))]
pub fn checked<'db>(db: &'db dyn Db, item: Item<'db>) -> Checked {
    db.log_execution(format!("checked({})", item.key(db)));
    let parsed = parse_file(db, item.file(db));
    let mut table = scope(db, item).clone();
    let mut checker = Checker::new(&mut table, FileRef::Source);
    checker.unreadable = parsed.unreadable.clone();
    checker.set_declared_in_file(declared_names(db, item.file(db)).clone());
    checker.check_monoids = *item.file(db).check_monoids(db);
    let mut decl = item.decl(db).clone();
    checker.check_decl(0, &mut decl, &DeclSpans::default());
    let clean = checker.diagnostics.is_empty();
    // The program's rules apply to what the user wrote too, as they did in
    // the original (both backends then run the rewritten definition).
    let mut warnings = Vec::new();
    if let (true, Decl::Def(def)) = (clean, &mut decl) {
        let file = item.file(db);
        let schedules = program_schedules(db, file);
        if schedules.runs_user_rules() {
            let declared = declared_names(db, file);
            let declared = ksc_opt::pipeline::Declared(&|base| declared.contains_key(base));
            warnings = ksc_opt::pipeline::rewrite_written(def, &schedules, &declared);
        }
    }
    Checked { decl, clean, warnings }
}

/// A declaration as the backends run it: `checked`'s, rewritten once more
/// when the program's `user-rules` runs on what the user wrote and the
/// definition calls derived functions of the file. That rewriting knows
/// those functions' optimised bodies, so the Core rule `inline-small` (in
/// `(rules core)`) may inline them: a gradient written as forward mode over
/// one-hot directions, calling `[fwd f]` once per element, becomes one
/// loop under `(strategy user-rules (normalize (rules core)))` (issue 43
/// item 1, seed 001's vectorSum). Derivation reads `checked`'s
/// definitions, never these, so nothing here depends on itself.
#[salsa::tracked(returns(ref))]
pub fn written<'db>(db: &'db dyn Db, item: Item<'db>) -> Checked {
    db.log_execution(format!("written({})", item.key(db)));
    let c = checked(db, item);
    let file = item.file(db);
    let Decl::Def(def) = &c.decl else { return c.clone() };
    // The cheap tests first: most definitions call no derived function.
    if !c.clean || !ksc_ir::term::callees(def).iter().any(|f| !f.derivs.is_empty()) {
        return c.clone();
    }
    let schedules = program_schedules(db, file);
    if !schedules.runs_user_rules() {
        return c.clone();
    }
    /// The program's names, and the bodies of its derived functions.
    struct WithDerived<'a> {
        declared: &'a FxHashMap<String, Span>,
        derived: FxHashMap<&'a FunName, &'a Def>,
    }
    impl ksc_opt::Defs for WithDerived<'_> {
        fn def(&self, name: &FunName) -> Option<&Def> {
            self.derived.get(name).copied()
        }
        fn has_def(&self, name: &FunName) -> bool {
            self.derived.contains_key(name) || self.declared.contains_key(&name.base)
        }
    }
    let program = WithDerived {
        declared: declared_names(db, file),
        derived: derived_functions(db, file).iter().map(|d| (&d.0.name, &d.0)).collect(),
    };
    let mut out = c.clone();
    if let Decl::Def(def) = &mut out.decl {
        out.warnings.extend(ksc_opt::pipeline::rewrite_written(def, &schedules, &program));
    }
    out
}

/// The diagnostics of one declaration, located. A clean declaration has
/// none and this reads no positions; otherwise it checks the declaration
/// again with its span map and the located scope.
#[salsa::tracked(returns(ref))]
pub fn item_diagnostics<'db>(db: &'db dyn Db, item: Item<'db>) -> Vec<Diagnostic> {
    db.log_execution(format!("item_diagnostics({})", item.key(db)));
    let c = checked(db, item);
    if c.clean {
        let mut out = strategy_diagnostics(db, item);
        if !c.warnings.is_empty() {
            let at = item.spans(db).name;
            out.extend(c.warnings.iter().map(|w| Diagnostic::warning(FileRef::Source, at, w.clone())));
        }
        return out;
    }
    let file = item.file(db);
    let parsed = parse_file(db, file);
    let index = item.index(db);
    let mut table = located_scopes(db, file).before[index].clone();
    let mut checker = Checker::new(&mut table, FileRef::Source);
    checker.unreadable = parsed.unreadable.clone();
    checker.set_declared_in_file(located_declared_names(db, file).clone());
    checker.check_monoids = *file.check_monoids(db);
    let mut decl = item.decl(db).clone();
    checker.check_decl(index, &mut decl, item.spans(db));
    let mut out = checker.diagnostics;
    out.extend(strategy_diagnostics(db, item));
    out
}

/// The derived functions a `gdef` names a schedule for, with its name.
#[salsa::tracked(returns(ref))]
pub fn gdef_schedules(db: &dyn Db, file: SourceFile) -> Vec<(FunName, String)> {
    db.log_execution("gdef_schedules".to_string());
    parse_file(db, file)
        .items
        .iter()
        .filter(|it| it.key(db).kind == ItemKind::Gdef)
        .filter_map(|&it| match &checked(db, it).decl {
            Decl::Gdef(g) => g.schedule.as_ref().map(|s| (g.fun.derived(g.derivation), s.clone())),
            _ => None,
        })
        .collect()
}

/// The program's `strategy` declarations, in order.
#[salsa::tracked(returns(ref))]
pub fn user_strategies(db: &dyn Db, file: SourceFile) -> Vec<ksc_ir::StrategyDecl> {
    db.log_execution("user_strategies".to_string());
    parse_file(db, file)
        .items
        .iter()
        .filter(|it| it.key(db).kind == ItemKind::Strategy)
        .filter_map(|&it| match it.decl(db) {
            Decl::Strategy(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

/// What the strategy language says of the program's strategies (over its
/// rules), by strategy.
#[salsa::tracked(returns(ref))]
pub fn strategy_errors(db: &dyn Db, file: SourceFile) -> Vec<ksc_opt::ScriptError> {
    db.log_execution("strategy_errors".to_string());
    schedules_with(db, file, &[]).1
}

/// The program's schedules: ksc's, its strategies, its rules.
pub fn program_schedules(db: &dyn Db, file: SourceFile) -> ksc_opt::Schedules {
    schedules_with(db, file, &[]).0
}

/// The program's schedules with `extra` strategies declared after its own
/// (`ksc deriv --schedule "(...)"`), and the problems of the strategies
/// (numbered the program's first).
pub fn schedules_with(
    db: &dyn Db,
    file: SourceFile,
    extra: &[&ksc_ir::StrategyDecl],
) -> (ksc_opt::Schedules, Vec<ksc_opt::ScriptError>) {
    let rules = user_rules(db, file);
    let rules: Vec<&Rule> = rules.iter().map(|r| &r.0).collect();
    let (user, _) = ksc_opt::pipeline::user_rule_set(&rules);
    let mut strategies: Vec<&ksc_ir::StrategyDecl> = user_strategies(db, file).iter().collect();
    strategies.extend(extra);
    ksc_opt::Schedules::program(&strategies, &user)
}

/// The errors of a `strategy` declaration, or of the schedule a `gdef`
/// names, located.
fn strategy_diagnostics(db: &dyn Db, item: Item<'_>) -> Vec<Diagnostic> {
    if let Decl::Gdef(ksc_ir::Gdef { schedule: Some(s), .. }) = item.decl(db) {
        let schedules = program_schedules(db, item.file(db));
        let message = match schedules.library().params(s) {
            Some(0) => return Vec::new(),
            Some(k) => {
                let plural = if k == 1 { "strategy" } else { "strategies" };
                format!("the strategy `{s}` takes {k} {plural}: a gdef's schedule takes none")
            }
            None => format!(
                "unknown strategy `{s}`: a gdef's schedule is a strategy of the file or one of ksc's ({})",
                schedules.library().names().join(", ")
            ),
        };
        return vec![Diagnostic::error(FileRef::Source, item.spans(db).ret_ty, message)];
    }
    if item.key(db).kind != ItemKind::Strategy {
        return Vec::new();
    }
    let file = item.file(db);
    let parsed = parse_file(db, file);
    // Its position among the strategies.
    let k = parsed.items[..item.index(db)].iter().filter(|it| it.key(db).kind == ItemKind::Strategy).count();
    let spans = item.spans(db);
    let mut out: Vec<Diagnostic> = strategy_errors(db, file)
        .iter()
        .filter(|e| e.decl == k)
        .map(|e| {
            let span = e.node.and_then(|n| spans.terms.get(n).copied()).unwrap_or(spans.name);
            Diagnostic::error(FileRef::Source, span, e.message.clone())
        })
        .collect();
    // An `in-def` of a plain name the file defines nothing of runs nowhere:
    // most likely a misspelling. (A derived function's name, `[rev f]`, is
    // known only once derived.)
    if let Decl::Strategy(d) = item.decl(db) {
        let declared = declared_names(db, file);
        let nodes = d.body.pre_order();
        for (p, t) in nodes.iter().enumerate() {
            let ksc_ir::STerm::List(xs) = t else { continue };
            let [ksc_ir::STerm::Symbol(head), ksc_ir::STerm::Symbol(f) | ksc_ir::STerm::String(f), ..] = &xs[..] else {
                continue;
            };
            if head == "in-def" && !f.contains('[') && !declared.contains_key(f.as_str()) {
                let span = spans.terms.get(p + 2).copied().unwrap_or(spans.name);
                let message = format!("`in-def {f}`: the file defines no function `{f}`, so this runs nowhere");
                out.push(Diagnostic::warning(FileRef::Source, span, message));
            }
        }
    }
    out
}

/// Where the definition in force for a function name is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DefSource {
    /// The `i`-th declaration of the prelude.
    Prelude(usize),
    /// The `i`-th item of the file.
    Item(usize),
}

/// The definition in force for every function with a body: the user's, and
/// the prelude's the user did not replace.
#[derive(Debug, PartialEq)]
pub struct DefsInForce {
    pub map: FxHashMap<FunName, DefSource>,
}

#[salsa::tracked(returns(ref))]
pub fn defs_in_force(db: &dyn Db, file: SourceFile) -> DefsInForce {
    db.log_execution("defs_in_force".to_string());
    let scopes = file_scopes(db, file);
    let items = &parse_file(db, file).items;
    // The first `def` item of each resolved name (one pass: a search of
    // the items per signature was quadratic in the file's definitions).
    let mut first_def: FxHashMap<&FunName, usize> = FxHashMap::default();
    for (i, (it, r)) in items.iter().zip(&scopes.resolved).enumerate() {
        if let Some(name) = r {
            if it.key(db).kind == ItemKind::Def {
                first_def.entry(name).or_insert(i);
            }
        }
    }
    let mut map = FxHashMap::default();
    for sig in scopes.table.signatures().filter(|s| s.kind == SigKind::Def) {
        let source = match sig.origin.file {
            FileRef::Prelude => Some(DefSource::Prelude(sig.origin.decl)),
            FileRef::Source => first_def.get(&sig.name).map(|&i| DefSource::Item(i)),
        };
        if let Some(s) = source {
            map.insert(sig.name.clone(), s);
        }
    }
    DefsInForce { map }
}

/// The checked definition in force for a function name.
#[salsa::tracked(returns(ref))]
pub fn def_of(db: &dyn Db, file: SourceFile, name: FunName) -> Option<TypedDef> {
    db.log_execution(format!("def_of({name})"));
    in_force(db, file, &name, |it| &checked(db, it).decl)
}

/// The definition in force for a function name as the backends run it
/// ([`written`]'s); derivation reads [`def_of`]'s.
#[salsa::tracked(returns(ref))]
pub fn run_def_of(db: &dyn Db, file: SourceFile, name: FunName) -> Option<TypedDef> {
    db.log_execution(format!("run_def_of({name})"));
    in_force(db, file, &name, |it| &written(db, it).decl)
}

/// The definition in force for `name`: the prelude's, or the file's item as
/// `decl` gives it.
fn in_force<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    name: &FunName,
    decl: impl Fn(Item<'db>) -> &'db Decl,
) -> Option<TypedDef> {
    let def = match defs_in_force(db, file).map.get(name)? {
        DefSource::Prelude(i) => match &prelude(db).file.decls[*i] {
            Decl::Def(d) => d.clone(),
            _ => return None,
        },
        DefSource::Item(i) => match decl(parse_file(db, file).items[*i]) {
            Decl::Def(d) => d.clone(),
            _ => return None,
        },
    };
    Some(TypedDef(def))
}

/// The functions the definition of `name` calls (`ksc_ad::Program::callees`):
/// unchanged by an edit of its body that keeps its calls, so what reads it
/// (the search for mutual recursion) is not recomputed.
#[salsa::tracked(returns(ref))]
pub fn callees_of(db: &dyn Db, file: SourceFile, name: FunName) -> Vec<FunName> {
    db.log_execution(format!("callees_of({name})"));
    def_of(db, file, name).as_ref().map(|d| ksc_ir::term::callees(&d.0)).unwrap_or_default()
}

/// The functions `name` calls that call it back (`ksc_ad::Program::recursion_partners`):
/// derivation reads this, not the calls of every function on the way.
#[salsa::tracked(returns(ref))]
pub fn recursion_partners(db: &dyn Db, file: SourceFile, name: FunName) -> Vec<FunName> {
    db.log_execution(format!("recursion_partners({name})"));
    let program = DbProgram { db, file };
    def_of(db, file, name).as_ref().map(|d| ksc_ad::mutual_partners(&program, &d.0)).unwrap_or_default()
}

/// Does `name` have a definition with a body (written, or in the
/// prelude)? What derivation and optimisation ask about callees: the
/// answer does not change when a callee's body does.
#[salsa::tracked(returns(copy))]
pub fn is_defined(db: &dyn Db, file: SourceFile, name: FunName) -> bool {
    db.log_execution(format!("is_defined({name})"));
    def_of(db, file, name).is_some()
}

/// Is `name` declared by an `edef` of the file (not the prelude's, whose
/// derivatives ksc knows)? Derivation calls the derivatives the user
/// declares so.
#[salsa::tracked(returns(copy))]
pub fn is_declared(db: &dyn Db, file: SourceFile, name: FunName) -> bool {
    db.log_execution(format!("is_declared({name})"));
    file_scopes(db, file)
        .table
        .get(&name)
        .is_some_and(|sig| sig.kind == SigKind::Edef && sig.origin.file == FileRef::Source)
}

/// A derivation error of a `gdef`: the function that could not be derived,
/// the message, and the expression of its base function at fault.
#[derive(Clone, Debug, PartialEq)]
pub struct DeriveError {
    pub name: FunName,
    pub message: String,
    pub at: Option<ExprId>,
}

/// What a `gdef` generates.
#[derive(Clone, Debug, Default)]
pub struct GdefOutput {
    /// The derived function it asks for (`[rev [f T]]`), once resolved.
    pub requested: Option<FunName>,
    /// A kind of derivative that is checked but not generated.
    pub unsupported: bool,
    /// The derived functions, optimised: the one asked for and those of its
    /// callees it needs.
    pub defs: Vec<Def>,
    pub errors: Vec<DeriveError>,
    /// The optimiser's warnings.
    pub warnings: Vec<String>,
}

impl PartialEq for GdefOutput {
    fn eq(&self, o: &GdefOutput) -> bool {
        self.requested == o.requested
            && self.unsupported == o.unsupported
            && self.defs.len() == o.defs.len()
            && self.defs.iter().zip(&o.defs).all(|(a, b)| same_def(a, b))
            && self.errors == o.errors
            && self.warnings == o.warnings
    }
}

/// One derived function, derived once per file (`ksc_ad::derive_one`):
/// its definition (with the functions it generates, such as the blocks of
/// `[jacsparse f]`), the derived functions it calls, and its errors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DerivedOne {
    /// The function itself first (if it could be derived).
    pub defs: Vec<TypedDef>,
    pub demands: Vec<FunName>,
    pub errors: Vec<DeriveError>,
}

/// What derivation reads of the program, through the database: the
/// definition of the function it differentiates, and only whether its
/// callees have definitions.
struct DbProgram<'db> {
    db: &'db dyn Db,
    file: SourceFile,
}

impl ksc_ad::Program for DbProgram<'_> {
    fn written(&self, name: &FunName) -> Option<&Def> {
        def_of(self.db, self.file, name.clone()).as_ref().map(|d| &d.0)
    }
    fn is_written(&self, name: &FunName) -> bool {
        is_defined(self.db, self.file, name.clone())
    }
    fn is_declared(&self, name: &FunName) -> bool {
        is_declared(self.db, self.file, name.clone())
    }
    fn callees(&self, name: &FunName) -> Vec<FunName> {
        callees_of(self.db, self.file, name.clone()).clone()
    }
    fn recursion_partners(&self, name: &FunName) -> Vec<FunName> {
        recursion_partners(self.db, self.file, name.clone()).clone()
    }
    fn derived(&self, name: &FunName) -> Option<&Def> {
        derived_one(self.db, self.file, name.clone()).defs.first().map(|d| &d.0).filter(|d| d.name == *name)
    }
    fn jacobian(&self, f: &FunName) -> Option<&(Def, ksc_ad::derive::Witnesses)> {
        jacobian_of(self.db, self.file, f.clone()).as_ref().ok().map(|j| &j.0)
    }
}

/// `[D f]` of a written function, unsimplified, with its witnesses:
/// derived once, shared by the derivations from it (`[fwd f]`, `[rev f]`,
/// `[fwdt f]`, the split passes).
#[derive(Clone, Debug)]
pub struct Jacobian(pub (Def, ksc_ad::derive::Witnesses));

impl PartialEq for Jacobian {
    fn eq(&self, o: &Jacobian) -> bool {
        same_def(&self.0 .0, &o.0 .0) && self.0 .1 == o.0 .1
    }
}

#[salsa::tracked(returns(ref))]
pub fn jacobian_of(db: &dyn Db, file: SourceFile, f: FunName) -> Result<Jacobian, DeriveError> {
    db.log_execution(format!("jacobian_of({f})"));
    let program = DbProgram { db, file };
    // A written function, or one the file's `gdef`s derived (`ksc jacobian`
    // of `[rev [f T]]`; derivation itself asks only for written ones, so
    // this is no cycle).
    let def = ksc_ad::Program::written(&program, &f)
        .or_else(|| derived_functions(db, file).iter().map(|d| &d.0).find(|d| d.name == f));
    let Some(def) = def else {
        return Err(DeriveError { name: f.clone(), message: format!("`{f}` has no definition"), at: None });
    };
    ksc_ad::jacobian_in(&program, def).map(Jacobian).map_err(|e| DeriveError {
        name: f.derived(Derivation::D),
        message: e.message,
        at: e.at,
    })
}

/// Derives one function (not optimised). Reads the definition of the
/// function it differentiates; editing a callee's body does not re-derive
/// it.
#[salsa::tracked(returns(ref))]
pub fn derived_one(db: &dyn Db, file: SourceFile, name: FunName) -> DerivedOne {
    db.log_execution(format!("derived_one({name})"));
    let derived = ksc_ad::derive_one(&DbProgram { db, file }, &name);
    DerivedOne {
        defs: derived.defs.into_iter().map(TypedDef).collect(),
        demands: derived.demands,
        errors: derived
            .errors
            .into_iter()
            .map(|(name, e)| DeriveError { name, message: e.message, at: e.at })
            .collect(),
    }
}

/// A derived function asked for: by a `gdef`, or by `ksc deriv` and
/// `ksc jacobian`. The derivatives of its callees it needs are derived and
/// optimised for it ([`closure`], [`optimised`]).
#[salsa::interned(debug)]
pub struct Request<'db> {
    #[returns(copy)]
    pub file: SourceFile,
    #[returns(ref)]
    pub name: FunName,
}

/// The derived functions a request needs: the one it asks for, then those
/// it calls, transitively, each with the function whose derivation
/// produced it; and their errors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Closure {
    /// (derived function, the request of [`derived_one`] that made it).
    pub defs: Vec<(FunName, FunName)>,
    pub errors: Vec<DeriveError>,
    /// The position in `defs` of every derived function (lookups in
    /// constant time: a search of `defs` per lookup was quadratic in the
    /// number of derived functions).
    pub position: FxHashMap<FunName, usize>,
}

/// Whether a derived function is generated as code: every kind is but
/// `[D f]`, a linear map.
fn generated(name: &FunName) -> bool {
    !matches!(name.derivs.first(), None | Some(Derivation::D))
}

#[salsa::tracked(returns(ref))]
pub fn closure<'db>(db: &'db dyn Db, request: Request<'db>) -> Closure {
    let name = request.name(db).clone();
    db.log_execution(format!("closure({name})"));
    let mut out = Closure::default();
    if !generated(&name) {
        return out;
    }
    let file = request.file(db);
    // The order of `ksc_ad::derive_requested`: a derived function whose
    // base is derived too comes after it; callees' derivatives after
    // their caller, the last asked for first.
    let mut done: FxHashSet<FunName> = FxHashSet::default();
    let mut work = vec![name];
    while let Some(name) = work.pop() {
        if done.contains(&name) || is_defined(db, file, name.clone()) {
            continue;
        }
        if let Some((_, inner)) = name.inner() {
            if !inner.derivs.is_empty() && !done.contains(&inner) && !is_defined(db, file, inner.clone()) {
                work.push(name);
                work.push(inner);
                continue;
            }
        }
        done.insert(name.clone());
        let one = derived_one(db, file, name.clone());
        for d in &one.defs {
            if done.insert(d.0.name.clone()) || d.0.name == name {
                out.defs.push((d.0.name.clone(), name.clone()));
            }
        }
        out.errors.extend(one.errors.iter().cloned());
        work.extend(one.demands.iter().rev().cloned());
    }
    for (i, (n, _)) in out.defs.iter().enumerate() {
        out.position.entry(n.clone()).or_insert(i);
    }
    out
}

/// A derived function after optimisation, and the optimiser's warnings.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimised {
    pub def: TypedDef,
    pub warnings: Vec<String>,
}

/// What the optimiser of a request's derived function reads of the
/// program: definitions (for inlining), through the database; the other
/// derived functions of the request; and, through their own queries, the
/// facts and small bodies that do not change with every edit of a callee.
struct DbDefs<'db> {
    db: &'db dyn Db,
    request: Request<'db>,
    file: SourceFile,
    closure: &'db Closure,
    /// Answer [`ksc_opt::Defs::facts`] through [`facts_of`].
    facts: bool,
}

impl<'db> DbDefs<'db> {
    fn new(db: &'db dyn Db, request: Request<'db>, facts: bool) -> DbDefs<'db> {
        DbDefs { db, request, file: request.file(db), closure: closure(db, request), facts }
    }

    fn derived(&self, name: &FunName) -> Option<&'db Def> {
        let (_, producer) = &self.closure.defs[*self.closure.position.get(name)?];
        derived_one(self.db, self.file, producer.clone()).defs.iter().map(|d| &d.0).find(|d| d.name == *name)
    }
}

impl ksc_opt::Defs for DbDefs<'_> {
    fn def(&self, name: &FunName) -> Option<&Def> {
        def_of(self.db, self.file, name.clone()).as_ref().map(|d| &d.0).or_else(|| self.derived(name))
    }
    fn has_def(&self, name: &FunName) -> bool {
        is_defined(self.db, self.file, name.clone()) || self.closure.position.contains_key(name)
    }
    fn small_def(&self, name: &FunName, limit: usize, measure: ksc_opt::Measure) -> Option<&Def> {
        let arena = measure == ksc_opt::Measure::Arena;
        small_def_of(self.db, self.request, name.clone(), limit, arena).as_ref().map(|d| &d.0)
    }
    fn facts(&self, name: &FunName) -> Option<ksc_opt::Facts> {
        if !self.facts {
            return None;
        }
        let (effect, recursive) = facts_of(self.db, self.request, name.clone());
        Some(ksc_opt::Facts { effect, recursive })
    }
}

/// Whether calling `name` may print, and whether it is recursive, in the
/// program a `gdef`'s derived functions see. Reads the bodies of what
/// `name` calls, transitively; its callers read only the two answers.
#[salsa::tracked(returns(copy))]
pub fn facts_of<'db>(db: &'db dyn Db, request: Request<'db>, name: FunName) -> (bool, bool) {
    db.log_execution(format!("facts_of({name})"));
    if let Some(f) = request_facts(db, request).0.get(&name) {
        return (f.effect, f.recursive);
    }
    let defs = DbDefs::new(db, request, false);
    let f = ksc_opt::Globals::new(&defs).facts(&name);
    (f.effect, f.recursive)
}

/// The facts of every function a request's derived functions reach
/// ([`facts_of`] reads them): one pass over the program, where a search
/// per function was quadratic on a chain of calls.
#[derive(Debug, PartialEq)]
pub struct RequestFacts(pub FxHashMap<FunName, ksc_opt::Facts>);

#[salsa::tracked(returns(ref))]
pub fn request_facts<'db>(db: &'db dyn Db, request: Request<'db>) -> RequestFacts {
    db.log_execution(format!("request_facts({})", request.name(db)));
    let defs = DbDefs::new(db, request, false);
    let globals = ksc_opt::Globals::new(&defs);
    for (name, _) in &closure(db, request).defs {
        globals.facts(name);
    }
    RequestFacts(globals.known_facts().into_iter().collect())
}

/// A definition (written, or derived for the request) if its body has at
/// most `limit` nodes (counted over the arena if `arena`, else from the
/// root): what the optimiser reads of a callee it may inline, so that a
/// caller is not optimised again when a callee too big to inline changes.
#[salsa::tracked(returns(ref))]
pub fn small_def_of<'db>(
    db: &'db dyn Db,
    request: Request<'db>,
    name: FunName,
    limit: usize,
    arena: bool,
) -> Option<TypedDef> {
    db.log_execution(format!("small_def_of({name})"));
    let measure = if arena { ksc_opt::Measure::Arena } else { ksc_opt::Measure::Tree };
    let defs = DbDefs::new(db, request, false);
    ksc_opt::Defs::def(&defs, &name).filter(|d| measure.at_most(d, limit)).map(|d| TypedDef(d.clone()))
}

/// One derived function of a request, optimised.
#[salsa::tracked(returns(ref))]
pub fn optimised<'db>(db: &'db dyn Db, request: Request<'db>, name: FunName) -> Optimised {
    db.log_execution(format!("optimised({name})"));
    let defs = DbDefs::new(db, request, true);
    let mut def = defs.derived(&name).expect("optimised: a derived function of the request").clone();
    let schedules = program_schedules(db, request.file(db));
    let globals = ksc_opt::Globals::new(&defs);
    let mut warnings = ksc_opt::pipeline::optimise_derived(&mut def, &globals, &schedules);
    // A `gdef`'s own schedule, after the pipeline (its errors are the
    // gdef's diagnostics).
    if let Some((_, s)) = gdef_schedules(db, request.file(db)).iter().find(|(f, _)| *f == name) {
        if let Ok(run) = ksc_opt::pipeline::apply_schedule(&mut def, &globals, &schedules, s) {
            warnings.extend(run.warnings.into_iter().map(|w| format!("{name}: schedule {s}: {w}")));
        }
    }
    Optimised { def: TypedDef(def), warnings }
}

/// The derived functions a request needs (the one asked for among them),
/// each derived and optimised by its own queries. Not a query itself: the
/// queries it reads are.
pub fn derive_request(db: &dyn Db, request: Request<'_>) -> GdefOutput {
    let closure = closure(db, request);
    let mut out = GdefOutput {
        requested: Some(request.name(db).clone()),
        unsupported: !generated(request.name(db)),
        errors: closure.errors.clone(),
        ..GdefOutput::default()
    };
    if closure.defs.is_empty() {
        return out;
    }
    let rules = user_rules(db, request.file(db));
    let rules: Vec<&Rule> = rules.iter().map(|r| &r.0).collect();
    out.warnings = ksc_opt::pipeline::user_rule_set(&rules).1;
    // Only the derived functions the requested one calls, transitively,
    // once optimised, are optimised and kept (as
    // `ksc_opt::pipeline::keep_called` keeps them): inlining leaves some of
    // those derivation asked for uncalled (under `gdef rev` of a chain of
    // calls, 16 of every 17 `[rev gk]`).
    let mut reached = vec![false; closure.defs.len()];
    let mut work: Vec<usize> = match closure.position.get(request.name(db)) {
        Some(&i) => vec![i],
        None => (0..closure.defs.len()).collect(),
    };
    for &i in &work {
        reached[i] = true;
    }
    while let Some(i) = work.pop() {
        let o = optimised(db, request, closure.defs[i].0.clone());
        for callee in ksc_ir::term::callees(&o.def.0) {
            if let Some(&j) = closure.position.get(&callee) {
                if !reached[j] {
                    reached[j] = true;
                    work.push(j);
                }
            }
        }
    }
    for (i, (name, _)) in closure.defs.iter().enumerate() {
        if reached[i] {
            let o = optimised(db, request, name.clone());
            out.defs.push(o.def.0.clone());
            out.warnings.extend(o.warnings.iter().cloned());
        }
    }
    out
}

/// The derived functions a `gdef` asks for (nothing if it has errors).
#[salsa::tracked(returns(ref))]
pub fn gdef_derived<'db>(db: &'db dyn Db, item: Item<'db>) -> GdefOutput {
    db.log_execution(format!("gdef_derived({})", item.key(db)));
    let c = checked(db, item);
    let Decl::Gdef(g) = &c.decl else { return GdefOutput::default() };
    if !c.clean {
        return GdefOutput::default();
    }
    derive_request(db, Request::new(db, item.file(db), g.fun.derived(g.derivation)))
}

/// `[D f]` of a written function simplified by the program's schedules
/// (`ksc_opt::pipeline::simplify_jacobian`), and, if `trace`, the rules that fired,
/// in order: what `ksc jacobian` prints.
#[salsa::tracked(returns(ref))]
pub fn simplified_jacobian(
    db: &dyn Db,
    file: SourceFile,
    f: FunName,
    trace: bool,
) -> Result<(TypedDef, Trace), DeriveError> {
    db.log_execution(format!("simplified_jacobian({f})"));
    let mut d = jacobian_of(db, file, f.clone()).as_ref().map_err(Clone::clone)?.0 .0.clone();
    let defs = DbDefs::new(db, Request::new(db, file, f.derived(Derivation::D)), true);
    let schedules = program_schedules(db, file);
    let report = ksc_opt::pipeline::simplify_jacobian(&mut d, &ksc_opt::Globals::new(&defs), &schedules, trace);
    Ok((TypedDef(d), Trace { fired: report.trace, phases: report.phases }))
}

/// What simplifying a Jacobian did, when traced: the rules that fired, in
/// order, and the phases with the term's size after each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    pub fired: Vec<ksc_opt::Fired>,
    pub phases: Vec<ksc_opt::schedule::Phase>,
}

/// A checked rule (compared with its types).
#[derive(Clone, Debug)]
pub struct TypedRule(pub Rule);

impl PartialEq for TypedRule {
    fn eq(&self, o: &TypedRule) -> bool {
        let (a, b) = (&self.0, &o.0);
        a.name == b.name && a.params == b.params && (a.lhs, a.rhs) == (b.lhs, b.rhs) && same_body(&a.body, &b.body)
    }
}

/// The file's `rule`s, checked, in order (the optimiser uses them on
/// derived functions).
#[salsa::tracked(returns(ref))]
pub fn user_rules(db: &dyn Db, file: SourceFile) -> Vec<TypedRule> {
    db.log_execution("user_rules".to_string());
    parse_file(db, file)
        .items
        .iter()
        .filter(|it| it.key(db).kind == ItemKind::Rule)
        .filter_map(|&it| match &checked(db, it).decl {
            Decl::Rule(r) => Some(TypedRule(r.clone())),
            _ => None,
        })
        .collect()
}

/// Where an expression of a function's body is (for derivation errors).
fn locate(db: &dyn Db, file: SourceFile, fun: &FunName, e: ExprId) -> Option<(FileRef, Span)> {
    Some(match defs_in_force(db, file).map.get(fun)? {
        DefSource::Prelude(i) => (FileRef::Prelude, prelude(db).file.spans[*i].expr(e)),
        DefSource::Item(i) => (FileRef::Source, parse_file(db, file).items[*i].spans(db).expr(e)),
    })
}

/// Every diagnostic of the file, in the order the whole-file compiler
/// reports them: syntax errors, then each declaration's, then (if there is
/// no error) what the derivations report.
#[salsa::tracked(returns(ref))]
pub fn file_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    db.log_execution("file_diagnostics".to_string());
    let parsed = parse_file(db, file);
    let mut out = parsed.syntax.clone();
    for &it in &parsed.items {
        out.extend(item_diagnostics(db, it).iter().cloned());
    }
    if out.iter().any(Diagnostic::is_error) {
        return out;
    }
    let gdefs: Vec<(Item<'_>, &GdefOutput)> = parsed
        .items
        .iter()
        .filter(|it| it.key(db).kind == ItemKind::Gdef)
        .map(|&it| (it, gdef_derived(db, it)))
        .collect();
    for (it, g) in &gdefs {
        if let (true, Some(name)) = (g.unsupported, &g.requested) {
            let mut d = Diagnostic::warning(
                FileRef::Source,
                it.spans(db).decl,
                format!("`{}` is checked but not generated", name.short()),
            );
            let kind = name.derivs.first().map_or("?", |d| d.keyword());
            d.note(format!("`gdef {kind}` is not implemented yet: calling this function fails at run time"));
            out.push(d);
        }
    }
    let mut warned: FxHashSet<&String> = FxHashSet::default();
    for (_, g) in &gdefs {
        for w in g.warnings.iter().filter(|w| warned.insert(*w)) {
            let mut d = Diagnostic::warning(FileRef::Source, Span::default(), "the optimiser stopped early");
            d.note(w.clone());
            out.push(d);
        }
    }
    let mut reported: FxHashSet<&FunName> = FxHashSet::default();
    for e in gdefs.iter().flat_map(|(_, g)| &g.errors) {
        if !reported.insert(&e.name) {
            continue;
        }
        // The `gdef` asking for it, else the first whose derivation needed it.
        let at = gdefs
            .iter()
            .find(|(_, g)| g.requested.as_ref() == Some(&e.name))
            .or_else(|| gdefs.iter().find(|(_, g)| g.errors.iter().any(|x| x.name == e.name)))
            .map(|(it, _)| it.spans(db).decl)
            .unwrap_or_default();
        let mut d =
            Diagnostic::error(FileRef::Source, at, format!("cannot derive `{}`: {}", e.name.short(), e.message));
        if let (Some(x), Some((_, inner))) = (e.at, e.name.inner()) {
            if let Some((f, span)) = locate(db, file, &inner, x) {
                d.label(f, span, "this cannot be differentiated");
            }
        }
        out.push(d);
    }
    out
}

/// The derived functions of the whole file (each once), in `gdef` order.
#[salsa::tracked(returns(ref))]
pub fn derived_functions(db: &dyn Db, file: SourceFile) -> Vec<TypedDef> {
    db.log_execution("derived_functions".to_string());
    let mut seen: FxHashSet<FunName> = FxHashSet::default();
    let mut out = Vec::new();
    for &it in &parse_file(db, file).items {
        if it.key(db).kind != ItemKind::Gdef {
            continue;
        }
        for d in &gdef_derived(db, it).defs {
            if seen.insert(d.name.clone()) {
                out.push(TypedDef(d.clone()));
            }
        }
    }
    out
}

/// Everything a run needs, as the whole-file front end gives it: the
/// checked declarations with their span maps, the located table, the
/// diagnostics, and (if there is no error) the derived functions.
#[salsa::tracked(returns(clone), no_eq)]
pub fn analysis(db: &dyn Db, file: SourceFile) -> Arc<Analysis> {
    db.log_execution("analysis".to_string());
    let parsed = parse_file(db, file);
    let mut diagnostics = file_diagnostics(db, file).clone();
    let errors = diagnostics.iter().any(Diagnostic::is_error);
    // What the backends run: without errors, the definitions as rewritten
    // knowing the derived functions they call (and that rewriting's own
    // warnings, after `checked`'s).
    let decl = |it| if errors { &checked(db, it).decl } else { &written(db, it).decl };
    if !errors {
        for &it in &parsed.items {
            let more = &written(db, it).warnings[checked(db, it).warnings.len()..];
            let at = it.spans(db).name;
            diagnostics.extend(more.iter().map(|w| Diagnostic::warning(FileRef::Source, at, w.clone())));
        }
    }
    let source = CheckedFile {
        decls: parsed.items.iter().map(|&it| decl(it).clone()).collect(),
        spans: parsed.items.iter().map(|&it| it.spans(db).clone()).collect(),
    };
    let derived = if errors { Vec::new() } else { derived_functions(db, file).iter().map(|d| d.0.clone()).collect() };
    Arc::new(Analysis {
        prelude: prelude(db).file,
        source,
        table: located_scopes(db, file).table.clone(),
        diagnostics,
        derived,
    })
}
