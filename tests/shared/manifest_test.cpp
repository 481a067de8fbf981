#include "shared/manifest.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "shared/canonical_json.h"
#include "shared/sha256.h"

namespace quiver {
namespace {

// ---- Helpers ----

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json fixture(const std::string& name) {
  std::string text = read_file(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/mcp/" + name);
  Result<Json> j = parse_json(text);
  EXPECT_TRUE(j.ok()) << name;
  return j.ok() ? *j : Json::object();
}

// What an MCP client session makes of the captured answers: a list whose capability is not
// advertised is absent (unless `ask_anyway`), METHOD_NOT_FOUND is absent, another error is a
// failure, otherwise every page's items in order.
Listing listing_from_fixture(const Json& fx, bool ask_anyway = false) {
  Listing l;
  const Json& init = fx["initialize"];
  l.protocol_version = init.value("protocolVersion", "");
  l.server_info = init.value("serverInfo", Json::object());
  l.server_capabilities = init.value("capabilities", Json::object());
  if (init.contains("instructions")) l.instructions = init["instructions"].get<std::string>();
  for (ListKind kind :
       {ListKind::kTools, ListKind::kResources, ListKind::kResourceTemplates, ListKind::kPrompts}) {
    ListOutcome& out = l.list(kind);
    const char* capability = kind == ListKind::kTools     ? "tools"
                             : kind == ListKind::kPrompts ? "prompts"
                                                          : "resources";
    if (!ask_anyway && !l.server_capabilities.contains(capability)) {
      out.state = ListState::kAbsent;
      continue;
    }
    out.state = ListState::kOk;
    for (const Json& page : fx["lists"][list_method(kind)]) {
      out.pages++;
      if (page.contains("error")) {
        int64_t code = page["error"].value("code", 0);
        out.state = code == -32601 ? ListState::kAbsent : ListState::kFailed;
        if (code != -32601) {
          out.error = Error(ErrorCode::kUpstreamError, page["error"].value("message", ""));
        }
        break;
      }
      for (const Json& item : page["result"][list_result_field(kind)]) out.items.push_back(item);
    }
    if (out.state == ListState::kAbsent) out.items.clear();
  }
  return l;
}

Listing small_listing() {
  Listing l;
  l.protocol_version = "2025-11-25";
  l.server_info = {{"name", "demo"},
                   {"version", "1.2.3"},
                   {"title", "Demo"},
                   {"websiteUrl", "https://example.test/demo"}};
  l.server_capabilities = {{"tools", {{"listChanged", true}}}, {"prompts", Json::object()}};
  l.instructions = "Use the tools.";
  l.list(ListKind::kTools).state = ListState::kOk;
  l.list(ListKind::kTools).items = {
      {{"name", "echo"},
       {"description", "Echoes its input"},
       {"inputSchema", {{"type", "object"}, {"properties", {{"text", {{"type", "string"}}}}}}}},
      {{"name", "add"},
       {"title", "Add"},
       {"inputSchema", {{"type", "object"}}},
       {"annotations", {{"readOnlyHint", true}}}},
  };
  l.list(ListKind::kResources).state = ListState::kAbsent;
  l.list(ListKind::kResourceTemplates).state = ListState::kAbsent;
  l.list(ListKind::kPrompts).state = ListState::kOk;
  l.list(ListKind::kPrompts).items = {
      {{"name", "greet"}, {"arguments", Json::array({{{"name", "who"}, {"required", true}}})}}};
  return l;
}

Manifest build(const Listing& l, const ManifestLimits& limits = {}) {
  Result<Manifest> m = manifest_from_listing(l, limits);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
  return m.ok() ? std::move(*m) : Manifest();
}

std::string encode(const Manifest& m) {
  Result<EncodedManifest> e = encode_manifest(m);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
  return e.ok() ? e->bytes : std::string();
}

std::vector<std::string> tool_names(const Manifest& m) {
  std::vector<std::string> names;
  for (const Tool& t : m.tools.items) names.push_back(t.name);
  return names;
}

// ---- Definitions ----

TEST(ManifestDefinitions, EveryToolFieldRoundTripsUnknownOnesIncluded) {
  Json tool = {
      {"name", "search"},
      {"title", "Search"},
      {"description", "Finds things"},
      {"inputSchema", {{"type", "object"}, {"required", {"q"}}, {"x-custom", 1}}},
      {"outputSchema", {{"type", "object"}}},
      {"annotations", {{"readOnlyHint", true}, {"openWorldHint", false}, {"vendorHint", "x"}}},
      {"execution", {{"taskSupport", "optional"}}},
      {"icons", Json::array({{{"src", "data:image/png;base64,AAAA"}, {"sizes", {"16x16"}}}})},
      {"_meta", {{"vendor/key", {1, 2}}}},
      {"x-vendor-field", {{"anything", Json::array({nullptr, 1.5, "s"})}}},
  };
  std::vector<std::string> problems;
  Result<Tool> t = tool_from_json(tool, &problems);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(t->name, "search");
  EXPECT_EQ(t->title, std::optional<std::string>("Search"));
  EXPECT_EQ(t->extra, Json({{"x-vendor-field", tool["x-vendor-field"]}}));
  EXPECT_EQ(to_json(*t), tool);
}

TEST(ManifestDefinitions, ResourceTemplateAndPromptFieldsRoundTrip) {
  Json resource = {{"uri", "file:///a.txt"},
                   {"name", "a"},
                   {"title", "A"},
                   {"description", "d"},
                   {"mimeType", "text/plain"},
                   {"size", 1024},
                   {"annotations", {{"audience", {"user"}}, {"priority", 0.5}}},
                   {"icons", Json::array()},
                   {"_meta", {{"k", "v"}}},
                   {"extraField", true}};
  Json tmpl = {{"uriTemplate", "file:///{path}"},
               {"name", "files"},
               {"mimeType", "text/plain"},
               {"annotations", {{"lastModified", "2025-01-01T00:00:00Z"}}},
               {"x", 1}};
  Json prompt = {
      {"name", "p"},
      {"title", "P"},
      {"description", "a prompt"},
      {"arguments", Json::array({{{"name", "a"}, {"required", true}, {"x", 1}},
                                 {{"name", "b"}, {"title", "B"}, {"description", "d"}}})},
      {"_meta", Json::object()}};
  std::vector<std::string> problems;
  Result<Resource> r = resource_from_json(resource, &problems);
  Result<ResourceTemplate> t = resource_template_from_json(tmpl, &problems);
  Result<Prompt> p = prompt_from_json(prompt, &problems);
  ASSERT_TRUE(r.ok() && t.ok() && p.ok());
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(r->size, std::optional<int64_t>(1024));
  EXPECT_EQ(t->uri_template, "file:///{path}");
  ASSERT_TRUE(p->arguments.has_value());
  EXPECT_EQ(p->arguments->size(), 2u);
  EXPECT_EQ(to_json(*r), resource);
  EXPECT_EQ(to_json(*t), tmpl);
  EXPECT_EQ(to_json(*p), prompt);
}

TEST(ManifestDefinitions, WrongTypedOptionalFieldsAreDroppedAndNamed) {
  Json tool = {{"name", "t"},
               {"title", 5},
               {"description", Json::array()},
               {"inputSchema", Json::object()},
               {"outputSchema", "none"},
               {"annotations", true},
               {"icons", {{"src", "x"}}},
               {"_meta", Json::array()},
               {"execution", 1}};
  std::vector<std::string> problems;
  Result<Tool> t = tool_from_json(tool, &problems);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->title || t->description || t->output_schema || t->annotations || t->icons ||
               t->meta || t->execution);
  EXPECT_TRUE(t->extra.empty());  // a known field of the wrong type is not kept as "unknown"
  std::string all;
  for (const std::string& p : problems) all += p + "\n";
  for (const char* field :
       {"'title' is not a string", "'description' is not a string",
        "'outputSchema' is not an object", "'annotations' is not an object",
        "'icons' is not an array", "'_meta' is not an object", "'execution' is not an object"}) {
    EXPECT_NE(all.find(field), std::string::npos) << field << " in\n" << all;
  }
  EXPECT_EQ(to_json(*t), Json({{"name", "t"}, {"inputSchema", Json::object()}}));
}

TEST(ManifestDefinitions, NullMeansAbsentAndIsNotReported) {
  std::vector<std::string> problems;
  Result<Tool> t = tool_from_json({{"name", "t"},
                                   {"inputSchema", {{"type", "object"}}},
                                   {"title", nullptr},
                                   {"outputSchema", nullptr},
                                   {"annotations", nullptr}},
                                  &problems);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(problems.empty());
  EXPECT_FALSE(t->title || t->output_schema || t->annotations);
}

TEST(ManifestDefinitions, ResourceSizeMustBeANonNegativeInteger) {
  for (Json size : {Json(1024), Json(1024.0), Json(uint64_t{1} << 40)}) {
    std::vector<std::string> problems;
    Result<Resource> r =
        resource_from_json({{"uri", "u"}, {"name", "n"}, {"size", size}}, &problems);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(problems.empty()) << size;
    EXPECT_TRUE(r->size.has_value()) << size;
  }
  for (Json size : {Json(-1), Json(1.5), Json("10")}) {
    std::vector<std::string> problems;
    Result<Resource> r =
        resource_from_json({{"uri", "u"}, {"name", "n"}, {"size", size}}, &problems);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->size.has_value()) << size;
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_NE(problems[0].find("'size'"), std::string::npos);
  }
}

TEST(ManifestDefinitions, MissingRequiredFieldsAreErrorsNamingTheField) {
  struct Case {
    Json item;
    int kind;  // 0 tool, 1 resource, 2 template, 3 prompt
    const char* field;
  };
  const Json schema = {{"type", "object"}};
  const Case cases[] = {
      {{{"inputSchema", schema}}, 0, "'name'"},
      {{{"name", ""}, {"inputSchema", schema}}, 0, "'name'"},
      {{{"name", 7}, {"inputSchema", schema}}, 0, "'name'"},
      {{{"name", "t"}}, 0, "'inputSchema'"},
      {{{"name", "t"}, {"inputSchema", Json::array()}}, 0, "'inputSchema'"},
      {{{"name", "r"}}, 1, "'uri'"},
      {{{"uri", "u"}}, 1, "'name'"},
      {{{"name", "t"}, {"uri", "u"}}, 2, "'uriTemplate'"},
      {{{"description", "no name"}}, 3, "'name'"},
      {Json::array({1}), 0, "not an object"},
      {Json("tool"), 3, "not an object"},
  };
  for (const Case& c : cases) {
    Error e;
    switch (c.kind) {
      case 0:
        e = tool_from_json(c.item, nullptr).error();
        break;
      case 1:
        e = resource_from_json(c.item, nullptr).error();
        break;
      case 2:
        e = resource_template_from_json(c.item, nullptr).error();
        break;
      default:
        e = prompt_from_json(c.item, nullptr).error();
        break;
    }
    EXPECT_EQ(e.code, ErrorCode::kInvalidReply) << c.item;
    EXPECT_NE(e.message.find(c.field), std::string::npos) << e.message;
  }
}

TEST(ManifestDefinitions, PromptArgumentsAreToleratedLikeDefinitions) {
  std::vector<std::string> problems;
  Result<Prompt> p = prompt_from_json(
      {{"name", "p"},
       {"arguments", Json::array({{{"name", "ok"}},
                                  {{"required", true}},
                                  "text",
                                  {{"name", "flag"}, {"required", "yes"}, {"x-hint", 1}}})}},
      &problems);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->arguments.has_value());
  ASSERT_EQ(p->arguments->size(), 2u);
  EXPECT_EQ((*p->arguments)[0].name, "ok");
  EXPECT_EQ(to_json((*p->arguments)[1]), Json({{"name", "flag"}, {"x-hint", 1}}));
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0], "argument 1: 'name' is missing or not a string; argument dropped");
  EXPECT_EQ(problems[1], "argument 2: not an object; argument dropped");
  EXPECT_EQ(problems[2], "argument 3: field 'required' is not a boolean; field dropped");
}

