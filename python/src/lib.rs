//! `ksc._native`: the compiler embedded in Python. One [`Session`] is one
//! source file in an incremental database (ksc-db): after an edit, what it
//! did not change is not checked, derived or lowered again, as in `ksc
//! watch`. The
//! Python side (`ksc/__init__.py`) loads the library a build returns and
//! calls its functions through their C ABI (the header's convention).

use std::collections::HashMap;
use std::path::PathBuf;

use ksc_codegen_c::{compile_program, Artefact, CcConfig, Target};
use ksc_ir::{FunName, Type};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// The stack the compiler runs on: deep programs recurse deeply, as in the
/// command line (`COMPILER_STACK` of `src/main.rs`); only the pages touched
/// are allocated.
const COMPILER_STACK: usize = 1 << 30;

/// A `.ks` source in an incremental compiler database. Any thread may use
/// it (Python may drop it on any thread); one at a time: the Python side
/// holds a lock of its own around every call.
#[pyclass(frozen)]
struct Session {
    state: std::sync::Mutex<State>,
}

struct State {
    /// Taken while a compilation runs on its own thread.
    db: Option<ksc_db::Database>,
    file: ksc_db::SourceFile,
    /// The name messages give the source (a path, or `<string>`).
    path: String,
}

impl Session {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The error of a session whose database was lost (its compiler panicked
/// in a way that could not be caught).
fn lost() -> PyErr {
    PyRuntimeError::new_err("the session's compiler failed earlier; make a new module")
}

/// What a build reports: the diagnostics (rendered), whether there were
/// errors, and, without errors, the library and its functions.
struct Built {
    errors: bool,
    diagnostics: String,
    library: Option<(PathBuf, Vec<Signature>)>,
}

/// One exported function: its full name, its C name, its parameters and
/// result.
struct Signature {
    name: FunName,
    c_name: String,
    params: Vec<(String, Type)>,
    ret: Type,
}

/// Runs `f` on a thread with the compiler's stack.
fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match std::thread::Builder::new().stack_size(COMPILER_STACK).spawn_scoped(s, f) {
        Ok(h) => match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(e) => panic!("cannot start the compiler's thread: {e}"),
    })
}

fn build(
    db: &ksc_db::Database,
    file: ksc_db::SourceFile,
    path: &str,
    cfg: &CcConfig,
    checked: bool,
) -> Result<Built, String> {
    // What a long compilation is doing, on stderr if it is a terminal, as
    // on the command line.
    let progress = ksc_db::progress::Progress::start(db.activity());
    let analysis = ksc_db::analysis(db, file);
    let sources = ksc_types::render::Sources::new(path, file.text(db));
    let diagnostics = sources.render_plain(&analysis.diagnostics);
    if analysis.has_errors() {
        return Ok(Built { errors: true, diagnostics, library: None });
    }
    let roots = analysis.library_roots();
    let lambdas = ksc_db::lambda_diagnostics(db, file, &roots);
    if !lambdas.is_empty() {
        return Ok(Built { errors: true, diagnostics: diagnostics + &sources.render_plain(&lambdas), library: None });
    }
    progress.phase("compiling");
    let header = "ksc_module.h".to_string();
    let prog = ksc_db::c_unit(db, file, path.to_string(), roots.clone(), checked, Target::Library, header.clone())
        .as_ref()
        .map_err(|e| e.clone())?;
    progress.phase("compiling the C");
    let library = compile_program(prog, Some(&header), Artefact::SharedLibrary, cfg, &|done, total| {
        progress.c_units(done, total)
    })
    .map_err(|e| e.to_string())?;
    progress.finish();
    let defs: HashMap<&FunName, &ksc_ir::Def> = analysis.defs().into_iter().map(|d| (&d.name, d)).collect();
    let facts = &ksc_db::lowering_facts(db, file, true).facts;
    let mut functions = Vec::new();
    for r in &roots {
        let (Some(d), Some(c_name)) = (defs.get(r), facts.c_name(r)) else {
            continue;
        };
        functions.push(Signature {
            name: r.clone(),
            c_name: c_name.to_string(),
            params: d.params.iter().map(|p| (p.name.to_string(), p.ty.clone())).collect(),
            ret: d.ret_ty.clone(),
        });
    }
    Ok(Built { errors: false, diagnostics, library: Some((library, functions)) })
}

