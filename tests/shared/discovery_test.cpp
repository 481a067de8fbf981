#include "shared/discovery.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "shared/manifest.h"
#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/discovery_fixture.h

// One shared connection `c`, granted to alice, whose manifest hash is `manifest`.
MemoryStore alice_with_c(HashFields manifest) {
  MemoryStore store;
  store.add_connection("c", "shared");
  store.grant("alice", "c");
  store.manifests[{"c", "shared"}] = std::move(manifest);
  return store;
}

struct Rendered {
  RenderedDiscovery out;
  Json body;
};

Rendered render(MemoryStore& store, const std::string& member, int64_t now = kNow,
                RenderOptions options = {}) {
  Rendered r{render_manifests(snapshot_of(store, member), policy(), now, options), Json()};
  Result<Json> body = parse_json(r.out.body);
  EXPECT_TRUE(body.ok()) << r.out.body;
  if (body.ok()) r.body = *body;
  return r;
}

const Json* entry(const Json& body, const std::string& id) {
  const Json* conns = json_field(body, "connections");
  if (conns == nullptr) return nullptr;
  for (const Json& c : *conns) {
    if (json_string(c, "id") == id) return &c;
  }
  return nullptr;
}

std::vector<std::string> ids_of(const Json& body) {
  std::vector<std::string> ids;
  for (const Json& c : body["connections"]) ids.push_back(c["id"].get<std::string>());
  return ids;
}

std::vector<std::string> tool_names(const Json& manifest) {
  std::vector<std::string> names;
  for (const Json& t : manifest["tools"]["items"]) names.push_back(t["name"].get<std::string>());
  return names;
}

// One shared connection `c` granted to alice, with a manifest written `age` ago.
MemoryStore one_connection(int64_t age, const std::string& mode = "shared") {
  MemoryStore store;
  store.add_connection("c", mode);
  store.grant("alice", "c");
  std::string principal = mode == "shared" ? "shared" : "member/alice";
  store.manifests[{"c", principal}] =
      data_entry("h-c", kNow - age, kNow - age + 15 * kMinute, manifest_json({"search", "fetch"}));
  return store;
}

// ---- statuses ----------------------------------------------------------------------------------

TEST(Discovery, FreshEntryServesDataAndQueuesNothing) {
  MemoryStore store = one_connection(kMinute);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["status"], "fresh");
  EXPECT_EQ((*c)["age_ms"], kMinute);
  EXPECT_EQ((*c)["fetched_at"], kNow - kMinute);
  EXPECT_EQ((*c)["fresh_until"], kNow + 14 * kMinute);
  EXPECT_EQ((*c)["truncated"], false);
  EXPECT_EQ((*c)["etag"], "sha256-etag");
  EXPECT_EQ((*c)["principal"], "shared");
  EXPECT_EQ((*c)["name"], "Name of c");
  EXPECT_EQ((*c)["credential_mode"], "shared");
  EXPECT_FALSE(c->contains("error"));
  EXPECT_FALSE(c->contains("refresh"));
  EXPECT_EQ(tool_names((*c)["manifest"]), (std::vector<std::string>{"search", "fetch"}));
  EXPECT_TRUE(r.out.revalidations.empty());
  EXPECT_EQ(r.out.stats, (DiscoveryStats{1, 0, 0, 0, 0}));
}

TEST(Discovery, StaleEntryServesDataAndQueuesOneRevalidation) {
  MemoryStore store = one_connection(20 * kMinute);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["status"], "stale");
  EXPECT_EQ((*c)["age_ms"], 20 * kMinute);
  EXPECT_EQ((*c)["refresh"], "requested");
  EXPECT_EQ(tool_names((*c)["manifest"]).size(), 2u);
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0],
            (Revalidation{"c", Principal::shared(), "stale", /*manual=*/false}));
  EXPECT_EQ(r.out.max_age_s, 0);
}

TEST(Discovery, NothingIsQueuedWhileALeaseIsHeld) {
  MemoryStore store = one_connection(20 * kMinute);
  store.leases.insert({"c", "shared"});
  Rendered r = render(store, "alice");
  EXPECT_EQ((*entry(r.body, "c"))["status"], "stale");
  EXPECT_EQ((*entry(r.body, "c"))["refresh"], "in_progress");
  EXPECT_TRUE(r.out.revalidations.empty());
}

TEST(Discovery, ExpiredEntryShowsStatusOnly) {
  MemoryStore store = one_connection(25 * 60 * kMinute);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["status"], "expired");
  EXPECT_EQ((*c)["age_ms"], 25 * 60 * kMinute);
  EXPECT_FALSE(c->contains("manifest"));
  EXPECT_FALSE(c->contains("mcp"));
  EXPECT_EQ(r.body.dump().find("search"), std::string::npos);
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0].reason, "expired");
  EXPECT_EQ(r.out.stats.expired, 1);
}

TEST(Discovery, MissingEntryIsPendingAndQueued) {
  MemoryStore store;
  store.add_connection("c", "per_member");
  store.grant("alice", "c");
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["status"], "pending");
  EXPECT_EQ((*c)["pending_reason"], "no_entry");
  EXPECT_EQ((*c)["principal"], "member/alice");
  EXPECT_FALSE(c->contains("age_ms"));
  EXPECT_FALSE(c->contains("manifest"));
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0], (Revalidation{"c", member_principal("alice"), "miss", false}));
}

