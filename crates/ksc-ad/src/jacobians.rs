//! Full Jacobians of primitives and of the prelude's external functions
//! (knossos-reference.md 3.1 and 3.2), as linear-map terms: `J_f(a) : LM A T`
//! for `f : A -> T` applied to the atoms `args` (the argument as written:
//! the components of a literal tuple, or the single argument) with result
//! atom `y`.
//!
//! Coefficients are ordinary primal expressions (`cos x`, `1 / y`), built
//! from atoms so they cost one operation each.

use ksc_ir::builder::Builder;
use ksc_ir::{Builtin, ExprId, FunName, Prim, Type};

/// Why a function has no Jacobian here.
pub type NoJacobian = String;

fn float_fn(b: &mut Builder, name: &str, arg: ExprId) -> ExprId {
    b.call(FunName::typed(name, Type::Float), vec![arg], Type::Float)
}

fn float2(b: &mut Builder, name: &str, x: ExprId, y: ExprId) -> ExprId {
    b.call(FunName::typed(name, Type::Tuple(vec![Type::Float, Type::Float])), vec![x, y], Type::Float)
}

fn scale(b: &mut Builder, witness: ExprId, k: ExprId) -> ExprId {
    let w = b.copy(witness);
    b.prim(Prim::LmScale, vec![w, k])
}

fn zero(b: &mut Builder, s: ExprId, t: ExprId) -> ExprId {
    let (s, t) = (b.copy(s), b.copy(t));
    b.prim(Prim::LmZero, vec![s, t])
}

fn one(b: &mut Builder, t: ExprId) -> ExprId {
    let t = b.copy(t);
    b.prim(Prim::LmOne, vec![t])
}

fn hcat(b: &mut Builder, parts: Vec<ExprId>) -> ExprId {
    b.prim(Prim::LmHCat, parts)
}

/// The whole argument as one atom-built expression (a tuple of the atoms).
fn whole(b: &mut Builder, args: &[ExprId]) -> ExprId {
    if args.len() == 1 {
        b.copy(args[0])
    } else {
        let parts = args.iter().map(|&a| b.copy(a)).collect();
        b.tuple(parts)
    }
}

/// A zero map from the whole argument to the result.
fn zero_map(b: &mut Builder, args: &[ExprId], y: ExprId) -> ExprId {
    let s = whole(b, args);
    let t = b.copy(y);
    b.prim(Prim::LmZero, vec![s, t])
}

/// The map `LM D T` from a tangent `dx : D` of a `T` (witness `x`) to
/// `T`'s tangents that leaves every Float where it is: `lmOne` when `D` is
/// `T`, a zero map where `T` has no Float, otherwise component by
/// component (tuples) or element by element (tensors).
fn tangent_embedding(b: &mut Builder, dx: ExprId, x: ExprId) -> Result<ExprId, NoJacobian> {
    let (d, t) = (b.ty(dx), b.ty(x));
    if d == t {
        return Ok(one(b, dx));
    }
    if !has_float(&t) {
        return Ok(zero(b, dx, x));
    }
    match (&d, &t) {
        (Type::Tuple(ds), Type::Tuple(ts)) if ds.len() == ts.len() => {
            let n = ts.len() as u32;
            let mut parts = Vec::with_capacity(ts.len());
            for k in 1..=n {
                let get = Prim::Get { index: k, arity: n };
                let dx_k = {
                    let c = b.copy(dx);
                    b.prim(get, vec![c])
                };
                let x_k = {
                    let c = b.copy(x);
                    b.prim(get, vec![c])
                };
                let inner = tangent_embedding(b, dx_k, x_k)?;
                let c = b.copy(dx);
                let select = b.prim(Prim::LmGet { index: k, arity: n }, vec![c]);
                parts.push(b.prim(Prim::LmCompose, vec![inner, select]));
            }
            Ok(b.prim(Prim::LmVCat, parts))
        }
        (Type::Tensor(r, _), Type::Tensor(s, _)) if r == s => {
            // lmVCatV dx (build (size dx) (lam i (embedding (index i dx)
            // (index i x)) . lmIndex i dx))
            let i_ty = Type::index_type(*r);
            let i = b.fresh_name("i");
            let iv = b.var(&i, i_ty.clone());
            let c = b.copy(dx);
            let dx_i = b.prim(Prim::Index, vec![iv, c]);
            let iv = b.var(&i, i_ty.clone());
            let c = b.copy(x);
            let x_i = b.prim(Prim::Index, vec![iv, c]);
            let inner = tangent_embedding(b, dx_i, x_i)?;
            let iv = b.var(&i, i_ty.clone());
            let c = b.copy(dx);
            let select = b.prim(Prim::LmIndex, vec![iv, c]);
            let elem = b.prim(Prim::LmCompose, vec![inner, select]);
            let lam = b.lam(&i, i_ty, elem);
            let c = b.copy(dx);
            let n = b.prim(Prim::Size, vec![c]);
            let maps = b.prim(Prim::Build, vec![n, lam]);
            let w = b.copy(dx);
            Ok(b.prim(Prim::LmVCatV, vec![w, maps]))
        }
        _ => Err(format!("`ts_add` of a `{t}` and a `{d}`, which is not its tangent")),
    }
}

