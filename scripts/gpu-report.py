#!/usr/bin/env python3
"""gpu-report.py --work DIR --out DIR [--final] [--signal NAME]

The report half of scripts/gpu-check.sh, run after every step and from its exit and signal traps:
reads what the run has recorded so far in its work folder (run.tsv, plan.txt, steps.tsv,
suites.txt, tests.tsv, each step's stdout NAME.out, each suite's meson output tests/NAME.out)
and writes OUT/gpu-report.json (everything, machine-readable) and OUT/gpu-summary.txt (what a
person reads first), each replaced whole (written beside, then renamed). Exits 1 when a step or
a suite failed or timed out, 3 when the report itself could not be made, else 0. Standard
library only.
"""
import argparse
import json
import os
import re
import sys
import time
import traceback

# How each figure was timed (issue 19): kiln-bench measures wall time on the host around the
# enqueue and the wait (clFinish) unless a result says otherwise ("timing" in its JSON).
KILN_TIMING_DEFAULT = 'wall'
TIMING_NOTE = ('kiln-bench figures are wall time on the host (from the first enqueue to the '
               'end of the wait for the device), launch overhead included, unless a row says '
               '"device" (OpenCL event profiling). PyTorch rows: add and sgemm are device time '
               '(CUDA events around the kernels), h2d/d2h are wall time around a synchronised '
               'copy, as kiln-bench times them. kiln-bench rows whose baseline is "PyTorch ..." '
               'ran PyTorch on the host CPU (tools/bench/torch_ref.py), not on the GPU.')


def read(path):
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return None


def lines(path):
    text = read(path)
    return [ln for ln in text.splitlines() if ln.strip()] if text else []


def tsv(path, ncols):
    rows = []
    for ln in lines(path):
        parts = ln.split('\t')
        rows.append(parts + [''] * (ncols - len(parts)))
    return rows


def num(text, kind=float, default=0):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return default


def parse_json(text):
    """The first JSON object in a step's output (stderr lines may stand around it), or None."""
    if not text:
        return None
    start = text.find('{')
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find('{', start + 1)
    return None


def parse_json_lines(text):
    """Every JSON object that stands on a line of its own."""
    out = []
    for ln in (text or '').splitlines():
        ln = ln.strip()
        if ln.startswith('{') and ln.endswith('}'):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
    return out


# "1/3 kiln:device / NAME OK" (Meson 1.0) or "1/3 device - kiln:NAME OK" (Meson 1.12).
RESULT_RE = re.compile(r'^\s*\d+/\d+\s+(?:\S+\s+[/-]\s+)?(?:[\w.+-]+:)?(\S+)\s+'
                       r'(OK|FAIL|SKIP|TIMEOUT|INTERRUPT|ERROR|EXPECTEDFAIL|UNEXPECTEDPASS)\b',
                       re.M)


def parse_meson(text):
    """Results of one `meson test` run: counts and the tests of each result (meson repeats the
    failures in its "Summary of Failures": each test counts once)."""
    counts = {k: 0 for k in ('ok', 'fail', 'skip', 'timeout', 'interrupt', 'error',
                             'expectedfail', 'unexpectedpass')}
    result = dict(RESULT_RE.findall(text or ''))
    named = {}
    for name, res in result.items():
        counts[res.lower()] += 1
        named.setdefault(res.lower(), []).append(name)
    skipped_cases = sum(num(m, int) for m in
                        re.findall(r'^(\d+) case\(s\) skipped', text or '', re.M))
    return counts, named, skipped_cases


def features(setup_text):
    """Meson's Features summary of the setup step: {name: 'YES'/'NO'} (meson writes True/False,
    true/false (1.12) or YES/NO)."""
    feats = {}
    section = False
    for ln in (setup_text or '').splitlines():
        if re.match(r'^\s*Features\s*$', ln):
            section = True
            continue
        if section:
            m = re.match(r'^\s+(.+?)\s*:\s*(YES|NO|True|False|true|false)\s*$', ln)
            if m:
                feats[m.group(1)] = 'YES' if m.group(2) in ('YES', 'True', 'true') else 'NO'
            elif ln.strip() and not ln.startswith(' '):
                section = False
    return feats


