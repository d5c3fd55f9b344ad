//! The front end after reading: lowering to Core IR (with a separate span
//! map), the built-in prelude, and type checking.
//!
//! [`analyze`] takes a file's text and returns its checked Core IR together
//! with every diagnostic found (syntax and type errors). It never panics and
//! never stops at the first error.

pub mod check;
pub mod diagnostic;
pub mod expand;
pub mod lower;
pub mod render;

use std::sync::OnceLock;

use ksc_ir::{Decl, Def, ExprId, FunName, Type};
use ksc_syntax::Span;

pub use check::{GlobalTable, Layers, Origin, SigKind, Signature};
pub use diagnostic::{Diagnostic, FileRef, Label, Severity};
pub use lower::DeclSpans;

/// The text of the built-in prelude (knossos-reference.md 3.2).
pub const PRELUDE_SOURCE: &str = include_str!("prelude.ks");
/// The name diagnostics and run-time errors give the built-in prelude.
pub const PRELUDE_NAME: &str = "<built-in prelude>";

/// One file's declarations in Core IR with their spans.
#[derive(Clone, Debug)]
pub struct CheckedFile {
    pub decls: Vec<Decl>,
    pub spans: Vec<DeclSpans>,
}

/// A checked program: the prelude, the user's file, the global table that
/// resolves every name, and all diagnostics.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub prelude: &'static CheckedFile,
    pub source: CheckedFile,
    pub table: GlobalTable,
    pub diagnostics: Vec<Diagnostic>,
    /// Definitions generated after checking (derivatives asked for by `gdef`s
    /// and those of their callees), added by the compiler's later stages.
    pub derived: Vec<Def>,
}

struct Prelude {
    file: CheckedFile,
    table: GlobalTable,
    diagnostics: Vec<Diagnostic>,
}

fn prelude() -> &'static Prelude {
    static PRELUDE: OnceLock<Prelude> = OnceLock::new();
    PRELUDE.get_or_init(|| {
        let mut table = GlobalTable::default();
        let (file, diagnostics) = check_text(PRELUDE_SOURCE, FileRef::Prelude, &mut table);
        Prelude { file, table, diagnostics }
    })
}

/// The built-in prelude, checked once per process, and the table of its
/// functions (the scope every user file starts from).
pub fn builtin_prelude() -> (&'static CheckedFile, &'static GlobalTable) {
    let p = prelude();
    (&p.file, &p.table)
}

/// Diagnostics of the built-in prelude itself (a test asserts there are none).
pub fn prelude_diagnostics() -> &'static [Diagnostic] {
    &prelude().diagnostics
}

/// Read, lower and check one text against `table`, extending it.
fn check_text(text: &str, file: FileRef, table: &mut GlobalTable) -> (CheckedFile, Vec<Diagnostic>) {
    let (ast, syntax_errors) = ksc_syntax::parse_source(text);
    let mut diagnostics: Vec<Diagnostic> = syntax_errors.into_iter().map(|e| Diagnostic::syntax(file, e)).collect();
    let (mut decls, spans) = lower::lower_file(&ast);
    let mut checker = check::Checker::new(table, file);
    if !diagnostics.is_empty() {
        checker.unreadable = std::sync::Arc::new(unreadable_declarations(text, &decls));
    }
    checker.check_file(&mut decls, &spans);
    diagnostics.extend(checker.diagnostics);
    (CheckedFile { decls, spans }, diagnostics)
}

/// Base names of the functions whose `def` or `edef` could not be read (in a
/// text with syntax errors, whose declarations `read` could be read): uses
/// of them are not reported again as "not in scope"
/// (`Checker::unreadable`).
pub fn unreadable_declarations(text: &str, read: &[Decl]) -> rustc_hash::FxHashSet<String> {
    use ksc_syntax::sexpr::{read_sexprs, Bracket, SExpr};
    fn base_name(e: &SExpr) -> Option<&str> {
        if let Some(s) = e.as_symbol() {
            return Some(s);
        }
        match e.as_list()? {
            (Bracket::Square, [d, inner]) if ksc_ir::Derivation::from_keyword(d.as_symbol()?).is_some() => {
                base_name(inner)
            }
            (Bracket::Square, [name, ..]) => name.as_symbol(),
            _ => None,
        }
    }
    let declared: rustc_hash::FxHashSet<&str> = read
        .iter()
        .filter_map(|d| match d {
            Decl::Def(d) => Some(d.name.base.as_str()),
            Decl::Edef(d) => Some(d.name.base.as_str()),
            _ => None,
        })
        .collect();
    read_sexprs(text)
        .0
        .iter()
        .filter_map(|form| match form.as_paren_list()? {
            [head, name, ..] if matches!(head.as_symbol(), Some("def" | "edef")) => base_name(name),
            _ => None,
        })
        .filter(|n| !declared.contains(n))
        .map(str::to_string)
        .collect()
}

/// Read, lower and type-check a `.ks` file against the built-in prelude.
pub fn analyze(text: &str) -> Analysis {
    let prelude = prelude();
    let mut table = prelude.table.clone();
    let (source, diagnostics) = check_text(text, FileRef::Source, &mut table);
    Analysis { prelude: &prelude.file, source, table, diagnostics, derived: Vec::new() }
}

