// EdgeService: everything quiver-edge does per HTTP request, as a state machine per request that
// a host drives with bytes. The wasm build's exports (wasm-worker/exports.cpp) and worker.mjs are
// its host in workerd; the unit tests drive it with canned Redis replies.
//
// Why it looks like this: in workerd a socket belongs to its request and a wasm instance that
// waits inside a call cannot serve another request (docs/design.md, "The layers"). So one
// EdgeService per isolate serves every request, each in its own entry of a handle table, and
// never waits: every call returns at once with the next thing the host must do.
//
//   begin(request, now, random)  → a step for a new handle
//   step kRedis    write `redis_bytes` to this handle's Redis connection (opening a new one first
//                  when `new_connection`; AUTH is already in the bytes), then read and
//   feed(handle, bytes, now)     → kRead (more bytes, please) or the next step
//   fail(handle, why, now)       the connection failed or timed out: drop it and report here
//                  → the next step (stale-if-error from L1, or a 503 STORE_UNAVAILABLE)
//   step kRespond  send `response`. When `background` is set, keep the handle and, without
//                  delaying the response (workerd: ctx.waitUntil), call
//   background(handle, now)      → kRedis … kDone: the queued revalidations
//   end(handle)    always, last: frees the handle (and closes the connection on the host's side)
//
// Per request: host endpoints first (`GET /healthz`, the signed `POST /v1/webhooks/refresh`:
// verified here, then one script in Redis, shared/discovery_redis.h), then the discovery API
// (shared/discovery_http.h) behind the caller's bearer token (shared/caller_token.h), with the
// in-isolate L1 (shared/edge_cache.h) in front of the one-round-trip Redis read
// (shared/discovery_redis.h). L1, for GET and HEAD, within QUIVER_L1_TTL_MS and the epoch:
//   1. the rendered answer to the same caller's same request, as an HTTP cache would repeat it
//      (with `Age`; If-None-Match → 304), until the first of its entries changes status;
//   2. else the same caller's snapshot read, rendered afresh;
//   3. else Redis. Unreachable (connect, I/O, timeout, AUTH, a broken reply): the snapshot copy
//      within its stale-if-error period is served, marked `X-Quiver-Cache: stale-if-error` and
//      `Cache-Control: private, no-cache`; without one, 503 STORE_UNAVAILABLE.
//   A namespace whose record is not `ready` (the store lost its data; an agent restores it) is a
//      store failure too: never an empty list or a 404.
//   After a Redis timeout, for QUIVER_REDIS_FAIL_FAST_MS (FailFast below), requests do not wait
//      on Redis: the copy or the 503 at once, marked `fail-fast`, while one request probes.
// Every discovery read says where it came from in `X-Quiver-Cache` (`hit`, `miss`,
// `stale-if-error`, `fail-fast`). Revalidations the answer asks for are queued in the background, once per key
// per claim period from this isolate (the Redis gate dedups across isolates).
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
//   QUIVER_FRESH_TTL_MS          fresh TTL (as the agent)                  900000
//   QUIVER_MAX_AGE_MS            expired after (as the agent)              86400000
//   QUIVER_REVALIDATE_WINDOW_MS  one queued revalidation per key per window 30000
//   QUIVER_REDIS_FAIL_FAST_MS    after a Redis timeout, for this long requests do not wait on
//                                Redis: an L1 copy or a 503 at once (X-Quiver-Cache: fail-fast),
//                                while one probe request tests Redis; 0: off  2000
//   QUIVER_WEBHOOK_SECRETS       refresh webhook secrets, JSON {"name":"secret"} (a secret; each
//                                16+ bytes); unset: POST /v1/webhooks/refresh answers 404
// Other names (REDIS_HOST, REDIS_PORT, REDIS_TLS, timeouts) are the host's.
//
// The wire format between the host and this core (one buffer each way, little-endian lengths):
//   request: u32 meta length | meta JSON {"method","path","query","headers":[[name,value],...]}
//            | body bytes
//   step:    u32 meta length | u32 payload length | meta JSON | payload (body or Redis bytes)
//            meta {"handle","action":"respond"|"redis"|"read"|"done", "status", "headers",
//                  "background", "new_connection", "log", "log_level" ("info" for routine
//                  events, absent for problems)}
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/discovery_redis.h"
#include "shared/edge_cache.h"
#include "shared/identity.h"
#include "shared/render_cache.h"
#include "shared/resp.h"
#include "shared/search_index.h"
#include "shared/status.h"