// ---- Building from a listing ----

TEST(ManifestFromListing, CarriesServerInfoAndEveryList) {
  Manifest m = build(small_listing());
  EXPECT_EQ(m.protocol_version, "2025-11-25");
  EXPECT_EQ(m.server.name, "demo");
  EXPECT_EQ(m.server.version, "1.2.3");
  EXPECT_EQ(m.server.title, std::optional<std::string>("Demo"));
  EXPECT_EQ(m.server.extra, Json({{"websiteUrl", "https://example.test/demo"}}));
  EXPECT_EQ(m.instructions, std::optional<std::string>("Use the tools."));
  EXPECT_EQ(tool_names(m), (std::vector<std::string>{"echo", "add"}));  // upstream order kept
  EXPECT_EQ(m.prompts.items.size(), 1u);
  EXPECT_FALSE(m.truncated);
  EXPECT_TRUE(m.issues.empty());
  Json j = manifest_to_json(m);
  EXPECT_EQ(j["tools"]["items"][0], small_listing().list(ListKind::kTools).items[0]);
  EXPECT_FALSE(j.contains("truncation"));
}

TEST(ManifestFromListing, CouldNotLoadAndGenuinelyEmptyStayDistinct) {
  Listing l = small_listing();
  l.list(ListKind::kTools).items.clear();  // listed, none
  l.list(ListKind::kResources).state = ListState::kFailed;
  l.list(ListKind::kResources).error = Error(ErrorCode::kTimeout, "resources/list: no answer");
  l.list(ListKind::kResources).items = {{{"uri", "partial"}, {"name", "p"}}};  // one page arrived
  l.list(ListKind::kPrompts).state = ListState::kAbsent;
  Manifest m = build(l);
  EXPECT_EQ(m.tools.state, ListState::kOk);
  EXPECT_TRUE(m.tools.items.empty());
  EXPECT_EQ(m.resources.state, ListState::kFailed);
  ASSERT_TRUE(m.resources.error.has_value());
  EXPECT_EQ(m.resources.error->code, ErrorCode::kTimeout);
  EXPECT_TRUE(m.resources.items.empty());   // a partial list never reads as a complete one
  EXPECT_EQ(m.resources.partial_items, 1);  // ... but what arrived is not lost without a word
  EXPECT_EQ(m.prompts.state, ListState::kAbsent);

  Json j = manifest_to_json(m);
  EXPECT_EQ(j["tools"]["state"], "ok");
  EXPECT_EQ(j["resources"]["state"], "failed");
  EXPECT_EQ(j["resources"]["error"],
            Json({{"code", "TIMEOUT"}, {"message", "resources/list: no answer"}}));
  EXPECT_EQ(j["resources"]["partial_items"], 1);
  EXPECT_EQ(j["prompts"]["state"], "absent");
  EXPECT_FALSE(j["prompts"].contains("error"));
  EXPECT_FALSE(j["tools"].contains("partial_items"));
  Result<Manifest> back = decode_manifest(encode(m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->resources.error->message, "resources/list: no answer");
  EXPECT_EQ(back->resources.partial_items, 1);
  EXPECT_EQ(list_kinds_text(incomplete_lists(*back)), "resources");
}

// ADR-004, per list: a list that failed keeps the last good list of its kind, marked `kept`
// with the error; lists that loaded update; a list without a last good one stays failed.
TEST(ManifestKeepLastGood, FailedListsTakeTheLastGoodListsAndSaySo) {
  constexpr int64_t kOld = 1'800'000'000'000;
  constexpr int64_t kNow = kOld + 60'000;
  constexpr int64_t kDay = 86'400'000;
  Manifest last_good = build(small_listing());  // tools: echo, add; prompts: greet

  Listing l = small_listing();
  l.list(ListKind::kTools).items = {
      {{"name", "fresh_tool"}, {"inputSchema", {{"type", "object"}}}}};
  l.list(ListKind::kPrompts).state = ListState::kFailed;
  l.list(ListKind::kPrompts).items.clear();
  l.list(ListKind::kPrompts).error =
      Error(ErrorCode::kTimeout, "prompts/list: no answer in 3500 ms");
  l.list(ListKind::kResources).state = ListState::kFailed;  // never loaded before either
  l.list(ListKind::kResources).error = Error(ErrorCode::kUpstreamError, "boom");
  Manifest m = build(l);
  EXPECT_EQ(list_kinds_text(incomplete_lists(m)), "resources,prompts");

  std::vector<ListKind> kept = keep_last_good_lists(&m, last_good, kOld, kNow, kDay);
  EXPECT_EQ(list_kinds_text(kept), "resources,prompts");
  EXPECT_EQ(tool_names(m), std::vector<std::string>({"fresh_tool"}));  // loaded: updated
  EXPECT_EQ(m.prompts.state, ListState::kOk);
  ASSERT_EQ(m.prompts.items.size(), 1u);
  EXPECT_EQ(m.prompts.items[0].name, "greet");
  ASSERT_TRUE(m.prompts.kept.has_value());
  EXPECT_EQ(m.prompts.kept->listed_at_ms, kOld);
  EXPECT_EQ(m.prompts.kept->error.code, ErrorCode::kTimeout);
  // The last good manifest had resources absent: that is what is kept (the server had none).
  EXPECT_EQ(m.resources.state, ListState::kAbsent);
  ASSERT_TRUE(m.resources.kept.has_value());
  EXPECT_EQ(m.resources.kept->error.message, "boom");
  EXPECT_EQ(list_kinds_text(incomplete_lists(m)), "resources,prompts");

  // Round trip through the strict reader; the JSON says what was kept.
  Json j = manifest_to_json(m);
  EXPECT_EQ(
      j["prompts"]["kept"],
      Json({{"listed_at", kOld},
            {"error", {{"code", "TIMEOUT"}, {"message", "prompts/list: no answer in 3500 ms"}}}}));
  Result<Manifest> back = decode_manifest(encode(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  ASSERT_TRUE(back->prompts.kept.has_value());
  EXPECT_EQ(back->prompts.kept->listed_at_ms, kOld);

  // Kept again by a later failing listing: it keeps the time it was really listed.
  Listing again = small_listing();
  again.list(ListKind::kPrompts).state = ListState::kFailed;
  again.list(ListKind::kPrompts).error = Error(ErrorCode::kTimeout, "again");
  Manifest m2 = build(again);
  EXPECT_EQ(list_kinds_text(keep_last_good_lists(&m2, *back, kNow, kNow + 1000, kDay)), "prompts");
  EXPECT_EQ(m2.prompts.kept->listed_at_ms, kOld);
  EXPECT_EQ(m2.prompts.kept->error.message, "again");

  // A last good list older than the maximum age is not served as data: the list stays failed.
  Manifest m3 = build(again);
  EXPECT_TRUE(keep_last_good_lists(&m3, *back, kNow, kOld + kDay, kDay).empty());
  EXPECT_EQ(m3.prompts.state, ListState::kFailed);
  // A failed list in the last good manifest is nothing to keep.
  Manifest m4 = build(again);
  EXPECT_TRUE(keep_last_good_lists(&m4, build(again), kNow, kNow, kDay).empty());
  EXPECT_EQ(m4.prompts.state, ListState::kFailed);
}

// A kept list from a manifest that was itself cut to the bound: the merge may not fit. Its tail
// is cut again (counted as dropped), never the whole list lost.
TEST(ManifestKeepLastGood, AKeptListThatNoLongerFitsLosesItsTailNotItsWhole) {
  constexpr int64_t kOld = 1'800'000'000'000;
  Listing big = small_listing();
  auto& tools = big.list(ListKind::kTools).items;
  tools.clear();
  for (int i = 0; i < 200; ++i) {
    tools.push_back({{"name", "tool_" + std::to_string(i)},
                     {"description", std::string(200, 'd')},
                     {"inputSchema", {{"type", "object"}}}});
  }
  Manifest last_good = build(big);
  ASSERT_EQ(last_good.tools.items.size(), 200u);
  const std::size_t full = encode(last_good).size();

  Listing l = small_listing();
  l.list(ListKind::kTools).state = ListState::kFailed;
  l.list(ListKind::kTools).items.clear();
  l.list(ListKind::kTools).error = Error(ErrorCode::kTooLarge, std::string(300, 'e'));
  Manifest m = build(l);
  ASSERT_EQ(list_kinds_text(keep_last_good_lists(&m, last_good, kOld, kOld + 1, 86'400'000)),
            "tools");
  const std::size_t bound = full - 4000;  // the kept mark and the cut must fit in this
  ASSERT_GT(encode(m).size(), bound);
  ASSERT_TRUE(fit_kept_lists(&m, bound).ok());
  EXPECT_LE(encode(m).size(), bound);
  EXPECT_TRUE(m.truncated);
  EXPECT_GT(m.tools.items.size(), 150u);  // only the tail went
  EXPECT_EQ(m.tools.items.size() + m.truncation.dropped[static_cast<int>(ListKind::kTools)], 200u);
  EXPECT_EQ(m.tools.items.front().name, "tool_0");
  EXPECT_EQ(m.tools.hashes.size(), m.tools.items.size());
  ASSERT_TRUE(m.tools.kept.has_value());
  Result<Manifest> back = decode_manifest(encode(m));
  ASSERT_TRUE(back.ok()) << back.error().message;

  // A bound that nothing kept can make room under: an error, the manifest left as it was cut.
  EXPECT_EQ(fit_kept_lists(&m, 100).error().code, ErrorCode::kTooLarge);
}

TEST(ManifestKeepLastGood, TheStrictReaderRefusesKeptOrPartialWhereTheyCannotBe) {
  Listing l = small_listing();
  l.list(ListKind::kPrompts).state = ListState::kFailed;
  l.list(ListKind::kPrompts).items.clear();
  l.list(ListKind::kPrompts).error = Error(ErrorCode::kTimeout, "t");
  Json good = manifest_to_json(build(l));
  Json j = good;
  j["prompts"]["kept"] = {{"listed_at", 1}, {"error", {{"code", "TIMEOUT"}, {"message", "x"}}}};
  EXPECT_FALSE(manifest_from_json(j).ok());  // kept on a failed list
  j = good;
  j["tools"]["partial_items"] = 2;
  EXPECT_FALSE(manifest_from_json(j).ok());  // partial on an ok list
  j = good;
  j["prompts"]["partial_items"] = 0;
  EXPECT_FALSE(manifest_from_json(j).ok());
  j = good;
  j["tools"]["kept"] = {{"listed_at", 1}};
  EXPECT_FALSE(manifest_from_json(j).ok());  // no error
  j = good;
  j["tools"]["kept"] = {{"listed_at", 1}, {"error", {{"code", "TIMEOUT"}, {"message", "x"}}}};
  EXPECT_TRUE(manifest_from_json(j).ok());
  EXPECT_EQ(list_kinds_from_text("tools,prompts"),
            std::optional<std::vector<ListKind>>({ListKind::kTools, ListKind::kPrompts}));
  EXPECT_EQ(list_kinds_from_text(""),
            std::optional<std::vector<ListKind>>(std::vector<ListKind>{}));
  EXPECT_FALSE(list_kinds_from_text("tools,nope").has_value());
}

TEST(ManifestFromListing, AListNeverAttemptedIsAnError) {
  Listing l = small_listing();
  l.list(ListKind::kResourceTemplates).state = ListState::kNotListed;
  Result<Manifest> m = manifest_from_listing(l, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(m.error().message.find("resources/templates/list"), std::string::npos);
}

TEST(ManifestFromListing, ServerInfoNeedsNameAndVersion) {
  Listing l = small_listing();
  l.server_info = {{"name", "x"}};
  Result<Manifest> m = manifest_from_listing(l, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidReply);
}

TEST(ManifestFromListing, DuplicateKeysKeepTheFirstAndAreReported) {
  Listing l = small_listing();
  auto& tools = l.list(ListKind::kTools).items;
  tools.push_back(
      {{"name", "echo"}, {"description", "second echo"}, {"inputSchema", Json::object()}});
  l.list(ListKind::kResources).state = ListState::kOk;
  l.list(ListKind::kResources).items = {
      {{"uri", "mem://a"}, {"name", "same"}},
      {{"uri", "mem://b"}, {"name", "same"}},  // same name, other uri: a different resource
      {{"uri", "mem://a"}, {"name", "again"}},
  };
  Manifest m = build(l);
  EXPECT_EQ(tool_names(m), (std::vector<std::string>{"echo", "add"}));
  EXPECT_EQ(m.tools.items[0].description, std::optional<std::string>("Echoes its input"));
  ASSERT_EQ(m.resources.items.size(), 2u);
  EXPECT_EQ(m.resources.items[1].uri, "mem://b");
  ASSERT_EQ(m.issues.size(), 2u);
  EXPECT_EQ(m.issues[0].list, ListKind::kTools);
  EXPECT_EQ(m.issues[0].index, 2);
  EXPECT_EQ(m.issues[0].key, "echo");
  EXPECT_NE(m.issues[0].problem.find("duplicate"), std::string::npos);
  EXPECT_EQ(m.issues[1].list, ListKind::kResources);
  EXPECT_EQ(m.issues[1].index, 2);
  EXPECT_EQ(m.issues[1].key, "mem://a");
}

TEST(ManifestFromListing, BadDefinitionsBecomeIssuesTheRestIsServed) {
  Listing l = small_listing();
  auto& tools = l.list(ListKind::kTools).items;
  tools.push_back({{"name", "no-schema"}});
  tools.push_back(42);
  tools.push_back({{"name", "odd"}, {"title", 3}, {"inputSchema", Json::object()}});
  tools.push_back(
      {{"name", "bad-utf8"}, {"description", "\xC3("}, {"inputSchema", Json::object()}});
  Manifest m = build(l);
  EXPECT_EQ(tool_names(m), (std::vector<std::string>{"echo", "add", "odd"}));
  ASSERT_EQ(m.issues.size(), 4u);
  EXPECT_EQ(m.issues[0].key, "no-schema");
  EXPECT_NE(m.issues[0].problem.find("'inputSchema'"), std::string::npos);
  EXPECT_NE(m.issues[0].problem.find("definition dropped"), std::string::npos);
  EXPECT_EQ(m.issues[1].index, 3);
  EXPECT_EQ(m.issues[1].key, "");
  EXPECT_EQ(m.issues[2].key, "odd");
  EXPECT_NE(m.issues[2].problem.find("field 'title' is not a string; field dropped"),
            std::string::npos);
  EXPECT_NE(m.issues[3].problem.find("invalid UTF-8"), std::string::npos) << m.issues[3].problem;
  // The manifest itself stays writable and readable.
  Result<Manifest> back = decode_manifest(encode(m));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->issues.size(), 4u);
}

TEST(ManifestFromListing, IssuesAreCappedAndTheRestCounted) {
  Listing l = small_listing();
  for (int i = 0; i < 50; ++i) l.list(ListKind::kTools).items.push_back({{"name", "x"}});
  ManifestLimits limits;
  limits.max_issues = 10;
  Manifest m = build(l, limits);
  EXPECT_EQ(m.issues.size(), 10u);
  EXPECT_EQ(m.issues_omitted, 40);
  EXPECT_EQ(manifest_to_json(m)["issues_omitted"], 40);
}

TEST(ManifestFromListing, IssueKeysAreCutAndMadeValidUtf8) {
  Listing l = small_listing();
  std::string long_name(1000, 'k');
  l.list(ListKind::kTools).items.push_back({{"name", long_name}});  // no inputSchema
  l.list(ListKind::kTools).items.push_back({{"name", "bad\xFFname"}});
  Manifest m = build(l);
  ASSERT_EQ(m.issues.size(), 2u);
  EXPECT_EQ(m.issues[0].key.size(), 256u);
  EXPECT_EQ(m.issues[1].key, "bad?name");
  EXPECT_TRUE(encode_manifest(m).ok());
}

TEST(ManifestFromListing, CacheHintsCombineConservatively) {
  Listing l = small_listing();
  l.list(ListKind::kTools).hints = {60000, std::string("public")};
  l.list(ListKind::kPrompts).hints = {30000, std::string("private")};
  Manifest m = build(l);
  EXPECT_EQ(m.cache.ttl_ms, std::optional<int64_t>(30000));
  EXPECT_EQ(m.cache.cache_scope, std::optional<std::string>("private"));
  EXPECT_EQ(m.tools.cache.cache_scope, std::optional<std::string>("public"));
  Json j = manifest_to_json(m);
  EXPECT_EQ(j["cache"], Json({{"ttl_ms", 30000}, {"scope", "private"}}));
  EXPECT_EQ(j["resources"]["cache"], Json::object());

  l.list(ListKind::kPrompts).hints = {-5, std::string("shared-with-everyone")};
  m = build(l);
  EXPECT_EQ(m.prompts.cache.ttl_ms, std::optional<int64_t>(0));
  EXPECT_EQ(m.prompts.cache.cache_scope, std::optional<std::string>("private"));
  EXPECT_EQ(m.cache.cache_scope, std::optional<std::string>("private"));
}

// Collects every string value and every object key of `j`.
void strings_of(const Json& j, std::set<std::string>* values, std::set<std::string>* keys) {
  if (j.is_string()) values->insert(j.get<std::string>());
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      keys->insert(it.key());
      strings_of(it.value(), values, keys);
    }
  }
  if (j.is_array()) {
    for (const Json& e : j) strings_of(e, values, keys);
  }
}

TEST(ManifestFromListing, HoldsNothingTheUpstreamDidNotSend) {
  // Every string in the manifest is the upstream's, one of Quiver's own words, or a hash: there
  // is no path by which configuration (URLs, headers, environment) could get in.
  Listing l = listing_from_fixture(fixture("server-everything.json"));
  l.list(ListKind::kPrompts).state = ListState::kFailed;
  l.list(ListKind::kPrompts).error = Error(ErrorCode::kTransport, "pipe closed");
  std::set<std::string> upstream, upstream_keys;
  strings_of(l.server_info, &upstream, &upstream_keys);
  strings_of(l.server_capabilities, &upstream, &upstream_keys);
  upstream.insert(*l.instructions);
  upstream.insert(l.protocol_version);
  upstream.insert("pipe closed");
  for (const ListOutcome& o : l.lists) {
    for (const Json& item : o.items) strings_of(item, &upstream, &upstream_keys);
  }
  const std::set<std::string> ours_values = {kManifestFormat, "ok", "absent", "failed",
                                             "TRANSPORT"};
  const std::set<std::string> ours_keys = {"format",         "protocol_version",
                                           "server",         "capabilities",
                                           "instructions",   "tools",
                                           "resources",      "resource_templates",
                                           "prompts",        "cache",
                                           "truncated",      "issues",
                                           "issues_omitted", "state",
                                           "items",          "hashes",
                                           "error",          "code",
                                           "message",        "partial_items"};

  std::set<std::string> values, keys;
  strings_of(manifest_to_json(build(l)), &values, &keys);
  for (const std::string& v : values) {
    bool is_hash = v.rfind("sha256-", 0) == 0 && v.size() == 50;
    EXPECT_TRUE(upstream.count(v) || ours_values.count(v) || is_hash) << v;
  }
  for (const std::string& k : keys) {
    EXPECT_TRUE(upstream_keys.count(k) || ours_keys.count(k) || upstream.count(k)) << k;
  }
}

// ---- Codec, ETag and definition hashes ----

TEST(ManifestCodec, RoundTripIsExact) {
  Listing l = small_listing();
  l.list(ListKind::kResources).state = ListState::kFailed;
  l.list(ListKind::kResources).error = Error(ErrorCode::kUpstreamError, "boom");
  l.list(ListKind::kTools).items.push_back({{"name", 1}});
  l.list(ListKind::kTools).hints = {1000, std::string("public")};
  Manifest m = build(l);
  Result<EncodedManifest> first = encode_manifest(m);
  ASSERT_TRUE(first.ok());
  Result<Manifest> back = decode_manifest(first->bytes);
  ASSERT_TRUE(back.ok()) << back.error().message;
  Result<EncodedManifest> second = encode_manifest(*back);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->bytes, first->bytes);
  EXPECT_EQ(second->etag, first->etag);
  EXPECT_EQ(manifest_to_json(*back), manifest_to_json(m));
  EXPECT_EQ(back->tools.hashes, m.tools.hashes);
}

