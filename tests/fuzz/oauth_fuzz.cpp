// Fuzzes the OAuth documents (shared/oauth.h) a peer controls: the `WWW-Authenticate` value,
// protected-resource and authorization-server metadata, token responses and the callback query.
// The whole input is tried as each. Properties: refusals carry the documented codes; accepted
// metadata has the fields the flow needs and the expected issuer; what is accepted survives its
// JSON round trip; messages stay short (a peer's text is clipped).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/oauth.h"
#include "shared/oauth_callback.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver::oauth {
namespace {

bool is_one_of(ErrorCode code, std::initializer_list<ErrorCode> codes) {
  for (ErrorCode c : codes) {
    if (c == code) return true;
  }
  return false;
}

void challenge(std::string_view input) {
  auto c = parse_www_authenticate(input);
  if (!c.ok()) {
    fuzz::check(is_one_of(c.error().code, {ErrorCode::kInvalidArgument, ErrorCode::kTooLarge}),
                "parse_www_authenticate: an unexpected code");
    fuzz::check(c.error().message.size() < 200, "parse_www_authenticate: a long message");
    return;
  }
  if (c->has_value() && (*c)->error_description) {
    fuzz::check((*c)->error_description->size() <= 203, "error_description not clipped");
  }
}

void metadata(std::string_view input) {
  auto prm = parse_protected_resource_metadata(input);
  if (prm.ok()) fuzz::check(!prm->resource.empty(), "protected resource metadata without resource");
  if (!prm.ok()) {
    fuzz::check(is_one_of(prm.error().code, {ErrorCode::kInvalidReply, ErrorCode::kTooLarge}),
                "parse_protected_resource_metadata: an unexpected code");
  }
  const std::string issuer = "https://auth.example.com";
  auto as = parse_authorization_server_metadata(input, issuer);
  if (!as.ok()) {
    fuzz::check(is_one_of(as.error().code, {ErrorCode::kInvalidReply, ErrorCode::kTooLarge}),
                "parse_authorization_server_metadata: an unexpected code");
    fuzz::check(as.error().message.size() < 600, "authorization server metadata: a long message");
    return;
  }
  fuzz::check(as->issuer == issuer, "authorization server metadata: another issuer accepted");
  fuzz::check(!as->token_endpoint.empty(), "authorization server metadata: no token endpoint");
  auto back = AuthorizationServerMetadata::from_json(as->to_json());
  fuzz::check(back.ok() && back->to_json() == as->to_json(), "metadata JSON round trip");
}

void token(std::string_view input) {
  for (int status : {200, 400, 401, 503}) {
    HttpResponse r{status, {}, std::string(input)};
    auto t = parse_token_response(r, 1000);
    if (!t.ok()) {
      fuzz::check(is_one_of(t.error().code,
                            {ErrorCode::kInvalidReply, ErrorCode::kTooLarge, ErrorCode::kTransport,
                             ErrorCode::kAuthorizationRequired, ErrorCode::kUnauthenticated}),
                  "parse_token_response: an unexpected code");
      fuzz::check(t.error().message.size() < 400, "parse_token_response: a long message");
      continue;
    }
    fuzz::check(status == 200, "parse_token_response: tokens from an error status");
    fuzz::check(!t->access_token.empty() && t->expires_at_ms >= 0, "a token set without token");
    auto back = TokenSet::from_json(t->to_json());
    fuzz::check(back.ok() && back->to_json() == t->to_json(), "token set JSON round trip");
  }
}

void callback(std::string_view input) {
  auto c = quiver::parse_oauth_callback(input);
  if (!c.ok()) {
    fuzz::check(is_one_of(c.error().code, {ErrorCode::kInvalidArgument, ErrorCode::kTooLarge}),
                "parse_oauth_callback: an unexpected code");
    return;
  }
  fuzz::check(!c->state.empty(), "a callback without state");
  fuzz::check(c->code.has_value() != c->error.has_value(), "a callback with both code and error");
}

}  // namespace
}  // namespace quiver::oauth

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  quiver::oauth::challenge(input);
  quiver::oauth::metadata(input);
  quiver::oauth::token(input);
  quiver::oauth::callback(input);
  return 0;
}
