// The URL guard: strict parsing of upstream URLs, address classification, and the rule that
// every address a host resolves to must be public unless private addresses are allowed.
#include "native-agent/base/url_guard.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

HostResolver fixed_resolver(std::vector<std::string> addresses, int* calls = nullptr) {
  return [addresses, calls](const std::string&, int64_t) -> Result<std::vector<std::string>> {
    if (calls != nullptr) ++*calls;
    return addresses;
  };
}

TEST(UrlGuardParse, SplitsAbsoluteHttpUrls) {
  auto u = parse_http_url("https://MCP.Example.com/mcp?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "mcp.example.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->target, "/mcp?x=1");
  EXPECT_FALSE(u->host_is_ip);
  EXPECT_EQ(u->origin(), "https://mcp.example.com:443");
  EXPECT_EQ(u->redacted(), "https://mcp.example.com:443/mcp?\xE2\x80\xA6");

  auto plain = parse_http_url("HTTP://10.1.2.3:8080");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->scheme, "http");
  EXPECT_EQ(plain->port, 8080);
  EXPECT_EQ(plain->target, "/");
  EXPECT_TRUE(plain->host_is_ip);

  auto v6 = parse_http_url("http://[2001:DB8::1]:3000/a/b");
  ASSERT_TRUE(v6.ok()) << v6.error().message;
  EXPECT_EQ(v6->host, "2001:db8::1");
  EXPECT_TRUE(v6->host_is_ip);
  EXPECT_EQ(v6->origin(), "http://[2001:db8::1]:3000");
  EXPECT_EQ(v6->target, "/a/b");

  auto query_only = parse_http_url("http://example.com?k=v");
  ASSERT_TRUE(query_only.ok());
  EXPECT_EQ(query_only->target, "/?k=v");
  EXPECT_EQ(query_only->redacted(), "http://example.com:80/?\xE2\x80\xA6");
}

TEST(UrlGuardParse, RefusesWhatIsNotAPlainHttpUrl) {
  const char* bad[] = {
      "",
      "example.com/mcp",     // no scheme
      "ftp://example.com/",  // not http(s)
      "file:///etc/passwd",
      "http://user:secret@example.com/",  // credentials in the URL
      "http:///mcp",                      // no host
      "http://:80/",
      "http://exa mple.com/",         // whitespace
      "http://example.com/\r\nX: y",  // header injection attempt
      "http://example.com:0/",
      "http://example.com:65536/",
      "http://example.com:80x/",
      "http://example.com:/",
      "http://[::1/",              // unterminated literal
      "http://[fe80::1%25eth0]/",  // zone id
      "http://[not-v6]/",
      "http://ex\xC3\xA4mple.com/",  // non-ASCII host (punycode it)
      "http://exa!mple.com/",
  };
  for (const char* url : bad) {
    auto u = parse_http_url(url);
    EXPECT_FALSE(u.ok()) << "accepted: " << url;
    if (!u.ok()) {
      EXPECT_EQ(u.error().code, ErrorCode::kInvalidArgument) << url;
    }
  }
  auto creds = parse_http_url("http://user:hunter2@example.com/");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.error().message.find("hunter2"), std::string::npos);
}

