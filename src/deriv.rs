//! `ksc jacobian` and `ksc deriv`: print what automatic differentiation
//! makes of a function, as `.ks`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ksc_ir::{Decl, Derivation, FunName};

use crate::matrix::Format;

/// Which derived function `ksc deriv` prints.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    /// `[fwd f] : (S, dS) -> dT`, forward mode.
    Fwd,
    /// `[rev f] : (S, dT) -> dS`, reverse mode.
    Rev,
    /// `[suffwdpass f] : S -> (T, residuals)`, the forward pass of split reverse mode.
    Suffwdpass,
    /// `[sufrevpass [f S]] : (dT, residuals) -> dS`, its reverse pass.
    Sufrevpass,
    /// `[shape f] : S -> shape of T`, the sizes of f's result.
    Shape,
    /// `[jac f] : S -> Tensor 2 Float`, the dense Jacobian (rows: T's
    /// tangent flattened, columns: S's).
    Jac,
    /// `[jac1 f] : S -> Tensor 2 Float`, the Jacobian with respect to f's
    /// first parameter (columns: its tangent flattened).
    Jac1,
    /// `[jacsparse f]`: the Jacobian in compressed sparse row form
    /// `(tuple (tuple rows cols) row_offsets columns values)`, computed
    /// block by block from what each output element reads.
    Jacsparse,
    /// `[jacsparse1 f]`: the same with respect to f's first parameter.
    Jacsparse1,
}

