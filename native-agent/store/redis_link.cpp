#include "native-agent/store/redis_link.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <sys/time.h>

namespace quiver {

namespace {

timeval to_timeval(int64_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// OpenSSL's most recent error on this thread, as text ("no such file", "PEM lib", ...).
std::string openssl_reason() {
  unsigned long e = ERR_peek_last_error();
  const char* r = e != 0 ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return r != nullptr ? r : "unknown OpenSSL error";
}

// Why `path` cannot be read ("No such file or directory"), or "" when it can: OpenSSL's own reason
// for a missing file is only "system lib".
std::string unreadable(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return std::strerror(errno);
  std::fclose(f);
  return "";
}

bool is_ip_literal(const std::string& name) {
  in6_addr a6{};
  in_addr a4{};
  return inet_pton(AF_INET, name.c_str(), &a4) == 1 || inet_pton(AF_INET6, name.c_str(), &a6) == 1;
}

}  // namespace

// ---- TLS ---------------------------------------------------------------------------------------

RedisTls::RedisTls(ssl_ctx_st* ctx, std::string server_name)
    : ctx_(ctx), server_name_(std::move(server_name)) {}

RedisTls::~RedisTls() { SSL_CTX_free(ctx_); }

Result<std::shared_ptr<RedisTls>> RedisTls::create(const RedisTlsFiles& files) {
  auto invalid = [](std::string m) { return Error(ErrorCode::kInvalidArgument, std::move(m)); };
  if (files.cert_file.empty() != files.key_file.empty()) {
    return invalid("redis TLS: a client certificate needs both cert_file and key_file");
  }
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return invalid("redis TLS: cannot create the context: " + openssl_reason());
  std::shared_ptr<RedisTls> tls(new RedisTls(ctx, files.server_name));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  for (const std::string* path : {&files.ca_file, &files.cert_file, &files.key_file}) {
    if (path->empty()) continue;
    if (std::string why = unreadable(*path); !why.empty()) {
      return invalid("redis TLS: cannot read " + *path + ": " + why);
    }
  }
  if (!files.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
      return invalid("redis TLS: cannot load the CA file " + files.ca_file + ": " +
                     openssl_reason());
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return invalid("redis TLS: cannot load the system CA store: " + openssl_reason());
  }
  if (!files.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
      return invalid("redis TLS: cannot load the client certificate " + files.cert_file + ": " +
                     openssl_reason());
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return invalid("redis TLS: cannot load the client key " + files.key_file +
                     " (for the certificate " + files.cert_file + "): " + openssl_reason());
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return invalid("redis TLS: the client key " + files.key_file +
                     " does not match the certificate " + files.cert_file);
    }
  }
  return tls;
}

Status RedisTls::start(redisContext* ctx, const std::string& host) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) {
    return Error(ErrorCode::kStoreUnavailable, "TLS: cannot create a session: " + openssl_reason());
  }
  // The name the certificate must carry: what was dialled, unless server_name says otherwise.
  const std::string& name = server_name_.empty() ? host : server_name_;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  bool named = false;
  if (is_ip_literal(name)) {
    named = X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1;
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    named = SSL_set1_host(ssl, name.c_str()) == 1 &&
            SSL_set_tlsext_host_name(ssl, const_cast<char*>(name.c_str())) == 1;
  }
  if (!named) {
    SSL_free(ssl);
    return Error(ErrorCode::kStoreUnavailable, "TLS: cannot check the server name '" + name + "'");
  }
  // On success hiredis owns `ssl` (redisFree frees it); on failure it is still ours.
  if (redisInitiateSSL(ctx, ssl) != REDIS_OK) {
    std::string why = ctx->errstr[0] != '\0' ? ctx->errstr : "handshake failed";
    const std::string prefix = "SSL_connect failed: ";
    if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      why += std::string(": ") + X509_verify_cert_error_string(verify);
      if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        why += " (the certificate does not name " + name + ")";
      }
    }
    SSL_free(ssl);
    ERR_clear_error();
    return Error(ErrorCode::kStoreUnavailable, "TLS handshake failed: " + why);
  }
  return Status::Ok();
}

// ---- connecting, bytes -------------------------------------------------------------------------

Result<redisContext*> redis_open(const std::string& host, int port, int64_t connect_timeout_ms,
                                 int64_t command_timeout_ms, const RedisTls* tls) {
  redisContext* ctx = redisConnectWithTimeout(host.c_str(), port, to_timeval(connect_timeout_ms));
  if (ctx == nullptr) return Error(ErrorCode::kStoreUnavailable, "cannot connect (out of memory)");
  if (ctx->err != 0) {
    Error e(ErrorCode::kStoreUnavailable, std::string("cannot connect: ") + ctx->errstr);
    redisFree(ctx);
    return e;
  }
  // The command timeout bounds the TLS handshake too.
  redisSetTimeout(ctx, to_timeval(command_timeout_ms));
  redisEnableKeepAlive(ctx);
  if (tls != nullptr) {
    if (Status s = tls->start(ctx, host); !s.ok()) {
      redisFree(ctx);
      return s.error();
    }
  }
  return ctx;
}

bool redis_send_all(redisContext* ctx, std::string_view bytes, std::string* why) {
  if (bytes.empty()) return true;
  if (redisAppendFormattedCommand(ctx, bytes.data(), bytes.size()) != REDIS_OK) {
    *why = ctx->errstr[0] != '\0' ? ctx->errstr : "out of memory";
    return false;
  }
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(ctx, &done) != REDIS_OK) {
      *why = ctx->errstr[0] != '\0' ? ctx->errstr : "write failed";
      return false;
    }
  }
  return true;
}

std::ptrdiff_t redis_recv(redisContext* ctx, char* buf, std::size_t cap, std::string* why) {
  ssize_t n = ctx->funcs->read(ctx, buf, cap);
  if (n < 0) {
    std::string reason = ctx->errstr;
    if (ctx->err == REDIS_ERR_IO &&
        (reason.find("temporarily unavailable") != std::string::npos ||
         reason == std::strerror(EAGAIN) || reason.find("timed out") != std::string::npos)) {
      reason = "timed out";
    } else if (ctx->err == REDIS_ERR_EOF) {
      reason = "the node closed the connection";
    } else if (reason.empty()) {
      reason = "I/O error";
    }
    *why = reason;
  }
  return n;
}

std::string tls_port_hint(bool tls, bool answered, std::string_view reason) {
  if (tls || answered) return "";
  for (std::string_view closed :
       {"closed the connection", "Server closed", "reset by peer", "Broken pipe"}) {
    if (reason.find(closed) != std::string_view::npos) {
      return "; if this Redis port expects TLS, use rediss://";
    }
  }
  return "";
}

// ---- SIGPIPE -----------------------------------------------------------------------------------

SigpipeGuard::SigpipeGuard() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeGuard::~SigpipeGuard() {
  if (!was_pending_) {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace quiver
