//! Rendering diagnostics for people: `file:line:column`, the source line and
//! a caret under the offending text (codespan-reporting).

use std::io::IsTerminal;

use crate::{Diagnostic, FileRef, Severity, PRELUDE_SOURCE};
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label as CsLabel, Severity as CsSeverity};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor};

/// The texts diagnostics point into: the user's file and the built-in prelude.
pub struct Sources {
    files: SimpleFiles<String, String>,
    source: usize,
    prelude: usize,
}

/// The name under which the built-in prelude appears in messages.
pub use crate::PRELUDE_NAME;

impl Sources {
    pub fn new(path: &str, text: &str) -> Sources {
        let mut files = SimpleFiles::new();
        let source = files.add(path.to_string(), text.to_string());
        let prelude = files.add(PRELUDE_NAME.to_string(), PRELUDE_SOURCE.to_string());
        Sources { files, source, prelude }
    }

    /// The text of the program, as read once by `analyze`.
    pub fn source_text(&self) -> &str {
        self.files.get(self.source).expect("the source file is always added").source()
    }

    fn id(&self, f: FileRef) -> usize {
        match f {
            FileRef::Source => self.source,
            FileRef::Prelude => self.prelude,
        }
    }

    fn convert(&self, d: &Diagnostic) -> CsDiagnostic<usize> {
        let severity = match d.severity {
            Severity::Error => CsSeverity::Error,
            Severity::Warning => CsSeverity::Warning,
        };
        let mut labels = vec![CsLabel::primary(self.id(d.file), d.span.range()).with_message(&d.span_label)];
        labels.extend(
            d.labels.iter().map(|l| CsLabel::secondary(self.id(l.file), l.span.range()).with_message(&l.message)),
        );
        CsDiagnostic::new(severity).with_message(&d.message).with_labels(labels).with_notes(d.notes.clone())
    }

    /// Render diagnostics as plain text, as they appear on a terminal without colour.
    pub fn render_plain(&self, diagnostics: &[Diagnostic]) -> String {
        let config = term::Config::default();
        let mut out = String::new();
        for d in diagnostics {
            if term::emit_to_string(&mut out, &config, &self.files, &self.convert(d)).is_err() {
                // A span outside its file would be a ksc bug; still say what went wrong.
                out.push_str(&format!("{}: {}\n", severity_word(d.severity), d.message));
            }
        }
        out
    }

    /// Write diagnostics to stderr, in colour when stderr is a terminal.
    pub fn emit(&self, diagnostics: &[Diagnostic]) {
        if diagnostics.is_empty() {
            return;
        }
        let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        if !colour {
            eprint!("{}", self.render_plain(diagnostics));
            return;
        }
        let mut stream = termcolor::StandardStream::stderr(termcolor::ColorChoice::Always);
        let config = term::Config::default();
        for d in diagnostics {
            if term::emit_to_write_style(&mut stream, &config, &self.files, &self.convert(d)).is_err() {
                eprintln!("{}: {}", severity_word(d.severity), d.message);
            }
        }
    }
}

fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// "aborting: 2 errors, 1 warning" style summary, or None if there were no errors.
pub fn error_summary(diagnostics: &[Diagnostic]) -> Option<String> {
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    if errors == 0 {
        return None;
    }
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    Some(plural(errors, "error"))
}
