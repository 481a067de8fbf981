// Key layout v2 (shared/redis_keys.h, docs/design.md "Key layout v2"): the spelling of every key,
// its parse back, the shards, that no two namespaces share a hash tag, and that the keys each
// planned v2 script must touch atomically hash to ONE slot (shared/redis_cluster.h's rule), which
// is the executable form of the design's "every script touches one slot".
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/redis_cluster.h"
#include "shared/redis_keys.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

RedisKeys v2(const char* ns = "team", uint32_t shards = kDefaultShardCount) {
  Result<RedisKeys> k = RedisKeys::create(ns, KeyLayout::kV2, shards);
  EXPECT_TRUE(k.ok()) << (k.ok() ? "" : k.error().message);
  return *k;
}

Principal member(const char* id) { return *Principal::member(id); }

std::string must(const Result<std::string>& r) {
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : std::string();
}

TEST(RedisKeysV2, SpellTheDesignTable) {
  const RedisKeys k = v2("team");
  const Principal shared = Principal::shared();
  const Principal alice = member("alice@example.com");
  const std::string digest = sha256_hex("body");
  EXPECT_EQ(k.key_layout(), KeyLayout::kV2);
  EXPECT_EQ(k.shard_count(), 16u);
  EXPECT_STREQ(key_layout_name(k.key_layout()), "v2");
  // One connection.
  EXPECT_EQ(must(k.conn("github")), "quiver:{team:c:github}:conn");
  EXPECT_EQ(must(k.conn_version("github")), "quiver:{team:c:github}:version");
  EXPECT_EQ(must(k.grantees("github")), "quiver:{team:c:github}:grantees");
  EXPECT_EQ(must(k.marked("github")), "quiver:{team:c:github}:marked");
  EXPECT_EQ(must(k.manifest("github", shared)), "quiver:{team:c:github}:manifest");
  EXPECT_EQ(must(k.lease("github", shared)), "quiver:{team:c:github}:lease");
  EXPECT_EQ(must(k.fence("github", shared)), "quiver:{team:c:github}:fence");
  EXPECT_EQ(must(k.disabled("github", shared)), "quiver:{team:c:github}:disabled");
  EXPECT_EQ(must(k.prefs("github", shared)), "quiver:{team:c:github}:prefs");
  EXPECT_EQ(must(k.revalidate_gate("github", shared)), "quiver:{team:c:github}:gate");
  EXPECT_EQ(must(k.invalidated("github", shared)), "quiver:{team:c:github}:invalidated");
  EXPECT_EQ(must(k.version_of("github", shared)), "quiver:{team:c:github}:version");
  // One member.
  EXPECT_EQ(must(k.grants(alice)), "quiver:{team:m:alice@example.com}:grants");
  EXPECT_EQ(must(k.member_version(alice)), "quiver:{team:m:alice@example.com}:version");
  EXPECT_EQ(must(k.version_of("github", alice)), "quiver:{team:m:alice@example.com}:version");
  EXPECT_EQ(must(k.manifest("github", alice)), "quiver:{team:m:alice@example.com}:manifest:github");
  EXPECT_EQ(must(k.lease("github", alice)), "quiver:{team:m:alice@example.com}:lease:github");
  EXPECT_EQ(must(k.fence("github", alice)), "quiver:{team:m:alice@example.com}:fence:github");
  EXPECT_EQ(must(k.disabled("github", alice)), "quiver:{team:m:alice@example.com}:disabled:github");
  EXPECT_EQ(must(k.prefs("github", alice)), "quiver:{team:m:alice@example.com}:prefs:github");
  EXPECT_EQ(must(k.revalidate_gate("github", alice)),
            "quiver:{team:m:alice@example.com}:gate:github");
  EXPECT_EQ(must(k.invalidated("github", alice)),
            "quiver:{team:m:alice@example.com}:invalidated:github");
  // Shards.
  EXPECT_EQ(must(k.conns(3)), "quiver:{team:s:3}:conns");
  EXPECT_EQ(must(k.revalidate_stream(15)), "quiver:{team:s:15}:revalidate");
  EXPECT_EQ(must(k.due(0)), "quiver:{team:s:0}:due");
  EXPECT_EQ(must(k.calls(4)), "quiver:{team:s:4}:calls");
  EXPECT_EQ(must(k.call_agents(4)), "quiver:{team:s:4}:call-agents");
  EXPECT_EQ(must(k.call_reply(digest, 4)), "quiver:{team:s:4}:call-reply:" + digest);
  EXPECT_EQ(must(k.call_cancel(digest, 4)), "quiver:{team:s:4}:call-cancel:" + digest);
  EXPECT_EQ(must(k.removed_conns(1)), "quiver:{team:s:1}:removed-conns");
  EXPECT_EQ(must(k.grant_members(2)), "quiver:{team:s:2}:grant-members");
  EXPECT_EQ(must(k.grantees_pending(2)), "quiver:{team:s:2}:grantees-pending");
  // Content-named keys are their tags.
  EXPECT_EQ(must(k.body(digest)), "quiver:{team:b:" + digest + "}");
  EXPECT_EQ(k.replay("wh:1"), "quiver:{team:r:" + sha256_hex("wh:1") + "}");
  // Namespace-wide records keep the v1 spelling.
  EXPECT_EQ(k.prefix(), "quiver:{team}:");
  EXPECT_EQ(k.namespace_record(), "quiver:{team}:namespace");
  EXPECT_EQ(must(k.catalog("member")), "quiver:{team}:catalog:member");
  EXPECT_EQ(must(k.catalog_keys("grant")), "quiver:{team}:catalog:grant:keys");
  EXPECT_EQ(k.catalog_versions(), "quiver:{team}:catalog:versions");
  EXPECT_EQ(k.audit(), "quiver:{team}:audit");
  EXPECT_EQ(k.oauth_callbacks(), "quiver:{team}:oauth-callbacks");
  EXPECT_EQ(k.oauth_result("st"), "quiver:{team}:oauth-result:" + sha256_hex("st"));
  // SCAN patterns.
  EXPECT_EQ(k.namespace_match_pattern(), "quiver:{team[}:]*");
  EXPECT_EQ(k.manifest_match_pattern(), "quiver:{team:[cm]:*}:manifest*");
}

