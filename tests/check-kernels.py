#!/usr/bin/env python3
"""check-kernels.py - rules for the built-in OpenCL C sources that no CPU device can enforce.

- No `inline` without `static`: in OpenCL C 1.2 (C99) a plain `inline` function is an inline
  definition with no external definition, so a call the compiler does not inline fails to link
  (NVIDIA's compiler may reject it); write a plain function or `static inline`.
- `#pragma OPENCL FP_CONTRACT OFF` in every file whose results a test checks bit for bit
  (NVIDIA's compiler contracts a * b + c to fma by default).
- No variadic macros (`#define F(...)`, `__VA_ARGS__`): OpenCL C 1.2 has none and NVIDIA's
  compiler rejects them ("variadic macros not supported in OpenCL"), while PoCL and Oclgrind
  accept them. The macros embed.py generates in front of the prelude are checked too.
- In a source built one kernel per program (it says KILN_ONLY, lib/kernels/embed.py), every
  kernel defined at the top level (`kernel void kiln_x(` or `MACRO(kiln_x, ...)`) comes right
  after its guard `#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_x)`: a kernel outside one
  would be compiled into the program of every other kernel.

Usage: check-kernels.py KERNEL_DIR
"""
import os
import re
import sys

# Kernels whose results tests compare bit for bit (tests/test-random.c, test-creation.c
# test_arange_not_fused, test-fusion.c: fused against eager elementwise), or whose error bounds
# rest on exact roundings (reduce.cl's compensated sums).
BIT_EXACT = ['random.cl', 'creation.cl', 'reduce.cl', 'elementwise.cl']


def strip_comments(src):
    src = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), src, flags=re.S)
    return re.sub(r'//[^\n]*', '', src)


def main():
    kdir = sys.argv[1]
    errors = []
    for name in sorted(os.listdir(kdir)):
        if not name.endswith('.cl'):
            continue
        src = strip_comments(open(os.path.join(kdir, name)).read())
        for no, line in enumerate(src.split('\n'), 1):
            if re.search(r'\binline\b', line) and not re.search(r'\bstatic\s+inline\b', line):
                errors.append(f'{name}:{no}: `inline` without `static`: make it a plain '
                              f'function or `static inline`: {line.strip()}')
        if name in BIT_EXACT and not re.search(r'^\s*#\s*pragma\s+OPENCL\s+FP_CONTRACT\s+OFF',
                                               src, flags=re.M):
            errors.append(f'{name}: tests check its results bit for bit but it lacks '
                          f'`#pragma OPENCL FP_CONTRACT OFF` (NVIDIA fuses multiply-adds)')
    sys.path.insert(0, kdir)
    sys.dont_write_bytecode = True  # nothing written into the source tree
    import embed  # the generated KILN_IF_<name> / KILN_STORE_AS_<name> lines
    hdr = os.path.join(kdir, '..', '..', 'include', 'kiln.h')
    found = embed.extract_tables(hdr)
    generated = embed.tables_text(found).decode().split('\n')
    sources = [(name, strip_comments(open(os.path.join(kdir, name)).read()).split('\n'))
               for name in sorted(os.listdir(kdir)) if name.endswith('.cl')]
    sources.append(('embed.py (generated)', generated))
    for name, lines in sources:
        for no, line in enumerate(lines, 1):
            if re.search(r'#\s*define\s+\w+\([^)]*\.\.\.\s*\)|__VA_ARGS__', line):
                errors.append(f'{name}:{no}: variadic macro (NVIDIA\'s OpenCL C compiler '
                              f'rejects it): give it fixed parameters: {line.strip()}')
    for name in sorted(os.listdir(kdir)):
        if not name.endswith('.cl'):
            continue
        path = os.path.join(kdir, name)
        text = embed.instantiate(open(path, 'rb').read(), found, path).decode()
        if 'KILN_ONLY' not in text:
            continue
        prev = ''
        for no, line in enumerate(strip_comments(text).split('\n'), 1):
            m = re.match(r'(?:kernel void |\w+\()(kiln_\w+)\b', line)
            want = f'#if !defined(KILN_ONLY) || defined(KILN_WANT_{m.group(1)})' if m else ''
            if m and prev.strip() != want:
                errors.append(f'{name}:{no}: kernel {m.group(1)} is not right after its guard '
                              f'"{want}" (the source is built one kernel per program)')
            if line.strip():
                prev = line
    for e in errors:
        print(e)
    print(f'{len(errors)} problem(s)' if errors else 'kernel sources: ok')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
