// OAuthFlow (shared/oauth.h): discovery, client choice, authorization code with PKCE, the token
// requests and their client authentication, as a state machine that asks its host for each HTTP
// request.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/json.h"
#include "shared/oauth.h"
#include "shared/oauth_internal.h"
#include "shared/sha256.h"
#include "shared/status.h"

namespace quiver::oauth {

using internal::clip_text;
using internal::form_body;
using internal::is_allowed_endpoint;
using internal::join_scopes;
using internal::scope_union;
using internal::split_scopes;

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

enum class Phase {
  kProtectedResource,  // fetching protected-resource metadata (prm_urls[index])
  kServerMetadata,     // fetching authorization-server metadata (as_urls[index])
  kRegister,           // dynamic client registration
  kToken,              // a token request
  kUser,               // waiting for the browser
  kDone,
  kFailed,
};

enum class TokenKind { kCode, kRefresh, kClientCredentials };

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The key type of a PEM private key: "ES256" for EC, "RS256" for RSA, from the PEM label or the
// algorithm OID inside a PKCS#8 key.
std::string signing_alg(std::string_view pem) {
  if (pem.find("BEGIN EC PRIVATE KEY") != std::string_view::npos) return "ES256";
  if (pem.find("BEGIN RSA PRIVATE KEY") != std::string_view::npos) return "RS256";
  std::size_t begin = pem.find("-----BEGIN PRIVATE KEY-----");
  std::size_t end = pem.find("-----END PRIVATE KEY-----");
  if (begin != std::string_view::npos && end != std::string_view::npos && end > begin) {
    begin += std::string_view("-----BEGIN PRIVATE KEY-----").size();
    std::optional<std::string> der = base64_decode(pem.substr(begin, end - begin));
    static const char kRsaOid[] = "\x06\x09\x2a\x86\x48\x86\xf7\x0d\x01\x01\x01";
    if (der && der->find(std::string_view(kRsaOid, 11)) != std::string::npos) return "RS256";
  }
  return "ES256";
}

// Whether `prm_resource` names the server at `server_url`: the same origin, and the server's path
// within the resource's path (RFC 9728 §3.3 as the MCP SDKs apply it).
bool resource_matches(std::string_view prm_resource, std::string_view server_url) {
  std::optional<internal::UrlParts> r = internal::parse_url(prm_resource);
  std::optional<internal::UrlParts> s = internal::parse_url(server_url);
  if (!r || !s || r->origin() != s->origin()) return false;
  std::string rp = r->path;
  std::string sp = s->path;
  while (!rp.empty() && rp.back() == '/') rp.pop_back();
  while (!sp.empty() && sp.back() == '/') sp.pop_back();
  if (rp.empty()) return true;
  return sp == rp ||
         (sp.size() > rp.size() && sp.compare(0, rp.size(), rp) == 0 && sp[rp.size()] == '/');
}

}  // namespace

struct OAuthFlow::Impl {
  OAuthClientSettings settings;
  OAuthHost host;
  std::string server_url;
  std::optional<BearerChallenge> challenge;
  std::optional<RegisteredClient> known_client;
  std::vector<std::string> extra_scopes;  // step-up: what was granted before

  Phase phase = Phase::kFailed;
  std::optional<HttpRequest> request;
  std::vector<std::string> prm_urls;
  std::size_t prm_index = 0;
  std::vector<std::string> as_urls;
  std::size_t as_index = 0;
  bool legacy = false;  // no protected-resource metadata: the 2025-03-26 rules
  std::string issuer;
  std::optional<ProtectedResourceMetadata> prm;

  AuthorizationServerMetadata server;
  RegisteredClient client;
  std::string resource;  // as sent; empty: not sent
  std::vector<std::string> scopes;
  TokenKind token_kind = TokenKind::kCode;
  TokenSet previous_tokens;  // refresh: kept fields the answer leaves out

  std::string authorization_url;
  PendingAuthorization pending;
  Authorization authorization;
  Error error;

