#!/usr/bin/env python3
"""test-consumers.py SRCDIR - build and run a small program of one's own against kiln, the three
ways docs/using.md describes, with its commands:
  installed     meson install into a prefix, then pkg-config --cflags --libs kiln
  build tree    pkg-config --cflags --libs kiln-uninstalled from <build>/meson-uninstalled
  subproject    dependency('kiln', fallback: 'kiln') with kiln in subprojects/kiln
The first two share one build of kiln. Also checked: the include path pkg-config gives exposes
kiln's public headers and no other header, a program using kiln_cl.h (OpenCL interop) builds
from the same flags, and `meson install` puts the manual pages kiln-info(1) and kiln-bench(1)
under share/man/man1. Prints 'N passed, N failed'.
"""
import glob
import os
import shlex
import subprocess
import sys
import tempfile

src = os.path.abspath(sys.argv[1])
passed = failed = 0
# kiln_mpi.h: libkiln-mpi's header, installed when Open MPI was found (meson option mpi).
PUBLIC_HEADERS = {'kiln.h', 'kiln_cl.h', 'kiln_version.h', 'kiln_mpi.h'}

PROGRAM = r'''
#include <stdio.h>
#include "kiln.h"
#ifdef CONSUMER_CL
#include "kiln_cl.h"
#endif
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
        kiln_add(t, t, &u) != KILN_OK || kiln_tensor_read(u, out, sizeof out) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
#ifdef CONSUMER_CL
    if (kiln_tensor_cl_mem(u) == NULL)
        return 1;
#endif
    printf("kiln %s (header %s) on %s: %g %g %g\n", kiln_version(), KILN_VERSION_STRING,
           kiln_device_spec(dev), out[0], out[1], out[2]);
    kiln_tensor_release(u);
    kiln_tensor_release(t);
    return out[0] == 2 && out[1] == 4 && out[2] == 6 ? 0 : 1;
}
'''
CFLAGS = ['-std=c11', '-Wall', '-Wextra', '-Wpedantic', '-Werror']


