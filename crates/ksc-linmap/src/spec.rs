//! Random well-typed linear-map terms over random shapes, with shrinking,
//! for checking the laws: a [`MapSpec`] describes a term; [`MapSpec::build`]
//! turns it into Core IR.

use quickcheck::{Arbitrary, Gen};

use ksc_ir::prim::Accumulators;
use ksc_ir::{ExprId, Prim, Type};

use ksc_ir::builder::Builder;

/// The shape of a primal value: Floats, a discrete scalar (whose tangent is
/// the unit), vectors of a fixed length (including 0 and 1) and tuples.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    Float,
    Int,
    Vec(usize, Box<Shape>),
    Tuple(Vec<Shape>),
}

impl Shape {
    pub fn ty(&self) -> Type {
        match self {
            Shape::Float => Type::Float,
            Shape::Int => Type::Integer,
            Shape::Vec(_, e) => Type::vec(e.ty()),
            Shape::Tuple(ss) => Type::Tuple(ss.iter().map(Shape::ty).collect()),
        }
    }

    /// The dimension of the tangent space.
    pub fn dim(&self) -> usize {
        match self {
            Shape::Float => 1,
            Shape::Int => 0,
            Shape::Vec(n, e) => n * e.dim(),
            Shape::Tuple(ss) => ss.iter().map(Shape::dim).sum(),
        }
    }

    /// A random shape: mostly small, sometimes nested. The generator's size
    /// bounds vector lengths (size 1: lengths 0 and 1) and nesting, so
    /// checks that start small find small counterexamples first.
    pub fn arbitrary(g: &mut Gen, depth: u32) -> Shape {
        let depth = depth.min(g.size() as u32);
        let choice = u8::arbitrary(g) % if depth == 0 { 3 } else { 8 };
        match choice {
            0 | 1 => Shape::Float,
            2 => {
                if bool::arbitrary(g) {
                    Shape::Float
                } else {
                    Shape::Int
                }
            }
            3..=5 => Shape::Vec(usize::arbitrary(g) % (g.size() + 1).min(4), Box::new(Shape::arbitrary(g, depth - 1))),
            _ => {
                let n = usize::arbitrary(g) % 3 + 1;
                Shape::Tuple((0..n).map(|_| Shape::arbitrary(g, depth - 1)).collect())
            }
        }
    }

    /// An expression whose value has this shape, with small random numbers.
    pub fn value(&self, b: &mut Builder, seed: &mut Numbers) -> ksc_ir::ExprId {
        match self {
            Shape::Float => b.float(seed.draw()),
            Shape::Int => {
                let i = seed.draw().round() as i64;
                b.integer(i)
            }
            Shape::Vec(0, e) => {
                let n = b.integer(0);
                let e = (**e).clone();
                let mut s = seed.clone();
                b.build(n, move |b, _| e.value(b, &mut s))
            }
            Shape::Vec(n, e) => {
                let xs = (0..*n).map(|_| e.value(b, seed)).collect();
                b.prim(Prim::VecInit, xs)
            }
            Shape::Tuple(ss) => {
                let xs = ss.iter().map(|s| s.value(b, seed)).collect();
                b.tuple(xs)
            }
        }
    }
}

impl Shape {
    /// An expression whose value is a tangent of this shape.
    pub fn tangent_value(&self, b: &mut Builder, seed: &mut Numbers) -> ksc_ir::ExprId {
        match self {
            Shape::Float => b.float(seed.draw()),
            Shape::Int => b.tuple(Vec::new()),
            Shape::Vec(0, e) => {
                let n = b.integer(0);
                let e = (**e).clone();
                let mut s = seed.clone();
                b.build(n, move |b, _| e.tangent_value(b, &mut s))
            }
            Shape::Vec(n, e) => {
                let xs = (0..*n).map(|_| e.tangent_value(b, seed)).collect();
                b.prim(Prim::VecInit, xs)
            }
            Shape::Tuple(ss) => {
                let xs = ss.iter().map(|s| s.tangent_value(b, seed)).collect();
                b.tuple(xs)
            }
        }
    }
}

/// A deterministic stream of small numbers (coefficients and vector
/// entries), so a spec builds the same term every time.
#[derive(Clone, Debug, PartialEq)]
pub struct Numbers(pub Vec<f64>, pub usize);

impl Numbers {
    pub fn draw(&mut self) -> f64 {
        let x = if self.0.is_empty() { 1.0 } else { self.0[self.1 % self.0.len()] };
        self.1 += 1;
        x
    }