TEST(ManifestCodec, EtagIsTheHashOfTheCanonicalBytes) {
  Result<EncodedManifest> e = encode_manifest(build(small_listing()));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->etag, content_hash(e->bytes));
  EXPECT_EQ(e->etag.size(), 50u);
  EXPECT_EQ(e->etag.rfind("sha256-", 0), 0u);
  std::string digest;
  ASSERT_TRUE(base64url_decode(e->etag.substr(7), &digest));
  EXPECT_EQ(digest.size(), 32u);
  Result<std::string> canonical = canonical_json(manifest_to_json(build(small_listing())));
  ASSERT_TRUE(canonical.ok());
  EXPECT_EQ(e->bytes, *canonical);
  EXPECT_EQ(content_hash(""), "sha256-47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
}

TEST(ManifestCodec, SameListingInAnyKeyOrderGivesTheSameEtag) {
  Listing a = small_listing();
  Listing b = small_listing();
  Result<Json> reordered =
      parse_json(R"({"inputSchema":{"properties":{"text":{"type":"string"}},"type":"object"},)"
                 R"("description":"Echoes its input","name":"echo"})");
  ASSERT_TRUE(reordered.ok());
  b.list(ListKind::kTools).items[0] = *reordered;
  EXPECT_EQ(encode_manifest(build(a))->etag, encode_manifest(build(b))->etag);
}

