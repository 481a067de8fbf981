// OpenTelemetry traces (native-agent/engine/tracer.h): a real agent listing a real upstream
// (tests/peers/test-upstream.mjs over stdio) and serving its API exports its refreshes,
// listings and API requests as OTLP/HTTP JSON to a small OTLP receiver on loopback (a real HTTP
// server here that keeps what it is sent, and parses it as a collector would). Also: a caller's
// traceparent is joined, no secret reaches a span, a collector that is down costs only the
// spans, the queue is bounded, and the OTEL_* variables configure it.
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "native-agent/api/api_server.h"
#include "native-agent/base/clock.h"
#include "native-agent/base/config.h"
#include "native-agent/engine/agent.h"
#include "native-agent/engine/tracer.h"
#include "shared/caller_token.h"
#include "shared/json.h"
#include "tests/support/agent_setup.h"
#include "tests/support/mcp_peers.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/

constexpr char kTokenKey[] = "tracing-test-caller-token-key-0123456789";
constexpr char kUpstreamSecret[] = "upstream-secret-value-7f3a9c";
constexpr char kCollectorKey[] = "collector-api-key-51d2e8";

// An OTLP/HTTP receiver on 127.0.0.1: keeps every POST /v1/traces body and its headers, answers
// `status` (200 by default, as a collector does with `{}`).
class OtlpReceiver {
 public:
  OtlpReceiver() {
    server_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      bodies_.push_back(req.body);
      content_types_.push_back(req.get_header_value("Content-Type"));
      keys_.push_back(req.get_header_value("x-collector-key"));
      res.status = 200;
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~OtlpReceiver() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces";
  }
  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::string> content_types() {
    std::lock_guard<std::mutex> lock(mu_);
    return content_types_;
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> bodies_, content_types_, keys_;
};

// The spans of every export, each with its resource's service.name added as "service".
std::vector<Json> spans_of(const std::vector<std::string>& bodies) {
  std::vector<Json> spans;
  for (const std::string& body : bodies) {
    Result<Json> j = parse_json(body);
    EXPECT_TRUE(j.ok()) << body.substr(0, 300);
    if (!j.ok()) continue;
    for (const Json& rs : j->at("resourceSpans")) {
      std::string service;
      for (const Json& a : rs.at("resource").at("attributes")) {
        if (a.at("key") == "service.name") service = a.at("value").at("stringValue");
      }
      for (const Json& ss : rs.at("scopeSpans")) {
        for (Json span : ss.at("spans")) {
          span["service"] = service;
          spans.push_back(span);
        }
      }
    }
  }
  return spans;
}

// An attribute's value as OTLP/JSON gives it ({"stringValue": ...} / {"intValue": "..."}).
Json attribute(const Json& span, const std::string& key) {
  for (const Json& a : span.at("attributes")) {
    if (a.at("key") == key) return a.at("value");
  }
  return nullptr;
}

const Json* find_span(const std::vector<Json>& spans, const std::string& name) {
  for (const Json& s : spans) {
    if (s.at("name") == name) return &s;
  }
  return nullptr;
}

class TracingTest : public ::testing::Test {
 protected:
  void start_agent(TracerOptions tracing) {
    Json servers = {
        {"t",
         {{"command", "node"},
          {"args", {test_upstream_js(), "stdio", "--quiet", "--tools", "3"}},
          {"env", {{"UPSTREAM_KEY", "${TEST_UPSTREAM_SECRET}"}}}}},
    };
    Json quiver = {
        {"data_dir", dir_.path("data")},
        {"listen", "127.0.0.1:0"},
        {"members", {"alice"}},
        {"grants", {{"alice", {"t"}}}},
        {"caller_token_keys", {{"k1", {{"env", "TEST_TOKEN_KEY"}}}}},
    };
    Result<AgentConfig> config = parse_test_config(
        Json{{"mcpServers", servers}, {"quiver", quiver}}, "tracing_test.json",
        {{"TEST_TOKEN_KEY", kTokenKey}, {"TEST_UPSTREAM_SECRET", kUpstreamSecret}}, dir_.root());
    ASSERT_TRUE(config.ok()) << config.error().message;
    AgentOptions options = AgentOptions::on_demand();
    options.log_sink = log_.sink();
    options.tracing = std::move(tracing);
    Result<std::unique_ptr<Agent>> agent = Agent::create(*config, options);
    ASSERT_TRUE(agent.ok()) << agent.error().message;
    agent_ = std::move(*agent);
    ASSERT_TRUE(agent_->start().ok());
    server_ = std::make_unique<ApiServer>(*agent_, api_server_options(agent_->config()));
    Status started = server_->start();
    ASSERT_TRUE(started.ok()) << started.error().message;
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (agent_) agent_->stop();
  }

