#!/usr/bin/env python3
"""test-profiler.py BUILDDIR [oclgrind-vendors-dir]: kiln's profiler from the outside (issue 26).

1. examples/classify --profile: the table it prints (a row per op and phase: forward matmul,
   backward matmul, the optimizer's kernel, the 'step' range once per step) and the Chrome trace
   it writes, checked with Python's JSON parser against the trace-event schema: every event has
   ph, ts, dur, pid, tid and name; complete events ('X') have ts, dur >= 0; on every track the
   events nest (each inside the one it starts in, never across its end); a device queue's
   kernels never overlap; every track is named by a metadata event.
2. KILN_PROFILE=FILE on an unchanged program (examples/devices): the trace is written at exit
   and passes the same checks; an unwritable KILN_PROFILE is reported on stderr, exit status
   unchanged.
3. With an Oclgrind vendors folder: 1 on the simulated GPU (gpu:0), small; and KILN_PROFILE there
   under valgrind (where it is installed and the build has no sanitizer): the trace written at
   exit reads nothing from the driver, whose state exit() has freed by then.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

FAILED = []


def check(cond, what):
    print(('ok: ' if cond else 'FAIL: ') + what)
    if not cond:
        FAILED.append(what)
    return cond


def validate(path, label):
    """The trace at path against the schema; returns its events (or [] when it is not JSON)."""
    try:
        with open(path, encoding='utf-8') as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        check(False, '%s: the trace parses as JSON (%s)' % (label, e))
        return []
    events = doc.get('traceEvents') if isinstance(doc, dict) else None
    if not check(isinstance(events, list) and events, '%s: traceEvents is a list of events'
                 % label):
        return []
    bad = [e for e in events if not all(k in e for k in ('ph', 'ts', 'dur', 'pid', 'tid',
                                                          'name'))]
    check(not bad, '%s: every event has ph/ts/dur/pid/tid/name (%d lack some: %s)'
          % (label, len(bad), bad[:2]))
    xs = [e for e in events if e.get('ph') == 'X' and e not in bad]
    check(all(isinstance(e['ts'], (int, float)) and e['ts'] >= 0 and e['dur'] >= 0 for e in xs),
          '%s: %d complete events with ts >= 0 and dur >= 0' % (label, len(xs)))
    named_tracks = {(e['pid'], e['tid']) for e in events
                    if e.get('ph') == 'M' and e['name'] == 'thread_name'}
    named_procs = {e['pid'] for e in events if e.get('ph') == 'M' and e['name'] == 'process_name'}
    tracks = {}
    for e in xs:
        tracks.setdefault((e['pid'], e['tid']), []).append(e)
    check(set(tracks) <= named_tracks and {p for p, _ in tracks} <= named_procs,
          '%s: every track and process with events is named' % label)
    # Nesting: sorted by start (longest first at a tie), each event ends within the one it
    # starts in. Times are ns / 1000 with three decimals: compare in ns.
    crossing = []
    for key, evs in tracks.items():
        evs.sort(key=lambda e: (round(e['ts'] * 1000), -round(e['dur'] * 1000)))
        stack = []
        for e in evs:
            b, end = round(e['ts'] * 1000), round((e['ts'] + e['dur']) * 1000)
            while stack and stack[-1][1] <= b:
                stack.pop()
            if stack and end > stack[-1][1]:
                crossing.append((key, stack[-1][2], e['name']))
            stack.append((b, end, e['name']))
    check(not crossing, '%s: the events of every track nest (%d cross: %s)'
          % (label, len(crossing), crossing[:3]))
    # A device queue (pid >= 1) runs one command at a time: nothing nests there.
    overlap = []
    for (pid, tid), evs in tracks.items():
        if pid == 0:
            continue
        last_end = None
        for e in evs:
            b = round(e['ts'] * 1000)
            if last_end is not None and b < last_end:
                overlap.append(((pid, tid), e['name']))
            last_end = round((e['ts'] + e['dur']) * 1000)
    check(not overlap, '%s: no two commands of a device queue overlap (%s)' % (label, overlap[:3]))
    return events


def table_rows(text):
    """The profiler table's rows in text: (name, phase) -> columns."""
    rows = {}
    for line in text.splitlines():
        cols = [c.strip() for c in line.split('  ') if c.strip()]
        if len(cols) == 9 and cols[0] != 'Name':
            rows[(cols[0], cols[1])] = cols
    return rows


