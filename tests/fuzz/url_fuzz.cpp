// Fuzzes URL parsing in the agent (native-agent): the HTTP upstream URL parser and the SSRF
// address classifier (url_guard.h), the Redis URL and listen address parsers (config.h). The
// whole input is tried as each. Properties: an accepted upstream URL's origin plus target parses
// back to the same URL; guard_url, fed the lines of the input as what the host "resolves" to,
// refuses every non-public address; parse results print without crashing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/config.h"
#include "native-agent/base/url_guard.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size() && out.size() < 16) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    out.emplace_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

void http_url(std::string_view input) {
  auto url = parse_http_url(input);
  if (!url.ok()) {
    fuzz::check(url.error().code == ErrorCode::kInvalidArgument,
                "parse_http_url: a refusal that is not kInvalidArgument");
    return;
  }
  fuzz::check(url->scheme == "http" || url->scheme == "https", "parse_http_url: a bad scheme");
  fuzz::check(url->port >= 1 && url->port <= 65535, "parse_http_url: port out of range");
  fuzz::check(!url->target.empty() && url->target[0] == '/', "parse_http_url: a bad target");
  fuzz::check(url->target.find('#') == std::string::npos, "parse_http_url: a fragment kept");
  (void)url->redacted();
  auto back = parse_http_url(url->origin() + url->target);
  fuzz::check(back.ok(), "parse_http_url refused origin() + target", url->origin() + url->target);
  fuzz::check(back->scheme == url->scheme && back->host == url->host && back->port == url->port &&
                  back->target == url->target && back->host_is_ip == url->host_is_ip,
              "parse_http_url: origin() + target parses to another URL");
  if (url->host_is_ip) {
    fuzz::check(classify_ip(url->host).ok(), "classify_ip refused an IP host parse_http_url took");
  }
}

void guard(std::string_view input) {
  // "http://fuzz.example/\n<address>\n<address>...": the URL is fixed, the resolver answers the
  // lines after the first.
  std::vector<std::string> lines = lines_of(input);
  std::vector<std::string> addresses(lines.begin() + 1, lines.end());
  auto url = parse_http_url("http://fuzz.example/");
  HostResolver resolver = [&](const std::string&, int64_t) -> Result<std::vector<std::string>> {
    return addresses;
  };
  auto target = guard_url(*url, UrlGuardOptions{}, resolver, 1000);
  if (target.ok()) {
    fuzz::check(!target->addresses.empty(), "guard_url passed a host with no address");
    for (const std::string& a : target->addresses) {
      auto scope = classify_ip(a);
      fuzz::check(scope.ok() && *scope == AddressScope::kPublic,
                  "guard_url passed a non-public address", a);
    }
  }
  auto open = guard_url(*url, UrlGuardOptions{true}, resolver, 1000);
  if (open.ok()) {
    for (const std::string& a : open->addresses) {
      fuzz::check(classify_ip(a).ok(), "guard_url passed an address that is not numeric", a);
    }
  }
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  std::string_view input = fuzz::as_view(data, size);
  http_url(input);
  auto scope = classify_ip(input);
  if (scope.ok()) (void)address_scope_name(*scope);
  guard(input);
  auto redis = parse_redis_url(input);
  if (redis.ok()) {
    std::string shown = redis->describe();
    if (redis->password && redis->password->reveal().find('*') == std::string::npos) {
      fuzz::check(shown.find(":" + redis->password->reveal() + "@") == std::string::npos,
                  "RedisConfig::describe shows the password");
    }
  }
  auto listen = parse_listen_address(input);
  if (listen.ok()) {
    (void)listen->describe();
    (void)listen->is_loopback();
  }
  auto id = connection_id_for_name(input);
  if (id.ok()) {
    fuzz::check(validate_connection_id(*id).ok(), "connection_id_for_name: an invalid id", *id);
  }
  return 0;
}