impl Analysis {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    fn file(&self, f: FileRef) -> &CheckedFile {
        match f {
            FileRef::Prelude => self.prelude,
            FileRef::Source => &self.source,
        }
    }

    /// The declaration a signature comes from.
    pub fn decl(&self, origin: Origin) -> (&Decl, &DeclSpans) {
        let f = self.file(origin.file);
        (&f.decls[origin.decl], &f.spans[origin.decl])
    }

    /// The definition in force for every function that has a body: user
    /// definitions, and prelude definitions the user did not replace.
    /// The external functions of the file: its `edef`s that no built-in
    /// implements (native code calls a C function the user links for each;
    /// the interpreter cannot run them), in the order of the file.
    pub fn externals(&self) -> Vec<&Signature> {
        let mut sigs: Vec<&Signature> = self
            .table
            .signatures()
            .filter(|s| s.kind == SigKind::Edef && s.origin.file == FileRef::Source)
            .filter(|s| ksc_ir::builtin::Builtin::resolve(&s.name).is_none())
            .collect();
        sigs.sort_by_key(|s| s.origin.decl);
        sigs
    }

    pub fn defs(&self) -> Vec<&Def> {
        let mut defs: Vec<(FileRef, usize, &Def)> = self
            .table
            .signatures()
            .filter(|s| s.kind == SigKind::Def)
            .filter_map(|s| match self.decl(s.origin).0 {
                Decl::Def(d) => Some((s.origin.file, s.origin.decl, d)),
                _ => None,
            })
            .collect();
        defs.sort_by_key(|(f, i, _)| (*f == FileRef::Source, *i));
        let mut defs: Vec<&Def> = defs.into_iter().map(|(_, _, d)| d).collect();
        defs.extend(self.derived.iter());
        defs
    }

    /// The functions the program's `gdef`s ask to derive, fully named.
    pub fn gdef_requests(&self) -> Vec<(FunName, Span)> {
        self.source
            .decls
            .iter()
            .zip(&self.source.spans)
            .filter_map(|(d, s)| match d {
                Decl::Gdef(g) => Some((g.fun.derived(g.derivation), s.decl)),
                _ => None,
            })
            .collect()
    }

    /// Where an expression of a function's body is in the source. A
    /// derived function no `gdef` asked for (a callee's derivative, a split
    /// pass of a recursive function) is at the name of the function it
    /// derives, in its definition.
    ///
    /// An `assert` copied from another body (by derivation or inlining) is
    /// where it was written ([`ksc_ir::AssertFrom`]): a derivative fails at
    /// its function's `assert`.
    pub fn locate(&self, fun: &FunName, e: ExprId) -> Option<(FileRef, Span)> {
        let body = self.defs().into_iter().find(|d| d.name == *fun).map(|d| &d.body);
        let node = body.filter(|b| (u32::from(e.into_raw()) as usize) < b.exprs.len()).map(|b| &b.exprs[e]);
        if let Some(ksc_ir::Expr::Assert(_, _, Some(from))) = node {
            if (&from.0, from.1) != (fun, e) {
                return self.locate(&from.0, from.1);
            }
        }
        if let Some(sig) = self.table.get(fun) {
            let (_, spans) = self.decl(sig.origin);
            return Some((sig.origin.file, spans.expr(e)));
        }
        if fun.derivs.is_empty() {
            return None;
        }
        let base = FunName { derivs: Vec::new(), ..fun.clone() };
        let sig = self.table.get(&base)?;
        let (_, spans) = self.decl(sig.origin);
        Some((sig.origin.file, spans.name))
    }

    /// The user's `main`, if there is one: `(def main T () ...)`.
    pub fn main(&self) -> Option<&Signature> {
        self.table.get(&FunName::typed("main", Type::unit()))
    }

    /// What a library of the program exports (`ksc build --emit so`, the
    /// Python package): every definition of the user's file and every
    /// derived function whose signature the C ABI can carry
    /// ([`crosses_c_abi`]).
    pub fn library_roots(&self) -> Vec<FunName> {
        let defs = self.defs();
        self.source
            .decls
            .iter()
            .filter_map(|d| match d {
                Decl::Def(d) => Some(d),
                _ => None,
            })
            .filter(|d| defs.iter().any(|x| x.name == d.name))
            .chain(self.derived.iter())
            .filter(|d| crosses_c_abi(&d.ret_ty) && d.params.iter().all(|p| crosses_c_abi(&p.ty)))
            .map(|d| d.name.clone())
            .collect()
    }
}

/// A type the C ABI can carry: no lambdas, linear maps or unknowns.
pub fn crosses_c_abi(t: &Type) -> bool {
    match t {
        Type::Bool | Type::Integer | Type::Float | Type::String => true,
        Type::Tuple(ts) => ts.iter().all(crosses_c_abi),
        Type::Tensor(_, e) => crosses_c_abi(e),
        _ => false,
    }
}
