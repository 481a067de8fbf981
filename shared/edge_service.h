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
//   step kRedis with `redis_parts` (a spread round over several nodes of a Redis Cluster): write
//                  every part to its node's connection at once, read them all concurrently, and
//                  hand each part's bytes (or its failure) back by its index:
//   feed_part(handle, part, bytes, now) / fail_part(handle, part, why, now)
//                  → kRead, kRedis or kWait naming that part (`redis_part`: more bytes from it;
//                  write to it, then read; it is settled), or, from the call that settles the
//                  last part, the round's next step
//   step kRespond  send `response`. When `background` is set, keep the handle and, without
//                  delaying the response (workerd: ctx.waitUntil), call
//   background(handle, now)      → kRedis … kDone: the queued revalidations
//   end(handle)    always, last: frees the handle (and closes the connection on the host's side)
//   abandon(handle, now)  instead of end() when the client went away before the answer: frees
//                  the handle; a relayed call's cancel mark comes back as a kRedis step under a
//                  new handle, driven like the others (feed / fail) and then end()ed
//
// Per request: host endpoints first (`GET /healthz`, the signed `POST /v1/webhooks/refresh`:
// verified here, then one script in Redis, shared/discovery_redis.h; `GET /v1/oauth/callback`:
// queued for the agents in one script, shared/oauth_callback.h), then the discovery API
// (shared/discovery_http.h) behind the caller's bearer token (shared/caller_token.h), with the
// in-isolate L1 (shared/edge_cache.h) in front of the one-round-trip Redis read
// (shared/discovery_redis.h). `POST /mcp` (shared/mcp_endpoint.h) reads through the same L1 and
// Redis read; its calls go to the agents through the Redis relay (mcp_relay, below). L1, for GET,
// HEAD and the /mcp lists, within QUIVER_L1_TTL_MS and the epoch:
//   1. the rendered answer to the same caller's same request, as an HTTP cache would repeat it
//      (with `Age`; If-None-Match → 304), until the first of its entries changes status; for
//      `POST /mcp` the four list methods only, keyed by the body's bytes and the headers the
//      endpoint reads (never a call);
//   2. else the same caller's snapshot read, rendered afresh;
//   3. else Redis: the script returns metadata; the manifest bodies it names come from the
//      isolate's BodyCache (by content, no expiry), those it lacks from one MGET on the same
//      connection (a second round trip only then). Unreachable (connect, I/O, timeout, AUTH, a
//      broken reply): the snapshot copy within its stale-if-error period is served, marked
//      `X-Quiver-Cache: stale-if-error` and `Cache-Control: private, no-cache`; without one, 503
//      STORE_UNAVAILABLE.
//   A namespace whose record is not `ready` (the store lost its data; an agent restores it) is a
//      store failure too: never an empty list or a 404.
//   After a Redis timeout, for QUIVER_REDIS_FAIL_FAST_MS (shared/redis_fail_fast.h), requests do
//      not wait on Redis: the copy or the 503 at once, marked `fail-fast`, while one probes.
//   Past the TTL, within QUIVER_L1_VALIDATE_MAX_AGE_MS of its full read, the snapshot read is a
//      conditional one (shared/discovery_redis.h): the copy kept since then is sent back as its
//      versions and answered from when nothing changed, in one round trip (`revalidated`); on
//      the discovery GET routes with the answer last rendered from that same copy, its clock
//      fields recomputed (splice(), counted in /healthz `l1.revalidated_spliced`), else rendered.
// Key layout v2 (docs/design.md "The discovery read on v2, round by round"): the isolate reads the
//   namespace in the layout its record names, switching when a read says so (the v1 script's
//   layout-unknown reply naming v2:ready, or a round 1 that finds v1), once per request; on v2 the
//   read goes in rounds (shared/discovery_spread.h), each a spread round of the request's
//   RoutedConversation, and the L1 key carries the layout. The signed webhook is served in both
//   layouts: on v1 its one script, on v2 its rounds (shared/webhook_spread.h), switching once per
//   request as the read does (the v1 script's layout-unknown reply naming v2:ready, or a round 1
//   that finds v1). An enqueue (the answer's manual refresh, the background revalidations) on v2
//   is two spread rounds, the gates (revalidate_gate.lua, none for an entry whose snapshot says
//   its lease is held) then the XADDs of the gates won to each connection's shard stream. Relayed
//   calls are served on v2: each call's round and its cancel mark go to its connection's shard
//   (call_enqueue_v2.lua, relay_call_commands_v2), one slot, sent as a spread round.
// Every discovery read says where it came from in `X-Quiver-Cache` (`hit`, `miss`, `revalidated`,
// `stale-if-error`, `fail-fast`). Revalidations the answer asks for are queued in the background,
// once per key per claim period from this isolate (the Redis gate dedups across isolates).
//
// The relay (mcp_relay; shared/call_relay.h): each call of a /mcp request (a 2025-03-26 batch may
// hold several) is its own round, one after the other: [EVAL call_enqueue.lua, BLPOP
// call-reply:<rid> <the call's remaining deadline>], pipelined (EVAL with the script's text, not
// EVALSHA: a NOSCRIPT would leave the BLPOP behind it waiting out the deadline for a call that was
// never queued), on a connection of its own
// (`new_connection`: a BLPOP blocks its connection, so it never shares one with another round),
// with `redis_blocks_ms` = that wait so the host reads for the deadline plus its own timeout, not
// its short one. The rid is drawn from the host's CSPRNG (`random` bytes 16..48 of begin()). What
// the client gets: the agent's reply (the upstream's result or error, or the agent's refusal,
// timeout, ...); AGENT_UNREACHABLE at once when no agent consumes calls; the timeout error when
// the BLPOP gives up at the deadline; STORE_UNAVAILABLE (-32014) when Redis cannot be reached,
// stalls or the fail-fast window is open. Never a made-up result. A client whose Accept names
// text/event-stream: the step that sends the first relay round also opens the answer as an event
// stream (`open_stream`: McpEndpoint::open_stream's head, stamped like any answer, and the
// keep-alive every QUIVER_MCP_KEEPALIVE_MS); the Respond is then the stream's events, and every
// outcome after it (a store failure, the timeout, an internal error) an event in the 200. The
// keep-alive writes are what tell the host of a client that closed gracefully (workerd says
// nothing of a FIN until a write fails: docs/design.md). A client that goes away: the
// host stops waiting and calls abandon(), which forgets the request (the host closes its
// connection, the BLPOP with it) and, when a call's round was outstanding, gives the host that
// call's cancel mark to send on a fresh connection, best effort: the agent running the call sees
// it and cancels the call upstream. The agent still drops a request read after its deadline.
//
// Configuration: shared/edge_settings.h. The wire format to the host: shared/edge_wire.h. What
// moves one request from state to state: shared/edge_request_state.h.
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

