// Fuzzes the edge's request handling (shared/edge_service.h, through it shared/discovery_http.h
// and shared/discovery_redis.h): a request's bytes and a Redis reply stream in, a response out.
// Input layout:
//   byte 0           flags: 1 = add a valid `Authorization: Bearer` for member alice,
//                           2 = sign the body as a refresh webhook (X-Quiver-Signature),
//                           4 = answer the same request a second time (L1 hits, replays),
//                           8 = the edge on a Redis Cluster (REDIS_CLUSTER, seed 127.0.0.1:7000):
//                               the segments then answer CLUSTER SHARDS, redirects, ...
//   bytes 1..4       n, little-endian: the length of the request in the host wire format
//   next n bytes     the request (edge_request_from_wire's format)
//   the rest         what Redis answers: one segment per round trip, segments separated by
//                    kRoundTrip. Each time the service sends commands the next segment is
//                    handed over, in random pieces as it asks to read; when the segment runs
//                    out while it still reads, or no segment is left, the connection "fails".
// Properties: the service always comes to a response, with an HTTP status, and ends with no
// request left open; no secret (token key, Redis password, webhook secret) shows in a response
// or a log line. An event stream (a /mcp call's, `open_stream`) opens at most once, on a Redis
// step, with a 200 head and a keep-alive; its answer is then a 200 too. On a cluster every Redis
// step names its node, waits at most the policy's longest backoff, and the request never holds
// more than six connections (shared/routed_conversation.h); a step in parts (a spread round over
// several nodes) names distinct nodes, each part takes the next segment as its node's answer
// (fed by part, in pieces; a part whose segment runs out fails), every answer to a part's bytes
// names that part, and the round goes on only from the last part settled.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/edge_service.h"
#include "shared/json.h"
#include "shared/webhook_signature.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

constexpr int64_t kNowMs = 1'800'000'000'000;
constexpr char kKid[] = "k1";
constexpr char kTokenSecret[] = "edge-fuzz-token-secret-0123456789abcdef";
constexpr char kRedisPassword[] = "edge-fuzz-redis-password";
constexpr char kWebhookSecret[] = "edge-fuzz-webhook-secret-0123456789";
const std::string kRandom(16, '\x5a');
constexpr std::string_view kRoundTrip = "\n~~~\n";

std::string env_json(bool cluster) {
  Json env = Json::object();
  if (cluster) env["REDIS_CLUSTER"] = "127.0.0.1:7000";
  env["QUIVER_TOKEN_KEYS"] = Json::object({{kKid, kTokenSecret}}).dump();
  env["REDIS_PASSWORD"] = kRedisPassword;
  env["QUIVER_WEBHOOK_SECRETS"] = Json::object({{"ci", kWebhookSecret}}).dump();
  return env.dump();
}

// The input under test: a secret the input itself carries may be echoed (a log quoting a
// malformed request), one it does not carry must never show.
std::string_view g_input;

void no_secret(const std::string& text, const char* where) {
  for (const char* s : {kTokenSecret, kRedisPassword, kWebhookSecret}) {
    if (g_input.find(s) != std::string_view::npos) continue;
    fuzz::check(text.find(s) == std::string::npos, where, "a secret is shown");
  }
}

void check_response(const EdgeStep& s) {
  fuzz::check(s.response.status >= 100 && s.response.status <= 599, "edge: a bad HTTP status",
              std::to_string(s.response.status));
  no_secret(s.response.body, "edge: the response body");
  for (const auto& [name, value] : s.response.headers) {
    no_secret(name + ": " + value, "edge: a response header");
  }
}

// Drives a step in parts until the round goes on: each part's answer is the next segment.
EdgeStep serve_parts(EdgeService& edge, const EdgeStep& step,
                     std::vector<std::string_view>& round_trips, int64_t now) {
  const std::size_t n = step.redis_parts.size();
  auto next_segment = [&] {
    std::vector<std::string_view> pieces;
    if (!round_trips.empty()) {
      pieces = fuzz::random_splits(round_trips.front());
      round_trips.erase(round_trips.begin());
    }
    return pieces;
  };
  for (std::size_t k = 0; k < n; ++k) {
    std::vector<std::string_view> pieces = next_segment();
    for (int guard = 0;; ++guard) {
      fuzz::check(guard < 10000, "edge: a part that never settles");
      EdgeStep s;
      if (pieces.empty()) {
        s = edge.fail_part(step.handle, static_cast<uint32_t>(k), "connection closed", now);
      } else {
        s = edge.feed_part(step.handle, static_cast<uint32_t>(k), pieces.front(), now);
        pieces.erase(pieces.begin());
      }
      fuzz::check(s.handle == step.handle, "edge: a part's step for another handle");
      if (s.redis_part < 0) {
        fuzz::check(k + 1 == n, "edge: a round went on before all its parts settled");
        return s;
      }
      fuzz::check(s.redis_part == static_cast<int>(k), "edge: a step for another part");
      if (s.action == EdgeAction::kWait) break;
      if (s.action == EdgeAction::kRedis) {
        fuzz::check(s.redis_parts.empty() && s.redis_host == step.redis_parts[k].host &&
                        s.redis_port == step.redis_parts[k].port,
                    "edge: a part's write to another node");
        pieces = next_segment();
        continue;
      }
      fuzz::check(s.action == EdgeAction::kRead, "edge: a part's step that is not read or write");
    }
  }
  fuzz::check(false, "edge: every part settled, and no round went on");
  return EdgeStep{};
}