  void fail(ErrorCode code, std::string message) {
    phase = Phase::kFailed;
    request.reset();
    error = Error(code, std::move(message));
  }
  void fail(Error e) {
    phase = Phase::kFailed;
    request.reset();
    error = std::move(e);
  }

  bool send(Phase next, HttpRequest req) {
    if (!is_allowed_endpoint(req.url)) {
      fail(ErrorCode::kInvalidReply, "OAuth endpoint " +
                                         clip_text(req.url.substr(0, req.url.find('?'))) +
                                         " is neither https nor a loopback http URL");
      return false;
    }
    phase = next;
    request = std::move(req);
    return true;
  }

  static HttpRequest get(std::string url) {
    HttpRequest r;
    r.method = "GET";
    r.url = std::move(url);
    r.headers = {{"Accept", "application/json"}};
    return r;
  }

  Result<std::string> random_token() {
    if (!host.random_bytes)
      return Error(ErrorCode::kResourceUnavailable, "OAuth: no random source");
    Result<std::string> bytes = host.random_bytes(32);
    if (!bytes.ok()) return bytes.error();
    if (bytes->size() != 32)
      return Error(ErrorCode::kResourceUnavailable, "OAuth: short random read");
    return base64url_encode(*bytes);
  }
  int64_t now() const { return host.now_ms ? host.now_ms() : 0; }

  // ---- discovery --------------------------------------------------------------------------------

  void start_discovery() {
    if (!internal::parse_url(server_url)) {
      fail(ErrorCode::kInvalidArgument, "OAuth: the server URL is not an absolute http(s) URL");
      return;
    }
    if (challenge && challenge->resource_metadata)
      prm_urls.push_back(*challenge->resource_metadata);
    for (std::string& u : protected_resource_metadata_urls(server_url)) {
      if (!contains(prm_urls, u)) prm_urls.push_back(std::move(u));
    }
    next_prm();
  }

  void next_prm() {
    while (prm_index < prm_urls.size()) {
      const std::string& url = prm_urls[prm_index];
      if (is_allowed_endpoint(url)) {
        send(Phase::kProtectedResource, get(url));
        return;
      }
      ++prm_index;  // a challenge's URL we may not fetch: try the well-known ones
    }
    // 2025-03-26: the MCP server's origin is the authorization server.
    legacy = true;
    issuer = internal::parse_url(server_url)->origin();
    start_server_metadata();
  }

  void on_prm(const Result<HttpResponse>& r) {
    if (r.ok() && r->status == 200) {
      Result<ProtectedResourceMetadata> m = parse_protected_resource_metadata(r->body);
      if (m.ok()) {
        if (!resource_matches(m->resource, server_url)) {
          fail(ErrorCode::kInvalidReply, "protected resource metadata names the resource '" +
                                             clip_text(m->resource) + "', not this server");
          return;
        }
        if (m->authorization_servers.empty()) {
          fail(ErrorCode::kInvalidReply,
               "protected resource metadata lists no authorization server");
          return;
        }
        issuer = m->authorization_servers.front();
        prm = std::move(*m);
        start_server_metadata();
        return;
      }
    }
    ++prm_index;
    next_prm();
  }

  void start_server_metadata() {
    as_urls = authorization_server_metadata_urls(issuer);
    if (as_urls.empty()) {
      fail(ErrorCode::kInvalidReply,
           "authorization server '" + clip_text(issuer) + "' is not an http(s) URL");
      return;
    }
    as_index = 0;
    send(Phase::kServerMetadata, get(as_urls[0]));
  }

  void on_server_metadata(const Result<HttpResponse>& r) {
    if (r.ok() && r->status == 200) {
      Result<AuthorizationServerMetadata> m = parse_authorization_server_metadata(r->body, issuer);
      if (!m.ok()) {
        fail(m.error());
        return;
      }
      server = std::move(*m);
      after_discovery();
      return;
    }
    if (++as_index < as_urls.size()) {
      send(Phase::kServerMetadata, get(as_urls[as_index]));
      return;
    }
    if (!legacy) {
      fail(ErrorCode::kInvalidReply,
           "no authorization server metadata for '" + clip_text(issuer) + "'");
      return;
    }
    server = AuthorizationServerMetadata();
    server.issuer = issuer;
    server.authorization_endpoint = issuer + "/authorize";
    server.token_endpoint = issuer + "/token";
    server.registration_endpoint = issuer + "/register";
    server.defaults = true;
    after_discovery();
  }

