#!/usr/bin/env python3
"""uninstalled-pc.py PCFILE - drop from kiln-uninstalled.pc's Cflags the -I flags that Meson adds
for the folder where libkiln is declared: the project root (-I${srcdir}) and the build root
(-I${prefix}). A consumer building against the build tree must see only include/ (kiln.h,
kiln_cl.h, kiln_mpi.h) and the build's include/ (kiln_version.h), never kiln's lib/, tests/ or
tools/ folders through an #include "lib/..." of its own. meson.build runs this right after
pkg.generate; tests/check-pc.py checks the result."""
import sys

DROP = {'-I${prefix}', '-I${srcdir}', '-I${prefix}/', '-I${srcdir}/', '-I${prefix}/.',
        '-I${srcdir}/.'}

path = sys.argv[1]
with open(path, encoding='utf-8') as f:
    lines = f.read().split('\n')
out = []
for line in lines:
    if line.startswith('Cflags:'):
        flags = [w for w in line[len('Cflags:'):].split() if w not in DROP]
        line = 'Cflags: ' + ' '.join(flags)
    out.append(line)
with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(out))
