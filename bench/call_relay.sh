#!/usr/bin/env bash
# Builds and runs the calls benchmark (bench/call_relay.cpp): `tools/call echo` on server-everything
# directly, through the agent's call path and through the edge's Redis relay, side by side in one
# run, against a redis-server of its own on a free loopback port. Not a test. Extra arguments go to
# the benchmark: bench/call_relay.sh [--n 1000 --warmup 50]
# Results and how to read them: docs/benchmarks.md, "Calls through the agent and the edge relay".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_engine
mapfile -t libs < <(bench_libs engine upstream store base)
bench_compile call_relay call_relay.cpp cpp-httplib hiredis -- "${libs[@]}"

bench_start_redis
bench_at_exit "rm -rf /tmp/quiver-bench-call-relay"
everything="$BENCH_ROOT/build/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
"$BENCH_OUT/call_relay" --everything "$everything" --redis-port "$BENCH_REDIS_PORT" "$@"
