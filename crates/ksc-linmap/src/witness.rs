//! Shapes of linear maps, read off the maps themselves: an expression whose
//! value is a primal value of the source (or target) type, when the term
//! says so. Laws that must build a zero of the right shape (`0 ∘ m = 0`) use
//! these, and do not fire when the shape cannot be known.

use ksc_ir::{ExprId, Prim, Type};

use ksc_ir::builder::{prim_call, Builder};

/// A fresh expression whose value has the shape of the source of map `m`.
pub fn source_of(b: &mut Builder, m: ExprId) -> Option<ExprId> {
    let (p, args) = prim_call(b.body, m)?;
    Some(match p {
        Prim::LmZero | Prim::LmOne | Prim::LmScale | Prim::LmDot | Prim::LmVCatV => b.copy(args[0]),
        Prim::LmScaleR => b.float(0.0),
        Prim::LmAdd => source_of(b, args[0]).or_else(|| source_of(b, args[1]))?,
        Prim::LmCompose => source_of(b, args[1])?,
        Prim::LmVCat => args.iter().find_map(|&a| source_of(b, a))?,
        Prim::LmHCat => {
            let parts = args.iter().map(|&a| source_of(b, a)).collect::<Option<Vec<_>>>()?;
            b.tuple(parts)
        }
        Prim::LmTranspose => target_of(b, args[0])?,
        Prim::LmIndex => b.copy(args[1]),
        Prim::LmGet { .. } => b.copy(args[0]),
        _ => return None,
    })
}

/// A fresh expression whose value has the shape of the target of map `m`.
pub fn target_of(b: &mut Builder, m: ExprId) -> Option<ExprId> {
    let (p, args) = prim_call(b.body, m)?;
    Some(match p {
        Prim::LmZero => b.copy(args[1]),
        Prim::LmOne | Prim::LmScale | Prim::LmScaleR | Prim::LmHCatV => b.copy(args[0]),
        Prim::LmDot => b.float(0.0),
        Prim::LmAdd => target_of(b, args[0]).or_else(|| target_of(b, args[1]))?,
        Prim::LmCompose => target_of(b, args[0])?,
        Prim::LmHCat => args.iter().find_map(|&a| target_of(b, a))?,
        Prim::LmVCat => {
            let parts = args.iter().map(|&a| target_of(b, a)).collect::<Option<Vec<_>>>()?;
            b.tuple(parts)
        }
        Prim::LmTranspose => source_of(b, args[0])?,
        Prim::LmIndex => {
            let (i, v) = (b.copy(args[0]), b.copy(args[1]));
            b.prim(Prim::Index, vec![i, v])
        }
        Prim::LmGet { index, arity } => {
            let t = b.copy(args[0]);
            b.prim(Prim::Get { index, arity }, vec![t])
        }
        _ => return None,
    })
}

/// Is this map's primal type its own tangent type (only Floats)? Then a
/// primal value can stand for a tangent (`lmScaleR v ⊙ x = x * v`).
pub fn is_own_tangent(t: &Type) -> bool {
    t.tangent().as_ref() == Some(t)
}
