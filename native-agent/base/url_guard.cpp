#include "native-agent/base/url_guard.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "shared/ascii.h"
#include "shared/enum_names.h"
#include "shared/numbers.h"

namespace quiver {
namespace {

Error bad_url(const std::string& why) {
  return Error(ErrorCode::kInvalidArgument, "invalid upstream URL: " + why);
}

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// A numeric address of `family` (AF_INET: 4 bytes, AF_INET6: 16), in network order. inet_pton
// writes `out` only when the whole text is an address.
template <std::size_t N>
bool parse_ip(int family, std::string_view text, std::array<uint8_t, N>* out) {
  static_assert(N == sizeof(in_addr) || N == sizeof(in6_addr));
  const std::string s(text);
  return inet_pton(family, s.c_str(), out->data()) == 1;
}

bool parse_ipv4(std::string_view text, std::array<uint8_t, 4>* out) {
  return parse_ip(AF_INET, text, out);
}

bool parse_ipv6(std::string_view text, std::array<uint8_t, 16>* out) {
  return parse_ip(AF_INET6, text, out);
}

AddressScope classify_v4(const std::array<uint8_t, 4>& b) {
  if (b[0] == 0) return AddressScope::kUnspecified;
  if (b[0] == 127) return AddressScope::kLoopback;
  if (b[0] == 10) return AddressScope::kPrivate;
  if (b[0] == 172 && (b[1] & 0xf0) == 16) return AddressScope::kPrivate;
  if (b[0] == 192 && b[1] == 168) return AddressScope::kPrivate;
  if (b[0] == 100 && (b[1] & 0xc0) == 64) return AddressScope::kPrivate;
  if (b[0] == 169 && b[1] == 254) return AddressScope::kLinkLocal;
  if ((b[0] & 0xf0) == 224) return AddressScope::kMulticast;
  if (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255) return AddressScope::kMulticast;
  if (b[0] == 198 && (b[1] & 0xfe) == 18) return AddressScope::kReserved;
  if ((b[0] & 0xf0) == 240) return AddressScope::kReserved;
  return AddressScope::kPublic;
}

AddressScope classify_v6(const std::array<uint8_t, 16>& b) {
  auto zero = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      if (b[i] != 0) return false;
    }
    return true;
  };
  auto embedded_v4 = [&]() { return std::array<uint8_t, 4>{b[12], b[13], b[14], b[15]}; };
  if (zero(0, 16)) return AddressScope::kUnspecified;
  if (zero(0, 15) && b[15] == 1) return AddressScope::kLoopback;
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated) reach the IPv4 address.
  if (zero(0, 10) && b[10] == 0xff && b[11] == 0xff) return classify_v4(embedded_v4());
  if (zero(0, 12)) return classify_v4(embedded_v4());
  // 64:ff9b::/96: the well-known NAT64 prefix; the translator dials the embedded IPv4 address.
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(4, 12)) {
    return classify_v4(embedded_v4());
  }
  // 64:ff9b:1::/48: NAT64 for local use (RFC 8215); it translates into a local network.
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 &&
      b[5] == 0x01) {
    return AddressScope::kReserved;
  }
  // 2002::/16, 6to4: a relay delivers to the IPv4 address in bits 16-47.
  if (b[0] == 0x20 && b[1] == 0x02) return classify_v4({b[2], b[3], b[4], b[5]});
  // 2001:0::/32, Teredo: the server's IPv4 in bits 32-63, the client's (where the packet ends
  // up) in the last 32 bits, each bit inverted. The less public of the two decides.
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00) {
    AddressScope client =
        classify_v4({static_cast<uint8_t>(b[12] ^ 0xff), static_cast<uint8_t>(b[13] ^ 0xff),
                     static_cast<uint8_t>(b[14] ^ 0xff), static_cast<uint8_t>(b[15] ^ 0xff)});
    if (client != AddressScope::kPublic) return client;
    return classify_v4({b[4], b[5], b[6], b[7]});
  }
  if ((b[0] & 0xfe) == 0xfc) return AddressScope::kUniqueLocal;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return AddressScope::kLinkLocal;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return AddressScope::kUniqueLocal;
  if (b[0] == 0xff) return AddressScope::kMulticast;
  return AddressScope::kPublic;
}

}  // namespace

std::string HttpUrl::origin() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return scheme + "://" + h + ":" + std::to_string(port);
}

std::string HttpUrl::redacted() const {
  std::size_t q = target.find('?');
  if (q == std::string::npos) return origin() + target;
  return origin() + target.substr(0, q) + "?\xE2\x80\xA6";  // "?…"
}

