#include "shared/status.h"

#include "shared/enum_names.h"

namespace quiver {

namespace {

constexpr const char* const kNames[] = {"UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "TOO_LARGE",
                                        "NOT_FOUND",
                                        "METHOD_NOT_FOUND",
                                        "TIMEOUT",
                                        "TRANSPORT",
                                        "PROTOCOL",
                                        "INVALID_REPLY",
                                        "UPSTREAM_ERROR",
                                        "UPSTREAM_UNAVAILABLE",
                                        "STORE_UNAVAILABLE",
                                        "RESOURCE_UNAVAILABLE",
                                        "CONFLICT",
                                        "UNAUTHENTICATED",
                                        "INTERNAL",
                                        "STORE_NOT_READY",
                                        "AUTHORIZATION_REQUIRED"};
static_assert(covers_enum(kNames, ErrorCode::kAuthorizationRequired));

}  // namespace

const char* error_code_name(ErrorCode code) { return name_of(kNames, code, "UNKNOWN"); }

bool passes_by_itself(ErrorCode code) {
  return code == ErrorCode::kStoreUnavailable || code == ErrorCode::kResourceUnavailable;
}

}  // namespace quiver