def sh(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    if p.returncode != 0:
        raise AssertionError(f'{shlex.join(args)}: exit {p.returncode}\n{p.stdout[-3000:]}\n'
                             f'{p.stderr[-3000:]}')
    return p.stdout


def case(name, fn, *args):
    global passed, failed
    try:
        fn(*args)
        passed += 1
        print(f'ok: {name}')
    except Exception as e:  # noqa: BLE001 - report and go on
        failed += 1
        print(f'FAIL: {name}: {e}')


def write_program(d):
    with open(f'{d}/myprog.c', 'w') as f:
        f.write(PROGRAM)
    return f'{d}/myprog.c'


def check_run(cmd, env=None):
    out = sh(cmd, env=env)
    assert ': 2 4 6' in out, out


def check_include_path(flags, ours):
    """Every -I folder of kiln's (in the source, the build or the prefix, i.e. under one of ours)
    holds kiln's public headers and no other header (no lib/ internals)."""
    for flag in flags:
        path = os.path.realpath(flag[2:])
        if flag.startswith('-I') and any(path == o or path.startswith(o + os.sep) for o in ours):
            extra = {os.path.basename(h) for h in glob.glob(os.path.join(flag[2:], '*.h'))
                     if os.path.basename(h) not in PUBLIC_HEADERS}
            assert not extra, f'{flag} exposes headers that are not kiln\'s API: {sorted(extra)}'


def pkg_config(env, package, d):
    cflags = shlex.split(sh(['pkg-config', '--cflags', package], env=env))
    libs = shlex.split(sh(['pkg-config', '--libs', package], env=env))
    assert any(f.startswith('-I') for f in cflags), f'no -I in {cflags}'
    check_include_path(cflags, [os.path.realpath(src), os.path.realpath(d)])
    return cflags + libs


def build_tree(d):
    """Build tree: meson-uninstalled/kiln-uninstalled.pc, LD_LIBRARY_PATH=<build>."""
    env = dict(os.environ, PKG_CONFIG_PATH=f'{d}/build/meson-uninstalled')
    flags = pkg_config(env, 'kiln-uninstalled', d)
    prog = write_program(d)
    sh(['cc'] + CFLAGS + [prog, '-o', f'{d}/myprog-uninstalled'] + flags)
    check_run([f'{d}/myprog-uninstalled'], dict(os.environ, LD_LIBRARY_PATH=f'{d}/build'))
    sh(['cc'] + CFLAGS + ['-DCONSUMER_CL', prog, '-o', f'{d}/myprog-uninstalled-cl'] + flags)
    check_run([f'{d}/myprog-uninstalled-cl'], dict(os.environ, LD_LIBRARY_PATH=f'{d}/build'))


def installed(d):
    """Installed into a prefix of one's own: PKG_CONFIG_PATH and an rpath to its libdir."""
    sh(['meson', 'install', '-C', f'{d}/build', '--quiet'])
    pcdirs = sorted({os.path.dirname(p) for p in
                     glob.glob(f'{d}/prefix/**/pkgconfig/kiln.pc', recursive=True)})
    assert pcdirs, f'no kiln.pc installed under {d}/prefix'
    env = dict(os.environ, PKG_CONFIG_PATH=':'.join(pcdirs))
    flags = pkg_config(env, 'kiln', d)
    libdir = sh(['pkg-config', '--variable=libdir', 'kiln'], env=env).strip()
    headers = {os.path.basename(h) for h in glob.glob(f'{d}/prefix/include/*.h')}
    mpi_pc = glob.glob(f'{d}/prefix/**/pkgconfig/kiln-mpi.pc', recursive=True)
    want = PUBLIC_HEADERS if mpi_pc else PUBLIC_HEADERS - {'kiln_mpi.h'}
    assert headers == want, f'installed headers: {sorted(headers)}'
    pages = {os.path.basename(p) for p in glob.glob(f'{d}/prefix/share/man/man1/*')}
    assert pages == {'kiln-info.1', 'kiln-bench.1'}, f'installed manual pages: {sorted(pages)}'
    if mpi_pc:
        # libkiln-mpi links through its own .pc (kiln and Open MPI's flags come with it).
        mpi_prog = f'{d}/mpiprog.c'
        with open(mpi_prog, 'w') as f:
            f.write('#include <kiln_mpi.h>\nint main(void) { return kiln_mpi_allreduce('
                    'MPI_COMM_WORLD, NULL, 0, KILN_MPI_SUM) == KILN_OK ? 1 : 0; }\n')
        sh(['cc'] + CFLAGS + [mpi_prog, '-o', f'{d}/mpiprog'] + pkg_config(env, 'kiln-mpi', d)
           + [f'-Wl,-rpath,{libdir}'])
    prog = write_program(d)
    for name, extra in (('myprog', []), ('myprog-cl', ['-DCONSUMER_CL'])):
        sh(['cc'] + CFLAGS + extra + [prog, '-o', f'{d}/{name}'] + flags +
           [f'-Wl,-rpath,{libdir}'])
        check_run([f'{d}/{name}'])


def subproject():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(f'{d}/subprojects')
        os.symlink(src, f'{d}/subprojects/kiln')
        write_program(d)
        with open(f'{d}/meson.build', 'w') as f:
            f.write("project('myprog', 'c', default_options: ['c_std=c11', 'warning_level=3'])\n"
                    "kiln = dependency('kiln', fallback: 'kiln',\n"
                    "  default_options: ['tests=disabled'])\n"
                    "executable('myprog', 'myprog.c', dependencies: kiln)\n")
        sh(['meson', 'setup', '--force-fallback-for=kiln', '-Dwerror=true', f'{d}/build', d])
        sh(['meson', 'compile', '-C', f'{d}/build', 'myprog'])
        check_run([f'{d}/build/myprog'])


with tempfile.TemporaryDirectory() as d:
    try:
        sh(['meson', 'setup', f'{d}/build', src, f'--prefix={d}/prefix', '-Dtests=disabled'])
        sh(['meson', 'compile', '-C', f'{d}/build'])
        case('from a build tree, through pkg-config kiln-uninstalled', build_tree, d)
        case('installed, through pkg-config kiln', installed, d)
    except AssertionError as e:
        failed += 2
        print(f'FAIL: building kiln for the installed and build-tree cases: {e}')
case('as a Meson subproject, dependency(\'kiln\')', subproject)
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
