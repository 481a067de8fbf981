#include "shared/identity.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/json.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

// ---- identifiers -------------------------------------------------------------------------------

TEST(Identity, ConnectionIdCharset) {
  for (const std::string& ok :
       {std::string("github"), std::string("a"), std::string("A.b_c-9"), std::string(128, 'x')}) {
    EXPECT_TRUE(validate_connection_id(ok).ok()) << ok;
  }
  for (const std::string& bad :
       {std::string(""), std::string(129, 'x'), std::string("a:b"), std::string("a{b"),
        std::string("a}b"), std::string("a/b"), std::string("a b"), std::string("a@b"),
        std::string("a*b"), std::string("caf\xc3\xa9"), std::string("a\0b", 3),
        std::string("a\nb")}) {
    Status s = validate_connection_id(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find("connection id"), std::string::npos) << s.error().message;
  }
  Status s = validate_connection_id("abc:def");
  EXPECT_NE(s.error().message.find("position 3"), std::string::npos) << s.error().message;
  EXPECT_NE(validate_connection_id(std::string(129, 'x')).error().message.find("128"),
            std::string::npos);
}

TEST(Identity, MemberIdCharset) {
  for (const char* ok : {"alice", "alice@example.com", "bob+tag", "u-1_2.3"}) {
    EXPECT_TRUE(validate_member_id(ok).ok()) << ok;
  }
  for (const std::string& bad :
       {std::string(""), std::string(129, 'm'), std::string("a:b"), std::string("a/b"),
        std::string("{a}"), std::string("a b"), std::string("a*"), std::string("\xff")}) {
    Status s = validate_member_id(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.error().message.find("member id"), std::string::npos);
  }
  EXPECT_TRUE(validate_member_id(std::string(128, 'm')).ok());
}

TEST(Identity, NamespaceCharset) {
  EXPECT_TRUE(validate_namespace(kDefaultNamespace).ok());
  EXPECT_TRUE(validate_namespace("team-a.prod_1").ok());
  EXPECT_TRUE(validate_namespace(std::string(64, 'n')).ok());
  for (const std::string& bad : {std::string(""), std::string(65, 'n'), std::string("a}b"),
                                 std::string("a{b"), std::string("a:b"), std::string("a@b")}) {
    EXPECT_FALSE(validate_namespace(bad).ok()) << bad;
  }
}

// ---- principals --------------------------------------------------------------------------------

TEST(Identity, CredentialModeNamesRoundTrip) {
  EXPECT_EQ(static_cast<int>(CredentialMode::kUnknown), 0);
  for (CredentialMode m : {CredentialMode::kShared, CredentialMode::kPerMember}) {
    EXPECT_EQ(credential_mode_from_string(credential_mode_name(m)), m);
  }
  EXPECT_STREQ(credential_mode_name(CredentialMode::kShared), "shared");
  EXPECT_STREQ(credential_mode_name(CredentialMode::kPerMember), "per_member");
  for (const char* other : {"", "Shared", "per-member", "member", "unknown"}) {
    EXPECT_EQ(credential_mode_from_string(other), CredentialMode::kUnknown) << other;
  }
}

TEST(Identity, PrincipalFollowsTheCredentialMode) {
  Result<Principal> shared = principal_for(CredentialMode::kShared, "alice");
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->str(), "shared");
  EXPECT_TRUE(shared->is_shared());
  EXPECT_EQ(shared->member_id(), "");
  // Shared mode does not depend on who asks.
  EXPECT_EQ(principal_for(CredentialMode::kShared, "")->str(), "shared");

  Result<Principal> member = principal_for(CredentialMode::kPerMember, "alice@example.com");
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->str(), "member/alice@example.com");
  EXPECT_FALSE(member->is_shared());
  EXPECT_EQ(member->member_id(), "alice@example.com");
  EXPECT_NE(*member, *shared);

  EXPECT_FALSE(principal_for(CredentialMode::kPerMember, "").ok());
  EXPECT_FALSE(principal_for(CredentialMode::kPerMember, "a:b").ok());
  Result<Principal> unknown = principal_for(CredentialMode::kUnknown, "alice");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, ErrorCode::kInvalidArgument);
}

