#include "shared/status.h"

namespace quiver {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnknown:
      return "UNKNOWN";
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kTooLarge:
      return "TOO_LARGE";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kMethodNotFound:
      return "METHOD_NOT_FOUND";
    case ErrorCode::kTimeout:
      return "TIMEOUT";
    case ErrorCode::kTransport:
      return "TRANSPORT";
    case ErrorCode::kProtocol:
      return "PROTOCOL";
    case ErrorCode::kInvalidReply:
      return "INVALID_REPLY";
    case ErrorCode::kUpstreamError:
      return "UPSTREAM_ERROR";
    case ErrorCode::kUpstreamUnavailable:
      return "UPSTREAM_UNAVAILABLE";
    case ErrorCode::kStoreUnavailable:
      return "STORE_UNAVAILABLE";
    case ErrorCode::kResourceUnavailable:
      return "RESOURCE_UNAVAILABLE";
    case ErrorCode::kConflict:
      return "CONFLICT";
    case ErrorCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case ErrorCode::kInternal:
      return "INTERNAL";
    case ErrorCode::kStoreNotReady:
      return "STORE_NOT_READY";
  }
  return "UNKNOWN";
}

bool passes_by_itself(ErrorCode code) {
  return code == ErrorCode::kStoreUnavailable || code == ErrorCode::kResourceUnavailable;
}

}  // namespace quiver
