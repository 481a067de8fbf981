// The one runtime-settings table: README.md lists exactly its rows, the edge's defaults are its
// defaults, and a value is checked the same way whichever host reads it.
#include "shared/runtime_settings.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "shared/edge_service.h"
#include "shared/json.h"
#include "tests/support/markdown_table.h"

namespace quiver {
namespace {

using testing::table_cells;
using testing::trim;

std::string read_readme() { return testing::read_source_file("README.md"); }

std::string unquote(const std::string& cell) {
  return cell.size() >= 2 && cell.front() == '`' && cell.back() == '`'
             ? cell.substr(1, cell.size() - 2)
             : cell;
}

using Row =
    std::tuple<std::string, std::string, std::string>;  // field ("—": edge only), env, hosts

std::string hosts_text(unsigned hosts) {
  std::string out;
  if (hosts & kRuntimeAgent) out = "agent";
  if (hosts & kRuntimeEdge) out += out.empty() ? "edge" : ", edge";
  return out;
}

TEST(RuntimeSettings, TheReadmeListsExactlyTheTablesRows) {
  const std::string readme = read_readme();
  const std::string header = "| setting | `runtime` field | default | environment | hosts |";
  std::size_t at = readme.find(header);
  ASSERT_NE(at, std::string::npos) << "README.md has no runtime settings table";
  std::stringstream lines(readme.substr(at));
  std::string line;
  std::getline(lines, line);  // header
  std::getline(lines, line);  // | --- |
  std::multiset<Row> documented;
  while (std::getline(lines, line)) {
    std::vector<std::string> c = table_cells(line);
    if (c.empty()) break;
    ASSERT_EQ(c.size(), 5u) << line;
    documented.insert({unquote(c[1]), unquote(c[3]), c[4]});
  }
  std::multiset<Row> table;
  for (const RuntimeSetting& s : runtime_settings()) {
    table.insert({(s.hosts & kRuntimeAgent) ? s.field : "—", s.env, hosts_text(s.hosts)});
  }
  EXPECT_EQ(documented, table);
}

TEST(RuntimeSettings, NamesAreUniqueAndBoundsHoldTheDefaults) {
  std::set<std::string> fields, envs;
  for (const RuntimeSetting& s : runtime_settings()) {
    EXPECT_TRUE(fields.insert(s.field).second) << s.field;
    EXPECT_TRUE(envs.insert(s.env).second) << s.env;
    EXPECT_EQ(runtime_setting_bound_problem(s, s.default_value), "") << s.field;
    EXPECT_NE(s.hosts, 0u) << s.field;
    EXPECT_EQ(find_runtime_setting(s.field), &s);
    EXPECT_EQ(find_runtime_setting_env(s.env), &s);
  }
}

// The edge's settings start from the table's defaults.
TEST(RuntimeSettings, TheEdgeDefaultsAreTheTables) {
  Json env = Json::object({{"QUIVER_TOKEN_KEYS", R"({"k1":"0123456789abcdef0123456789abcdef"})"}});
  Result<EdgeSettings> s = edge_settings_from_env(env.dump());
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto def = [](const char* env) {
    return static_cast<int64_t>(find_runtime_setting_env(env)->default_value);
  };
  EXPECT_EQ(s->discovery.freshness.fresh_ttl_ms, def("QUIVER_FRESH_TTL_MS"));
  EXPECT_EQ(s->discovery.freshness.max_age_ms, def("QUIVER_MAX_AGE_MS"));
  EXPECT_EQ(s->discovery.freshness.min_upstream_ttl_ms, def("QUIVER_MIN_UPSTREAM_TTL_MS"));
  EXPECT_EQ(s->enqueue.window_ms, def("QUIVER_REVALIDATE_WINDOW_MS"));
  EXPECT_EQ(s->l1.ttl_ms, def("QUIVER_L1_TTL_MS"));
  EXPECT_EQ(s->l1.stale_if_error_ms, def("QUIVER_L1_STALE_IF_ERROR_MS"));
  EXPECT_EQ(static_cast<int64_t>(s->l1.max_bytes), def("QUIVER_L1_MAX_BYTES"));
  EXPECT_EQ(s->fail_fast_ms, def("QUIVER_REDIS_FAIL_FAST_MS"));
  EXPECT_EQ(s->mcp_search_mode ? 1 : 0, def("QUIVER_MCP_SEARCH_MODE"));
  EXPECT_EQ(s->call_timeout_ms, def("QUIVER_CALL_TIMEOUT_MS"));
  EXPECT_EQ(s->mcp_keepalive_ms, def("QUIVER_MCP_KEEPALIVE_MS"));
}

// Every edge variable: what the table refuses, the edge refuses (naming the variable, never the
// value); what it accepts at its bounds, the edge accepts unless another rule ties two settings.
TEST(RuntimeSettings, TheEdgeChecksEachValueByTheTable) {
  for (const RuntimeSetting& s : runtime_settings()) {
    if ((s.hosts & kRuntimeEdge) == 0) continue;
    for (const std::string& bad :
         std::vector<std::string>{"-1", "1e3", " 5", "5 ", "0x10", "1.5",
                                  "12345678901234567890123456", runtime_number_text(s.max + 1)}) {
      EXPECT_FALSE(runtime_setting_from_env(s, bad).ok()) << s.env << "=" << bad;
      Json env = Json::object(
          {{"QUIVER_TOKEN_KEYS", R"({"k1":"0123456789abcdef0123456789abcdef"})"}, {s.env, bad}});
      Result<EdgeSettings> r = edge_settings_from_env(env.dump());
      ASSERT_FALSE(r.ok()) << s.env << "=" << bad;
      EXPECT_NE(r.error().message.find(s.env), std::string::npos) << r.error().message;
    }
    if (s.min > 0) {
      EXPECT_FALSE(runtime_setting_from_env(s, runtime_number_text(s.min - 1)).ok()) << s.env;
    }
    EXPECT_TRUE(runtime_setting_from_env(s, runtime_number_text(s.min)).ok()) << s.env;
    EXPECT_TRUE(runtime_setting_from_env(s, runtime_number_text(s.max)).ok()) << s.env;
  }
  // The agent's bounds on fresh_ttl_ms (1 ms to a year), now the edge's too: 0 and more than a
  // year were accepted or refused differently before.
  const RuntimeSetting& fresh = *find_runtime_setting("fresh_ttl_ms");
  EXPECT_EQ(runtime_setting_from_env(fresh, "0").error().message,
            "QUIVER_FRESH_TTL_MS must be greater than 0");
  EXPECT_EQ(runtime_setting_from_env(fresh, "31536000001").error().message,
            "QUIVER_FRESH_TTL_MS must be at most 31536000000");
  EXPECT_EQ(runtime_setting_from_env(fresh, "").error().message, "QUIVER_FRESH_TTL_MS is empty");
  const RuntimeSetting& ratio = *find_runtime_setting("refresh_ahead_ratio");
  EXPECT_EQ(*runtime_setting_from_env(ratio, "0.5"), 0.5);
  EXPECT_FALSE(runtime_setting_from_env(ratio, "0").ok());
  EXPECT_FALSE(runtime_setting_from_env(ratio, "1.01").ok());
}

}  // namespace
}  // namespace quiver