TEST(Identity, PrincipalParsing) {
  EXPECT_EQ(Principal::parse("shared")->str(), "shared");
  EXPECT_EQ(Principal::parse("member/bob+x")->member_id(), "bob+x");
  EXPECT_EQ(*Principal::parse("member/bob"), *Principal::member("bob"));
  for (const char* bad : {"", "Shared", "shared ", "member/", "member/a/b", "members/a", "member",
                          "member/a:b", "alice"}) {
    EXPECT_FALSE(Principal::parse(bad).ok()) << bad;
  }
}

// ---- config_hash -------------------------------------------------------------------------------

ConnectionIdentity stdio_identity() {
  ConnectionIdentity id;
  id.transport = TransportKind::kStdio;
  id.command = "npx";
  id.args = {"-y", "@modelcontextprotocol/server-everything"};
  id.env = {{"GITHUB_TOKEN", "ghp_SECRETSECRETSECRET"}, {"LOG_LEVEL", "debug"}};
  id.auth_type = AuthType::kNone;
  id.credential_mode = CredentialMode::kShared;
  id.credential_version = "1";
  return id;
}

ConnectionIdentity http_identity() {
  ConnectionIdentity id;
  id.transport = TransportKind::kHttp;
  id.url = "https://mcp.example.com/mcp?tenant=acme";
  id.headers = {{"Authorization", "Bearer sk-live-TOPSECRET"}, {"X-Team", "blue-squirrel"}};
  id.auth_type = AuthType::kBearer;
  id.credential_mode = CredentialMode::kPerMember;
  id.credential_version = "7";
  return id;
}

std::string hash_of(const ConnectionIdentity& id) {
  Result<std::string> h = config_hash(id);
  EXPECT_TRUE(h.ok()) << h.error().message;
  return h.ok() ? *h : std::string();
}

TEST(ConfigHash, IsSha256HexOfASortedCanonicalForm) {
  Result<std::string> canonical = config_identity_canonical(stdio_identity());
  ASSERT_TRUE(canonical.ok());
  // The recipe, pinned: changing it re-lists every cached manifest once, so it must be deliberate.
  EXPECT_EQ(*canonical, R"({"args":["-y","@modelcontextprotocol/server-everything"],"auth":"none",)"
                        R"("command":"npx","credential_mode":"shared","credential_version":"1",)"
                        R"("env_names":["GITHUB_TOKEN","LOG_LEVEL"],"transport":"stdio","v":1})");
  const std::string h = hash_of(stdio_identity());
  EXPECT_EQ(h, sha256_hex(*canonical));
  ASSERT_EQ(h.size(), 64u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);

  Result<std::string> http = config_identity_canonical(http_identity());
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(*http, R"({"auth":"bearer","credential_mode":"per_member","credential_version":"7",)"
                   R"("header_names":["authorization","x-team"],"transport":"http",)"
                   R"("url":"https://mcp.example.com/mcp?tenant=acme","v":1})");
}

TEST(ConfigHash, StableUnderOrderOfNamesAndCaseOfHeaderNames) {
  ConnectionIdentity a = http_identity();
  ConnectionIdentity b;
  b.transport = TransportKind::kHttp;
  b.credential_version = "7";
  b.credential_mode = CredentialMode::kPerMember;
  b.auth_type = AuthType::kBearer;
  b.headers["x-team"] = "other";
  b.headers["AUTHORIZATION"] = "Bearer other";
  b.url = a.url;
  EXPECT_EQ(hash_of(a), hash_of(b));
  // Parsing and re-serializing the canonical form is the identity: keys are sorted.
  Result<std::string> canonical = config_identity_canonical(a);
  ASSERT_TRUE(canonical.ok());
  Result<Json> parsed = parse_json(*canonical);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->dump(), *canonical);
}