  // ---- the client and the authorization request -------------------------------------------------

  void choose_scopes() {
    if (!settings.scopes.empty()) {
      scopes = settings.scopes;
    } else if (challenge && challenge->scope && !split_scopes(*challenge->scope).empty()) {
      scopes = split_scopes(*challenge->scope);
    } else if (prm && !prm->scopes_supported.empty()) {
      scopes = prm->scopes_supported;
    } else {
      scopes.clear();
    }
    scopes = scope_union(std::move(scopes), extra_scopes);
    bool offline_listed = contains(server.scopes_supported, "offline_access");
    if (!offline_listed) {
      scopes.erase(std::remove(scopes.begin(), scopes.end(), "offline_access"), scopes.end());
    } else if (settings.grant == GrantType::kAuthorizationCode &&
               !contains(scopes, "offline_access")) {
      scopes.push_back("offline_access");
    }
  }

  std::string choose_auth_method(bool has_secret) const {
    if (!settings.token_endpoint_auth_method.empty()) return settings.token_endpoint_auth_method;
    const std::vector<std::string>& supported = server.token_endpoint_auth_methods_supported;
    if (!settings.private_key_pem.empty() &&
        (supported.empty() || contains(supported, "private_key_jwt"))) {
      return "private_key_jwt";
    }
    if (has_secret) {
      if (supported.empty() || contains(supported, "client_secret_basic"))
        return "client_secret_basic";
      if (contains(supported, "client_secret_post")) return "client_secret_post";
      return "client_secret_basic";
    }
    return "none";
  }

