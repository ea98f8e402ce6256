#!/usr/bin/env python3
"""test-consumers.py SRCDIR - build a small program against kiln the two ways other projects do:
as a Meson subproject (dependency('kiln') through meson.override_dependency), and against an
installed kiln through pkg-config. Prints 'N passed, N failed'.
"""
import os
import subprocess
import sys
import tempfile

src = os.path.abspath(sys.argv[1])
passed = failed = 0

PROGRAM = r'''
#include <stdio.h>
#include "kiln.h"
int main(void)
{
    kiln_device *dev;
    if (kiln_device_get("auto", &dev) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    const int64_t shape[1] = {3};
    const float host[3] = {1, 2, 3};
    float out[3];
    kiln_tensor *t = NULL, *u = NULL;
    if (kiln_tensor_from_host(dev, KILN_F32, 1, shape, host, &t) != KILN_OK ||
        kiln_add(t, t, &u) != KILN_OK || kiln_tensor_read(u, out, sizeof out) != KILN_OK)
        return 1;
    printf("kiln %s on %s: %g %g %g\n", kiln_version(), kiln_device_spec(dev), out[0], out[1],
           out[2]);
    kiln_tensor_release(u);
    kiln_tensor_release(t);
    return out[0] == 2 && out[1] == 4 && out[2] == 6 ? 0 : 1;
}
'''


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=900, **kw)
    if p.returncode != 0:
        raise AssertionError(f'{" ".join(args)}: exit {p.returncode}\n{p.stdout[-3000:]}\n'
                             f'{p.stderr[-3000:]}')
    return p.stdout


def case(name, fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f'ok: {name}')
    except Exception as e:  # noqa: BLE001 - report and go on
        failed += 1
        print(f'FAIL: {name}: {e}')


def subproject():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(f'{d}/subprojects')
        os.symlink(src, f'{d}/subprojects/kiln')
        with open(f'{d}/main.c', 'w') as f:
            f.write(PROGRAM)
        with open(f'{d}/meson.build', 'w') as f:
            f.write("project('consumer', 'c', default_options: ['c_std=c11'])\n"
                    "subproject('kiln', default_options: ['tests=disabled'])\n"
                    "executable('consumer', 'main.c', dependencies: dependency('kiln'))\n")
        sh(['meson', 'setup', f'{d}/build', d])
        sh(['meson', 'compile', '-C', f'{d}/build', 'consumer'])
        out = sh([f'{d}/build/consumer'])
        assert ': 2 4 6' in out, out


def pkgconfig():
    with tempfile.TemporaryDirectory() as d:
        sh(['meson', 'setup', f'{d}/build', src, f'--prefix={d}/prefix', '-Dtests=disabled'])
        sh(['meson', 'install', '-C', f'{d}/build', '--quiet'])
        pcdirs = [os.path.join(r, x) for r, ds, _ in os.walk(f'{d}/prefix') for x in ds
                  if x == 'pkgconfig']
        env = dict(os.environ, PKG_CONFIG_PATH=':'.join(pcdirs))
        flags = sh(['pkg-config', '--cflags', '--libs', 'kiln'], env=env).split()
        with open(f'{d}/main.c', 'w') as f:
            f.write(PROGRAM)
        libdir = [x[2:] for x in flags if x.startswith('-L')]
        sh(['cc', '-std=c11', '-Wall', '-Werror', f'{d}/main.c', '-o', f'{d}/consumer'] + flags +
           [f'-Wl,-rpath,{p}' for p in libdir])
        out = sh([f'{d}/consumer'])
        assert ': 2 4 6' in out, out


case('kiln as a Meson subproject', subproject)
case('an installed kiln through pkg-config', pkgconfig)
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
