#!/usr/bin/env bash
# Builds and runs the "Refresh webhook on a per-member connection" benchmark
# (bench/webhook_grantees.cpp) on a redis-server of its own (stopped and deleted at the end): the
# webhook's Redis time at N grantees and the discovery read's at G connections, before (the
# scripts at commit BEFORE, default 404d120, the last one that expanded every grantee) and after
# (the scripts of this tree), side by side. Extra arguments go to the benchmark:
#   BEFORE=<commit> bench/webhook_grantees.sh [--n 50000] [--runs 5] [--g 50] [--reads 2000]
# Results and how to read them: docs/benchmarks.md, "Refresh webhook on a per-member connection".
source "$(dirname "$0")/lib.sh"

before=${BEFORE:-404d120}
scripts=$(mktemp -d)
bench_at_exit "rm -rf '$scripts'"
git -C "$BENCH_ROOT" show "$before:schema/lua/webhook_refresh.lua" >"$scripts/webhook_refresh.lua"
git -C "$BENCH_ROOT" show "$before:schema/lua/discovery_read.lua" >"$scripts/discovery_read.lua"

bench_build quiver_core
mapfile -t libs < <(bench_libs)
bench_compile webhook_grantees webhook_grantees.cpp hiredis -- "${libs[@]}"
"$BENCH_OUT/webhook_grantees" --before-webhook "$scripts/webhook_refresh.lua" \
  --before-read "$scripts/discovery_read.lua" "$@"
