//! The cost tests' families of programs, shared by the interpreter's
//! cost tests (`cost.rs`) and native code's (`tests/it/cost_native.rs`):
//! each a program defining `f`, the type of its argument, and an input of
//! size n.

#![allow(dead_code)]

use ksc_ir::Type;

pub struct Family {
    pub name: &'static str,
    pub program: String,
    pub arg_ty: Type,
    pub input: fn(usize) -> String,
}

/// A chain of `levels` functions, each a loop over the result of the one
/// below (`g1` over the argument), and `f`, the sum over the last.
pub fn call_chain(levels: usize) -> String {
    let step = |name: &str, ty: &str, loop_: &str, below: &str| {
        format!(
            "(def {name} {ty} (v : Vec Float) (let (w {below}) ({loop_} (size w) (lam (i : Integer) (let (x (index i w)) (add (sin x) (mul x (cos x))))))))\n"
        )
    };
    let mut text = step("g1", "(Vec Float)", "build", "v");
    for k in 2..=levels {
        text += &step(&format!("g{k}"), "(Vec Float)", "build", &format!("(g{} v)", k - 1));
    }
    text + &step("f", "Float", "sumbuild", &format!("(g{levels} v)"))
}

/// Loops (gathers, mat-vec, mat-mat, the GMM objective, a fold), a chain
/// of eight calls, and recursion (linear, non-linear, over a vector,
/// tree-shaped).
pub fn families() -> Vec<Family> {
    let vf = Type::vec(Type::Float);
    vec![
        Family {
            name: "gather",
            program: "(def f Float (v : Vec Float) (sumbuild (size v) (lam (i : Integer) (mul (index i v) (index (sub (sub (size v) 1) i) v)))))".into(),
            arg_ty: vf.clone(),
            input: |n| format!("(build {n} (lam (i : Integer) (to_float i)))"),
        },
        Family {
            name: "mat-vec",
            program: "(def f (Vec Float) ((m : Vec (Vec Float)) (v : Vec Float)) (build (size m) (lam (i : Integer) (sumbuild (size v) (lam (j : Integer) (mul (index j (index i m)) (index j v)))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(vf.clone()), vf.clone()]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (build 8 (lam (j : Integer) 1.5)))) (build 8 (lam (j : Integer) 0.5)))"),
        },
        Family {
            name: "mat-mat",
            program: "(def f (Vec (Vec Float)) ((a : Vec (Vec Float)) (b : Vec (Vec Float))) (build (size a) (lam (i : Integer) (build (size (index 0 b)) (lam (j : Integer) (sumbuild (size b) (lam (k : Integer) (mul (index k (index i a)) (index j (index k b))))))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(vf.clone()), Type::vec(vf.clone())]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (build 6 (lam (j : Integer) (to_float (add i j)))))) (build 6 (lam (i : Integer) (build 6 (lam (j : Integer) (div 1.0 (to_float (add 1 (add i j)))))))))"),
        },
        Family {
            name: "GMM objective",
            program: concat!(
                include_str!("../../../../ksc-examples/ad/gmm.ks"),
                "(def f Float ((x : Vec (Vec Float)) (alphas : Vec Float) (means : Vec (Vec Float)) (icf : Vec (Vec Float)) (g : Float) (m : Integer)) (gmm_objective x alphas means icf g m))"
            ).into(),
            arg_ty: Type::Tuple(vec![
                Type::vec(vf.clone()),
                vf.clone(),
                Type::vec(vf.clone()),
                Type::vec(vf.clone()),
                Type::Float,
                Type::Integer,
            ]),
            // n points of dimension 3, 4 components.
            input: |n| {
                format!(
                    "(tuple (build {n} (lam (i : Integer) (build 3 (lam (j : Integer) (sin (to_float (add i j)))))))
                            (build 4 (lam (c : Integer) (mul 0.1 (to_float c))))
                            (build 4 (lam (c : Integer) (build 3 (lam (j : Integer) (cos (to_float (mul c j)))))))
                            (build 4 (lam (c : Integer) (build 6 (lam (j : Integer) (mul 0.05 (to_float (add c j)))))))
                            1.5 3)"
                )
            },
        },
        Family {
            name: "fold product",
            program: "(def f Float (v : Vec Float) (fold (lam (a_x : Tuple Float Float) (let ((a x) a_x) (mul a x))) 1.0 v))".into(),
            arg_ty: vf.clone(),
            input: |n| format!("(build {n} (lam (i : Integer) 1.001))"),
        },
        Family {
            name: "call chain",
            // g1 <- g2 <- ... <- g8 <- f, each a loop over the vector the
            // one below returns: reverse mode must not recompute the levels
            // below each level.
            program: call_chain(8),
            arg_ty: vf.clone(),
            input: |n| format!("(build {n} (lam (i : Integer) (div (to_float i) {n}.0)))"),
        },
        Family {
            name: "higher-order loop",
            // Seed 004's higher-order functions: a function applying its
            // lambda in a loop, given a lambda that calls another function
            // taking a lambda. Derivation calls copies of both with the
            // lambdas written in.
            program: concat!(
                "(def twice Float ((g : Lam Float Float) (x : Float)) (g (g x)))\n",
                "(def apply_all (Vec Float) ((g : Lam Float Float) (v : Vec Float)) ",
                "(build (size v) (lam (i : Integer) (g (index i v)))))\n",
                "(def f Float (v : Vec Float) ",
                "(sum (apply_all (lam (y : Float) (twice (lam (z : Float) (mul z (sin z))) y)) v)))"
            )
            .into(),
            arg_ty: vf.clone(),
            input: |n| format!("(build {n} (lam (i : Integer) (div (to_float i) {n}.0)))"),
        },
        Family {
            name: "higher-order recursion",
            // A recursive function taking a lambda (not a tail recursion):
            // derivation calls a copy with the lambda written in, taped as
            // any recursion.
            program: concat!(
                "(def fold_right Float ((g : Lam (Tuple Float Float) Float) (v : Vec Float) (i : Integer)) ",
                "(if (gte i (size v)) 0.0 (g (index i v) (fold_right g v (add i 1)))))\n",
                "(def f Float ((x : Float) (v : Vec Float)) ",
                "(fold_right (lam (p : Tuple Float Float) (add (get$1$2 p) (mul x (get$2$2 p)))) v 0))"
            )
            .into(),
            arg_ty: Type::Tuple(vec![Type::Float, vf.clone()]),
            input: |n| format!("(tuple 0.99 (build {n} (lam (i : Integer) (div (to_float i) {n}.0))))"),
        },
        Family {
            name: "mutual recursion",
            // f calls g (declared ahead) and g calls f: each is
            // differentiated with the other inlined, taped as
            // self-recursion (82 and 509 times the primal at n = 250 and
            // 2000 before).
            program: concat!(
                "(edef g Float (Tuple Float Integer))\n",
                "(def f Float ((x : Float) (n : Integer)) (if (eq n 0) x (mul x (sin (g x (sub n 1))))))\n",
                "(def g Float ((x : Float) (n : Integer)) (if (eq n 0) 1.0 (add 1.0 (cos (f x (sub n 1))))))"
            )
            .into(),
            arg_ty: Type::Tuple(vec![Type::Float, Type::Integer]),
            input: |n| format!("(tuple 0.7 {n})"),
        },
        Family {
            name: "recursive product",
            program: "(def f Float ((x : Float) (n : Integer)) (if (eq n 0) 1.0 (mul x (f x (sub n 1)))))".into(),
            arg_ty: Type::Tuple(vec![Type::Float, Type::Integer]),
            input: |n| format!("(tuple 1.001 {n})"),
        },
        Family {
            name: "recursive chain",
            // x_{i+1} = x_i * x_i + sin(x_i), from a point where it stays bounded.
            program: "(def f Float ((x : Float) (n : Integer)) (if (eq n 0) x (f (add (mul x x) (sin x)) (sub n 1))))".into(),
            arg_ty: Type::Tuple(vec![Type::Float, Type::Integer]),
            input: |n| format!("(tuple -0.5 {n})"),
        },
        Family {
            name: "recursive sin",
            program: "(def f Float ((x : Float) (n : Integer)) (if (eq n 0) x (sin (f x (sub n 1)))))".into(),
            arg_ty: Type::Tuple(vec![Type::Float, Type::Integer]),
            input: |n| format!("(tuple 0.5 {n})"),
        },
        Family {
            name: "recursive vector",
            program: "(def f Float ((v : Vec Float) (i : Integer)) (if (eq i 0) 1.0 (let (a (index (sub i 1) v)) (add (mul a (f v (sub i 1))) (sin a)))))".into(),
            arg_ty: Type::Tuple(vec![vf.clone(), Type::Integer]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) {n})"),
        },
        Family {
            name: "tail-recursive loop",
            // A loop as Knossos writes one, reading v (passed on as itself)
            // at a counter of its state: differentiated as a fold, whose
            // backward loop adds each read's cotangent into one vector.
            program: "(def f Float ((i : Integer) (v : Vec Float) (acc : Float)) (if (eq i (size v)) acc (f (add i 1) v (add acc (mul (index i v) (sin (index i v)))))))".into(),
            arg_ty: Type::Tuple(vec![Type::Integer, vf.clone(), Type::Float]),
            input: |n| format!("(tuple 0 (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 0.5)"),
        },
        Family {
            name: "tree recursion",
            program: "(def f Float ((v : Vec Float) (lo : Integer) (hi : Integer)) (if (eq (sub hi lo) 1) (index lo v) (let (mid (div (add lo hi) 2)) (mul (f v lo mid) (cos (f v mid hi))))))".into(),
            arg_ty: Type::Tuple(vec![vf.clone(), Type::Integer, Type::Integer]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 0 {n})"),
        },
    ]
}

