// splice_rendered (shared/discovery_render.h): an answer rendered once with its clock holes, given
// again at a later `now`, must be byte for byte what rendering the same snapshot at that `now`
// gives, for every `now` in its window, and must not be used at or after the window's end.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "shared/discovery.h"
#include "shared/render_cache.h"
#include "tests/support/discovery_fixture.h"

namespace quiver {
namespace {

using namespace testing;  // quiver::testing: tests/support/discovery_fixture.h

constexpr int64_t kSecond = 1'000;

// Every kind of entry the renderer distinguishes, granted to alice, read at kNow:
//   a-fresh    fresh, refresh_at ahead (kNow + 11 min), fresh until kNow + 14 min
//   b-ahead    fresh in its refresh-ahead period, fresh until kNow + 2 min: the window's end
//   c-stale    stale, revalidation queued
//   d-leased   stale, its lease held (refresh: in_progress)
//   e-member   per-member credentials, fresh, a capability disabled
//   f-error    no data, the last refresh failed
//   g-expired  older than the max age
//   h-pending  never listed
//   i-failed   fresh data, a later refresh failed (shown as `error`)
//   j-auth     authorization_required with its last good data
//   k-nobody   servable record whose manifest is not valid JSON (an error entry)
MemoryStore every_kind() {
  MemoryStore store;
  auto add = [&](const std::string& id, const std::string& mode) {
    store.add_connection(id, mode);
    store.grant("alice", id);
  };
  const std::string m = manifest_json({"search", "fetch"}, {"file:///a"}, {}, {"greet"});
  add("a-fresh", "shared");
  store.manifests[{"a-fresh", "shared"}] =
      data_entry("h-a-fresh", kNow - kMinute, kNow + 14 * kMinute, m);
  add("b-ahead", "shared");
  store.manifests[{"b-ahead", "shared"}] =
      data_entry("h-b-ahead", kNow - 13 * kMinute, kNow + 2 * kMinute, m, "sha256-b");
  add("c-stale", "shared");
  store.manifests[{"c-stale", "shared"}] =
      data_entry("h-c-stale", kNow - 20 * kMinute, kNow - 5 * kMinute, m);
  add("d-leased", "shared");
  store.manifests[{"d-leased", "shared"}] =
      data_entry("h-d-leased", kNow - 30 * kMinute, kNow - 15 * kMinute, m);
  store.leases.insert({"d-leased", "shared"});
  add("e-member", "per_member");
  store.manifests[{"e-member", "member/alice"}] =
      data_entry("h-e-member", kNow - 2 * kMinute, kNow + 13 * kMinute, m, "sha256-e");
  store.disabled_sets[{"e-member", "member/alice"}] = {"tool:fetch"};
  add("f-error", "shared");
  HashFields failed;
  add_failure(&failed, "UPSTREAM_UNAVAILABLE", "connection refused", kNow - kMinute);
  store.manifests[{"f-error", "shared"}] = failed;
  add("g-expired", "shared");
  store.manifests[{"g-expired", "shared"}] =
      data_entry("h-g-expired", kNow - 25 * 60 * kMinute, kNow - 25 * 60 * kMinute + kMinute, m);
  add("h-pending", "per_member");
  add("i-failed", "shared");
  HashFields later_failure = data_entry("h-i-failed", kNow - 3 * kMinute, kNow + 12 * kMinute, m);
  add_failure(&later_failure, "TIMEOUT", "the listing timed out", kNow - kMinute);
  store.manifests[{"i-failed", "shared"}] = later_failure;
  add("j-auth", "shared");
  HashFields auth = data_entry("h-j-auth", kNow - 4 * kMinute, kNow + 11 * kMinute, m);
  add_failure(&auth, "AUTHORIZATION_REQUIRED", "no authorization", kNow - 3 * kMinute);
  store.manifests[{"j-auth", "shared"}] = auth;
  add("k-nobody", "shared");
  store.manifests[{"k-nobody", "shared"}] =
      data_entry("h-k-nobody", kNow - kMinute, kNow + 14 * kMinute, "{not json");
  return store;
}

RenderOptions options_for(DiscoveryView view, RenderCache* cache, bool record) {
  RenderOptions o;
  o.view = view;
  o.cache = cache;
  o.record_clock = record;
  return o;
}

// Spliced at `now` vs rendered at `now`: everything an answer is made of.
void expect_same_answer(const std::optional<RenderedDiscovery>& spliced,
                        const RenderedDiscovery& rendered, int64_t now) {
  ASSERT_TRUE(spliced.has_value()) << "no splice at now = kNow + " << now - kNow;
  EXPECT_EQ(spliced->body, rendered.body) << "at now = kNow + " << now - kNow;
  EXPECT_EQ(spliced->etag, rendered.etag);
  EXPECT_EQ(spliced->cache_control, rendered.cache_control) << "at now = kNow + " << now - kNow;
  EXPECT_EQ(spliced->max_age_s, rendered.max_age_s);
  EXPECT_EQ(spliced->revalidations, rendered.revalidations);
  EXPECT_EQ(spliced->stats, rendered.stats);
  EXPECT_FALSE(spliced->not_modified);
}

// The moments a splice is checked at: every millisecond of the first two seconds (age_ms crosses
// digit counts there: 60000 → ..., ttlMs likewise), each second's edges, then a pseudo-random walk
// to the window's last millisecond.
std::vector<int64_t> moments(int64_t from, int64_t until) {
  std::vector<int64_t> out;
  for (int64_t t = from; t < std::min(until, from + 2 * kSecond); ++t) out.push_back(t);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int64_t t = from + 2 * kSecond; t < until;) {
    out.push_back(t);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t += 1 + static_cast<int64_t>(x % 2'000);
  }
  for (int64_t d : {999, 1000, 1001}) {
    if (until - d >= from) out.push_back(until - d);
  }
  out.push_back(until - 1);
  return out;
}

TEST(DiscoverySplice, ASplicedAnswerIsTheRenderAtThatMomentThroughoutItsWindow) {
  MemoryStore store = every_kind();
  const DiscoverySnapshot snapshot = snapshot_of(store, "alice");
  for (DiscoveryView view : {DiscoveryView::kManifest, DiscoveryView::kMcp}) {
    SCOPED_TRACE(discovery_view_name(view));
    RenderCache cache;
    const RenderedDiscovery first =
        render_manifests(snapshot, policy(), kNow, options_for(view, &cache, true));
    ASSERT_TRUE(first.clock.has_value());
    // The first transition: b-ahead turns stale at kNow + 2 min (a-fresh's refresh_at, kNow +
    // 11 min, and every other boundary come later).
    EXPECT_EQ(first.clock->valid_until, kNow + 2 * kMinute);
    // One age per entry that shows one (8), and in the mcp view a ttlMs per listed kind of each
    // fresh servable entry (a-fresh, b-ahead, e-member, i-failed: 4 kinds each).
    EXPECT_EQ(first.clock->holes.size(), view == DiscoveryView::kMcp ? 8u + 16u : 8u);
    // Not recording changes nothing else.
    const RenderedDiscovery plain =
        render_manifests(snapshot, policy(), kNow, options_for(view, &cache, false));
    EXPECT_EQ(plain.body, first.body);
    EXPECT_FALSE(plain.clock.has_value());

    // The renders compared against use a render cache of their own (byte for byte the same as
    // none: tests/shared/render_cache_test.cpp), or the test takes minutes in wasm.
    RenderCache reference;
    for (int64_t now : moments(kNow, first.clock->valid_until)) {
      const RenderedDiscovery rendered =
          render_manifests(snapshot, policy(), now, options_for(view, &reference, false));
      expect_same_answer(splice_rendered(first, now), rendered, now);
      if (HasFailure()) return;
    }
    // At the transition and after it: rendered, never spliced (b-ahead is stale there).
    EXPECT_FALSE(splice_rendered(first, first.clock->valid_until).has_value());
    EXPECT_FALSE(splice_rendered(first, first.clock->valid_until + kMinute).has_value());
    const RenderedDiscovery after = render_manifests(snapshot, policy(), first.clock->valid_until,
                                                     options_for(view, nullptr, false));
    EXPECT_NE(after.etag, first.etag);
    // Before the render (a clock that went back): not spliced either.
    EXPECT_FALSE(splice_rendered(first, kNow - 1).has_value());
    // Without the body (HEAD, 304): the same headers.
    std::optional<RenderedDiscovery> head = splice_rendered(first, kNow + kMinute, false);
    ASSERT_TRUE(head.has_value());
    EXPECT_TRUE(head->body.empty());
    EXPECT_EQ(head->cache_control, "private, max-age=0");  // not every entry is fresh
    EXPECT_EQ(head->etag, first.etag);
  }
}

TEST(DiscoverySplice, OneConnectionsManifestIsSplicedLikeTheList) {
  MemoryStore store = every_kind();
  const DiscoverySnapshot snapshot = snapshot_of(store, "alice");
  for (DiscoveryView view : {DiscoveryView::kManifest, DiscoveryView::kMcp}) {
    for (const GrantedConnection& c : snapshot.connections) {
      SCOPED_TRACE(std::string(discovery_view_name(view)) + " " + c.id);
      RenderCache cache;
      Result<RenderedDiscovery> first = render_connection_manifest(snapshot, c.id, policy(), kNow,
                                                                   options_for(view, &cache, true));
      ASSERT_TRUE(first.ok());
      ASSERT_TRUE(first->clock.has_value());
      const int64_t until = std::min(first->clock->valid_until, kNow + 10 * kMinute);
      RenderCache reference;
      for (int64_t now : moments(kNow, until)) {
        Result<RenderedDiscovery> rendered = render_connection_manifest(
            snapshot, c.id, policy(), now, options_for(view, &reference, false));
        ASSERT_TRUE(rendered.ok());
        expect_same_answer(splice_rendered(*first, now), *rendered, now);
        if (HasFailure()) return;
      }
      if (first->clock->valid_until != std::numeric_limits<int64_t>::max()) {
        EXPECT_FALSE(splice_rendered(*first, first->clock->valid_until).has_value());
      }
    }
  }
}

TEST(DiscoverySplice, TheWindowEndsAtRefreshAheadAndAllFreshAnswersCountDownMaxAge) {
  // One fresh entry: fetched a minute ago, 15 min fresh, refresh-ahead at 80% (kNow + 11 min).
  MemoryStore store;
  store.add_connection("c", "shared");
  store.grant("alice", "c");
  store.manifests[{"c", "shared"}] =
      data_entry("h-c", kNow - kMinute, kNow + 14 * kMinute, manifest_json({"search"}));
  const DiscoverySnapshot snapshot = snapshot_of(store, "alice");
  RenderOptions o = options_for(DiscoveryView::kMcp, nullptr, true);
  o.max_cache_age_s = 3600;  // the cap out of the way: max-age counts down to fresh_until
  const RenderedDiscovery first = render_manifests(snapshot, policy(), kNow, o);
  ASSERT_TRUE(first.clock.has_value());
  EXPECT_EQ(first.clock->valid_until, kNow + 11 * kMinute);  // refresh_at, before fresh_until
  o.record_clock = false;
  for (int64_t now : moments(kNow, first.clock->valid_until)) {
    expect_same_answer(splice_rendered(first, now), render_manifests(snapshot, policy(), now, o),
                       now);
    if (HasFailure()) return;
  }
  EXPECT_EQ(splice_rendered(first, kNow + 1'500)->cache_control, "private, max-age=838");
  EXPECT_FALSE(splice_rendered(first, kNow + 11 * kMinute).has_value());

  // Rendered past refresh_at: the window runs to fresh_until.
  o.record_clock = true;
  const RenderedDiscovery ahead = render_manifests(snapshot, policy(), kNow + 12 * kMinute, o);
  ASSERT_TRUE(ahead.clock.has_value());
  EXPECT_EQ(ahead.clock->valid_until, kNow + 14 * kMinute);
}

TEST(DiscoverySplice, AClockSkewedEntryIsNeverSpliced) {
  MemoryStore store = every_kind();
  // Fetched beyond now + the skew tolerance: stale, its fresh_until is the render's now.
  store.manifests[{"a-fresh", "shared"}] =
      data_entry("h-a-fresh", kNow + 5 * kMinute, kNow + 20 * kMinute, manifest_json({"search"}));
  const DiscoverySnapshot snapshot = snapshot_of(store, "alice");
  const RenderedDiscovery first = render_manifests(
      snapshot, policy(), kNow, options_for(DiscoveryView::kManifest, nullptr, true));
  ASSERT_TRUE(first.clock.has_value());
  EXPECT_EQ(first.clock->valid_until, kNow);
  EXPECT_FALSE(splice_rendered(first, kNow).has_value());
  EXPECT_FALSE(splice_rendered(first, kNow + 1).has_value());
}

TEST(DiscoverySplice, NothingIsRecordedWithoutABody) {
  MemoryStore store = every_kind();
  const DiscoverySnapshot snapshot = snapshot_of(store, "alice");
  RenderOptions o = options_for(DiscoveryView::kManifest, nullptr, true);
  o.omit_body = true;  // HEAD
  EXPECT_FALSE(render_manifests(snapshot, policy(), kNow, o).clock.has_value());
  o.omit_body = false;
  o.if_none_match = render_manifests(snapshot, policy(), kNow).etag;  // a 304
  const RenderedDiscovery not_modified = render_manifests(snapshot, policy(), kNow, o);
  EXPECT_TRUE(not_modified.not_modified);
  EXPECT_FALSE(not_modified.clock.has_value());
  EXPECT_FALSE(splice_rendered(not_modified, kNow).has_value());
}

}  // namespace
}  // namespace quiver
