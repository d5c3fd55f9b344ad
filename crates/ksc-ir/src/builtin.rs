//! The prelude's functions that have no `.ks` body: the `edef`s of the
//! built-in prelude (knossos-reference.md 3.2) that the interpreter
//! (`ksc_eval::native`) and the loop-IR lowering (`ksc_lower`'s
//! `lower_native`) implement themselves.
//!
//! A call names one by its base name and argument type, as the type checker
//! resolved it (`[add (Tuple Float Float)]`); [`Builtin::resolve`] turns
//! that name into a variant once, and every backend matches on the variant
//! exhaustively, so adding a built-in is a new variant and a row of
//! [`TABLE`], and the compiler lists every `match` that must learn it
//! (`docs/adding-a-primitive.md`).

use crate::names::FunName;
use crate::types::Type;

/// A built-in function of the prelude.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `to_float : Integer -> Float`.
    ToFloat,
    /// `bool_to_float : Bool -> Float`.
    BoolToFloat,
    FNeg,
    /// `neg : Integer -> Integer` (overflow checked).
    INeg,
    FAdd,
    FSub,
    FMul,
    FDiv,
    /// `max : (Float, Float) -> Float`, `y` where `x < y`, else `x`.
    FMax,
    FGt,
    FLt,
    FGte,
    FLte,
    /// Integer arithmetic: overflow and division by zero checked.
    IAdd,
    ISub,
    IMul,
    IDiv,
    IGt,
    ILt,
    IGte,
    ILte,
    /// `mul : (Tensor 2 Float, Vec Float) -> Vec Float`, matrix by vector.
    MatVec,
    /// `pow : (Float, Integer) -> Float`.
    Pow,
    Or,
    And,
    Log,
    Exp,
    Sin,
    Cos,
    Cosh,
    Tanh,
    Sqrt,
    Abs,
    Erf,
    Lgamma,
    Digamma,
    /// `$ranhashdoub : Integer -> Float`, the original's hash to [0, 1).
    RanHashDoub,
    /// `dot : (Vec Float, Vec Float) -> Float`.
    Dot,
    /// `imax : Vec Float -> Integer`, the index of the first maximum.
    IMax,
    /// `max : Vec Float -> Float`.
    VMax,
}

fn pair(t: Type) -> Type {
    Type::Tuple(vec![t.clone(), t])
}
const F: fn() -> Type = || Type::Float;
const I: fn() -> Type = || Type::Integer;
const FF: fn() -> Type = || pair(Type::Float);
const II: fn() -> Type = || pair(Type::Integer);
const BB: fn() -> Type = || pair(Type::Bool);
const VF: fn() -> Type = || Type::vec(Type::Float);

/// A row of [`TABLE`]: the built-in, its base name, its argument type.
pub type Row = (Builtin, &'static str, fn() -> Type);

/// Every built-in with its base name and argument type.
pub const TABLE: &[Row] = &[
    (Builtin::ToFloat, "to_float", I),
    (Builtin::BoolToFloat, "bool_to_float", || Type::Bool),
    (Builtin::FNeg, "neg", F),
    (Builtin::INeg, "neg", I),
    (Builtin::FAdd, "add", FF),
    (Builtin::FSub, "sub", FF),
    (Builtin::FMul, "mul", FF),
    (Builtin::FDiv, "div", FF),
    (Builtin::FMax, "max", FF),
    (Builtin::FGt, "gt", FF),
    (Builtin::FLt, "lt", FF),
    (Builtin::FGte, "gte", FF),
    (Builtin::FLte, "lte", FF),
    (Builtin::IAdd, "add", II),
    (Builtin::ISub, "sub", II),
    (Builtin::IMul, "mul", II),
    (Builtin::IDiv, "div", II),
    (Builtin::IGt, "gt", II),
    (Builtin::ILt, "lt", II),
    (Builtin::IGte, "gte", II),
    (Builtin::ILte, "lte", II),
    (Builtin::MatVec, "mul", || Type::Tuple(vec![Type::tensor(2, Type::Float), Type::vec(Type::Float)])),
    (Builtin::Pow, "pow", || Type::Tuple(vec![Type::Float, Type::Integer])),
    (Builtin::Or, "or", BB),
    (Builtin::And, "and", BB),
    (Builtin::Log, "log", F),
    (Builtin::Exp, "exp", F),
    (Builtin::Sin, "sin", F),
    (Builtin::Cos, "cos", F),
    (Builtin::Cosh, "cosh", F),
    (Builtin::Tanh, "tanh", F),
    (Builtin::Sqrt, "sqrt", F),
    (Builtin::Abs, "abs", F),
    (Builtin::Erf, "erf", F),
    (Builtin::Lgamma, "lgamma", F),
    (Builtin::Digamma, "digamma", F),
    (Builtin::RanHashDoub, "$ranhashdoub", I),
    (Builtin::Dot, "dot", || pair(Type::vec(Type::Float))),
    (Builtin::IMax, "imax", VF),
    (Builtin::VMax, "max", VF),
];

impl Builtin {
    /// The built-in a call of `name` means: an underived name whose base
    /// name and argument type are a row of [`TABLE`].
    pub fn resolve(name: &FunName) -> Option<Builtin> {
        if !name.derivs.is_empty() {
            return None;
        }
        let ty = name.base_ty.as_ref()?;
        TABLE.iter().find(|(_, n, t)| *n == name.base && t() == *ty).map(|(b, _, _)| *b)
    }

    /// Its name as a typed function name (`[add (Tuple Float Float)]`).
    pub fn name(self) -> FunName {
        let (_, base, ty) = self.row();
        FunName::typed(*base, ty())
    }

    /// How many components its argument has: the arity of a tuple, else 1.
    pub fn arity(self) -> usize {
        match (self.row().2)() {
            Type::Tuple(ts) if ts.len() != 1 => ts.len(),
            _ => 1,
        }
    }

    fn row(self) -> &'static Row {
        TABLE.iter().find(|(b, _, _)| *b == self).expect("every built-in is in TABLE")
    }
}