/// Recursion inside a loop's lambda whose results the derivative reads:
/// `sin (f ..)` of each of two recursive calls in a `sumbuild`, a `build`
/// whose lambda binds a call's result with a `let` and tests it, and a
/// `map` (taped as the `build` it equals).
pub fn recursion_in_loops() -> Vec<Family> {
    let depth8 = |n: usize| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 8)");
    vec![
        Family {
            name: "recursion in a loop",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (sumbuild 2 (lam (k : Integer) (sin (f (build (size v) (lam (i : Integer) (mul (index i v) (to_float (add k 1))))) (sub n 1)))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
        Family {
            name: "let in a loop",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (sum (build 2 (lam (k : Integer) (let (s (f (build (size v) (lam (i : Integer) (mul (index i v) (to_float (add k 1))))) (sub n 1))) (if (gt s 0.0) (mul s s) (cos s))))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
        Family {
            name: "map in a recursion",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (sum (map (lam (x : Float) (sin (f (build (size v) (lam (i : Integer) (mul (index i v) x))) (sub n 1)))) (build 2 (lam (k : Integer) (to_float (add k 1))))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
        Family {
            // A build over a tuple of sizes whose lambda calls f: taped as
            // nested loops over vectors (checkpointed, [rev f] grew with
            // the depth: 7.1, 11 and 15 times f at 3, 5 and 7).
            name: "recursion in a build grid",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (let (g (build (tuple 2 1) (lam (kj : Tuple Integer Integer) (let ((k j) kj) (sin (f (build (size v) (lam (i : Integer) (mul (index i v) (to_float (add k (add j 1)))))) (sub n 1))))))) (add (index (tuple 0 0) g) (index (tuple 1 0) g)))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
        Family {
            // The same for a sumbuild over a tuple of sizes.
            name: "recursion in a sumbuild grid",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (sumbuild (tuple 1 2) (lam (jl : Tuple Integer Integer) (let ((j l) jl) (mul (index l v) (cos (f (build (size v) (lam (i : Integer) (mul (index i v) (to_float (add l 2))))) (sub n 1)))))))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
        Family {
            // A call in a `$scan`'s step, at depth 8 (checkpointed, [rev f]
            // grew with the depth: 5.5, 7.3, 9.2 times f at 2, 3, 4; the
            // vectors below the top have 2 elements, so n only scales the
            // top).
            name: "recursion in a scan",
            program: "(def f Float ((v : Vec Float) (n : Integer)) (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v)))) (let (accs ($scan (lam (a_x : Tuple Float Float) (let ((a x) a_x) (add (mul a x) (mul 0.1 (sin (f (build 2 (lam (i : Integer) (mul x (index i v)))) (sub n 1))))))) 1.0 (build 2 (lam (i : Integer) (index i v))))) (add (index 2 accs) (sum v)))))".into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: depth8,
        },
    ]
}

/// `f (v, n)`: the sum of `sin v` at `n = 0`, else `body`, which calls f at
/// `n - 1`.
fn recursive(name: &'static str, body: String, input: fn(usize) -> String) -> Family {
    Family {
        name,
        program: format!(
            "(def f Float ((v : Vec Float) (n : Integer))
               (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v))))
                   {body}))"
        ),
        arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
        input,
    }
}

/// Recursive calls in a loop inside a loop (depth 4: 4^4 calls at the
/// bottom), `sumbuild`s or `build`s outside or inside: reverse mode reads
/// them from the tape through the outer loop's index record (2.9 times f);
/// forward mode fuses the loop of values with the loop of tangents, the
/// inner ones too, and reads the values from the tangents' pairs (2.1
/// times f; computing them again was 4.9 to 5.8 times f, growing with the
/// depth).
pub fn loops_in_loops() -> Vec<Family> {
    let family = |name, outer: &str| {
        let call = "(f (build (size v) (lam (i : Integer) (mul (index i v) (to_float (add k j))))) (sub n 1))";
        recursive(name, outer.replace("CALL", call), |n| {
            format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 4)")
        })
    };
    vec![
        family("loop in a loop", "(sumbuild 2 (lam (k : Integer) (sumbuild 2 (lam (j : Integer) (sin CALL)))))"),
        family(
            "build of sumbuilds",
            "(let (w (build 2 (lam (k : Integer) (sumbuild 2 (lam (j : Integer) (sin CALL)))))) (add (index 0 w) (mul 2.0 (index 1 w))))",
        ),
        family(
            "sumbuild of builds",
            "(sumbuild 2 (lam (k : Integer) (let (w (build 2 (lam (j : Integer) CALL))) (mul (index 0 w) (sin (index 1 w))))))",
        ),
    ]
}

/// Recursive calls in a `fold`'s step (depth 7, three steps per level),
/// and builds calling f in a fold's step.
pub fn recursion_in_folds() -> Vec<Family> {
    let mut v = vec![
        Family {
            name: "fold of recursion",
            program: "(def f Float ((v : Vec Float) (n : Integer))
                        (if (eq n 0) (sumbuild (size v) (lam (i : Integer) (sin (index i v))))
                            (fold (lam (acc_k : Tuple Float Float)
                                    (let ((acc k) acc_k)
                                      (add acc (sin (f (build (size v) (lam (i : Integer) (mul (index i v) k))) (sub n 1))))))
                                  0.0 (Vec_init 0.5 1.5 2.0))))"
                .into(),
            arg_ty: Type::Tuple(vec![Type::vec(Type::Float), Type::Integer]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 7)"),
        },
    ];
    v.extend(loops_in_folds());
    v
}

/// A build calling f in a fold's step, alone and in a sumbuild's lambda
/// (depth 3: four and eight calls per level); forward mode fuses the fold
/// of values with the fold of pairs, then the builds in their steps.
fn loops_in_folds() -> Vec<Family> {
    let family = |name, outer: &str| {
        let fold = "(fold (lam (acc_x : Tuple Float Float)
                             (let ((acc x) acc_x)
                               (let (w (build 2 (lam (j : Integer)
                                          (f (build (size v) (lam (i : Integer) (mul (index i v) (add x (to_float (add j k)))))) (sub n 1)))))
                                 (add (mul acc (sin (index 0 w))) (sin (index 1 w))))))
                           (to_float k) (Vec_init 0.5 1.5))";
        recursive(name, outer.replace("FOLD", fold), |n| {
            format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 3)")
        })
    };
    vec![
        family("fold of a loop", "(let (k 1) FOLD)"),
        family("loop, fold, loop", "(sumbuild 2 (lam (k : Integer) FOLD))"),
    ]
}