TEST(ManifestCodec, AChangedDefinitionChangesItsHashOnly) {
  Listing before = small_listing();
  Listing after = small_listing();
  after.list(ListKind::kTools).items[1]["inputSchema"]["required"] = {"a", "b"};
  Manifest m1 = build(before);
  Manifest m2 = build(after);
  EXPECT_EQ(m1.tools.hashes[0], m2.tools.hashes[0]);  // echo unchanged
  EXPECT_NE(m1.tools.hashes[1], m2.tools.hashes[1]);  // add changed
  EXPECT_EQ(m1.prompts.hashes, m2.prompts.hashes);
  EXPECT_NE(encode_manifest(m1)->etag, encode_manifest(m2)->etag);
  // The hash is that of the definition's own canonical bytes, and the JSON maps key -> hash.
  EXPECT_EQ(m2.tools.hashes[1], *definition_hash(after.list(ListKind::kTools).items[1]));
  Json j = manifest_to_json(m2);
  EXPECT_EQ(j["tools"]["hashes"]["add"], m2.tools.hashes[1]);
}

TEST(ManifestCodec, StrictReaderRejectsWhatTheWriterNeverWrites) {
  const Json good = manifest_to_json(build(small_listing()));
  ASSERT_TRUE(manifest_from_json(good).ok());
  struct Case {
    const char* what;
    Json json;
  };
  std::vector<Case> cases;
  auto mutate = [&](const char* what, auto f) {
    Json j = good;
    f(j);
    cases.push_back({what, j});
  };
  mutate("unknown field", [](Json& j) { j["extra"] = 1; });
  mutate("wrong format", [](Json& j) { j["format"] = "quiver.manifest.v0"; });
  mutate("bad state", [](Json& j) { j["tools"]["state"] = "not_listed"; });
  mutate("ok with error", [](Json& j) {
    j["tools"]["error"] = {{"code", "TIMEOUT"}, {"message", ""}};
  });
  mutate("failed without error", [](Json& j) { j["resources"]["state"] = "failed"; });
  mutate("unknown error code", [](Json& j) {
    j["resources"]["state"] = "failed";
    j["resources"]["error"] = {{"code", "NOPE"}, {"message", "m"}};
  });
  mutate("absent with items", [](Json& j) { j["resources"]["items"] = Json::array({1}); });
  mutate("missing hash", [](Json& j) { j["tools"]["hashes"].erase("echo"); });
  mutate("stray hash",
         [](Json& j) { j["tools"]["hashes"]["ghost"] = j["tools"]["hashes"]["echo"]; });
  mutate("malformed hash", [](Json& j) { j["tools"]["hashes"]["echo"] = "sha256-abc"; });
  mutate("duplicate key", [](Json& j) { j["tools"]["items"].push_back(j["tools"]["items"][0]); });
  mutate("wrong-typed tool field", [](Json& j) { j["tools"]["items"][0]["title"] = 1; });
  mutate("tool without schema", [](Json& j) { j["tools"]["items"][0].erase("inputSchema"); });
  mutate("truncation without truncated", [](Json& j) {
    j["truncation"] = {{"descriptions", 0}, {"instructions", false}, {"dropped", Json::object()}};
  });
  mutate("truncated without truncation", [](Json& j) { j["truncated"] = true; });
  mutate("bad cache scope", [](Json& j) { j["cache"]["scope"] = "team"; });
  mutate("negative ttl", [](Json& j) { j["cache"]["ttl_ms"] = -1; });
  mutate("issue of unknown list", [](Json& j) {
    j["issues"].push_back({{"list", "widgets"}, {"index", 0}, {"key", ""}, {"problem", "p"}});
  });
  mutate("server without version", [](Json& j) { j["server"].erase("version"); });
  mutate("not an object", [](Json& j) { j = Json::array(); });
  for (const Case& c : cases) {
    Result<Manifest> m = manifest_from_json(c.json);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument) << c.what;
  }
}

