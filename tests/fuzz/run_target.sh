#!/usr/bin/env bash
# Runs one fuzz target from its corpora: what each ctest entry fuzz.<name> runs (briefly) and what
# scripts/fuzz.sh runs (for as long as asked). One place for the libFuzzer arguments.
#   tests/fuzz/run_target.sh <fuzz build dir> <name> <seconds> [more libFuzzer arguments]
# Corpora: <build>/fuzz-corpus/<name> (first: what the runs find is added there and kept),
# <build>/fuzz-seeds/<name> (make_seeds.cpp, from tests/fixtures), tests/fuzz/seeds/<name> if
# present. A crash is written to <build>/fuzz-artifacts/<name>-crash-<sha1> and fails the run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 name=$2 seconds=$3
shift 3
binary="$build/tests/fuzz/${name}_fuzz"
[ -x "$binary" ] || { echo "run_target: no $binary (build the quiver_fuzz target)" >&2; exit 2; }
mkdir -p "$build/fuzz-corpus/$name" "$build/fuzz-artifacts" "$build/fuzz-seeds/$name"
args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$build/fuzz-artifacts/$name-")
[ -f "$here/dict/$name.dict" ] && args+=(-dict="$here/dict/$name.dict")
# Inputs beyond this are not useful and let JSON nesting grow past what the stack holds (see
# tests/fuzz/README.md); the seeds themselves are smaller.
args+=(-max_len=131072)
dirs=("$build/fuzz-corpus/$name" "$build/fuzz-seeds/$name")
[ -d "$here/seeds/$name" ] && dirs+=("$here/seeds/$name")
exec "$binary" "${args[@]}" "$@" "${dirs[@]}"
