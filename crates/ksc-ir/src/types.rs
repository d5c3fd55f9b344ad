//! The types of Core IR (knossos-reference.md 2.1).

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Type {
    Bool,
    Integer,
    Float,
    String,
    /// `(Tuple T1 .. Tn)`; `(Tuple)` is the unit type.
    Tuple(Vec<Type>),
    /// `(Tensor n T)`, n >= 1; `Vec T` is `Tensor 1 T`.
    Tensor(usize, Box<Type>),
    /// `(Lam S T)`: the type of a lambda, only as an argument of a primitive.
    Lam(Box<Type>, Box<Type>),
    /// `(LM S T)`: a linear map from the tangent space of S to that of T.
    LM(Box<Type>, Box<Type>),
    /// The type of an expression that failed to type-check; compatible with
    /// everything, so one error does not cause a cascade of others.
    Unknown,
}

impl Type {
    pub fn unit() -> Type {
        Type::Tuple(Vec::new())
    }
    /// The tape of split reverse mode for `f : S -> T`: one record per call
    /// of f, its result and the positions of its recursive calls' records.
    pub fn tape(t: &Type) -> Type {
        Type::vec(Type::Tuple(vec![t.clone(), Type::vec(Type::Integer)]))
    }
    /// The residuals `[suffwdpass f] : S -> (T, residuals)` keeps for
    /// `[sufrevpass [f S]]`: the argument, the tape, and the position of
    /// this call's record in it.
    pub fn residuals(s: &Type, t: &Type) -> Type {
        Type::Tuple(vec![s.clone(), Type::tape(t), Type::Integer])
    }
    pub fn vec(elem: Type) -> Type {
        Type::Tensor(1, Box::new(elem))
    }
    pub fn tensor(rank: usize, elem: Type) -> Type {
        Type::Tensor(rank, Box::new(elem))
    }
    pub fn lam(arg: Type, ret: Type) -> Type {
        Type::Lam(Box::new(arg), Box::new(ret))
    }
    pub fn lm(source: Type, target: Type) -> Type {
        Type::LM(Box::new(source), Box::new(target))
    }
    /// A sparse matrix in compressed sparse row form, as `[jacsparse f]`
    /// returns it: `(Tuple (Tuple rows cols) row_offsets columns values)`.
    pub fn sparse_matrix() -> Type {
        let ints = Type::vec(Type::Integer);
        Type::Tuple(vec![Type::Tuple(vec![Type::Integer, Type::Integer]), ints.clone(), ints, Type::vec(Type::Float)])
    }

    /// The type of the argument of a function with these parameter types: the
    /// single type for one parameter, their tuple otherwise.
    pub fn of_params<I: IntoIterator<Item = Type>>(tys: I) -> Type {
        let mut tys: Vec<Type> = tys.into_iter().collect();
        if tys.len() == 1 {
            tys.pop().unwrap()
        } else {
            Type::Tuple(tys)
        }
    }

    /// The index (and size) type of a rank-`rank` tensor: `Integer` for rank 1,
    /// a tuple of `rank` Integers otherwise.
    pub fn index_type(rank: usize) -> Type {
        if rank == 1 {
            Type::Integer
        } else {
            Type::Tuple(vec![Type::Integer; rank])
        }
    }

    /// The rank of the tensor whose index type this is, if it is one.
    pub fn index_rank(&self) -> Option<usize> {
        match self {
            Type::Integer => Some(1),
            Type::Tuple(ts) if ts.len() >= 2 && ts.iter().all(|t| *t == Type::Integer) => Some(ts.len()),
            _ => None,
        }
    }

