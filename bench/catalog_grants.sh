#!/usr/bin/env bash
# Builds and runs the "Admin API: a grant change at 1k, 100k and 1M members" benchmark
# (bench/catalog_grants.cpp) on a redis-server of its own (stopped and deleted at the end). Not a
# test: loading a million members takes a minute or two and ~1.5 GB of Redis memory. Extra
# arguments go to the benchmark:
#   bench/catalog_grants.sh [--n 1000,100000,1000000] [--k 2000] [--sqlite] [--sqlite-n 1000,1000000]
# Results and how to read them: docs/benchmarks.md, "Admin API: a grant change at 1k, 100k and 1M
# members".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile catalog_grants catalog_grants.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/catalog_grants" "$@"
