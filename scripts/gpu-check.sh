#!/bin/bash
# gpu-check.sh - the one-shot check of kiln on a real NVIDIA GPU: build kiln there, list the
# devices, run the test suites on gpu:0, run kiln-bench, run the same work through PyTorch on the
# same GPU, and write one report with kiln / PyTorch ratios.
#
# Usage: scripts/gpu-check.sh [--standin] [--quick] [--suites "NAME ..."]
#   (no flag)   on a machine with an NVIDIA GPU and its driver but possibly no OpenCL ICD loader,
#               no /etc/OpenCL/vendors/nvidia.icd and no package registry: what is missing comes
#               from .carry/gpu (made here by scripts/gpu-carry.sh) or from CUDA's own files.
#   --standin   on a machine without a GPU: Oclgrind alone (a simulated GPU-type device) is the
#               gpu:0, with NVIDIA-like limits; kiln is built from the system's packages. CI runs
#               this (tests/meson.build: gpu-check-standin) so the script keeps working.
#   --quick     small sizes: the unit suites and a few device suites, short benchmarks.
#   --suites    the test names to run (meson test names); default: every suite's plain
#               configuration (the -2dev and -oclgrind ones need PoCL).
# Environment: OUT (report folder, default ./gpu-out), GPU_CHECK_BUILD (build folder, default
# build-gpu). Writes $OUT/gpu-report.json, $OUT/gpu-summary.txt, $OUT/gpu-check.log and
# $OUT/testlog.txt; exits 1 if any step failed (skipped steps do not count), 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

standin=0 quick=0 suites=""
while [ $# -gt 0 ]; do
    case "$1" in
    --standin) standin=1 ;;
    --quick) quick=1 ;;
    --suites) shift; suites=${1:-} ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

OUT=${OUT:-$root/gpu-out}
build=${GPU_CHECK_BUILD:-build-gpu}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
log=$OUT/gpu-check.log
steps=$work/steps.tsv
: >"$log"
: >"$steps"
start=$(date +%s)

note() { echo "gpu-check: $*" | tee -a "$log" >&2; }

# step NAME TIMEOUT COMMAND...: run one step under a timeout, its output to the log (and to
# $work/NAME.out), its result to the steps table.
step() {
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s%N)
    echo "=== $name: $*" >>"$log"
    timeout --kill-after=10 "$limit" "$@" >"$work/$name.out" 2>&1
    rc=$?
    cat "$work/$name.out" >>"$log"
    local ms status=ok
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ $rc -eq 0 ] || status=fail
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=timeout; fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$((ms / 1000)).$((ms % 1000 / 100))" >>"$steps"
    note "$name: $status (rc $rc, $((ms / 1000)) s)"
    return $rc
}
skip() { printf '%s\tskipped\t0\t0\t%s\n' "$1" "$2" >>"$steps"; note "$1: skipped ($2)"; }

# ---- OpenCL: the ICD loader, the headers, and an ICD file for the driver ----------------------
mkdir -p "$work/vendors" "$work/pc" "$work/bin"
carry=$root/.carry/gpu/root
multiarch=lib/x86_64-linux-gnu
if [ $standin -eq 1 ]; then
    oclgrind=/usr/lib/oclgrind/liboclgrind-rt-icd.so
    if [ ! -e "$oclgrind" ]; then
        note "--standin needs Oclgrind ($oclgrind; Debian package oclgrind)"
        exit 1
    fi
    echo "$oclgrind" >"$work/vendors/oclgrind.icd"
    export OCLGRIND_MAX_WGSIZE=1024 OCLGRIND_LOCAL_MEM_SIZE=49152 # NVIDIA-like limits
