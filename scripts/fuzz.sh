#!/bin/bash
# scripts/fuzz.sh [SECONDS] - build the libFuzzer targets (fuzz/; clang, -Dfuzz=true) in
# build-fuzz/ (or $FUZZ_BUILD) and run each for SECONDS (default 60), one per core at a time, from its
# committed seeds (fuzz/corpus/<name>/); prints the executions per target. Exits 1 on any
# finding (crash, sanitizer report, violated property, leak, slow input); the input that found
# it is left in <build>/fuzz-out/<name>/ beside the log. New inputs go to
# <build>/fuzz-out/<name>/corpus/, never into the committed seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
case $secs in '' | *[!0-9]*)
    echo "usage: scripts/fuzz.sh [SECONDS]" >&2
    exit 2
    ;;
esac

# The build's output goes to a log, shown only when it fails.
mkdir -p "$build"
blog=$build/fuzz-build.log
if ! {
    if [ -d "$build/meson-private" ]; then
        meson setup --reconfigure "$build" -Dfuzz=true
    else
        CC=clang CXX=clang++ meson setup "$build" -Dfuzz=true -Dtests=disabled
    fi && meson compile -C "$build" fuzz
} >"$blog" 2>&1; then
    cat "$blog" >&2
    echo "scripts/fuzz.sh: building the fuzz targets failed" >&2
    exit 1
fi

targets=()
for exe in "$build"/fuzz/fuzz-*; do
    if [ -f "$exe" ] && [ -x "$exe" ]; then targets+=("${exe##*/fuzz-}"); fi
done
if [ ${#targets[@]} -eq 0 ]; then
    echo "scripts/fuzz.sh: no targets built in $build/fuzz" >&2
    exit 1
fi

# Each target is single-threaded: run one per core (CI's 2 cores halve the stage), each writing
# its exit status beside its log.
run_target() {
    local t=$1 out=$build/fuzz-out/$1 rc=0
    mkdir -p "$out/corpus"
    rm -f "$out/fuzz.rc"
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/fuzz/fuzz-$t" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$out/" "$out/corpus" "fuzz/corpus/$t" >"$out/fuzz.log" 2>&1 || rc=$?
    echo $rc >"$out/fuzz.rc"
}
jobs_max=$(nproc 2>/dev/null || echo 1)
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    run_target "$t" &
done
wait

failed=0
printf '%-12s %12s %8s %10s  %s\n' target execs seconds execs/s result
for t in "${targets[@]}"; do
    out=$build/fuzz-out/$t
    log=$out/fuzz.log
    rc=$(cat "$out/fuzz.rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        result=ok
    else
        result="FINDING (exit $rc; log $log)"
        failed=1
    fi
    printf '%-12s %12s %8s %10s  %s\n' "$t" "${execs:-?}" "${took:-?}" "${rate:-?}" "$result"
    if [ $rc -ne 0 ]; then
        grep -E 'ERROR:|property violated|runtime error|SUMMARY|Test unit written' "$log" |
            head -10 | sed 's/^/    /'
    fi
done
exit $failed
