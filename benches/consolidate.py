#!/usr/bin/env python3
"""Keeps benches/results/ as two files of data: every run in history.jsonl,
the latest measurement of each row in latest.json (rendered to latest.md and
latest.svg by report.py).

    python3 benches/consolidate.py                 # fold new run files into the history, rewrite latest.*
    python3 benches/consolidate.py --run 2026-11-28 > run.json   # one run's JSON back, as run.py wrote it
    python3 benches/consolidate.py --runs          # the runs in the history, oldest first

A run is what one `benches/run.py` writes: a JSON file TAG.json (TAG is the
date, or --tag) with "results", one record per workload row (workload,
kind, size label; times, errors, memory, ...), and the run's options, time
taken and criterion figures. run.py calls this script's update() after each
run; run alone, it does the same for every TAG.json in the directory:

1. Each TAG.json is folded into history.jsonl: its rows replace any rows of
   the run TAG already there (so a run repeated under the same tag replaces
   the earlier one, as the file did before). Runs recorded before
   2026-11-29 had their finishing time, machine and last-level cache only
   in the header of their report, TAG.md; if TAG.json lacks them and TAG.md
   is next to it, they are read from there (text, not figures; the header's
   "Produced by" paragraph is kept too, as "report_header"). Once the
   history holds the run (checked by reading it back), TAG.json is removed,
   unless --keep.
2. latest.json: for each row (workload, kind, size label), the record of the
   run that measured it last (runs ordered by finishing time), with that
   run named in "run" and described in "runs" (file, finishing time, ksc
   source and revision, machine, command).
3. latest.md and latest.svg, by report.py's write() from latest.json (the
   same as `python3 benches/report.py benches/results/latest.json`).

history.jsonl has one JSON object per line, one line per (run, row), runs
oldest first, rows in the order the run measured them. Each line holds:
"run" (the tag), "finished" (UTC), "revision" (the commit, when ksc was
built from one), "ksc_source", "machine", "row" (its index in the run),
"figures" (what the reports show, unrounded: each tool's objective and
derivative time in seconds that counts, that is, whose output was correct,
"TOOL_obj_s" and "TOOL_deriv_s"; R = derivative / objective "TOOL_R"; and
"ksc/TOOL_deriv", "ksc/TOOL_obj" against the C reference, JAX and PyTorch;
null where not measured), and "result", the run's record verbatim (minimum
and median times and sample counts, errors, memory, compile times,
failures). The first line of a run also has "run_json": the rest of the
run's JSON (options, command, time taken, criterion), so `--run TAG` gives
the run's JSON back and report.py re-renders its full report.

Why JSON lines and not CSV: a run's record is nested (three numbers per
time, errors, memory and failures per tool, options per run) and grows
fields; in JSON lines it is kept whole, every figure as the harness wrote it,
and each run can be rebuilt; one line per row still greps (`grep
'"run": "2026-11-28"'`, `grep '"label": "ba5'`) and diffs as appended
lines, and a CSV is one list comprehension away. Standard library only.
"""
import argparse
import json
import os
import re
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH, "results")
HISTORY = "history.jsonl"
LATEST = "latest"  # latest.json, latest.md, latest.svg
TOOLS = ["ksc", "ref", "jax", "torch"]
# The order of the harness's workloads (run.py's configs), for latest.*.
WORKLOADS = ["gmm", "lse", "lstm", "micro", "hand", "ba", "project"]

sys.path.insert(0, BENCH)
import report  # noqa: E402


# ------------------------------------------------------------------ runs
def from_report(md_path):
    """(finished, machine, cache, header) from a report report.py wrote (header:
    its "Produced by" paragraph, which some runs annotated by hand), or Nones."""
    finished = machine = cache = header = None
    try:
        with open(md_path) as f:
            text = f.read()
    except OSError:
        return finished, machine, cache, header
    m = re.match(r"# Benchmarks, (\d{4}-\d\d-\d\d \d\d:\d\d UTC)\n", text)
    if m:
        finished = m.group(1)
    m = re.search(r"^Produced by .*? in [\d.]+ min on (.*?)\. ksc built from .*$", text, re.M)
    if m:
        machine, header = m.group(1), m.group(0)
    m = re.search(r"last-level cache \((.*?); at n = 10\^6", text)
    if m:
        cache = m.group(1)
    return finished, machine, cache, header


def revision(ksc_source):
    """The commit ksc was built from, when the run says so ("commit 3e9123d ..."); else None."""
    m = re.match(r"commit ([0-9a-f]{7,40})\b", ksc_source or "")
    return m.group(1) if m else None


