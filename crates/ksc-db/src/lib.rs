//! Incremental compilation of `.ks` programs with salsa.
//!
//! This crate is the only one that knows salsa. Its inputs are the text of
//! the user's file ([`SourceFile`]) and the text of the built-in prelude
//! ([`PreludeText`], set once at high durability, so a revision that changes
//! only the user's file never re-validates anything derived from the
//! prelude alone). Everything else is a tracked query:
//!
//! ```text
//! parse_file(file)        the file's declarations as Items, syntax errors
//!  └ Item                 identity: (file, kind and name) + occurrence;
//!                         fields: Core IR without positions, span map, index
//! signature(item)         the declaration with its body replaced by a
//!                         placeholder: what other declarations see of it
//! file_scopes(file)       registering every signature in order: the table of
//!                         functions each declaration sees (position-free)
//! scope(item)             this declaration's slice of it
//! checked(item)           the declaration checked against its scope: names
//!                         resolved, types filled in, and whether it is clean
//! item_diagnostics(item)  its diagnostics, located (reads positions only if
//!                         there is something to report)
//! defs_in_force(file)     which definition each function name means
//! callees(file, f)        the functions f's body calls
//! gdef_derived(item)      a gdef's derived functions (ksc_ad: derived and
//!                         optimised), reading only the definitions they use
//! file_diagnostics(file)  every diagnostic of the file, in order
//! analysis(file)          everything a run needs, as a ksc_types::Analysis
//! ```
//!
//! Positions are kept out of everything but the span map ([`Item::spans`]),
//! so moving text (an edit of a comment, of whitespace, of another
//! declaration's length) re-executes parsing and nothing that reads only
//! Core IR. Signatures are their own query, so editing a body re-checks
//! only that body: callers see its signature, which did not change.
//!
//! Diagnostics are values ([`ksc_types::Diagnostic`]). The database records
//! every query that executes (checked against salsa's `WillExecute` events),
//! for `ksc watch` and for the tests.

mod database;
mod queries;

pub use database::{Database, Db, Executed};
pub use queries::*;

/// Compiles one text from scratch through a fresh database: what the
/// one-shot commands (`ksc check`, `ksc run`, `ksc build`) do. The result
/// is the whole-file front end's: checked declarations, diagnostics and,
/// if there is no error, the derived functions of the `gdef`s.
pub fn analyze(text: &str) -> ksc_types::Analysis {
    let db = Database::new();
    let file = db.add_file(text.to_string());
    let analysis = queries::analysis(&db, file);
    drop(db);
    std::sync::Arc::unwrap_or_clone(analysis)
}