namespace quiver {

inline constexpr char kEdgeVersion[] = "0.1.0";
// The largest request body the host reads (webhook bodies are the largest); beyond it, 413.
inline constexpr std::size_t kMaxEdgeRequestBodyBytes = 64 * 1024;
inline constexpr std::size_t kMaxEdgeRequestMetaBytes = 64 * 1024;
// The search indexes kept per isolate (shared/search_index.h), by count and by bytes.
inline constexpr std::size_t kSearchCacheEntries = 256;
inline constexpr std::size_t kSearchCacheBytes = std::size_t{16} << 20;
// Identical store-failure log lines: one per window, then a count (EdgeService::throttle_store_log).
inline constexpr int64_t kStoreLogWindowMs = 10'000;
inline constexpr std::size_t kMaxLogBursts = 64;

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
  int64_t fail_fast_ms = 2'000;               // QUIVER_REDIS_FAIL_FAST_MS (0: off)
};

// The fail-fast window after a Redis timeout (QUIVER_REDIS_FAIL_FAST_MS), one per isolate: a
// stalled Redis would otherwise hold every request for the host's full Redis timeout. Decisions
// only, time passed in.
class FailFast {
 public:
  explicit FailFast(int64_t window_ms = 0) : window_ms_(window_ms) {}
  enum class Admit { kGo = 0, kProbe, kFailFast };
  // A request about to talk to Redis: go (closed), be the one probe, or fail fast.
  Admit admit(uint32_t handle, int64_t now_ms);
  void timed_out(uint32_t handle, int64_t now_ms);  // opens (or extends) the window
  void answered(uint32_t handle);                   // Redis replied: closed
  void ended(uint32_t handle);                      // the request is gone (a probe frees its slot)
  bool open(int64_t now_ms) const { return now_ms < open_until_ms_; }
  int64_t opened_at_ms() const { return opened_at_ms_; }

 private:
  int64_t window_ms_ = 0;
  int64_t open_until_ms_ = 0;
  int64_t opened_at_ms_ = 0;
  uint32_t probe_ = 0;  // the handle probing Redis, 0: none
};

// Settings from environment variables (the table above), given as a JSON object of strings
// (the worker's string-valued `env`). Unknown names are ignored. kInvalidArgument naming the
// variable (never its value) for a malformed value or a missing QUIVER_TOKEN_KEYS.
Result<EdgeSettings> edge_settings_from_env(std::string_view env_json);

enum class EdgeAction { kRespond = 0, kRedis, kRead, kDone };
const char* edge_action_name(EdgeAction action);  // "respond", "redis", "read", "done"

struct EdgeStep {
  uint32_t handle = 0;
  EdgeAction action = EdgeAction::kDone;
  HttpResponse response;        // kRespond
  bool background = false;      // kRespond: call background(handle) after responding
  std::string redis_bytes;      // kRedis
  bool new_connection = false;  // kRedis: open a fresh connection (closing any open one)
  std::string log;              // for the host's log (the detail behind a 5xx, a failed queue)
  bool log_info = false;        // `log` is a routine event (an accepted webhook), not a problem
};

// The request and step wire formats (above).
Result<HttpRequest> edge_request_from_wire(std::string_view bytes);
std::string edge_request_to_wire(const HttpRequest& request);
std::string edge_step_to_wire(const EdgeStep& step);

class EdgeService {
 public:
  // A service whose settings are bad answers every request with 500 INTERNAL (the reason in the
  // log) and /healthz with 503, instead of failing to start.
  explicit EdgeService(Result<EdgeSettings> settings);
  const FailFast& fail_fast() const { return fail_fast_; }
  ~EdgeService();
  EdgeService(const EdgeService&) = delete;
  EdgeService& operator=(const EdgeService&) = delete;

