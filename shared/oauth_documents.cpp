// The OAuth documents of shared/oauth.h: challenges, metadata, token responses, callbacks, and
// the JSON forms the token store keeps. Pure parsers: bounded, never throwing, no secret in an
// error message.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/ascii.h"
#include "shared/discovery_http.h"
#include "shared/json.h"
#include "shared/oauth.h"
#include "shared/oauth_internal.h"
#include "shared/sha256.h"
#include "shared/status.h"

namespace quiver::oauth {
namespace internal {

std::optional<UrlParts> parse_url(std::string_view url) {
  std::size_t colon = url.find("://");
  if (colon == std::string_view::npos) return std::nullopt;
  UrlParts p;
  p.scheme = ascii_lower(url.substr(0, colon));
  if (p.scheme != "https" && p.scheme != "http") return std::nullopt;
  std::string_view rest = url.substr(colon + 3);
  std::size_t hash = rest.find('#');
  if (hash != std::string_view::npos) rest = rest.substr(0, hash);
  std::size_t end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
  for (char c : authority) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == '\\' ||
        static_cast<unsigned char>(c) >= 0x7f) {
      return std::nullopt;
    }
  }
  std::string_view host = authority;
  if (host.front() == '[') {
    std::size_t close = host.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = host.substr(1, close - 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  if (host.empty()) return std::nullopt;
  p.host = ascii_lower(host);
  p.authority = ascii_lower(authority);
  if (end != std::string_view::npos) {
    std::string_view tail = rest.substr(end);
    std::size_t q = tail.find('?');
    p.path = std::string(tail.substr(0, q));
    if (q != std::string_view::npos) p.query = std::string(tail.substr(q + 1));
  }
  return p;
}

bool is_allowed_endpoint(std::string_view url) {
  std::optional<UrlParts> p = parse_url(url);
  if (!p) return false;
  if (p->scheme == "https") return true;
  return is_loopback_host(p->host);
}

std::string form_encode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '*') {
      out += ch;
    } else if (c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string form_body(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += '&';
    out += form_encode(name);
    out += '=';
    out += form_encode(value);
  }
  return out;
}

std::optional<std::string> form_decode(std::string_view text) {
  return percent_decode(text, /*plus_is_space=*/true);
}

std::vector<std::string> split_scopes(std::string_view scope) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < scope.size()) {
    std::size_t end = scope.find(' ', i);
    if (end == std::string_view::npos) end = scope.size();
    if (end > i) {
      std::string s(scope.substr(i, end - i));
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
    }
    i = end + 1;
  }
  return out;
}

std::string join_scopes(const std::vector<std::string>& scopes) {
  std::string out;
  for (const std::string& s : scopes) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

std::vector<std::string> scope_union(std::vector<std::string> a,
                                     const std::vector<std::string>& b) {
  for (const std::string& s : b) {
    if (std::find(a.begin(), a.end(), s) == a.end()) a.push_back(s);
  }
  return a;
}

std::string clip_text(std::string_view text, std::size_t max) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return out;
}

}  // namespace internal

using internal::clip_text;

std::optional<std::string> HttpResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (ascii_iequals(k, name)) return v;
  }
  return std::nullopt;
}

// ---- WWW-Authenticate ---------------------------------------------------------------------------

