#!/usr/bin/env python3
"""check-layers.py - lib/'s layers, checked: data flows down.

Usage: check-layers.py LIBDIR [--baseline N] [--baseline-cycles N] [--public-only DIR]...
       check-layers.py --self-test   (the checker on small trees of its own)

Reads LIBDIR/layers.txt (the layer map: layers bottom to top, each file of lib/ in exactly one)
and every .c and .h under LIBDIR, and reports each reference from a file to a file of a higher
layer:

  - an `#include "..."` of a header of lib/ (resolved beside the file, then in lib/);
  - a use of a kiln_ or kiln__ function or variable that another file of lib/ defines (a call,
    a declaration, its address taken, or a macro body's use), found by scanning the sources with
    comments and strings removed. Definitions are the file-scope functions and variables that
    are not static, and those a macro of the file makes where it is used at file scope.

With --public-only DIR (tools/, examples/, mpi/: the layers above lib/), an include of a header of
lib/ from a file under DIR counts as an upward reference too: they use the public API only.

It also reports cycles between modules, within a layer as across: a module is one line of
layers.txt (a .c and its .h, or a few files that make one unit), and module A depends on module
B when a file of A includes a header of B or uses a symbol a file of B defines. Such a cycle is
an include cycle, or a call cycle whose includes hide it (a header declaring another module's
function); both count.

A reference is counted once per (file, symbol or header); every line it stands on is printed.
layers.txt may allow a reference with `allow FILE SYMBOL  # why`: only for a hook, a lower
layer that must be told of an event by a higher one, and the reason must say so.

Exit status: 0 when the upward references and the cycles are at most their baselines
(0 without --baseline and --baseline-cycles: none), 1 otherwise, 2 on a malformed map.
"""

import argparse
import collections
import os
import re
import sys

