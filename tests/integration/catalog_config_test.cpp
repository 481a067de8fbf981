// The effective configuration from the runtime catalog (native-agent/engine/catalog_config.h):
// the file's items round trip, an inconsistent catalog drops what it must and keeps the rest,
// catalog values are checked (literal secrets refused), and `quiver.revision`.
#include "native-agent/engine/catalog_config.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/canonical_json.h"

namespace quiver {
namespace {

const char kFile[] = R"({
  // comments are allowed, as in other clients' files
  "mcpServers": {
    "everything": {"command": "node", "args": ["server.js", "${MODE:-stdio}"], "env": {"K": "${K}"}},
    "My Server": {"url": "https://host.example/mcp", "headers": {"X-Org": "${ORG}"}},
    "gh": {"url": "https://gh.example/mcp"},
    "off": {"command": "x", "disabled": true}},
  "quiver": {
    "namespace": "team",
    "members": ["alice", "bob", "carol"],
    "operators": ["alice"],
    "grants": {"alice": ["gh", "My Server"], "*": ["everything"], "bob": ["off"]},
    "connections": {
      "gh": {"credential_mode": "per_member", "auth": "bearer", "id": "github",
             "credentials": {"alice": {"env": "ALICE_TOKEN"}}},
      "My Server": {"auto_enable_new_capabilities": false}}}})";

struct Fixture {
  std::string text = kFile;
  EnvMap env = {{"HOME", "/home/u"},
                {"K", "k-secret-value"},
                {"ORG", "acme-org-value"},
                {"ALICE_TOKEN", "alice-token-value"}};
  ConfigSources sources() const {
    ConfigSources s;
    s.text = text;
    s.origin = "quiver.json";
    s.env = env;
    s.working_dir = "/srv";
    return s;
  }
};

Json without_warnings(const AgentConfig& cfg) {
  Json j = cfg.effective_config_json();
  j.erase("warnings");
  return j;
}

std::vector<CatalogEntry> items(const Fixture& f, int64_t rev = 1000) {
  Result<std::vector<CatalogEntry>> r = catalog_items_from_file(f.sources(), rev);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::vector<CatalogEntry>{};
}

const CatalogEntry* find(const std::vector<CatalogEntry>& v, CatalogKind kind,
                         const std::string& key) {
  for (const CatalogEntry& e : v) {
    if (e.kind == kind && e.key == key) return &e;
  }
  return nullptr;
}

CatalogEntry* find(std::vector<CatalogEntry>& v, CatalogKind kind, const std::string& key) {
  return const_cast<CatalogEntry*>(
      find(static_cast<const std::vector<CatalogEntry>&>(v), kind, key));
}

