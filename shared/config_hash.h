// config_hash: a digest of the connection's non-secret identity (transport, command and args or
// URL, auth type, credential mode and version, header and env var names). Data listed under
// another config_hash is a miss (see shared/freshness.h). Secret values never enter it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "shared/principal.h"
#include "shared/status.h"

namespace quiver {

enum class TransportKind { kUnknown = 0, kStdio, kHttp };
const char* transport_kind_name(TransportKind kind);  // "unknown", "stdio", "http"
TransportKind transport_kind_from_string(std::string_view text);

enum class AuthType { kUnknown = 0, kNone, kBearer, kApiKey, kHeaders, kOAuth };
const char* auth_type_name(
    AuthType type);  // "unknown", "none", "bearer", "api_key", "headers", "oauth"
AuthType auth_type_from_string(std::string_view text);

// A connection's configuration as far as it decides what an upstream lists. `env` and `headers`
// may be passed with their (secret) values, straight from the configuration: only their names are
// used. Rotating a secret does not change the hash; bump `credential_version` for that.
struct ConnectionIdentity {
  TransportKind transport = TransportKind::kUnknown;
  std::string command;                         // stdio
  std::vector<std::string> args;               // stdio; order matters
  std::map<std::string, std::string> env;      // stdio; names only are hashed
  std::string url;                             // http; a password in it is not hashed
  std::map<std::string, std::string> headers;  // http; names only are hashed (case-insensitive)
  AuthType auth_type = AuthType::kUnknown;
  CredentialMode credential_mode = CredentialMode::kUnknown;
  std::string credential_version;  // bumped when credentials are rotated
  // auth oauth: the non-secret OAuth settings as canonical JSON (client id, scopes, grant, ...);
  // empty otherwise (then it is not part of the canonical form, so other hashes stay as they were).
  std::string oauth;
};

// The canonical JSON the hash is taken over (sorted keys, a recipe version `v`). It holds no
// header or env values and no URL password; args and the URL query are included as configured.
// kInvalidArgument for an unknown transport, auth type or credential mode, a missing command or
// URL, or a string that is not UTF-8 (the message names the field, never its value).
Result<std::string> config_identity_canonical(const ConnectionIdentity& identity);
// sha256 hex (64 lowercase digits) of config_identity_canonical.
Result<std::string> config_hash(const ConnectionIdentity& identity);

}  // namespace quiver
