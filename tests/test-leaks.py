#!/usr/bin/env python3
"""test-leaks.py HELPER - kiln's report at exit (issue 22, item 3): kiln-leak-helper holds
tensors on every device, a module, an optimizer, a program and an open scope. Exiting so, it
must print exactly one warning line with those counts (tensors per device, with bytes) by default
(KILN_LOG unset or warn) and at info and debug (there also one line per tensor naming the
function that made it), and nothing with KILN_LOG=error or off; after
releasing everything it must print nothing at all. The helper checks kiln_live_objects_get's
counts itself."""
import os
import re
import subprocess
import sys

helper = sys.argv[1]
problems = []


def run(mode, log):
    env = dict(os.environ)
    env.pop('KILN_LOG', None)
    if mode == 'leak':  # on purpose: LeakSanitizer (ASan builds) would report the same objects
        env['ASAN_OPTIONS'] = ':'.join(filter(None, [env.get('ASAN_OPTIONS'), 'detect_leaks=0']))
    if log is not None:
        env['KILN_LOG'] = log
    p = subprocess.run([helper, mode], env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        problems.append(f'{mode}, KILN_LOG={log}: exit {p.returncode}\n{p.stdout}{p.stderr}')
    return p


for log in [None, 'warn', 'WARNING', 'info', 'debug', 'bogus']:
    p = run('leak', log)
    made = re.search(r'made (\d+) tensors on (\d+) devices', p.stdout)
    lines = [l for l in p.stderr.splitlines() if l.startswith('kiln: warn: at exit')]
    if not made or len(lines) != 1:
        problems.append(f'leak, KILN_LOG={log}: expected one report line, got {lines!r}\n'
                        f'{p.stdout}{p.stderr}')
        continue
    line, ndev = lines[0], int(made.group(2))
    want = [f'kiln: warn: at exit, still alive: {made.group(1)} tensors (cpu:0: 3, 1.0 KiB',
            '1 module, 1 optimizer, 1 program, 1 open scope; release them']
    if ndev > 1:  # the other devices hold a tensor and its view each
        want.append('; cpu:1: 2, 1.0 KiB' if 'cpu:1' in line else ': 2, 1.0 KiB')
    for w in want:
        if w not in line:
            problems.append(f'leak, KILN_LOG={log}: the line lacks {w!r}: {line!r}')
    if log is None:
        print(f'the report: {line}')
    # at debug, the tensors one per line with the function that made each; else none of that
    sites = sorted(l for l in p.stderr.splitlines() if l.startswith('kiln: debug: at exit'))
    if log == 'debug':
        for made in ['tensor [2, 4] f32 on cpu:0, made by kiln_linear_create',
                     'tensor [256] f32 on cpu:0, made by kiln_tensor_reshape',
                     'tensor [256] f32 on cpu:0, made by kiln_full']:
            if not any(l.endswith(made) for l in sites):
                problems.append(f'leak, KILN_LOG=debug: no line for the {made!r}: {sites!r}')
    elif sites:
        problems.append(f'leak, KILN_LOG={log}: creation sites below debug: {sites!r}')

for log in ['error', 'off', 'OFF', 'none', '0']:
    p = run('leak', log)
    if p.stderr:
        problems.append(f'leak, KILN_LOG={log}: expected a silent exit, got {p.stderr!r}')

for log in [None, 'debug']:
    p = run('clean', log)
    if 'at exit' in p.stderr or (log is None and p.stderr):
        problems.append(f'clean, KILN_LOG={log}: expected no report, got {p.stderr!r}')

for prob in problems:
    print('FAIL:', prob)
print(f'{len(problems)} problem(s)')
sys.exit(1 if problems else 0)
