#!/usr/bin/env bash
# The whole Quiver stack on this machine, in one command: redis-server, quiver-agent (Redis
# store, the quick start's real MCP servers from npm) and quiver-edge in workerd, all on loopback.
# It builds what is missing, keeps its state in build/local/ (the Redis password and the
# caller-token key are generated there on the first run, readable only by you), prints a curl
# line that reads the cached manifests through the edge, and stops everything on Ctrl-C.
#
#   deploy/local.sh                              # edge 127.0.0.1:8788, agent :8787, Redis :6380
#   deploy/local.sh --edge 127.0.0.1:9788 --agent 127.0.0.1:9787 --redis-port 6390
#
#   curl → workerd (quiver-edge) → redis-server ← quiver-agent → MCP servers (stdio)
#
# Logs: build/local/{redis,agent,edge}.log. Start over: rm -rf build/local.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

edge_listen=127.0.0.1:8788
agent_listen=127.0.0.1:8787
redis_port=6380
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --edge) edge_listen=$2; shift 2 ;;
    --agent) agent_listen=$2; shift 2 ;;
    --redis-port) redis_port=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "local.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

data="$root/build/local"
agent_bin="$root/build/native/native-agent/quiver-agent"
workerd_bin="$root/build/node/node_modules/.bin/workerd"
edge_dir="$root/build/wasm/edge"
config="$root/deploy/quickstart.json"
ns=local
kid=local-1  # the key id deploy/quickstart.json names

# ---- build what is missing --------------------------------------------------------------------
"$root/scripts/setup.sh" --local
echo "== building quiver-agent"
cmake -S . -B build/native -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIVER_BUILD_TESTS=OFF >/dev/null
cmake --build build/native -j "$(nproc 2>/dev/null || echo 2)" --target quiver-agent
echo "== building quiver-edge"
"$root/scripts/edge-build.sh"

# ---- state: made once, readable only by you ---------------------------------------------------
mkdir -p "$data/files" "$data/redis"
chmod 700 "$data"
umask 077
[ -s "$data/redis-password" ] ||
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$data/redis-password"
[ -s "$data/caller-token.key" ] || head -c 32 /dev/urandom | base64 >"$data/caller-token.key"
[ -e "$data/files/README.txt" ] ||
  echo "server-filesystem serves this directory (build/local/files)." >"$data/files/README.txt"
redis_password=$(cat "$data/redis-password")
token_key=$(tr -d '\n' <"$data/caller-token.key")
# The password lives in a config file, not on a command line (`ps` shows those to everyone).
cat >"$data/redis.conf" <<EOF
bind 127.0.0.1
port $redis_port
protected-mode yes
requirepass $redis_password
dir $data/redis
save ""
appendonly no
EOF

# ---- processes: started here, stopped here ----------------------------------------------------
# A run killed without its trap (kill -9) leaves its children: stop those first, by the ids it
# recorded, and only if they still run one of our programs.
if [ -s "$data/pids" ]; then
  while read -r pid; do
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
      *redis-server*|*quiver-agent*|*workerd*) kill "$pid" 2>/dev/null || true ;;
    esac
  done <"$data/pids"
  sleep 1
fi
: >"$data/pids"

