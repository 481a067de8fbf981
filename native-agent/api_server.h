// ApiServer: the agent's local HTTP API (cpp-httplib), the one place where people and tools talk
// to a running `quiver-agent serve`.
//
// Why: the agent holds the live upstream sessions, the preference database and, on the embedded
// default, the manifest cache itself. The API lets a user or a script see each connection's state,
// ask for a refresh, test a connection, toggle preferences, deliver signed webhooks and, without
// an edge in front, read the manifests through the very discovery core the edge runs
// (shared/discovery_http.h). schema/openapi.yaml describes every endpoint.
//
// It only calls AgentService (native-agent/service.h): the refresh engine is behind that seam.
//
// Wiring (all in ApiServer::start, routes registered in one function):
//   - listens on the configured address (`quiver.listen`, loopback 127.0.0.1:8787 by default);
//     TCP_NODELAY on (without it every keep-alive request waits ~43 ms for delayed ACKs);
//   - explicit read, write and keep-alive timeouts and a request body limit;
//   - a bounded pool: `worker_threads` handle requests, at most `max_queued_requests` connections
//     wait for one; past that the server sheds load: a separate shedding thread answers
//     503 OVERLOADED without touching the store, and when even that is saturated the accept loop
//     waits (the kernel's listen backlog holds further connections);
//   - authentication in one place: `Authorization: Bearer <caller token>` verified with the
//     configured key ring (shared/caller_token.h) gives the member; a principal never comes from a
//     query parameter. /healthz needs no token; /metrics needs none from a loopback peer and a
//     valid token from anywhere else; /v1/webhooks/refresh is authenticated by its signature;
//   - every error is JSON {"error": {"code", "message"}} with a stable code (discovery_http.h's
//     HttpErrorCode names plus OVERLOADED and UPSTREAM_UNAVAILABLE); an exception escaping a
//     handler (`catch (...)`) is a 500 INTERNAL whose detail goes to the log, not to the caller.
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

#include "native-agent/config.h"
#include "native-agent/service.h"
#include "native-agent/store.h"
#include "shared/status.h"

namespace quiver {

// One line for the server's log (stderr in `serve`): never a token, a secret or a body.
using ApiLog = std::function<void(const std::string& line)>;

struct ApiServerOptions {
  ListenAddress listen;  // port 0: any free port (tests)
  int worker_threads = 8;
  std::size_t max_queued_requests = 64;  // connections waiting for a worker before shedding
  std::size_t max_shed_queue = 256;      // connections waiting to be told 503
  int64_t read_timeout_ms = 5'000;
  int64_t write_timeout_ms = 5'000;
  int64_t keep_alive_timeout_ms = 5'000;
  std::size_t keep_alive_max_requests = 1'000;
  std::size_t max_body_bytes = 64 * 1024;  // the largest body any endpoint reads (webhooks)
  std::size_t background_queue = 1'024;    // stale-while-revalidate requests waiting to be queued
  int64_t max_cache_age_s = 30;            // Cache-Control max-age cap of discovery answers
  std::size_t search_cache_entries = 64;   // per-principal search indexes kept
  std::size_t search_cache_bytes = std::size_t{64} << 20;
  Clock now_ms = system_clock_ms();
  ApiLog log;  // null: no log
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
  // kUnavailable when the address cannot be bound (in use, not local), kInvalidArgument for bad
  // options. Call once.
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
