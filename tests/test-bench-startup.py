#!/usr/bin/env python3
"""test-bench-startup.py - `kiln-bench startup` keeps the driver's own kernel cache out of its
"cold" starts: every child gets CUDA_CACHE_PATH (NVIDIA's JIT cache) and POCL_CACHE_DIR set to
one fresh temporary folder, empty for the cold samples and warm for the others, whatever the
caller's environment says, and the folder is gone afterwards.

Usage: test-bench-startup.py KILN_BENCH
"""
import os
import subprocess
import sys
import tempfile


def main():
    bench = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, 'children.log')
        user_cache = os.path.join(tmp, 'user-cuda-cache')
        env = dict(os.environ, KILN_BENCH_STARTUP_LOG=log, CUDA_CACHE_PATH=user_cache,
                   CUDA_CACHE_DISABLE='0')
        r = subprocess.run([bench, '--quick', 'startup'], env=env, capture_output=True, text=True,
                           timeout=600)
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            sys.exit(f'kiln-bench startup exited with {r.returncode}')
        lines = open(log).read().split('\n') if os.path.exists(log) else []
        rows = [dict(f.split('=', 1) for f in line.split()) for line in lines if line]
    if not rows:
        sys.exit('no child logged its environment (KILN_BENCH_STARTUP_LOG)')
    roots = set()
    for row in rows:
        cuda, pocl = row['cuda'], row['pocl']
        if not cuda or cuda == user_cache:
            sys.exit(f'a child ran with CUDA_CACHE_PATH={cuda!r}: the caller\'s NVIDIA cache')
        if cuda != pocl:
            sys.exit(f'CUDA_CACHE_PATH {cuda} and POCL_CACHE_DIR {pocl} differ')
        if not os.path.basename(os.path.dirname(cuda)).startswith('kiln-bench-startup-'):
            sys.exit(f'CUDA_CACHE_PATH {cuda} is not in kiln-bench\'s temporary folder')
        roots.add(os.path.dirname(cuda))
    empties = [row['driver_empty'] for row in rows]
    if 'has no driver cache kiln knows of' in r.stdout + r.stderr:
        # Oclgrind alone (gpu-check.sh --standin): only kiln's cache is varied.
        print('SKIP: cold and warm driver caches: the driver has no cache kiln knows of')
    elif '1' not in empties or '0' not in empties:
        sys.exit(f'expected both empty (cold) and warm driver caches among the children: {empties}')
    for root in roots:
        if os.path.exists(root):
            sys.exit(f'{root} was left behind')
    print(f'{len(rows)} children: driver cache in a fresh folder, cold and warm, removed')


if __name__ == '__main__':
    main()