def classify(builddir, env, label, args):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, 'trace.json')
        r = subprocess.run([os.path.join(builddir, 'examples', 'classify'), '--profile', trace]
                           + args, env=env, capture_output=True, text=True, timeout=600)
        if not check(r.returncode == 0, '%s: classify --profile exits 0 (%s)'
                     % (label, r.stderr.strip()[-400:])):
            return
        rows = table_rows(r.stdout)
        for key in [('kiln_matmul', 'forward'), ('kiln_matmul', 'backward'),
                    ('kiln_optimizer_step', 'optimizer'), ('step', '(range)')]:
            check(key in rows, '%s: the table has a row %s / %s' % (label, key[0], key[1]))
        nsteps = int(r.stdout.split("profile of the last epoch's ")[1].split()[0])
        check(rows.get(('step', '(range)'), [0, 0, -1])[2] == str(nsteps),
              "%s: the 'step' range was recorded once per step (%d)" % (label, nsteps))
        timed = [k for k, c in rows.items() if c[3] != '-']
        check(timed, '%s: kernels have device times (%d rows)' % (label, len(timed)))
        events = validate(trace, label)
        device_kernels = [e for e in events if e.get('ph') == 'X' and e['pid'] >= 1]
        check(device_kernels, '%s: the trace has a device track with %d commands'
              % (label, len(device_kernels)))


def env_profile(builddir, env):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, 'whole.json')
        e = dict(env, KILN_PROFILE=trace)
        r = subprocess.run([os.path.join(builddir, 'examples', 'devices')], env=e,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, 'KILN_PROFILE: the program exits 0 (%s)' % r.stderr[-300:])
        if check(os.path.exists(trace), 'KILN_PROFILE: the trace was written at exit'):
            events = validate(trace, 'KILN_PROFILE')
            check(any(ev.get('ph') == 'X' and ev['pid'] >= 1 for ev in events),
                  'KILN_PROFILE: the whole program\'s kernels are there, with device times')
        e = dict(env, KILN_PROFILE=os.path.join(tmp, 'no-such-dir', 'x.json'))
        r = subprocess.run([os.path.join(builddir, 'examples', 'devices')], env=e,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and 'KILN_PROFILE' in r.stderr and 'no-such-dir' in r.stderr,
              'KILN_PROFILE: an unwritable file is reported on stderr, exit status 0 (%d: %s)'
              % (r.returncode, r.stderr.strip()[-300:]))


def exit_on_oclgrind(builddir, env):
    """KILN_PROFILE on Oclgrind, under valgrind: exit() frees Oclgrind's per-thread API state
    before any atexit handler runs, so the trace written at exit must not call its driver (it
    wrote into freed memory, and at times crashed with "corrupted double-linked list"). Where
    valgrind is installed and the build has no sanitizer."""
    lib = os.path.join(builddir, 'libkiln.so')
    linked = subprocess.run(['ldd', lib], capture_output=True, text=True).stdout
    if not shutil.which('valgrind') or 'libasan' in linked or 'libtsan' in linked:
        print('skip: KILN_PROFILE on Oclgrind under valgrind (no valgrind, or a sanitized build)')
        return
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, 'exit.json')
        r = subprocess.run(['valgrind', '--num-callers=40',
                            os.path.join(builddir, 'examples', 'classify'), '--device', 'gpu:0',
                            '--epochs', '1', '--samples', '32', '--batch', '32', '--hidden', '8'],
                           env=dict(env, KILN_PROFILE=trace), capture_output=True, text=True,
                           timeout=600)
        check(r.returncode == 0, 'KILN_PROFILE on Oclgrind: exits 0 (%s)' % r.stderr[-300:])
        check(os.path.exists(trace), 'KILN_PROFILE on Oclgrind: the trace was written at exit')
        # valgrind's reports, each a block of lines: those whose access (the stack before
        # "Address ...", not where the block was allocated or freed) passes through kiln (a
        # kiln_ function with debug information, libkiln's file name without), but not the
        # dynamic loader's word-wise string reads in a dlopen that kiln's enumeration makes.
        # (CLBlast's own cache, released by its static destructor, writes there too: not kiln's)
        blocks = [b.split('Address 0x')[0] for b in re.split(r'\n==\d+== ?\n', r.stderr)]
        ours = [b for b in blocks if ('Invalid' in b or 'uninitialised' in b)
                and re.search(r'\bkiln_\w+ \(|libkiln', b) and 'dl-load.c' not in b]
        check(not ours, 'KILN_PROFILE on Oclgrind: no invalid access from libkiln at exit (%s)'
              % (ours[0][-600:] if ours else ''))


def main():
    builddir = sys.argv[1]
    vendors = sys.argv[2] if len(sys.argv) > 2 else ''
    env = dict(os.environ)
    env.pop('KILN_PROFILE', None)
    classify(builddir, dict(env, KILN_DEVICE='cpu:0'), 'cpu:0',
             ['--device', 'cpu:0', '--epochs', '2', '--samples', '640'])
    env_profile(builddir, env)
    if vendors:
        classify(builddir, dict(env, OCL_ICD_VENDORS=vendors), 'gpu:0 (Oclgrind)',
                 ['--device', 'gpu:0', '--epochs', '1', '--samples', '96', '--batch', '32',
                  '--hidden', '8'])
        exit_on_oclgrind(builddir, dict(env, OCL_ICD_VENDORS=vendors))
    print('%d failed' % len(FAILED))
    return 1 if FAILED else 0


if __name__ == '__main__':
    sys.exit(main())
