#!/usr/bin/env bash
# Builds and runs the "listing many upstreams" benchmark (bench/upstream_listing.cpp) against
# bench/fake_upstream.cpp children. Not a test: it takes about a minute (the sequential round
# alone is ~40 s; pass --skip-sequential to leave it out). Extra arguments go to the benchmark:
#   bench/upstream_listing.sh [--n 100 --hang 10 --slow 20 --slow-ms 300 --concurrency 5 ...]
# Results and how to read them: docs/benchmarks.md, "Listing many upstreams".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/native"
out="$build/bench"
mkdir -p "$out"

cmake -S "$root" -B "$build" >/dev/null
make -C "$build" -j2 quiver_agent_cli >/dev/null

flags=(-std=c++17 -O2 -I"$root")
# Same feature macros as the library (cpp-httplib's class layouts depend on them).
read -r -a pc <<<"$(pkg-config --cflags --libs cpp-httplib hiredis)"
g++ "${flags[@]}" -o "$out/fake_upstream" "$root/bench/fake_upstream.cpp"
g++ "${flags[@]}" -o "$out/upstream_listing" "$root/bench/upstream_listing.cpp" \
  "$build"/native-agent/libquiver_agent_{cli,api,engine,upstream,store,base}.a "$build/shared/libquiver_core.a" \
  "${pc[@]}" -lsqlite3 -lssl -lcrypto -lpthread

# Each upstream is a child with three pipes; 100 of them need a few hundred descriptors.
ulimit -n 4096 2>/dev/null || true
exec "$out/upstream_listing" --fake "$out/fake_upstream" "$@"
