//! C99 (with GNU `__builtin_*` overflow checks) from the loop IR.
//!
//! One C function per loop-IR function, named by `ksc_lower::names`; every
//! function takes the arena as its first argument. Types:
//!
//! | ks | C |
//! |---|---|
//! | `Float` | `double` |
//! | `Integer` | `int64_t` |
//! | `Bool` | `bool` |
//! | `String` | `const char *` |
//! | `(Tuple T1 .. Tn)` | `struct { T1 f0; ..; Tn fn-1; }` named `ks_t<n>..` (unit: `{ char unit; }`) |
//! | `(Vec T)` | `struct { int64_t size; T *data; }` named `ks_T1..` |
//! | `(Tensor r T)` | `struct { int64_t size[r]; T *data; }` (row-major) |

use std::fmt::Write;

use ksc_ir::Type;
use ksc_lower::ir::*;
use ksc_lower::names::mangle_type;

use rustc_hash::{FxHashMap, FxHashSet};

/// A location of the source, for the site table.
#[derive(Clone, Debug)]
pub struct SiteLocation {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// A program whose `main` runs the module's `main` (functions static).
    Executable,
    /// A library: every function exported, with a header.
    Library,
}

/// The generated C: the program text and, for a library, its header.
#[derive(Clone, Debug, PartialEq)]
pub struct CProgram {
    /// The whole program as one self-contained C file (`ksc build --emit
    /// c` writes it).
    pub c: String,
    pub header: String,
    /// The same program as separate translation units, for a large program
    /// (empty otherwise): the C compiler compiles them concurrently and
    /// caches each by its text, so an edit recompiles only the units whose
    /// C changed ([`crate::driver::compile_program`]). Unit 0 holds the
    /// small functions and what the program has once (the site table, the
    /// arena's functions or `main`); the large functions
    /// ([`UNIT_MIN_LINES`]) have units of their own, with static copies of
    /// the small functions they call, and hidden entries (`<f>$x`) for the
    /// calls from other units (docs/native.md, "Translation units").
    pub units: Vec<String>,
}

/// A function of at least this many lines of C is a translation unit of
/// its own (when the program is split: [`UNITS_MIN_LINES`]).
pub const UNIT_MIN_LINES: usize = 300;

/// A program of at least this many lines of C is split into translation
/// units. Each unit compiles the runtime's header again, and the C
/// compiler's optimisations across functions matter little in ksc's code
/// (each function's callees are inlined by ksc where it pays): gmm, lse,
/// lstm, nnmf, hand and ba ran as fast without them (interleaved A/B).
pub const UNITS_MIN_LINES: usize = 4000;

/// The C runtime: its declarations, macros and inline functions, which every
/// generated C file includes, ...
pub const RUNTIME_H: &str = include_str!("ksc_runtime.h");

/// ... and its functions that are not inline, which a C file has after the
/// header unless compiled with `-DKSRT_LINKED` (then they are linked from
/// an object compiled once: [`crate::driver::compile_program`]).
pub const RUNTIME_C: &str = include_str!("ksc_runtime.c");

/// The C type of a ks type.
pub fn c_type(t: &Type) -> String {
    match t {
        Type::Float => "double".into(),
        Type::Integer => "int64_t".into(),
        Type::Bool => "bool".into(),
        Type::String => "const char *".into(),
        _ => format!("ks_{}", mangle_type(t)),
    }
}

/// What a function's C reads of a function it calls.
#[derive(Clone, Debug, PartialEq)]
pub struct CalleeSig {
    pub c_name: String,
    pub params: Vec<Type>,
    /// May it print (itself or through its calls)? A loop that calls it
    /// stays serial (`parallel.rs`).
    pub prints: bool,
    /// Is it an external function (a user's `edef`), called with the
    /// exported convention (every parameter as its leaves)?
    pub external: bool,
}

impl CalleeSig {
    /// The signature of `f`, which prints (transitively) if `prints`.
    pub fn of(f: &Func, prints: bool) -> CalleeSig {
        CalleeSig {
            c_name: f.c_name.clone(),
            params: f.params.iter().map(|p| f.ty(*p).clone()).collect(),
            prints,
            external: f.external,
        }
    }
}

/// The functions `f` calls, with what its C reads of them; `prints[k]`:
/// may function `FuncId(k)` print (`ksc_lower::passes::effectful_funcs`)?
pub fn callees(m: &Module, prints: &[bool], f: &Func) -> Vec<(FuncId, CalleeSig)> {
    callees_with(f, &mut |g| Some(CalleeSig::of(m.func(g), prints[g.0 as usize]))).unwrap_or_default()
}

/// [`callees`], with the signature of function `g` of the module from
/// `sig(g)`; `None` if one of them has none.
pub fn callees_with(f: &Func, sig: &mut dyn FnMut(FuncId) -> Option<CalleeSig>) -> Option<Vec<(FuncId, CalleeSig)>> {
    called(f).into_iter().map(|g| sig(g).map(|c| (g, c))).collect()
}

/// The functions `f` calls, each once, in the order of their first call.
fn called(f: &Func) -> Vec<FuncId> {
    let mut out = Vec::new();
    walk(&f.body, &mut |s| {
        if let Stmt::Let(_, Rhs::Call { func, .. }) = s {
            if !out.contains(func) {
                out.push(*func);
            }
        }
    });
    out
}

#[derive(Default)]
struct Emitter {
    types: Vec<Type>,
    seen: FxHashSet<Type>,
    prints: FxHashSet<Type>,
    copies: FxHashSet<Type>,
}

/// Generates C for a module. `sites` gives the source location of each
/// site of `m.sites`; `header_name` is the name the C file includes its
/// header by (libraries only).
pub fn emit(m: &Module, sites: &[SiteLocation], target: Target, checked: bool, header_name: &str) -> CProgram {
    let funcs: Vec<&Func> = m.funcs.iter().collect();
    let view = ModuleView { funcs: &funcs, sites: &m.sites, main: m.main };
    let prints = ksc_lower::passes::effectful_funcs(m);
    emit_with(&view, sites, target, header_name, &mut |id| {
        let f = m.func(id);
        std::borrow::Cow::Owned(function(f, &callees(m, &prints, f), target, checked))
    })
}

/// The C of one function, and the types and helpers it needs.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionC {
    pub text: String,
    /// The types it uses (tuples and tensors), each after its components.
    pub types: Vec<Type>,
    /// The types it prints and copies (helpers are generated for them).
    pub prints: Vec<Type>,
    pub copies: Vec<Type>,
}

/// What [`emit_with`] reads of a module: its functions (their signatures
/// and names), its sites and its `main`.
pub struct ModuleView<'m> {
    pub funcs: &'m [&'m Func],
    pub sites: &'m [Site],
    pub main: Option<FuncId>,
}

