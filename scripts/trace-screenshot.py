#!/usr/bin/python3
"""Render a Chrome trace-event JSON file in Chromium's own trace viewer and save a PNG.

Usage:
    /usr/bin/python3 screenshot-trace.py TRACE.json OUT.png \
        [--first-step N] [--steps K] [--select NAME] [--width 1600] [--height 900] [--no-quantize]

Needs (Debian 12, as root):
    apt-get install -y chromium python3-websocket pngquant
(pngquant is optional; without it the PNG is written unquantized.)

How it works / why this viewer:
  * chrome://tracing (the old catapult trace viewer) cannot be used: in the
    Debian chromium 156 package it is first blocked as an "internal debugging
    page" and, once those are enabled, it still fails with ERR_FAILED; the
    catapult viewer resources are no longer in resources.pak.
  * Instead this script uses the Performance panel of the Chromium DevTools
    frontend that ships inside the same chromium package (it opens Chrome
    trace-event JSON files, the same as "Load profile..." in DevTools).  Chromium
    is started with --headless=new --remote-debugging-port; its DevTools HTTP
    server serves the bundled frontend at /devtools/devtools_app.html.  We
    navigate the headless page there, and over the Chrome DevTools Protocol
    (Runtime.evaluate) import the timeline module, show the Performance panel,
    and hand it the trace as a File via TimelinePanel.loadFromFile().
  * Then we hide the sidebar, expand every process/thread track, zoom the
    visible window to K consecutive "step" ranges (host X events with
    name == "step"), and take Page.captureScreenshot.
  Nothing is downloaded; everything comes from the chromium package.
"""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket  # python3-websocket


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Browser:
    def __init__(self, width, height):
        self.profile = tempfile.mkdtemp(prefix="trace-shot-")
        self.port = free_port()
        exe = shutil.which("chromium") or "/usr/bin/chromium"
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--hide-scrollbars", "--remote-allow-origins=*",
             f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tabs = None
        for _ in range(150):
            try:
                tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json"))
                if any(t["type"] == "page" for t in tabs):
                    break
            except Exception:
                pass
            time.sleep(0.2)
        if not tabs:
            self.close()
            raise RuntimeError("chromium did not start its DevTools endpoint")
        tab = [t for t in tabs if t["type"] == "page"][0]
        self.ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=120)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"].get("exception", {}).get("description")
                               or r["exceptionDetails"])
        return r["result"].get("value")

    def wait_for(self, expr, timeout=30):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                if self.js(expr):
                    return True
            except RuntimeError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"timed out waiting for: {expr}")

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