    pub fn arbitrary(g: &mut Gen) -> Numbers {
        let n = usize::arbitrary(g) % 6 + 1;
        Numbers((0..n).map(|_| (i8::arbitrary(g) % 8) as f64 / 2.0).collect(), 0)
    }
}

/// A linear-map term.
#[derive(Clone, Debug, PartialEq)]
pub enum MapSpec {
    Zero(Shape, Shape),
    One(Shape),
    Scale(Shape, f64),
    /// `lmScaleR v` with v of this shape and these numbers.
    ScaleR(Shape, Numbers),
    /// `lmDot v`.
    Dot(Shape, Numbers),
    Add(Box<MapSpec>, Box<MapSpec>),
    /// `f ∘ g`
    Compose(Box<MapSpec>, Box<MapSpec>),
    VCat(Vec<MapSpec>),
    HCat(Vec<MapSpec>),
    /// `lmVCatV (s, v)`: the source shape, the target shape of each map, and the maps.
    VCatV(Shape, Shape, Vec<MapSpec>),
    /// `lmHCatV (t, v)`: the target shape, the source shape of each map, and the maps.
    HCatV(Shape, Shape, Vec<MapSpec>),
    Transpose(Box<MapSpec>),
    /// `lmIndex (i, v)` with v of this (vector) shape.
    Index(usize, Shape),
    /// `lmGet$i$n t` (i 0-based) with t of this (tuple) shape.
    Get(usize, Shape),
    /// `lmFold`, `lmScan` or `lmScanBlocks (s, f, df, acc, v)` of one of
    /// the steps of [`FoldOp`], over a vector of this many elements.
    Fold(FoldOp, Accumulators, usize),
}

/// The steps of the fold-like maps of the law checks, with their
/// derivatives written out as maps: `df (a, x) : LM (Tuple S (Tuple A B)) A`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FoldOp {
    /// `a x` (A = B = Float, no scope): a monoid with identity 1.
    Mul,
    /// The affine-map monoid `(a1, b1) (a2, b2) = (a1 a2, a2 b1 + b2)` on
    /// pairs of Floats (no scope), identity (1, 0): a linear recurrence.
    Affine,
    /// `s a + x` with the scope `s` (A = B = Float, S = (Tuple Float)):
    /// not associative, so only for `lmFold` and `lmScan`.
    Scaled,
}

impl FoldOp {
    /// The accumulator's (and element's) shape.
    fn elem(self) -> Shape {
        match self {
            FoldOp::Affine => Shape::Tuple(vec![Shape::Float, Shape::Float]),
            _ => Shape::Float,
        }
    }

    /// The scope's shape: a tuple of the step's free variables.
    fn scope(self) -> Shape {
        match self {
            FoldOp::Scaled => Shape::Tuple(vec![Shape::Float]),
            _ => Shape::Tuple(Vec::new()),
        }
    }

    /// The monoid's identity, where the step is a monoid's operation.
    fn identity(self, b: &mut Builder) -> Option<ExprId> {
        match self {
            FoldOp::Mul => Some(b.float(1.0)),
            FoldOp::Affine => {
                let (one, zero) = (b.float(1.0), b.float(0.0));
                Some(b.tuple(vec![one, zero]))
            }
            FoldOp::Scaled => None,
        }
    }