TEST(ConfigHash, ChangesWhenAnyIdentityFieldChanges) {
  struct Case {
    const char* what;
    std::function<ConnectionIdentity()> base;
    std::function<void(ConnectionIdentity&)> edit;
  };
  const std::vector<Case> cases = {
      {"command", stdio_identity, [](ConnectionIdentity& i) { i.command = "node"; }},
      {"arg value", stdio_identity, [](ConnectionIdentity& i) { i.args[1] += "@2"; }},
      {"arg order", stdio_identity, [](ConnectionIdentity& i) { std::swap(i.args[0], i.args[1]); }},
      {"arg added", stdio_identity, [](ConnectionIdentity& i) { i.args.push_back("--ro"); }},
      {"arg split", stdio_identity,
       [](ConnectionIdentity& i) { i.args = {"-y @modelcontextprotocol/server-everything"}; }},
      {"empty arg", stdio_identity, [](ConnectionIdentity& i) { i.args.push_back(""); }},
      {"env name added", stdio_identity, [](ConnectionIdentity& i) { i.env["HOME"] = "/root"; }},
      {"env name removed", stdio_identity, [](ConnectionIdentity& i) { i.env.erase("LOG_LEVEL"); }},
      {"env name case", stdio_identity,
       [](ConnectionIdentity& i) {
         i.env.erase("LOG_LEVEL");
         i.env["log_level"] = "debug";
       }},
      {"url path", http_identity,
       [](ConnectionIdentity& i) { i.url = "https://mcp.example.com/v2"; }},
      {"url query", http_identity,
       [](ConnectionIdentity& i) { i.url = "https://mcp.example.com/mcp?tenant=other"; }},
      {"url user", http_identity,
       [](ConnectionIdentity& i) { i.url = "https://bot@mcp.example.com/mcp?tenant=acme"; }},
      {"header name added", http_identity, [](ConnectionIdentity& i) { i.headers["X-Org"] = ""; }},
      {"header name removed", http_identity,
       [](ConnectionIdentity& i) { i.headers.erase("X-Team"); }},
      {"transport", stdio_identity,
       [](ConnectionIdentity& i) {
         i.transport = TransportKind::kHttp;
         i.url = "https://mcp.example.com/mcp";
       }},
      {"auth type", http_identity, [](ConnectionIdentity& i) { i.auth_type = AuthType::kOAuth; }},
      {"auth none vs headers", stdio_identity,
       [](ConnectionIdentity& i) { i.auth_type = AuthType::kHeaders; }},
      {"api key", http_identity, [](ConnectionIdentity& i) { i.auth_type = AuthType::kApiKey; }},
      {"credential mode", http_identity,
       [](ConnectionIdentity& i) { i.credential_mode = CredentialMode::kShared; }},
      {"credential version", http_identity,
       [](ConnectionIdentity& i) { i.credential_version = "8"; }},
      {"credential version emptied", stdio_identity,
       [](ConnectionIdentity& i) { i.credential_version.clear(); }},
  };
  std::set<std::string> seen = {hash_of(stdio_identity()), hash_of(http_identity())};
  for (const Case& c : cases) {
    ConnectionIdentity base = c.base();
    ConnectionIdentity edited = base;
    c.edit(edited);
    const std::string h = hash_of(edited);
    EXPECT_NE(h, hash_of(base)) << c.what;
    EXPECT_TRUE(seen.insert(h).second) << c.what << " collides with another case";
  }
}

TEST(ConfigHash, SecretValuesNeitherChangeItNorAppearInIt) {
  const std::vector<std::string> secrets = {"ghp_SECRETSECRETSECRET", "sk-live-TOPSECRET",
                                            "blue-squirrel", "hunter2"};
  ConnectionIdentity s1 = stdio_identity();
  ConnectionIdentity s2 = s1;
  s2.env["GITHUB_TOKEN"] = "ghp_ROTATED";
  s2.env["LOG_LEVEL"] = "";
  EXPECT_EQ(hash_of(s1), hash_of(s2));

  ConnectionIdentity h1 = http_identity();
  h1.url = "https://bot:hunter2@mcp.example.com/mcp?tenant=acme";
  ConnectionIdentity h2 = h1;
  h2.url = "https://bot:correct-horse@mcp.example.com/mcp?tenant=acme";
  h2.headers["Authorization"] = "Bearer sk-live-ROTATED";
  h2.headers["X-Team"] = "";
  EXPECT_EQ(hash_of(h1), hash_of(h2));

  for (const ConnectionIdentity& id : {s1, h1}) {
    Result<std::string> canonical = config_identity_canonical(id);
    ASSERT_TRUE(canonical.ok());
    const std::string h = hash_of(id);
    for (const std::string& secret : secrets) {
      EXPECT_EQ(canonical->find(secret), std::string::npos) << secret << " in " << *canonical;
      EXPECT_EQ(h.find(secret), std::string::npos);
    }
  }
  EXPECT_NE(config_identity_canonical(h1)->find("https://bot@mcp.example.com/mcp"),
            std::string::npos);
}