/// `reduce` and `scan` over monoids of Floats, tuples and pairs (seed
/// 002's examples): log-sum-exp as a `reduce` over (max, sum of exp), the
/// linear recurrence h_t = a_t h_(t-1) + b_t as a `scan` over affine maps,
/// and a product of 2 x 2 matrices (tuples) as a `reduce`. Their
/// derivatives are those of the blocked expansion (`ksc_types::expand`),
/// so the sizes these run at must exceed `REDUCE_BLOCK` (1024) to go
/// through the tree and the carries.
pub fn reductions() -> Vec<Family> {
    let vf = Type::vec(Type::Float);
    let floats = |n: usize| format!("(build {n} (lam (i : Integer) (sin (to_float i))))");
    vec![
        Family {
            name: "reduce: log-sum-exp",
            program: "(def f Float (v : Vec Float)
               (let (ms (reduce (lam (pq : Tuple (Tuple Float Float) (Tuple Float Float))
                                  (let (((m s) (get$1$2 pq)) ((n t) (get$2$2 pq)))
                                    (let (big (max m n))
                                      (tuple big (add (mul s (exp (sub m big))) (mul t (exp (sub n big))))))))
                                (tuple -1e300 0.0)
                                (build (size v) (lam (i : Integer) (tuple (index i v) 1.0)))))
                 (add (get$1$2 ms) (log (get$2$2 ms)))))"
                .into(),
            arg_ty: vf.clone(),
            input: floats,
        },
        Family {
            name: "scan: recurrence",
            program: "(def f Float ((a : Vec Float) (b : Vec Float))
               (let (maps (scan (lam (pq : Tuple (Tuple Float Float) (Tuple Float Float))
                                  (let (((a1 b1) (get$1$2 pq)) ((a2 b2) (get$2$2 pq)))
                                    (tuple (mul a1 a2) (add (mul a2 b1) b2))))
                                (tuple 1.0 0.0)
                                (build (size a) (lam (i : Integer) (tuple (index i a) (index i b))))))
                 (sumbuild (size maps) (lam (i : Integer) (get$2$2 (index i maps))))))"
                .into(),
            arg_ty: Type::Tuple(vec![vf.clone(), vf.clone()]),
            input: |n| {
                format!(
                    "(tuple (build {n} (lam (i : Integer) (mul 0.5 (cos (to_float i))))) (build {n} (lam (i : Integer) (sin (to_float i)))))"
                )
            },
        },
        Family {
            name: "reduce: 2x2 products",
            program: "(def f Float (v : Vec Float)
               (let (p (reduce (lam (xy : Tuple (Tuple Float Float Float Float) (Tuple Float Float Float Float))
                                 (let (((a b c d) (get$1$2 xy)) ((e f g h) (get$2$2 xy)))
                                   (tuple (add (mul a e) (mul b g)) (add (mul a f) (mul b h))
                                          (add (mul c e) (mul d g)) (add (mul c f) (mul d h)))))
                               (tuple 1.0 0.0 0.0 1.0)
                               (build (size v) (lam (i : Integer)
                                 (let (x (index i v)) (tuple (cos x) (mul 0.5 (sin x)) (mul -0.5 (sin x)) (cos x)))))))
                 (let ((a b c d) p) (add (add a b) (add c d)))))"
                .into(),
            arg_ty: vf.clone(),
            input: floats,
        },
        Family {
            // A scan whose accumulators are tensors (2 x 2 rotations as
            // vectors of 4). Its reverse mode was quadratic while
            // derivation read the scan as a `$scan` followed by a `build`
            // dropping its first element (rev/f 95 at 1500 elements and
            // 343 at 6000).
            name: "scan: 2x2 products",
            program: "(def f Float (v : Vec Float)
               (let (ms (scan (lam (pq : Tuple (Vec Float) (Vec Float))
                                (let ((p q) pq)
                                  (build 4 (lam (k : Integer)
                                    (let ((r (mul 2 (div k 2))) (c (sub k (mul 2 (div k 2)))))
                                      (add (mul (index r p) (index c q)) (mul (index (add r 1) p) (index (add 2 c) q))))))))
                              (Vec_init 1.0 0.0 0.0 1.0)
                              (build (size v) (lam (i : Integer)
                                (let (x (index i v)) (Vec_init (cos x) (sin x) (neg (sin x)) (cos x)))))))
                 (sumbuild (size ms) (lam (i : Integer) (index 0 (index i ms))))))"
                .into(),
            arg_ty: vf,
            input: floats,
        },
    ]
}

