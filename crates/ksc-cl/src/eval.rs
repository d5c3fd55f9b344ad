//! The semantics of CL (seed 003 figure 10), `t ◇ c`, over the values of the
//! reference interpreter.
//!
//! ```text
//! t ◇ I                  = t
//! t ◇ P[i1..im/n]        = (π_i1 t, .., π_im t)
//! t ◇ K(k)               = k
//! t ◇ F(f)               = f(t)
//! t ◇ (c1 ; c2)          = (t ◇ c1) ◇ c2
//! t ◇ (c1, .., cn)       = (t ◇ c1, .., t ◇ cn)
//! t ◇ IF(c1, c2, c3)     = if (t ◇ c1) then t ◇ c2 else t ◇ c3
//! t ◇ L(x, cr, cb)       = (t ▷ (t ◇ cr)) ◇ cb
//! t ◇ B(cs, i, ce)       = build (t ◇ cs) (λi. (t ▷ i) ◇ ce)
//! t ◇ Fold(x, cf, ca, cv) = fold (λx. (t ▷ x) ◇ cf) (t ◇ ca) (t ◇ cv)
//! ```
//!
//! Evaluation is strict and left to right, as the interpreter's. Global
//! functions and first-order primitives (`F(f)`) are called through a
//! [`Runtime`]: [`crate::InterpRuntime`] runs them in the interpreter, so a
//! CL term may call prelude and user functions. The primitives with lambda
//! arguments are evaluated here, with the interpreter's semantics and
//! messages; `lmFold` is not (its value would hold the lambdas as closures
//! of the interpreter).

use std::rc::Rc;

use ksc_eval::support::{
    dummy, fmt_size, index_at, index_components, int, iterations, new_tensor, pair, sizes, tensor, tensor_count,
    zero_from_shape, zero_like,
};
use ksc_eval::{Tensor, Value};
use ksc_ir::{Callee, FunName, Prim, Type};

use crate::term::{Cl, ClArg, ClLam, Konst};
use crate::{ClError, ErrorKind, MAX_TERM_DEPTH};

/// What `F(f)` calls.
pub trait Runtime {
    /// A global function (prelude, user or derived) on its argument.
    fn call_fun(&mut self, f: &FunName, arg: Value) -> Result<Value, String>;
    /// A first-order primitive at these types, on its argument as CL passes
    /// it (the tuple of the arguments as written for `print`, `Vec_init`,
    /// `lmVCat`, `lmHCat`).
    fn call_prim(&mut self, p: Prim, src: &Type, tgt: &Type, arg: Value) -> Result<Value, String>;
}

/// `t ◇ c`.
pub fn eval(c: &Cl, t: Value, rt: &mut dyn Runtime) -> Result<Value, ClError> {
    Eval { rt }.eval(c, t, 0).map_err(|m| ClError::new(ErrorKind::Eval, m))
}

struct Eval<'r> {
    rt: &'r mut dyn Runtime,
}

type R<T> = Result<T, String>;

fn tuple_of(t: &Value, n: usize, what: &str) -> R<Rc<[Value]>> {
    match t {
        Value::Tuple(vs) if vs.len() == n => Ok(vs.clone()),
        v => Err(format!("internal error: {what} needs a tuple of {n} components, found {}", v.kind())),
    }
}

/// `t ▷ x`.
fn extend(t: &Value, x: Value) -> R<Value> {
    match t {
        Value::Tuple(vs) => {
            let mut v = Vec::with_capacity(vs.len() + 1);
            v.extend(vs.iter().cloned());
            v.push(x);
            Ok(Value::tuple(v))
        }
        v => Err(format!("internal error: an environment must be a tuple, found {}", v.kind())),
    }
}

/// The components of a pair.
fn two(v: &Value, what: &str) -> R<(Value, Value)> {
    match v {
        Value::Tuple(vs) if vs.len() == 2 => Ok((vs[0].clone(), vs[1].clone())),
        v => Err(format!("{what} is {}, not a pair", v.kind())),
    }
}

fn elem_type(t: &Type) -> Type {
    match t {
        Type::Tensor(_, e) => (**e).clone(),
        _ => Type::Unknown,
    }
}

/// Component `i` of a tuple type.
fn component(t: &Type, i: usize) -> Type {
    match t {
        Type::Tuple(ts) => ts.get(i).cloned().unwrap_or(Type::Unknown),
        _ => Type::Unknown,
    }
}

