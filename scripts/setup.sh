#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, run and test Quiver. Idempotent and
# quick when everything is already there: Debian packages are installed only when missing, npm
# packages only when their package.json changed.
#   scripts/setup.sh            # everything the tests need (build + tests + test peers)
#   scripts/setup.sh --run      # only the Debian packages `quiver-agent` needs to build and run
#   scripts/setup.sh --servers  # the quick start's MCP servers (deploy/package.json → build/servers)
#   scripts/setup.sh --local    # deploy/local.sh: --run, Emscripten, redis-server, workerd; no test tools
#   scripts/setup.sh --peers    # only the npm packages the tests use (tests/package.json → build/node)
#   scripts/setup.sh --bench    # only what the benchmarks add: wrk, and nginx-light as a baseline
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}

# hiredis is not among them: the build compiles hiredis 1.2 (with TLS, against libssl-dev) from
# Debian 13's source package, fetched at configure time (scripts/fetch-hiredis.sh).
run_pkgs=(g++ cmake make pkg-config nlohmann-json3-dev libcpp-httplib-dev libsqlite3-dev
          libssl-dev)
edge_pkgs=(emscripten redis-server)
test_pkgs=(libgtest-dev googletest emscripten redis-server openssl iproute2 util-linux wrk
           clang-14 clang-format-14 libfuzzer-14-dev libclang-rt-14-dev dpkg-dev
           chromium)  # chromium: the status page's browser test (tests/browser/)
bench_pkgs=(wrk nginx-light)

case "$mode" in
  all) pkgs=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  --run) pkgs=("${run_pkgs[@]}") ;;
  --local) pkgs=("${run_pkgs[@]}" "${edge_pkgs[@]}") ;;
  --servers | --peers) pkgs=() ;;
  --bench) pkgs=("${bench_pkgs[@]}") ;;
  *) echo "setup.sh: unknown mode $mode (see the header of this script)" >&2; exit 2 ;;
esac

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

# npm_install PACKAGE_JSON DIR: the packages PACKAGE_JSON names, into DIR/node_modules, once per
# version of that file.
npm_install() {
  local manifest=$1 dir=$2
  mkdir -p "$dir"
  if ! cmp -s "$manifest" "$dir/package.json" || [ ! -d "$dir/node_modules" ]; then
    echo "setup: installing npm packages into ${dir#"$root"/}"
    cp "$manifest" "$dir/package.json"
    (cd "$dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >/dev/null) || {
      rm -f "$dir/package.json"; echo "setup: npm install failed" >&2; exit 1; }
  fi
}

case "$mode" in
  # The quick start's MCP servers only: what `quiver-agent serve` runs, nothing the tests use.
  --servers) npm_install "$root/deploy/package.json" "$root/build/servers" ;;
  # Real MCP peers, clients and workerd for the tests (deploy/local.sh uses its workerd too).
  all | --peers | --local) npm_install "$root/tests/package.json" "$root/build/node" ;;
esac