/// The sizes [`reductions`] run at: 2 and 6 blocks of `REDUCE_BLOCK`,
/// short last blocks.
pub const REDUCTION_SIZES: [usize; 2] = [1500, 6000];

/// A recurrent network (`ksc-examples/ad/recurrent.ks`: a fold over n time
/// steps whose step folds over three layers, each a call computing gates
/// with `exp` and `tanh`, ADBench's LSTM in small).
pub fn recurrent_network() -> Family {
    let vf = Type::vec(Type::Float);
    Family {
        name: "recurrent network",
        program: concat!(
            include_str!("../../../../ksc-examples/ad/recurrent.ks"),
            "(def f Float ((ws : Vec (Vec Float)) (xs : Vec (Vec Float))) (recurrent ws xs))"
        )
        .into(),
        arg_ty: Type::Tuple(vec![Type::vec(vf.clone()), Type::vec(vf)]),
        input: |n| {
            format!(
                "(tuple (build 3 (lam (l : Integer) (build 4 (lam (j : Integer) (mul 0.1 (to_float (sub j l)))))))
                        (build {n} (lam (t : Integer) (build 4 (lam (j : Integer) (sin (to_float (add t j))))))))"
            )
        },
    }
}

/// Loops whose reverse mode adds one-hot cotangents of vectors they read
/// (`a` and `b`, at the loop's index): one family per kind of loop,
/// `$scan`, `fold`, `sumbuild`, `build`, and recursion: a chain, and trees
/// (one with its calls in a loop).
pub fn captured_reads() -> Vec<Family> {
    let vf = Type::vec(Type::Float);
    let two = Type::Tuple(vec![vf.clone(), vf.clone()]);
    let input = |n: usize| {
        format!("(tuple (build {n} (lam (i : Integer) (div 1.0 (to_float (add i 1))))) (build {n} (lam (i : Integer) 0.5)))")
    };
    [
        (
            "$scan",
            "(def f Float ((a : Vec Float) (b : Vec Float))
               (let (s ($scan (lam (acc_i : Tuple (Tuple Float Float) Integer)
                                 (let ((pq i) acc_i) (let ((p q) pq)
                                   (tuple (mul p (index i a)) (add (mul (index i a) q) (index i b))))))
                               (tuple 1.0 0.0) (build (size a) (lam (i : Integer) i))))
                 (sumbuild (size s) (lam (j : Integer) (get$2$2 (index j s))))))",
        ),
        (
            "fold",
            "(def f Float ((a : Vec Float) (b : Vec Float))
               (fold (lam (acc_i : Tuple Float Integer)
                       (let ((acc i) acc_i) (add (mul acc (index i a)) (index (sub (sub (size b) 1) i) b))))
                     0.0 (build (size a) (lam (i : Integer) i))))",
        ),
        (
            "sumbuild",
            "(def f Float ((a : Vec Float) (b : Vec Float))
               (sumbuild (size a) (lam (i : Integer) (mul (index i a) (index (div i 2) b)))))",
        ),
        (
            "build",
            "(def f Float ((a : Vec Float) (b : Vec Float))
               (let (c (build (size a) (lam (i : Integer) (mul (sin (index i a)) (index (div i 2) b)))))
                 (sumbuild (size c) (lam (i : Integer) (mul (index i c) (index i c))))))",
        ),
        (
            "recursion",
            "(def g Float ((a : Vec Float) (b : Vec Float) (i : Integer))
               (if (eq i 0) 0.0 (add (mul (index (sub i 1) a) (g a b (sub i 1))) (index (sub i 1) b))))
             (def f Float ((a : Vec Float) (b : Vec Float)) (g a b (size a)))",
        ),
        (
            // Tree recursion passing both vectors on (each call's reverse
            // pass adds into the accumulator its caller gives it).
            "tree",
            "(def g Float ((a : Vec Float) (b : Vec Float) (lo : Integer) (hi : Integer))
               (if (lte (sub hi lo) 1) (mul (index lo a) (index lo b))
                 (let (mid (div (add lo hi) 2)) (add (mul (index lo a) (g a b lo mid)) (sin (g a b mid hi))))))
             (def f Float ((a : Vec Float) (b : Vec Float)) (g a b 0 (size a)))",
        ),
        (
            // The leaves read their range in a loop.
            "tree of loops",
            "(def g Float ((a : Vec Float) (b : Vec Float) (lo : Integer) (hi : Integer))
               (if (lt (sub hi lo) 4)
                 (sumbuild (sub hi lo) (lam (i : Integer) (mul (sin (index (add lo i) a)) (index (add lo i) b))))
                 (let (mid (div (add lo hi) 2)) (mul (g a b lo mid) (cos (g a b mid hi))))))
             (def f Float ((a : Vec Float) (b : Vec Float)) (g a b 0 (size a)))",
        ),
        (
            // The recursive calls in a loop's lambda (their reverse passes
            // add into one accumulator threaded through the iterations).
            "tree in a loop",
            "(def g Float ((a : Vec Float) (b : Vec Float) (lo : Integer) (hi : Integer))
               (if (eq (sub hi lo) 1) (mul (index lo a) (index lo b))
                 (let (mid (div (add lo hi) 2))
                   (sumbuild 2 (lam (k : Integer) (sin (g a b (if (eq k 0) lo mid) (if (eq k 0) mid hi))))))))
             (def f Float ((a : Vec Float) (b : Vec Float)) (g a b 0 (size a)))",
        ),
    ]
    .into_iter()
    .map(|(name, program)| Family { name, program: program.into(), arg_ty: two.clone(), input })
    .collect()
}