TEST(Discovery, RefreshUnderWayWithoutDataIsPending) {
  MemoryStore store = alice_with_c(HashFields{{"attempt_at", std::to_string(kNow - 1000)}});
  store.leases.insert({"c", "shared"});
  Rendered r = render(store, "alice");
  EXPECT_EQ((*entry(r.body, "c"))["status"], "pending");
  EXPECT_EQ((*entry(r.body, "c"))["pending_reason"], "no_data");
  EXPECT_EQ((*entry(r.body, "c"))["refresh"], "in_progress");
  EXPECT_TRUE(r.out.revalidations.empty());
}

TEST(Discovery, ConfigChangeIsPendingNotServed) {
  MemoryStore store = one_connection(kMinute);
  store.add_connection("c", "shared", "h-new");
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "pending");
  EXPECT_EQ((*c)["pending_reason"], "config_changed");
  EXPECT_FALSE(c->contains("manifest"));
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0].reason, "config_changed");
}

TEST(Discovery, FailedFirstListingIsErrorWithTheRecordedError) {
  HashFields f;
  add_failure(&f, "UPSTREAM_UNAVAILABLE", "connection refused twice", kNow - 5000);
  MemoryStore store = alice_with_c(f);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "error");
  EXPECT_EQ((*c)["error"]["code"], "UPSTREAM_UNAVAILABLE");
  EXPECT_EQ((*c)["error"]["message"], "connection refused twice");
  EXPECT_EQ((*c)["error"]["at"], kNow - 5000);
  EXPECT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.stats.error, 1);
}

TEST(Discovery, NoAuthorizationIsAuthorizationRequiredWithThePathAndNothingQueued) {
  HashFields f;
  add_failure(&f, "AUTHORIZATION_REQUIRED", "no authorization for member/alice", kNow - 5000);
  MemoryStore store = alice_with_c(f);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "authorization_required");
  EXPECT_EQ((*c)["authorize"], "/v1/mcp-connections/c/authorize");
  EXPECT_EQ((*c)["error"]["code"], "AUTHORIZATION_REQUIRED");
  EXPECT_FALSE(c->contains("refresh"));
  EXPECT_TRUE(r.out.revalidations.empty());  // a listing would fail the same way
  EXPECT_EQ(r.out.stats.authorization_required, 1);
  EXPECT_EQ(r.out.stats.error, 0);
  EXPECT_EQ(r.out.max_age_s, 0);
}

TEST(Discovery, ARefreshTokenThatStoppedWorkingKeepsTheLastGoodDataVisible) {
  MemoryStore store = one_connection(20 * kMinute);
  add_failure(&store.manifests[{"c", "shared"}], "AUTHORIZATION_REQUIRED", "invalid_grant",
              kNow - kMinute);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "authorization_required");
  EXPECT_TRUE(c->contains("manifest"));  // the last good manifest, still served
  EXPECT_TRUE(c->contains("fetched_at"));
  EXPECT_TRUE(r.out.revalidations.empty());
}

TEST(Discovery, StaleDataAfterAFailedRefreshIsServedWithTheError) {
  MemoryStore store = one_connection(20 * kMinute);
  add_failure(&store.manifests[{"c", "shared"}], "TIMEOUT", "listing deadline passed",
              kNow - kMinute);
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "stale");
  EXPECT_EQ((*c)["error"]["code"], "TIMEOUT");
  EXPECT_TRUE(c->contains("manifest"));
}

TEST(Discovery, AnErrorOlderThanTheDataIsHistory) {
  MemoryStore store = one_connection(kMinute);
  HashFields& f = store.manifests[{"c", "shared"}];
  f["error_code"] = "TIMEOUT";
  f["error_message"] = "old";
  f["error_at"] = std::to_string(kNow - 2 * kMinute);
  Rendered r = render(store, "alice");
  EXPECT_EQ((*entry(r.body, "c"))["status"], "fresh");
  EXPECT_FALSE(entry(r.body, "c")->contains("error"));
}

TEST(Discovery, UnreadableEntryIsAnErrorAndIsRewritten) {
  MemoryStore store = one_connection(kMinute);
  store.manifests[{"c", "shared"}]["fetched_at"] = "yesterday";
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "error");
  EXPECT_EQ((*c)["error"]["code"], "INVALID_REPLY");
  EXPECT_NE((*c)["error"]["message"].get<std::string>().find("fetched_at"), std::string::npos);
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0].reason, "corrupt");

  MemoryStore broken = one_connection(kMinute);
  broken.manifests[{"c", "shared"}]["manifest"] = "{\"tools\": [";
  Rendered b = render(broken, "alice");
  EXPECT_EQ((*entry(b.body, "c"))["status"], "error");
  EXPECT_FALSE(entry(b.body, "c")->contains("manifest"));
  EXPECT_EQ(b.out.revalidations[0].reason, "corrupt");
}

TEST(Discovery, OversizedStoredManifestIsUnreadable) {
  MemoryStore store = one_connection(kMinute);
  RenderOptions small;
  small.max_manifest_bytes = 64;
  Rendered r = render(store, "alice", kNow, small);
  EXPECT_EQ((*entry(r.body, "c"))["status"], "error");
  EXPECT_FALSE(entry(r.body, "c")->contains("manifest"));
}

TEST(Discovery, UnknownCredentialModeIsAnErrorWithNothingRead) {
  MemoryStore store = one_connection(kMinute);
  store.add_connection("c", "team");
  Rendered r = render(store, "alice");
  const Json* c = entry(r.body, "c");
  EXPECT_EQ((*c)["status"], "error");
  EXPECT_EQ((*c)["credential_mode"], "unknown");
  EXPECT_FALSE(c->contains("principal"));
  EXPECT_FALSE(c->contains("manifest"));
  EXPECT_TRUE(r.out.revalidations.empty());
}

