// The agent's OAuth side (native-agent/engine/oauth_manager.h) against a real HTTP authorization
// server on 127.0.0.1 and real token store files: a member connects (begin → the browser →
// complete), tokens are refreshed ahead of expiry and after a 401, one refresh for two agents on
// one token store, and the failures that must lose nothing (invalid_grant, garbage, a hang, a
// forged or replayed state).
//
// Why a server written here and not oidc-provider: these tests need the token endpoint to fail on
// purpose (answer invalid_grant, garbage, or hang) and to count its calls exactly. It is a real
// cpp-httplib server speaking HTTP on loopback (RFC 8414 / 9728 metadata, RFC 7591 registration,
// PKCE S256 checked for real); the end-to-end tests against oidc-provider (tests/fixtures/oauth/)
// prove the same flows against an authorization server nobody here wrote.
#include "native-agent/engine/oauth_manager.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "native-agent/base/clock.h"
#include "shared/oauth_callback.h"
#include "shared/sha256.h"
#include "tests/support/mcp_peers.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::read_file;
using quiver::testing::TempDir;

constexpr char kKeyHex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::map<std::string, std::string> form(const std::string& body) {
  std::map<std::string, std::string> out;
  httplib::Params params;
  httplib::detail::parse_query_text(body, params);
  for (const auto& [k, v] : params) out[k] = v;
  return out;
}

// An MCP server's 401 and an authorization server, on one loopback port.
class AuthServer {
 public:
  enum class TokenMode { kOk, kInvalidGrant, kGarbage, kHang };

