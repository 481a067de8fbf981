// The OAuth 2.1 client of the MCP authorization spec (2025-06-18, 2025-11-25, 2026-07-28),
// sans-I/O.
//
// Like McpSession, nothing here does I/O, reads a clock or draws randomness: an `OAuthFlow` says
// which HTTP request to make next (`poll_request`), the host performs it and hands back the
// response (`handle_response`), until the flow needs the user (`kNeedsUser`: send the browser to
// `authorization_url()`), is done (`kDone`: tokens()) or failed (`kFailed`: error()). Randomness,
// the time and JWT signatures come from the host (`OAuthHost`). The native agent performs the
// requests over cpp-httplib (native-agent/upstream/oauth_http.h); the same code could run in the
// edge's wasm build.
//
// What a flow does, per the spec
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization):
// - Discovery, starting from the upstream's 401: the Bearer challenge's `resource_metadata`, else
//   the path-based then the root protected-resource metadata (RFC 9728 §3.1); the authorization
//   server's metadata (RFC 8414 path-aware, then OpenID discovery, both orders as the spec lists),
//   with the strict issuer check (the document's `issuer` equals the URL it was derived from);
//   metadata whose `resource` is not this server is refused (kInvalidReply). 2025-03-26 fallbacks:
//   no protected-resource metadata → the server's origin is the authorization server; no
//   authorization-server metadata → `/authorize`, `/token`, `/register` at that origin.
// - The client: pre-registered (`OAuthClientSettings::client_id`), else a client ID metadata
//   document URL when the server advertises `client_id_metadata_document_supported`, else dynamic
//   registration (RFC 7591, `application_type`, the redirect URI, the auth method chosen). A
//   registration is bound to its issuer: another issuer registers again.
// - Authorization code with PKCE S256 (refused when the server's metadata lists methods without
//   S256), `state`, `resource` (RFC 8707) exactly as the metadata publishes it (unless
//   `send_resource` is off), `iss` on the callback (RFC 9207: required to equal the issuer when the
//   metadata says `authorization_response_iss_parameter_supported`, checked when present).
// - Scopes: the settings' scopes, else the challenge's `scope`, else `scopes_supported`, else none;
//   `offline_access` added only when the server lists it. Step-up on a 403 `insufficient_scope`:
//   the union of what was granted and what the challenge asks, at most kMaxStepUps times.
// - Token endpoint auth: client_secret_basic, client_secret_post, none, private_key_jwt
//   (RFC 7523 client assertion, signed by the host); the `client_credentials` grant.
// - Refresh (`OAuthFlow::refresh`): the refresh_token grant; `invalid_grant` →
//   kAuthorizationRequired (someone must authorize again), other failures keep their codes.
//
// Errors carry no secret: tokens, codes, verifiers and client secrets never appear in messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/json.h"
#include "shared/status.h"

namespace quiver::oauth {

inline constexpr int kMaxStepUps = 3;
// Bounds the host applies to every response body of a flow (metadata, registration, token).
inline constexpr std::size_t kMaxResponseBytes = std::size_t{256} << 10;

// ---- HTTP, as data ------------------------------------------------------------------------------

struct HttpRequest {
  std::string method;  // "GET" or "POST"
  std::string url;  // absolute https (http only for loopback hosts; the host's URL guard decides)
  std::vector<std::pair<std::string, std::string>> headers;  // may hold a secret (Authorization)
  std::string body;  // form-encoded or JSON; may hold secrets: never log it
};

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // First header of that name, case-insensitively.
  std::optional<std::string> header(std::string_view name) const;
};

// ---- documents (pure parsers; each is fuzzed in tests/fuzz/oauth_fuzz.cpp) ---------------------

// One Bearer challenge of a `WWW-Authenticate` value (RFC 6750 §3, RFC 9728 §5.1); auth-params
// may be tokens or quoted strings, and several challenges may share one header value.
struct BearerChallenge {
  std::optional<std::string> resource_metadata;
  std::optional<std::string> scope;
  std::optional<std::string> error;  // "invalid_token", "insufficient_scope", ...
  std::optional<std::string> error_description;
};
// nullopt when the value holds no Bearer challenge; kInvalidArgument when it cannot be parsed.
Result<std::optional<BearerChallenge>> parse_www_authenticate(std::string_view value);

