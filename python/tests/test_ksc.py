"""The Python package: compiling, calling, derivatives, errors.

Run by `cargo test -p ksc-python` (tests/pytest.rs), which builds the
native module, puts it in the package and runs pytest in a virtual
environment with NumPy.
"""

import json
import math
import os
import threading

import numpy as np
import pytest

import ksc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = """
(def f Float ((x : Float) (y : Float)) (mul x (sin y)))

(def scale (Vec Float) ((a : Float) (v : Vec Float))
  (build (size v) (lam (i : Integer) (mul a (index i v)))))

(def rowsums (Vec Float) (m : Vec (Vec Float))
  (build (size m) (lam (i : Integer) (sum (index i m)))))

(def outer (Vec (Vec Float)) ((u : Vec Float) (v : Vec Float))
  (build (size u) (lam (i : Integer) (build (size v) (lam (j : Integer) (mul (index i u) (index j v)))))))

(def grid (Tensor 2 Float) ((n : Integer) (m : Integer))
  (build (tuple n m) (lam (ij : Tuple Integer Integer)
    (let ((i j) ij) (to_float (add (mul 10 i) j))))))

(def trace2 Float (t : Tensor 2 Float)
  (let ((n m) (size t)) (sumbuild n (lam (i : Integer) (index (tuple i i) t)))))

(def firstmax (Tuple Float Float) (v : Vec Float) (tuple (index 0 v) (max v)))

(def pairs (Vec (Tuple Integer Float)) (v : Vec Float)
  (build (size v) (lam (i : Integer) (tuple i (index i v)))))

(def firsts (Vec Integer) (ps : Vec (Tuple Integer Float))
  (build (size ps) (lam (i : Integer) (get$1$2 (index i ps)))))

(def at Float ((i : Integer) (v : Vec Float)) (index i v))

(def twice Float (x : Float) (mul 2.0 x))
(def twice Integer (x : Integer) (mul 2 x))

(def positive Bool (x : Float) (gt x 0.0))

(def greet String (n : Integer) (if (gt n 1) "many" "one"))

(def lse Float (v : Vec Float)
  (let (mx (max v))
    (add mx (log (sumbuild (size v) (lam (i : Integer) (exp (sub (index i v) mx))))))))

(def poly (Vec Float) ((a : Float) (v : Vec Float))
  (build (size v) (lam (i : Integer) (let (x (index i v)) (add (mul a (mul x x)) (sin x))))))

(def same (Vec Float) (v : Vec Float) v)

(def both (Tuple (Vec Float) (Vec Float) Float (Vec Float)) (v : Vec Float)
  (let (w (build (size v) (lam (i : Integer) (add 1.0 (index i v)))))
    (tuple w w (index 0 v) v)))

(gdef rev [lse (Vec Float)])
"""


@pytest.fixture(scope="module")
def m():
    return ksc.loads(SOURCE, name="test.ks")


def test_scalars(m):
    assert m.f(2.0, 0.5) == 2.0 * math.sin(0.5)
    # An int converts to a Float parameter.
    assert m.f(2, 0.5) == 2.0 * math.sin(0.5)
    assert m.positive(1.5) is True
    assert m.greet(3) == "many"


