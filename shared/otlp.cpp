#include "shared/otlp.h"

#include "shared/http_validators.h"
#include "shared/json.h"

namespace quiver {

namespace {

bool is_lower_hex_id(std::string_view s, std::size_t digits) {
  if (s.size() != digits) return false;
  bool nonzero = false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    nonzero = nonzero || c != '0';
  }
  return nonzero;
}

// `"text"`, escaped as JSON.
std::string json_quoted(std::string_view text) { return json_text(Json(std::string(text))); }

void append_attributes(std::string& out, const std::vector<SpanAttribute>& attributes) {
  out += "[";
  bool first = true;
  for (const auto& [key, value] : attributes) {
    if (!first) out += ",";
    first = false;
    out += "{\"key\":" + json_quoted(key) + ",\"value\":{";
    if (const auto* s = std::get_if<std::string>(&value)) {
      out += "\"stringValue\":" + json_quoted(*s);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      out += "\"intValue\":\"" + std::to_string(*i) + "\"";
    } else {
      out += std::string("\"boolValue\":") + (std::get<bool>(value) ? "true" : "false");
    }
    out += "}}";
  }
  out += "]";
}

void append_span(std::string& out, const TraceSpan& s) {
  out += "{\"traceId\":" + json_quoted(s.trace_id) + ",\"spanId\":" + json_quoted(s.span_id);
  if (!s.parent_span_id.empty()) out += ",\"parentSpanId\":" + json_quoted(s.parent_span_id);
  out += ",\"name\":" + json_quoted(s.name);
  out += ",\"kind\":" + std::to_string(static_cast<int>(s.kind));
  out += ",\"startTimeUnixNano\":\"" + std::to_string(s.start_unix_ns) + "\"";
  out += ",\"endTimeUnixNano\":\"" + std::to_string(s.end_unix_ns) + "\"";
  out += ",\"attributes\":";
  append_attributes(out, s.attributes);
  out += ",\"status\":{\"code\":" + std::to_string(static_cast<int>(s.status));
  if (!s.status_message.empty()) out += ",\"message\":" + json_quoted(s.status_message);
  out += "}}";
}

}  // namespace

bool is_trace_id(std::string_view s) { return is_lower_hex_id(s, 32); }
bool is_span_id(std::string_view s) { return is_lower_hex_id(s, 16); }

std::string otlp_traces_json(const std::vector<TraceSpan>& spans, std::string_view service_name,
                             std::string_view service_version) {
  std::string out = "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  append_attributes(out, {{"service.name", std::string(service_name)},
                          {"service.version", std::string(service_version)}});
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":" + json_quoted(service_name) +
         ",\"version\":" + json_quoted(service_version) + "},\"spans\":[";
  bool first = true;
  for (const TraceSpan& s : spans) {
    if (!first) out += ",";
    first = false;
    append_span(out, s);
  }
  out += "]}]}]}";
  return out;
}

std::optional<SpanContext> parse_traceparent(std::string_view header) {
  // 00-<32 hex>-<16 hex>-<2 hex>: 55 characters exactly for version 00.
  if (header.size() != 55 || header.substr(0, 3) != "00-" || header[35] != '-' ||
      header[52] != '-') {
    return std::nullopt;
  }
  std::string_view trace = header.substr(3, 32);
  std::string_view parent = header.substr(36, 16);
  std::string_view flags = header.substr(53, 2);
  for (char c : flags) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  if (!is_trace_id(trace) || !is_span_id(parent)) return std::nullopt;
  return SpanContext{std::string(trace), std::string(parent)};
}

}  // namespace quiver