TEST(ManifestCodec, EveryTruncatedEncodingIsACleanError) {
  std::string bytes = encode(build(small_listing()));
  ASSERT_TRUE(decode_manifest(bytes).ok());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Result<Manifest> m = decode_manifest(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  }
}

// ---- Size bound ----

Listing big_listing(int tools, std::size_t description_bytes, int resources = 0) {
  Listing l = small_listing();
  auto& items = l.list(ListKind::kTools).items;
  items.clear();
  for (int i = 0; i < tools; ++i) {
    std::string desc;
    while (desc.size() < description_bytes) desc += "Tool " + std::to_string(i) + " does work. ";
    desc.resize(description_bytes);
    items.push_back(
        {{"name", "tool_" + std::to_string(i)},
         {"description", desc},
         {"inputSchema", {{"type", "object"}, {"properties", {{"arg", {{"type", "string"}}}}}}}});
  }
  if (resources > 0) {
    l.list(ListKind::kResources).state = ListState::kOk;
    for (int i = 0; i < resources; ++i) {
      l.list(ListKind::kResources)
          .items.push_back({{"uri", "test://static/resource/" + std::to_string(i)},
                            {"name", "Resource " + std::to_string(i)},
                            {"mimeType", "text/plain"}});
    }
  }
  return l;
}

