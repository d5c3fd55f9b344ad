//! The cheap-gradient bound, measured deterministically with the
//! interpreter's operation count: for scaling families of programs at n and
//! 4n, `ops([rev f]) <= 5 ops(f) + c` and `ops([fwd f]) <= 3 ops(f) + c`.

use ksc_eval::{Interpreter, Value};
use ksc_ir::{Derivation, FunName, Type};

/// Operation counts of f (the program's function `f`), [fwd f] and [rev f]
/// on the input `input(n)`.
fn costs(program: &str, arg_ty: Type, input: &str) -> (u64, u64, u64) {
    let f = "f";
    let text =
        format!("{program}\n(gdef fwd [{f} {arg_ty}])\n(gdef rev [{f} {arg_ty}])\n(def input {arg_ty} () {input})\n");
    let mut analysis = ksc_types::analyze(&text);
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let requests: Vec<FunName> = analysis.gdef_requests().into_iter().map(|(n, _)| n).collect();
    let mut derived = ksc_ad::derive_requested(&analysis.defs(), &requests);
    assert!(derived.errors.is_empty(), "{:?}", derived.errors);
    ksc_ad::optimise(&mut derived.defs, &analysis.defs(), &[]);
    analysis.derived = derived.defs;
    let defs = analysis.defs();
    let mut interp = Interpreter::new(defs.iter().copied());
    let mut sink = std::io::sink();
    let x = interp.call(&FunName::typed("input", Type::unit()), Value::unit(), &mut sink).unwrap();
    let fname = FunName::typed(f, arg_ty.clone());
    let mut measure = |name: &FunName, arg: Value| {
        let before = interp.operations();
        interp.call(name, arg, &mut sink).unwrap_or_else(|e| panic!("{name}: {}", e.message));
        interp.operations() - before
    };
    let y = {
        let mut i2 = Interpreter::new(defs.iter().copied());
        i2.call(&fname, x.clone(), &mut std::io::sink()).unwrap()
    };
    let primal = measure(&fname, x.clone());
    let dx = zero_like_tangent(&x);
    let dr = zero_like_tangent(&y);
    let fwd = measure(&fname.derived(Derivation::Fwd), Value::Tuple(vec![x.clone(), dx].into()));
    let rev = measure(&fname.derived(Derivation::Rev), Value::Tuple(vec![x, dr].into()));
    (primal, fwd, rev)
}

fn zero_like_tangent(v: &Value) -> Value {
    match v {
        Value::Float(_) => Value::Float(1.0),
        Value::Tuple(xs) => Value::Tuple(xs.iter().map(zero_like_tangent).collect()),
        Value::Tensor(t) => Value::Tensor(std::rc::Rc::new(ksc_eval::Tensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(zero_like_tangent).collect(),
        })),
        _ => Value::unit(),
    }
}

struct Family {
    name: &'static str,
    program: String,
    arg_ty: Type,
    input: fn(usize) -> String,
}

/// A chain of `levels` functions, each a loop over the result of the one
/// below (`g1` over the argument), and `f`, the sum over the last.
fn call_chain(levels: usize) -> String {
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

fn families() -> Vec<Family> {
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
                include_str!("../../../ksc-examples/ad/gmm.ks"),
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
            name: "tree recursion",
            program: "(def f Float ((v : Vec Float) (lo : Integer) (hi : Integer)) (if (eq (sub hi lo) 1) (index lo v) (let (mid (div (add lo hi) 2)) (mul (f v lo mid) (cos (f v mid hi))))))".into(),
            arg_ty: Type::Tuple(vec![vf.clone(), Type::Integer, Type::Integer]),
            input: |n| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 0 {n})"),
        },
    ]
}

/// The additive constant allowed on top of the factor.
const C: u64 = 200;

