//! What the compiler's pass pipelines share: the [`Pass`] trait, the
//! [`Runner`] that runs a pass (unless the user skipped it), checks the IR
//! after it in debug builds, and prints the IR after it when asked, and the
//! user's [`PassOptions`] (`ksc build --skip-pass P --dump-after P`), so a
//! miscompile can be bisected to one pass.
//!
//! Two pipelines use it: the derived-function pipeline on Core IR
//! (`ksc_opt::pipeline`) and the loop-IR pipeline (`ksc_lower::passes`).
//! Each declares its passes as a list that reads in the order they run.

use std::sync::OnceLock;

/// One transformation of a unit `U` (a definition, a loop-IR function)
/// that reads a context `C` (what it knows of the rest of the program).
pub trait Pass<U, C> {
    /// The name `--skip-pass` and `--dump-after` use: lower case, words
    /// joined by `-`.
    fn name(&self) -> &'static str;
    /// Whether the pass applies to this unit at all (a pass for reverse
    /// derivatives does not run on forward ones). Skipped units are not
    /// dumped.
    fn enabled(&self, _unit: &U, _cx: &C) -> bool {
        true
    }
    /// Runs the pass; whether it changed the unit. Pipelines that repeat a
    /// pass until nothing changes read this.
    fn run(&self, unit: &mut U, cx: &C) -> bool;
}

/// The user's choices of passes, for the whole process.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// Passes not run (and the lowering's switches, such as
    /// `fuse-builds`, turned off).
    pub skip: Vec<String>,
    /// Core rules and laws of linear maps left out of every rule set and
    /// every schedule (`--skip-rule`, `--ablate`).
    pub skip_rules: Vec<String>,
    /// Passes after each run of which the unit is printed to `sink`.
    pub dump_after: Vec<String>,
    /// Where dumps go (the command line prints them to standard error;
    /// this crate does no I/O).
    pub sink: Option<fn(&str)>,
}

static OPTIONS: OnceLock<PassOptions> = OnceLock::new();

/// Sets the pass options of this process. Call once, before anything is
/// compiled: the incremental database does not see them change, so a
/// second call is refused (`Err` with the options given).
pub fn configure(options: PassOptions) -> Result<(), PassOptions> {
    OPTIONS.set(options)
}

/// The pass options in force (none skipped, none dumped, unless
/// [`configure`]d).
pub fn options() -> &'static PassOptions {
    static NONE: PassOptions =
        PassOptions { skip: Vec::new(), skip_rules: Vec::new(), dump_after: Vec::new(), sink: None };
    OPTIONS.get().unwrap_or(&NONE)
}

/// Is this pass (or switch of the lowering) turned off?
pub fn skips_pass(name: &str) -> bool {
    options().skip.iter().any(|s| s == name)
}

/// Is this Core rule or law left out of every rule set?
pub fn skips_rule(name: &str) -> bool {
    options().skip_rules.iter().any(|s| s == name)
}

/// Runs passes of one pipeline on units of type `U` in context `C`.
pub struct Runner<'a, U, C> {
    pub cx: &'a C,
    /// The unit's name in dumps and verifier failures.
    pub unit_name: fn(&U) -> String,
    /// The unit as text, for `--dump-after`.
    pub print: fn(&U) -> String,
    /// A well-formedness check run after every pass in debug builds:
    /// `Some(what is wrong)` fails the compilation with the pass's name.
    pub verify: fn(&U) -> Option<String>,
}

impl<U, C> Runner<'_, U, C> {
    /// Runs `pass` on `unit` unless it is skipped or not enabled there;
    /// whether it changed the unit.
    pub fn run(&self, pass: &dyn Pass<U, C>, unit: &mut U) -> bool {
        let name = pass.name();
        let opts = options();
        if skips_pass(name) || !pass.enabled(unit, self.cx) {
            return false;
        }
        let changed = pass.run(unit, self.cx);
        if cfg!(debug_assertions) {
            if let Some(wrong) = (self.verify)(unit) {
                panic!("the IR of {} is ill-formed after pass `{name}`: {wrong}", (self.unit_name)(unit));
            }
        }
        if let Some(sink) = opts.sink {
            if opts.dump_after.iter().any(|s| s == name) {
                let what = if changed { "" } else { " (unchanged)" };
                sink(&format!("; after {name} on {}{what}\n{}\n", (self.unit_name)(unit), (self.print)(unit)));
            }
        }
        changed
    }
}
