#!/bin/bash
# gpu-check.sh - the one-shot check of kiln on a real NVIDIA GPU: build kiln there, list the
# devices, run kiln-bench, run the same work through PyTorch on the same GPU, then the test suites
# on gpu:0 with the time left, and write one report (kiln / PyTorch ratios among it).
#
# Usage: scripts/gpu-check.sh [--standin] [--quick] [--budget SECONDS] [--suites "NAME ..."]
#                             [--jobs N] [--no-bench] [--reuse-build] [--setup-only]
#   (no flag)      on a machine with an NVIDIA GPU and its driver but possibly no OpenCL ICD
#                  loader, no /etc/OpenCL/vendors/nvidia.icd, no pkg-config and no package
#                  registry: what is missing comes from .carry/gpu (scripts/gpu-carry.sh) or from
#                  CUDA's own libOpenCL and headers; every optional part (CLBlast, Check, jansson)
#                  is built where it is found. Needs no network.
#   --standin      on a machine without a GPU: Oclgrind alone (a simulated GPU-type device) is
#                  the gpu:0, with NVIDIA-like limits; kiln is built from the system's packages. CI
#                  runs `--standin --quick --budget 300` (tests/meson.build: gpu-check-standin).
#   --budget S     the whole run's time, in seconds (default 480, for a 600 s command): each step
#                  gets the smaller of its own limit and the time left, 15 s stay for the report.
#                  Order: environment, build, kiln-info (plain, --json, --check), kiln-bench at
#                  GPU sizes, the PyTorch rows, the report, then the test suites in the time left.
#   --quick        small sizes: a few suites, kiln-bench --quick -r 1.
#   --suites L     the test names to run (meson test names), instead of the GPU list below.
#   --jobs N       suites run at once (default: 4 with 8 or more cores, else 1); suites marked
#                  serial in the list run alone.
#   --no-bench     skip kiln-bench and the PyTorch rows (a second run for the tests alone).
#   --reuse-build  keep an existing build folder (no fresh setup; ninja brings it up to date).
#   --setup-only   stop after `meson setup` (CI checks that the NVIDIA path configures).
# Environment: OUT (report folder, default ./gpu-out), GPU_CHECK_BUILD (build folder, default
# build-gpu; its scratch files go to the folder beside it, BUILD-work). For CI checks of the
# NVIDIA path on a machine without one: GPU_CHECK_NVIDIA_LIB (the OpenCL driver library instead
# of libnvidia-opencl.so.1), GPU_CHECK_CARRY (the carry's root folder, or 'none'),
# GPU_CHECK_CUDA (the CUDA folders searched for libOpenCL and CL/cl.h).
#
# $OUT holds at most 7 files (the GPU machine returns at most 8, each at most 16 MiB; a log over
# 16 MiB loses its middle): gpu-report.json (everything, machine-readable), gpu-summary.txt (what
# a person reads first), gpu-check.log (every step's output, as it runs), tests.log (each suite's
# meson test output), testlog.txt (meson's full logs of the suites), profile-table.txt and
# profile-trace.json (kiln's profiler over the classifier's last training epoch on gpu:0: the
# per-op table of device times and its Chrome trace, issue 26). The report is rewritten
# after every step and from the exit and TERM/INT/HUP traps, so a run killed at any point still
# leaves both report files with what it got. Exit: 0, 1 if a step or suite failed or timed out
# (skipped ones do not count), 2 on bad usage, 128+N when killed by signal N.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }
standin=0 quick=0 budget=480 suites_arg="" jobs="" nobench=0 reuse=0 setup_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --standin) standin=1 ;;
    --quick) quick=1 ;;
    --budget) shift; budget=${1:-} ;;
    --budget=*) budget=${1#--budget=} ;;
    --suites) shift; suites_arg=${1:-} ;;
    --jobs) shift; jobs=${1:-} ;;
    --no-bench) nobench=1 ;;
    --reuse-build) reuse=1 ;;
    --setup-only) setup_only=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$budget" in '' | *[!0-9]*) echo "gpu-check: --budget needs whole seconds" >&2; exit 2 ;; esac
if [ "$budget" -lt 30 ]; then echo "gpu-check: --budget must be at least 30 s" >&2; exit 2; fi
ncpu=$(nproc 2>/dev/null || echo 1)
[ -n "$jobs" ] || jobs=$((ncpu >= 8 ? 4 : 1))
case "$jobs" in '' | 0 | *[!0-9]*) echo "gpu-check: --jobs needs a number >= 1" >&2; exit 2 ;; esac

