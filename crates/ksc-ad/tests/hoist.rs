//! `hoist::fold_reads`: a fold's invariant reads move before it, and a fold
//! over indices that only reads a vector runs over the vector.

use ksc_ad::hoist::fold_reads;
use ksc_eval::{Interpreter, Value};
use ksc_ir::{print::print_def, FunName};

/// The rows the inner fold reads unconditionally move before it, the
/// one read in a branch does not, and the function computes the same,
/// also where the inner fold runs no step and the read row would not
/// exist.
#[test]
fn a_folds_invariant_reads_move_before_it_guarded_by_its_emptiness() {
    let text = "(def f Float ((xs : Vec (Vec Float)) (ws : Vec Float) (k : Integer))
          (fold (lam (a_t : Tuple Float Integer)
                  (let ((a t) a_t)
                    (fold (lam (b_w : Tuple Float Float)
                            (let ((b w) b_w)
                              (add (mul b (index 0 (index (add t k) xs)))
                                   (if (gt w 0.0) (index k ws) w))))
                          a (build (sub (size ws) 1) (lam (i : Integer) (index i ws))))))
                1.0 (build (size xs) (lam (t : Integer) t))))";
    let analysis = ksc_types::analyze(text);
    assert!(!analysis.has_errors(), "{:?}", analysis.diagnostics);
    let defs = analysis.defs();
    let f = defs.iter().find(|d| d.name.base == "f").expect("f");
    let hoisted = fold_reads(f).expect("a read to move");
    let printed = print_def(&hoisted).split_whitespace().collect::<Vec<_>>().join(" ");
    // The whole read, `index 0 (index t xs)`, moves; `index k ws` in a
    // branch stays.
    assert!(
        printed.contains(
            "(if (eq (size ksc$w2) 0) ($dummy Float) (index 0 (index ([add (Tuple Integer Integer)] t k) xs)))"
        ),
        "{printed}"
    );
    assert!(printed.contains("w 0.0) (index k ws) w)"), "the read in a branch moved: {printed}");
    let run = |d: &ksc_ir::Def, ws: Vec<f64>, k: i64| {
        let mut interp = Interpreter::new([d]);
        let row = Value::vector(vec![Value::Float(2.0), Value::Float(3.0)]);
        let xs = Value::vector(vec![row.clone(), row]);
        let arg = Value::tuple(vec![xs, Value::vector(ws.into_iter().map(Value::Float).collect()), Value::Integer(k)]);
        interp
            .call(&FunName::typed("f", d.arg_ty()), arg, &mut std::io::sink())
            .map(|v| v.to_string())
            .map_err(|e| e.message)
    };
    // Steps that run, and none (where row 5 does not exist).
    for (ws, k) in [(vec![0.5, -1.0, 2.0], 0), (vec![0.5], 5)] {
        assert_eq!(run(f, ws.clone(), k), run(&hoisted, ws.clone(), k));
        assert!(run(f, ws, k).is_ok());
    }
    assert!(run(f, vec![0.5, 1.0], 5).is_err() && run(&hoisted, vec![0.5, 1.0], 5).is_err());
}

/// A fold over `build (size xs) (lam t t)` that uses its element only
/// to read `xs` (under the names the step gives its element: a tuple
/// pattern, `get$2$2`) becomes a fold over `xs`, and computes the same;
/// folds that use the element or `xs` otherwise (`t` as a number, `xs`
/// at `t + 1`, its size, with `t` bound again, the parameter passed
/// whole or taken apart below the first lets, over a shorter range)
/// are left as they are.
#[test]
fn folds_over_indices_that_only_read_a_vector_run_over_the_vector() {
    let fold = |step: &str, range: &str| {
        format!(
            "(def first Float (p : Tuple Float Integer) (get$1$2 p))
                 (def f Float ((xs : Vec (Vec Float)) (k : Integer))
                   (fold (lam (a_t : Tuple Float Integer) {step}) 1.0 (build {range} (lam (t : Integer) t))))"
        )
    };
    let carried = [
        "(let ((a t) a_t) (add (mul a 0.5) (if (gt a 0.0) (index 0 (index t xs)) (index 1 (index t xs)))))",
        "(let (u (get$2$2 a_t)) (add (get$1$2 a_t) (sumbuild 2 (lam (j : Integer) (index j (index u xs))))))",
        "(mul (get$1$2 a_t) (index 1 (index (get$2$2 a_t) xs)))",
    ];
    let kept = [
        "(let ((a t) a_t) (add (to_float t) (index 0 (index t xs))))",
        "(let ((a t) a_t) (add a (index 0 (index (if (lt t 2) (add t 1) t) xs))))",
        "(let ((a t) a_t) (add a (to_float (size xs))))",
        "(let ((a t) a_t) (let (t k) (add a (index 0 (index t xs)))))",
        "(let ((a t) a_t) (add (first a_t) (index 0 (index t xs))))",
        "(let ((a t) a_t) (add a (let ((b u) a_t) (index 0 (index u xs)))))",
    ];
    let run = |d: &ksc_ir::Def, k: i64| {
        let mut interp = Interpreter::new([d]);
        let row = |x: f64| Value::vector(vec![Value::Float(x), Value::Float(-x)]);
        let xs = Value::vector(vec![row(2.0), row(-3.0), row(0.5)]);
        let arg = Value::tuple(vec![xs, Value::Integer(k)]);
        interp
            .call(&FunName::typed("f", d.arg_ty()), arg, &mut std::io::sink())
            .map(|v| v.to_string())
            .map_err(|e| e.message)
    };
    let cases = carried.iter().map(|s| (s, "(size xs)", true)).chain(kept.iter().map(|s| (s, "(size xs)", false)));
    for (step, range, moved) in cases.chain([(&carried[0], "(sub (size xs) 1)", false)]) {
        let text = fold(step, range);
        let analysis = ksc_types::analyze(&text);
        assert!(!analysis.has_errors(), "{step}: {:?}", analysis.diagnostics);
        let defs = analysis.defs();
        let f = defs.iter().find(|d| d.name.base == "f").expect("f");
        let Some(rewritten) = fold_reads(f) else {
            assert!(!moved, "{step}: left as it is");
            continue;
        };
        let printed = print_def(&rewritten).split_whitespace().collect::<Vec<_>>().join(" ");
        // Over xs, which the step no longer reads.
        assert_eq!(printed.ends_with(" 1.0 xs))"), moved, "{step} over {range}: {printed}");
        assert_eq!(printed.matches(" xs)").count() == 1, moved, "{step}: xs read in the step: {printed}");
        for k in [0, 2] {
            assert_eq!(run(f, k), run(&rewritten, k), "{step}");
            assert!(run(f, k).is_ok(), "{step}");
        }
    }
}