struct ProtectedResourceMetadata {  // RFC 9728
  std::string resource;
  std::vector<std::string> authorization_servers;
  std::vector<std::string> scopes_supported;
};
Result<ProtectedResourceMetadata> parse_protected_resource_metadata(std::string_view body);

struct AuthorizationServerMetadata {  // RFC 8414 / OpenID Connect Discovery
  std::string issuer;
  std::string authorization_endpoint;
  std::string token_endpoint;
  std::string registration_endpoint;  // empty: no dynamic registration
  std::vector<std::string> scopes_supported;
  std::vector<std::string> grant_types_supported;
  std::vector<std::string> code_challenge_methods_supported;
  std::vector<std::string> token_endpoint_auth_methods_supported;
  bool client_id_metadata_document_supported = false;
  bool authorization_response_iss_parameter_supported = false;
  bool defaults = false;  // built from the 2025-03-26 fallback endpoints, not fetched
  Json to_json() const;
  static Result<AuthorizationServerMetadata> from_json(const Json& j);
};
// kInvalidReply when required fields are missing or `issuer` is not `expected_issuer`.
Result<AuthorizationServerMetadata> parse_authorization_server_metadata(
    std::string_view body, std::string_view expected_issuer);

// The URLs to try, in the spec's order.
std::vector<std::string> protected_resource_metadata_urls(std::string_view server_url);
std::vector<std::string> authorization_server_metadata_urls(std::string_view issuer);
// The canonical resource URI of an MCP server URL (RFC 8707 / the spec: scheme and host lower
// case, no fragment, no trailing slash unless meaningful).
std::string canonical_resource(std::string_view server_url);

// ---- tokens and clients -------------------------------------------------------------------------

struct TokenSet {
  std::string access_token;
  std::string token_type = "Bearer";
  std::string refresh_token;  // empty: none issued
  std::string scope;          // as granted (space-separated); empty: as requested
  int64_t expires_at_ms = 0;  // 0: the server said nothing (the host refreshes only on a 401)
  int64_t obtained_at_ms = 0;
  Json to_json() const;  // holds secrets: only the token store, encrypted, may keep it
  static Result<TokenSet> from_json(const Json& j);
};
// A token endpoint's answer. kAuthorizationRequired for `invalid_grant`; kUnauthenticated for
// `invalid_client` / `unauthorized_client`; kInvalidReply for garbage (message names the OAuth
// `error` and a clipped `error_description`, never a token).
Result<TokenSet> parse_token_response(const HttpResponse& response, int64_t now_ms);

// The client identity used with one authorization server.
struct RegisteredClient {
  std::string issuer;
  std::string client_id;
  std::string client_secret;               // empty: a public client
  std::string token_endpoint_auth_method;  // what the token requests use
  int64_t client_secret_expires_at_ms = 0;
  bool dynamic = false;  // obtained through dynamic registration (re-register on a new issuer)
  // The scopes a dynamic registration named (the server's answer, else the request's); empty: not
  // restricted. A flow that needs a listed scope the registration lacks (a step-up) registers anew.
  std::vector<std::string> scopes;
  Json to_json() const;
  static Result<RegisteredClient> from_json(const Json& j);
};

// ---- settings and host --------------------------------------------------------------------------

enum class GrantType { kAuthorizationCode = 0, kClientCredentials };

// Per connection (from `quiver.connections.<name>.oauth`, secrets revealed by the host).
struct OAuthClientSettings {
  GrantType grant = GrantType::kAuthorizationCode;
  std::string client_id;                   // pre-registered; empty: CIMD or dynamic registration
  std::string client_secret;               // pre-registered secret; empty: none
  std::string client_id_metadata_url;      // CIMD URL; used when the server supports it
  std::vector<std::string> scopes;         // empty: chosen as described above
  std::string token_endpoint_auth_method;  // empty: chosen from what the server supports
  std::string private_key_pem;  // private_key_jwt and client_credentials with a key (ES256/RS256)
  std::string private_key_id;   // the JWT header's kid; empty: none
  std::string audience;         // sent as `audience` where an identity provider needs it
  bool send_resource = true;    // false: omit `resource` (identity providers that refuse it)
  std::string redirect_uri;     // where the authorization server sends the browser back
  std::string client_name = "Quiver";
  std::string application_type = "web";  // "native" for loopback redirects (RFC 8252)
};

