//! A tiny front end for tests: reads a subset of `.ks` into typed, resolved
//! Core IR, the way the real front end hands definitions to the interpreter
//! (every `Callee::Fun` name has its base type; every expression its type).
//!
//! Supported: `(def f T ((x : S) ...) body)`, `(def f T (x : S) body)`,
//! `(edef f T S)`, literals, variables, `let` with one binding (a variable or
//! a tuple pattern), `if`, `assert`, `lam`, `tuple`, `$dummy`, calls of
//! primitives, of definitions and edefs (resolved by argument type) and of
//! the native prelude. Test code: it panics on malformed input.

use ksc_ir::{Body, Callee, Def, Expr, ExprId, FunName, Lit, Param, Pat, Prim, Type};

use ksc_eval::native_prelude;

#[derive(Clone, Debug)]
pub enum Sx {
    Atom(String),
    Str(String),
    List(Vec<Sx>),
}

pub fn read(src: &str) -> Vec<Sx> {
    let chars: Vec<char> = src.chars().collect();
    let mut pos = 0;
    let mut out = Vec::new();
    while let Some(sx) = read_one(&chars, &mut pos) {
        out.push(sx);
    }
    out
}

fn skip_space(chars: &[char], pos: &mut usize) {
    while *pos < chars.len() {
        if chars[*pos].is_whitespace() {
            *pos += 1;
        } else if chars[*pos] == ';' {
            while *pos < chars.len() && chars[*pos] != '\n' {
                *pos += 1;
            }
        } else {
            break;
        }
    }
}

