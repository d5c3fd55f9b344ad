//! The binders above the node a strategy is looking at.
//!
//! Traversals push the variables a `let` or `lam` binds when they descend
//! into its body, so a rule can ask what a name refers to there. A lambda
//! that is the function of a `build` or `sumbuild` binds an index known to
//! lie in `0 .. size`; the scope records that size expression (which stands
//! outside the lambda) and how many binders were visible where it stands, so
//! a rule can check that a size written inside the lambda means the same.

use ksc_ir::{ExprId, Var};

/// The range `0 .. size` of an index variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The size expression, outside the lambda.
    pub size: ExprId,
    /// The number of binders in scope at the size expression.
    pub visible: usize,
}

/// One binder.
#[derive(Clone, Debug)]
pub struct Binding {
    pub name: Var,
    /// Set for the index of a `build`/`sumbuild` lambda.
    pub range: Option<Range>,
    /// The right side of the `let` that binds this variable alone.
    pub value: Option<ExprId>,
}

/// The binders in scope, outermost first.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    binds: Vec<Binding>,
}

impl Scope {
    pub fn new() -> Scope {
        Scope::default()
    }

    /// The number of binders in scope.
    pub fn len(&self) -> usize {
        self.binds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.binds.is_empty()
    }

    /// Every binder, outermost first (a binder's position is its index).
    pub fn bindings(&self) -> &[Binding] {
        &self.binds
    }

    /// The innermost binder of `name` and its position (None: bound outside
    /// the term being rewritten, or a parameter).
    pub fn lookup(&self, name: &str) -> Option<(usize, &Binding)> {
        self.binds.iter().enumerate().rev().find(|(_, b)| b.name == name)
    }

    /// Binds `vars` (the range is given to a lambda's single parameter, the
    /// value to a let's single variable).
    pub(crate) fn push(&mut self, vars: &[Var], range: Option<ExprId>, value: Option<ExprId>) -> usize {
        let mark = self.binds.len();
        let range = range.map(|size| Range { size, visible: mark });
        self.binds.extend(vars.iter().map(|v| Binding { name: v.clone(), range, value }));
        mark
    }

    /// Renames the nodes the bindings refer to (after the arena is
    /// compacted: see `engine`).
    pub(crate) fn remap(&mut self, f: &dyn Fn(ExprId) -> ExprId) {
        for b in &mut self.binds {
            if let Some(r) = &mut b.range {
                r.size = f(r.size);
            }
            b.value = b.value.map(f);
        }
    }

    /// The nodes the bindings refer to.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = ExprId> + '_ {
        self.binds.iter().flat_map(|b| b.range.map(|r| r.size).into_iter().chain(b.value))
    }

    /// Unbinds everything bound since `mark`.
    pub(crate) fn truncate(&mut self, mark: usize) {
        self.binds.truncate(mark);
    }
}