  // `random` (16 bytes from the host's CSPRNG) names the request in logs and `X-Request-Id`.
  EdgeStep begin(HttpRequest request, int64_t now_ms, std::string_view random);
  EdgeStep begin_wire(std::string_view request_wire, int64_t now_ms, std::string_view random);
  EdgeStep feed(uint32_t handle, std::string_view bytes, int64_t now_ms);
  EdgeStep fail(uint32_t handle, std::string_view why, int64_t now_ms);
  EdgeStep background(uint32_t handle, int64_t now_ms);
  void end(uint32_t handle);

  // What the host returns when a call escaped with an exception (a bug): 500 INTERNAL if the
  // handle has not responded yet, else kDone; either way with `what` in the log.
  EdgeStep internal_error(uint32_t handle, std::string_view what);

  bool configured() const { return settings_.has_value(); }
  std::size_t open_requests() const { return requests_.size(); }
  const EdgeCache& cache() const { return cache_; }
  const EdgeCache& answers() const { return answers_; }
  const RenderCache* render_cache() const { return render_cache_.get(); }

 private:
  struct Request;
  enum class Waiting { kNothing = 0, kSnapshot, kEnqueue, kBackground, kWebhook };

  Request& new_request(std::string_view random);
  EdgeStep respond_now(Request& r, HttpResponse response, std::string log = {});
  EdgeStep healthz(Request& r, const HttpRequest& request);
  EdgeStep webhook(Request& r, const HttpRequest& request, int64_t now_ms);
  EdgeStep replay(Request& r, const HttpRequest& request, HttpResponse response,
                  std::vector<Revalidation> revalidations, int64_t age_ms, int64_t now_ms);
  void note_snapshot(Request& r, const DiscoverySnapshot& snapshot, int64_t now_ms);
  EdgeStep drive(Request& r, DiscoveryStep step, int64_t now_ms);
  // Sends `commands` (EVALs: each goes out in its EVALSHA form; any answered NOSCRIPT is sent
  // again as EVAL, once, on the same connection, before `complete` sees the replies).
  EdgeStep send(Request& r, Waiting waiting, std::vector<RedisCommand> commands);
  EdgeStep resend_noscript(Request& r);
  EdgeStep complete(Request& r, int64_t now_ms);
  EdgeStep store_failed(Request& r, Error error, int64_t now_ms);
  EdgeStep finish(Request& r, Respond respond);
  // Repeated store-failure lines (one per request during an outage) are rate-limited per message:
  // the first is logged, the next ones within kStoreLogWindowMs only counted, and the first one
  // after the window carries the count ("N more like it in the last 10 s"). "" when suppressed.
  std::string throttle_store_log(std::string line, int64_t now_ms);
  Request* find(uint32_t handle);
  EdgeStep unknown_handle(uint32_t handle);

  std::optional<EdgeSettings> settings_;
  std::string settings_error_;
  std::optional<RedisKeys> keys_;
  EdgeCache cache_;    // L1: snapshot reads, per caller and query
  EdgeCache answers_;  // L1: rendered answers, per caller and exact request
  VerifiedTokenCache tokens_;  // bearer tokens this isolate has verified
  std::unique_ptr<SearchIndexCache> search_cache_;  // one FTS5 index per caller and corpus version
  // Each servable entry's rendered payload (shared/render_cache.h); single-threaded like the rest.
  std::unique_ptr<RenderCache> render_cache_;
  std::unique_ptr<IndexedToolSearcher> searcher_;
  std::unordered_map<uint32_t, std::unique_ptr<Request>> requests_;
  FailFast fail_fast_;
  struct LogBurst {
    int64_t window_start_ms = 0;
    int64_t suppressed = 0;
  };
  std::unordered_map<std::string, LogBurst> log_bursts_;  // by line; bounded (kMaxLogBursts)
  uint32_t next_handle_ = 1;
};

}  // namespace quiver