#include "shared/bounded_lru.h"
#include "shared/caller_token.h"
#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/discovery_redis.h"
#include "shared/discovery_spread.h"
#include "shared/edge_cache.h"
#include "shared/edge_request_state.h"
#include "shared/edge_settings.h"
#include "shared/edge_snapshot.h"
#include "shared/edge_wire.h"
#include "shared/identity.h"
#include "shared/log_throttle.h"
#include "shared/mcp_endpoint.h"
#include "shared/redis_conversation.h"
#include "shared/redis_fail_fast.h"
#include "shared/render_cache.h"
#include "shared/resp.h"
#include "shared/routed_conversation.h"
#include "shared/search_index.h"
#include "shared/status.h"
#include "shared/version.h"

namespace quiver {

// The largest request body the host reads (webhook bodies are the largest); beyond it, 413.
inline constexpr std::size_t kMaxEdgeRequestBodyBytes = 64 * 1024;
// The search indexes kept per isolate (shared/search_index.h), by count and by bytes.
inline constexpr std::size_t kSearchCacheEntries = 256;
inline constexpr std::size_t kSearchCacheBytes = std::size_t{16} << 20;

class EdgeService {
 public:
  // A service whose settings are bad answers every request with 500 INTERNAL (the reason in the
  // log) and /healthz with 503, instead of failing to start.
  explicit EdgeService(Result<EdgeSettings> settings);
  const FailFast& fail_fast() const { return fail_fast_; }
  ~EdgeService();
  EdgeService(const EdgeService&) = delete;
  EdgeService& operator=(const EdgeService&) = delete;

