#!/usr/bin/env python3
"""The benchmark harness of shared/docs/benchmarks.md (issue 7).

    python3 benches/run.py            # everything; adds the run to benches/results/ (below)

For each workload and size it builds ksc's code (`ksc build --emit so`), the
hand-written C reference (benches/reference/), the JAX and PyTorch versions
(benches/peers.py; installed by benches/setup_peers.sh, skipped with a
message if they cannot be); checks correctness (ksc against the reference
within 1e-8 relative, the reference against central finite differences
within 1e-4, JAX and PyTorch against the reference); times objective and
derivative of every tool interleaved, on one pinned core, one thread; records
peak memory and ksc's compile time; and writes the report and a plot.

Where the results go: the run's JSON, report and plot to benches/build/
TAG.{json,md,svg} (TAG: --tag, default the date; not kept: the next run
clears build/); then the run is folded into the results directory (--out,
default benches/results/) by benches/consolidate.py: its rows appended to
history.jsonl (a run whose tag is already there is replaced) and
latest.{json,md,svg} rewritten with the most recent measurement of each row.
`python3 benches/consolidate.py --run TAG > TAG.json` gives a run's JSON
back, and `python3 benches/report.py TAG.json` its report.

Options (see --help): --only WORKLOAD[,...], --quick (tiny timing budget, for
trying the harness), --adbench-timing (ADBench's full budget: samples of at
least 0.5 s, up to 10 samples or 10 s), --no-install, --big (adds the large
GMM sizes). Needs python3 (no packages), cc, cargo; stdlib only.
"""
import argparse
import array
import datetime
import itertools
import json
import math
import os
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benches")
EXAMPLES = os.path.join(ROOT, "ksc-examples", "adbench")
DATA = os.path.join(os.path.dirname(ROOT), "shared", "adbench-data")
CFLAGS = ["-O3", "-march=native"]
SEMANTIC = ["-std=gnu99", "-ffp-contract=off", "-fno-math-errno"]
TOOLS = ["ksc", "ref", "jax", "torch"]
TOOL_NAMES = {"ksc": "ksc", "ref": "C reference", "jax": "JAX", "torch": "PyTorch"}
# dF~'s ablations (seed 000, section 5; issue 43 item 3): ksc built with
# `--ablate GROUP` (docs/strategies.md, "Ablations") is timed beside ksc on
# the workloads of dF~'s figures 8 to 11, as the tool "ksc-no-GROUP".
ABLATIONS = ["fusion", "licm", "df-rules"]
# The ablations each workload is timed with: dF~'s on its figures'
# workloads; on `scan`, ksc with the serial backward pass of a scan instead
# of seed 002's Theorem 3.7 (`--ablate parallel-reverse`, docs/ad.md).
WORKLOAD_ABLATIONS = {"micro": ABLATIONS, "lse": ABLATIONS, "project": ABLATIONS, "scan": ["parallel-reverse"]}
for _a in ABLATIONS + ["parallel-reverse"]:
    TOOL_NAMES["ksc-no-" + _a] = f"ksc without {_a}"
# `ksc build --reassociate` (issue 37): the sums and maxima of loops over
# data combined in any order, vectorised (docs/native.md, "Reassociated
# sums"); timed beside ksc on every workload as the tool "ksc-reassociate".
REASSOCIATED = "ksc-reassociate"
TOOL_NAMES[REASSOCIATED] = "ksc --reassociate"
TOL_KSC = 1e-8
TOL_FD = 1e-4
ASK_TIMEOUT = 600  # seconds for one request to a worker


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def relerr(a, b):
    return abs(a - b) / max(1.0, abs(a) + abs(b))


# ------------------------------------------------------------------ data
M64 = (1 << 64) - 1


def ranhashdoub(seed):
    """$ranhashdoub of ksc's runtime (the "ranhash" mixer), in [0, 1)."""
    v = (seed * 3935559000370003845 + 2691343689449507681) & M64
    v ^= v >> 21
    v ^= (v << 37) & M64
    v ^= v >> 4
    v = (v * 4768777513237032717) & M64
    v ^= (v << 20) & M64
    v ^= v >> 41
    v ^= (v << 5) & M64
    return 5.42101086242752217e-20 * float(v)


def write_numbers(f, xs, per_line=None):
    xs = list(xs)
    if per_line:
        for i in range(0, len(xs), per_line):
            f.write(" ".join(repr(x) for x in xs[i:i + per_line]) + "\n")
    else:
        f.write(" ".join(repr(x) for x in xs) + "\n")


