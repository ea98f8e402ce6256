#!/usr/bin/env python3
"""test-mpi.py MPIRUN HELPER TRAIN_DDP [OCLGRIND_VENDORS] - libkiln-mpi under mpirun -np 2 and 3.

- kiln-mpi-helper values/errors/mismatch: all-reduce and broadcast against sums computed from each
  rank's known inputs, bad arguments and mismatched lists failing on every rank (no hang);
- the same values on Oclgrind alone (OCL_ICD_VENDORS=OCLGRIND_VENDORS, gpu:0), a device without
  unified memory: the path through pinned staging;
- kiln-mpi-helper die: a rank exits without MPI_Finalize; the job must end, non-zero and naming
  the rank, within a bounded time;
- kiln-mpi-helper plans on ranks that differ: KILN_MPI_BUCKET_BYTES set on rank 0 only, and
  (with OCLGRIND_VENDORS) rank 0 on Oclgrind (no unified memory) while rank 1 is on the CPU:
  correct sums on every rank within seconds (once: a hang, or KILN_OK with wrong sums);
- train_ddp on N ranks, each on its shard of the batch, against one process on the whole batch:
  the same loss curve and final parameters (safetensors, read here) within f32 rounding.
Prints 'N passed, N failed' and exits non-zero on any failure.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

mpirun, helper, train = sys.argv[1], sys.argv[2], sys.argv[3]
oclgrind = sys.argv[4] if len(sys.argv) > 4 else ''
passed = failed = 0

# Containers (and CI, which runs as root): shared memory without CMA single-copy, and root.
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1',
           OMPI_MCA_btl_vader_single_copy_mechanism='none',
           # keep MCA components loaded, so that LeakSanitizer can name them (mpi-lsan.supp)
           OMPI_MCA_mca_base_component_disable_dlclose='1', OMPI_MCA_rmaps_base_oversubscribe='1')
# Open MPI is built without frame pointers: LeakSanitizer's fast unwinder would stop in it, and
# its allocations could not be matched to mpi-lsan.supp (ASan builds only).
env['ASAN_OPTIONS'] = env.get('ASAN_OPTIONS', '') + ':fast_unwind_on_malloc=0'
MPI_ARGS = ['--allow-run-as-root', '--oversubscribe', '--mca', 'btl', 'self,vader']


def mpi(n, args, timeout=300, extra_env=None):
    t0 = time.monotonic()
    p = subprocess.run([mpirun] + MPI_ARGS + ['-np', str(n)] + args, capture_output=True,
                       text=True, timeout=timeout, env=dict(env, **(extra_env or {})))
    return p, time.monotonic() - t0


def case(name, fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f'ok: {name}', flush=True)
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        failed += 1
        print(f'FAIL: {name}: {e}', flush=True)


def helper_ok(n, mode, extra_env=None):
    p, _ = mpi(n, [helper, mode], extra_env=extra_env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f'exit {p.returncode}\n{out}'
    for r in range(n):
        assert f'rank {r}: ok' in p.stdout, out
    assert 'FAIL' not in out, out


def ranks_differ(per_rank_env, timeout=120):
    """kiln-mpi-helper plans on 2 ranks, each with its own extra environment (MPMD)."""
    args = []
    for r, extra in enumerate(per_rank_env):
        if r:
            args.append(':')
        args += ['-np', '1']
        for k, v in extra.items():
            args += ['-x', f'{k}={v}']
        args += [helper, 'plans']
    t0 = time.monotonic()
    p = subprocess.run([mpirun] + MPI_ARGS + args, capture_output=True, text=True,
                       timeout=timeout, env=env)
    dt = time.monotonic() - t0
    out = p.stdout + p.stderr
    assert p.returncode == 0, f'exit {p.returncode} after {dt:.1f} s\n{out}'
    for r in range(len(per_rank_env)):
        assert f'rank {r}: ok' in p.stdout, out
    assert dt < 60, f'took {dt:.0f} s\n{out}'


def die(n):
    # Bounded: mpirun must notice the dead rank and end the survivors (blocked in an
    # all-reduce) well before the limit.
    p, dt = mpi(n, [helper, 'die'], timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode != 0, f'exit 0 with a dead rank\n{out}'
    assert dt < 60, f'took {dt:.0f} s\n{out}'
    assert f'rank {n - 1}: exiting without MPI_Finalize' in out, out
    # mpirun names the process that exited ("[[job,1],rank]", exit code 3), or the survivors
    # report the lost peer through kiln.
    after = out.split('exiting without MPI_Finalize', 1)[1]
    assert (re.search(rf'\[\[\d+,\d+\],{n - 1}\]', after) and re.search(r'Exit code:\s+3', after)
            or 'KILN_ERR_IO' in out), out
    print(f'  -np {n}: a rank exited; the job ended in {dt:.1f} s, exit {p.returncode}')


def read_safetensors(path):
    with open(path, 'rb') as f:
        data = f.read()
    (hlen,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + hlen])
    out = {}
    for name, h in header.items():
        if name == '__metadata__':
            continue
        assert h['dtype'] == 'F32', h
        a, b = h['data_offsets']
        raw = data[8 + hlen + a:8 + hlen + b]
        out[name] = struct.unpack(f'<{len(raw) // 4}f', raw)
    return out


def losses(out):
    return [float(line.split()[3]) for line in out.splitlines() if line.startswith('epoch')]


ARGS = ['--epochs', '6', '--batch', '60', '--samples', '600', '--hidden', '16']
single = {}


def train_single():
    d = tempfile.mkdtemp()
    path = os.path.join(d, 'single.safetensors')
    p = subprocess.run([train] + ARGS + ['--save', path], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    single['loss'], single['params'] = losses(p.stdout), read_safetensors(path)
    assert len(single['loss']) == 6, p.stdout
    assert single['loss'][-1] < 0.5 * single['loss'][0], f'does not learn: {single["loss"]}'


def train_ranks(n):
    assert single, 'the single-process run failed'
    d = tempfile.mkdtemp()
    path = os.path.join(d, f'ranks{n}.safetensors')
    p, _ = mpi(n, [train] + ARGS + ['--save', path])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(n):
        assert f'rank {r} of {n}: device cpu' in out, out
    got = losses(p.stdout)
    assert len(got) == len(single['loss']), out
    for a, b in zip(got, single['loss']):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f'loss curves differ: {got} vs {single["loss"]}'
    params = read_safetensors(path)
    assert params.keys() == single['params'].keys(), params.keys()
    worst = 0.0
    for name, ref in single['params'].items():
        for a, b in zip(params[name], ref):
            worst = max(worst, abs(a - b) / max(1.0, abs(b)))
    assert worst <= 1e-5, f'final parameters differ by {worst:.3g} (relative)'
    print(f'  -np {n}: loss curve equal to 1e-5, parameters within {worst:.2g}')


def train_bad_batch():
    p, _ = mpi(2, [train, '--batch', '61'])
    assert p.returncode != 0 and 'multiple of the number of ranks' in p.stderr, p.stderr


for n in (2, 3):
    for mode in ('values', 'errors', 'mismatch'):
        case(f'{mode} -np {n}', lambda n=n, mode=mode: helper_ok(n, mode))
    case(f'die -np {n}', lambda n=n: die(n))
case('plans: KILN_MPI_BUCKET_BYTES on rank 0 only',
     lambda: ranks_differ([{'KILN_MPI_BUCKET_BYTES': '64'}, {}]))
if oclgrind:
    # LeakSanitizer's exit scan is not run with Oclgrind's threads alive (as tests/meson.build's
    # -oclgrind configurations); the same code is leak-checked on PoCL above.
    # Small sizes (Oclgrind runs a work-item a microsecond), and staging in 4 KiB chunks so
    # that the copies take several.
    ocl_env = {'OCL_ICD_VENDORS': oclgrind, 'KILN_TEST_MPI_DEVICE': 'gpu:0',
               'KILN_TEST_MPI_SMALL': '1', 'KILN_STAGING_CHUNK': '4096',
               'ASAN_OPTIONS': 'detect_leaks=0:allocator_may_return_null=1'}
    for mode in ('values', 'errors'):
        case(f'{mode} -np 2 on Oclgrind (no unified memory: staging)',
             lambda mode=mode: helper_ok(2, mode, ocl_env))
    # Rank 0 on Oclgrind (its tensors read into buffers), rank 1 on PoCL (mapped in place).
    mixed = {'OCL_ICD_VENDORS': oclgrind.removesuffix('-gpuonly'), 'KILN_STAGING_CHUNK': '4096',
             'ASAN_OPTIONS': 'detect_leaks=0:allocator_may_return_null=1'}
    case('plans: rank 0 on Oclgrind, rank 1 on the CPU',
         lambda: ranks_differ([dict(mixed, KILN_TEST_MPI_DEVICE='gpu:0'),
                               dict(mixed, KILN_TEST_MPI_DEVICE='cpu:0')]))
case('train_ddp, one process', train_single)
for n in (2, 3):
    case(f'train_ddp -np {n} vs one process', lambda n=n: train_ranks(n))
case('train_ddp: batch not a multiple of the ranks', train_bad_batch)

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