def bench(work, sections):
    """kiln-bench results of every section that ran, each row with its section and timing."""
    doc = {'device': None, 'results': [], 'notes': [], 'sections': {}}
    for s in sections:
        text = read(os.path.join(work, 'bench-%s.out' % s))
        d = parse_json(text)
        doc['sections'][s] = 'results' if d else ('no JSON' if text is not None else 'not run')
        if not d:
            continue
        doc['device'] = doc['device'] or d.get('device')
        doc['kiln_version'] = d.get('kiln_version')
        for r in d.get('results', []):
            r = dict(r)
            r['section'] = s
            r.setdefault('timing', KILN_TIMING_DEFAULT)
            doc['results'].append(r)
        doc['notes'] += ['%s: %s' % (s, n) for n in d.get('notes', [])]
    return doc


def torch_doc(text):
    """gpu-torch-bench.py's output: a header line, then one line per result (JSON each)."""
    objs = parse_json_lines(text)
    if not objs:
        return None
    doc = {'results': []}
    for o in objs:
        if 'name' in o and 'torch' in o:
            doc['results'].append(o)
        else:
            doc.update(o)
    return doc


def ratios(kiln, torch):
    """kiln / PyTorch for every PyTorch figure that kiln-bench measured too (>= 1: kiln at
    least as fast), with how each side was timed."""
    out = []
    if not kiln or not torch:
        return out
    by_name = {r['name']: r for r in kiln.get('results', [])}
    for t in torch.get('results', []):
        name = t['name']
        base = name.replace(' pinned', '')
        k = by_name.get(base) or by_name.get(base + ' kiln')  # sgemm rows: "sgemm N kiln"
        if not k or not t.get('torch'):
            continue
        higher = k.get('higher_is_better', True)
        out.append({'name': name, 'unit': t['unit'], 'kiln': k['kiln'], 'torch': t['torch'],
                    'ratio': (k['kiln'] / t['torch']) if higher else (t['torch'] / k['kiln']),
                    'kiln_timing': k.get('timing', KILN_TIMING_DEFAULT),
                    'torch_timing': t.get('timing', 'device'),
                    'note': 'kiln from pageable memory' if name != base else ''})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--final', action='store_true')
    ap.add_argument('--signal')
    args = ap.parse_args()
    w = args.work

    run = {r[0]: r[1] for r in tsv(os.path.join(w, 'run.tsv'), 2)}
    mode = run.get('mode', '?')
    budget = num(run.get('budget'), int)
    started = num(run.get('start'), int, int(time.time()))
    elapsed = int(time.time()) - started
    plan = lines(os.path.join(w, 'plan.txt'))

    steps = []
    for name, status, rc, secs, limit, reason in tsv(os.path.join(w, 'steps.tsv'), 6):
        s = {'name': name, 'status': status, 'rc': num(rc, int), 'seconds': num(secs),
             'limit': num(limit, int)}
        if reason:
            s['reason'] = reason
        steps.append(s)
    seen = {s['name'] for s in steps}
    running = None
    for name in plan:
        if name not in seen:
            if running is None and not args.final:
                running = name
            steps.append({'name': name, 'status': 'not run', 'rc': None, 'seconds': 0,
                          'limit': 0,
                          'reason': ('not reached yet' if not args.final else
                                     'the run ended first' + (' (SIG%s)' % args.signal
                                                              if args.signal else ''))})
    order = {n: i for i, n in enumerate(plan)}
    steps.sort(key=lambda s: order.get(s['name'], len(order)))

    # ---- tests ---------------------------------------------------------------------------
    suites = lines(os.path.join(w, 'suites.txt'))
    events = tsv(os.path.join(w, 'tests.tsv'), 6)
    by_suite = {}
    for name, status, rc, secs, limit, reason in events:
        if status == 'started':
            by_suite.setdefault(name, {'name': name, 'status': 'running', 'limit': num(limit, int)})
            continue
        by_suite[name] = {'name': name, 'status': status, 'rc': num(rc, int),
                          'seconds': num(secs), 'limit': num(limit, int)}
        if reason:
            by_suite[name]['reason'] = reason
    totals = {}
    suite_rows = []
    for name in suites + [n for n in by_suite if n not in suites]:
        if name not in by_suite:
            continue
        r = by_suite[name]
        if r['status'] == 'running':
            r['reason'] = ('no result: the run was killed while it ran' if args.final
                           else 'running')
        counts, named, skipped_cases = parse_meson(read(os.path.join(w, 'tests', name + '.out')))
        r['results'] = {k: v for k, v in counts.items() if v}
        for k, v in named.items():
            if k != 'ok':
                r[k + '_tests'] = v
        if skipped_cases:
            r['skipped_cases'] = skipped_cases
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
        suite_rows.append(r)
    never = [n for n in suites if n not in by_suite]
    tests = None
    if suites or events:
        tests = {
            'suites': suite_rows,
            'totals': {k: v for k, v in totals.items() if v},
            'never_started': never,
            'never_started_reason': ('the time budget ran out, or the run was stopped'
                                     if args.final else 'not started yet'),
            'interrupted': sorted({n for r in suite_rows for n in r.get('interrupt_tests', [])} |
                                  {r['name'] for r in suite_rows
                                   if r['status'] in ('interrupted', 'running')}),
            'failed': sorted({r['name'] for r in suite_rows
                              if r['status'] in ('fail', 'timeout')}),
            'not_in_build': lines(os.path.join(w, 'absent.txt')),
            'not_in_gpu_list': lines(os.path.join(w, 'unlisted.txt')),
        }

    sections = [n[len('bench-'):] for n in plan if n.startswith('bench-')]
    kiln_bench = bench(w, sections)
    torch = torch_doc(read(os.path.join(w, 'torch.out')))
    env_text = (read(os.path.join(w, 'env.out')) or '').strip()
    # The Features of the configuration that was built (setup-auto: the retry with every option
    # auto, after a setup that asked for everything carried failed).
    setup_text = read(os.path.join(w, 'setup-auto.out')) or read(os.path.join(w, 'setup.out'))

    failed = [s['name'] for s in steps if s['status'] in ('fail', 'timeout')]
    if tests:
        failed += ['suite ' + n for n in tests['failed']]
    if args.signal:
        state = 'stopped by SIG%s after %d s' % (args.signal, elapsed)
    elif args.final:
        state = 'complete'
    else:
        state = ('running%s (the report is rewritten after every step: if this is the last '
                 'one, the run was killed there)' % (': ' + running if running else ''))

    report = {
        'mode': mode,
        'state': state,
        'final': args.final,
        'signal': args.signal,
        'budget_seconds': budget,
        'seconds': elapsed,
        'failed': failed,
        'steps': steps,
        'environment': env_text,
        'features': features(setup_text),
        'kiln_info': (read(os.path.join(w, 'kiln-info.out')) or '').strip(),
        'kiln_info_json': parse_json(read(os.path.join(w, 'kiln-info-json.out'))),
        'kiln_info_check': (read(os.path.join(w, 'kiln-info-check.out')) or '').strip(),
        'tests': tests,
        'timing': TIMING_NOTE,
        'kiln_bench': kiln_bench,
        'torch': torch,
        'kiln_vs_torch': ratios(kiln_bench, torch),
    }
    write(os.path.join(args.out, 'gpu-report.json'), json.dumps(report, indent=1) + '\n')
    write(os.path.join(args.out, 'gpu-summary.txt'), summary(report) + '\n')
    return 1 if failed else 0


