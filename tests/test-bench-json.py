#!/usr/bin/env python3
"""test-bench-json.py KILN_BENCH - every kiln-bench section's --json output (issue 27): one JSON
document, strict UTF-8, every result with a name, a unit, finite numbers and a baseline that is
a string or null (a row's baseline text once pointed into a dead stack buffer: non-UTF-8 bytes).
Runs each section with --quick -r 2, its PyTorch rows through this Python (which may have
torch); allreduce needs mpirun and is left to the MPI tests."""
import json
import math
import os
import subprocess
import sys

bench = sys.argv[1]
sections = ['transfer', 'startup', 'launch', 'elementwise', 'reduce', 'fusion', 'matmul', 'train',
            'conv', 'rnn', 'checkpoint', 'overlap']
env = dict(os.environ, KILN_BENCH_PYTHON=sys.executable)
failed = 0
for s in sections:
    p = subprocess.run([bench, '--quick', '-r', '2', '--json', s], capture_output=True, env=env,
                       timeout=600)
    try:
        if p.returncode != 0:
            raise ValueError(f'exit {p.returncode}: {p.stderr.decode(errors="replace")[-500:]}')
        doc = json.loads(p.stdout.decode('utf-8', errors='strict'))
        results = doc['results']
        if not results:
            raise ValueError('no results')
        for r in results:
            if not isinstance(r['name'], str) or not r['name'] or not isinstance(r['unit'], str):
                raise ValueError(f'bad name or unit: {r}')
            if r['baseline'] is not None and not isinstance(r['baseline'], str):
                raise ValueError(f'bad baseline: {r}')
            for k in ('kiln', 'baseline_value', 'ratio', 'min', 'max'):
                if not isinstance(r[k], (int, float)) or not math.isfinite(r[k]):
                    raise ValueError(f'{k} is not a finite number: {r}')
        torch_rows = sum(1 for r in results if (r['baseline'] or '').startswith('PyTorch'))
        print(f'ok: {s}: {len(results)} results ({torch_rows} against PyTorch)')
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        print(f'FAIL: {s}: {e}')
        failed += 1
sys.exit(1 if failed else 0)