  httplib::Headers bearer() {
    MintOptions o;
    o.ns = agent_->config().ns;
    return {{"Authorization", "Bearer " + *mint_caller_token("alice", kTokenKey, "k1",
                                                             system_clock_ms()(), 3'600'000, o)}};
  }

  std::string log() { return log_.text(); }

  TempDir dir_;
  LogCapture log_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(TracingTest, RefreshesListingsAndApiRequestsAreExportedAsOtlpJson) {
  OtlpReceiver receiver;
  TracerOptions tracing;
  tracing.endpoint = receiver.endpoint();
  tracing.headers = {{"x-collector-key", kCollectorKey}};
  tracing.flush_interval_ms = 60'000;  // exported by flush() below, not by the clock
  start_agent(tracing);
  ASSERT_TRUE(agent_->tracer() != nullptr && agent_->tracer()->enabled());

  Result<RefreshReport> refreshed = agent_->refresh_now("t", Principal::shared(), "manual");
  ASSERT_TRUE(refreshed.ok()) << refreshed.error().message;

  const std::string caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string caller_span = "00f067aa0ba902b7";
  httplib::Client c("127.0.0.1", server_->port());
  httplib::Headers h = bearer();
  h.emplace("traceparent", "00-" + caller_trace + "-" + caller_span + "-01");
  auto manifest = c.Get("/v1/mcp-connections/t/manifest", h);
  ASSERT_TRUE(manifest);
  EXPECT_EQ(manifest->status, 200) << manifest->body;
  auto missing = c.Get("/no/such/path?secret=" + std::string(kTokenKey), bearer());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  ASSERT_TRUE(agent_->tracer()->flush());

  std::vector<std::string> bodies = receiver.bodies();
  ASSERT_FALSE(bodies.empty());
  for (const std::string& type : receiver.content_types()) EXPECT_EQ(type, "application/json");
  for (const std::string& key : receiver.keys()) EXPECT_EQ(key, kCollectorKey);
  for (const std::string& body : bodies) {
    for (const char* secret : {kUpstreamSecret, kCollectorKey, kTokenKey}) {
      EXPECT_EQ(body.find(secret), std::string::npos) << "a secret in an export: " << secret;
    }
  }
  EXPECT_EQ(log().find(kCollectorKey), std::string::npos);

  std::vector<Json> spans = spans_of(bodies);
  for (const Json& s : spans) {
    EXPECT_EQ(s.at("service"), "quiver-agent");
    EXPECT_TRUE(is_trace_id(s.at("traceId").get<std::string>())) << s.dump();
    EXPECT_TRUE(is_span_id(s.at("spanId").get<std::string>())) << s.dump();
    EXPECT_LE(std::stoll(s.at("startTimeUnixNano").get<std::string>()),
              std::stoll(s.at("endTimeUnixNano").get<std::string>()));
  }

  const Json* refresh = find_span(spans, "quiver.refresh");
  ASSERT_NE(refresh, nullptr);
  EXPECT_EQ(refresh->at("kind"), 1);
  EXPECT_EQ(refresh->at("status").at("code"), 1);
  EXPECT_EQ(attribute(*refresh, "quiver.connection_id"), Json({{"stringValue", "t"}}));
  EXPECT_EQ(attribute(*refresh, "quiver.principal"), Json({{"stringValue", "shared"}}));
  EXPECT_EQ(attribute(*refresh, "quiver.trigger"), Json({{"stringValue", "manual"}}));
  EXPECT_EQ(attribute(*refresh, "quiver.outcome"), Json({{"stringValue", "committed"}}));
  EXPECT_FALSE(refresh->contains("parentSpanId"));

  const Json* list = find_span(spans, "quiver.list");
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->at("kind"), 3);
  EXPECT_EQ(list->at("traceId"), refresh->at("traceId"));
  EXPECT_EQ(list->at("parentSpanId"), refresh->at("spanId"));
  EXPECT_EQ(attribute(*list, "quiver.tools"), Json({{"intValue", "3"}}));
  EXPECT_EQ(attribute(*list, "quiver.transport"), Json({{"stringValue", "stdio"}}));
  EXPECT_EQ(attribute(*list, "quiver.failed_lists"), Json({{"intValue", "0"}}));

  const Json* get = find_span(spans, "GET /v1/mcp-connections/{id}/manifest");
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get->at("kind"), 2);
  EXPECT_EQ(get->at("traceId"), caller_trace);  // the caller's trace, joined
  EXPECT_EQ(get->at("parentSpanId"), caller_span);
  EXPECT_EQ(attribute(*get, "http.response.status_code"), Json({{"intValue", "200"}}));
  EXPECT_EQ(attribute(*get, "http.route"),
            Json({{"stringValue", "/v1/mcp-connections/{id}/manifest"}}));