TEST(Discovery, StatusTableCoversEveryStatus) {
  // One snapshot holding every status at once; the stats count each.
  MemoryStore store;
  for (const char* id : {"a-fresh", "b-stale", "c-expired", "d-pending", "e-error", "f-auth"}) {
    store.add_connection(id, "shared");
    store.grant("alice", id);
  }
  store.manifests[{"a-fresh", "shared"}] =
      data_entry("h-a-fresh", kNow - 1, kNow + 15 * kMinute, manifest_json({"t"}));
  store.manifests[{"b-stale", "shared"}] =
      data_entry("h-b-stale", kNow - 16 * kMinute, kNow - kMinute, manifest_json({"t"}));
  store.manifests[{"c-expired", "shared"}] =
      data_entry("h-c-expired", kNow - 2 * 86'400'000, kNow, manifest_json({"t"}));
  HashFields failed;
  add_failure(&failed, "TIMEOUT", "x", kNow - 1);
  store.manifests[{"e-error", "shared"}] = failed;
  HashFields unauthorized;
  add_failure(&unauthorized, "AUTHORIZATION_REQUIRED", "x", kNow - 1);
  store.manifests[{"f-auth", "shared"}] = unauthorized;
  Rendered r = render(store, "alice");
  std::vector<std::string> statuses;
  for (const Json& c : r.body["connections"]) statuses.push_back(c["status"]);
  EXPECT_EQ(statuses, (std::vector<std::string>{"fresh", "stale", "expired", "pending", "error",
                                                "authorization_required"}));
  EXPECT_EQ(r.out.stats, (DiscoveryStats{1, 1, 1, 1, 1, 1}));
  std::vector<std::string> reasons;
  for (const Revalidation& v : r.out.revalidations) reasons.push_back(v.reason);
  EXPECT_EQ(reasons, (std::vector<std::string>{"stale", "expired", "miss", "miss"}));
}

// ---- what appears ------------------------------------------------------------------------------

TEST(Discovery, RemovedAndUngrantedConnectionsNeverAppear) {
  MemoryStore store = one_connection(kMinute);
  store.grant("alice", "gone");  // granted, but its record was deleted
  store.manifests[{"gone", "shared"}] =
      data_entry("h-gone", kNow, kNow + kMinute, manifest_json({"ghost"}));
  store.add_connection("other", "shared");  // exists, not granted to alice
  store.manifests[{"other", "shared"}] =
      data_entry("h-other", kNow, kNow + kMinute, manifest_json({"secret-tool"}));
  Rendered r = render(store, "alice");
  EXPECT_EQ(ids_of(r.body), (std::vector<std::string>{"c"}));
  EXPECT_EQ(r.out.body.find("ghost"), std::string::npos);
  EXPECT_EQ(r.out.body.find("secret-tool"), std::string::npos);
  EXPECT_TRUE(r.out.revalidations.empty());

  DiscoverySnapshot s = snapshot_of(store, "alice");
  EXPECT_EQ(render_connection_manifest(s, "gone", policy(), kNow).error().code,
            ErrorCode::kNotFound);
  EXPECT_EQ(render_connection_manifest(s, "other", policy(), kNow).error().code,
            ErrorCode::kNotFound);
  EXPECT_EQ(render_connection_manifest(s, "never", policy(), kNow).error().code,
            ErrorCode::kNotFound);
}

TEST(Discovery, NoGrantsIsAnEmptyList) {
  MemoryStore store = one_connection(kMinute);
  Rendered r = render(store, "bob");
  EXPECT_EQ(r.body["connections"], Json::array());
  EXPECT_EQ(r.body["principal"], "member/bob");
  EXPECT_EQ(r.out.max_age_s, 30);  // the cap
}

// Three members, three connections in mixed credential modes, grants varying. Every
// (connection, principal) that exists has a manifest whose tool is named after it, including
// manifests of members who are not granted the connection.
TEST(Discovery, IsolationMatrix) {
  MemoryStore store;
  const std::vector<std::string> members = {"alice", "bob", "carol"};
  const std::map<std::string, std::string> mode = {
      {"shared-docs", "shared"}, {"pm-github", "per_member"}, {"pm-mail", "per_member"}};
  for (const auto& [cid, m] : mode) store.add_connection(cid, m);
  auto tool_for = [](const std::string& cid, const std::string& principal) {
    std::string p = principal;
    std::replace(p.begin(), p.end(), '/', '-');
    return "tool-" + cid + "-" + p;
  };
  for (const auto& [cid, m] : mode) {
    std::vector<std::string> principals = {"shared"};
    for (const std::string& member : members) principals.push_back("member/" + member);
    for (const std::string& p : principals) {
      store.manifests[{cid, p}] =
          data_entry("h-" + cid, kNow - 1, kNow + kMinute, manifest_json({tool_for(cid, p)}));
    }
  }
  const std::map<std::string, std::vector<std::string>> grants = {
      {"alice", {"pm-github", "pm-mail", "shared-docs"}},
      {"bob", {"pm-mail", "shared-docs"}},
      {"carol", {"pm-github"}}};
  for (const auto& [member, cids] : grants) {
    for (const std::string& cid : cids) store.grant(member, cid);
  }

  for (const std::string& member : members) {
    SCOPED_TRACE(member);
    Rendered r = render(store, member);
    EXPECT_EQ(ids_of(r.body), grants.at(member));
    for (const auto& [cid, m] : mode) {
      for (const std::string other : {"shared", "member/alice", "member/bob", "member/carol"}) {
        const std::string expected = m == "shared" ? "shared" : "member/" + member;
        const bool granted = std::count(grants.at(member).begin(), grants.at(member).end(), cid);
        const bool visible = r.out.body.find(tool_for(cid, other)) != std::string::npos;
        EXPECT_EQ(visible, granted && other == expected) << cid << " under " << other;
      }
    }
    for (const Json& c : r.body["connections"]) {
      const std::string cid = c["id"];
      const std::string expected = mode.at(cid) == "shared" ? "shared" : "member/" + member;
      EXPECT_EQ(c["principal"], expected);
      EXPECT_EQ(tool_names(c["manifest"]), (std::vector<std::string>{tool_for(cid, expected)}));
    }
    // The single-connection read agrees with the list, and refuses exactly the ungranted ones.
    for (const auto& [cid, m] : mode) {
      const bool granted = std::count(grants.at(member).begin(), grants.at(member).end(), cid);
      SnapshotQuery only;
      only.only = cid;
      DiscoverySnapshot one = snapshot_of(store, member, only);
      Result<RenderedDiscovery> single = render_connection_manifest(one, cid, policy(), kNow);
      EXPECT_EQ(single.ok(), granted) << cid;
      EXPECT_EQ(one.connections.size(), granted ? 1u : 0u);
      if (single.ok()) {
        EXPECT_EQ(*parse_json(single->body), *entry(r.body, cid));
      }
    }
  }
}