TOKEN = re.compile(r"[A-Za-z_]\w*|\S")
SYMBOL = re.compile(r"kiln_\w+$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def strip_comments_and_strings(src):
    """src with comments removed and string and character literals emptied; newlines kept."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


DEFINE = re.compile(r"\s*#\s*define\s+(\w+)\(([^)]*)\)(.*)", re.S)


class Source:
    """A file's tokens with their lines, comments and strings removed: `code` outside
    preprocessor lines, `directives` in them (a macro's body uses what it calls), and `macros`,
    each function-like #define as name -> (parameters, [(parameter index, pasted suffix)]) for
    the names `param ## suffix` its body makes."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            text = strip_comments_and_strings(f.read())
        self.code, self.directives, self.macros = [], [], {}
        directive, continued = [], False
        for line_no, line in enumerate(text.split("\n"), 1):
            is_directive = continued or line.lstrip().startswith("#")
            continued = is_directive and line.rstrip().endswith("\\")
            if not is_directive:
                self.code.extend((m.group(), line_no) for m in TOKEN.finditer(line))
                continue
            self.directives.extend((m.group(), line_no) for m in TOKEN.finditer(line))
            directive.append(line.rstrip().rstrip("\\"))
            if not continued:
                self.add_macro(" ".join(directive))
                directive = []

    def add_macro(self, text):
        m = DEFINE.match(text)
        if not m:
            return
        params = [p.strip() for p in m.group(2).split(",")]
        pasted = [(params.index(p), suffix)
                  for p, suffix in re.findall(r"\b(\w+)\s*##\s*(\w+)", m.group(3))
                  if p in params]
        self.macros[m.group(1)] = (params, pasted)


def definitions(src):
    """The names of the external functions and variables a .c file defines (not static),
    also those a function-like macro of the file defines where it is used at file scope
    (`WRAPPER(kiln_add, ...)`: kiln_add, and kiln_add_out for a body's `fn ## _out`)."""
    names = []
    depth = 0
    stmt = []
    toks = src.code
    for k, (tok, _) in enumerate(toks):
        if depth == 0 and tok in src.macros and k + 1 < len(toks) and toks[k + 1][0] == "(":
            args, level, arg = [], 0, []
            for t, _ in toks[k + 1:]:
                level += {"(": 1, ")": -1}.get(t, 0)
                if level == 0 or (level == 1 and t == ","):
                    args.append(arg)
                    arg = []
                    if level == 0:
                        break
                elif not (level == 1 and t == "("):
                    arg.append(t)
            words = [a[0] if len(a) == 1 else "" for a in args]
            names.extend(w for w in words if SYMBOL.match(w))
            for i, suffix in src.macros[tok][1]:
                if i < len(words) and SYMBOL.match(words[i]):
                    names.append(words[i] + suffix)
        if tok == "{":
            words = [t for t, _ in stmt]
            if depth == 0 and words and "static" not in words and "typedef" not in words:
                if words[-1] == ")":  # a function body: the name precedes its parameter list
                    level, i = 0, len(words) - 1
                    while i >= 0:
                        level += {")": 1, "(": -1}.get(words[i], 0)
                        if level == 0:
                            break
                        i -= 1
                    name = words[i - 1] if i >= 1 else ""
                    if name == ")" and i >= 2:  # kiln_status(kiln__name)(...): macro-proof
                        name = words[i - 2]
                    if SYMBOL.match(name):
                        names.append(name)
                elif words[-1] == "=" and "extern" not in words:  # an initialised variable
                    ids = [w for w in words if SYMBOL.match(w)]
                    if ids:
                        names.append(ids[-1])
            depth += 1
            stmt = []
        elif tok == "}":
            depth -= 1
            stmt = []
        elif tok == ";":
            words = [t for t, _ in stmt]
            if (depth == 0 and words and "(" not in words
                    and not {"static", "extern", "typedef"} & set(words)):
                ids = [w for w in words if SYMBOL.match(w)]
                if ids and ids[-1] != words[0]:  # a variable, not a lone type name
                    names.append(ids[-1])
            stmt = []
        elif depth == 0:
            stmt.append((tok, _))
    return names


def read_map(libdir):
    """layers (names, bottom first), file -> layer index, file -> module (its line's first
    file), allowed {(file, symbol)}, errors."""
    path = os.path.join(libdir, "layers.txt")
    layers, where, modules, allowed, errors = [], {}, {}, set(), []
    with open(path, encoding="utf-8") as f:
        for line_no, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if words[0] == "layer" and len(words) == 2:
                layers.append(words[1])
            elif words[0] == "allow" and len(words) == 3:
                if "#" not in raw or "hook" not in raw.split("#", 1)[1]:
                    errors.append(f"layers.txt:{line_no}: an allow line must say why (a hook)")
                allowed.add((words[1], words[2]))
            elif not layers:
                errors.append(f"layers.txt:{line_no}: a file before the first layer line")
            else:
                for name in words:
                    if name in where:
                        errors.append(f"layers.txt:{line_no}: {name} is in two layers "
                                      f"({layers[where[name]]} and {layers[-1]})")
                    where[name] = len(layers) - 1
                    modules[name] = os.path.splitext(words[0])[0]
    return layers, where, modules, allowed, errors


def module_cycles(deps, modules):
    """The cycles: the module graph's strongly connected components of more than one module,
    each as (its modules, the dependencies inside it). A dependency inside a component lies on
    a cycle; their count can only fall as dependencies go."""
    graph = collections.defaultdict(set)
    for (src, target) in deps:
        if modules[src] != modules[target]:
            graph[modules[src]].add(modules[target])
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def connect(node):  # Tarjan's algorithm; the graph is a few dozen modules
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                members = set(component)
                edges = sorted((a, b) for a in members for b in graph[a] if b in members)
                components.append((sorted(members), edges))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def internal_includes(libdir, dirs):
    """The includes of a header of lib/ from the files under dirs (above lib/: the public API
    only), as (file, line, header), the header resolved beside the file, in the project root
    (lib/'s parent) or in lib/."""
    found = []
    root = os.path.dirname(libdir)
    for top in dirs:
        for d, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(d, name)
                with open(path, encoding="utf-8") as f:
                    for line_no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        for base in (d, root, libdir):
                            target = os.path.normpath(os.path.join(base, m.group(1)))
                            if os.path.isfile(target):
                                if target.startswith(libdir + os.sep):
                                    found.append((os.path.relpath(path, root), line_no,
                                                  os.path.relpath(target, root)))
                                break
    return found


def check(libdir, baseline=0, baseline_cycles=0, print=print, public_only=()):
    """Check libdir against its layers.txt, printing through print; the exit status. Files
    under the folders public_only may include no header of lib/ (counted as upward)."""
    libdir = os.path.abspath(libdir)

    layers, where, modules, allowed, errors = read_map(libdir)
    files = sorted(
        os.path.relpath(os.path.join(d, f), libdir)
        for d, _, names in os.walk(libdir) for f in names if f.endswith((".c", ".h")))
    for f in files:
        if f not in where:
            errors.append(f"{f}: in no layer of layers.txt")
    for f in where:
        if f not in files:
            errors.append(f"layers.txt names {f}, which is not in lib/")
    if errors:
        print("\n".join(errors))
        return 2

    sources = {f: Source(os.path.join(libdir, f)) for f in files}
    defined = {}
    for f in files:
        if f.endswith(".c"):
            for name in definitions(sources[f]):
                defined.setdefault(name, f)

    # (file, target) -> (target file, [lines])
    refs = collections.OrderedDict()
    deps = []
    for f in files:
        with open(os.path.join(libdir, f), encoding="utf-8") as src:
            for line_no, line in enumerate(src, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                for base in (os.path.dirname(f), ""):
                    target = os.path.normpath(os.path.join(base, m.group(1)))
                    if target in where:
                        deps.append((f, target))
                        refs.setdefault((f, '#include "' + m.group(1) + '"'),
                                        (target, []))[1].append(line_no)
                        break
        for tok, line_no in sorted(sources[f].code + sources[f].directives, key=lambda t: t[1]):
            target = defined.get(tok)
            if target and modules[target] != modules[f]:
                refs.setdefault((f, tok), (target, []))[1].append(line_no)
                deps.append((f, target))

    upward = []
    for (f, what), (target, lines) in refs.items():
        if where[target] > where[f] and (f, what.split()[-1].strip('"')) not in allowed \
                and (f, what) not in allowed:
            upward.append((f, lines, what, target))
    by_pair = collections.Counter((layers[where[f]], layers[where[t]]) for f, _, _, t in upward)
    for f, lines, what, target in upward:
        line_list = ",".join(str(n) for n in lines[:8]) + (",..." if len(lines) > 8 else "")
        print(f"lib/{f}:{line_list}: {what} -> lib/{target}: "
              f"{layers[where[f]]} -> {layers[where[target]]}")
    cycles = module_cycles(deps, modules)
    for path, line_no, header in internal_includes(libdir, public_only):
        print(f"{path}:{line_no}: #include of {header}: above lib/, the public API only")
        upward.append((path, [line_no], header, None))
    cycle_edges = sum(len(edges) for _, edges in cycles)
    for members, edges in cycles:
        print(f"cycle among {', '.join(members)}: "
              + ", ".join(f"{a} -> {b}" for a, b in edges))
    for (lo, hi), n in sorted(by_pair.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d} {lo} -> {hi}")
    print(f"{len(upward)} upward references, {cycle_edges} dependencies on cycles "
          f"({len(files)} files, {len(set(modules.values()))} modules, {len(layers)} layers; "
          f"baselines {baseline} and {baseline_cycles})")

    status = 0
    for what, count, baseline, flag in (("upward references", len(upward), baseline,
                                         "--baseline"),
                                        ("dependencies on cycles", cycle_edges, baseline_cycles,
                                         "--baseline-cycles")):
        if count > baseline:
            print(f"FAIL: {count} {what}, more than the baseline {baseline}")
            status = 1
        elif count < baseline:
            print(f"note: {count} {what}, fewer than the baseline: lower {flag} to {count} "
                  "in tests/meson.build")
    return status


SELF_TESTS = [
    # (what, {file: text}, baseline, expected status, lines the output must hold)
    ("a clean tree", {
        "layers.txt": "layer base\nlow.h low.c\nlayer top\nhigh.h high.c\n",
        "low.h": "int kiln__low(void);\n",
        "low.c": '#include "low.h"\n/* kiln__high() */\nint kiln__low(void) { return 1; }\n'
                 'static const char *s = "kiln__high";\n',
        "high.h": "int kiln__high(void);\n",
        "high.c": '#include "high.h"\n#include "low.h"\nint kiln__high(void)\n{\n'
                  '    return kiln__low();\n}\n',
    }, 0, 0, ["0 upward references, 0 dependencies on cycles"]),
    ("a call and an include upward", {
        "layers.txt": "layer base\nlow.h low.c\nlayer top\nhigh.h high.c\n",
        "low.h": "int kiln__low(void);\n",
        "low.c": '#include "low.h"\n#include "high.h"\nint kiln__low(void)\n{\n'
                 '    return kiln__high();\n}\n',
        "high.h": "int kiln__high(void);\n",
        "high.c": '#include "high.h"\nint kiln__high(void) { return 2; }\n',
    }, 0, 1, ['lib/low.c:2: #include "high.h" -> lib/high.h: base -> top',
              "lib/low.c:5: kiln__high -> lib/high.c: base -> top",
              "2 upward references"]),
    ("the same within a baseline of 2", {
        "layers.txt": "layer base\nlow.c\nlayer top\nhigh.c\n",
        "low.c": "int kiln__high(void);\nint kiln__low(void) { return kiln__high(); }\n",
        "high.c": "int kiln__high(void) { return 2; }\n",
    }, 2, 0, ["1 upward references", "note: 1 upward references, fewer than the baseline"]),
    ("a call cycle within a layer, hidden by declarations", {
        "layers.txt": "layer base\na.c\nb.c\n",
        "a.c": "int kiln__b(void);\nint kiln__a(void) { return kiln__b(); }\n",
        "b.c": "int kiln__a(void);\nint kiln__b(void) { return kiln__a(); }\n",
    }, 0, 1, ["cycle among a, b: a -> b, b -> a", "0 upward references, 2 dependencies"]),
    ("a static function is no definition", {
        "layers.txt": "layer base\nlow.c\nlayer top\nhigh.c\n",
        "low.c": "static int kiln__x(void) { return 1; }\n"
                 "int kiln__low(void) { return kiln__x(); }\n",
        "high.c": "static int kiln__x(void) { return 2; }\n",
    }, 0, 0, ["0 upward references"]),
    ("definitions a macro makes, and a macro body's use", {
        "layers.txt": "layer base\nlow.c\nlayer top\nhigh.c\n",
        "low.c": "int kiln_top(int x);\n#define CALL(x) kiln_top_out(x)\n"
                 "int kiln__low(void) { return CALL(1); }\n",
        "high.c": "#define WRAP(fn, v) \\\n    int fn(int x) { return x + v; } \\\n"
                  "    int fn##_out(int x) { return x - v; }\nWRAP(kiln_top, 1)\n",
    }, 0, 1, ["lib/low.c:1: kiln_top -> lib/high.c", "lib/low.c:2: kiln_top_out -> lib/high.c",
              "2 upward references"]),
    ("a file in no layer", {
        "layers.txt": "layer base\nlow.c\n",
        "low.c": "int kiln__low(void) { return 1; }\n",
        "other.c": "int kiln__other(void) { return 1; }\n",
    }, 0, 2, ["other.c: in no layer of layers.txt"]),
    ("an allow line must name a hook", {
        "layers.txt": "layer base\nlow.c\nlayer top\nhigh.c\nallow low.c kiln__high\n",
        "low.c": "int kiln__high(void);\nint kiln__low(void) { return kiln__high(); }\n",
        "high.c": "int kiln__high(void) { return 2; }\n",
    }, 0, 2, ["an allow line must say why"]),
    ("a tool that includes a header of lib/", {
        "layers.txt": "layer base\nlow.h low.c\n",
        "low.h": "int kiln__low(void);\n",
        "low.c": '#include "low.h"\nint kiln__low(void) { return 1; }\n',
        "../tools/tool.c": '#include "tool.h"\n#include "lib/low.h"\n'
                           "int main(void) { return 0; }\n",
        "../tools/tool.h": "int tool(void);\n",
    }, 0, 1, ["tools/tool.c:2: #include of lib/low.h: above lib/, the public API only",
              "1 upward references"]),
    ("an allowed hook", {
        "layers.txt": "layer base\nlow.c\nlayer top\nhigh.c\n"
                      "allow low.c kiln__high  # a hook: low tells high\n",
        "low.c": "int kiln__high(void);\nint kiln__low(void) { return kiln__high(); }\n",
        "high.c": "int kiln__high(void) { return 2; }\n",
    }, 0, 0, ["0 upward references"]),
]


def self_test():
    """Run the checker over the small trees of SELF_TESTS; 0 when each gives what it should."""
    import tempfile
    failed = 0
    for what, tree, baseline, expected, needles in SELF_TESTS:
        with tempfile.TemporaryDirectory() as tmp:
            lib = os.path.join(tmp, "lib")
            for name, text in tree.items():
                path = os.path.normpath(os.path.join(lib, name))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            out = []
            status = check(lib, baseline, 0, print=out.append,
                           public_only=[os.path.join(tmp, "tools")])
        text = "\n".join(out)
        missing = [n for n in needles if n not in text]
        ok = status == expected and not missing
        failed += not ok
        print(f"{'ok' if ok else 'FAIL'}: {what} (status {status}, expected {expected})")
        if not ok:
            print("  missing: " + "; ".join(missing) + "\n  output:\n    "
                  + text.replace("\n", "\n    "))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libdir", nargs="?")
    ap.add_argument("--baseline", type=int, default=0,
                    help="the upward references allowed (a count that may only go down)")
    ap.add_argument("--baseline-cycles", type=int, default=0,
                    help="the dependencies on cycles allowed (a count that may only go down)")
    ap.add_argument("--public-only", action="append", default=[], metavar="DIR",
                    help="a folder above lib/ whose files may include no header of lib/")
    ap.add_argument("--self-test", action="store_true",
                    help="check the checker on small trees of its own, not LIBDIR")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.libdir:
        ap.error("give LIBDIR (or --self-test)")
    return check(args.libdir, args.baseline, args.baseline_cycles,
                 public_only=[os.path.abspath(d) for d in args.public_only])


if __name__ == "__main__":
    sys.exit(main())
