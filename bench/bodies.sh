#!/usr/bin/env bash
# Builds and runs the "Manifest bodies stored once, by content" benchmark (bench/bodies.cpp) on a
# redis-server of its own (stopped and deleted at the end). Extra arguments go to the benchmark:
#   bench/bodies.sh [--g 50] [--size 20000] [--k 400] [--principals 1000]
# Results and how to read them: docs/benchmarks.md, "Manifest bodies stored once, by content".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/native"
out="$build/bench"
mkdir -p "$out"

cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" -j2 --target quiver_core >/dev/null

flags=(-std=c++17 -O2 -I"$root")
read -r -a pc <<<"$(pkg-config --cflags --libs hiredis)"
g++ "${flags[@]}" -o "$out/bodies" "$root/bench/bodies.cpp" \
  "$build/shared/libquiver_core.a" "${pc[@]}" -lsqlite3 -lssl -lcrypto -lpthread
exec "$out/bodies" "$@"