  AuthServer() {
    server_.Post("/mcp", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 401;
      res.set_header("WWW-Authenticate",
                     "Bearer resource_metadata=\"" + base() +
                         "/.well-known/oauth-protected-resource/mcp\", scope=\"read\"");
    });
    server_.Get("/.well-known/oauth-protected-resource/mcp",
                [this](const httplib::Request&, httplib::Response& res) {
                  res.set_content(Json{{"resource", base() + "/mcp"},
                                       {"authorization_servers", {base()}},
                                       {"scopes_supported", {"read"}}}
                                      .dump(),
                                  "application/json");
                });
    server_.Get("/.well-known/oauth-authorization-server", [this](const httplib::Request&,
                                                                  httplib::Response& res) {
      res.set_content(Json{{"issuer", base()},
                           {"authorization_endpoint", base() + "/authorize"},
                           {"token_endpoint", base() + "/token"},
                           {"registration_endpoint", base() + "/register"},
                           {"response_types_supported", {"code"}},
                           {"grant_types_supported", {"authorization_code", "refresh_token"}},
                           {"code_challenge_methods_supported", {"S256"}},
                           {"token_endpoint_auth_methods_supported", {"none"}},
                           {"authorization_response_iss_parameter_supported", true}}
                          .dump(),
                      "application/json");
    });
    server_.Post("/register", [this](const httplib::Request& req, httplib::Response& res) {
      ++registrations;
      Result<Json> body = parse_json(req.body);
      Json out = body.ok() ? *body : Json::object();
      out["client_id"] = "dyn-client-" + std::to_string(registrations.load());
      out["token_endpoint_auth_method"] = "none";
      res.status = 201;
      res.set_content(out.dump(), "application/json");
    });
    // The user approves at once: the redirect carries a code (and iss, RFC 9207).
    server_.Get("/authorize", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string code = "code-" + std::to_string(++codes_issued);
      {
        std::lock_guard<std::mutex> lock(mu_);
        challenges_[code] = req.get_param_value("code_challenge");
        last_authorize_ = req.params;
      }
      res.status = 302;
      res.set_header("Location", req.get_param_value("redirect_uri") + "?code=" + code +
                                     "&state=" + req.get_param_value("state") +
                                     "&iss=" + httplib::detail::encode_query_param(base()));
    });
    server_.Post("/token", [this](const httplib::Request& req, httplib::Response& res) {
      ++token_calls;
      const auto f = form(req.body);
      {
        std::lock_guard<std::mutex> lock(mu_);
        token_bodies_.push_back(req.body);
      }
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
      switch (mode.load()) {
        case TokenMode::kInvalidGrant:
          res.status = 400;
          res.set_content(R"({"error":"invalid_grant","error_description":"revoked"})",
                          "application/json");
          return;
        case TokenMode::kGarbage:
          res.set_content("<html>surprise</html>", "text/html");
          return;
        case TokenMode::kHang:
          std::this_thread::sleep_for(std::chrono::milliseconds(4000));
          res.status = 504;
          return;
        case TokenMode::kOk:
          break;
      }
      if (f.count("grant_type") && f.at("grant_type") == "authorization_code") {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = challenges_.find(f.count("code") ? f.at("code") : "");
        if (it == challenges_.end() || !f.count("code_verifier") ||
            oauth::pkce_s256(f.at("code_verifier")) != it->second) {
          res.status = 400;
          res.set_content(R"({"error":"invalid_grant"})", "application/json");
          return;
        }
        challenges_.erase(it);
      }
      const int n = ++tokens_issued;
      res.set_content(Json{{"access_token", "AT-" + std::to_string(n) + "-qvSECRETaccess"},
                           {"token_type", "Bearer"},
                           {"expires_in", expires_in.load()},
                           {"refresh_token", "RT-" + std::to_string(n) + "-qvSECRETrefresh"},
                           {"scope", "read"}}
                          .dump(),
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~AuthServer() {
    server_.stop();
    thread_.join();
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> token_bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return token_bodies_;
  }

  std::atomic<TokenMode> mode{TokenMode::kOk};
  std::atomic<int> delay_ms{0};
  std::atomic<int> expires_in{3600};
  std::atomic<int> token_calls{0};
  std::atomic<int> tokens_issued{0};
  std::atomic<int> registrations{0};
  std::atomic<int> codes_issued{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::string> challenges_;
  std::vector<std::string> token_bodies_;
  httplib::Params last_authorize_;
};

AgentConfig config_for(const AuthServer& as, const std::string& token_store) {
  const std::string text =
      Json{
          {"mcpServers", {{"linear", {{"url", as.base() + "/mcp"}}}}},
          {"quiver",
           {{"allow_private_upstreams", true},
            {"data_dir", "/tmp"},
            {"members", {"alice", "bob"}},
            {"grants", {{"*", {"*"}}}},
            {"oauth", {{"key", {{"env", "K"}}}, {"token_store", token_store}}},
            {"connections", {{"linear", {{"auth", "oauth"}, {"credential_mode", "per_member"}}}}}}}}
          .dump();
  ConfigSources s;
  s.text = text;
  s.origin = "oauth_manager_test.json";
  s.env = {{"K", kKeyHex}};
  Result<AgentConfig> cfg = parse_config(s);
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.error().message);
  return cfg.ok() ? std::move(*cfg) : AgentConfig{};
}

std::unique_ptr<OAuthManager> manager_for(const AgentConfig& cfg, const std::string& holder) {
  TokenStoreOptions o;
  o.path = cfg.oauth.token_store;
  o.key = *cfg.oauth.key;
  Result<std::unique_ptr<TokenStore>> tokens = TokenStore::open(o);
  EXPECT_TRUE(tokens.ok()) << (tokens.ok() ? "" : tokens.error().message);
  if (!tokens.ok()) return nullptr;
  return std::make_unique<OAuthManager>(cfg, std::move(*tokens), holder);
}

const Principal kAlice = *Principal::member("alice");
int64_t in_ms(int64_t ms) { return steady_ms() + ms; }

// A stored authorization at `as` whose access token expires `expires_in_ms` from now.
oauth::Authorization stored(const AuthServer& as, const std::string& access,
                            const std::string& refresh, int64_t expires_in_ms) {
  oauth::Authorization a;
  a.resource = as.base() + "/mcp";
  a.server.issuer = as.base();
  a.server.authorization_endpoint = as.base() + "/authorize";
  a.server.token_endpoint = as.base() + "/token";
  a.client.issuer = as.base();
  a.client.client_id = "dyn-client-0";
  a.client.token_endpoint_auth_method = "none";
  a.client.dynamic = true;
  a.tokens.access_token = access;
  a.tokens.refresh_token = refresh;
  a.tokens.expires_at_ms = wall_ms() + expires_in_ms;
  a.tokens.obtained_at_ms = a.tokens.expires_at_ms - 3'600'000;  // an hour's token
  return a;
}

struct Fixture {
  AuthServer as;
  TempDir dir;
  AgentConfig cfg = config_for(as, dir.path("oauth-tokens.db"));
  std::unique_ptr<OAuthManager> manager = manager_for(cfg, "agent-a");
  const ConnectionConfig& linear() const { return *cfg.find_connection("linear"); }
  void put(const oauth::Authorization& a) {
    ASSERT_TRUE(manager->tokens().put_authorization("linear", kAlice, a, wall_ms()).ok());
  }
};

TEST(OAuthManagerTest, AMemberConnectsThroughTheBrowserAndTheCallback) {
  Fixture f;
  std::vector<std::string> events;
  OAuthManager::Hooks hooks;
  hooks.connected = [&](const std::string& cid, const Principal& p) {
    events.push_back("connected " + cid + " " + p.str());
  };
  hooks.disconnected = [&](const std::string& cid, const Principal& p) {
    events.push_back("disconnected " + cid + " " + p.str());
  };
  f.manager->set_hooks(hooks);

  // Not connected: the listing's token request says so, without asking the token endpoint.
  Result<Secret> none = f.manager->access_token(f.linear(), kAlice, in_ms(5000));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kAuthorizationRequired);
  EXPECT_NE(none.error().message.find("/v1/mcp-connections/linear/authorize"), std::string::npos);
  EXPECT_FALSE(*f.manager->connected("linear", kAlice));

  Result<AuthorizationStart> start = f.manager->begin(f.linear(), kAlice, in_ms(10000));
  ASSERT_TRUE(start.ok()) << start.error().message;
  EXPECT_EQ(start->authorization_url.rfind(f.as.base() + "/authorize?", 0), 0u)
      << start->authorization_url;
  EXPECT_GT(start->expires_at_ms, wall_ms());
  EXPECT_EQ(f.as.registrations.load(), 1);

  // The browser: fetch the URL without following the redirect, deliver the Location's query.
  httplib::Client browser(f.as.base());
  auto r = browser.Get(start->authorization_url.substr(f.as.base().size()));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 302);
  const std::string location = r->get_header_value("Location");
  Result<oauth::CallbackParams> callback =
      parse_oauth_callback(location.substr(location.find('?') + 1));
  ASSERT_TRUE(callback.ok());

  Result<AuthorizationDone> done = f.manager->complete(*callback, in_ms(10000));
  ASSERT_TRUE(done.ok()) << done.error().message;
  EXPECT_EQ(done->connection_id, "linear");
  EXPECT_EQ(done->principal, kAlice);
  EXPECT_EQ(events, (std::vector<std::string>{"connected linear member/alice"}));
  EXPECT_TRUE(*f.manager->connected("linear", kAlice));
  EXPECT_FALSE(*f.manager->connected("linear", *Principal::member("bob")));
  Result<Secret> token = f.manager->access_token(f.linear(), kAlice, in_ms(5000));
  ASSERT_TRUE(token.ok()) << token.error().message;
  EXPECT_EQ(token->reveal(), "AT-1-qvSECRETaccess");

  // The state was single use: a replay (and a forged state) is refused, nothing stored.
  Result<AuthorizationDone> replay = f.manager->complete(*callback, in_ms(10000));
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.error().code, ErrorCode::kNotFound);
  oauth::CallbackParams forged = *callback;
  forged.state = "forged-state";
  EXPECT_EQ(f.manager->complete(forged, in_ms(10000)).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(f.as.tokens_issued.load(), 1);

  // A second member reuses the dynamic registration of the same issuer.
  Result<AuthorizationStart> bob =
      f.manager->begin(f.linear(), *Principal::member("bob"), in_ms(10000));
  ASSERT_TRUE(bob.ok()) << bob.error().message;
  EXPECT_EQ(f.as.registrations.load(), 1);
  // A wrong `iss` on the callback: refused, nothing stored.
  auto rb = browser.Get(bob->authorization_url.substr(f.as.base().size()));
  ASSERT_TRUE(rb);
  const std::string bob_location = rb->get_header_value("Location");
  Result<oauth::CallbackParams> bob_callback =
      parse_oauth_callback(bob_location.substr(bob_location.find('?') + 1));
  ASSERT_TRUE(bob_callback.ok());
  oauth::CallbackParams wrong_iss = *bob_callback;
  wrong_iss.iss = "https://evil.example";
  Result<AuthorizationDone> evil = f.manager->complete(wrong_iss, in_ms(10000));
  ASSERT_FALSE(evil.ok());
  EXPECT_FALSE(*f.manager->connected("linear", *Principal::member("bob")));

  // Disconnect: the tokens go, and the hook drops the manifest.
  EXPECT_TRUE(*f.manager->disconnect("linear", kAlice));
  EXPECT_FALSE(*f.manager->connected("linear", kAlice));
  EXPECT_EQ(events.back(), "disconnected linear member/alice");
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000)).error().code,
            ErrorCode::kAuthorizationRequired);

  // No token, code or verifier in the token store's bytes.
  const std::string path = f.cfg.oauth.token_store;
  const std::string bytes = read_file(path) + read_file(path + "-wal");
  ASSERT_FALSE(bytes.empty());
  for (const std::string& secret : {std::string("qvSECRETaccess"), std::string("qvSECRETrefresh"),
                                    std::string("code-1"), callback->state}) {
    EXPECT_EQ(bytes.find(secret), std::string::npos) << secret;
  }
  for (const std::string& body : f.as.token_bodies()) {
    if (form(body).count("code_verifier")) {
      EXPECT_EQ(bytes.find(form(body).at("code_verifier")), std::string::npos);
    }
  }
}