start=$(date +%s)
deadline=$((start + budget))
reserve=15 # seconds kept for the report at the end

OUT=${OUT:-$root/gpu-out}
build=${GPU_CHECK_BUILD:-build-gpu}
mkdir -p "$OUT" "$(dirname "$build")" || exit 2
OUT=$(cd "$OUT" && pwd)
build=$(cd "$(dirname "$build")" && pwd)/$(basename "$build")
work=$build-work # scratch: vendors, .pc files, step outputs; kept (nothing is deleted at exit)
rm -f "$OUT"/gpu-report.json "$OUT"/gpu-summary.txt "$OUT"/gpu-check.log "$OUT"/tests.log \
    "$OUT"/testlog.txt "$OUT"/.gpu-report.json.tmp "$OUT"/.gpu-summary.txt.tmp \
    "$OUT"/profile-table.txt "$OUT"/profile-trace.json
rm -rf "$work"
mkdir -p "$work/vendors" "$work/pc" "$work/bin" "$work/tests" || exit 2
log=$OUT/gpu-check.log
: >"$log"
: >"$work/steps.tsv"
: >"$work/tests.tsv"
mode=nvidia
[ $standin -eq 1 ] && mode=standin
printf 'mode\t%s\nbudget\t%s\nstart\t%s\njobs\t%s\nquick\t%s\n' "$mode" "$budget" "$start" \
    "$jobs" "$quick" >"$work/run.tsv"

note() { echo "gpu-check: $*" | tee -a "$log" >&2; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
left() { echo $((deadline - reserve - $(date +%s))); }

# ---- the report: rewritten after every step, and from the traps --------------------------------
report_rc=0
report() { # report [final|signal NAME]
    local extra=()
    [ "${1:-}" = final ] && extra=(--final)
    [ "${1:-}" = signal ] && extra=(--final --signal "$2")
    local rc=127
    if command -v python3 >/dev/null 2>&1; then
        timeout 60 python3 "$root/scripts/gpu-report.py" --work "$work" --out "$OUT" "${extra[@]}" \
            2>>"$log"
        rc=$?
    fi
    case $rc in
    0 | 1) report_rc=$rc ;; # written; 1: something failed
    *) report_fallback "$@" ;; # no python3, or the report script broke: the steps table alone
    esac
}
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\000-\037')"; }
report_fallback() {
    local first=1 name status rc secs limit reason
    {
        printf '{"mode": %s, "report_error": %s, "final": %s, "signal": %s, "steps": [' \
            "$(json_str "$mode")" "$(json_str "gpu-report.py did not run; steps only")" \
            "$([ -n "${1:-}" ] && echo true || echo false)" \
            "$([ "${1:-}" = signal ] && json_str "$2" || echo null)"
        while IFS=$'\t' read -r name status rc secs limit reason; do
            [ $first -eq 1 ] || printf ','
            first=0
            printf '\n {"name": %s, "status": %s, "rc": %s, "seconds": %s, "limit": %s, "reason": %s}' \
                "$(json_str "$name")" "$(json_str "$status")" "${rc:-0}" "${secs:-0}" \
                "${limit:-0}" "$(json_str "$reason")"
        done <"$work/steps.tsv"
        printf ']}\n'
    } >"$OUT/gpu-report.json"
    {
        echo "kiln gpu-check ($mode mode): the report script did not run; the steps:"
        sed 's/^/  /' "$work/steps.tsv"
    } >"$OUT/gpu-summary.txt"
    report_rc=1
}

# Files in $OUT stay at most 16 MiB (the GPU machine returns none bigger): a bigger one keeps its
# head and tail around a marker. Called between steps, when no process writes to them.
cap_files() {
    local max=$((16 * 1024 * 1024 - 4096)) f size half
    for f in "$log" "$OUT/tests.log" "$OUT/testlog.txt"; do
        [ -f "$f" ] || continue
        size=$(stat -c %s "$f" 2>/dev/null || echo 0)
        [ "$size" -gt "$max" ] || continue
        half=$((max / 2))
        {
            head -c "$half" "$f"
            printf '\n\n[... gpu-check: %s bytes of the middle left out: the file was %s bytes ...]\n\n' \
                "$((size - 2 * half))" "$size"
            tail -c "$half" "$f"
        } >"$f.cap" && mv "$f.cap" "$f"
    done
}

