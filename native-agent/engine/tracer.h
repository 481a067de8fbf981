// Tracer: the agent's OpenTelemetry traces (listings, refreshes, API requests), exported over
// OTLP/HTTP with the JSON encoding (shared/otlp.h) when an endpoint is configured, beside the
// Prometheus metrics of /metrics.
//
// Configured by the standard OpenTelemetry variables (tracer_options_from_env):
//   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   the full URL spans are POSTed to, or else
//   OTEL_EXPORTER_OTLP_ENDPOINT          a base URL, to which /v1/traces is added;
//   OTEL_EXPORTER_OTLP_HEADERS           `k=v,k2=v2` (values percent-decoded), sent with every
//                                        export (a collector's API key: never logged);
//   OTEL_SERVICE_NAME                    service.name (default quiver-agent);
//   OTEL_TRACES_EXPORTER=none            off, whatever else is set.
// Without an endpoint the tracer is off: a span is an empty object and costs a branch.
//
// Spans are queued (at most `max_queue`; past that they are dropped and counted) and one thread
// POSTs them in batches every `flush_interval_ms`, or sooner when `max_batch` are waiting. A
// collector that is down or slow costs the export thread its timeout, never a request or a
// listing: failures are counted and logged at most once a minute. stop() (and the destructor)
// exports what is queued, once, within the timeout.
//
// What a span carries is chosen by the code: names, route templates, connection ids,
// principals, outcomes and error codes. Never a URL of an upstream, a header, a message from an
// upstream or a secret.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "native-agent/base/logger.h"
#include "shared/otlp.h"
#include "shared/status.h"

namespace quiver {

struct TracerOptions {
  std::string endpoint;  // the URL spans are POSTed to (http or https); empty: off
  std::vector<std::pair<std::string, std::string>> headers;
  std::string service_name = "quiver-agent";
  int64_t flush_interval_ms = 1'000;
  std::size_t max_batch = 512;
  std::size_t max_queue = 4'096;
  int64_t timeout_ms = 3'000;  // connect, and each read and write of one export
};

// The options the OTEL_* variables give (`getenv`: the process's by default); an error names
// the variable at fault (never a header's value).
Result<TracerOptions> tracer_options_from_env(
    const std::function<const char*(const char*)>& getenv);

class Tracer;

// One span in progress: attributes and status are set, then end() (or the destructor) records
// it. Inert (every call a no-op) when the tracer is off.
class Span {
 public:
  Span() = default;
  Span(Span&& other) noexcept;
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span();

  bool recording() const { return tracer_ != nullptr; }
  void set(std::string key, std::string value);
  void set(std::string key, int64_t value);
  void set(std::string key, bool value);
  void rename(std::string name);
  void ok();
  void error(std::string code);
  // This span as the parent of another.
  std::optional<SpanContext> context() const;
  void end();
  // Drops the span unrecorded (work handed elsewhere, which records its own).
  void discard() { tracer_ = nullptr; }

 private:
  friend class Tracer;
  Tracer* tracer_ = nullptr;
  TraceSpan span_;
};

class Tracer {
 public:
  // Off when options.endpoint is empty. kInvalidArgument for an endpoint that is not an http(s)
  // URL.
  static Result<std::unique_ptr<Tracer>> create(TracerOptions options, const Logger* log);
  ~Tracer();  // stop()
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  // A span that starts now: a root span, or a child of `parent` (same trace).
  Span start(std::string name, SpanKind kind, const std::optional<SpanContext>& parent = {});

  // Exports what is queued now, on the calling thread (tests; stop()). True when the collector
  // took every batch.
  bool flush();
  void stop();

  int64_t exported() const { return exported_.load(); }
  int64_t dropped() const { return dropped_.load(); }
  int64_t export_failures() const { return failures_.load(); }

 private:
  Tracer(TracerOptions options, const Logger* log, bool enabled);
  friend class Span;
  void record(TraceSpan span);
  bool export_batch(const std::vector<TraceSpan>& batch);
  void run();
  std::string random_hex(std::size_t bytes);

  TracerOptions options_;
  const Logger* log_ = nullptr;
  bool enabled_ = false;
  std::string base_url_;  // scheme://host[:port]
  std::string path_;      // /v1/traces

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TraceSpan> queue_;
  bool stopping_ = false;
  std::mutex export_mu_;  // one export at a time (the thread, flush())
  std::mutex random_mu_;
  uint64_t random_state_[2] = {0, 0};
  std::atomic<int64_t> exported_{0};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> failures_{0};
  std::atomic<int64_t> failure_logged_at_{0};
  std::thread thread_;
};

}  // namespace quiver
