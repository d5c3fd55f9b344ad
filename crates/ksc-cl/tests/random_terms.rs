//! Random well-typed CL terms, not only those the translation makes: every
//! form (reordering prunes, compositions through any type, lets on any
//! environment, builds, folds, maps, asserts, prints) at random, and for
//! each
//!
//! - the type checker gives the type it was generated at;
//! - the back-translation to Core IR gives a definition the front end's
//!   checker accepts;
//! - evaluating the term (figure 10) and running the definition in the
//!   interpreter agree: same value and output, or the same error after the
//!   same output.

use std::rc::Rc;

use ksc_cl::{Cl, ClArg, ClLam, Fun, Konst};
use ksc_eval::{Interpreter, Tensor, Value};
use ksc_ir::{Callee, Decl, Def, FunName, Lit, Param, Prim, Type};
use ksc_types::check::Checker;
use ksc_types::{DeclSpans, FileRef};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn f() -> Type {
    Type::Float
}
fn i() -> Type {
    Type::Integer
}
fn vf() -> Type {
    Type::vec(Type::Float)
}
fn pair(a: Type, b: Type) -> Type {
    Type::Tuple(vec![a, b])
}

/// The types terms are generated at.
fn some_type(rng: &mut Rng) -> Type {
    match rng.below(7) {
        0 | 1 => f(),
        2 => i(),
        3 => Type::Bool,
        4 => vf(),
        5 => pair(f(), i()),
        _ => pair(vf(), f()),
    }
}

fn fun(name: &str, src: Type, tgt: Type) -> Cl {
    Cl::Fun(Fun { callee: Callee::Fun(FunName::typed(name, src.clone())), src, tgt })
}

fn prim(p: Prim, src: Type, tgt: Type) -> Cl {
    Cl::Fun(Fun { callee: Callee::Prim(p), src, tgt })
}

fn comp(a: Cl, b: Cl) -> Cl {
    Cl::comp(a, b)
}

fn lit(t: &Type, rng: &mut Rng) -> Cl {
    Cl::Konst(Konst::Lit(match t {
        Type::Integer => Lit::Integer(rng.below(4) as i64),
        Type::Bool => Lit::Bool(rng.chance(50)),
        _ => Lit::Float([0.5, -1.25, 2.0, 0.0][rng.below(4)]),
    }))
}

struct Gen<'r> {
    rng: &'r mut Rng,
    names: usize,
}

