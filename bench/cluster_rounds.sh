#!/usr/bin/env bash
# Builds and runs the cluster-rounds benchmark (bench/cluster_rounds.cpp): a spread round of the
# agent's node pool with every node's pipeline written at once against the same round node after
# node, side by side, on loopback and through a delay proxy per node, on a six-node Redis Cluster
# of its own (3 masters + 3 replicas, started by tests/support/redis_cluster.cpp); all stopped and
# deleted at the end. Extra arguments go to the benchmark:
#   bench/cluster_rounds.sh [--rounds 300] [--keys 48] [--delays-ms 0,1,5]
# Results and how to read them: docs/benchmarks.md, "The agent's spread round in one round trip".
source "$(dirname "$0")/lib.sh"

bench_cluster_exec cluster_rounds cluster_rounds.cpp "$@"