namespace {

constexpr std::size_t kMaxChallengeBytes = 16 << 10;

bool is_tchar(char c) {
  auto u = static_cast<unsigned char>(c);
  if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool is_token68_char(char c) {
  auto u = static_cast<unsigned char>(c);
  if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9')) return true;
  return std::string_view("-._~+/").find(c) != std::string_view::npos;
}

struct Challenge {
  std::string scheme;
  std::vector<std::pair<std::string, std::string>> params;  // names lower case
};

class ChallengeParser {
 public:
  explicit ChallengeParser(std::string_view s) : s_(s) {}

  Result<std::vector<Challenge>> parse() {
    std::vector<Challenge> out;
    while (true) {
      skip_ows_and_commas();
      if (i_ >= s_.size()) break;
      Challenge ch;
      ch.scheme = read_token();
      if (ch.scheme.empty()) return bad("expected an auth scheme");
      skip_ows();
      if (i_ < s_.size() && s_[i_] != ',') {
        if (try_token68()) {
          out.push_back(std::move(ch));
          continue;
        }
        Status st = read_params(&ch);
        if (!st.ok()) return st.error();
      }
      out.push_back(std::move(ch));
    }
    return out;
  }

 private:
  static Error bad(const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "WWW-Authenticate: " + why);
  }
  void skip_ows() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  void skip_ows_and_commas() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == ',')) ++i_;
  }
  std::string read_token() {
    std::size_t start = i_;
    while (i_ < s_.size() && is_tchar(s_[i_])) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }
  // `abc==` followed by the end or a comma.
  bool try_token68() {
    std::size_t j = i_;
    while (j < s_.size() && is_token68_char(s_[j])) ++j;
    if (j == i_) return false;
    while (j < s_.size() && s_[j] == '=') ++j;
    std::size_t k = j;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
    if (k < s_.size() && s_[k] != ',') return false;
    i_ = k;
    return true;
  }
  Status read_params(Challenge* ch) {
    while (true) {
      std::string name = ascii_lower(read_token());
      if (name.empty()) return bad("expected a parameter name");
      skip_ows();
      if (i_ >= s_.size() || s_[i_] != '=') return bad("expected '=' after a parameter name");
      ++i_;
      skip_ows();
      std::string value;
      if (i_ < s_.size() && s_[i_] == '"') {
        ++i_;
        bool closed = false;
        while (i_ < s_.size()) {
          char c = s_[i_++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i_ >= s_.size()) break;
            c = s_[i_++];
          }
          value += c;
        }
        if (!closed) return bad("unterminated quoted string");
      } else {
        value = read_token();
        if (value.empty()) return bad("expected a parameter value");
      }
      bool seen = std::any_of(ch->params.begin(), ch->params.end(),
                              [&](const auto& p) { return p.first == name; });
      if (seen) return bad("parameter '" + clip_text(name, 40) + "' repeats");
      ch->params.emplace_back(std::move(name), std::move(value));
      skip_ows();
      if (i_ >= s_.size()) return Status::Ok();
      if (s_[i_] != ',') return bad("expected ',' between parameters");
      // A comma ends the parameter or the challenge: a parameter name is followed by '='.
      std::size_t after_comma = i_ + 1;
      i_ = after_comma;
      skip_ows_and_commas();
      if (i_ >= s_.size()) return Status::Ok();
      std::size_t token_start = i_;
      std::string next = read_token();
      skip_ows();
      bool is_param = !next.empty() && i_ < s_.size() && s_[i_] == '=';
      i_ = is_param ? token_start : after_comma;
      if (!is_param) return Status::Ok();
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

Result<std::optional<BearerChallenge>> parse_www_authenticate(std::string_view value) {
  if (value.size() > kMaxChallengeBytes) {
    return Error(ErrorCode::kTooLarge, "WWW-Authenticate: longer than 16 KiB");
  }
  Result<std::vector<Challenge>> parsed = ChallengeParser(value).parse();
  if (!parsed.ok()) return parsed.error();
  for (const Challenge& ch : *parsed) {
    if (!ascii_iequals(ch.scheme, "Bearer")) continue;
    BearerChallenge out;
    for (const auto& [name, v] : ch.params) {
      if (name == "resource_metadata") out.resource_metadata = v;
      if (name == "scope") out.scope = v;
      if (name == "error") out.error = v;
      if (name == "error_description") out.error_description = clip_text(v);
    }
    return std::optional<BearerChallenge>(std::move(out));
  }
  return std::optional<BearerChallenge>();
}

// ---- metadata -----------------------------------------------------------------------------------

namespace {

Result<Json> parse_object(std::string_view body, const char* what) {
  if (body.size() > kMaxResponseBytes) {
    return Error(ErrorCode::kTooLarge, std::string(what) + ": larger than 256 KiB");
  }
  Result<Json> j = parse_json(body, kMaxResponseBytes);
  if (!j.ok()) return Error(ErrorCode::kInvalidReply, std::string(what) + ": " + j.error().message);
  if (!j->is_object())
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": not a JSON object");
  return j;
}

// A string field: absent is "", another type is an error.
Status read_string(const Json& j, const char* key, const char* what, std::string* out) {
  const Json* v = json_field(j, key);
  if (v == nullptr || v->is_null()) return Status::Ok();
  if (!v->is_string()) {
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": '" + key + "' is not a string");
  }
  *out = v->get<std::string>();
  return Status::Ok();
}

