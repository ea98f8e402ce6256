#!/usr/bin/env python3
"""test-safetensors.py HELPER VENV [SPEC] - kiln's checkpoints against the safetensors package.

Runs itself under a Python that has `safetensors` and `numpy`: the one running it where it has
them (the NVIDIA machines' Python does), else a virtual environment at VENV made (or reused) with
both from the package index. Then it writes a file with numpy arrays of every dtype kiln has (a
scalar and an empty array among them) through safetensors, has HELPER
(tests/checkpoint-helper.c) load it with kiln and save every tensor back with one of kiln's own,
and reads that file with safetensors:
every array must come back with its dtype, shape (a scalar as shape [], a 0-d tensor in kiln)
and exact values, and kiln's arange must be 0..9. Exits 77 (skipped), saying why, within
seconds when neither Python has the packages and the index cannot be reached (no network,
PIP_NO_INDEX, no venv module): pip's retries never run."""
import os
import socket
import subprocess
import sys
import tempfile
import urllib.parse

helper, venv = sys.argv[1], sys.argv[2]
spec = sys.argv[3] if len(sys.argv) > 3 else 'auto'
vpy = os.path.join(venv, 'bin', 'python3')


def skip(why):
    print('SKIP: ' + why)
    sys.exit(77)


def index_reachable():
    """None where pip's package index answers a TCP connection within 5 s, else the reason."""
    if os.environ.get('PIP_NO_INDEX', '').lower() not in ('', '0', 'false', 'no', 'off'):
        return 'PIP_NO_INDEX is set'
    url = urllib.parse.urlparse(os.environ.get('PIP_INDEX_URL') or 'https://pypi.org/simple')
    host = url.hostname or 'pypi.org'
    port = url.port or (443 if url.scheme == 'https' else 80)
    try:
        socket.create_connection((host, port), timeout=5).close()
        return None
    except OSError as e:
        return f'the package index {host}:{port} cannot be reached ({e})'


def has_packages(python):
    return subprocess.run([python, '-c', 'import numpy, safetensors.numpy'],
                          capture_output=True, timeout=120).returncode == 0


if os.environ.get('KILN_ST_INSIDE') != '1':
    env = dict(os.environ, KILN_ST_INSIDE='1')
    if has_packages(sys.executable):
        sys.exit(subprocess.run([sys.executable] + sys.argv, env=env).returncode)
    if not os.path.exists(os.path.join(venv, '.ready')):
        why = index_reachable()
        if why:
            skip(f'{sys.executable} lacks safetensors or numpy, and {why}')
        r = subprocess.run([sys.executable, '-m', 'venv', venv], capture_output=True, text=True,
                           timeout=300)
        if r.returncode == 0:
            r = subprocess.run([vpy, '-m', 'pip', 'install', '--quiet', '--retries', '1',
                                '--timeout', '20', 'safetensors', 'numpy'],
                               capture_output=True, text=True, timeout=400)
        if r.returncode != 0:
            skip('could not make a virtual environment with safetensors and numpy:\n' +
                 r.stdout + r.stderr)
        open(os.path.join(venv, '.ready'), 'w').close()
    sys.exit(subprocess.run([vpy] + sys.argv, env=env).returncode)

import numpy as np  # noqa: E402  (inside the virtual environment)
from safetensors.numpy import load_file, save_file  # noqa: E402

rng = np.random.default_rng(7)
arrays = {
    'f32': rng.standard_normal((3, 4)).astype(np.float32),
    'f64': rng.standard_normal((2, 2, 2)).astype(np.float64),
    'f16': rng.standard_normal((5,)).astype(np.float16),
    'i32': rng.integers(-2**31, 2**31 - 1, (4, 3), dtype=np.int32),
    'i64': rng.integers(-2**62, 2**62, (7,), dtype=np.int64),
    'u8': rng.integers(0, 256, (2, 8), dtype=np.uint8),
    'scalar': np.array(2.5, dtype=np.float32),
    'empty': np.zeros((0, 3), dtype=np.float32),
    'nan.inf': np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32),
}
with tempfile.TemporaryDirectory() as d:
    src, dst = os.path.join(d, 'from-python.safetensors'), os.path.join(d, 'from-kiln.safetensors')
    save_file(arrays, src, metadata={'format': 'np'})
    r = subprocess.run([helper, spec, src, dst], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit('checkpoint-helper failed:\n' + r.stdout + r.stderr)
    names = r.stdout.split()
    if sorted(names) != sorted(arrays):
        sys.exit(f'kiln loaded {names}, expected {sorted(arrays)}')
    back = load_file(dst)
    bad = []
    for name, a in arrays.items():
        b = back.get(name)
        want_shape = a.shape
        if b is None or b.dtype != a.dtype or b.shape != want_shape or \
                a.tobytes() != b.tobytes():
            bad.append(f'{name}: {a.dtype} {a.shape} came back as '
                       f'{None if b is None else (b.dtype, b.shape)}')
    r10 = back.get('kiln.arange')
    if r10 is None or r10.dtype != np.float32 or not np.array_equal(r10, np.arange(10)):
        bad.append(f'kiln.arange: {r10}')
    if bad:
        sys.exit('mismatches:\n  ' + '\n  '.join(bad))
    print(f'{len(arrays)} arrays from safetensors through kiln and back: exact; kiln\'s own read '
          f'by safetensors: exact ({os.path.getsize(dst)} bytes)')
