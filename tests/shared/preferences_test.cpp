#include "shared/preferences.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace quiver {
namespace {

constexpr int64_t kT0 = 1'780'000'000'000;
constexpr int64_t kMinute = 60'000;

Json named(const char* field, const std::string& value) { return Json{{field, value}}; }

// A listing where every kind succeeded with the given keys.
Listing listing_of(const std::vector<std::string>& tools,
                   const std::vector<std::string>& resources = {},
                   const std::vector<std::string>& templates = {},
                   const std::vector<std::string>& prompts = {}) {
  Listing l;
  auto fill = [&](ListKind kind, const char* field, const std::vector<std::string>& keys) {
    ListOutcome& o = l.list(kind);
    o.state = ListState::kOk;
    o.pages = 1;
    for (const std::string& k : keys) o.items.push_back(named(field, k));
  };
  fill(ListKind::kTools, "name", tools);
  fill(ListKind::kResources, "uri", resources);
  fill(ListKind::kResourceTemplates, "uriTemplate", templates);
  fill(ListKind::kPrompts, "name", prompts);
  return l;
}

// What the store does with a reconciliation: insert new rows, replace updated ones.
std::vector<PreferenceRow> apply_to(std::vector<PreferenceRow> rows, const Reconciliation& r) {
  for (const PreferenceRow& u : r.rows_to_update) {
    for (PreferenceRow& row : rows) {
      if (row.resource_id == u.resource_id && row.capability_type == u.capability_type &&
          row.capability_key == u.capability_key) {
        row = u;
      }
    }
  }
  rows.insert(rows.end(), r.rows_to_insert.begin(), r.rows_to_insert.end());
  return rows;
}

const PreferenceRow* find(const std::vector<PreferenceRow>& rows, CapabilityType type,
                          const std::string& key) {
  for (const PreferenceRow& row : rows) {
    if (row.capability_type == type && row.capability_key == key) return &row;
  }
  return nullptr;
}

void set_enabled(std::vector<PreferenceRow>& rows, CapabilityType type, const std::string& key,
                 bool enabled) {
  for (PreferenceRow& row : rows) {
    if (row.capability_type == type && row.capability_key == key) row.enabled = enabled;
  }
}

TEST(Preferences, CapabilityTypeNamesRoundTripAndMatchListKinds) {
  EXPECT_STREQ(capability_type_name(CapabilityType::kTool), "tool");
  EXPECT_STREQ(capability_type_name(CapabilityType::kResource), "resource");
  EXPECT_STREQ(capability_type_name(CapabilityType::kResourceTemplate), "resource_template");
  EXPECT_STREQ(capability_type_name(CapabilityType::kPrompt), "prompt");
  for (int i = 0; i < kCapabilityTypeCount; ++i) {
    auto t = static_cast<CapabilityType>(i);
    EXPECT_EQ(parse_capability_type(capability_type_name(t)), t);
  }
  EXPECT_FALSE(parse_capability_type("tools").has_value());
  EXPECT_FALSE(parse_capability_type("").has_value());
  EXPECT_EQ(capability_type_for(ListKind::kResourceTemplates), CapabilityType::kResourceTemplate);
  EXPECT_EQ(capability_type_for(ListKind::kPrompts), CapabilityType::kPrompt);
}

TEST(Preferences, KeysComeFromNameUriAndUriTemplate) {
  LiveCapabilities live = live_capabilities(
      "github", listing_of({"search"}, {"file:///a.txt"}, {"file:///{path}"}, {"summarize"}));
  EXPECT_EQ(live.resource_id, "github");
  EXPECT_EQ(live.list(CapabilityType::kTool).keys, std::vector<std::string>{"search"});
  EXPECT_EQ(live.list(CapabilityType::kResource).keys, std::vector<std::string>{"file:///a.txt"});
  EXPECT_EQ(live.list(CapabilityType::kResourceTemplate).keys,
            std::vector<std::string>{"file:///{path}"});
  EXPECT_EQ(live.list(CapabilityType::kPrompt).keys, std::vector<std::string>{"summarize"});
  EXPECT_EQ(live.ignored_items, 0);

  // A resource keyed by `name` is not a resource key; a tool whose name is a number neither.
  EXPECT_FALSE(capability_key(ListKind::kResources, named("name", "x")).has_value());
  EXPECT_FALSE(capability_key(ListKind::kTools, Json{{"name", 7}}).has_value());
  EXPECT_FALSE(capability_key(ListKind::kTools, named("name", "")).has_value());
  EXPECT_FALSE(capability_key(ListKind::kTools, Json::array()).has_value());
  EXPECT_FALSE(
      capability_key(ListKind::kTools, named("name", std::string(kMaxCapabilityKeyBytes + 1, 'a')))
          .has_value());
  EXPECT_TRUE(
      capability_key(ListKind::kTools, named("name", std::string(kMaxCapabilityKeyBytes, 'a')))
          .has_value());
}

TEST(Preferences, ItemsWithoutAKeyAreCountedNotInvented) {
  Listing l = listing_of({"ok"});
  l.list(ListKind::kTools).items.push_back(Json{{"title", "no name"}});
  l.list(ListKind::kTools).items.push_back(Json("not an object"));
  LiveCapabilities live = live_capabilities("c1", l);
  EXPECT_EQ(live.list(CapabilityType::kTool).keys, std::vector<std::string>{"ok"});
  EXPECT_EQ(live.ignored_items, 2);
  Reconciliation r = reconcile({}, live, {}, kT0);
  ASSERT_EQ(r.rows_to_insert.size(), 1u);
  EXPECT_EQ(r.rows_to_insert[0].capability_key, "ok");
}

TEST(Preferences, NewCapabilitiesFollowTheAutoEnablePolicy) {
  LiveCapabilities live =
      live_capabilities("c1", listing_of({"b_tool", "a_tool"}, {"mem://r"}, {}, {"p"}));
  Reconciliation on = reconcile({}, live, PreferencePolicy{true}, kT0);
  EXPECT_TRUE(on.rows_to_update.empty());
  ASSERT_EQ(on.rows_to_insert.size(), 4u);
  // Sorted by (type, key).
  EXPECT_EQ(on.rows_to_insert[0],
            (PreferenceRow{"c1", CapabilityType::kTool, "a_tool", true, kT0, kT0}));
  EXPECT_EQ(on.rows_to_insert[1].capability_key, "b_tool");
  EXPECT_EQ(on.rows_to_insert[2].capability_type, CapabilityType::kResource);
  EXPECT_EQ(on.rows_to_insert[3].capability_type, CapabilityType::kPrompt);
  for (const PreferenceRow& row : on.rows_to_insert) EXPECT_TRUE(row.enabled);

  Reconciliation off = reconcile({}, live, PreferencePolicy{false}, kT0);
  ASSERT_EQ(off.rows_to_insert.size(), 4u);
  for (const PreferenceRow& row : off.rows_to_insert) EXPECT_FALSE(row.enabled);
  // With the policy off, everything new is hidden until the user enables it.
  DisabledOverlay overlay = disabled_overlay("c1", Principal::shared(), off.rows_to_insert);
  EXPECT_EQ(overlay.size(), 4u);
  EXPECT_FALSE(visible(overlay, CapabilityType::kTool, "a_tool"));
}

TEST(Preferences, PolicyNeverRewritesAnExistingChoice) {
  std::vector<PreferenceRow> rows =
      apply_to({}, reconcile({}, live_capabilities("c1", listing_of({"t"})), {true}, kT0));
  set_enabled(rows, CapabilityType::kTool, "t", false);
  // The connection's policy flips to auto-enable... and the user's "off" stays off.
  Reconciliation r =
      reconcile(rows, live_capabilities("c1", listing_of({"t"})), {true}, kT0 + kMinute);
  ASSERT_EQ(r.rows_to_update.size(), 1u);
  EXPECT_FALSE(r.rows_to_update[0].enabled);
  EXPECT_EQ(r.rows_to_update[0].first_seen_at, kT0);
  EXPECT_EQ(r.rows_to_update[0].last_seen_at, kT0 + kMinute);
}

TEST(Preferences, ChoiceSurvivesUpstreamRemovingAndReAddingATool) {
  PreferencePolicy policy{true};
  std::vector<PreferenceRow> rows = apply_to(
      {}, reconcile({}, live_capabilities("c1", listing_of({"read", "write"})), policy, kT0));
  set_enabled(rows, CapabilityType::kTool, "write", false);  // the user hides "write"

  // An upgrade drops "write": its row is neither deleted nor touched.
  Reconciliation gone =
      reconcile(rows, live_capabilities("c1", listing_of({"read"})), policy, kT0 + kMinute);
  EXPECT_TRUE(gone.rows_to_insert.empty());
  ASSERT_EQ(gone.rows_to_update.size(), 1u);
  EXPECT_EQ(gone.rows_to_update[0].capability_key, "read");
  rows = apply_to(rows, gone);
  ASSERT_EQ(rows.size(), 2u);
  const PreferenceRow* write = find(rows, CapabilityType::kTool, "write");
  ASSERT_NE(write, nullptr);
  EXPECT_EQ(write->last_seen_at, kT0);  // what an offline UI shows as "last seen"
  EXPECT_FALSE(write->enabled);

  // The next release brings it back: still disabled, first seen at the original time.
  Reconciliation back = reconcile(rows, live_capabilities("c1", listing_of({"read", "write"})),
                                  policy, kT0 + 2 * kMinute);
  EXPECT_TRUE(back.rows_to_insert.empty());
  rows = apply_to(rows, back);
  write = find(rows, CapabilityType::kTool, "write");
  ASSERT_NE(write, nullptr);
  EXPECT_FALSE(write->enabled);
  EXPECT_EQ(write->first_seen_at, kT0);
  EXPECT_EQ(write->last_seen_at, kT0 + 2 * kMinute);
  EXPECT_FALSE(
      visible(disabled_overlay("c1", Principal::shared(), rows), CapabilityType::kTool, "write"));
  EXPECT_TRUE(
      visible(disabled_overlay("c1", Principal::shared(), rows), CapabilityType::kTool, "read"));
}

TEST(Preferences, ReconcilingTwiceIsANoOp) {
  LiveCapabilities live = live_capabilities("c1", listing_of({"a", "b"}, {"r://1"}, {}, {"p"}));
  std::vector<PreferenceRow> rows = apply_to({}, reconcile({}, live, {false}, kT0));
  Reconciliation again = reconcile(rows, live, {false}, kT0);
  EXPECT_TRUE(again.empty());

  // Later, only last_seen_at moves; applying that and reconciling once more is again a no-op.
  Reconciliation later = reconcile(rows, live, {true}, kT0 + kMinute);
  EXPECT_TRUE(later.rows_to_insert.empty());
  EXPECT_EQ(later.rows_to_update.size(), 4u);
  rows = apply_to(rows, later);
  EXPECT_TRUE(reconcile(rows, live, {true}, kT0 + kMinute).empty());
  for (const PreferenceRow& row : rows) {
    EXPECT_FALSE(row.enabled);
    EXPECT_EQ(row.first_seen_at, kT0);
    EXPECT_EQ(row.last_seen_at, kT0 + kMinute);
  }
}

TEST(Preferences, LastSeenNeverMovesBackwards) {
  // Another agent with a faster clock reconciled first.
  std::vector<PreferenceRow> rows = {{"c1", CapabilityType::kTool, "t", true, kT0, kT0 + kMinute}};
  Reconciliation r = reconcile(rows, live_capabilities("c1", listing_of({"t"})), {}, kT0);
  EXPECT_TRUE(r.empty());
}

TEST(Preferences, OnlySuccessfulListsAreReconciled) {
  std::vector<PreferenceRow> rows = apply_to(
      {}, reconcile({}, live_capabilities("c1", listing_of({"t"}, {"r://1"}, {"r://{x}"}, {"p"})),
                    {}, kT0));
  ASSERT_EQ(rows.size(), 4u);

  // Tools succeed; prompts fail after one page that shows a new prompt; resources are absent
  // (METHOD_NOT_FOUND); templates were never attempted.
  Listing l = listing_of({"t", "t2"}, {}, {}, {"p", "p_new"});
  l.list(ListKind::kPrompts).state = ListState::kFailed;
  l.list(ListKind::kPrompts).error = Error(ErrorCode::kTimeout, "deadline");
  l.list(ListKind::kResources).state = ListState::kAbsent;
  l.list(ListKind::kResourceTemplates).state = ListState::kNotListed;
  LiveCapabilities live = live_capabilities("c1", l);
  EXPECT_TRUE(live.list(CapabilityType::kPrompt).keys.empty());
  EXPECT_EQ(live.list(CapabilityType::kPrompt).state, ListState::kFailed);

  Reconciliation r = reconcile(rows, live, {}, kT0 + kMinute);
  ASSERT_EQ(r.rows_to_insert.size(), 1u);
  EXPECT_EQ(r.rows_to_insert[0].capability_key, "t2");
  ASSERT_EQ(r.rows_to_update.size(), 1u);
  EXPECT_EQ(r.rows_to_update[0].capability_key, "t");

  // Even keys a caller put into a failed list by hand are not used.
  LiveCapabilities manual;
  manual.resource_id = "c1";
  manual.list(CapabilityType::kPrompt) = LiveList{ListState::kFailed, {"p", "p_new"}};
  EXPECT_TRUE(reconcile(rows, manual, {}, kT0 + kMinute).empty());
}

TEST(Preferences, DuplicateKeysAndOtherConnectionsRows) {
  std::vector<PreferenceRow> rows = {{"other", CapabilityType::kTool, "t", false, kT0, kT0}};
  LiveCapabilities live = live_capabilities("c1", listing_of({"t", "t"}));
  Reconciliation r = reconcile(rows, live, {true}, kT0 + kMinute);
  // "other"'s row neither counts as c1's nor is touched.
  ASSERT_EQ(r.rows_to_insert.size(), 1u);
  EXPECT_EQ(r.rows_to_insert[0],
            (PreferenceRow{"c1", CapabilityType::kTool, "t", true, kT0 + kMinute, kT0 + kMinute}));
  EXPECT_TRUE(r.rows_to_update.empty());
}

TEST(Preferences, SameKeyUnderDifferentTypesIsDifferentCapabilities) {
  std::vector<PreferenceRow> rows = {{"c1", CapabilityType::kPrompt, "x", false, kT0, kT0}};
  Reconciliation r =
      reconcile(rows, live_capabilities("c1", listing_of({"x"}, {}, {}, {"x"})), {true}, kT0 + 1);
  ASSERT_EQ(r.rows_to_insert.size(), 1u);
  EXPECT_EQ(r.rows_to_insert[0].capability_type, CapabilityType::kTool);
  ASSERT_EQ(r.rows_to_update.size(), 1u);
  EXPECT_EQ(r.rows_to_update[0].capability_type, CapabilityType::kPrompt);
  DisabledOverlay overlay = disabled_overlay("c1", Principal::shared(), rows);
  EXPECT_TRUE(visible(overlay, CapabilityType::kTool, "x"));
  EXPECT_FALSE(visible(overlay, CapabilityType::kPrompt, "x"));
}

TEST(Preferences, OverlayMembersAndFiltering) {
  std::vector<PreferenceRow> rows = {
      {"c1", CapabilityType::kTool, "delete_repo", false, kT0, kT0},
      {"c1", CapabilityType::kTool, "search", true, kT0, kT0},
      {"c1", CapabilityType::kResource, "file:///etc/hosts", false, kT0, kT0},
      {"c1", CapabilityType::kResourceTemplate, "db://{table}", false, kT0, kT0},
      {"c2", CapabilityType::kTool, "search", false, kT0, kT0},
  };
  DisabledOverlay overlay = disabled_overlay("c1", Principal::shared(), rows);
  EXPECT_EQ(overlay, (DisabledOverlay{"resource:file:///etc/hosts",
                                      "resource_template:db://{table}", "tool:delete_repo"}));
  EXPECT_EQ(overlay_member(CapabilityType::kPrompt, "a:b"), "prompt:a:b");

  std::vector<Json> tools = {Json{{"name", "search"}, {"description", "find"}},
                             Json{{"name", "delete_repo"}}, Json{{"title", "keyless"}}};
  std::vector<Json> shown = visible_items(overlay, ListKind::kTools, tools);
  ASSERT_EQ(shown.size(), 2u);
  EXPECT_EQ(shown[0], tools[0]);  // unchanged, unknown fields and all
  EXPECT_EQ(shown[1], tools[2]);

  // The same key under another type is not hidden.
  std::vector<Json> prompts = {Json{{"name", "delete_repo"}}};
  EXPECT_EQ(visible_items(overlay, ListKind::kPrompts, prompts).size(), 1u);
  std::vector<Json> resources = {Json{{"uri", "file:///etc/hosts"}}, Json{{"uri", "file:///b"}}};
  EXPECT_EQ(visible_items(overlay, ListKind::kResources, resources),
            std::vector<Json>{resources[1]});
  EXPECT_EQ(visible_items(DisabledOverlay{}, ListKind::kTools, tools).size(), 3u);
}

// ---- per principal ------------------------------------------------------------------------------

PreferenceRow row_of(const std::string& principal, const std::string& key, bool enabled,
                     int64_t toggled_at = 0, int64_t first = kT0, int64_t last = kT0) {
  PreferenceRow row{"c1", CapabilityType::kTool, key, enabled, first, last};
  row.toggled_at = toggled_at;
  row.principal = *Principal::parse(principal);
  return row;
}

TEST(Preferences, EachPrincipalReconcilesAndHidesItsOwnRows) {
  const Principal alice = *Principal::member("alice");
  const Principal bob = *Principal::member("bob");
  // bob's rows (his listing, his choice) are in the same table.
  std::vector<PreferenceRow> stored = {row_of("member/bob", "bob_secret_tool", false)};
  Reconciliation r =
      reconcile(stored, live_capabilities("c1", listing_of({"bob_secret_tool", "mine"}), alice),
                PreferencePolicy{true}, kT0 + kMinute);
  // For alice both keys are new: bob's row neither answers nor hides anything for her.
  ASSERT_EQ(r.rows_to_insert.size(), 2u);
  for (const PreferenceRow& row : r.rows_to_insert) {
    EXPECT_EQ(row.principal, alice);
    EXPECT_TRUE(row.enabled);
    EXPECT_EQ(row.toggled_at, 0);
  }
  EXPECT_TRUE(r.rows_to_update.empty());
  std::vector<PreferenceRow> all = apply_to(stored, r);
  EXPECT_TRUE(disabled_overlay("c1", alice, all).empty());
  EXPECT_EQ(disabled_overlay("c1", bob, all), DisabledOverlay{"tool:bob_secret_tool"});
  EXPECT_TRUE(disabled_overlay("c1", Principal::shared(), all).empty());
}

TEST(Preferences, TheLaterToggleWinsAndATieHides) {
  const PreferenceRow older = row_of("shared", "t", false, 10, kT0, kT0 + 5);
  const PreferenceRow newer = row_of("shared", "t", true, 20, kT0 - 3, kT0 + 1);
  for (const PreferenceRow& m : {merge_preference(older, newer), merge_preference(newer, older)}) {
    EXPECT_TRUE(m.enabled);
    EXPECT_EQ(m.toggled_at, 20);
    EXPECT_EQ(m.first_seen_at, kT0 - 3);  // the earliest sighting
    EXPECT_EQ(m.last_seen_at, kT0 + 5);   // the latest sighting
  }
  // Never toggled on one side: any toggle wins, whatever the other agent's policy said.
  EXPECT_FALSE(
      merge_preference(row_of("shared", "t", true, 0), row_of("shared", "t", false, 1)).enabled);
  // Equal times, different choices: disabled, from either side.
  const PreferenceRow on = row_of("shared", "t", true, 7);
  const PreferenceRow off = row_of("shared", "t", false, 7);
  EXPECT_FALSE(merge_preference(on, off).enabled);
  EXPECT_FALSE(merge_preference(off, on).enabled);
  // Idempotent.
  EXPECT_EQ(merge_preference(newer, newer), newer);
}

TEST(Preferences, MergingCopiesInAnyOrderConverges) {
  // Three agents' copies of one principal's rows.
  std::vector<std::vector<PreferenceRow>> copies = {
      {row_of("shared", "a", false, 5), row_of("shared", "b", true, 0, kT0, kT0 + 9)},
      {row_of("shared", "a", true, 3), row_of("shared", "c", false, 0)},
      {row_of("shared", "b", false, 4, kT0 - 1, kT0), row_of("shared", "a", true, 5)},
  };
  std::vector<int> order = {0, 1, 2};
  std::vector<PreferenceRow> first;
  do {
    std::vector<PreferenceRow> merged;
    for (int i : order) merged = merge_rows(merged, copies[i]);
    merged = merge_rows(merged, copies[order[0]]);  // merging again changes nothing
    if (first.empty()) {
      first = merged;
    } else {
      EXPECT_EQ(merged, first);
    }
  } while (std::next_permutation(order.begin(), order.end()));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].capability_key, "a");
  EXPECT_FALSE(first[0].enabled);  // toggled at 5 by two agents, one hid it: hidden
  EXPECT_FALSE(first[1].enabled);  // b: hidden at 4 beats never toggled
  EXPECT_EQ(first[1].first_seen_at, kT0 - 1);
  EXPECT_EQ(first[1].last_seen_at, kT0 + 9);
  EXPECT_FALSE(first[2].enabled);  // c: only one copy knows it
}

