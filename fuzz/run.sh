#!/usr/bin/env bash
# Coverage-guided fuzzing of ksc (issue 38): runs each fuzz target of
# fuzz/fuzz_targets/ for SECONDS (default 60) with cargo-fuzz (libFuzzer)
# and prints, per target, the inputs executed and what was found.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     targets: reader checker derive native
#
# Needs a nightly Rust toolchain (cargo-fuzz builds with sanitizer-coverage
# flags that stable rustc refuses) and a C compiler; installs cargo-fuzz
# from crates.io if it is missing. The seed corpus is made from
# ksc-examples/ on first use (fuzz/corpus/TARGET, not committed). Findings
# go to fuzz/artifacts/TARGET/ (crash-*, timeout-*, oom-*), logs to
# fuzz/logs/TARGET.log. Reproduce one with
#   cd fuzz && cargo +nightly fuzz run -s none --debug-assertions TARGET artifacts/TARGET/FILE
# and keep it as a regression test in tests/fuzz-regressions/ (see its README).
set -euo pipefail

SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(reader checker derive native)
fi

FUZZ_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$FUZZ_DIR")
cd "$FUZZ_DIR"

# A nightly toolchain, through rustup or as the default toolchain.
if cargo +nightly --version >/dev/null 2>&1; then
    CARGO=(cargo +nightly)
elif cargo --version 2>/dev/null | grep -q nightly; then
    CARGO=(cargo)
else
    cat >&2 <<'EOF'
error: fuzzing needs a nightly Rust toolchain, and this machine has none.
  cargo-fuzz (libFuzzer) instruments the code with flags that only nightly
  rustc accepts. Install one with `rustup toolchain install nightly` where
  rustup can download toolchains, then run fuzz/run.sh again.
  Without nightly, the random-input tests on stable still run:
    cargo test --test random_input --test native_mutants
EOF
    exit 2
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz from crates.io (once)..." >&2
    cargo install cargo-fuzz --version 0.13.2 --locked
fi

if ! command -v "${CC:-cc}" >/dev/null 2>&1; then
    echo "warning: no C compiler (\$CC, else cc): the native target will compare nothing" >&2
fi

# Per target: the longest input, and how long one may run before it is a
# finding (a timeout).
max_len() { case $1 in reader) echo 4096 ;; *) echo 16384 ;; esac; }
timeout_of() { case $1 in native) echo 60 ;; *) echo 20 ;; esac; }

echo "building the fuzz targets (nightly, no sanitizer, debug assertions on)..." >&2
"${CARGO[@]}" fuzz build -s none --debug-assertions

# The seed corpus: the example programs, once per target. libFuzzer runs
# every seed before it mutates any, so the targets past the reader leave
# out ksc-examples/ad/ and ksc-examples/adbench/, whose derivations take
# seconds each (the top-level examples have gdefs of every kind), and the
# native target the programs without a `main`.
for t in "${TARGETS[@]}"; do
    if [ ! -d "corpus/$t" ] || [ -z "$(ls -A "corpus/$t")" ]; then
        mkdir -p "corpus/$t"
        if [ "$t" = reader ]; then
            seeds=$(find "$ROOT/ksc-examples" -name '*.ks')
        else
            seeds=$(find "$ROOT/ksc-examples" -maxdepth 1 -name '*.ks' -size -8k)
        fi
        for f in $seeds; do
            if [ "$t" = native ] && ! grep -q '(def main ' "$f"; then
                continue
            fi
            rel=${f#"$ROOT/ksc-examples/"}
            cp "$f" "corpus/$t/${rel//\//_}"
        done
    fi
done

mkdir -p logs
export KSC_FUZZ_DIR="$FUZZ_DIR/target/native-runs"
mkdir -p "$KSC_FUZZ_DIR"
summary=()
for t in "${TARGETS[@]}"; do
    mkdir -p "artifacts/$t"
    rm -f "$KSC_FUZZ_DIR/compared"
    before=$(ls "artifacts/$t" | wc -l)
    echo "fuzzing $t for ${SECONDS_PER_TARGET}s (log: fuzz/logs/$t.log)..." >&2
    # One job at a time (-fork=1) that goes on past a finding, so one run
    # reports every kind of crash it meets; memory and input size bounded.
    "${CARGO[@]}" fuzz run -s none --debug-assertions "$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" -timeout="$(timeout_of "$t")" \
        -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -artifact_prefix="artifacts/$t/" >"logs/$t.log" 2>&1 || true
    # The last status line: "#EXECS: cov: .. corp: .. exec/s: .. oom/timeout/crash: a/b/c time: ..".
    last=$(grep -E '^#[0-9]+:' "logs/$t.log" | tail -1 || true)
    execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
    found=$(sed -nE 's/.*oom\/timeout\/crash: ([0-9]+\/[0-9]+\/[0-9]+).*/\1/p' <<<"$last")
    after=$(ls "artifacts/$t" | wc -l)
    line=$(printf '%-8s executions: %-8s oom/timeout/crash: %-8s new artifacts: %s' "$t" "${execs:-?}" "${found:-?}" "$((after - before))")
    if [ "$t" = native ]; then
        line="$line (run natively and by the interpreter, and compared: $(cat "$KSC_FUZZ_DIR/compared" 2>/dev/null | wc -l))"
    fi
    summary+=("$line")
done

echo
echo "fuzzing summary (${SECONDS_PER_TARGET}s per target; findings in fuzz/artifacts/TARGET/):"
printf '  %s\n' "${summary[@]}"
