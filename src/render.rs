//! Rendering diagnostics: [`ksc_types::render`], shared with the Python package.

pub use ksc_types::render::*;