TEST(RedisKeysV2, WhatV2DoesNotHaveIsAnErrorAndTheOneKeyBuildersAreEmpty) {
  const RedisKeys k = v2();
  for (KeyKind kind : {KeyKind::kEpoch, KeyKind::kDueBackfill, KeyKind::kGrantMembersBackfill}) {
    EXPECT_FALSE(key_exists_in_v2(kind)) << key_kind_name(kind);
    Result<std::string> r = k.key(kind, "github", std::nullopt, {}, {}, 0);
    ASSERT_FALSE(r.ok()) << key_kind_name(kind);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("layout v2"), std::string::npos) << r.error().message;
  }
  // The v1 builders of one key per namespace have no single key to name in v2.
  EXPECT_EQ(k.epoch(), "");
  EXPECT_EQ(k.due_backfill(), "");
  EXPECT_EQ(k.grant_members_backfill(), "");
  EXPECT_EQ(k.conns(), "");
  EXPECT_EQ(k.revalidate_stream(), "");
  EXPECT_EQ(k.due(), "");
  EXPECT_EQ(k.calls(), "");
  EXPECT_EQ(k.call_agents(), "");
  EXPECT_EQ(k.removed_conns(), "");
  EXPECT_EQ(k.grant_members(), "");
  EXPECT_EQ(k.grantees_pending(), "");
  EXPECT_FALSE(k.call_reply(std::string(64, 'a')).ok());
  EXPECT_FALSE(k.call_cancel(std::string(64, 'a')).ok());
  // A sharded kind needs its shard, below S.
  Result<std::string> no_shard = k.key(KeyKind::kConns, {}, std::nullopt);
  ASSERT_FALSE(no_shard.ok());
  EXPECT_NE(no_shard.error().message.find("shard"), std::string::npos);
  EXPECT_FALSE(k.conns(16).ok());
  EXPECT_FALSE(k.due(1000).ok());
  // Per-member keys need a member; a digest is a digest.
  EXPECT_FALSE(k.grants(Principal::shared()).ok());
  EXPECT_FALSE(k.member_version(Principal::shared()).ok());
  EXPECT_FALSE(k.member_shard(Principal::shared()).ok());
  EXPECT_FALSE(k.body("abc").ok());
  EXPECT_FALSE(k.call_reply("ABC", 0).ok());
  for (const char* bad : {"", "a:b", "x}", "{x", "a b"}) {
    EXPECT_FALSE(k.conn(bad).ok()) << bad;
    EXPECT_FALSE(k.manifest(bad, member("alice")).ok()) << bad;
    EXPECT_FALSE(k.connection_shard(bad).ok()) << bad;
  }
  // S is 1..1024.
  EXPECT_FALSE(RedisKeys::create("team", KeyLayout::kV2, 0).ok());
  EXPECT_FALSE(RedisKeys::create("team", KeyLayout::kV2, kMaxShardCount + 1).ok());
  EXPECT_TRUE(RedisKeys::create("team", KeyLayout::kV2, kMaxShardCount).ok());
}