bool has_warning(const AgentConfig& cfg, const std::string& part) {
  for (const std::string& w : cfg.warnings) {
    if (w.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST(CatalogConfig, FileItemsAreTheFileAsWritten) {
  Fixture f;
  std::vector<CatalogEntry> v = items(f, 1234);
  // 3 members, 3 grant keys, 3 connections (the disabled server is no connection).
  EXPECT_EQ(v.size(), 9u);
  const CatalogEntry* gh = find(v, CatalogKind::kConnection, "github");
  ASSERT_NE(gh, nullptr);
  EXPECT_EQ((*gh->value)["name"], "gh");
  EXPECT_EQ((*gh->value)["settings"]["credentials"]["alice"]["env"], "ALICE_TOKEN");
  EXPECT_FALSE((*gh->value)["settings"].contains("id"));  // the key is the id
  EXPECT_EQ(gh->meta.origin, kCatalogOriginFile);
  EXPECT_EQ(gh->meta.rev_ms, 1234);
  EXPECT_EQ(gh->meta.by, "file:quiver.json");
  EXPECT_EQ(gh->meta.file_hash.size(), 64u);
  const CatalogEntry* every = find(v, CatalogKind::kConnection, "everything");
  ASSERT_NE(every, nullptr);
  // References stay unresolved: the catalog never holds a secret.
  EXPECT_EQ((*every->value)["server"]["env"]["K"], "${K}");
  EXPECT_EQ((*every->value)["server"]["args"][1], "${MODE:-stdio}");
  const CatalogEntry* alice_grants = find(v, CatalogKind::kGrant, "alice");
  ASSERT_NE(alice_grants, nullptr);
  Result<std::string> my_id = connection_id_for_name("My Server");
  ASSERT_TRUE(my_id.ok());
  EXPECT_EQ((*alice_grants->value)["connections"],
            Json(std::vector<std::string>{*my_id, "github"}));
  EXPECT_EQ((*find(v, CatalogKind::kGrant, "bob")->value)["connections"], Json::array());
  EXPECT_EQ((*find(v, CatalogKind::kMember, "alice")->value)["operator"], true);
  EXPECT_EQ((*find(v, CatalogKind::kMember, "bob")->value)["operator"], false);
  for (const CatalogEntry& e : v) {
    EXPECT_TRUE(validate_catalog_value(e.kind, e.key, *e.value).ok()) << e.key;
    std::string dumped = serialize_json(*e.value);
    EXPECT_EQ(dumped.find("token-value"), std::string::npos);
  }
  // The same definition hashes the same whatever its key order or spacing.
  Fixture g;
  const std::string before = R"("credential_mode": "per_member", "auth": "bearer",)";
  g.text.replace(g.text.find(before), before.size(),
                 R"("auth":"bearer",    "credential_mode": "per_member",)");
  ASSERT_NE(g.text, f.text);
  std::vector<CatalogEntry> w = items(g, 1234);
  EXPECT_EQ(find(w, CatalogKind::kConnection, "github")->meta.file_hash, gh->meta.file_hash);
}

TEST(CatalogConfig, EffectiveConfigOfTheFileItemsIsTheFile) {
  Fixture f;
  Result<AgentConfig> direct = parse_config(f.sources());
  ASSERT_TRUE(direct.ok()) << direct.error().message;
  Result<AgentConfig> eff = effective_config(f.sources(), items(f));
  ASSERT_TRUE(eff.ok()) << eff.error().message;
  EXPECT_EQ(without_warnings(*eff), without_warnings(*direct));
  EXPECT_EQ(eff->connections.size(), 3u);
  EXPECT_EQ(eff->ns, "team");
  // An empty catalog: the file's other settings, no connections.
  Result<AgentConfig> none = effective_config(f.sources(), {});
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->connections.empty());
  EXPECT_TRUE(none->members.empty());
  EXPECT_EQ(none->ns, "team");
}

// Issue 12: an auth-oauth connection of the catalog parses with the file's `quiver.oauth` (its
// key).
TEST(CatalogConfig, OAuthConnectionsKeepTheAgentsOAuthSettings) {
  Fixture f;
  f.text = R"({"mcpServers": {"linear": {"url": "https://linear.example/mcp"}},
    "quiver": {"members": ["alice"], "grants": {"*": ["*"]}, "oauth": {"key": {"env": "OK"}},
      "connections": {"linear": {"auth": "oauth", "credential_mode": "per_member",
                                 "oauth": {"scopes": ["read"]}}}}})";
  f.env["OK"] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
  Result<AgentConfig> direct = parse_config(f.sources());
  ASSERT_TRUE(direct.ok()) << direct.error().message;
  Result<AgentConfig> eff = effective_config(f.sources(), items(f));
  ASSERT_TRUE(eff.ok()) << eff.error().message;
  ASSERT_EQ(eff->connections.size(), 1u) << eff->effective_config_json().dump();
  EXPECT_EQ(without_warnings(*eff), without_warnings(*direct));
  ASSERT_TRUE(eff->connections[0].oauth.has_value());
  EXPECT_EQ(eff->connections[0].oauth->scopes, std::vector<std::string>{"read"});
}

TEST(CatalogConfig, TheCatalogWinsOverTheFile) {
  Fixture f;
  std::vector<CatalogEntry> v = items(f);
  // Another agent's (newer) definition of `gh`: a different URL, and a tombstone for `everything`.
  (*find(v, CatalogKind::kConnection, "github")->value)["server"]["url"] =
      "https://gh2.example/mcp";
  find(v, CatalogKind::kConnection, "everything")->value.reset();
  Result<AgentConfig> eff = effective_config(f.sources(), v);
  ASSERT_TRUE(eff.ok()) << eff.error().message;
  ASSERT_NE(eff->find_connection("github"), nullptr);
  EXPECT_EQ(eff->find_connection("github")->endpoint.url, "https://gh2.example/mcp");
  EXPECT_EQ(eff->find_connection("everything"), nullptr);
  // The grant of `*` to the deleted connection goes quietly with it... with a warning.
  EXPECT_TRUE(has_warning(*eff, "`everything` is not in the catalog"));
  EXPECT_EQ(eff->grants.at("bob"), std::set<std::string>{});
}

