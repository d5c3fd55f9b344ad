#!/usr/bin/env python3
"""Interleaved A/B timing of two ksc binaries on the harness's workloads.

    python3 benches/ab.py OLD_KSC NEW_KSC WORKLOAD[,KIND...] [--label TEXT] [--samples N] [--threads 1,2]

Builds each selected row's program (`ksc-examples/adbench/NAME.ks`, `ksc
build --emit so`) with both binaries, each from an empty program cache,
into directories of its own; builds the harness's driver once (against the
new library's header: the two libraries must export the same functions);
checks that both give the same results (within the harness's 1e-8); then
times objective and derivative with both, alternately, in one process of
measurement each (`run.py`'s `time_interleaved`, the old library loaded
through LD_LIBRARY_PATH, as the harness's ablations are), and prints
new/old per row: below 1 the new binary is faster. WORKLOAD and KIND are
`run.py --only`'s names; `--label` keeps rows whose size label contains
the text, not followed by a digit (`n=1000000` is not `n=10000000`). Nothing is written to `results/`.

A way to get the old binary: `git worktree add /tmp/old REV && (cd /tmp/old
&& CARGO_TARGET_DIR=/tmp/old-target cargo build --release)`.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the harness: its configs, builds, workers and timing)


def label_matches(text, label):
    """Whether `label` contains `text` not followed by a digit (so that
    `n=1000000` does not select `n=10000000`)."""
    return re.search(re.escape(text) + r"(?!\d)", label) is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the ksc binary to compare against")
    ap.add_argument("new", help="the ksc binary measured")
    ap.add_argument("only", help="comma-separated workloads or kinds, as run.py --only")
    ap.add_argument("--label", default=None,
                    help="only rows whose size label contains this text, not followed by a digit")
    ap.add_argument("--samples", type=int, default=15, help="timed samples per tool and function (default 15)")
    ap.add_argument("--threads", default=None,
                    help="only rows run on these thread counts (comma-separated; the scan rows have 1 and 2)")
    opts = ap.parse_args()
    opts.min_time, opts.max_samples, opts.budget = 0.1, opts.samples, 60.0
    opts.big = opts.ba_all = False
    wanted = set(opts.only.split(","))
    run.TOOL_NAMES.update(old="the old ksc", new="the new ksc")
    threads = {int(t) for t in opts.threads.split(",")} if opts.threads else None

    workdir = tempfile.mkdtemp(prefix="ksc-ab-")
    datadir = os.path.join(workdir, "data")
    os.makedirs(datadir)
    old, new = run.Build(os.path.abspath(opts.old), os.path.join(workdir, "old")), \
        run.Build(os.path.abspath(opts.new), os.path.join(workdir, "new"))
    for b in (old, new):
        os.makedirs(b.workdir)
    core = max(os.sched_getaffinity(0))
    print(f"{'row':<48} {'which':<5} {'old':>10} {'new':>10} {'new/old':>8}")
    for config in run.configs(opts, datadir):
        workload, name, kind, label, _, path, make = config[:7]
        n_threads = config[7] if len(config) > 7 else 1
        if not (workload in wanted or kind in wanted) or (opts.label and not label_matches(opts.label, label)):
            continue
        if threads and n_threads not in threads:
            continue
        cores = {core} if n_threads == 1 else set(sorted(os.sched_getaffinity(0))[-n_threads:])
        if make and not os.path.exists(path):
            make()
        odir, ograd, _, _, _ = old.ksc_so(name)
        ndir, ngrad, _, _, _ = new.ksc_so(name)
        exe = new.driver(workload, name)
        extra = [kind] if workload in ("micro", "scan") else []
        workers = [run.Worker(t, [exe, "ksc", path] + extra, cores, 600, env={"LD_LIBRARY_PATH": d})
                   for t, d in (("old", odir), ("new", ndir))]
        row = f"{workload} {kind} {label}"
        for which in ("obj", "grad"):
            if which == "grad" and not (ograd and ngrad):
                continue
            outs = []
            for w in workers:
                f = os.path.join(workdir, f"out-{w.tool}-{which}.txt")
                if w.ask(f"out {which} {f}") is None:
                    sys.exit(f"{row}: the {w.tool} library fails on `{which}`: {w.error}")
                outs.append(f if workload in run.STREAMED else run.read_out(f))
            err = run.max_err(outs[0], outs[1])
            if err > run.TOL_KSC:
                print(f"{row:<48} {which:<5} results differ by {err:.2g} (over {run.TOL_KSC:g})")
            t = run.time_interleaved(workers, which, opts)
            o, n = t["old"][0], t["new"][0]
            print(f"{row:<48} {which:<5} {o * 1e3:>8.3f}ms {n * 1e3:>8.3f}ms {n / o:>8.3f}", flush=True)
        for w in workers:
            w.close()
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