def gen_gmm(path, n, k, d):
    """ADBench GMM file with the data of gmm.ks's `gmm_data` (seeded ranhash):
    x, then alphas and means uniform in [0, 1), icf uniform in [-0.5, 0.5); gamma 1, m 0."""
    isz = d * (d + 1) // 2
    base1 = n * d
    base2 = base1 + k
    base3 = base2 + k * d
    with open(path, "w") as f:
        f.write(f"{d} {k} {n}\n")
        write_numbers(f, (ranhashdoub(base1 + c) for c in range(k)), 1)
        write_numbers(f, (ranhashdoub(base2 + i) for i in range(k * d)), d)
        write_numbers(f, (ranhashdoub(base3 + i) - 0.5 for i in range(k * isz)), isz)
        write_numbers(f, (ranhashdoub(i) for i in range(n * d)), d)
        f.write("1 0\n")


def write_bin(path, xs):
    """Raw little-endian doubles (the drivers and peers read `.bin` files so)."""
    a = array.array("d", xs)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        a.tofile(f)


def gen_lse(path, n):
    """n, then x uniform in [0, 1) ($ranhashdoub of 0..n-1, as lse.ks's lse_data)."""
    write_bin(path, itertools.chain([n], (ranhashdoub(i) for i in range(n))))


def gen_scan(path, kind, n):
    """The `scan` workload's data: lse_reduce: n, x as gen_lse; recurrence:
    n, a uniform in [0.5, 1), b uniform in [-1, 1); nested: n ones (any
    other factors overflow k nested cumulative products of 10^6; the cost
    does not depend on the values)."""
    if kind == "lse_reduce":
        return gen_lse(path, n)
    if kind == "recurrence":
        r = random.Random(13 + n)
        a = (0.5 + 0.5 * r.random() for _ in range(n))
        b = (2.0 * r.random() - 1.0 for _ in range(n))
        return write_bin(path, itertools.chain([n], a, b))
    write_bin(path, itertools.chain([n], itertools.repeat(1.0, n)))


def gen_micro(path, n):
    """n, vectors u, v, r, s uniform in [0.5, 1.5), scalars a = 1.7, da = 0.3."""
    r = random.Random(7 + n)
    write_bin(path, itertools.chain([n], (0.5 + r.random() for _ in range(4 * n)), [1.7, 0.3]))


# The camera and point of ADBench's BA file ba1 (its first lines), used if
# the file is not there.
BA1_CAMERA = [-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673, 419.194514, 5.864426, -8.518870,
              0.087812, 0.002739]
BA1_POINT = [7.203245, 0.001144, 3.023326]


def gen_project(path, n):
    """The `project` workload (seed 000's figure 11): n, one camera (11: r, C,
    f, x0, kappa, ADBench's BA order), n points (3 each). The camera is the
    first of ADBench's ba1_n49_m7776_p31843.txt; an ADBench BA file holds one
    point (its loader replicates it), so the points are that point plus
    seeded offsets uniform in [-5, 5)^3 (all distinct; about 36 in front of
    the camera, 70 away)."""
    cam, pt = BA1_CAMERA, BA1_POINT
    f = os.path.join(DATA, "ba", "ba1_n49_m7776_p31843.txt")
    if os.path.exists(f):
        with open(f) as fh:
            v = [float(x) for x in itertools.islice((x for line in fh for x in line.split()), 17)]
        cam, pt = v[3:14], v[14:17]
    r = random.Random(17 + n)
    xs = (pt[k] + 10.0 * (r.random() - 0.5) for _ in range(n) for k in range(3))
    write_bin(path, itertools.chain([n], cam, xs))


def gen_nnmf(path, m, n):
    """m, n, w (m), h (n), A (m x n), uniform in [0.5, 1.5)."""
    r = random.Random(11 + n)
    write_bin(path, itertools.chain([m, n], (0.5 + r.random() for _ in range(m + n + m * n))))