  const Json* unmatched = find_span(spans, "GET unmatched");
  ASSERT_NE(unmatched, nullptr) << "a 404's route is not the caller's path";
  EXPECT_EQ(attribute(*unmatched, "http.response.status_code"), Json({{"intValue", "404"}}));
  EXPECT_NE(unmatched->at("traceId"), caller_trace);  // no traceparent: a trace of its own
}

TEST_F(TracingTest, ACollectorThatIsDownCostsOnlyTheSpans) {
  // A port nobody listens on (bound, then closed).
  int port = 0;
  {
    httplib::Server probe;
    port = probe.bind_to_any_port("127.0.0.1");
  }
  TracerOptions tracing;
  tracing.endpoint = "http://127.0.0.1:" + std::to_string(port) + "/v1/traces";
  tracing.flush_interval_ms = 60'000;
  tracing.timeout_ms = 500;
  start_agent(tracing);
  Result<RefreshReport> refreshed = agent_->refresh_now("t", Principal::shared(), "manual");
  ASSERT_TRUE(refreshed.ok()) << refreshed.error().message;
  EXPECT_EQ(refreshed->outcome, "committed");
  EXPECT_FALSE(agent_->tracer()->flush());
  EXPECT_GE(agent_->tracer()->export_failures(), 1);
  EXPECT_EQ(agent_->tracer()->exported(), 0);
  httplib::Client c("127.0.0.1", server_->port());
  auto manifest = c.Get("/v1/mcp-connections/t/manifest", bearer());
  ASSERT_TRUE(manifest);
  EXPECT_EQ(manifest->status, 200);
  EXPECT_NE(log().find("exporting"), std::string::npos) << log();
}

TEST(Tracer, OffWithoutAnEndpointAndBoundedWithOne) {
  Result<std::unique_ptr<Tracer>> off = Tracer::create(TracerOptions{}, nullptr);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->enabled());
  Span inert = (*off)->start("x", SpanKind::kInternal);
  EXPECT_FALSE(inert.recording());
  EXPECT_FALSE(inert.context().has_value());

  TracerOptions bounded;
  bounded.endpoint = "http://127.0.0.1:9/v1/traces";
  bounded.max_queue = 2;
  bounded.flush_interval_ms = 60'000;
  Result<std::unique_ptr<Tracer>> t = Tracer::create(bounded, nullptr);
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 5; ++i) (*t)->start("s", SpanKind::kInternal).end();
  EXPECT_EQ((*t)->dropped(), 3);

  TracerOptions bad;
  bad.endpoint = "ftp://collector/v1/traces";
  EXPECT_EQ(Tracer::create(bad, nullptr).error().code, ErrorCode::kInvalidArgument);
}

TEST(Tracer, OptionsComeFromTheOtelVariables) {
  auto from = [](std::map<std::string, std::string> env) {
    return tracer_options_from_env([env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_TRUE(from({})->endpoint.empty());
  EXPECT_EQ(from({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"}})->endpoint,
            "http://c:4318/v1/traces");
  EXPECT_EQ(from({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                  {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/otlp/traces"}})
                ->endpoint,
            "https://t.example/otlp/traces");
  EXPECT_TRUE(
      from({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_TRACES_EXPORTER", "none"}})
          ->endpoint.empty());
  EXPECT_EQ(from({{"OTEL_SERVICE_NAME", "agent-eu-1"}})->service_name, "agent-eu-1");
  Result<TracerOptions> headers =
      from({{"OTEL_EXPORTER_OTLP_HEADERS", " api-key = a%20b%3Dc , x-team=ops,"}});
  ASSERT_TRUE(headers.ok()) << headers.error().message;
  ASSERT_EQ(headers->headers.size(), 2u);
  EXPECT_EQ(headers->headers[0], std::make_pair(std::string("api-key"), std::string("a b=c")));
  EXPECT_EQ(headers->headers[1], std::make_pair(std::string("x-team"), std::string("ops")));
  for (const char* bad : {"novalue", "bad key=v", "k=a%0Db"}) {
    Result<TracerOptions> r = from({{"OTEL_EXPORTER_OTLP_HEADERS", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("OTEL_EXPORTER_OTLP_HEADERS"), std::string::npos);
    EXPECT_EQ(r.error().message.find("a%0Db"), std::string::npos);  // never the value
  }
}

}  // namespace
}  // namespace quiver
