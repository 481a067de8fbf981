#!/usr/bin/env bash
# Runs Quiver on its embedded default (no Redis): installs what is missing, builds quiver-agent,
# prepares build/quickstart/ (SQLite store, caller-token key, the filesystem server's directory),
# then starts `quiver-agent serve` with deploy/quickstart.json: real MCP servers from npm
# (server-everything, server-memory, server-filesystem over stdio). It prints the one `curl` line
# that shows the cached manifests. Ctrl-C stops it.
#
#   scripts/quickstart.sh                          # API on 127.0.0.1:8787
#   scripts/quickstart.sh --listen 127.0.0.1:9000  # extra arguments go to `quiver-agent serve`
#
# Start over: rm -rf build/quickstart (the key, the SQLite file and your preferences go with it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

"$root/scripts/setup.sh" --run
"$root/scripts/setup.sh" --servers

echo "== building quiver-agent"
# Tests off: the quick start needs nothing only the tests need (GoogleTest is not installed here).
cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIVER_BUILD_TESTS=OFF >/dev/null
cmake --build build/native -j "$(nproc 2>/dev/null || echo 2)" --target quiver-agent

data="$root/build/quickstart"
mkdir -p "$data/files"
# The key that signs and verifies caller tokens (quiver.caller_token_keys.local-1): made once,
# readable only by you. The curl line printed below carries a token signed with it.
if [ ! -s "$data/caller-token.key" ]; then
  (umask 077 && head -c 32 /dev/urandom | base64 >"$data/caller-token.key")
fi
[ -e "$data/files/README.txt" ] ||
  echo "server-filesystem serves this directory (build/quickstart/files)." >"$data/files/README.txt"

export QUIVER_DATA_DIR="$data"
export QUIVER_NODE_MODULES="$root/build/servers/node_modules"

echo "== starting quiver-agent serve (data in build/quickstart)"
exec "$root/build/native/native-agent/quiver-agent" serve --config "$root/deploy/quickstart.json" "$@"
