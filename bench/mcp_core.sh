#!/usr/bin/env bash
# Builds and runs the edge core's /mcp tools/list vs GET /v1/manifests benchmark
# (bench/mcp_core.cpp) on a redis-server of its own (stopped and deleted at the end). Extra
# arguments go to the benchmark:
#   bench/mcp_core.sh [--g 10] [--size 9000] [--k 2000]
# Results and how to read them: docs/benchmarks.md, "/mcp tools/list against GET /v1/manifests".
source "$(dirname "$0")/lib.sh"

bench_build quiver_core
bench_compile mcp_core mcp_core.cpp hiredis -- "$BENCH_BUILD/shared/libquiver_core.a"
exec "$BENCH_OUT/mcp_core" "$@"
