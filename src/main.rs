//! `ksc`: the command-line interface of the ksc compiler.
//!
//! Diagnostics go to stderr, program output to stdout. Exit codes
//! ([`EXIT_CODES`], shown by `--help`): 0 success, 1 the program has errors
//! (compile-time or run-time), 2 usage errors, unreadable input, and output
//! that cannot or may not be written.

mod cl;
mod cost;
mod deriv;
mod laws;
mod matrix;
mod native;
mod pictures;
mod render;
mod report;
mod watch;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
use ksc_eval::{Interpreter, RuntimeError, Value};
use ksc_types::{Analysis, Diagnostic, FileRef};
use render::{error_summary, Sources};

#[derive(Parser)]
#[command(
    name = "ksc",
    version,
    about = "A compiler for Knossos-style .ks programs",
    long_about = "ksc reads, type-checks and runs .ks programs (the S-expression language of the \
                  Knossos compiler). The prelude (add, mul, exp, log, dot, $ranhashdoub, ...) is built in: \
                  no prelude file is passed.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and type-check a file, printing every diagnostic.
    Check {
        /// The .ks file to check.
        file: PathBuf,
    },
    /// Check a file, compile it to native code through C, and run its `main`.
    ///
    /// The program must define `(def main Integer () ...)` (any result type is
    /// accepted). Its output (from `print` and `$trace`) goes to stdout; the
    /// value `main` returns is not printed. Run-time errors (failed `assert`,
    /// index out of range, sum of an empty vector, integer division by zero,
    /// integer overflow, recursion too deep) stop the program with the
    /// source location and exit code 1. Nested calls may use
    /// `$KSC_MAX_STACK` bytes of stack (default: half of `$KSC_MAX_MEMORY`,
    /// itself by default half the machine's memory); tail calls use none.
    /// Compiled programs are cached by content hash (in
    /// `$KSC_CACHE_DIR`, else `$XDG_CACHE_HOME/ksc`, else `~/.cache/ksc`).
    /// `--interp` runs the reference interpreter instead.
    Run {
        /// The .ks file to run.
        file: PathBuf,
        /// Run with the reference interpreter instead of compiling.
        #[arg(long)]
        interp: bool,
        /// Threads for the loops whose iterations are independent (builds
        /// and derivative loops that fill one element each; folds and sums
        /// stay serial). Default: `$OMP_NUM_THREADS`, else every core; 1
        /// runs serial code. Results are the same at any thread count.
        #[arg(long, value_name = "N", conflicts_with = "interp")]
        threads: Option<std::num::NonZeroUsize>,
        /// Check the monoid laws of every `reduce` and `scan` on the values
        /// it meets: E an identity (left and right for `reduce`, left for
        /// `scan`) of each element, and the operator associative on each
        /// three consecutive elements and on the value so far with the next
        /// two. Floats agree within a relative 1e-8 (of the larger, or of
        /// 1). The first broken law prints its values and stops the program
        /// at the operator. Checking costs about ten applications of the
        /// operator per element.
        #[arg(long)]
        check_monoids: bool,
        #[command(flatten)]
        native: native::NativeOptions,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Property-check every law of linear maps the optimiser uses.
    ///
    /// For each law of the table (seed 003 figures 4 and 5, knossos-reference
    /// 4.2 and 4.3), random well-typed instances of its left side are
    /// rewritten by the law, and both sides are compared under the reference
    /// semantics: as dense matrices for maps, as values for applications.
    /// Also checks that every transpose is an adjoint. Prints one row per law
    /// and, for a failure, its shrunk counterexample; exits 1 if any fails.
    Laws(laws::LawsArgs),
    /// Print the full Jacobian `[D f]` of a function as linear-map combinators.
    ///
    /// FUNC is a function defined in FILE (its base name, or its full name
    /// such as `[f (Tuple Float Float)]` if it is overloaded). The Jacobian
    /// is printed as `.ks` in A-normal form: one `let` per intermediate map.
    /// `--trace` and `--explain` report how it was simplified, `--at` prints
    /// it as a matrix at a point, and `--svg`, `--graph` and `--html` write
    /// pictures of it and a page of all of these.
    Jacobian {
        /// The .ks file.
        file: PathBuf,
        /// The function: its name, or its full name if it is overloaded
        /// (`[f (Tuple Float Float)]`); or a derived function that a `gdef`
        /// of the file requests (`[rev f]` or `[rev [f Float]]`).
        func: String,
        /// Evaluate the Jacobian at this argument (a .ks expression of the
        /// function's argument type, e.g. `"(tuple 1.0 (Vec_init 2.0 3.0))"`)
        /// and print it as a dense matrix: one row per Float of the result,
        /// one column per Float of the argument, in order. It is computed by
        /// `[jac f]` in the interpreter (forward mode per column or reverse
        /// mode per row, whichever is fewer).
        #[arg(long, value_name = "ARGS")]
        at: Option<String>,
        /// With `--at`, draw the sparsity pattern (`#` nonzero, `.` zero)
        /// instead of the numbers; large matrices are drawn in blocks, a block
        /// being `#` if any of its entries is nonzero.
        #[arg(long, requires = "at")]
        sparsity: bool,
        /// With `--at`, how to print the matrix: `text` (rows and columns
        /// labelled by the result's and the argument's components, as
        /// `v[2]` or `p.1`; a summary with the largest entries beyond 16
        /// columns or 64 rows), `csv`, `json`, or `npy` (NumPy's binary
        /// format; redirect it to a file).
        #[arg(long, value_enum, default_value = "text", requires = "at", conflicts_with = "sparsity")]
        format: matrix::Format,
        /// Print the Jacobian as derived, before simplification.
        #[arg(long, conflicts_with = "at")]
        raw: bool,
        /// Report, on stderr, every rule that fired while simplifying, in
        /// order: its name, its statement from the rule table, the subterm
        /// before and after (cut beyond 600 characters), and the size of
        /// the whole term (in nodes) after each phase of the simplifier.
        #[arg(long, conflicts_with_all = ["at", "raw"])]
        trace: bool,
        /// Like `--trace`, only the places where the rule RULE fired (a law
        /// of linear maps or a Core rule, by name; an unknown name lists
        /// them).
        #[arg(long, value_name = "RULE", conflicts_with_all = ["at", "raw", "trace"])]
        explain: Option<String>,
        /// With `--at`, also draw the Jacobian at the point as SVG into
        /// FILE: a heat map (red positive, blue negative, white zero, with a
        /// legend), beside its structural sparsity pattern (the entries the
        /// linear-map program `[D f]`, evaluated at the point, can make
        /// nonzero at all, a scale by 0 included; if that takes more than
        /// 10 million operations of the interpreter,
        /// those `[jacsparse f]`'s analysis of the reads allows, as the
        /// picture says) and its pattern at the point. The
        /// argument's and the result's blocks (parameters, tuple
        /// components) are marked by lines and labelled; matrices over 100
        /// rows or columns are drawn in cells of several entries.
        #[arg(long, value_name = "FILE", requires = "at")]
        svg: Option<PathBuf>,
        /// Draw the simplified Jacobian as a graph into FILE (SVG): a node
        /// per linear-map combinator (`lmCompose`, `lmVCat`, `lmScale`,
        /// ...), an edge from each map to the combinator that takes it,
        /// labelled by the map's shape `S -o T` (in short: `F` Float, `I`
        /// Integer, `T[]` a vector; the edge's tooltip has the full types). Laid out by Graphviz's
        /// `dot` if it is on the PATH (`$KSC_DOT` names another program;
        /// set to empty, none), else by ksc (in layers, the result at the
        /// top; the page of `--html` always has ksc's layout).
        #[arg(long, value_name = "FILE")]
        graph: Option<PathBuf>,
        /// Write the derivation as one self-contained XHTML page into FILE:
        /// the function's source, the Jacobian as derived and simplified
        /// side by side, the graph, the rules that fired (as `--trace`)
        /// and, with `--at`, the picture of `--svg`.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Print a derived function (`[fwd f]`, `[rev f]`, `[jac f]`, ...; see
    /// `--mode`) as `.ks` after optimisation, with the derivatives of the
    /// functions it calls.
    Deriv {
        /// The .ks file.
        file: PathBuf,
        /// The function: its name, or its full name if it is overloaded
        /// (`[f (Tuple Float Float)]`); or a derived function that a `gdef`
        /// of the file requests (`[rev f]` or `[rev [f Float]]`), for a
        /// derivative of a derivative.
        func: String,
        /// Which derivative.
        #[arg(long, value_enum, default_value = "rev")]
        mode: deriv::Mode,
        /// After the derived functions, print what they cost, as `;`
        /// comments: the interpreter's operation count (calls, loads and
        /// element work; the measure the cost tests bound) of the function
        /// and of the derivative at the point `--at`, their ratio, and
        /// their span (the operations on the longest chain of dependent
        /// steps, independent iterations of `build` and of `scan`'s blocks
        /// being separate chains: the depth on unbounded cores) (`[fwd f]`
        /// is given the tangent whose every Float is 1.0, `[rev f]` the
        /// cotangent whose every Float is 1.0); then, for each
        /// derived function printed, the `for` loops (nested ones
        /// included), the statements that may allocate a tensor, and the
        /// lines of its C function (without the exported wrapper) in the
        /// code `ksc build` makes of it (checked), or why it makes none.
        /// Not for `sufrevpass`.
        #[arg(long, requires = "at")]
        cost: bool,
        /// With `--cost`: the point, a .ks expression of the function's
        /// argument type (e.g. `"(Vec_init 1.0 2.0)"`).
        #[arg(long, value_name = "ARGS", requires = "cost")]
        at: Option<String>,
        /// After optimisation, run the strategy NAME on each derived
        /// function printed (a `(strategy NAME ...)` of the file, or one
        /// of ksc's schedules: simplify-lm, push-apply, core-cleanup,
        /// user-rules, inline-marked; or a strategy written out, as
        /// `--schedule "(topDown (rules core))"`; docs/strategies.md), and
        /// say on stderr how many times each rule fired. `--cost` then
        /// measures the result. To make a schedule part of the
        /// optimisation, name it in a `gdef` or declare it in the file
        /// under the name of one of ksc's.
        #[arg(long, value_name = "NAME")]
        schedule: Option<String>,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Print a function as a term of the categorical language CL (seed 003
    /// sections 6 and 7; what `(gdef CL [f T])` goes through).
    ///
    /// The term is a morphism from the function's argument to its result,
    /// applied to the environment: the tuple of the variables in scope.
    /// Forms: `id` (identity); `(K k)` (constant, from `()`); `(P i .. / n)`
    /// (pruning: keeps components i .. of an n-tuple, counted from 1);
    /// `(F f)` (function constant: a function or first-order primitive; a
    /// variable is the projection `get$i$n` of the environment); `(comp c1
    /// c2 ..)` (composition, c1 first); `(tuple c1 ..)`; `(if c1 c2 c3)`;
    /// `(let (x : T) c_r c_b)`, `(build c_s (i : T) c_e)` and `(fold (x :
    /// T) c_f c_acc c_v)`, whose c_b, c_e and c_f see the environment
    /// extended by their binder; `(assert c1 c2)`; and other primitives with
    /// lambda arguments as `(map (lam (x : T) c) c_v)`. Every sub-term is
    /// pruned to its free variables first.
    Cl {
        /// The .ks file.
        file: PathBuf,
        /// The function: its name, or its full name if it is overloaded
        /// (`[f (Tuple Float Float)]`) or derived (`[CL [f Float]]`).
        func: String,
        /// Type-check the term (seed 003 figure 11) and print its type
        /// `S => T` after it.
        #[arg(long)]
        check: bool,
    },
    /// Compile a file to C and write the artefacts.
    ///
    /// `--emit c` writes NAME.c (with the runtime included) and NAME.h, the
    /// C ABI: one function per definition of the file, taking an arena
    /// first (see the header). `obj`, `so` and `exe` also run the C compiler
    /// (`$CC`, else `cc`). `loops` writes the optimised loop IR, `ks` the
    /// program with its derived functions as `.ks`.
    ///
    /// A build never writes over its input file, nor (without `--force`)
    /// over a file that ksc did not write; it stops before writing anything.
    Build {
        /// The .ks file to compile.
        file: PathBuf,
        /// The directory to write into (default: the current directory).
        #[arg(short = 'o', long = "out-dir", value_name = "DIR")]
        out_dir: Option<PathBuf>,
        /// What to write.
        #[arg(long, value_enum, default_value = "so")]
        emit: native::Emit,
        /// Overwrite output files that ksc did not write. The input file is
        /// never overwritten.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        native: native::NativeOptions,
        #[command(flatten)]
        passes: PassArgs,
    },
    /// Print a file in canonical layout to stdout.
    ///
    /// Comments are not preserved, and `let` binding lists may be regrouped;
    /// reading the output back gives the same program.
    Fmt {
        /// The .ks file to format.
        file: PathBuf,
    },
    /// Recompile a file every time it is saved, incrementally.
    ///
    /// Only what depends on an edit is recompiled: editing one definition's
    /// body re-checks that body and re-derives the derivatives that use it.
    /// Each build prints how long it took and which queries re-executed (by
    /// stage and declaration), then the diagnostics. With `--run`, `main`
    /// runs with the interpreter after every build without errors, in a
    /// child process (`ksc run --interp FILE`) that the next change of the
    /// file stops, so a `main` that never ends does not stop the watcher.
    /// Stop with Ctrl-C.
    Watch(watch::WatchArgs),
}

/// The optimisation passes and rules to skip or to print the IR after:
/// what bisects a miscompile to one pass or rule, and measures what a
/// group of optimisations buys.
#[derive(Args, Clone, Debug, Default)]
struct PassArgs {
    /// Do not run this optimisation pass (repeatable): if a program is
    /// wrong with the pass and right without it, the pass is at fault. The
    /// derived-function passes run on Core IR (`ksc deriv` shows their
    /// result); the others on the loop IR (`ksc build --emit loops`).
    /// `fuse-builds` is a switch of the lowering: off, every `build` is
    /// stored instead of read where it is consumed. `parallel-scan-reverse`
    /// is one of differentiation: off, the backward pass of a `scan` runs
    /// serially instead of as a scan of affine maps in parallel blocks
    /// (seed 002's Theorem 3.7; faster on one or two cores, docs/ad.md).
    #[arg(long = "skip-pass", value_name = "PASS", value_parser = PossibleValuesParser::new(skippable_passes()))]
    skip_pass: Vec<String>,
    /// Leave this Core rule or law of linear maps out of every rule set
    /// and schedule (repeatable; named as in `ksc deriv --trace`; a name
    /// that is neither lists them all).
    #[arg(long = "skip-rule", value_name = "RULE", value_parser = PossibleValuesParser::new(rule_names()),
          hide_possible_values = true)]
    skip_rule: Vec<String>,
    /// Switch off a group of optimisations (repeatable), to measure what it
    /// buys: its rules as `--skip-rule` and its passes as `--skip-pass`
    /// (the lists are in docs/strategies.md, "Ablations"). The results are
    /// the same; only the time changes.
    #[arg(long = "ablate", value_name = "GROUP", value_parser = ablation_names())]
    ablate: Vec<String>,
    /// Print, on stderr, each function after every run of this pass
    /// (repeatable): derived functions as `.ks`, loop-IR functions as
    /// `--emit loops` prints them.
    #[arg(long = "dump-after", value_name = "PASS", value_parser = PossibleValuesParser::new(pass_names()))]
    dump_after: Vec<String>,
}

/// The names of the passes of both pipelines, derived functions' first.
fn pass_names() -> Vec<&'static str> {
    let mut names = ksc_opt::pipeline::names();
    for n in ksc_lower::passes::names() {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// What `--skip-pass` takes: the passes, and the lowering's and
/// differentiation's switches.
fn skippable_passes() -> Vec<&'static str> {
    let mut names = pass_names();
    names.extend(ksc_lower::passes::SWITCHES);
    names.extend(ksc_ad::SWITCHES);
    names
}

/// The Core rules and the laws of linear maps, by name.
fn rule_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = ksc_opt::CORE_RULES.iter().map(|r| r.name).collect();
    names.extend(ksc_linmap::LAWS.iter().map(|l| l.name));
    names
}

