#!/usr/bin/env bash
# Fetches the third-party C sources that the wasm build compiles, into a cache directory inside
# the build tree. Nothing fetched here is ever committed.
#   - hiredis' protocol reader: scripts/fetch-hiredis.sh (the native build's hiredis 1.2), which
#     cmake/hiredis.cmake runs for both builds.
#   - SQLite amalgamation (sqlite3.c/.h): from the better-sqlite3 package tarball on the npm
#     registry (deps/sqlite3/); nothing of that package is run.
# Idempotent: a finished fetch leaves a stamp and is not repeated.
set -euo pipefail

out=${1:?usage: fetch-wasm-deps.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

BETTER_SQLITE3_VERSION=12.11.1

fetch_sqlite() {
  local stamp="$out/sqlite.stamp"
  [ -f "$stamp" ] && return 0
  local work="$out/npm-pack"
  rm -rf "$work" && mkdir -p "$work"
  (cd "$work" && npm pack --silent "better-sqlite3@${BETTER_SQLITE3_VERSION}" >/dev/null)
  rm -rf "$out/sqlite" && mkdir -p "$out/sqlite"
  tar xzf "$work"/better-sqlite3-*.tgz -C "$work"
  cp "$work/package/deps/sqlite3/sqlite3.c" "$work/package/deps/sqlite3/sqlite3.h" "$out/sqlite/"
  rm -rf "$work"
  touch "$stamp"
}

fetch_sqlite
