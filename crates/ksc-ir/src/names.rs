//! Structured function names (knossos-reference.md 1.5): `f`, `[f Float]`,
//! `[rev [f (Tuple Float Integer)]]`, `[shape [rev f]]`.
//!
//! The identity of a global function is (derivations, base name, base argument
//! type). The base argument type is that of the underlying function `f`, not of
//! the derived one.

use std::fmt;

use crate::types::Type;

/// The derivations that may wrap a function name; the parser's vocabulary
/// is the IR's, so there is one definition.
pub use ksc_syntax::ast::Derivation;

/// A function name: a base identifier, its base argument type (known once the
/// name is resolved, or when written `[f T]`), and the derivations around it,
/// outermost first (`[shape [rev f]]` has `derivs = [Shape, Rev]`).
/// The index variable of the loop over the columns of a `[jac f]` (forward
/// mode) and over its rows (reverse mode): `ksc_ad`'s `jac_def` makes the
/// loops, and the `[jac f]` passes of `ksc_opt::pipeline` recognise them by
/// it.
pub const JAC_COLUMN: &str = "ksc$column";
pub const JAC_ROW: &str = "ksc$row";

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunName {
    pub derivs: Vec<Derivation>,
    pub base: String,
    pub base_ty: Option<Type>,
}

impl FunName {
    pub fn plain(base: impl Into<String>) -> FunName {
        FunName { derivs: Vec::new(), base: base.into(), base_ty: None }
    }

    pub fn typed(base: impl Into<String>, base_ty: Type) -> FunName {
        FunName { derivs: Vec::new(), base: base.into(), base_ty: Some(base_ty) }
    }

    /// This name wrapped in one more derivation: `f` becomes `[d f]`.
    pub fn derived(&self, d: Derivation) -> FunName {
        let mut derivs = Vec::with_capacity(self.derivs.len() + 1);
        derivs.push(d);
        derivs.extend_from_slice(&self.derivs);
        FunName { derivs, base: self.base.clone(), base_ty: self.base_ty.clone() }
    }

    /// The same name with the base type replaced.
    pub fn with_base_ty(&self, base_ty: Option<Type>) -> FunName {
        FunName { derivs: self.derivs.clone(), base: self.base.clone(), base_ty }
    }

    /// The name without its outermost derivation, if it has one.
    pub fn inner(&self) -> Option<(Derivation, FunName)> {
        let (first, rest) = self.derivs.split_first()?;
        Some((*first, FunName { derivs: rest.to_vec(), base: self.base.clone(), base_ty: self.base_ty.clone() }))
    }

    /// A name printed without base types, for messages: `[rev f]`.
    pub fn short(&self) -> String {
        self.with_base_ty(None).to_string()
    }
}

/// Writes the name in `.ks` syntax, with the base type if it is known:
/// `[rev [f (Tuple Float Float)]]`.
impl fmt::Display for FunName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.derivs {
            write!(f, "[{} ", d.keyword())?;
        }
        match &self.base_ty {
            Some(t) => write!(f, "[{} {}]", self.base, t)?,
            None => f.write_str(&self.base)?,
        }
        for _ in &self.derivs {
            f.write_str("]")?;
        }
        Ok(())
    }
}