else
    nvlib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
        /usr/local/cuda/compat /usr/local/cuda/lib64; do
        [ -z "$nvlib" ] && [ -e "$d/libnvidia-opencl.so.1" ] && nvlib=$d/libnvidia-opencl.so.1
    done
    if [ -z "$nvlib" ]; then
        note "libnvidia-opencl.so.1 not found (ldconfig -p, /usr/local/nvidia/lib64, ...): NVIDIA's OpenCL driver is not installed"
        exit 1
    fi
    note "NVIDIA OpenCL driver: $nvlib"
    echo "$nvlib" >"$work/vendors/nvidia.icd"
    # Carried Debian files (libOpenCL, headers, CLBlast, Check, pkgconf): .pc files moved to
    # where they were unpacked, libraries on the loader path.
    if [ -d "$carry" ]; then
        for pc in "$carry"/usr/$multiarch/pkgconfig/*.pc "$carry"/usr/share/pkgconfig/*.pc; do
            [ -e "$pc" ] && sed "s|^prefix=/usr|prefix=$carry/usr|" "$pc" >"$work/pc/$(basename "$pc")"
        done
        export LD_LIBRARY_PATH=$carry/usr/$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        command -v pkg-config >/dev/null || ln -s "$carry/usr/bin/pkgconf" "$work/bin/pkg-config"
    else
        note "no .carry/gpu (make it with scripts/gpu-carry.sh): using what the machine has"
    fi
    # No carried loader: CUDA ships libOpenCL and the CL headers.
    if [ ! -e "$work/pc/OpenCL.pc" ]; then
        for c in /usr/local/cuda /usr/local/cuda-*; do
            if [ -e "$c/lib64/libOpenCL.so" ] && [ -e "$c/include/CL/cl.h" ]; then
                printf 'prefix=%s\nName: OpenCL\nDescription: CUDA OpenCL\nVersion: 3.0\nLibs: -L${prefix}/lib64 -lOpenCL\nCflags: -I${prefix}/include\n' \
                    "$c" >"$work/pc/OpenCL.pc"
                export LD_LIBRARY_PATH=$c/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
                note "OpenCL ICD loader and headers from $c"
                break
            fi
        done
    fi
fi
export OCL_ICD_VENDORS=$work/vendors
export PKG_CONFIG_PATH=$work/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PATH=$work/bin:$PATH
export KILN_DEVICE=gpu:0 KILN_CACHE_DIR=$work/kiln-cache
# The driver's own JIT cache in a fresh folder, so "cold" start-up figures are cold.
export CUDA_CACHE_PATH=$work/cuda-cache

# ---- build ------------------------------------------------------------------------------------
clblast=enabled
[ $standin -eq 1 ] && clblast=auto
rm -rf "$build"
step setup 240 meson setup "$build" --buildtype=release -Dtests=enabled -Dclblast=$clblast \
    -Dcblas=disabled &&
    step compile 300 meson compile -C "$build"
built=$?

# ---- devices ----------------------------------------------------------------------------------
if [ $standin -eq 1 ]; then
    skip nvidia-smi "standin: no GPU"
else
    step nvidia-smi 30 nvidia-smi -L
fi
if [ $built -eq 0 ]; then
    step kiln-info 60 "$build/tools/kiln-info"
    step kiln-info-json 60 "$build/tools/kiln-info" --json
    step kiln-info-check 240 "$build/tools/kiln-info" --check
else
    for s in kiln-info kiln-info-json kiln-info-check; do skip $s "build failed"; done
fi

# ---- tests ------------------------------------------------------------------------------------
if [ $built -eq 0 ]; then
    if [ -z "$suites" ]; then
        # Plain configurations only; registry-no-device wants a machine whose only platform has
        # no device, and consumers re-installs kiln (covered by CI).
        suites=$(meson test -C "$build" --list 2>/dev/null | sed 's/^kiln:[a-z]* \/ //; s/^kiln \/ //' |
            grep -v -e '-2dev$' -e '-oclgrind$' -e '^registry-no-device$' -e '^consumers$' | tr '\n' ' ')
        [ $quick -eq 1 ] && suites="spec symbols registry tensor program creation"
    fi
    # shellcheck disable=SC2086
    step tests $((quick ? 420 : 360)) meson test -C "$build" --no-rebuild --print-errorlogs \
        --num-processes 4 $suites
    cp "$build/meson-logs/testlog.txt" "$OUT/testlog.txt" 2>/dev/null
else
    skip tests "build failed"
fi

# ---- benchmarks -------------------------------------------------------------------------------
if [ $built -eq 0 ]; then
    if [ $standin -eq 1 ]; then
        # Oclgrind runs about 1 us per work-item: small sizes, no matmul.
        step kiln-bench 240 "$build/tools/kiln-bench" --json --quick -r 1 -d gpu:0 launch transfer
    else
        step kiln-bench 300 "$build/tools/kiln-bench" --json -r 5 -d gpu:0 transfer launch \
            elementwise matmul startup
    fi
else
    skip kiln-bench "build failed"
fi
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step torch 240 python3 scripts/gpu-torch-bench.py $([ $quick -eq 1 ] && echo --quick)
else
    skip torch "PyTorch with CUDA is not available here"
fi

# ---- report -----------------------------------------------------------------------------------
python3 scripts/gpu-report.py --steps "$steps" --work "$work" --out "$OUT" \
    --mode "$([ $standin -eq 1 ] && echo standin || echo nvidia)" --seconds $(($(date +%s) - start))
rc=$?
cat "$OUT/gpu-summary.txt" 2>/dev/null
exit $rc