TEST(RedisKeysV2, V1StaysAsItWasWithOneShard) {
  Result<RedisKeys> k = RedisKeys::create("team");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->key_layout(), KeyLayout::kV1);
  EXPECT_EQ(k->shard_count(), 1u);
  EXPECT_EQ(*k->connection_shard("github"), 0u);
  EXPECT_EQ(*k->member_shard(member("alice")), 0u);
  // The shard overloads name the one v1 key at shard 0, so code written over shards runs on v1.
  EXPECT_EQ(must(k->conns(0)), k->conns());
  EXPECT_EQ(must(k->revalidate_stream(0)), k->revalidate_stream());
  EXPECT_EQ(must(k->due(0)), k->due());
  EXPECT_EQ(must(k->grant_members(0)), k->grant_members());
  EXPECT_EQ(must(k->call_reply(std::string(64, 'a'), 0)),
            must(k->call_reply(std::string(64, 'a'))));
  EXPECT_FALSE(k->conns(1).ok());
  EXPECT_EQ(k->epoch(), "quiver:{team}:epoch");
  EXPECT_EQ(k->replay("wh:1"), "quiver:{team}:replay:" + sha256_hex("wh:1"));
  // A v1 RedisKeys does not parse v2 keys, nor a v2 one v1 keys of kinds that moved.
  const RedisKeys k2 = v2("team");
  EXPECT_FALSE(k->parse(must(k2.conn("github"))).ok());
  EXPECT_FALSE(k2.parse(must(k->conn("github"))).ok());
  EXPECT_FALSE(k2.parse(k->epoch()).ok());
  // Namespace-wide records are the same key in both layouts, and both parse them.
  EXPECT_EQ(k->namespace_record(), k2.namespace_record());
  EXPECT_EQ(k2.parse(k->namespace_record())->kind, KeyKind::kNamespace);
  EXPECT_EQ(k2.parse(must(k->catalog_keys("grant")))->catalog_kind, "grant");
}

TEST(RedisKeysV2, ShardsAreCrc16ModSAndEveryShardIsUsed) {
  const RedisKeys k = v2("team", 16);
  std::vector<int> per_shard(16, 0);
  for (int i = 0; i < 1000; ++i) {
    const std::string cid = "conn-" + std::to_string(i);
    Result<uint32_t> s = k.connection_shard(cid);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, crc16_xmodem(cid) % 16u) << cid;
    ++per_shard[*s];
    Result<uint32_t> m = k.member_shard(member(("user-" + std::to_string(i)).c_str()));
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(*m, crc16_xmodem("user-" + std::to_string(i)) % 16u);
  }
  for (int s = 0; s < 16; ++s) EXPECT_GT(per_shard[s], 0) << "shard " << s;
  // Other S.
  const RedisKeys k3 = v2("team", 3);
  EXPECT_EQ(*k3.connection_shard("github"), crc16_xmodem("github") % 3u);
  EXPECT_EQ(must(k3.conns(*k3.connection_shard("github"))),
            "quiver:{team:s:" + std::to_string(crc16_xmodem("github") % 3u) + "}:conns");
}

// Every kind, every principal it takes, as a v2 key of `k`.
std::vector<std::string> every_v2_key(const RedisKeys& k, const std::string& cid,
                                      const Principal& who, const std::string& digest,
                                      uint32_t shard) {
  std::vector<std::string> out;
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    if (!key_exists_in_v2(kind)) continue;
    std::vector<std::optional<Principal>> principals;
    if (!key_has_principal(kind)) {
      principals.push_back(std::nullopt);
    } else {
      principals.push_back(who);
      if (kind != KeyKind::kGrants && kind != KeyKind::kMemberVersion) {
        principals.push_back(Principal::shared());
      }
    }
    for (const auto& p : principals) {
      Result<std::string> key = k.key(kind, cid, p, digest, "grant", shard);
      EXPECT_TRUE(key.ok()) << key_kind_name(kind) << ": " << key.error().message;
      if (key.ok()) out.push_back(*key);
    }
  }
  return out;
}