    /// Does a value of this type hold a lambda (`Lam` anywhere in it)?
    pub fn holds_lam(&self) -> bool {
        match self {
            Type::Lam(..) => true,
            Type::Tuple(ts) => ts.iter().any(Type::holds_lam),
            Type::Tensor(_, e) => e.holds_lam(),
            _ => false,
        }
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self, Type::Unknown)
    }

    /// Does a value of this type hold a tensor (itself, or a component of
    /// its tuple)? Such values live in memory of their own (the loop IR's
    /// heap), and are not scalars to compute again where they are read.
    pub fn holds_tensor(&self) -> bool {
        match self {
            Type::Tensor(..) => true,
            Type::Tuple(ts) => ts.iter().any(Type::holds_tensor),
            _ => false,
        }
    }

    /// Does this type mention `Unknown` anywhere?
    pub fn contains_unknown(&self) -> bool {
        match self {
            Type::Unknown => true,
            Type::Bool | Type::Integer | Type::Float | Type::String => false,
            Type::Tuple(ts) => ts.iter().any(Type::contains_unknown),
            Type::Tensor(_, t) => t.contains_unknown(),
            Type::Lam(a, b) | Type::LM(a, b) => a.contains_unknown() || b.contains_unknown(),
        }
    }

    /// Type equality where `Unknown` is compatible with anything (2.3).
    pub fn compatible(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::Unknown, _) | (_, Type::Unknown) => true,
            (Type::Tuple(a), Type::Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y)),
            (Type::Tensor(r, a), Type::Tensor(s, b)) => r == s && a.compatible(b),
            (Type::Lam(a, b), Type::Lam(c, d)) | (Type::LM(a, b), Type::LM(c, d)) => a.compatible(c) && b.compatible(d),
            _ => self == other,
        }
    }

    /// The tangent type `dT` (2.1): Float for Float, unit for the discrete
    /// scalars, structure-preserving on tuples and tensors. Lambdas and linear
    /// maps have none.
    pub fn tangent(&self) -> Option<Type> {
        Some(match self {
            Type::Float => Type::Float,
            Type::Integer | Type::Bool | Type::String => Type::unit(),
            Type::Tuple(ts) => Type::Tuple(ts.iter().map(Type::tangent).collect::<Option<_>>()?),
            Type::Tensor(n, t) => Type::Tensor(*n, Box::new(t.tangent()?)),
            Type::Lam(..) | Type::LM(..) => return None,
            Type::Unknown => Type::Unknown,
        })
    }

    /// The number of Floats in every value of this type (the dimension of
    /// its tangent space), when the type fixes it (no tensors inside).
    pub fn fixed_float_count(&self) -> Option<usize> {
        match self {
            Type::Float => Some(1),
            Type::Integer | Type::Bool | Type::String => Some(0),
            Type::Tuple(ts) => ts.iter().map(Type::fixed_float_count).sum(),
            _ => None,
        }
    }

    /// Whether the compressed shape of this type carries no information (5.6).
    pub fn shape_is_trivial(&self) -> bool {
        match self {
            Type::Bool | Type::Integer | Type::Float | Type::String | Type::Unknown => true,
            Type::Tuple(ts) => ts.iter().all(Type::shape_is_trivial),
            _ => false,
        }
    }

    /// The compressed shape type `st(T)` (5.6).
    pub fn shape(&self) -> Option<Type> {
        if self.shape_is_trivial() {
            return Some(Type::unit());
        }
        Some(match self {
            Type::Tuple(ts) => Type::Tuple(ts.iter().map(Type::shape).collect::<Option<_>>()?),
            Type::Tensor(n, e) if e.shape_is_trivial() => Type::index_type(*n),
            Type::Tensor(n, e) => Type::Tensor(*n, Box::new(e.shape()?)),
            _ => return None,
        })
    }

    /// Writes the type as it appears in atomic position: `Float`, `(Vec Float)`.
    fn fmt_atomic(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Bool => f.write_str("Bool"),
            Type::Integer => f.write_str("Integer"),
            Type::Float => f.write_str("Float"),
            Type::String => f.write_str("String"),
            // Not readable: `Unknown` never reaches a printed program that type-checked.
            Type::Unknown => f.write_str("UNKNOWN"),
            _ => {
                f.write_str("(")?;
                self.fmt_compound(f)?;
                f.write_str(")")
            }
        }
    }

    fn fmt_compound(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tuple(ts) => {
                f.write_str("Tuple")?;
                for t in ts {
                    f.write_str(" ")?;
                    t.fmt_atomic(f)?;
                }
                Ok(())
            }
            Type::Tensor(1, t) => {
                f.write_str("Vec ")?;
                t.fmt_atomic(f)
            }
            Type::Tensor(n, t) => {
                write!(f, "Tensor {n} ")?;
                t.fmt_atomic(f)
            }
            Type::Lam(a, b) => {
                f.write_str("Lam ")?;
                a.fmt_atomic(f)?;
                f.write_str(" ")?;
                b.fmt_atomic(f)
            }
            Type::LM(a, b) => {
                f.write_str("LM ")?;
                a.fmt_atomic(f)?;
                f.write_str(" ")?;
                b.fmt_atomic(f)
            }
            _ => self.fmt_atomic(f),
        }
    }
}

/// `Display` writes the type in atomic position, valid `.ks` syntax:
/// `Float`, `(Vec Float)`, `(Tuple Integer (Tensor 2 Float))`.
impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_atomic(f)
    }
}
