// A plain TCP connection to 127.0.0.1:<port>: what the edge's JS host has (no client library, the
// core's bytes). For the tests that speak RESP to a real redis-server byte by byte.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/resp.h"
#include "shared/status.h"

namespace quiver::testing {

class LoopbackSocket {
 public:
  explicit LoopbackSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~LoopbackSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  bool ok() const { return fd_ >= 0; }

  bool send_all(std::string_view bytes) {
    if (fd_ < 0) return false;
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Up to `max` bytes as they come; "" on close, error or 5 s without data.
  std::string receive(size_t max = 4096) {
    if (fd_ < 0) return "";
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return "";
    std::string buf(max, '\0');
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buf;
  }

  // Sends `bytes` and decodes `expected` replies, reading in small chunks.
  Result<std::vector<RespValue>> exchange(std::string_view bytes, size_t expected) {
    if (!send_all(bytes)) return Error(ErrorCode::kTransport, "send failed");
    RespDecoder decoder;
    std::vector<RespValue> replies;
    while (replies.size() < expected) {
      Result<std::optional<RespValue>> next = decoder.next();
      if (!next.ok()) return next.error();
      if (next->has_value()) {
        replies.push_back(std::move(**next));
        continue;
      }
      std::string chunk = receive(1024);
      if (chunk.empty()) return Error(ErrorCode::kTransport, "closed or no reply");
      if (Status s = decoder.feed(chunk); !s.ok()) return s.error();
    }
    return replies;
  }

 private:
  int fd_ = -1;
};

}  // namespace quiver::testing
