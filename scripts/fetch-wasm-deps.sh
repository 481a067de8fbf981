#!/usr/bin/env bash
# Fetches the third-party C sources that the wasm build compiles, into a cache directory inside
# the build tree. Nothing fetched here is ever committed.
#   - hiredis 0.14.1 protocol reader (read.c, sds.c, alloc.c): the Debian source package, the
#     same version as the native libhiredis-dev.
#   - SQLite amalgamation (sqlite3.c/.h): from the better-sqlite3 package tarball on the npm
#     registry (deps/sqlite3/); nothing of that package is run.
# Idempotent: a finished fetch leaves a stamp and is not repeated.
set -euo pipefail

out=${1:?usage: fetch-wasm-deps.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

HIREDIS_VERSION=0.14.1
BETTER_SQLITE3_VERSION=12.11.1

fetch_hiredis() {
  local stamp="$out/hiredis.stamp"
  [ -f "$stamp" ] && return 0
  local work="$out/apt-src"
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/parts" "$work/dl"
  # deb-src is not configured on the machine: derive a private source list from the binary one,
  # without touching /etc/apt.
  local found=0
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    sed 's/^Types: deb$/Types: deb-src/' "$f" > "$work/parts/$(basename "$f")"
    found=1
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    grep -E '^deb ' "$f" | sed 's/^deb /deb-src /' > "$work/parts/$(basename "$f").list" || true
    found=1
  done
  [ "$found" = 1 ] || { echo "fetch-wasm-deps: no apt sources found" >&2; exit 1; }
  local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts"
              -o "Dir::State::Lists=$work/lists" -o Debug::NoLocking=1)
  apt-get "${opts[@]}" update -qq >/dev/null
  (cd "$work/dl" && apt-get "${opts[@]}" source --download-only "hiredis=${HIREDIS_VERSION}*" \
      >/dev/null 2>&1 || apt-get "${opts[@]}" source --download-only hiredis >/dev/null 2>&1)
  local tarball
  tarball=$(ls "$work"/dl/hiredis_*.orig.tar.* | head -1)
  rm -rf "$out/hiredis-src" && mkdir -p "$out/hiredis-src"
  tar xf "$tarball" -C "$out/hiredis-src" --strip-components=1
  # Consumers include <hiredis/read.h>, as with the Debian -dev package.
  mkdir -p "$out/hiredis-include"
  ln -sfn "$out/hiredis-src" "$out/hiredis-include/hiredis"
  rm -rf "$work"
  touch "$stamp"
}

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

fetch_hiredis
fetch_sqlite