# ---- steps ----------------------------------------------------------------------------------------
# Each step runs in the background under `timeout` (its own process group), and the script waits
# for it with `wait`, which a TERM interrupts at once: the trap then records the step as
# interrupted, writes the report and stops the step.
cur_name="" cur_pid="" cur_t0=0 cur_limit=0
declare -A job_pid=() job_t0=() job_limit=() job_own=()

record() { # NAME STATUS RC SECONDS LIMIT REASON
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$work/steps.tsv"
}
secs_since() { # T0_MS -> "S.s"
    local ms=$(($(now_ms) - $1))
    echo "$((ms / 1000)).$((ms % 1000 / 100))"
}
skip() { # NAME REASON
    record "$1" skipped 0 0 0 "$2"
    note "$1: skipped ($2)"
}

# step [--stream] NAME LIMIT COMMAND...: --stream sends stdout and stderr to the log as they come;
# otherwise stdout goes to $work/NAME.out (parsed by the report, copied to the log after the
# step) and stderr to the log. Exit status 77 is a skip (the reason: the last line of stdout).
# Returns the command's status, or 3 when the budget left no time.
step() {
    local stream=0
    if [ "$1" = --stream ]; then stream=1; shift; fi
    local name=$1 own=$2 l limit rc status reason=""
    shift 2
    l=$(left)
    limit=$own
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 5 ]; then
        skip "$name" "budget: ${l} s left"
        return 3
    fi
    echo "=== step $name (limit $limit s of its $own s): $*" >>"$log"
    cur_name=$name cur_t0=$(now_ms) cur_limit=$limit
    if [ $stream -eq 1 ]; then
        timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1 </dev/null &
    else
        timeout --kill-after=10 "$limit" "$@" >"$work/$name.out" 2>>"$log" </dev/null &
    fi
    cur_pid=$!
    wait "$cur_pid"
    rc=$?
    cur_pid=""
    if [ $stream -eq 0 ]; then
        echo "--- stdout of $name:" >>"$log"
        cat "$work/$name.out" >>"$log"
    fi
    status=ok
    [ $rc -eq 0 ] || status=fail
    if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$limit" -lt "$own" ]; then
        status=budget reason="stopped at $limit s when the budget ran out (its own limit: $own s)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        status=timeout reason="over its limit of $limit s"
    elif [ $rc -eq 77 ]; then # the command's own skip, its reason as its last line
        status=skipped reason=$(tail -n 1 "$work/$name.out" 2>/dev/null | tr -d '\t' | cut -c1-200)
    fi
    record "$name" "$status" "$rc" "$(secs_since "$cur_t0")" "$limit" "$reason"
    cur_name=""
    note "$name: $status (rc $rc, $(secs_since "$cur_t0") s)"
    cap_files # nothing writes to $OUT between steps
    report
    return $rc
}