TEST(ManifestSizeBound, ASmallManifestIsUntouched) {
  Manifest m = build(small_listing());
  EXPECT_FALSE(m.truncated);
  EXPECT_EQ(m.truncation.descriptions, 0);
  EXPECT_FALSE(manifest_to_json(m).contains("truncation"));
}

TEST(ManifestSizeBound, LongestDescriptionsAreCutFirstAllToOneLength) {
  Listing l = big_listing(400, 1000);
  // A few short descriptions must survive untouched.
  for (int i = 0; i < 400; i += 50) l.list(ListKind::kTools).items[i]["description"] = "short";
  Manifest m = build(l);
  std::string bytes = encode(m);
  EXPECT_LE(bytes.size(), 262144u);
  EXPECT_GT(bytes.size(), 262144u - 4096);  // it cut no more than it had to
  EXPECT_TRUE(m.truncated);
  EXPECT_EQ(m.tools.items.size(), 400u);  // nothing dropped
  EXPECT_EQ(m.truncation.dropped[0], 0);
  EXPECT_EQ(m.truncation.descriptions, 392);
  ASSERT_TRUE(m.truncation.description_max_bytes.has_value());
  const std::size_t cut = static_cast<std::size_t>(*m.truncation.description_max_bytes);
  for (int i = 0; i < 400; ++i) {
    const std::string& d = *m.tools.items[i].description;
    if (i % 50 == 0) {
      EXPECT_EQ(d, "short");
    } else {
      EXPECT_EQ(d.size(), cut) << i;
      EXPECT_EQ(d.substr(d.size() - 3), "\xE2\x80\xA6");
      EXPECT_EQ(d.substr(0, cut - 3),
                (*l.list(ListKind::kTools).items[i]["description"].get_ptr<const std::string*>())
                    .substr(0, cut - 3));
    }
  }
  // Hashes are those of the definitions the upstream sent, not of the cut ones.
  EXPECT_EQ(m.tools.hashes[1], *definition_hash(l.list(ListKind::kTools).items[1]));
  Json t = manifest_to_json(m)["truncation"];
  EXPECT_EQ(t["descriptions"], 392);
  EXPECT_EQ(t["dropped"],
            Json({{"prompts", 0}, {"resource_templates", 0}, {"resources", 0}, {"tools", 0}}));
  Result<Manifest> back = decode_manifest(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(encode(*back), bytes);
}

TEST(ManifestSizeBound, EntriesAreDroppedFromTheEndResourcesBeforeTools) {
  // 3000 tools with small descriptions and bulky schemas: cutting descriptions cannot suffice.
  Listing l = big_listing(3000, 40, 500);
  for (Json& t : l.list(ListKind::kTools).items) {
    for (int p = 0; p < 4; ++p) {
      t["inputSchema"]["properties"]["parameter_" + std::to_string(p)] = {
          {"type", "string"}, {"description", "a parameter of some length to make it bulky"}};
    }
  }
  Manifest m = build(l);
  std::string bytes = encode(m);
  EXPECT_LE(bytes.size(), 262144u);
  EXPECT_GT(bytes.size(), 262144u - 2048);
  EXPECT_TRUE(m.truncated);
  EXPECT_TRUE(m.resources.items.empty());
  EXPECT_EQ(m.truncation.dropped[static_cast<int>(ListKind::kResources)], 500);
  const std::size_t kept = m.tools.items.size();
  EXPECT_GT(kept, 100u);
  EXPECT_LT(kept, 3000u);
  EXPECT_EQ(m.truncation.dropped[static_cast<int>(ListKind::kTools)],
            3000 - static_cast<int64_t>(kept));
  for (std::size_t i = 0; i < kept; ++i)
    EXPECT_EQ(m.tools.items[i].name, "tool_" + std::to_string(i));
  EXPECT_TRUE(m.prompts.items.empty());  // prompts go before any tool does
  EXPECT_EQ(m.truncation.dropped[static_cast<int>(ListKind::kPrompts)], 1);
  EXPECT_EQ(m.tools.hashes.size(), kept);
  Json j = manifest_to_json(m);
  EXPECT_EQ(j["tools"]["hashes"].size(), kept);
  EXPECT_EQ(j["truncation"]["dropped"]["resources"], 500);
  ASSERT_TRUE(decode_manifest(bytes).ok());
}

TEST(ManifestSizeBound, EveryBoundIsRespected) {
  Listing l = big_listing(60, 300, 40);
  l.instructions = std::string(3000, 'i');
  const std::size_t whole = encode(build(l)).size();
  ASSERT_LT(whole, 40000u);
  for (std::size_t bound = 1500; bound <= 40000; bound += 1337) {
    ManifestLimits limits;
    limits.max_bytes = bound;
    Result<Manifest> m = manifest_from_listing(l, limits);
    ASSERT_TRUE(m.ok()) << bound << ": " << m.error().message;
    std::string bytes = encode(*m);
    EXPECT_LE(bytes.size(), bound);
    EXPECT_EQ(m->truncated, whole > bound) << bound;
    if (whole <= bound) {
      EXPECT_EQ(bytes.size(), whole);
    }
    Result<Manifest> back = decode_manifest(bytes);
    ASSERT_TRUE(back.ok()) << back.error().message;
  }
}

TEST(ManifestSizeBound, InstructionsCountAsADescription) {
  Listing l = small_listing();
  l.instructions = std::string(300000, 'x');
  Manifest m = build(l);
  EXPECT_LE(encode(m).size(), 262144u);
  EXPECT_TRUE(m.truncation.instructions);
  EXPECT_LT(m.instructions->size(), 262144u);
  EXPECT_EQ(m.tools.items.size(), 2u);
}

TEST(ManifestSizeBound, CutsLandOnCodePointBoundaries) {
  Listing l = big_listing(300, 10);
  for (Json& t : l.list(ListKind::kTools).items) {
    std::string d;
    for (int i = 0; i < 300; ++i) d += "\xC3\xA9\xF0\x9F\x98\x80\"";  // é, 😀, a quote
    t["description"] = d;
  }
  ManifestLimits limits;
  limits.max_bytes = 65536;
  Manifest m = build(l, limits);
  std::string bytes = encode(m);  // fails on a split code point
  EXPECT_LE(bytes.size(), 65536u);
  EXPECT_GT(m.truncation.descriptions, 0);
  for (const Tool& t : m.tools.items) {
    EXPECT_EQ(find_invalid_utf8(*t.description), std::string_view::npos);
  }
}

TEST(ManifestSizeBound, OneOversizedDefinitionIsCutOrDropped) {
  Listing l = small_listing();
  l.list(ListKind::kTools).items[0]["description"] = std::string(100000, 'd');
  Json huge_schema = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 3000; ++i) {
    huge_schema["properties"]["p" + std::to_string(i)] = {{"type", "string"}};
  }
  l.list(ListKind::kTools)
      .items.push_back({{"name", "huge"}, {"description", "short"}, {"inputSchema", huge_schema}});
  l.list(ListKind::kTools).items.push_back({{"name", "after"}, {"inputSchema", Json::object()}});
  Manifest m = build(l);
  EXPECT_TRUE(m.truncated);
  EXPECT_EQ(tool_names(m), (std::vector<std::string>{"echo", "add", "after"}));
  Result<std::string> echo = canonical_json(to_json(m.tools.items[0]));
  EXPECT_LE(echo->size(), 65536u);
  EXPECT_GT(echo->size(), 65536u - 8);
  EXPECT_EQ(m.truncation.descriptions, 1);
  EXPECT_EQ(m.truncation.dropped[0], 1);
  EXPECT_FALSE(m.truncation.description_max_bytes.has_value());  // the whole still fit
}

