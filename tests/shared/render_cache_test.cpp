#include "shared/render_cache.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shared/discovery.h"
#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/discovery_fixture.h

// A store with every status, disabled capabilities, a per-member connection, bare-array and
// MCP-shaped manifests, a failed list, peer strings that are not UTF-8, floats and escapes.
MemoryStore every_case() {
  MemoryStore store;
  for (const char* id : {"a-fresh", "b-stale", "c-expired", "d-pending", "e-error", "f-bare",
                         "g-failed-list", "h-odd"}) {
    store.add_connection(id, "shared");
    store.grant("alice", id);
  }
  store.add_connection("p-member", "per_member");
  store.grant("alice", "p-member");
  store.grant("bob", "p-member");
  store.grant("bob", "a-fresh");
  store.manifests[{"a-fresh", "shared"}] =
      data_entry("h-a-fresh", kNow - 1, kNow + 15 * kMinute,
                 manifest_json({"keep", "drop"}, {"file:///r"}, {"file:///{t}"}, {"p1", "p2"}));
  store.disabled_sets[{"a-fresh", "shared"}] = {"tool:drop", "prompt:p2"};
  HashFields stale = data_entry("h-b-stale", kNow - 16 * kMinute, kNow - kMinute,
                                manifest_json({"s1"}), "sha256-stale");
  add_failure(&stale, "TIMEOUT", "slow \"upstream\"", kNow - 1);
  store.manifests[{"b-stale", "shared"}] = stale;
  store.manifests[{"c-expired", "shared"}] =
      data_entry("h-c-expired", kNow - 2 * 86'400'000, kNow, manifest_json({"t"}));
  HashFields failed;
  add_failure(&failed, "TIMEOUT", "x", kNow - 1);
  store.manifests[{"e-error", "shared"}] = failed;
  store.manifests[{"f-bare", "shared"}] = data_entry(
      "h-f-bare", kNow - 2, kNow + kMinute,
      R"({"tools":[{"name":"a","x":1.5e-7},{"name":"b"},{"title":"no name"}],)"
      R"("resourceTemplates":[{"uriTemplate":"x://{a}"}],"zeta":{"\u00e9":"\u2028\/"}})");
  store.disabled_sets[{"f-bare", "shared"}] = {"tool:b"};
  store.manifests[{"g-failed-list", "shared"}] = data_entry(
      "h-g-failed-list", kNow - 3, kNow + kMinute,
      R"({"tools":{"state":"ok","items":[{"name":"t"}]},"prompts":{"state":"failed","items":[]}})");
  store.conns["h-odd"]["name"] = std::string("bad \xff name");
  store.manifests[{"h-odd", "shared"}] = data_entry(
      "h-h-odd", kNow - 4, kNow + kMinute,
      std::string(R"({"tools":[{"name":"t","description":"bad \xfe bytes"}],"n":-0.0})"));
  store.manifests[{"p-member", "member/alice"}] =
      data_entry("h-p-member", kNow - 1, kNow + kMinute, manifest_json({"alice-tool"}), "same");
  store.manifests[{"p-member", "member/bob"}] =
      data_entry("h-p-member", kNow - 1, kNow + kMinute, manifest_json({"bob-tool"}), "same");
  return store;
}

// Everything a renderer answers, for comparing.
std::string all_of(const RenderedDiscovery& r) {
  std::string s = r.body + "\n" + r.etag + "\n" + r.cache_control + "\n" +
                  std::to_string(r.not_modified) + "\n";
  for (const Revalidation& v : r.revalidations) s += v.connection_id + "/" + v.reason + ";";
  s += std::to_string(r.stats.fresh) + std::to_string(r.stats.stale) +
       std::to_string(r.stats.pending) + std::to_string(r.stats.error) +
       std::to_string(r.stats.expired);
  return s;
}

// The body as nlohmann would write the whole document in one go (what the renderer did before it
// spliced cached payloads in): a parse and a dump give back the same bytes.
void expect_canonical(const std::string& body) {
  Result<Json> parsed = parse_json(body);
  ASSERT_TRUE(parsed.ok()) << body;
  EXPECT_EQ(json_text(*parsed), body);
}

TEST(RenderCache, EveryViewIsByteForByteTheSameWithAndWithoutTheCache) {
  MemoryStore store = every_case();
  RenderCache cache;
  for (DiscoveryView view : {DiscoveryView::kManifest, DiscoveryView::kMcp}) {
    for (const std::string member : {"alice", "bob"}) {
      SCOPED_TRACE(std::string(discovery_view_name(view)) + " " + member);
      RenderOptions plain;
      plain.view = view;
      RenderOptions cached = plain;
      cached.cache = &cache;
      // Three clocks: fresh → later (ttl and age change, statuses too) → back.
      for (int64_t now : {kNow, kNow + 61'000, kNow + 20 * kMinute, kNow}) {
        DiscoverySnapshot s = snapshot_of(store, member);
        RenderedDiscovery want = render_manifests(s, policy(), now, plain);
        expect_canonical(want.body);
        EXPECT_EQ(all_of(render_manifests(s, policy(), now, cached)), all_of(want));
        EXPECT_EQ(all_of(render_manifests(s, policy(), now, cached)), all_of(want));
        for (const GrantedConnection& c : s.connections) {
          SnapshotQuery only;
          only.only = c.id;
          DiscoverySnapshot one = snapshot_of(store, member, only);
          Result<RenderedDiscovery> w = render_connection_manifest(one, c.id, policy(), now, plain);
          ASSERT_TRUE(w.ok());
          expect_canonical(w->body);
          Result<RenderedDiscovery> got =
              render_connection_manifest(one, c.id, policy(), now, cached);
          ASSERT_TRUE(got.ok());
          EXPECT_EQ(all_of(*got), all_of(*w)) << c.id;
        }
      }
    }
  }
  EXPECT_GT(cache.stats().hits, 0u);
  // The per-request fields never enter the cache: a hit at another time gives that time's ttl.
  RenderOptions mcp;
  mcp.view = DiscoveryView::kMcp;
  mcp.cache = &cache;
  DiscoverySnapshot s = snapshot_of(store, "alice");
  EXPECT_NE(render_manifests(s, policy(), kNow, mcp).body,
            render_manifests(s, policy(), kNow + 1000, mcp).body);
}

TEST(RenderCache, AChangedDisabledSetOrManifestIsRenderedAfresh) {
  MemoryStore store = every_case();
  RenderCache cache;
  RenderOptions cached;
  cached.cache = &cache;
  auto body = [&](const RenderOptions& o) {
    return render_manifests(snapshot_of(store, "alice"), policy(), kNow, o).body;
  };
  EXPECT_EQ(body(cached), body({}));
  EXPECT_EQ(body(cached).find("\"drop\""), std::string::npos);

  store.disabled_sets[{"a-fresh", "shared"}] = {"tool:keep"};
  EXPECT_EQ(body(cached), body({}));
  EXPECT_NE(body(cached).find("\"drop\""), std::string::npos);
  EXPECT_EQ(body(cached).find("\"keep\""), std::string::npos);

  // A new etag with new content.
  store.manifests[{"a-fresh", "shared"}] = data_entry("h-a-fresh", kNow - 1, kNow + 15 * kMinute,
                                                      manifest_json({"new-tool"}), "sha256-new");
  EXPECT_EQ(body(cached), body({}));
  EXPECT_NE(body(cached).find("new-tool"), std::string::npos);

  // New content under the old etag (a writer that did not update it): still exact.
  store.manifests[{"a-fresh", "shared"}]["manifest"] = manifest_json({"newer-tool"});
  EXPECT_EQ(body(cached), body({}));
  EXPECT_NE(body(cached).find("newer-tool"), std::string::npos);

  // A manifest that stopped parsing is an error, not the cached payload.
  store.manifests[{"a-fresh", "shared"}]["manifest"] = "{\"tools\": [";
  EXPECT_EQ(body(cached), body({}));
  EXPECT_EQ(body(cached).find("newer-tool"), std::string::npos);
}

TEST(RenderCache, PrincipalsNeverShareAnEntry) {
  // bob and alice read p-member under their own principals: same connection id, same etag,
  // same config hash, different manifests.
  MemoryStore store = every_case();
  RenderCache cache;
  RenderOptions cached;
  cached.cache = &cache;
  SnapshotQuery only;
  only.only = "p-member";
  for (int round = 0; round < 2; ++round) {
    std::string a = render_connection_manifest(snapshot_of(store, "alice", only), "p-member",
                                               policy(), kNow, cached)
                        ->body;
    std::string b = render_connection_manifest(snapshot_of(store, "bob", only), "p-member",
                                               policy(), kNow, cached)
                        ->body;
    EXPECT_NE(a.find("alice-tool"), std::string::npos);
    EXPECT_EQ(a.find("bob-tool"), std::string::npos);
    EXPECT_NE(b.find("bob-tool"), std::string::npos);
    EXPECT_EQ(b.find("alice-tool"), std::string::npos);
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(render_cache_key("c", member_principal("alice"), "e", {}, "manifest", 1),
            render_cache_key("c", member_principal("bob"), "e", {}, "manifest", 1));
  EXPECT_NE(render_cache_key("c", member_principal("a"), "e", {"x"}, "manifest", 1),
            render_cache_key("c", member_principal("a"), "e", {}, "manifest", 1));
  EXPECT_NE(render_cache_key("c", member_principal("a"), "e", {}, "mcp", 1),
            render_cache_key("c", member_principal("a"), "e", {}, "manifest", 1));
}

TEST(RenderCache, StaysWithinItsBoundsLeastRecentlyUsedFirst) {
  auto fragment = [](std::size_t n) {
    auto f = std::make_shared<RenderedFragment>();
    f->parts.push_back(std::string(n, 'x'));
    return f;
  };
  RenderCache cache(100, 4000);
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(cache.insert("k" + std::to_string(i), "src", {}, fragment(1000)));
    EXPECT_LE(cache.bytes(), 4000u);
  }
  EXPECT_LT(cache.size(), 4u);
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_NE(cache.find("k9", "src", {}), nullptr);
  EXPECT_EQ(cache.find("k0", "src", {}), nullptr);
  EXPECT_EQ(cache.find("k9", "other source", {}), nullptr);
  EXPECT_EQ(cache.find("k9", "src", {"tool:x"}), nullptr);
  // Too large on its own: not kept.
  EXPECT_FALSE(cache.insert("big", "src", {}, fragment(5000)));
  EXPECT_EQ(cache.find("big", "src", {}), nullptr);

  RenderCache two(2, 1 << 20);
  two.insert("a", "s", {}, fragment(1));
  two.insert("b", "s", {}, fragment(1));
  EXPECT_NE(two.find("a", "s", {}), nullptr);  // a is now the most recent
  two.insert("c", "s", {}, fragment(1));
  EXPECT_EQ(two.size(), 2u);
  EXPECT_NE(two.find("a", "s", {}), nullptr);
  EXPECT_EQ(two.find("b", "s", {}), nullptr);

  // Rendering through a tiny cache still answers exactly.
  MemoryStore store = every_case();
  RenderCache tiny(1, 1 << 20);
  RenderOptions cached;
  cached.cache = &tiny;
  DiscoverySnapshot s = snapshot_of(store, "alice");
  EXPECT_EQ(render_manifests(s, policy(), kNow, cached).body,
            render_manifests(s, policy(), kNow).body);
  EXPECT_EQ(tiny.size(), 1u);
}

TEST(RenderCache, AFragmentSplicesTheTtlBetweenItsParts) {
  RenderedFragment f;
  f.parts = {"{\"a\":{\"ttlMs\":", "},\"b\":{\"ttlMs\":", "}}"};
  std::string out = "x";
  f.append_to(out, 42);
  EXPECT_EQ(out, "x{\"a\":{\"ttlMs\":42},\"b\":{\"ttlMs\":42}}");
}

// ---- the validator before the body -------------------------------------------------------------

TEST(RenderCache, AMatchingIfNoneMatchSkipsTheBodyAndKeepsEverythingElse) {
  MemoryStore store = every_case();
  for (RenderCache* cache : {static_cast<RenderCache*>(nullptr), new RenderCache()}) {
    std::unique_ptr<RenderCache> owned(cache);
    RenderOptions options;
    options.cache = cache;
    DiscoverySnapshot s = snapshot_of(store, "alice");
    RenderedDiscovery full = render_manifests(s, policy(), kNow, options);
    ASSERT_FALSE(full.not_modified);

    RenderOptions conditional = options;
    conditional.if_none_match = full.etag;
    RenderedDiscovery r = render_manifests(s, policy(), kNow + 1000, conditional);
    EXPECT_TRUE(r.not_modified);
    EXPECT_TRUE(r.body.empty());
    EXPECT_EQ(r.etag, full.etag);
    EXPECT_EQ(r.revalidations.size(), full.revalidations.size());
    EXPECT_EQ(r.stats, full.stats);

    // HEAD: headers without the body, whatever If-None-Match says.
    RenderOptions head = options;
    head.omit_body = true;
    RenderedDiscovery h = render_manifests(s, policy(), kNow, head);
    EXPECT_FALSE(h.not_modified);
    EXPECT_TRUE(h.body.empty());
    EXPECT_EQ(h.etag, full.etag);
    EXPECT_EQ(h.cache_control, full.cache_control);

    // Once an entry turns stale the validator changes: the full body again.
    RenderedDiscovery later = render_manifests(s, policy(), kNow + 20 * kMinute, conditional);
    EXPECT_FALSE(later.not_modified);
    EXPECT_FALSE(later.body.empty());

    // A manifest that no longer parses under the same etag is not "not modified".
    MemoryStore broken = every_case();
    broken.manifests[{"a-fresh", "shared"}]["manifest"] = "{\"tools\": [";
    RenderedDiscovery b =
        render_manifests(snapshot_of(broken, "alice"), policy(), kNow + 1000, conditional);
    EXPECT_FALSE(b.not_modified);
    EXPECT_NE(b.body.find("unreadable"), std::string::npos);
  }
}

}  // namespace
}  // namespace quiver
