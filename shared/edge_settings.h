// EdgeSettings: quiver-edge's configuration, read from the worker's environment. Both the settings
// it shares with the agent (the runtime table, shared/runtime_settings.h) and its own.
//
// Configuration comes from the worker's environment (`edge_settings_from_env`), one table:
//   QUIVER_NAMESPACE             deployment namespace                      default
//   QUIVER_TOKEN_KEYS            caller token keyring, JSON {"kid":"secret"} (required, a secret)
//   QUIVER_TOKEN_AUDIENCE        `aud` the tokens must carry               quiver
//   REDIS_USERNAME               AUTH user (ACL), optional
//   REDIS_PASSWORD               AUTH password (a secret); no AUTH when empty
//   QUIVER_L1_TTL_MS             L1 freshness: how long a revoked grant or a toggled preference
//                                may still be served from one isolate      2000
//   QUIVER_L1_STALE_IF_ERROR_MS  L1 copies served while Redis is down      60000
//   QUIVER_L1_MAX_BYTES          L1 size bound per isolate                 8388608
//   QUIVER_L1_VALIDATE_MAX_AGE_MS  past the TTL, a snapshot read is checked against the store's
//                                versions (one small round trip) instead of read again, for at
//                                most this long after its full read; 0: off  30000
//   QUIVER_FRESH_TTL_MS          fresh TTL (as the agent)                  900000
//   QUIVER_MAX_AGE_MS            expired after (as the agent)              86400000
//   QUIVER_REVALIDATE_WINDOW_MS  one queued revalidation per key per window 30000
//   QUIVER_REDIS_FAIL_FAST_MS    after a Redis timeout, for this long requests do not wait on
//                                Redis: an L1 copy or a 503 at once (X-Quiver-Cache: fail-fast),
//                                while one probe request tests Redis; 0: off  2000
//   QUIVER_CALL_TIMEOUT_MS       deadline of one /mcp call relayed to the agents (tools/call,
//                                resources/read, prompts/get, completion/complete): the edge waits
//                                this long for the reply, the agent never starts it later nor
//                                runs it longer (as the agent's own call_timeout_ms) 60000
//   QUIVER_MCP_KEEPALIVE_MS      a relayed /mcp call answered as an event stream (Accept
//                                text/event-stream): the interval of its keep-alive comments while
//                                the edge waits for the agent's reply; a write that fails is a
//                                client gone, so this bounds how late a closed client is noticed
//                                (and its call cancelled upstream). 100 to 60000     1000
//   QUIVER_WEBHOOK_SECRETS       refresh webhook secrets, JSON {"name":"secret"} (a secret; each
//                                16+ bytes); unset: POST /v1/webhooks/refresh answers 404
//   QUIVER_MCP_ALLOWED_ORIGINS   origins (scheme://host[:port], comma-separated) whose web pages
//                                may call /mcp besides loopback ones; any other `Origin` is 403
//                                (DNS rebinding protection, mcp_origin_refusal)  none
//   REDIS_CLUSTER                a Redis Cluster: "1" (REDIS_HOST:REDIS_PORT is the seed) or
//                                seeds "host:port,host:port"; the core learns the slot map and
//                                names each write's node (shared/routed_conversation.h)  off
//   QUIVER_REDIS_REPLICA_READS   with REDIS_CLUSTER: the conditional discovery read may go to a
//                                replica (AUTH + READONLY; full reads and writes: the master);
//                                adds the replication lag to the staleness bound
//                                (docs/design.md, "Replica reads")          0
// Other names (REDIS_HOST, REDIS_PORT, REDIS_TLS, timeouts) are the host's; on a cluster the core
// also reads REDIS_HOST, REDIS_PORT (the seed) and REDIS_TLS (which announced port to dial).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/caller_token.h"
#include "shared/discovery_http.h"
#include "shared/discovery_redis.h"
#include "shared/edge_cache.h"
#include "shared/identity.h"
#include "shared/resp.h"
#include "shared/routed_conversation.h"
#include "shared/status.h"

namespace quiver {

struct EdgeSettings {
  std::string ns = kDefaultNamespace;
  std::optional<Keyring> keyring;  // required: create() refuses settings without one
  VerifyOptions token;             // its `ns` is set to `ns`
  std::string redis_username;
  std::string redis_password;
  EdgeCacheOptions l1;
  DiscoveryConfig discovery;
  EnqueueOptions enqueue;
  RespLimits resp;
  std::vector<std::string> webhook_secrets;  // any one may sign; empty: webhooks are off
  int64_t fail_fast_ms = 2'000;              // QUIVER_REDIS_FAIL_FAST_MS (0: off)
  int64_t call_timeout_ms = 60'000;          // QUIVER_CALL_TIMEOUT_MS (a relayed call's deadline)
  int64_t mcp_keepalive_ms = 1'000;  // QUIVER_MCP_KEEPALIVE_MS (an event-stream answer's comments)
  bool mcp_search_mode = false;      // QUIVER_MCP_SEARCH_MODE=1 (shared/mcp_endpoint.h)
  std::vector<std::string> mcp_allowed_origins;  // QUIVER_MCP_ALLOWED_ORIGINS, mcp_origin_key's
  // REDIS_CLUSTER (+ QUIVER_REDIS_REPLICA_READS, REDIS_TLS): a Redis Cluster; nullopt: one Redis.
  std::optional<ClusterRouterSettings> cluster;
};

// Settings from environment variables (the table above), given as a JSON object of strings
// (the worker's string-valued `env`). Unknown names are ignored. kInvalidArgument naming the
// variable (never its value) for a malformed value or a missing QUIVER_TOKEN_KEYS.
Result<EdgeSettings> edge_settings_from_env(std::string_view env_json);

}  // namespace quiver