Result<HttpUrl> parse_http_url(std::string_view url) {
  for (char c : url) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return bad_url("it contains whitespace or a control character");
    if (u >= 0x80) return bad_url("it contains a non-ASCII byte (percent-encode it)");
  }
  std::size_t sep = url.find("://");
  if (sep == std::string_view::npos) return bad_url("it needs a scheme (http:// or https://)");
  HttpUrl out;
  out.scheme = ascii_lower(url.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https") {
    return bad_url("scheme '" + out.scheme + "' is not http or https");
  }
  std::string_view rest = url.substr(sep + 3);
  std::size_t auth_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view tail =
      auth_end == std::string_view::npos ? std::string_view() : rest.substr(auth_end);
  if (authority.find('@') != std::string_view::npos) {
    return bad_url("user information (user:password@) is not allowed; pass credentials as headers");
  }

  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad_url("unterminated IPv6 literal");
    std::string_view literal = authority.substr(1, close - 1);
    if (literal.find('%') != std::string_view::npos) {
      return bad_url("IPv6 zone identifiers are not supported");
    }
    std::array<uint8_t, 16> bytes{};
    if (!parse_ipv6(literal, &bytes)) return bad_url("malformed IPv6 literal");
    out.host = ascii_lower(literal);
    out.host_is_ip = true;
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad_url("unexpected characters after the IPv6 literal");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    std::size_t colon = authority.find(':');
    std::string_view host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      has_port = true;
    }
    if (host.empty()) return bad_url("no host");
    if (host.size() > 253) return bad_url("host name longer than 253 characters");
    for (char c : host) {
      if (!is_host_char(c)) return bad_url("host contains '" + std::string(1, c) + "'");
    }
    out.host = ascii_lower(host);
    std::array<uint8_t, 4> v4{};
    out.host_is_ip = parse_ipv4(out.host, &v4);
  }
  if (out.host.empty()) return bad_url("no host");

  if (has_port) {
    if (port_text.empty() || port_text.size() > 5) return bad_url("port must be 1..65535");
    std::optional<uint64_t> port = parse_decimal_u64(port_text);
    if (!port) return bad_url("port must be a number");
    if (*port < 1 || *port > 65535) return bad_url("port must be 1..65535");
    out.port = static_cast<int>(*port);
  } else {
    out.port = out.scheme == "https" ? 443 : 80;
  }

  std::size_t hash = tail.find('#');
  if (hash != std::string_view::npos) tail = tail.substr(0, hash);
  if (tail.empty()) {
    out.target = "/";
  } else if (tail.front() == '?') {
    out.target = "/" + std::string(tail);
  } else {
    out.target = std::string(tail);
  }
  return out;
}

const char* address_scope_name(AddressScope scope) {
  static constexpr const char* const kNames[] = {"public",    "unspecified", "loopback",
                                                 "private",   "link-local",  "unique-local",
                                                 "multicast", "reserved"};
  static_assert(covers_enum(kNames, AddressScope::kReserved));
  return name_of(kNames, scope, "unknown");
}

Result<AddressScope> classify_ip(std::string_view ip) {
  std::array<uint8_t, 4> v4{};
  if (parse_ipv4(ip, &v4)) return classify_v4(v4);
  std::array<uint8_t, 16> v6{};
  if (parse_ipv6(ip, &v6)) return classify_v6(v6);
  return Error(ErrorCode::kInvalidArgument, "not a numeric IP address: '" + std::string(ip) + "'");
}

Result<std::vector<std::string>> resolve_host_system(const std::string& host, int64_t timeout_ms) {
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int rc = 0;
    std::vector<std::string> addresses;
  };
  auto lookup = std::make_shared<Lookup>();
  try {
    std::thread([lookup, host] {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* list = nullptr;
      int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
      std::vector<std::string> found;
      if (rc == 0) {
        for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
          char text[INET6_ADDRSTRLEN] = {0};
          const void* src = nullptr;
          if (ai->ai_family == AF_INET) {
            src = &reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr;
          } else if (ai->ai_family == AF_INET6) {
            src = &reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr;
          } else {
            continue;
          }
          if (inet_ntop(ai->ai_family, src, text, sizeof text) == nullptr) continue;
          if (std::find(found.begin(), found.end(), text) == found.end()) found.push_back(text);
        }
        freeaddrinfo(list);
      }
      std::lock_guard<std::mutex> lock(lookup->mu);
      lookup->rc = rc;
      lookup->addresses = std::move(found);
      lookup->done = true;
      lookup->cv.notify_all();
    }).detach();
  } catch (...) {
    return Error(ErrorCode::kInternal, "could not start a resolver thread");
  }
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->cv.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)),
                           [&] { return lookup->done; })) {
    return Error(ErrorCode::kTimeout,
                 "resolving '" + host + "' took longer than " + std::to_string(timeout_ms) + " ms");
  }
  if (lookup->rc != 0) {
    return Error(ErrorCode::kTransport,
                 "could not resolve '" + host + "': " + gai_strerror(lookup->rc));
  }
  return lookup->addresses;
}

Result<GuardedTarget> guard_url(const HttpUrl& url, const UrlGuardOptions& options,
                                const HostResolver& resolver, int64_t timeout_ms) {
  GuardedTarget target;
  target.url = url;
  if (url.host_is_ip) {
    target.addresses.push_back(url.host);
  } else {
    if (!resolver) return Error(ErrorCode::kInternal, "no resolver");
    auto resolved = resolver(url.host, timeout_ms);
    if (!resolved.ok()) return resolved.error();
    target.addresses = std::move(*resolved);
  }
  if (target.addresses.empty()) {
    return Error(ErrorCode::kTransport, "'" + url.host + "' resolved to no address");
  }
  for (const std::string& address : target.addresses) {
    auto scope = classify_ip(address);
    if (!scope.ok()) return scope.error();
    if (*scope != AddressScope::kPublic && !options.allow_private_addresses) {
      std::string what = url.host_is_ip ? "'" + url.host + "' is a "
                                        : "'" + url.host + "' resolves to " + address + ", a ";
      return Error(ErrorCode::kInvalidArgument,
                   "upstream refused: " + what + address_scope_name(*scope) +
                       " address; set allow_private_addresses to reach it");
    }
  }
  return target;
}

}  // namespace quiver