def test_vectors_in_and_out(m):
    v = np.array([1.0, 2.0, 3.0])
    out = m.scale(2.0, v)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, [2.0, 4.0, 6.0])
    # Other layouts and dtypes convert: a strided view, ints, a list.
    np.testing.assert_array_equal(m.scale(1.0, np.arange(6.0)[::2]), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(m.scale(1.0, np.arange(3)), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(m.scale(1.0, [1, 2]), [1.0, 2.0])
    assert m.scale(1.0, np.zeros(0)).shape == (0,)


def test_nested_vectors_and_tensors(m):
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(m.rowsums(a), [3.0, 12.0])
    # Ragged rows, as a list of arrays.
    np.testing.assert_array_equal(m.rowsums([np.ones(2), np.ones(5)]), [2.0, 5.0])
    o = m.outer(np.array([1.0, 2.0]), np.array([1.0, 10.0, 100.0]))
    assert o.shape == (2, 3)
    np.testing.assert_array_equal(o, [[1, 10, 100], [2, 20, 200]])
    g = m.grid(2, 3)
    assert g.shape == (2, 3)
    np.testing.assert_array_equal(g, [[0, 1, 2], [10, 11, 12]])
    assert m.trace2(np.arange(9.0).reshape(3, 3)) == 12.0


def test_tuples(m):
    assert m.firstmax(np.array([-1.0, 3.0, 2.0])) == (-1.0, 3.0)
    ps = m.pairs(np.array([0.5, 1.5]))
    assert ps == [(0, 0.5), (1, 1.5)]
    np.testing.assert_array_equal(m.firsts([(7, 0.0), (9, 1.0)]), [7, 9])


def test_overloads(m):
    assert m.twice(2) == 4 and isinstance(m.twice(2), int)
    assert m.twice(2.5) == 5.0
    assert m["[twice Integer]"](3) == 6
    with pytest.raises(TypeError, match="no definition of `twice`"):
        m.twice("x")


def test_type_errors_name_the_parameter(m):
    with pytest.raises(TypeError, match=r"argument `v` of scale \(Vec Float\)"):
        m.scale(1.0, np.ones((2, 2)))
    with pytest.raises(TypeError, match=r"argument `y` of f \(Float\)"):
        m.f(1.0, "no")
    with pytest.raises(TypeError, match=r"argument `i` of at \(Integer\)"):
        m.at(1.5, np.ones(3))
    with pytest.raises(TypeError, match=r"argument `ps\[1\]\[0\]`"):
        m.firsts([(1, 0.0), (1.5, 0.0)])
    with pytest.raises(TypeError, match="takes 2 argument"):
        m.f(1.0)


def test_runtime_errors_raise_and_the_process_goes_on(m):
    with pytest.raises(ksc.KscRuntimeError) as e:
        m.at(5, np.ones(3))
    assert "index" in str(e.value) and "test.ks:" in str(e.value)
    assert e.value.code == 1
    # The module still works.
    assert m.at(2, np.array([1.0, 2.0, 3.0])) == 3.0


def test_compile_errors_are_located():
    with pytest.raises(ksc.CompileError) as e:
        ksc.loads("(def f Float (x : Float)\n  (add x \"one\"))\n", name="bad.ks")
    message = str(e.value)
    assert "bad.ks:2:" in message and "^" in message


def test_derived_functions_by_name(m):
    rev = m["[rev lse]"]
    assert rev is m["[rev [lse (Vec Float)]]"]
    v = np.array([0.5, 1.0, 2.0])
    soft = np.exp(v) / np.exp(v).sum()
    np.testing.assert_allclose(rev(v, 1.0), soft, rtol=1e-12)


def central_difference(fn, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (fn(x + e) - fn(x - e)) / (2 * h)
    return g


def test_gradients_match_finite_differences(m):
    rng = np.random.default_rng(1)
    v = rng.normal(size=7)
    g = m.grad("lse")(v)
    np.testing.assert_allclose(g, central_difference(m.lse, v), rtol=1e-6, atol=1e-8)
    # A gradient of several arguments, compiled on first use.
    gx, gy = m.grad(m.f)(1.5, 0.3)
    assert abs(gx - math.sin(0.3)) < 1e-12 and abs(gy - 1.5 * math.cos(0.3)) < 1e-12


def test_forward_and_reverse_agree(m):
    """The dot-product test: <dr, J dx> = <J^T dr, dx>."""
    rng = np.random.default_rng(2)
    a, v = 0.7, rng.normal(size=5)
    da, dv = 0.3, rng.normal(size=5)
    dr = rng.normal(size=5)
    jdx = m.jvp("poly")((a, v), (da, dv))
    ga, gv = m.vjp("poly")((a, v), dr)
    assert abs(np.dot(dr, jdx) - (ga * da + np.dot(gv, dv))) < 1e-10


def test_jacobian(m):
    rng = np.random.default_rng(3)
    v = rng.normal(size=4)
    j = m.jacobian("lse")(v)
    assert j.shape == (1, 4)
    np.testing.assert_allclose(j[0], central_difference(m.lse, v), rtol=1e-6, atol=1e-8)


def test_sparse_jacobian(m):
    rng = np.random.default_rng(4)
    a, v = 0.5, rng.normal(size=6)
    dense = m.jacobian("poly")(a, v)
    sparse = m.jacobian("poly", sparse=True)(a, v)
    if isinstance(sparse, tuple):
        (rows, cols), offsets, columns, values = sparse
        rebuilt = np.zeros((rows, cols))
        for r in range(rows):
            for k in range(offsets[r], offsets[r + 1]):
                rebuilt[r, columns[k]] = values[k]
    else:
        rebuilt = sparse.toarray()
    np.testing.assert_allclose(rebuilt, dense, rtol=1e-12)


def test_reload_after_an_edit(tmp_path):
    path = tmp_path / "edit.ks"
    path.write_text("(def f Float (x : Float) (mul x 2.0))\n")
    m = ksc.load(path)
    assert m.f(3.0) == 6.0
    path.write_text("(def f Float (x : Float) (mul x 3.0))\n")
    m.reload()
    assert m.f(3.0) == 9.0
    # An edit with errors raises and keeps the module as it was.
    path.write_text("(def f Float (x : Float) (mul x \"three\"))\n")
    with pytest.raises(ksc.CompileError):
        m.reload()
    assert m.f(3.0) == 9.0


def test_an_example_file():
    m = ksc.load(os.path.join(ROOT, "ksc-examples", "adbench", "lse.ks"))
    x = m.lse_data(100)
    assert x.shape == (100,)
    g = m.lse_gradient(x)
    np.testing.assert_allclose(g, m["[rev lse_objective]"](x, 1.0), rtol=0, atol=0)
    np.testing.assert_allclose(g.sum(), 1.0, rtol=1e-12)


def test_reassociated_sums_agree_within_rounding(m):
    # `reassociate=True` (ksc build --reassociate): the sums and maxima of
    # loops over data in any order, vectorised; the results within
    # rounding of the ordered ones.
    r = ksc.loads(SOURCE, name="test.ks", reassociate=True)
    v = np.sin(np.arange(100000.0))
    for f in ("lse", "firstmax", "trace2"):
        arg = np.outer(v[:300], v[:300]) if f == "trace2" else v
        np.testing.assert_allclose(r[f](arg), m[f](arg), rtol=1e-12)
    np.testing.assert_allclose(r.grad("lse")(v), m.grad("lse")(v), rtol=1e-12)


def test_large_results(m):
    # A result of 8 MB is not copied out of the arena: it keeps the arena
    # while it lives. Each stays intact while others are made, and the
    # arenas are reused once the results are gone.
    n = 10**6
    v = np.arange(float(n))
    kept = [m.scale(float(k), v) for k in range(6)]
    for k, r in enumerate(kept):
        assert r.shape == (n,) and r.dtype == np.float64 and r.flags.writeable
        assert r[7] == 7.0 * k and r[-1] == (n - 1) * k
    kept[0][:] = -1.0
    np.testing.assert_array_equal(kept[1][:3], [0.0, 1.0, 2.0])
    library = m.scale._library
    held = len(library.arenas)
    assert held >= 6
    del kept, r
    for k in range(20):
        assert m.scale(2.0, v)[n - 1] == 2.0 * (n - 1)
    # The arenas the results held are idle (at most IDLE_MAX kept), not new.
    assert len(library.arenas) <= held and len(library.idle) <= library.IDLE_MAX
    # An argument returned as the result is copied, never the argument's
    # memory; a vector that appears twice in a tuple is two arrays.
    s = m.same(v)
    assert not np.shares_memory(s, v)
    np.testing.assert_array_equal(s, v)
    w1, w2, first, back = m.both(v)
    assert first == 0.0 and w1[5] == 6.0
    assert not np.shares_memory(w1, w2) and not np.shares_memory(back, v)
    w1[5] = 0.0
    assert w2[5] == 6.0
    np.testing.assert_array_equal(back, v)


def test_calls_from_several_threads(m):
    v = np.arange(1000.0)
    expected = m.lse(v)
    results = []

    def work():
        for _ in range(50):
            results.append(m.lse(v))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 200


def test_the_gmm_fitting_example():
    """ksc-examples/python/gmm_fit.py: SciPy's L-BFGS with ksc's gradient
    raises the log-likelihood and finds the three centres."""
    pytest.importorskip("scipy", reason="SciPy is not installed")
    import subprocess
    import sys

    script = os.path.join(ROOT, "ksc-examples", "python", "gmm_fit.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True).stdout
    lines = dict(line.split(":", 1) for line in out.splitlines())
    before = float(lines["log-likelihood before"])
    after = float(lines["log-likelihood after"].split()[0])
    assert after > before + 100, out
    means = np.array(json.loads(lines["means"]))
    np.testing.assert_allclose(means, [[-4.0, -2.0], [0.0, 0.0], [4.0, 4.0]], atol=0.3)


def test_compiling_from_several_threads():
    """Derivatives compiled on first use from two threads at once (the
    compiler runs without the GIL; the session lets one thread in at a
    time): both finish, with the right values."""
    m = ksc.loads(SOURCE, name="threads.ks")
    results = {}

    def work(name, args):
        results[name] = m.grad(name)(*args)

    threads = [
        threading.Thread(target=work, args=("f", (1.5, 0.3))),
        threading.Thread(target=work, args=("lse", (np.array([0.0, 1.0]),))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive(), "a compilation did not finish"
    assert abs(results["f"][0] - math.sin(0.3)) < 1e-12
    np.testing.assert_allclose(results["lse"], np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum(), rtol=1e-12)


def test_bools_strings_integer_tensors_units_and_empty_rows():
    m = ksc.loads(
        """
(def flags (Vec Bool) (v : Vec Float) (build (size v) (lam (i : Integer) (gt (index i v) 0.0))))
(def count Integer (b : Vec Bool) (sumbuild (size b) (lam (i : Integer) (if (index i b) 1 0))))
(def names (Vec String) (n : Integer) (build n (lam (i : Integer) (if (eq i 0) "zero" "more"))))
(def ints (Tensor 2 Integer) (n : Integer)
  (build (tuple n 2) (lam (ij : Tuple Integer Integer) (let ((i j) ij) (add i j)))))
(def empty_rows (Vec (Vec Float)) (n : Integer) (build n (lam (i : Integer) (build 0 (lam (j : Integer) 1.0)))))
(def unit_fn (Tuple) (x : Float) (tuple))
(def pairsum Float (p : Tuple Float (Vec Float)) (let ((a v) p) (add a (sum v))))
""",
        name="edge.ks",
    )
    flags = m.flags(np.array([1.0, -1.0, 2.0]))
    assert flags.dtype == np.bool_ and flags.tolist() == [True, False, True]
    assert m.count(flags) == 2 and m.count([True, False]) == 1
    with pytest.raises(TypeError, match=r"argument `b` of count"):
        m.count(np.array([1.0, 0.0]))
    assert m.names(3) == ["zero", "more", "more"]
    ints = m.ints(3)
    assert ints.dtype == np.int64 and ints.tolist() == [[0, 1], [1, 2], [2, 3]]
    assert m.empty_rows(2).shape == (2, 0)
    assert m.unit_fn(1.0) == ()
    assert m.pairsum((1.0, np.array([1.0, 2.0]))) == 4.0
    with pytest.raises(TypeError, match=r"argument `p\[1\]` of pairsum"):
        m.pairsum((1.0, "no"))
