#!/bin/sh
# check-format.sh [--fix] - check (or, with --fix, apply) the formatting of every C source and
# header in lib/, include/, tools/, examples/, tests/, fuzz/ and mpi/ with clang-format and the
# repository's .clang-format. Fails, naming the lines, when a file is not formatted.
set -eu
cd "$(dirname "$0")/.."
FILES=$(find lib include tools examples tests fuzz mpi -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' \) | sort)
if [ "${1:-}" = --fix ]; then
    # shellcheck disable=SC2086
    clang-format -i $FILES
    exit 0
fi
# shellcheck disable=SC2086
if ! clang-format --dry-run --Werror $FILES; then
    echo "check-format: the files above are not formatted; run scripts/check-format.sh --fix" >&2
    exit 1
fi
echo "check-format: $(echo "$FILES" | wc -l) files formatted"
