#!/usr/bin/env python3
"""test-first-run.py - a first run is never silent on a terminal, and a prewarmed cache leaves
nothing to compile (issue 22, item 1).

  progress   examples/classify with empty kiln and PoCL caches: on a terminal (a pty) stderr
             says "kiln: compiling kernels for cpu:0"; with KILN_LOG=off, or with stderr a pipe,
             it says nothing of the kind; the program's own output is the same in all three
  prewarm    kiln-info --prewarm -d cpu:0 into an empty kiln cache (PoCL's own cache as the
             machine has it: what is tested is kiln's cache, and a cold PoCL cache cost CI's
             ASan stage 254 s of compiling; progress covers cold PoCL): it reports its kernels
             ready and, on a terminal, counts them ("prewarming cpu:0: N of N kernels"); with
             -j 1 and -j 3 (one process, three) it counts the same kernels; then
             classify with that cache (and an empty PoCL cache) builds no program from source
             (KILN_LOG=info shows cache hits only) and prints no progress line

Usage: test-first-run.py BUILD_ROOT progress|prewarm
"""
import os
import pty
import re
import subprocess
import sys
import tempfile


def run(argv, env, tty):
    """(exit status, stdout, stderr); stderr through a pty when tty, else a pipe."""
    if not tty:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        return r.returncode, r.stdout, r.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    err = b''
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the pty
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read()
    p.wait(timeout=600)
    os.close(master)
    return p.returncode, out, err.decode(errors='replace').replace('\r\n', '\n')


def fresh_env(tmp, tag, **extra):
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, tag + '-kiln'),
               POCL_CACHE_DIR=os.path.join(tmp, tag + '-pocl'), KILN_DEVICE='cpu:0')
    env.pop('KILN_LOG', None)
    env.update(extra)
    return env


def check(cond, msg):
    if not cond:
        sys.exit('FAIL: ' + msg)


def progress(root, tmp):
    classify = os.path.join(root, 'examples', 'classify')
    outs = []
    for tag, tty, extra, want in [('tty', True, {}, True), ('off', True, {'KILN_LOG': 'off'}, False),
                                  ('pipe', False, {}, False)]:
        rc, out, err = run([classify], fresh_env(tmp, tag, **extra), tty)
        print(f'--- {tag}: exit {rc}\n{err}')
        check(rc == 0, f'classify ({tag}) exited with {rc}: {err}')
        said = 'kiln: compiling kernels for cpu:0' in err
        check(said == want, f'classify ({tag}): progress line {"missing" if want else "printed"}')
        outs.append(re.sub(r'[0-9.]+ s\b', '', out))
    check(outs[0] == outs[1] == outs[2], 'classify printed different results in the three runs')


def prewarm(root, tmp):
    info = os.path.join(root, 'tools', 'kiln-info')
    env = fresh_env(tmp, 'warm')
    if 'POCL_CACHE_DIR' in os.environ:
        env['POCL_CACHE_DIR'] = os.environ['POCL_CACHE_DIR']
    else:
        env.pop('POCL_CACHE_DIR')
    rc, out, err = run([info, '--prewarm', '-d', 'cpu:0'], env, True)
    print(out + err)
    check(rc == 0, f'kiln-info --prewarm exited with {rc}')
    m = re.search(r'cpu:0: (\d+) built-in kernels ready', out)
    check(m and int(m.group(1)) > 300, 'kiln-info --prewarm did not report its kernels ready')
    check(f'prewarming cpu:0: {m.group(1)} of {m.group(1)} kernels' in err,
          'no progress count on the terminal')
    check('kiln: compiling kernels' not in err, 'prewarm printed the on-demand progress line too')
    # Its parts, one per process (-j), are together the whole list: one process, or three, count
    # the same kernels (from the cache the first run filled), and the processes' progress sums.
    for jobs in ['1', '3']:
        rc, out2, err2 = run([info, '--prewarm', '-j', jobs, '-d', 'cpu:0'], env, True)
        m2 = re.search(r'cpu:0: (\d+) built-in kernels ready in [0-9.]+ s, (\d+) process', out2)
        check(rc == 0 and m2 and m2.group(1) == m.group(1) and m2.group(2) == jobs,
              f'kiln-info --prewarm -j {jobs}: {out2!r} (the first run: {m.group(1)} kernels)')
        check(f'prewarming cpu:0: {m.group(1)} of {m.group(1)} kernels' in err2,
              f'-j {jobs}: no progress count on the terminal: {err2!r}')
    env = dict(env, POCL_CACHE_DIR=os.path.join(tmp, 'warm-pocl-2'), KILN_LOG='info')
    rc, out, err = run([os.path.join(root, 'examples', 'classify')], env, True)
    print(err)
    check(rc == 0, f'classify after prewarm exited with {rc}')
    check('cache: hit' in err, 'classify after prewarm: no cache hit logged')
    built = [line for line in err.split('\n') if 'built a program from source' in line]
    check(not built, 'classify after prewarm still built: ' + '; '.join(built))
    check('kiln: compiling kernels' not in err, 'classify after prewarm printed progress')


def main():
    root, what = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        {'progress': progress, 'prewarm': prewarm}[what](root, tmp)
    print('ok')


if __name__ == '__main__':
    main()