  // `random` (48 bytes from the host's CSPRNG): the first 8 name the request in logs and
  // `X-Request-Id`; bytes 16..48 seed its relayed calls' rids (fewer: /mcp calls are refused).
  EdgeStep begin(HttpRequest request, int64_t now_ms, std::string_view random);
  EdgeStep begin_wire(std::string_view request_wire, int64_t now_ms, std::string_view random);
  EdgeStep feed(uint32_t handle, std::string_view bytes, int64_t now_ms);
  EdgeStep fail(uint32_t handle, std::string_view why, int64_t now_ms);
  // A step in parts (redis_parts): part `part`'s bytes, or its connection's failure.
  EdgeStep feed_part(uint32_t handle, uint32_t part, std::string_view bytes, int64_t now_ms);
  EdgeStep fail_part(uint32_t handle, uint32_t part, std::string_view why, int64_t now_ms);
  EdgeStep background(uint32_t handle, int64_t now_ms);
  void end(uint32_t handle);
  // The client of `handle` went away before its answer. The request is ended (as end()); when a
  // relayed call's round was outstanding (its BLPOP), the step is its cancel mark
  // (shared/call_relay.h relay_cancel_command): kRedis on a new connection under a NEW handle,
  // which the host drives like any other (feed / fail, kRead, until kDone; the log says what
  // failed: best effort, nothing is answered) and then end()s. Otherwise kDone at once.
  EdgeStep abandon(uint32_t handle, int64_t now_ms);

  // What the host returns when a call escaped with an exception (a bug): 500 INTERNAL if the
  // handle has not responded yet, else kDone; either way with `what` in the log.
  EdgeStep internal_error(uint32_t handle, std::string_view what);

  bool configured() const { return settings_.has_value(); }
  std::size_t open_requests() const { return requests_.size(); }
  const SnapshotCache& cache() const { return cache_; }
  const EdgeCache& answers() const { return answers_; }
  const SnapshotCache& kept() const { return kept_; }
  uint64_t revalidated() const { return revalidated_; }
  uint64_t revalidate_changed() const { return revalidate_changed_; }
  // Revalidated answers spliced from the answer rendered before (splice(), below).
  uint64_t revalidated_spliced() const { return revalidated_spliced_; }
  const BodyCache& bodies() const { return bodies_; }
  const RenderCache* render_cache() const { return render_cache_.get(); }
  const ClusterRouter* cluster() const { return cluster_.get(); }
  // The key layout this isolate last found the namespace in (the layout record; v1 until a read
  // says otherwise).
  KeyLayout layout() const { return layout_; }

 private:
  struct Request;