TEST(OAuthManagerTest, RefreshesAheadOfExpiryAndAfterA401) {
  Fixture f;
  f.put(stored(f.as, "AT-old", "RT-old", 3'600'000));
  // Valid for an hour: no refresh.
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000))->reveal(), "AT-old");
  EXPECT_EQ(f.as.token_calls.load(), 0);
  // The upstream refused an older token than the stored one: no refresh either.
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000), Secret("AT-older"))->reveal(),
            "AT-old");
  EXPECT_EQ(f.as.token_calls.load(), 0);
  // The upstream refused the stored token: refreshed.
  Result<Secret> after_401 =
      f.manager->access_token(f.linear(), kAlice, in_ms(5000), Secret("AT-old"));
  ASSERT_TRUE(after_401.ok()) << after_401.error().message;
  EXPECT_EQ(after_401->reveal(), "AT-1-qvSECRETaccess");
  EXPECT_EQ(f.as.token_calls.load(), 1);
  EXPECT_NE(f.as.token_bodies().back().find("grant_type=refresh_token"), std::string::npos);
  EXPECT_NE(f.as.token_bodies().back().find("refresh_token=RT-old"), std::string::npos);
  // Stored: the next call answers it without the token endpoint.
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000))->reveal(),
            "AT-1-qvSECRETaccess");
  EXPECT_EQ(f.as.token_calls.load(), 1);

  // Expiring within refresh_ahead_ms (60 s): refreshed before use.
  f.put(stored(f.as, "AT-soon", "RT-soon", 30'000));
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000))->reveal(),
            "AT-2-qvSECRETaccess");
  EXPECT_EQ(f.as.token_calls.load(), 2);
  Result<std::optional<AuthorizationRecord>> rec =
      f.manager->tokens().authorization("linear", kAlice);
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->authorization.tokens.refresh_token, "RT-2-qvSECRETrefresh");
  EXPECT_GT((*rec)->authorization.tokens.expires_at_ms, wall_ms() + 3'000'000);
}