/// Asserts both bounds for every family at n and 4n (the table is printed).
fn check(families: impl Iterator<Item = Family>) {
    let mut failures = Vec::new();
    for fam in families {
        for n in [50usize, 200] {
            let (p, f, r) = costs(&fam.program, fam.arg_ty.clone(), &(fam.input)(n));
            println!(
                "{:<18} n={n:<5} f={p:<8} fwd={f:<8} rev={r:<8} fwd/f={:.2} rev/f={:.2}",
                fam.name,
                f as f64 / p as f64,
                r as f64 / p as f64
            );
            if f > 3 * p + C || r > 5 * p + C {
                failures.push(format!("{} at n = {n}: f {p}, fwd {f}, rev {r}", fam.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The bound holds for every family: loops (gathers, mat-vec, mat-mat, the
/// GMM objective, a fold), a chain of eight calls, and recursion (linear,
/// non-linear, over a vector, tree-shaped). Forward mode takes a call's
/// value and tangent from one `[fwdt f]`, and a loop's primal values from
/// the loop of their tangents; reverse mode inlines a callee's primal and
/// reverse pass together (so a chain's levels are not recomputed), reads
/// recursive calls' results from a tape and a fold's accumulators from a
/// `$scan`. Run with `--nocapture` to see the table.
///
/// The count includes loads (see `Interpreter::operations`): without them
/// no forward mode could meet the bound on the fold of products, whose
/// primal is one multiplication per element and whose tangent needs three.
#[test]
fn derivatives_cost_a_small_constant_times_the_function() {
    check(families().into_iter());
}

/// Recursion inside a loop's lambda whose results the derivative reads:
/// `sin (f ..)` of each of two recursive calls in a `sumbuild`, a `build`
/// whose lambda binds a call's result with a `let` and tests it, and a
/// `map` (taped as the `build` it equals).
/// The forward pass runs such a loop as a fold threading the tape and
/// records each iteration's call; the reverse pass reads the record of the
/// iteration it is at, so no level computes its subtrees' values again
/// (before, such functions kept the checkpointing passes: reverse mode
/// 4.5 times f at depth 4 and 8.3 at depth 8).
#[test]
fn recursion_inside_a_loop_costs_a_small_constant_times_the_function() {
    let depth8 = |n: usize| format!("(tuple (build {n} (lam (i : Integer) (div (to_float i) {n}.0))) 8)");
    check(
        [
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
        ]
        .into_iter(),
    );
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
fn loops_in_loops() -> Vec<Family> {
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

#[test]
fn recursion_in_nested_loops_costs_a_small_constant_times_the_function() {
    check(loops_in_loops().into_iter());
}

/// Recursive calls in a `fold`'s step (depth 7, three steps per level):
/// the forward pass threads the tape through the fold and records each
/// iteration's call; reverse mode's copies of the step (the stored
/// accumulators and the backward loop) count their iterations and read
/// them (3.4 times f; checkpointing them was 5.5 times f at depth 4 and 8.5
/// at depth 7, growing with the depth). Forward mode folds over the
/// elements alone: their tangents, a known zero, move into the step, where
/// they annihilate what they scale (2.2 times f; 3.1 before).
#[test]
fn recursion_in_a_folds_step_costs_a_small_constant_times_the_function() {
    check([Family {
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
    }]
    .into_iter()
    .chain(loops_in_folds()));
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

/// A recurrent network (`ksc-examples/ad/recurrent.ks`: a fold over n time
/// steps whose step folds over three layers, each a call computing gates
/// with `exp` and `tanh`, ADBench's LSTM in small).
fn recurrent_network() -> Family {
    let vf = Type::vec(Type::Float);
    Family {
        name: "recurrent network",
        program: concat!(
            include_str!("../../../ksc-examples/ad/recurrent.ks"),
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

/// Forward mode of the recurrent network computes each step's values once,
/// with their tangents: one fold carrying values and tangents, reading the
/// layers' values and tangents from one `[fwdt layer]` (2.9 times f).
/// Reverse mode computes every step's gates once (the backward pass reads
/// them from the forward pass's scan) and is linear in n: a step's inner
/// fold reads its row of the input before it, and the time steps' fold,
/// whose step uses its index only to read that row, runs over the input's
/// rows, so each step's cotangent of the input is its row (`hoist.rs`; 3.3
/// times f at n = 50 and 200).
#[test]
fn recurrent_network_costs_a_small_constant_times_the_function() {
    check(std::iter::once(recurrent_network()));
}
