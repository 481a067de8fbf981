#!/usr/bin/env bash
# Builds and runs the "listing many upstreams" benchmark (bench/upstream_listing.cpp) against
# bench/fake_upstream.cpp children. Not a test: it takes about a minute (the sequential round
# alone is ~40 s; pass --skip-sequential to leave it out). Extra arguments go to the benchmark:
#   bench/upstream_listing.sh [--n 100 --hang 10 --slow 20 --slow-ms 300 --concurrency 5 ...]
# Results and how to read them: docs/benchmarks.md, "Listing many upstreams".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_cli
mapfile -t libs < <(bench_libs cli api engine upstream store base)
bench_compile fake_upstream fake_upstream.cpp
bench_compile upstream_listing upstream_listing.cpp cpp-httplib hiredis -- "${libs[@]}"

# Each upstream is a child with three pipes; 100 of them need a few hundred descriptors.
ulimit -n 4096 2>/dev/null || true
exec "$BENCH_OUT/upstream_listing" --fake "$BENCH_OUT/fake_upstream" "$@"