def summary(rep):
    out = ['kiln gpu-check (%s mode), %d of %d s, %s: %s' %
           (rep['mode'], rep['seconds'], rep['budget_seconds'], rep['state'],
            'FAILED: ' + ', '.join(rep['failed']) if rep['failed'] else 'nothing failed')]
    for s in rep['steps']:
        out.append('  %-18s %-11s %6.1f s%s%s' %
                   (s['name'], s['status'], s['seconds'],
                    ' of %d' % s['limit'] if s.get('limit') else '',
                    '  (%s)' % s['reason'] if s.get('reason') else ''))
    for ln in rep['environment'].splitlines():
        if ln.startswith('GPU ') or ln.startswith('NVIDIA') or ln.startswith('uname'):
            out.append(ln)
    if rep['features']:
        out.append('features: ' + ', '.join('%s %s' % (k, v) for k, v in rep['features'].items()))
    if rep['kiln_info']:
        out += ['kiln-info:'] + ['  ' + ln for ln in rep['kiln_info'].splitlines()[:8]]
    if rep['kiln_info_check']:
        out += ['kiln-info --check:'] + ['  ' + ln for ln in rep['kiln_info_check'].splitlines()[:8]]
    t = rep['tests']
    if t:
        tot = t['totals']
        out.append('tests: %d suites run of %d; tests %s' %
                   (len(t['suites']), len(t['suites']) + len(t['never_started']),
                    ', '.join('%d %s' % (v, k) for k, v in tot.items()) or 'none finished'))
        for r in t['suites']:
            bad = [n for k in ('fail', 'timeout', 'interrupt', 'error', 'unexpectedpass')
                   for n in r.get(k + '_tests', [])]
            out.append('  %-22s %-11s %6.1f s of %d%s%s%s' %
                       (r['name'], r['status'], r.get('seconds', 0), r.get('limit', 0),
                        '  %d case(s) skipped' % r['skipped_cases'] if r.get('skipped_cases') else '',
                        '  bad: ' + ' '.join(bad) if bad else '',
                        '  (%s)' % r['reason'] if r.get('reason') else ''))
        if t['never_started']:
            out.append('  never started (%s): %s' % (t['never_started_reason'],
                                                    ' '.join(t['never_started'])))
        if t['not_in_build']:
            out.append('  not in this build: ' + ' '.join(t['not_in_build']))
        if t['not_in_gpu_list']:
            out.append('  tests of this build not in the GPU list: ' + ' '.join(t['not_in_gpu_list']))
    kb = rep['kiln_bench']
    if kb['results']:
        out.append('kiln-bench on %s (kiln vs its baseline; timing: wall = host clock, device = '
                   'OpenCL events):' % ((kb.get('device') or {}).get('name') or '?'))
        for r in kb['results']:
            out.append('  %-44s %10.4g %-7s %-6s ratio %s  vs %s' %
                       (r['name'], r['kiln'], r['unit'], r['timing'],
                        '%.2f' % r['ratio'] if r.get('ratio') is not None else '-',
                        r.get('baseline') or '-'))
    if rep['kiln_vs_torch']:
        out.append('kiln / PyTorch on the same GPU (>= 1: kiln at least as fast):')
        for r in rep['kiln_vs_torch']:
            out.append('  %-24s kiln %10.4g (%s)  torch %10.4g (%s) %-7s ratio %.2f %s' %
                       (r['name'], r['kiln'], r['kiln_timing'], r['torch'], r['torch_timing'],
                        r['unit'], r['ratio'], r['note']))
    if kb['results'] or rep['kiln_vs_torch']:
        out.append('timing: ' + rep['timing'])
    return '\n'.join(out)


def write(path, text):
    tmp = os.path.join(os.path.dirname(path), '.' + os.path.basename(path) + '.tmp')
    with open(tmp, 'w') as f:
        f.write(text)
    os.replace(tmp, path)


if __name__ == '__main__':
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - gpu-check.sh then writes its own minimal report
        traceback.print_exc()
        sys.exit(3)
