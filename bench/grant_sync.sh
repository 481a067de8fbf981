#!/usr/bin/env bash
# Builds and runs the "Grant sync per member" benchmark (bench/grant_sync.cpp) on a redis-server
# of its own (stopped and deleted at the end). Not a test. Extra arguments go to the benchmark:
#   bench/grant_sync.sh [--n 10000,100000] [--filler 10]
# Run it in two checkouts to compare two implementations. Results and how to read them:
# docs/benchmarks.md, "Grant sync per member".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile grant_sync grant_sync.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/grant_sync" "$@"