// Drives one request to its end; `round_trips` (Redis' answers) are consumed as it goes.
void serve(EdgeService& edge, EdgeStep step, std::vector<std::string_view>& round_trips,
           int64_t now) {
  std::vector<std::string_view> pieces;  // of the current round trip's answer
  const uint32_t handle = step.handle;
  bool responded = false;
  bool streaming = false;
  std::set<std::string> open;  // a cluster's connections ("" is the one Redis)
  for (int guard = 0;; ++guard) {
    fuzz::check(guard < 10000, "edge: a request that never ends");
    no_secret(step.log, "edge: a log line");
    fuzz::check(step.handle == handle, "edge: a step for another handle");
    if (step.action == EdgeAction::kDone) break;
    if (step.open_stream) {
      fuzz::check(step.action == EdgeAction::kRedis && !streaming && !responded,
                  "edge: an event stream opened twice, or not before a wait");
      fuzz::check(step.response.status == 200 && step.keepalive_ms > 0 && !step.keepalive.empty(),
                  "edge: a bad event-stream head");
      check_response(step);
      streaming = true;
    }
    if (step.action == EdgeAction::kRespond) {
      fuzz::check(!responded, "edge: responded twice");
      responded = true;
      check_response(step);
      fuzz::check(!streaming || step.response.status == 200, "edge: a streamed answer not a 200");
      if (!step.background) break;
      step = edge.background(handle, now);
      continue;
    }
    // kRedis: the commands would be written, their answer is the next round trip's bytes.
    if (step.action == EdgeAction::kRedis && !step.redis_parts.empty()) {
      fuzz::check(edge.cluster() != nullptr && step.redis_host.empty() &&
                      step.redis_parts.size() >= 2 &&
                      step.redis_parts.size() <= kMaxNodesPerRequest,
                  "edge: a step in parts off a cluster, or of one node, or past the cap");
      fuzz::check(step.redis_delay_ms >= 0 && step.redis_delay_ms <= 500,
                  "edge: a backoff past the policy's bound");
      for (const std::string& a : step.redis_close) open.erase(a);
      std::set<std::string> nodes;
      for (const EdgeStep::Part& p : step.redis_parts) {
        fuzz::check(!p.host.empty(), "edge: a part names no node");
        const std::string node = p.host + ":" + std::to_string(p.port);
        fuzz::check(nodes.insert(node).second, "edge: two parts to one node");
        open.insert(node);
      }
      fuzz::check(open.size() <= kMaxNodesPerRequest, "edge: more than six Redis connections");
      step = serve_parts(edge, step, round_trips, now);
      pieces.clear();
      continue;
    }
    if (step.action == EdgeAction::kRedis) {
      fuzz::check(edge.cluster() == nullptr || !step.redis_host.empty(),
                  "edge: a cluster's Redis step names no node");
      fuzz::check(step.redis_delay_ms >= 0 && step.redis_delay_ms <= 500,
                  "edge: a backoff past the policy's bound");
      for (const std::string& a : step.redis_close) open.erase(a);
      const std::string node =
          step.redis_host.empty() ? "" : step.redis_host + ":" + std::to_string(step.redis_port);
      open.insert(node);
      fuzz::check(open.size() <= kMaxNodesPerRequest, "edge: more than six Redis connections");
      pieces.clear();
      if (!round_trips.empty()) {
        pieces = fuzz::random_splits(round_trips.front());
        round_trips.erase(round_trips.begin());
      }
    }
    if (pieces.empty()) {
      step = edge.fail(handle, "connection closed", now);
      continue;
    }
    std::string_view piece = pieces.front();
    pieces.erase(pieces.begin());
    step = edge.feed(handle, piece, now);
  }
  fuzz::check(responded, "edge: a request ended without a response");
  edge.end(handle);
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  if (size < 5) return 0;
  g_input = fuzz::as_view(data, size);
  const uint8_t flags = data[0];
  uint32_t n = uint32_t(data[1]) | uint32_t(data[2]) << 8 | uint32_t(data[3]) << 16 |
               uint32_t(data[4]) << 24;
  std::string_view rest = fuzz::as_view(data + 5, size - 5);
  if (n > rest.size()) n = static_cast<uint32_t>(rest.size());
  std::string_view wire = rest.substr(0, n);
  std::string_view redis = rest.substr(n);

  static const std::string env = env_json(false);
  static const std::string cluster_env = env_json(true);
  EdgeService edge(edge_settings_from_env((flags & 8) ? cluster_env : env));
  fuzz::check(edge.configured(), "edge: the fuzz settings were refused");

  std::vector<std::string_view> round_trips;
  for (std::size_t start = 0; start <= redis.size();) {
    std::size_t end = redis.find(kRoundTrip, start);
    if (end == std::string_view::npos) end = redis.size();
    round_trips.push_back(redis.substr(start, end - start));
    start = end + kRoundTrip.size();
  }
  const int rounds = (flags & 4) ? 2 : 1;
  for (int round = 0; round < rounds; ++round) {
    const int64_t now = kNowMs + round;
    Result<HttpRequest> request = edge_request_from_wire(wire);
    EdgeStep first;
    if (request.ok() && (flags & 3)) {
      if (flags & 1) {
        auto token = mint_caller_token("alice", kTokenSecret, kKid, kNowMs, 3'600'000);
        fuzz::check(token.ok(), "edge: minting the fuzz token failed");
        request->headers.emplace_back("Authorization", "Bearer " + *token);
      }
      if (flags & 2) {
        auto sig = sign_webhook(kWebhookSecret, "default", request->body, kNowMs);
        fuzz::check(sig.ok(), "edge: signing the fuzz webhook failed");
        request->headers.emplace_back(kWebhookSignatureHeader, *sig);
      }
      first = edge.begin(std::move(*request), now, kRandom);
    } else {
      first = edge.begin_wire(wire, now, kRandom);
    }
    serve(edge, std::move(first), round_trips, now);
    fuzz::check(edge.open_requests() == 0, "edge: a request left open after end()");
  }
  return 0;
}
