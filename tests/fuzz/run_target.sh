#!/usr/bin/env bash
# Runs one fuzz target from its corpora: what each ctest entry fuzz.<name> runs (briefly) and what
# scripts/fuzz.sh runs (for as long as asked). One place for the libFuzzer arguments.
#   tests/fuzz/run_target.sh [--fresh] <fuzz build dir> <name> <seconds> [more libFuzzer args]
# Corpora: <build>/fuzz-corpus/<name> (first: what the runs find is added there and kept),
# <build>/fuzz-seeds/<name> (make_seeds.cpp, from tests/fixtures), tests/fuzz/seeds/<name> if
# present. --fresh (the ctest entries) starts from the seeds alone, in an emptied
# <build>/fuzz-corpus-ci/<name>, so that a short run takes the same time however long the local
# runs grew the kept corpus. A crash is written to <build>/fuzz-artifacts/<name>-crash-<sha1>
# and fails the run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus_root=fuzz-corpus
if [ "${1:-}" = --fresh ]; then
  corpus_root=fuzz-corpus-ci
  shift
fi
build=$1 name=$2 seconds=$3
shift 3
[ "$corpus_root" = fuzz-corpus ] || rm -rf "${build:?}/$corpus_root/$name"
binary="$build/tests/fuzz/${name}_fuzz"
[ -x "$binary" ] || { echo "run_target: no $binary (build the quiver_fuzz target)" >&2; exit 2; }
mkdir -p "$build/$corpus_root/$name" "$build/fuzz-artifacts" "$build/fuzz-seeds/$name"
args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$build/fuzz-artifacts/$name-")
[ -f "$here/dict/$name.dict" ] && args+=(-dict="$here/dict/$name.dict")
# Longer inputs only slow the search down: the largest seed is ~30 KiB.
args+=(-max_len=131072)
dirs=("$build/$corpus_root/$name" "$build/fuzz-seeds/$name")
[ -d "$here/seeds/$name" ] && dirs+=("$here/seeds/$name")
exec "$binary" "${args[@]}" "$@" "${dirs[@]}"
