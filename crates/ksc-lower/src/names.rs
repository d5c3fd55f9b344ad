//! C names of definitions, following the original compiler's mangling.
//!
//! - A derived function `[d f]` is `d$f`: `[rev f]` is `rev$f`,
//!   `[shape [rev f]]` is `shape$rev$f`.
//! - Only where a name is overloaded (several definitions with the same
//!   derivations and base name) the base argument type follows as `$a` and
//!   the mangled argument types: `rev$mul$aff` for `[rev [mul (Tuple Float
//!   Float)]]`, `dot$aT1fT1f` for `[dot (Tuple (Vec Float) (Vec Float))]`.
//! - Types mangle as `f` Float, `i` Integer, `b` Bool, `s` String, `T<n><e>`
//!   a tensor of rank n (`T1f` is `Vec Float`), and `t<n>` followed by the
//!   components for a tuple of n components (`t2fi`; the original wrote
//!   `<fi>`, which is not valid in C).
//! - Characters a C identifier cannot hold are written `_xHH_` (hex).
//! - A plain name that is a C keyword, a name of the C library or `main`,
//!   or that starts with `ks`, is prefixed `ks$` (so `main` is `ks$main`).
//! - If two names still collide, later ones get `$2`, `$3`, ...

use ksc_ir::{FunName, Type};
use rustc_hash::{FxHashMap, FxHashSet};

/// The mangled form of a type.
pub fn mangle_type(t: &Type) -> String {
    match t {
        Type::Float => "f".into(),
        Type::Integer => "i".into(),
        Type::Bool => "b".into(),
        Type::String => "s".into(),
        Type::Tuple(ts) => format!("t{}{}", ts.len(), ts.iter().map(mangle_type).collect::<String>()),
        Type::Tensor(n, e) => format!("T{n}{}", mangle_type(e)),
        Type::Lam(a, b) => format!("l{}{}", mangle_type(a), mangle_type(b)),
        Type::LM(a, b) => format!("LM{}{}", mangle_type(a), mangle_type(b)),
        Type::Unknown => "u".into(),
    }
}

/// The argument part of a mangled name: the components of a tuple, or the type.
fn mangle_args(t: &Type) -> String {
    match t {
        Type::Tuple(ts) => ts.iter().map(mangle_type).collect(),
        t => mangle_type(t),
    }
}

const C_RESERVED: &[&str] = &[
    // C99 keywords
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "_Bool",
    "_Complex",
    "_Imaginary",
    "bool",
    "true",
    "false",
    "asm",
    "typeof",
    // The entry point and the C library (stdio, stdlib, string, math, time, POSIX).
    "main",
    "printf",
    "fprintf",
    "sprintf",
    "snprintf",
    "puts",
    "putchar",
    "fputs",
    "fwrite",
    "fflush",
    "stdout",
    "stderr",
    "stdin",
    "malloc",
    "calloc",
    "realloc",
    "free",
    "exit",
    "abort",
    "atexit",
    "memcpy",
    "memmove",
    "memset",
    "memcmp",
    "strcmp",
    "strlen",
    "strcpy",
    "index",
    "rindex",
    "time",
    "clock",
    "rand",
    "srand",
    "random",
    "getenv",
    "system",
    "signal",
    "raise",
    "errno",
    "assert",
    "abs",
    "labs",
    "div",
    "ldiv",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "pow",
    "sqrt",
    "cbrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "lgamma",
    "tgamma",
    "gamma",
    "floor",
    "ceil",
    "round",
    "trunc",
    "fabs",
    "fmod",
    "fmin",
    "fmax",
    "hypot",
    "ldexp",
    "frexp",
    "modf",
    "nan",
    "isnan",
    "isinf",
    "j0",
    "j1",
    "jn",
    "y0",
    "y1",
    "yn",
    "signgam",
    "drem",
    "scalb",
    "remainder",
    "copysign",
    "nextafter",
    "fma",
    "max",
    "min",
    "read",
    "write",
    "open",
    "close",
    "sleep",
    "select",
    "poll",
    "dup",
    "pipe",
    "fork",
    "kill",
    "link",
    "unlink",
    "sync",
    "stat",
    "access",
    "chdir",
    "getpid",
    "environ",
];

/// A base name as a C identifier.
fn c_ident(base: &str) -> String {
    let mut s = String::new();
    for c in base.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '$' {
            s.push(c);
        } else {
            s.push_str(&format!("_x{:02x}_", c as u32));
        }
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// The C names of these definitions, in order.
pub fn c_names(names: &[&FunName]) -> Vec<String> {
    let mut groups: FxHashMap<(Vec<ksc_ir::Derivation>, &str), usize> = FxHashMap::default();
    for n in names {
        *groups.entry((n.derivs.clone(), n.base.as_str())).or_default() += 1;
    }
    let mut used: FxHashSet<String> = FxHashSet::default();
    names
        .iter()
        .map(|n| {
            let mut s = String::new();
            for d in &n.derivs {
                s.push_str(d.keyword());
                s.push('$');
            }
            let base = c_ident(&n.base);
            if n.derivs.is_empty() && (C_RESERVED.contains(&base.as_str()) || base.starts_with("ks")) {
                s.push_str("ks$");
            }
            s.push_str(&base);
            if groups[&(n.derivs.clone(), n.base.as_str())] > 1 {
                if let Some(t) = &n.base_ty {
                    s.push_str("$a");
                    s.push_str(&mangle_args(t));
                }
            }
            let mut unique = s.clone();
            let mut k = 2;
            while !used.insert(unique.clone()) {
                unique = format!("{s}${k}");
                k += 1;
            }
            unique
        })
        .collect()
}