TEST(CatalogConfig, AnInconsistentCatalogDropsOnlyTheBadEntries) {
  Fixture f;
  std::vector<CatalogEntry> v = items(f);
  auto add = [&](CatalogKind kind, const std::string& key, Json value) {
    CatalogEntry e;
    e.kind = kind;
    e.key = key;
    e.value = std::move(value);
    e.meta.origin = kCatalogOriginApi;
    v.push_back(std::move(e));
  };
  // A grant to an unknown connection, a grant of a non-member, a per-member grant without a
  // credential, a connection whose env var is missing here, a credential of a non-member.
  add(CatalogKind::kGrant, "carol", Json::parse(R"({"connections": ["nope", "github"]})"));
  add(CatalogKind::kGrant, "dave", Json::parse(R"({"connections": ["github"]})"));
  add(CatalogKind::kConnection, "remote",
      Json::parse(R"({"name": "remote", "server": {"url": "https://${REMOTE_HOST}/mcp"}})"));
  (*find(v, CatalogKind::kConnection, "github")->value)["settings"]["credentials"]["erin"] =
      Json::parse(R"({"env": "ERIN_TOKEN"})");
  f.env["ERIN_TOKEN"] = "erin-token-value";
  Result<AgentConfig> eff = effective_config(f.sources(), v);
  ASSERT_TRUE(eff.ok()) << eff.error().message;
  EXPECT_TRUE(has_warning(*eff, "catalog grant `carol`: connection `nope` is not in the catalog"));
  EXPECT_TRUE(has_warning(*eff, "catalog grant `dave`: not a member"));
  EXPECT_TRUE(has_warning(*eff, "catalog grant `carol`: connection `github` has no credential"));
  EXPECT_TRUE(has_warning(*eff, "catalog connection `remote`: does not parse on this agent"));
  EXPECT_TRUE(has_warning(*eff, "REMOTE_HOST"));
  EXPECT_TRUE(has_warning(*eff, "a credential for `erin`, who is not a member"));
  EXPECT_EQ(eff->find_connection("remote"), nullptr);
  ASSERT_NE(eff->find_connection("github"), nullptr);
  EXPECT_EQ(eff->members.count("dave"), 0u);
  EXPECT_EQ(eff->grants.at("carol"), std::set<std::string>{"everything"});
  EXPECT_EQ(eff->find_connection("github")->granted_members, std::set<std::string>{"alice"});
  // The rest is as the file says.
  EXPECT_EQ(eff->connections.size(), 3u);
  EXPECT_EQ(eff->operators, std::set<std::string>{"alice"});
  for (const std::string& w : eff->warnings) EXPECT_EQ(w.find("token-value"), std::string::npos);

  // With the variable set, the same catalog entry is a connection here.
  f.env["REMOTE_HOST"] = "remote.example";
  Result<AgentConfig> eff2 = effective_config(f.sources(), v);
  ASSERT_TRUE(eff2.ok()) << eff2.error().message;
  ASSERT_NE(eff2->find_connection("remote"), nullptr);
  EXPECT_EQ(eff2->find_connection("remote")->endpoint.url, "https://remote.example/mcp");
}

TEST(CatalogConfig, EveryConnectionGrantFollowsTheCatalog) {
  Fixture f;
  std::vector<CatalogEntry> v = items(f);
  CatalogEntry g;
  g.kind = CatalogKind::kGrant;
  g.key = "carol";
  g.value = Json::parse(R"({"connections": ["*"]})");
  v.push_back(g);
  CatalogEntry c;
  c.kind = CatalogKind::kConnection;
  c.key = "extra";
  c.value = Json::parse(R"({"name": "Extra One", "server": {"url": "https://extra.example/"}})");
  v.push_back(c);
  Result<AgentConfig> eff = effective_config(f.sources(), v);
  ASSERT_TRUE(eff.ok()) << eff.error().message;
  // The connection's key is its id, whatever its name maps to.
  ASSERT_NE(eff->find_connection("extra"), nullptr);
  EXPECT_EQ(eff->find_connection("extra")->name, "Extra One");
  // `*` takes every connection but the per-member one carol has no credential for.
  Result<std::string> my_id = connection_id_for_name("My Server");
  EXPECT_EQ(eff->grants.at("carol"), (std::set<std::string>{"everything", "extra", *my_id}));
}

TEST(CatalogConfig, ValuesAreCheckedAndLiteralSecretsRefused) {
  auto check = [](CatalogKind kind, const std::string& key, const std::string& value) {
    Status s = validate_catalog_value(kind, key, Json::parse(value));
    return s.ok() ? std::string() : s.error().message;
  };
  EXPECT_EQ(check(CatalogKind::kMember, "alice", R"({"operator": true})"), "");
  EXPECT_EQ(check(CatalogKind::kMember, "alice", R"({})"), "");
  EXPECT_NE(check(CatalogKind::kMember, "alice", R"({"operator": 1})"), "");
  EXPECT_NE(check(CatalogKind::kMember, "alice", R"({"admin": true})"), "");
  EXPECT_NE(check(CatalogKind::kMember, "*", R"({})"), "");
  EXPECT_EQ(check(CatalogKind::kGrant, "*", R"({"connections": ["*", "gh"]})"), "");
  EXPECT_NE(check(CatalogKind::kGrant, "bob", R"({"connections": "gh"})"), "");
  EXPECT_NE(check(CatalogKind::kGrant, "bob", R"({"connections": ["a b"]})"), "");
  EXPECT_NE(check(CatalogKind::kGrant, "b b", R"({"connections": []})"), "");

  // Connections: parse on their own, whatever the variables they reference (unset here).
  EXPECT_EQ(check(CatalogKind::kConnection, "gh",
                  R"({"name": "gh", "server": {"url": "https://${GH_HOST}/mcp",
                      "headers": {"X-Org": "${ORG}", "X-Key": "${KEY}"}},
                      "settings": {"auth": "bearer", "credential": {"file": "/run/s/gh"}}})"),
            "");
  EXPECT_EQ(check(CatalogKind::kConnection, "st",
                  R"({"name": "st", "server": {"command": "node", "args": ["s.js"],
                      "env": {"TOKEN": "Bearer ${T}"}},
                      "settings": {"credential_mode": "per_member", "auth": "api_key",
                      "credential_env": "API_KEY", "credentials": {"a": "${A}"}}})"),
            "");
  std::string m = check(CatalogKind::kConnection, "gh",
                        R"({"name": "gh", "server": {"url": "https://h/mcp",
                            "headers": {"Authorization": "Bearer abc123"}}})");
  EXPECT_NE(m.find("secrets must be references"), std::string::npos) << m;
  EXPECT_NE(m.find("connection.server.headers.Authorization"), std::string::npos) << m;
  EXPECT_EQ(m.find("abc123"), std::string::npos);
  m = check(CatalogKind::kConnection, "st",
            R"({"name": "st", "server": {"command": "n", "env": {"K": "$${NOT}"}}})");
  EXPECT_NE(m.find("connection.server.env.K: secrets must be references"), std::string::npos);
  m = check(CatalogKind::kConnection, "gh",
            R"({"name": "gh", "server": {"url": "https://h/mcp"},
                "settings": {"auth": "bearer", "credential": "literal-token"}})");
  EXPECT_NE(m.find("connection.settings.credential: secrets must be references"),
            std::string::npos);
  m = check(CatalogKind::kConnection, "gh",
            R"({"name": "gh", "server": {"url": "https://h/mcp"},
                "settings": {"credential_mode": "per_member", "auth": "bearer",
                             "credentials": {"bob": {"env": "B", "file": "/x"}}}})");
  EXPECT_NE(m.find("connection.settings.credentials.bob: secrets must be references"),
            std::string::npos);
  // Shapes and parse errors.
  EXPECT_NE(check(CatalogKind::kConnection, "gh", R"({"name": "gh"})"), "");
  EXPECT_NE(check(CatalogKind::kConnection, "gh", R"({"name": "gh", "server": {}, "x": 1})"), "");
  EXPECT_NE(
      check(CatalogKind::kConnection, "g h", R"({"name": "gh", "server": {"url": "https://h"}})"),
      "");
  EXPECT_NE(check(CatalogKind::kConnection, "gh",
                  R"({"name": "gh", "server": {"url": "https://h"}, "settings": {"id": "other"}})"),
            "");
  m = check(CatalogKind::kConnection, "gh", R"({"name": "gh", "server": {"url": "ftp://h"}})");
  EXPECT_NE(m.find("mcpServers.gh.url"), std::string::npos) << m;
  EXPECT_NE(check(CatalogKind::kConnection, "gh",
                  R"({"name": "gh", "server": {"url": "https://h"},
                      "settings": {"auth": "bearer", "typo_key": 1}})"),
            "");
}

TEST(CatalogConfig, Revision) {
  Fixture f;
  auto parse = [&](const std::string& rev) {
    f.text = R"({"mcpServers": {}, "quiver": {"revision": )" + rev + "}}";
    return parse_config(f.sources());
  };
  Result<AgentConfig> a = parse("42");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->revision_ms, 42);
  Result<AgentConfig> b = parse(R"("2026-12-03T12:00:00Z")");
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->revision_ms, 1796299200000);
  Result<AgentConfig> c = parse(R"("2026-12-03T12:00:00.250Z")");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->revision_ms, 1796299200250);
  for (const char* bad : {"0", "-5", "1.5", R"("2026-12-03")", R"("2026-12-03T12:00:00+01:00")",
                          R"("yesterday")", "true"}) {
    Result<AgentConfig> r = parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find("quiver.revision"), std::string::npos);
  }
  // Absent: 0 from parse_config (no file); the file's mtime from load_config_file.
  f.text = R"({"mcpServers": {}})";
  Result<AgentConfig> d = parse_config(f.sources());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->revision_ms, 0);
  EXPECT_EQ(parse_utc_time_ms("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_utc_time_ms("2000-03-01T00:00:00Z"), 951868800000);
}

}  // namespace
}  // namespace quiver
