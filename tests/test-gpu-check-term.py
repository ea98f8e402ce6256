#!/usr/bin/env python3
"""test-gpu-check-term.py GPU_CHECK WORKDIR STANDIN_BUILD - scripts/gpu-check.sh killed with TERM
at two points still leaves a valid report (issue 19).

1. During the build: `--standin --quick` into a fresh build folder (WORKDIR/build), TERM to the
   script alone once `meson compile` has run for a moment.
2. During the tests: `--standin --no-bench --reuse-build --suites "spec autograd program"` on
   STANDIN_BUILD (the build of the gpu-check-standin test, which runs before this one; built here
   when it is missing), TERM 1.5 s after autograd's test program started (it runs for seconds
   on Oclgrind).

3. A step that fails (kiln-info --check under KILN_MEMORY_LIMIT=1), on STANDIN_BUILD again: the
   run goes on, exits 1, and its report (made by gpu-report.py, not the shell's fallback) names
   the step as failed.

4. As meson test stops a test: TERM to the whole process group during the build and KILL half
   a second later: no process of the run is left, and OUT holds a valid report (the one written
   after the last step, or the trap's).

Each time (1 and 2): gpu-check.sh exits 143 within seconds, leaves no process of its own running, and
OUT holds gpu-report.json (valid JSON, final, saying SIGTERM, every planned step named: those
done with their status, the one running as interrupted, the rest as not run; in 2, the suite
that ran as interrupted and the others as never started) and gpu-summary.txt saying the same,
and at most 8 files.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

script, workdir, standin_build = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    if not cond:
        failures.append(what)


def wait_for(path, text, proc, limit):
    """Wait until the file at path holds text (True), or the process ends or time runs out."""
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        try:
            with open(path, errors='replace') as f:
                if text in f.read():
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def leftovers(marker):
    """Processes whose command line names marker (the run's own folders)."""
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
        except OSError:
            continue
        if marker in cmd:
            found.append(f'{pid}: {cmd[:120]}')
    return found


def wait_for_process(marker, proc, limit):
    """Wait until a process whose command line holds marker runs (True)."""
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        if leftovers(marker):
            return True
        time.sleep(0.05)
    return False


def run_and_term(label, args, out, build, marker_text, wait_limit, process=None):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, OUT=out, GPU_CHECK_BUILD=build)
    proc = subprocess.Popen(['bash', script] + args, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    log = os.path.join(out, 'gpu-check.log')
    reached = wait_for(log, marker_text, proc, wait_limit)
    if reached and process:
        reached = wait_for_process(process, proc, 60)
        marker_text += f'" and "{process}" runs'
    check(reached, f'{label}: the run reached "{marker_text}"')
    if not reached:
        proc.kill()
        print(proc.communicate()[0])
        return None
    # A moment more: the build well under way; meson test waiting on the test it started (a
    # TERM while meson is still starting it cancels it without an INTERRUPT line).
    time.sleep(1.5)
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    try:
        text, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
    took = time.time() - t0
    print(text)
    check(proc.returncode == 128 + signal.SIGTERM,
          f'{label}: gpu-check.sh exits {128 + signal.SIGTERM} ({proc.returncode})')
    check(took < 30, f'{label}: it stopped {took:.1f} s after TERM')
    time.sleep(0.5)
    left = leftovers(build)
    check(not left, f'{label}: no process of the run is left: {left}')
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    check(len(files) <= 8, f'{label}: at most 8 files in OUT: {files}')
    try:
        with open(os.path.join(out, 'gpu-report.json')) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f'{label}: gpu-report.json is valid JSON ({e})')
        return None
    check(rep.get('final') is True and rep.get('signal') == 'TERM' and
          'SIGTERM' in rep.get('state', ''), f'{label}: the report says SIGTERM: {rep.get("state")}')
    with open(os.path.join(out, 'gpu-summary.txt')) as f:
        summary = f.read()
    check('SIGTERM' in summary, f'{label}: gpu-summary.txt says SIGTERM')
    return rep, summary


def steps_of(rep):
    return {s['name']: s for s in rep['steps']}