/// The Jacobian of a primitive call.
pub fn prim_jacobian(b: &mut Builder, p: Prim, args: &[ExprId], y: ExprId) -> Result<ExprId, NoJacobian> {
    let ty_y = b.ty(y);
    if ty_y.tangent().is_none_or(|t| t == Type::unit() || !has_float(&t)) {
        // No Float in the result: the derivative is zero.
        return Ok(zero_map(b, args, y));
    }
    Ok(match p {
        Prim::Get { index, arity } => {
            let t = b.copy(args[0]);
            b.prim(Prim::LmGet { index, arity }, vec![t])
        }
        Prim::Index => {
            let (i, v) = (args[0], args[1]);
            let z = zero(b, i, y);
            let (i2, v2) = (b.copy(i), b.copy(v));
            let sel = b.prim(Prim::LmIndex, vec![i2, v2]);
            hcat(b, vec![z, sel])
        }
        Prim::Sum => {
            let v = b.copy(args[0]);
            let n = b.prim(Prim::Size, vec![v]);
            let o = one(b, y);
            let ones = b.prim(Prim::ConstVec, vec![n, o]);
            let w = b.copy(y);
            b.prim(Prim::LmHCatV, vec![w, ones])
        }
        Prim::TsAdd => {
            // `ts_add x dx : (T, dT) -> T` is the identity in both: on x,
            // and on dx through the tangent space dT shares with T (`dT`
            // differs from `T` where T has Integers: `(Tuple Float Integer)`
            // and `(Tuple Float (Tuple))`).
            let (x, dx) = (args[0], args[1]);
            let o1 = one(b, x);
            let o2 = tangent_embedding(b, dx, x)?;
            hcat(b, vec![o1, o2])
        }
        Prim::TsNeg => {
            let k = b.float(-1.0);
            scale(b, args[0], k)
        }
        Prim::TsScale => {
            let (k, v) = (args[0], args[1]);
            if !ksc_linmap::witness::is_own_tangent(&b.ty(v)) {
                return Err("`ts_scale` of a value with non-Float parts".to_string());
            }
            let v2 = b.copy(v);
            let by_k = b.prim(Prim::LmScaleR, vec![v2]);
            let k2 = b.copy(k);
            let by_v = scale(b, v, k2);
            hcat(b, vec![by_k, by_v])
        }
        Prim::TsDot => {
            let (x, z) = (args[0], args[1]);
            if !ksc_linmap::witness::is_own_tangent(&b.ty(x)) {
                return Err("`ts_dot` of values with non-Float parts".to_string());
            }
            let (z2, x2) = (b.copy(z), b.copy(x));
            let dx = b.prim(Prim::LmDot, vec![z2]);
            let dz = b.prim(Prim::LmDot, vec![x2]);
            hcat(b, vec![dx, dz])
        }
        Prim::ConstVec => {
            let (n, v) = (args[0], args[1]);
            let zn = zero(b, n, y);
            let n2 = b.copy(n);
            let o = one(b, v);
            let maps = b.prim(Prim::ConstVec, vec![n2, o]);
            let w = b.copy(v);
            let dv = b.prim(Prim::LmVCatV, vec![w, maps]);
            hcat(b, vec![zn, dv])
        }
        Prim::VecInit => {
            // d(Vec_init a1 .. an) = V(Get_1, .., Get_n) of the argument tuple.
            let n = args.len() as u32;
            if n == 1 {
                let o = one(b, args[0]);
                let w = b.copy(args[0]);
                let maps = b.prim(Prim::VecInit, vec![o]);
                return Ok(b.prim(Prim::LmVCatV, vec![w, maps]));
            }
            let sels = (1..=n)
                .map(|i| {
                    let t = whole(b, args);
                    b.prim(Prim::LmGet { index: i, arity: n }, vec![t])
                })
                .collect();
            let maps = b.prim(Prim::VecInit, sels);
            let w = whole(b, args);
            b.prim(Prim::LmVCatV, vec![w, maps])
        }
        Prim::DeltaVec => {
            // The one-hot injection of dv at i: the transpose of selecting i.
            let (n, i) = (args[0], args[1]);
            let (zn, zi) = (zero(b, n, y), zero(b, i, y));
            let (i2, y2) = (b.copy(i), b.copy(y));
            let sel = b.prim(Prim::LmIndex, vec![i2, y2]);
            let inj = b.prim(Prim::LmTranspose, vec![sel]);
            hcat(b, vec![zn, zi, inj])
        }
        Prim::Delta => {
            // delta i j v = if i == j then v else 0.
            let (i, j, v) = (args[0], args[1], args[2]);
            let (zi, zj) = (zero(b, i, y), zero(b, j, y));
            let (i2, j2) = (b.copy(i), b.copy(j));
            let same = b.prim(Prim::Eq, vec![i2, j2]);
            let o = one(b, v);
            let z = zero(b, v, v);
            let ty = b.ty(o);
            let dv = b.body.alloc_typed(ksc_ir::Expr::If(same, o, z), ty);
            hcat(b, vec![zi, zj, dv])
        }
        Prim::Unzip => {
            // Component j of the result: V(build n (λi. Get_j ∘ Index(i))).
            let v = args[0];
            let Type::Tuple(parts) = b.ty(y) else { return Err("`unzip` of a non-tuple".to_string()) };
            let k = parts.len() as u32;
            let comps = (1..=k)
                .map(|j| {
                    let v1 = b.copy(v);
                    let n = b.prim(Prim::Size, vec![v1]);
                    let maps = b.build(n, |b, i| {
                        let (i1, v2, i2, v3) = (b.copy(i), b.copy(v), b.copy(i), b.copy(v));
                        let sel = b.prim(Prim::LmIndex, vec![i1, v2]);
                        let elem = b.prim(Prim::Index, vec![i2, v3]);
                        let get = b.prim(Prim::LmGet { index: j, arity: k }, vec![elem]);
                        b.prim(Prim::LmCompose, vec![get, sel])
                    });
                    let w = b.copy(v);
                    b.prim(Prim::LmVCatV, vec![w, maps])
                })
                .collect();
            b.prim(Prim::LmVCat, comps)
        }
        Prim::Trace | Prim::Copydown | Prim::Inline => one(b, args[0]),
        // `$tangentBasis` depends on the shape of its argument only.
        Prim::Eq | Prim::Ne | Prim::Size | Prim::Print | Prim::Shape | Prim::TangentDim | Prim::TangentBasis => {
            zero_map(b, args, y)
        }
        _ => return Err(format!("automatic differentiation of `{p}` is not supported yet")),
    })
}

