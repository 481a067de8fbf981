#!/usr/bin/env bash
# Runs the conformance suite's server scenarios against the agent's /mcp (server.mjs), inside a
# private network namespace with only loopback up, as run.sh runs the client scenarios.
#
#   tests/conformance/server.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]   (default: all that apply)
set -euo pipefail
agent=${1:?usage: server.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]}
node_modules=${2:?usage: server.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]}
shift 2
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${QUIVER_CONFORMANCE_NETNS:-}" ]; then
  for cmd in unshare ip node; do
    command -v "$cmd" >/dev/null || { echo "server.sh: '$cmd' is needed" >&2; exit 1; }
  done
  export QUIVER_CONFORMANCE_NETNS=1
  inner=(sh -c 'ip link set lo up && exec "$@"' sh bash "$0" "$agent" "$node_modules" "$@")
  if unshare -n true 2>/dev/null; then
    exec unshare -n "${inner[@]}"
  elif unshare -rn true 2>/dev/null; then
    exec unshare -rn "${inner[@]}"
  fi
  echo "server.sh: cannot create a network namespace (unshare -n needs root or user namespaces)" >&2
  exit 1
fi
export QUIVER_NODE_MODULES="$node_modules"
exec node "$here/server.mjs" --agent "$agent" "$@"
