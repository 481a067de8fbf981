// OTLP traces (OpenTelemetry protocol, JSON encoding over HTTP): the span model the agent records
// and the request body it POSTs to a collector's /v1/traces. Sans-I/O: the agent's exporter
// (native-agent/engine/tracer.h) does the queueing and the HTTP.
//
// The encoding follows OTLP's JSON mapping (ExportTraceServiceRequest): `traceId`, `spanId` and
// `parentSpanId` as lowercase hex (not base64), 64-bit integers (`startTimeUnixNano`,
// `intValue`) as decimal strings, enums (`kind`, `status.code`) as integers, field names in
// lowerCamelCase.
//
// W3C Trace Context: `parse_traceparent` reads an incoming `traceparent` header (version 00), so
// an API request joins its caller's trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace quiver {

// SpanKind of OTLP (opentelemetry/proto/trace/v1/trace.proto).
enum class SpanKind : int { kInternal = 1, kServer = 2, kClient = 3 };
// Status.code of OTLP.
enum class SpanStatus : int { kUnset = 0, kOk = 1, kError = 2 };

using SpanAttribute = std::pair<std::string, std::variant<std::string, int64_t, bool>>;

struct TraceSpan {
  std::string trace_id;        // 32 lowercase hex digits, not all zero
  std::string span_id;         // 16 lowercase hex digits, not all zero
  std::string parent_span_id;  // empty for a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<SpanAttribute> attributes;
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message;  // with kError: a short code-like text, never upstream text
};

// A trace and span id: `trace_id` 32 hex digits, `span_id` 16, both not all zero.
struct SpanContext {
  std::string trace_id;
  std::string span_id;
};

bool is_trace_id(std::string_view s);
bool is_span_id(std::string_view s);

// The ExportTraceServiceRequest JSON of `spans`, one resource (service.name, service.version) and
// one instrumentation scope (named after the service).
std::string otlp_traces_json(const std::vector<TraceSpan>& spans, std::string_view service_name,
                             std::string_view service_version);

// `traceparent: 00-<trace id>-<parent id>-<flags>`; nullopt for any other form, another version
// than 00 with the wrong length, or an all-zero id (the W3C rules: such a header is ignored).
std::optional<SpanContext> parse_traceparent(std::string_view header);

}  // namespace quiver