TEST(ManifestSizeBound, AManifestThatCannotFitIsAnError) {
  Listing l = small_listing();
  l.server_info["icons"] =
      Json::array({{{"src", "data:image/png;base64," + std::string(300000, 'A')}}});
  Result<Manifest> m = manifest_from_listing(l, {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kTooLarge);
}

// ---- Real peers (tests/fixtures/mcp, captured by tests/fixtures/capture.mjs) ----

struct Expected {
  const char* fixture;
  ListState states[kListKindCount];
  std::size_t counts[kListKindCount];
};

const Expected kExpected[] = {
    {"server-everything.json",
     {ListState::kOk, ListState::kOk, ListState::kOk, ListState::kOk},
     {13, 7, 2, 4}},
    {"server-everything-paginated.json",
     {ListState::kOk, ListState::kOk, ListState::kOk, ListState::kOk},
     {11, 100, 1, 3}},
    {"server-memory.json",
     {ListState::kOk, ListState::kOk, ListState::kOk, ListState::kAbsent},
     {9, 1, 0, 0}},
    {"server-filesystem.json",
     {ListState::kOk, ListState::kAbsent, ListState::kAbsent, ListState::kAbsent},
     {14, 0, 0, 0}},
};

std::size_t count_of(const Manifest& m, ListKind k) {
  switch (k) {
    case ListKind::kTools:
      return m.tools.items.size();
    case ListKind::kResources:
      return m.resources.items.size();
    case ListKind::kResourceTemplates:
      return m.resource_templates.items.size();
    case ListKind::kPrompts:
      return m.prompts.items.size();
  }
  return 0;
}

ListState state_of(const Manifest& m, ListKind k) {
  switch (k) {
    case ListKind::kTools:
      return m.tools.state;
    case ListKind::kResources:
      return m.resources.state;
    case ListKind::kResourceTemplates:
      return m.resource_templates.state;
    case ListKind::kPrompts:
      return m.prompts.state;
  }
  return ListState::kNotListed;
}

TEST(ManifestRealPeers, CountsAndStatesMatchWhatTheServersList) {
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.fixture);
    Manifest m = build(listing_from_fixture(fixture(e.fixture)));
    for (int k = 0; k < kListKindCount; ++k) {
      EXPECT_EQ(list_state_name(state_of(m, static_cast<ListKind>(k))),
                std::string(list_state_name(e.states[k])))
          << list_kind_name(static_cast<ListKind>(k));
      EXPECT_EQ(count_of(m, static_cast<ListKind>(k)), e.counts[k])
          << list_kind_name(static_cast<ListKind>(k));
    }
    EXPECT_TRUE(m.issues.empty());
    EXPECT_FALSE(m.truncated);
    EXPECT_EQ(m.protocol_version, "2025-11-25");
  }
}