TEST(Discovery, AnEntryReadUnderAnotherPrincipalIsNeverServed) {
  // A broken reader that fetched bob's manifest for alice: refused, not queued.
  MemoryStore store = one_connection(kMinute, "per_member");
  DiscoverySnapshot s = snapshot_of(store, "alice");
  s.connections[0].principal = member_principal("bob");
  s.connections[0].manifest = manifest_entry_from_fields(
      data_entry("h-c", kNow, kNow + kMinute, manifest_json({"bobs-private-tool"})));
  RenderedDiscovery r = render_manifests(s, policy(), kNow);
  EXPECT_EQ(r.body.find("bobs-private-tool"), std::string::npos);
  EXPECT_NE(r.body.find("\"status\":\"error\""), std::string::npos);
  EXPECT_TRUE(r.revalidations.empty());

  s.connections[0].principal.reset();
  r = render_manifests(s, policy(), kNow);
  EXPECT_EQ(r.body.find("bobs-private-tool"), std::string::npos);
}

TEST(Discovery, SharedPrincipalIsNotACaller) {
  MemoryStore store = one_connection(kMinute);
  EXPECT_EQ(read_snapshot(store, Principal::shared(), {}).error().code,
            ErrorCode::kInvalidArgument);
  ConnectionRecord record;
  record.credential_mode = CredentialMode::kShared;
  EXPECT_FALSE(applicable_principal(record, Principal::shared()).ok());
  EXPECT_EQ(applicable_principal(record, member_principal("a"))->str(), "shared");
  record.credential_mode = CredentialMode::kPerMember;
  EXPECT_EQ(applicable_principal(record, member_principal("a"))->str(), "member/a");
  record.credential_mode = CredentialMode::kUnknown;
  EXPECT_FALSE(applicable_principal(record, member_principal("a")).ok());
}

// ---- disabled capabilities ---------------------------------------------------------------------

TEST(Discovery, DisabledCapabilitiesAreHiddenInEveryKind) {
  MemoryStore store = alice_with_c(
      data_entry("h-c", kNow, kNow + kMinute,
                 manifest_json({"keep", "drop"}, {"file:///keep", "file:///drop"},
                               {"file:///{keep}", "file:///{drop}"}, {"p-keep", "p-drop"})));
  store.disabled_sets[{"c", "shared"}] = {"tool:drop", "resource:file:///drop",
                                          "resource_template:file:///{drop}", "prompt:p-drop",
                                          "tool:not-listed"};
  Rendered r = render(store, "alice");
  const Json& m = (*entry(r.body, "c"))["manifest"];
  EXPECT_EQ(tool_names(m), (std::vector<std::string>{"keep"}));
  EXPECT_EQ(m["resources"]["items"].size(), 1u);
  EXPECT_EQ(m["resources"]["items"][0]["uri"], "file:///keep");
  EXPECT_EQ(m["resource_templates"]["items"].size(), 1u);
  EXPECT_EQ(m["resource_templates"]["items"][0]["uriTemplate"], "file:///{keep}");
  EXPECT_EQ(m["prompts"]["items"].size(), 1u);
  EXPECT_EQ(m["prompts"]["items"][0]["name"], "p-keep");
  EXPECT_FALSE(m["tools"]["hashes"].contains("drop"));
  EXPECT_TRUE(m["tools"]["hashes"].contains("keep"));
  EXPECT_EQ(r.out.body.find("drop"), std::string::npos);

  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  Rendered v = render(store, "alice", kNow, mcp);
  EXPECT_EQ(v.out.body.find("drop"), std::string::npos);
  EXPECT_EQ((*entry(v.body, "c"))["mcp"]["tools/list"]["tools"].size(), 1u);
}

TEST(Discovery, APerMemberOverlayHidesFromThatMemberOnly) {
  MemoryStore store;
  store.add_connection("c", "per_member");
  store.grant("alice", "c");
  store.grant("bob", "c");
  for (const char* who : {"alice", "bob"}) {
    store.manifests[{"c", std::string("member/") + who}] =
        data_entry("h-c", kNow, kNow + kMinute, manifest_json({"search", "send"}));
  }
  store.disabled_sets[{"c", "member/alice"}] = {"tool:send"};
  // A set under `shared` is nobody's on a per-member connection: it hides nothing.
  store.disabled_sets[{"c", "shared"}] = {"tool:search"};
  Rendered a = render(store, "alice");
  EXPECT_EQ(tool_names((*entry(a.body, "c"))["manifest"]), (std::vector<std::string>{"search"}));
  Rendered b = render(store, "bob");
  EXPECT_EQ(tool_names((*entry(b.body, "c"))["manifest"]),
            (std::vector<std::string>{"search", "send"}));
  EXPECT_EQ(snapshot_of(store, "bob").connections[0].disabled, DisabledOverlay{});
}