  void after_discovery() {
    // PKCE (2025-11-25 authorization, "Authorization Code Protection"): a server whose metadata
    // lists no code_challenge_methods_supported does not support PKCE, and the client must refuse
    // to go on. Only the 2025-03-26 defaults (no metadata document at all) assume S256.
    if (settings.grant == GrantType::kAuthorizationCode && !server.defaults) {
      if (server.code_challenge_methods_supported.empty()) {
        fail(ErrorCode::kInvalidReply,
             "authorization server '" + clip_text(server.issuer) +
                 "' does not advertise PKCE (its metadata has no "
                 "code_challenge_methods_supported); refusing to authorize without it");
        return;
      }
      if (!contains(server.code_challenge_methods_supported, "S256")) {
        fail(ErrorCode::kInvalidReply,
             "authorization server '" + clip_text(server.issuer) + "' does not support PKCE S256");
        return;
      }
    }
    resource = settings.send_resource ? (prm ? prm->resource : canonical_resource(server_url))
                                      : std::string();
    choose_scopes();
    if (known_client && known_client->issuer == server.issuer && !known_client->client_id.empty() &&
        registration_covers(*known_client)) {
      client = *known_client;
      after_client();
      return;
    }
    client = RegisteredClient();
    client.issuer = server.issuer;
    if (!settings.client_id.empty()) {
      client.client_id = settings.client_id;
      client.client_secret = settings.client_secret;
      client.token_endpoint_auth_method = choose_auth_method(!settings.client_secret.empty());
      after_client();
      return;
    }
    if (settings.grant == GrantType::kClientCredentials) {
      fail(ErrorCode::kInvalidArgument, "OAuth: the client_credentials grant needs a client id");
      return;
    }
    if (server.client_id_metadata_document_supported && !settings.client_id_metadata_url.empty()) {
      client.client_id = settings.client_id_metadata_url;
      client.token_endpoint_auth_method = choose_auth_method(false);
      after_client();
      return;
    }
    if (server.registration_endpoint.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "authorization server '" + clip_text(server.issuer) +
               "' offers no dynamic registration: configure a client id");
      return;
    }
    register_client();
  }

  // The scopes a registration may name: those of `scopes` the authorization server lists.
  std::vector<std::string> registrable_scopes() const {
    std::vector<std::string> known;
    for (const std::string& scope : scopes) {
      if (contains(server.scopes_supported, scope)) known.push_back(scope);
    }
    return known;
  }

  // Whether a known client may ask for `scopes`: a dynamic registration that named scopes must
  // name every registrable one (servers refuse a client asking beyond its registration).
  bool registration_covers(const RegisteredClient& c) const {
    if (!c.dynamic || c.scopes.empty()) return true;
    for (const std::string& scope : registrable_scopes()) {
      if (!contains(c.scopes, scope)) return false;
    }
    return true;
  }

  void register_client() {
    std::string method = choose_auth_method(false);
    if (settings.token_endpoint_auth_method.empty() && settings.private_key_pem.empty()) {
      method = "none";
    }
    Json body = Json::object();
    body["client_name"] = settings.client_name;
    body["redirect_uris"] = Json::array({settings.redirect_uri});
    Json grants = Json::array({"authorization_code", "refresh_token"});
    body["grant_types"] = grants;
    body["response_types"] = Json::array({"code"});
    body["token_endpoint_auth_method"] = method;
    body["application_type"] = settings.application_type;
    // The registration names only scopes the authorization server itself lists: the resource's
    // scopes (the challenge's, the protected-resource metadata's) are asked for at authorization
    // time, and servers such as oidc-provider refuse a registration naming a scope they do not know
    // (invalid_client_metadata).
    const std::vector<std::string> known = registrable_scopes();
    if (!known.empty()) body["scope"] = join_scopes(known);
    client.scopes = known;
    HttpRequest r;
    r.method = "POST";
    r.url = server.registration_endpoint;
    r.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}};
    r.body = body.dump();
    send(Phase::kRegister, std::move(r));
  }

  void on_register(const Result<HttpResponse>& r) {
    if (!r.ok()) {
      fail(r.error());
      return;
    }
    if (r->status != 200 && r->status != 201) {
      std::string msg = "dynamic registration at '" + clip_text(server.registration_endpoint) +
                        "': HTTP " + std::to_string(r->status);
      Result<Json> j = parse_json(r->body, kMaxResponseBytes);
      if (j.ok() && j->is_object()) {
        std::string e = json_string(*j, "error").value_or("");
        if (!e.empty()) msg += " " + clip_text(e, 64);
      }
      fail(ErrorCode::kInvalidReply, msg);
      return;
    }
    Result<Json> j = parse_json(r->body, kMaxResponseBytes);
    if (!j.ok() || !j->is_object()) {
      fail(ErrorCode::kInvalidReply, "dynamic registration: the answer is not a JSON object");
      return;
    }
    std::optional<std::string> id = json_string(*j, "client_id");
    if (!id || id->empty()) {
      fail(ErrorCode::kInvalidReply, "dynamic registration: no client_id");
      return;
    }
    client.client_id = *id;
    client.client_secret = json_string(*j, "client_secret").value_or("");
    client.dynamic = true;
    if (std::optional<std::string> granted = json_string(*j, "scope"); granted.has_value()) {
      client.scopes = split_scopes(*granted);
    }
    client.client_secret_expires_at_ms =
        json_int(*j, "client_secret_expires_at").value_or(0) * 1000;
    std::string method = json_string(*j, "token_endpoint_auth_method").value_or("");
    if (method.empty()) method = client.client_secret.empty() ? "none" : "client_secret_basic";
    client.token_endpoint_auth_method = method;
    after_client();
  }

  void after_client() {
    if (settings.grant == GrantType::kClientCredentials) {
      token_kind = TokenKind::kClientCredentials;
      Fields f = {{"grant_type", "client_credentials"}};
      if (!scopes.empty()) f.emplace_back("scope", join_scopes(scopes));
      if (!resource.empty()) f.emplace_back("resource", resource);
      if (!settings.audience.empty()) f.emplace_back("audience", settings.audience);
      token_request(std::move(f));
      return;
    }
    if (server.authorization_endpoint.empty()) {
      fail(ErrorCode::kInvalidReply, "authorization server '" + clip_text(server.issuer) +
                                         "' publishes no authorization_endpoint");
      return;
    }
    if (!is_allowed_endpoint(server.authorization_endpoint)) {
      fail(ErrorCode::kInvalidReply, "authorization endpoint is neither https nor loopback http");
      return;
    }
    if (settings.redirect_uri.empty()) {
      fail(ErrorCode::kInvalidArgument, "OAuth: no redirect URI for the authorization code flow");
      return;
    }
    Result<std::string> state = random_token();
    Result<std::string> verifier = state.ok() ? random_token() : state;
    if (!verifier.ok()) {
      fail(verifier.error());
      return;
    }
    pending = PendingAuthorization();
    pending.state = *state;
    pending.code_verifier = *verifier;
    pending.redirect_uri = settings.redirect_uri;
    pending.resource = resource;
    pending.scopes = scopes;
    pending.server = server;
    pending.client = client;
    pending.created_at_ms = now();
    pending.expires_at_ms = pending.created_at_ms + kPendingTtlMs;
    Fields q = {{"response_type", "code"},
                {"client_id", client.client_id},
                {"redirect_uri", settings.redirect_uri},
                {"code_challenge", pkce_s256(pending.code_verifier)},
                {"code_challenge_method", "S256"},
                {"state", pending.state}};
    if (!scopes.empty()) q.emplace_back("scope", join_scopes(scopes));
    if (!resource.empty()) q.emplace_back("resource", resource);
    if (!settings.audience.empty()) q.emplace_back("audience", settings.audience);
    const std::string& ep = server.authorization_endpoint;
    authorization_url = ep + (ep.find('?') == std::string::npos ? "?" : "&") + form_body(q);
    phase = Phase::kUser;
  }

  // ---- token requests ---------------------------------------------------------------------------

  Result<std::string> client_assertion() {
    if (!host.sign) {
      return Error(ErrorCode::kInvalidArgument, "OAuth: private_key_jwt needs a private key");
    }
    std::string alg = signing_alg(settings.private_key_pem);
    Result<std::string> jti = random_token();
    if (!jti.ok()) return jti.error();
    int64_t iat = now() / 1000;
    Json header = {{"alg", alg}, {"typ", "JWT"}};
    if (!settings.private_key_id.empty()) header["kid"] = settings.private_key_id;
    Json claims = {{"iss", client.client_id},
                   {"sub", client.client_id},
                   {"aud", server.issuer},
                   {"jti", *jti},
                   {"iat", iat},
                   {"exp", iat + 300}};
    std::string input = base64url_encode(header.dump()) + "." + base64url_encode(claims.dump());
    Result<std::string> sig = host.sign(alg, input);
    if (!sig.ok()) return sig.error();
    return input + "." + base64url_encode(*sig);
  }

  void token_request(Fields fields) {
    HttpRequest r;
    r.method = "POST";
    r.url = server.token_endpoint;
    r.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                 {"Accept", "application/json"}};
    const std::string& method = client.token_endpoint_auth_method;
    if (method == "client_secret_basic") {
      std::string pair = internal::form_encode(client.client_id) + ":" +
                         internal::form_encode(client.client_secret);
      r.headers.emplace_back("Authorization", "Basic " + base64_encode(pair));
    } else if (method == "client_secret_post") {
      fields.emplace_back("client_id", client.client_id);
      fields.emplace_back("client_secret", client.client_secret);
    } else if (method == "private_key_jwt") {
      Result<std::string> jwt = client_assertion();
      if (!jwt.ok()) {
        fail(jwt.error());
        return;
      }
      fields.emplace_back("client_id", client.client_id);
      fields.emplace_back("client_assertion_type",
                          "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
      fields.emplace_back("client_assertion", *jwt);
    } else if (method == "none" || method.empty()) {
      fields.emplace_back("client_id", client.client_id);
    } else {
      fail(ErrorCode::kInvalidArgument,
           "OAuth: token endpoint auth method '" + clip_text(method, 40) + "' is not supported");
      return;
    }
    r.body = form_body(fields);
    send(Phase::kToken, std::move(r));
  }

  void on_token(const Result<HttpResponse>& r) {
    if (!r.ok()) {
      fail(r.error());
      return;
    }
    Result<TokenSet> t = parse_token_response(*r, now());
    if (!t.ok()) {
      fail(t.error());
      return;
    }
    if (t->scope.empty()) t->scope = join_scopes(scopes);
    if (token_kind == TokenKind::kRefresh && t->refresh_token.empty()) {
      t->refresh_token = previous_tokens.refresh_token;
    }
    authorization.resource = resource;
    authorization.server = server;
    authorization.client = client;
    authorization.tokens = std::move(*t);
    phase = Phase::kDone;
  }

  // A flow that starts at the token endpoint (resume, refresh): discovery and the client are known.
  static std::unique_ptr<Impl> at_token_endpoint(OAuthClientSettings settings, OAuthHost host,
                                                 AuthorizationServerMetadata server,
                                                 RegisteredClient client, std::string resource) {
    auto impl = std::make_unique<Impl>();
    impl->settings = std::move(settings);
    impl->host = std::move(host);
    impl->server = std::move(server);
    impl->client = std::move(client);
    impl->resource = std::move(resource);
    return impl;
  }

  void handle(Result<HttpResponse> r) {
    if (r.ok() && r->body.size() > kMaxResponseBytes) {
      r = Error(ErrorCode::kTooLarge, "OAuth: a response larger than 256 KiB");
    }
    switch (phase) {
      case Phase::kProtectedResource:
        on_prm(r);
        break;
      case Phase::kServerMetadata:
        on_server_metadata(r);
        break;
      case Phase::kRegister:
        on_register(r);
        break;
      case Phase::kToken:
        on_token(r);
        break;
      default:
        break;
    }
  }
};

