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

/// The most elements one tensor may have (the interpreter's limit).
const MAX_ELEMENTS: usize = 1 << 28;

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

fn tensor(v: &Value) -> R<Rc<Tensor>> {
    match v {
        Value::Tensor(t) => {
            let n = t.shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            if !t.shape.is_empty() && n == Some(t.data.len()) {
                Ok(t.clone())
            } else {
                Err(format!("malformed tensor: shape {} but {} elements", fmt_size(&t.shape), t.data.len()))
            }
        }
        v => Err(format!("internal error: expected a tensor, found {}", v.kind())),
    }
}

fn int(v: &Value) -> R<i64> {
    match v {
        Value::Integer(i) => Ok(*i),
        v => Err(format!("internal error: expected an Integer, found {}", v.kind())),
    }
}

fn index_components(v: &Value) -> R<Vec<i64>> {
    match v {
        Value::Integer(i) => Ok(vec![*i]),
        Value::Tuple(vs) if !vs.is_empty() => vs.iter().map(int).collect(),
        v => Err(format!("internal error: expected an index, found {}", v.kind())),
    }
}

fn fmt_index(idx: &[i64]) -> String {
    match idx {
        [i] => i.to_string(),
        _ => format!("({})", idx.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
    }
}

fn fmt_size(shape: &[usize]) -> String {
    fmt_index(&shape.iter().map(|&n| n as i64).collect::<Vec<_>>())
}

/// A size argument as a shape; negative sizes are errors.
fn sizes(v: &Value, prim: &str) -> R<Vec<usize>> {
    let c = index_components(v)?;
    c.iter()
        .map(|&n| usize::try_from(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("`{prim}` with a negative size {}", fmt_index(&c)))
}

fn count(shape: &[usize]) -> R<usize> {
    let n = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).ok_or("integer overflow")?;
    if n > MAX_ELEMENTS {
        return Err(format!("a tensor of {n} elements is too large (the limit is {MAX_ELEMENTS})"));
    }
    Ok(n)
}

/// The `k`-th index (row-major) of an index space of this shape.
fn index_at(mut k: usize, shape: &[usize]) -> Value {
    if let [_] = shape {
        return Value::Integer(k as i64);
    }
    let mut idx = vec![0i64; shape.len()];
    for (slot, &n) in idx.iter_mut().zip(shape).rev() {
        if n > 0 {
            *slot = (k % n) as i64;
            k /= n;
        }
    }
    Value::tuple(idx.into_iter().map(Value::Integer).collect())
}

/// The row-major position of index `i` in a tensor of this shape.
fn flat_index(shape: &[usize], i: &Value) -> R<usize> {
    let idx = index_components(i)?;
    if idx.len() != shape.len() {
        return Err(format!("an index of rank {} used on a tensor of rank {}", idx.len(), shape.len()));
    }
    let mut flat = 0usize;
    for (&i, &n) in idx.iter().zip(shape) {
        match usize::try_from(i) {
            Ok(i) if i < n => flat = flat * n + i,
            _ => {
                return Err(format!(
                    "index out of range: index {} in a tensor of size {}",
                    fmt_index(&idx),
                    fmt_size(shape)
                ))
            }
        }
    }
    Ok(flat)
}

/// The components of a pair.
fn two(v: &Value, what: &str) -> R<(Value, Value)> {
    match v {
        Value::Tuple(vs) if vs.len() == 2 => Ok((vs[0].clone(), vs[1].clone())),
        v => Err(format!("{what} is {}, not a pair", v.kind())),
    }
}

fn pair(a: Value, b: Value) -> Value {
    Value::tuple(vec![a, b])
}

fn new_tensor(shape: Vec<usize>, data: Vec<Value>) -> Value {
    Value::Tensor(Rc::new(Tensor { shape, data }))
}

/// A zero shaped like `v` (the interpreter's `zero_like`).
fn zero_like(v: &Value) -> Value {
    match v {
        Value::Float(_) => Value::Float(0.0),
        Value::Integer(_) => Value::Integer(0),
        Value::Bool(_) => Value::Bool(false),
        Value::String(_) => Value::string(""),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(zero_like).collect()),
        Value::Tensor(t) => new_tensor(t.shape.clone(), t.data.iter().map(zero_like).collect()),
        Value::Closure(_) | Value::LinMap(_) => v.clone(),
    }
}

