#!/usr/bin/env bash
# Formats the repo's C++ sources with the checked-in .clang-format.
#   scripts/format.sh          format every tracked C++ file in place
#   scripts/format.sh --check  list the files clang-format would change; exit 1 if any
# The version is pinned: clang-format's output differs between major versions, so CI and every
# machine must run the same one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "format.sh: $clang_format not found (apt-get install clang-format-14)" >&2
  exit 2
fi

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

# Tracked files only: build trees, fetched dependencies and generated sources are not ours.
mapfile -t files < <(git ls-files -- '*.h' '*.hpp' '*.cc' '*.cpp')
if [ "${#files[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$check" -eq 0 ]; then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi

# One clang-format run for all files; it names each file that would change in its diagnostics.
mapfile -t changed < <("$clang_format" --style=file --dry-run --Werror "${files[@]}" 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "${#changed[@]}" -gt 0 ]; then
  printf '%s\n' "${changed[@]}"
  echo "format.sh: the ${#changed[@]} file(s) above are not formatted as .clang-format says;" \
    "run scripts/format.sh" >&2
  exit 1
fi