# ---- traps: a killed run still leaves the report ---------------------------------------------
finished=0
finish() { # final report, logs capped, summary printed
    [ $finished -eq 1 ] && return
    finished=1
    report "$@"
    cap_files
    cat "$OUT/gpu-summary.txt" 2>/dev/null
}
on_signal() {
    local sig=$1 num=$2 p n st
    trap '' TERM INT HUP
    # The running step and suites first: a harness may follow TERM with KILL within a second
    # (meson test: 0.5 s). timeout forwards the signal to its process group (meson test
    # interrupts its tests: INTERRUPT).
    [ -n "$cur_pid" ] && kill -TERM "$cur_pid" 2>/dev/null
    for p in "${job_pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
    note "received SIG$sig after $(($(date +%s) - start)) s: stopping, writing the report"
    if [ -n "$cur_name" ]; then
        record "$cur_name" interrupted "$((128 + num))" "$(secs_since "$cur_t0")" "$cur_limit" \
            "SIG$sig to gpu-check.sh"
    fi
    for n in "${!job_pid[@]}"; do
        printf '%s\tinterrupted\t%s\t%s\t%s\tSIG%s to gpu-check.sh\n' "$n" "$((128 + num))" \
            "$(secs_since "${job_t0[$n]}")" "${job_limit[$n]}" "$sig" >>"$work/tests.tsv"
    done
    report signal "$sig" # now, in case a KILL follows soon
    for p in $cur_pid "${job_pid[@]}"; do
        for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
    done
    for n in "${!job_pid[@]}"; do
        collect_suite_output "$n"
        # A suite that ended just before the signal keeps the result meson gave it.
        if grep -q -E '^ *[0-9]+/[0-9]+ .* (OK|FAIL|SKIP|TIMEOUT|ERROR) ' "$work/tests/$n.out" &&
            ! grep -q -E '^ *[0-9]+/[0-9]+ .* INTERRUPT ' "$work/tests/$n.out"; then
            st=ok
            grep -q -E '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR) ' "$work/tests/$n.out" && st=fail
            grep -q -E '^ *[0-9]+/[0-9]+ .* SKIP ' "$work/tests/$n.out" && [ $st = ok ] && st=skipped
            printf '%s\t%s\t\t%s\t%s\tended as SIG%s came\n' "$n" "$st" \
                "$(secs_since "${job_t0[$n]}")" "${job_limit[$n]}" "$sig" >>"$work/tests.tsv"
        fi
    done
    finished=0
    finish signal "$sig"
    trap - EXIT
    exit $((128 + num))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP
on_exit() {
    local rc=$?
    finish final
    [ "$report_rc" -eq 0 ] || exit "$report_rc"
    exit "$rc"
}
trap on_exit EXIT

# The plan: every step in value order, so that the report names those that never ran.
plan="env setup compile kiln-info kiln-info-json kiln-info-check"
if [ $standin -eq 1 ]; then
    bench_sections="launch transfer"
else
    bench_sections="transfer launch elementwise matmul startup reduce fusion half overlap"
fi
[ $nobench -eq 1 ] && bench_sections=""
for s in $bench_sections; do plan="$plan bench-$s"; done
[ $nobench -eq 1 ] || plan="$plan torch"
plan="$plan profile tests"
[ $setup_only -eq 1 ] && plan="env setup"
tr ' ' '\n' <<<"$plan" >"$work/plan.txt"
note "mode $mode, budget $budget s, $ncpu cores, $jobs suites at once; report in $OUT"
report

# ---- OpenCL: the ICD loader, the headers, and an ICD file for the driver ----------------------
multiarch=lib/x86_64-linux-gnu
carry=${GPU_CHECK_CARRY:-$root/.carry/gpu/root}
full_opts=()
fatal="" # no driver: the machine's description is still taken, then the run stops
setup_opts=(--buildtype=release -Dtests=auto -Dclblast=auto -Djansson=auto -Dcblas=disabled
    -Dmpi=disabled --wrap-mode=nodownload)
if [ $standin -eq 1 ]; then
    oclgrind=/usr/lib/oclgrind/liboclgrind-rt-icd.so
    [ -e "$oclgrind" ] || fatal="--standin needs Oclgrind ($oclgrind; Debian package oclgrind)"
    echo "$oclgrind" >"$work/vendors/oclgrind.icd"
    export OCLGRIND_MAX_WGSIZE=1024 OCLGRIND_LOCAL_MEM_SIZE=49152 # NVIDIA-like limits
else
    nvlib=${GPU_CHECK_NVIDIA_LIB:-}
    [ -n "$nvlib" ] || nvlib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
        /usr/local/cuda/compat /usr/local/cuda/lib64; do
        [ -z "$nvlib" ] && [ -e "$d/libnvidia-opencl.so.1" ] && nvlib=$d/libnvidia-opencl.so.1
    done
    if [ -z "$nvlib" ]; then
        fatal="libnvidia-opencl.so.1 not found (ldconfig -p, /usr/local/nvidia/lib64, ...): NVIDIA's OpenCL driver is not installed"
    else
        note "NVIDIA OpenCL driver: $nvlib"
        echo "$nvlib" >"$work/vendors/nvidia.icd"
        # The driver's own dependencies (libcuda.so.1, ...) live beside it, maybe off the loader
        # path.
        LD_LIBRARY_PATH=$(dirname "$nvlib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
    # Carried Debian files (scripts/gpu-carry.sh: libOpenCL, headers, CLBlast, Check, jansson,
    # pkgconf): their .pc files find the carry wherever it is (${pcfiledir}), libraries go on
    # the loader path.
    if [ "$carry" != none ] && [ -d "$carry/usr" ]; then
        for pcdir in "$carry/usr/$multiarch/pkgconfig" "$carry/usr/share/pkgconfig"; do
            [ -d "$pcdir" ] && export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
        done
        export LD_LIBRARY_PATH=$carry/usr/$multiarch:$LD_LIBRARY_PATH
        # No pkg-config, or one that does not run: the carried pkgconf.
        if ! pkg-config --version >/dev/null 2>&1 && [ -x "$carry/usr/bin/pkgconf" ]; then
            ln -s "$carry/usr/bin/pkgconf" "$work/bin/pkg-config"
            note "pkg-config: the carried pkgconf"
        fi
        # Everything kiln can use is carried: ask for it, and fall back to what is found.
        full_opts=(-Dtests=enabled -Dclblast=enabled -Djansson=enabled)
        note "carried packages from $carry"
    else
        note "no carry ($carry; make it with scripts/gpu-carry.sh): using what the machine has"
    fi
    # No OpenCL.pc: CUDA ships libOpenCL and the CL headers.
    PATH=$work/bin:$PATH
    if ! PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-} pkg-config --exists OpenCL 2>/dev/null; then
        for c in ${GPU_CHECK_CUDA:-/usr/local/cuda /usr/local/cuda-*}; do
            lib=""
            for l in "$c/lib64/libOpenCL.so" "$c/lib64/libOpenCL.so.1" "$c/targets/x86_64-linux/lib/libOpenCL.so.1"; do
                [ -z "$lib" ] && [ -e "$l" ] && lib=$l
            done
            inc=$c/include
            [ -e "$inc/CL/cl.h" ] || inc=$c/targets/x86_64-linux/include
            if [ -n "$lib" ] && [ -e "$inc/CL/cl.h" ]; then
                # libOpenCL.so.1 alone (no -dev symlink): link it through a folder of our own.
                mkdir -p "$work/cuda-lib"
                ln -sf "$lib" "$work/cuda-lib/libOpenCL.so"
                printf 'Name: OpenCL\nDescription: OpenCL from %s\nVersion: 3.0\nLibs: -L%s -lOpenCL\nCflags: -I%s\n' \
                    "$c" "$work/cuda-lib" "$inc" >"$work/pc/OpenCL.pc"
                export PKG_CONFIG_PATH=$work/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
                LD_LIBRARY_PATH=$(dirname "$lib"):$LD_LIBRARY_PATH
                # Without any pkg-config, Meson finds OpenCL by compiler checks: these paths.
                export CPATH=$inc${CPATH:+:$CPATH} LIBRARY_PATH=$work/cuda-lib${LIBRARY_PATH:+:$LIBRARY_PATH}
                note "OpenCL ICD loader and headers from $c"
                break
            fi
        done
    fi
fi
export PATH=$work/bin:$PATH
export OCL_ICD_VENDORS=$work/vendors
export KILN_DEVICE=gpu:0 KILN_CACHE_DIR=$work/kiln-cache
# The driver's own JIT cache in a fresh folder, so "cold" start-up figures are cold.
export CUDA_CACHE_PATH=$work/cuda-cache
# Python output unbuffered (a killed step keeps what it printed); pip never waits on a network.
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Meson and ninja may be Python packages without their commands on the PATH.
if ! command -v meson >/dev/null 2>&1 && python3 -c 'import mesonbuild' 2>/dev/null; then
    printf '#!/bin/sh\nexec python3 -m mesonbuild.mesonmain "$@"\n' >"$work/bin/meson"
    chmod +x "$work/bin/meson"
fi
if ! command -v ninja >/dev/null 2>&1 && python3 -c 'import ninja' 2>/dev/null; then
    printf '#!/bin/sh\nexec python3 -m ninja "$@"\n' >"$work/bin/ninja"
    chmod +x "$work/bin/ninja"
fi

# ---- the machine ------------------------------------------------------------------------------
env_info() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname: $(uname -srm)"
    echo "cores: $ncpu"
    for c in nvidia-smi gcc cc meson ninja python3 pkg-config clinfo; do
        printf '%s: %s\n' "$c" "$(command -v "$c" || echo missing)"
    done
    echo "gcc --version: $(gcc --version 2>/dev/null | head -1)"
    echo "meson --version: $(meson --version 2>/dev/null)"
    echo "ninja --version: $(ninja --version 2>/dev/null)"
    echo "python3 --version: $(python3 --version 2>&1)"
    echo "OCL_ICD_VENDORS: $OCL_ICD_VENDORS: $(cat "$OCL_ICD_VENDORS"/*.icd 2>/dev/null | tr '\n' ' ')"
    echo "PKG_CONFIG_PATH: ${PKG_CONFIG_PATH:-}"
    echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
    echo "ldconfig OpenCL: $(ldconfig -p 2>/dev/null | grep -i -E 'libOpenCL|libnvidia-opencl|libcuda\.so' | awk '{print $NF}' | tr '\n' ' ')"
    echo "/etc/OpenCL/vendors: $(cd /etc/OpenCL/vendors 2>/dev/null && echo *)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        echo "nvidia-smi -L:"
        timeout 20 nvidia-smi -L 2>&1
        timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
            --format=csv 2>&1
    fi
}
step env 30 bash -c "$(declare -f env_info); ncpu=$ncpu; env_info"
if [ -n "$fatal" ]; then
    note "$fatal"
    record setup fail 1 0 0 "$fatal"
    exit 1 # the EXIT trap writes the report
