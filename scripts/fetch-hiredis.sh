#!/usr/bin/env bash
# Fetches the hiredis 1.2.x sources that the native build compiles (with its TLS part,
# hiredis_ssl), into a cache directory inside the build tree. Nothing fetched here is committed.
# Debian 12 ships hiredis 0.14, which has no TLS; the source package of the next Debian release
# (13, trixie) carries 1.2. The source list is derived from the machine's own binary apt sources
# (their Debian entries, with the release's codename replaced), in a private apt state directory:
# /etc/apt is never touched.
# Idempotent: a finished fetch leaves a stamp and is not repeated. Fails (exit 1, a message on
# stderr) when the sources cannot be fetched, for example offline.
#   scripts/fetch-hiredis.sh OUTDIR   # → OUTDIR/hiredis-1.2/src, OUTDIR/hiredis-1.2/include/hiredis
set -euo pipefail

out=${1:?usage: fetch-hiredis.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

HIREDIS_SERIES=1.2
TARGET_SUITE=trixie

fail() {
  echo "fetch-hiredis: $*" >&2
  exit 1
}

dest="$out/hiredis-$HIREDIS_SERIES"
stamp="$dest.stamp"
[ -f "$stamp" ] && [ -f "$dest/src/hiredis.h" ] && exit 0

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$codename" ] || fail "cannot read the machine's Debian codename from /etc/os-release"

work="$out/hiredis-apt"
rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/parts" "$work/dl"
# deb-src entries for the target release, from the machine's Debian entries (those naming its
# own codename in their suites): deb822 .sources files and one-line .list files.
found=0
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  grep -Eq "^Suites:.*\\b${codename}\\b" "$f" || continue
  # One stanza per file is what Debian writes; split stanzas keep only those naming the codename.
  awk -v RS= -v ORS='\n\n' -v c="$codename" '$0 ~ ("Suites:[^\n]*" c) { print }' "$f" |
    sed -e 's/^Types: .*/Types: deb-src/' -e "/^Suites:/s/\\b${codename}\\b/${TARGET_SUITE}/g" \
      >"$work/parts/$(basename "$f")"
  found=1
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  grep -E "^deb .*\\b${codename}\\b" "$f" |
    sed -e 's/^deb /deb-src /' -e "s/\\b${codename}\\b/${TARGET_SUITE}/g" \
      >"$work/parts/$(basename "$f").list" || true
  [ -s "$work/parts/$(basename "$f").list" ] && found=1
done
[ "$found" = 1 ] || fail "no Debian apt source naming '$codename' in /etc/apt to derive a $TARGET_SUITE source list from"

opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts"
      -o "Dir::State::Lists=$work/lists" -o Debug::NoLocking=1)
# apt-get update can exit 0 when a fetch failed: the index files themselves tell.
if ! apt-get "${opts[@]}" update -qq >"$work/update.log" 2>&1 ||
   ! ls "$work"/lists/*_Sources* >/dev/null 2>&1; then
  fail "cannot fetch the $TARGET_SUITE source index from the machine's Debian archive (offline?): $(tail -3 "$work/update.log" | tr '\n' ' ')"
fi
# The newest ${HIREDIS_SERIES}.x version the index carries (apt-get source wants an exact version).
version=$(apt-cache "${opts[@]}" showsrc hiredis 2>/dev/null |
  sed -n 's/^Version: //p' | { grep -E "^${HIREDIS_SERIES//./\\.}\\." || true; } | sort -V | tail -1)
[ -n "$version" ] || fail "the $TARGET_SUITE source index has no hiredis ${HIREDIS_SERIES}.x"
(cd "$work/dl" && apt-get "${opts[@]}" source --download-only "hiredis=$version" \
  >"$work/source.log" 2>&1) ||
  fail "apt-get source hiredis=$version from $TARGET_SUITE failed: $(tail -3 "$work/source.log" | tr '\n' ' ')"
tarball=$(ls "$work"/dl/hiredis_"${HIREDIS_SERIES}".*.orig.tar.* 2>/dev/null | head -1)
[ -n "$tarball" ] || fail "the $TARGET_SUITE source package has no hiredis ${HIREDIS_SERIES}.x orig tarball"

rm -rf "$dest" && mkdir -p "$dest/src" "$dest/include"
tar xf "$tarball" -C "$dest/src" --strip-components=1
[ -f "$dest/src/hiredis_ssl.h" ] || fail "$(basename "$tarball") has no hiredis_ssl.h"
# Consumers include <hiredis/hiredis.h>, as with the Debian -dev package.
ln -sfn "$dest/src" "$dest/include/hiredis"
basename "$tarball" >"$dest/SOURCE"
rm -rf "$work"
touch "$stamp"
