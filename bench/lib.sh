# What the bench scripts (bench/*.sh) share; sourced, not run:
#   source "$(dirname "$0")/lib.sh"
# Sets BENCH_ROOT (the repository), BENCH_BUILD (build/native) and BENCH_OUT (build/native/bench),
# and gives:
#   bench_build TARGET...          configure build/native, build only these targets (-j2: the
#                                  machine is shared)
#   bench_libs LAYER...            the static libraries of these agent layers (top first), then the
#                                  core's, one path a line
#   bench_compile NAME SOURCE [PKG...] [-- LIB...]
#                                  g++ -O2 bench/SOURCE into $BENCH_OUT/NAME, against LIB... and
#                                  the pkg-config packages PKG... (with their feature macros: some
#                                  class layouts depend on them); `hiredis` names the build's own
#                                  hiredis 1.2 (cmake/hiredis.cmake), not a system package
#   bench_at_exit COMMAND          run COMMAND when the script ends (last registered, first run)
#   bench_free_port                a loopback TCP port free a moment ago
#   bench_start_redis              a redis-server of the script's own on 127.0.0.1 (no persistence,
#                                  a temporary directory), stopped and deleted at exit; its port in
#                                  BENCH_REDIS_PORT
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_BUILD="$BENCH_ROOT/build/native"
BENCH_OUT="$BENCH_BUILD/bench"
mkdir -p "$BENCH_OUT"

bench_build() {
  cmake -S "$BENCH_ROOT" -B "$BENCH_BUILD" >/dev/null
  cmake --build "$BENCH_BUILD" -j2 --target "$@" >/dev/null
}

bench_libs() {
  local layer
  for layer in "$@"; do printf '%s\n' "$BENCH_BUILD/native-agent/libquiver_agent_$layer.a"; done
  printf '%s\n' "$BENCH_BUILD/shared/libquiver_core.a"
}

bench_compile() {
  local name=$1 source=$2
  shift 2
  local pkgs=() libs=() pc=()
  while (($#)); do
    if [[ $1 == -- ]]; then
      shift
      libs=("$@")
      break
    fi
    pkgs+=("$1")
    shift
  done
  # hiredis is not a system package: the build compiles hiredis 1.2 (cmake/hiredis.cmake).
  local i
  for i in "${!pkgs[@]}"; do
    if [[ ${pkgs[i]} == hiredis ]]; then
      unset 'pkgs[i]'
      cmake --build "$BENCH_BUILD" -j2 --target quiver_hiredis >/dev/null
      libs+=("$(find "$BENCH_BUILD" -maxdepth 3 -name libquiver_hiredis.a | head -1)")
      pc+=("-isystem" "$BENCH_BUILD/_deps/hiredis-1.2/include")
    fi
  done
  pkgs=("${pkgs[@]}")
  if ((${#pkgs[@]})); then
    local extra=()
    read -r -a extra <<<"$(pkg-config --cflags --libs "${pkgs[@]}")"
    pc+=("${extra[@]}")
  fi
  g++ -std=c++17 -O2 -I"$BENCH_ROOT" -o "$BENCH_OUT/$name" "$BENCH_ROOT/bench/$source" \
    "${libs[@]}" "${pc[@]}" -lsqlite3 -lssl -lcrypto -lpthread
}

# A benchmark on a Redis Cluster of its own: the cluster comes from the test support library
# (tests/support/redis_cluster.cpp), built with the tests. Compiles bench/<source> as <name> over
# the agent's store and runs it with the remaining arguments (this replaces the shell).
bench_cluster_exec() {
  local name=$1 source=$2
  shift 2
  cmake -S "$BENCH_ROOT" -B "$BENCH_BUILD" -DQUIVER_BUILD_TESTS=ON >/dev/null
  bench_build quiver_agent_store quiver_test_support
  local libs=()
  mapfile -t libs < <(
    printf '%s\n' "$BENCH_BUILD/tests/libquiver_test_support.a"
    bench_libs store base
  )
  bench_compile "$name" "$source" hiredis -- "${libs[@]}"
  exec "$BENCH_OUT/$name" "$@"
}

BENCH_AT_EXIT=()
bench_at_exit() { BENCH_AT_EXIT+=("$1"); }
bench_run_at_exit() {
  local i
  for ((i = ${#BENCH_AT_EXIT[@]} - 1; i >= 0; i--)); do eval "${BENCH_AT_EXIT[i]}" || true; done
}
trap bench_run_at_exit EXIT

bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

bench_start_redis() {
  BENCH_REDIS_PORT=$(bench_free_port)
  local dir pid
  dir=$(mktemp -d)
  redis-server --bind 127.0.0.1 --port "$BENCH_REDIS_PORT" --save "" --appendonly no \
    --dir "$dir" --daemonize no >/dev/null &
  pid=$!
  bench_at_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf '$dir'"
  local _
  for _ in $(seq 50); do
    redis-cli -p "$BENCH_REDIS_PORT" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench: redis-server did not start on port $BENCH_REDIS_PORT" >&2
  return 1
}