fi

# ---- build ------------------------------------------------------------------------------------
built=1
if [ $reuse -eq 1 ] && [ -d "$build/meson-private" ]; then
    skip setup "--reuse-build: $build is already set up"
    built=0
else
    rm -rf "$build"
    step setup 120 meson setup "$build" "${setup_opts[@]}" "${full_opts[@]}"
    built=$?
    if [ $built -ne 0 ] && [ ${#full_opts[@]} -gt 0 ]; then
        # Something carried did not work here: configure with what is found (every option auto).
        sed -i 's/^setup$/setup\nsetup-auto/' "$work/plan.txt"
        rm -rf "$build"
        step setup-auto 120 meson setup "$build" "${setup_opts[@]}"
        built=$?
    fi
fi
if [ $setup_only -eq 1 ]; then
    exit # the EXIT trap writes the report
fi
if [ $built -eq 0 ]; then
    # -k 0: everything that builds is built (kiln-info and kiln-bench even when a test fails).
    step --stream compile 300 meson compile -C "$build" --ninja-args=-k0
    built=$?
    if [ $built -ne 0 ] && [ -x "$build/tools/kiln-info" ] && [ -x "$build/tools/kiln-bench" ]; then
        note "the build failed in part: kiln-info and kiln-bench were built, going on"
        built=0
    fi
else
    skip compile "setup failed"
fi

# ---- devices ----------------------------------------------------------------------------------
if [ $built -eq 0 ]; then
    step kiln-info 60 "$build/tools/kiln-info"
    step kiln-info-json 60 "$build/tools/kiln-info" --json
    step kiln-info-check 120 "$build/tools/kiln-info" --check
else
    for s in kiln-info kiln-info-json kiln-info-check; do skip $s "no build"; done
fi

# ---- benchmarks: one process per section, so that a killed run keeps the sections done --------
for s in $bench_sections; do
    if [ $built -ne 0 ]; then
        skip "bench-$s" "no build"
    elif [ $standin -eq 1 ] || [ $quick -eq 1 ]; then
        # Oclgrind runs about 1 us per work-item: small sizes (and no matmul in --standin).
        step "bench-$s" 120 "$build/tools/kiln-bench" --json --quick -r 1 -d gpu:0 "$s"
    else
        case $s in
        matmul | startup) lim=150 ;;
        *) lim=90 ;;
        esac
        step "bench-$s" $lim "$build/tools/kiln-bench" --json -r 5 -d gpu:0 "$s"
    fi
