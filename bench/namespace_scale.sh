#!/usr/bin/env bash
# Builds and runs the "A discovery read as the namespace grows" benchmark (bench/namespace_scale.cpp)
# on a redis-server of its own (stopped and deleted at the end). Not a test: growing the namespace to
# a million members takes a minute or two and about 1 GB of Redis memory. Extra arguments go to the
# benchmark:
#   bench/namespace_scale.sh [--g 50] [--size 20000] [--k 400] [--members 1000,10000,100000,1000000]
# Results and how to read them: docs/benchmarks.md, "A discovery read as the namespace grows".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile namespace_scale namespace_scale.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/namespace_scale" "$@"