/// The ablations, with what each switches off.
fn ablation_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        ksc_opt::ablation::ABLATIONS.iter().map(|a| clap::builder::PossibleValue::new(a.name).help(a.what)),
    )
}

impl PassArgs {
    /// Sets this process's pass options (before anything is compiled).
    fn configure(&self) {
        let mut skip = self.skip_pass.clone();
        let mut skip_rules = self.skip_rule.clone();
        for name in &self.ablate {
            let a = ksc_opt::ablation::ablation(name).expect("clap accepts the ablations only");
            for p in a.passes {
                assert!(skippable_passes().contains(p), "the ablation {name} names an unknown pass {p}");
                skip.push(p.to_string());
            }
            skip_rules.extend(a.rules.iter().map(|r| r.to_string()));
        }
        let options = ksc_ir::pass::PassOptions {
            skip,
            skip_rules,
            dump_after: self.dump_after.clone(),
            sink: Some(|text| eprint!("{text}")),
        };
        // The only call, made before any compilation.
        let _ = ksc_ir::pass::configure(options);
    }
}

/// A reader that stops early (`ksc deriv ... | head`) closes standard
/// output; `print!` then panics. That is not a failure of ksc: end quietly
/// with the status a shell gives a process killed by SIGPIPE.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The stack every command runs on. The passes recurse on the nesting of
/// Core IR, which the reader bounds (`ksc_syntax::sexpr::MAX_DEPTH` brackets,
/// `ksc_syntax::MAX_LET_DEPTH` `let` bindings); at those bounds they need
/// more than a main thread's 8 MiB. Only the pages touched are allocated.
pub(crate) const COMPILER_STACK: usize = 1 << 30;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    // A panic inside a derivation is turned into a located diagnostic
    // ("internal error (a ksc bug): ..."); do not also print it as a panic.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !ksc_ad::panic_is_guarded() {
            default_hook(info);
        }
    }));
    let cli = Cli::parse();
    if let Err(e) = set_limits() {
        eprintln!("error: {e}");
        return ExitCode::from(USAGE);
    }
    let worker = std::thread::Builder::new().stack_size(COMPILER_STACK).spawn(move || command(cli));
    match worker.map(|w| w.join()) {
        Ok(Ok(code)) => code,
        // A panic has printed its message already.
        Ok(Err(_)) => ExitCode::from(101),
        // No thread with a large stack: run here.
        Err(_) => command(Cli::parse()),
    }
}