done
if [ $nobench -eq 0 ]; then
    if [ $standin -eq 1 ]; then
        skip torch "standin: gpu:0 is Oclgrind, a PyTorch figure beside it would compare nothing"
    elif ! command -v python3 >/dev/null 2>&1; then
        skip torch "no python3"
    else
        # Exits 77 where python3 has no torch or torch sees no CUDA device: a skip with its reason.
        torch_args=()
        [ $quick -eq 1 ] && torch_args=(--quick)
        step torch 180 python3 scripts/gpu-torch-bench.py "${torch_args[@]}"
    fi
fi

# ---- the profiler: per-kernel device times of a training epoch (issue 26) ----------------------
# examples/classify's last epoch under kiln's profiler: its table (stdout from "profile of") into
# profile-table.txt, its Chrome trace into profile-trace.json. Oclgrind: a tiny model.
if [ $built -ne 0 ]; then
    skip profile "no build"
else
    if [ $standin -eq 1 ]; then
        prof_args=(--epochs 1 --samples 96 --batch 32 --hidden 8)
    else
        prof_args=(--epochs 3)
    fi
    step profile 120 "$build/examples/classify" --device gpu:0 "${prof_args[@]}" \
        --profile "$OUT/profile-trace.json"
    sed -n '/^profile of/,$p' "$work/profile.out" >"$OUT/profile-table.txt" 2>/dev/null || true
fi

