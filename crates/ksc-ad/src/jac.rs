//! `[jac f] : S -> Tensor 2 Float`, the dense Jacobian of `f : S -> T` at a
//! point (linear-maps-and-ad.md section 6): row r is the r-th Float of T's
//! tangent, column c the c-th Float of S's, both in the order of
//! `$tangentFlatten` (depth first, tuples left to right, tensors row-major).
//!
//! `[jac1 f]` is the Jacobian with respect to f's first parameter only (for
//! f of several parameters; the others, data, get zero tangents), as JAX's
//! `jacfwd(f)` differentiates with respect to the first argument.
//!
//! It is computed from the optimised derivatives the way seed 000 computes
//! `jacob`: column by column with `[fwd f]` applied to basis tangents, or
//! row by row with `[rev f]`, whichever is fewer (decided by the types when
//! both dimensions are fixed, else at run time). The derivative is inlined
//! into the loop over columns (rows), and after optimisation the pass
//! `hoist-loop-invariants` (ksc-opt's `pipeline/jac.rs`) moves the work that
//! does not depend on the column (the primal computation) out of that
//! loop, so it is done once.

use ksc_ir::builder::Builder;
use ksc_ir::names::{JAC_COLUMN as COLUMN, JAC_ROW as ROW};
use ksc_ir::{Body, Def, Derivation, Expr, ExprId, FunName, Param, Prim, Type};

/// What the columns of the matrix are: the whole argument, or (for
/// `[jac1 f]` of a function of several parameters) its first parameter.
pub enum Active {
    All,
    First { ty: Type, arity: u32 },
}

impl Active {
    /// For `[d f]`, f of `params` parameters and argument type `s`.
    pub fn new(d: Derivation, s: &Type, params: usize) -> Active {
        match (d, s) {
            (Derivation::Jac1, Type::Tuple(ts)) if params >= 2 => {
                Active::First { ty: ts[0].clone(), arity: ts.len() as u32 }
            }
            _ => Active::All,
        }
    }

    /// The type of the active part of an argument of type `s`.
    fn ty<'a>(&'a self, s: &'a Type) -> &'a Type {
        match self {
            Active::All => s,
            Active::First { ty, .. } => ty,
        }
    }

    /// The active part of the argument `x` (a variable of type `s`).
    fn part(&self, b: &mut Builder, x: &str, s: &Type) -> ExprId {
        let v = b.var(x, s.clone());
        match self {
            Active::All => v,
            Active::First { arity, .. } => b.prim(Prim::Get { index: 1, arity: *arity }, vec![v]),
        }
    }

    /// The whole argument's tangent from the active part's `d`: zeros for
    /// the other parameters.
    fn extend(&self, b: &mut Builder, d: ExprId, x: &str, s: &Type) -> ExprId {
        let Active::First { arity, .. } = self else { return d };
        let mut parts = vec![d];
        for i in 2..=*arity {
            let v = b.var(x, s.clone());
            let w = b.prim(Prim::Get { index: i, arity: *arity }, vec![v]);
            parts.push(b.zero_tangent(w));
        }
        b.tuple(parts)
    }

    /// The active part of the whole argument's tangent `d`.
    fn project(&self, b: &mut Builder, d: ExprId) -> ExprId {
        match self {
            Active::All => d,
            Active::First { arity, .. } => b.prim(Prim::Get { index: 1, arity: *arity }, vec![d]),
        }
    }
}

/// Which derivatives `[jac f]` calls, for `f : S -> T`.
pub fn needs(active: &Active, s: &Type, t: &Type) -> Vec<Derivation> {
    match (active.ty(s).fixed_float_count(), t.fixed_float_count()) {
        (Some(0), _) | (_, Some(0)) => vec![],
        (Some(n), Some(m)) if n <= m => vec![Derivation::Fwd],
        (Some(_), Some(_)) => vec![Derivation::Rev],
        _ => vec![Derivation::Fwd, Derivation::Rev],
    }
}