TEST(RedisKeysV2, ParseIsTheInverseOfEveryBuilder) {
  const RedisKeys k = v2("ns1", 16);
  const std::string digest = sha256_hex("signed content");
  for (int i = 0; i < kKeyKindCount; ++i) {
    const auto kind = static_cast<KeyKind>(i);
    if (!key_exists_in_v2(kind)) continue;
    for (const Principal& p : {member("carol+ops@example.com"), Principal::shared()}) {
      if ((kind == KeyKind::kGrants || kind == KeyKind::kMemberVersion) && p.is_shared()) continue;
      Result<std::string> key = k.key(kind, "my-conn_2", p, digest, "grant", 13);
      ASSERT_TRUE(key.ok()) << key_kind_name(kind);
      Result<ParsedKey> parsed = k.parse(*key);
      ASSERT_TRUE(parsed.ok()) << *key << ": " << parsed.error().message;
      EXPECT_EQ(parsed->kind, kind) << *key;
      EXPECT_EQ(parsed->digest, key_has_digest(kind) ? digest : "") << *key;
      EXPECT_EQ(parsed->connection_id, key_has_connection_id(kind) ? "my-conn_2" : "") << *key;
      EXPECT_EQ(parsed->principal.has_value(), key_has_principal(kind)) << *key;
      if (parsed->principal) {
        EXPECT_EQ(*parsed->principal, p) << *key;
      }
      EXPECT_EQ(parsed->catalog_kind, key_has_catalog_kind(kind) ? "grant" : "") << *key;
      EXPECT_EQ(parsed->shard,
                key_is_sharded_in_v2(kind) ? std::optional<uint32_t>(13) : std::nullopt)
          << *key;
      // Built again from what was parsed: the same key.
      Result<std::string> again = k.key(parsed->kind, parsed->connection_id, parsed->principal,
                                        parsed->digest, parsed->catalog_kind, parsed->shard);
      ASSERT_TRUE(again.ok()) << *key;
      EXPECT_EQ(*again, *key);
    }
  }
  ASSERT_TRUE(k.parse_manifest_key(must(k.manifest("gh", member("a")))).ok());
  ASSERT_TRUE(k.parse_manifest_key(must(k.manifest("gh", Principal::shared()))).ok());
  EXPECT_FALSE(k.parse_manifest_key(must(k.lease("gh", member("a")))).ok());
}

TEST(RedisKeysV2, ParseRefusesForeignAndMalformedKeys) {
  const RedisKeys k = v2("ns1", 16);
  const std::string d(64, 'a');
  for (const std::string& bad : std::vector<std::string>{
           "",
           "quiver:{ns1}:conns",  // a v1 key of a kind that moved
           "quiver:{ns1}:manifest:gh:shared",
           "quiver:{ns1}:epoch",
           "quiver:{ns2:c:gh}:conn",  // another namespace
           "quiver:{ns10:c:gh}:conn",
           "quiver:{ns1:c:gh}:conn:x",
           "quiver:{ns1:c:gh}",
           "quiver:{ns1:c:gh}:",
           "quiver:{ns1:c:gh}conn",
           "quiver:{ns1:c:gh}:nope",
           "quiver:{ns1:c:gh}:grants",  // a member key under a connection tag
           "quiver:{ns1:c:g h}:conn",
           "quiver:{ns1:c:}:conn",
           "quiver:{ns1:c:gh:conn",
           "quiver:{ns1:m:alice}:manifest",  // a per-member manifest names its connection
           "quiver:{ns1:m:alice}:manifest:gh:x",
           "quiver:{ns1:m:alice}:conn",
           "quiver:{ns1:m:alice}:grants:gh",
           "quiver:{ns1:m:a/b}:grants",
           "quiver:{ns1:m:shared}:grants:x",
           "quiver:{ns1:s:16}:conns",  // S = 16
           "quiver:{ns1:s:01}:conns",
           "quiver:{ns1:s:-1}:conns",
           "quiver:{ns1:s:x}:conns",
           "quiver:{ns1:s:1}:conn",
           "quiver:{ns1:s:1}:call-reply",
           "quiver:{ns1:s:1}:call-reply:abc",
           "quiver:{ns1:s:1}:conns:" + d,
           "quiver:{ns1:b:abc}",
           "quiver:{ns1:b:" + d + "}:body",
           "quiver:{ns1:r:" + std::string(64, 'A') + "}",
           "quiver:{ns1:x:gh}:conn",
           "quiver:{ns1:c}:conn",
       }) {
    Result<ParsedKey> parsed = k.parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad << " parsed as " << key_kind_name(parsed->kind);
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  // A member whose id reads like a principal word is still a member.
  Result<ParsedKey> m = k.parse("quiver:{ns1:m:shared}:grants");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->principal->str(), "member/shared");
}