fn read_one(chars: &[char], pos: &mut usize) -> Option<Sx> {
    skip_space(chars, pos);
    let c = *chars.get(*pos)?;
    *pos += 1;
    match c {
        '(' => {
            let mut items = Vec::new();
            loop {
                skip_space(chars, pos);
                if chars.get(*pos) == Some(&')') {
                    *pos += 1;
                    return Some(Sx::List(items));
                }
                items.push(read_one(chars, pos).expect("unclosed list"));
            }
        }
        ')' => panic!("unexpected )"),
        '"' => {
            let mut s = String::new();
            loop {
                let c = chars[*pos];
                *pos += 1;
                match c {
                    '"' => return Some(Sx::Str(s)),
                    '\\' => {
                        let e = chars[*pos];
                        *pos += 1;
                        s.push(match e {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                    }
                    c => s.push(c),
                }
            }
        }
        c => {
            let mut s = String::from(c);
            while let Some(&c) = chars.get(*pos) {
                if c.is_whitespace() || c == '(' || c == ')' {
                    break;
                }
                s.push(c);
                *pos += 1;
            }
            Some(Sx::Atom(s))
        }
    }
}

fn atom(sx: &Sx) -> &str {
    match sx {
        Sx::Atom(a) => a,
        other => panic!("expected an atom, found {other:?}"),
    }
}

fn list(sx: &Sx) -> &[Sx] {
    match sx {
        Sx::List(l) => l,
        other => panic!("expected a list, found {other:?}"),
    }
}

pub fn parse_type(sx: &Sx) -> Type {
    match sx {
        Sx::Atom(a) => match a.as_str() {
            "Integer" => Type::Integer,
            "Float" => Type::Float,
            "Bool" => Type::Bool,
            "String" => Type::String,
            other => panic!("unknown type {other}"),
        },
        Sx::List(l) => match atom(&l[0]) {
            "Tuple" => Type::Tuple(l[1..].iter().map(parse_type).collect()),
            "Vec" => Type::vec(parse_type(&l[1])),
            "Tensor" => Type::tensor(atom(&l[1]).parse().unwrap(), parse_type(&l[2])),
            "Lam" => Type::lam(parse_type(&l[1]), parse_type(&l[2])),
            other => panic!("unknown type {other}"),
        },
        Sx::Str(_) => panic!("a string is not a type"),
    }
}

/// A parameter `(x : T)`.
/// A parameter `(x : T)`; a compound type may be written without its
/// parentheses: `(p : Tuple Float Float)`.
fn parse_param(sx: &Sx) -> Param {
    let l = list(sx);
    assert_eq!(atom(&l[1]), ":");
    let ty = if l.len() == 3 { parse_type(&l[2]) } else { parse_type(&Sx::List(l[2..].to_vec())) };
    Param { name: atom(&l[0]).to_string(), ty }
}

struct Sig {
    name: FunName,
    ret: Type,
}

/// The result type of a native prelude function (the test's own table).
fn native_ret(base: &str, arg: &Type) -> Option<Type> {
    native_prelude(&FunName::typed(base, arg.clone()))?;
    Some(match base {
        "gt" | "lt" | "gte" | "lte" | "or" | "and" => Type::Bool,
        "imax" => Type::Integer,
        "to_float" | "bool_to_float" | "$ranhashdoub" | "dot" | "pow" | "max" => Type::Float,
        "mul" if matches!(arg, Type::Tuple(ts) if ts[0] == Type::tensor(2, Type::Float)) => Type::vec(Type::Float),
        _ => match arg {
            Type::Tuple(ts) => ts[0].clone(),
            t => t.clone(),
        },
    })
}

struct Lowerer<'s> {
    sigs: &'s [Sig],
    body: Body,
    env: Vec<(String, Type)>,
}

impl Lowerer<'_> {
    fn typed(&mut self, e: Expr, ty: Type) -> (ExprId, Type) {
        (self.body.alloc_typed(e, ty.clone()), ty)
    }

    fn expr(&mut self, sx: &Sx) -> (ExprId, Type) {
        match sx {
            Sx::Str(s) => self.typed(Expr::Lit(Lit::String(s.clone())), Type::String),
            Sx::Atom(a) => self.atom(a),
            Sx::List(l) => self.form(l),
        }
    }

    fn atom(&mut self, a: &str) -> (ExprId, Type) {
        match a {
            "true" => return self.typed(Expr::Lit(Lit::Bool(true)), Type::Bool),
            "false" => return self.typed(Expr::Lit(Lit::Bool(false)), Type::Bool),
            _ => {}
        }
        let numeric = a.starts_with(|c: char| c.is_ascii_digit())
            || (a.len() > 1 && a.starts_with(['-', '+']) && a[1..].starts_with(|c: char| c.is_ascii_digit()));
        if numeric {
            if a.contains(['.', 'e', 'E']) {
                return self.typed(Expr::Lit(Lit::Float(a.parse().unwrap())), Type::Float);
            }
            return self.typed(Expr::Lit(Lit::Integer(a.parse().unwrap())), Type::Integer);
        }
        let ty = match self.env.iter().rev().find(|(v, _)| v == a) {
            Some((_, t)) => t.clone(),
            None => Type::Unknown,
        };
        self.typed(Expr::Var(a.to_string()), ty)
    }

    fn form(&mut self, l: &[Sx]) -> (ExprId, Type) {
        let head = match &l[0] {
            Sx::Atom(a) => a.as_str(),
            _ => panic!("a call of a non-name"),
        };
        match head {
            "let" => {
                let binding = list(&l[1]);
                let (rhs, rty) = self.expr(&binding[1]);
                let (pat, bound) = match &binding[0] {
                    Sx::Atom(v) => (Pat::Var(v.clone()), vec![(v.clone(), rty)]),
                    Sx::List(vs) => {
                        let names: Vec<String> = vs.iter().map(|v| atom(v).to_string()).collect();
                        let tys = match rty {
                            Type::Tuple(ts) => ts,
                            _ => vec![Type::Unknown; names.len()],
                        };
                        (Pat::Tuple(names.clone()), names.into_iter().zip(tys).collect())
                    }
                    Sx::Str(_) => panic!("bad pattern"),
                };
                let n = bound.len();
                self.env.extend(bound);
                let (b, bty) = self.expr(&l[2]);
                self.env.truncate(self.env.len() - n);
                self.typed(Expr::Let(pat, rhs, b), bty)
            }
            "if" => {
                let (c, _) = self.expr(&l[1]);
                let (t, ty) = self.expr(&l[2]);
                let (f, _) = self.expr(&l[3]);
                self.typed(Expr::If(c, t, f), ty)
            }
            "assert" => {
                let (c, _) = self.expr(&l[1]);
                let (b, ty) = self.expr(&l[2]);
                self.typed(Expr::Assert(c, b, None), ty)
            }
            "lam" => {
                let p = parse_param(&l[1]);
                self.env.push((p.name.clone(), p.ty.clone()));
                let (b, bty) = self.expr(&l[2]);
                self.env.pop();
                self.typed(Expr::Lam(p.name, p.ty.clone(), b), Type::lam(p.ty, bty))
            }
            "tuple" => {
                let (es, ts): (Vec<_>, Vec<_>) = l[1..].iter().map(|x| self.expr(x)).unzip();
                self.typed(Expr::Tuple(es), Type::Tuple(ts))
            }
            "$dummy" => {
                let t = parse_type(&l[1]);
                self.typed(Expr::Dummy(t.clone()), t)
            }
            _ => self.call(head, &l[1..]),
        }
    }

    fn call(&mut self, head: &str, args: &[Sx]) -> (ExprId, Type) {
        let (es, ts): (Vec<_>, Vec<_>) = args.iter().map(|x| self.expr(x)).unzip();
        let (arg, arg_ty) =
            if es.len() == 1 { (es[0], ts[0].clone()) } else { self.typed(Expr::Tuple(es), Type::Tuple(ts.clone())) };
        if let Some(p) = Prim::from_name(head) {
            let written: Vec<Type> = self.body.call_args(arg).iter().map(|&e| self.body.ty(e).clone()).collect();
            let ty = p.result_type(&written).unwrap_or_else(|e| panic!("{head}: {e}"));
            return self.typed(Expr::Call(Callee::Prim(p), arg), ty);
        }
        if let Some(sig) = self.sigs.iter().find(|s| s.name.base == head && s.name.base_ty.as_ref() == Some(&arg_ty)) {
            let (name, ret) = (sig.name.clone(), sig.ret.clone());
            return self.typed(Expr::Call(Callee::Fun(name), arg), ret);
        }
        let ret = native_ret(head, &arg_ty).unwrap_or_else(|| panic!("no function {head} at {arg_ty}"));
        self.typed(Expr::Call(Callee::Fun(FunName::typed(head, arg_ty)), arg), ret)
    }
}

