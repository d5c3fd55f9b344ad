//! [`InterpRuntime`]: the [`Runtime`] that runs `F(f)` in the reference
//! interpreter.

use std::io::Write;

use ksc_eval::{Interpreter, Value};
use ksc_ir::{Body, Callee, Def, Expr, FunName, Param, Prim, Type};
use rustc_hash::FxHashMap;

use crate::eval::Runtime;

/// Calls global functions in an interpreter over a program's definitions,
/// and first-order primitives through a one-line definition applying the
/// primitive to its parameter (made once per primitive and type), so both
/// have exactly the interpreter's semantics. Output of `print` and `$trace`
/// goes to `out`.
pub struct InterpRuntime<'a, 'o> {
    interp: Interpreter<'a>,
    out: &'o mut dyn Write,
    wrappers: FxHashMap<(Prim, Type, Type), Def>,
}

impl<'a, 'o> InterpRuntime<'a, 'o> {
    /// `defs`: the definitions in force (prelude included); functions
    /// without one run natively if the prelude implements them.
    pub fn new(defs: impl IntoIterator<Item = &'a Def>, out: &'o mut dyn Write) -> Self {
        InterpRuntime { interp: Interpreter::new(defs), out, wrappers: FxHashMap::default() }
    }
}

impl Runtime for InterpRuntime<'_, '_> {
    fn call_fun(&mut self, f: &FunName, arg: Value) -> Result<Value, String> {
        self.interp.call(f, arg, self.out).map_err(|e| e.message)
    }

    fn call_prim(&mut self, p: Prim, src: &Type, tgt: &Type, arg: Value) -> Result<Value, String> {
        let key = (p, src.clone(), tgt.clone());
        let def = self.wrappers.entry(key).or_insert_with(|| prim_wrapper(p, src, tgt));
        let mut interp = Interpreter::new(std::iter::once(&*def));
        interp.call(&def.name, arg, self.out).map_err(|e| e.message)
    }
}

/// `(def cl$prim T (x : S) (p x))`, with the components of `x` written out as
/// the arguments when `p` takes several (or takes them as written).
pub fn prim_wrapper(p: Prim, src: &Type, tgt: &Type) -> Def {
    let mut body = Body::new();
    let x = "x".to_string();
    let parts = match (src, p.arity()) {
        (Type::Tuple(ts), None) => Some(ts.clone()),
        (Type::Tuple(ts), Some(k)) if k >= 2 && ts.len() == k => Some(ts.clone()),
        _ => None,
    };
    let arg = match parts {
        Some(ts) => {
            let n = ts.len() as u32;
            let mut comps = Vec::with_capacity(ts.len());
            for (i, t) in ts.iter().enumerate() {
                let v = body.alloc_typed(Expr::Var(x.clone()), src.clone());
                let get = Prim::Get { index: i as u32 + 1, arity: n };
                comps.push(body.alloc_typed(Expr::Call(Callee::Prim(get), v), t.clone()));
            }
            if comps.len() == 1 {
                comps[0]
            } else {
                body.alloc_typed(Expr::Tuple(comps), src.clone())
            }
        }
        None => body.alloc_typed(Expr::Var(x.clone()), src.clone()),
    };
    let root = body.alloc_typed(Expr::Call(Callee::Prim(p), arg), tgt.clone());
    Def {
        name: FunName::typed("cl$prim", src.clone()),
        params: vec![Param { name: x, ty: src.clone() }],
        ret_ty: tgt.clone(),
        body,
        root,
    }
}