TEST(Discovery, HideDisabledWorksOnBareArraysAndLeavesTheRestAlone) {
  Json m = Json::object();
  m["tools"] = Json::array({Json::object({{"name", "a"}}), Json::object({{"name", "b"}}),
                            Json::object({{"title", "no name"}})});
  m["resourceTemplates"] = Json::array({Json::object({{"uriTemplate", "x://{a}"}})});
  m["server"] = Json::object({{"name", "b"}});
  Json out = hide_disabled(m, {"tool:b", "resource_template:x://{a}"});
  EXPECT_EQ(out["tools"].size(), 2u);  // an item without a key stays visible
  EXPECT_EQ(out["tools"][0]["name"], "a");
  EXPECT_EQ(out["resourceTemplates"], Json::array());
  EXPECT_EQ(out["server"], m["server"]);
  EXPECT_EQ(hide_disabled(m, {}), m);
}

TEST(Discovery, AManifestFromTheModelStaysAValidManifestWithCapabilitiesHidden) {
  // The stored bytes as the agent writes them (shared/manifest.h), not a hand-made imitation.
  Listing listing;
  listing.protocol_version = "2025-11-25";
  listing.server_info = Json::object({{"name", "srv"}, {"version", "2"}});
  auto ok = [](std::vector<Json> items) {
    ListOutcome o;
    o.state = ListState::kOk;
    o.items = std::move(items);
    o.pages = 1;
    return o;
  };
  Json schema = Json::object({{"type", "object"}});
  listing.list(ListKind::kTools) = ok({Json::object({{"name", "keep"}, {"inputSchema", schema}}),
                                       Json::object({{"name", "drop"}, {"inputSchema", schema}})});
  listing.list(ListKind::kResources) = ok({Json::object({{"uri", "file:///a"}, {"name", "a"}}),
                                           Json::object({{"uri", "file:///b"}, {"name", "b"}})});
  listing.list(ListKind::kResourceTemplates) =
      ok({Json::object({{"uriTemplate", "file:///{x}"}, {"name", "x"}})});
  listing.list(ListKind::kPrompts).state = ListState::kAbsent;
  Result<Manifest> manifest = manifest_from_listing(listing);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  Result<EncodedManifest> encoded = encode_manifest(*manifest);
  ASSERT_TRUE(encoded.ok());

  MemoryStore store =
      alice_with_c(data_entry("h-c", kNow, kNow + kMinute, encoded->bytes, encoded->etag));
  store.disabled_sets[{"c", "shared"}] = {"tool:drop", "resource_template:file:///{x}"};
  Rendered r = render(store, "alice");
  const Json& c = *entry(r.body, "c");
  EXPECT_EQ(c["etag"], encoded->etag);
  Result<Manifest> shown = manifest_from_json(c["manifest"]);
  ASSERT_TRUE(shown.ok()) << shown.error().message;
  ASSERT_EQ(shown->tools.items.size(), 1u);
  EXPECT_EQ(shown->tools.items[0].name, "keep");
  EXPECT_EQ(shown->resources.items.size(), 2u);
  EXPECT_TRUE(shown->resource_templates.items.empty());
  EXPECT_EQ(shown->prompts.state, ListState::kAbsent);

  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  Rendered v = render(store, "alice", kNow, mcp);
  const Json& lists = (*entry(v.body, "c"))["mcp"];
  EXPECT_EQ(lists["tools/list"]["tools"].size(), 1u);
  EXPECT_EQ(lists["resources/templates/list"]["resourceTemplates"], Json::array());
  EXPECT_FALSE(lists.contains("prompts/list"));  // absent: the server has none
}

// ---- views -------------------------------------------------------------------------------------

TEST(Discovery, McpViewIsShapedLikeListResultsWithCacheHints) {
  MemoryStore store = one_connection(5 * kMinute);
  // Make prompts a failed list: it has no MCP result, it says it could not be loaded.
  Json m = *parse_json(store.manifests[{"c", "shared"}]["manifest"]);
  m["prompts"] = Json::object({{"state", "failed"},
                               {"items", Json::array()},
                               {"hashes", Json::object()},
                               {"cache", Json::object()},
                               {"error", {{"code", "TIMEOUT"}, {"message", "slow"}}}});
  store.manifests[{"c", "shared"}]["manifest"] = json_text(m);
  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  Rendered r = render(store, "alice", kNow, mcp);
  const Json& c = *entry(r.body, "c");
  EXPECT_FALSE(c.contains("manifest"));
  const Json& tools = c["mcp"]["tools/list"];
  EXPECT_EQ(tools["tools"].size(), 2u);
  EXPECT_EQ(tools["ttlMs"], 10 * kMinute);
  EXPECT_EQ(tools["cacheScope"], "private");
  EXPECT_TRUE(c["mcp"].contains("resources/list"));
  EXPECT_TRUE(c["mcp"]["resources/templates/list"].contains("resourceTemplates"));
  // ADR-004: never an empty result (nor a missing one) for a list that could not be loaded.
  EXPECT_EQ(c["mcp"]["prompts/list"],
            Json({{"error",
                   {{"code", "TIMEOUT"}, {"message", "prompts/list could not be loaded: slow"}}}}));

  MemoryStore stale = one_connection(20 * kMinute);
  Rendered s = render(stale, "alice", kNow, mcp);
  EXPECT_EQ((*entry(s.body, "c"))["mcp"]["tools/list"]["ttlMs"], 0);
}

