#!/usr/bin/env bash
# Builds and runs the calls benchmarks, each side by side in one run. Not a test.
#  1. bench/call_relay.cpp: `tools/call echo` on server-everything directly, through the agent's
#     call path and through the edge's Redis relay commands (in-process, no HTTP, no workerd),
#     against a redis-server of its own on a free loopback port;
#  2. bench/call_relay_http.mjs: the same call end to end over HTTP: the SDK client on the
#     upstream, POST /mcp at `quiver-agent serve`, POST /mcp at quiver-edge in workerd relaying to
#     that agent (needs the staged edge, scripts/edge-build.sh; skipped, saying so, without it).
# Extra arguments go to both: bench/call_relay.sh [--n 1000 --warmup 50]
# Results and how to read them: docs/benchmarks.md, "Calls through the agent and the edge relay".
source "$(dirname "$0")/lib.sh"

bench_build quiver_agent_engine quiver-agent
mapfile -t libs < <(bench_libs engine upstream store base)
bench_compile call_relay call_relay.cpp cpp-httplib hiredis -- "${libs[@]}"

bench_start_redis
bench_at_exit "rm -rf /tmp/quiver-bench-call-relay"
everything="$BENCH_ROOT/build/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
"$BENCH_OUT/call_relay" --everything "$everything" --redis-port "$BENCH_REDIS_PORT" "$@"

edge_dir="$BENCH_ROOT/build/wasm/edge"
if [[ -f "$edge_dir/quiver-edge.wasm" ]]; then
  echo
  node "$BENCH_ROOT/bench/call_relay_http.mjs" --edge-dir "$edge_dir" \
    --agent "$BENCH_BUILD/native-agent/quiver-agent" "$@"
else
  echo "skipped the HTTP run: no staged edge in $edge_dir (scripts/edge-build.sh)"
fi
