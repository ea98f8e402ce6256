#!/bin/sh
# update-symbols.sh [BUILDDIR] [--from-headers] - rewrite tests/symbols.txt, the committed list of
# the functions libkiln exports, from the library built in BUILDDIR (default: build), or from the
# KILN_API declarations in include/kiln.h and include/kiln_cl.h. Run it when the ABI changes on
# purpose, and commit the list with the change; `meson test -C build symbols` checks it.
set -eu
cd "$(dirname "$0")/.."
BUILDDIR=build
MODE=--update
for arg in "$@"; do
    case "$arg" in
    --from-headers) MODE=--update-from-headers ;;
    -h | --help)
        sed -n '2,5s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *) BUILDDIR="$arg" ;;
    esac
done
if [ "$MODE" = --update ]; then meson compile -C "$BUILDDIR" kiln; fi
python3 tests/check-symbols.py "$MODE" "$BUILDDIR/libkiln.so" tests/symbols.txt \
    include/kiln.h include/kiln_cl.h