TEST(ConfigHash, FieldsOfTheOtherTransportAreIgnored) {
  ConnectionIdentity s = stdio_identity();
  s.url = "https://ignored.example";
  s.headers["X-Ignored"] = "v";
  EXPECT_EQ(hash_of(s), hash_of(stdio_identity()));
  ConnectionIdentity h = http_identity();
  h.command = "ignored";
  h.args = {"--ignored"};
  h.env["IGNORED"] = "v";
  EXPECT_EQ(hash_of(h), hash_of(http_identity()));
}

TEST(ConfigHash, IncompleteOrMalformedIdentityIsAnError) {
  struct Case {
    const char* what;
    std::function<ConnectionIdentity()> base;
    std::function<void(ConnectionIdentity&)> edit;
    const char* mentions;
  };
  const std::string bad_utf8 =
      "tok\xc3\x28"
      "SECRET";
  const std::vector<Case> cases = {
      {"transport", stdio_identity,
       [](ConnectionIdentity& i) { i.transport = TransportKind::kUnknown; }, "transport"},
      {"auth", stdio_identity, [](ConnectionIdentity& i) { i.auth_type = AuthType::kUnknown; },
       "auth"},
      {"mode", stdio_identity,
       [](ConnectionIdentity& i) { i.credential_mode = CredentialMode::kUnknown; },
       "credential mode"},
      {"command", stdio_identity, [](ConnectionIdentity& i) { i.command.clear(); }, "command"},
      {"url", http_identity, [](ConnectionIdentity& i) { i.url.clear(); }, "URL"},
      {"arg utf8", stdio_identity, [&](ConnectionIdentity& i) { i.args.push_back(bad_utf8); },
       "argument"},
      {"url utf8", http_identity, [&](ConnectionIdentity& i) { i.url += bad_utf8; }, "URL"},
      {"header utf8", http_identity, [&](ConnectionIdentity& i) { i.headers[bad_utf8] = ""; },
       "header name"},
      {"env utf8", stdio_identity, [&](ConnectionIdentity& i) { i.env[bad_utf8] = ""; },
       "env var name"},
      {"version utf8", stdio_identity,
       [&](ConnectionIdentity& i) { i.credential_version = bad_utf8; }, "credential version"},
      {"overlong", stdio_identity,
       [](ConnectionIdentity& i) {
         i.command =
             "\xc0\xaf"
             "bin";
       },
       "command"},
      {"surrogate", stdio_identity, [](ConnectionIdentity& i) { i.command = "\xed\xa0\x80"; },
       "command"},
      {"truncated", stdio_identity, [](ConnectionIdentity& i) { i.command = "bin\xe2\x82"; },
       "command"},
  };
  for (const Case& c : cases) {
    ConnectionIdentity id = c.base();
    c.edit(id);
    Result<std::string> h = config_hash(id);
    ASSERT_FALSE(h.ok()) << c.what;
    EXPECT_EQ(h.error().code, ErrorCode::kInvalidArgument) << c.what;
    EXPECT_NE(h.error().message.find(c.mentions), std::string::npos) << h.error().message;
    EXPECT_EQ(h.error().message.find("SECRET"), std::string::npos) << h.error().message;
  }
  // Valid multi-byte UTF-8 is fine.
  ConnectionIdentity ok = stdio_identity();
  ok.args.push_back("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x8e\xaf");
  EXPECT_TRUE(config_hash(ok).ok());
}