/// [`emit`], with each function's C from `function_c` (which gives what
/// [`function`] gives: the incremental database keeps them per function,
/// and lends them).
pub fn emit_with<'f>(
    m: &ModuleView,
    sites: &[SiteLocation],
    target: Target,
    header_name: &str,
    function_c: &mut dyn FnMut(FuncId) -> std::borrow::Cow<'f, FunctionC>,
) -> CProgram {
    let mut e = Emitter::default();
    e.add_type(&Type::unit());
    let fcs: Vec<std::borrow::Cow<'f, FunctionC>> = (0..m.funcs.len()).map(|i| function_c(FuncId(i as u32))).collect();
    for fc in &fcs {
        for t in &fc.types {
            if e.seen.insert(t.clone()) {
                e.types.push(t.clone());
            }
        }
        e.prints.extend(fc.prints.iter().cloned());
        e.copies.extend(fc.copies.iter().cloned());
    }
    let mut types = String::new();
    for t in e.types.clone() {
        types.push_str(&type_def(&t));
    }
    let nsites = m.sites.len();
    // Each function's exported entry point (a library's).
    let mut wrappers = vec![String::new(); m.funcs.len()];
    for (f, wrapper) in m.funcs.iter().zip(&mut wrappers) {
        if f.external {
            continue;
        }
        let local = local_name(&f.c_name, target);
        if target == Target::Library {
            // The entry point: a run-time error in the body comes back here
            // (ksrt_enter in the runtime), and the call returns zeros.
            let mut leaves = exported_params(f, false).into_iter().map(|(_, name)| name);
            let args: Vec<String> = std::iter::once("A".to_string())
                .chain(f.params.iter().map(|&p| packed_argument(f.ty(p), &mut leaves)))
                .collect();
            let ret = c_type(&f.ret);
            writeln!(
                wrapper,
                "{} {{\n    sigjmp_buf ksrt_jb;\n    ks_mark ksrt_m = ksrt_enter(A, &ksrt_jb, ks_sites, ks_nsites);\n    \
                 if (sigsetjmp(ksrt_jb, 0)) {{\n        {ret} ksrt_z;\n        memset(&ksrt_z, 0, sizeof ksrt_z);\n        \
                 ksrt_failed(A, ksrt_m);\n        return ksrt_z;\n    }}\n    {ret} ksrt_r = {local}({});\n    \
                 ksrt_leave(A);\n    return ksrt_r;\n}}",
                exported_prototype(f, false),
                args.join(", "),
            )
            .ok();
        }
    }
    // The functions' site maps (`site_order`): static in the single file,
    // defined in unit 0 and declared in the others when split.
    let maps: Vec<(String, String)> = m
        .funcs
        .iter()
        .filter(|f| !f.external)
        .filter_map(|f| {
            let order = site_order(f);
            (!order.is_empty()).then(|| {
                let ids: Vec<String> = order.iter().map(|x| x.0.to_string()).collect();
                (site_map_name(f, target), ids.join(", "))
            })
        })
        .collect();
    let mut site_table = String::from("KSRT_SITES const ksrt_site ks_sites[] = {\n");
    for (s, loc) in m.sites.iter().zip(sites) {
        let parent = s.inlined_at.map_or(-1, |p| p.0 as i64);
        writeln!(
            site_table,
            "    {{{}, {}, {}, {}, {}}},",
            c_string(&loc.file),
            loc.line,
            loc.col,
            c_string(&s.fun.short()),
            parent
        )
        .ok();
    }
    if m.sites.is_empty() {
        site_table.push_str("    {\"\", 0, 0, \"\", -1},\n");
    }
    site_table.push_str("};\n");

    // What the program has once: the site table, and the library's entry
    // points and arena functions or the executable's `main`.
    let mut header = String::new();
    let mut once = String::new();
    let mut tail = String::new();
    match target {
        Target::Executable => {
            once.push_str(&site_table);
            if m.funcs.iter().any(|f| f.external) {
                // For the external functions' tensor results.
                once.push_str(
                    "void *ks_arena_alloc(ks_arena *A, int64_t bytes) { return ksrt_alloc(A, (size_t)bytes); }\n",
                );
            }
            if let Some(main) = m.main {
                let f = m.funcs[main.0 as usize];
                writeln!(
                    tail,
                    "\nstatic ks_arena *ks_main_arena;\n\
                     static void *ks_run_main(void *unused) {{\n    (void)unused;\n    ks_main_arena->stack_end = ksrt_thread_stack_end();\n    (void){}(ks_main_arena);\n    return NULL;\n}}\n\
                     int main(void) {{\n\
                     \x20   static char out[1 << 16];\n\
                     \x20   setvbuf(stdout, out, _IOFBF, sizeof out);\n\
                     \x20   ks_main_arena = ksrt_arena_new(ks_sites, {nsites});\n\
                     \x20   if (!ks_main_arena) {{\n\
                     \x20       fprintf(stderr, \"error: out of memory: cannot create the arena\\n\");\n\
                     \x20       return 1;\n\
                     \x20   }}\n\
                     \x20   /* The calls run on a stack of KSC_MAX_STACK bytes (reserved, not committed). */\n\
                     \x20   if (!ksrt_run_on_big_stack(ks_run_main, NULL)) ks_run_main(NULL);\n\
                     \x20   fflush(stdout);\n\
                     \x20   ksrt_stats(ks_main_arena);\n\
                     \x20   return 0;\n}}",
                    f.c_name
                )
                .ok();
            }
        }
        Target::Library => {
            header.push_str(&library_header(&e.types, m, header_name));
            once.push_str("struct ks_arena_public_check { char ok[sizeof(ks_mark)]; };\n");
            once.push_str(&site_table);
            // The arena's functions are the same in every library (an
            // exported function sets the arena's site table on entry), and
            // weak: two libraries or objects linked together share one.
            writeln!(
                once,
                "#define KSRT_WEAK __attribute__((weak))\n\
                 KSRT_WEAK ks_arena *ks_arena_new(void) {{ return ksrt_arena_new(ks_sites, {nsites}); }}\n\
                 KSRT_WEAK void ks_arena_free(ks_arena *A) {{ ksrt_arena_free(A); }}\n\
                 KSRT_WEAK ks_mark ks_arena_mark(ks_arena *A) {{ return ksrt_mark(A); }}\n\
                 KSRT_WEAK void ks_arena_reset(ks_arena *A, ks_mark m) {{ ksrt_reset(A, m); }}\n\
                 KSRT_WEAK void *ks_arena_alloc(ks_arena *A, int64_t bytes) {{ return ksrt_alloc(A, (size_t)bytes); }}\n\
                 KSRT_WEAK int ks_arena_error(const ks_arena *A) {{ return A->error; }}\n\
                 KSRT_WEAK const char *ks_arena_error_message(const ks_arena *A) {{ return A->error_message; }}\n\
                 KSRT_WEAK int ks_arena_allocated_since(const ks_arena *A, ks_mark m, const void *p, int64_t bytes) {{ return bytes >= 0 && ksrt_allocated_since(A, m, p, (size_t)bytes); }}\n\
                 KSRT_WEAK int64_t ks_arena_capacity(const ks_arena *A) {{ return (int64_t)A->capacity; }}"
            )
            .ok();
        }
    }
    // The start of every translation unit: the runtime, the types (a
    // library's are in its header), the prototypes of the functions
    // `funcs` (each static in every unit it is in) and the site maps.
    const HIDDEN: &str = "__attribute__((visibility(\"hidden\")))";
    let start = |unit: Option<usize>, funcs: &[usize]| {
        let mut c = String::new();
        match unit {
            None => c.push_str("/* Generated by ksc from a .ks program. Do not edit. */\n"),
            Some(k) => {
                writeln!(c, "/* Generated by ksc from a .ks program, translation unit {k}. Do not edit. */").ok();
            }
        }
        c.push_str(RUNTIME_H);
        c.push_str("#ifndef KSRT_LINKED\n");
        c.push_str(RUNTIME_C);
        c.push_str("#endif\n");
        if unit.is_none_or(|k| k == 0) {
            // Marks the compiled artefact as ksc's, so `ksc build` may replace it.
            c.push_str(
                "__attribute__((used)) static const char ksrt_artefact_marker[] = \"ksc-generated-artefact\";\n",
            );
        }
        match target {
            Target::Executable => {
                c.push_str(&types);
                c.push('\n');
            }
            Target::Library => {
                writeln!(c, "#include \"{header_name}\"").ok();
            }
        }
        for &i in funcs {
            let f = m.funcs[i];
            if f.external {
                // The user's C function, linked with the program.
                writeln!(c, "{};", exported_prototype(f, false)).ok();
            } else {
                writeln!(c, "static {};", prototype_named(f, &local_name(&f.c_name, target), false)).ok();
            }
        }
        // The site table and its length, which an entry point gives the
        // arena (a variable, so that the units' text does not depend on it).
        match unit {
            None => writeln!(c, "#define KSRT_SITES static\nstatic const int32_t ks_nsites = {nsites};"),
            Some(0) => writeln!(c, "#define KSRT_SITES {HIDDEN}\n{HIDDEN} const int32_t ks_nsites = {nsites};"),
            Some(_) => {
                writeln!(c, "extern {HIDDEN} const ksrt_site ks_sites[];\nextern {HIDDEN} const int32_t ks_nsites;")
            }
        }
        .ok();
        for (name, ids) in &maps {
            match unit {
                None => writeln!(c, "static const int32_t {name}[] = {{{ids}}};"),
                Some(0) => writeln!(c, "{HIDDEN} const int32_t {name}[] = {{{ids}}};"),
                Some(_) => writeln!(c, "extern {HIDDEN} const int32_t {name}[];"),
            }
            .ok();
        }
        c
    };
    let bodies = |funcs: &[usize]| -> String { funcs.iter().map(|&i| fcs[i].text.as_str()).collect() };
    let entry_points = |funcs: &[usize]| -> String { funcs.iter().map(|&i| wrappers[i].as_str()).collect() };
    let all: Vec<usize> = (0..fcs.len()).collect();
    let mut c = start(None, &all);
    c.push_str(&once);
    c.push('\n');
    c.push_str(&helpers(&e.prints, &e.copies));
    c.push('\n');
    c.push_str(&bodies(&all));
    c.push_str(&tail);
    c.push_str(&entry_points(&all));

    // Split: the large functions in units of their own (grouped below),
    // each unit with static copies of the small functions its functions
    // call (directly or through other small ones), so that the C compiler
    // may still inline them or change how they are called; unit 0 has every
    // small function, and what the program has once. A function's entry
    // point (a library's) is in the function's unit.
    let mut units = Vec::new();
    let large: FxHashSet<usize> = all
        .iter()
        .copied()
        .filter(|&i| !m.funcs[i].external && fcs[i].text.lines().count() >= UNIT_MIN_LINES)
        .collect();
    if c.lines().count() >= UNITS_MIN_LINES && !large.is_empty() {
        // The callers of each function (`main`'s is the C `main`, in unit 0).
        let calls: Vec<Vec<usize>> =
            all.iter().map(|&i| called(m.funcs[i]).iter().map(|g| g.0 as usize).collect()).collect();
        let mut callers: Vec<FxHashSet<usize>> = vec![FxHashSet::default(); m.funcs.len()];
        for &i in &all {
            for &g in &calls[i] {
                callers[g].insert(i);
            }
        }
        if let Some(main) = m.main {
            callers[main.0 as usize].insert(usize::MAX);
        }
        // A large function called in a loop of another shares its unit
        // (that of the group's first function), where it is static: BA's
        // Jacobian calls its block function once per block, with a tuple
        // that the C compiler passes in registers only to a static callee
        // (the Jacobian took 5 to 8% longer with the two in units of their
        // own). Calls made once per call of the caller may cross units, so
        // that units stay small (hand.ks's Jacobians are called once each
        // by the functions that return them).
        let mut in_loops: Vec<FxHashSet<usize>> = vec![FxHashSet::default(); m.funcs.len()];
        for &i in &all {
            let f = m.funcs[i];
            calls_in_loops(&f.body, f.loops, &mut in_loops[i]);
        }
        let mut group: Vec<usize> = (0..m.funcs.len()).collect();
        fn find(group: &mut [usize], i: usize) -> usize {
            let mut r = i;
            while group[r] != r {
                r = group[r];
            }
            group[i] = r;
            r
        }
        for &i in &large {
            for &g in &callers[i] {
                if g != i && large.contains(&g) && in_loops[g].contains(&i) {
                    let (a, b) = (find(&mut group, i), find(&mut group, g));
                    group[a.max(b)] = a.min(b);
                }
            }
        }
        let home: Vec<usize> = (0..m.funcs.len()).map(|i| find(&mut group, i)).collect();
        // Every function is static in its unit (the C compiler may change
        // how it is called there); one called from other units also has an
        // entry there, `<name>$x`, hidden, which they call through a static
        // forwarder of the function's name.
        let called_out: FxHashSet<usize> = large
            .iter()
            .copied()
            .filter(|&i| callers[i].iter().any(|&g| g == usize::MAX || home[g] != home[i]))
            .collect();
        let entry = |i: usize| {
            let f = m.funcs[i];
            let local = local_name(&f.c_name, target);
            let args: Vec<String> =
                std::iter::once("A".to_string()).chain(f.params.iter().map(|&p| var_name(f, p))).collect();
            let (args, x) = (args.join(", "), format!("{local}$x"));
            let proto = prototype_named(f, &x, false);
            let forward = prototype_named(f, &local, false);
            (
                format!("{HIDDEN} {proto} {{ return {local}({args}); }}\n"),
                format!("extern {HIDDEN} {proto};\nstatic inline {forward} {{ return {x}({args}); }}\n"),
            )
        };
        let mut called: Vec<usize> = called_out.iter().copied().collect();
        called.sort_unstable();
        let unit = |k: usize, own: &[usize], once: &str, tail: &str| {
            // `own` and the small functions they call, in the program's order.
            let mut members: FxHashSet<usize> = own.iter().copied().collect();
            let mut todo: Vec<usize> = own.to_vec();
            while let Some(i) = todo.pop() {
                for &g in &calls[i] {
                    if !large.contains(&g) && members.insert(g) {
                        todo.push(g);
                    }
                }
            }
            let mut funcs: Vec<usize> = members.into_iter().collect();
            funcs.sort_unstable();
            // Prototypes: the unit's functions and the external ones; the
            // entries of the others it may call.
            let declared: Vec<usize> =
                all.iter().copied().filter(|&i| m.funcs[i].external || funcs.contains(&i)).collect();
            let (mut prints, mut copies) = (FxHashSet::default(), FxHashSet::default());
            for &i in &funcs {
                prints.extend(fcs[i].prints.iter().cloned());
                copies.extend(fcs[i].copies.iter().cloned());
            }
            let mut u = start(Some(k), &declared);
            for &i in &called {
                if !funcs.contains(&i) {
                    u.push_str(&entry(i).1);
                }
            }
            u.push_str(once);
            u.push('\n');
            u.push_str(&helpers(&prints, &copies));
            u.push('\n');
            u.push_str(&bodies(&funcs));
            for &i in &called {
                if own.contains(&i) {
                    u.push_str(&entry(i).0);
                }
            }
            u.push_str(tail);
            u.push_str(&entry_points(own));
            u
        };
        let small: Vec<usize> = all.iter().copied().filter(|i| !large.contains(i)).collect();
        units.push(unit(0, &small, &once, &tail));
        let mut roots: Vec<usize> = large.iter().copied().filter(|&i| home[i] == i).collect();
        roots.sort_unstable();
        for (k, &r) in roots.iter().enumerate() {
            let own: Vec<usize> = all.iter().copied().filter(|&i| large.contains(&i) && home[i] == r).collect();
            units.push(unit(k + 1, &own, "", ""));
        }
    }
    CProgram { c, header, units }
}