/// The zero of type `ty` whose uncompressed shape is `sh` (the
/// interpreter's `zero_from_shape`, for `buildFromSparse`).
fn zero_from_shape(sh: &Value, ty: &Type) -> Value {
    match (ty, sh) {
        (Type::Float, _) => Value::Float(0.0),
        (Type::Integer, _) => Value::Integer(0),
        (Type::Bool, _) => Value::Bool(false),
        (Type::String, _) => Value::string(""),
        (Type::Tuple(ts), Value::Tuple(ss)) if ts.len() == ss.len() => {
            Value::Tuple(ss.iter().zip(ts).map(|(s, t)| zero_from_shape(s, t)).collect())
        }
        (Type::Tuple(ts), _) => Value::Tuple(ts.iter().map(|t| zero_from_shape(&Value::unit(), t)).collect()),
        (Type::Tensor(_, e), Value::Tensor(st)) => {
            new_tensor(st.shape.clone(), st.data.iter().map(|s| zero_from_shape(s, e)).collect())
        }
        (Type::Tensor(rank, _), _) => new_tensor(vec![0; (*rank).max(1)], Vec::new()),
        (_, Value::Tuple(ss)) if !ss.is_empty() => {
            Value::Tuple(ss.iter().map(|s| zero_from_shape(s, &Type::Unknown)).collect())
        }
        (_, Value::Tensor(st)) => {
            new_tensor(st.shape.clone(), st.data.iter().map(|s| zero_from_shape(s, &Type::Unknown)).collect())
        }
        _ => Value::Float(0.0),
    }
}

/// `$dummy T`: the default value of a type.
fn dummy(ty: &Type) -> R<Value> {
    Ok(match ty {
        Type::Integer => Value::Integer(0),
        Type::Float => Value::Float(0.0),
        Type::Bool => Value::Bool(false),
        Type::String => Value::string(""),
        Type::Tuple(ts) => Value::Tuple(ts.iter().map(dummy).collect::<Result<_, _>>()?),
        Type::Tensor(rank, _) => new_tensor(vec![0; (*rank).max(1)], Vec::new()),
        Type::Lam(..) | Type::LM(..) | Type::Unknown => return Err(format!("there is no default value of type `{ty}`")),
    })
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
                    vs.get((*index as usize).wrapping_sub(1)).cloned().ok_or("internal error: projection out of range")?
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
                let n = count(&shape)?;
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
        let k = flat_index(&result.shape, &i)?;
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
            lams.get(i).copied().flatten().ok_or_else(|| format!("internal error: argument {} of `{p}` is not a lambda", i + 1))
        };
        let val = |i: usize| -> R<&Value> {
            vals.get(i).ok_or_else(|| format!("internal error: `{p}` has no argument {}", i + 1))
        };
        Ok(match p {
            Prim::Build => {
                let shape = sizes(val(0)?, "build")?;
                let n = count(&shape)?;
                let l = lam(1)?;
                let mut data = Vec::with_capacity(n);
                for k in 0..n {
                    data.push(self.apply(l, &t, index_at(k, &shape), d)?);
                }
                new_tensor(shape, data)
            }
            Prim::Sumbuild => {
                let shape = sizes(val(0)?, "sumbuild")?;
                let n = count(&shape)?;
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
                let n = count(&shape)?;
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
                count(&[n, n])?;
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
                for k in 0..count(&space)? {
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
                for k in 0..count(&space)? {
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
            Prim::LmFold => {
                return Err(
                    "`lmFold` is not supported by the CL evaluator: its value is a linear map holding its lambdas as closures of the interpreter"
                        .to_string(),
                )
            }
            p => return Err(format!("internal error: `{p}` has no lambda arguments")),
        })
    }
}
