#!/usr/bin/env python3
"""check-symbols.py [--update | --update-from-headers] LIBKILN SYMBOLS HEADER... - libkiln's ABI.

SYMBOLS (tests/symbols.txt) is the committed, sorted list of the functions libkiln exports.
The check fails, printing what differs, when
  - libkiln exports a symbol that is not in SYMBOLS, or misses one that is (the ABI changed:
    if on purpose, run scripts/update-symbols.sh and commit the list with the change);
  - a KILN_API function declared in one of the HEADERs (include/kiln.h, include/kiln_cl.h) is
    not exported, or libkiln exports a function that no public header declares;
  - libkiln exports anything that is not kiln_ API (kiln__ internals, helpers of other names).
--update rewrites SYMBOLS from the library; --update-from-headers from the KILN_API
declarations in the HEADERs (for a list that is right before the functions are written).
"""
import difflib
import re
import subprocess
import sys

args = sys.argv[1:]
mode = args.pop(0) if args and args[0].startswith('--') else ''
if mode not in ('', '--update', '--update-from-headers') or len(args) < 3:
    sys.exit(__doc__)
lib, symbols_path, headers = args[0], args[1], args[2:]

# KILN_API <return type> kiln_name( ... on one or more lines; the #define of KILN_API itself
# has no kiln_ name before a parenthesis.
DECL = re.compile(r'^\s*KILN_API\b[^;(#]*?\b(kiln_\w+)\s*\(', re.M)


def declared_in(path):
    with open(path, encoding='utf-8') as f:
        return set(DECL.findall(f.read()))


def exported_by(path):
    out = subprocess.run(['nm', '-D', '--defined-only', path], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] != 'A':  # 'A': version-node markers, not symbols
            name = parts[2].split('@')[0]
            if not name.startswith('__gcov_'):  # a coverage build's runtime (scripts/coverage.sh)
                names.add(name)
    return names


declared = set().union(*(declared_in(h) for h in headers))
if mode == '--update-from-headers':
    new = declared
elif mode == '--update':
    new = exported_by(lib)
if mode:
    with open(symbols_path, 'w', encoding='utf-8') as f:
        f.writelines(f'{s}\n' for s in sorted(new))
    print(f'wrote {len(new)} symbols to {symbols_path}')
    sys.exit(0)

exported = exported_by(lib)
with open(symbols_path, encoding='utf-8') as f:
    listed = {line.strip() for line in f if line.strip() and not line.startswith('#')}

problems = 0


def report(title, names):
    global problems
    if names:
        problems += len(names)
        print(f'{title}:')
        for n in sorted(names):
            print(f'  {n}')


if exported != listed:
    print(f'exported symbols differ from {symbols_path} (- listed, + exported):')
    sys.stdout.writelines(difflib.unified_diff([f'{s}\n' for s in sorted(listed)],
                                               [f'{s}\n' for s in sorted(exported)],
                                               symbols_path, lib, n=0))
    print('if the change is intended, run scripts/update-symbols.sh and commit the list')
    problems += len(exported ^ listed)
report('not public API (internal or not kiln_), yet exported',
       {s for s in exported if s.startswith('kiln__') or not s.startswith('kiln_')})
report('declared KILN_API in ' + ', '.join(headers) + ' but not exported', declared - exported)
report('exported but declared in no public header',
       {s for s in exported - declared if s.startswith('kiln_') and not s.startswith('kiln__')})
print(f'{len(exported)} exported, {len(listed)} listed, {len(declared)} declared; '
      f'{problems} problems')
sys.exit(1 if problems else 0)
