#!/usr/bin/env bash
# Builds and runs the migrate-layout benchmark (bench/migrate_layout.cpp): the copy that pauses a
# namespace's writes during `quiver-agent migrate-layout v2`, at growing namespace sizes, on a
# redis-server of its own (stopped and deleted after each size). Extra arguments go to the
# benchmark:
#   bench/migrate_layout.sh [--g 50] [--size 20000] [--members 1000,10000,100000]
# Results and how to read them: docs/benchmarks.md, "migrate-layout v2: the writes' pause".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_store
mapfile -t libs < <(bench_libs store base)
bench_compile migrate_layout migrate_layout.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/migrate_layout" "$@"
