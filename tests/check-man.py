#!/usr/bin/env python3
"""check-man.py GROFF PAGE=TOOL ... - the manual pages against the tools they describe.

For each page (a configured docs/man/*.1) and its tool (the built kiln-info or kiln-bench):
  render    `groff -man -ww -z PAGE` succeeds and prints no warning, and no @VAR@ is left.
  options   every option `TOOL --help` lists (-x and --long) appears in the page's OPTIONS, and
            every option the page's OPTIONS gives is one --help lists.
  sections  (kiln-bench) every SECTION --help lists, and `all`, is described under SECTIONS.
  env       every KILN_* variable --help names is described under ENVIRONMENT.
  exit      every exit status --help gives ("Exit status: 0 ok; 1 ...") is under EXIT STATUS.
GROFF is the groff program, or '' when there is none: the test is then skipped (exit 77).
Prints 'N passed, N failed'.
"""
import re
import subprocess
import sys

groff = sys.argv[1]
pairs = [a.split('=', 1) for a in sys.argv[2:]]
if not groff:
    print('SKIP: groff not found (Debian: groff-base); the manual pages were not checked')
    sys.exit(77)
passed = failed = 0


def case(name, fn, *args):
    global passed, failed
    try:
        fn(*args)
        passed += 1
        print(f'ok: {name}')
    except AssertionError as e:
        failed += 1
        print(f'FAIL: {name}: {e}')


def render_text(page):
    p = subprocess.run([groff, '-man', '-Tascii', '-rLL=78n', '-P-cbou', page],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def sections(text):
    """Rendered page -> {HEADING: body text}; headings are the lines at column 0."""
    out, name = {}, None
    for line in text.split('\n'):
        if re.match(r'^[A-Z][A-Z ]+$', line):
            name = line.strip()
            out[name] = ''
        elif name:
            out[name] += line + '\n'
    return out


def help_text(tool):
    p = subprocess.run([tool, '--help'], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f'{tool} --help: exit {p.returncode}\n{p.stderr}'
    return p.stdout


def help_options(text):
    opts = set()
    for line in text.split('\n'):
        if re.match(r'^\s*(usage:|-)', line) or re.match(r'^\s+-', line):
            opts.update(re.findall(r'(?<![\w-])(--?[A-Za-z][A-Za-z-]*)', line))
    return opts


def check_render(page):
    p = subprocess.run([groff, '-man', '-ww', '-z', page], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and not p.stderr.strip(), \
        f'groff -man -ww -z {page}: exit {p.returncode}\n{p.stderr}'
    leftover = re.findall(r'@[A-Z_]+@', open(page, encoding='utf-8').read())
    assert not leftover, f'unsubstituted {leftover} in {page}'


def check_options(page, tool):
    helped = help_options(help_text(tool))
    assert helped, f'no option found in {tool} --help'
    opts = sections(render_text(page)).get('OPTIONS', '')
    assert opts, f'{page} has no OPTIONS section'
    documented = set()
    for line in opts.split('\n'):
        if re.match(r'^ {7}-', line):  # a .TP tag
            documented.update(re.findall(r'(?<![\w-])(--?[A-Za-z][A-Za-z-]*)', line))
    missing = sorted(o for o in helped if o not in documented)
    extra = sorted(o for o in documented if o not in helped)
    msgs = []
    if missing:
        msgs.append(f'{tool} --help lists {missing}, which {page} does not describe')
    if extra:
        msgs.append(f'{page} describes {extra}, which {tool} --help does not list')
    assert not msgs, '\n'.join(msgs)


def check_sections(page, tool):
    text = help_text(tool)
    names = re.findall(r'^  (\w+) ', text.split('sections:', 1)[1].split('\noptions:')[0], re.M)
    assert names, f'no section found in {tool} --help'
    body = sections(render_text(page)).get('SECTIONS', '')
    tags = set(re.findall(r'^ {7}(\w+)\b', body, re.M))  # a .TP tag, alone or before its text
    missing = [n for n in names + ['all'] if n not in tags]
    assert not missing, f'{tool} --help lists sections {missing}, not described under SECTIONS'


def check_env(page, tool):
    names = set(re.findall(r'\bKILN_[A-Z0-9_]+', help_text(tool)))
    body = sections(render_text(page)).get('ENVIRONMENT', '')
    missing = sorted(n for n in names if not re.search(r'^ {7}' + n + r'\b', body, re.M))
    assert not missing, f'{tool} --help names {missing}, not described under ENVIRONMENT'


def check_exit(page, tool):
    text = help_text(tool)
    m = re.search(r'Exit status:(.*?)(\n\n|$)', text, re.S)
    codes = re.findall(r'(?:^|;)\s*(\d+)\b', m.group(1)) if m else []
    body = sections(render_text(page)).get('EXIT STATUS', '')
    assert body, f'{page} has no EXIT STATUS section'
    missing = [c for c in codes if not re.search(r'^ {7}' + c + r'\b', body, re.M)]
    assert not missing, f'{tool} --help gives exit statuses {missing}, not under EXIT STATUS'


for page, tool in pairs:
    name = tool.rsplit('/', 1)[-1]
    case(f'{name}: renders without warnings', check_render, page)
    case(f'{name}: options match --help', check_options, page, tool)
    if 'sections:' in help_text(tool):
        case(f'{name}: every section is described', check_sections, page, tool)
    case(f'{name}: environment variables of --help', check_env, page, tool)
    case(f'{name}: exit statuses of --help', check_exit, page, tool)
print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
