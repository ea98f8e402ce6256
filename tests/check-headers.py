#!/usr/bin/env python3
"""check-headers.py SRCDIR BUILDDIR CC [CXX] [CL_INCLUDEDIR] - the public headers compile alone.

- kiln.h as pedantic C11 and as C++11, with only include/ and the build's include/ (where
  kiln_version.h is generated) on the include path, behind a folder whose CL/cl.h (and the other
  OpenCL headers) stop the build: kiln.h must not need OpenCL headers.
- kiln_cl.h as pedantic C11 and as C++11 with the OpenCL headers (CL_INCLUDEDIR, else the
  compiler's default path).
CC and CXX are compiler command lines (CXX may be ''); prints 'N passed, N failed'.
"""
import os
import shlex
import subprocess
import sys
import tempfile

src, build, cc = sys.argv[1], sys.argv[2], shlex.split(sys.argv[3])
cxx = shlex.split(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else []
cl_inc = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else ''
tests = os.path.join(src, 'tests')
inc = ['-I', os.path.join(src, 'include'), '-I', os.path.join(build, 'include')]
warn = ['-Wall', '-Wextra', '-Wpedantic', '-Werror']
c_mode = ['-std=c11'] + warn
cxx_mode = ['-std=c++11'] + warn
passed = failed = 0
CL_HEADERS = ['cl.h', 'opencl.h', 'cl_platform.h', 'cl_ext.h', 'cl_gl.h', 'cl_version.h']


def case(name, cmd):
    global passed, failed
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(cmd + ['-o', os.path.join(d, 'out.o')], capture_output=True,
                           text=True)
    if p.returncode == 0:
        passed += 1
        print(f'ok: {name}')
    else:
        failed += 1
        print(f'FAIL: {name}\n  {shlex.join(cmd)}\n{p.stdout}{p.stderr}')


with tempfile.TemporaryDirectory() as poison:
    for sub in ('CL', 'OpenCL'):
        os.makedirs(os.path.join(poison, sub))
        for h in CL_HEADERS:
            with open(os.path.join(poison, sub, h), 'w') as f:
                f.write(f'#error "{sub}/{h} included: kiln.h must compile without OpenCL '
                        'headers (the interop is in kiln_cl.h)"\n')
    no_cl = ['-I', poison] + inc
    case('kiln.h alone, C11, no OpenCL headers',
         cc + c_mode + no_cl + ['-c', os.path.join(tests, 'header-alone.c')])
    if cxx:
        case('kiln.h alone, C++11, no OpenCL headers',
             cxx + cxx_mode + no_cl + ['-c', os.path.join(tests, 'header-alone.cpp')])
        case('header-alone.c compiled as C++',
             cxx + cxx_mode + no_cl + ['-x', 'c++', '-c', os.path.join(tests, 'header-alone.c')])
    else:
        print('skipped: C++ checks (no C++ compiler found)')

with_cl = inc + (['-I', cl_inc] if cl_inc else [])
case('kiln_cl.h alone, C11, with the OpenCL headers',
     cc + c_mode + with_cl + ['-c', os.path.join(tests, 'header-cl-alone.c')])
if cxx:
    case('kiln_cl.h alone, C++11, with the OpenCL headers',
         cxx + cxx_mode + with_cl + ['-x', 'c++', '-c', os.path.join(tests, 'header-cl-alone.c')])

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
