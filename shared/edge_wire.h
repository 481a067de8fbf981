// The formats quiver-edge's core speaks with its host (wasm-worker/exports.cpp, worker.mjs), and
// the one it keeps rendered answers in (L1, shared/edge_cache.h). Plain bytes, so a host in any
// language moves them without knowing what they hold.
//
// The wire format between the host and this core (one buffer each way, little-endian lengths):
//   request: u32 meta length | meta JSON {"method","path","query","headers":[[name,value],...]}
//            | body bytes
//   step:    u32 meta length | u32 payload length | meta JSON | payload (body or Redis bytes)
//            meta {"handle","action":"respond"|"redis"|"read"|"done"|"wait", "status",
//                  "headers", "background", "ended", "new_connection", "redis_blocks_ms",
//                  "log", "log_level"
//                  (a respond step's "headers" are an object {name: value} when no name repeats
//                  case-insensitively, else [[name, value], ...]; "ended": the request's handle
//                  is gone with this answer)
//                  on a Redis Cluster only (a kRedis step): "node": {"host","port"},
//                  "delay_ms", "close": ["host:port", ...];
//                  a spread round over several nodes (a kRedis step, no "node"): "parts":
//                  [{"node": {"host","port"}, "new_connection", "bytes": n}, ...], the payload
//                  being the parts' bytes one after the other; the host writes every part to
//                  its node's connection, reads them all concurrently and hands each part's
//                  bytes back by its index (feed_part / fail_part), which answers with a step
//                  naming the part ("part": i): kRead (more from that part), kRedis (write the
//                  payload on that part's connection, then read it), kWait (that part is
//                  settled); the feed that settles the last part gets the round's next step
//                  (no "part");
//                  ("info" for routine events, absent for problems), and on the step that opens
//                  an event stream (a kRedis step): "stream": {"status", "headers",
//                  "keepalive_ms", "keepalive"}}
//
// A rendered answer as L1 keeps it: u32 meta length | meta JSON {"status", "headers",
// "revalidations": [[connection_id, principal, reason, manual], ...]} | body.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/discovery.h"
#include "shared/discovery_http.h"
#include "shared/status.h"

namespace quiver {

inline constexpr std::size_t kMaxEdgeRequestMetaBytes = 64 * 1024;

enum class EdgeAction { kRespond = 0, kRedis, kRead, kDone, kWait };
// "respond", "redis", "read", "done", "wait"
const char* edge_action_name(EdgeAction action);

struct EdgeStep {
  uint32_t handle = 0;
  EdgeAction action = EdgeAction::kDone;
  HttpResponse response;    // kRespond
  bool background = false;  // kRespond: call background(handle) after responding
  // kRespond: the request was ended with this answer (its handle is gone: no end() call follows;
  // set by a host's ABI that ends a request whose answer has no background work at once).
  bool ended = false;
  std::string redis_bytes;  // kRedis
  bool new_connection =
      false;  // kRedis: open a fresh connection (closing any open one to the node)
  // kRedis on a Redis Cluster (shared/routed_conversation.h): the node to write to (empty: the one
  // configured Redis), how long to wait before writing (a backoff), and the connections
  // ("host:port") to close first (Workers' six sockets per request).
  std::string redis_host;
  int redis_port = 0;
  int64_t redis_delay_ms = 0;
  std::vector<std::string> redis_close;
  // kRedis on a Redis Cluster: a spread round's pipelines, one per node, written at once (then
  // `redis_bytes`, `redis_host` and `new_connection` are unused; `redis_delay_ms` and
  // `redis_close` come first, for all of them).
  struct Part {
    std::string bytes;
    bool new_connection = false;
    std::string host;
    int port = 0;
  };
  std::vector<Part> redis_parts;
  // kRead, kRedis, kWait in answer to a part's bytes (feed_part, fail_part): the part it is about.
  int redis_part = -1;
  // kRedis, kRead: Redis holds this round's reply up to this long on purpose (a relayed call's
  // BLPOP, shared/call_relay.h): the host's read timeout for the round is its own plus this.
  int64_t redis_blocks_ms = 0;
  // kRedis: before waiting on this round, send `response`'s status and headers now and keep the
  // body open as an event stream: write `keepalive` every `keepalive_ms` until the kRespond,
  // whose body (the answer's events) then ends the stream (its status and headers are not sent
  // again). A keep-alive write that fails, or the stream cancelled, is a client gone (abandon).
  bool open_stream = false;
  int64_t keepalive_ms = 0;
  std::string keepalive;
  std::string log;        // for the host's log (the detail behind a 5xx, a failed queue)
  bool log_info = false;  // `log` is a routine event (an accepted webhook), not a problem
};

// The request and step wire formats (above).
Result<HttpRequest> edge_request_from_wire(std::string_view bytes);
std::string edge_request_to_wire(const HttpRequest& request);
std::string edge_step_to_wire(const EdgeStep& step);

// A step's meta JSON and a view of its payload, for a host that reads them where they are (the
// wasm ABI, wasm-worker/exports.cpp) instead of one buffer holding both: the payload is not
// copied. It views `step` (its body or Redis bytes), or `*joined` (a step in parts: the parts'
// bytes joined there); valid while both live unchanged.
struct EdgeStepWire {
  std::string meta;
  std::string_view payload;
};
EdgeStepWire edge_step_wire(const EdgeStep& step, std::string* joined);

struct StoredAnswer {
  HttpResponse response;
  std::vector<Revalidation> revalidations;
};

// Only our own encoding is ever decoded, but a bad one is still just a miss (nullopt).
std::string encode_edge_answer(const HttpResponse& response,
                               const std::vector<Revalidation>& revalidations);
std::optional<StoredAnswer> decode_edge_answer(std::string_view bytes);

}  // namespace quiver