Status read_strings(const Json& j, const char* key, const char* what,
                    std::vector<std::string>* out) {
  const Json* v = json_field(j, key);
  if (v == nullptr || v->is_null()) return Status::Ok();
  if (!v->is_array()) {
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": '" + key + "' is not an array");
  }
  for (const Json& e : *v) {
    if (!e.is_string()) {
      return Error(ErrorCode::kInvalidReply,
                   std::string(what) + ": '" + key + "' holds a non-string");
    }
    out->push_back(e.get<std::string>());
  }
  return Status::Ok();
}

bool read_bool(const Json& j, const char* key) { return json_bool(j, key).value_or(false); }

Json strings_json(const std::vector<std::string>& v) {
  Json a = Json::array();
  for (const std::string& s : v) a.push_back(s);
  return a;
}

#define QUIVER_OAUTH_TRY(expr)         \
  do {                                 \
    Status st_ = (expr);               \
    if (!st_.ok()) return st_.error(); \
  } while (0)

}  // namespace

Result<ProtectedResourceMetadata> parse_protected_resource_metadata(std::string_view body) {
  const char* what = "protected resource metadata";
  Result<Json> j = parse_object(body, what);
  if (!j.ok()) return j.error();
  ProtectedResourceMetadata m;
  QUIVER_OAUTH_TRY(read_string(*j, "resource", what, &m.resource));
  if (m.resource.empty())
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": no 'resource'");
  QUIVER_OAUTH_TRY(read_strings(*j, "authorization_servers", what, &m.authorization_servers));
  QUIVER_OAUTH_TRY(read_strings(*j, "scopes_supported", what, &m.scopes_supported));
  return m;
}

namespace {
Result<AuthorizationServerMetadata> metadata_from_object(const Json& j, const char* what) {
  AuthorizationServerMetadata m;
  QUIVER_OAUTH_TRY(read_string(j, "issuer", what, &m.issuer));
  QUIVER_OAUTH_TRY(read_string(j, "authorization_endpoint", what, &m.authorization_endpoint));
  QUIVER_OAUTH_TRY(read_string(j, "token_endpoint", what, &m.token_endpoint));
  QUIVER_OAUTH_TRY(read_string(j, "registration_endpoint", what, &m.registration_endpoint));
  QUIVER_OAUTH_TRY(read_strings(j, "scopes_supported", what, &m.scopes_supported));
  QUIVER_OAUTH_TRY(read_strings(j, "grant_types_supported", what, &m.grant_types_supported));
  QUIVER_OAUTH_TRY(read_strings(j, "code_challenge_methods_supported", what,
                                &m.code_challenge_methods_supported));
  QUIVER_OAUTH_TRY(read_strings(j, "token_endpoint_auth_methods_supported", what,
                                &m.token_endpoint_auth_methods_supported));
  m.client_id_metadata_document_supported = read_bool(j, "client_id_metadata_document_supported");
  m.authorization_response_iss_parameter_supported =
      read_bool(j, "authorization_response_iss_parameter_supported");
  m.defaults = read_bool(j, "defaults");
  if (m.issuer.empty()) return Error(ErrorCode::kInvalidReply, std::string(what) + ": no 'issuer'");
  if (m.token_endpoint.empty()) {
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": no 'token_endpoint'");
  }
  return m;
}
}  // namespace

