#!/usr/bin/env bash
# Builds quiver-edge (the core as wasm, Emscripten) and stages everything a deployment needs into
# build/wasm/edge/: worker.mjs, quiver-edge.mjs (glue), quiver-edge.wasm, workerd.capnp and
# wrangler.toml. Then:
#   workerd serve build/wasm/edge/workerd.capnp            # self-hosted (deploy/edge.md)
#   cd build/wasm/edge && wrangler deploy                  # Cloudflare Workers
# The first build compiles the SQLite amalgamation (~45 s); later ones are incremental.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export NODE_PATH=${NODE_PATH:-/usr/share/nodejs}  # Emscripten 3.1.6's link step needs acorn
# Tests off unless asked for (scripts/test.sh builds the same tree with them on).
emcmake cmake -S "$root" -B "$root/build/wasm" -DCMAKE_BUILD_TYPE=Release \
  -DQUIVER_BUILD_TESTS="${QUIVER_BUILD_TESTS:-OFF}" >/dev/null
cmake --build "$root/build/wasm" --target quiver_edge quiver_edge_stage -j "$(nproc 2>/dev/null || echo 2)"
echo "quiver-edge staged in $root/build/wasm/edge"