/// Does a type contain a Float (so that its tangent space is not trivial)?
pub fn has_float(t: &Type) -> bool {
    match t {
        Type::Float => true,
        Type::Tuple(ts) => ts.iter().any(has_float),
        Type::Tensor(_, e) => has_float(e),
        _ => false,
    }
}

/// The Jacobian of an external function (an `edef`): the built-in
/// prelude's are known here.
pub fn edef_jacobian(b: &mut Builder, name: &FunName, args: &[ExprId], y: ExprId) -> Result<ExprId, NoJacobian> {
    use Type as T;
    let unknown = || format!("`{name}` is declared with `edef` and ksc knows no derivative for it");
    let typed_base = name.derivs.is_empty() && name.base_ty.is_some();
    if typed_base && b.ty(y).tangent().is_none_or(|t| !has_float(&t)) {
        return Ok(zero_map(b, args, y));
    }
    let Some(builtin) = Builtin::resolve(name) else { return Err(unknown()) };
    let ff = T::Tuple(vec![T::Float, T::Float]);
    let x = args[0];
    use Builtin as B;
    let j = match builtin {
        // Functions of arguments without Floats, and those whose results
        // have none (returned above).
        B::ToFloat | B::BoolToFloat | B::RanHashDoub => zero_map(b, args, y),
        B::IAdd
        | B::ISub
        | B::IMul
        | B::IDiv
        | B::INeg
        | B::IGt
        | B::ILt
        | B::IGte
        | B::ILte
        | B::FGt
        | B::FLt
        | B::FGte
        | B::FLte
        | B::Or
        | B::And
        | B::IMax => zero_map(b, args, y),
        // Its derivative, trigamma, is not in the prelude.
        B::Digamma => return Err(unknown()),
        B::FNeg => {
            let k = b.float(-1.0);
            scale(b, x, k)
        }
        B::FAdd => {
            let (o1, o2) = (one(b, args[0]), one(b, args[1]));
            hcat(b, vec![o1, o2])
        }
        B::FSub => {
            let o = one(b, args[0]);
            let k = b.float(-1.0);
            let s = scale(b, args[1], k);
            hcat(b, vec![o, s])
        }
        B::FMul => {
            let (x2, z2) = (b.copy(args[1]), b.copy(args[0]));
            let (s1, s2) = (scale(b, args[0], x2), scale(b, args[1], z2));
            hcat(b, vec![s1, s2])
        }
        B::FDiv => {
            // d(x/z) = dx / z - x dz / z^2 = dx (1/z) - dz y (1/z): one
            // division besides the primal's (CSE shares 1/z).
            let (one_, z) = (b.float(1.0), b.copy(args[1]));
            let inv = float2(b, "div", one_, z);
            let inv2 = b.copy(inv);
            let s1 = scale(b, args[0], inv);
            let yy = b.copy(y);
            let q = float2(b, "mul", yy, inv2);
            let nq = float_fn(b, "neg", q);
            let s2 = scale(b, args[1], nq);
            hcat(b, vec![s1, s2])
        }
        B::FMax => {
            // std::max(a, b) = a < b ? b : a
            let (a, c) = (b.copy(args[0]), b.copy(args[1]));
            let lt = b.call(FunName::typed("lt", ff.clone()), vec![a, c], T::Bool);
            let (zf, of) = (b.float(0.0), b.float(1.0));
            let ka = b.body.alloc_typed(ksc_ir::Expr::If(lt, zf, of), T::Float);
            let (a, c) = (b.copy(args[0]), b.copy(args[1]));
            let lt2 = b.call(FunName::typed("lt", ff.clone()), vec![a, c], T::Bool);
            let (zf, of) = (b.float(0.0), b.float(1.0));
            let kb = b.body.alloc_typed(ksc_ir::Expr::If(lt2, of, zf), T::Float);
            let (s1, s2) = (scale(b, args[0], ka), scale(b, args[1], kb));
            hcat(b, vec![s1, s2])
        }
        B::Pow => {
            // d(x^n) = n x^(n-1) dx
            let n = args[1];
            let (n1, one_i) = (b.copy(n), b.integer(1));
            let nm1 =
                b.call(FunName::typed("sub", T::Tuple(vec![T::Integer, T::Integer])), vec![n1, one_i], T::Integer);
            let x1 = b.copy(x);
            let p = b.call(FunName::typed("pow", T::Tuple(vec![T::Float, T::Integer])), vec![x1, nm1], T::Float);
            let n2 = b.copy(n);
            let nf = b.call(FunName::typed("to_float", T::Integer), vec![n2], T::Float);
            let k = float2(b, "mul", nf, p);
            let s = scale(b, x, k);
            let z = zero(b, n, y);
            hcat(b, vec![s, z])
        }
        B::Exp => {
            let k = b.copy(y);
            scale(b, x, k)
        }
        B::Log => {
            let (o, x1) = (b.float(1.0), b.copy(x));
            let k = float2(b, "div", o, x1);
            scale(b, x, k)
        }
        B::Sin => {
            let x1 = b.copy(x);
            let k = float_fn(b, "cos", x1);
            scale(b, x, k)
        }
        B::Cos => {
            let x1 = b.copy(x);
            let s = float_fn(b, "sin", x1);
            let k = float_fn(b, "neg", s);
            scale(b, x, k)
        }
        B::Tanh => {
            // 1 - tanh^2
            let (y1, y2) = (b.copy(y), b.copy(y));
            let yy = float2(b, "mul", y1, y2);
            let o = b.float(1.0);
            let k = float2(b, "sub", o, yy);
            scale(b, x, k)
        }
        B::Cosh => {
            // sinh x = (exp x - exp (-x)) / 2
            let x1 = b.copy(x);
            let e = float_fn(b, "exp", x1);
            let x2 = b.copy(x);
            let nx = float_fn(b, "neg", x2);
            let en = float_fn(b, "exp", nx);
            let d = float2(b, "sub", e, en);
            let h = b.float(0.5);
            let k = float2(b, "mul", h, d);
            scale(b, x, k)
        }
        B::Sqrt => {
            let (h, y1) = (b.float(0.5), b.copy(y));
            let k = float2(b, "div", h, y1);
            scale(b, x, k)
        }
        B::Erf => {
            // 2/sqrt(pi) exp(-x^2)
            let (x1, x2) = (b.copy(x), b.copy(x));
            let xx = float2(b, "mul", x1, x2);
            let nxx = float_fn(b, "neg", xx);
            let e = float_fn(b, "exp", nxx);
            let c = b.float(std::f64::consts::FRAC_2_SQRT_PI);
            let k = float2(b, "mul", c, e);
            scale(b, x, k)
        }
        B::Lgamma => {
            let x1 = b.copy(x);
            let k = float_fn(b, "digamma", x1);
            scale(b, x, k)
        }
        B::Abs => {
            let (x1, z) = (b.copy(x), b.float(0.0));
            let pos = b.call(FunName::typed("gt", ff.clone()), vec![x1, z], T::Bool);
            let (p1, m1) = (b.float(1.0), b.float(-1.0));
            let k = b.body.alloc_typed(ksc_ir::Expr::If(pos, p1, m1), T::Float);
            scale(b, x, k)
        }
        B::Dot => {
            let (v, w) = (args[0], args[1]);
            let (w1, v1) = (b.copy(w), b.copy(v));
            let (d1, d2) = (b.prim(Prim::LmDot, vec![w1]), b.prim(Prim::LmDot, vec![v1]));
            hcat(b, vec![d1, d2])
        }
        B::MatVec => {
            // y = M v: dy_i = <row_i(dM), v> + <row_i(M), dv>.
            let (m, v) = (args[0], args[1]);
            let row_of = |b: &mut Builder, i: ExprId, elem: &dyn Fn(&mut Builder, ExprId) -> ExprId| {
                let vv = b.copy(v);
                let cols = b.prim(Prim::Size, vec![vv]);
                let i = b.copy(i);
                b.build(cols, |b, j| {
                    let i2 = b.copy(i);
                    let ij = b.tuple(vec![i2, j]);
                    elem(b, ij)
                })
            };
            let yv = b.copy(y);
            let rows = b.prim(Prim::Size, vec![yv]);
            let by_m = b.build(rows, |b, i| {
                let sel_row = row_of(b, i, &|b, ij| {
                    let mm = b.copy(m);
                    b.prim(Prim::LmIndex, vec![ij, mm])
                });
                let mm = b.copy(m);
                let pick = b.prim(Prim::LmVCatV, vec![mm, sel_row]);
                let vv = b.copy(v);
                let dot = b.prim(Prim::LmDot, vec![vv]);
                b.prim(Prim::LmCompose, vec![dot, pick])
            });
            let mm = b.copy(m);
            let dm = b.prim(Prim::LmVCatV, vec![mm, by_m]);
            let yv = b.copy(y);
            let rows = b.prim(Prim::Size, vec![yv]);
            let by_v = b.build(rows, |b, i| {
                let row = row_of(b, i, &|b, ij| {
                    let mm = b.copy(m);
                    b.prim(Prim::Index, vec![ij, mm])
                });
                b.prim(Prim::LmDot, vec![row])
            });
            let vv = b.copy(v);
            let dv = b.prim(Prim::LmVCatV, vec![vv, by_v]);
            hcat(b, vec![dm, dv])
        }
        B::VMax => {
            let v1 = b.copy(x);
            let i = b.call(FunName::typed("imax", T::vec(T::Float)), vec![v1], T::Integer);
            let v2 = b.copy(x);
            b.prim(Prim::LmIndex, vec![i, v2])
        }
    };
    Ok(j)
}
