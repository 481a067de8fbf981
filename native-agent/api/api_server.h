// ApiServer: the agent's local HTTP API, the one place where people and tools talk to a running
// `quiver-agent serve`.
//
// Why: the agent holds the live upstream sessions, the preference database and, on the embedded
// default, the manifest cache itself. The API lets a user or a script see each connection's state,
// ask for a refresh, test a connection, toggle preferences, deliver signed webhooks and, without
// an edge in front, read the manifests through the very discovery core the edge runs
// (shared/discovery_http.h). schema/openapi.yaml describes every endpoint.
//
// It only calls AgentService (native-agent/engine/service.h): the refresh engine is behind that
// seam.
//
// Wiring (all in ApiServer::start, routes registered in one function):
//   - the network side is native-agent/api/http_front.h: one epoll thread reads and writes every
//     connection, parses requests with shared/http1.h (bounded request line, header lines, header
//     count, head and body; no Content-Encoding; deadlines for the head, the body, keep-alive and
//     writes; per-peer and total connection caps) and hands only complete requests to
//     `worker_threads` workers; at most `max_queued_requests` wait, past that a request is
//     answered 503 OVERLOADED at once without touching the store. TCP_NODELAY is on (without it
//     every keep-alive request waits ~43 ms for delayed ACKs);
//   - the shared discovery endpoints go from the front's parsed request straight to the core's
//     DiscoveryExchange and back; the agent's own handlers read cpp-httplib's plain
//     Request/Response types, routed by one table;
//   - `Host` must name a loopback address or name, the configured listen host or the address the
//     connection arrived on (421 otherwise: DNS rebinding);
//   - authentication in one place: `Authorization: Bearer <caller token>` verified with the
//     configured key ring (shared/caller_token.h) gives the member; a principal never comes from a
//     query parameter. /healthz needs no token but says only ok / unavailable without one;
//     /metrics needs none from a loopback peer and a valid token from anywhere else;
//     /v1/webhooks/refresh is authenticated by its signature;
//   - at most `max_concurrent_tests` POST .../test run at once (each spawns a child or opens a
//     connection); more are 503 OVERLOADED;
//   - every error is JSON {"error": {"code", "message"}} with a stable code (discovery_http.h's
//     HttpErrorCode names plus OVERLOADED, UPSTREAM_UNAVAILABLE and the front's refusals); an
//     exception escaping a handler is a 500 INTERNAL whose detail goes to the log, not to the
//     caller.
//
// Reads of the discovery endpoints queue their stale-while-revalidate requests after answering,
// on a background thread with a bounded queue (a full queue is counted, and the next stale read
// re-arms the request).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "native-agent/base/config.h"
#include "native-agent/engine/service.h"
#include "native-agent/store/store.h"
#include "shared/status.h"

namespace quiver {

// One line for the server's log (stderr in `serve`): never a token, a secret or a body.
using ApiLog = std::function<void(const std::string& line)>;

struct ApiServerOptions {
  ListenAddress listen;  // port 0: any free port (tests)
  // Workers only run handlers (an idle connection holds none), and a worker keeps a busy
  // keep-alive connection only while another is idle: with fewer workers than busy connections,
  // every request goes through the epoll thread and two thread hand-offs (measured: 16 keep-alive
  // connections served about 1.4 x the requests/s with 16 workers than with 8; docs/benchmarks.md).
  int worker_threads = 16;
  // Discovery answered on the front's loop thread when the store reads without waiting (the
  // embedded SQLite store's readers) and nothing must be queued first: no thread hand-off per
  // request (HttpFront's inline handler). Off: every request goes to a worker.
  bool inline_discovery = true;
  std::size_t max_queued_requests = 64;  // complete requests waiting for a worker before shedding
  int64_t header_timeout_ms = 10'000;    // a request's whole head, from its first byte
  int64_t body_timeout_ms = 10'000;      // its whole body, from the end of its head
  int64_t write_timeout_ms = 5'000;
  int64_t keep_alive_timeout_ms = 5'000;
  std::size_t keep_alive_max_requests = 1'000;
  std::size_t max_connections = 4'096;
  std::size_t max_connections_per_peer = 256;  // from one address (idle ones make room first)
  int max_concurrent_tests = 2;                // POST /v1/mcp-connections/{id}/test at once
  std::size_t max_body_bytes = 64 * 1024;      // the largest body any endpoint but /mcp reads
  // POST /mcp: a tools/call whose params are as large as a relayed call's may be
  // (kMaxRelayParamsBytes, shared/call_relay.h: 1 MiB) with its JSON-RPC envelope. A larger body
  // is answered 413 with a JSON-RPC error (up to 64 KiB over it; beyond, the front's 413).
  std::size_t mcp_max_body_bytes = (1u << 20) + 16 * 1024;
  // /mcp listen streams (native-agent/api/mcp_notifier.h): how often the store's epoch is read
  // while one is open, the keep-alive of an idle stream, and the streams per member and in all.
  int64_t mcp_notify_poll_ms = 250;
  int64_t mcp_stream_keepalive_ms = 15'000;
  std::size_t mcp_max_streams_per_member = 8;
  std::size_t mcp_max_streams = 1'024;
  std::size_t background_queue = 1'024;   // stale-while-revalidate requests waiting to be queued
  int64_t max_cache_age_s = 30;           // Cache-Control max-age cap of discovery answers
  std::size_t search_cache_entries = 64;  // per-principal search indexes kept
  std::size_t search_cache_bytes = std::size_t{64} << 20;
  // POST /mcp lists three tools of its own (search, describe, call) instead of every tool.
  bool mcp_search_mode = false;
  Clock now_ms = system_clock_ms();
  ApiLog log;  // null: no log
  // Routine events (an accepted webhook): the log at INFO. Null: they go to `log`.
  ApiLog log_info;
};

// The options a configuration implies (listen address; the rest default).
ApiServerOptions api_server_options(const AgentConfig& config);

class ApiServer {
 public:
  // `agent` must outlive the server.
  ApiServer(AgentService& agent, ApiServerOptions options);
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and starts serving on a thread of its own; returns once the socket listens.
  // kResourceUnavailable when the address cannot be bound (in use, not local), kInvalidArgument for
  // bad options. Call once.
  Status start();
  // Stops accepting, finishes the requests in flight, and joins every thread. Idempotent.
  void stop();

  int port() const;              // the bound port (after start)
  std::string base_url() const;  // "http://127.0.0.1:8787", "http://[::1]:8787"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace quiver
