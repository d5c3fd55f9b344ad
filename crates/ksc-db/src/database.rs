//! The database: salsa's storage, the prelude input, and the log of the
//! queries that executed.

use std::sync::{Arc, Mutex};

use salsa::{Durability, Setter};

use crate::queries::{PreludeText, SourceFile};

/// What the database needs from salsa's side: the prelude input, and a place
/// to record executed queries.
#[salsa::db]
pub trait Db: salsa::Database {
    /// The built-in prelude's text (a high-durability input).
    fn prelude_input(&self) -> PreludeText;
    /// Records that a query executed, described as `query(key)`.
    fn log_execution(&self, what: String);
}

/// The queries that may take long (per declaration or per function), which
/// [`Database::activity`] reports.
const LONG_QUERIES: &[&str] =
    &["checked", "derived_one", "simplified_jacobian", "optimised", "loop_unit", "c_function"];

/// The log of executed queries: the descriptions the queries give of
/// themselves, and the number of salsa `WillExecute` events, which must
/// agree (every query of this crate describes itself).
#[derive(Clone, Default)]
struct Log {
    described: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<usize>>,
    /// The query that started last ([`Database::activity`]).
    activity: Arc<Mutex<String>>,
}

/// The queries that executed since the log was last taken.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Executed {
    /// `query(key)` for each execution, in order.
    pub queries: Vec<String>,
    /// The number of salsa `WillExecute` events seen.
    pub events: usize,
}

/// The incremental compiler's database: one user file at a time (any number
/// of [`SourceFile`]s can be created, each is compiled independently).
#[salsa::db]
#[derive(Clone)]
pub struct Database {
    storage: salsa::Storage<Self>,
    prelude: Option<PreludeText>,
    log: Log,
}

#[salsa::db]
impl salsa::Database for Database {}

#[salsa::db]
impl Db for Database {
    fn prelude_input(&self) -> PreludeText {
        self.prelude.expect("the prelude input is set when the database is made")
    }

    fn log_execution(&self, what: String) {
        if LONG_QUERIES.iter().any(|q| what.strip_prefix(q).is_some_and(|rest| rest.starts_with('('))) {
            what.clone_into(&mut self.log.activity.lock().unwrap_or_else(|e| e.into_inner()));
        }
        self.log.described.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }
}

impl Default for Database {
    fn default() -> Database {
        Database::with_prelude(ksc_types::PRELUDE_SOURCE)
    }
}

impl Database {
    /// A database with the built-in prelude.
    pub fn new() -> Database {
        Database::default()
    }

    /// A database with another prelude text (for tests).
    pub fn with_prelude(prelude: &str) -> Database {
        let log = Log::default();
        let events = log.events.clone();
        let storage = salsa::Storage::new(Some(Box::new(move |event: salsa::Event| {
            if let salsa::EventKind::WillExecute { .. } = event.kind {
                *events.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
        })));
        let mut db = Database { storage, prelude: None, log };
        let input = PreludeText::builder(prelude.to_string()).durability(Durability::HIGH).new(&db);
        db.prelude = Some(input);
        db
    }

    /// Adds a user file.
    pub fn add_file(&self, text: String) -> SourceFile {
        SourceFile::new(self, text)
    }

    /// Adds a user file whose `reduce` and `scan` check their monoid laws
    /// at run time (`ksc run --check-monoids`).
    pub fn add_file_checking_monoids(&self, text: String) -> SourceFile {
        SourceFile::builder(text).check_monoids(true).new(self)
    }

    /// Replaces a file's text (a new revision).
    pub fn set_text(&mut self, file: SourceFile, text: String) {
        file.set_text(self).to(text);
    }

    /// The description of the long query (checking, deriving, optimising,
    /// lowering or writing the C of one function: `loop_unit(f)`) that
    /// started last, shared: what a progress display shows while the
    /// database computes.
    pub fn activity(&self) -> Arc<Mutex<String>> {
        self.log.activity.clone()
    }

    /// The queries executed since the last call (and clears the log).
    pub fn take_executed(&self) -> Executed {
        let queries = std::mem::take(&mut *self.log.described.lock().unwrap_or_else(|e| e.into_inner()));
        let events = std::mem::take(&mut *self.log.events.lock().unwrap_or_else(|e| e.into_inner()));
        Executed { queries, events }
    }
}
