#!/usr/bin/env bash
# Wall time of the programs in this directory at 1 and 2 threads (and
# more, up to the machine's cores), best of 3 runs each, after one warm-up
# run: the 2-thread speedup of native code's parallel loops (issue 34).
# Prints the CPU model and its vector extensions first. Usage:
#     benches/parallel/speedup.sh [ksc binary]
set -euo pipefail
cd "$(dirname "$0")"
KSC=${1:-../../target/release/ksc}
grep -m1 "model name" /proc/cpuinfo
grep -m1 -o -w 'avx2\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
out=$(mktemp -d)
best() { # best of 3 wall times of "$@", in seconds
    local b=""
    for _ in 1 2 3; do
        local s e
        s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N)
        b=$(echo "$s $e $b" | awk '{t=$2-$1; if ($3=="" || t<$3) print t; else print $3}')
    done
    echo "$b"
}
for f in *.ks; do
    name=${f%.ks}
    "$KSC" build "$f" --emit exe -o "$out" > /dev/null 2> "$out/build.log" || { cat "$out/build.log"; exit 1; }
    OMP_NUM_THREADS=1 "$out/$name" > /dev/null
    t1=$(OMP_NUM_THREADS=1 best "$out/$name")
    line="$name: 1 thread ${t1}s"
    for t in $(seq 2 "$(nproc)"); do
        tt=$(OMP_NUM_THREADS=$t best "$out/$name")
        line="$line, $t threads ${tt}s (speedup $(echo "$t1 $tt" | awk '{printf "%.2f", $1/$2}'))"
    done
    echo "$line"
done
rm -rf "$out"
