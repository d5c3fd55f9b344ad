"""Writes the Markdown report and the SVG plot of benches/run.py.

    python3 benches/report.py benches/results/latest.json   # writes latest.md and latest.svg next to it
    python3 benches/report.py RUN.json                      # one run (e.g. from `consolidate.py --run TAG`)

A run's JSON holds its date, machine and last-level cache (run.py records
them; runs before 2026-11-29 had them only in their Markdown report, and
consolidate.py keeps them in history.jsonl), so a report re-rendered later
or elsewhere still names the run's machine. latest.json (consolidate.py)
also has "runs": its rows come from several runs, and the report then
names each row's run and lists the runs instead of one command.
"""
import datetime
import json
import math
import os
import platform
import subprocess
import sys

TOOLS = ["ksc", "ref", "jax", "torch"]
NAMES = {"ksc": "ksc", "ref": "C ref", "jax": "JAX", "torch": "PyTorch"}
COLOURS = {"ksc": "#d62728", "ref": "#1f77b4", "jax": "#2ca02c", "torch": "#ff7f0e"}


def fmt_t(s):
    if s is None:
        return "–"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_r(x):
    return "–" if x is None else f"{x:.3g}"


def t_of(r, tool, which):
    v = r["time"].get(f"{tool}-{which}")
    return v[0] if v else None


def doublings(micro):
    """(kind, result at n, result at 2n) for each doubling of a micro-benchmark's size, in order."""
    out = []
    kinds = []
    for r in micro:
        if r["kind"] not in kinds:
            kinds.append(r["kind"])
    for k in kinds:
        rs = sorted([r for r in micro if r["kind"] == k], key=lambda r: r["size"])
        out += [(k, a, b) for a, b in zip(rs, rs[1:]) if b["size"] == 2 * a["size"]]
    return out


def cache_note():
    """The machine's last-level cache, as lscpu reports it."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("L3 cache:"):
                return "L3 " + line.split(":", 1)[1].split("(")[0].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return "its size unknown"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def counted(r, tool, which):
    """A time counts only if the tool's output was correct."""
    if tool.startswith("ksc") and which == "grad" and not r["has_grad"]:
        return None
    if not r["correct"].get(tool, False) and tool != "ref":
        return None
    return t_of(r, tool, which)


def name_of(r):
    if r["workload"] == "hand":
        return "hand complicated" if r["kind"] == "hand_complicated" else "hand simple"
    return r["workload"] if r["workload"] not in ("micro", "scan") else f"{r['workload']} {r['kind']}"


# The vector extensions a run's figures depend on (what `-march=native`
# and XLA may use), in the order they are listed, as /proc/cpuinfo names
# them.
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16",
                "avx512_fp16", "amx_tile", "asimd", "sve", "sve2")


def machine():
    cpu, flags = "", set()
    try:
        for line in open("/proc/cpuinfo"):
            key = line.split(":", 1)[0].strip()
            if key == "model name" and not cpu:
                cpu = line.split(":", 1)[1].strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    vector = " ".join(f for f in VECTOR_FLAGS if f in flags) or "vector extensions unknown"
    cc = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    return f"{cpu} ({vector}); {os.cpu_count()} CPUs; {platform.system()} {platform.release()}; {' '.join(cc)}"


