//! Reading `.ks` text: a lexer, an S-expression reader with byte spans and
//! error recovery, and a parser from S-expressions to the surface syntax tree
//! ([`ast`]) for the grammar of the original Knossos compiler.
//!
//! Invariant: nothing here panics on any input. Every function returns what it
//! could read together with the errors it found.

pub mod ast;

pub use ast::Span;

/// A syntax error: where, and what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntaxError {
    pub span: Span,
    pub message: String,
    /// Optional extra explanation, rendered as a note under the error.
    pub note: Option<String>,
}

/// Parse a whole file. Never panics; declarations that could not be read are
/// skipped and reported in the error list.
pub fn parse_source(text: &str) -> (ast::SourceFile, Vec<SyntaxError>) {
    let _ = text;
    todo!("implemented by the reader")
}