def configs(args, datadir):
    """(workload, ks file, kind, size label, size number for the plot, data file, maker)."""
    out = []
    gmm_sizes = [(1000, 5, 2), (1000, 25, 10), (1000, 50, 20), (1000, 100, 32), (1000, 10, 64)]
    if args.big:
        gmm_sizes += [(1000, 100, 64), (10000, 200, 64)]
    for n, k, d in gmm_sizes:
        f = os.path.join(DATA, "gmm", "1k", f"gmm_d{d}_K{k}.txt")
        if n == 1000 and os.path.exists(f):
            out.append(("gmm", "gmm", "gmm", f"n={n} d={d} K={k} (ADBench file)", n * k * d * d, f, None))
        else:
            p = os.path.join(datadir, f"gmm_n{n}_d{d}_K{k}.txt")
            out.append(("gmm", "gmm", "gmm", f"n={n} d={d} K={k} (generated)", n * k * d * d, p,
                        lambda p=p, n=n, k=k, d=d: gen_gmm(p, n, k, d)))
    for n in (10000, 1280000):
        p = os.path.join(datadir, f"lse_{n}.bin")
        out.append(("lse", "lse", "lse", f"n={n}", n, p, lambda p=p, n=n: gen_lse(p, n)))
    out.append(("lstm", "lstm", "lstm", "l=2 c=1024", 2 * 1024,
                os.path.join(DATA, "lstm", "lstm_l2_c1024.txt"), None))
    # 4 x 10^6: the doubling from 2 x 10^6 is out of the last-level cache at
    # both sizes (see the report's scaling table).
    for n in (10 ** 6, 2 * 10 ** 6, 4 * 10 ** 6):
        p = os.path.join(datadir, f"micro_{n}.bin")
        for kind in ("dot", "max", "vadd_jvp", "vadd_vjp", "vscale_jvp", "vscale_vjp"):
            out.append(("micro", "micro", kind, f"n={n}", n, p, lambda p=p, n=n: gen_micro(p, n)))
    # Figure 8's full Jacobians: d(u + v)/du dense (n x n) at 10^3 only, and
    # in CSR; d(a v)/da (n x 1). JAX and PyTorch have no sparse Jacobian:
    # at 10^6 their vadd_jacsparse workers refuse (the dense one is 8 TB).
    for kind, sizes in (("vadd_jac", (10 ** 3,)), ("vadd_jacsparse", (10 ** 3, 10 ** 6)),
                        ("vscale_jac", (10 ** 3, 10 ** 6))):
        for n in sizes:
            p = os.path.join(datadir, f"micro_{n}.bin")
            out.append(("micro", "micro", kind, f"n={n}", n, p, lambda p=p, n=n: gen_micro(p, n)))
    for n in (1000, 2000):
        p = os.path.join(datadir, f"nnmf_1000x{n}.bin")
        out.append(("micro", "nnmf", "nnmf", f"m=1000 n={n}", n, p, lambda p=p, n=n: gen_nnmf(p, 1000, n)))
    # Seed 001's vectorSum (its section 6, sizes 2500 to 50000): the
    # gradient of the sum by forward mode over the n one-hot directions,
    # built from vectorsum.ks (v is the micro data's u). Optimised linear,
    # unoptimised (ksc-no-df-rules) quadratic; JAX's and PyTorch's n x n
    # forward mode is refused over 1 GiB (n > 11585).
    for n in (2500, 10000, 50000):
        p = os.path.join(datadir, f"micro_{n}.bin")
        out.append(("micro", "vectorsum", "vectorsum", f"n={n}", n, p, lambda p=p, n=n: gen_micro(p, n)))
    # HT (hand tracking), simple and complicated variants: ADBench's files on
    # the big model (the driver and the peers read it from ../big-model next
    # to each file, and tell the variant by the file's contents).
    for variant, kind in (("simple", "hand"), ("complicated", "hand_complicated")):
        hand_dir = os.path.join(DATA, "hand", variant + "_big")
        if not os.path.isdir(hand_dir):
            continue
        hand_files = [f for f in os.listdir(hand_dir) if f.startswith("hand") and f.endswith(".txt")]
        for f in sorted(hand_files, key=lambda f: int(f[:-4].rsplit("_c", 1)[1])):
            n = int(f[:-4].rsplit("_c", 1)[1])
            out.append(("hand", "hand", kind, f"N={n} ({f[:-4]}, big model)", n, os.path.join(hand_dir, f), None))
    out += ba_configs(args)
    # Figure 11: the Jacobian of one camera's projections of N points (CSR,
    # 2N x (11 + 3N)); the size for the plot is N.
    for n in (10 ** 3, 10 ** 4):
        p = os.path.join(datadir, f"project_{n}.bin")
        out.append(("project", "project", "project", f"N={n} (camera of ADBench ba1)", n, p,
                    lambda p=p, n=n: gen_project(p, n)))
    # Seed 002's reduce and scan (issue 34), at 1 and 2 threads (the C
    # reference is sequential).
    for kind, sizes in (("lse_reduce", (10 ** 6, 10 ** 7)), ("recurrence", (10 ** 6, 10 ** 7)),
                        ("nested1", (10 ** 6,)), ("nested2", (10 ** 6,)), ("nested3", (10 ** 6,)),
                        ("nested4", (10 ** 6,))):
        for n in sizes:
            p = os.path.join(datadir, f"scan_{kind}_{n}.bin")
            for threads in (1, 2):
                out.append(("scan", "scan", kind, f"n={n}, {threads} thread{'s' if threads > 1 else ''}", n, p,
                            lambda p=p, kind=kind, n=n: gen_scan(p, kind, n), threads))
    if args.only:
        keep = args.only.split(",")
        out = [c for c in out if c[0] in keep or c[2] in keep]
    return out