// Issue 10: a listing in which lists failed is committed never fresh (fresh_until = fetched_at):
// served stale with its error and revalidated, a failed list an explicit error in the mcp view,
// a kept last good list marked as such. Before, it was fresh with 0 items and `{}`.
TEST(Discovery, AManifestWithAFailedListIsStaleAndSaysWhichListFailed) {
  Listing listing;
  listing.protocol_version = "2025-11-25";
  listing.server_info = Json::object({{"name", "srv"}, {"version", "2"}});
  for (ListKind k :
       {ListKind::kTools, ListKind::kResources, ListKind::kResourceTemplates, ListKind::kPrompts}) {
    listing.list(k).state = ListState::kFailed;
    listing.list(k).error = Error(ErrorCode::kTimeout, "no answer within 3500 ms");
  }
  listing.list(ListKind::kResources).items = {Json::object({{"uri", "a://1"}, {"name", "1"}})};
  Result<Manifest> manifest = manifest_from_listing(listing);
  ASSERT_TRUE(manifest.ok());
  // The last good tools list is kept (see ManifestKeepLastGood): say so in the mcp view.
  manifest->tools.state = ListState::kOk;
  manifest->tools.error.reset();
  manifest->tools.kept = KeptList{kNow - kMinute, Error(ErrorCode::kTimeout, "no answer")};
  Result<EncodedManifest> encoded = encode_manifest(*manifest);
  ASSERT_TRUE(encoded.ok());

  MemoryStore store =
      alice_with_c(data_entry("h-c", kNow - 1000, kNow - 1000, encoded->bytes, encoded->etag));
  add_failure(&store.manifests[{"c", "shared"}], "TIMEOUT",
              "resources/list could not be loaded: no answer within 3500 ms", kNow - 900);
  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  Rendered r = render(store, "alice", kNow, mcp);
  const Json& c = *entry(r.body, "c");
  EXPECT_EQ(c["status"], "stale");
  EXPECT_EQ(c["refresh"], "requested");
  EXPECT_EQ(c["error"]["code"], "TIMEOUT");
  EXPECT_EQ(r.out.max_age_s, 0);
  const Json& lists = c["mcp"];
  EXPECT_EQ(lists["tools/list"]["ttlMs"], 0);
  EXPECT_EQ(lists["tools/list"]["_meta"]["quiver/kept"]["listed_at"], kNow - kMinute);
  EXPECT_EQ(lists["resources/list"]["error"]["code"], "TIMEOUT");
  EXPECT_EQ(lists["resources/list"]["partial_items"], 1);
  EXPECT_FALSE(lists["resources/list"].contains("resources"));
  EXPECT_EQ(lists["prompts/list"]["error"]["message"],
            "prompts/list could not be loaded: no answer within 3500 ms");
  ASSERT_EQ(r.out.revalidations.size(), 1u);
  EXPECT_EQ(r.out.revalidations[0].reason, "stale");
}

TEST(Discovery, ViewNames) {
  EXPECT_EQ(discovery_view_from_name("mcp"), DiscoveryView::kMcp);
  EXPECT_EQ(discovery_view_from_name("manifest"), DiscoveryView::kManifest);
  EXPECT_FALSE(discovery_view_from_name("MCP").has_value());
  EXPECT_STREQ(discovery_view_name(DiscoveryView::kMcp), "mcp");
}

// ---- HTTP caching ------------------------------------------------------------------------------

TEST(Discovery, EtagIgnoresTheClockButNotTheContent) {
  MemoryStore store = one_connection(kMinute);
  Rendered a = render(store, "alice", kNow);
  Rendered b = render(store, "alice", kNow + 1000);
  EXPECT_NE(a.out.body, b.out.body);  // age_ms moved
  EXPECT_EQ(a.out.etag, b.out.etag);
  EXPECT_EQ(a.out.etag.rfind("W/\"fp-", 0), 0u) << a.out.etag;

  Rendered stale = render(store, "alice", kNow + 15 * kMinute);
  EXPECT_NE(stale.out.etag, a.out.etag);  // fresh → stale is news

  store.disabled_sets[{"c", "shared"}] = {"tool:fetch"};
  EXPECT_NE(render(store, "alice", kNow).out.etag, a.out.etag);

  store.disabled_sets.clear();
  store.manifests[{"c", "shared"}]["etag"] = "sha256-other";
  EXPECT_NE(render(store, "alice", kNow).out.etag, a.out.etag);

  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  store.manifests[{"c", "shared"}]["etag"] = "sha256-etag";
  EXPECT_NE(render(store, "alice", kNow, mcp).out.etag, a.out.etag);
  EXPECT_EQ(render(store, "alice", kNow).out.etag, a.out.etag);
}