    /// `(lam (t : Tuple A B) f)` and `(lam (t : Tuple A B) df)`, the
    /// scope's Float (if any) being `s`.
    fn lambdas(self, b: &mut Builder, s: f64) -> (ExprId, ExprId) {
        let a_ty = self.elem().ty();
        let t_ty = Type::Tuple(vec![a_ty.clone(), a_ty]);
        let one = |b: &mut Builder, derivative: bool| {
            let t = b.fresh_name("t");
            let tv = |b: &mut Builder, k: u32| {
                let v = b.var(&t, t_ty.clone());
                b.prim(Prim::Get { index: k, arity: 2 }, vec![v])
            };
            let get = |b: &mut Builder, e: ExprId, k: u32| {
                let e = b.copy(e);
                b.prim(Prim::Get { index: k, arity: 2 }, vec![e])
            };
            let body = match (self, derivative) {
                (FoldOp::Mul, false) => {
                    let (a, x) = (tv(b, 1), tv(b, 2));
                    b.mul_float(a, x)
                }
                (FoldOp::Mul, true) => {
                    // H(0, H(x, a)).
                    let sc = b.tuple(Vec::new());
                    let a0 = b.float(0.0);
                    let zero = b.prim(Prim::LmZero, vec![sc, a0]);
                    let (a, x) = (tv(b, 1), tv(b, 2));
                    let da = b.prim(Prim::LmScale, vec![a, x]);
                    let (a, x) = (tv(b, 1), tv(b, 2));
                    let dx = b.prim(Prim::LmScale, vec![x, a]);
                    let inner = b.prim(Prim::LmHCat, vec![da, dx]);
                    b.prim(Prim::LmHCat, vec![zero, inner])
                }
                (FoldOp::Affine, false) => {
                    let (p, q) = (tv(b, 1), tv(b, 2));
                    b.share(p, "p", |b, p| {
                        b.share(q, "q", |b, q| {
                            let (a1, b1) = (get(b, p, 1), get(b, p, 2));
                            let (a2, a2b, b2) = (get(b, q, 1), get(b, q, 1), get(b, q, 2));
                            let aa = b.mul_float(a1, a2);
                            let ab = b.mul_float(a2b, b1);
                            let sum = b.add_float(ab, b2);
                            b.tuple(vec![aa, sum])
                        })
                    })
                }
                (FoldOp::Affine, true) => {
                    // H(0, H(a2 I, V(H(a1, 0), H(b1, 1)))).
                    let (p, q) = (tv(b, 1), tv(b, 2));
                    b.share(p, "p", |b, p| {
                        b.share(q, "q", |b, q| {
                            let sc = b.tuple(Vec::new());
                            let pc = b.copy(p);
                            let zero = b.prim(Prim::LmZero, vec![sc, pc]);
                            let (pc, a2) = (b.copy(p), get(b, q, 1));
                            let dp = b.prim(Prim::LmScale, vec![pc, a2]);
                            let (x1, a1) = (b.float(0.0), get(b, p, 1));
                            let d11 = b.prim(Prim::LmScale, vec![x1, a1]);
                            let (x2, y2) = (b.float(0.0), b.float(0.0));
                            let d12 = b.prim(Prim::LmZero, vec![x2, y2]);
                            let (x3, b1) = (b.float(0.0), get(b, p, 2));
                            let d21 = b.prim(Prim::LmScale, vec![x3, b1]);
                            let x4 = b.float(0.0);
                            let d22 = b.prim(Prim::LmOne, vec![x4]);
                            let r1 = b.prim(Prim::LmHCat, vec![d11, d12]);
                            let r2 = b.prim(Prim::LmHCat, vec![d21, d22]);
                            let dq = b.prim(Prim::LmVCat, vec![r1, r2]);
                            let inner = b.prim(Prim::LmHCat, vec![dp, dq]);
                            b.prim(Prim::LmHCat, vec![zero, inner])
                        })
                    })
                }
                (FoldOp::Scaled, false) => {
                    let (sv, a, x) = (b.float(s), tv(b, 1), tv(b, 2));
                    let sa = b.mul_float(sv, a);
                    b.add_float(sa, x)
                }
                (FoldOp::Scaled, true) => {
                    // H(H(a), H(s, 1)).
                    let (x0, a) = (b.float(0.0), tv(b, 1));
                    let ds = b.prim(Prim::LmScale, vec![x0, a]);
                    let ds = b.prim(Prim::LmHCat, vec![ds]);
                    let (x1, sv) = (b.float(0.0), b.float(s));
                    let da = b.prim(Prim::LmScale, vec![x1, sv]);
                    let x2 = b.float(0.0);
                    let dx = b.prim(Prim::LmOne, vec![x2]);
                    let inner = b.prim(Prim::LmHCat, vec![da, dx]);
                    b.prim(Prim::LmHCat, vec![ds, inner])
                }
            };
            b.lam(&t, t_ty.clone(), body)
        };
        let f = one(b, false);
        let df = one(b, true);
        (f, df)
    }
}

use MapSpec as M;

impl MapSpec {
    pub fn source(&self) -> Shape {
        match self {
            M::Zero(s, _) | M::One(s) | M::Scale(s, _) | M::Dot(s, _) | M::Index(_, s) | M::Get(_, s) => s.clone(),
            M::ScaleR(..) => Shape::Float,
            M::Add(m, _) => m.source(),
            M::Compose(_, g) => g.source(),
            M::VCat(ms) => ms[0].source(),
            M::HCat(ms) => Shape::Tuple(ms.iter().map(MapSpec::source).collect()),
            M::VCatV(s, _, _) => s.clone(),
            M::HCatV(_, e, ms) => Shape::Vec(ms.len(), Box::new(e.clone())),
            M::Transpose(m) => m.target(),
            M::Fold(op, _, n) => {
                Shape::Tuple(vec![op.scope(), Shape::Tuple(vec![op.elem(), Shape::Vec(*n, Box::new(op.elem()))])])
            }
        }
    }

