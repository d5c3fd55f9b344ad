#!/usr/bin/env bash
# GMM objective: ksc's generated C against the hand-written C reference
# (benches/reference/gmm.c), both compiled with the same flags and timed in
# the same run, interleaved, best of $ROUNDS. Prints the ratio ksc/reference.
#
#   bash benches/gmm.sh                 # sizes n=1000, (d,K) = (10,25) and (64,10)
#   KSC_BENCH_CFLAGS="-O2" bash benches/gmm.sh
#
# Both programs generate the same seeded data and evaluate the objective
# REPS times (data generation is included in both and is small).
set -euo pipefail
cd "$(dirname "$0")/.."
FLAGS="${KSC_BENCH_CFLAGS:--O3 -march=native}"
REPS="${REPS:-100}"
ROUNDS="${ROUNDS:-5}"
CC="${CC:-cc}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release -q || echo "gmm.sh: cargo build failed; using the last built ksc" >&2
KSC=$(cargo metadata --format-version 1 --no-deps | sed -e 's/.*"target_directory":"\([^"]*\)".*/\1/')/release/ksc
# The semantic flags ksc always adds (see ksc-codegen-c/src/driver.rs).
SEMANTIC="-std=gnu99 -ffp-contract=off -fno-math-errno"
$CC $FLAGS $SEMANTIC -o "$tmp/reference" benches/reference/gmm.c -lm

now() { date +%s%N; }
best() { # best wall time in ms of a command, interleaving is done by the caller
    local t0 t1; t0=$(now); "$@" > "$tmp/out.txt"; t1=$(now); echo $(( (t1 - t0) / 1000 ))
}

printf '%-14s %-10s %12s %12s %8s\n' "size (n,K,d)" "checks" "ksc (ms)" "ref (ms)" "ratio"
for size in "1000 25 10" "1000 10 64"; do
    read -r n k d <<< "$size"
    sed -e "s/(n 1000) (k 25) (d 10) (reps 20)/(n $n) (k $k) (d $d) (reps $REPS)/" \
        ksc-examples/adbench/gmm.ks > "$tmp/gmm.ks"
    for mode in checked unchecked; do
        extra=""
        [ "$mode" = unchecked ] && extra="--unchecked"
        "$KSC" build "$tmp/gmm.ks" --emit exe -o "$tmp" --cflags "$FLAGS" $extra 2> /dev/null
        # Same result (to the 6 digits ksc prints).
        want=$("$tmp/reference" "$n" "$k" "$d" "$REPS" | head -1 | sed 's/.*: //')
        got=$("$tmp/gmm" | head -1 | sed 's/.*: //')
        awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; s = (a < 0 ? -a : a) + 1; if (d / s > 1e-5) { print "results differ: " a " vs " b; exit 1 } }'
        kbest=""; rbest=""
        for _ in $(seq "$ROUNDS"); do
            t=$(best "$tmp/gmm"); [ -z "$kbest" ] || [ "$t" -lt "$kbest" ] && kbest=$t
            t=$(best "$tmp/reference" "$n" "$k" "$d" "$REPS"); [ -z "$rbest" ] || [ "$t" -lt "$rbest" ] && rbest=$t
        done
        awk -v s="$n,$k,$d" -v m="$mode" -v a="$kbest" -v b="$rbest" \
            'BEGIN { printf "%-14s %-10s %12.1f %12.1f %8.3f\n", s, m, a / 1000, b / 1000, a / b }'
    done
done
