// Principals: whose manifest a cache entry is. `shared` for a shared-credential connection,
// `member/<id>` for a per-member one; `principal_for` derives it from the connection's credential
// mode, and every key that holds per-principal data carries it.
//
// The identifiers inside keys (connection ids, member ids, namespaces) are validated here against
// the charsets of schema/redis-keys.md; none of them can contain `:`, `{`, `}` or `/`, so a key
// built from them parses back unambiguously and cannot escape its namespace's hash tag
// (shared/redis_keys.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "shared/status.h"

namespace quiver {

// ---- identifiers -------------------------------------------------------------------------------

inline constexpr char kDefaultNamespace[] = "default";
inline constexpr std::size_t kMaxIdLength = 128;  // connection and member ids
inline constexpr std::size_t kMaxNamespaceLength = 64;

Status validate_connection_id(std::string_view id);  // [A-Za-z0-9._-]{1,128}
Status validate_member_id(std::string_view id);      // [A-Za-z0-9._@+-]{1,128}
Status validate_namespace(std::string_view ns);      // [A-Za-z0-9._-]{1,64}

// ---- principals --------------------------------------------------------------------------------

enum class CredentialMode { kUnknown = 0, kShared, kPerMember };
const char* credential_mode_name(CredentialMode mode);  // "unknown", "shared", "per_member"
CredentialMode credential_mode_from_string(std::string_view text);  // kUnknown if not a name

inline constexpr char kSharedPrincipal[] = "shared";
inline constexpr char kMemberPrincipalPrefix[] = "member/";

// A validated principal string. Only these factories make one, so a Principal in hand is always
// safe to put in a key.
class Principal {
 public:
  static Principal shared();
  static Result<Principal> member(std::string_view member_id);
  static Result<Principal> parse(std::string_view text);  // "shared" or "member/<member id>"

  const std::string& str() const { return value_; }
  bool is_shared() const { return value_ == kSharedPrincipal; }
  std::string_view member_id() const;  // empty for `shared`

  bool operator==(const Principal& other) const { return value_ == other.value_; }
  bool operator!=(const Principal& other) const { return value_ != other.value_; }

 private:
  explicit Principal(std::string value) : value_(std::move(value)) {}
  std::string value_;
};

// Shared mode: `shared` (the member id is not looked at). Per-member mode: `member/<id>`, the id
// validated. Unknown mode: kInvalidArgument.
Result<Principal> principal_for(CredentialMode mode, std::string_view member_id);

}  // namespace quiver
