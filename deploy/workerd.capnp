# quiver-edge, self-hosted with workerd (npm `workerd`; any recent release).
#
#   scripts/edge-build.sh                              # stages build/wasm/edge/ (this file too)
#   QUIVER_TOKEN_KEYS='{"k1":"<32+ byte secret>"}' REDIS_PORT=6379 \
#     workerd serve build/wasm/edge/workerd.capnp       # add --socket-addr http=127.0.0.1:8787
#
# The paths below are relative to this file as staged in build/wasm/edge/, beside the worker,
# the Emscripten glue and the wasm module. Every setting comes from the process environment
# (`fromEnvironment`; unset variables take the defaults of deploy/edge.md), so secrets never live
# in this file:
#   QUIVER_TOKEN_KEYS (required, secret)  caller-token keyring, JSON {"<kid>": "<secret>"}
#   QUIVER_WEBHOOK_SECRETS (secret)       webhook HMAC secrets, JSON {"<name>": "<secret>"}
#                                         (POST /v1/webhooks/refresh; unset: 404)
#   REDIS_PASSWORD (secret), REDIS_USERNAME, REDIS_HOST, REDIS_PORT, REDIS_TLS
#   REDIS_CLUSTER ("1": a Redis Cluster seeded by REDIS_HOST:REDIS_PORT, or seeds "h:p,h:p"),
#   QUIVER_REDIS_REPLICA_READS (cluster: conditional discovery reads may go to replicas)
#   QUIVER_NAMESPACE, QUIVER_TOKEN_AUDIENCE, QUIVER_L1_TTL_MS, QUIVER_L1_STALE_IF_ERROR_MS,
#   QUIVER_L1_VALIDATE_MAX_AGE_MS,
#   QUIVER_L1_MAX_BYTES, QUIVER_FRESH_TTL_MS, QUIVER_MAX_AGE_MS, QUIVER_MIN_UPSTREAM_TTL_MS,
#   QUIVER_REVALIDATE_WINDOW_MS, QUIVER_MCP_SEARCH_MODE,
#   QUIVER_CALL_TIMEOUT_MS (the deadline of one /mcp call relayed to the agents),
#   QUIVER_MCP_KEEPALIVE_MS (the keep-alive interval of a call answered as an event stream),
#   REDIS_CONNECT_TIMEOUT_MS, REDIS_TIMEOUT_MS, QUIVER_REDIS_FAIL_FAST_MS (after a Redis timeout,
#   answer without waiting on Redis for this long while one request probes it; 0: off),
#   QUIVER_MCP_ALLOWED_ORIGINS (origins whose web pages may call /mcp
#   besides loopback ones; comma-separated)
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "quiver-edge", worker = .edgeWorker),
    # Where the worker's sockets (Redis) may go. workerd's default outbound allows public
    # addresses only; Redis usually sits on loopback or a private network. For a hosted Redis on
    # a public address, add "public" to `allow`. TLS (REDIS_TLS=1) trusts the browsers' CAs; for
    # a private CA, list it in `trustedCertificates` instead.
    (name = "redis-network",
     network = (allow = ["local", "private"],
                tlsOptions = (trustBrowserCas = true))),
  ],
  sockets = [
    (name = "http", address = "*:8787", http = (), service = "quiver-edge"),
  ],
);

const edgeWorker :Workerd.Worker = (
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "quiver-edge.mjs", esModule = embed "quiver-edge.mjs"),
    (name = "quiver-edge.wasm", wasm = embed "quiver-edge.wasm"),
  ],
  compatibilityDate = "2024-09-23",
  # request.signal aborts when the client disconnects: a relayed /mcp call stops waiting at once.
  compatibilityFlags = ["enable_request_signal"],
  globalOutbound = "redis-network",
  bindings = [
    (name = "QUIVER_TOKEN_KEYS", fromEnvironment = "QUIVER_TOKEN_KEYS"),
    (name = "QUIVER_WEBHOOK_SECRETS", fromEnvironment = "QUIVER_WEBHOOK_SECRETS"),
    (name = "QUIVER_NAMESPACE", fromEnvironment = "QUIVER_NAMESPACE"),
    (name = "QUIVER_TOKEN_AUDIENCE", fromEnvironment = "QUIVER_TOKEN_AUDIENCE"),
    (name = "QUIVER_L1_TTL_MS", fromEnvironment = "QUIVER_L1_TTL_MS"),
    (name = "QUIVER_L1_STALE_IF_ERROR_MS", fromEnvironment = "QUIVER_L1_STALE_IF_ERROR_MS"),
    (name = "QUIVER_L1_MAX_BYTES", fromEnvironment = "QUIVER_L1_MAX_BYTES"),
    (name = "QUIVER_L1_VALIDATE_MAX_AGE_MS", fromEnvironment = "QUIVER_L1_VALIDATE_MAX_AGE_MS"),
    (name = "QUIVER_FRESH_TTL_MS", fromEnvironment = "QUIVER_FRESH_TTL_MS"),
    (name = "QUIVER_MAX_AGE_MS", fromEnvironment = "QUIVER_MAX_AGE_MS"),
    (name = "QUIVER_MIN_UPSTREAM_TTL_MS", fromEnvironment = "QUIVER_MIN_UPSTREAM_TTL_MS"),
    (name = "QUIVER_REVALIDATE_WINDOW_MS", fromEnvironment = "QUIVER_REVALIDATE_WINDOW_MS"),
    (name = "QUIVER_MCP_SEARCH_MODE", fromEnvironment = "QUIVER_MCP_SEARCH_MODE"),
    (name = "QUIVER_CALL_TIMEOUT_MS", fromEnvironment = "QUIVER_CALL_TIMEOUT_MS"),
    (name = "QUIVER_MCP_KEEPALIVE_MS", fromEnvironment = "QUIVER_MCP_KEEPALIVE_MS"),
    (name = "REDIS_HOST", fromEnvironment = "REDIS_HOST"),
    (name = "REDIS_PORT", fromEnvironment = "REDIS_PORT"),
    (name = "REDIS_TLS", fromEnvironment = "REDIS_TLS"),
    (name = "REDIS_CLUSTER", fromEnvironment = "REDIS_CLUSTER"),
    (name = "QUIVER_REDIS_REPLICA_READS", fromEnvironment = "QUIVER_REDIS_REPLICA_READS"),
    (name = "REDIS_USERNAME", fromEnvironment = "REDIS_USERNAME"),
    (name = "REDIS_PASSWORD", fromEnvironment = "REDIS_PASSWORD"),
    (name = "REDIS_CONNECT_TIMEOUT_MS", fromEnvironment = "REDIS_CONNECT_TIMEOUT_MS"),
    (name = "REDIS_TIMEOUT_MS", fromEnvironment = "REDIS_TIMEOUT_MS"),
    (name = "QUIVER_REDIS_FAIL_FAST_MS", fromEnvironment = "QUIVER_REDIS_FAIL_FAST_MS"),
    (name = "QUIVER_MCP_ALLOWED_ORIGINS", fromEnvironment = "QUIVER_MCP_ALLOWED_ORIGINS"),
  ],
);
