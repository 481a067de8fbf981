// OAuth in the configuration: a connection's `oauth` settings (`quiver.connections.<name>.oauth`),
// the agent's `quiver.oauth` (the token store's key and file, the redirect URI) and the key's
// decoding, which the token store shares.
#include <algorithm>
#include <utility>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"
#include "shared/ascii.h"
#include "shared/sha256.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

namespace {

// clang-format off
const std::vector<std::string> kOAuthConnectionKeys = {
    "grant", "client_id", "client_secret", "client_id_metadata_url", "scopes",
    "token_endpoint_auth_method", "private_key", "private_key_id", "audience", "resource"};
const std::vector<std::string> kOAuthAgentKeys = {
    "key", "redirect_uri", "token_store", "refresh_ahead_ms"};
const std::vector<std::string> kTokenEndpointAuthMethods = {
    "client_secret_basic", "client_secret_post", "none", "private_key_jwt"};
// clang-format on

constexpr std::size_t kTokenKeyBytes = 32;
constexpr int64_t kMaxRefreshAheadMs = 86400000;

const char* grant_name(oauth::GrantType grant) {
  return grant == oauth::GrantType::kClientCredentials ? "client_credentials"
                                                       : "authorization_code";
}

// Printable ASCII without spaces: what a client id, a scope or a key id may hold.
bool is_plain_token(std::string_view value) {
  if (value.empty()) return false;
  return std::all_of(value.begin(), value.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;
  });
}

bool is_loopback_redirect(std::string_view uri) {
  for (std::string_view prefix : {"http://127.0.0.1:", "http://127.0.0.1/", "http://[::1]:",
                                  "http://[::1]/", "http://localhost:", "http://localhost/"}) {
    if (uri.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

std::string default_redirect_uri(const ListenAddress& listen) {
  return "http://" + listen.describe() + "/v1/oauth/callback";
}

}  // namespace

oauth::OAuthClientSettings OAuthConnectionSettings::client_settings(
    const std::string& redirect_uri) const {
  oauth::OAuthClientSettings s;
  s.grant = grant;
  s.client_id = client_id;
  if (client_secret.has_value()) s.client_secret = client_secret->reveal();
  s.client_id_metadata_url = client_id_metadata_url;
  s.scopes = scopes;
  s.token_endpoint_auth_method = token_endpoint_auth_method;
  if (private_key.has_value()) s.private_key_pem = private_key->reveal();
  s.private_key_id = private_key_id;
  s.audience = audience;
  s.send_resource = send_resource;
  s.redirect_uri = redirect_uri;
  s.application_type = is_loopback_redirect(redirect_uri) ? "native" : "web";
  return s;
}

Json OAuthConnectionSettings::identity_json() const {
  return Json::object({{"grant", grant_name(grant)},
                       {"client_id", client_id},
                       {"client_id_metadata_url", client_id_metadata_url},
                       {"scopes", Json(scopes)},
                       {"token_endpoint_auth_method", token_endpoint_auth_method},
                       {"audience", audience},
                       {"resource", send_resource},
                       {"private_key_id", private_key_id}});
}

Result<std::string> parse_token_key(const Secret& key) {
  const std::string& text = key.reveal();
  const char* kShape = "the OAuth token key must be 32 bytes as 64 hex digits or base64";
  if (text.size() == 2 * kTokenKeyBytes &&
      std::all_of(text.begin(), text.end(), [](char c) { return hex_value(c) >= 0; })) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); i += 2) {
      out += static_cast<char>(hex_value(text[i]) * 16 + hex_value(text[i + 1]));
    }
    return out;
  }
  std::string url = text;
  while (!url.empty() && url.back() == '=') url.pop_back();
  for (char& c : url) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  std::string out;
  if (!base64url_decode(url, &out)) return invalid(kShape);
  if (out.size() != kTokenKeyBytes) {
    return invalid(std::string(kShape) + " (it decodes to " + std::to_string(out.size()) +
                   " bytes)");
  }
  return out;
}