TEST(ConfigHash, EnumNamesRoundTrip) {
  for (TransportKind k : {TransportKind::kStdio, TransportKind::kHttp}) {
    EXPECT_EQ(transport_kind_from_string(transport_kind_name(k)), k);
  }
  for (AuthType t : {AuthType::kNone, AuthType::kBearer, AuthType::kApiKey, AuthType::kHeaders,
                     AuthType::kOAuth}) {
    EXPECT_EQ(auth_type_from_string(auth_type_name(t)), t);
  }
  EXPECT_EQ(auth_type_from_string("OAuth"), AuthType::kUnknown);
  EXPECT_EQ(auth_type_from_string("unknown"), AuthType::kUnknown);
  EXPECT_EQ(transport_kind_from_string("sse"), TransportKind::kUnknown);
}

// ---- Redis keys --------------------------------------------------------------------------------

RedisKeys keys(const char* ns = "default") {
  Result<RedisKeys> k = RedisKeys::create(ns);
  EXPECT_TRUE(k.ok());
  return *k;
}

Principal member(const char* id) { return *Principal::member(id); }

TEST(RedisKeys, SpellTheDocumentedLayout) {
  const RedisKeys k = keys();
  const Principal shared = Principal::shared();
  const Principal alice = member("alice@example.com");
  EXPECT_EQ(k.prefix(), "quiver:{default}:");
  EXPECT_EQ(k.conns(), "quiver:{default}:conns");
  EXPECT_EQ(*k.conn("github"), "quiver:{default}:conn:github");
  EXPECT_EQ(*k.grants(alice), "quiver:{default}:grants:member/alice@example.com");
  EXPECT_EQ(*k.manifest("github", shared), "quiver:{default}:manifest:github:shared");
  EXPECT_EQ(*k.manifest("github", alice),
            "quiver:{default}:manifest:github:member/alice@example.com");
  EXPECT_EQ(*k.lease("github", shared), "quiver:{default}:lease:github:shared");
  EXPECT_EQ(*k.fence("github", alice), "quiver:{default}:fence:github:member/alice@example.com");
  EXPECT_EQ(*k.disabled("github", shared), "quiver:{default}:disabled:github:shared");
  EXPECT_EQ(*k.disabled("github", alice),
            "quiver:{default}:disabled:github:member/alice@example.com");
  EXPECT_EQ(*k.prefs("github", alice), "quiver:{default}:prefs:github:member/alice@example.com");
  EXPECT_EQ(k.revalidate_stream(), "quiver:{default}:revalidate");
  EXPECT_EQ(*k.revalidate_gate("github", shared), "quiver:{default}:revalidate-gate:github:shared");
  EXPECT_EQ(k.epoch(), "quiver:{default}:epoch");
  EXPECT_STREQ(kRevalidateConsumerGroup, "quiver-agents");
  EXPECT_EQ(k.manifest_match_pattern(), "quiver:{default}:manifest:*");
}

TEST(RedisKeys, EveryKeyOfANamespaceSharesOneHashTag) {
  const RedisKeys k = keys("team-a.prod");
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    Result<std::string> key = k.key(kind, "conn.1", member("bob"), std::string(64, 'a'), "member");
    ASSERT_TRUE(key.ok()) << key_kind_name(kind);
    // Redis Cluster hashes only the part between the first '{' and the next '}'.
    const std::size_t open = key->find('{');
    const std::size_t close = key->find('}', open);
    ASSERT_NE(open, std::string::npos);
    ASSERT_NE(close, std::string::npos);
    EXPECT_EQ(key->substr(open + 1, close - open - 1), "team-a.prod") << *key;
    EXPECT_EQ(key->find_first_of("{}", close + 1), std::string::npos) << *key;
  }
}