fn command(cli: Cli) -> ExitCode {
    if let Command::Run { passes, .. } | Command::Build { passes, .. } | Command::Deriv { passes, .. } = &cli.command {
        passes.configure();
    }
    match cli.command {
        Command::Check { file } => check(&file),
        Command::Run { file, interp: true, check_monoids, .. } => run(&file, check_monoids),
        Command::Run { file, native, threads, check_monoids, .. } => {
            native::run(&file, &native, threads, check_monoids)
        }
        Command::Build { file, out_dir, emit, force, native, .. } => {
            native::build(&file, out_dir.as_deref(), emit, force, &native)
        }
        Command::Fmt { file } => fmt(&file),
        Command::Watch(args) => watch::watch(&args),
        Command::Laws(args) => laws::run(&args),
        Command::Jacobian { file, func, at, sparsity, format, raw, trace, explain, svg, graph, html } => {
            let how = if sparsity {
                deriv::Show::Sparsity
            } else if raw {
                deriv::Show::Raw
            } else if trace {
                deriv::Show::Trace
            } else {
                deriv::Show::Simplified
            };
            let outputs = deriv::Outputs { explain, svg, graph, html };
            deriv::jacobian(&file, &func, at.as_deref(), how, format, &outputs)
        }
        Command::Deriv { file, func, mode, at, schedule, .. } => {
            deriv::deriv(&file, &func, mode, at.as_deref(), schedule.as_deref())
        }
        Command::Cl { file, func, check } => cl::cl(&file, &func, check),
    }
}