def ba_configs(args):
    """BA: ADBench's files ba1 to ba5 (all 14 with --ba-all); the size for the plot is p."""
    import glob
    import re
    out = []
    for f in glob.glob(os.path.join(DATA, "ba", "ba*_n*_m*_p*.txt")):
        k, n, m, p = map(int, re.match(r"ba(\d+)_n(\d+)_m(\d+)_p(\d+)\.txt", os.path.basename(f)).groups())
        if k <= 5 or args.ba_all:
            out.append((k, ("ba", "ba", "ba", f"ba{k} n={n} m={m} p={p}", p, f, None)))
    return [c for _, c in sorted(out)]


# ------------------------------------------------------------------ builds
def split_forms(text):
    """Top-level forms of a .ks text with the comments before them."""
    forms, depth, start, i, in_str = [], 0, 0, 0, False
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == ";":
            while i < len(text) and text[i] != "\n":
                i += 1
        elif ch == '"':
            in_str = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                forms.append(text[start:i + 1])
                start = i + 1
        i += 1
    return forms


def objective_only(text):
    """The program without `main` and without the benchmark entry points
    (for when ksc cannot compile the derivative natively)."""
    marker = text.find("; ---- benchmark entry points")
    if marker >= 0:
        text = text[:marker]
    def code(form):
        return "\n".join(l for l in form.splitlines() if not l.lstrip().startswith(";")).strip()
    return "\n".join(f for f in split_forms(text) if not code(f).startswith("(def main "))


