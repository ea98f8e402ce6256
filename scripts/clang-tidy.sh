#!/bin/sh
# clang-tidy.sh [BUILDDIR] - run clang-tidy (checks in .clang-tidy) on every lib/ source file in
# BUILDDIR's compile_commands.json (default build-clang: a clang build, whose flags clang-tidy
# understands; compile it first, so that generated headers exist). Prints each finding once
# (file:line:col: warning: ... [check]) and fails if there is any.
set -eu
cd "$(dirname "$0")/.."
BUILDDIR=${1:-build-clang}
JOBS=${JOBS:-$(nproc)}
SRC=$(pwd)
if [ ! -f "$BUILDDIR/compile_commands.json" ]; then
    echo "clang-tidy.sh: no $BUILDDIR/compile_commands.json; set up and compile $BUILDDIR first" \
        "(CC=clang meson setup $BUILDDIR && meson compile -C $BUILDDIR)" >&2
    exit 2
fi
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
python3 - "$BUILDDIR/compile_commands.json" "$SRC/lib/" <<'PY' |
import json, os, sys
seen = set()
for e in json.load(open(sys.argv[1])):
    f = os.path.normpath(os.path.join(e['directory'], e['file']))
    if f.startswith(sys.argv[2]) and f not in seen:
        seen.add(f)
        print(f)
PY
    xargs -P "$JOBS" -n 4 clang-tidy -p "$BUILDDIR" --quiet >"$OUT" 2>/dev/null || true
# One line per finding, with paths relative to the source root (a header's finding appears
# once per file that includes it).
FINDINGS=$(grep -E '(warning|error): .*\[[a-zA-Z0-9.,-]+\]$' "$OUT" |
    sed -e "s|^$SRC/$BUILDDIR/\.\./||" -e "s|^$SRC/||" -e 's|^\.\./||' | sort -u || true)
if [ -n "$FINDINGS" ]; then
    printf '%s\n' "$FINDINGS"
    echo "clang-tidy: $(printf '%s\n' "$FINDINGS" | wc -l) findings in lib/ (see .clang-tidy);" \
        "details: clang-tidy -p $BUILDDIR FILE" >&2
    exit 1
fi
echo "clang-tidy: no findings in lib/"