/// The functions called in loops of a block (all of them if `looping`: the
/// body of a function whose tail calls are a loop), into `out`.
fn calls_in_loops(b: &Block, looping: bool, out: &mut FxHashSet<usize>) {
    for st in b {
        match st {
            Stmt::Let(_, Rhs::Call { func, .. }) if looping => {
                out.insert(func.0 as usize);
            }
            Stmt::For { pre, body, .. } => {
                calls_in_loops(pre, looping, out);
                calls_in_loops(body, true, out);
            }
            Stmt::If { then, els, .. } => {
                calls_in_loops(then, looping, out);
                calls_in_loops(els, looping, out);
            }
            _ => {}
        }
    }
}

/// The printing and copying helpers of these types (static: each unit has
/// those it uses), with those of their components.
fn helpers(prints: &FxHashSet<Type>, copies: &FxHashSet<Type>) -> String {
    // A helper of a type calls its components' helpers: printing each of
    // them, copying those that hold tensors.
    let with_components = |types: &FxHashSet<Type>, keep: fn(&Type) -> bool| {
        let mut all = types.clone();
        let mut todo: Vec<Type> = all.iter().cloned().collect();
        while let Some(t) = todo.pop() {
            for c in children(&t) {
                if keep(&c) && all.insert(c.clone()) {
                    todo.push(c);
                }
            }
        }
        all
    };
    let prints = with_components(prints, |_| true);
    let copies = with_components(copies, needs_heap);
    let mut out = String::new();
    let mut ps: Vec<&Type> = prints.iter().collect();
    ps.sort();
    for t in &ps {
        writeln!(out, "static void ks_print_{}({} x);", mangle_type(t), c_type(t)).ok();
    }
    let mut cs: Vec<&Type> = copies.iter().collect();
    cs.sort();
    for t in &cs {
        writeln!(out, "static {0} ks_copy_{1}(ks_arena *A, {0} x);", c_type(t), mangle_type(t)).ok();
    }
    for t in &ps {
        out.push_str(&print_fn(t));
    }
    for t in &cs {
        out.push_str(&copy_fn(t));
    }
    out
}

/// The include guard of a header named `header_name` (`vecops.h`:
/// `KSC_VECOPS_H`), so that headers of several libraries can be included
/// together.
pub fn header_guard(header_name: &str) -> String {
    let stem: String =
        header_name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("KSC_{stem}")
}

/// The declarations every library's header shares, guarded once.
const ABI_DECLARATIONS: &str = "\
#ifndef KSC_ABI_H
#define KSC_ABI_H
#ifndef KSC_RUNTIME_H
typedef struct ks_arena ks_arena;
typedef struct { void *block; char *top; } ks_mark;
#endif
/* A new arena (NULL if there is no memory for it), and freeing it. */
ks_arena *ks_arena_new(void);
void ks_arena_free(ks_arena *A);
/* Remember the arena's top, and free everything allocated since. */
ks_mark ks_arena_mark(ks_arena *A);
void ks_arena_reset(ks_arena *A, ks_mark m);
/* Memory in the arena, aligned for any element (for the tensors an
 * external function returns); it lives until the arena is reset past it. */
void *ks_arena_alloc(ks_arena *A, int64_t bytes);
/* The error of the latest call of an exported function on this arena:
 * KS_ERROR_NONE (0), KS_ERROR_RUNTIME (1: index out of range, failed
 * assert, Integer overflow, division by zero, recursion too deep, ...) or
 * KS_ERROR_MEMORY (2: out of memory); and its message (\"\" if none): the
 * error, then where it happened in the .ks source, `  --> file:line:col (in
 * `f`)`, and the calls it was under, one line each. The message lives in
 * the arena until the next call. */
#define KS_ERROR_NONE 0
#define KS_ERROR_RUNTIME 1
#define KS_ERROR_MEMORY 2
int ks_arena_error(const ks_arena *A);
const char *ks_arena_error_message(const ks_arena *A);
/* Whether the `bytes` bytes at `p` were allocated in the arena since the
 * mark `m` (so a result there is not an argument's or a constant's memory,
 * and stays valid until the arena is reset to `m`); and the bytes the
 * arena holds in all its blocks. A caller that keeps a large result where
 * it is, instead of copying it out, can take another arena for its next
 * calls and reset this one when it is done with the result (the Python
 * package does). */
int ks_arena_allocated_since(const ks_arena *A, ks_mark m, const void *p, int64_t bytes);
int64_t ks_arena_capacity(const ks_arena *A);
#endif
";

fn library_header(types: &[Type], m: &ModuleView, header_name: &str) -> String {
    let mut h = String::new();
    h.push_str(
        "/* Generated by ksc: the C ABI of a compiled .ks program.
 *
 * Calling convention, the same for every function (a definition of the
 * file, or a derived one: [rev f] is rev$f, [fwd f] fwd$f): the arena
 * first, then the .ks parameters in order, each as its leaves: a parameter
 * of tuple type is spread into its components, recursively, in order (a
 * unit tuple takes none). So [rev f] of (def f Float ((x : Float) (y :
 * Float)) ..) is rev$f(A, x_0, x_1, dr), its argument tuple spread as f's
 * parameters are. The result is returned as it is (a tuple as a struct).
 *
 * Memory: tensors and tuples a function returns live in the arena until it
 * is reset past them or freed; but a tensor returned unchanged from an
 * argument (or built as a copy of one of the same size) is the argument's
 * memory, so writing into a result may write into an argument. A
 * [sufrevacc f] (sufrevacc$f, the reverse pass of a recursive f adding into
 * an accumulator) writes into the tensors of its last parameter, the
 * accumulator, and returns them: pass tensors nothing else reads.
 *
 * Errors: a run-time error (index out of range, failed assert, ...) never
 * exits the process. The function returns at once with zeros (0, false,
 * NULL; a tensor of size 0 and data NULL), frees what it had allocated,
 * and records the error in the arena: after each call, ks_arena_error(A)
 * is 0 if it succeeded, else the error's code, and
 * ks_arena_error_message(A) says what and where. The arena stays usable.
 *
 * Stack: nested calls run on the calling thread's stack, with no bound on
 * their number but that stack: a call that would come within 256 KiB (or a
 * quarter of a smaller stack) of its end, as pthread_getattr_np gives it,
 * fails with \"recursion too deep\" (KS_ERROR_RUNTIME) instead of
 * overflowing it. Deep recursion (a non-tail recursive function, or the
 * derivatives of a tail-recursive one, at depth n) needs a stack of n times
 * a frame's size (tens to hundreds of bytes): call from a thread made with
 * a large stack (pthread_attr_setstacksize) for that.
 *
 * Threads: a call may run its independent loops on a team of OpenMP
 * threads (as many as OMP_NUM_THREADS or omp_set_num_threads allows; 1
 * keeps every call on the calling thread), with the same results at any
 * number. Calls from several host threads at once are safe, each with an
 * arena of its own: one arena serves one call at a time.
 *
 * Types: Float double, Integer int64_t, Bool bool, String const char *;
 * (Vec T) is { int64_t size; T *data; }; (Tensor r T) is { int64_t size[r];
 * T *data; } row-major; tuples are structs with fields f0, f1, ...
 * Headers of several ksc libraries may be included in one file, and an
 * arena of one library passed to another's functions.
 */
",
    );
    let guard = header_guard(header_name);
    writeln!(h, "#ifndef {guard}\n#define {guard}\n#include <stdbool.h>\n#include <stdint.h>").ok();
    h.push_str(ABI_DECLARATIONS);
    // Each type once, whichever header defines it first.
    for t in types {
        let def = type_def(t);
        if !def.is_empty() {
            let name = c_type(t);
            write!(h, "#ifndef KSC_TYPE_{name}\n#define KSC_TYPE_{name}\n{def}#endif\n").ok();
        }
    }
    h.push('\n');
    for f in m.funcs.iter().filter(|f| !f.external) {
        writeln!(h, "/* {} */\n{};", f.name, exported_prototype(f, true)).ok();
    }
    if m.funcs.iter().any(|f| f.external) {
        h.push_str(
            "/* External functions: the program's `edef`s, which it calls with the\n \
             * convention above. Link a definition of each with the library (pure\n \
             * functions, callable from several threads at once; a tensor or tuple\n \
             * returned must be new memory, for example from ks_arena_alloc). */\n",
        );
        for f in m.funcs.iter().filter(|f| f.external) {
            writeln!(h, "/* {} */\n{};", f.name, exported_prototype(f, true)).ok();
        }
    }
    writeln!(h, "#endif /* {guard} */").ok();
    h
}

fn children(t: &Type) -> Vec<Type> {
    match t {
        Type::Tuple(ts) => ts.clone(),
        Type::Tensor(_, e) => vec![(**e).clone()],
        _ => vec![],
    }
}

fn type_def(t: &Type) -> String {
    let name = c_type(t);
    match t {
        Type::Tuple(ts) if ts.is_empty() => format!("typedef struct {{ char unit; }} {name};\n"),
        Type::Tuple(ts) => {
            let fields: String = ts.iter().enumerate().map(|(i, t)| format!(" {} f{i};", c_type(t))).collect();
            format!("typedef struct {{{fields} }} {name};\n")
        }
        Type::Tensor(1, e) => format!("typedef struct {{ int64_t size; {} *data; }} {name};\n", c_type(e)),
        Type::Tensor(r, e) => format!("typedef struct {{ int64_t size[{r}]; {} *data; }} {name};\n", c_type(e)),
        _ => String::new(),
    }
}