    pub fn target(&self) -> Shape {
        match self {
            M::Zero(_, t) | M::One(t) | M::Scale(t, _) | M::ScaleR(t, _) => t.clone(),
            M::Dot(..) => Shape::Float,
            M::Add(m, _) => m.target(),
            M::Compose(f, _) => f.target(),
            M::VCat(ms) => Shape::Tuple(ms.iter().map(MapSpec::target).collect()),
            M::HCat(ms) => ms[0].target(),
            M::VCatV(_, e, ms) => Shape::Vec(ms.len(), Box::new(e.clone())),
            M::HCatV(t, _, _) => t.clone(),
            M::Transpose(m) => m.source(),
            M::Index(_, Shape::Vec(_, e)) => (**e).clone(),
            M::Get(i, Shape::Tuple(ss)) => ss[*i].clone(),
            M::Index(..) | M::Get(..) => Shape::Float,
            M::Fold(op, kept, n) => match kept {
                Accumulators::Last => op.elem(),
                _ => Shape::Vec(kept.count(*n), Box::new(op.elem())),
            },
        }
    }

    /// A random map from `src` to `tgt`, of nesting at most `depth`.
    pub fn arbitrary(g: &mut Gen, src: &Shape, tgt: &Shape, depth: u32) -> MapSpec {
        let depth = depth.min(g.size() as u32);
        let mut options: Vec<u8> = vec![0]; // zero
        if src == tgt {
            options.extend([1, 2]);
        }
        if *src == Shape::Float {
            options.push(3);
        }
        if *tgt == Shape::Float {
            options.push(4);
        }
        if let Shape::Vec(n, e) = src {
            if *n > 0 && **e == *tgt {
                options.push(5);
            }
        }
        if let Shape::Tuple(ss) = src {
            if ss.contains(tgt) {
                options.push(6);
            }
        }
        if depth > 0 {
            options.extend([7, 8, 9, 14]);
            if let Shape::Tuple(ts) = tgt {
                if !ts.is_empty() {
                    options.extend([10, 10]);
                }
            }
            if let Shape::Tuple(ss) = src {
                if !ss.is_empty() {
                    options.extend([11, 11]);
                }
            }
            if matches!(tgt, Shape::Vec(..)) {
                options.extend([12, 12]);
            }
            if matches!(src, Shape::Vec(..)) {
                options.extend([13, 13]);
            }
        }
        let d = depth.saturating_sub(1);
        match *g.choose(&options).unwrap_or(&0) {
            1 => M::One(src.clone()),
            2 => M::Scale(src.clone(), (i8::arbitrary(g) % 8) as f64 / 2.0),
            3 => M::ScaleR(tgt.clone(), Numbers::arbitrary(g)),
            4 => M::Dot(src.clone(), Numbers::arbitrary(g)),
            5 => {
                let Shape::Vec(n, _) = src else { unreachable!() };
                M::Index(usize::arbitrary(g) % n, src.clone())
            }
            6 => {
                let Shape::Tuple(ss) = src else { unreachable!() };
                let at: Vec<usize> = (0..ss.len()).filter(|&i| ss[i] == *tgt).collect();
                M::Get(*g.choose(&at).unwrap_or(&0), src.clone())
            }
            7 => M::Add(Box::new(Self::arbitrary(g, src, tgt, d)), Box::new(Self::arbitrary(g, src, tgt, d))),
            8 => {
                let mid = Shape::arbitrary(g, 1);
                M::Compose(Box::new(Self::arbitrary(g, &mid, tgt, d)), Box::new(Self::arbitrary(g, src, &mid, d)))
            }
            9 => M::Transpose(Box::new(Self::arbitrary(g, tgt, src, d))),
            10 => {
                let Shape::Tuple(ts) = tgt else { unreachable!() };
                M::VCat(ts.iter().map(|t| Self::arbitrary(g, src, t, d)).collect())
            }
            11 => {
                let Shape::Tuple(ss) = src else { unreachable!() };
                M::HCat(ss.iter().map(|s| Self::arbitrary(g, s, tgt, d)).collect())
            }
            12 => {
                let Shape::Vec(n, t) = tgt else { unreachable!() };
                M::VCatV(src.clone(), (**t).clone(), (0..*n).map(|_| Self::arbitrary(g, src, t, d)).collect())
            }
            13 => {
                let Shape::Vec(n, s) = src else { unreachable!() };
                M::HCatV(tgt.clone(), (**s).clone(), (0..*n).map(|_| Self::arbitrary(g, s, tgt, d)).collect())
            }
            14 => {
                // A scale of a random map, so coefficients reach deep.
                M::Compose(Box::new(M::Scale(tgt.clone(), 1.5)), Box::new(Self::arbitrary(g, src, tgt, d)))
            }
            _ => M::Zero(src.clone(), tgt.clone()),
        }
    }

