#!/bin/sh
# coverage.sh [MESON TEST ARGS...] - line coverage of lib/: build in build-cov with
# -Db_coverage=true (no sanitizers, no optimisation, so that lines map one to one), run the test
# suite (or the suites named in the arguments, e.g. `scripts/coverage.sh spec tensor`), and print
# gcovr's per-file table and total for lib/. Counts from earlier runs are reset first.
# Needs gcovr (scripts/debian-packages.txt). Not part of CI: the whole suite takes a while.
set -eu
cd "$(dirname "$0")/.."
BUILDDIR=build-cov
if [ -d "$BUILDDIR/meson-private" ]; then
    meson setup --reconfigure "$BUILDDIR" -Db_coverage=true --buildtype=debug
else
    meson setup "$BUILDDIR" -Db_coverage=true --buildtype=debug
fi
meson compile -C "$BUILDDIR"
find "$BUILDDIR" -name '*.gcda' -delete
# A failing test still leaves its counts; report coverage either way, then fail.
rc=0
meson test -C "$BUILDDIR" --print-errorlogs "$@" || rc=$?
gcovr -r . --filter lib/ --print-summary "$BUILDDIR"
if [ $rc -ne 0 ]; then echo "coverage.sh: some tests failed (exit $rc); the figure above still counts them" >&2; fi
exit $rc