fn var_name(f: &Func, v: VarId) -> String {
    match &f.vars[v.0 as usize].name {
        Some(n) if !n.is_empty() => format!("{n}_{}", v.0),
        _ => format!("t{}", v.0),
    }
}

/// The name a function's body is defined under, and that calls name: its C
/// name in an executable; in a library `ksl_` and its C name, a `static`
/// function (no C name starts so: plain names starting with `ks` are
/// prefixed `ks$`), with the C name an exported wrapper of it. Being local,
/// the C compiler may change how it is called: split tuple arguments into
/// scalars (passed in memory, a struct rebuilt per call stalls the loads
/// that read it back), or inline it.
fn local_name(f: &str, target: Target) -> String {
    match target {
        Target::Executable => f.to_string(),
        Target::Library => format!("ksl_{f}"),
    }
}

/// The C prototype of an external function (a user's `edef`), as the user
/// defines it: [`exported_prototype`]'s convention.
pub fn external_prototype(f: &Func) -> String {
    exported_prototype(f, true)
}

/// The exported function's prototype: the arena, then every parameter as
/// its leaves (a tuple spread into its components, recursively, in order,
/// named `p_0`, `p_1`, `p_1_0`..; a unit tuple takes no argument). One
/// calling convention for every function: `[rev f]` of an `f` of two
/// Floats takes `(A, x_0, x_1, dr)`, as `f` takes `(A, x, y)`.
fn exported_prototype(f: &Func, plain_names: bool) -> String {
    let ps: Vec<String> = std::iter::once("ks_arena *A".to_string())
        .chain(exported_params(f, plain_names).into_iter().map(|(t, name)| format!("{} {name}", c_type(&t))))
        .collect();
    format!("{} {}({})", c_type(&f.ret), f.c_name, ps.join(", "))
}

/// The exported function's parameters after the arena: each leaf's type
/// and a name, distinct from the others and from `A`.
fn exported_params(f: &Func, plain_names: bool) -> Vec<(Type, String)> {
    let mut taken: FxHashSet<String> = FxHashSet::default();
    taken.insert("A".into());
    let mut out = Vec::new();
    for &p in &f.params {
        let name = if plain_names { plain_name(f, p) } else { var_name(f, p) };
        for (suffix, t) in leaves(f.ty(p)) {
            let mut n = format!("{name}{suffix}");
            while !taken.insert(n.clone()) {
                n.push('_');
            }
            out.push((t, n));
        }
    }
    out
}

/// The C field path of a leaf from its name suffix (`_1_0` is `.f1.f0`).
fn field_path(suffix: &str) -> String {
    suffix.split('_').filter(|k| !k.is_empty()).map(|k| format!(".f{k}")).collect()
}

/// The leaves of a parameter's type, with their name suffixes.
fn leaves(t: &Type) -> Vec<(String, Type)> {
    match t {
        Type::Tuple(ts) => ts
            .iter()
            .enumerate()
            .flat_map(|(i, c)| leaves(c).into_iter().map(move |(s, l)| (format!("_{i}{s}"), l)))
            .collect(),
        _ => vec![(String::new(), t.clone())],
    }
}

/// The value of a parameter rebuilt from its leaves (the next names of
/// `leaves`, from [`exported_params`]): a compound literal for a tuple.
fn packed_argument(t: &Type, leaves: &mut impl Iterator<Item = String>) -> String {
    match t {
        Type::Tuple(ts) if ts.is_empty() => format!("({}){{0}}", c_type(t)),
        Type::Tuple(ts) => {
            let parts: Vec<String> = ts.iter().map(|c| packed_argument(c, leaves)).collect();
            format!("({}){{{}}}", c_type(t), parts.join(", "))
        }
        _ => leaves.next().expect("a name per leaf"),
    }
}

fn plain_name(f: &Func, p: VarId) -> String {
    match &f.vars[p.0 as usize].name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => format!("p{}", p.0),
    }
}

fn prototype_named(f: &Func, c_name: &str, plain_names: bool) -> String {
    let mut ps = vec!["ks_arena *A".to_string()];
    for &p in &f.params {
        let name = if plain_names { plain_name(f, p) } else { var_name(f, p) };
        ps.push(format!("{} {name}", c_type(f.ty(p))));
    }
    format!("{} {c_name}({})", c_type(&f.ret), ps.join(", "))
}

fn c_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'?' => out.push_str("\\?"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

fn print_fn(t: &Type) -> String {
    let name = mangle_type(t);
    let ct = c_type(t);
    let body = match t {
        Type::Float => "ksrt_print_f(x);".to_string(),
        Type::Integer => "ksrt_print_i(x);".to_string(),
        Type::Bool => "ksrt_print_b(x);".to_string(),
        Type::String => "ksrt_print_s(x);".to_string(),
        Type::Tuple(ts) => ts
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let sep = if i > 0 { "putchar(',');\n    " } else { "" };
                format!("{sep}ks_print_{}(x.f{i});", mangle_type(c))
            })
            .collect::<Vec<_>>()
            .join("\n    "),
        Type::Tensor(r, e) => {
            // Nested brackets per dimension, elements row-major.
            let dims: Vec<String> =
                if *r == 1 { vec!["x.size".into()] } else { (0..*r).map(|k| format!("x.size[{k}]")).collect() };
            let mut s = String::from("int64_t k = 0;\n    (void)k;\n");
            let mut close = String::new();
            for (d, n) in dims.iter().enumerate() {
                write!(s, "    putchar('[');\n    for (int64_t i{d} = 0; i{d} < {n}; i{d}++) {{\n    if (i{d}) fputs(\", \", stdout);\n").ok();
                close = format!("    }}\n    putchar(']');\n{close}");
            }
            write!(s, "    ks_print_{}(x.data[k++]);\n{close}", mangle_type(e)).ok();
            s
        }
        _ => String::new(),
    };
    format!("static void ks_print_{name}({ct} x) {{\n    {body}\n}}\n")
}

fn copy_fn(t: &Type) -> String {
    let name = mangle_type(t);
    let ct = c_type(t);
    let body = match t {
        Type::Tuple(ts) => {
            let mut s = String::new();
            for (i, c) in ts.iter().enumerate() {
                if needs_heap(c) {
                    writeln!(s, "    x.f{i} = ks_copy_{}(A, x.f{i});", mangle_type(c)).ok();
                }
            }
            s
        }
        Type::Tensor(r, e) => {
            let n = if *r == 1 {
                "x.size".to_string()
            } else {
                (0..*r).map(|k| format!("x.size[{k}]")).collect::<Vec<_>>().join(" * ")
            };
            let ce = c_type(e);
            let mut s = format!(
                "    int64_t n = {n};\n    {ce} *data = ({ce} *)ksrt_alloc_n(A, n, sizeof({ce}));\n    if (n > 0) memcpy(data, x.data, (size_t)n * sizeof({ce}));\n"
            );
            if needs_heap(e) {
                writeln!(s, "    for (int64_t i = 0; i < n; i++) data[i] = ks_copy_{}(A, data[i]);", mangle_type(e))
                    .ok();
            }
            s.push_str("    KS_WORK(n);\n    x.data = data;\n");
            s
        }
        _ => String::new(),
    };
    format!("static {ct} ks_copy_{name}(ks_arena *A, {ct} x) {{\n{body}    return x;\n}}\n")
}

fn walk(b: &Block, f: &mut impl FnMut(&Stmt)) {
    ksc_lower::visit::walk(b, f)
}

impl Emitter {
    fn add_type(&mut self, t: &Type) {
        self.types_for(t)
    }

    /// Registers a type and its components, components first.
    fn types_for(&mut self, t: &Type) {
        if self.seen.contains(t) {
            return;
        }
        for c in children(t) {
            self.types_for(&c);
        }
        if matches!(t, Type::Tuple(_) | Type::Tensor(..)) && self.seen.insert(t.clone()) {
            self.types.push(t.clone());
        }
    }
}

/// The C of one function, and what it needs; `callees` are the functions
/// it calls.
pub fn function(f: &Func, callees: &[(FuncId, CalleeSig)], target: Target, checked: bool) -> FunctionC {
    let mut e = Emitter::default();
    for v in &f.vars {
        e.add_type(&v.ty);
    }
    e.add_type(&f.ret);
    walk(&f.body, &mut |s| match s {
        Stmt::Print { ty, .. } => {
            e.prints.insert(ty.clone());
        }
        Stmt::Let(_, Rhs::DeepCopy(o)) => {
            e.copies.insert(f.op_ty(o));
        }
        Stmt::Let(_, Rhs::Alloc { elem, .. } | Rhs::Reuse { elem, .. } | Rhs::TapePush { elem, .. }) => {
            e.types_for(elem);
        }
        Stmt::Let(_, Rhs::Pack(_, t)) => e.types_for(t),
        Stmt::CopyDown { vars, .. } => {
            for v in vars {
                e.copies.insert(f.ty(*v).clone());
            }
        }
        _ => {}
    });
    if f.loops && f.entry_mark.is_some() {
        for p in &f.params {
            if needs_heap(f.ty(*p)) {
                e.copies.insert(f.ty(*p).clone());
            }
        }
    }
    let mut prints: Vec<Type> = e.prints.into_iter().collect();
    prints.sort();
    let mut copies: Vec<Type> = e.copies.into_iter().collect();
    copies.sort();
    // An external function's C is the user's.
    let text = if f.external { String::new() } else { function_text(f, callees, target, checked) };
    FunctionC { text, types: e.types, prints, copies }
}

/// The sites a function's statements name, each once, in the order they
/// first appear: its site map, `ksrt_sm_<function>` in the C, holds their
/// numbers in the program's site table (`ks_sites`), and the function's C
/// names a site by its index in the map. So the function's C does not
/// change when the program's sites are numbered again (after an edit of
/// another function), and a translation unit of it is compiled again only
/// if it changed ([`CProgram::units`]).
pub fn site_order(f: &Func) -> Vec<SiteId> {
    let mut order = Vec::new();
    let mut seen = FxHashSet::default();
    let mut add = |x: SiteId| {
        if x != SiteId::UNCHECKED && seen.insert(x) {
            order.push(x);
        }
    };
    walk(&f.body, &mut |s| {
        if let Some(x) = ksc_lower::visit::site(s) {
            add(x)
        }
    });
    order
}

