//! The native backend's queries: each definition lowered to loop IR and
//! optimised by itself (`loop_unit`), the units linked into the module a
//! set of roots needs (`native_module`), the C of each of its functions
//! (`c_function`), and the C of the file (`c_unit`: types, helpers, the
//! site table, and the functions' C).
//!
//! A unit reads the facts lowering needs about every definition
//! ([`lowering_facts`]: signatures, effects, whether each is inlined, how
//! fresh its result is, C names; recomputed after every edit, compared
//! equal unless they changed), its own body, and the bodies of the
//! definitions it inlines. Editing a body lowers again that definition
//! and those that inline it, nothing else.

use rustc_hash::FxHashMap;

use ksc_codegen_c::{CProgram, CalleeSig, FunctionC, ModuleView, SiteLocation, Target};
use ksc_ir::{Body, Callee, Def, Expr, FunName, Prim};
use ksc_lower::ir::{Func, FuncId, Module, Site, SiteId};
use ksc_lower::{Layout, ProgramFacts, Unit};
use ksc_types::{Analysis, FileRef, PRELUDE_NAME, PRELUDE_SOURCE};

use crate::queries::{analysis, derived_functions, run_def_of, SourceFile, TypedDef};
use crate::Db;

/// What lowering reads of every definition of the program (those in force
/// and the derived ones, in the order of `Analysis::defs`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoweringFacts {
    pub facts: ProgramFacts,
    /// The definitions' signatures, as definitions whose body is a
    /// placeholder.
    pub signatures: Vec<TypedDef>,
}

/// The definitions that hold lambdas where lowering cannot take them,
/// rewritten, and the copies made of functions for their lambda arguments
/// (`ksc_lower::lambdas`), with the lambdas that could not be removed.
#[derive(Clone, Debug, PartialEq)]
pub struct LambdaFree {
    pub defs: Vec<TypedDef>,
    /// Each copy's name and the function it copies.
    pub copies: Vec<(FunName, FunName)>,
    /// Nodes of copies that are their lambda arguments', and where those
    /// were written (`ksc_lower::lambdas::Specialised::moved`).
    pub moved: Vec<(FunName, ksc_ir::ExprId, FunName, ksc_ir::ExprId)>,
    pub errors: Vec<ksc_lower::lambdas::LambdaError>,
}

#[salsa::tracked(returns(ref))]
pub fn lambda_free(db: &dyn Db, file: SourceFile) -> LambdaFree {
    db.log_execution("lambda_free".to_string());
    let a = analysis(db, file);
    let s = ksc_lower::lambdas::specialise(&a.defs());
    LambdaFree { defs: s.defs.into_iter().map(TypedDef).collect(), copies: s.copies, moved: s.moved, errors: s.errors }
}

/// Where an expression of a definition lowering reads was written (a copy
/// for lambda arguments is its original, a node of a lambda argument its
/// caller's): what run-time errors are located at.
pub fn written_at(db: &dyn Db, file: SourceFile, fun: &FunName, e: ksc_ir::ExprId) -> (FunName, ksc_ir::ExprId) {
    let lf = lambda_free(db, file);
    ksc_lower::lambdas::written_at(&lf.copies, &lf.moved, fun, e)
}

/// The lambdas native code of `roots` cannot hold (in the definitions
/// they reach), located at the original function's expression.
pub fn lambda_errors(db: &dyn Db, file: SourceFile, roots: &[FunName]) -> Vec<ksc_lower::lambdas::LambdaError> {
    let lf = lambda_free(db, file);
    let mut seen: rustc_hash::FxHashSet<FunName> = rustc_hash::FxHashSet::default();
    let mut work: Vec<FunName> = roots.to_vec();
    let mut out = Vec::new();
    while let Some(n) = work.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        for e in lf.errors.iter().filter(|e| e.fun == n) {
            let (fun, expr) = written_at(db, file, &e.fun, e.expr);
            let e = ksc_lower::lambdas::LambdaError { fun, expr, ..e.clone() };
            if !out.contains(&e) {
                out.push(e);
            }
        }
        if let Some(d) = lowering_body(db, file, n) {
            for (_, e) in d.0.body.exprs.iter() {
                if let Expr::Call(Callee::Fun(g), _) = e {
                    work.push(g.clone());
                }
            }
        }
    }
    out
}