def c_size(path):
    """Lines of the generated C file, and its largest function (lines, name):
    each function's C starts with its name in a `/* [...] */` comment and
    ends at the first `}` in column 0."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    largest, name, start = (0, ""), None, 0
    for i, line in enumerate(lines):
        if line.startswith("/* [") and line.endswith("*/"):
            name, start = line[3:-3], i
        elif line.startswith("}") and name is not None:
            largest = max(largest, (i - start + 1, name))
            name = None
    return {"lines": len(lines), "largest_lines": largest[0], "largest": largest[1]}


class Build:
    def __init__(self, ksc, workdir):
        self.ksc, self.workdir = ksc, workdir
        self.cache = {}
        self.c_size = {}

    def ksc_variant(self, name, tool):
        """Builds ksc-examples/adbench/NAME.ks as the tool TOOL ("ksc-no-GROUP":
        with `--ablate GROUP`; REASSOCIATED: with `--reassociate`) into its
        own directory, whose library the driver loads through
        LD_LIBRARY_PATH (it takes precedence over the driver's RUNPATH).
        Returns the directory, or the build's error as (None, message)."""
        flags = ["--reassociate"] if tool == REASSOCIATED else ["--ablate", tool[len("ksc-no-"):]]
        key = ("variant", name, tool)
        if key not in self.cache:
            out = os.path.join(self.workdir, f"{tool}-{name}")
            os.makedirs(out, exist_ok=True)
            env = dict(os.environ, KSC_CACHE_DIR=tempfile.mkdtemp(dir=self.workdir))
            p = subprocess.run([self.ksc, "build", os.path.join(EXAMPLES, name + ".ks"), "--emit", "so", "-o", out,
                                "--unchecked"] + flags, capture_output=True, text=True, env=env)
            err = (p.stderr.strip().splitlines() or ["(no message)"])[0]
            self.cache[key] = (out, None) if p.returncode == 0 else (None, f"ksc {' '.join(flags)} cannot build: {err}")
        return self.cache[key]

    def ksc_so(self, name):
        """Builds ksc-examples/adbench/NAME.ks; on failure an objective-only
        copy. Returns (dir, has_grad, grad_error, compile seconds, emit-c seconds)."""
        if name in self.cache:
            return self.cache[name]
        src = os.path.join(EXAMPLES, name + ".ks")
        out = os.path.join(self.workdir, "ksc-" + name)
        os.makedirs(out, exist_ok=True)
        env = dict(os.environ, KSC_CACHE_DIR=tempfile.mkdtemp(dir=self.workdir))
        t0 = time.perf_counter()
        p = subprocess.run([self.ksc, "build", src, "--emit", "so", "-o", out, "--unchecked"],
                           capture_output=True, text=True, env=env)
        secs = time.perf_counter() - t0
        has_grad, err = True, None
        if p.returncode != 0:
            has_grad = False
            err = (p.stderr.strip().splitlines() or ["(no message)"])[0]
            log(f"  ksc cannot build the derivative of {name}.ks natively: {err}")
            alt = os.path.join(self.workdir, "objonly-" + name)
            os.makedirs(alt, exist_ok=True)
            with open(src) as f:
                text = objective_only(f.read())
            with open(os.path.join(alt, name + ".ks"), "w") as f:
                f.write(text)
            env = dict(os.environ, KSC_CACHE_DIR=tempfile.mkdtemp(dir=self.workdir))
            t0 = time.perf_counter()
            p = subprocess.run([self.ksc, "build", os.path.join(alt, name + ".ks"), "--emit", "so", "-o", out,
                                "--unchecked"], capture_output=True, text=True, env=env)
            secs = time.perf_counter() - t0
            if p.returncode != 0:
                raise RuntimeError(f"ksc cannot build even the objective of {name}.ks: {p.stderr}")
        # Front end only (parse, check, derive, lower, emit C): --emit c.
        t0 = time.perf_counter()
        cdir = os.path.join(self.workdir, "c-" + name)
        subprocess.run([self.ksc, "build", src if has_grad else os.path.join(self.workdir, "objonly-" + name, name + ".ks"),
                        "--emit", "c", "-o", cdir], capture_output=True)
        csecs = time.perf_counter() - t0
        self.c_size[name] = c_size(os.path.join(cdir, name + ".c"))
        self.cache[name] = (out, has_grad, err, secs, csecs)
        return self.cache[name]

    def driver(self, workload, name):
        key = ("driver", workload, name)
        if key in self.cache:
            return self.cache[key]
        kdir, has_grad, _, _, _ = self.ksc_so(name)
        exe = os.path.join(self.workdir, f"driver-{name}")
        src = os.path.join(BENCH, "driver", ("micro" if workload == "micro" else workload) + ".c")
        cmd = [os.environ.get("CC", "cc")] + CFLAGS + SEMANTIC + ["-I", kdir, "-o", exe, src, "-L", kdir,
                                                                  "-l" + name, "-Wl,-rpath," + kdir, "-lm"]
        if not has_grad:
            cmd.insert(1, "-DKSC_NO_GRAD")
        # A micro kind built from its own example program (nnmf.ks,
        # vectorsum.ks): driver/micro.c includes its header under -DNNMF,
        # -DVECTORSUM, ...
        if workload == "micro" and name != "micro":
            cmd.insert(1, "-D" + name.upper())
        subprocess.run(cmd, check=True)
        self.cache[key] = exe
        return exe


# ------------------------------------------------------------------ workers
class Worker:
    def __init__(self, tool, cmd, cores, timeout, mem_limit=None, env=None, ask_timeout=ASK_TIMEOUT):
        """A worker on the set of `cores`, with as many threads; `env`: more
        environment variables; `ask_timeout`: seconds one request may take."""
        self.tool = tool
        self.error = None
        self.ask_timeout = ask_timeout
        t = str(len(cores))
        eigen = "true" if len(cores) > 1 else "false"
        env = dict(os.environ, OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, KSC_BENCH_THREADS=t,
                   XLA_FLAGS=f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={t}",
                   JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", OMP_WAIT_POLICY="passive", **(env or {}))
        self.errf = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errf, text=True,
                                  env=env, preexec_fn=lambda: self.limits(cores, mem_limit))
        line = self.read(timeout)
        if line is None:
            self.fail(f"did not start within {timeout} s")
        elif line != "ready":
            self.fail(f"did not start ({line!r})")

    @staticmethod
    def limits(cores, mem_limit):
        os.sched_setaffinity(0, cores)
        if mem_limit:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    def stderr_tail(self):
        self.errf.seek(0)
        return " ".join(self.errf.read().strip().splitlines()[-3:])[-400:]

    def fail(self, what):
        code = self.p.poll()
        if code is None:
            time.sleep(0.5)
            code = self.p.poll()
        how = f" (exit code {code})" if code is not None else ""
        self.error = f"{TOOL_NAMES[self.tool]} {what}{how}: {self.stderr_tail() or '(no message)'}"
        log("  " + self.error)
        self.close()

    def read(self, timeout=None):
        """One line of the worker's answer, or None after `timeout` seconds
        (one answer per request, so nothing is left in the pipe's buffer)."""
        if timeout is not None:
            ready, _, _ = select.select([self.p.stdout], [], [], timeout)
            if not ready:
                self.p.kill()
                return None
        line = self.p.stdout.readline()
        return line.strip()

    def ask(self, cmd):
        if self.error:
            return None
        try:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            self.fail("died")
            return None
        line = self.read(self.ask_timeout)
        if line is None:
            self.fail(f"timed out ({self.ask_timeout:.0f} s) on `{cmd}`")
            return None
        if not line or line.startswith("error"):
            self.fail(f"failed on `{cmd}`")
            return None
        return line

    def close(self):
        try:
            if self.p.poll() is None:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
                self.p.wait(timeout=20)
        except Exception:
            self.p.kill()


def read_out(path):
    with open(path) as f:
        return [float(x) for x in f.read().split()]


def max_err(a, b):
    if isinstance(a, str):
        return max_err_files(a, b)
    if len(a) != len(b):
        return math.inf
    return max((relerr(x, y) for x, y in zip(a, b)), default=0.0)


# Workloads whose outputs are too large to hold as Python lists (BA's CSR
# Jacobian: 65p numbers, 15 million for ba5): kept as files, compared line by
# line, deleted after the size.
STREAMED = ("ba", "scan")


def max_err_files(pa, pb):
    worst = 0.0
    with open(pa) as fa, open(pb) as fb:
        for la, lb in itertools.zip_longest(fa, fb):
            if la is None or lb is None:
                return math.inf
            if la == lb:
                continue
            e = relerr(float(la), float(lb))
            if e > worst:
                worst = e
    return worst


def time_interleaved(workers, which, opts):
    """ADBench's method, interleaved across tools: per tool, double the
    repetitions until one sample takes at least min_time; then take samples
    round-robin until max_samples or the time budget. Seconds per call: (min, median)."""
    reps, samples, spent = {}, {}, {}
    for w in workers:
        n = 1
        while True:
            t = w.ask(f"run {which} {n}")
            if t is None:
                break
            t = float(t)
            if t >= opts.min_time or n >= 1 << 24:
                reps[w.tool], samples[w.tool], spent[w.tool] = n, [t / n], t
                break
            n *= 2 if t > 0.01 * opts.min_time else 16
    for _ in range(opts.max_samples - 1):
        busy = False
        for w in workers:
            if w.tool not in reps or w.error or spent[w.tool] >= opts.budget:
                continue
            t = w.ask(f"run {which} {reps[w.tool]}")
            if t is None:
                continue
            samples[w.tool].append(float(t) / reps[w.tool])
            spent[w.tool] += float(t)
            busy = True
        if not busy:
            break
    return {tool: (min(s), statistics.median(s), len(s)) for tool, s in samples.items()}


# ------------------------------------------------------------------ compiler
def run_criterion(src):
    """The criterion benchmarks of the compiler's phases (benches/compiler)
    with a short budget: {phase: [low, estimate, high] as text}, or an error."""
    log("criterion benchmarks of the compiler (benches/compiler) ...")
    p = subprocess.run(["cargo", "bench", "-q", "--", "--warm-up-time", "1", "--measurement-time", "3"],
                       cwd=os.path.join(src, "benches", "compiler"), capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        if "time:" in line and line.startswith("gmm/"):
            name, rest = line.split("time:")
            out[name.strip()] = rest.strip().strip("[]")
    if p.returncode != 0 or not out:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1]}
    return out