/// The name of a function's site map.
fn site_map_name(f: &Func, target: Target) -> String {
    format!("ksrt_sm_{}", local_name(&f.c_name, target))
}

fn function_text(f: &Func, callees: &[(FuncId, CalleeSig)], target: Target, checked: bool) -> String {
    let mut out = String::new();
    writeln!(out, "/* {} */", f.name).ok();
    writeln!(out, "static {} {{{}", prototype_named(f, &local_name(&f.c_name, target), false), work(f, &f.body)).ok();
    let sites: FxHashMap<SiteId, usize> = site_order(f).into_iter().enumerate().map(|(k, x)| (x, k)).collect();
    let prints = |g: FuncId| callees.iter().any(|(h, c)| *h == g && c.prints);
    let plan = crate::split::plan(f, &|idx, n, body| parallel_at_top(f, idx, n, body, &prints));
    let marks = crate::split::marks(f);
    let mut w = W {
        f,
        callees,
        target,
        checked,
        sites: &sites,
        out: String::new(),
        depth: 1,
        loop_marks: Vec::new(),
        outlined: Some(Vec::new()),
        plan: &plan,
        marks: &marks,
    };
    if let Some(m) = f.entry_mark {
        w.line(&format!("ks_mark {} = ksrt_mark(A);", var_name(f, m)));
    }
    if f.loops {
        w.line("for (;;) {");
        w.depth += 1;
    }
    w.block(&f.body);
    if f.loops {
        w.depth -= 1;
        w.line("}");
    }
    out.push_str(&w.out);
    out.push_str("}\n\n");
    let mut loops = w.outlined.unwrap_or_default().concat();
    loops.push_str(&out);
    loops
}

/// The running maxima of a loop that only keeps the largest of its terms
/// (`W::lanes_maximum`): eight Floats, one AVX-512 vector.
const MAX_LANES: usize = 8;

/// What a run of block `b` of `f` counts in a build that counts work
/// (`KS_WORK`, defined by the runtime; nothing unless `KS_COUNT_WORK` is
/// defined): one, and one per number it loads, stores or adds into
/// (statements directly in it; nested blocks count for themselves): an
/// element that is a tuple counts its components, so a vector of tuples
/// costs what its vectors of components would (`split-tuple-vectors`),
/// and a tensor handle counts one. Written on the line that opens the
/// block, so the C has as many lines either way.
fn work(f: &Func, b: &Block) -> String {
    let words = |t: &Type| leaves(t).len();
    let elements: usize = b
        .iter()
        .map(|s| match s {
            Stmt::Let(v, Rhs::Load { .. }) => words(f.ty(*v)).max(1),
            Stmt::Store { val, .. } => words(&f.op_ty(val)).max(1),
            Stmt::Accum { .. } => 1,
            _ => 0,
        })
        .sum();
    format!(" KS_WORK({});", 1 + elements)
}

struct W<'a> {
    f: &'a Func,
    callees: &'a [(FuncId, CalleeSig)],
    target: Target,
    checked: bool,
    /// The function's sites by their index in its site map ([`site_order`]).
    sites: &'a FxHashMap<SiteId, usize>,
    out: String,
    depth: usize,
    /// For each enclosing `for`, the marks taken inside its body (at any
    /// depth): a copy-down to another mark is to one fixed across the
    /// loop's iterations (a fold's), and may be put off (`copy_down`).
    /// Per enclosing loop: the marks taken in its body, and its trip count.
    loop_marks: Vec<(FxHashSet<VarId>, String)>,
    /// The functions made of parallel loops (`parallel_loop`) and of parts
    /// (`part`), written before the function; `None` inside a parallel
    /// loop's, whose loops and parts stay where they are.
    outlined: Option<Vec<String>>,
    /// The statements written as parts of the function (`split.rs`).
    plan: &'a crate::split::Plan,
    /// The variables holding arena marks.
    marks: &'a FxHashSet<VarId>,
}

/// Does the loop `for idx < n { body }`, not inside a loop running on a
/// team, run on one (`W::stmt`'s choice)?
fn parallel_at_top(f: &Func, idx: VarId, n: &Op, body: &Block, prints: &dyn Fn(FuncId) -> bool) -> bool {
    match n {
        Op::Int(k) if !crate::parallel::worth_a_team(*k, body) => false,
        _ => crate::parallel::independent(f, idx, body, prints),
    }
}

fn float_lit(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "(-NAN)".into() } else { "NAN".into() };
    }
    if x.is_infinite() {
        return if x < 0.0 { "(-INFINITY)".into() } else { "INFINITY".into() };
    }
    let s = format!("{x:?}");
    if x.is_sign_negative() {
        format!("({s})")
    } else {
        s
    }
}

impl<'a> W<'a> {
    /// A site as the C names it: its entry of the function's site map.
    fn site(&self, x: SiteId) -> String {
        match self.sites.get(&x) {
            Some(k) => format!("{}[{k}]", site_map_name(self.f, self.target)),
            None => x.0.to_string(),
        }
    }

    fn line(&mut self, s: &str) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn var(&self, v: VarId) -> String {
        var_name(self.f, v)
    }

    fn op(&self, o: &Op) -> String {
        match o {
            Op::Var(v) => self.var(*v),
            Op::Float(x) => float_lit(*x),
            Op::Int(i) if *i == i64::MIN => "INT64_MIN".into(),
            Op::Int(i) if *i < 0 => format!("(INT64_C({i}))"),
            Op::Int(i) => format!("INT64_C({i})"),
            Op::Bool(b) => if *b { "true" } else { "false" }.into(),
            Op::Str(s) => c_string(s),
            Op::Unit => "(ks_t0){0}".into(),
        }
    }

    /// An operand of a type known from context (a unit or packed default).
    fn op_as(&self, o: &Op, t: &Type) -> String {
        match o {
            Op::Unit if *t != Type::unit() => format!("(({}){{0}})", c_type(t)),
            o => self.op(o),
        }
    }

    fn ints(&self, xs: &[Op]) -> String {
        xs.iter().map(|x| self.op(x)).collect::<Vec<_>>().join(", ")
    }

    fn rhs(&self, v: VarId, r: &Rhs) -> String {
        let t = self.f.ty(v);
        match r {
            Rhs::Copy(o) => self.op_as(o, t),
            Rhs::Un(op, a, site) => {
                let a = self.op(a);
                match op {
                    UnOp::FNeg => format!("-{a}"),
                    UnOp::INeg => match site {
                        Some(s) => format!("ksrt_ineg(A, {}, {a})", s.0),
                        None => format!("ksrt_wrap_sub(0, {a})"),
                    },
                    UnOp::Not => format!("!{a}"),
                    UnOp::ToFloat => format!("(double){a}"),
                    UnOp::BoolToFloat => format!("({a} ? 1.0 : 0.0)"),
                    UnOp::Math(m) => format!("{}({a})", m.c_name()),
                    UnOp::RanHashDoub => format!("ksrt_ranhashdoub({a})"),
                }
            }
            Rhs::Bin(op, a, b) => {
                let (a, b) = (self.op(a), self.op(b));
                match op {
                    BinOp::FAdd | BinOp::IAddNoCheck => format!("{a} + {b}"),
                    BinOp::FSub => format!("{a} - {b}"),
                    BinOp::FMul | BinOp::IMulNoCheck => format!("{a} * {b}"),
                    BinOp::IMulSat => format!("ksrt_imul_sat({a}, {b})"),
                    BinOp::FDiv => format!("{a} / {b}"),
                    BinOp::FMax => format!("{a} < {b} ? {b} : {a}"),
                    BinOp::FPowI => format!("pow({a}, (double){b})"),
                    BinOp::FLt | BinOp::ILt => format!("{a} < {b}"),
                    BinOp::FLe | BinOp::ILe => format!("{a} <= {b}"),
                    BinOp::FGt | BinOp::IGt => format!("{a} > {b}"),
                    BinOp::FGe | BinOp::IGe => format!("{a} >= {b}"),
                    BinOp::FEq | BinOp::IEq | BinOp::BEq => format!("{a} == {b}"),
                    BinOp::SEq => format!("strcmp({a}, {b}) == 0"),
                    BinOp::And => format!("{a} && {b}"),
                    BinOp::Or => format!("{a} || {b}"),
                }
            }
            Rhs::IChecked(op, a, b, site) => {
                let (a, b) = (self.op(a), self.op(b));
                let name = match op {
                    IOp::Add => "add",
                    IOp::Sub => "sub",
                    IOp::Mul => "mul",
                    IOp::Div => "div",
                };
                if *site == SiteId::UNCHECKED && *op != IOp::Div {
                    format!("ksrt_wrap_{name}({a}, {b})")
                } else {
                    format!("ksrt_i{name}(A, {}, {a}, {b})", self.site(*site))
                }
            }
            Rhs::Select(c, a, b) => format!("{} ? {} : {}", self.op(c), self.op_as(a, t), self.op_as(b, t)),
            Rhs::Call { func, args, .. } => {
                let (_, callee) =
                    self.callees.iter().find(|(g, _)| g == func).expect("the callees of a function are given");
                let mut xs = vec!["A".to_string()];
                if callee.external {
                    // The exported convention: every argument as its leaves.
                    for (a, p) in args.iter().zip(&callee.params) {
                        let whole = self.op_as(a, p);
                        xs.extend(leaves(p).into_iter().map(|(path, _)| format!("{whole}{}", field_path(&path))));
                    }
                    return format!("{}({})", callee.c_name, xs.join(", "));
                }
                for (a, p) in args.iter().zip(&callee.params) {
                    xs.push(self.op_as(a, p));
                }
                format!("{}({})", local_name(&callee.c_name, self.target), xs.join(", "))
            }
            Rhs::Load { arr, idx } => format!("{}.data[{}]", self.op(arr), self.op(idx)),
            // The zero-initialised value of a tensor type (`$dummy`) is empty.
            Rhs::Dim { arr: Op::Unit, .. } => "INT64_C(0)".to_string(),
            Rhs::Dim { arr, dim } => match self.f.op_ty(arr) {
                Type::Tensor(1, _) => format!("{}.size", self.op(arr)),
                _ => format!("{}.size[{dim}]", self.op(arr)),
            },
            Rhs::Pack(xs, ty) => {
                let ts = match ty {
                    Type::Tuple(ts) => ts.clone(),
                    _ => vec![],
                };
                let fields: Vec<String> =
                    xs.iter().zip(&ts).enumerate().map(|(i, (x, t))| format!(".f{i} = {}", self.op_as(x, t))).collect();
                format!("({}){{{}}}", c_type(ty), fields.join(", "))
            }
            Rhs::Field(a, i) => format!("{}.f{i}", self.op(a)),
            Rhs::DeepCopy(a) => format!("ks_copy_{}(A, {})", mangle_type(t), self.op(a)),
            Rhs::Mark => "ksrt_mark(A)".into(),
            Rhs::Alloc { .. } | Rhs::Reuse { .. } | Rhs::TapePush { .. } => String::new(),
        }
    }