/// The functions of the file's source with this base name.
pub(crate) fn find<'a>(analysis: &'a ksc_types::Analysis, func: &str) -> Result<&'a ksc_ir::Def, String> {
    let mut defs: Vec<&ksc_ir::Def> = analysis
        .source
        .decls
        .iter()
        .filter_map(|d| match d {
            Decl::Def(d) if d.name.to_string() == func || (d.name.derivs.is_empty() && d.name.base == func) => Some(d),
            _ => None,
        })
        .collect();
    if defs.is_empty() {
        // A derived function the file requests, by its full name (`[rev [f
        // Float]]`) or without the base type (`[rev f]`).
        defs.extend(analysis.derived.iter().filter(|d| d.name.to_string() == func));
        if defs.is_empty() {
            defs.extend(analysis.derived.iter().filter(|d| !d.name.derivs.is_empty() && d.name.short() == func));
        }
    }
    match defs[..] {
        [d] => Ok(d),
        [] => Err(format!(
            "no function `{func}` is defined in the file (nor derived by one of its `gdef`s: name those as `[rev f]` or `[rev [f T]]`)"
        )),
        _ => Err(format!(
            "`{func}` is overloaded; name one of: {}",
            defs.iter().map(|d| format!("`{}`", d.name)).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// How `ksc jacobian` shows the Jacobian.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Simplified,
    Raw,
    /// Simplified, listing the rules that fired.
    Trace,
    /// With `--at`: the sparsity pattern of the matrix.
    Sparsity,
}

/// What `ksc jacobian` writes besides what it prints: `--explain`'s
/// report, and the files of `--svg`, `--graph` and `--html`.
#[derive(Default)]
pub struct Outputs {
    pub explain: Option<String>,
    pub svg: Option<PathBuf>,
    pub graph: Option<PathBuf>,
    pub html: Option<PathBuf>,
}

/// An output file that cannot be written: exit code 2.
fn unwritable(message: String) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

pub fn jacobian(path: &Path, func: &str, at: Option<&str>, how: Show, format: Format, out: &Outputs) -> ExitCode {
    if let Some(rule) = &out.explain {
        if let Err(m) = crate::report::check_rule(rule) {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    }
    // An output file is never the input file (as with `ksc build`).
    let input = std::fs::canonicalize(path).ok();
    for out in [&out.svg, &out.graph, &out.html].into_iter().flatten() {
        if input.is_some() && std::fs::canonicalize(out).ok() == input {
            return unwritable(format!("`{}` is the input file: ksc does not write over it", out.display()));
        }
    }
    let Ok(c) = crate::compile(path) else { return ExitCode::from(1) };
    let f = match find(&c.analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    let name = format!("[D {}]", f.name.short());
    // The matrix at the point, printed, and its picture.
    let mut picture = None;
    if let Some(args) = at {
        let pictures = out.svg.is_some() || out.html.is_some();
        let m = match matrix_at(c.sources.source_text(), f, args, pictures) {
            Ok(m) => m,
            Err(code) => return code,
        };
        if pictures {
            let doc = crate::pictures::matrix_svg(&m.j, args, &m.structural);
            if let Some(file) = &out.svg {
                if let Err(e) = crate::pictures::save(&doc, file) {
                    return unwritable(e);
                }
            }
            picture = Some(doc);
        }
        if let Err(code) = print_matrix(&m, f, args, how == Show::Sparsity, format) {
            return code;
        }
        if out.graph.is_none() && out.html.is_none() {
            return ExitCode::SUCCESS;
        }
    }
    // `[D f]` as derived, and simplified (with the rules that fired).
    let tracing = how == Show::Trace || out.explain.is_some() || out.html.is_some();
    let raw = ksc_db::jacobian_of(&c.db, c.file, f.name.clone()).as_ref().map(|j| j.0 .0.clone());
    let simplified = ksc_db::simplified_jacobian(&c.db, c.file, f.name.clone(), tracing)
        .as_ref()
        .map(|(d, trace)| (d.0.clone(), trace.clone()));
    let (raw, (simplified, trace)) = match (raw, simplified) {
        (Ok(r), Ok(s)) => (r, s),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: cannot derive `[D {}]`: {}", f.name.short(), e.message);
            return ExitCode::from(1);
        }
    };
    let raw_size = ksc_opt::schedule::term_size(&raw.body, raw.root);
    if at.is_none() {
        let shown = if how == Show::Raw { &raw } else { &simplified };
        println!("{}", ksc_ir::print::print_def(shown));
        if how == Show::Trace {
            eprint!("{}", crate::report::trace_text(&name, raw_size, &trace));
        }
        if let Some(rule) = &out.explain {
            eprint!("{}", crate::report::explain_text(&name, rule, &trace));
        }
    }
    if let Some(file) = &out.graph {
        if let Err(e) = crate::pictures::write_graph(&simplified, file) {
            return unwritable(e);
        }
    }
    if let Some(file) = &out.html {
        let nodes = crate::pictures::lm_graph(&simplified);
        let graph = crate::pictures::graph_svg(&nodes, &crate::pictures::maps_title(&name, nodes.len()));
        let page = crate::report::Page {
            file: &path.display().to_string(),
            name: &f.name.short(),
            source: &source_of(&c.analysis, c.sources.source_text(), f),
            raw: &ksc_ir::print::print_def(&raw),
            raw_size,
            simplified: &ksc_ir::print::print_def(&simplified),
            trace: &trace,
            matrix: at.zip(picture),
            graph,
        };
        if let Err(e) = std::fs::write(file, crate::report::html(&page)) {
            return unwritable(format!("cannot write `{}`: {e}", file.display()));
        }
    }
    ExitCode::SUCCESS
}

/// The text of `f`'s definition in the file, or (for a function a `gdef`
/// derived) the definition printed.
fn source_of(analysis: &ksc_types::Analysis, text: &str, f: &ksc_ir::Def) -> String {
    let written = analysis.source.decls.iter().zip(&analysis.source.spans).find_map(|(d, spans)| match d {
        Decl::Def(d) if d.name == f.name => text.get(spans.decl.range()),
        _ => None,
    });
    match written {
        Some(t) => t.to_string(),
        None => ksc_ir::print::print_def(f),
    }
}

/// The derived function `name` and those it needs, derived and optimised
/// through the queries of `db` (`ksc_db::derive_request`), the requested
/// one first; or the first derivation error.
fn derived(db: &ksc_db::Database, file: ksc_db::SourceFile, name: &FunName) -> Result<Vec<ksc_ir::Def>, ExitCode> {
    let (defs, warnings) = derived_quietly(db, file, name).map_err(|m| {
        eprintln!("error: {m}");
        ExitCode::from(1)
    })?;
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    Ok(defs)
}

/// [`derived`], returning the first error and the warnings instead of
/// printing them.
fn derived_quietly(
    db: &ksc_db::Database,
    file: ksc_db::SourceFile,
    name: &FunName,
) -> Result<(Vec<ksc_ir::Def>, Vec<String>), String> {
    let out = ksc_db::derive_request(db, ksc_db::Request::new(db, file, name.clone()));
    if let Some(e) = out.errors.first() {
        return Err(format!("cannot derive `{}`: {}", e.name.short(), e.message));
    }
    let mut defs = out.defs;
    defs.sort_by_key(|d| d.name != *name);
    Ok((defs, out.warnings.iter().map(|w| w.to_string()).collect()))
}

impl Mode {
    pub fn derivation(self) -> Derivation {
        match self {
            Mode::Fwd => Derivation::Fwd,
            Mode::Rev => Derivation::Rev,
            Mode::Suffwdpass => Derivation::SufFwdPass,
            Mode::Sufrevpass => Derivation::SufRevPass,
            Mode::Shape => Derivation::Shape,
            Mode::Jac => Derivation::Jac,
            Mode::Jac1 => Derivation::Jac1,
            Mode::Jacsparse => Derivation::JacSparse,
            Mode::Jacsparse1 => Derivation::JacSparse1,
        }
    }
}

/// `ksc deriv`: the derived function and those it needs, as `.ks`; with
/// `cost_at`, then their costs at that point (`crate::cost::table`).
pub fn deriv(path: &Path, func: &str, mode: Mode, cost_at: Option<&str>, schedule: Option<&str>) -> ExitCode {
    let d = mode.derivation();
    if cost_at.is_some() {
        if let Err(code) = crate::cost::check_mode(d) {
            return code;
        }
    }
    let Ok(c) = crate::compile(path) else { return ExitCode::from(1) };
    let f = match find(&c.analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    // Derived from the program as written (not from what its gdefs made).
    let Ok(mut defs) = derived(&c.db, c.file, &f.name.derived(d)) else { return ExitCode::from(1) };
    if let Some(name) = schedule {
        if let Err(code) = run_schedule(&c, name, &mut defs) {
            return code;
        }
    }
    for def in &defs {
        println!("{}\n", ksc_ir::print::print_def(def));
    }
    match cost_at {
        Some(args) => crate::cost::table(c.sources.source_text(), &c.analysis, f, d, args, &defs),
        None => ExitCode::SUCCESS,
    }
}

/// `ksc deriv --schedule NAME`: the program's strategy (or ksc's schedule)
/// `name` run on each of `defs`, the rules it fired counted on stderr.
fn run_schedule(c: &crate::Compiled, name: &str, defs: &mut [ksc_ir::Def]) -> Result<(), ExitCode> {
    let (schedules, name) = if name.trim_start().starts_with('(') {
        (command_line_schedule(c, name)?, COMMAND_LINE)
    } else {
        (ksc_db::program_schedules(&c.db, c.file), name)
    };
    let snapshot: Vec<ksc_ir::Def> = defs.to_vec();
    let map = ksc_opt::DefMap::new(c.analysis.defs().into_iter().chain(snapshot.iter()));
    let globals = ksc_opt::Globals::new(&map);
    for def in defs.iter_mut() {
        let run = ksc_opt::pipeline::apply_schedule(def, &globals, &schedules, name).map_err(|m| {
            eprintln!("error: {m}");
            ExitCode::from(2)
        })?;
        let fired: Vec<String> = run.fired.iter().map(|(r, n)| format!("{r} x{n}")).collect();
        let what = match (run.succeeded, fired.is_empty()) {
            (true, true) => "succeeded, no rule fired".to_string(),
            (true, false) => format!("succeeded: {}", fired.join(", ")),
            (false, _) => "failed (the function is printed as it was)".to_string(),
        };
        eprintln!("schedule {name} on {}: {what}", def.name);
        for w in &run.warnings {
            eprintln!("warning: {}: {w}", def.name);
        }
    }
    Ok(())
}

/// The name `--schedule "(STRATEGY ...)"` gets among the file's strategies.
const COMMAND_LINE: &str = "command-line";

/// The file's schedules with `--schedule`'s strategy expression as one
/// more, [`COMMAND_LINE`]; its errors, with the text they are about.
fn command_line_schedule(c: &crate::Compiled, body: &str) -> Result<ksc_opt::Schedules, ExitCode> {
    let usage = |m: String| {
        eprintln!("error: --schedule {body:?}: {m}");
        ExitCode::from(2)
    };
    let text = format!("(strategy {COMMAND_LINE} {body})");
    let mut decls = ksc_opt::script::read_strategies(&text).map_err(usage)?;
    if decls.len() != 1 {
        return Err(usage("expected one strategy expression".to_string()));
    }
    let extra = decls.remove(0);
    let (schedules, errors) = ksc_db::schedules_with(&c.db, c.file, &[&extra]);
    let nodes = extra.body.pre_order();
    let own = ksc_db::user_strategies(&c.db, c.file).len();
    match errors.iter().find(|e| e.decl == own) {
        Some(e) => {
            let at = e.node.and_then(|n| nodes.get(n)).map(|t| format!(" (at `{t}`)")).unwrap_or_default();
            Err(usage(format!("{}{at}", e.message)))
        }
        None => Ok(schedules),
    }
}

/// A program with a point appended (`--at ARGS` of `ksc jacobian` and
/// `ksc deriv --cost`), checked, in a database of its own: the point is
/// the value of [`AtPoint::point`].
pub(crate) struct AtPoint {
    pub db: ksc_db::Database,
    pub file: ksc_db::SourceFile,
    pub analysis: ksc_types::Analysis,
}

impl AtPoint {
    /// The name of the definition whose value is the point.
    pub fn point() -> FunName {
        FunName::typed("ksc$at", ksc_ir::Type::unit())
    }

    /// The program `text` with `--at ARGS` appended as `(def ksc$at T ()
    /// ARGS)` (`T` is `f`'s argument type), after the declarations `extra`
    /// (gdefs of derived functions to run there). Diagnostics of ARGS are
    /// shown in ARGS itself, named `--at`; the exit code is returned after
    /// them.
    pub fn new(text: &str, f: &ksc_ir::Def, args: &str, extra: &str) -> Result<AtPoint, ExitCode> {
        use ksc_types::{Diagnostic, FileRef};
        let at_sources = crate::render::Sources::new("--at", args);
        let whole = ksc_syntax::Span::new(0, args.len());
        let not_a_value = || {
            eprintln!("error: `--at {args}` is not a value of type `{}`", f.arg_ty());
            ExitCode::from(1)
        };
        // ARGS must read as one expression (so nothing in it can end the
        // definition it is put in).
        let (forms, errors) = ksc_syntax::sexpr::read_sexprs(args);
        if !errors.is_empty() || forms.len() != 1 {
            let mut ds: Vec<Diagnostic> = errors.into_iter().map(|e| Diagnostic::syntax(FileRef::Source, e)).collect();
            if ds.is_empty() {
                ds.push(Diagnostic::error(
                    FileRef::Source,
                    whole,
                    format!("expected one expression, found {}", forms.len()),
                ));
            }
            at_sources.emit(&ds);
            return Err(not_a_value());
        }
        // The point, as a definition appended to the program.
        let head = format!("{text}\n{extra}");
        let prefix = format!("{head}(def ksc$at {} () ", f.arg_ty());
        let extended = format!("{prefix}{args})\n");
        let db = ksc_db::Database::new();
        let file = db.add_file(extended.clone());
        let analysis = std::sync::Arc::unwrap_or_clone(ksc_db::analysis(&db, file));
        if analysis.has_errors() {
            // The program itself checked: the errors are the point's. A span in
            // ARGS moves into it; one elsewhere in the wrapper is all of ARGS.
            let (lo, hi) = (prefix.len() as u32, (prefix.len() + args.len()) as u32);
            let wrapper = head.len() as u32;
            let shift = |sp: ksc_syntax::Span| {
                if sp.start >= lo && sp.end <= hi {
                    ksc_syntax::Span::new((sp.start - lo) as usize, (sp.end - lo) as usize)
                } else {
                    whole
                }
            };
            let ds: Vec<Diagnostic> = analysis
                .diagnostics
                .iter()
                .filter(|d| d.is_error() && d.file == FileRef::Source && d.span.start >= wrapper)
                .map(|d| {
                    let mut d = d.clone();
                    d.span = shift(d.span);
                    let fun = f.name.short();
                    let name = |m: &str| {
                        m.replace("the body of `ksc$at`", "`--at`")
                            .replace("`ksc$at` is declared to return", &format!("`{fun}` takes"))
                            .replace("ksc$at", "--at")
                    };
                    d.message = name(&d.message);
                    d.span_label = name(&d.span_label);
                    d.labels.retain(|l| l.file == FileRef::Source && l.span.start >= wrapper);
                    for l in &mut d.labels {
                        l.span = shift(l.span);
                        l.message = name(&l.message);
                    }
                    d
                })
                .collect();
            if ds.is_empty() {
                crate::render::Sources::new("<--at>", &extended).emit(&analysis.diagnostics);
            }
            at_sources.emit(&ds);
            return Err(not_a_value());
        }
        Ok(AtPoint { db, file, analysis })
    }
}

/// The Jacobian of a function at a point, labelled, and its structural
/// pattern (when asked for).
struct MatrixAt {
    j: crate::matrix::Jacobian,
    structural: crate::pictures::Structural,
}

/// The Jacobian of `f` at the point `args`, as a dense matrix: `[jac f]`
/// (forward mode over columns or reverse over rows, whichever is fewer),
/// run by the interpreter; with `structural`, also the pattern of `[jacsparse
/// f]` there.
fn matrix_at(text: &str, f: &ksc_ir::Def, args: &str, structural: bool) -> Result<MatrixAt, ExitCode> {
    use ksc_eval::{Interpreter, Value};
    let AtPoint { db, file, mut analysis } = AtPoint::new(text, f, args, "")?;
    let point = AtPoint::point();
    let jac = f.name.derived(Derivation::Jac);
    let mut defs = derived(&db, file, &jac)?;
    // The structural pattern comes from `[D f]` (and the `[D g]` it calls)
    // evaluated at the point; their derivation may fail where `[jac f]`'s
    // does not (the picture then says why).
    let maps_wanted = structural;
    let maps = if structural { Some(jacobians(&db, file, &f.name)) } else { None };
    if let Some(Ok(more)) = &maps {
        for d in more {
            if !defs.iter().any(|e| e.name == d.name) {
                defs.push(d.clone());
            }
        }
    }
    // Beside those the file's `gdef`s derived (which `f` may call).
    for d in defs {
        if !analysis.derived.iter().any(|e| e.name == d.name) {
            analysis.derived.push(d);
        }
    }
    let defs = analysis.defs();
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut run = |name: &FunName, arg: Value| interp.call(name, arg, &mut std::io::sink()).map_err(|e| e.message);
    // The point, f's value there (for the rows' labels), and the matrix.
    let evaluated = run(&point, Value::unit()).and_then(|x| Ok((run(&f.name, x.clone())?, run(&jac, x.clone())?, x)));
    let (y, t, x) = match evaluated {
        Ok((y, Value::Tensor(t), x)) if t.shape.len() == 2 => (y, t, x),
        Ok((_, v, _)) => {
            eprintln!("error: `[jac {}]` returned {v:?}, not a matrix (a ksc bug)", f.name.short());
            return Err(ExitCode::from(1));
        }
        Err(m) => {
            eprintln!("error: evaluating the Jacobian failed: {m}");
            return Err(ExitCode::from(1));
        }
    };
    let (rows, cols) = (t.shape[0], t.shape[1]);
    // `+ 0.0` prints a zero that reverse mode made negative as 0.
    let data: Vec<f64> = t
        .data
        .iter()
        .map(|v| match v {
            Value::Float(x) => x + 0.0,
            _ => f64::NAN,
        })
        .collect();
    // Labels in the order of `$tangentFlatten`, which orders the matrix;
    // numbered if they do not match (they always should).
    let mut row_labels = Vec::new();
    crate::matrix::float_labels(&y, "result", &mut row_labels);
    let mut col_labels = crate::matrix::argument_labels(&f.params, &x);
    if row_labels.len() != rows {
        row_labels = (0..rows).map(|r| format!("row {r}")).collect();
    }
    if col_labels.len() != cols {
        col_labels = (0..cols).map(|c| format!("column {c}")).collect();
    }
    let owned: Vec<ksc_ir::Def> = defs.iter().map(|d| (*d).clone()).collect();
    drop(interp);
    let from_map = match maps {
        None => Err("not computed".to_string()),
        Some(Err(m)) => Err(m),
        Some(Ok(_)) => match structural_pattern(&owned, f.name.derived(Derivation::D)) {
            Ok((r, c, pattern)) if (r, c) == (rows, cols) => Ok(pattern),
            Ok((r, c, _)) => Err(format!("`[D f]` is {r} x {c}, `[jac f]` {rows} x {cols} (a ksc bug)")),
            Err(m) => Err(m),
        },
    };
    let structural = match from_map {
        Ok(p) => Ok(crate::pictures::Pattern { entries: p, source: "[D f]".into(), note: None }),
        Err(why) if maps_wanted => match sparse_pattern(&db, file, f, owned, rows, cols) {
            Ok(p) => Ok(crate::pictures::Pattern {
                entries: p,
                source: "[jacsparse f]".into(),
                note: Some(format!("from [jacsparse f]'s analysis of the reads, not [D f]: {why}")),
            }),
            Err(also) => Err(format!("{why}; [jacsparse f]: {also}")),
        },
        Err(why) => Err(why),
    };
    Ok(MatrixAt { j: crate::matrix::Jacobian { rows: row_labels, cols: col_labels, data }, structural })
}

/// The most work the structural pattern may take (units of the
/// interpreter's operation count): applying a map of combinators applies
/// each shared sub-map once per path to it, which for some programs (the
/// Jacobian of a reverse pass) is far more work than `[jac f]`. A count,
/// not a time, so that the picture is the same on every machine.
const STRUCTURAL_WORK: u64 = 10_000_000;

/// The structural pattern of `[D f]` (named `d`) at the point, by the
/// interpreter on `defs` ([`ksc_eval::Interpreter::structural_pattern`]),
/// given up past [`STRUCTURAL_WORK`].
fn structural_pattern(defs: &[ksc_ir::Def], d: FunName) -> Result<(usize, usize, Vec<bool>), String> {
    use ksc_eval::{Interpreter, Value};
    let mut interp = Interpreter::new(defs.iter());
    let mut run = |name: &FunName, arg: Value| interp.call(name, arg, &mut std::io::sink()).map_err(|e| e.message);
    let map = run(&AtPoint::point(), Value::unit()).and_then(|x| run(&d, x));
    map.and_then(|m| interp.structural_pattern(&m, STRUCTURAL_WORK).map_err(|e| e.message))
        .map_err(|m| format!("`[D f]`'s pattern at the point: {m}"))
}

/// The pattern of `[jacsparse f]` at the point (entries its analysis of
/// which inputs each result element reads allows), by the interpreter on
/// `defs` and `[jacsparse f]`'s: where `[D f]`'s cannot be had.
fn sparse_pattern(
    db: &ksc_db::Database,
    file: ksc_db::SourceFile,
    f: &ksc_ir::Def,
    mut defs: Vec<ksc_ir::Def>,
    rows: usize,
    cols: usize,
) -> Result<Vec<bool>, String> {
    use ksc_eval::{Interpreter, Value};
    let sparse = f.name.derived(Derivation::JacSparse);
    let (more, _) = derived_quietly(db, file, &sparse)?;
    for d in more {
        if !defs.iter().any(|e| e.name == d.name) {
            defs.push(d);
        }
    }
    let mut interp = Interpreter::new(defs.iter());
    let mut run = |name: &FunName, arg: Value| interp.call(name, arg, &mut std::io::sink()).map_err(|e| e.message);
    let v = run(&AtPoint::point(), Value::unit()).and_then(|x| run(&sparse, x))?;
    csr_pattern(&v, rows, cols)
}

/// The entries of a `[jacsparse f]` value (`(tuple (tuple m n)
/// row_offsets columns values)`) as a rows x cols pattern.
fn csr_pattern(v: &ksc_eval::Value, rows: usize, cols: usize) -> Result<Vec<bool>, String> {
    use ksc_eval::Value;
    let ints = |v: &Value| -> Option<Vec<i64>> {
        match v {
            Value::Tensor(t) => t
                .data
                .iter()
                .map(|e| match e {
                    Value::Integer(i) => Some(*i),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    };
    let bad = || format!("`[jacsparse f]` returned a value that is not a {rows} x {cols} matrix (a ksc bug)");
    let Value::Tuple(parts) = v else { return Err(bad()) };
    let [dims, offsets, columns, _] = &parts[..] else { return Err(bad()) };
    let (Value::Tuple(mn), Some(offsets), Some(columns)) = (dims, ints(offsets), ints(columns)) else {
        return Err(bad());
    };
    if !matches!(&mn[..], [Value::Integer(m), Value::Integer(n)] if *m as usize == rows && *n as usize == cols)
        || offsets.len() != rows + 1
    {
        return Err(bad());
    }
    let mut pattern = vec![false; rows * cols];
    for r in 0..rows {
        let (a, b) = (offsets[r].max(0) as usize, offsets[r + 1].max(0) as usize);
        for &c in columns.get(a..b).ok_or_else(bad)? {
            let c = usize::try_from(c).ok().filter(|&c| c < cols).ok_or_else(bad)?;
            pattern[r * cols + c] = true;
        }
    }
    Ok(pattern)
}

/// `[D f]` simplified and the Jacobians `[D g]` it calls, transitively.
fn jacobians(db: &ksc_db::Database, file: ksc_db::SourceFile, f: &FunName) -> Result<Vec<ksc_ir::Def>, String> {
    let (mut out, mut work): (Vec<ksc_ir::Def>, Vec<FunName>) = (Vec::new(), vec![f.clone()]);
    while let Some(g) = work.pop() {
        let d = match ksc_db::simplified_jacobian(db, file, g.clone(), false) {
            Ok((d, _)) => d.0.clone(),
            Err(e) => return Err(format!("cannot derive `[D {}]`: {}", g.short(), e.message)),
        };
        for (_, e) in d.body.exprs.iter() {
            if let ksc_ir::Expr::Call(ksc_ir::Callee::Fun(name), _) = e {
                if let Some((Derivation::D, inner)) = name.inner() {
                    if !out.iter().any(|o| o.name == *name) && !work.contains(&inner) && inner != g {
                        work.push(inner);
                    }
                }
            }
        }
        out.push(d);
    }
    Ok(out)
}

/// Prints the matrix at the point: its sparsity drawing, or the matrix in
/// `format`.
fn print_matrix(m: &MatrixAt, f: &ksc_ir::Def, args: &str, sparsity: bool, format: Format) -> Result<(), ExitCode> {
    use std::io::{IsTerminal, Write};
    let (rows, cols) = (m.j.rows.len(), m.j.cols.len());
    // csv, json and npy are the matrix alone, for other tools to read.
    if format == Format::Text {
        println!("; Jacobian of `{}` at {args}: {rows} x {cols}", f.name.short());
    }
    if sparsity {
        draw_sparsity(rows, cols, |r, c| m.j.data[r * cols + c] != 0.0);
        return Ok(());
    }
    if format == Format::Npy && std::io::stdout().is_terminal() {
        eprintln!("error: `--format npy` writes binary data: redirect it to a file (`> jacobian.npy`)");
        return Err(ExitCode::from(2));
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = m.j.write(format, &mut out).and_then(|()| out.flush()) {
        eprintln!("error: cannot write the matrix: {e}");
        return Err(ExitCode::from(1));
    }
    Ok(())
}

/// The most characters a sparsity drawing uses per line (and lines).
const DRAWING: usize = 100;

/// Draws a rows x cols pattern, `#` where `nonzero`, in blocks if large.
fn draw_sparsity(rows: usize, cols: usize, nonzero: impl Fn(usize, usize) -> bool) {
    let (bh, bw) = (rows.div_ceil(DRAWING).max(1), cols.div_ceil(DRAWING).max(1));
    if bh > 1 || bw > 1 {
        println!("; each character is a block of {bh} x {bw} entries");
    }
    for br in (0..rows).step_by(bh) {
        let line: String = (0..cols)
            .step_by(bw)
            .map(|bc| {
                let any = (br..(br + bh).min(rows)).any(|r| (bc..(bc + bw).min(cols)).any(|c| nonzero(r, c)));
                if any {
                    '#'
                } else {
                    '.'
                }
            })
            .collect();
        println!("{line}");
    }
}
