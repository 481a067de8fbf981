#!/usr/bin/env bash
# Runs every Quiver test from a clean checkout: installs what is missing (scripts/setup.sh),
# checks formatting (scripts/format.sh --check), builds both configurations, then runs
#   1. the native unit and integration tests (ctest in build/native: real redis-server, real
#      SQLite files, real child processes and MCP servers),
#   2. the same core unit tests compiled to wasm, under node (ctest in build/wasm),
#   3. a short run of each libFuzzer target (ctest in build/fuzz: clang-14, ASan + UBSan;
#      tests/fuzz/README.md; scripts/fuzz.sh runs them for longer).
# Build trees are kept between runs (incremental); `rm -rf build` starts over.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

"$root/scripts/setup.sh"

jobs=$(nproc 2>/dev/null || echo 2)

# A compiler cache when the machine has one (ccache is not installed for you; a clean checkout
# then compiles only what changed since any earlier build on this machine). Paths are taken
# relative to the checkout, so clones in other directories share entries. QUIVER_CCACHE=0: off.
if [ "${QUIVER_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1 &&
  [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  echo "== compiler cache: ccache ($(ccache --version | head -1))"
fi
export NODE_PATH=${NODE_PATH:-/usr/share/nodejs}  # Emscripten's link step needs acorn from here

echo "== format check (.clang-format, clang-format-14)"
"$root/scripts/format.sh" --check

# The agent first, configured as the quick start does (tests off) and as if GoogleTest were not
# installed: proof that running Quiver needs nothing only the tests need. The same tree then gets
# the tests, so nothing is compiled twice.
echo "== native build: quiver-agent without the tests (no GoogleTest)"
cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIVER_BUILD_TESTS=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON >/dev/null
cmake --build build/native -j "$jobs" --target quiver-agent

echo "== native build"
cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIVER_BUILD_TESTS=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=OFF >/dev/null
cmake --build build/native -j "$jobs"

echo "== wasm build (Emscripten)"
emcmake cmake -S . -B build/wasm -DCMAKE_BUILD_TYPE=Release -DQUIVER_BUILD_TESTS=ON >/dev/null
cmake --build build/wasm -j "$jobs"

echo "== fuzz build (clang-14, libFuzzer)"
CC=clang-14 CXX=clang++-14 cmake -S . -B build/fuzz -DQUIVER_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/fuzz -j "$jobs" --target quiver_fuzz

status=0
echo "== native tests"
(cd build/native && ctest --output-on-failure -j "$jobs" --timeout 300) || status=1
echo "== wasm tests (node)"
(cd build/wasm && ctest --output-on-failure --timeout 300) || status=1
echo "== fuzz targets (short runs)"
(cd build/fuzz && ctest --output-on-failure -j "$jobs" --timeout 300) || status=1
exit $status
