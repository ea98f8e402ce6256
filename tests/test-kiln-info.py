#!/usr/bin/env python3
"""test-kiln-info.py KILN_INFO VENDORS_DIR HAVE_OCLGRIND HAVE_CLBLAST - kiln-info's output and
exit codes.

The reference device count comes from OpenCL itself (clGetPlatformIDs/clGetDeviceIDs through
ctypes, in a child process so that each environment gets a fresh ICD loader).
VENDORS_DIR lists Oclgrind beside PoCL; VENDORS_DIR-empty lists nothing (no platform).
"plain" is the machine as the caller gives it (OCL_ICD_VENDORS kept: scripts/gpu-check.sh
points it at NVIDIA's driver). The cases that need PoCL (a CPU device, POCL_DEVICES for two
devices or for a platform without devices) print "SKIP: <reason>" where PoCL is not the
machine's platform (a GPU-only machine); `-d cuda:0` must select the GPU where it is NVIDIA's and
be refused elsewhere. Exits 77 when OpenCL has no device at all here.
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

FIELDS = {
    'spec': str, 'opencl': str, 'name': str, 'vendor': str, 'platform': str, 'type': str,
    'driver_version': str, 'opencl_version': str, 'opencl_c_version': str,
    'compute_units': int, 'max_clock_mhz': int, 'global_mem_bytes': int,
    'max_alloc_bytes': int, 'local_mem_bytes': int, 'max_work_group_size': int,
    'fp16': bool, 'fp64': bool, 'unified_memory': bool,
}

failures = []
skips = []

# kiln-info's exit codes (kiln-info --help, kiln-info(1), docs/devices.md).
EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_NO_PLATFORM, EXIT_NO_DEVICE, EXIT_NO_SUCH = 1, 2, 3, 4, 5


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        failures.append(what)


def skip(what, why):
    print(f'SKIP: {what}: {why}')
    skips.append(what)


def count_devices():
    """Print the number of OpenCL devices over all platforms (child process mode)."""
    cl = ctypes.CDLL('libOpenCL.so.1')
    plats = (ctypes.c_void_p * 64)()
    n = ctypes.c_uint(0)
    if cl.clGetPlatformIDs(64, plats, ctypes.byref(n)) != 0:
        print(0)
        return
    total = 0
    for i in range(n.value):
        nd = ctypes.c_uint(0)
        if cl.clGetDeviceIDs(ctypes.c_void_p(plats[i]), ctypes.c_ulonglong(0xFFFFFFFF), 0, None,
                             ctypes.byref(nd)) == 0:
            total += nd.value
    print(total)


def env_with(extra):
    env = dict(os.environ)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def direct_count(extra):
    out = subprocess.run([sys.executable, __file__, '--count'], env=env_with(extra),
                         capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip())


def run(exe, args, extra=None):
    return subprocess.run([exe] + args, env=env_with(extra or {}), capture_output=True,
                          text=True, timeout=240)


def check_json(exe, extra, label):
    want = direct_count(extra)
    r = run(exe, ['--json'], extra)
    check(r.returncode == 0 if want else r.returncode in (EXIT_NO_PLATFORM, EXIT_NO_DEVICE),
          f'{label}: --json exit {r.returncode}')
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        check(False, f'{label}: --json is valid JSON ({e}): {r.stdout[:200]!r}')
        return None
    check(isinstance(doc.get('kiln_version'), str), f'{label}: kiln_version')
    devs = doc.get('devices')
    check(isinstance(devs, list) and len(devs) == want,
          f'{label}: {len(devs or [])} devices in --json, OpenCL reports {want}')
    for d in devs or []:
        check(set(d) == set(FIELDS), f'{label}: fields of {d.get("spec")}: {sorted(d)}')
        for k, t in FIELDS.items():
            check(type(d.get(k)) is t, f'{label}: {d.get("spec")}.{k} is {t.__name__}')
        p, _, dd = d.get('opencl', '').partition(':')
        check(p.isdigit() and dd.isdigit(), f'{label}: opencl "{d.get("opencl")}" is P:D')
        check(d.get('spec', '').startswith(d.get('type', '?') + ':'), f'{label}: spec/type')
    specs = [d.get('spec') for d in devs or []]
    check(len(set(specs)) == len(specs), f'{label}: specs unique {specs}')
    auto = doc.get('auto', {})
    check(set(auto) == {'spec', 'reason'}, f'{label}: auto has spec and reason')
    check(auto.get('spec') in specs if want else auto.get('spec') is None,
          f'{label}: auto.spec {auto.get("spec")} is a listed device')
    un = doc.get('unavailable', {})
    check(set(un) == {'gpu', 'cpu', 'accelerator'}, f'{label}: unavailable keys')
    has_gpu = any(d.get('type') == 'gpu' for d in devs or [])
    check((un.get('gpu') is None) == has_gpu, f'{label}: unavailable.gpu null iff a GPU')
    check(isinstance(doc.get('notes'), list), f'{label}: notes is a list')
    return doc


def main(exe, vendors, have_oclgrind, have_clblast):
    plain = {'POCL_DEVICES': None, 'KILN_VISIBLE_DEVICES': None, 'KILN_DEVICE': None}
    two = dict(plain, POCL_DEVICES='pthread pthread')
    empty = dict(plain, OCL_ICD_VENDORS=vendors + '-empty')
    bogus = dict(plain, POCL_DEVICES='bogus')

    if direct_count(plain) == 0:
        print('SKIP: OpenCL lists no device here (nothing for kiln-info to show)')
        return 77
    doc = check_json(exe, plain, 'plain')
    n = len(doc['devices']) if doc else 0
    devs = doc['devices'] if doc else []
    # What the machine is: PoCL (a CPU device that POCL_DEVICES controls), an NVIDIA GPU.
    has_cpu = any(d.get('type') == 'cpu' for d in devs)
    pocl = has_cpu and direct_count(two) == 2 and direct_count(bogus) == 0
    no_pocl = 'PoCL is not the platform here (a GPU-only machine)'
    nvidia = any('NVIDIA' in d.get('vendor', '') + d.get('platform', '') for d in devs)
    doc2 = check_json(exe, two, '2dev')
    if doc2 and pocl:
        check([d['spec'] for d in doc2['devices']] == ['cpu:0', 'cpu:1'], '2dev: cpu:0, cpu:1')
    if have_oclgrind == '1':
        grind = dict(plain, OCL_ICD_VENDORS=vendors)
        docg = check_json(exe, grind, 'oclgrind')
        if docg:
            check(docg['auto']['spec'] == 'gpu:0', 'oclgrind: auto is gpu:0')
            check(docg['auto']['reason'] == 'first GPU', 'oclgrind: auto reason "first GPU"')

    r = run(exe, [], plain)
    check(r.returncode == 0, f'default listing exits 0 ({r.returncode})')
    check('auto: ' in r.stdout and 'compute units' in r.stdout, 'default listing has auto line')
    r = run(exe, ['-l'], plain)
    check(r.returncode == 0 and len(r.stdout.splitlines()) == n, f'-l gives {n} lines')
    r = run(exe, ['--list'], two)
    check(len(r.stdout.splitlines()) == direct_count(two), '--list under 2dev')
    if pocl:
        r = run(exe, ['-d', 'cpu:0', '--json'], two)
        d1 = json.loads(r.stdout) if r.returncode == 0 else {'devices': []}
        check(len(d1['devices']) == 1 and d1['devices'][0]['spec'] == 'cpu:0', '-d cpu:0 --json')
    else:
        skip('-d cpu:0 --json under 2dev', no_pocl)
    # The first device by its type (cpu:0 on PoCL, gpu:0 on a GPU-only machine).
    first = devs[0]['spec'] if devs else 'cpu:0'
    kind = first.split(':')[0]
    r = run(exe, [f'--device={kind}', '-l'], plain)
    check(r.returncode == 0 and r.stdout.startswith(first), f'--device={kind} -l')
    if nvidia:
        r = run(exe, ['-d', 'cuda:0', '--json'], plain)
        try:
            dc = json.loads(r.stdout)['devices'] if r.returncode == 0 else []
        except ValueError:
            dc = []
        check(len(dc) == 1 and 'NVIDIA' in dc[0]['vendor'] + dc[0]['platform'],
              f'-d cuda:0 selects the NVIDIA GPU (exit {r.returncode}: {r.stderr.strip()[:160]!r})')

    # Exit codes: 2 usage, 5 no such device (others exist).
    for args, code, text in [
        (['-d', 'gpu:1x'], 2, "invalid device spec 'gpu:1x'"),
        (['-d', ''], 2, 'empty device spec'),
        (['-d', 'GPU'], 2, 'lower-case'),
        (['--bogus'], 2, "unknown option '--bogus'"),
        (['-x'], 2, 'unknown option'),
        (['-d'], 2, 'needs an argument'),
        (['extra'], 2, "unexpected argument 'extra'"),
        (['-l', '--json'], 2, 'at most one'),
        (['--prewarm', '-j', '0'], 2, "from 1 to 64, not '0'"),
        (['--prewarm', '-j', '2x'], 2, "not '2x'"),
        (['-j', '2'], 2, '-j goes with --prewarm'),
        (['--prewarm-part', '0/2'], 2, '--prewarm-part needs -d SPEC'),
        (['-d', 'gpu:7'], EXIT_NO_SUCH, "no device 'gpu:7'"),
        (['-d', f'{kind}:99'], EXIT_NO_SUCH, f'available: {first}'),
    ] + ([] if nvidia else [
        (['-d', 'cuda:0'], EXIT_NO_SUCH, 'NVIDIA'),
    ]) + [
        (['-d', 'opencl:9:0', '--check'], EXIT_NO_SUCH, "no device 'opencl:9:0'"),
        (['-d', 'cpu:99', '--json'], EXIT_NO_SUCH, "no device 'cpu:99'"),
    ]:
        r = run(exe, args, plain)
        check(r.returncode == code and text in r.stderr,
              f'{args} exits {code} saying "{text}" '
              f'(got {r.returncode}: {r.stderr.strip()[:160]!r})')
    r = run(exe, [], dict(plain, KILN_DEVICE='gpu:x'))
    check('KILN_DEVICE' in r.stdout, 'malformed KILN_DEVICE named on the auto line')
    # --prewarm's child side (info/prewarm.c): a malformed part, or one out of range, is an
    # "error" line on stdout and exit 1, before anything is built.
    for part, text in [('1/x', "takes I/N, not '1/x'"), ('2/2', 'part 2 of 2'),
                       ('0/0', 'part 0 of 0')]:
        r = run(exe, ['--prewarm-part', part, '-d', first], plain)
        check(r.returncode == 1 and r.stdout.startswith('error ') and text in r.stdout,
              f'--prewarm-part {part} exits 1 with an error line saying "{text}" '
              f'(got {r.returncode}: {r.stdout.strip()[:160]!r})')
    # A part that fails, with its message or silently: --prewarm says FAIL with the message of
    # the first, or with the process's exit status, and exits 1 (the parts build nothing).
    for how, text in [('1', 'kiln-info: part 0/2 failed on purpose'),
                      ('exit', 'the process for part 0 of 2 exited with status 3')]:
        r = run(exe, ['--prewarm', '-j', '2', '-d', first], dict(plain, KILN_TEST_PREWARM_FAIL=how))
        check(r.returncode == 1 and f'{first}: FAIL {text}' in r.stdout,
              f'--prewarm -j 2 with failing parts ({how}) exits 1 saying "{text}" '
              f'(got {r.returncode}: {r.stdout.strip()[:200]!r})')

    # No platform at all (an empty vendors folder): 3, whatever the mode or device asked for.
    for args in ([], ['-l'], ['--json'], ['-d', 'auto'], ['-d', 'gpu:3'], ['--check']):
        r = run(exe, args, empty)
        check(r.returncode == EXIT_NO_PLATFORM and 'pocl-opencl-icd' in r.stderr,
              f'no platform {args}: exit {EXIT_NO_PLATFORM} with install hint '
              f'(got {r.returncode})')
    r = run(exe, ['--json'], empty)
    try:
        check(json.loads(r.stdout)['devices'] == [], 'no platform --json: valid, no devices')
    except (ValueError, KeyError):
        check(False, 'no platform --json: valid JSON')
    # A platform with no devices (PoCL asked for a device kind it does not have): 4.
    if pocl:
        platform_without_devices(exe, bogus)
    else:
        skip('a platform without devices (POCL_DEVICES=bogus)', no_pocl)
    # Every device hidden (KILN_VISIBLE_DEVICES=''): no usable device either.
    r = run(exe, ['-l'], dict(plain, KILN_VISIBLE_DEVICES=''))
    check(r.returncode == EXIT_NO_DEVICE, f'every device hidden: exit {r.returncode}')
    rest(exe, vendors, have_oclgrind, have_clblast, plain, two, pocl, no_pocl)
    print(f'{len(failures)} failure(s), {len(skips)} part(s) skipped')
    return 1 if failures else 0


def platform_without_devices(exe, bogus):
    check(direct_count(bogus) == 0, 'POCL_DEVICES=bogus: OpenCL lists no device')
    for args in ([], ['-l'], ['--check']):
        r = run(exe, args, bogus)
        check(r.returncode == EXIT_NO_DEVICE and 'no usable OpenCL device' in r.stderr,
              f'platform without devices {args}: exit {EXIT_NO_DEVICE} '
              f'({r.returncode}, {r.stderr.strip()!r})')
    for args in (['-d', 'cpu:0'], ['-d', 'auto', '--json']):
        r = run(exe, args, bogus)
        check(r.returncode == EXIT_NO_DEVICE and "no device '" in r.stderr,
              f'platform without devices {args}: exit {EXIT_NO_DEVICE} '
              f'({r.returncode}, {r.stderr.strip()!r})')
    r = run(exe, ['--json'], bogus)
    try:
        check(r.returncode == EXIT_NO_DEVICE and json.loads(r.stdout)['devices'] == [],
              'platform without devices --json: valid, no devices')
    except (ValueError, KeyError):
        check(False, 'platform without devices --json: valid JSON')


def rest(exe, vendors, have_oclgrind, have_clblast, plain, two, pocl, no_pocl):
    # A check that fails (no memory allowed for its tensors): 1, with a FAIL line.
    r = run(exe, ['--check'], dict(plain, KILN_MEMORY_LIMIT='1'))
    check(r.returncode == EXIT_CHECK_FAILED and ' FAIL ' in r.stdout and
          'failed the check' in r.stdout,
          f'failing --check: exit {EXIT_CHECK_FAILED} ({r.returncode}, {r.stdout.strip()!r})')
    r = run(exe, ['--help'], plain)
    check(all(f'{c} {w}' in ' '.join(r.stdout.split()) for c, w in
              [(1, 'a check failed'), (2, 'usage error'), (3, 'no OpenCL platform'),
               (4, 'no usable device'), (5, 'no such device')]),
          f'--help lists the exit codes: {r.stdout!r}')

    r = run(exe, ['--help'], plain)
    check(r.returncode == 0 and 'usage: kiln-info' in r.stdout, '--help')
    r = run(exe, ['--version'], plain)
    check(r.returncode == 0 and r.stdout.startswith('kiln-info '), '--version')

    # A closed pipe: no SIGPIPE death, nothing on stderr.
    r = subprocess.run(['sh', '-c', f'"{exe}" | head -1'], env=env_with(plain),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and r.stderr == '' and len(r.stdout.splitlines()) == 1,
          f'kiln-info | head -1 is quiet ({r.stderr!r})')
    rfd, wfd = os.pipe()
    os.close(rfd)
    p = subprocess.run([exe, '--json'], env=env_with(plain), stdout=wfd,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(wfd)
    check(p.returncode == 0 and p.stderr == '',
          f'writing into a closed pipe: exit {p.returncode}, stderr {p.stderr!r}')

    configs = [('2dev', two)] if pocl else []
    if not pocl:
        skip('--check under 2dev', no_pocl)
    grind_log = os.path.join(tempfile.mkdtemp(prefix='kiln-info-'), 'oclgrind.log')
    if have_oclgrind == '1':
        # Oclgrind checks the --check kernel for out-of-bounds accesses, races, API misuse.
        configs.append(('oclgrind', dict(plain, OCL_ICD_VENDORS=vendors, OCLGRIND_CHECK_API='1',
                                         OCLGRIND_DATA_RACES='1', OCLGRIND_UNINITIALIZED='1',
                                         OCLGRIND_LOG=grind_log)))
    for label, extra in configs:
        r = run(exe, ['--check'], extra)
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(lines) == direct_count(extra) and
              all(' OK ' in ln and ' ms ' in ln for ln in lines),
              f'{label}: --check passes on every device: {r.stdout!r} {r.stderr!r}')
    if os.path.exists(grind_log):
        with open(grind_log) as f:
            text = f.read()
        check(text == '', f'Oclgrind logged nothing for --check: {text[:300]!r}')
        os.remove(grind_log)
    os.rmdir(os.path.dirname(grind_log))
    # Where matmul takes CLBlast (forced here; GPUs by default), --check warms it: one small f32
    # (and f64) product per device, timed on the same line.
    if have_clblast == '1':
        r = run(exe, ['--check'], dict(plain, KILN_MATMUL='clblast'))
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(lines) == direct_count(plain) and
              all(' OK ' in ln and re.search(r' matmul clblast f32 [0-9.]+ ms', ln)
                  for ln in lines),
              f'--check with CLBlast warms it: {r.stdout!r} {r.stderr!r}')
    if pocl:
        r = run(exe, ['--check', '-d', 'cpu:1'], two)
        check(r.returncode == 0 and r.stdout.startswith('cpu:1 ') and
              len(r.stdout.splitlines()) == 1, f'--check -d cpu:1: {r.stdout!r}')
    else:
        skip('--check -d cpu:1 under 2dev', no_pocl)


if __name__ == '__main__':
    if sys.argv[1:] == ['--count']:
        count_devices()
        sys.exit(0)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