# Deep querySelector over shadow roots (the DevTools UI is made of web components).
FIND_JS = r"""
window.__find = (pred) => { let r = null;
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
      if (r) return; if (pred(el)) { r = el; return; } if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document); return r; };
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--first-step", type=int, default=16, help="index of first 'step' range to show")
    ap.add_argument("--steps", type=int, default=4, help="how many consecutive 'step' ranges to show")
    ap.add_argument("--step-name", default="step")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--select", default="kiln_matmul",
                    help="name of an event to click so its details fill the Summary pane ('': none)")
    ap.add_argument("--no-quantize", action="store_true")
    args = ap.parse_args()

    text = open(args.trace).read()
    events = json.loads(text)
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                   if e.get("name") == args.step_name and e.get("ph") == "X")
    if steps:
        first = max(0, min(args.first_step, len(steps) - 1))
        last = min(len(steps) - 1, first + args.steps - 1)
        lo, hi = steps[first][0], steps[last][1]
    else:  # no step ranges: show everything
        xs = [e for e in events if e.get("ph") == "X"]
        lo = min(e["ts"] for e in xs)
        hi = max(e["ts"] + e.get("dur", 0) for e in xs)
    margin = (hi - lo) * 0.015
    lo, hi = lo - margin, hi + margin
    if hi - lo < 1000:  # DevTools refuses visible windows narrower than 1 ms
        mid = (lo + hi) / 2
        lo, hi = mid - 500.5, mid + 500.5

    b = Browser(args.width, args.height)
    try:
        b.call("Emulation.setDeviceMetricsOverride", width=args.width, height=args.height,
               deviceScaleFactor=1, mobile=False)
        b.call("Page.navigate", url=f"http://127.0.0.1:{b.port}/devtools/devtools_app.html")
        b.wait_for("!!document.querySelector('.main-tabbed-pane, .tabbed-pane') || "
                   "document.readyState === 'complete'")
        time.sleep(2)
        b.js(FIND_JS)
        # Open the Performance panel and load the trace into it.
        b.js("""(async () => {
            const T = await import('./panels/timeline/timeline.js');
            const UI = await import('./ui/legacy/legacy.js');
            await UI.ViewManager.ViewManager.instance().showView('timeline');
            const p = T.TimelinePanel.TimelinePanel.instance();
            window.__panel = p;
            const text = %s;
            await p.loadFromFile(new File([text], %s, {type: 'application/json'}));
        })()""" % (json.dumps(text), json.dumps(os.path.basename(args.trace))))
        b.wait_for("(() => { try { const fc = __panel.getFlameChart().getMainFlameChart();"
                   " const td = fc.timelineData(); return !!td && td.groups.length > 0; }"
                   " catch (e) { return false; } })()", timeout=60)
        time.sleep(1.5)
        # Dismiss the first-run "Keyboard shortcuts for flame chart" popover if shown,
        # hide the annotations/insights sidebar, expand all tracks, set the zoom window.
        info = b.js("""(async () => {
            let closed = false;
            for (let i = 0; i < 5; i++) {
              const dlg = __find(e => /Keyboard shortcuts for flame chart/.test(e.textContent || '')
                                 && e.children.length === 0 && e.getBoundingClientRect().width > 0);
              if (!dlg) break;
              const btn = __find(e => e.tagName === 'BUTTON' && e.getAttribute('aria-label') === 'Close'
                                 && e.getBoundingClientRect().width > 0);
              if (btn) { btn.click(); closed = true; }
              await new Promise(r => setTimeout(r, 300));
            }
            const hide = __find(e => e.tagName === 'BUTTON' && e.getAttribute('aria-label') === 'Hide sidebar');
            if (hide) hide.click();
            const fc = __panel.getFlameChart().getMainFlameChart();
            const groups = fc.timelineData().groups;
            groups.forEach((g, i) => { if (!g.expanded) fc.toggleGroupExpand(i); });
            await new Promise(r => setTimeout(r, 300));
            const TB = await import('./services/trace_bounds/trace_bounds.js');
            const bm = TB.TraceBounds.BoundsManager.instance();
            bm.setTimelineVisibleWindow({min: %f, max: %f, range: %f});
            return {closedShortcuts: closed, sidebarHidden: !!hide,
                    groups: groups.map(g => g.name + (g.expanded ? ' [expanded]' : '')),
                    window: bm.state().milli.timelineTraceWindow};
        })()""" % (lo, hi, hi - lo))
        print(json.dumps(info), file=sys.stderr)
        time.sleep(1.5)
        if args.select:
            # Click (a real mouse event) on the widest visible event of that name so the
            # Summary pane at the bottom shows its details (duration, args).
            pt = b.js("""(() => {
                const fc = __panel.getFlameChart().getMainFlameChart();
                const dp = __panel.getFlameChart().getMainDataProvider();
                const td = fc.timelineData();
                let best = null, bestDur = -1;
                for (let i = 0; i < td.entryStartTimes.length; i++) {
                  const ev = dp.eventByIndex(i);
                  if (!ev || ev.name !== %s) continue;
                  const s = td.entryStartTimes[i], d = td.entryTotalTimes[i];
                  if (s < %f || s + d > %f) continue;
                  if (d > bestDur) { bestDur = d; best = i; }
                }
                if (best === null) return null;
                const c = fc.entryIndexToCoordinates(best);
                return c && {x: c.x + 6, y: c.y + 8};
            })()""" % (json.dumps(args.select), lo / 1000, hi / 1000))
            if pt:
                for typ in ("mouseMoved", "mousePressed", "mouseReleased"):
                    b.call("Input.dispatchMouseEvent", type=typ, x=pt["x"], y=pt["y"],
                           button="left" if typ != "mouseMoved" else "none", clickCount=1)
                # move the pointer to empty space so no hover tooltip covers the tracks
                b.call("Input.dispatchMouseEvent", type="mouseMoved", x=args.width // 2,
                       y=int(args.height * 0.55), button="none")
                time.sleep(1.5)
            else:
                print(f"no visible event named {args.select!r} to select", file=sys.stderr)
        time.sleep(0.5)
        png = base64.b64decode(b.call("Page.captureScreenshot", format="png")["data"])
    finally:
        b.close()

    with open(args.out, "wb") as f:
        f.write(png)
    if not args.no_quantize and shutil.which("pngquant"):
        subprocess.run(["pngquant", "--force", "--skip-if-larger", "--quality=70-95",
                        "--output", args.out, "--", args.out], check=False)
    print(f"{args.out}: {os.path.getsize(args.out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