TEST(RedisKeys, RefuseInputsThatWouldBreakTheLayout) {
  const RedisKeys k = keys();
  for (const std::string& bad_ns :
       {std::string(""), std::string("a}b"), std::string("a:b"), std::string(65, 'n')}) {
    Result<RedisKeys> r = RedisKeys::create(bad_ns);
    ASSERT_FALSE(r.ok()) << bad_ns;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  for (const char* bad_cid : {"", "a:b", "x}:y", "a/b", "*", "gh hub"}) {
    EXPECT_FALSE(k.conn(bad_cid).ok()) << bad_cid;
    EXPECT_FALSE(k.manifest(bad_cid, Principal::shared()).ok()) << bad_cid;
    EXPECT_FALSE(k.lease(bad_cid, Principal::shared()).ok()) << bad_cid;
    EXPECT_FALSE(k.fence(bad_cid, Principal::shared()).ok()) << bad_cid;
    EXPECT_FALSE(k.disabled(bad_cid, Principal::shared()).ok()) << bad_cid;
    EXPECT_FALSE(k.prefs(bad_cid, Principal::shared()).ok()) << bad_cid;
    EXPECT_FALSE(k.revalidate_gate(bad_cid, Principal::shared()).ok()) << bad_cid;
  }
  // Grants are per member.
  Result<std::string> g = k.grants(Principal::shared());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("member"), std::string::npos);
  // The generic builder needs a principal where the key has one.
  EXPECT_FALSE(k.key(KeyKind::kManifest, "github", std::nullopt).ok());
  EXPECT_TRUE(k.key(KeyKind::kConns, "", std::nullopt).ok());
}

TEST(RedisKeys, ParseIsTheInverseOfEveryBuilder) {
  const RedisKeys k = keys("ns1");
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    for (const Principal& p : {member("carol+ops@example.com"), Principal::shared()}) {
      if ((kind == KeyKind::kGrants || kind == KeyKind::kMemberVersion) && p.is_shared()) continue;
      const std::string digest = sha256_hex("signed content");
      Result<std::string> key = k.key(kind, "my-conn_2", p, digest, "grant");
      ASSERT_TRUE(key.ok());
      Result<ParsedKey> parsed = k.parse(*key);
      ASSERT_TRUE(parsed.ok()) << *key << ": " << parsed.error().message;
      EXPECT_EQ(parsed->kind, kind) << *key;
      EXPECT_EQ(parsed->digest, key_has_digest(kind) ? digest : "") << *key;
      EXPECT_EQ(parsed->connection_id, key_has_connection_id(kind) ? "my-conn_2" : "") << *key;
      EXPECT_EQ(parsed->principal.has_value(), key_has_principal(kind)) << *key;
      EXPECT_EQ(parsed->catalog_kind, key_has_catalog_kind(kind) ? "grant" : "") << *key;
      if (parsed->principal) {
        EXPECT_EQ(*parsed->principal, p) << *key;
      }
    }
  }
}

TEST(RedisKeys, TheReplayKeyHoldsTheDigestOfTheSignedIdAndGranteesAConnection) {
  const RedisKeys k = keys("ns1");
  EXPECT_EQ(k.replay("wh:abc"), "quiver:{ns1}:replay:" + sha256_hex("wh:abc"));
  EXPECT_NE(k.replay("wh:abc"), k.replay("wh:abd"));
  Result<ParsedKey> parsed = k.parse(k.replay(std::string(5000, 'x')));  // any length fits
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->kind, KeyKind::kReplay);
  EXPECT_EQ(*k.grantees("github"), "quiver:{ns1}:grantees:github");
  EXPECT_FALSE(k.grantees("git hub").ok());
  EXPECT_FALSE(k.key(KeyKind::kReplay, "", std::nullopt, "not-a-digest").ok());
}

