#include "native-agent/engine/tracer.h"

#include <chrono>
#include <cstdlib>
#include <random>

#include <httplib.h>

#include "native-agent/base/clock.h"
#include "native-agent/base/config_internal.h"  // percent_decode, as for config values
#include "shared/sha256.h"
#include "shared/version.h"

namespace quiver {

namespace {

constexpr char kTraceLog[] = "tracing";
constexpr int64_t kFailureLogEveryMs = 60'000;

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// OTEL_EXPORTER_OTLP_HEADERS: `key=value` pairs separated by commas, values percent-encoded
// (the OpenTelemetry specification's form), keys and values trimmed.
Result<std::vector<std::pair<std::string, std::string>>> parse_headers(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    std::size_t eq = item.find('=');
    std::string_view key = trim(item.substr(0, eq));
    if (eq == std::string_view::npos || key.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   "OTEL_EXPORTER_OTLP_HEADERS: an entry is not key=value");
    }
    for (char c : key) {
      bool token = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || c == '.';
      if (!token) {
        return Error(ErrorCode::kInvalidArgument,
                     "OTEL_EXPORTER_OTLP_HEADERS: a header name is not a token");
      }
    }
    std::string value = config_internal::percent_decode(trim(item.substr(eq + 1)));
    for (char c : value) {
      if (c == '\r' || c == '\n' || c == '\0') {
        return Error(ErrorCode::kInvalidArgument,
                     "OTEL_EXPORTER_OTLP_HEADERS: a value holds a control character");
      }
    }
    out.emplace_back(std::string(key), std::move(value));
  }
  return out;
}

}  // namespace

Result<TracerOptions> tracer_options_from_env(
    const std::function<const char*(const char*)>& getenv) {
  auto var = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  TracerOptions o;
  if (var("OTEL_TRACES_EXPORTER") == "none") return o;
  std::string traces = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  std::string base = var("OTEL_EXPORTER_OTLP_ENDPOINT");
  if (!traces.empty()) {
    o.endpoint = traces;
  } else if (!base.empty()) {
    while (!base.empty() && base.back() == '/') base.pop_back();
    o.endpoint = base + "/v1/traces";
  }
  if (std::string service = var("OTEL_SERVICE_NAME"); !service.empty()) o.service_name = service;
  if (std::string headers = var("OTEL_EXPORTER_OTLP_HEADERS"); !headers.empty()) {
    Result<std::vector<std::pair<std::string, std::string>>> parsed = parse_headers(headers);
    if (!parsed.ok()) return parsed.error();
    o.headers = std::move(*parsed);
  }
  return o;
}

// ---- Span ----------------------------------------------------------------------------------

Span::Span(Span&& other) noexcept : tracer_(other.tracer_), span_(std::move(other.span_)) {
  other.tracer_ = nullptr;
}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    tracer_ = other.tracer_;
    span_ = std::move(other.span_);
    other.tracer_ = nullptr;
  }
  return *this;
}

Span::~Span() { end(); }

void Span::set(std::string key, std::string value) {
  if (tracer_) span_.attributes.emplace_back(std::move(key), std::move(value));
}
void Span::set(std::string key, int64_t value) {
  if (tracer_) span_.attributes.emplace_back(std::move(key), value);
}
void Span::set(std::string key, bool value) {
  if (tracer_) span_.attributes.emplace_back(std::move(key), value);
}
void Span::rename(std::string name) {
  if (tracer_) span_.name = std::move(name);
}
void Span::ok() {
  if (tracer_) span_.status = SpanStatus::kOk;
}
void Span::error(std::string code) {
  if (!tracer_) return;
  span_.status = SpanStatus::kError;
  span_.status_message = std::move(code);
}

std::optional<SpanContext> Span::context() const {
  if (!tracer_) return std::nullopt;
  return SpanContext{span_.trace_id, span_.span_id};
}

void Span::end() {
  if (!tracer_) return;
  Tracer* t = tracer_;
  tracer_ = nullptr;
  span_.end_unix_ns = unix_ns();
  t->record(std::move(span_));
}

// ---- Tracer --------------------------------------------------------------------------------

Result<std::unique_ptr<Tracer>> Tracer::create(TracerOptions options, const Logger* log) {
  if (options.endpoint.empty()) {
    return std::unique_ptr<Tracer>(new Tracer(std::move(options), log, false));
  }
  const std::string url = options.endpoint;  // a copy: `options` moves into the tracer below
  std::size_t scheme_end = url.find("://");
  std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return Error(ErrorCode::kInvalidArgument,
                 "the OTLP traces endpoint must be an http:// or https:// URL");
  }
  if (options.max_batch < 1 || options.max_queue < 1 || options.flush_interval_ms < 1 ||
      options.timeout_ms < 1) {
    return Error(ErrorCode::kInvalidArgument, "tracer: invalid options");
  }
  std::size_t path_at = url.find('/', scheme_end + 3);
  auto t = std::unique_ptr<Tracer>(new Tracer(std::move(options), log, true));
  t->base_url_ = url.substr(0, path_at);
  t->path_ = path_at == std::string::npos ? "/" : url.substr(path_at);
  if (t->base_url_.size() <= scheme.size() + 3) {
    return Error(ErrorCode::kInvalidArgument, "the OTLP traces endpoint has no host");
  }
  t->thread_ = std::thread([p = t.get()] { p->run(); });
  return t;
}

