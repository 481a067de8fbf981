// One Redis connection's socket, for RedisStore and RedisClusterPool: hiredis connects (connect
// timeout, command timeout, keep-alive) and, for `rediss://`, runs the TLS handshake with the
// RedisTls context. The bytes then go through hiredis' stream functions (plain socket or TLS
// alike): redis_send_all and redis_recv.
//
// TLS (RedisTls): OpenSSL, TLS 1.2 or later; the server's certificate is verified against the
// system CA store, or only against `ca_file` when set; the certificate must name the host the
// agent dialled (DNS name or IP address), or `server_name` when set (also sent as SNI). A client
// certificate and key (`cert_file`, `key_file`) answer a server that asks for one (mTLS). A failed
// handshake says why ("certificate verify failed: unable to get local issuer certificate",
// "hostname mismatch"); no error carries the password (it is sent only after the handshake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <signal.h>

#include "native-agent/base/config.h"
#include "shared/status.h"

struct redisContext;
struct ssl_ctx_st;

namespace quiver {

class RedisTls {
 public:
  // Loads the CA store (or `ca_file`) and the client certificate and key: an unreadable or
  // malformed file is kInvalidArgument naming the file and OpenSSL's reason.
  static Result<std::shared_ptr<RedisTls>> create(const RedisTlsFiles& files);
  ~RedisTls();
  RedisTls(const RedisTls&) = delete;
  RedisTls& operator=(const RedisTls&) = delete;

  // The TLS handshake on a connected hiredis context to `host` (what was dialled). On success
  // the context reads and writes through TLS; on failure the message says why.
  Status start(redisContext* ctx, const std::string& host) const;

 private:
  RedisTls(ssl_ctx_st* ctx, std::string server_name);
  ssl_ctx_st* ctx_;
  std::string server_name_;
};

// Connects to host:port (TLS when `tls` is set) with the timeouts, keep-alive on. The returned
// context is owned by the caller (redisFree). Errors are kStoreUnavailable: "cannot connect:
// Connection refused", "TLS handshake failed: certificate verify failed: ...".
Result<redisContext*> redis_open(const std::string& host, int port, int64_t connect_timeout_ms,
                                 int64_t command_timeout_ms, const RedisTls* tls);

// All of `bytes` through the context's stream (plain or TLS); false with `*why` on failure.
bool redis_send_all(redisContext* ctx, std::string_view bytes, std::string* why);
// Up to `cap` bytes from the stream: > 0 read, 0 interrupted (call again), < 0 failed with `*why`
// ("timed out" when the command timeout passed, "the server closed the connection").
std::ptrdiff_t redis_recv(redisContext* ctx, char* buf, std::size_t cap, std::string* why);

// "; if this Redis port expects TLS, use rediss://" when a plain (`tls` false) connection failed
// before its first reply with `reason` as a TLS port answers plain bytes (it closes or resets the
// connection); "" otherwise.
std::string tls_port_hint(bool tls, bool answered, std::string_view reason);

// hiredis and OpenSSL write with write(2)/send(2): a server that closed the socket raises
// SIGPIPE, whose default action ends the process. Block it on this thread while a connection is
// used and swallow one raised meanwhile; the write itself then fails with EPIPE.
class SigpipeGuard {
 public:
  SigpipeGuard();
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

}  // namespace quiver