TEST(UrlGuardClassify, KnowsTheNonPublicRanges) {
  struct Case {
    const char* ip;
    AddressScope scope;
  };
  const Case cases[] = {
      {"127.0.0.1", AddressScope::kLoopback},
      {"127.255.255.254", AddressScope::kLoopback},
      {"0.0.0.0", AddressScope::kUnspecified},
      {"0.1.2.3", AddressScope::kUnspecified},
      {"10.0.0.1", AddressScope::kPrivate},
      {"10.255.255.255", AddressScope::kPrivate},
      {"172.15.255.255", AddressScope::kPublic},
      {"172.16.0.0", AddressScope::kPrivate},
      {"172.31.255.255", AddressScope::kPrivate},
      {"172.32.0.0", AddressScope::kPublic},
      {"192.168.1.1", AddressScope::kPrivate},
      {"192.169.0.1", AddressScope::kPublic},
      {"100.64.0.1", AddressScope::kPrivate},
      {"100.127.255.255", AddressScope::kPrivate},
      {"100.128.0.0", AddressScope::kPublic},
      {"169.254.169.254", AddressScope::kLinkLocal},
      {"224.0.0.1", AddressScope::kMulticast},
      {"255.255.255.255", AddressScope::kMulticast},
      {"8.8.8.8", AddressScope::kPublic},
      {"1.1.1.1", AddressScope::kPublic},
      {"::", AddressScope::kUnspecified},
      {"::1", AddressScope::kLoopback},
      {"::ffff:127.0.0.1", AddressScope::kLoopback},
      {"::ffff:7f00:1", AddressScope::kLoopback},
      {"::ffff:10.0.0.1", AddressScope::kPrivate},
      {"::ffff:8.8.8.8", AddressScope::kPublic},
      {"::127.0.0.1", AddressScope::kLoopback},
      {"64:ff9b::a9fe:a9fe", AddressScope::kLinkLocal},  // NAT64 of 169.254.169.254
      {"fc00::1", AddressScope::kUniqueLocal},
      {"fd12:3456::1", AddressScope::kUniqueLocal},
      {"fe80::1", AddressScope::kLinkLocal},
      {"febf::1", AddressScope::kLinkLocal},
      {"fec0::1", AddressScope::kUniqueLocal},
      {"ff02::1", AddressScope::kMulticast},
      {"2001:4860:4860::8888", AddressScope::kPublic},
      {"2606:4700::1111", AddressScope::kPublic},
      // Benchmarking (198.18/15) and future-use (240/4) IPv4.
      {"198.17.255.255", AddressScope::kPublic},
      {"198.18.0.1", AddressScope::kReserved},
      {"198.19.255.255", AddressScope::kReserved},
      {"198.20.0.0", AddressScope::kPublic},
      {"240.0.0.1", AddressScope::kReserved},
      {"254.255.255.255", AddressScope::kReserved},
      {"::ffff:198.18.0.1", AddressScope::kReserved},
      // NAT64, well-known prefix: the embedded IPv4 decides.
      {"64:ff9b::7f00:1", AddressScope::kLoopback},
      {"64:ff9b::10.1.2.3", AddressScope::kPrivate},
      {"64:ff9b::808:808", AddressScope::kPublic},
      // NAT64 for local use (RFC 8215) is refused whatever it carries.
      {"64:ff9b:1::808:808", AddressScope::kReserved},
      {"64:ff9b:1:ffff::1", AddressScope::kReserved},
      // 6to4: 2002:AABB:CCDD:: carries AA.BB.CC.DD.
      {"2002:7f00:1::", AddressScope::kLoopback},
      {"2002:a9fe:a9fe::1", AddressScope::kLinkLocal},
      {"2002:c0a8:101:1::1", AddressScope::kPrivate},
      {"2002:c612:1::", AddressScope::kReserved},  // 198.18.0.1
      {"2002:808:808::1", AddressScope::kPublic},
      // Teredo: server 65.54.227.120 (public); the client, bits inverted, in the last 32 bits.
      {"2001:0:4136:e378:8000:63bf:80ff:fffe", AddressScope::kLoopback},   // client 127.0.0.1
      {"2001:0:4136:e378:8000:63bf:5601:5601", AddressScope::kLinkLocal},  // 169.254.169.254
      {"2001:0:4136:e378:8000:63bf:f5ff:fefe", AddressScope::kPrivate},    // 10.0.1.1
      {"2001:0:4136:e378:8000:63bf:f7f7:f7f7", AddressScope::kPublic},     // 8.8.8.8
      {"2001:0:a00:1:8000:63bf:f7f7:f7f7", AddressScope::kPrivate},        // server 10.0.0.1
      {"2001:db8::1", AddressScope::kPublic},  // not Teredo (2001:0::/32 only)
  };
  for (const Case& c : cases) {
    auto scope = classify_ip(c.ip);
    ASSERT_TRUE(scope.ok()) << c.ip;
    EXPECT_EQ(*scope, c.scope) << c.ip << " is " << address_scope_name(*scope);
  }
  EXPECT_FALSE(classify_ip("localhost").ok());
  EXPECT_FALSE(classify_ip("127.1").ok());  // not a dotted quad: a name for the resolver
  EXPECT_FALSE(classify_ip("").ok());
}

