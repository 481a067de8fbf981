#!/usr/bin/env bash
# Builds and runs the "Manifest bodies stored once, by content" benchmark (bench/bodies.cpp) on a
# redis-server of its own (stopped and deleted at the end): the edge's read, the agent's read
# without and with its body cache, memory per manifest. Extra arguments go to the benchmark:
#   bench/bodies.sh [--g 50] [--size 20000] [--k 400] [--principals 1000]
# Results and how to read them: docs/benchmarks.md, "Manifest bodies stored once, by content".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile bodies bodies.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/bodies" "$@"
