// shared/otlp.h: the OTLP/JSON body of a batch of spans, and the W3C traceparent header.
#include "shared/otlp.h"

#include <gtest/gtest.h>

#include "shared/json.h"

namespace quiver {
namespace {

TEST(Otlp, TracesJsonIsTheOtlpJsonMapping) {
  TraceSpan s;
  s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  s.span_id = "00f067aa0ba902b7";
  s.parent_span_id = "b7ad6b7169203331";
  s.name = "GET /v1/manifests";
  s.kind = SpanKind::kServer;
  s.start_unix_ns = 1'700'000'000'000'000'001;
  s.end_unix_ns = 1'700'000'000'000'000'999;
  s.attributes = {{"http.route", std::string("/v1/manifests")},
                  {"http.response.status_code", int64_t{200}},
                  {"quiver.flag", true},
                  {"quote\"d", std::string("line\nbreak")}};
  s.status = SpanStatus::kError;
  s.status_message = "HTTP 503";
  TraceSpan root;
  root.trace_id = s.trace_id;
  root.span_id = "b7ad6b7169203331";
  root.name = "root";

  const std::string body = otlp_traces_json({s, root}, "quiver-agent", "0.1.0");
  EXPECT_EQ(body,
            R"({"resourceSpans":[{"resource":{"attributes":[)"
            R"({"key":"service.name","value":{"stringValue":"quiver-agent"}},)"
            R"({"key":"service.version","value":{"stringValue":"0.1.0"}}]},)"
            R"("scopeSpans":[{"scope":{"name":"quiver-agent","version":"0.1.0"},"spans":[)"
            R"({"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7",)"
            R"("parentSpanId":"b7ad6b7169203331","name":"GET /v1/manifests","kind":2,)"
            R"("startTimeUnixNano":"1700000000000000001","endTimeUnixNano":"1700000000000000999",)"
            R"("attributes":[{"key":"http.route","value":{"stringValue":"/v1/manifests"}},)"
            R"({"key":"http.response.status_code","value":{"intValue":"200"}},)"
            R"({"key":"quiver.flag","value":{"boolValue":true}},)"
            R"({"key":"quote\"d","value":{"stringValue":"line\nbreak"}}],)"
            R"("status":{"code":2,"message":"HTTP 503"}},)"
            R"({"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"b7ad6b7169203331",)"
            R"("name":"root","kind":1,"startTimeUnixNano":"0","endTimeUnixNano":"0",)"
            R"("attributes":[],"status":{"code":0}}]}]}]})");
  EXPECT_TRUE(parse_json(body).ok());
  // An empty batch is still a valid request.
  EXPECT_TRUE(parse_json(otlp_traces_json({}, "q", "1")).ok());
}

TEST(Otlp, TraceparentFollowsW3cTraceContext) {
  std::optional<SpanContext> ok =
      parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(ok->span_id, "00f067aa0ba902b7");
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",        // no flags
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     // another version
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",     // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     // zero parent id
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",     // upper case
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",     // bad flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",  // too long
       }) {
    EXPECT_FALSE(parse_traceparent(bad).has_value()) << bad;
  }
  EXPECT_TRUE(is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"));
  EXPECT_FALSE(
      is_span_id("4bf92f3577b34da6"
                 "a"));
}

}  // namespace
}  // namespace quiver