def figures(r):
    """The figures of one row as the reports show them (report.py's rules), unrounded."""
    out = {}
    for t in TOOLS:
        o, g = report.counted(r, t, "obj"), report.counted(r, t, "grad")
        out[f"{t}_obj_s"], out[f"{t}_deriv_s"], out[f"{t}_R"] = o, g, report.ratio(g, o)
    for t in TOOLS[1:]:
        out[f"ksc/{t}_deriv"] = report.ratio(report.counted(r, "ksc", "grad"), report.counted(r, t, "grad"))
        out[f"ksc/{t}_obj"] = report.ratio(report.counted(r, "ksc", "obj"), report.counted(r, t, "obj"))
    return out


def rows_of_run(directory, tag, j, known=None):
    """The history lines of a run's JSON j. known: the run's first line already
    in the history (its metadata kept where j lacks it)."""
    known = known or {}
    finished, machine, cache = j.get("date"), j.get("machine"), j.get("cache")
    rest = {k: v for k, v in j.items() if k != "results"}
    src = (j.get("opts") or {}).get("ksc_source")
    if not (finished and machine):
        f2, m2, c2, header = from_report(os.path.join(directory, tag + ".md"))
        finished = finished or f2 or known.get("finished")
        machine = machine or m2 or known.get("machine")
        cache = cache or c2 or (known.get("run_json") or {}).get("cache")
        # Kept in the history's copy of the run (report.py reads them from there).
        for k, v in (("date", finished), ("machine", machine), ("cache", cache), ("report_header", header)):
            if v is not None:
                rest.setdefault(k, v)
    lines = []
    for i, r in enumerate(j["results"]):
        line = dict(run=tag, finished=finished, revision=revision(src), ksc_source=src, machine=machine, row=i,
                    figures=figures(r), result=r)
        if i == 0:
            line["run_json"] = rest
        lines.append(line)
    return lines


def run_key(lines):
    """Runs in order of finishing (a run without a known time: its tag's date, before that day's timed runs)."""
    return (lines[0]["finished"] or lines[0]["run"][:10], lines[0]["run"])


def read_history(directory):
    """{tag: [lines]} of history.jsonl."""
    runs = {}
    path = os.path.join(directory, HISTORY)
    if os.path.exists(path):
        with open(path) as f:
            for n, text in enumerate(f, 1):
                if text.strip():
                    line = json.loads(text)
                    runs.setdefault(line["run"], []).append(line)
    for tag, lines in runs.items():
        lines.sort(key=lambda l: l["row"])
        if [l["row"] for l in lines] != list(range(len(lines))) or "run_json" not in lines[0]:
            sys.exit(f"error: {path}: the run {tag} is not whole (rows {[l['row'] for l in lines]})")
    return runs


def run_json(lines):
    """A run's JSON back from its history lines."""
    j = dict(lines[0]["run_json"])
    j["results"] = [l["result"] for l in lines]
    return j


def write_if_changed(path, text):
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:
        with open(path, "w") as f:
            f.write(text)
        return True
    return False


def run_files(directory):
    """The run files of the directory: every NAME.json but latest.json."""
    return sorted(f[:-5] for f in os.listdir(directory)
                  if f.endswith(".json") and f != LATEST + ".json" and not f.startswith("."))


# ------------------------------------------------------------------ latest
def latest(runs):
    """latest.json's content from {tag: lines}."""
    order = sorted(runs.values(), key=run_key)
    best = {}  # (workload, kind, label) -> line
    for lines in order:
        for l in lines:
            r = l["result"]
            best[(r["workload"], r["kind"], r["label"])] = l
    # Rows in the order of the newest run that has them; rows no newer run
    # has go after the last row of their kind (else of their workload).
    keys = []
    for lines in reversed(order):
        for l in lines:
            r = l["result"]
            k = (r["workload"], r["kind"], r["label"])
            if k in keys:
                continue
            same = [i for i, q in enumerate(keys) if q[:2] == k[:2]] or [i for i, q in enumerate(keys) if q[0] == k[0]]
            if same:
                keys.insert(same[-1] + 1, k)
            else:
                keys.append(k)
    rank = {w: i for i, w in enumerate(WORKLOADS)}
    keys.sort(key=lambda k: rank.get(k[0], len(WORKLOADS)))  # stable: keeps the order within a workload
    results = []
    used = []
    for k in keys:
        l = best[k]
        results.append(dict(l["result"], run=l["run"]))
        if l["run"] not in used:
            used.append(l["run"])
    described = []
    for lines in order:
        tag = lines[0]["run"]
        if tag not in used:
            continue
        j = lines[0]["run_json"]
        o = j.get("opts") or {}
        described.append(dict(run=tag, file=tag + ".json", finished=lines[0]["finished"],
                              revision=lines[0]["revision"], ksc_source=lines[0]["ksc_source"],
                              machine=lines[0]["machine"], cache=j.get("cache"), command=o.get("command"),
                              elapsed=j.get("elapsed"), rows=sum(1 for r in results if r["run"] == tag)))
    budgets = {tuple((runs[u["run"]][0]["run_json"].get("opts") or {}).get(k) for k in ("min_time", "max_samples", "budget"))
               for u in described}
    ms, mx, bd = budgets.pop() if len(budgets) == 1 else (None, None, None)
    # The micro-benchmarks' cache note: their runs' last-level cache, when they agree.
    caches = {u["cache"] for u in described if any(r["run"] == u["run"] and r["workload"] == "micro" for r in results)}
    crit = [lines for lines in order if lines[0]["run_json"].get("criterion")]
    return dict(
        about="The latest measurement of each workload row, from benches/results/history.jsonl "
              "(python3 benches/consolidate.py). Each record is the run's, verbatim, plus \"run\": the run it is "
              "from, described in \"runs\". Rendered by report.py to latest.md and latest.svg.",
        date=max((u["finished"] or "" for u in described), default=None),
        cache=caches.pop() if len(caches) == 1 else None,
        opts=dict(command="python3 benches/consolidate.py", min_time=ms, max_samples=mx, budget=bd),
        runs=described,
        results=results,
        criterion=crit[-1][0]["run_json"]["criterion"] if crit else None,
        criterion_run=crit[-1][0]["run"] if crit else None,
    )


