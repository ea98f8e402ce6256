#!/usr/bin/env python3
"""gpu-report.py --steps FILE --work DIR --out DIR --mode MODE --seconds N

The report half of scripts/gpu-check.sh: reads the steps table and each step's output from the
work folder, writes OUT/gpu-report.json (everything, machine-readable) and OUT/gpu-summary.txt
(what a person reads first), and exits 1 when any step failed or timed out.
"""
import argparse
import json
import os
import re
import sys


def read(work, name):
    try:
        with open(os.path.join(work, name + '.out'), errors='replace') as f:
            return f.read()
    except OSError:
        return None


def parse_json(text):
    """The JSON document in a step's output (stderr lines may stand around it), or None."""
    if not text:
        return None
    start = text.find('{')
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find('{', start + 1)
    return None


def parse_tests(text):
    """Counts and failing test names from `meson test` output."""
    if not text:
        return None
    counts = {}
    for key in ('Ok', 'Expected Fail', 'Fail', 'Unexpected Pass', 'Skipped', 'Timeout'):
        m = re.search(r'^%s:\s+(\d+)' % key, text, re.M)
        counts[key.lower().replace(' ', '_')] = int(m.group(1)) if m else 0
    failed = re.findall(r'^\s*\d+/\d+\s+(?:kiln:\S+ / |kiln / )?(\S+)\s+(?:FAIL|TIMEOUT|ERROR)',
                        text, re.M)
    counts['failed_tests'] = sorted(set(failed))
    return counts


def ratios(kiln, torch):
    """kiln / PyTorch for every PyTorch figure that kiln-bench measured too (higher is better)."""
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
        out.append({'name': name, 'unit': t['unit'], 'kiln': k['kiln'], 'torch': t['torch'],
                    'ratio': k['kiln'] / t['torch'],
                    'note': 'kiln from pageable memory' if name != base else ''})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--steps', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--mode', required=True)
    ap.add_argument('--seconds', type=int, default=0)
    args = ap.parse_args()

    steps = []
    with open(args.steps) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            step = {'name': parts[0], 'status': parts[1], 'rc': int(parts[2]),
                    'seconds': float(parts[3])}
            if len(parts) > 4:
                step['reason'] = parts[4]
            steps.append(step)
    kiln_bench = parse_json(read(args.work, 'kiln-bench'))
    torch = parse_json(read(args.work, 'torch'))
    report = {
        'mode': args.mode,
        'seconds': args.seconds,
        'steps': steps,
        'nvidia_smi': (read(args.work, 'nvidia-smi') or '').strip(),
        'kiln_info': (read(args.work, 'kiln-info') or '').strip(),
        'kiln_info_json': parse_json(read(args.work, 'kiln-info-json')),
        'kiln_info_check': (read(args.work, 'kiln-info-check') or '').strip(),
        'tests': parse_tests(read(args.work, 'tests')),
        'kiln_bench': kiln_bench,
        'torch': torch,
        'kiln_vs_torch': ratios(kiln_bench, torch),
    }
    with open(os.path.join(args.out, 'gpu-report.json'), 'w') as f:
        json.dump(report, f, indent=1)

    failed = [s for s in steps if s['status'] in ('fail', 'timeout')]
    lines = ['kiln gpu-check (%s mode), %d s: %s' %
             (args.mode, args.seconds, 'FAILED: ' + ', '.join(s['name'] for s in failed)
              if failed else 'all steps passed')]
    for s in steps:
        lines.append('  %-16s %-8s %6.1f s%s' % (s['name'], s['status'], s['seconds'],
                                                  '  (%s)' % s['reason'] if 'reason' in s else ''))
    if report['nvidia_smi']:
        lines.append('GPU: ' + report['nvidia_smi'].splitlines()[0])
    if report['kiln_info']:
        lines += ['kiln-info:'] + ['  ' + l for l in report['kiln_info'].splitlines()[:8]]
    t = report['tests']
    if t:
        lines.append('tests: %d ok, %d failed, %d skipped, %d timed out%s' %
                     (t['ok'], t['fail'], t['skipped'], t['timeout'],
                      ('; failed: ' + ' '.join(t['failed_tests'])) if t['failed_tests'] else ''))
    if kiln_bench:
        lines.append('kiln-bench (kiln vs its baseline):')
        for r in kiln_bench.get('results', []):
            lines.append('  %-40s %10.4g %-7s ratio %s' %
                         (r['name'], r['kiln'], r['unit'],
                          '%.2f' % r['ratio'] if r.get('ratio') is not None else '-'))
    if report['kiln_vs_torch']:
        lines.append('kiln / PyTorch on the same GPU (>= 1: kiln at least as fast):')
        for r in report['kiln_vs_torch']:
            lines.append('  %-24s kiln %10.4g  torch %10.4g %-7s ratio %.2f %s' %
                         (r['name'], r['kiln'], r['torch'], r['unit'], r['ratio'], r['note']))
    with open(os.path.join(args.out, 'gpu-summary.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