Json AuthorizationServerMetadata::to_json() const {
  Json j = Json::object();
  j["issuer"] = issuer;
  j["authorization_endpoint"] = authorization_endpoint;
  j["token_endpoint"] = token_endpoint;
  j["registration_endpoint"] = registration_endpoint;
  j["scopes_supported"] = strings_json(scopes_supported);
  j["grant_types_supported"] = strings_json(grant_types_supported);
  j["code_challenge_methods_supported"] = strings_json(code_challenge_methods_supported);
  j["token_endpoint_auth_methods_supported"] = strings_json(token_endpoint_auth_methods_supported);
  j["client_id_metadata_document_supported"] = client_id_metadata_document_supported;
  j["authorization_response_iss_parameter_supported"] =
      authorization_response_iss_parameter_supported;
  j["defaults"] = defaults;
  return j;
}

Result<AuthorizationServerMetadata> AuthorizationServerMetadata::from_json(const Json& j) {
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "server metadata: not an object");
  return metadata_from_object(j, "server metadata");
}

Result<AuthorizationServerMetadata> parse_authorization_server_metadata(
    std::string_view body, std::string_view expected_issuer) {
  const char* what = "authorization server metadata";
  Result<Json> j = parse_object(body, what);
  if (!j.ok()) return j.error();
  Result<AuthorizationServerMetadata> m = metadata_from_object(*j, what);
  if (!m.ok()) return m.error();
  m->defaults = false;
  if (m->issuer != expected_issuer) {
    return Error(ErrorCode::kInvalidReply, std::string(what) + ": issuer '" + clip_text(m->issuer) +
                                               "' is not '" + clip_text(expected_issuer) + "'");
  }
  return m;
}

std::vector<std::string> protected_resource_metadata_urls(std::string_view server_url) {
  std::optional<internal::UrlParts> p = internal::parse_url(server_url);
  if (!p) return {};
  std::string base = p->origin() + "/.well-known/oauth-protected-resource";
  std::string path = p->path;
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.empty()) return {base};
  return {base + path, base};
}

std::vector<std::string> authorization_server_metadata_urls(std::string_view issuer) {
  std::optional<internal::UrlParts> p = internal::parse_url(issuer);
  if (!p) return {};
  std::string origin = p->origin();
  std::string path = p->path;
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.empty()) {
    return {origin + "/.well-known/oauth-authorization-server",
            origin + "/.well-known/openid-configuration"};
  }
  return {origin + "/.well-known/oauth-authorization-server" + path,
          origin + "/.well-known/openid-configuration" + path,
          origin + path + "/.well-known/openid-configuration"};
}

std::string canonical_resource(std::string_view server_url) {
  std::optional<internal::UrlParts> p = internal::parse_url(server_url);
  if (!p) return std::string(server_url);
  std::string out = p->origin();
  if (p->path != "/") out += p->path;
  if (!p->query.empty()) out += "?" + p->query;
  return out;
}

// ---- tokens -------------------------------------------------------------------------------------

Json TokenSet::to_json() const {
  return Json{{"access_token", access_token},   {"token_type", token_type},
              {"refresh_token", refresh_token}, {"scope", scope},
              {"expires_at_ms", expires_at_ms}, {"obtained_at_ms", obtained_at_ms}};
}