    /// A random fold-like map of kind `kept` over at most three elements
    /// (a monoid's step for `lmScanBlocks`).
    pub fn arbitrary_fold(g: &mut Gen, kept: Accumulators) -> MapSpec {
        let ops: &[FoldOp] = match kept {
            Accumulators::AfterFirst => &[FoldOp::Mul, FoldOp::Affine],
            _ => &[FoldOp::Mul, FoldOp::Affine, FoldOp::Scaled],
        };
        M::Fold(*g.choose(ops).unwrap_or(&FoldOp::Mul), kept, usize::arbitrary(g) % 4)
    }

    /// Simpler maps of the same source and target.
    pub fn shrink(&self) -> Box<dyn Iterator<Item = MapSpec>> {
        let (src, tgt) = (self.source(), self.target());
        let mut out: Vec<MapSpec> = Vec::new();
        if !matches!(self, M::Zero(..)) {
            out.push(M::Zero(src.clone(), tgt.clone()));
        }
        if src == tgt && !matches!(self, M::Zero(..) | M::One(_)) {
            out.push(M::One(src.clone()));
        }
        let same = |m: &MapSpec| m.source() == src && m.target() == tgt;
        match self {
            M::Add(a, b) => {
                out.extend([(**a).clone(), (**b).clone()]);
                out.extend(a.shrink().map(|a2| M::Add(Box::new(a2), b.clone())));
                out.extend(b.shrink().map(|b2| M::Add(a.clone(), Box::new(b2))));
            }
            M::Compose(f, g2) => {
                for m in [&**f, &**g2] {
                    if same(m) {
                        out.push(m.clone());
                    }
                }
                out.extend(f.shrink().map(|f2| M::Compose(Box::new(f2), g2.clone())));
                out.extend(g2.shrink().map(|g3| M::Compose(f.clone(), Box::new(g3))));
            }
            M::Transpose(m) => out.extend(m.shrink().map(|m2| M::Transpose(Box::new(m2)))),
            M::VCat(ms) | M::HCat(ms) | M::VCatV(_, _, ms) | M::HCatV(_, _, ms) => {
                for i in 0..ms.len() {
                    for m2 in ms[i].shrink() {
                        let mut ms2 = ms.clone();
                        ms2[i] = m2;
                        out.push(match self {
                            M::VCat(_) => M::VCat(ms2),
                            M::HCat(_) => M::HCat(ms2),
                            M::VCatV(s, e, _) => M::VCatV(s.clone(), e.clone(), ms2),
                            M::HCatV(t, e, _) => M::HCatV(t.clone(), e.clone(), ms2),
                            _ => unreachable!(),
                        });
                    }
                }
            }
            M::Scale(s, k) if *k != 1.0 => out.push(M::Scale(s.clone(), 1.0)),
            _ => {}
        }
        Box::new(out.into_iter())
    }

    /// The Core IR term.
    pub fn build(&self, b: &mut Builder) -> ksc_ir::ExprId {
        let mut numbers = Numbers(vec![0.5, -1.0, 2.0, 1.5], 0);
        self.build_with(b, &mut numbers)
    }