/// What `ksc --help` says of exit codes.
const EXIT_CODES: &str = "Exit codes:\n  \
    0  success\n  \
    1  the program has errors: in its text or types (each reported with file, line and column), or at run time; \
    or the C compiler failed\n  \
    2  usage error: a bad command line or `--cflags`, an unreadable input file, or an output file that cannot \
    or may not be written";

/// The limits of README's "Limits" from the environment: the elements of a
/// tensor, the same for the interpreter and for native code lowered by this
/// process, the interpreter's memory (by default half the machine's, as
/// native code's arena) and its stack (`KSC_MAX_STACK`, by default half
/// the memory; native code reads the variable itself); a malformed value
/// of any is refused here.
fn set_limits() -> Result<(), String> {
    use ksc_ir::limits;
    if let Some(text) = std::env::var_os(limits::MAX_ELEMENTS_VAR) {
        limits::set_max_elements(limits::parse_max_elements(&text.to_string_lossy())?);
    }
    let memory = match std::env::var_os(limits::MAX_MEMORY_VAR) {
        Some(text) => Some(limits::parse_bytes(limits::MAX_MEMORY_VAR, &text.to_string_lossy())?),
        None => physical_memory().map(|m| m / 2),
    };
    if let Some(m) = memory {
        limits::set_max_memory(m);
    }
    if let Some(text) = std::env::var_os(limits::MAX_STACK_VAR) {
        limits::set_max_stack(limits::parse_bytes(limits::MAX_STACK_VAR, &text.to_string_lossy())?);
    }
    use ksc_codegen_c::split;
    if let Some(text) = std::env::var_os(split::MAX_STMTS_VAR) {
        split::set_max_stmts(split::parse_max_stmts(&text.to_string_lossy())?);
    }
    Ok(())
}