fn params_of(sx: &Sx) -> Vec<Param> {
    let l = list(sx);
    if l.len() >= 3 && matches!(&l[1], Sx::Atom(c) if c == ":") {
        vec![parse_param(sx)]
    } else {
        l.iter().map(parse_param).collect()
    }
}

/// Reads a program and lowers its definitions.
pub fn program(src: &str) -> Vec<Def> {
    let decls = read(src);
    let mut sigs = Vec::new();
    for d in &decls {
        let l = list(d);
        match atom(&l[0]) {
            "def" => {
                let params = params_of(&l[3]);
                let arg = Type::of_params(params.iter().map(|p| p.ty.clone()));
                sigs.push(Sig { name: FunName::typed(atom(&l[1]), arg), ret: parse_type(&l[2]) });
            }
            "edef" => sigs.push(Sig { name: FunName::typed(atom(&l[1]), parse_type(&l[3])), ret: parse_type(&l[2]) }),
            other => panic!("unknown declaration {other}"),
        }
    }
    let mut defs = Vec::new();
    for d in &decls {
        let l = list(d);
        if atom(&l[0]) != "def" {
            continue;
        }
        let params = params_of(&l[3]);
        let mut lw = Lowerer {
            sigs: &sigs,
            body: Body::new(),
            env: params.iter().map(|p| (p.name.clone(), p.ty.clone())).collect(),
        };
        let (root, _) = lw.expr(&l[4]);
        let arg = Type::of_params(params.iter().map(|p| p.ty.clone()));
        defs.push(Def {
            name: FunName::typed(atom(&l[1]), arg),
            params,
            ret_ty: parse_type(&l[2]),
            body: lw.body,
            root,
        });
    }
    defs
}
