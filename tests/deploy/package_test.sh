#!/usr/bin/env bash
# The agent's installation, checked as an operator would use it (cmake/install.cmake):
#   1. `cmake --install` into a staged tree (DESTDIR, prefix /usr): the binary runs, the systemd
#      unit names the installed binary, the examples and the docs are there;
#   2. `cpack -G DEB` builds the package: its files, its Depends (from dpkg-shlibdeps: SQLite,
#      hiredis, cpp-httplib, and adduser) and its maintainer scripts;
#   3. as root, when dpkg may be used: the package installs on this machine (user `quiver`, a
#      0700 /var/lib/quiver), the installed binary serves the quick start's config with the real
#      MCP servers of build/node (a plain `quiver-agent serve`: no systemd runs these machines)
#      until all three connections are fresh through the API, and the
#      package purges cleanly (binary and data directory gone). Skipped with the reason when not root, or when a quiver-agent
#      package not made here is installed (it is never replaced).
#
#   tests/deploy/package_test.sh BUILD_DIR NODE_MODULES
# Exit 0: passed; 77: the install-on-this-machine part skipped (1 and 2 passed); else failed.
set -euo pipefail
build=$(cd "$1" && pwd)
node_modules=$2
root=$(cd "$(dirname "$0")/../.." && pwd)

tmp=$(mktemp -d /tmp/quiver-package-test.XXXXXX)
agent_pid=
installed_here=0
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
  if [ "$installed_here" = 1 ]; then dpkg --purge quiver-agent >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() { echo "ok    $*"; }

# ---- 1. cmake --install ----
DESTDIR="$tmp/stage" cmake --install "$build" --prefix /usr >"$tmp/install.log" ||
  fail "cmake --install: $(cat "$tmp/install.log")"
s="$tmp/stage/usr"
for f in bin/quiver-agent lib/systemd/system/quiver-agent.service \
         share/quiver/examples/quickstart.json share/quiver/examples/redis-team.json \
         share/doc/quiver-agent/README.md share/doc/quiver-agent/edge.md; do
  [ -e "$s/$f" ] || fail "cmake --install did not install /usr/$f"
done
"$s/bin/quiver-agent" --help >/dev/null 2>&1 || fail "the installed binary does not run"
grep -qx 'ExecStart=/usr/bin/quiver-agent serve --config /etc/quiver/agent.json' \
  "$s/lib/systemd/system/quiver-agent.service" || fail "the unit does not name /usr/bin/quiver-agent"
# The unit is deploy/quiver-agent.service but for that path.
diff <(sed 's|/usr/local/bin/quiver-agent|/usr/bin/quiver-agent|' "$root/deploy/quiver-agent.service") \
  "$s/lib/systemd/system/quiver-agent.service" >/dev/null || fail "the installed unit differs"
ok "cmake --install: binary, unit (ExecStart=/usr/bin/quiver-agent), examples, docs"

# ---- 2. cpack -G DEB ----
(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" >"$tmp/cpack.log" 2>&1) ||
  fail "cpack: $(cat "$tmp/cpack.log")"
deb=$(ls "$tmp"/quiver-agent_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "cpack made no .deb: $(cat "$tmp/cpack.log")"
dpkg-deb -c "$deb" >"$tmp/contents"
for f in ./usr/bin/quiver-agent ./usr/lib/systemd/system/quiver-agent.service \
         ./usr/share/quiver/examples/quickstart.json ./usr/share/doc/quiver-agent/README.md; do
  grep -q " $f\$" "$tmp/contents" || fail "the package lacks $f"
done
depends=$(dpkg-deb -f "$deb" Depends)
# hiredis is linked in (cmake/hiredis.cmake); its TLS part brings libssl3.
for d in libsqlite3-0 libssl3 libcpp-httplib0.11 adduser libc6; do
  [[ ",$depends" == *[\ ,]$d* ]] || fail "Depends lacks $d: $depends"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -t >"$tmp/control"
for f in postinst prerm postrm; do grep -q "$f\$" "$tmp/control" || fail "the package lacks $f"; done
ok "cpack: $(basename "$deb"), Depends: $depends"

# ---- 3. install on this machine, serve the quick start's config, purge ----
if [ "$(id -u)" != 0 ]; then
  echo "skipped: installing the package needs root"
  exit 77
fi
if dpkg-query -W -f='${Status}' quiver-agent 2>/dev/null | grep -q 'install ok installed'; then
  echo "skipped: a quiver-agent package is already installed here; it is not replaced"
  exit 77
fi
installed_here=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || fail "dpkg -i: $(cat "$tmp/dpkg.log")"
[ -x /usr/bin/quiver-agent ] || fail "dpkg -i: no /usr/bin/quiver-agent"
getent passwd quiver >/dev/null || fail "postinst: no user quiver"
[ "$(stat -c '%a %U' /var/lib/quiver)" = "700 quiver" ] ||
  fail "postinst: /var/lib/quiver is $(stat -c '%a %U' /var/lib/quiver)"
ok "dpkg -i: /usr/bin/quiver-agent, user quiver, /var/lib/quiver 0700"

data="$tmp/data"
mkdir -p "$data/files"
(umask 077 && head -c 32 /dev/urandom | base64 >"$data/caller-token.key")
export QUIVER_DATA_DIR="$data" QUIVER_NODE_MODULES="$node_modules"
config=/usr/share/quiver/examples/quickstart.json
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A plain `quiver-agent serve`, as the unit would run it: the machines these tests run on have no
# systemd (a container's PID 1 is not systemd), so the unit itself is checked as a file above.
/usr/bin/quiver-agent serve --config "$config" --listen "127.0.0.1:$port" --no-wait \
  >"$tmp/serve.log" 2>&1 &
agent_pid=$!
token=$(/usr/bin/quiver-agent token --member local --config "$config") || fail "quiver-agent token"
fresh=0
for _ in $(seq 120); do
  body=$(curl -s -m 5 -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/manifests" || true)
  fresh=$(printf '%s' "$body" | { grep -o '"status":"fresh"' || true; } | wc -l)
  [ "$fresh" -ge 3 ] && break
  sleep 0.5
done
[ "$fresh" -ge 3 ] || fail "the installed agent listed $fresh of 3 connections fresh: $body
$(cat "$tmp/serve.log" 2>/dev/null | tail -20)"
ok "the installed agent (quiver-agent serve) serves the quick start's 3 connections fresh"

if [ -n "$agent_pid" ]; then
  kill "$agent_pid"
  wait "$agent_pid" 2>/dev/null || true
  agent_pid=
fi
dpkg --purge quiver-agent >"$tmp/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$tmp/purge.log")"
installed_here=0
[ ! -e /usr/bin/quiver-agent ] || fail "purge left /usr/bin/quiver-agent"
[ ! -e /var/lib/quiver ] || fail "purge left /var/lib/quiver"
ok "dpkg --purge: binary and data directory gone (the user quiver stays, as Debian's do)"
