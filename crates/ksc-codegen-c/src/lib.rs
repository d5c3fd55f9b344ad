//! C code generation for ksc: readable C99 from the loop IR, the small C
//! runtime (`ksc_runtime.h` and `ksc_runtime.c`: arena, printing, errors,
//! the prelude's maths, parallel loops), running the system C compiler
//! with results cached by content hash, and running compiled programs.
//!
//! This crate and the command line are the only parts of ksc that start
//! processes.

pub mod driver;
pub mod emit;
pub mod parallel;
pub mod reassoc;
pub mod split;

pub use driver::{compile_c, compile_program, run_executable, Artefact, BuildError, CcConfig, Outcome};
pub use emit::{
    callees, callees_with, emit, emit_with, function, CProgram, CalleeSig, FunctionC, ModuleView, SiteLocation, Target,
    RUNTIME_C, RUNTIME_H,
};