  Request& new_request(std::string_view random);
  EdgeStep respond_now(Request& r, HttpResponse response, std::string log = {});
  EdgeStep healthz(Request& r, const HttpRequest& request);
  EdgeStep mcp(Request& r, const HttpRequest& request, int64_t now_ms);
  EdgeStep drive_mcp(Request& r, McpStep step, int64_t now_ms);
  EdgeStep mcp_relay(Request& r, NeedRelay need, int64_t now_ms);  // the relay hook
  // The next call of r.relay_calls as a relay round, or, when every call has its reply, the
  // replies back to the endpoint.
  EdgeStep relay_next(Request& r, int64_t now_ms);
  // One call's reply (or its failure): the next call or the endpoint's answer; `log` rides along.
  EdgeStep relay_answered(Request& r, RelayReply reply, std::string log, int64_t now_ms);
  // Hands a snapshot read (or its failure) to the request's core: the exchange or the endpoint.
  EdgeStep resume_snapshot(Request& r, Result<DiscoverySnapshot> snapshot, int64_t now_ms);
  EdgeStep webhook(Request& r, const HttpRequest& request, int64_t now_ms);
  // The checked webhook (r.webhook) sent in the isolate's layout: v1's script, or v2's first round.
  EdgeStep webhook_send(Request& r, int64_t now_ms);
  EdgeStep webhook_answered(Request& r, const Result<WebhookRefreshReply>& outcome);
  EdgeStep oauth_callback(Request& r, const HttpRequest& request, int64_t now_ms);
  EdgeStep oauth_callback_answered(Request& r, const Result<std::optional<std::string>>& reply);
  EdgeStep replay(Request& r, const HttpRequest& request, HttpResponse response,
                  std::vector<Revalidation> revalidations, int64_t age_ms, int64_t now_ms);
  void note_snapshot(Request& r, const DiscoverySnapshot& snapshot, int64_t now_ms);
  // Gives `snapshot` the bodies its records name from bodies_, then answers from it; the ones
  // bodies_ lacks are read first in one more round when `may_read` (else their entries render as
  // store failures: shared/discovery_redis.h, "manifest bodies").
  EdgeStep with_bodies(Request& r, DiscoverySnapshot snapshot, int64_t now_ms, bool may_read);
  EdgeStep drive(Request& r, DiscoveryStep step, int64_t now_ms);
  // The snapshot read of r.member in r.layout, after L1 missed: a conditional read when a copy is
  // kept, else the full read (one script on v1, the first round on v2).
  EdgeStep read_snapshot(Request& r, int64_t now_ms);
  // The layout record names `layout`, not the one r read in: the isolate remembers it and r reads
  // again there, once (a record that keeps moving is a store failure, never empty).
  EdgeStep switch_layout(Request& r, KeyLayout layout, int64_t now_ms);
  // The epoch an L1 entry of `snapshot` is kept under: its own on v1; on v2, which has no epoch,
  // the newest the isolate has seen (its TTL alone bounds it).
  int64_t l1_epoch(const Request& r, const DiscoverySnapshot& snapshot) const;
  const RedisKeys& keys_of(KeyLayout layout) const;
  // Moves `r` by the table (shared/edge_request_state.h); false when the table has no such row.
  bool advance(Request& r, EdgeEvent event);
  EdgeStep misstep(Request& r, EdgeEvent event);
  // `event` opens a Redis round of `commands` (EVALs) on the request's conversation
  // (shared/redis_conversation.h), unless the fail-fast window fails it at once.
  // `spread`: each command to the node of its own key's slot (key layout v2).
  EdgeStep send(Request& r, EdgeEvent event, std::vector<RedisCommand> commands,
                ScriptForm form = ScriptForm::kBySha, bool spread = false);
  // The round of `commands` on r's conversation, in its current phase (send() without the move).
  EdgeStep transmit(Request& r, std::vector<RedisCommand> commands, ScriptForm form, bool spread,
                    RoundAccess access);
  // Key layout v2's enqueue (shared/discovery_redis.h): the gates of `revalidations` as one spread
  // round opened by `event` (kQueue or kBackground), nothing for those whose lease is held; then
  // the XADDs of the gates won as a second spread round; then the results, one per revalidation.
  EdgeStep enqueue_v2(Request& r, EdgeEvent event, const std::vector<Revalidation>& revalidations,
                      const std::vector<bool>& lease_held, int64_t now_ms);
  EdgeStep enqueue_v2_answered(Request& r, std::vector<RespValue> replies, int64_t now_ms);
  // The enqueue's results, to the exchange (kQueueing) or the log (kBackground).
  EdgeStep enqueued(Request& r, std::vector<Result<RevalidationResult>> results, int64_t now_ms);
  EdgeStep complete(Request& r, std::vector<RespValue> replies, int64_t now_ms);
  // A conditional read found `source` (a kept snapshot) unchanged, its leases as they were: the
  // answer rendered from it before to this same request (r.answer_key) with its clock fields
  // recomputed for `now_ms`, if there is one and the splice window allows (docs/design.md,
  // "Versions instead of the epoch"); nullopt: render.
  std::optional<EdgeStep> splice(Request& r, const SnapshotCache::Value& source, int64_t now_ms);
  // The answer r's exchange just rendered with its clock holes, kept for splice().
  void keep_rendered(Request& r);
  // A snapshot read in full: kept (L1 and, for conditional reads, kept_), then answered from.
  EdgeStep full_read(Request& r, DiscoverySnapshot snapshot, int64_t now_ms);
  EdgeStep store_failed(Request& r, Error error, int64_t now_ms);
  EdgeStep finish(Request& r, Respond respond);
  // The headers every answer of `r` carries (X-Quiver-Cache, a stale-if-error copy's
  // Cache-Control and Age, X-Request-Id): on its response, or on the head of its event stream.
  void stamp_headers(const Request& r, HttpResponse& res) const;
  Request* find(uint32_t handle);
  Request* find(uint32_t handle, int64_t now_ms);  // and sets its now_ms
  EdgeStep unknown_handle(uint32_t handle);

