//! Running the system C compiler, caching what it produces by content
//! hash, and running compiled programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::emit::{RUNTIME_C, RUNTIME_H};

/// What to produce from a C file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artefact {
    Executable,
    SharedLibrary,
    Object,
}

impl Artefact {
    fn extension(self) -> &'static str {
        match self {
            Artefact::Executable => "exe",
            Artefact::SharedLibrary => "so",
            Artefact::Object => "o",
        }
    }
}

/// How to run the C compiler.
#[derive(Clone, Debug)]
pub struct CcConfig {
    /// The compiler: `$CC`, else `cc`.
    pub cc: String,
    /// Optimisation flags (default `-O3 -march=native`, or `$KSC_CFLAGS`).
    pub cflags: Vec<String>,
    /// Where compiled artefacts are cached (none: compile every time into
    /// a temporary directory).
    pub cache_dir: Option<PathBuf>,
    /// C sources, objects or libraries compiled and linked with an
    /// executable or shared library (`--link`): the definitions of the
    /// program's external functions.
    pub link: Vec<PathBuf>,
}

impl CcConfig {
    /// Lets the C compiler combine the sums and maxima that the generated
    /// C marks (`reassoc.rs`) in any order: the macro that makes the marks
    /// OpenMP reductions, among the flags (so also in the cache's key).
    pub fn reassociate(&mut self) {
        self.cflags.push("-DKSC_REASSOCIATE".into());
    }
}