    fn build_with(&self, b: &mut Builder, numbers: &mut Numbers) -> ksc_ir::ExprId {
        match self {
            M::Zero(s, t) => {
                let (s, t) = (s.value(b, numbers), t.value(b, numbers));
                b.prim(Prim::LmZero, vec![s, t])
            }
            M::One(s) => {
                let s = s.value(b, numbers);
                b.prim(Prim::LmOne, vec![s])
            }
            M::Scale(s, k) => {
                let (s, k) = (s.value(b, numbers), b.float(*k));
                b.prim(Prim::LmScale, vec![s, k])
            }
            M::ScaleR(t, ns) => {
                let v = t.value(b, &mut ns.clone());
                b.prim(Prim::LmScaleR, vec![v])
            }
            M::Dot(s, ns) => {
                let v = s.value(b, &mut ns.clone());
                b.prim(Prim::LmDot, vec![v])
            }
            M::Add(m1, m2) => {
                let (x, y) = (m1.build_with(b, numbers), m2.build_with(b, numbers));
                b.prim(Prim::LmAdd, vec![x, y])
            }
            M::Compose(f, g) => {
                let (x, y) = (f.build_with(b, numbers), g.build_with(b, numbers));
                b.prim(Prim::LmCompose, vec![x, y])
            }
            M::VCat(ms) | M::HCat(ms) => {
                let xs = ms.iter().map(|m| m.build_with(b, numbers)).collect();
                b.prim(if matches!(self, M::VCat(_)) { Prim::LmVCat } else { Prim::LmHCat }, xs)
            }
            M::VCatV(shape, elem, ms) | M::HCatV(shape, elem, ms) => {
                let w = shape.value(b, numbers);
                let maps = if ms.is_empty() {
                    // An empty vector of maps of the right type.
                    let (s, t) = match self {
                        M::VCatV(..) => (shape.clone(), elem.clone()),
                        _ => (elem.clone(), shape.clone()),
                    };
                    let n = b.integer(0);
                    let mut ns = numbers.clone();
                    b.build(n, move |b, _| M::Zero(s, t).build_with(b, &mut ns))
                } else {
                    let xs = ms.iter().map(|m| m.build_with(b, numbers)).collect();
                    b.prim(Prim::VecInit, xs)
                };
                b.prim(if matches!(self, M::VCatV(..)) { Prim::LmVCatV } else { Prim::LmHCatV }, vec![w, maps])
            }
            M::Transpose(m) => {
                let x = m.build_with(b, numbers);
                b.prim(Prim::LmTranspose, vec![x])
            }
            M::Index(i, v) => {
                let (i, v) = (b.integer(*i as i64), v.value(b, numbers));
                b.prim(Prim::LmIndex, vec![i, v])
            }
            M::Get(i, t) => {
                let n = match t {
                    Shape::Tuple(ss) => ss.len() as u32,
                    _ => 1,
                };
                let t = t.value(b, numbers);
                b.prim(Prim::LmGet { index: *i as u32 + 1, arity: n }, vec![t])
            }
            M::Fold(op, kept, n) => {
                // lmFold ((tuple s), f, df, acc, v), the scope's value s
                // written where f and df read it; a monoid's scan from its
                // identity.
                let s = numbers.draw();
                let (f, df) = op.lambdas(b, s);
                let scope = match op {
                    FoldOp::Scaled => {
                        let sv = b.float(s);
                        b.tuple(vec![sv])
                    }
                    _ => b.tuple(Vec::new()),
                };
                let acc = match (kept, op.identity(b)) {
                    (Accumulators::AfterFirst, Some(e)) => e,
                    _ => op.elem().value(b, numbers),
                };
                let v = Shape::Vec(*n, Box::new(op.elem())).value(b, numbers);
                b.prim(kept.map_prim(), vec![scope, f, df, acc, v])
            }
        }
    }

    /// Is this term well formed (used to reject shrink candidates and
    /// generator slips)?
    pub fn well_formed(&self) -> bool {
        match self {
            M::Add(a, b) => a.well_formed() && b.well_formed() && a.source() == b.source() && a.target() == b.target(),
            M::Compose(f, g) => f.well_formed() && g.well_formed() && f.source() == g.target(),
            M::VCat(ms) => !ms.is_empty() && ms.iter().all(|m| m.well_formed() && m.source() == ms[0].source()),
            M::HCat(ms) => !ms.is_empty() && ms.iter().all(|m| m.well_formed() && m.target() == ms[0].target()),
            M::VCatV(s, e, ms) => ms.iter().all(|m| m.well_formed() && m.source() == *s && m.target() == *e),
            M::HCatV(t, e, ms) => ms.iter().all(|m| m.well_formed() && m.target() == *t && m.source() == *e),
            M::Transpose(m) => m.well_formed(),
            M::Index(i, Shape::Vec(n, _)) => i < n,
            M::Get(i, Shape::Tuple(ss)) => *i < ss.len(),
            M::Index(..) | M::Get(..) => false,
            // A scan over blocks needs a monoid's operation.
            M::Fold(op, kept, _) => *kept != Accumulators::AfterFirst || *op != FoldOp::Scaled,
            _ => true,
        }
    }
}