TEST(UrlGuard, RefusesLoopbackLiteralsUnlessAllowed) {
  auto url = parse_http_url("http://127.0.0.1:3000/mcp");
  ASSERT_TRUE(url.ok());
  int calls = 0;
  auto refused = guard_url(*url, {}, fixed_resolver({}, &calls), 1000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("loopback"), std::string::npos);
  EXPECT_NE(refused.error().message.find("allow_private_addresses"), std::string::npos);
  EXPECT_EQ(calls, 0) << "an IP literal needs no resolution";

  UrlGuardOptions allow;
  allow.allow_private_addresses = true;
  auto allowed = guard_url(*url, allow, fixed_resolver({}, &calls), 1000);
  ASSERT_TRUE(allowed.ok()) << allowed.error().message;
  EXPECT_EQ(allowed->addresses, std::vector<std::string>{"127.0.0.1"});

  auto metadata = parse_http_url("http://169.254.169.254/latest/meta-data");
  ASSERT_TRUE(metadata.ok());
  auto m = guard_url(*metadata, {}, fixed_resolver({}), 1000);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("link-local"), std::string::npos);

  auto v6 = parse_http_url("http://[::ffff:192.168.0.1]/");
  ASSERT_TRUE(v6.ok());
  EXPECT_FALSE(guard_url(*v6, {}, fixed_resolver({}), 1000).ok());
}

TEST(UrlGuard, ChecksEveryResolvedAddress) {
  auto url = parse_http_url("https://mcp.example.com/mcp");
  ASSERT_TRUE(url.ok());
  int calls = 0;
  auto pub =
      guard_url(*url, {}, fixed_resolver({"93.184.215.14", "2606:2800:21f::1"}, &calls), 1000);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  EXPECT_EQ(pub->addresses.size(), 2u);
  EXPECT_EQ(calls, 1);

  // One private address among public ones is enough to refuse: the connection could land there.
  auto mixed = guard_url(*url, {}, fixed_resolver({"93.184.215.14", "10.0.0.7"}), 1000);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.error().message.find("10.0.0.7"), std::string::npos);
  EXPECT_NE(mixed.error().message.find("mcp.example.com"), std::string::npos);

  // Addresses that carry or lead to a non-public network are refused the same way, and allowed
  // only with allow_private_addresses.
  for (const char* address : {"198.18.0.7", "240.1.2.3", "2002:a00:1::1", "64:ff9b:1::808:808",
                              "2001:0:4136:e378:8000:63bf:80ff:fffe", "64:ff9b::a00:1"}) {
    auto refused = guard_url(*url, {}, fixed_resolver({"93.184.215.14", address}), 1000);
    ASSERT_FALSE(refused.ok()) << address;
    EXPECT_NE(refused.error().message.find(address), std::string::npos) << address;
    UrlGuardOptions allow;
    allow.allow_private_addresses = true;
    EXPECT_TRUE(guard_url(*url, allow, fixed_resolver({address}), 1000).ok()) << address;
  }

  auto none = guard_url(*url, {}, fixed_resolver({}), 1000);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kTransport);

  HostResolver failing = [](const std::string&, int64_t) -> Result<std::vector<std::string>> {
    return Error(ErrorCode::kTimeout, "slow DNS");
  };
  auto slow = guard_url(*url, {}, failing, 1000);
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.error().code, ErrorCode::kTimeout);
}

TEST(UrlGuard, SystemResolverSeesThroughNamesAndNumericTricks) {
  // "localhost" and the all-digits spelling of 127.0.0.1 both resolve to loopback: refused.
  for (const char* u : {"http://localhost:8080/mcp", "http://2130706433/", "http://127.1/"}) {
    auto url = parse_http_url(u);
    ASSERT_TRUE(url.ok()) << u;
    auto r = guard_url(*url, {}, resolve_host_system, 2000);
    ASSERT_FALSE(r.ok()) << u;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << u << ": " << r.error().message;
  }
  auto direct = resolve_host_system("localhost", 2000);
  ASSERT_TRUE(direct.ok()) << direct.error().message;
  ASSERT_FALSE(direct->empty());
  for (const std::string& a : *direct) {
    auto scope = classify_ip(a);
    ASSERT_TRUE(scope.ok()) << a;
    EXPECT_EQ(*scope, AddressScope::kLoopback) << a;
  }
  auto missing = resolve_host_system("no-such-host.invalid", 2000);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace quiver
