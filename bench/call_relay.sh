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
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/native"
out="$build/bench"
mkdir -p "$out"

cmake -S "$root" -B "$build" >/dev/null
make -C "$build" -j2 quiver_agent_engine quiver-agent >/dev/null

flags=(-std=c++17 -O2 -I"$root")
read -r -a pc <<<"$(pkg-config --cflags --libs cpp-httplib hiredis)"
g++ "${flags[@]}" -o "$out/call_relay" "$root/bench/call_relay.cpp" \
  "$build"/native-agent/libquiver_agent_{engine,upstream,store,base}.a "$build/shared/libquiver_core.a" \
  "${pc[@]}" -lsqlite3 -lssl -lcrypto -lpthread

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis_dir=$(mktemp -d)
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$redis_dir" \
  --daemonize no >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; rm -rf "$redis_dir" /tmp/quiver-bench-call-relay' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
everything="$root/build/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
"$out/call_relay" --everything "$everything" --redis-port "$port" "$@"

edge_dir="$root/build/wasm/edge"
if [[ -f "$edge_dir/quiver-edge.wasm" ]]; then
  echo
  node "$root/bench/call_relay_http.mjs" --edge-dir "$edge_dir" \
    --agent "$build/native-agent/quiver-agent" "$@"
else
  echo "skipped the HTTP run: no staged edge in $edge_dir (scripts/edge-build.sh)"
fi