OAuthFlow::OAuthFlow(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OAuthFlow::OAuthFlow(OAuthFlow&&) noexcept = default;
OAuthFlow& OAuthFlow::operator=(OAuthFlow&&) noexcept = default;
OAuthFlow::~OAuthFlow() = default;

OAuthFlow OAuthFlow::authorize(std::string server_url, OAuthClientSettings settings, OAuthHost host,
                               std::optional<BearerChallenge> challenge,
                               std::optional<RegisteredClient> known_client) {
  auto impl = std::make_unique<Impl>();
  impl->server_url = std::move(server_url);
  impl->settings = std::move(settings);
  impl->host = std::move(host);
  impl->challenge = std::move(challenge);
  impl->known_client = std::move(known_client);
  impl->start_discovery();
  return OAuthFlow(std::move(impl));
}

OAuthFlow OAuthFlow::resume(PendingAuthorization pending, const CallbackParams& callback,
                            OAuthClientSettings settings, OAuthHost host) {
  auto impl = Impl::at_token_endpoint(std::move(settings), std::move(host), pending.server,
                                      pending.client, pending.resource);
  Impl& f = *impl;
  f.scopes = pending.scopes;
  f.token_kind = TokenKind::kCode;
  if (!constant_time_equal(callback.state, pending.state)) {
    f.fail(ErrorCode::kInvalidArgument, "OAuth callback: the state does not match");
  } else if (pending.expires_at_ms != 0 && f.now() > pending.expires_at_ms) {
    f.fail(ErrorCode::kInvalidArgument, "OAuth callback: the authorization request expired");
  } else if (callback.error) {
    std::string msg =
        "OAuth callback: the authorization server answered " + clip_text(*callback.error, 64);
    if (callback.error_description) msg += " (" + clip_text(*callback.error_description) + ")";
    f.fail(*callback.error == "access_denied" ? ErrorCode::kUnauthenticated
                                              : ErrorCode::kInvalidArgument,
           msg);
  } else if (callback.iss && *callback.iss != pending.server.issuer) {
    f.fail(ErrorCode::kInvalidArgument, "OAuth callback: iss '" + clip_text(*callback.iss) +
                                            "' is not the issuer '" +
                                            clip_text(pending.server.issuer) + "'");
  } else if (!callback.iss && pending.server.authorization_response_iss_parameter_supported) {
    f.fail(ErrorCode::kInvalidArgument,
           "OAuth callback: no iss although the authorization server promises one (RFC 9207)");
  } else if (!callback.code || callback.code->empty()) {
    f.fail(ErrorCode::kInvalidArgument, "OAuth callback: no code");
  } else {
    Fields fields = {{"grant_type", "authorization_code"},
                     {"code", *callback.code},
                     {"code_verifier", pending.code_verifier},
                     {"redirect_uri", pending.redirect_uri}};
    if (!pending.resource.empty()) fields.emplace_back("resource", pending.resource);
    f.token_request(std::move(fields));
  }
  return OAuthFlow(std::move(impl));
}

OAuthFlow OAuthFlow::refresh(Authorization current, OAuthClientSettings settings, OAuthHost host) {
  auto impl = Impl::at_token_endpoint(std::move(settings), std::move(host), current.server,
                                      current.client, current.resource);
  Impl& f = *impl;
  f.scopes = split_scopes(current.tokens.scope);
  f.previous_tokens = current.tokens;
  if (!current.tokens.refresh_token.empty()) {
    f.token_kind = TokenKind::kRefresh;
    Fields fields = {{"grant_type", "refresh_token"},
                     {"refresh_token", current.tokens.refresh_token}};
    if (!f.resource.empty()) fields.emplace_back("resource", f.resource);
    f.token_request(std::move(fields));
  } else if (f.settings.grant == GrantType::kClientCredentials) {
    f.after_client();
  } else {
    f.fail(ErrorCode::kAuthorizationRequired,
           "OAuth: no refresh token; the connection must be authorized again");
  }
  return OAuthFlow(std::move(impl));
}

OAuthFlow OAuthFlow::step_up(Authorization current, const BearerChallenge& challenge, int attempt,
                             std::string server_url, OAuthClientSettings settings, OAuthHost host) {
  if (attempt > kMaxStepUps) {
    auto impl = std::make_unique<Impl>();
    impl->fail(ErrorCode::kUnauthenticated, "OAuth: the server still asks for more scope after " +
                                                std::to_string(kMaxStepUps) + " step-up attempts");
    return OAuthFlow(std::move(impl));
  }
  std::vector<std::string> granted = split_scopes(current.tokens.scope);
  std::vector<std::string> wanted = split_scopes(challenge.scope.value_or(""));
  settings.scopes = scope_union(scope_union(settings.scopes, granted), wanted);
  auto impl = std::make_unique<Impl>();
  impl->server_url = std::move(server_url);
  impl->settings = std::move(settings);
  impl->host = std::move(host);
  impl->challenge = challenge;
  impl->known_client = current.client;
  impl->start_discovery();
  return OAuthFlow(std::move(impl));
}

FlowStep OAuthFlow::step() const {
  switch (impl_->phase) {
    case Phase::kUser:
      return FlowStep::kNeedsUser;
    case Phase::kDone:
      return FlowStep::kDone;
    case Phase::kFailed:
      return FlowStep::kFailed;
    default:
      return FlowStep::kNeedsHttp;
  }
}

std::optional<HttpRequest> OAuthFlow::poll_request() {
  std::optional<HttpRequest> r = std::move(impl_->request);
  impl_->request.reset();
  return r;
}

void OAuthFlow::handle_response(Result<HttpResponse> response) {
  impl_->handle(std::move(response));
}

const std::string& OAuthFlow::authorization_url() const { return impl_->authorization_url; }
const PendingAuthorization& OAuthFlow::pending() const { return impl_->pending; }
const Authorization& OAuthFlow::authorization() const { return impl_->authorization; }
const Error& OAuthFlow::error() const { return impl_->error; }

}  // namespace quiver::oauth
