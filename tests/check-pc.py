#!/usr/bin/env python3
"""check-pc.py SRCDIR BUILDDIR - build/meson-uninstalled/kiln-uninstalled.pc (issue 22, item 9):
every -I of its Cflags is an include/ folder (the source's, the build's), none is the project
root or the build root (which would put kiln's lib/, tests/ and tools/ on a consumer's include
path), and kiln.h and kiln_version.h are found through them. The variables are expanded as
pkg-config expands them; no pkg-config needed."""
import os
import re
import sys

src, build = (os.path.realpath(p) for p in sys.argv[1:3])
pc = os.path.join(build, 'meson-uninstalled', 'kiln-uninstalled.pc')
variables, cflags = {}, None
with open(pc, encoding='utf-8') as f:
    for line in f:
        line = line.rstrip('\n')
        m = re.match(r'^([A-Za-z_][A-Za-z0-9_.]*)=(.*)$', line)
        if m:
            variables[m.group(1)] = m.group(2)
        elif line.startswith('Cflags:'):
            cflags = line[len('Cflags:'):]


def expand(s):
    for _ in range(10):
        s = re.sub(r'\$\{([^}]+)\}', lambda m: variables.get(m.group(1), ''), s)
    return s


problems = []
if cflags is None:
    problems.append(f'{pc}: no Cflags line')
    cflags = ''
dirs = [os.path.realpath(expand(w[2:])) for w in cflags.split() if w.startswith('-I')]
for d in dirs:
    if d in (src, build):
        problems.append(f'-I{d} is the project {"root" if d == src else "build root"}: a '
                        'consumer\'s #include "lib/..." would reach kiln\'s internal headers')
    elif os.path.basename(d) != 'include':
        problems.append(f'-I{d} is not an include/ folder')
for header in ['kiln.h', 'kiln_cl.h', 'kiln_version.h']:
    if not any(os.path.isfile(os.path.join(d, header)) for d in dirs):
        problems.append(f'{header} is not found through the -I flags {dirs}')
print(f'{pc}: Cflags:{cflags}')
for p in problems:
    print('FAIL:', p)
sys.exit(1 if problems else 0)