TEST(OAuthManagerTest, InvalidGrantTurnsIntoAuthorizationRequiredOnce) {
  Fixture f;
  f.put(stored(f.as, "AT-dead", "RT-revoked", -1000));
  f.as.mode = AuthServer::TokenMode::kInvalidGrant;
  Result<Secret> t = f.manager->access_token(f.linear(), kAlice, in_ms(5000));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, ErrorCode::kAuthorizationRequired);
  EXPECT_NE(t.error().message.find("invalid_grant"), std::string::npos) << t.error().message;
  EXPECT_EQ(t.error().message.find("RT-revoked"), std::string::npos);
  EXPECT_EQ(f.as.token_calls.load(), 1);
  // The dead tokens are gone: the next call answers at once, the token endpoint left alone.
  EXPECT_FALSE(*f.manager->connected("linear", kAlice));
  EXPECT_EQ(f.manager->access_token(f.linear(), kAlice, in_ms(5000)).error().code,
            ErrorCode::kAuthorizationRequired);
  EXPECT_EQ(f.as.token_calls.load(), 1);
}

TEST(OAuthManagerTest, GarbageAndAHangingTokenEndpointKeepTheToken) {
  Fixture f;
  // About to expire (still valid): a failing token endpoint leaves the token usable.
  f.put(stored(f.as, "AT-still-good", "RT-1", 20'000));
  f.as.mode = AuthServer::TokenMode::kGarbage;
  Result<Secret> t = f.manager->access_token(f.linear(), kAlice, in_ms(5000));
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->reveal(), "AT-still-good");
  EXPECT_EQ(f.as.token_calls.load(), 1);
  // Expired: the failure is the answer, with its own code; the row stays.
  f.put(stored(f.as, "AT-expired", "RT-1", -1000));
  Result<Secret> garbage = f.manager->access_token(f.linear(), kAlice, in_ms(5000));
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.error().code, ErrorCode::kAuthorizationRequired);
  EXPECT_TRUE(*f.manager->connected("linear", kAlice));

  f.as.mode = AuthServer::TokenMode::kHang;
  const int64_t started = steady_ms();
  Result<Secret> hung = f.manager->access_token(f.linear(), kAlice, in_ms(700));
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.error().code, ErrorCode::kTimeout) << hung.error().message;
  EXPECT_LT(steady_ms() - started, 2500);
  EXPECT_TRUE(*f.manager->connected("linear", kAlice));
  EXPECT_EQ(
      (*f.manager->tokens().authorization("linear", kAlice))->authorization.tokens.refresh_token,
      "RT-1");
}