/// The machine's physical memory in bytes (`MemTotal` of /proc/meminfo).
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

/// mimalloc, counting the bytes in use for the interpreter's limit on
/// memory (`ksc_ir::limits::check_memory`). (With glibc's malloc, half the
/// cycles of checking a 10,000-call chain under `gdef rev` were the
/// allocator's; mimalloc takes a third off that check's time.)
struct CountingAlloc;

unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            ksc_ir::limits::note_heap(layout.size(), true);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            ksc_ir::limits::note_heap(layout.size(), true);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        ksc_ir::limits::note_heap(layout.size(), false);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            ksc_ir::limits::note_heap(layout.size(), false);
            ksc_ir::limits::note_heap(new_size, true);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Exit code for a program with errors.
const FAILURE: u8 = 1;
/// Exit code for usage errors and unreadable files.
const USAGE: u8 = 2;

fn read(path: &Path) -> Result<String, ExitCode> {
    std::fs::read_to_string(path).map_err(|e| {
        eprintln!("error: cannot read `{}`: {e}", path.display());
        ExitCode::from(USAGE)
    })
}

/// Read and check a file, printing its diagnostics. Returns the analysis only
/// if it has no errors.
fn analyze(path: &Path) -> Result<(Analysis, Sources), ExitCode> {
    analyze_with(path, false)
}