struct OAuthHost {
  // `n` cryptographically random bytes (state, PKCE verifier, JWT ids).
  std::function<Result<std::string>(std::size_t n)> random_bytes;
  std::function<int64_t()> now_ms;  // wall clock, ms since the epoch
  // Signs a JWS signing input with the settings' private key; returns the JWS signature bytes
  // (ES256: R||S, 64 bytes). `alg` is "ES256" or "RS256". Null: private_key_jwt unavailable.
  std::function<Result<std::string>(std::string_view alg, std::string_view signing_input)> sign;
};

// What an authorization-code flow keeps between sending the user away and the callback: it
// holds the PKCE verifier and may hold a client secret, so only the token store keeps it,
// encrypted, and only until it expires (kPendingTtlMs).
inline constexpr int64_t kPendingTtlMs = 10 * 60 * 1000;
struct PendingAuthorization {
  std::string state;
  std::string code_verifier;
  std::string redirect_uri;
  std::string resource;  // as sent; empty when not sent
  std::vector<std::string> scopes;
  AuthorizationServerMetadata server;
  RegisteredClient client;
  int64_t created_at_ms = 0;
  int64_t expires_at_ms = 0;
  Json to_json() const;
  static Result<PendingAuthorization> from_json(const Json& j);
};

// The query of a redirect back to us.
struct CallbackParams {
  std::string state;
  std::optional<std::string> code;
  std::optional<std::string> iss;
  std::optional<std::string> error;  // the authorization server's `error` (access_denied, ...)
  std::optional<std::string> error_description;
  // Parsed from a redirect's query by parse_oauth_callback (shared/oauth_callback.h), bounded.
};

// What a finished flow hands the host to store per (connection, principal, issuer).
struct Authorization {
  std::string resource;
  AuthorizationServerMetadata server;
  RegisteredClient client;
  TokenSet tokens;
  Json to_json() const;  // holds secrets: only the token store, encrypted, may keep it
  static Result<Authorization> from_json(const Json& j);
};

// ---- the flow -----------------------------------------------------------------------------------

enum class FlowStep {
  kNeedsHttp = 0,  // poll_request() has a request; perform it, then handle_response()
  kNeedsUser,      // send the user to authorization_url(); keep pending(); then resume(...)
  kDone,           // authorization() holds the tokens
  kFailed,         // error()
};

class OAuthFlow {
 public:
  // Authorization code (or client credentials when settings.grant says so) for the MCP server at
  // `server_url`, starting from its 401 challenge (nullopt: start from the metadata URLs). A
  // `known_client` registered with the same issuer is reused instead of registering again.
  static OAuthFlow authorize(std::string server_url, OAuthClientSettings settings, OAuthHost host,
                             std::optional<BearerChallenge> challenge,
                             std::optional<RegisteredClient> known_client = std::nullopt);
  // After the callback: checks state (equal to pending.state, not expired), `error`, `iss`, then
  // exchanges the code. kFailed with kInvalidArgument for a mismatch.
  static OAuthFlow resume(PendingAuthorization pending, const CallbackParams& callback,
                          OAuthClientSettings settings, OAuthHost host);
  // The refresh_token grant (client_credentials again when the authorization has no refresh
  // token and the grant is client credentials).
  static OAuthFlow refresh(Authorization current, OAuthClientSettings settings, OAuthHost host);
  // Step-up after a 403 insufficient_scope: a new authorization-code flow asking for the union of
  // the granted scopes and the challenge's. kFailed (kUnauthenticated) after kMaxStepUps.
  static OAuthFlow step_up(Authorization current, const BearerChallenge& challenge, int attempt,
                           std::string server_url, OAuthClientSettings settings, OAuthHost host);

  FlowStep step() const;
  // The next request (kNeedsHttp); nullopt otherwise. Each request is returned once.
  std::optional<HttpRequest> poll_request();
  // The response to the last request, or why there was none (transport error, timeout, too big).
  void handle_response(Result<HttpResponse> response);

  // kNeedsUser.
  const std::string& authorization_url() const;
  const PendingAuthorization& pending() const;
  // kDone.
  const Authorization& authorization() const;
  // kFailed.
  const Error& error() const;

  OAuthFlow(OAuthFlow&&) noexcept;
  OAuthFlow& operator=(OAuthFlow&&) noexcept;
  ~OAuthFlow();

 private:
  struct Impl;
  explicit OAuthFlow(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// PKCE S256 (RFC 7636 §4.2): BASE64URL(SHA256(verifier)), no padding.
std::string pkce_s256(std::string_view verifier);

}  // namespace quiver::oauth