/// Flags that are part of the semantics, always passed: no contraction of
/// `a * b + c` into a fused multiply-add (it would change results), GNU C99
/// for `__builtin_*_overflow`, no warnings (the code is generated). Neither
/// `errno` nor the floating-point exception flags are read, so the
/// compiler may compute both sides of a select (`-fno-trapping-math`),
/// which is how the runtime's branch-free `exp` and `log` vectorise
/// without AVX-512's masked operations; results are unchanged.
pub const SEMANTIC_FLAGS: &[&str] = &["-std=gnu99", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-w"];

/// Flags for multi-core code: OpenMP, for the loops `parallel.rs` finds
/// independent. Passed when the compiler accepts them; without them the
/// same C is serial (the runtime's `_OPENMP` tests).
pub const PARALLEL_FLAGS: &[&str] = &["-fopenmp"];

/// Flags that let the C compiler use every core on one large program:
/// link-time optimisation with a job per core. The compiler's whole-program
/// pass decides inlining first, then compiles the program's functions in
/// partitions at once. On 2 cores this made building gmm.ks 1.4 times
/// faster, ba.ks 1.3 and hand.ks 1.8. Results are unchanged: the semantic
/// flags hold in every partition.
pub const LTO_FLAGS: &[&str] = &["-flto=auto"];

/// The fewest lines of C for which [`LTO_FLAGS`] pay. Below about 4,000
/// lines (the runtime alone is about 1,000), the extra link step costs more
/// than the parallel partitions save: lse.ks (1,400 lines) is 0.02 s slower
/// with them, lstm.ks (5,900) 1.13 times faster.
pub const LTO_MIN_LINES: usize = 4000;

/// Compiles a program's C without the runtime's functions that are not
/// inline: the runtime's object is linked instead (`ksc_runtime.h`).
pub const LINKED_RUNTIME_FLAG: &str = "-DKSRT_LINKED";

/// The default optimisation flags.
pub const DEFAULT_CFLAGS: &str = "-O3 -march=native";

impl CcConfig {
    /// The configuration from the environment: `$CC`, `$KSC_CFLAGS`, and the
    /// cache directory `$KSC_CACHE_DIR`, else `$XDG_CACHE_HOME/ksc`, else
    /// `~/.cache/ksc`.
    pub fn from_env() -> CcConfig {
        let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
        let flags = std::env::var("KSC_CFLAGS").ok().unwrap_or_else(|| DEFAULT_CFLAGS.into());
        CcConfig { cc, cflags: split_flags(&flags), cache_dir: default_cache_dir(), link: Vec::new() }
    }
}

pub fn split_flags(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn default_cache_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("KSC_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("ksc")))
        .or_else(|| env("HOME").map(|h| h.join(".cache").join("ksc")))
}

/// Why compiling the C failed.
#[derive(Debug)]
pub enum BuildError {
    /// The C compiler could not be started.
    NoCompiler {
        cc: String,
        reason: String,
    },
    /// The C compiler rejected the generated code: a ksc bug. The C file is kept.
    CompilerFailed {
        cc: String,
        stderr: String,
        c_file: PathBuf,
    },
    /// The C compiler rejects the flags it was given (`--cflags`,
    /// `$KSC_CFLAGS`): it fails on an empty program with them too.
    BadFlags {
        cc: String,
        flags: String,
        stderr: String,
    },
    /// The generated code compiles, but linking it failed: the files given
    /// with `--link` do not compile, or no file defines the C functions
    /// `undefined` (external functions) names.
    LinkFailed {
        cc: String,
        undefined: Vec<String>,
        stderr: String,
    },
    Io(String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::NoCompiler { cc, reason } => write!(
                f,
                "no C compiler found: cannot run `{cc}` ({reason}); install one (e.g. `apt-get install gcc`) \
                 or set $CC, or run with `--interp`"
            ),
            BuildError::CompilerFailed { cc, stderr, c_file } => write!(
                f,
                "the C compiler `{cc}` rejected the generated code; this is a bug in ksc, please report it. \
                 The C file is kept at {}\n{stderr}",
                c_file.display()
            ),
            BuildError::BadFlags { cc, flags, stderr } => write!(
                f,
                "the C compiler `{cc}` rejects the flags `{flags}` (from `--cflags` or `$KSC_CFLAGS`; the default \
                 is `{DEFAULT_CFLAGS}`)\n{stderr}"
            ),
            BuildError::LinkFailed { cc, undefined, stderr } if undefined.is_empty() => write!(
                f,
                "the C compiler `{cc}` failed on the files given with `--link` (the generated code compiles)\n{stderr}"
            ),
            BuildError::LinkFailed { undefined, .. } => write!(
                f,
                "linking failed: no file given with `--link` defines {}",
                undefined.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ")
            ),
            BuildError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BuildError {}

/// A 128-bit FNV-1a hash, as hex: the cache key of a compilation.
pub fn content_hash(parts: &[&[u8]]) -> String {
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for p in parts {
        for &b in *p {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
        // Separate the parts.
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

/// Compiles C text (and, for a library, its header `header_name`) into an
/// artefact, reusing a cached one with the same content hash. Returns the
/// path of the artefact.
pub fn compile_c(
    c_text: &str,
    header: Option<(&str, &str)>,
    kind: Artefact,
    cfg: &CcConfig,
) -> Result<PathBuf, BuildError> {
    let lto = uses_lto(c_text, kind, cfg);
    let mut parts: Vec<&[u8]> = vec![c_text.as_bytes(), kind.extension().as_bytes()];
    parts.extend(compiler_parts(cfg));
    // An object is self-contained; an executable or a library is linked
    // with the runtime's object.
    let runtime = kind != Artefact::Object;
    let mut flags: Vec<&str> = if lto { LTO_FLAGS.to_vec() } else { Vec::new() };
    if runtime {
        flags.push(LINKED_RUNTIME_FLAG);
    }
    parts.extend(flags.iter().map(|f| f.as_bytes()));
    if let Some((name, text)) = header {
        parts.push(name.as_bytes());
        parts.push(text.as_bytes());
    }
    let (out, work) = match slot(cfg, parts, kind)? {
        Slot::Cached(out) => return Ok(out),
        Slot::Build { out, work } => (out, work),
    };
    let c_file = work.join("program.c");
    std::fs::write(&c_file, c_text).map_err(|e| BuildError::Io(format!("cannot write {}: {e}", c_file.display())))?;
    if let Some((name, text)) = header {
        std::fs::write(work.join(name), text).map_err(|e| BuildError::Io(format!("cannot write the header: {e}")))?;
    }
    let tmp_out = work.join(format!("out.{}", kind.extension()));
    let built = if runtime && cores() > 1 && !runtime_cached(cfg) {
        // A first build with this compiler and flags: the runtime's object
        // compiles on another core while the program compiles to an
        // object, which is then linked with it.
        let obj = work.join("program.o");
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // (A failure shows again, and is reported, when linking.)
                let _ = runtime_object(cfg, PARALLEL_FLAGS);
            });
            run_cc_parallel(cfg, std::slice::from_ref(&c_file), &obj, Artefact::Object, &flags, false)
        })
        .and_then(|()| run_cc_parallel(cfg, &[obj], &tmp_out, kind, &flags, true))
    } else {
        run_cc_parallel(cfg, std::slice::from_ref(&c_file), &tmp_out, kind, &flags, runtime)
    };
    if let Err(e) = built {
        // Does the generated code compile by itself? Then linking failed:
        // the linked files, or external functions nothing defines.
        if let BuildError::CompilerFailed { stderr, .. } = &e {
            let linking = kind != Artefact::Object && (!cfg.link.is_empty() || stderr.contains("undefined reference"));
            if linking && run_cc(cfg, &c_file, &work.join("probe.o"), Artefact::Object).is_ok() {
                let undefined = undefined_symbols(stderr);
                let stderr = stderr.clone();
                let _ = std::fs::remove_dir_all(&work);
                return Err(BuildError::LinkFailed { cc: cfg.cc.clone(), undefined, stderr });
            }
        }
        // Is it the flags? Then an empty program fails with them too, and
        // it is not ksc's code (whose C file is kept for the bug report
        // otherwise).
        if matches!(e, BuildError::CompilerFailed { .. }) {
            let probe = work.join("flags.c");
            if std::fs::write(&probe, "int main(void) { return 0; }\n").is_ok() {
                if let Err(BuildError::CompilerFailed { stderr, .. }) =
                    run_cc(cfg, &probe, &work.join("flags.out"), kind)
                {
                    let _ = std::fs::remove_dir_all(&work);
                    return Err(BuildError::BadFlags { cc: cfg.cc.clone(), flags: cfg.cflags.join(" "), stderr });
                }
            }
        }
        return Err(e);
    }
    std::fs::rename(&tmp_out, &out).map_err(|e| BuildError::Io(format!("cannot write {}: {e}", out.display())))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(out)
}

/// Compiles a program into an artefact: on a machine of several cores, as
/// its translation units (`prog.units`, for a large program), each
/// compiled on its own, as many at once as there are cores, and cached by
/// its text (so an edit recompiles only the units whose C changed), then
/// linked; else, and for an object, or when the units do not build (the
/// single file then gives the diagnosis), as the single file `prog.c`
/// ([`compile_c`]; each unit parses the runtime's header again, which one
/// core would pay for). An executable or a library is linked with the
/// runtime's object ([`LINKED_RUNTIME_FLAG`]). A library's header is
/// written as `header_name`.
/// `progress(done, total)` is told, from the compiling threads, how many
/// of the units not cached yet are compiled.
pub fn compile_program(
    prog: &crate::CProgram,
    header_name: Option<&str>,
    kind: Artefact,
    cfg: &CcConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<PathBuf, BuildError> {
    let header = header_name.map(|n| (n, prog.header.as_str()));
    if prog.units.len() < 2 || kind == Artefact::Object || cores() < 2 {
        return compile_c(&prog.c, header, kind, cfg);
    }
    compile_units(&prog.units, header, kind, cfg, progress).or_else(|units_failed| {
        let single = compile_c(&prog.c, header, kind, cfg);
        if single.is_ok() {
            // The units are at fault (the program itself builds): say so,
            // rather than lose the split without a word.
            eprintln!(
                "warning: ksc's translation units of this program did not build, so it was compiled as one \
                 file (a bug in ksc, please report it): {units_failed}"
            );
        }
        single
    })
}

/// The cores the C compiler may use at once (1 if unknown).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The cache directory, else a fresh temporary one named by `key`.
fn cache_dir(cfg: &CcConfig, key: &str) -> Result<PathBuf, BuildError> {
    match &cfg.cache_dir {
        Some(d) if std::fs::create_dir_all(d).is_ok() => Ok(d.clone()),
        _ => {
            let d = std::env::temp_dir().join(format!("ksc-{}-{key}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| BuildError::Io(format!("cannot create {}: {e}", d.display())))?;
            Ok(d)
        }
    }
}

/// Where an artefact goes: cached already, or to be built in `work` (a
/// fresh directory in the cache) and moved to `out`.
enum Slot {
    Cached(PathBuf),
    Build { out: PathBuf, work: PathBuf },
}

/// The slot of the artefact of kind `kind` whose cache key is `parts` and
/// the files given to link.
fn slot(cfg: &CcConfig, parts: Vec<&[u8]>, kind: Artefact) -> Result<Slot, BuildError> {
    let linked = linked_files(cfg)?;
    let mut all = parts;
    for (ext, bytes) in &linked {
        all.push(ext);
        all.push(bytes);
    }
    slot_of(cfg, content_hash(&all), kind)
}

/// The slot of the artefact of kind `kind` whose cache key is `key`. Its
/// work directory is this call's own (several threads of a process may
/// build the same artefact at once; the last to finish replaces the file).
fn slot_of(cfg: &CcConfig, key: String, kind: Artefact) -> Result<Slot, BuildError> {
    static WORK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = cache_dir(cfg, &key)?;
    let out = dir.join(format!("{key}.{}", kind.extension()));
    if out.exists() {
        return Ok(Slot::Cached(out));
    }
    let n = WORK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = dir.join(format!("{key}.{}-{n}.tmp", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| BuildError::Io(format!("cannot create {}: {e}", work.display())))?;
    Ok(Slot::Build { out, work })
}

/// A file given to link: its extension and bytes.
type LinkedFile = (Vec<u8>, Vec<u8>);

/// The files given to link (`--link`), by content and kind (a `.c` is
/// compiled, an `.o` only linked).
fn linked_files(cfg: &CcConfig) -> Result<Vec<LinkedFile>, BuildError> {
    cfg.link
        .iter()
        .map(|l| {
            let bytes = std::fs::read(l)
                .map_err(|e| BuildError::Io(format!("cannot read `{}` (given with `--link`): {e}", l.display())))?;
            Ok((l.extension().map(|x| x.as_encoded_bytes().to_vec()).unwrap_or_default(), bytes))
        })
        .collect()
}

/// The key parts every compilation shares: the compiler and its flags.
fn compiler_parts(cfg: &CcConfig) -> Vec<&[u8]> {
    let mut parts: Vec<&[u8]> = vec![cfg.cc.as_bytes()];
    for f in PARALLEL_FLAGS.iter().chain(SEMANTIC_FLAGS) {
        parts.push(f.as_bytes());
    }
    for f in &cfg.cflags {
        parts.push(f.as_bytes());
    }
    parts
}

/// [`compile_program`]'s separate compilation of the units.
fn compile_units(
    units: &[String],
    header: Option<(&str, &str)>,
    kind: Artefact,
    cfg: &CcConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<PathBuf, BuildError> {
    let header_parts: Vec<&[u8]> = header.map(|(n, t)| vec![n.as_bytes(), t.as_bytes()]).unwrap_or_default();
    let keys: Vec<String> = units
        .iter()
        .map(|u| {
            let mut parts = vec![u.as_bytes(), b"unit".as_slice(), LINKED_RUNTIME_FLAG.as_bytes()];
            parts.extend(compiler_parts(cfg));
            parts.extend(&header_parts);
            content_hash(&parts)
        })
        .collect();
    // The artefact: the units' objects, linked as `kind` with the files
    // given to link.
    let mut parts: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    parts.push(kind.extension().as_bytes());
    parts.extend(compiler_parts(cfg));
    let (out, work) = match slot(cfg, parts, kind)? {
        Slot::Cached(out) => return Ok(out),
        Slot::Build { out, work } => (out, work),
    };
    let dir = work.parent().expect("the work directory is in the cache").to_path_buf();
    let result = (|| {
        if let Some((name, text)) = header {
            std::fs::write(work.join(name), text)
                .map_err(|e| BuildError::Io(format!("cannot write the header: {e}")))?;
        }
        // The objects not cached yet, the largest first, compiled by as
        // many threads as there are cores.
        let mut todo: Vec<usize> = (0..units.len()).filter(|&i| !dir.join(format!("{}.o", keys[i])).exists()).collect();
        todo.sort_by_key(|&i| std::cmp::Reverse(units[i].len()));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::atomic::AtomicUsize::new(0);
        if !todo.is_empty() {
            progress(0, todo.len());
        }
        let threads = cores().clamp(1, todo.len().max(1));
        let failed: std::sync::Mutex<Option<BuildError>> = std::sync::Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = todo.get(at) else {
                        // The last job: the runtime's object, which the
                        // link needs, if this is the first build with this
                        // compiler and flags (a failure shows again, and is
                        // reported, when linking).
                        if at == todo.len() {
                            let _ = runtime_object(cfg, PARALLEL_FLAGS);
                        }
                        break;
                    };
                    if failed.lock().map_or(true, |f| f.is_some()) {
                        break;
                    }
                    let c_file = work.join(format!("unit{i}.c"));
                    let tmp = work.join(format!("unit{i}.o"));
                    let r = std::fs::write(&c_file, &units[i])
                        .map_err(|e| BuildError::Io(format!("cannot write {}: {e}", c_file.display())))
                        .and_then(|()| {
                            run_cc_parallel(
                                cfg,
                                std::slice::from_ref(&c_file),
                                &tmp,
                                Artefact::Object,
                                &[LINKED_RUNTIME_FLAG],
                                false,
                            )
                        })
                        .and_then(|()| {
                            let obj = dir.join(format!("{}.o", keys[i]));
                            std::fs::rename(&tmp, &obj)
                                .map_err(|e| BuildError::Io(format!("cannot write {}: {e}", obj.display())))
                        });
                    match r {
                        Ok(()) => progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, todo.len()),
                        Err(e) => {
                            if let Ok(mut f) = failed.lock() {
                                f.get_or_insert(e);
                            }
                        }
                    }
                });
            }
        });
        if let Some(e) = failed.into_inner().ok().flatten() {
            return Err(e);
        }
        let objs: Vec<PathBuf> = keys.iter().map(|k| dir.join(format!("{k}.o"))).collect();
        let tmp_out = work.join(format!("out.{}", kind.extension()));
        run_cc_parallel(cfg, &objs, &tmp_out, kind, &[], true)?;
        std::fs::rename(&tmp_out, &out).map_err(|e| BuildError::Io(format!("cannot write {}: {e}", out.display())))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result.map(|()| out)
}

/// The symbols a linker's messages say are undefined (GNU ld: "undefined
/// reference to `sym'"), each once, in order.
fn undefined_symbols(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stderr.lines() {
        if let Some((_, rest)) = line.split_once("undefined reference to `") {
            let sym = rest.split('\'').next().unwrap_or_default().to_string();
            if !sym.is_empty() && !out.contains(&sym) {
                out.push(sym);
            }
        }
    }
    out
}

/// Does compiling `c_text` into `kind` use [`LTO_FLAGS`]? For a linked
/// artefact (an object stays plain code, for any linker) of at least
/// [`LTO_MIN_LINES`] lines, optimised, on a machine with more than one
/// core, when the compiler accepts the flags.
// pub for the integration tests (tests/driver.rs).
#[doc(hidden)]
pub fn uses_lto(c_text: &str, kind: Artefact, cfg: &CcConfig) -> bool {
    kind != Artefact::Object
        && optimises(&cfg.cflags)
        && cores() > 1
        && c_text.lines().count() >= LTO_MIN_LINES
        && accepts_lto(cfg)
}

/// Do the flags ask for optimisation (their last `-O` level is not `-O0` or
/// `-Og`)? Unoptimised, the compiler does not split the work, and LTO only
/// adds its link step: gmm.ks's C at `-O0` took 0.98 s with it, 0.63 s
/// without.
// pub for the integration tests (tests/driver.rs).
#[doc(hidden)]
pub fn optimises(cflags: &[String]) -> bool {
    cflags.iter().rev().find(|f| f.starts_with("-O")).is_some_and(|f| f != "-O0" && f != "-Og")
}

/// Does the compiler build and link an empty program with [`LTO_FLAGS`] and
/// the configured flags? Asked once per compiler and flags in a process.
/// (GCC does; clang rejects `-flto=auto`; a compiler without a linker
/// plugin fails to link.)
fn accepts_lto(cfg: &CcConfig) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    // Keyed by the compiler and its flags, joined.
    static KNOWN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let key = format!("{}\0{}", cfg.cc, cfg.cflags.join("\0"));
    let known = KNOWN.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(&ok) = known.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return ok;
    }
    let dir =
        std::env::temp_dir().join(format!("ksc-lto-probe-{}-{:?}", std::process::id(), std::thread::current().id()));
    let probe = dir.join("probe.c");
    let ok = std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(&probe, "int main(void) { return 0; }\n").is_ok()
        && Command::new(&cfg.cc)
            .args(&cfg.cflags)
            .args(SEMANTIC_FLAGS)
            .args(LTO_FLAGS)
            .arg("-o")
            .arg(dir.join("probe"))
            .arg(&probe)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir_all(&dir);
    known.lock().unwrap_or_else(|e| e.into_inner()).insert(key, ok);
    ok
}

/// Runs the C compiler on one file, with OpenMP ([`PARALLEL_FLAGS`]) if the
/// compiler has it, else without (a compiler without OpenMP's runtime, as
/// clang may be, fails on the flag, and the code is then serial).
pub fn run_cc(cfg: &CcConfig, c_file: &Path, out: &Path, kind: Artefact) -> Result<(), BuildError> {
    run_cc_parallel(cfg, &[c_file.to_path_buf()], out, kind, &[], false)
}

/// Runs the C compiler on `inputs` with [`PARALLEL_FLAGS`] and `extra`,
/// and, if that fails, again without the parallel flags (a compiler
/// without OpenMP); with the runtime's object compiled the same way among
/// the inputs if `runtime`.
fn run_cc_parallel(
    cfg: &CcConfig,
    inputs: &[PathBuf],
    out: &Path,
    kind: Artefact,
    extra: &[&str],
    runtime: bool,
) -> Result<(), BuildError> {
    let attempt = |parallel: &[&str]| {
        let mut inputs = inputs.to_vec();
        if runtime {
            inputs.push(runtime_object(cfg, parallel)?);
        }
        run_cc_inputs(cfg, &inputs, out, kind, &[parallel, extra].concat())
    };
    match attempt(PARALLEL_FLAGS) {
        Err(BuildError::CompilerFailed { .. }) => attempt(&[]),
        r => r,
    }
}

/// The runtime's functions that are not inline (`ksc_runtime.c`), compiled
/// with `parallel` (the parallel flags, or none) into an object in the
/// cache, once per compiler, flags and runtime, for the programs compiled
/// with [`LINKED_RUNTIME_FLAG`] to be linked with.
fn runtime_object(cfg: &CcConfig, parallel: &[&str]) -> Result<PathBuf, BuildError> {
    // One build at a time in a process: a thread that needs the object
    // while another builds it (`compile_units`' last job) waits for it.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let (out, work) = match slot_of(cfg, runtime_key(cfg, parallel), Artefact::Object)? {
        Slot::Cached(out) => return Ok(out),
        Slot::Build { out, work } => (out, work),
    };
    let c_file = work.join("ksc_runtime.c");
    let tmp = work.join("ksc_runtime.o");
    std::fs::write(&c_file, format!("{RUNTIME_H}{RUNTIME_C}"))
        .map_err(|e| BuildError::Io(format!("cannot write {}: {e}", c_file.display())))?;
    // (Kept if the compiler rejects it, for the bug report.)
    run_cc_inputs(
        cfg,
        std::slice::from_ref(&c_file),
        &tmp,
        Artefact::Object,
        &[parallel, &[LINKED_RUNTIME_FLAG]].concat(),
    )?;
    std::fs::rename(&tmp, &out).map_err(|e| BuildError::Io(format!("cannot write {}: {e}", out.display())))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(out)
}

/// The cache key of the runtime's object ([`runtime_object`]).
fn runtime_key(cfg: &CcConfig, parallel: &[&str]) -> String {
    let mut parts: Vec<&[u8]> = vec![RUNTIME_H.as_bytes(), RUNTIME_C.as_bytes(), b"runtime"];
    parts.extend(compiler_parts(cfg));
    parts.extend(parallel.iter().map(|f| f.as_bytes()));
    content_hash(&parts)
}

/// Is the runtime's object with [`PARALLEL_FLAGS`] in the cache already?
fn runtime_cached(cfg: &CcConfig) -> bool {
    let key = runtime_key(cfg, PARALLEL_FLAGS);
    cache_dir(cfg, &key).is_ok_and(|d| d.join(format!("{key}.{}", Artefact::Object.extension())).exists())
}

/// Runs the C compiler on `inputs` (C files, or objects to link) with the
/// flags of [`run_cc`] and `extra`.
fn run_cc_inputs(
    cfg: &CcConfig,
    inputs: &[PathBuf],
    out: &Path,
    kind: Artefact,
    extra: &[&str],
) -> Result<(), BuildError> {
    let c_file = &inputs[0];
    let mut cmd = Command::new(&cfg.cc);
    cmd.args(&cfg.cflags).args(SEMANTIC_FLAGS).args(extra);
    match kind {
        Artefact::Executable => {}
        Artefact::SharedLibrary => {
            cmd.args(["-shared", "-fPIC"]);
        }
        Artefact::Object => {
            cmd.args(["-c", "-fPIC"]);
        }
    }
    cmd.arg("-o").arg(out).args(inputs);
    if kind != Artefact::Object {
        cmd.args(&cfg.link);
        cmd.args(["-lm", "-pthread"]);
    }
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BuildError::NoCompiler { cc: cfg.cc.clone(), reason: e.to_string() })?;
    if !output.status.success() {
        return Err(BuildError::CompilerFailed {
            cc: cfg.cc.clone(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            c_file: c_file.to_path_buf(),
        });
    }
    Ok(())
}

/// How a compiled program ended.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Success,
    /// A run-time error: the message, the site, and the sites of the calls
    /// it happened under (innermost first; at most the innermost 10,000,
    /// and how many more there are).
    Failed {
        message: String,
        site: i64,
        frames: Vec<i64>,
        elided: usize,
    },
    /// Any other exit (a signal, an exit code other than 0 and 1).
    Abnormal(String),
}