TEST(Discovery, CacheControlIsPrivateAndBoundedByTheSoonestStaleness) {
  MemoryStore store = one_connection(14 * kMinute);  // 60 s of freshness left
  RenderOptions wide;
  wide.max_cache_age_s = 3600;
  Rendered r = render(store, "alice", kNow, wide);
  EXPECT_EQ(r.out.cache_control, "private, max-age=60");
  EXPECT_EQ(render(store, "alice", kNow).out.cache_control, "private, max-age=30");
  EXPECT_EQ(render(store, "alice", kNow + 59'500, wide).out.cache_control, "private, max-age=0");
  store.add_connection("p", "shared");
  store.grant("alice", "p");  // pending: the client should come back soon
  EXPECT_EQ(render(store, "alice", kNow, wide).out.cache_control, "private, max-age=0");
}

TEST(Discovery, IfNoneMatchUsesWeakComparison) {
  const std::string etag = "W/\"sha256-abc\"";
  EXPECT_TRUE(if_none_match_matches("W/\"sha256-abc\"", etag));
  EXPECT_TRUE(if_none_match_matches("\"sha256-abc\"", etag));
  EXPECT_TRUE(if_none_match_matches("\"x\", W/\"sha256-abc\" ", etag));
  EXPECT_TRUE(if_none_match_matches("*", etag));
  EXPECT_FALSE(if_none_match_matches("\"sha256-abd\"", etag));
  EXPECT_FALSE(if_none_match_matches("sha256-abc", etag));
  EXPECT_FALSE(if_none_match_matches("", etag));
  EXPECT_EQ(strong_etag("x").front(), '"');
}

TEST(Discovery, SingleConnectionBodyIsTheEntry) {
  MemoryStore store = one_connection(kMinute);
  DiscoverySnapshot s = snapshot_of(store, "alice");
  Result<RenderedDiscovery> one = render_connection_manifest(s, "c", policy(), kNow);
  ASSERT_TRUE(one.ok());
  Json body = *parse_json(one->body);
  EXPECT_EQ(body["id"], "c");
  EXPECT_EQ(body["status"], "fresh");
  EXPECT_EQ(tool_names(body["manifest"]).size(), 2u);
  EXPECT_EQ(one->cache_control, "private, max-age=30");
  EXPECT_EQ(one->etag, render_connection_manifest(s, "c", policy(), kNow + 5).value().etag);
}

// ---- snapshot reading --------------------------------------------------------------------------

TEST(Discovery, ReadSnapshotPagesInByteOrderAndSkipsInvalidIds) {
  MemoryStore store;
  for (const char* id : {"b", "a", "C", "d", "bad:id", "a"}) {
    store.add_connection(id, "shared");
    store.grant("alice", id);
  }
  SnapshotQuery page;
  page.limit = 2;
  DiscoverySnapshot first = snapshot_of(store, "alice", page);
  EXPECT_EQ(first.granted_ids(), (std::vector<std::string>{"C", "a"}));
  EXPECT_EQ(first.next_after, std::optional<std::string>("a"));
  EXPECT_EQ(first.granted_total, 4);
  EXPECT_EQ(first.ignored_grants, 1);
  EXPECT_EQ(first.epoch, 7);
  page.after = *first.next_after;
  DiscoverySnapshot second = snapshot_of(store, "alice", page);
  EXPECT_EQ(second.granted_ids(), (std::vector<std::string>{"b", "d"}));
  EXPECT_FALSE(second.next_after.has_value());
  EXPECT_EQ(render_manifests(first, policy(), kNow).body.find("\"next_after\":\"a\"") !=
                std::string::npos,
            true);

  SnapshotQuery only;
  only.only = "d";
  EXPECT_EQ(snapshot_of(store, "alice", only).granted_ids(), (std::vector<std::string>{"d"}));
  only.only = "zzz";
  EXPECT_TRUE(snapshot_of(store, "alice", only).connections.empty());

  SnapshotQuery bad;
  bad.limit = 0;
  EXPECT_EQ(read_snapshot(store, member_principal("alice"), bad).error().code,
            ErrorCode::kInvalidArgument);
  bad.limit = kMaxSnapshotLimit + 1;
  EXPECT_FALSE(read_snapshot(store, member_principal("alice"), bad).ok());
}

TEST(Discovery, ReadSnapshotPassesStoreFailuresOn) {
  MemoryStore store = one_connection(kMinute);
  store.failure = Error(ErrorCode::kTransport, "database is locked");
  Result<DiscoverySnapshot> s = read_snapshot(store, member_principal("alice"), {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "database is locked");
}

TEST(Discovery, CacheEntryMetaReadsTheDocumentedFields) {
  EXPECT_FALSE(cache_entry_meta(manifest_entry_from_fields({})).value().has_value());
  HashFields f = data_entry("h", 1000, 61'000, "{}");
  f["cache_scope"] = "private";
  std::optional<CacheEntryMeta> m = cache_entry_meta(manifest_entry_from_fields(f)).value();
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->has_data);
  EXPECT_EQ(m->fetched_at_ms, 1000);
  EXPECT_EQ(m->upstream_ttl_ms, 60'000);
  EXPECT_EQ(m->config_hash, "h");
  EXPECT_EQ(m->cache_scope, CacheScope::kPrivate);
  EXPECT_EQ(m->last_attempt_at_ms, 1000);
  EXPECT_FALSE(m->last_error.has_value());

  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"fetched_at", "1e3"},
                                                        {"fetched_at", " 1"},
                                                        {"fresh_until", "99999999999999999999"},
                                                        {"error_at", "x"},
                                                        {"attempt_at", "-"},
                                                        {"fresh_until", "999"}}) {
    HashFields bad = f;
    bad[name] = value;
    EXPECT_EQ(cache_entry_meta(manifest_entry_from_fields(bad)).error().code,
              ErrorCode::kInvalidArgument)
        << name << "=" << value;
  }
  HashFields no_time = f;
  no_time.erase("fetched_at");
  EXPECT_FALSE(cache_entry_meta(manifest_entry_from_fields(no_time)).ok());
  HashFields error_only{{"error_code", "TIMEOUT"}, {"error_at", "5"}};
  m = cache_entry_meta(manifest_entry_from_fields(error_only)).value();
  EXPECT_FALSE(m->has_data);
  EXPECT_EQ(m->last_error->code, "TIMEOUT");
  EXPECT_EQ(m->last_error->at_ms, 5);
}

TEST(Discovery, PeerStringsThatAreNotUtf8DoNotBreakTheBody) {
  MemoryStore store = one_connection(kMinute);
  store.conns["c"]["name"] = std::string("bad \xff name");
  Rendered r = render(store, "alice");
  EXPECT_EQ(entry(r.body, "c")->at("status"), "fresh");
}

// ---- search corpus -----------------------------------------------------------------------------

TEST(Discovery, SearchCorpusHoldsVisibleToolsOfServableEntries) {
  MemoryStore store = one_connection(kMinute);
  store.add_connection("p", "shared");
  store.grant("alice", "p");
  store.disabled_sets[{"c", "shared"}] = {"tool:fetch"};
  SearchCorpus corpus = search_corpus(snapshot_of(store, "alice"), policy(), kNow);
  ASSERT_EQ(corpus.tools.size(), 1u);
  EXPECT_EQ(corpus.tools[0].connection_id, "c");
  EXPECT_EQ(corpus.tools[0].tool["name"], "search");
  ASSERT_EQ(corpus.unavailable.size(), 1u);
  EXPECT_EQ(corpus.unavailable[0].first, "p");
  EXPECT_EQ(corpus.unavailable[0].second, EntryStatus::kPending);
  EXPECT_EQ(corpus.revalidations.size(), 1u);

  const std::string version = corpus.version;
  EXPECT_EQ(search_corpus(snapshot_of(store, "alice"), policy(), kNow + 1).version, version);
  store.disabled_sets.clear();
  EXPECT_NE(search_corpus(snapshot_of(store, "alice"), policy(), kNow).version, version);
  store.disabled_sets[{"c", "shared"}] = {"tool:fetch"};
  store.grant("bob", "c");
  store.grant("bob", "p");
  EXPECT_NE(search_corpus(snapshot_of(store, "bob"), policy(), kNow).version, version);
}

// ---- the connection list -----------------------------------------------------------------------

// GET /v1/mcp-connections: per entry the metadata the discovery answer shows, the manifest left
// out, and per list its state and visible item count (a list that failed never reads as 0).
TEST(Discovery, ConnectionListSummarisesEveryEntryOnceFromTheModel) {
  MemoryStore store;
  store.add_connection("a", "shared");
  store.add_connection("b", "shared");
  store.add_connection("c", "shared");
  for (const char* id : {"a", "b", "c"}) store.grant("alice", id);
  store.manifests[{"a", "shared"}] = data_entry("h-a", kNow - kMinute, kNow + 14 * kMinute,
                                                manifest_json({"search", "fetch"}, {"file:///x"}));
  store.disabled_sets[{"a", "shared"}] = DisabledOverlay{"tool:fetch"};
  HashFields failed;
  add_failure(&failed, "UPSTREAM_UNAVAILABLE", "connection refused twice", kNow - 5000);
  store.manifests[{"b", "shared"}] = failed;
  Json partial = *parse_json(manifest_json({"t"}, {}, {}, {"p"}));
  partial["prompts"] = Json::object(
      {{"state", "failed"},
       {"error", Json::object({{"code", "TIMEOUT"}, {"message", "prompts/list timed out"}})},
       {"partial_items", 3}});
  store.manifests[{"c", "shared"}] =
      data_entry("h-c", kNow - 20 * kMinute, kNow - 5 * kMinute, json_text(partial));

  const DiscoverySnapshot snap = snapshot_of(store, "alice");
  ConnectionList list = connection_list(snap, policy(), kNow);
  EXPECT_EQ(list.body["principal"], "member/alice");
  EXPECT_EQ(ids_of(list.body), (std::vector<std::string>{"a", "b", "c"}));

  const Json& a = *entry(list.body, "a");
  EXPECT_FALSE(a.contains("manifest"));
  EXPECT_EQ(a["status"], "fresh");
  EXPECT_EQ(a["age_ms"], kMinute);
  EXPECT_EQ(a["counts"], *parse_json(R"({"tools":1,"resources":1,"resource_templates":0,
                                         "prompts":0})"));
  EXPECT_EQ(a["lists"]["tools"], *parse_json(R"({"state":"ok","count":1})"));

  const Json& b = *entry(list.body, "b");
  EXPECT_EQ(b["status"], "error");
  EXPECT_EQ(b["error"]["code"], "UPSTREAM_UNAVAILABLE");
  EXPECT_FALSE(b.contains("counts"));
  EXPECT_FALSE(b.contains("lists"));

  const Json& c = *entry(list.body, "c");
  EXPECT_EQ(c["status"], "stale");
  EXPECT_FALSE(c["counts"].contains("prompts"));
  EXPECT_EQ(c["lists"]["prompts"]["state"], "failed");
  EXPECT_EQ(c["lists"]["prompts"]["partial_items"], 3);
  EXPECT_EQ(c["lists"]["prompts"]["error"]["code"], "TIMEOUT");
  EXPECT_FALSE(c["lists"]["prompts"].contains("count"));

  // The same classification, queue and counts as the discovery answer over the same snapshot.
  Rendered r = render(store, "alice");
  EXPECT_EQ(list.stats, r.out.stats);
  EXPECT_EQ(list.revalidations, r.out.revalidations);
  for (const char* id : {"a", "b", "c"}) {
    Json shown = *entry(r.body, id);
    shown.erase("manifest");
    Json summary = *entry(list.body, id);
    summary.erase("counts");
    summary.erase("lists");
    EXPECT_EQ(summary, shown) << id;
  }
}

}  // namespace
}  // namespace quiver