// The tag Redis Cluster hashes: the text between the first '{' and the next '}'.
std::string tag_of(const std::string& key) {
  const std::size_t open = key.find('{');
  const std::size_t close = key.find('}', open);
  EXPECT_NE(open, std::string::npos) << key;
  EXPECT_NE(close, std::string::npos) << key;
  EXPECT_EQ(key.find_first_of("{}", close + 1), std::string::npos) << key;  // one tag only
  return key.substr(open + 1, close - open - 1);
}

TEST(RedisKeysV2, NoTwoNamespacesShareATag) {
  // Namespaces that are prefixes of each other, and ids that look like other tags' parts.
  const std::vector<const char*> namespaces = {"a", "ab", "a.b", "a-b", "a_c", "default", "s"};
  const std::vector<const char*> ids = {"c", "m", "s", "b", "r", "a", "ab", "x.y", "0", "15"};
  std::map<std::string, std::string> owner;  // tag -> namespace
  std::size_t keys = 0;
  for (const char* ns : namespaces) {
    const RedisKeys k = v2(ns, 16);
    for (const char* id : ids) {
      for (uint32_t shard : {0u, 1u, 15u}) {
        for (const std::string& key :
             every_v2_key(k, id, member(id), sha256_hex(std::string(id) + ns), shard)) {
          ++keys;
          const std::string tag = tag_of(key);
          // Every tag is the namespace, or the namespace then `:`: never a prefix of another's.
          ASSERT_TRUE(tag == ns || tag.rfind(std::string(ns) + ":", 0) == 0) << key;
          auto [it, inserted] = owner.emplace(tag, ns);
          EXPECT_EQ(it->second, ns)
              << "tag {" << tag << "} of " << key << " is also " << it->second << "'s";
          // And parse gives the key back (no key of one namespace parses in another).
          ASSERT_TRUE(k.parse(key).ok()) << key;
          for (const char* other : namespaces) {
            if (std::string(other) != ns) {
              EXPECT_FALSE(v2(other, 16).parse(key).ok()) << key;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(keys, 5000u);
  // Tags of one namespace are distinct per entity: a connection and a member with the same id
  // do not share one, nor a body and a replay guard with the same digest.
  const RedisKeys k = v2("a");
  EXPECT_NE(tag_of(must(k.conn("x"))), tag_of(must(k.grants(member("x")))));
  EXPECT_NE(tag_of(must(k.body(std::string(64, 'a')))),
            tag_of(must(k.key(KeyKind::kReplay, {}, std::nullopt, std::string(64, 'a')))));
}

// One planned v2 script or transaction: the keys it must touch atomically (docs/design.md "Key
// layout v2": the key table and "What crosses slots").
struct PlannedScript {
  std::string name;
  std::vector<std::string> keys;
};

std::vector<PlannedScript> planned_scripts(const RedisKeys& k, const std::string& cid,
                                           const Principal& m,
                                           const std::vector<std::string>& page) {
  const Principal shared = Principal::shared();
  std::vector<PlannedScript> out;
  // manifest_commit.lua / manifest_fail.lua for `shared`: the record's config_hash is read in
  // the same script (its body and due entry are separate commands).
  out.push_back({"commit of a shared manifest",
                 {must(k.manifest(cid, shared)), must(k.lease(cid, shared)),
                  must(k.fence(cid, shared)), must(k.conn(cid)), must(k.conn_version(cid))}});
  // The same for a member: no connection record (the config_hash check moves to the readers).
  out.push_back({"commit of a per-member manifest",
                 {must(k.manifest(cid, m)), must(k.lease(cid, m)), must(k.fence(cid, m)),
                  must(k.member_version(m))}});
  for (const Principal& p : {shared, m}) {
    const std::string who = p.is_shared() ? " (shared)" : " (member)";
    out.push_back({"lease acquire" + who,
                   {must(k.lease(cid, p)), must(k.fence(cid, p)), must(k.manifest(cid, p))}});
    out.push_back({"lease renew and release" + who, {must(k.lease(cid, p))}});
    out.push_back({"preferences merge" + who,
                   {must(k.prefs(cid, p)), must(k.disabled(cid, p)), must(k.version_of(cid, p))}});
    out.push_back({"webhook mark of one principal" + who,
                   {must(k.invalidated(cid, p)), must(k.version_of(cid, p))}});
    out.push_back({"revalidation gate" + who, {must(k.revalidate_gate(cid, p))}});
  }
  // Discovery, step 1 on the member's slot: grants, version, and the member's per-member keys
  // of every connection on the page.
  PlannedScript member_part{"discovery read, member part",
                            {must(k.grants(m)), must(k.member_version(m))}};
  for (const std::string& c : page) {
    for (auto key : {k.manifest(c, m), k.disabled(c, m), k.invalidated(c, m), k.lease(c, m)}) {
      member_part.keys.push_back(must(key));
    }
  }
  out.push_back(member_part);
  // Step 2 on each connection's slot: record, version, mark and the `shared` keys.
  out.push_back({"discovery read, connection part",
                 {must(k.conn(cid)), must(k.conn_version(cid)), must(k.marked(cid)),
                  must(k.manifest(cid, shared)), must(k.disabled(cid, shared)),
                  must(k.invalidated(cid, shared)), must(k.lease(cid, shared))}});
  out.push_back({"connection-wide webhook mark", {must(k.marked(cid)), must(k.conn_version(cid))}});
  out.push_back({"grant write of one member", {must(k.grants(m)), must(k.member_version(m))}});
  out.push_back({"grantees of one connection", {must(k.grantees(cid))}});
  out.push_back({"config sync of one connection record",
                 {must(k.conn(cid)), must(k.conn_version(cid)), must(k.grantees(cid))}});
  // On the connection's shard: the registry and the removal marker move together; a call and
  // its reply share the shard (XADD, BLPOP), with the agents' mark the enqueue checks.
  const uint32_t cs = *k.connection_shard(cid);
  const std::string rid(64, 'c');
  out.push_back(
      {"connection removal, registry part", {must(k.conns(cs)), must(k.removed_conns(cs))}});
  out.push_back({"call enqueue",
                 {must(k.calls(cs)), must(k.call_reply(rid, cs)), must(k.call_agents(cs)),
                  must(k.call_cancel(rid, cs))}});
  out.push_back(
      {"revalidation request and due entry", {must(k.revalidate_stream(cs)), must(k.due(cs))}});
  // On the member's shard: its registry entry and its pending grantees pairs.
  const uint32_t ms = *k.member_shard(m);
  out.push_back(
      {"grant write, registry part", {must(k.grant_members(ms)), must(k.grantees_pending(ms))}});
  return out;
}

TEST(RedisKeysV2, EveryPlannedScriptTouchesOneSlot) {
  const RedisKeys k = v2("team", 16);
  std::set<uint16_t> slots;
  for (int c = 0; c < 50; ++c) {
    const std::string cid = "conn-" + std::to_string(c);
    const Principal m = member(("user" + std::to_string(c) + "@example.com").c_str());
    const std::vector<std::string> page = {cid, "github", "jira", "conn-" + std::to_string(c + 1)};
    for (const PlannedScript& script : planned_scripts(k, cid, m, page)) {
      ASSERT_FALSE(script.keys.empty()) << script.name;
      const uint16_t slot = cluster_key_slot(script.keys[0]);
      slots.insert(slot);
      for (const std::string& key : script.keys) {
        EXPECT_EQ(cluster_key_slot(key), slot)
            << script.name << ": " << key << " is not in the slot of " << script.keys[0];
      }
      // As Redis would see it: one EVAL declaring them all is not CROSSSLOT.
      RedisCommand eval = {"EVALSHA", std::string(40, '0'), std::to_string(script.keys.size())};
      eval.insert(eval.end(), script.keys.begin(), script.keys.end());
      Result<std::optional<uint16_t>> routed = command_slot(eval);
      ASSERT_TRUE(routed.ok()) << script.name << ": " << routed.error().message;
      EXPECT_EQ(routed->value_or(0xffff), slot) << script.name;
    }
  }
  // 50 connections and members give many slots, not one: the namespace spreads.
  EXPECT_GT(slots.size(), 100u);
  // What the design says crosses slots does: the per-member commit cannot read the record
  // (checked over many pairs: a CRC16 collision of two tags is possible for one pair).
  int apart = 0;
  for (int c = 0; c < 100; ++c) {
    const std::string cid = "conn-" + std::to_string(c);
    const Principal m = member(("user" + std::to_string(c)).c_str());
    if (cluster_key_slot(must(k.conn(cid))) != cluster_key_slot(must(k.manifest(cid, m)))) ++apart;
  }
  EXPECT_GE(apart, 95);
}

}  // namespace
}  // namespace quiver