fn analyze_with(path: &Path, check_monoids: bool) -> Result<(Analysis, Sources), ExitCode> {
    let Compiled { db, analysis, sources, .. } = compile_with(path, check_monoids)?;
    drop(db);
    Ok((std::sync::Arc::unwrap_or_clone(analysis), sources))
}

/// A file read and checked in an incremental database (ksc-db), whose
/// later stages (loop IR, C) are queries of the same database.
pub(crate) struct Compiled {
    pub db: ksc_db::Database,
    pub file: ksc_db::SourceFile,
    pub analysis: std::sync::Arc<Analysis>,
    pub sources: Sources,
    /// The status line of a long compilation (stopped when dropped).
    pub progress: ksc_db::progress::Progress,
}

/// Read and check a file, printing its diagnostics; fails if it has errors.
pub(crate) fn compile(path: &Path) -> Result<Compiled, ExitCode> {
    compile_with(path, false)
}

/// [`compile`], with `reduce` and `scan` checking their monoid laws at run
/// time when `check_monoids`.
pub(crate) fn compile_with(path: &Path, check_monoids: bool) -> Result<Compiled, ExitCode> {
    let text = read(path)?;
    let db = ksc_db::Database::new();
    let mut progress = ksc_db::progress::Progress::start(db.activity());
    let file = if check_monoids { db.add_file_checking_monoids(text) } else { db.add_file(text) };
    let analysis = ksc_db::analysis(&db, file);
    let sources = Sources::new(&path.display().to_string(), file.text(&db));
    if !analysis.diagnostics.is_empty() {
        // The status line is erased before diagnostics are printed.
        progress.finish();
        sources.emit(&analysis.diagnostics);
        progress = ksc_db::progress::Progress::start(db.activity());
    }
    progress.phase("compiling");
    if let Some(summary) = error_summary(&analysis.diagnostics) {
        eprintln!("error: could not compile `{}` due to {summary}", path.display());
        return Err(ExitCode::from(FAILURE));
    }
    Ok(Compiled { db, file, analysis, sources, progress })
}