namespace config_internal {

std::optional<OAuthConnectionSettings> Parser::oauth_connection(const Json& settings,
                                                                bool per_member,
                                                                const std::string& conn_path) {
  const std::string path = conn_path + ".oauth";
  const std::size_t errors_before = p_.error_count();
  OAuthConnectionSettings o;
  const Json* given = json_field(settings, "oauth");
  const Json empty = Json::object();
  if (given != nullptr && !given->is_object()) {
    p_.error(path, std::string("must be an object, not ") + json_type(*given));
    return std::nullopt;
  }
  const Json& j = given != nullptr ? *given : empty;
  for (const auto& [key, value] : j.items()) {
    if (std::find(kOAuthConnectionKeys.begin(), kOAuthConnectionKeys.end(), key) ==
        kOAuthConnectionKeys.end()) {
      p_.error(path + "." + key, unknown_key_message(key, kOAuthConnectionKeys));
    }
  }
  if (std::optional<std::string> g = string_field(j, "grant", path)) {
    if (*g == "authorization_code") {
      o.grant = oauth::GrantType::kAuthorizationCode;
    } else if (*g == "client_credentials") {
      o.grant = oauth::GrantType::kClientCredentials;
    } else {
      p_.error(path + ".grant",
               "`" + shown(*g) + "` is not authorization_code or client_credentials");
    }
  }
  // Plain (non-secret) identifiers: printable, no spaces.
  for (auto [key, out] :
       {std::pair{"client_id", &o.client_id}, std::pair{"private_key_id", &o.private_key_id}}) {
    if (std::optional<std::string> v = string_field(j, key, path)) {
      if (!is_plain_token(*v)) {
        p_.error(path + "." + key, "must be non-empty printable text without spaces");
      } else {
        *out = *v;
      }
    }
  }
  if (std::optional<std::string> v = string_field(j, "audience", path)) {
    if (v->empty() || has_line_break_or_nul(*v)) {
      p_.error(path + ".audience", "must be non-empty text on one line");
    } else {
      o.audience = *v;
    }
  }
  if (std::optional<std::string> v = string_field(j, "client_id_metadata_url", path)) {
    if (Status st = check_http_url(*v); !st.ok()) {
      p_.error(path + ".client_id_metadata_url", st.error().message);
    } else if (v->rfind("https://", 0) != 0) {
      p_.error(path + ".client_id_metadata_url",
               "must be an https URL (a client ID metadata document)");
    } else {
      o.client_id_metadata_url = *v;
    }
  }
  if (const Json* scopes = json_field(j, "scopes")) {
    if (!scopes->is_array()) {
      p_.error(path + ".scopes",
               std::string("must be an array of scopes, not ") + json_type(*scopes));
    } else {
      for (std::size_t i = 0; i < scopes->size(); ++i) {
        const std::string sp = path + ".scopes[" + std::to_string(i) + "]";
        const Json& v = (*scopes)[i];
        if (!v.is_string() || !is_plain_token(v.get<std::string>())) {
          p_.error(sp, "must be a scope: non-empty printable text without spaces");
          continue;
        }
        if (std::find(o.scopes.begin(), o.scopes.end(), v.get<std::string>()) == o.scopes.end()) {
          o.scopes.push_back(v.get<std::string>());
        }
      }
    }
  }
  if (std::optional<std::string> m = string_field(j, "token_endpoint_auth_method", path)) {
    if (std::find(kTokenEndpointAuthMethods.begin(), kTokenEndpointAuthMethods.end(), *m) ==
        kTokenEndpointAuthMethods.end()) {
      p_.error(path + ".token_endpoint_auth_method",
               "`" + shown(*m) + "` is not " + join(kTokenEndpointAuthMethods, ", "));
    } else {
      o.token_endpoint_auth_method = *m;
    }
  }
  if (const Json* v = json_field(j, "client_secret")) {
    o.client_secret = secret_ref(*v, path + ".client_secret");
  }
  if (const Json* v = json_field(j, "private_key")) {
    o.private_key = secret_ref(*v, path + ".private_key");
    if (o.private_key.has_value() &&
        o.private_key->reveal().find("-----BEGIN ") == std::string::npos) {
      p_.error(path + ".private_key", "is not a PEM private key (no -----BEGIN line)");
    }
  }
  if (std::optional<bool> b = bool_field(j, "resource", path)) o.send_resource = *b;

  // How the settings fit together.
  const bool has_secret = json_field(j, "client_secret") != nullptr;
  const bool has_key = json_field(j, "private_key") != nullptr;
  if (has_secret && json_field(j, "client_id") == nullptr) {
    p_.error(path + ".client_secret", "needs client_id (a pre-registered client)");
  }
  if (o.grant == oauth::GrantType::kClientCredentials) {
    if (json_field(j, "client_id") == nullptr || (!has_secret && !has_key)) {
      p_.error(path + ".grant",
               "client_credentials needs client_id and client_secret or private_key");
    }
    if (per_member) {
      p_.error(path + ".grant",
               "client_credentials gets one token for the connection: use credential_mode "
               "shared");
    }
  }
  if (o.token_endpoint_auth_method == "private_key_jwt" && !has_key) {
    p_.error(path + ".token_endpoint_auth_method", "private_key_jwt needs private_key");
  }
  if ((o.token_endpoint_auth_method == "client_secret_basic" ||
       o.token_endpoint_auth_method == "client_secret_post") &&
      json_field(j, "client_id") != nullptr && !has_secret) {
    p_.error(path + ".token_endpoint_auth_method",
             o.token_endpoint_auth_method + " with a pre-registered client needs client_secret");
  }
  if (p_.error_count() != errors_before) return std::nullopt;
  return o;
}

void Parser::oauth_agent(const Json* quiver) {
  OAuthAgentSettings& o = cfg_.oauth;
  const Json* j = quiver != nullptr ? json_field(*quiver, "oauth") : nullptr;
  if (j != nullptr && !j->is_object()) {
    p_.error("quiver.oauth", std::string("must be an object, not ") + json_type(*j));
    j = nullptr;
  }
  const Json empty = Json::object();
  const Json& settings = j != nullptr ? *j : empty;
  for (const auto& [key, value] : settings.items()) {
    if (std::find(kOAuthAgentKeys.begin(), kOAuthAgentKeys.end(), key) == kOAuthAgentKeys.end()) {
      p_.error("quiver.oauth." + key, unknown_key_message(key, kOAuthAgentKeys));
    }
  }
  if (const Json* key = json_field(settings, "key")) {
    if (std::optional<Secret> s = secret_ref(*key, "quiver.oauth.key")) {
      Result<std::string> bytes = parse_token_key(*s);
      if (!bytes.ok()) {
        p_.error("quiver.oauth.key", bytes.error().message);
      } else {
        o.key = *s;
      }
    }
  }
  o.redirect_uri = default_redirect_uri(cfg_.listen);
  if (std::optional<std::string> r = string_field(settings, "redirect_uri", "quiver.oauth")) {
    if (std::optional<std::string> v = expand_plain(*r, "quiver.oauth.redirect_uri")) {
      if (Status st = check_http_url(*v); !st.ok()) {
        p_.error("quiver.oauth.redirect_uri", st.error().message);
      } else if (v->find('#') != std::string::npos) {
        p_.error("quiver.oauth.redirect_uri", "must not have a fragment (RFC 6749 §3.1.2)");
      } else {
        o.redirect_uri = *v;
        o.redirect_uri_configured = true;
      }
    }
  }
  o.token_store = cfg_.data_dir + "/oauth-tokens.db";
  if (std::optional<std::string> t = string_field(settings, "token_store", "quiver.oauth")) {
    if (std::optional<std::string> v = expand_plain(*t, "quiver.oauth.token_store")) {
      if (v->empty()) {
        p_.error("quiver.oauth.token_store", "is empty");
      } else {
        o.token_store = join_path(src_.working_dir, *v);
      }
    }
  }
  if (const Json* v = json_field(settings, "refresh_ahead_ms")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > kMaxRefreshAheadMs) {
      p_.error("quiver.oauth.refresh_ahead_ms", "must be a whole number of milliseconds, 0 to " +
                                                    std::to_string(kMaxRefreshAheadMs));
    } else {
      o.refresh_ahead_ms = v->get<int64_t>();
    }
  }
  // A connection with auth oauth keeps tokens, which are only ever stored encrypted.
  if (!o.key.has_value() && json_field(settings, "key") == nullptr) {
    for (const Server& s : servers_) {
      if (s.conn.auth != AuthType::kOAuth) continue;
      p_.error("quiver.connections." + s.conn.name + ".auth",
               "oauth needs quiver.oauth.key (32 bytes, 64 hex digits or base64, as a secret "
               "reference): the token store is encrypted with it");
    }
  }
}

}  // namespace config_internal

void AgentConfig::set_listen(const ListenAddress& address) {
  listen = address;
  if (!oauth.redirect_uri_configured) oauth.redirect_uri = default_redirect_uri(listen);
}

}  // namespace quiver