# ---- tests, with the time left ----------------------------------------------------------------
# The GPU list: every suite that can pass on a machine whose only device is one GPU, in value
# order, each with its own limit in seconds; 'serial' ones run alone (timing, shared caches);
# 'nostandin' ones are skipped in --standin (kiln-bench's --quick sizes take minutes on
# Oclgrind; the bench steps cover kiln-bench there).
# The suites run under `meson test --setup full` (KILN_TEST_FULL=1: the full tier's sizes; on an
# H200 they took 242 s in all, 4 at a time, before the tiers existed), which also makes the
# full tier's tests (bench-startup-*) runnable by name. Not here:
# the -2dev/-oclgrind/-gpuonly configurations and registry-no-device (they need PoCL or
# Oclgrind), consumers (installs kiln: covered by CI), mpi, gpu-check-* (this script).
gpu_suites="
spec 30
argcheck 30
diskcache-entry 60
kernel-sources 30
symbols 30
headers 60
registry 60
registry-no-platform 30
tensor 90
program 90
creation 90
elementwise 120
reduce 120
shape 120
nn 120
index 120
matmul 150
promote 120
zerodim 90
kernels 180
autograd 180
layers 150
optim 150
checkpoint 90
checkpoint-nojansson 60
scope 90
random 90
diskcache 120
threads 120
kiln-info 120 serial
examples 180 serial
example-custom-kernel 60 serial
safetensors-interop 90 serial
exit 120 serial
bench-startup-launch 120 serial
bench-startup-cache 120 serial
bench-elementwise 60 serial nostandin
bench-reduce 60 serial nostandin
bench-matmul 60 serial nostandin
fusion 240
split 240
faults 90
sweep 300
data 60
torch-interop 120 serial
bench-conv 120 serial nostandin
rnn 120
torch-rnn 120 serial
bench-rnn 120 serial nostandin
halfconv 30
hostpool 30
amp 120
bench-half 60 serial nostandin
"
quick_suites="spec symbols registry tensor program creation"

collect_suite_output() { # NAME: its output into tests.log, meson's log into testlog.txt
    local n=$1
    {
        echo "=== suite $n"
        cat "$work/tests/$n.out" 2>/dev/null
    } >>"$OUT/tests.log"
    # Meson appends the setup's name to the log's: gpu-NAME-full.txt.
    local f
    for f in "$build/meson-logs/gpu-$n-full.txt" "$build/meson-logs/gpu-$n.txt"; do
        if [ -f "$f" ]; then
            {
                echo "=== suite $n"
                cat "$f"
            } >>"$OUT/testlog.txt"
            break
        fi
    done
}