// Two agents on one token store file, four concurrent requests for an expiring token: the token
// endpoint is asked once, and everyone gets the new token.
// Step-up of the authorization-code grant: a person must consent, so the refused tokens go, the
// union of scopes waits for the next begin() (whose authorization request asks for it), and after
// kMaxStepUps step-ups without a listing that succeeded the answer is kUnauthenticated with the
// tokens kept and no request made. listed() ends the step-up.
TEST(OAuthManagerTest, AnAuthorizationCodeStepUpWaitsForThePersonAndIsBounded) {
  Fixture f;
  oauth::BearerChallenge challenge;
  challenge.error = "insufficient_scope";
  challenge.scope = "read write";
  oauth::Authorization a = stored(f.as, "AT-old-qvSECRET", "RT-old-qvSECRET", 3'600'000);
  a.tokens.scope = "read";
  f.put(a);

  // Another agent already stepped up: its newer token is answered, nothing else happens.
  Result<Secret> newer =
      f.manager->step_up(f.linear(), kAlice, in_ms(5000), Secret("AT-older"), challenge);
  ASSERT_TRUE(newer.ok()) << newer.error().message;
  EXPECT_EQ(newer->reveal(), "AT-old-qvSECRET");
  EXPECT_FALSE(f.manager->tokens().step_up("linear", kAlice)->has_value());

  for (int attempt = 1; attempt <= oauth::kMaxStepUps; ++attempt) {
    f.put(a);
    Result<Secret> r =
        f.manager->step_up(f.linear(), kAlice, in_ms(5000), Secret("AT-old-qvSECRET"), challenge);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kAuthorizationRequired) << r.error().message;
    EXPECT_NE(r.error().message.find("read write"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("qvSECRET"), std::string::npos);
    EXPECT_FALSE(*f.manager->connected("linear", kAlice)) << "the refused tokens go";
    auto row = f.manager->tokens().step_up("linear", kAlice);
    ASSERT_TRUE(row.ok() && row->has_value());
    EXPECT_EQ((*row)->scope, "read write");
    EXPECT_EQ((*row)->attempts, attempt);
  }
  // The next authorization asks for the union.
  Result<AuthorizationStart> start = f.manager->begin(f.linear(), kAlice, in_ms(5000));
  ASSERT_TRUE(start.ok()) << start.error().message;
  EXPECT_NE(start->authorization_url.find("scope=read+write"), std::string::npos)
      << start->authorization_url;
  // One step-up too many: refused without a request, the tokens kept.
  f.put(a);
  const int calls = f.as.token_calls.load();
  Result<Secret> bounded =
      f.manager->step_up(f.linear(), kAlice, in_ms(5000), Secret("AT-old-qvSECRET"), challenge);
  ASSERT_FALSE(bounded.ok());
  EXPECT_EQ(bounded.error().code, ErrorCode::kUnauthenticated) << bounded.error().message;
  EXPECT_TRUE(*f.manager->connected("linear", kAlice));
  EXPECT_EQ(f.as.token_calls.load(), calls);
  // A listing that succeeded ends it.
  f.manager->listed("linear", kAlice);
  EXPECT_FALSE(f.manager->tokens().step_up("linear", kAlice)->has_value());
}

TEST(OAuthManagerTest, TwoAgentsOnOneTokenStoreRefreshOnce) {
  Fixture f;
  f.put(stored(f.as, "AT-expiring", "RT-shared", 10'000));
  std::unique_ptr<OAuthManager> other = manager_for(f.cfg, "agent-b");
  ASSERT_NE(other, nullptr);
  f.as.delay_ms = 400;  // the refresh is in flight while the others ask
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      OAuthManager& m = i % 2 == 0 ? *f.manager : *other;
      Result<Secret> t = m.access_token(f.linear(), kAlice, in_ms(8000));
      got[i] = t.ok() ? t->reveal() : "error: " + t.error().message;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f.as.token_calls.load(), 1);
  for (const std::string& g : got) EXPECT_EQ(g, "AT-1-qvSECRETaccess");
}

}  // namespace
}  // namespace quiver
