#include "shared/config_hash.h"

#include <set>

#include "shared/ascii.h"
#include "shared/enum_names.h"
#include "shared/json.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

namespace quiver {
namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

// Drops the password of a URL's userinfo (`scheme://user:pass@host/...` -> `scheme://user@host/`).
// Everything else stays as configured: a different path or query may select another server.
std::string url_without_password(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return std::string(url);
  const std::size_t authority_begin = scheme_end + 3;
  std::size_t authority_end = url.find_first_of("/?#", authority_begin);
  if (authority_end == std::string_view::npos) authority_end = url.size();
  const std::string_view authority = url.substr(authority_begin, authority_end - authority_begin);
  const std::size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view userinfo = authority.substr(0, at);
  const std::size_t colon = userinfo.find(':');
  if (colon == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, authority_begin));
  out += userinfo.substr(0, colon);
  out += url.substr(authority_begin + at);
  return out;
}

constexpr const char* const kTransportNames[] = {"unknown", "stdio", "http"};
static_assert(covers_enum(kTransportNames, TransportKind::kHttp));

constexpr const char* const kAuthTypeNames[] = {"unknown", "none",    "bearer",
                                                "api_key", "headers", "oauth"};
static_assert(covers_enum(kAuthTypeNames, AuthType::kOAuth));

// Recipe version: changing what goes into the canonical form changes every hash (each cached
// manifest misses once), so the version is part of the input and bumped with the recipe.
constexpr int kConfigHashRecipe = 1;

}  // namespace

const char* transport_kind_name(TransportKind kind) {
  return name_of(kTransportNames, kind, "unknown");
}

TransportKind transport_kind_from_string(std::string_view text) {
  return value_of(kTransportNames, text, TransportKind::kUnknown);
}

const char* auth_type_name(AuthType type) { return name_of(kAuthTypeNames, type, "unknown"); }

AuthType auth_type_from_string(std::string_view text) {
  return value_of(kAuthTypeNames, text, AuthType::kUnknown);
}

Result<std::string> config_identity_canonical(const ConnectionIdentity& id) {
  auto check_utf8 = [](const char* field, std::string_view value) -> Status {
    if (is_valid_utf8(value)) return Status::Ok();
    return invalid(std::string("connection ") + field + " is not valid UTF-8");
  };

  if (id.auth_type == AuthType::kUnknown) return invalid("connection auth type is unknown");
  if (id.credential_mode == CredentialMode::kUnknown) {
    return invalid("connection credential mode is unknown");
  }
  Status s = check_utf8("credential version", id.credential_version);
  if (!s.ok()) return s.error();

  // nlohmann's object is a std::map: keys serialize sorted, whatever order they were set in.
  Json canon = Json::object();
  canon["v"] = kConfigHashRecipe;
  canon["transport"] = transport_kind_name(id.transport);
  canon["auth"] = auth_type_name(id.auth_type);
  canon["credential_mode"] = credential_mode_name(id.credential_mode);
  canon["credential_version"] = id.credential_version;
  if (!id.oauth.empty()) {
    if (!(s = check_utf8("oauth settings", id.oauth)).ok()) return s.error();
    canon["oauth"] = id.oauth;
  }

  switch (id.transport) {
    case TransportKind::kStdio: {
      if (id.command.empty()) return invalid("stdio connection has no command");
      if (!(s = check_utf8("command", id.command)).ok()) return s.error();
      Json args = Json::array();
      for (const std::string& a : id.args) {
        if (!(s = check_utf8("argument", a)).ok()) return s.error();
        args.push_back(a);
      }
      Json env_names = Json::array();  // std::map: sorted and unique already
      for (const auto& [name, value] : id.env) {
        if (!(s = check_utf8("env var name", name)).ok()) return s.error();
        env_names.push_back(name);
      }
      canon["command"] = id.command;
      canon["args"] = std::move(args);
      canon["env_names"] = std::move(env_names);
      break;
    }
    case TransportKind::kHttp: {
      if (id.url.empty()) return invalid("http connection has no URL");
      if (!(s = check_utf8("URL", id.url)).ok()) return s.error();
      std::set<std::string> names;  // HTTP header names are case-insensitive
      for (const auto& [name, value] : id.headers) {
        if (!(s = check_utf8("header name", name)).ok()) return s.error();
        names.insert(ascii_lower(name));
      }
      canon["url"] = url_without_password(id.url);
      canon["header_names"] = Json(names);
      break;
    }
    case TransportKind::kUnknown:
      return invalid("connection transport is unknown");
  }
  // Every string was checked above; `replace` only makes dump() unable to throw.
  return canon.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<std::string> config_hash(const ConnectionIdentity& identity) {
  Result<std::string> canonical = config_identity_canonical(identity);
  if (!canonical.ok()) return canonical.error();
  return sha256_hex(*canonical);
}

}  // namespace quiver