/// Families whose reverse mode is known to do quadratic work, in the
/// interpreter (`.1`) and in native code (`.2`). The tests
/// assert that listed families are still quadratic, so that fixing one
/// fails them until it is removed from here and held to the bounds.
/// (Tree recursion was quadratic in native code, each call's reverse pass
/// returning its cotangent of the vector it reads as a dense vector, each
/// leaf's one-hot made dense, until the reverse passes of recursive calls
/// were given the cotangent to add into, `[sufrevacc f]`. A chain of calls
/// reading `a[i]` and `b[i]`, the family "recursion", was quadratic in both
/// until the level above added its one-hot into the vector the level below
/// returned, in place. "tree in a loop", whose calls are in a loop's lambda
/// (`sumbuild 2 (lam k (g a b ..))`), was quadratic in native code, the
/// loop summing its calls' cotangents, each a dense vector, until reverse
/// mode threaded the accumulator through the loop's iterations, a `fold`
/// handing it to each call's `[sufrevacc g]`; its native forward mode grew
/// as n log n, each level computing its subtree's values again beside
/// `[fwdt g]`'s, until CSE read them from the `if`'s (value, tangent) pairs.)
/// "scan: recurrence" of [`reductions`] was super-linear in native code's
/// reverse mode (4.82 times the work at 4n, rev/f 5.04 at n = 1500 and 6.08
/// at 6000): the blocked scan's flat step reads its block's carry under an
/// `if`, and the backward `$scanSum`'s term for the carries was, in the
/// other branch, their zero cotangent, a vector of m + 1 pairs made once,
/// which the loop IR added element by element at each of the n steps,
/// until it skipped adding tensors of tuples of numbers known to be zeros
/// (now rev/f 4.25 and 4.21); the interpreter added it too (3.96 and
/// 4.19) until a `constVec` of a numeric zero became sparse (3.77, 3.79).
pub const KNOWN_QUADRATIC: &[(&str, bool, bool)] = &[];

/// Is the family's reverse mode known to be quadratic in this backend?
pub fn known_quadratic(name: &str, native: bool) -> bool {
    KNOWN_QUADRATIC.iter().any(|&(n, interp, nat)| n == name && if native { nat } else { interp })
}
