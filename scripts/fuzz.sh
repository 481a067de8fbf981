#!/usr/bin/env bash
# Long local fuzz runs (tests/fuzz/README.md). Configures and builds the clang fuzz tree
# (build/fuzz) when needed, then fuzzes one target, or each in turn, and prints executions and
# crashes per target. The corpus each run grows is kept in build/fuzz/fuzz-corpus/<name>.
#   scripts/fuzz.sh                  # every target, 300 s each
#   scripts/fuzz.sh resp 600         # one target for 10 minutes
#   scripts/fuzz.sh all 60 -jobs=2   # more arguments go to libFuzzer
# Targets: jsonrpc framing resp caller_token webhook manifest mcp_session config url edge
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=${1:-all}
seconds=${2:-300}
shift $(( $# < 2 ? $# : 2 ))

build=build/fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                                 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DQUIVER_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target quiver_fuzz >/dev/null

targets=(jsonrpc framing resp caller_token webhook manifest mcp_session config url edge)
[ "$target" = all ] || targets=("$target")
status=0
summary=()
for t in "${targets[@]}"; do
  log="$build/fuzz-artifacts/$t.log"
  mkdir -p "$build/fuzz-artifacts"
  echo "== $t: ${seconds}s (log: $log)"
  if tests/fuzz/run_target.sh "$build" "$t" "$seconds" "$@" >"$log" 2>&1; then
    result="no crash"
  else
    result="CRASH: $(grep -m1 -o "Test unit written to .*" "$log" || echo "see $log")"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]*' || true)
  summary+=("$(printf '%-13s %12s executions  %-10s %s' "$t" "${execs:-?}" "${cov:-}" "$result")")
  echo "${summary[-1]}"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
