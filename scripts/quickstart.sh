#!/usr/bin/env bash
# Runs Quiver on its embedded default (no Redis): installs what is missing, builds quiver-agent,
# then starts it with deploy/quickstart.json (real MCP servers from npm, SQLite under
# build/quickstart/). Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

"$root/scripts/setup.sh" --run
"$root/scripts/setup.sh" --peers

echo "== building quiver-agent"
cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/native -j "$(nproc 2>/dev/null || echo 2)" --target quiver-agent

agent="$root/build/native/native-agent/quiver-agent"
export QUIVER_NODE_MODULES="$root/build/node/node_modules"
everything="$QUIVER_NODE_MODULES/@modelcontextprotocol/server-everything/dist/index.js"

echo "== listing the MCP reference server live (quiver-agent probe)"
exec "$agent" probe --stdio "node $everything stdio" "$@"
