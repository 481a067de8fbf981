#!/usr/bin/env bash
# Builds and runs the capacity benchmark (bench/capacity.cpp): commits per second and the agent's
# and the edge's discovery reads on a redis-server of its own and on a six-node Redis Cluster of
# its own (3 masters + 3 replicas, started by tests/support/redis_cluster.cpp), side by side; all
# stopped and deleted at the end. Extra arguments go to the benchmark:
#   bench/capacity.sh [--commits 480] [--threads 1,4,16] [--sizes 2000,20000] [--g 10,50]
#                     [--k 200] [--namespaces 3] [--spread-threads 12] [--rounds 3]
# Results and how to read them: docs/benchmarks.md, "Capacity on one node and on a cluster".
source "$(dirname "$0")/lib.sh"

# The cluster comes from the test support library, built with the tests.
cmake -S "$BENCH_ROOT" -B "$BENCH_BUILD" -DQUIVER_BUILD_TESTS=ON >/dev/null
bench_build quiver_agent_store quiver_test_support
mapfile -t libs < <(
  printf '%s\n' "$BENCH_BUILD/tests/libquiver_test_support.a"
  bench_libs store base
)
bench_compile capacity capacity.cpp hiredis -- "${libs[@]}"
exec "$BENCH_OUT/capacity" "$@"
