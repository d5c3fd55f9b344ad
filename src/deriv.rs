//! `ksc jacobian` and `ksc deriv`: print what automatic differentiation
//! makes of a function, as `.ks`.

use std::path::Path;
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

pub fn jacobian(path: &Path, func: &str, at: Option<&str>, how: Show, format: Format) -> ExitCode {
    let Ok(c) = crate::compile(path) else { return ExitCode::from(1) };
    let f = match find(&c.analysis, func) {
        Ok(f) => f,
        Err(m) => {
            eprintln!("error: {m}");
            return ExitCode::from(2);
        }
    };
    if let Some(args) = at {
        return dense_at(c.sources.source_text(), f, args, how == Show::Sparsity, format);
    }
    // `[D f]` as derived, or simplified (with the rules that fired).
    let result = match how {
        Show::Raw => ksc_db::jacobian_of(&c.db, c.file, f.name.clone()).as_ref().map(|j| j.0 .0.clone()),
        _ => {
            ksc_db::simplified_jacobian(&c.db, c.file, f.name.clone(), how == Show::Trace).as_ref().map(|(d, fired)| {
                for line in &fired.fired {
                    eprintln!("{line}");
                }
                d.0.clone()
            })
        }
    };
    match result {
        Ok(d) => {
            println!("{}", ksc_ir::print::print_def(&d));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot derive `[D {}]`: {}", f.name.short(), e.message);
            ExitCode::from(1)
        }
    }
}

/// The derived function `name` and those it needs, derived and optimised
/// through the queries of `db` (`ksc_db::derive_request`), the requested
/// one first; or the first derivation error.
fn derived(db: &ksc_db::Database, file: ksc_db::SourceFile, name: &FunName) -> Result<Vec<ksc_ir::Def>, ExitCode> {
    let out = ksc_db::derive_request(db, ksc_db::Request::new(db, file, name.clone()));
    if let Some(e) = out.errors.first() {
        eprintln!("error: cannot derive `{}`: {}", e.name.short(), e.message);
        return Err(ExitCode::from(1));
    }
    for w in &out.warnings {
        eprintln!("warning: {w}");
    }
    let mut defs = out.defs;
    defs.sort_by_key(|d| d.name != *name);
    Ok(defs)
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
pub fn deriv(path: &Path, func: &str, mode: Mode, cost_at: Option<&str>) -> ExitCode {
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
    let Ok(defs) = derived(&c.db, c.file, &f.name.derived(d)) else { return ExitCode::from(1) };
    for def in &defs {
        println!("{}\n", ksc_ir::print::print_def(def));
    }
    match cost_at {
        Some(args) => crate::cost::table(c.sources.source_text(), &c.analysis, f, d, args, &defs),
        None => ExitCode::SUCCESS,
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

/// The Jacobian of `f` at the point `args`, as a dense matrix: `[jac f]`
/// (forward mode over columns or reverse over rows, whichever is fewer),
/// run by the interpreter.
fn dense_at(text: &str, f: &ksc_ir::Def, args: &str, sparsity: bool, format: Format) -> ExitCode {
    use ksc_eval::{Interpreter, Value};
    use std::io::{IsTerminal, Write};
    let AtPoint { db, file, mut analysis } = match AtPoint::new(text, f, args, "") {
        Ok(p) => p,
        Err(code) => return code,
    };
    let point = AtPoint::point();
    let jac = f.name.derived(Derivation::Jac);
    let Ok(defs) = derived(&db, file, &jac) else { return ExitCode::from(1) };
    analysis.derived = defs;
    let defs = analysis.defs();
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut run = |name: &FunName, arg: Value| interp.call(name, arg, &mut std::io::sink()).map_err(|e| e.message);
    // The point, f's value there (for the rows' labels), and the matrix.
    let evaluated = run(&point, Value::unit()).and_then(|x| Ok((run(&f.name, x.clone())?, run(&jac, x.clone())?, x)));
    match evaluated {
        Ok((y, Value::Tensor(t), x)) if t.shape.len() == 2 => {
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
            let entry = |r: usize, c: usize| data[r * cols + c];
            // csv, json and npy are the matrix alone, for other tools to read.
            if format == Format::Text {
                println!("; Jacobian of `{}` at {args}: {rows} x {cols}", f.name.short());
            }
            if sparsity {
                draw_sparsity(rows, cols, |r, c| entry(r, c) != 0.0);
                return ExitCode::SUCCESS;
            }
            if format == Format::Npy && std::io::stdout().is_terminal() {
                eprintln!("error: `--format npy` writes binary data: redirect it to a file (`> jacobian.npy`)");
                return ExitCode::from(2);
            }
            // Labels in the order of `$tangentFlatten`, which orders the
            // matrix; numbered if they do not match (they always should).
            let mut row_labels = Vec::new();
            crate::matrix::float_labels(&y, "result", &mut row_labels);
            let mut col_labels = crate::matrix::argument_labels(&f.params, &x);
            if row_labels.len() != rows {
                row_labels = (0..rows).map(|r| format!("row {r}")).collect();
            }
            if col_labels.len() != cols {
                col_labels = (0..cols).map(|c| format!("column {c}")).collect();
            }
            let j = crate::matrix::Jacobian { rows: row_labels, cols: col_labels, data };
            let mut out = std::io::stdout().lock();
            if let Err(e) = j.write(format, &mut out).and_then(|()| out.flush()) {
                eprintln!("error: cannot write the matrix: {e}");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Ok((_, v, _)) => {
            eprintln!("error: `[jac {}]` returned {v:?}, not a matrix (a ksc bug)", f.name.short());
            ExitCode::from(1)
        }
        Err(m) => {
            eprintln!("error: evaluating the Jacobian failed: {m}");
            ExitCode::from(1)
        }
    }
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