/// The first line of `ksc build --emit ks`'s output, by which a later build
/// knows the file as its own.
pub(crate) const EMIT_KS_BANNER: &str = "; Generated by ksc: the program with its derived functions.\n";

/// The program with its derived functions as `.ks`: the file's
/// declarations with every `gdef` replaced by the definitions it generated
/// (and the derivatives of callees they need), callees before callers, so
/// ksc reads, checks and runs it again with the same output. The built-in
/// prelude is not repeated.
pub(crate) fn emit_ks(analysis: &Analysis) -> String {
    use ksc_ir::{Decl, Program};
    let mut decls: Vec<Decl> = analysis.source.decls.iter().filter(|d| !matches!(d, Decl::Gdef(_))).cloned().collect();
    // The derived functions, each after the derived functions it calls.
    let derived = &analysis.derived;
    let mut placed: Vec<bool> = vec![false; derived.len()];
    fn calls(d: &ksc_ir::Def, name: &ksc_ir::FunName) -> bool {
        d.body.exprs.iter().any(|(_, e)| matches!(e, ksc_ir::Expr::Call(ksc_ir::Callee::Fun(f), _) if f == name))
    }
    let mut order = Vec::new();
    while order.len() < derived.len() {
        let before = order.len();
        for (i, d) in derived.iter().enumerate() {
            let ready =
                !placed[i] && derived.iter().enumerate().all(|(j, e)| j == i || placed[j] || !calls(d, &e.name));
            if ready {
                placed[i] = true;
                order.push(i);
            }
        }
        if order.len() == before {
            // A cycle (which the front end's declaration order forbids):
            // keep the rest in derivation order.
            order.extend((0..derived.len()).filter(|&i| !placed[i]));
        }
    }
    // A derived function goes before `main` (and anything else in the file
    // that may call it): put them all right after the last definition they
    // call from the file.
    let mut out: Vec<Decl> = Vec::new();
    let derived_decls: Vec<Decl> = order.into_iter().map(|i| Decl::Def(derived[i].clone())).collect();
    let first_caller = decls.iter().position(|d| match d {
        Decl::Def(def) => derived.iter().any(|x| calls(def, &x.name)),
        _ => false,
    });
    match first_caller {
        Some(k) => {
            out.extend(decls.drain(..k));
            out.extend(derived_decls);
            out.extend(decls);
        }
        None => {
            out.extend(decls);
            out.extend(derived_decls);
        }
    }
    format!("{EMIT_KS_BANNER}{}", Program { decls: out })
}