Tracer::Tracer(TracerOptions options, const Logger* log, bool enabled)
    : options_(std::move(options)), log_(log), enabled_(enabled) {
  std::random_device rd;
  random_state_[0] = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(unix_ns());
  random_state_[1] = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  if (random_state_[0] == 0 && random_state_[1] == 0) random_state_[1] = 1;
}

Tracer::~Tracer() { stop(); }

// xorshift128+: ids need to be unique, not secret (a span id says nothing about a credential).
std::string Tracer::random_hex(std::size_t bytes) {
  std::string raw;
  {
    std::lock_guard<std::mutex> lock(random_mu_);
    while (raw.size() < bytes) {
      uint64_t s1 = random_state_[0];
      const uint64_t s0 = random_state_[1];
      random_state_[0] = s0;
      s1 ^= s1 << 23;
      random_state_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
      uint64_t v = random_state_[1] + s0;
      for (int i = 0; i < 8 && raw.size() < bytes; ++i) raw += static_cast<char>(v >> (8 * i));
    }
  }
  std::string hex = hex_encode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  if (hex.find_first_not_of('0') == std::string::npos) hex.back() = '1';  // never all zero
  return hex;
}

Span Tracer::start(std::string name, SpanKind kind, const std::optional<SpanContext>& parent) {
  Span s;
  if (!enabled_) return s;
  s.tracer_ = this;
  s.span_.name = std::move(name);
  s.span_.kind = kind;
  s.span_.start_unix_ns = unix_ns();
  s.span_.span_id = random_hex(8);
  if (parent && is_trace_id(parent->trace_id) && is_span_id(parent->span_id)) {
    s.span_.trace_id = parent->trace_id;
    s.span_.parent_span_id = parent->span_id;
  } else {
    s.span_.trace_id = random_hex(16);
  }
  return s;
}

void Tracer::record(TraceSpan span) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.size() >= options_.max_queue) {
    dropped_.fetch_add(1);
    return;
  }
  queue_.push_back(std::move(span));
  if (queue_.size() >= options_.max_batch) cv_.notify_one();
}

bool Tracer::export_batch(const std::vector<TraceSpan>& batch) {
  httplib::Client client(base_url_);
  const time_t secs = static_cast<time_t>(options_.timeout_ms / 1000);
  const time_t usecs = static_cast<time_t>((options_.timeout_ms % 1000) * 1000);
  client.set_connection_timeout(secs, usecs);
  client.set_read_timeout(secs, usecs);
  client.set_write_timeout(secs, usecs);
  httplib::Headers headers;
  for (const auto& [k, v] : options_.headers) headers.emplace(k, v);
  std::string body = otlp_traces_json(batch, options_.service_name, kQuiverVersion);
  httplib::Result res = client.Post(path_, headers, body, "application/json");
  const bool ok = res && res->status >= 200 && res->status < 300;
  if (ok) {
    exported_.fetch_add(static_cast<int64_t>(batch.size()));
    return true;
  }
  failures_.fetch_add(1);
  const int64_t now = steady_ms();
  int64_t last = failure_logged_at_.load();
  if (log_ != nullptr && (last == 0 || now - last >= kFailureLogEveryMs) &&
      failure_logged_at_.compare_exchange_strong(last, now)) {
    // The endpoint is the operator's; the answer's body is not logged (a collector's text).
    std::string why = res ? "the collector answered HTTP " + std::to_string(res->status)
                          : "no answer (" + httplib::to_string(res.error()) + ")";
    log_->warn(kTraceLog, "exporting " + std::to_string(batch.size()) + " span(s) to " + base_url_ +
                              path_ + " failed: " + why +
                              "; dropped (logged at most once a minute)");
  }
  return false;
}

bool Tracer::flush() {
  if (!enabled_) return true;
  std::lock_guard<std::mutex> exporting(export_mu_);
  bool all = true;
  for (;;) {
    std::vector<TraceSpan> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!queue_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (batch.empty()) return all;
    all = export_batch(batch) && all;
  }
}

void Tracer::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms),
                   [&] { return stopping_ || queue_.size() >= options_.max_batch; });
      if (stopping_) return;
    }
    (void)flush();
  }
}

void Tracer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  (void)flush();
}

}  // namespace quiver
