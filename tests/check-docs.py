#!/usr/bin/env python3
"""check-docs.py - README.md and docs/*.md against the code, so that the documentation cannot rot.

Usage: check-docs.py --src SRCDIR --build BUILDDIR --cc 'CC ...' --libkiln PATH --kiln-info PATH
                     [--sanitize LIST] [--only CASE ...]

Cases (each prints ok/FAIL; the last line is 'N passed, N failed'):
  programs      every complete C program (a ```c block holding `int main`) is compiled against
                the built libkiln with -std=c11 -Wall -Wextra -Wpedantic -Werror; every one of
                at most 80 lines, and every one followed by an output block, is run. An output
                block is a ```console block right after the program (or after one paragraph ending
                with ':' that follows it) whose first line is
                `$ [VAR=value ...] ./name [args]`; the program runs with those variables and
                arguments, and its stdout then stderr must equal the block's other lines, where
                '…' in a line matches any text. Outputs are those of the development machine
                (PoCL's cpu:0 as `auto`); where `auto` is another device they are not compared
                (the programs still run and must exit 0), and where there is no CPU device the
                programs that ask for one are only compiled.
  environment   the tables of docs/environment.md list exactly the variables that lib/, tools/
                and mpi/ read with getenv() (resolved through #defines and wrapper functions; a
                getenv whose name cannot be resolved fails the case).
  statuses      docs/errors.md's status table lists every KILN_STATUS_MAP entry of kiln.h with
                its number and text, and nothing else.
  identifiers   every kiln_* and KILN_* name the pages mention exists: declared by the public
                headers (enumerators of the X-macro tables included) or named in the sources.
  links         every relative link resolves to a file, and every #anchor to a heading of it.
  map           README.md links every page of docs/ and each page opens with a '# ' title.
  readme-size   README.md stays at most 25 KiB (the rest belongs in docs/).
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument('--src', required=True)
ap.add_argument('--build', required=True)
ap.add_argument('--cc', required=True)
ap.add_argument('--libkiln', required=True)
ap.add_argument('--kiln-info', required=True)
ap.add_argument('--sanitize', default='none')
ap.add_argument('--only', nargs='*', default=None)
opt = ap.parse_args()

SRC = os.path.abspath(opt.src)
README_LIMIT = 25 * 1024
RUN_LINES = 80  # programs up to this many lines are run even without an output block
passed = failed = 0


def case(name, fn):
    global passed, failed
    if opt.only is not None and name not in opt.only:
        return
    try:
        notes = fn()
        passed += 1
        print(f'ok: {name}' + (f' ({notes})' if notes else ''))
    except AssertionError as e:
        failed += 1
        print(f'FAIL: {name}: {e}')


def pages():
    """README.md and docs/*.md, as (path relative to SRC, text)."""
    paths = ['README.md'] + sorted(os.path.relpath(p, SRC)
                                   for p in glob.glob(os.path.join(SRC, 'docs', '*.md')))
    return [(p, open(os.path.join(SRC, p), encoding='utf-8').read()) for p in paths]


def fences(text):
    """Fenced blocks as (info string, first line number of the body, body lines)."""
    out, lines, i = [], text.split('\n'), 0
    while i < len(lines):
        m = re.match(r'^```(\S*)\s*$', lines[i])
        if not m:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith('```'):
            body.append(lines[i])
            i += 1
        out.append((m.group(1), start + 1, body, i))
        i += 1
    return out, lines


def doc_programs():
    """Every complete C program: (page, line, source, output block or None)."""
    progs = []
    for path, text in pages():
        blocks, lines = fences(text)
        for k, (info, line, body, end) in enumerate(blocks):
            if info != 'c' or not re.search(r'\bint\s+main\s*\(', '\n'.join(body)):
                continue
            output = None
            if k + 1 < len(blocks):
                ninfo, nline, nbody, _ = blocks[k + 1]
                # Only blank lines between, or one short paragraph that ends with ':'.
                between = '\n'.join(lines[end + 1:nline - 2]).strip()
                if (ninfo == 'console' and (not between or ('\n\n' not in between
                                                             and between.endswith(':')))
                        and nbody and nbody[0].startswith('$ ')):
                    output = nbody
            progs.append((path, line, '\n'.join(body) + '\n', output))
    return progs


def sanitize_flags():
    s = re.sub(r"[\[\]' ]", '', opt.sanitize or 'none')
    return [] if s in ('', 'none') else [f'-fsanitize={s}']


def devices_here():
    """The spec `auto` resolves to here (or None) and whether there is a CPU device, from
    kiln-info --json."""
    import json
    p = subprocess.run([opt.kiln_info, '--json'], capture_output=True, text=True, timeout=120)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return None, False
    cpu = any(d.get('type') == 'cpu' for d in doc.get('devices', []))
    return (doc.get('auto') or {}).get('spec'), cpu


def matches(expected, actual):
    pattern = '.*'.join(re.escape(part) for part in expected.split('…'))
    return re.fullmatch(pattern, actual) is not None


def check_programs():
    progs = doc_programs()
    assert progs, 'no complete C program found in README.md and docs/ (is the parser broken?)'
    cc = shlex.split(opt.cc)
    libdir = os.path.dirname(os.path.abspath(opt.libkiln))
    flags = ['-std=c11', '-Wall', '-Wextra', '-Wpedantic', '-Werror',
             '-I', os.path.join(SRC, 'include'), '-I', os.path.join(opt.build, 'include')]
    flags += sanitize_flags()
    auto, have_cpu = devices_here()
    compare = auto == 'cpu:0'
    problems, ran, compared, no_cpu = [], 0, 0, 0
    with tempfile.TemporaryDirectory() as d:
        for n, (path, line, source, output) in enumerate(progs):
            where = f'{path}:{line}'
            c_file, exe = os.path.join(d, f'prog{n}.c'), os.path.join(d, f'prog{n}')
            with open(c_file, 'w') as f:
                f.write(source)
            p = subprocess.run(cc + flags + [c_file, '-o', exe, os.path.abspath(opt.libkiln),
                                             f'-Wl,-rpath,{libdir}', '-lm'],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                problems.append(f'{where}: does not compile:\n{p.stdout}{p.stderr}')
                continue
            if output is None and source.count('\n') > RUN_LINES:
                continue
            if not have_cpu and re.search(r'"cpu(:\d+)?"', source):
                no_cpu += 1  # a GPU-only machine: a program asking for the CPU cannot run
                continue
            env, args = dict(os.environ), []
            if output is not None:
                words = shlex.split(output[0][2:])
                while words and re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[0]):
                    k, v = words.pop(0).split('=', 1)
                    env[k] = v
                assert words and words[0].startswith('./'), \
                    f'{where}: the output block must start with "$ ./name ...": {output[0]}'
                args = words[1:]
            rundir = os.path.join(d, f'run{n}')
            os.mkdir(rundir)
            p = subprocess.run([exe] + args, cwd=rundir, env=env, capture_output=True,
                               text=True, timeout=300)
            ran += 1
            if p.returncode != 0:
                problems.append(f'{where}: exit {p.returncode}\n{p.stdout}{p.stderr}')
                continue
            if output is None or not compare:
                continue
            got = (p.stdout + p.stderr).rstrip('\n').split('\n')
            want = [x.rstrip() for x in output[1:]]
            while want and not want[-1]:
                want.pop()
            ok = len(got) == len(want) and all(matches(w, g.rstrip()) for w, g in zip(want, got))
            compared += 1
            if not ok:
                problems.append(f'{where}: output differs from the page\n--- page\n' +
                                '\n'.join(want) + '\n--- program\n' + '\n'.join(got))
    assert not problems, '\n'.join(problems)
    why = '' if compare else f'; outputs not compared: auto is {auto}, the pages show cpu:0'
    why += f'; {no_cpu} not run: they use the CPU device, and there is none' if no_cpu else ''
    return f'{len(progs)} programs compiled, {ran} run, {compared} outputs compared{why}'


# ---- environment ----------------------------------------------------------------------------

def c_files(*dirs):
    for d in dirs:
        for root, _, files in os.walk(os.path.join(SRC, d)):
            for f in sorted(files):
                if f.endswith(('.c', '.h')):
                    yield os.path.join(root, f)


def enclosing_function(text, pos):
    """Name and parameter list of the function definition enclosing pos (top-level braces)."""
    last = None
    for m in re.finditer(r'^[A-Za-z_][^\n;{}()]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*\{',
                         text[:pos], re.M):
        last = m
    return (last.group(1), last.group(2)) if last else (None, '')


def getenv_names():
    """Every variable lib/, tools/ and mpi/ read with getenv: {name: [file:line, ...]}."""
    names, unresolved = {}, []
    for path in c_files('lib', 'tools', 'mpi'):
        text = open(path, encoding='utf-8').read()
        rel = os.path.relpath(path, SRC)
        defines = dict(re.findall(r'^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)\s+"([^"]+)"', text, re.M))
        for m in re.finditer(r'\bgetenv\s*\(\s*([^)]*?)\s*\)', text):
            arg, line = m.group(1), text.count('\n', 0, m.start()) + 1
            found = []
            if re.fullmatch(r'"[^"]*"', arg):
                found = [arg[1:-1]]
            elif arg in defines:
                found = [defines[arg]]
            elif re.fullmatch(r'[A-Za-z_]\w*', arg):
                # A parameter of a wrapper: the literals its callers in this file pass.
                fn, params = enclosing_function(text, m.start())
                pnames = [re.findall(r'(\w+)\s*$', p.strip())[-1:] for p in params.split(',')]
                pnames = [p[0] for p in pnames if p]
                if fn and arg in pnames:
                    idx = pnames.index(arg)
                    for call in re.finditer(r'\b' + fn + r'\s*\(([^;]*?)\)\s*[;,)]', text):
                        args = [a.strip() for a in call.group(1).split(',')]
                        if len(args) > idx and re.fullmatch(r'"[^"]*"', args[idx]):
                            found.append(args[idx][1:-1])
            if not found:
                unresolved.append(f'{rel}:{line}: getenv({arg})')
            for n in found:
                names.setdefault(n, []).append(f'{rel}:{line}')
    assert not unresolved, ('cannot tell which variable these read (use a literal, a #define or '
                            'a wrapper called with literals):\n' + '\n'.join(unresolved))
    return names


def table_first_cells(text):
    """Backticked names in the first cell of every table row."""
    cells = set()
    for line in text.split('\n'):
        m = re.match(r'^\|\s*([^|]+?)\s*\|', line)
        if m:
            cells.update(re.findall(r'`([A-Za-z_][A-Za-z0-9_]*)`', m.group(1)))
    return cells


def check_environment():
    read = getenv_names()
    text = open(os.path.join(SRC, 'docs', 'environment.md'), encoding='utf-8').read()
    listed = table_first_cells(text)
    missing = sorted(n for n in read if n not in listed)
    extra = sorted(n for n in listed if n not in read)
    msgs = []
    if missing:
        msgs.append('read by the code but missing from docs/environment.md\'s tables: ' +
                    ', '.join(f'{n} ({read[n][0]})' for n in missing))
    if extra:
        msgs.append('in docs/environment.md\'s tables but read by no getenv in lib/, tools/, '
                    'mpi/: ' + ', '.join(extra))
    assert not msgs, '\n'.join(msgs)
    return f'{sum(n.startswith("KILN_") for n in read)} KILN_* and ' \
           f'{sum(not n.startswith("KILN_") for n in read)} other variables'


# ---- statuses -------------------------------------------------------------------------------

def check_statuses():
    hdr = open(os.path.join(SRC, 'include', 'kiln.h'), encoding='utf-8').read()
    block = hdr[hdr.index('#define KILN_STATUS_MAP(X)'):]
    block = block[:block.index('\n\n')]
    want = {f'KILN_{n}': (int(v), t) for n, v, t in
            re.findall(r'X\((\w+),\s*(-?\d+),\s*"([^"]*)"\)', block)}
    assert want, 'KILN_STATUS_MAP not found in include/kiln.h'
    text = open(os.path.join(SRC, 'docs', 'errors.md'), encoding='utf-8').read()
    got = {}
    for m in re.finditer(r'^\|\s*`(KILN_\w+)`\s*\|\s*(-?\d+)\s*\|\s*([^|]*?)\s*\|', text, re.M):
        got[m.group(1)] = (int(m.group(2)), m.group(3))
    msgs = []
    for name, (num, txt) in want.items():
        if name not in got:
            msgs.append(f'{name} ({num}) is missing from docs/errors.md\'s status table')
        elif got[name][0] != num or got[name][1] != f'"{txt}"':
            msgs.append(f'{name}: the table says {got[name][0]} {got[name][1]}, kiln.h {num} '
                        f'"{txt}"')
    msgs += [f'{name} is in docs/errors.md but not in KILN_STATUS_MAP' for name in got
             if name not in want]
    assert not msgs, '\n'.join(msgs)
    return f'{len(want)} statuses'


# ---- identifiers ----------------------------------------------------------------------------

def known_identifiers():
    cc = shlex.split(opt.cc)
    known = set()
    p = subprocess.run(cc + ['-E', '-P', '-I', os.path.join(SRC, 'include'), '-I',
                             os.path.join(opt.build, 'include'),
                             os.path.join(SRC, 'include', 'kiln.h')],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f'preprocessing kiln.h failed:\n{p.stderr}'
    known.update(re.findall(r'\b(?:kiln|KILN)_\w+', p.stdout))
    for d in ('include', 'lib', 'tools', 'mpi', 'examples', 'tests', 'fuzz', 'scripts'):
        for root, _, files in os.walk(os.path.join(SRC, d)):
            for f in files:
                if f.endswith(('.c', '.h', '.in', '.cl', '.py', '.sh', '.build', '.txt')):
                    with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
                        known.update(re.findall(r'\b(?:kiln|KILN)_\w+', fh.read()))
    return known


def check_identifiers():
    known = known_identifiers()
    msgs = []
    for path, text in pages():
        for n, line in enumerate(text.split('\n'), 1):
            for name in re.findall(r'\b(?:kiln|KILN)_[A-Za-z0-9_]+', line):
                # Placeholders written with a trailing underscore (kiln_arg_<name>) are fine.
                if name.endswith('_') or name in known:
                    continue
                msgs.append(f'{path}:{n}: {name} is not in the public headers or the sources')
    assert not msgs, '\n'.join(sorted(set(msgs)))


# ---- links and the map ------------------------------------------------------------------------

def slug(heading):
    h = heading.strip().lower().replace('`', '')
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def anchors(text):
    out, in_fence = set(), False
    for line in text.split('\n'):
        if line.startswith('```'):
            in_fence = not in_fence
        elif not in_fence and line.startswith('#'):
            out.add(slug(line.lstrip('#')))
    return out


def check_links():
    msgs, n = [], 0
    for path, text in pages():
        prose = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
        for m in re.finditer(r'\]\(([^)\s]+)\)', prose):
            target = m.group(1)
            if re.match(r'^[a-z]+:', target):
                continue
            n += 1
            file, _, anchor = target.partition('#')
            full = os.path.normpath(os.path.join(SRC, os.path.dirname(path), file)) if file \
                else os.path.join(SRC, path)
            if not os.path.exists(full):
                msgs.append(f'{path}: link to {target}: no such file')
                continue
            if anchor and full.endswith('.md'):
                if anchor not in anchors(open(full, encoding='utf-8').read()):
                    msgs.append(f'{path}: link to {target}: no heading with that anchor')
    assert not msgs, '\n'.join(msgs)
    return f'{n} links'


def check_map():
    readme = open(os.path.join(SRC, 'README.md'), encoding='utf-8').read()
    msgs = []
    for path, text in pages():
        if not text.startswith('# '):
            msgs.append(f'{path} does not open with a "# " title')
        if path.startswith('docs/') and f'({path})' not in readme:
            msgs.append(f'README.md\'s map of docs/ does not link {path}')
    assert not msgs, '\n'.join(msgs)


def check_readme_size():
    size = os.path.getsize(os.path.join(SRC, 'README.md'))
    assert size <= README_LIMIT, f'README.md is {size} bytes, over {README_LIMIT}: move ' \
                                 'reference material into docs/'
    return f'{size} bytes'


case('programs', check_programs)
case('environment', check_environment)
case('statuses', check_statuses)
case('identifiers', check_identifiers)
case('links', check_links)
case('map', check_map)
case('readme-size', check_readme_size)
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
