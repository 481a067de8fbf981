#!/usr/bin/env bash
# Builds and runs the capacity benchmark (bench/capacity.cpp): commits per second and the agent's
# and the edge's discovery reads on a redis-server of its own and on a six-node Redis Cluster of
# its own (3 masters + 3 replicas, started by tests/support/redis_cluster.cpp), side by side; all
# stopped and deleted at the end. Extra arguments go to the benchmark:
#   bench/capacity.sh [--commits 480] [--threads 1,4,16] [--sizes 2000,20000] [--g 10,50]
#                     [--k 200] [--namespaces 3] [--spread-threads 12] [--rounds 3]
# Results and how to read them: docs/benchmarks.md, "Capacity on one node and on a cluster".
source "$(dirname "$0")/lib.sh"

bench_cluster_exec capacity capacity.cpp "$@"