fn check(path: &Path) -> ExitCode {
    match compile(path) {
        Ok(compiled) => {
            // The process ends here: freeing the database's memos one by
            // one took 6% of checking a 10,000-call chain under `gdef rev`.
            std::mem::forget(compiled);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn fmt(path: &Path) -> ExitCode {
    let text = match read(path) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let (ast, errors) = ksc_syntax::parse_source(&text);
    if !errors.is_empty() {
        let diagnostics: Vec<Diagnostic> =
            errors.into_iter().map(|e| Diagnostic::error(FileRef::Source, e.span, e.message)).collect();
        Sources::new(&path.display().to_string(), &text).emit(&diagnostics);
        eprintln!("error: cannot format `{}`: it does not parse", path.display());
        return ExitCode::from(FAILURE);
    }
    let (decls, _) = ksc_types::lower::lower_file(&ast);
    print!("{}", ksc_ir::Program { decls });
    ExitCode::SUCCESS
}

/// `analyze`, for `ksc run`: the program must define `main`.
fn analyze_main(path: &Path, check_monoids: bool) -> Result<(Analysis, Sources, ksc_ir::FunName), ExitCode> {
    let (analysis, sources) = analyze_with(path, check_monoids)?;
    let main_name = main_of(&analysis, &sources)?;
    Ok((analysis, sources, main_name))
}

/// The name of the program's `main`, or a diagnostic that it has none.
fn main_of(analysis: &Analysis, sources: &Sources) -> Result<ksc_ir::FunName, ExitCode> {
    let Some(main) = analysis.main() else {
        // A `main` with parameters is not one `ksc run` can call: say so
        // where it is.
        let with_params = analysis.source.decls.iter().zip(&analysis.source.spans).find_map(|(d, spans)| match d {
            ksc_ir::Decl::Def(def)
                if def.name.base == "main" && def.name.derivs.is_empty() && !def.params.is_empty() =>
            {
                Some(spans.params)
            }
            _ => None,
        });
        let d = match with_params {
            Some(span) => {
                let mut d = Diagnostic::error(FileRef::Source, span, "`main` takes parameters");
                d.caret("`ksc run` calls `main` with no arguments");
                d.note("write `(def main Integer () ...)` to run the program");
                d
            }
            None => {
                let mut d =
                    Diagnostic::error(FileRef::Source, ksc_syntax::Span::default(), "this program has no `main`");
                d.note("`ksc run` calls `(def main Integer () ...)`; define it to run the program");
                d
            }
        };
        sources.emit(&[d]);
        return Err(ExitCode::from(FAILURE));
    };
    Ok(main.name.clone())
}

/// The smallest stack limit the interpreter is given when the system
/// refuses to reserve a thread stack for the one asked for.
const MIN_INTERPRETER_STACK: u64 = 16 << 20;

fn run(path: &Path, check_monoids: bool) -> ExitCode {
    let (analysis, sources, main_name) = match analyze_main(path, check_monoids) {
        Ok(x) => x,
        Err(code) => return code,
    };
    // The interpreter recurses on the program's nested calls: they may use
    // `KSC_MAX_STACK` bytes of native stack (as native code's may), on a
    // thread with that much and the interpreter's slack (address space,
    // backed by memory only as the calls reach it); a smaller one if the
    // system refuses to reserve so much.
    let mut limit = ksc_ir::limits::max_stack().min(1 << 46);
    let (defs, main_name) = (&analysis, &main_name);
    let result = std::thread::scope(|s| loop {
        let stack_limit = limit as usize;
        let worker =
            std::thread::Builder::new().stack_size(stack_limit + ksc_eval::STACK_SLACK).spawn_scoped(s, move || {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let mut interp = Interpreter::new(defs.defs());
                interp.set_stack_limit(stack_limit);
                let result = interp.call(main_name, Value::Tuple(Vec::new().into()), &mut out);
                let _ = out.flush();
                result.map(|_| ()).map_err(Box::new)
            });
        match worker {
            Ok(handle) => break handle.join().map_err(|_| ()),
            Err(_) if limit > MIN_INTERPRETER_STACK => limit /= 2,
            Err(_) => break Err(()),
        }
    });
    match result {
        Ok(Ok(_)) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            sources.emit(&[runtime_diagnostic(&analysis, &e)]);
            ExitCode::from(FAILURE)
        }
        Err(()) => {
            eprintln!("error: internal error in the interpreter (this is a ksc bug)");
            ExitCode::from(FAILURE)
        }
    }
}

/// How many calling frames a run-time error shows.
const SHOWN_FRAMES: usize = 6;

fn runtime_diagnostic(analysis: &Analysis, e: &RuntimeError) -> Diagnostic {
    let place = e.location.as_ref().and_then(|(f, x)| analysis.locate(f, *x));
    let (file, span) = place.unwrap_or((FileRef::Source, ksc_syntax::Span::default()));
    let mut d = Diagnostic::error(file, span, format!("run-time error: {}", e.message));
    if let Some((f, _)) = &e.location {
        d.caret(format!("in `{}`", f.short()));
    }
    for (f, x) in e.stack.iter().take(SHOWN_FRAMES) {
        if let Some((file, span)) = analysis.locate(f, *x) {
            d.label(file, span, format!("called from `{}`", f.short()));
        }
    }
    let frames = e.stack.len() + e.elided;
    if frames > SHOWN_FRAMES {
        d.note(format!("... and {} more calling frames", frames - SHOWN_FRAMES));
    }
    d
}
