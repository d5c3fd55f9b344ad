"""What a call of a compiled function costs from Python (issue 39): the
same library function called from C, from Python through the `ksc`
package, and the same computation jitted by JAX (when JAX is installed),
for a scalar function and functions of a 10^6-element vector.

    PYTHONPATH=<the ksc package> python benches/python/overhead.py [--out FILE.md]

(the package installed with `pip install ./python`, or the directory
`cargo test -p ksc-python` stages in target/debug/ksc-python-package).
Times are the minimum over 7 repetitions of the mean of a loop of calls,
in 3 rounds of C then Python, on one thread (OMP_NUM_THREADS=1), in this
one process (C through a compiled driver run from here). Prints a Markdown table.
"""

import argparse
import ctypes
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import ksc  # noqa: E402

SOURCE = """
(def scalar Float ((x : Float) (y : Float)) (mul x (sin y)))
(def vsum Float (v : Vec Float) (sum v))
(def vscale (Vec Float) ((a : Float) (v : Vec Float))
  (build (size v) (lam (i : Integer) (mul a (index i v)))))
"""

N = 1_000_000
ROUNDS = 3

DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef struct { int64_t size; double *data; } vec;
typedef struct { void *block; char *top; } mark;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    void *(*arena_new)(void) = dlsym(lib, "ks_arena_new");
    mark (*arena_mark)(void *) = dlsym(lib, "ks_arena_mark");
    void (*arena_reset)(void *, mark) = dlsym(lib, "ks_arena_reset");
    double (*scalar)(void *, double, double) = dlsym(lib, "scalar");
    double (*vsum)(void *, vec) = dlsym(lib, "vsum");
    vec (*vscale)(void *, double, vec) = dlsym(lib, "vscale");
    void *A = arena_new();
    long n = atol(argv[2]);
    vec v = { n, malloc(n * sizeof(double)) };
    for (long i = 0; i < n; i++) v.data[i] = 1.0 / (1 + i);
    volatile double sink = 0;
    const char *names[3] = { "scalar", "vsum", "vscale" };
    long reps[3] = { 2000000, 200, 100 };
    for (int f = 0; f < 3; f++) {
        double best = 1e30;
        for (int r = 0; r < 7; r++) {
            double t0 = now();
            for (long k = 0; k < reps[f]; k++) {
                mark m = arena_mark(A);
                if (f == 0) sink += scalar(A, 1.0 + k, 0.5);
                else if (f == 1) sink += vsum(A, v);
                else sink += vscale(A, 2.0, v).data[0];
                arena_reset(A, m);
            }
            double t = (now() - t0) / reps[f];
            if (t < best) best = t;
        }
        printf("%s %.9g\n", names[f], best);
    }
    return sink == 0.12345;
}
"""


def best_of(fn, reps):
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def cpu():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags"))
        vector = [x for x in ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_fp16") if x in flags]
        return f"{model} ({', '.join(vector) or 'no AVX2'})"
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    m = ksc.loads(SOURCE, name="overhead.ks", checked=False)
    library = m.scalar._library.lib._name
    v = 1.0 / (1.0 + np.arange(N))
    py, c = {}, {}
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "driver.c"), os.path.join(d, "driver")
        with open(src, "w") as f:
            f.write(DRIVER)
        subprocess.run(["cc", "-O2", "-o", exe, src, "-ldl"], check=True)
        # C and Python in turns, the best of each kept, so that a slow
        # spell of the machine does not fall on one side only.
        for _ in range(ROUNDS):
            out = subprocess.run([exe, library, str(N)], capture_output=True, text=True, check=True).stdout
            for name, t in (line.split() for line in out.splitlines()):
                c[name] = min(c.get(name, float("inf")), float(t))
            for name, fn, reps in (
                ("scalar", lambda: m.scalar(1.0, 0.5), 200000),
                ("vsum", lambda: m.vsum(v), 200),
                ("vscale", lambda: m.vscale(2.0, v), 100),
            ):
                py[name] = min(py.get(name, float("inf")), best_of(fn, reps))
    jx = {}
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        js = jax.jit(lambda x, y: x * jnp.sin(y))
        jv = jax.jit(jnp.sum)
        jm = jax.jit(lambda a, v: a * v)
        vj = jnp.asarray(v)
        for fn in (lambda: js(1.0, 0.5), lambda: jv(vj), lambda: jm(2.0, vj)):
            fn().block_until_ready()
        jx = {
            "scalar": best_of(lambda: js(1.0, 0.5).block_until_ready(), 20000),
            "vsum": best_of(lambda: jv(vj).block_until_ready(), 200),
            "vscale": best_of(lambda: jm(2.0, vj).block_until_ready(), 100),
        }
        jax_version = jax.__version__
    except ImportError:
        jax_version = None

    what = {"scalar": "`x * sin y`, two Floats", "vsum": "`sum v`, 10^6 Floats in", "vscale": "`a * v`, 10^6 Floats in and out"}
    lines = [
        f"Machine: {cpu()}; Python {platform.python_version()}, NumPy {np.__version__}"
        + (f", JAX {jax_version} (x64)" if jax_version else ", JAX not installed")
        + "; one thread.",
        "",
        "| function | C | Python (ksc) | Python - C | JAX jit |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("scalar", "vsum", "vscale"):
        j = f"{jx[name] * 1e6:.2f} µs" if name in jx else "–"
        lines.append(
            f"| {what[name]} | {c[name] * 1e6:.2f} µs | {py[name] * 1e6:.2f} µs | {(py[name] - c[name]) * 1e6:.2f} µs | {j} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Calling ksc from Python: the overhead\n\n`python benches/python/overhead.py` (see its docstring).\n\n" + table + "\n")


if __name__ == "__main__":
    sys.exit(main())
