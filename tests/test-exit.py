#!/usr/bin/env python3
"""Run kiln-exit-helper (a program that exits with work queued) N times cold and N times warm;
every run must exit with status 0 (issue 10, item 3). Cold: KILN_CACHE=0 and PoCL's kernel cache
off, so PoCL compiles while the process exits; warm: both caches on and filled by a first run.
Usage: test-exit.py HELPER N"""
import os
import subprocess
import sys
import tempfile


def runs(helper, n, env, label):
    bad = []
    for i in range(n):
        p = subprocess.run([helper], env=env, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            bad.append((i, p.returncode, (p.stdout + p.stderr).strip()[-2000:]))
    print(f"{label}: {n - len(bad)}/{n} runs exited cleanly")
    for i, rc, out in bad[:3]:
        print(f"  run {i}: exit status {rc}\n{out}")
    return len(bad)


def main():
    helper, n = sys.argv[1], int(sys.argv[2])
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        cold = dict(os.environ, KILN_CACHE="0", POCL_KERNEL_CACHE="0",
                    POCL_CACHE_DIR=os.path.join(tmp, "pocl-cold"))
        failures += runs(helper, n, cold, "cold")
        warm = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, "kiln"),
                    POCL_CACHE_DIR=os.path.join(tmp, "pocl"))
        subprocess.run([helper], env=warm, capture_output=True, timeout=120)
        failures += runs(helper, n, warm, "warm")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
