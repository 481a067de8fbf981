#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test Quiver. Idempotent and
# quick when everything is already there: Debian packages are installed only when missing, the
# npm packages the tests use only when tests/package.json changed.
#   scripts/setup.sh            # everything (build + tests)
#   scripts/setup.sh --run      # only the Debian packages `quiver-agent` needs to build and run
#   scripts/setup.sh --peers    # only the npm packages (MCP servers used by tests and examples)
#   scripts/setup.sh --bench    # only what the benchmarks add: wrk, and nginx-light as a baseline
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}

run_pkgs=(g++ cmake make pkg-config nlohmann-json3-dev libcpp-httplib-dev libhiredis-dev
          libsqlite3-dev libssl-dev)
test_pkgs=(libgtest-dev googletest emscripten redis-server openssl iproute2 util-linux wrk
           clang-14 libfuzzer-14-dev libclang-rt-14-dev)
bench_pkgs=(wrk nginx-light)

pkgs=("${run_pkgs[@]}")
[ "$mode" = "--run" ] || pkgs+=("${test_pkgs[@]}")
[ "$mode" = "--peers" ] && pkgs=()
[ "$mode" = "--bench" ] && pkgs=("${bench_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js and npm: the machine's own (any source) when present, else Debian's.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

[ "$mode" = "--run" ] || [ "$mode" = "--bench" ] && exit 0

# npm packages: real MCP peers for the tests and the example config, workerd for the edge.
node_dir="$root/build/node"
mkdir -p "$node_dir"
if ! cmp -s "$root/tests/package.json" "$node_dir/package.json" || [ ! -d "$node_dir/node_modules" ]; then
  echo "setup: installing npm packages into build/node"
  cp "$root/tests/package.json" "$node_dir/package.json"
  (cd "$node_dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >/dev/null) || {
    rm -f "$node_dir/package.json"; echo "setup: npm install failed" >&2; exit 1; }
fi
