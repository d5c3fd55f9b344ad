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
//! def_of(file, f)         the checked definition in force for f
//! is_defined(file, f)     whether f has one (what callers' derivations read)
//! jacobian_of(file, f)    [D f] of a written f (unsimplified), shared by the
//!                         derivations from it
//! derived_one(file, f)    one derived function, derived (ksc_ad::derive_one):
//!                         reads the body it differentiates, and only names
//!                         of its callees; lists the derivatives it calls
//! Request(file, f)       interned: a derived function asked for, by a gdef
//!                         or by `ksc deriv`/`ksc jacobian`
//! closure(request)        the derived functions it needs, transitively
//! optimised(request, f)   one of them optimised (ksc_opt::pipeline::optimise_derived); the
//!                         optimiser reads callees through the next two
//! small_def_of(request, f, ..)  f's body if small enough to inline, else None
//! facts_of(request, f)    whether f may print, whether it recurses
//! gdef_derived(item)      a gdef's derived functions, optimised (through
//!                         derive_request, which `ksc deriv` calls too)
//! simplified_jacobian(file, f, trace)  [D f] simplified, and the rules that
//!                         fired: what `ksc jacobian` prints
//! file_diagnostics(file)  every diagnostic of the file, in order
//! analysis(file)          everything a run needs, as a ksc_types::Analysis
//! lowering_facts(file, library)  what lowering needs of every definition:
//!                         signatures, effects, inlined or not (a library's
//!                         entry points are compiled anyway), fresh results,
//!                         C names
//! loop_unit(file, f, ..)  f lowered to loop IR and optimised by itself
//!                         (ksc_lower::compile_unit), reading its body and
//!                         those it inlines
//! module_layout(file, roots, ..)  how the units are numbered in the module
//!                         (ksc_lower::layout); layout_row(.., i) is one
//!                         function's row of it
//! linked_function(.., i)  function i's unit renumbered (ksc_lower::link_one),
//!                         with its callees' signatures (callee_sig)
//! native_module(file, roots, ..)  the whole linked module (--emit loops,
//!                         run-time error locations)
//! c_function(file, roots, .., i)  the C of the module's function i
//! c_unit(file, ..)        the file's C (ksc_codegen_c::emit_with)
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
mod native;
pub mod progress;
mod queries;

pub use database::{Database, Db, Executed};
pub use native::*;
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