impl Gen<'_> {
    fn var(&mut self, base: &str) -> String {
        self.names += 1;
        // Reuse names sometimes, so binders shadow.
        format!("{base}{}", self.names % 4)
    }

    /// A term of type `s ⇒ t` that needs no fuel.
    fn leaf(&mut self, s: &Type, t: &Type) -> Cl {
        if s == t && self.rng.chance(30) {
            return Cl::Id;
        }
        if let Type::Tuple(ts) = s {
            let at: Vec<usize> = (0..ts.len()).filter(|&k| &ts[k] == t).collect();
            if !at.is_empty() && self.rng.chance(70) {
                return Cl::Fun(Fun::projection(at[self.rng.below(at.len())], s).unwrap());
            }
        }
        match t {
            Type::Tuple(ts) => Cl::Tuple(ts.iter().map(|u| self.leaf(s, u)).collect()),
            Type::Tensor(..) => {
                // build k (lam i (to_float i)), from nothing.
                let n = Cl::Konst(Konst::Lit(Lit::Integer(self.rng.below(4) as i64)));
                let one = Type::Tuple(vec![i()]);
                let elem = comp(Cl::Fun(Fun::projection(0, &one).unwrap()), fun("to_float", i(), f()));
                let var = self.var("i");
                comp(Cl::Tuple(vec![]), Cl::Build { size: Box::new(n), var, ty: i(), elem: Box::new(elem) })
            }
            t => comp(Cl::Tuple(vec![]), lit(t, self.rng)),
        }
    }

    fn gen(&mut self, s: &Type, t: &Type, fuel: u32) -> Cl {
        if fuel == 0 || self.rng.chance(15) {
            return self.leaf(s, t);
        }
        let fuel = fuel - 1;
        let env = matches!(s, Type::Tuple(_));
        // Forms that apply to every target type.
        match self.rng.below(12) {
            0 => {
                let m = some_type(self.rng);
                return comp(self.gen(s, &m, fuel), self.gen(&m, t, fuel));
            }
            1 => {
                let c = self.gen(s, &Type::Bool, fuel);
                return Cl::If(Box::new(c), Box::new(self.gen(s, t, fuel)), Box::new(self.gen(s, t, fuel)));
            }
            2 | 3 if env => {
                let r = some_type(self.rng);
                let rhs = self.gen(s, &r, fuel);
                let inner = ksc_cl::check::extend(s, &r).unwrap();
                let body = self.gen(&inner, t, fuel);
                return Cl::Let { var: self.var("x"), ty: r, rhs: Box::new(rhs), body: Box::new(body) };
            }
            4 if env => {
                // Keep some components, in any order.
                let Type::Tuple(ts) = s else { unreachable!() };
                let mut keep: Vec<usize> = (0..ts.len()).filter(|_| self.rng.chance(60)).collect();
                for k in (1..keep.len()).rev() {
                    let j = self.rng.below(k + 1);
                    keep.swap(k, j);
                }
                let pruned = Type::Tuple(keep.iter().map(|&k| ts[k].clone()).collect());
                return comp(Cl::Prune { keep, of: ts.len() }, self.gen(&pruned, t, fuel));
            }
            5 if !env => {
                // Make an environment of the argument.
                let one = Type::Tuple(vec![s.clone()]);
                return comp(Cl::Tuple(vec![Cl::Id]), self.gen(&one, t, fuel));
            }
            6 if self.rng.chance(20) => {
                // An assertion that may fail.
                let c = self.gen(s, &Type::Bool, fuel);
                return Cl::Assert(Box::new(c), Box::new(self.gen(s, t, fuel)));
            }
            _ => {}
        }
        // Forms for the target type.
        match t {
            Type::Tuple(ts) => Cl::Tuple(ts.iter().map(|u| self.gen(s, u, fuel)).collect()),
            Type::Float => match self.rng.below(6) {
                0 => comp(
                    self.gen(s, &pair(f(), f()), fuel),
                    fun(["add", "mul", "sub"][self.rng.below(3)], pair(f(), f()), f()),
                ),
                1 => comp(self.gen(s, &vf(), fuel), prim(Prim::Sum, vf(), f())),
                2 => comp(self.gen(s, &i(), fuel), fun("to_float", i(), f())),
                3 => comp(self.gen(s, &pair(i(), vf()), fuel), prim(Prim::Index, pair(i(), vf()), f())),
                4 if env => {
                    let ab = pair(f(), f());
                    let inner = ksc_cl::check::extend(s, &ab).unwrap();
                    Cl::Fold {
                        var: self.var("acc"),
                        ty: ab,
                        step: Box::new(self.gen(&inner, &f(), fuel)),
                        acc: Box::new(self.gen(s, &f(), fuel)),
                        vec: Box::new(self.gen(s, &vf(), fuel)),
                    }
                }
                _ => self.leaf(s, t),
            },
            Type::Integer => match self.rng.below(4) {
                0 => comp(self.gen(s, &vf(), fuel), prim(Prim::Size, vf(), i())),
                1 => comp(self.gen(s, &pair(i(), i()), fuel), fun("add", pair(i(), i()), i())),
                // An effect: print writes its argument.
                2 => {
                    let u = some_type(self.rng);
                    let args = Type::Tuple(vec![u.clone()]);
                    comp(Cl::Tuple(vec![self.gen(s, &u, fuel)]), prim(Prim::Print, args, i()))
                }
                _ => self.leaf(s, t),
            },
            Type::Bool => match self.rng.below(3) {
                0 => comp(self.gen(s, &pair(f(), f()), fuel), fun("lt", pair(f(), f()), Type::Bool)),
                1 => comp(self.gen(s, &pair(i(), i()), fuel), prim(Prim::Eq, pair(i(), i()), Type::Bool)),
                _ => self.leaf(s, t),
            },
            Type::Tensor(..) => match self.rng.below(4) {
                0 if env => {
                    let inner = ksc_cl::check::extend(s, &i()).unwrap();
                    Cl::Build {
                        size: Box::new(self.gen(s, &i(), fuel)),
                        var: self.var("i"),
                        ty: i(),
                        elem: Box::new(self.gen(&inner, &f(), fuel)),
                    }
                }
                1 if env => {
                    let inner = ksc_cl::check::extend(s, &f()).unwrap();
                    let lam = ClLam { var: self.var("e"), ty: f(), ret: f(), body: self.gen(&inner, &f(), fuel) };
                    Cl::Prim {
                        prim: Prim::Map,
                        args: vec![ClArg::Lam(lam), ClArg::Term(self.gen(s, &vf(), fuel))],
                        ty: vf(),
                    }
                }
                2 => {
                    let args = Type::Tuple(vec![f(), f()]);
                    comp(
                        Cl::Tuple(vec![self.gen(s, &f(), fuel), self.gen(s, &f(), fuel)]),
                        prim(Prim::VecInit, args, vf()),
                    )
                }
                _ => self.leaf(s, t),
            },
            _ => self.leaf(s, t),
        }
    }
}