Result<TokenSet> TokenSet::from_json(const Json& j) {
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "token set: not an object");
  TokenSet t;
  t.access_token = json_string(j, "access_token").value_or("");
  t.token_type = json_string(j, "token_type").value_or("Bearer");
  t.refresh_token = json_string(j, "refresh_token").value_or("");
  t.scope = json_string(j, "scope").value_or("");
  t.expires_at_ms = json_int(j, "expires_at_ms").value_or(0);
  t.obtained_at_ms = json_int(j, "obtained_at_ms").value_or(0);
  if (t.access_token.empty())
    return Error(ErrorCode::kInvalidArgument, "token set: no access token");
  return t;
}

Result<TokenSet> parse_token_response(const HttpResponse& response, int64_t now_ms) {
  const char* what = "token endpoint";
  if (response.body.size() > kMaxResponseBytes) {
    return Error(ErrorCode::kTooLarge, "token endpoint: response larger than 256 KiB");
  }
  Result<Json> parsed = parse_json(response.body, kMaxResponseBytes);
  const Json* j = parsed.ok() && parsed->is_object() ? &*parsed : nullptr;
  if (response.status < 200 || response.status > 299) {
    std::string error = j ? json_string(*j, "error").value_or("") : "";
    std::string desc = j ? json_string(*j, "error_description").value_or("") : "";
    std::string msg = std::string(what) + ": HTTP " + std::to_string(response.status);
    if (!error.empty()) msg += " " + clip_text(error, 64);
    if (!desc.empty()) msg += " (" + clip_text(desc) + ")";
    if (error == "invalid_grant") return Error(ErrorCode::kAuthorizationRequired, msg);
    if (error == "invalid_client" || error == "unauthorized_client") {
      return Error(ErrorCode::kUnauthenticated, msg);
    }
    if (error.empty() && response.status >= 500) return Error(ErrorCode::kTransport, msg);
    return Error(ErrorCode::kInvalidReply, msg);
  }
  if (j == nullptr)
    return Error(ErrorCode::kInvalidReply, "token endpoint: the answer is not a JSON object");
  TokenSet t;
  std::optional<std::string> access = json_string(*j, "access_token");
  if (!access || access->empty())
    return Error(ErrorCode::kInvalidReply, "token endpoint: no access_token");
  t.access_token = *access;
  std::string type = json_string(*j, "token_type").value_or("Bearer");
  if (!ascii_iequals(type, "Bearer")) {
    return Error(ErrorCode::kInvalidReply,
                 "token endpoint: token_type '" + clip_text(type, 32) + "' is not Bearer");
  }
  t.token_type = "Bearer";
  t.refresh_token = json_string(*j, "refresh_token").value_or("");
  t.scope = json_string(*j, "scope").value_or("");
  t.obtained_at_ms = now_ms;
  const Json* expires = json_field(*j, "expires_in");
  if (expires != nullptr && !expires->is_null()) {
    std::optional<double> secs = json_number(*expires);
    if (!secs && expires->is_string()) {
      std::optional<double> parsed_secs;
      const std::string& s = expires->get_ref<const std::string&>();
      if (!s.empty() && s.size() < 12 &&
          std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        int64_t n = 0;
        for (char c : s) n = n * 10 + (c - '0');
        parsed_secs = static_cast<double>(n);
      }
      secs = parsed_secs;
    }
    if (!secs || *secs < 0 || *secs > 10.0 * 365 * 24 * 3600) {
      return Error(ErrorCode::kInvalidReply,
                   "token endpoint: expires_in is not a number of seconds");
    }
    t.expires_at_ms = now_ms + static_cast<int64_t>(*secs * 1000);
  }
  return t;
}

Json RegisteredClient::to_json() const {
  return Json{{"issuer", issuer},
              {"client_id", client_id},
              {"client_secret", client_secret},
              {"token_endpoint_auth_method", token_endpoint_auth_method},
              {"client_secret_expires_at_ms", client_secret_expires_at_ms},
              {"dynamic", dynamic},
              {"scopes", strings_json(scopes)}};
}