/// A type as Python data: `"Float"`, `"Integer"`, `"Bool"`, `"String"`,
/// `("Tensor", rank, element)` (a `Vec` is rank 1), `("Tuple", (types))`:
/// tuples all through, so a type is hashable.
fn type_to_py<'py>(py: Python<'py>, t: &Type) -> PyResult<Bound<'py, PyAny>> {
    Ok(match t {
        Type::Float => "Float".into_pyobject(py)?.into_any(),
        Type::Integer => "Integer".into_pyobject(py)?.into_any(),
        Type::Bool => "Bool".into_pyobject(py)?.into_any(),
        Type::String => "String".into_pyobject(py)?.into_any(),
        Type::Tensor(r, e) => PyTuple::new(
            py,
            ["Tensor".into_pyobject(py)?.into_any(), (*r as i64).into_pyobject(py)?.into_any(), type_to_py(py, e)?],
        )?
        .into_any(),
        Type::Tuple(ts) => {
            let items = ts.iter().map(|t| type_to_py(py, t)).collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, ["Tuple".into_pyobject(py)?.into_any(), PyTuple::new(py, items)?.into_any()])?.into_any()
        }
        other => return Err(PyRuntimeError::new_err(format!("the type `{other}` does not cross the C ABI"))),
    })
}

#[pymethods]
impl Session {
    /// A session of the source `text`, named `path` in messages.
    #[new]
    fn new(text: String, path: String) -> Session {
        let db = ksc_db::Database::new();
        let file = db.add_file(text);
        Session { state: std::sync::Mutex::new(State { db: Some(db), file, path }) }
    }

    /// Replaces the source text (an edit: what it does not change is not
    /// checked, derived or lowered again).
    fn set_text(&self, text: String) -> PyResult<()> {
        let mut state = self.state();
        let file = state.file;
        state.db.as_mut().ok_or_else(lost)?.set_text(file, text);
        Ok(())
    }

    /// The source text.
    fn text(&self) -> PyResult<String> {
        let state = self.state();
        Ok(state.file.text(state.db.as_ref().ok_or_else(lost)?).clone())
    }

    /// Checks the source and, without errors, compiles what a library
    /// exports into a shared library (cached by content, as `ksc build`
    /// does). Returns a dict: `errors` (bool), `diagnostics` (rendered
    /// text, warnings too), and without errors `library` (the path) and
    /// `functions` (a list of dicts: `name`, `short`, `base`, `derivs`, `c_name`,
    /// `params` as (name, type) pairs, `ret`). `cflags` replaces the C
    /// compiler's optimisation flags; `checked` keeps bounds and overflow
    /// checks; `reassociate` lets sums and maxima of loops over data be
    /// combined in any order (`ksc build --reassociate`). Raises
    /// RuntimeError if the C compiler or code generation fails.
    #[pyo3(signature = (cflags=None, checked=true, reassociate=false))]
    fn build<'py>(
        &self,
        py: Python<'py>,
        cflags: Option<String>,
        checked: bool,
        reassociate: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let mut state = self.state();
        let db = state.db.take().ok_or_else(lost)?;
        let (file, path) = (state.file, state.path.clone());
        let mut cfg = CcConfig::from_env();
        if let Some(f) = cflags {
            cfg.cflags = ksc_codegen_c::driver::split_flags(&f);
        }
        if reassociate {
            cfg.reassociate();
        }
        // Without the GIL: other Python threads run while this one
        // compiles (the Python side lets one thread at a time into a
        // session, waiting without the GIL, so none holds it while it
        // waits for this lock).
        let (db, built) = py.detach(move || {
            on_big_stack(move || {
                let built =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(&db, file, &path, &cfg, checked)));
                (db, built)
            })
        });
        state.db = Some(db);
        drop(state);
        let built = match built {
            Ok(r) => r.map_err(PyRuntimeError::new_err)?,
            Err(p) => {
                let what =
                    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                return Err(PyRuntimeError::new_err(format!(
                    "internal error (a ksc bug): {}",
                    what.unwrap_or_else(|| "the compiler panicked".into())
                )));
            }
        };
        let out = PyDict::new(py);
        out.set_item("errors", built.errors)?;
        out.set_item("diagnostics", built.diagnostics)?;
        if let Some((library, functions)) = built.library {
            out.set_item("library", library.to_string_lossy().into_owned())?;
            let list = PyList::empty(py);
            for s in functions {
                let d = PyDict::new(py);
                d.set_item("name", s.name.to_string())?;
                d.set_item("base", s.name.base.clone())?;
                d.set_item("short", s.name.short())?;
                d.set_item("derivs", s.name.derivs.iter().map(|x| x.keyword()).collect::<Vec<_>>())?;
                d.set_item("c_name", s.c_name)?;
                let params = PyList::empty(py);
                for (n, t) in &s.params {
                    params.append(PyTuple::new(py, [n.into_pyobject(py)?.into_any(), type_to_py(py, t)?])?)?;
                }
                d.set_item("params", params)?;
                d.set_item("ret", type_to_py(py, &s.ret)?)?;
                list.append(d)?;
            }
            out.set_item("functions", list)?;
        }
        Ok(out)
    }
}

/// The compiler of ksc, embedded: see the `ksc` package.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    Ok(())
}