    fn block(&mut self, b: &Block) {
        let mut i = 0;
        while i < b.len() {
            match self.plan.run(&b[i]) {
                Some((k, len)) if self.outlined.is_some() => {
                    self.part(k, &b[i..i + len]);
                    i += len;
                }
                _ => {
                    self.stmt(&b[i]);
                    i += 1;
                }
            }
        }
    }

    /// The C type of a variable (marks are `ks_mark`, whatever their type).
    fn var_c_type(&self, v: VarId) -> String {
        if self.marks.contains(&v) {
            "ks_mark".into()
        } else {
            c_type(self.f.ty(v))
        }
    }

    /// A writer of another C function of the same function's code (a part,
    /// or a parallel loop's).
    fn nested(&self, loop_marks: Vec<(FxHashSet<VarId>, String)>, outlined: Option<Vec<String>>) -> W<'a> {
        W {
            f: self.f,
            callees: self.callees,
            target: self.target,
            checked: self.checked,
            sites: self.sites,
            out: String::new(),
            depth: 1,
            loop_marks,
            outlined,
            plan: self.plan,
            marks: self.marks,
        }
    }

    /// The statements `part` as a function of its own, part `k` of the
    /// function (`split.rs`), and a call of it here.
    fn part(&mut self, k: usize, part: &[Stmt]) {
        let name = format!("{}_part{k}", local_name(&self.f.c_name, self.target));
        let io = crate::split::interface(self.f, self.plan, part);
        let by_address: Vec<VarId> = io.outputs.iter().chain(&io.results).copied().collect();
        let mut params = vec!["ks_arena *A".to_string()];
        params.extend(io.inputs.iter().map(|v| format!("{} {}", self.var_c_type(*v), self.var(*v))));
        params.extend(by_address.iter().map(|v| format!("{} *{}_o", self.var_c_type(*v), self.var(*v))));
        let mut inner = self.nested(self.loop_marks.clone(), Some(Vec::new()));
        for v in &io.outputs {
            let (t, x) = (inner.var_c_type(*v), inner.var(*v));
            inner.line(&format!("{t} {x} = *{x}_o;"));
        }
        // Its statements are not parts themselves (a run holds none), but
        // their blocks may hold parts.
        for s in part {
            inner.stmt(s);
        }
        for v in &by_address {
            let x = inner.var(*v);
            inner.line(&format!("*{x}_o = {x};"));
        }
        let text = format!("__attribute__((noinline)) static void {name}({}) {{\n{}}}\n", params.join(", "), inner.out);
        if let Some(out) = &mut self.outlined {
            out.extend(inner.outlined.unwrap_or_default());
            out.push(text);
        }
        for v in &io.results {
            let line = format!("{} {};", self.var_c_type(*v), self.var(*v));
            self.line(&line);
        }
        let mut args = vec!["A".to_string()];
        args.extend(io.inputs.iter().map(|v| self.var(*v)));
        args.extend(by_address.iter().map(|v| format!("&{}", self.var(*v))));
        self.line(&format!("{name}({});", args.join(", ")));
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Let(v, Rhs::Alloc { dims, elem }) => {
                let name = self.var(*v);
                let t = self.f.ty(*v).clone();
                let ce = c_type(elem);
                self.line(&format!("{} {name};", c_type(&t)));
                if dims.len() == 1 {
                    let n = self.op(&dims[0]);
                    self.line(&format!("{name}.size = {n};"));
                    self.line(&format!("{name}.data = ({ce} *)ksrt_alloc_n(A, {n}, sizeof({ce}));"));
                } else {
                    let mut count = Vec::new();
                    for (k, d) in dims.iter().enumerate() {
                        let d = self.op(d);
                        self.line(&format!("{name}.size[{k}] = {d};"));
                        count.push(format!("{name}.size[{k}]"));
                    }
                    self.line(&format!("{{ int64_t n = {}; if (n < 0) n = 0;", count[0]));
                    for c in &count[1..] {
                        self.line(&format!("  if (__builtin_mul_overflow(n, {c}, &n)) ksrt_oom(A, SIZE_MAX);"));
                    }
                    self.line(&format!("  {name}.data = ({ce} *)ksrt_alloc_n(A, n, sizeof({ce})); }}"));
                }
            }
            Stmt::Let(v, Rhs::Reuse { dead, dims, elem }) => {
                // A vector: `reuse.rs` makes no other.
                let name = self.var(*v);
                let ce = c_type(elem);
                let (dead, n) = (self.op(dead), self.op(&dims[0]));
                self.line(&format!("{} {name};", c_type(self.f.ty(*v))));
                self.line(&format!("{name}.size = {n};"));
                self.line(&format!(
                    "{name}.data = {dead}.size == {n} && {dead}.data && (size_t){n} >= KSRT_REUSE_MIN_BYTES / sizeof({ce}) ? {dead}.data : ({ce} *)ksrt_alloc_n(A, {n}, sizeof({ce}));"
                ));
            }
            Stmt::Let(v, Rhs::TapePush { tape, val, elem }) => {
                let name = self.var(*v);
                let t = self.f.ty(*v).clone();
                let ce = c_type(elem);
                let (tape, val) = (self.op_as(tape, &t), self.op_as(val, elem));
                self.line(&format!("{} {name};", c_type(&t)));
                self.line(&format!(
                    "{name}.data = ({ce} *)ksrt_tape_reserve(A, (void *){tape}.data, {tape}.size, sizeof({ce}));"
                ));
                self.line(&format!("{name}.data[{tape}.size] = {val};"));
                self.line(&format!("{name}.size = {tape}.size + 1;"));
            }
            Stmt::Let(v, Rhs::Mark) => {
                let name = self.var(*v);
                self.line(&format!("ks_mark {name} = ksrt_mark(A);"));
            }
            Stmt::Let(v, r @ Rhs::Call { func, frame, .. }) => {
                let t = c_type(self.f.ty(*v));
                let call = self.rhs(*v, r);
                let name = self.var(*v);
                match frame {
                    // A nested call: its depth is bounded only by the
                    // native stack (the runtime's `ksrt_deeper`), and the
                    // shadow call stack grows as needed.
                    Some(site) if self.checked => {
                        let _ = func;
                        self.line(&format!(
                            "if (__builtin_expect(A->depth + 1 >= A->frames_cap || KSRT_STACK_HERE() < A->stack_end, 0)) ksrt_deeper(A, {});",
                            self.site(*site)
                        ));
                        self.line(&format!("A->frames[A->depth++] = {};", self.site(*site)));
                        self.line(&format!("{t} {name} = {call};"));
                        self.line("A->depth--;");
                    }
                    // Unchecked code keeps no shadow call stack, but still
                    // fails rather than overflow the native stack.
                    Some(site) => {
                        self.line(&format!(
                            "if (__builtin_expect(KSRT_STACK_HERE() < A->stack_end, 0)) ksrt_fail_msg(A, {}, \"recursion too deep\");",
                            self.site(*site)
                        ));
                        self.line(&format!("{t} {name} = {call};"));
                    }
                    _ => self.line(&format!("{t} {name} = {call};")),
                }
            }
            Stmt::Let(v, r) => {
                let t = c_type(self.f.ty(*v));
                let e = self.rhs(*v, r);
                let name = self.var(*v);
                self.line(&format!("{t} {name} = {e};"));
            }
            Stmt::DeclMut(v, init) => {
                let t = self.f.ty(*v).clone();
                let name = self.var(*v);
                let init = match init {
                    Some(o) => self.op_as(o, &t),
                    None => match t {
                        Type::Float => "0.0".into(),
                        Type::Integer => "0".into(),
                        Type::Bool => "false".into(),
                        Type::String => "\"\"".into(),
                        _ => "{0}".into(),
                    },
                };
                self.line(&format!("{} {name} = {init};", c_type(&t)));
            }
            Stmt::Set(v, o) => {
                let t = self.f.ty(*v).clone();
                let line = format!("{} = {};", self.var(*v), self.op_as(o, &t));
                self.line(&line);
            }
            Stmt::For { idx, n, pre, body, reset: false } if pre.is_empty() && self.runtime_loop(*idx, n, body) => {}
            Stmt::For { idx, n, pre, body, reset } => {
                let n_op = n;
                let n = self.op(n);
                let guarded = !pre.is_empty();
                if guarded {
                    self.line(&format!("if ({n} > 0) {{{}", work(self.f, pre)));
                    self.depth += 1;
                    self.block(pre);
                }
                let callees = self.callees;
                let prints = |g: FuncId| callees.iter().any(|(h, c)| *h == g && c.prints);
                // Not in a loop already made a function of its own; not
                // with too little work at any thread count.
                let parallel = self.outlined.is_some() && parallel_at_top(self.f, *idx, n_op, body, &prints);
                if parallel {
                    self.parallel_loop(*idx, n_op, &n, body, *reset);
                } else {
                    self.range_loop(*idx, "0", &n, &n, body, *reset, false);
                }
                if guarded {
                    self.depth -= 1;
                    self.line("}");
                }
            }
            Stmt::If { cond, then, els } => {
                let c = self.op(cond);
                self.line(&format!("if ({c}) {{{}", work(self.f, then)));
                self.depth += 1;
                self.block(then);
                self.depth -= 1;
                if !els.is_empty() {
                    self.line(&format!("}} else {{{}", work(self.f, els)));
                    self.depth += 1;
                    self.block(els);
                    self.depth -= 1;
                }
                self.line("}");
            }
            Stmt::Store { arr, idx, val } => {
                let et = match self.f.op_ty(arr) {
                    Type::Tensor(_, e) => (*e).clone(),
                    t => t,
                };
                let line = format!("{}.data[{}] = {};", self.op(arr), self.op(idx), self.op_as(val, &et));
                self.line(&line);
            }
            Stmt::Accum { arr, idx, val, site } => {
                let slot = format!("{}.data[{}]", self.op(arr), self.op(idx));
                let val = self.op(val);
                let line = match self.f.op_ty(arr) {
                    Type::Tensor(_, e) if *e == Type::Integer && self.checked => {
                        format!("{slot} = ksrt_iadd(A, {}, {slot}, {val});", self.site(*site))
                    }
                    Type::Tensor(_, e) if *e == Type::Integer => format!("{slot} = ksrt_wrap_add({slot}, {val});"),
                    _ => format!("{slot} += {val};"),
                };
                self.line(&line);
            }
            Stmt::Check { cond, site, err } => {
                let c = self.op(cond);
                self.line(&format!("if (__builtin_expect(!({c}), 0)) {{"));
                self.depth += 1;
                self.fail(*site, err);
                self.depth -= 1;
                self.line("}");
            }
            Stmt::Fail { site, err } => self.fail(*site, err),
            Stmt::Print { val, ty } => {
                let line = format!("ks_print_{}({});", mangle_type(ty), self.op_as(val, ty));
                self.line(&line);
            }
            Stmt::CopyDown { mark, vars } => self.copy_down(*mark, vars),
            Stmt::Reset(m) => {
                let line = format!("ksrt_reset(A, {});", self.var(*m));
                self.line(&line);
            }
            Stmt::Keep(vs) => {
                for v in vs {
                    let line = format!("KSRT_KEEP({});", self.op(v));
                    self.line(&line);
                }
            }
            Stmt::Return(o) => {
                if let Some(m) = self.f.entry_mark {
                    if !needs_heap(&self.f.ret) {
                        let line = format!("ksrt_reset(A, {});", self.var(m));
                        self.line(&line);
                    }
                }
                let line = format!("return {};", self.op_as(o, &self.f.ret.clone()));
                self.line(&line);
            }
            Stmt::TailCall(args) => {
                self.line("{");
                self.depth += 1;
                let params = self.f.params.clone();
                for (k, (a, p)) in args.iter().zip(&params).enumerate() {
                    let t = self.f.ty(*p).clone();
                    let line = format!("{} next{k} = {};", c_type(&t), self.op_as(a, &t));
                    self.line(&line);
                }
                for (k, p) in params.iter().enumerate() {
                    let line = format!("{} = next{k};", self.var(*p));
                    self.line(&line);
                }
                if let Some(m) = self.f.entry_mark {
                    // Parameters passed on unchanged live below the mark.
                    let heap: Vec<VarId> = params
                        .iter()
                        .zip(args)
                        .filter(|(p, a)| needs_heap(self.f.ty(**p)) && **a != Op::Var(**p))
                        .map(|(p, _)| *p)
                        .collect();
                    if heap.is_empty() && params.iter().all(|p| !needs_heap(self.f.ty(*p))) {
                        let line = format!("ksrt_reset(A, {});", self.var(m));
                        self.line(&line);
                    } else if !heap.is_empty() && self.invariant_heap_params_ok() {
                        self.copy_down(m, &heap);
                    }
                }
                self.line("continue;");
                self.depth -= 1;
                self.line("}");
            }
        }
    }

    /// Copying down to the entry mark is safe only if every tensor
    /// parameter that is ever passed on changed is copied each time.
    fn invariant_heap_params_ok(&self) -> bool {
        let mut changed_somewhere: FxHashSet<VarId> = FxHashSet::default();
        let mut changed_everywhere = true;
        walk(&self.f.body, &mut |s| {
            if let Stmt::TailCall(args) = s {
                for (p, a) in self.f.params.iter().zip(args) {
                    if needs_heap(self.f.ty(*p)) && *a != Op::Var(*p) {
                        changed_somewhere.insert(*p);
                    }
                }
            }
        });
        walk(&self.f.body, &mut |s| {
            if let Stmt::TailCall(args) = s {
                for (p, a) in self.f.params.iter().zip(args) {
                    if changed_somewhere.contains(p) && *a == Op::Var(*p) {
                        changed_everywhere = false;
                    }
                }
            }
        });
        changed_everywhere
    }

    /// `for (idx = lo; idx < hi; idx++) { body }` (with the arena reset
    /// after each iteration if `reset`), of a loop of `n` iterations in all
    /// (what `copy_down` weighs).
    /// `independent`: its iterations are (`parallel.rs`), and so may run
    /// in the lanes of vector instructions as well as on threads: GCC is
    /// told so (`ivdep`), as it cannot prove that the tensors the loop
    /// stores into are not those it loads from (it versions a loop on
    /// that for at most ten pairs; the loops of derivative code that
    /// store a gate's value and its stored intermediates in one pass have
    /// more, and ran scalar).
    #[allow(clippy::too_many_arguments)]
    fn range_loop(&mut self, idx: VarId, lo: &str, hi: &str, n: &str, body: &Block, reset: bool, independent: bool) {
        let i = self.var(idx);
        if reset {
            self.line("{");
            self.depth += 1;
            self.line(&format!("ks_mark mark_{i} = ksrt_mark(A);"));
        }
        // What `--reassociate` may combine in any order (one kind a loop):
        // in loops of the function's body, not in a loop, whose own body
        // has no loop: the long loops over data. GMM's sums in loops (of d
        // <= 64 terms) were 1.1 to 1.7 times slower with the mark, even
        // where a condition on the count kept them in order.
        let top = self.loop_marks.is_empty() && !body.iter().any(|s| matches!(s, Stmt::For { .. }));
        if top && !reset && !independent {
            // (Written three times, the body must have no part of a split
            // function: a part is written once.)
            let mut parts = false;
            walk(body, &mut |s| parts |= self.plan.part(s).is_some());
            if let Some(pm) = crate::reassoc::plain_maximum(self.f, idx, body).filter(|_| !parts) {
                self.lanes_maximum(idx, lo, hi, n, body, &pm);
                return;
            }
        }
        let r = if top { crate::reassoc::reductions(self.f, idx, body) } else { Default::default() };
        let names = |vs: &[VarId]| vs.iter().map(|v| self.var(*v)).collect::<Vec<_>>().join(", ");
        match (&r.sums[..], &r.maxima[..]) {
            ([], []) if independent => self.line("#pragma GCC ivdep"),
            ([], []) | ([_, ..], [_, ..]) => {}
            (sums, []) => self.line(&format!("KSRT_SUMS({})", names(sums))),
            ([], maxima) => self.line(&format!("KSRT_MAXIMA({})", names(maxima))),
        }
        self.line(&format!("for (int64_t {i} = {lo}; {i} < {hi}; {i}++) {{{}", work(self.f, body)));
        self.depth += 1;
        let mut marks = FxHashSet::default();
        walk(body, &mut |s| {
            if let Stmt::Let(m, Rhs::Mark) = s {
                marks.insert(*m);
            }
        });
        self.loop_marks.push((marks, n.to_string()));
        self.block(body);
        self.loop_marks.pop();
        if reset {
            self.line(&format!("ksrt_reset(A, mark_{i});"));
        }
        self.depth -= 1;
        self.line("}");
        if reset {
            self.depth -= 1;
            self.line("}");
        }
    }

    /// A loop that only keeps the largest of its terms
    /// ([`crate::reassoc::plain_maximum`]), `for (idx = lo; idx < hi; idx++)
    /// { lets; if (t > m) m = t; }`, perhaps with the index, `at = idx`
    /// (`imax`), with its value exactly (in every build, not only with
    /// `--reassociate`), vectorised: the iterations run in order, in
    /// rounds of [`MAX_LANES`], iteration `c + l` of a round keeping its
    /// maximum in lane `l`, each lane starting from `m`; the lanes are then
    /// combined into `m`, and the iterations after the last round run as
    /// before. Each lane holds the first of its largest terms. With the
    /// index, the lanes are combined by value and then by index, which
    /// gives the first largest term of the loop's, the loop's result. Without
    /// it, in the order of the lanes, `if (lane > m) m = lane`: the same
    /// value but for the sign of a zero (see `plain_maximum`), so when the
    /// result is a zero and `m` started below zero, the terms are computed
    /// again, in order, up to the first that equals zero, which is the
    /// loop's. `max` of a vector of 10^6 Floats, a chain of
    /// compare-and-selects one at a time, took 3 times as long.
    ///
    /// A round's loop over the lanes is marked `omp simd` (`KSRT_LANES`):
    /// its iterations are independent, and each lane's comparisons stay
    /// in order, so the value is the same; GCC's `-O3` otherwise unrolled
    /// the eight lanes into eight scalar chains before vectorising, and
    /// `max` of 10^6 Floats took 1.34 times as long (its gradient, `imax`
    /// in lanes, 1.47).
    fn lanes_maximum(&mut self, idx: VarId, lo: &str, hi: &str, n: &str, body: &Block, pm: &crate::reassoc::PlainMax) {
        let (i, m, t) = (self.var(idx), self.var(pm.m), self.op(&pm.t));
        let at = pm.at.map(|a| self.var(a));
        let lanes = MAX_LANES;
        self.line("{");
        self.depth += 1;
        self.line(&format!("const double ksrt_m0 = {m};"));
        self.line(&format!("double ksrt_lane[{lanes}];"));
        let mut init = String::from("ksrt_lane[ksrt_l] = ksrt_m0;");
        if let Some(at) = &at {
            self.line(&format!("int64_t ksrt_at[{lanes}];"));
            init.push_str(&format!(" ksrt_at[ksrt_l] = {at};"));
        }
        self.line(&format!("for (int ksrt_l = 0; ksrt_l < {lanes}; ksrt_l++) {{ {init} }}"));
        self.line(&format!("int64_t ksrt_c = {lo};"));
        self.line(&format!("for (; ksrt_c + {lanes} <= {hi}; ksrt_c += {lanes}) {{"));
        self.depth += 1;
        self.line("KSRT_LANES");
        self.line(&format!("for (int ksrt_l = 0; ksrt_l < {lanes}; ksrt_l++) {{{}", work(self.f, body)));
        self.depth += 1;
        self.line(&format!("int64_t {i} = ksrt_c + ksrt_l;"));
        self.line(&format!("double {m} = ksrt_lane[ksrt_l];"));
        if let Some(at) = &at {
            self.line(&format!("int64_t {at} = ksrt_at[ksrt_l];"));
        }
        self.loop_marks.push((FxHashSet::default(), n.to_string()));
        self.block(body);
        self.line(&format!("ksrt_lane[ksrt_l] = {m};"));
        if let Some(at) = &at {
            self.line(&format!("ksrt_at[ksrt_l] = {at};"));
        }
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("}");
        match &at {
            Some(at) => self.line(&format!(
                "for (int ksrt_l = 0; ksrt_l < {lanes}; ksrt_l++) if (ksrt_lane[ksrt_l] > {m} || (ksrt_lane[ksrt_l] == {m} && ksrt_at[ksrt_l] < {at})) {{ {m} = ksrt_lane[ksrt_l]; {at} = ksrt_at[ksrt_l]; }}"
            )),
            None => self.line(&format!(
                "for (int ksrt_l = 0; ksrt_l < {lanes}; ksrt_l++) if (ksrt_lane[ksrt_l] > {m}) {m} = ksrt_lane[ksrt_l];"
            )),
        }
        self.line(&format!("for (int64_t {i} = ksrt_c; {i} < {hi}; {i}++) {{{}", work(self.f, body)));
        self.depth += 1;
        self.block(body);
        self.depth -= 1;
        self.line("}");
        if at.is_none() {
            // The first term equal to the zero found.
            let lets: Block =
                body.iter().enumerate().filter(|(k, _)| *k != pm.update).map(|(_, s)| s.clone()).collect();
            self.line(&format!("if (__builtin_expect({m} == 0.0 && ksrt_m0 < 0.0, 0)) {{"));
            self.depth += 1;
            self.line(&format!("for (int64_t {i} = {lo}; {i} < {hi}; {i}++) {{{}", work(self.f, &lets)));
            self.depth += 1;
            self.block(&lets);
            self.line(&format!("if ({t} == 0.0) {{ {m} = {t}; break; }}"));
            self.depth -= 1;
            self.line("}");
            self.depth -= 1;
            self.line("}");
        }
        self.loop_marks.pop();
        self.depth -= 1;
        self.line("}");
    }

    /// A loop whose iterations are independent (`parallel.rs`): its
    /// iterations `lo .. hi` become a function of their own, which the
    /// serial code calls for `0 .. n`, and each thread of a team for its
    /// range on its own arena, catching its run-time errors; after the team
    /// joins, the caller's thread raises the error of the lowest failing
    /// range (the serial loop's). One copy of the loop in the C, whatever
    /// runs it.
    fn parallel_loop(&mut self, idx: VarId, n_op: &Op, n: &str, body: &Block, reset: bool) {
        let i = self.var(idx);
        let captured = crate::parallel::captured(body, idx, n_op);
        let name = format!("{}_par_{i}", local_name(&self.f.c_name, self.target));
        let mut params = vec!["ks_arena *A".to_string(), "int64_t ksrt_lo".to_string(), "int64_t ksrt_hi".to_string()];
        params.extend(captured.iter().map(|v| format!("{} {}", self.var_c_type(*v), self.var(*v))));
        let mut inner = self.nested(Vec::new(), None);
        // `n` is a literal or one of the captured values.
        inner.range_loop(idx, "ksrt_lo", "ksrt_hi", n, body, reset, true);
        // The loop, and a trampoline from the runtime's team
        // (`ksrt_par_run`) to it, reading the captured values from a struct.
        // Never inlined into the serial call: GCC's inlined copy of a loop
        // is optimised on its own, and may lose what the function's has (a
        // build of `exp`s vectorised in the function ran scalar inlined:
        // 1.8 times the time of a log-sum-exp by `reduce` at one thread),
        // and it compiles the loop twice. A loop worth a team is long
        // enough that a call costs nothing.
        let mut text =
            format!("__attribute__((noinline)) static void {name}({}) {{\n{}}}\n", params.join(", "), inner.out);
        let fields: String = captured.iter().map(|v| format!(" {} {};", self.var_c_type(*v), self.var(*v))).collect();
        let reads: String = captured.iter().map(|v| format!(", k->{}", self.var(*v))).collect();
        writeln!(text, "typedef struct {{{fields} char none; }} {name}_k;").ok();
        writeln!(
            text,
            "static void {name}_team(ks_arena *A, int64_t lo, int64_t hi, void *c) {{ {name}_k *k = ({name}_k *)c; (void)k; {name}(A, lo, hi{reads}); }}\n"
        )
        .ok();
        if let Some(out) = &mut self.outlined {
            out.push(text);
        }
        let args: String = captured.iter().map(|v| format!(", {}", self.var(*v))).collect();
        let inits: String = captured.iter().map(|v| format!("{}, ", self.var(*v))).collect();
        let cost = crate::parallel::cost(body);
        self.line(&format!("int ksrt_threads_{i} = ksrt_par_threads({n}, {cost});"));
        self.line(&format!("if (ksrt_threads_{i} > 1) {{"));
        self.line(&format!("    {name}_k k = {{{inits}0}};"));
        self.line(&format!("    ksrt_par_run(A, ksrt_threads_{i}, {n}, {name}_team, &k);"));
        self.line("} else {");
        self.line(&format!("    {name}(A, 0, {n}{args});"));
        self.line("}");
    }

    /// Emits the loop over `idx` < `n` as a call of the runtime, and says so,
    /// when `body` is one of two shapes on tensors of Floats:
    /// - `arr[idx] = +0.0`, a fill with zeros: `ksrt_zero_f`;
    /// - `dst[pos] = src[idx]; pos += 1`, a copy of `src` into place
    ///   (`$concatN`'s): `ksrt_copy_f` and `pos += n`.
    fn runtime_loop(&mut self, idx: VarId, n: &Op, body: &Block) -> bool {
        let floats = |o: &Op| matches!(self.f.op_ty(o), Type::Tensor(_, e) if *e == Type::Float);
        match &body[..] {
            [Stmt::Store { arr, idx: Op::Var(i), val: Op::Float(z) }]
                if *i == idx && *z == 0.0 && z.is_sign_positive() && floats(arr) =>
            {
                let line = format!("ksrt_zero_f({}.data, {});", self.op(arr), self.op(n));
                self.line(&line);
                true
            }
            [Stmt::Let(x, Rhs::Load { arr: src, idx: Op::Var(i) }), Stmt::Store { arr: dst, idx: Op::Var(pos), val: Op::Var(y) }, Stmt::Let(next, Rhs::Bin(BinOp::IAddNoCheck, Op::Var(p), Op::Int(1))), Stmt::Set(p2, Op::Var(n2))]
                if *i == idx
                    && x == y
                    && pos == p
                    && p == p2
                    && next == n2
                    && src != dst
                    && floats(src)
                    && floats(dst) =>
            {
                let (n, pos) = (self.op(n), self.var(*pos));
                self.line(&format!("if ({n} > 0) {{"));
                let line = format!("    ksrt_copy_f({}.data + {pos}, {}.data, {n});", self.op(dst), self.op(src));
                self.line(&line);
                self.line(&format!("    {pos} += {n};"));
                self.line("}");
                true
            }
            _ => false,
        }
    }

    /// Copies `vars` down to `mark`, freeing what was allocated above it.
    /// When the mark was taken before the loop this iteration belongs to
    /// (a fold's accumulators), the copy is put off until more than
    /// `KSRT_COPYDOWN_SLACK` bytes lie above the mark: skipping a reset
    /// frees less but never too much, memory stays bounded by the slack per
    /// loop, and a fold of small accumulators copies them once every many
    /// iterations instead of twice in each. When the mark was taken in the
    /// iteration (a scan's step, whose earlier steps' values it keeps, or
    /// a vector's element), a loop of at most `KSRT_COPYDOWN_MIN_TRIPS`
    /// iterations does not copy an iteration that left at most
    /// `KSRT_COPYDOWN_SHORT_SLACK` bytes above its mark: what stays is
    /// bounded by that many slacks per loop and freed with the scope around
    /// it (LSTM's loop over its 2 layers, per time step, copied the whole
    /// state twice per layer: 8 to 13% of the gradient).
    fn copy_down(&mut self, mark: VarId, vars: &[VarId]) {
        match self.loop_marks.last() {
            Some((inner, _)) if !inner.contains(&mark) => {
                let line = format!("if (ksrt_since(A, {}) > KSRT_COPYDOWN_SLACK) {{", self.var(mark));
                self.line(&line);
            }
            Some((_, n)) => {
                let line = format!(
                    "if ({n} > KSRT_COPYDOWN_MIN_TRIPS || ksrt_since(A, {}) > KSRT_COPYDOWN_SHORT_SLACK) {{",
                    self.var(mark)
                );
                self.line(&line);
            }
            None => self.line("{"),
        }
        self.depth += 1;
        self.line("ks_arena *S = ksrt_scratch(A);");
        self.line("ks_mark s0 = ksrt_mark(S);");
        for (k, v) in vars.iter().enumerate() {
            let t = self.f.ty(*v).clone();
            let line = format!("{} keep{k} = ks_copy_{}(S, {});", c_type(&t), mangle_type(&t), self.var(*v));
            self.line(&line);
        }
        let line = format!("ksrt_reset(A, {});", self.var(mark));
        self.line(&line);
        for (k, v) in vars.iter().enumerate() {
            let t = self.f.ty(*v).clone();
            let line = format!("{} = ks_copy_{}(A, keep{k});", self.var(*v), mangle_type(&t));
            self.line(&line);
        }
        self.line("ksrt_reset(S, s0);");
        self.depth -= 1;
        self.line("}");
    }

    fn fail(&mut self, site: SiteId, err: &ErrorKind) {
        let s = self.site(site);
        let arr = |w: &W, xs: &[Op]| format!("(int64_t[]){{{}}}", w.ints(xs));
        let line = match err {
            ErrorKind::Assert => format!("ksrt_fail_msg(A, {s}, \"assertion failed\");"),
            ErrorKind::Message(m) => format!("ksrt_fail_msg(A, {s}, {});", c_string(m)),
            ErrorKind::IndexOutOfRange { index, size } => {
                format!("ksrt_fail_index(A, {s}, {}, {}, {});", index.len(), arr(self, index), arr(self, size))
            }
            ErrorKind::NegativeSize { prim, size } => {
                format!("ksrt_fail_negative(A, {s}, {}, {}, {});", c_string(prim), size.len(), arr(self, size))
            }
            ErrorKind::SumbuildEmpty { size } => {
                format!("ksrt_fail_sumbuild(A, {s}, {}, {});", size.len(), arr(self, size))
            }
            ErrorKind::TooLarge { prim, size, limit } => {
                let (p, n, a) = (c_string(prim), size.len(), arr(self, size));
                format!("ksrt_fail_too_large(A, {s}, {p}, {n}, {a}, UINT64_C({limit}));")
            }
            ErrorKind::Sizes { what, a, b } => {
                format!("ksrt_fail_sizes(A, {s}, {}, {}, {}, {});", c_string(what), a.len(), arr(self, a), arr(self, b))
            }
            ErrorKind::Diag { rows, cols } => format!("ksrt_fail_diag(A, {s}, {}, {});", self.op(rows), self.op(cols)),
            ErrorKind::MatVec { rows, cols, n } => {
                format!("ksrt_fail_matvec(A, {s}, {}, {}, {});", self.op(rows), self.op(cols), self.op(n))
            }
        };
        self.line(&line);
    }
}