def now():
    """The time a run finished, as reports and consolidate.py write it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def write(results, base, opts, elapsed, criterion=None, date=None, machine_desc=None, cache=None, runs=None,
          criterion_run=None):
    """Writes BASE.md and BASE.svg. date, machine_desc and cache are the run's
    (default: now and this machine). runs: the runs that the rows come from
    (latest.json), each row naming its own under "run"."""
    L = []
    stored = machine_desc  # None: a run of this machine, now
    date = date or now()
    machine_desc = machine_desc or machine()
    src = opts.get("ksc_source") if isinstance(opts, dict) else getattr(opts, "ksc_source", None)
    cmd = (opts.get("command") if isinstance(opts, dict) else getattr(opts, "command", None)) or "python3 benches/run.py"
    if runs:
        L.append(f"# Benchmarks: the latest measurement of each row, as of {date}\n")
        L.append(f"Gathered by `{cmd.strip()}` from the {len(runs)} runs below: each row is the most recent "
                 f"measurement of its workload and size, and all its figures come from one run (named in the "
                 f"first table), on that run's machine; sums and geometric means over several rows (the summary) "
                 f"may combine runs. Every run's rows are in `history.jsonl`. Specification: "
                 f"`shared/docs/benchmarks.md`.\n")
        L.append("| run | finished | ksc built from | machine | command | rows here |")
        L.append("|---|---|---|---|---|---:|")
        for u in runs:
            L.append(f"| {u['run']} | {u.get('finished') or '?'} | {u.get('ksc_source') or '?'} | "
                     f"{u.get('machine') or '?'} | `{u.get('command') or '?'}` | {u['rows']} |")
        L.append("")
    else:
        L.append(f"# Benchmarks, {date}\n")
        L.append(f"Produced by `{cmd.strip()}` in {elapsed / 60:.1f} min on {machine_desc}. ksc built from "
                 f"{src}. Specification: `shared/docs/benchmarks.md`.\n")
    ms = getattr(opts, "min_time", None)
    if isinstance(opts, dict):
        ms = opts.get("min_time")
        mx, bd = opts.get("max_samples"), opts.get("budget")
    else:
        mx, bd = opts.max_samples, opts.budget
    budget = (f"least {ms} s, then up to {mx} samples or {bd} s per tool and function" if ms is not None else
              "least the run's minimum, then up to its number of samples or its time budget per tool and function "
              "(the runs' budgets differ: see their commands)")
    L.append(f"Timing: ADBench's method with a smaller budget: repetitions doubled until one sample takes at "
             f"{budget}, interleaved across tools "
             f"(round-robin), every process pinned to one core, one thread (except the `scan` rows labelled `2 threads`: "
             f"ksc, JAX and PyTorch there run on two cores with two threads, the sequential C reference on one); "
             f"one untimed warm-up call (JAX "
             f"compiles there). Times are the minimum per call (the median is in the JSON next to this file). "
             f"ksc and the C reference: `cc -O3 -march=native -ffp-contract=off`, ksc's code built with "
             f"`--unchecked`. A time counts only if the result is correct: ksc within 1e-8 of the C reference "
             f"(`|a-b|/max(1,|a|+|b|)`), the reference within 1e-4 of central finite differences, JAX and "
             f"PyTorch within 1e-6 of the reference; otherwise it is shown as –.\n")
    skipped = {}
    for r in results:
        for t, why in r.get("skipped", {}).items():
            if "not installed" in why:
                skipped.setdefault(t, why)
    if skipped:
        L.append("**Skipped peers:** " + "; ".join(f"{NAMES[t]}: {w}" for t, w in skipped.items()) + "\n")

    L.append("## Derivative and objective times\n")
    L.append("R = derivative time / objective time of the same tool. For the micro-benchmarks the objective is "
             "the primal function and the derivative is the gradient, JVP or VJP named. For HT the objective is the "
             "3N residuals and the derivative their Jacobian: 3N x 26 with respect to theta (simple), 3N x 28 "
             "(complicated: the compressed u block, then theta).\n")
    run_col = "run | " if runs else ""
    L.append("| workload | size | " + run_col + " | ".join(f"{NAMES[t]} obj | {NAMES[t]} deriv | {NAMES[t]} R" for t in TOOLS) + " |")
    L.append("|---|---|" + ("---|" if runs else "") + "---:|" * (3 * len(TOOLS)))
    for r in results:
        cells = []
        for t in TOOLS:
            o, g = counted(r, t, "obj"), counted(r, t, "grad")
            cells += [fmt_t(o), fmt_t(g) if g is not None or t != "ksc" or r["has_grad"] else "not native",
                      fmt_r(ratio(g, o))]
        L.append(f"| {name_of(r)} | {r['label']} | " + (f"{r.get('run', '?')} | " if runs else "") + " | ".join(cells) + " |")

    L.append("\n## ksc against the others\n")
    L.append("ksc's time over the other tool's, derivative; objective (below 1: ksc is faster).\n")
    L.append("| workload | size | ksc / C ref | ksc / JAX | ksc / PyTorch |")
    L.append("|---|---|---:|---:|---:|")
    for r in results:
        cells = []
        for t in ("ref", "jax", "torch"):
            g = ratio(counted(r, "ksc", "grad"), counted(r, t, "grad"))
            o = ratio(counted(r, "ksc", "obj"), counted(r, t, "obj"))
            cells.append(f"{fmt_r(g)}; {fmt_r(o)}")
        L.append(f"| {name_of(r)} | {r['label']} | " + " | ".join(cells) + " |")

    L.append("\n## Correctness, memory, compile time\n")
    L.append("Errors are the largest relative error over all outputs (objective; derivative) against the C "
             "reference; the reference's is against central finite differences (h = 1e-5, sampled entries). Peak "
             "memory is the peak resident set of each tool's process (data, interpreter and library included). "
             "Compile time: `ksc build --emit so` from scratch (empty cache; front end, C emission and `cc`), and "
             "in brackets `--emit c` alone.\n")
    L.append("| workload | size | ref vs FD | ksc | JAX | PyTorch | peak MiB ksc / ref / JAX / PyTorch | ksc compile |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        e = r["errors"]

        def pair(t):
            o, g = e.get(f"{t}-obj"), e.get(f"{t}-grad")
            if o is None and g is None:
                return "–"
            return f"{'–' if o is None else f'{o:.1e}'}; {'–' if g is None else f'{g:.1e}'}"
        mem = " / ".join(f"{r['mem'][t] / 1024:.0f}" if t in r["mem"] else "–" for t in TOOLS)
        L.append(f"| {name_of(r)} | {r['label']} | {r['fd_error']:.1e} | {pair('ksc')} | {pair('jax')} | "
                 f"{pair('torch')} | {mem} | {r['compile_s']:.2f} s ({r['emit_c_s']:.2f} s) |")

    # Compile time against JAX's time to a first result (issue 35).
    timed = [r for r in results if r.get("c_size")]
    if timed:
        L.append("\n## Compile time\n")
        L.append("ksc: `ksc build --emit so` from an empty cache, split into ks to C (`--emit c` alone) and the "
                 "rest (the C compiler); the lines of the generated C and its largest function. JAX: the first "
                 "call of the jitted objective and derivative (tracing, compilation and one run), on the same "
                 "machine in the same run.\n")
        L.append("| workload | size | ksc build | ks to C | C compiler | lines of C | largest function (lines) | "
                 "JAX first obj | JAX first deriv |")
        L.append("|---|---|---:|---:|---:|---:|---|---:|---:|")
        for r in timed:
            c = r["c_size"]
            jf = r.get("first_call", {}).get("jax")
            jo, jg = (f"{jf[0]:.2f} s", f"{jf[1]:.2f} s") if jf else ("–", "–")
            L.append(f"| {name_of(r)} | {r['label']} | {r['compile_s']:.2f} s | {r['emit_c_s']:.2f} s | "
                     f"{max(0.0, r['compile_s'] - r['emit_c_s']):.2f} s | {c['lines']} | "
                     f"`{c['largest'][:60]}` ({c['largest_lines']}) | {jo} | {jg} |")

    # dF~'s ablations (issue 43 item 3).
    L += ablation_table(results)
    # Both modes of sums (issue 37).
    L += reassociate_table(results)
    # Both backward passes of scan (issue 34).
    L += serial_reverse_table(results)

    # Scaling of the micro-benchmarks.
    micro = [r for r in results if r["workload"] == "micro"]
    if micro:
        L.append("\n## Micro-benchmarks: scaling\n")
        L.append("Derivative time at 2n over time at n, for each doubling measured (target <= 2.2: O(n)). "
                 f"A doubling whose vectors leave the last-level cache ({cache or (cache_note() if stored is None else 'its size not recorded')}; at n = 10^6 a "
                 "benchmark's vectors take 16 to 32 MiB) slows every tool, the C reference included, by "
                 "more than 2; the doubling out of cache at both sizes shows the complexity. The summary "
                 "judges each benchmark's largest doubling.\n")
        L.append("| benchmark | doubling | " + " | ".join(NAMES[t] for t in TOOLS) + " |")
        L.append("|---|---|" + "---:|" * len(TOOLS))
        for k, a, b in doublings(micro):
            L.append(f"| {k} | {a['label']} -> {b['label']} | "
                     + " | ".join(fmt_r(ratio(counted(b, t, "grad"), counted(a, t, "grad"))) for t in TOOLS) + " |")

    # Summary against the targets.
    L.append("\n## Summary against the targets of benchmarks.md\n")
    L += summary(results)

    fails = [(name_of(r), r["label"], t, why) for r in results for t, why in r.get("skipped", {}).items()
             if t not in skipped or skipped[t] != why]
    built = (opts.get("build_failures") if isinstance(opts, dict) else getattr(opts, "build_failures", None)) or []
    if built:
        L.append("\n## Rows not measured\n")
        L.append("Their programs or drivers did not build, so no tool was timed:\n")
        L += [f"- {b}" for b in built]
    if fails:
        L.append("\n## Failures\n")
        L.append("A tool that failed on a size has no time there (–).\n")
        for n, label, t, why in fails:
            L.append(f"- {n} {label}, {NAMES.get(t, t)}: {why}")
    errs = {}
    for r in results:
        if not r["has_grad"] and r.get("grad_error"):
            errs.setdefault(name_of(r), r["grad_error"])
    if errs:
        L.append("\n## Derivatives ksc cannot compile natively yet\n")
        L.append("Their ksc derivative is reported as \"not native\" and not timed; ksc's objective is still "
                 "timed and checked.\n")
        for k, v in errs.items():
            L.append(f"- {k}: `{v}`")
    if criterion:
        L.append("\n## The compiler itself (criterion, `benches/compiler`)\n")
        if criterion_run:
            L.append(f"From the run {criterion_run}.\n")
        if "error" in criterion:
            L.append(f"Not measured: {criterion['error']}")
        else:
            L.append("The phases on `ksc-examples/adbench/gmm.ks` (objective and `gdef rev`), in process, "
                     "without the C compiler; criterion's confidence interval of the time per run.\n")
            L.append("| phase | time (low, estimate, high) |")
            L.append("|---|---|")
            for k, v in criterion.items():
                L.append(f"| {k.split('/', 1)[1]} | {v if isinstance(v, str) else ' '.join(v)} |")
    L.append(f"\nPlot: `{os.path.basename(base)}.svg` (derivative time against size, log scales, one line per tool "
             f"and workload).\n")
    with open(base + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    plot(results, base + ".svg")


ABLATIONS = ["fusion", "licm", "df-rules"]


def ablation_table(results):
    """ksc with each group of optimisations switched off (`ksc build --ablate
    GROUP`) against ksc with all of them, on the rows that timed them."""
    rows = [r for r in results if any(f"ksc-no-{a}-grad" in r["time"] or f"ksc-no-{a}" in r.get("skipped", {})
                                      for a in ABLATIONS)]
    if not rows:
        return []
    L = ["\n## Ablations (dF~, seed 000, section 5)\n",
         "ksc built with `--ablate GROUP` (docs/strategies.md, \"Ablations\": `fusion`, `licm`, `df-rules`) against "
         "ksc with every optimisation, derivative; objective: the time without the group over the time with it "
         "(above 1: the group pays), and the derivative's time without it. The C compiler (`-O3`) still "
         "optimises the C of every build. A build whose calls took longer than the harness allows "
         "(`--ablation-timeout`) or whose result was wrong is –, its reason under Failures. Two libraries "
         "of the same C can differ by about 10% in one run (the run of 2026-11-30 measured dot's gradient, "
         "which no group changes, at 0.89 to 0.98 of ksc's): only ratios beyond that say a group pays.\n",
         "| workload | size | ksc deriv; obj | " + " | ".join(f"without {a}" for a in ABLATIONS) + " |",
         "|---|---|---:|" + "---:|" * len(ABLATIONS)]
    for r in rows:
        g, o = counted(r, "ksc", "grad"), counted(r, "ksc", "obj")
        cells = []
        for a in ABLATIONS:
            ga, oa = counted(r, f"ksc-no-{a}", "grad"), counted(r, f"ksc-no-{a}", "obj")
            cells.append(f"{fmt_r(ratio(ga, g))}; {fmt_r(ratio(oa, o))} ({fmt_t(ga)})")
        L.append(f"| {name_of(r)} | {r['label']} | {fmt_t(g)}; {fmt_t(o)} | " + " | ".join(cells) + " |")
    return L


def rows_with(results, tool, which):
    """The rows that timed (`which`: obj or grad) or skipped the variant TOOL of ksc."""
    return [r for r in results if f"{tool}-{which}" in r["time"] or tool in r.get("skipped", {})]


def serial_reverse_table(results):
    """ksc built with the serial backward pass of a scan (`--ablate
    parallel-reverse`) against ksc's default, seed 002's Theorem 3.7."""
    tool = "ksc-no-parallel-reverse"
    rows = rows_with(results, tool, "grad")
    if not rows:
        return []
    L = ["\n## Reverse mode of scan: parallel (Theorem 3.7) or serial\n",
         "ksc's default differentiates a scan over a monoid whose cotangent is a few Floats by seed 002's "
         "Theorem 3.7: the backward recurrence is a scan of affine maps in parallel blocks, about twice the "
         "work of the serial backward pass. `--ablate parallel-reverse` builds the serial pass instead. Its "
         "derivative's time over the default's (below 1: the serial pass is faster), and both times, at the "
         "row's thread count.\n",
         "| workload | size | threads | serial / parallel | parallel (default) | serial |",
         "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        g, ga = counted(r, "ksc", "grad"), counted(r, tool, "grad")
        L.append(f"| {name_of(r)} | {r['label']} | {r.get('threads', '')} | {fmt_r(ratio(ga, g))} | {fmt_t(g)} | "
                 f"{fmt_t(ga)} |")
    return L


def reassociate_table(results):
    """ksc built with `--reassociate` against ksc, on the rows that timed it."""
    tool = "ksc-reassociate"
    rows = rows_with(results, tool, "obj")
    if not rows:
        return []
    L = ["\n## Sums in any order (`ksc build --reassociate`)\n",
         "ksc built with `--reassociate` (docs/native.md, \"Reassociated sums\": the loops over data that only "
         "add into Float sums or keep a maximum are vectorised, their terms combined in another order than the "
         "program's, so results differ from the interpreter's by rounding) against ksc's default, which adds "
         "in the program's order: its time over ksc's (below 1: it pays), objective; derivative, and its times. "
         "Its results are checked against the C reference as ksc's are.\n",
         "| workload | size | obj | deriv | reassociated obj | reassociated deriv |",
         "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        g, o = counted(r, "ksc", "grad"), counted(r, "ksc", "obj")
        ga, oa = counted(r, tool, "grad"), counted(r, tool, "obj")
        L.append(f"| {name_of(r)} | {r['label']} | {fmt_r(ratio(oa, o))} | {fmt_r(ratio(ga, g))} | {fmt_t(oa)} | "
                 f"{fmt_t(ga)} |")
    return L


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(results):
    L = []
    by = {}
    for r in results:
        by.setdefault(r["workload"], []).append(r)

    def R(r, t):
        return ratio(counted(r, t, "grad"), counted(r, t, "obj"))
    gmm = by.get("gmm", [])
    if gmm:
        rk = [R(r, "ksc") for r in gmm]
        native = [x for x in rk if x]
        gm = geomean(native)
        part = "" if len(native) == len(rk) else f" over the {len(native)} of {len(rk)} sizes where it ran"
        L.append(f"- GMM, geometric-mean R <= 3.0: ksc {fmt_r(gm) if gm else 'not measured'}{part}; "
                 f"C ref {fmt_r(geomean([R(r, 'ref') for r in gmm]))}, JAX {fmt_r(geomean([R(r, 'jax') for r in gmm]))}, "
                 f"PyTorch {fmt_r(geomean([R(r, 'torch') for r in gmm]))}.")
        ob = geomean([ratio(counted(r, 'ksc', 'obj'), counted(r, 'ref', 'obj')) for r in gmm])
        L.append(f"- GMM, ksc / reference <= 1.3 (derivative), <= 1.1 (objective): objective geometric mean "
                 f"{fmt_r(ob)}; derivative {'not measured' if not native else fmt_r(geomean([ratio(counted(r, 'ksc', 'grad'), counted(r, 'ref', 'grad')) for r in gmm])) + part}.")
        for r in gmm:
            if "d=64" in r["label"]:
                x = ratio(counted(r, "ksc", "grad"), counted(r, "jax", "grad"))
                L.append(f"- GMM {r['label']}, ksc / JAX <= 2 (derivative): "
                         f"{fmt_r(x) if x else 'not measured (ksc failed: see Failures)'}.")
    lse = by.get("lse", [])
    for r in lse:
        L.append(f"- LSE {r['label']}: R ksc {fmt_r(R(r, 'ksc'))} (target <= 5; <= 1.3 at n = 1.28M), C ref "
                 f"{fmt_r(R(r, 'ref'))}, JAX {fmt_r(R(r, 'jax'))}, PyTorch {fmt_r(R(r, 'torch'))}.")
    for r in by.get("lstm", []):
        L.append(f"- LSTM {r['label']}: R <= 2.8: ksc {fmt_r(R(r, 'ksc')) if r['has_grad'] else 'not measured (derivative not native)'}; "
                 f"C ref {fmt_r(R(r, 'ref'))}, JAX {fmt_r(R(r, 'jax'))}, PyTorch {fmt_r(R(r, 'torch'))}; "
                 f"objective ksc / ref {fmt_r(ratio(counted(r, 'ksc', 'obj'), counted(r, 'ref', 'obj')))}.")
    for r in by.get("lstm", []):
        mk, mr = r["mem"].get("ksc"), r["mem"].get("ref")
        if mk and mr:
            L.append(f"- LSTM {r['label']} memory (<= 2x the minimal tape): peak resident set ksc {mk / 1024:.0f} MiB, "
                     f"C reference (which stores the gate values of every step) {mr / 1024:.0f} MiB.")
    # HT: the Jacobian (3N x 26, or 28) against the objective (the 3N residuals).
    for r in by.get("hand", []):
        L.append(f"- HT {name_of(r).split()[1]} {r['label']}: R <= 15: ksc {fmt_r(R(r, 'ksc')) if r['has_grad'] else 'not measured (derivative not native)'}; "
                 f"C ref {fmt_r(R(r, 'ref'))}, JAX {fmt_r(R(r, 'jax'))}, PyTorch {fmt_r(R(r, 'torch'))}; "
                 f"ksc / ref {fmt_r(ratio(counted(r, 'ksc', 'grad'), counted(r, 'ref', 'grad')))} (Jacobian), "
                 f"{fmt_r(ratio(counted(r, 'ksc', 'obj'), counted(r, 'ref', 'obj')))} (objective); "
                 f"ksc / JAX {fmt_r(ratio(counted(r, 'ksc', 'grad'), counted(r, 'jax', 'grad')))}, "
                 f"ksc / PyTorch {fmt_r(ratio(counted(r, 'ksc', 'grad'), counted(r, 'torch', 'grad')))}.")
    ba = by.get("ba", [])
    if ba:
        def ba_cell(r):
            return (f"{r['label'].split(' ')[0]} {fmt_r(R(r, 'ksc')) if r['has_grad'] else 'not native'} "
                    f"({fmt_r(ratio(counted(r, 'ksc', 'grad'), counted(r, 'ref', 'grad')))})")
        L.append("- BA (Jacobian in CSR, x = p observations in the plot), R <= 8 and ksc / reference <= 1.1 "
                 "(derivative): ksc R (ksc / ref) " + ", ".join(ba_cell(r) for r in ba) + "; geometric-mean R "
                 f"ksc {fmt_r(geomean([R(r, 'ksc') for r in ba]))}, C ref {fmt_r(geomean([R(r, 'ref') for r in ba]))}, "
                 f"JAX {fmt_r(geomean([R(r, 'jax') for r in ba]))}, PyTorch {fmt_r(geomean([R(r, 'torch') for r in ba]))}; "
                 "objective ksc / ref geometric mean "
                 f"{fmt_r(geomean([ratio(counted(r, 'ksc', 'obj'), counted(r, 'ref', 'obj')) for r in ba]))}.")
    micro = [r for r in results if r["workload"] == "micro"]
    scal = []
    last = {}
    for k, a, b in doublings(micro):
        last[k] = (a, b)
    for k, (a, b) in last.items():
        x = ratio(counted(b, "ksc", "grad"), counted(a, "ksc", "grad"))
        scal.append(f"{k} {fmt_r(x)} ({a['label']} -> {b['label']})" + ("" if x is None or x <= 2.2 else " (not met)"))
    if scal:
        L.append("- Micro scaling time(2n)/time(n) <= 2.2, ksc: " + ", ".join(scal) + ".")
    scalar = [r for r in results if r["workload"] in ("gmm", "lse", "lstm") or r["kind"] in ("dot", "max", "nnmf")]
    bad = [f"{name_of(r)} {r['label']} ({fmt_r(R(r, 'ksc'))})" for r in scalar if R(r, "ksc") and R(r, "ksc") > 5]
    L.append(f"- Every scalar gradient R <= 5 (where ksc's derivative runs natively): "
             f"{'met' if not bad else 'not met: ' + ', '.join(bad)}.")
    torch_bad = []
    for r in results:
        x = ratio(counted(r, "ksc", "grad"), counted(r, "torch", "grad"))
        if x and x > 1:
            torch_bad.append(f"{name_of(r)} {r['label']} ({fmt_r(x)})")
    L.append(f"- ksc / PyTorch <= 1 (derivative, where measured): {'met' if not torch_bad else 'not met: ' + ', '.join(torch_bad)}.")
    return L


def plot(results, path):
    """Derivative time against size, log-log, one line per tool and workload family."""
    fams = []
    for r in results:
        f = name_of(r)
        if f not in fams:
            fams.append(f)
    W, H, PW, PH = 1100, 240 * ((len(fams) + 3) // 4) + 60, 250, 180
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="10">',
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="14">Derivative time (s) against size, log scales; one line per tool</text>',
           '<text x="10" y="32" font-size="10">x: problem size (GMM: n K d^2; LSE, micro: n; LSTM: one size; NNMF: columns; HT: points N); '
           'a missing point: the tool failed or was not correct there</text>']
    for i, t in enumerate(TOOLS):
        out.append(f'<rect x="{620 + i * 110}" y="8" width="14" height="4" fill="{COLOURS[t]}"/>'
                   f'<text x="{638 + i * 110}" y="14">{NAMES[t]}</text>')
    for fi, fam in enumerate(fams):
        ox, oy = 20 + (fi % 4) * (PW + 20) + 40, 50 + (fi // 4) * (PH + 60)
        rs = sorted([r for r in results if name_of(r) == fam], key=lambda r: r["size"])
        pts = {t: [(r["size"], counted(r, t, "grad")) for r in rs if counted(r, t, "grad")] for t in TOOLS}
        allp = [p for v in pts.values() for p in v]
        out.append(f'<rect x="{ox}" y="{oy}" width="{PW - 40}" height="{PH - 30}" fill="none" stroke="#888"/>')
        out.append(f'<text x="{ox}" y="{oy - 4}" font-size="11">{fam}</text>')
        if not allp:
            continue
        xs = [math.log10(p[0]) for p in allp]
        ys = [math.log10(p[1]) for p in allp]
        x0, x1 = min(xs) - 0.1, max(xs) + 0.1
        y0, y1 = min(ys) - 0.2, max(ys) + 0.2

        def X(x):
            return ox + (math.log10(x) - x0) / (x1 - x0) * (PW - 40)

        def Y(y):
            return oy + PH - 30 - (math.log10(y) - y0) / (y1 - y0) * (PH - 30)
        for e in range(math.floor(y0), math.ceil(y1) + 1):
            if y0 <= e <= y1:
                yy = oy + PH - 30 - (e - y0) / (y1 - y0) * (PH - 30)
                out.append(f'<line x1="{ox}" x2="{ox + PW - 40}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>'
                           f'<text x="{ox - 4}" y="{yy + 3:.1f}" text-anchor="end">1e{e}</text>')
        for r in rs:
            lx, ly = X(r["size"]), oy + PH - 22
            out.append(f'<text x="{lx:.1f}" y="{ly}" text-anchor="end" font-size="8" '
                       f'transform="rotate(-30 {lx:.1f} {ly})">{r["label"].split(" (")[0].replace("n=1000 ", "")}</text>')
        for t in TOOLS:
            p = pts[t]
            if not p:
                continue
            d = " ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in p)
            out.append(f'<polyline points="{d}" fill="none" stroke="{COLOURS[t]}" stroke-width="1.5"/>')
            for a, b in p:
                out.append(f'<circle cx="{X(a):.1f}" cy="{Y(b):.1f}" r="2.5" fill="{COLOURS[t]}"/>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def write_json(path):
    """Renders PATH.json (a run's, or latest.json) to PATH.md and PATH.svg."""
    with open(path) as f:
        j = json.load(f)
    write(j["results"], path[:-5], j.get("opts") or {}, j.get("elapsed"), j.get("criterion"), date=j.get("date"),
          machine_desc=j.get("machine"), cache=j.get("cache"), runs=j.get("runs"), criterion_run=j.get("criterion_run"))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].endswith(".json") or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    write_json(sys.argv[1])
