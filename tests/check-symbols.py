#!/usr/bin/env python3
"""check-symbols.py LIBKILN_SO - every function libkiln exports is public API.

Each defined dynamic symbol must start with kiln_ and none may start with kiln__ (internals).
"""
import subprocess
import sys

out = subprocess.run(['nm', '-D', '--defined-only', sys.argv[1]], check=True,
                     capture_output=True, text=True).stdout
bad, good = [], []
for line in out.splitlines():
    parts = line.split()
    if len(parts) < 3:
        continue
    kind, name = parts[1], parts[2].split('@')[0]
    if kind in ('A',):  # version-node markers, not symbols
        continue
    if name.startswith('kiln__') or not name.startswith('kiln_'):
        bad.append(f'{kind} {name}')
    else:
        good.append(name)
for b in bad:
    print(f'not public API: {b}')
print(f'{len(good)} exported kiln_ symbols, {len(bad)} others')
if not good:
    print('no kiln_ symbol exported at all')
sys.exit(1 if bad or not good else 0)
