//! Reading `.ks` text: a lexer, an S-expression reader with byte spans and
//! error recovery ([`sexpr`]), and a parser from S-expressions to the surface
//! syntax tree ([`ast`]) for the grammar of the original Knossos compiler
//! (`knossos-reference.md`, section 1).
//!
//! Invariant: nothing here panics on any input. Every function returns what it
//! could read together with the errors it found.
//!
//! Decisions beyond the original grammar:
//!
//! * Errors: a declaration with an error is skipped and the next one is read.
//!   Independent errors inside one declaration are all reported; a part that
//!   failed (or a token the reader already reported, kept as
//!   [`sexpr::Atom::Invalid`]) produces no further errors. A form whose
//!   brackets the reader had to guess is parsed silently (kept if it parses).
//! * Numbers: a token starting with a digit (after an optional sign) must be a
//!   whole number literal (`1.`, `12ab` and `1e` are errors, not misread);
//!   integers must fit in an `i64`, floats must be finite.
//! * Signs: in expression position a lone `-` / `+` followed by an unsigned
//!   number is one literal (`(f - 3)` is `f` applied to -3, as in the
//!   original); `-x` is an ordinary variable. A printer must therefore write a
//!   non-negative number that follows a variable named `-` or `+` as `+3`.
//! * `edef` argument type: `(T1 .. Tn)` with n >= 2 means `(Tuple T1 .. Tn)`
//!   (as ksc-mlir reads it); `(T)` is just `T` everywhere.
//! * In parameter position `x : Tuple` is the empty tuple type (the compound
//!   form without parentheses, as in the original).
//! * Nesting deeper than [`sexpr::MAX_DEPTH`] is reported, in the reader and
//!   in the parser; at that depth parsing needs about 1 MiB of stack.
//! * An expression inside more than [`MAX_LET_DEPTH`] `let` bindings (a
//!   `let` of n bindings nests what follows each binding one level deeper in
//!   Core IR) is reported, as deep bracket nesting is.
//! * The rank of a `Tensor` type is at most [`MAX_RANK`] (a located error
//!   beyond), so nothing later allocates in proportion to a number written
//!   in the source.
//!
//! ```
//! let (file, errors) = ksc_syntax::parse_source("(def f Float (x : Float) (mul x 2.0))");
//! assert!(errors.is_empty());
//! assert_eq!(file.decls.len(), 1);
//! ```

pub mod ast;
mod parse;
pub mod sexpr;

pub use ast::Span;
pub use parse::{edit_distance, is_reserved, MAX_LET_DEPTH, MAX_RANK, RESERVED};

/// Internals the integration tests check directly
/// (`tests/parse_internals.rs`); not part of the API.
#[doc(hidden)]
pub mod testing {
    pub use crate::parse::{parse_forms, suggest, TYPE_WORDS};
}

/// A syntax error: where, and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntaxError {
    pub span: Span,
    pub message: String,
    /// Optional extra explanation, rendered as a note under the error.
    pub note: Option<String>,
}

impl SyntaxError {
    pub fn new(span: Span, message: impl Into<String>) -> SyntaxError {
        SyntaxError { span, message: message.into(), note: None }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> SyntaxError {
        self.note = Some(note.into());
        self
    }
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}: {}", self.span.start, self.span.end, self.message)?;
        if let Some(note) = &self.note {
            write!(f, " (note: {note})")?;
        }
        Ok(())
    }
}

impl std::error::Error for SyntaxError {}

/// Parse a whole file. Never panics; declarations that could not be read are
/// skipped and reported in the error list, which is sorted by position.
///
/// Every top-level form either becomes a declaration or is the subject of at
/// least one error: nothing is dropped silently.
pub fn parse_source(text: &str) -> (ast::SourceFile, Vec<SyntaxError>) {
    let (forms, mut errors) = sexpr::read_sexprs(text);
    let (file, parse_errors) = parse::parse_forms(text, &forms);
    errors.extend(parse_errors);
    errors.sort_by_key(|e| (e.span.start, e.span.end));
    (file, errors)
}