TEST(ManifestRealPeers, MethodNotFoundMeansAbsentNotFailed) {
  // Asked regardless of capabilities, server-memory answers prompts/list and server-filesystem
  // every non-tool list with -32601: the server has none.
  Manifest memory = build(listing_from_fixture(fixture("server-memory.json"), true));
  EXPECT_EQ(memory.prompts.state, ListState::kAbsent);
  EXPECT_FALSE(memory.prompts.error.has_value());
  EXPECT_EQ(memory.resource_templates.state, ListState::kOk);  // listed, genuinely empty
  Manifest fs = build(listing_from_fixture(fixture("server-filesystem.json"), true));
  EXPECT_EQ(fs.resources.state, ListState::kAbsent);
  EXPECT_EQ(fs.prompts.state, ListState::kAbsent);
  EXPECT_EQ(manifest_to_json(fs)["prompts"], Json({{"state", "absent"},
                                                   {"items", Json::array()},
                                                   {"hashes", Json::object()},
                                                   {"cache", Json::object()}}));
}

TEST(ManifestRealPeers, PaginatedResourcesArriveInOrder) {
  Json fx = fixture("server-everything-paginated.json");
  EXPECT_EQ(fx["lists"]["resources/list"].size(), 10u);
  Manifest m = build(listing_from_fixture(fx));
  ASSERT_EQ(m.resources.items.size(), 100u);
  EXPECT_EQ(m.resources.items.front().uri, "test://static/resource/1");
  EXPECT_EQ(m.resources.items.back().uri, "test://static/resource/100");
}

TEST(ManifestRealPeers, EveryDefinitionSurvivesConversionUnchanged) {
  for (const Expected& e : kExpected) {
    Listing l = listing_from_fixture(fixture(e.fixture));
    Manifest m = build(l);
    const auto& tools = l.list(ListKind::kTools).items;
    for (std::size_t i = 0; i < tools.size(); ++i) {
      EXPECT_EQ(to_json(m.tools.items[i]), tools[i]) << e.fixture;
    }
    const auto& resources = l.list(ListKind::kResources).items;
    for (std::size_t i = 0; i < m.resources.items.size(); ++i) {
      EXPECT_EQ(to_json(m.resources.items[i]), resources[i]) << e.fixture;
    }
    const auto& templates = l.list(ListKind::kResourceTemplates).items;
    for (std::size_t i = 0; i < m.resource_templates.items.size(); ++i) {
      EXPECT_EQ(to_json(m.resource_templates.items[i]), templates[i]) << e.fixture;
    }
    const auto& prompts = l.list(ListKind::kPrompts).items;
    for (std::size_t i = 0; i < m.prompts.items.size(); ++i) {
      EXPECT_EQ(to_json(m.prompts.items[i]), prompts[i]) << e.fixture;
    }
    Result<Manifest> back = decode_manifest(encode(m));
    ASSERT_TRUE(back.ok()) << e.fixture << ": " << back.error().message;
    EXPECT_EQ(encode(*back), encode(m));
  }
}

TEST(ManifestRealPeers, EverythingServerDetails) {
  Manifest m = build(listing_from_fixture(fixture("server-everything.json")));
  EXPECT_EQ(m.server.name, "mcp-servers/everything");
  EXPECT_EQ(m.server.title, std::optional<std::string>("Everything Reference Server"));
  ASSERT_TRUE(m.instructions.has_value());
  EXPECT_TRUE(m.capabilities.contains("tools"));
  bool has_output_schema = false, has_annotations = false;
  for (const Tool& t : m.tools.items) {
    has_output_schema = has_output_schema || t.output_schema.has_value();
    has_annotations = has_annotations || t.annotations.has_value();
  }
  EXPECT_TRUE(has_output_schema);
  EXPECT_TRUE(has_annotations);
  bool has_arguments = false;
  for (const Prompt& p : m.prompts.items) has_arguments = has_arguments || p.arguments.has_value();
  EXPECT_TRUE(has_arguments);
}

// Writes the canonical manifests built from the fixtures (and a few synthetic ones covering the
// states and the truncation record) to QUIVER_BINARY_DIR/manifest-fixtures/, where
// tests/schema/validate_manifests.mjs validates them against schema/manifest.schema.json.
TEST(ManifestFixtures, WriteCanonicalManifestsForSchemaValidation) {
  const std::string dir = std::string(QUIVER_BINARY_DIR) + "/manifest-fixtures";
  ::mkdir(dir.c_str(), 0755);
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
  std::vector<std::pair<std::string, Manifest>> out;
  for (const Expected& e : kExpected) {
    std::string name = e.fixture;
    name = name.substr(0, name.size() - 5) + ".manifest.json";
    out.emplace_back(name, build(listing_from_fixture(fixture(e.fixture))));
  }
  Listing failed = small_listing();
  failed.list(ListKind::kResources).state = ListState::kFailed;
  failed.list(ListKind::kResources).error = Error(ErrorCode::kTimeout, "no answer in 3500 ms");
  failed.list(ListKind::kTools).hints = {60000, std::string("private")};
  failed.list(ListKind::kTools).items.push_back({{"name", "broken"}});
  failed.list(ListKind::kTools)
      .items.push_back({{"name", "echo"}, {"inputSchema", Json::object()}});
  out.emplace_back("synthetic-failed-and-issues.manifest.json", build(failed));
  Listing big = big_listing(3000, 200, 100);
  big.instructions = std::string(300000, 'i');
  out.emplace_back("synthetic-truncated.manifest.json", build(big));
  for (const auto& [name, manifest] : out) {
    std::string bytes = encode(manifest);
    ASSERT_FALSE(bytes.empty()) << name;
    std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
    f << bytes;
    f.close();
    ASSERT_TRUE(f.good()) << name;
    EXPECT_EQ(read_file(dir + "/" + name), bytes);
  }
}

}  // namespace
}  // namespace quiver