/// [`lambda_errors`] as located diagnostics: each at its expression, the
/// caret naming the function.
pub fn lambda_diagnostics(db: &dyn Db, file: SourceFile, roots: &[FunName]) -> Vec<ksc_types::Diagnostic> {
    let errors = lambda_errors(db, file, roots);
    if errors.is_empty() {
        return Vec::new();
    }
    let a = analysis(db, file);
    errors
        .iter()
        .map(|e| {
            let (f, span) = a.locate(&e.fun, e.expr).unwrap_or((ksc_types::FileRef::Source, Default::default()));
            let mut d = ksc_types::Diagnostic::error(f, span, e.message.clone());
            d.caret(format!("in `{}`", e.fun.short()));
            d
        })
        .collect()
}

/// Is a module of `roots` a library's, whose entry points (the file's
/// definitions and `gdef`s) are compiled whatever calls them? (Else it is
/// an executable's, whose only root is `main`.)
pub fn is_library(roots: &[FunName]) -> bool {
    let main = FunName::typed("main", ksc_ir::Type::unit());
    roots.iter().any(|r| *r != main)
}

/// What lowering needs of every definition of the file, for a library's
/// module (`library`, [`is_library`]) or an executable's.
#[salsa::tracked(returns(ref))]
pub fn lowering_facts(db: &dyn Db, file: SourceFile, library: bool) -> LoweringFacts {
    db.log_execution("lowering_facts".to_string());
    let a = analysis(db, file);
    let placeholder = |ret_ty: &ksc_ir::Type| {
        let mut body = Body::new();
        let root = body.alloc_typed(Expr::Dummy(ret_ty.clone()), ret_ty.clone());
        (body, root)
    };
    // The external functions (the file's `edef`s), after the definitions:
    // one parameter, their argument, as the C function's leaves.
    let externals: Vec<Def> = a
        .externals()
        .into_iter()
        .map(|sig| {
            let (body, root) = placeholder(&sig.ret_ty);
            let params = vec![ksc_ir::Param { name: "x".into(), ty: sig.arg_ty.clone() }];
            Def { name: sig.name.clone(), params, ret_ty: sig.ret_ty.clone(), body, root }
        })
        .collect();
    let lf = lambda_free(db, file);
    let rewritten: Vec<Def> = lf.defs.iter().map(|d| d.0.clone()).collect();
    let mut defs = ksc_lower::lambdas::lambda_free(&a.defs(), &rewritten, &lf.copies);
    defs.extend(externals.iter());
    let signatures = defs
        .iter()
        .map(|d| {
            let (body, root) = placeholder(&d.ret_ty);
            TypedDef(Def { name: d.name.clone(), params: d.params.clone(), ret_ty: d.ret_ty.clone(), body, root })
        })
        .collect();
    let external_names: Vec<FunName> = externals.iter().map(|d| d.name.clone()).collect();
    let exported = if library { a.library_roots() } else { Vec::new() };
    let facts = ksc_lower::program_facts_with_externals(&defs, &external_names, &exported);
    LoweringFacts { facts, signatures }
}

/// The definition named `name` that lowering reads: the one in force, or a
/// derived function.
#[salsa::tracked(returns(ref))]
pub fn lowering_body(db: &dyn Db, file: SourceFile, name: FunName) -> Option<TypedDef> {
    db.log_execution(format!("lowering_body({name})"));
    if let Some(d) = lambda_free(db, file).defs.iter().find(|d| d.0.name == name) {
        return Some(d.clone());
    }
    if let Some(d) = run_def_of(db, file, name.clone()) {
        return Some(d.clone());
    }
    derived_functions(db, file).iter().find(|d| d.0.name == name).cloned()
}