impl Eval<'_> {
    fn eval(&mut self, c: &Cl, t: Value, depth: usize) -> R<Value> {
        if depth > MAX_TERM_DEPTH {
            return Err(format!("the term is nested more than {MAX_TERM_DEPTH} deep"));
        }
        let d = depth + 1;
        Ok(match c {
            Cl::Id => t,
            Cl::Konst(Konst::Lit(l)) => match l {
                ksc_ir::Lit::Integer(i) => Value::Integer(*i),
                ksc_ir::Lit::Float(x) => Value::Float(*x),
                ksc_ir::Lit::Bool(b) => Value::Bool(*b),
                ksc_ir::Lit::String(s) => Value::string(s),
            },
            Cl::Konst(Konst::Dummy(ty)) => dummy(ty)?,
            Cl::Prune { keep, of } => {
                let vs = tuple_of(&t, *of, "pruning")?;
                let mut out = Vec::with_capacity(keep.len());
                for &i in keep {
                    out.push(vs.get(i).cloned().ok_or("internal error: pruning out of range")?);
                }
                Value::tuple(out)
            }
            Cl::Fun(f) => match &f.callee {
                Callee::Prim(Prim::Get { index, arity }) => {
                    let vs = tuple_of(&t, *arity as usize, &format!("`get${index}${arity}`"))?;
                    vs.get((*index as usize).wrapping_sub(1))
                        .cloned()
                        .ok_or("internal error: projection out of range")?
                }
                Callee::Prim(p) => self.rt.call_prim(*p, &f.src, &f.tgt, t)?,
                Callee::Fun(name) => self.rt.call_fun(name, t)?,
            },
            Cl::Comp(a, b) => {
                let r = self.eval(a, t, d)?;
                self.eval(b, r, d)?
            }
            Cl::Tuple(cs) => {
                let mut out = Vec::with_capacity(cs.len());
                for x in cs {
                    out.push(self.eval(x, t.clone(), d)?);
                }
                Value::tuple(out)
            }
            Cl::If(a, b, e) => match self.eval(a, t.clone(), d)? {
                Value::Bool(true) => self.eval(b, t, d)?,
                Value::Bool(false) => self.eval(e, t, d)?,
                v => return Err(format!("internal error: expected a Bool, found {}", v.kind())),
            },
            Cl::Let { rhs, body, .. } => {
                let r = self.eval(rhs, t.clone(), d)?;
                self.eval(body, extend(&t, r)?, d)?
            }
            Cl::Assert(a, b) => match self.eval(a, t.clone(), d)? {
                Value::Bool(true) => self.eval(b, t, d)?,
                Value::Bool(false) => return Err("assertion failed".to_string()),
                v => return Err(format!("internal error: expected a Bool, found {}", v.kind())),
            },
            Cl::Build { size, elem, .. } => {
                let shape = sizes(&self.eval(size, t.clone(), d)?, "build")?;
                let n = tensor_count(&shape, "build")?;
                let mut data = Vec::with_capacity(n);
                for k in 0..n {
                    data.push(self.eval(elem, extend(&t, index_at(k, &shape))?, d)?);
                }
                new_tensor(shape, data)
            }
            Cl::Fold { step, acc, vec, .. } => {
                let mut a = self.eval(acc, t.clone(), d)?;
                let v = tensor(&self.eval(vec, t.clone(), d)?)?;
                for x in &v.data {
                    a = self.eval(step, extend(&t, pair(a, x.clone()))?, d)?;
                }
                a
            }
            Cl::Prim { prim, args, ty } => self.prim(*prim, args, ty, t, d)?,
        })
    }

    /// Applies a lambda argument to `x` in the environment `t`.
    fn apply(&mut self, l: &ClLam, t: &Value, x: Value, d: usize) -> R<Value> {
        self.eval(&l.body, extend(t, x)?, d)
    }

    fn add(&mut self, ty: &Type, a: Value, b: Value) -> R<Value> {
        self.rt.call_prim(Prim::TsAdd, &Type::Tuple(vec![ty.clone(), ty.clone()]), ty, pair(a, b))
    }

    /// Adds an `(index, value)` entry of `buildFromSparse` into `result`.
    fn accumulate(&mut self, result: &mut Tensor, elem: &Type, entry: &Value) -> R<()> {
        let (i, v) = two(entry, "an (index, value) entry")?;
        let k = result.flat_index(&index_components(&i)?)?;
        let slot = result.data.get_mut(k).ok_or("internal error: malformed tensor")?;
        let old = std::mem::replace(slot, Value::unit());
        *slot = self.add(elem, old, v)?;
        Ok(())
    }

    fn prim(&mut self, p: Prim, args: &[ClArg], ty: &Type, t: Value, d: usize) -> R<Value> {
        // The arguments that are terms, evaluated left to right; the lambdas.
        let mut vals: Vec<Value> = Vec::with_capacity(args.len());
        let mut lams: Vec<Option<&ClLam>> = Vec::with_capacity(args.len());
        for a in args {
            match a {
                ClArg::Term(c) => {
                    vals.push(self.eval(c, t.clone(), d)?);
                    lams.push(None);
                }
                ClArg::Lam(l) => {
                    vals.push(Value::unit());
                    lams.push(Some(l));
                }
            }
        }
        let lam = |i: usize| -> R<&ClLam> {
            lams.get(i)
                .copied()
                .flatten()
                .ok_or_else(|| format!("internal error: argument {} of `{p}` is not a lambda", i + 1))
        };
        let val = |i: usize| -> R<&Value> {
            vals.get(i).ok_or_else(|| format!("internal error: `{p}` has no argument {}", i + 1))
        };
        Ok(match p {
            Prim::Build => {
                let shape = sizes(val(0)?, "build")?;
                let n = tensor_count(&shape, "build")?;
                let l = lam(1)?;
                let mut data = Vec::with_capacity(n);
                for k in 0..n {
                    data.push(self.apply(l, &t, index_at(k, &shape), d)?);
                }
                new_tensor(shape, data)
            }
            Prim::Sumbuild => {
                let shape = sizes(val(0)?, "sumbuild")?;
                let n = iterations(&shape);
                if n == 0 {
                    return Err(format!("`sumbuild` of an empty range (size {})", fmt_size(&shape)));
                }
                let l = lam(1)?;
                let mut acc = self.apply(l, &t, index_at(0, &shape), d)?;
                for k in 1..n {
                    let v = self.apply(l, &t, index_at(k, &shape), d)?;
                    acc = self.add(ty, acc, v)?;
                }
                acc
            }
            Prim::Fold | Prim::Scan => {
                let v = tensor(val(2)?)?;
                let mut acc = val(1)?.clone();
                let l = lam(0)?;
                let mut accs = Vec::new();
                for x in &v.data {
                    if p == Prim::Scan {
                        accs.push(acc.clone());
                    }
                    acc = self.apply(l, &t, pair(acc, x.clone()), d)?;
                }
                if p == Prim::Scan {
                    accs.push(acc);
                    Value::vector(accs)
                } else {
                    acc
                }
            }
            Prim::ScanSum => {
                let v = tensor(val(3)?)?;
                let mut acc = val(1)?.clone();
                let mut total = val(2)?.clone();
                let total_ty = component(ty, 1);
                let l = lam(0)?;
                let mut accs = Vec::with_capacity(v.data.len() + 1);
                for x in &v.data {
                    accs.push(acc.clone());
                    let r = self.apply(l, &t, pair(acc, x.clone()), d)?;
                    let (a, s) = two(&r, "the lambda of `$scanSum`")?;
                    acc = a;
                    total = self.add(&total_ty, total, s)?;
                }
                accs.push(acc);
                pair(Value::vector(accs), total)
            }
            Prim::BuildSum => {
                let shape = sizes(val(0)?, "$buildSum")?;
                let n = tensor_count(&shape, "$buildSum")?;
                let mut acc = val(1)?.clone();
                let acc_ty = component(ty, 1);
                let l = lam(2)?;
                let mut data = Vec::with_capacity(n);
                for k in 0..n {
                    let r = self.apply(l, &t, index_at(k, &shape), d)?;
                    let (e, s) = two(&r, "the lambda of `$buildSum`")?;
                    data.push(e);
                    acc = self.add(&acc_ty, acc, s)?;
                }
                pair(new_tensor(shape, data), acc)
            }
            Prim::Apply => {
                let l = lam(0)?;
                self.apply(l, &t, val(1)?.clone(), d)?
            }
            Prim::Map => {
                let v = tensor(val(1)?)?;
                let l = lam(0)?;
                let mut data = Vec::with_capacity(v.data.len());
                for x in &v.data {
                    data.push(self.apply(l, &t, x.clone(), d)?);
                }
                new_tensor(v.shape.clone(), data)
            }
            Prim::Map2 => {
                let (a, b) = (tensor(val(1)?)?, tensor(val(2)?)?);
                if a.shape != b.shape {
                    return Err(format!(
                        "`map2` of tensors of different sizes: {} and {}",
                        fmt_size(&a.shape),
                        fmt_size(&b.shape)
                    ));
                }
                let l = lam(0)?;
                let mut data = Vec::with_capacity(a.data.len());
                for (x, y) in a.data.iter().zip(&b.data) {
                    data.push(self.apply(l, &t, pair(x.clone(), y.clone()), d)?);
                }
                new_tensor(a.shape.clone(), data)
            }
            Prim::Diag => {
                let (rows, cols) = (int(val(0)?)?, int(val(1)?)?);
                if rows != cols {
                    return Err(format!(
                        "`diag` needs as many rows as columns, but has {rows} rows and {cols} columns"
                    ));
                }
                let n = usize::try_from(rows).map_err(|_| format!("`diag` with a negative size {rows}"))?;
                tensor_count(&[n, n], "diag")?;
                let l = lam(2)?;
                let mut out = Vec::with_capacity(n);
                for i in 0..n {
                    let x = self.apply(l, &t, Value::Integer(i as i64), d)?;
                    let mut row = vec![zero_like(&x); n];
                    row[i] = x;
                    out.push(Value::vector(row));
                }
                new_tensor(vec![n], out)
            }
            Prim::BuildFromSparse => {
                let elem = elem_type(ty);
                let sh = tensor(val(0)?)?;
                let mut result = Tensor {
                    shape: sh.shape.clone(),
                    data: sh.data.iter().map(|s| zero_from_shape(s, &elem)).collect(),
                };
                let space = sizes(val(1)?, "buildFromSparse")?;
                let l = lam(2)?;
                for k in 0..iterations(&space) {
                    let entry = self.apply(l, &t, index_at(k, &space), d)?;
                    self.accumulate(&mut result, &elem, &entry)?;
                }
                Value::Tensor(Rc::new(result))
            }
            Prim::BuildFromSparseTupled => {
                let shapes = match val(0)? {
                    Value::Tuple(vs) => vs.clone(),
                    v => return Err(format!("internal error: expected a tuple of shapes, found {}", v.kind())),
                };
                let elems: Vec<Type> = match ty {
                    Type::Tuple(ts) => ts.iter().map(elem_type).collect(),
                    _ => Vec::new(),
                };
                let mut results = Vec::with_capacity(shapes.len());
                for (j, s) in shapes.iter().enumerate() {
                    let sh = tensor(s)?;
                    let e = elems.get(j).cloned().unwrap_or(Type::Unknown);
                    results.push(Tensor {
                        shape: sh.shape.clone(),
                        data: sh.data.iter().map(|s| zero_from_shape(s, &e)).collect(),
                    });
                }
                let space = sizes(val(1)?, "buildFromSparseTupled")?;
                let l = lam(2)?;
                for k in 0..iterations(&space) {
                    let entries = self.apply(l, &t, index_at(k, &space), d)?;
                    let entries = tuple_of(&entries, results.len(), "the lambda of `buildFromSparseTupled`")?;
                    for (j, (r, e)) in results.iter_mut().zip(entries.iter()).enumerate() {
                        let elem = elems.get(j).cloned().unwrap_or(Type::Unknown);
                        self.accumulate(r, &elem, e)?;
                    }
                }
                Value::Tuple(results.into_iter().map(|r| Value::Tensor(Rc::new(r))).collect())
            }
            Prim::Check => {
                let (f, rev) = (lam(0)?, lam(1)?);
                let (x, dx, dr) = (val(2)?.clone(), val(3)?.clone(), val(4)?.clone());
                let (s, tt) = (f.ty.clone(), f.ret.clone());
                let ds = s.tangent().unwrap_or(Type::Unknown);
                let dt = tt.tangent().unwrap_or(Type::Unknown);
                let fx = self.apply(f, &t, x.clone(), d)?;
                let moved = self.rt.call_prim(Prim::TsAdd, &Type::Tuple(vec![s.clone(), ds.clone()]), &s, pair(x.clone(), dx.clone()))?;
                let fx_dx = self.apply(f, &t, moved, d)?;
                let neg = self.rt.call_prim(Prim::TsScale, &Type::Tuple(vec![Type::Float, tt.clone()]), &tt, pair(Value::Float(-1.0), fx))?;
                let df = self.add(&tt, fx_dx, neg)?;
                let d1 = self.rt.call_prim(Prim::TsDot, &Type::Tuple(vec![tt.clone(), dt.clone()]), &Type::Float, pair(df, dr.clone()))?;
                let grad = self.apply(rev, &t, pair(x, dr), d)?;
                let d2 = self.rt.call_prim(Prim::TsDot, &Type::Tuple(vec![ds.clone(), ds]), &Type::Float, pair(grad, dx))?;
                match (d1, d2) {
                    (Value::Float(d1), Value::Float(d2)) => Value::Float((d1 - d2).abs() / (d1.abs() + d2.abs())),
                    _ => return Err("internal error: `ts_dot` returned something other than a Float".to_string()),
                }
            }
            Prim::LmFold | Prim::LmScan | Prim::LmScanBlocks => {
                return Err(format!(
                    "`{p}` is not supported by the CL evaluator: its value is a linear map holding its lambdas as closures of the interpreter"
                ))
            }
            p => return Err(format!("internal error: `{p}` has no lambda arguments")),
        })
    }
}