TEST(Preferences, StoreEntriesRoundTripAndMalformedOnesAreRefused) {
  const Principal alice = *Principal::member("alice");
  PreferenceRow row = row_of("member/alice", "x:y", false, 1'780'000'000'123, kT0, kT0 + 1);
  row.capability_type = CapabilityType::kResource;
  EXPECT_EQ(preference_entry_value(row), "0,1780000000123,1780000000000,1780000000001");
  Result<PreferenceRow> back =
      parse_preference_entry("c1", alice, "resource:x:y", preference_entry_value(row));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, row);
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, std::string>>{{"tool", "1,0,1,1"},
                                                        {"gadget:x", "1,0,1,1"},
                                                        {"tool:", "1,0,1,1"},
                                                        {"tool:x", "2,0,1,1"},
                                                        {"tool:x", "1,0,1"},
                                                        {"tool:x", "1,0,1,1,1"},
                                                        {"tool:x", "1,-1,1,1"},
                                                        {"tool:x", "1,0,5,4"},
                                                        {"tool:x", "1,a,1,1"},
                                                        {"tool:x", ""}}) {
    Result<PreferenceRow> r = parse_preference_entry("c1", alice, field, value);
    EXPECT_FALSE(r.ok()) << field << " = " << value;
    if (!r.ok()) {
      EXPECT_EQ(r.error().code, ErrorCode::kInvalidReply);
    }
  }
}

}  // namespace
}  // namespace quiver
