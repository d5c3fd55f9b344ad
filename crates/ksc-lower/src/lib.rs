//! The loop IR of ksc and the lowering of LM-free Core IR into it.
//!
//! ```text
//! Core IR (checked, LM-free) ─lower─▶ loop IR ─optimize─▶ loop IR ─▶ ksc-codegen-c
//! ```
//!
//! - [`ir`]: the loop IR (explicit loops, SSA scalars, tensors, arena marks)
//!   and its printer.
//! - [`lower`]: lowering with fusion of `build` into its consumers, inlining,
//!   scalar replacement of tuples, in-place accumulation, hash-consing.
//! - `accum`: in-place accumulation of sums through tuples, `if`, `let`
//!   and projections of their terms.
//! - [`passes`]: the optimiser, one pass per file, and the pipeline that
//!   runs them ([`passes::PIPELINE`]).
//! - [`parse`]: the loop IR's text format read back (what [`Module::pretty`]
//!   prints), for file tests of the passes.
//! - [`visit`]: traversals and def-use helpers on the loop IR, and the
//!   scope check run after every pass in debug builds.
//! - [`names`]: C names of definitions (the original's mangling).
//! - [`lambdas`]: lambdas held as values, written into copies of the
//!   functions they are passed to before lowering.
//!
//! [`compile`] runs the whole pipeline. [`compile_unit`] lowers and
//! optimises one definition by itself, and [`link`] puts such units
//! together into the module [`compile`] gives ([`layout`] numbers them,
//! [`link_one`] renumbers one: the incremental database lowers and links
//! each definition in its own query).

mod accum;
mod builder;
pub mod ir;
pub use ksc_ir::lambdas;
pub mod lower;
pub mod names;
pub mod parse;
pub mod passes;
mod prims;
pub mod visit;

pub use ir::Module;
pub use lower::{program_facts, program_facts_with_externals, LowerError, Options, ProgramFacts, Unit};

use ir::{FuncId, Site, SiteId, Stmt};
use ksc_ir::{Def, FunName};
use rustc_hash::FxHashMap;

/// Lowers the definitions `roots` (and what they call) and optimises the
/// result. With `optimize` false, the loop IR is as lowered (fusion,
/// inlining and hash-consing included, since they happen during lowering).
///
/// Lambdas held as values are first written into copies of the functions
/// they are passed to ([`lambdas::specialise`]), as the database does.
pub fn compile(defs: &[&Def], roots: &[FunName], opts: Options, optimize: bool) -> Result<Module, LowerError> {
    let s = lambdas::specialise(defs);
    let defs = lambdas::lambda_free(defs, &s.defs, &s.copies);
    let mut m = lower::lower_program(&defs, roots, opts)?;
    locate_sites(&mut m.sites, &s.copies, &s.moved);
    if optimize {
        passes::optimize(&mut m);
    }
    Ok(m)
}

/// Lowers the definition `root` by itself, and optimises it if `optimize`
/// (see [`lower::lower_unit`] for `defs` and `facts`).
pub fn compile_unit(
    defs: &[&Def],
    facts: &ProgramFacts,
    root: &FunName,
    opts: Options,
    optimize: bool,
) -> Result<Unit, LowerError> {
    let mut u = lower::lower_unit(defs, facts, root, opts)?;
    if optimize {
        let callee = |n: &FunName| defs.iter().find(|d| d.name == *n);
        let effectful: Vec<bool> = u.calls.iter().map(|n| facts.effectful(n)).collect();
        let heap_ret: Vec<bool> =
            u.calls.iter().map(|n| callee(n).is_some_and(|d| ir::needs_heap(&d.ret_ty))).collect();
        passes::optimize_func(&mut u.func, &effectful, &heap_ret);
    }
    Ok(u)
}

/// How the units of a module are numbered: the module's functions (by
/// name, in order), and for each the module's numbers of the functions it
/// calls (`calls[i][k]` for its `FuncId(k)`) and of its sites; the module's
/// site table; `main`. What [`link`] needs besides the units' bodies.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub names: Vec<FunName>,
    pub calls: Vec<Vec<FuncId>>,
    pub site_ids: Vec<Vec<SiteId>>,
    pub sites: Vec<Site>,
    pub main: Option<FuncId>,
}