TEST(RedisKeys, TheRuntimeCatalogKeys) {
  const RedisKeys k = keys("ns1");
  EXPECT_EQ(*k.catalog("member"), "quiver:{ns1}:catalog:member");
  EXPECT_EQ(*k.catalog_keys("connection"), "quiver:{ns1}:catalog:connection:keys");
  EXPECT_EQ(k.catalog_versions(), "quiver:{ns1}:catalog:versions");
  EXPECT_EQ(k.audit(), "quiver:{ns1}:audit");
  for (const char* bad : {"", "versions", "Member", "a:b", "x*"}) {
    EXPECT_FALSE(k.catalog(bad).ok()) << bad;
    EXPECT_FALSE(k.catalog_keys(bad).ok()) << bad;
  }
  EXPECT_EQ(k.parse("quiver:{ns1}:catalog:versions")->kind, KeyKind::kCatalogVersions);
  EXPECT_EQ(k.parse("quiver:{ns1}:catalog:grant")->kind, KeyKind::kCatalog);
  EXPECT_EQ(k.parse("quiver:{ns1}:catalog:grant:keys")->kind, KeyKind::kCatalogKeys);
  EXPECT_EQ(k.parse("quiver:{ns1}:catalog:grant:keys")->catalog_kind, "grant");
  EXPECT_EQ(k.parse("quiver:{ns1}:audit")->kind, KeyKind::kAudit);
  for (const char* bad :
       {"quiver:{ns1}:catalog", "quiver:{ns1}:catalog:Grant", "quiver:{ns1}:catalog:grant:vals",
        "quiver:{ns1}:catalog:versions:keys", "quiver:{ns1}:audit:x"}) {
    EXPECT_FALSE(k.parse(bad).ok()) << bad;
  }
}

TEST(RedisKeys, ParseRefusesForeignAndMalformedKeys) {
  const RedisKeys k = keys("ns1");
  for (const char* bad :
       {"",
        "quiver:{ns2}:conns",
        "quiver:ns1:conns",
        "other:{ns1}:conns",
        "quiver:{ns1}:",
        "quiver:{ns1}:nope",
        "quiver:{ns1}:conns:x",
        "quiver:{ns1}:conn",
        "quiver:{ns1}:conn:",
        "quiver:{ns1}:conn:a:b",
        "quiver:{ns1}:manifest:github",
        "quiver:{ns1}:manifest:github:",
        "quiver:{ns1}:manifest:github:nobody",
        "quiver:{ns1}:manifest:git hub:shared",
        "quiver:{ns1}:manifest:github:shared:extra",
        "quiver:{ns1}:grants:shared",
        "quiver:{ns1}:grants:member/",
        "quiver:{ns1}:lease:github:member/a/b",
        "quiver:{ns1}:epoch:1",
        "quiver:{ns1}:replay",
        "quiver:{ns1}:replay:abc",
        "quiver:{ns1}:grantees",
        "quiver:{ns1}:replay:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}) {
    Result<ParsedKey> parsed = k.parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(RedisKeys, NoTruncationOfAManifestKeyParsesAsAManifestKey) {
  const RedisKeys k = keys();
  const std::string key = *k.manifest("github", member("alice"));
  ASSERT_TRUE(k.parse_manifest_key(key).ok());
  for (std::size_t cut = 0; cut < key.size(); ++cut) {
    Result<ParsedKey> parsed = k.parse_manifest_key(key.substr(0, cut));
    // A prefix may be a valid shorter principal ("member/alic"), never the same key.
    if (parsed.ok()) {
      EXPECT_NE(parsed->principal->str(), "member/alice") << cut;
      EXPECT_GT(cut, key.rfind('/')) << key.substr(0, cut);
    }
  }
  Result<ParsedKey> lease = k.parse_manifest_key(*k.lease("github", member("alice")));
  ASSERT_FALSE(lease.ok());
  EXPECT_NE(lease.error().message.find("manifest"), std::string::npos);
}

TEST(RedisKeys, KindMetadata) {
  EXPECT_STREQ(key_kind_name(KeyKind::kRevalidateGate), "revalidate-gate");
  EXPECT_STREQ(key_redis_type(KeyKind::kManifest), "HASH");
  EXPECT_STREQ(key_redis_type(KeyKind::kRevalidate), "STREAM");
  EXPECT_STREQ(key_redis_type(KeyKind::kLease), "STRING");
  EXPECT_STREQ(key_redis_type(KeyKind::kDisabled), "SET");
  EXPECT_TRUE(key_fields(KeyKind::kLease).empty());
  const std::vector<std::string>& m = key_fields(KeyKind::kManifest);
  EXPECT_NE(std::find(m.begin(), m.end(), redis_field::kEtag), m.end());
  EXPECT_NE(std::find(m.begin(), m.end(), redis_field::kConfigHash), m.end());
}

}  // namespace
}  // namespace quiver