def main():
    os.makedirs(workdir, exist_ok=True)
    # 1. TERM during the build.
    build1 = os.path.join(workdir, 'build')
    shutil.rmtree(build1, ignore_errors=True)
    got = run_and_term('during the build', ['--standin', '--quick', '--budget', '600'],
                       os.path.join(workdir, 'out-build'), build1, '=== step compile', 300)
    if got:
        rep, summary = got
        st = steps_of(rep)
        check(st.get('setup', {}).get('status') == 'ok', f'build: setup ok: {st.get("setup")}')
        check(st.get('compile', {}).get('status') == 'interrupted',
              f'build: compile interrupted: {st.get("compile")}')
        for name in ('kiln-info', 'kiln-info-json', 'kiln-info-check', 'bench-launch', 'tests'):
            check(st.get(name, {}).get('status') == 'not run',
                  f'build: {name} named as not run: {st.get(name)}')
        check('compile' in summary and 'interrupted' in summary and 'not run' in summary,
              'build: the summary names the interrupted and the missing steps')
    shutil.rmtree(build1, ignore_errors=True)
    shutil.rmtree(build1 + '-work', ignore_errors=True)

    # 2. TERM during the tests (the stand-in's build reused; made here if it is missing).
    got = run_and_term('during the tests',
                       ['--standin', '--no-bench', '--reuse-build', '--jobs', '1', '--budget',
                        '800', '--suites', 'spec autograd program'],
                       os.path.join(workdir, 'out-tests'), standin_build,
                       '=== suite autograd started', 700,
                       os.path.join(standin_build, 'tests', 'test-autograd'))
    if got:
        rep, summary = got
        st = steps_of(rep)
        check(st.get('compile', {}).get('status') == 'ok', f'tests: compile ok: {st.get("compile")}')
        check(st.get('kiln-info-check', {}).get('status') == 'ok',
              f'tests: kiln-info --check ok: {st.get("kiln-info-check")}')
        check(st.get('tests', {}).get('status') == 'interrupted',
              f'tests: the tests step interrupted: {st.get("tests")}')
        t = rep.get('tests') or {}
        suites = t.get('suites', [])
        check([(r['name'], r['status']) for r in suites] ==
              [('spec', 'ok'), ('autograd', 'interrupted')] and
              suites[1].get('interrupt_tests') == ['autograd'],
              f'tests: spec ran, autograd was interrupted (meson: INTERRUPT): {suites}')
        check(t.get('never_started') == ['program'],
              f'tests: program named as never started: {t.get("never_started")}')
        check('never started' in summary, 'tests: the summary names the suites never started')
        with open(os.path.join(workdir, 'out-tests', 'tests.log')) as f:
            check('=== suite ' + suites[-1]['name'] in f.read() if suites else False,
                  'tests: tests.log holds the interrupted suite\'s output')

    # 4. TERM to the group, KILL 0.5 s later (meson test's way): nothing of the run is left.
    build4 = os.path.join(workdir, 'build-kill')
    out = os.path.join(workdir, 'out-kill')
    shutil.rmtree(build4, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    proc = subprocess.Popen(['bash', script, '--standin', '--quick', '--budget', '600'],
                            env=dict(os.environ, OUT=out, GPU_CHECK_BUILD=build4),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    reached = wait_for(os.path.join(out, 'gpu-check.log'), '=== step compile', proc, 300)
    check(reached, 'group kill: the run reached the build')
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(0.5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    time.sleep(1)
    left = leftovers(build4)
    check(not left, f'group kill: no process of the run is left: {left}')
    for p in left:  # do not leave a build running on a failure
        try:
            os.kill(int(p.split(':')[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    try:
        with open(os.path.join(out, 'gpu-report.json')) as f:
            rep = json.load(f)
        check(steps_of(rep).get('setup', {}).get('status') == 'ok' and
              steps_of(rep).get('tests', {}).get('status') == 'not run',
              f'group kill: the report names setup ok and tests not run: {rep.get("state")}')
    except (OSError, ValueError) as e:
        check(False, f'group kill: gpu-report.json is valid JSON ({e})')
    shutil.rmtree(build4, ignore_errors=True)
    shutil.rmtree(build4 + '-work', ignore_errors=True)

    # 3. A failing step: reported as such, and the run goes on.
    out = os.path.join(workdir, 'out-fail')
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(['bash', script, '--standin', '--no-bench', '--reuse-build', '--budget',
                        '300', '--suites', 'spec'],
                       env=dict(os.environ, OUT=out, GPU_CHECK_BUILD=standin_build,
                                KILN_MEMORY_LIMIT='1'),
                       capture_output=True, text=True, timeout=600)
    print(r.stdout + r.stderr)
    check(r.returncode == 1, f'failing step: gpu-check.sh exits 1 ({r.returncode})')
    try:
        with open(os.path.join(out, 'gpu-report.json')) as f:
            rep = json.load(f)
        st = steps_of(rep)
        check('report_error' not in rep and rep.get('state') == 'complete' and
              rep.get('failed') == ['kiln-info-check', 'profile'],
              f'failing step: the report names it: {rep.get("failed")} {rep.get("state")}')
        check(st.get('kiln-info-check', {}).get('status') == 'fail' and
              st.get('profile', {}).get('status') == 'fail' and
              st.get('tests', {}).get('status') == 'ok',
              f'failing step: the run went on: {st.get("kiln-info-check")} {st.get("tests")}')
    except (OSError, ValueError) as e:
        check(False, f'failing step: gpu-report.json is valid JSON ({e})')
    print(f'{len(failures)} failure(s)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
