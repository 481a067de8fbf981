// Errors as values.
//
// Every fallible function in the core returns `Result<T>` (or `Status` when there is no value).
// The core never throws across its API: in the wasm build an escaped exception would take the
// whole instance down with it, and natively it would hide which input was bad. An `Error`
// carries a stable `ErrorCode` (what a caller branches on) and a human message (what a user
// reads). Messages never contain secrets: callers pass redacted values in.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace quiver {

enum class ErrorCode {
  kUnknown = 0,
  kInvalidArgument,  // the caller handed us something malformed (bad JSON, bad config)
  kTooLarge,         // input or output over a configured bound
  kNotFound,
  kMethodNotFound,       // JSON-RPC -32601 from an upstream: "has none", not a failure
  kTimeout,              // a deadline passed
  kTransport,            // the bytes did not arrive (closed pipe, reset, HTTP status)
  kProtocol,             // the peer broke the protocol (wrong version, bad sequence)
  kInvalidReply,         // the peer's reply is not what the protocol allows
  kUpstreamError,        // the upstream answered with a JSON-RPC error other than -32601
  kUpstreamUnavailable,  // an upstream retried on a fresh session and still failing
  kStoreUnavailable,     // the cache store (Redis, SQLite) cannot be reached or refused the op
  kResourceUnavailable,  // the host lacks a local resource: entropy, a listening address
  kConflict,             // lease held elsewhere, fence or config_hash mismatch
  kUnauthenticated,
  kInternal,
  kStoreNotReady,  // the store answers, but holds no initialised namespace (wiped, restoring)
  // An OAuth connection has no usable authorization for this principal: never connected, the
  // member disconnected, or the refresh token stopped working (invalid_grant). Someone must
  // authorize (POST /v1/mcp-connections/{id}/authorize, `quiver-agent login`); not an upstream
  // failure and not retried by itself.
  kAuthorizationRequired,
};

// Stable, upper-case name of a code, as used in JSON error bodies, logs and metric labels.
const char* error_code_name(ErrorCode code);

// Whether the failure is of the host's surroundings (the store, the machine) rather than of the
// request, so the same work can succeed later unchanged: a queued refresh that failed so stays
// queued. An upstream's failure does not count: the refresh recorded it and is done.
bool passes_by_itself(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;

  Error() = default;
  Error(ErrorCode c, std::string m) : code(c), message(std::move(m)) {}
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

}  // namespace quiver
