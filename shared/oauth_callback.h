// GET /v1/oauth/callback, the redirect back from an authorization server (shared/oauth.h), at
// both hosts: the query checked and bounded the same way, the page the browser is answered with,
// and the outcome record an agent writes for the edge.
//
// At the agent the callback completes the authorization itself (OAuthManager::complete). At the
// edge, which holds neither the PKCE verifier nor a client secret, it is queued for the agents
// in the stream `quiver:{ns}:oauth-callbacks` (schema/redis-keys.md; the short-lived code only,
// never a token) and the page says what an agent reported in `quiver:{ns}:oauth-result:<sha256
// of state>`, or that the callback was received and is being finished.
//
// The page is small and self-contained: no script, no external resource, no form; a strict
// Content-Security-Policy, `Referrer-Policy: no-referrer` (the URL it answers holds the code),
// `Cache-Control: no-store`. It names the connection or the reason of a failure, HTML-escaped,
// never a code, state or token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/discovery_http.h"
#include "shared/json.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

inline constexpr char kOAuthCallbackPath[] = "/v1/oauth/callback";

// Bounds on the callback's query (a real code is a few hundred bytes; these leave room).
inline constexpr std::size_t kMaxCallbackQueryBytes = 8192;
inline constexpr std::size_t kMaxCallbackStateBytes = 512;
inline constexpr std::size_t kMaxCallbackCodeBytes = 4096;
inline constexpr std::size_t kMaxCallbackIssBytes = 2048;
inline constexpr std::size_t kMaxCallbackErrorBytes = 256;
inline constexpr std::size_t kMaxCallbackErrorDescriptionBytes = 1024;

// The query of a redirect back: `state` (required), `code` or `error` (one of them),
// `iss`, `error_description`; each at most once and within its bound, valid UTF-8 without control
// characters. Other parameters (identity providers add some: `scope`, `session_state`, ...) are
// ignored. kInvalidArgument with a message that names the problem and never a value.
Result<oauth::CallbackParams> parse_oauth_callback(std::string_view query);

// What a callback came to.
enum class OAuthCallbackOutcome {
  kConnected = 0,  // the authorization is stored: `connection` names it
  kFailed,         // `message` says why (never a secret)
  kReceived,       // (edge) queued for the agents, no outcome yet
};

struct OAuthCallbackResult {
  OAuthCallbackOutcome outcome = OAuthCallbackOutcome::kReceived;
  std::string connection;  // the connection's id (connected)
  std::string message;     // why it failed; empty otherwise
};

// The record an agent writes to `oauth-result:<sha256(state)>` and the edge reads:
// {"status": "connected" | "failed", "connection"?, "message"?}. A record that cannot be read is
// nullopt (the page then says the callback was received).
std::string oauth_result_record(const OAuthCallbackResult& result);
std::optional<OAuthCallbackResult> parse_oauth_result_record(std::string_view text);

// The page: 200 for connected or received, 400 for failed.
HttpResponse oauth_callback_page(const OAuthCallbackResult& result);
// A callback that could not be read at all (bad query, a method other than GET): `status` 400 or
// 405, the reason on the page.
HttpResponse oauth_callback_refusal(int status, std::string_view reason);

// Text for HTML: & < > " ' escaped.
std::string html_escape(std::string_view text);

}  // namespace quiver