# ------------------------------------------------------------------ main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated workloads or kinds (gmm, lse, lstm, hand, hand_complicated, micro, dot, ...)")
    ap.add_argument("--quick", action="store_true", help="tiny timing budget (to try the harness)")
    ap.add_argument("--adbench-timing", action="store_true", help="ADBench's full budget (0.5 s samples, 10 x / 10 s)")
    ap.add_argument("--big", action="store_true", help="also GMM d=64 K=100 and n=10000 d=64 K=200")
    ap.add_argument("--ba-all", action="store_true", help="BA: all 14 ADBench files (default ba1 to ba5)")
    ap.add_argument("--mem-limit", type=float, default=10.0,
                    help="address-space limit of the C workers in GiB (default 10; the machine is shared)")
    ap.add_argument("--ksc", help="use this ksc binary instead of building one")
    ap.add_argument("--ksc-rev", help="build ksc from a clean snapshot of this commit (e.g. HEAD)")
    ap.add_argument("--no-criterion", action="store_true", help="skip the criterion benchmarks of the compiler")
    ap.add_argument("--no-ablations", action="store_true",
                    help="do not time ksc with each of its ablations (--ablate fusion, licm, df-rules) on the "
                         "workloads of dF~'s figures (micro, lse, project)")
    ap.add_argument("--no-reassociate", action="store_true",
                    help="do not time ksc built with --reassociate (sums of loops over data added in any order) "
                         "beside ksc")
    ap.add_argument("--ablation-timeout", type=float, default=120.0,
                    help="seconds one call of an ablated build may take before it is stopped and reported "
                         "(default 120: without its optimisations a derivative may be quadratic)")
    ap.add_argument("--no-install", action="store_true", help="do not run benches/setup_peers.sh")
    ap.add_argument("--out", default=os.path.join(BENCH, "results"),
                    help="results directory: history.jsonl and latest.* (default benches/results; "
                         "another directory for trial runs)")
    ap.add_argument("--tag", default=None,
                    help="name of the run in the history (default: the date, or the date and time if the history "
                         "already has a run of that date); a tag already in the history replaces that run")
    opts = ap.parse_args()
    opts.min_time, opts.max_samples, opts.budget = 0.2, 5, 2.0
    if opts.quick:
        opts.min_time, opts.max_samples, opts.budget = 0.02, 2, 0.1
    if opts.adbench_timing:
        opts.min_time, opts.max_samples, opts.budget = 0.5, 10, 10.0
    started = time.time()

    # Peers.
    peers = {}
    if not opts.no_install:
        log("installing peers (benches/setup_peers.sh) ...")
        subprocess.run(["bash", os.path.join(BENCH, "setup_peers.sh")])
    skipped = {}
    jax_py = os.path.join(BENCH, ".venv", "bin", "python")
    if os.path.exists(os.path.join(BENCH, ".venv", "ok-jax")):
        peers["jax"] = jax_py
    else:
        skipped["jax"] = ("JAX is not installed (--no-install: benches/setup_peers.sh was not run)" if opts.no_install
                          else "JAX is not installed (benches/setup_peers.sh could not install it from PyPI)")
    tp = os.path.join(BENCH, ".venv-torch-python")
    if os.path.exists(tp):
        peers["torch"] = open(tp).read().strip()
    else:
        skipped["torch"] = ("PyTorch is not installed (--no-install: benches/setup_peers.sh was not run)" if opts.no_install
                            else "PyTorch is not installed (neither Debian's python3-torch nor PyPI's torch)")
    for t, why in skipped.items():
        log(f"SKIPPING {TOOL_NAMES[t]}: {why}")

    # ksc.
    if opts.ksc:
        ksc = os.path.abspath(opts.ksc)
        source = f"the binary {ksc}"
    else:
        src = ROOT
        if opts.ksc_rev:
            # A clean snapshot of a commit (others may be editing the work tree).
            src = os.path.join(BENCH, ".ksc-src")
            shutil.rmtree(src, ignore_errors=True)
            os.makedirs(src)
            archive = subprocess.run(["git", "archive", opts.ksc_rev], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
        log(f"building ksc (cargo build --release in {src}) ...")
        env = dict(os.environ)
        if opts.ksc_rev and "CARGO_TARGET_DIR" not in env:
            env["CARGO_TARGET_DIR"] = os.path.join(BENCH, ".ksc-target")
        if subprocess.run(["cargo", "build", "--release", "-q"], cwd=src, env=env).returncode != 0:
            sys.exit("error: ksc does not build; try `--ksc-rev HEAD` (a clean snapshot of the last commit) "
                     "or `--ksc PATH`")
        meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=src, env=env,
                              capture_output=True, text=True, check=True)
        ksc = os.path.join(json.loads(meta.stdout)["target_directory"], "release", "ksc")
        rev = subprocess.run(["git", "rev-parse", "--short", opts.ksc_rev or "HEAD"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
        source = f"commit {rev}" + (" (clean snapshot)" if opts.ksc_rev else " plus the work tree's changes")
    opts.ksc_source = source
    opts.build_failures = []
    opts.command = "python3 benches/run.py " + " ".join(sys.argv[1:])
    ksc_src = ROOT if opts.ksc else src

    workdir = os.path.join(BENCH, "build")
    shutil.rmtree(workdir, ignore_errors=True)
    datadir = os.path.join(workdir, "data")
    os.makedirs(datadir)
    build = Build(ksc, workdir)
    core = max(os.sched_getaffinity(0))
    results = []
    for config in configs(opts, datadir):
        workload, name, kind, label, size, path, make = config[:7]
        threads = config[7] if len(config) > 7 else 1
        cores = {core} if threads == 1 else set(sorted(os.sched_getaffinity(0))[-threads:])
        log(f"{workload} {kind} {label}")
        if make and not os.path.exists(path):
            make()
        try:
            kdir, has_grad, grad_err, ksecs, csecs = build.ksc_so(name)
            exe = build.driver(workload, name)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            # A workload that does not build is reported, and the run goes on.
            why = (str(e).strip().splitlines() or ["(no message)"])[0]
            log(f"  SKIPPING the row: {why}")
            opts.build_failures.append(f"{workload} {kind} {label}: {why}")
            continue
        extra = [kind] if workload in ("micro", "scan") else []
        r = dict(workload=workload, kind=kind, label=label, size=size, has_grad=has_grad, grad_error=grad_err,
                 compile_s=ksecs, emit_c_s=csecs, c_size=build.c_size.get(name), errors={}, time={}, mem={},
                 skipped=dict(skipped), threads=threads)
        lim = int(opts.mem_limit * 2 ** 30)
        # The C reference is sequential: one core.
        workers = [Worker("ref", [exe, "ref", path] + extra, {core}, 600, lim),
                   Worker("ksc", [exe, "ksc", path] + extra, cores, 600, lim)]
        ablated = [] if opts.no_ablations else ["ksc-no-" + a for a in WORKLOAD_ABLATIONS.get(workload, [])]
        if not opts.no_reassociate:
            ablated.append(REASSOCIATED)
        for tool in ablated:
            adir, why = build.ksc_variant(name, tool)
            if adir is None:
                r["skipped"][tool] = why
                continue
            workers.append(Worker(tool, [exe, "ksc", path] + extra, cores, 600, lim, env={"LD_LIBRARY_PATH": adir},
                                  ask_timeout=opts.ablation_timeout))
        for t, py in peers.items():
            workers.append(Worker(t, [py, os.path.join(BENCH, "peers.py"), t, workload, path] + extra, cores, 1800))
        for w in workers:
            if w.error:
                r["skipped"][w.tool] = w.error
        workers = [w for w in workers if not w.error]
        byname = {w.tool: w for w in workers}
        # Correctness, then timing, objective first (so a derivative that
        # fails, e.g. out of memory, leaves the objective's results).
        outs = {}
        for which in ("obj", "grad"):
            ws = [w for w in workers
                  if not w.error and not (w.tool.startswith("ksc") and which == "grad" and not has_grad)]
            for w in ws:
                f = os.path.join(workdir, f"out-{w.tool}-{which}.txt")
                if w.ask(f"out {which} {f}") is not None:
                    outs[(w.tool, which)] = f if workload in STREAMED else read_out(f)
            if which == "grad":
                fd = byname["ref"].ask("fd")
                r["fd_error"] = float(fd) if fd is not None else math.inf
            for t in ["ksc", "jax", "torch"] + ablated:
                if (t, which) in outs and ("ref", which) in outs:
                    r["errors"][f"{t}-{which}"] = max_err(outs[(t, which)], outs[("ref", which)])
            ws = [w for w in ws if not w.error]
            for tool, v in time_interleaved(ws, which, opts).items():
                r["time"][f"{tool}-{which}"] = v
        r["correct"] = {t: all(e <= (TOL_KSC if t.startswith("ksc") else 1e-6) for k, e in r["errors"].items()
                               if k.startswith(t + "-") and k[len(t) + 1:] in ("obj", "grad"))
                        for t in TOOLS + ablated}
        r["correct"]["ref"] = r["fd_error"] <= TOL_FD
        for w in workers:
            if w.tool in ("jax", "torch"):
                first = w.ask("first")
                if first is not None:
                    r.setdefault("first_call", {})[w.tool] = [float(x) for x in first.split()]
            m = w.ask("mem")
            if m is not None:
                r["mem"][w.tool] = int(m)
            if w.error:
                r["skipped"][w.tool] = w.error
            w.close()
        if workload in STREAMED:
            for f in outs.values():
                os.remove(f)
        results.append(r)
        log("  " + ", ".join(f"{k} {v[0]:.3g}s" for k, v in r["time"].items()))
    criterion = None if opts.no_criterion else run_criterion(ksc_src)
    elapsed = time.time() - started
    record(opts, results, elapsed, criterion, workdir)


def record(opts, results, elapsed, criterion, workdir):
    """Writes the run's JSON, report and plot to WORKDIR/TAG.* and folds the
    run into the results directory (opts.out) with consolidate.py."""
    import consolidate
    import report
    os.makedirs(opts.out, exist_ok=True)
    if not opts.tag:
        now = datetime.datetime.now(datetime.timezone.utc)
        opts.tag = now.strftime("%Y-%m-%d")
        if opts.tag in consolidate.read_history(opts.out) or os.path.exists(os.path.join(opts.out, opts.tag + ".json")):
            opts.tag = now.strftime("%Y-%m-%d-%H%M")
    tag = opts.tag
    finished = report.now()
    # The run's JSON: its rows, options, and where and when it ran (report.py
    # and the history read the date, machine and cache from here).
    run = dict(results=results, elapsed=elapsed, opts=vars(opts), criterion=criterion, date=finished,
               machine=report.machine(), cache=report.cache_note())
    base = os.path.join(workdir, tag)
    with open(base + ".json", "w") as f:
        json.dump(run, f, indent=1)
    report.write(results, base, opts, elapsed, criterion, date=finished, cache=run["cache"])
    log(f"wrote this run's report {base}.md and plot {base}.svg in {elapsed:.0f} s")
    # Into the history: results/TAG.json, folded into history.jsonl (and
    # removed) by consolidate.py, which rewrites latest.*.
    shutil.copyfile(base + ".json", os.path.join(opts.out, tag + ".json"))
    changed = consolidate.update(opts.out, log=log)
    log(f"the run {tag} is in {os.path.join(opts.out, consolidate.HISTORY)}; changed: {', '.join(changed) or 'nothing'}")


if __name__ == "__main__":
    sys.path.insert(0, BENCH)
    main()
