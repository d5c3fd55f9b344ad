//! Diagnostics as data. The command line renders them (with a caret under the
//! span); tests compare them. Nothing here does I/O.

use ksc_syntax::Span;

/// Which text a span points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileRef {
    /// The built-in prelude (`prelude.ks`, compiled into ksc).
    Prelude,
    /// The user's source file.
    Source,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// A secondary location with a message: "first defined here".
#[derive(Clone, Debug, PartialEq)]
pub struct Label {
    pub file: FileRef,
    pub span: Span,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub file: FileRef,
    /// The offending text.
    pub span: Span,
    /// What to say under the caret (may be empty).
    pub span_label: String,
    pub labels: Vec<Label>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(file: FileRef, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            file,
            span,
            span_label: String::new(),
            labels: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The diagnostic of an error of the reader or parser.
    pub fn syntax(file: FileRef, e: ksc_syntax::SyntaxError) -> Diagnostic {
        let mut d = Diagnostic::error(file, e.span, e.message);
        d.notes.extend(e.note);
        d
    }

    pub fn warning(file: FileRef, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(file, span, message) }
    }

    pub fn with_span_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.span_label = label.into();
        self
    }

    pub fn with_label(mut self, file: FileRef, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { file, span, message: message.into() });
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Sets the message under the caret.
    pub fn caret(&mut self, label: impl Into<String>) -> &mut Diagnostic {
        self.span_label = label.into();
        self
    }

    pub fn label(&mut self, file: FileRef, span: Span, message: impl Into<String>) -> &mut Diagnostic {
        self.labels.push(Label { file, span, message: message.into() });
        self
    }

    pub fn note(&mut self, note: impl Into<String>) -> &mut Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

pub use ksc_syntax::edit_distance;

/// The candidates closest to `name`, if any is close enough to be a likely typo.
pub fn similar_names<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = match name.chars().count() {
        0..=2 => 1,
        3..=5 => 2,
        _ => 3,
    };
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    let best = scored.first().map(|(d, _)| *d);
    scored.into_iter().filter(|(d, _)| Some(*d) == best).map(|(_, c)| c).take(3).collect()
}