fn random_value(t: &Type, rng: &mut Rng) -> Value {
    match t {
        Type::Float => Value::Float([0.5, -2.0, 1.5, 3.0][rng.below(4)]),
        Type::Integer => Value::Integer(rng.below(3) as i64),
        Type::Bool => Value::Bool(rng.chance(50)),
        Type::Tuple(ts) => Value::tuple(ts.iter().map(|t| random_value(t, rng)).collect()),
        Type::Tensor(_, e) => {
            let n = rng.below(4);
            let data = (0..n).map(|_| random_value(e, rng)).collect();
            Value::Tensor(Rc::new(Tensor { shape: vec![n], data }))
        }
        _ => Value::unit(),
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (Value::Tuple(xs), Value::Tuple(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys.iter()).all(|(x, y)| same(x, y))
        }
        (Value::Tensor(x), Value::Tensor(y)) => {
            x.shape == y.shape && x.data.iter().zip(&y.data).all(|(p, q)| same(p, q))
        }
        (a, b) => a == b,
    }
}

#[test]
fn random_terms_evaluate_as_their_translation_back() {
    std::thread::Builder::new().stack_size(1 << 30).spawn(run).unwrap().join().unwrap();
}

fn run() {
    let prelude = ksc_types::analyze("");
    let defs: Vec<&Def> = prelude.defs();
    let table = prelude.table.clone();
    let sigs = |g: &FunName| table.get(g).map(|s| (s.arg_ty.clone(), s.ret_ty.clone()));
    let mut rng = Rng(20260113);
    let (mut agreed, mut failed_alike, mut forms) = (0, 0, std::collections::HashSet::new());
    let (mut nodes, mut printing) = (0, 0);
    for case in 0..1000 {
        // The argument: a tuple of parameters, or one parameter.
        let n = rng.below(4);
        let params: Vec<Param> = (0..n).map(|k| Param { name: format!("a{k}"), ty: some_type(&mut rng) }).collect();
        let s = Type::of_params(params.iter().map(|p| p.ty.clone()));
        let t = some_type(&mut rng);
        let c = Gen { rng: &mut rng, names: 0 }.gen(&s, &t, 6);
        nodes += c.size();
        c.visit(&mut |x| {
            forms.insert(std::mem::discriminant(x));
        });
        let ty = ksc_cl::type_of(&c, &s, &sigs);
        assert_eq!(ty.as_ref(), Ok(&t), "case {case}: {}", c.pretty());
        let def = ksc_cl::cl_to_def(&c, FunName::plain("g"), &params, &t)
            .unwrap_or_else(|e| panic!("case {case}: back to Core: {e}\n{}", c.pretty()));
        let printed = ksc_ir::print::print_def(&def);
        let mut scratch = table.clone();
        let mut decl = Decl::Def(def);
        let mut checker = Checker::new(&mut scratch, FileRef::Source);
        checker.check_decl(0, &mut decl, &DeclSpans::default());
        let msgs: Vec<&String> = checker.diagnostics.iter().map(|d| &d.message).collect();
        assert!(msgs.is_empty(), "case {case}: {msgs:?}\n{}\n{printed}", c.pretty());
        let Decl::Def(def) = decl else { unreachable!() };
        let mut all = defs.clone();
        all.push(&def);
        let mut interp = Interpreter::new(all.iter().copied());
        for _ in 0..3 {
            let x = random_value(&s, &mut rng);
            let (mut out1, mut out2) = (Vec::new(), Vec::new());
            let r1 = {
                let mut rt = ksc_cl::InterpRuntime::new(defs.iter().copied(), &mut out1);
                ksc_cl::eval(&c, x.clone(), &mut rt).map_err(|e| e.message)
            };
            let r2 = interp.call(&def.name, x.clone(), &mut out2).map_err(|e| e.message);
            printing += usize::from(!out1.is_empty());
            let show = |o: &[u8]| String::from_utf8_lossy(o).into_owned();
            match (&r1, &r2) {
                (Ok(a), Ok(b)) if same(a, b) && out1 == out2 => agreed += 1,
                (Err(a), Err(b)) if a == b && out1 == out2 => failed_alike += 1,
                _ => panic!(
                    "case {case} at {x}: CL {r1:?} printing {:?}, Core {r2:?} printing {:?}\n{}\n{printed}",
                    show(&out1),
                    show(&out2),
                    c.pretty()
                ),
            }
        }
    }
    eprintln!(
        "{agreed} points agreed, {failed_alike} failed alike ({printing} printed something); {} forms, {nodes} nodes",
        forms.len()
    );
    assert!(agreed >= 1500, "only {agreed} points evaluated");
    assert!(failed_alike >= 200, "only {failed_alike} failures compared");
    assert_eq!(forms.len(), 12, "every form of CL is generated");
    assert!(printing >= 200, "only {printing} points printed");
}