run_tests() {
    local defined want=() n lim ser t names=() limits=() serial=() flag
    # Meson up to 1.x lists "kiln:SUITE / NAME" (or "kiln / NAME"), newer ones "SUITE - kiln:NAME".
    defined=$(meson test -C "$build" --no-rebuild --setup full --list 2>/dev/null |
        sed -E 's/^[^ ]+ - [^ :]+://; s/^.* \/ //')
    if [ -n "$suites_arg" ]; then
        for n in $suites_arg; do want+=("$n"); done
    elif [ $quick -eq 1 ]; then
        for n in $quick_suites; do want+=("$n"); done
    else
        while read -r n lim ser; do [ -n "$n" ] && want+=("$n"); done <<<"$gpu_suites"
        # Tests of this build that the list neither names nor leaves out on purpose: reported,
        # so that new ones get listed.
        for t in $defined; do
            case $t in
            *-2dev | *-oclgrind | *-gpuonly | registry-no-device | consumers | mpi | gpu-check-*) ;;
            *) grep -q "^$t " <<<"$gpu_suites" || echo "$t" ;;
            esac
        done >"$work/unlisted.txt"
    fi
    : >"$work/absent.txt"
    for n in "${want[@]}"; do
        if ! grep -qx -- "$n" <<<"$defined"; then
            echo "$n" >>"$work/absent.txt"
            continue
        fi
        lim=$(awk -v n="$n" '$1 == n {print $2}' <<<"$gpu_suites")
        ser=$(awk -v n="$n" '$1 == n {print $3}' <<<"$gpu_suites")
        flag=$(awk -v n="$n" '$1 == n {print $4}' <<<"$gpu_suites")
        if [ $standin -eq 1 ] && [ "$flag" = nostandin ]; then
            printf '%s\tskipped\t0\t0\t0\tstandin: kiln-bench on Oclgrind takes minutes\n' \
                "$n" >>"$work/tests.tsv"
            echo "$n" >>"$work/suites.skip"
            continue
        fi
        names+=("$n")
        limits+=("${lim:-120}")
        serial+=("${ser:-}")
    done
    { cat "$work/suites.skip" 2>/dev/null; printf '%s\n' "${names[@]}"; } >"$work/suites.txt"
    report
    if [ ${#want[@]} -gt 0 ] && [ ${#names[@]} -eq 0 ] && ! [ -s "$work/suites.skip" ]; then
        note "none of the $((${#want[@]})) suites asked for is in this build's test list" \
            "(meson test --list said: $(head -c 300 <<<"$defined" | tr '\n' ' '))"
        return 1
    fi

    local i=0 total=${#names[@]} l p rc st stop=0 reason
    while [ "$i" -lt "$total" ] || [ ${#job_pid[@]} -gt 0 ]; do
        # Start what may start: a free slot, time left, a serial suite only on an empty pool.
        while [ $stop -eq 0 ] && [ "$i" -lt "$total" ] && [ ${#job_pid[@]} -lt "$jobs" ]; do
            n=${names[$i]}
            if [ "${serial[$i]}" = serial ] && [ ${#job_pid[@]} -gt 0 ]; then break; fi
            l=$(left)
            if [ "$l" -lt 15 ]; then
                stop=1 # the rest never starts: the report names them
                note "$((total - i)) suite(s) not started: $l s left"
                break
            fi
            lim=${limits[$i]}
            [ "$l" -lt "$lim" ] && lim=$l
            echo "=== suite $n started (limit $lim s of its ${limits[$i]} s)" >>"$log"
            timeout --kill-after=10 "$lim" meson test -C "$build" --no-rebuild --setup full \
                --print-errorlogs \
                --logbase "gpu-$n" "$n" >"$work/tests/$n.out" 2>&1 </dev/null &
            job_pid[$n]=$!
            job_t0[$n]=$(now_ms)
            job_limit[$n]=$lim
            job_own[$n]=${limits[$i]}
            printf '%s\tstarted\t\t\t%s\t\n' "$n" "$lim" >>"$work/tests.tsv"
            i=$((i + 1))
            if [ "${serial[$((i - 1))]}" = serial ]; then break; fi
        done
        report
        [ ${#job_pid[@]} -gt 0 ] || break
        wait -n
        for n in "${!job_pid[@]}"; do
            p=${job_pid[$n]}
            kill -0 "$p" 2>/dev/null && continue
            wait "$p"
            rc=$?
            st=ok reason=""
            [ $rc -eq 0 ] || st=fail
            if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                st=timeout reason="over its limit of ${job_limit[$n]} s"
                if [ "${job_limit[$n]}" -lt "${job_own[$n]}" ]; then
                    st=budget reason="stopped when the budget ran out (its own limit: ${job_own[$n]} s)"
                fi
            fi
            grep -q ' SKIP ' "$work/tests/$n.out" && ! grep -q -E ' (OK|FAIL|TIMEOUT|ERROR|INTERRUPT) ' \
                "$work/tests/$n.out" && st=skipped
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$st" "$rc" "$(secs_since "${job_t0[$n]}")" \
                "${job_limit[$n]}" "$reason" >>"$work/tests.tsv"
            note "suite $n: $st (rc $rc, $(secs_since "${job_t0[$n]}") s)"
            unset "job_pid[$n]" "job_t0[$n]" "job_limit[$n]" "job_own[$n]"
            collect_suite_output "$n"
            cap_files # suites write to $work only
        done
    done
    report
    # Failed suites make the tests step fail; suites left for lack of time do not.
    ! awk -F '\t' '$2 == "fail" || $2 == "timeout" {bad = 1} END {exit !bad}' "$work/tests.tsv"
}

if [ $built -ne 0 ]; then
    skip tests "no build"
elif ! meson test -C "$build" --no-rebuild --list >/dev/null 2>&1 ||
    [ -z "$(meson test -C "$build" --no-rebuild --list 2>/dev/null)" ]; then
    skip tests "no tests in this build (Check not found: -Dtests=auto)"
elif [ "$(left)" -lt 15 ]; then
    skip tests "budget: $(left) s left"
else
    echo "=== step tests" >>"$log"
    cur_name=tests cur_t0=$(now_ms) cur_limit=$(left)
    run_tests
    rc=$?
    t0=$cur_t0
    cur_name=""
    record tests "$([ $rc -eq 0 ] && echo ok || echo fail)" $rc "$(secs_since "$t0")" "$cur_limit" ""
fi
# the EXIT trap writes the final report
