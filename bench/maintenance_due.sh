#!/usr/bin/env bash
# Builds and runs the "Maintenance: a pass over 100,000 manifests of which 100 are due" benchmark
# (bench/maintenance_due.cpp) on a redis-server of its own (stopped and deleted at the end). Not a
# test. Extra arguments go to the benchmark:
#   bench/maintenance_due.sh [--n 100000] [--due 100] [--batch 20] [--runs 3]
# Results and how to read them: docs/benchmarks.md, "Maintenance in O(work due)".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile maintenance_due maintenance_due.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/maintenance_due" "$@"