# ------------------------------------------------------------------ update
def dumps_line(line):
    return json.dumps(line, ensure_ascii=False, sort_keys=False)


def update(directory=RESULTS, keep=False, log=None):
    """Folds every run file of DIRECTORY into its history.jsonl, rewrites
    latest.{json,md,svg}, and removes the folded run files (unless keep).
    Returns the names of the files it changed."""
    log = log or (lambda *a: print(*a, file=sys.stderr))
    runs = read_history(directory)
    files = run_files(directory)
    for tag in files:
        with open(os.path.join(directory, tag + ".json")) as f:
            j = json.load(f)
        if "results" not in j:
            sys.exit(f"error: {tag}.json is not a run of benches/run.py (no \"results\")")
        known = runs[tag][0] if tag in runs else None
        runs[tag] = rows_of_run(directory, tag, j, known)
    changed = []
    text = "".join(dumps_line(l) + "\n" for lines in sorted(runs.values(), key=run_key) for l in lines)
    if write_if_changed(os.path.join(directory, HISTORY), text):
        changed.append(HISTORY)
    # Read the history back: every folded run must come back as its file.
    back = read_history(directory)
    for tag in files:
        with open(os.path.join(directory, tag + ".json")) as f:
            j = json.load(f)
        got = run_json(back[tag])
        if got["results"] != j["results"] or any(got.get(k) != v for k, v in j.items() if k != "results"):
            sys.exit(f"error: the history does not give {tag}.json back; nothing removed")
    lj = latest(back)
    if write_if_changed(os.path.join(directory, LATEST + ".json"), json.dumps(lj, indent=1, ensure_ascii=False) + "\n"):
        changed.append(LATEST + ".json")
    before = {}
    for ext in (".md", ".svg"):
        p = os.path.join(directory, LATEST + ext)
        before[ext] = open(p).read() if os.path.exists(p) else None
    report.write_json(os.path.join(directory, LATEST + ".json"))
    for ext in (".md", ".svg"):
        if open(os.path.join(directory, LATEST + ext)).read() != before[ext]:
            changed.append(LATEST + ext)
    if not keep:
        for tag in files:
            os.remove(os.path.join(directory, tag + ".json"))
            log(f"folded {tag}.json into {HISTORY} (removed it; `consolidate.py --run {tag}` gives it back)")
    return changed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=RESULTS, help="the results directory (default benches/results)")
    ap.add_argument("--keep", action="store_true", help="do not remove the run files folded into the history")
    ap.add_argument("--run", metavar="TAG", help="print the run TAG's JSON, rebuilt from the history, and stop")
    ap.add_argument("--runs", action="store_true",
                    help="list the runs of the history (tag, finished, revision, rows, machine) and stop")
    a = ap.parse_args()
    if a.run or a.runs:
        runs = read_history(a.dir)
        if a.runs:
            for lines in sorted(runs.values(), key=run_key):
                l = lines[0]
                print(f"{l['run']}\t{l['finished']}\t{l['revision'] or l['ksc_source']}\t{len(lines)} rows\t{l['machine']}")
            return
        if a.run not in runs:
            sys.exit(f"error: no run {a.run} in {os.path.join(a.dir, HISTORY)} (see --runs)")
        print(json.dumps(run_json(runs[a.run]), indent=1, ensure_ascii=False))
        return
    changed = update(a.dir, keep=a.keep)
    print("changed: " + (", ".join(changed) if changed else "nothing"), file=sys.stderr)


if __name__ == "__main__":
    main()