pids=()
stop() {  # [STATUS]: stops what this run started (newest first), then exits
  local rc=${1:-$?}
  trap - EXIT INT TERM
  if [ ${#pids[@]} -gt 0 ]; then
    echo
    echo "== stopping"
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; done
    for _ in $(seq 50); do
      alive=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    : >"$data/pids"
  fi
  exit "$rc"
}
trap stop EXIT
trap 'stop 0' INT TERM
started() { pids+=("$1"); echo "$1" >>"$data/pids"; }
in_use() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }
for addr in "127.0.0.1:$redis_port" "$agent_listen" "$edge_listen"; do
  if in_use "$addr"; then
    echo "local.sh: $addr is in use (another deploy/local.sh? --help shows the flags)" >&2
    exit 1
  fi
done

# GET URL (with $TOKEN as bearer when set): prints the body, fails unless 200. node, not curl:
# scripts/setup.sh guarantees node.
get() {
  node -e 'const t = process.env.TOKEN;
    fetch(process.argv[1], { headers: t ? { authorization: `Bearer ${t}` } : {} })
      .then(async (r) => { process.stdout.write(await r.text()); process.exit(r.ok ? 0 : 1); },
            () => process.exit(1));' "$1"
}
wait_http() {  # URL WHAT: waits up to 60 s for a 200
  for _ in $(seq 300); do
    get "$1" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "local.sh: $2 did not come up; see its log in build/local/" >&2
  exit 1
}

echo "== starting redis-server on 127.0.0.1:$redis_port"
redis-server "$data/redis.conf" >"$data/redis.log" 2>&1 &
started $!
for _ in $(seq 100); do
  REDISCLI_AUTH=$redis_password redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

# The edge's own Redis user, least privilege (schema/redis-acl-edge.txt): it reads the namespace
# (not the runtime catalog nor the audit log) and writes only queues, gates, replay keys and
# invalidation marks. Its password: made once.
[ -s "$data/redis-edge-password" ] ||
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$data/redis-edge-password"
edge_redis_password=$(cat "$data/redis-edge-password")
mapfile -t edge_rules < <(sed -e 's/#.*//' -e "s/{ns/{$ns/g" -e '/^[[:space:]]*$/d' \
  "$root/schema/redis-acl-edge.txt")
# The password goes in on standard input (a command line shows in `ps`).
{ printf 'ACL SETUSER quiver-edge reset'; printf ' %s' "${edge_rules[@]}"
  printf ' >%s\n' "$edge_redis_password"; } |
  REDISCLI_AUTH=$redis_password redis-cli -p "$redis_port" >/dev/null

export QUIVER_DATA_DIR="$data"
export QUIVER_NODE_MODULES="$root/build/node/node_modules"
export QUIVER_NAMESPACE=$ns

echo "== starting quiver-agent on $agent_listen (deploy/quickstart.json, Redis store)"
QUIVER_REDIS_URL="redis://:$redis_password@127.0.0.1:$redis_port/0" \
  "$agent_bin" serve --config "$config" --listen "$agent_listen" --no-wait \
  >"$data/agent.log" 2>&1 &
started $!
wait_http "http://$agent_listen/healthz" quiver-agent

echo "== starting quiver-edge (workerd) on $edge_listen"
QUIVER_TOKEN_KEYS="{\"$kid\":\"$token_key\"}" REDIS_HOST=127.0.0.1 REDIS_PORT=$redis_port \
  REDIS_USERNAME=quiver-edge REDIS_PASSWORD=$edge_redis_password \
  "$workerd_bin" serve "$edge_dir/workerd.capnp" --socket-addr "http=$edge_listen" \
  >"$data/edge.log" 2>&1 &
started $!
wait_http "http://$edge_listen/healthz" quiver-edge

token=$("$agent_bin" token --member local --ttl 24h --config "$config")

# The first reads at the edge queue the first listings; wait (bounded) until they are stored.
echo "== waiting for the first listings"
for _ in $(seq 100); do
  body=$(TOKEN=$token get "http://$edge_listen/v1/manifests" 2>/dev/null || true)
  case "$body" in
    *'"connections":[]'*|*'"pending"'*|'') sleep 0.2 ;;
    *) break ;;
  esac
done

cat <<EOF

Quiver runs locally: upstreams → quiver-agent ($agent_listen) → Redis (127.0.0.1:$redis_port)
→ quiver-edge ($edge_listen). The cached manifests of member \`local\`, through the edge
(token valid for 24 h):

  curl -s -H 'Authorization: Bearer $token' http://$edge_listen/v1/manifests

The agent's own API (preferences, status, /metrics) answers on http://$agent_listen with the
same token. Logs in build/local/{redis,agent,edge}.log. Ctrl-C stops everything.
EOF

# Runs until Ctrl-C, or until one of the three stops (then the others are stopped too).
set +e
wait -n "${pids[@]}"
echo "local.sh: a process stopped on its own; see the logs in build/local/" >&2
stop 1