/// Runs a compiled program with stdout and stderr inherited and `env` added
/// to its environment (`OMP_NUM_THREADS` for `ksc run --threads`); a
/// run-time error is reported through a file rather than printed.
pub fn run_executable(exe: &Path, args: &[String], env: &[(&str, String)]) -> Result<Outcome, String> {
    let report = std::env::temp_dir().join(format!(
        "ksc-error-{}-{}",
        std::process::id(),
        content_hash(&[exe.as_os_str().as_encoded_bytes()])
    ));
    let _ = std::fs::remove_file(&report);
    let status = Command::new(exe)
        .args(args)
        .env("KSC_ERROR_FILE", &report)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if status.success() {
        return Ok(Outcome::Success);
    }
    if let Ok(text) = std::fs::read_to_string(&report) {
        let _ = std::fs::remove_file(&report);
        let mut lines = text.lines();
        let message = lines.next().unwrap_or_default().to_string();
        let site = lines.next().and_then(|s| s.trim().parse().ok()).unwrap_or(-1);
        let frames = lines.next().unwrap_or_default().split_whitespace().filter_map(|s| s.parse().ok()).collect();
        let elided = lines.next().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        return Ok(Outcome::Failed { message, site, frames, elided });
    }
    Ok(Outcome::Abnormal(match status.code() {
        Some(c) => format!("exit code {c}"),
        None => {
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                match status.signal() {
                    Some(s) => format!("signal {s}"),
                    None => "an unknown status".into(),
                }
            }
            #[cfg(not(unix))]
            {
                "an unknown status".into()
            }
        }
    }))
}