/// `[jac f]` for `f : S -> T`:
///
/// ```text
/// [jac f] x = let y = f x; n = $tangentDim x; m = $tangentDim y
///             (for a tensor of Floats, y is not computed: m is the
///             product of `shape (f x)`, and the basis point the zeros of
///             that shape)
///             in if (n == 0 || m == 0) then (an m x n matrix)
///                else if n <= m then   -- columns by forward mode
///                  let cols = $concatN (n, m) (build n (lam c ($tangentFlatten ($inline ([fwd f] x ($tangentBasis x c))))))
///                  in build (m, n) (lam (r, c) cols[c, r])
///                else                  -- rows by reverse mode
///                  $concatN (m, n) (build m (lam r ($tangentFlatten ($inline ([rev f] x ($tangentBasis y r))))))
/// ```
///
/// with the tests decided here when the types fix the dimensions.
pub fn jac_def(name: Derivation, f: &FunName, s: &Type, t: &Type, active: &Active) -> Def {
    let mut body = Body::new();
    let mut fresh = 0u32;
    let mut b = Builder::new(&mut body, &mut fresh);
    let (ds, dt) = (s.tangent().unwrap_or(Type::Unknown), t.tangent().unwrap_or(Type::Unknown));
    let var = |b: &mut Builder, name: &str, ty: &Type| b.var(name, ty.clone());
    let dim = |b: &mut Builder, fixed: Option<usize>, of: &dyn Fn(&mut Builder) -> ExprId| match fixed {
        Some(k) => b.integer(k as i64),
        None => {
            let v = of(b);
            b.prim(Prim::TangentDim, vec![v])
        }
    };
    let n = dim(&mut b, active.ty(s).fixed_float_count(), &|b| active.part(b, "ksc$x", s));
    // A result that is a tensor of Floats has as many as its shape says:
    // `shape (f x)`, which the shape rules compute without f's values where
    // they can, sizes the matrix, and the zeros of that shape are the point
    // of reverse mode's basis; f itself is not run. Any other result is
    // computed (`ksc$y`) for its dimension.
    let float_tensor = match t {
        Type::Tensor(rank, e) if **e == Type::Float => Some(*rank),
        _ => None,
    };
    let shape_ty = t.shape().unwrap_or(Type::Unknown);
    let m = match float_tensor {
        Some(rank) => {
            let dims: Vec<ExprId> = (0..rank)
                .map(|k| {
                    let sh = b.var("ksc$shape", shape_ty.clone());
                    if rank == 1 {
                        sh
                    } else {
                        b.prim(Prim::Get { index: k as u32 + 1, arity: rank as u32 }, vec![sh])
                    }
                })
                .collect();
            dims.into_iter().reduce(|p, q| b.int_op("mul", p, q)).expect("a rank of at least 1")
        }
        None => dim(&mut b, t.fixed_float_count(), &|b| b.var("ksc$y", t.clone())),
    };

    // The m x n matrix whose entry (r, c) is `entry(r, c)`.
    let matrix = |b: &mut Builder, entry: &dyn Fn(&mut Builder, ExprId, ExprId) -> ExprId| {
        let (m, n) = (var(b, "ksc$m", &Type::Integer), var(b, "ksc$n", &Type::Integer));
        let size = b.tuple(vec![m, n]);
        b.build(size, |b, rc| {
            let r = b.prim(Prim::Get { index: 1, arity: 2 }, vec![rc]);
            let rc2 = b.copy(rc);
            let c = b.prim(Prim::Get { index: 2, arity: 2 }, vec![rc2]);
            entry(b, r, c)
        })
    };
    // One derivative per column (forward) or row (reverse), flattened.
    let sweep = |b: &mut Builder, d: Derivation| {
        let (count, index, ret) = match d {
            Derivation::Fwd => ("ksc$n", COLUMN, &dt),
            _ => ("ksc$m", ROW, &ds),
        };
        let size = var(b, count, &Type::Integer);
        let k = var(b, index, &Type::Integer);
        let basis = if d == Derivation::Fwd {
            let point = active.part(b, "ksc$x", s);
            let e = b.prim(Prim::TangentBasis, vec![point, k]);
            active.extend(b, e, "ksc$x", s)
        } else {
            // A result of fixed dimension has a basis without its value
            // (`$dummy`: so f's result need not be computed for its shape).
            let point = match (t.fixed_float_count(), float_tensor) {
                (Some(_), _) => b.body.alloc_typed(Expr::Dummy(t.clone()), t.clone()),
                (None, Some(_)) => {
                    let sh = var(b, "ksc$shape", &shape_ty);
                    let zero = b.float(0.0);
                    b.prim(Prim::ConstVec, vec![sh, zero])
                }
                (None, None) => var(b, "ksc$y", t),
            };
            b.prim(Prim::TangentBasis, vec![point, k])
        };
        let x = var(b, "ksc$x", s);
        let call = b.call(f.derived(d), vec![x, basis], ret.clone());
        let inlined = b.prim(Prim::Inline, vec![call]);
        let derivative = if d == Derivation::Fwd { inlined } else { active.project(b, inlined) };
        let flat = b.prim(Prim::TangentFlatten, vec![derivative]);
        let lam = b.lam(index, Type::Integer, flat);
        let vectors = b.prim(Prim::Build, vec![size, lam]);
        // The rows (columns), one after the other: each is computed, copied
        // into the matrix (its transpose) and freed.
        let (m, n) = (var(b, "ksc$m", &Type::Integer), var(b, "ksc$n", &Type::Integer));
        let shape = if d == Derivation::Fwd { b.tuple(vec![n, m]) } else { b.tuple(vec![m, n]) };
        let stacked = b.prim(Prim::ConcatN, vec![shape, vectors]);
        if d != Derivation::Fwd {
            return stacked;
        }
        let tty = b.ty(stacked);
        let read = matrix(b, &|b, r, c| {
            let cols = b.var("ksc$columns", tty.clone());
            let cr = b.tuple(vec![c, r]);
            b.prim(Prim::Index, vec![cr, cols])
        });
        b.let_("ksc$columns", stacked, read)
    };
    let zeros = |b: &mut Builder| matrix(b, &|b, _, _| b.float(0.0));
    let result = match needs(active, s, t)[..] {
        [] => zeros(&mut b),
        [d] => sweep(&mut b, d),
        _ => {
            // Decided at run time; the zero test keeps the sweeps' loops
            // non-empty, so work hoisted out of them runs only if they would.
            // (A fixed dimension is not 0 here: `needs` is empty then.)
            let mut zero_tests = Vec::new();
            for (name, fixed) in [("ksc$n", active.ty(s).fixed_float_count()), ("ksc$m", t.fixed_float_count())] {
                if fixed.is_none() {
                    let (d, z) = (var(&mut b, name, &Type::Integer), b.integer(0));
                    zero_tests.push(b.prim(Prim::Eq, vec![d, z]));
                }
            }
            let bools = Type::Tuple(vec![Type::Bool, Type::Bool]);
            let empty = zero_tests
                .into_iter()
                .reduce(|p, q| b.call(FunName::typed("or", bools.clone()), vec![p, q], Type::Bool))
                .expect("a dimension that is not fixed");
            let (n1, m1) = (var(&mut b, "ksc$n", &Type::Integer), var(&mut b, "ksc$m", &Type::Integer));
            let columns = b.int_test("lte", n1, m1);
            let fwd = sweep(&mut b, Derivation::Fwd);
            let rev = sweep(&mut b, Derivation::Rev);
            let choose = b.body.alloc_typed(Expr::If(columns, fwd, rev), Type::tensor(2, Type::Float));
            let z = zeros(&mut b);
            b.body.alloc_typed(Expr::If(empty, z, choose), Type::tensor(2, Type::Float))
        }
    };
    let with_dims = b.let_("ksc$m", m, result);
    let with_dims = b.let_("ksc$n", n, with_dims);
    let x = var(&mut b, "ksc$x", s);
    let y = b.call(f.clone(), vec![x], t.clone());
    let root = match float_tensor {
        Some(_) => {
            let sh = b.prim(Prim::Shape, vec![y]);
            b.let_("ksc$shape", sh, with_dims)
        }
        None => b.let_("ksc$y", y, with_dims),
    };
    Def {
        name: f.derived(name),
        params: vec![Param { name: "ksc$x".into(), ty: s.clone() }],
        ret_ty: Type::tensor(2, Type::Float),
        body,
        root,
    }
}
