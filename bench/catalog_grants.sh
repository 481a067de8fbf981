#!/usr/bin/env bash
# Builds and runs the "Admin API: a grant change at 1k, 100k and 1M members" benchmark
# (bench/catalog_grants.cpp) on a redis-server of its own (stopped and deleted at the end). Not a
# test: loading a million members takes a minute or two and ~1.5 GB of Redis memory. Extra
# arguments go to the benchmark:
#   bench/catalog_grants.sh [--n 1000,100000,1000000] [--k 2000] [--sqlite] [--sqlite-n 1000,1000000]
# Results and how to read them: docs/benchmarks.md, "Admin API: a grant change at 1k, 100k and 1M
# members".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/native"
out="$build/bench"
mkdir -p "$out"

cmake -S "$root" -B "$build" >/dev/null
make -C "$build" -j2 quiver_agent_store >/dev/null

flags=(-std=c++17 -O2 -I"$root")
read -r -a pc <<<"$(pkg-config --cflags --libs hiredis)"
g++ "${flags[@]}" -o "$out/catalog_grants" "$root/bench/catalog_grants.cpp" \
  "$build"/native-agent/libquiver_agent_{store,base}.a "$build/shared/libquiver_core.a" \
  "${pc[@]}" -lsqlite3 -lssl -lcrypto -lpthread
exec "$out/catalog_grants" "$@"