Result<RegisteredClient> RegisteredClient::from_json(const Json& j) {
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "client: not an object");
  RegisteredClient c;
  c.issuer = json_string(j, "issuer").value_or("");
  c.client_id = json_string(j, "client_id").value_or("");
  c.client_secret = json_string(j, "client_secret").value_or("");
  c.token_endpoint_auth_method = json_string(j, "token_endpoint_auth_method").value_or("");
  c.client_secret_expires_at_ms = json_int(j, "client_secret_expires_at_ms").value_or(0);
  c.dynamic = json_bool(j, "dynamic").value_or(false);
  if (auto it = j.find("scopes"); it != j.end() && it->is_array()) {
    for (const Json& s : *it) {
      if (s.is_string()) c.scopes.push_back(s.get<std::string>());
    }
  }
  if (c.client_id.empty()) return Error(ErrorCode::kInvalidArgument, "client: no client_id");
  return c;
}

Json PendingAuthorization::to_json() const {
  return Json{{"state", state},
              {"code_verifier", code_verifier},
              {"redirect_uri", redirect_uri},
              {"resource", resource},
              {"scopes", strings_json(scopes)},
              {"server", server.to_json()},
              {"client", client.to_json()},
              {"created_at_ms", created_at_ms},
              {"expires_at_ms", expires_at_ms}};
}

Result<PendingAuthorization> PendingAuthorization::from_json(const Json& j) {
  if (!j.is_object())
    return Error(ErrorCode::kInvalidArgument, "pending authorization: not an object");
  PendingAuthorization p;
  p.state = json_string(j, "state").value_or("");
  p.code_verifier = json_string(j, "code_verifier").value_or("");
  p.redirect_uri = json_string(j, "redirect_uri").value_or("");
  p.resource = json_string(j, "resource").value_or("");
  Status st = read_strings(j, "scopes", "pending authorization", &p.scopes);
  if (!st.ok()) return Error(ErrorCode::kInvalidArgument, st.error().message);
  const Json* server = json_field(j, "server");
  const Json* client = json_field(j, "client");
  if (server == nullptr || client == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "pending authorization: no server or client");
  }
  Result<AuthorizationServerMetadata> s = AuthorizationServerMetadata::from_json(*server);
  if (!s.ok()) return s.error();
  Result<RegisteredClient> c = RegisteredClient::from_json(*client);
  if (!c.ok()) return c.error();
  p.server = std::move(*s);
  p.client = std::move(*c);
  p.created_at_ms = json_int(j, "created_at_ms").value_or(0);
  p.expires_at_ms = json_int(j, "expires_at_ms").value_or(0);
  if (p.state.empty() || p.code_verifier.empty()) {
    return Error(ErrorCode::kInvalidArgument, "pending authorization: no state or verifier");
  }
  return p;
}

Json Authorization::to_json() const {
  return Json{{"resource", resource},
              {"server", server.to_json()},
              {"client", client.to_json()},
              {"tokens", tokens.to_json()}};
}

Result<Authorization> Authorization::from_json(const Json& j) {
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "authorization: not an object");
  const Json* server = json_field(j, "server");
  const Json* client = json_field(j, "client");
  const Json* tokens = json_field(j, "tokens");
  if (server == nullptr || client == nullptr || tokens == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "authorization: no server, client or tokens");
  }
  Authorization a;
  a.resource = json_string(j, "resource").value_or("");
  Result<AuthorizationServerMetadata> s = AuthorizationServerMetadata::from_json(*server);
  if (!s.ok()) return s.error();
  Result<RegisteredClient> c = RegisteredClient::from_json(*client);
  if (!c.ok()) return c.error();
  Result<TokenSet> t = TokenSet::from_json(*tokens);
  if (!t.ok()) return t.error();
  a.server = std::move(*s);
  a.client = std::move(*c);
  a.tokens = std::move(*t);
  return a;
}

std::string pkce_s256(std::string_view verifier) {
  Digest256 d = sha256(verifier);
  return base64url_encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

}  // namespace quiver::oauth