/// One definition lowered to loop IR and optimised (see
/// `ksc_lower::compile_unit`); `checked` keeps bounds and overflow checks.
#[salsa::tracked(returns(ref))]
pub fn loop_unit(db: &dyn Db, file: SourceFile, name: FunName, checked: bool, library: bool) -> Result<Unit, String> {
    db.log_execution(format!("loop_unit({name})"));
    let lf = lowering_facts(db, file, library);
    // The bodies it reads: its own, and those it may inline (small ones, and
    // those called under `$inline`), transitively.
    let mut bodies: FxHashMap<FunName, &Def> = FxHashMap::default();
    let mut work = vec![name.clone()];
    while let Some(n) = work.pop() {
        if bodies.contains_key(&n) {
            continue;
        }
        let Some(d) = lowering_body(db, file, n.clone()) else { continue };
        for (_, e) in d.0.body.exprs.iter() {
            match e {
                Expr::Call(Callee::Fun(g), _) if lf.facts.inlinable(g) => work.push(g.clone()),
                Expr::Call(Callee::Prim(Prim::Inline), call) => {
                    if let Expr::Call(Callee::Fun(g), _) = &d.0.body.exprs[*call] {
                        if lf.facts.inlined_where_marked(g) {
                            work.push(g.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        bodies.insert(n, &d.0);
    }
    let defs: Vec<&Def> = lf.signatures.iter().map(|s| bodies.get(&s.0.name).copied().unwrap_or(&s.0)).collect();
    let opts = ksc_lower::Options { checked, ..ksc_lower::Options::default() };
    ksc_lower::compile_unit(&defs, &lf.facts, &name, opts, true).map_err(|e| e.to_string())
}

/// The roots of a module (the functions it is built for), interned: the
/// per-function queries below are keyed by them, and a key holding the
/// list itself was a copy of every root per function of the module
/// (quadratic in a library's size: a 2000-function chain took 1.6 GB).
#[salsa::interned(debug)]
pub struct Roots<'db> {
    #[returns(ref)]
    pub names: Vec<FunName>,
}

/// How the module of `roots` and what they call is numbered
/// (`ksc_lower::layout`): its functions, their calls and sites renumbered,
/// the site table. Runs after any unit changes; holds no function bodies.
#[salsa::tracked(returns(ref))]
pub fn module_layout<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    roots: Roots<'db>,
    checked: bool,
) -> Result<Layout, String> {
    db.log_execution("module_layout".to_string());
    // A unit's error is the lowering's message already.
    let library = is_library(roots.names(db));
    let unit = |n: &FunName| {
        loop_unit(db, file, n.clone(), checked, library)
            .as_ref()
            .map_err(|e| ksc_lower::LowerError { message: e.clone() })
    };
    let mut l = ksc_lower::layout(roots.names(db), unit).map_err(|e| e.message)?;
    // The sites of copies made for lambda arguments located as written
    // (after numbering, as `ksc_lower::compile` does).
    let lambdas = lambda_free(db, file);
    ksc_lower::locate_sites(&mut l.sites, &lambdas.copies, &lambdas.moved);
    Ok(l)
}

/// Function `index` of the module's layout: its name, and the module's
/// numbers for its calls and sites. Compares equal across most edits, so
/// the functions whose units and numbers did not change are not linked
/// again.
#[salsa::tracked(returns(ref))]
pub fn layout_row<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    roots: Roots<'db>,
    checked: bool,
    index: usize,
) -> Option<(FunName, Vec<FuncId>, Vec<SiteId>)> {
    let l = module_layout(db, file, roots, checked).as_ref().ok()?;
    let name = l.names.get(index)?;
    db.log_execution(format!("layout_row({name})"));
    Some((name.clone(), l.calls[index].clone(), l.site_ids[index].clone()))
}

/// What the C of a call reads of the function called `name`.
#[salsa::tracked(returns(ref))]
pub fn callee_sig(db: &dyn Db, file: SourceFile, name: FunName, checked: bool, library: bool) -> Option<CalleeSig> {
    db.log_execution(format!("callee_sig({name})"));
    let prints = lowering_facts(db, file, library).facts.effectful(&name);
    loop_unit(db, file, name, checked, library).as_ref().ok().map(|u| CalleeSig::of(&u.func, prints))
}

/// The optimised loop IR of `roots` and what they call, linked from units
/// (what `ksc build --emit loops` prints, and what run-time errors are
/// located in).
#[salsa::tracked(returns(ref))]
pub fn native_module(db: &dyn Db, file: SourceFile, roots: Vec<FunName>, checked: bool) -> Result<Module, String> {
    db.log_execution("native_module".to_string());
    let (l, funcs) = linked_functions(db, file, Roots::new(db, roots), checked)?;
    Ok(Module { funcs: funcs.into_iter().cloned().collect(), sites: l.sites.clone(), main: l.main })
}

/// The layout of the module for `roots` and its functions, linked.
fn linked_functions<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    roots: Roots<'db>,
    checked: bool,
) -> Result<(&'db Layout, Vec<&'db Func>), String> {
    let l = module_layout(db, file, roots, checked).as_ref().map_err(Clone::clone)?;
    let funcs = (0..l.names.len())
        .map(|i| linked_function(db, file, roots, checked, i).as_ref().map(|(f, _)| f))
        .collect::<Option<Vec<&Func>>>()
        .ok_or_else(|| "a function of the module could not be linked (a ksc bug)".to_string())?;
    Ok((l, funcs))
}

/// The C of the file's module for `roots` (see `native_module`): `path`
/// names the file in run-time errors, `header` is the header the C
/// includes (for a library).
#[salsa::tracked(returns(ref))]
pub fn c_unit(
    db: &dyn Db,
    file: SourceFile,
    path: String,
    roots: Vec<FunName>,
    checked: bool,
    target: Target,
    header: String,
) -> Result<CProgram, String> {
    db.log_execution("c_unit".to_string());
    let roots = Roots::new(db, roots);
    let (l, funcs) = linked_functions(db, file, roots, checked)?;
    let locations = site_locations(&l.sites, &analysis(db, file), &path, file.text(db));
    let view = ModuleView { funcs: &funcs, sites: &l.sites, main: l.main };
    Ok(ksc_codegen_c::emit_with(&view, &locations, target, &header, &mut |id| {
        std::borrow::Cow::Borrowed(c_function(db, file, roots, checked, target, id.0 as usize))
    }))
}

/// Function `index` of the module for `roots`, and what its C reads of the
/// functions it calls: what [`c_function`] reads, so that it is not run
/// again when another function of the module changes.
#[salsa::tracked(returns(ref))]
pub fn linked_function<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    roots: Roots<'db>,
    checked: bool,
    index: usize,
) -> Option<(Func, Vec<(FuncId, CalleeSig)>)> {
    let (name, calls, site_ids) = layout_row(db, file, roots, checked, index).as_ref()?;
    db.log_execution(format!("linked_function({name})"));
    let library = is_library(roots.names(db));
    let unit = loop_unit(db, file, name.clone(), checked, library).as_ref().ok()?;
    let f = ksc_lower::link_one(unit, calls, site_ids);
    let callees = ksc_codegen_c::callees_with(&f, &mut |g| {
        let (callee, _, _) = layout_row(db, file, roots, checked, g.0 as usize).as_ref()?;
        callee_sig(db, file, callee.clone(), checked, library).clone()
    })?;
    Some((f, callees))
}

/// The C of function `index` of the module for `roots`, and the types and
/// helpers it needs.
#[salsa::tracked(returns(ref))]
pub fn c_function<'db>(
    db: &'db dyn Db,
    file: SourceFile,
    roots: Roots<'db>,
    checked: bool,
    target: Target,
    index: usize,
) -> FunctionC {
    let linked = linked_function(db, file, roots, checked, index);
    db.log_execution(format!("c_function({})", linked.as_ref().map_or("?".to_string(), |(f, _)| f.name.to_string())));
    match linked {
        Some((f, callees)) => ksc_codegen_c::function(f, callees, target, checked),
        None => FunctionC { text: String::new(), types: Vec::new(), prints: Vec::new(), copies: Vec::new() },
    }
}

/// Line and column (1-based, in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (u32, u32) {
    Lines::new(text).line_col(offset)
}

/// Where the lines of a text start, for finding many offsets' lines.
struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Lines<'t> {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Lines { text, starts }
    }

    fn line_col(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        (line as u32, self.text[start..offset].chars().count() as u32 + 1)
    }
}

/// The source location of every site of a module.
pub fn site_locations(sites: &[Site], analysis: &Analysis, path: &str, text: &str) -> Vec<SiteLocation> {
    let (source, prelude) = (Lines::new(text), Lines::new(PRELUDE_SOURCE));
    sites
        .iter()
        .map(|s| match analysis.locate(&s.fun, s.expr) {
            Some((FileRef::Source, span)) => {
                let (line, col) = source.line_col(span.start as usize);
                SiteLocation { file: path.to_string(), line, col }
            }
            Some((FileRef::Prelude, span)) => {
                let (line, col) = prelude.line_col(span.start as usize);
                SiteLocation { file: PRELUDE_NAME.to_string(), line, col }
            }
            None => SiteLocation { file: path.to_string(), line: 0, col: 0 },
        })
        .collect()
}
