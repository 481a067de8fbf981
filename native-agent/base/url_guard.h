// URL guard: which HTTP upstreams the agent may dial.
//
// An upstream URL comes from configuration that a team member (or an attacker who got into the
// config) wrote. Without a guard the agent would happily connect to 127.0.0.1:6379, to a cloud
// metadata endpoint at 169.254.169.254 or to a router on 192.168.0.1, and hand the reply (or the
// error text) back: a server-side request forgery. So an HTTP upstream must resolve only to
// public addresses unless the connection's config sets `allow_private_addresses` (for a local
// quick start or tests).
//
// When to call what:
//   - `parse_http_url(url)`: the URL split into scheme, host, port and request target; strict
//     (http/https only, no user:password@, no fragment, no whitespace or control characters).
//   - `classify_ip(text)`: what kind of address a numeric IPv4/IPv6 literal is.
//   - `guard_url(url, options, resolver, timeout_ms)`: resolves the host once and checks EVERY
//     address it resolves to; the result lists those addresses, and the caller must connect to
//     one of them (the HTTP transport pins the first with cpp-httplib's host→address map, so the
//     name is never resolved again for that transport).
//
// DNS rebinding, honestly: a guard that checks a name and then lets the HTTP library resolve it a
// second time can be fooled by a DNS server that answers "public" first and "127.0.0.1" next.
// Pinning the checked address closes that gap for one transport. What stays open: (1) a new
// transport resolves again, so each transport is checked on its own (never trust an address
// across transports); (2) only the first checked address is used, so a multi-homed upstream gets
// no fallback to its other addresses; (3) an HTTP proxy or redirect would bypass the pin, which is
// why the transport uses neither (cpp-httplib reads no proxy variables and follows no redirects
// unless told to); (4) a public address that itself forwards to the internal network (a
// misconfigured reverse proxy) is beyond what an address check can see.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace quiver {

// An absolute http(s) URL, split for dialling.
struct HttpUrl {
  std::string scheme;  // "http" or "https" (lower case)
  std::string host;    // lower case; an IPv6 literal without brackets
  int port = 0;        // the explicit port or the scheme's default (80, 443)
  std::string target;  // path and query as written, "/" when empty; never a fragment
  bool host_is_ip = false;

  // "https://host:port" with an IPv6 literal in brackets: what cpp-httplib's Client takes.
  std::string origin() const;
  // origin + path, with any query shown as "?…": safe for logs and error messages, since a
  // query string is where some upstreams take API keys.
  std::string redacted() const;
};

// Parses an absolute http or https URL. kInvalidArgument with the reason otherwise. Refuses
// user information ("user:pass@"; credentials belong in headers, which are kept secret), IPv6
// zone identifiers, ports outside 1..65535 and any whitespace or control character.
Result<HttpUrl> parse_http_url(std::string_view url);

// What a numeric address is. Everything but kPublic is refused unless private addresses are
// allowed.
enum class AddressScope {
  kPublic = 0,
  kUnspecified,  // 0.0.0.0/8, ::  (connecting to 0.0.0.0 reaches the local host on Linux)
  kLoopback,     // 127.0.0.0/8, ::1
  kPrivate,      // 10/8, 172.16/12, 192.168/16 (RFC 1918), 100.64/10 (carrier-grade NAT)
  kLinkLocal,    // 169.254/16 (cloud metadata lives here), fe80::/10
  kUniqueLocal,  // fc00::/7, and the deprecated site-local fec0::/10
  kMulticast,    // 224/4, 255.255.255.255, ff00::/8 (no TCP service lives there)
  kReserved,     // 198.18/15 (benchmarking, often lab networks), 240/4 (future use);
                 // 64:ff9b:1::/48 (local-use NAT64, RFC 8215: translated into a local network)
};

// Lower-case name for messages: "public", "loopback", "private", …
const char* address_scope_name(AddressScope scope);

// Classifies a numeric IPv4 (dotted quad) or IPv6 literal. IPv6 addresses that carry an IPv4
// address a relay or translator delivers to are classified as that IPv4 address: IPv4-mapped and
// IPv4-compatible (::ffff:127.0.0.1), NAT64 (64:ff9b::/96), 6to4 (2002:AABB:CCDD::/48 carries
// AA.BB.CC.DD) and Teredo (2001:0::/32: the server's IPv4 in bits 32-63 and the client's,
// XOR 0xffffffff, in the last 32 bits; the less public of the two wins). kInvalidArgument when
// `ip` is not a numeric address.
Result<AddressScope> classify_ip(std::string_view ip);

// Resolves a host name to numeric addresses (IPv4 and IPv6). Must give up after `timeout_ms`.
using HostResolver =
    std::function<Result<std::vector<std::string>>(const std::string& host, int64_t timeout_ms)>;

// The system resolver (getaddrinfo). getaddrinfo cannot be cancelled, so it runs on a helper
// thread and this call stops waiting at the deadline (kTimeout); the helper finishes on its own.
// kTransport when the name does not resolve.
Result<std::vector<std::string>> resolve_host_system(const std::string& host, int64_t timeout_ms);

struct UrlGuardOptions {
  bool allow_private_addresses = false;
};

struct GuardedTarget {
  HttpUrl url;
  std::vector<std::string> addresses;  // every address the host resolved to, all checked
};

// Resolves `url.host` once (an IP literal is not resolved) and checks every address. Refused
// (kInvalidArgument, naming the host, the offending address and its scope) when any address is
// not public and private addresses are not allowed: a name that resolves to one public and one
// private address is refused, since the connection could land on either.
Result<GuardedTarget> guard_url(const HttpUrl& url, const UrlGuardOptions& options,
                                const HostResolver& resolver, int64_t timeout_ms);

}  // namespace quiver
