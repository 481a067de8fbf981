#!/usr/bin/env bash
# Runs the conformance suite's server scenarios against the /mcp of the agent, or with --edge-dir
# of the edge (server.mjs), inside a private network namespace with only loopback up, as run.sh
# runs the client scenarios (netns.sh).
#
#   tests/conformance/server.sh QUIVER_AGENT NODE_MODULES [--edge-dir DIR] [SCENARIO...]
#
# Default: every scenario that applies. DIR is the staged quiver-edge (build/wasm/edge).
set -euo pipefail
agent=${1:?usage: server.sh QUIVER_AGENT NODE_MODULES [--edge-dir DIR] [SCENARIO...]}
node_modules=${2:?usage: server.sh QUIVER_AGENT NODE_MODULES [--edge-dir DIR] [SCENARIO...]}
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=netns.sh
. "$here/netns.sh"
private_netns server.sh "$0" "$agent" "$node_modules" "$@"
export QUIVER_NODE_MODULES="$node_modules"
exec node "$here/server.mjs" --agent "$agent" "$@"