  std::optional<EdgeSettings> settings_;
  std::string settings_error_;
  std::optional<RedisKeys> keys_;
  std::optional<RedisKeys> keys_v2_;  // the same namespace in key layout v2
  KeyLayout layout_ = KeyLayout::kV1;
  SnapshotCache cache_;  // L1: snapshot reads (decoded), per caller and query
  EdgeCache answers_;    // L1: rendered answers, per caller and exact request
  // The snapshot reads again, kept past the TTL for conditional reads (validate_max_age_ms).
  SnapshotCache kept_;
  uint64_t revalidated_ = 0;         // conditional reads answered "unchanged"
  uint64_t revalidate_changed_ = 0;  // conditional reads answered with a full read
  // The discovery GET answers last rendered from a kept snapshot (full read or revalidated), with
  // their clock holes, per answer key: spliced instead of rendered while that same snapshot object
  // (held weakly: a template never keeps a snapshot alive) is confirmed unchanged. Bounded by the
  // L1's fourth share (share_of), off with conditional reads.
  struct RenderedAnswer {
    std::weak_ptr<const DiscoverySnapshot> source;
    std::shared_ptr<const RenderedDiscovery> rendered;
  };
  BoundedLru<RenderedAnswer> rendered_;
  std::size_t rendered_max_entry_bytes_ = 0;
  uint64_t revalidated_spliced_ = 0;  // conditional reads answered "unchanged" by a splice
  BodyCache bodies_;                  // manifest bodies by content, no expiry (shared/edge_cache.h)
  VerifiedTokenCache tokens_;         // bearer tokens this isolate has verified
  std::unique_ptr<SearchIndexCache> search_cache_;  // one FTS5 index per caller and corpus version
  // Each servable entry's rendered payload (shared/render_cache.h); single-threaded like the rest.
  std::unique_ptr<RenderCache> render_cache_;
  std::unique_ptr<IndexedToolSearcher> searcher_;
  McpEndpointConfig mcp_config_;  // POST /mcp: the discovery settings' freshness, cache, searcher
  std::unordered_map<uint32_t, std::unique_ptr<Request>> requests_;
  // The cancel marks of abandoned relayed calls in flight, by their own handle (abandon()).
  std::unordered_map<uint32_t, RoutedConversation> cancels_;
  EdgeStep cancel_turn(uint32_t handle, RoutedConversation& c, RedisTurn turn);
  // What a part's bytes (or failure) lead to: a step naming the part, or the round's next one.
  EdgeStep part_turn(Request& r, uint32_t part, PartTurn turn, int64_t now_ms);
  EdgeStep cancel_part_turn(uint32_t handle, RoutedConversation& c, uint32_t part, PartTurn turn);
  // feed()'s answer to a round's turn: kRead, the next write, the failure or the replies.
  EdgeStep round_turn(Request& r, RedisTurn turn, int64_t now_ms);
  // A kRedis step of `handle` that carries out `write` (its node, backoff, connections to close).
  static EdgeStep redis_step(uint32_t handle, RoutedWrite write);
  // REDIS_CLUSTER: the isolate's slot map (shared/routed_conversation.h); null on one Redis.
  std::unique_ptr<ClusterRouter> cluster_;
  uint32_t new_handle();
  FailFast fail_fast_;
  LogThrottle store_log_;  // store-failure lines: one per window, then a count
  uint32_t next_handle_ = 1;
};

}  // namespace quiver
