#include "shared/principal.h"

#include "shared/enum_names.h"

namespace quiver {
namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool is_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// Validates `text` against [A-Za-z0-9<extra>]{1,max}. The message shows the offending character
// position, not the value: ids are not secret, but they may be long or unprintable.
Status validate_charset(std::string_view what, std::string_view text, std::string_view extra,
                        std::size_t max_length) {
  if (text.empty()) return invalid(std::string(what) + " is empty");
  if (text.size() > max_length) {
    return invalid(std::string(what) + " is " + std::to_string(text.size()) +
                   " characters long; the limit is " + std::to_string(max_length));
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_alnum(c) || extra.find(c) != std::string_view::npos) continue;
    return invalid(std::string(what) + " has a character outside [A-Za-z0-9" + std::string(extra) +
                   "] at position " + std::to_string(i));
  }
  return Status::Ok();
}

constexpr std::string_view kConnectionIdExtra = "._-";
constexpr std::string_view kMemberIdExtra = "._@+-";
constexpr std::string_view kNamespaceExtra = "._-";

constexpr const char* const kCredentialModeNames[] = {"unknown", "shared", "per_member"};
static_assert(covers_enum(kCredentialModeNames, CredentialMode::kPerMember));

}  // namespace

// ---- identifiers -------------------------------------------------------------------------------

Status validate_connection_id(std::string_view id) {
  return validate_charset("connection id", id, kConnectionIdExtra, kMaxIdLength);
}

Status validate_member_id(std::string_view id) {
  return validate_charset("member id", id, kMemberIdExtra, kMaxIdLength);
}

Status validate_namespace(std::string_view ns) {
  return validate_charset("namespace", ns, kNamespaceExtra, kMaxNamespaceLength);
}

// ---- principals --------------------------------------------------------------------------------

const char* credential_mode_name(CredentialMode mode) {
  return name_of(kCredentialModeNames, mode, "unknown");
}

CredentialMode credential_mode_from_string(std::string_view text) {
  return value_of(kCredentialModeNames, text, CredentialMode::kUnknown);
}

Principal Principal::shared() { return Principal(kSharedPrincipal); }

Result<Principal> Principal::member(std::string_view member_id) {
  Status s = validate_member_id(member_id);
  if (!s.ok()) return s.error();
  return Principal(std::string(kMemberPrincipalPrefix) + std::string(member_id));
}

Result<Principal> Principal::parse(std::string_view text) {
  if (text == kSharedPrincipal) return shared();
  const std::string_view prefix = kMemberPrincipalPrefix;
  if (text.substr(0, prefix.size()) != prefix) {
    return invalid("a principal is `shared` or `member/<member id>`");
  }
  return member(text.substr(prefix.size()));
}

std::string_view Principal::member_id() const {
  if (is_shared()) return {};
  return std::string_view(value_).substr(std::string_view(kMemberPrincipalPrefix).size());
}

Result<Principal> principal_for(CredentialMode mode, std::string_view member_id) {
  switch (mode) {
    case CredentialMode::kShared:
      return Principal::shared();
    case CredentialMode::kPerMember:
      return Principal::member(member_id);
    case CredentialMode::kUnknown:
      break;
  }
  return invalid("unknown credential mode: expected `shared` or `per_member`");
}

}  // namespace quiver
