// Carries out the HTTP requests of an oauth::OAuthFlow (shared/oauth.h) for the agent: the URL
// guard (private addresses only when allowed), https except for loopback hosts, no redirects
// followed (a 3xx is a response the flow judges), a deadline for the whole exchange (Watchdog),
// and the response body bounded by oauth::kMaxResponseBytes (more is kTooLarge, never buffered
// whole). Errors name the redacted URL, never a header or a body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "native-agent/base/url_guard.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

struct OAuthHttpOptions {
  bool allow_private = false;  // the connection's (or probe's --allow-private)
  int64_t deadline_ms = 0;     // on the steady clock (native-agent/base/clock.h); 0: 10 s from now
  UrlGuardOptions guard;       // resolver etc.; allow_private overrides its private switch
};

// One request. kTimeout at the deadline, kTransport when no response came, kTooLarge over the
// bound; any HTTP status is a response.
Result<oauth::HttpResponse> perform_oauth_request(const oauth::HttpRequest& request,
                                                  const OAuthHttpOptions& options);

// Runs `flow` until it needs the user, is done or failed; each request within options' deadline.
void drive_oauth_flow(oauth::OAuthFlow& flow, const OAuthHttpOptions& options);

// Asks an MCP server (Streamable HTTP) for its Bearer challenge: an `initialize` POST without
// credentials. nullopt when it does not answer 401 with a Bearer challenge (no auth needed, or
// a server of the 2025-03-26 era without metadata: the flow falls back).
Result<std::optional<oauth::BearerChallenge>> fetch_bearer_challenge(
    const std::string& server_url, const OAuthHttpOptions& options);

// The agent's OAuthHost: OpenSSL's RAND_bytes, the system clock, and signatures with
// `private_key_pem` (ES256 or RS256 by the key's type; empty: no signer).
Result<oauth::OAuthHost> make_oauth_host(const std::string& private_key_pem);

}  // namespace quiver