/// The layout of the module of the definitions `roots` and those they
/// call, from their units (`unit(name)`): functions and sites numbered as
/// [`compile`] numbers them.
pub fn layout<'u>(
    roots: &[FunName],
    mut unit: impl FnMut(&FunName) -> Result<&'u Unit, LowerError>,
) -> Result<Layout, LowerError> {
    let mut func_of: FxHashMap<FunName, FuncId> = FxHashMap::default();
    let mut names: Vec<FunName> = Vec::new();
    let mut queue: Vec<(FunName, FuncId)> = Vec::new();
    let mut func_for = |n: &FunName, names: &mut Vec<FunName>, queue: &mut Vec<(FunName, FuncId)>| {
        *func_of.entry(n.clone()).or_insert_with(|| {
            let f = FuncId(names.len() as u32);
            names.push(n.clone());
            queue.push((n.clone(), f));
            f
        })
    };
    let mut main = None;
    for r in roots {
        let f = func_for(r, &mut names, &mut queue);
        if r.base == "main" && r.derivs.is_empty() {
            main = Some(f);
        }
    }
    let mut calls: Vec<Vec<FuncId>> = Vec::new();
    let mut site_ids: Vec<Vec<SiteId>> = Vec::new();
    let mut sites: Vec<Site> = Vec::new();
    let mut site_of: FxHashMap<Site, SiteId> = FxHashMap::default();
    while let Some((name, id)) = queue.pop() {
        let u = unit(&name)?;
        // Its callees in the order its lowering met them, which is the
        // order the whole-program lowering numbers them in.
        let its_calls: Vec<FuncId> = u.calls.iter().map(|n| func_for(n, &mut names, &mut queue)).collect();
        // Its sites, each the same as an earlier one's (a callee inlined in
        // tail position, outside any call) numbered like it.
        let mut local: Vec<SiteId> = Vec::with_capacity(u.sites.len());
        for s in &u.sites {
            let s = Site { inlined_at: s.inlined_at.map(|i| local[i.0 as usize]), ..s.clone() };
            let next = SiteId(sites.len() as u32);
            let id = *site_of.entry(s.clone()).or_insert_with(|| {
                sites.push(s);
                next
            });
            local.push(id);
        }
        let i = id.0 as usize;
        if calls.len() <= i {
            calls.resize(i + 1, Vec::new());
            site_ids.resize(i + 1, Vec::new());
        }
        calls[i] = its_calls;
        site_ids[i] = local;
    }
    calls.resize(names.len(), Vec::new());
    site_ids.resize(names.len(), Vec::new());
    Ok(Layout { names, calls, site_ids, sites, main })
}

/// A unit's function as function `calls[0]` of a module: its calls and
/// sites renumbered (`calls` and `site_ids` are its row of a [`Layout`]).
pub fn link_one(u: &Unit, calls: &[FuncId], site_ids: &[SiteId]) -> ir::Func {
    let mut f = u.func.clone();
    let func = |f: FuncId| calls[f.0 as usize];
    let site = |s: SiteId| if s == SiteId::UNCHECKED { s } else { site_ids[s.0 as usize] };
    visit::walk_mut(&mut f.body, &mut |s| renumber(s, &func, &site));
    f
}

/// The module of the definitions `roots` and those they call, from their
/// units (`unit(name)`): functions numbered and sites numbered as
/// [`compile`] numbers them, so the result is the same.
pub fn link<'u>(
    roots: &[FunName],
    mut unit: impl FnMut(&FunName) -> Result<&'u Unit, LowerError>,
) -> Result<Module, LowerError> {
    let l = layout(roots, &mut unit)?;
    let mut funcs = Vec::with_capacity(l.names.len());
    for (i, n) in l.names.iter().enumerate() {
        funcs.push(link_one(unit(n)?, &l.calls[i], &l.site_ids[i]));
    }
    Ok(Module { funcs, sites: l.sites, main: l.main })
}

/// Renumbers the functions and sites one statement refers to.
fn renumber(s: &mut Stmt, func: &impl Fn(FuncId) -> FuncId, site: &impl Fn(SiteId) -> SiteId) {
    if let Stmt::Let(_, ir::Rhs::Call { func: f, .. }) = s {
        *f = func(*f);
    }
    if let Some(x) = visit::site_mut(s) {
        *x = site(*x);
    }
}

/// The sites of copies made for lambda arguments located where their
/// expressions were written ([`lambdas::written_at`]), so run-time errors name and
/// locate them as the interpreter does.
pub fn locate_sites(
    sites: &mut [ir::Site],
    copies: &[(FunName, FunName)],
    moved: &[(FunName, ksc_ir::ExprId, FunName, ksc_ir::ExprId)],
) {
    if copies.is_empty() {
        return;
    }
    for s in sites {
        (s.fun, s.expr) = lambdas::written_at(copies, moved, &s.fun, s.expr);
    }
}
