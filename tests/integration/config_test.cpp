// Configuration: the mcpServers convention plus the quiver section, validated with errors that name
// the field; environment overrides; secrets that never show; config_hash; the deploy/ examples.
#include "native-agent/base/config.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/runtime_settings.h"
#include "tests/support/temp_dir.h"

namespace quiver {
namespace {

using quiver::testing::TempDir;

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(QUIVER_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The parser's inputs, all fakes: an environment, files for {"file": ...}, a working directory.
struct Inputs {
  EnvMap env = {{"HOME", "/home/u"}};
  std::map<std::string, std::string> files;
  std::string working_dir = "/srv/work";

  Result<AgentConfig> parse(const std::string& text) const {
    ConfigSources s;
    s.text = text;
    s.origin = "test.json";
    s.env = env;
    s.working_dir = working_dir;
    s.read_file = [this](const std::string& path) -> Result<std::string> {
      auto it = files.find(path);
      if (it == files.end()) return Error(ErrorCode::kNotFound, "No such file or directory");
      return it->second;
    };
    return parse_config(s);
  }
};

AgentConfig parse_ok(const Inputs& in, const std::string& text) {
  Result<AgentConfig> r = in.parse(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(*r) : AgentConfig{};
}

std::string parse_error(const Inputs& in, const std::string& text) {
  Result<AgentConfig> r = in.parse(text);
  EXPECT_FALSE(r.ok()) << "expected an error for: " << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  return r.error().message;
}

bool has_warning(const AgentConfig& cfg, const std::string& needle) {
  for (const std::string& w : cfg.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

// A Claude Desktop config, unchanged.
constexpr char kClaudeDesktop[] = R"({
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/u/Desktop"],
      "env": {"DEBUG": "1"},
      "alwaysAllow": ["read_file"]
    },
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"X-Team": "blue"}},
    "old": {"command": "old-server", "disabled": true}
  },
  "globalShortcut": "Ctrl+Space"
})";

// ---- the mcpServers convention -----------------------------------------------------------------

TEST(ConfigTest, AClientConfigWorksUnchangedWithDefaults) {
  Inputs in;
  AgentConfig cfg = parse_ok(in, kClaudeDesktop);
  ASSERT_EQ(cfg.connections.size(), 2u);  // `old` is disabled
  const ConnectionConfig* fs = cfg.find_connection("filesystem");
  ASSERT_NE(fs, nullptr);
  EXPECT_EQ(fs->endpoint.transport, TransportKind::kStdio);
  EXPECT_EQ(fs->endpoint.command, "npx");
  EXPECT_EQ(fs->endpoint.args,
            (std::vector<std::string>{"-y", "@modelcontextprotocol/server-filesystem",
                                      "/Users/u/Desktop"}));
  EXPECT_EQ(fs->endpoint.env.at("DEBUG").reveal(), "1");
  EXPECT_EQ(fs->auth, AuthType::kNone);
  EXPECT_EQ(fs->credential_mode, CredentialMode::kShared);
  EXPECT_TRUE(fs->auto_enable_new_capabilities);
  EXPECT_EQ(fs->config_hash.size(), 64u);

  const ConnectionConfig* remote = cfg.find_connection_by_name("remote");
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(remote->endpoint.transport, TransportKind::kHttp);
  EXPECT_EQ(remote->endpoint.url, "https://mcp.example.com/mcp");
  EXPECT_EQ(remote->auth, AuthType::kHeaders);  // an HTTP server with headers
  EXPECT_FALSE(remote->endpoint.allow_private_addresses);

  // Defaults: README's table.
  EXPECT_EQ(cfg.ns, "default");
  EXPECT_FALSE(cfg.redis.has_value());
  EXPECT_EQ(cfg.data_dir, "/home/u/.local/state/quiver");
  EXPECT_EQ(cfg.listen.describe(), "127.0.0.1:8787");
  EXPECT_FALSE(cfg.allow_private_upstreams);
  EXPECT_EQ(cfg.runtime.list_timeout_ms, 3500);
  EXPECT_EQ(cfg.runtime.list_concurrency, 5);
  EXPECT_EQ(cfg.runtime.fresh_ttl_ms, 15 * 60 * 1000);
  EXPECT_EQ(cfg.runtime.max_age_ms, 24 * 3600 * 1000);
  EXPECT_DOUBLE_EQ(cfg.runtime.refresh_ahead_ratio, 0.8);
  EXPECT_EQ(cfg.runtime.max_manifest_bytes, 256 * 1024);
  EXPECT_EQ(cfg.runtime.maintenance_interval_ms, 5 * 60 * 1000);
  EXPECT_EQ(cfg.runtime.maintenance_batch, 20);
  EXPECT_EQ(cfg.runtime.lease_ms, 60000);
  EXPECT_EQ(cfg.runtime.revalidate_concurrency, 3);
  EXPECT_EQ(cfg.runtime.min_upstream_ttl_ms, 60000);  // an upstream's ttlMs floor (README)
  EXPECT_EQ(cfg.runtime.freshness_policy().min_upstream_ttl_ms, 60000);
  EXPECT_EQ(cfg.runtime.retry_max_backoff_ms, 300000);
  EXPECT_EQ(cfg.runtime.startup_timeout_ms, 30000);
  EXPECT_TRUE(cfg.env_overrides.empty());

  // Other clients' fields are tolerated, and said so.
  EXPECT_TRUE(has_warning(cfg, "mcpServers.filesystem.alwaysAllow: not used by Quiver"));
  EXPECT_TRUE(has_warning(cfg, "globalShortcut: not used by Quiver"));
  EXPECT_TRUE(has_warning(cfg, "mcpServers.old: disabled: skipped"));
}

// The agent's runtime controls are the agent rows of the one table (shared/runtime_settings.h):
// the same names and variables, and RuntimeControls starts from the table's defaults.
TEST(ConfigTest, RuntimeControlsAreTheSharedTablesAgentRows) {
  const RuntimeControls r;
  const std::map<std::string, double> defaults = {
      {"list_timeout_ms", r.list_timeout_ms},
      {"request_timeout_ms", r.request_timeout_ms},
      {"call_timeout_ms", r.call_timeout_ms},
      {"startup_timeout_ms", r.startup_timeout_ms},
      {"list_concurrency", r.list_concurrency},
      {"fresh_ttl_ms", r.fresh_ttl_ms},
      {"max_age_ms", r.max_age_ms},
      {"refresh_ahead_ratio", r.refresh_ahead_ratio},
      {"max_manifest_bytes", r.max_manifest_bytes},
      {"max_listing_bytes", r.max_listing_bytes},
      {"maintenance_interval_ms", r.maintenance_interval_ms},
      {"maintenance_batch", r.maintenance_batch},
      {"lease_ms", r.lease_ms},
      {"revalidate_concurrency", r.revalidate_concurrency},
      {"revalidate_window_ms", r.revalidate_window_ms},
      {"store_check_interval_ms", r.store_check_interval_ms},
      {"min_upstream_ttl_ms", r.min_upstream_ttl_ms},
      {"retry_max_backoff_ms", r.retry_max_backoff_ms},
      {"mcp_search_mode", r.mcp_search_mode},
  };
  std::size_t agent_rows = 0;
  for (const RuntimeSetting& s : runtime_settings()) {
    if ((s.hosts & kRuntimeAgent) == 0) continue;
    ++agent_rows;
    ASSERT_EQ(defaults.count(s.field), 1u) << s.field;
    EXPECT_DOUBLE_EQ(defaults.at(s.field), s.default_value) << s.field;
  }
  EXPECT_EQ(agent_rows, defaults.size());
  ASSERT_EQ(kRuntimeControls.size(), defaults.size());
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    const RuntimeSetting* s = find_runtime_setting(info.field);
    ASSERT_NE(s, nullptr) << info.field;
    EXPECT_STREQ(info.env, s->env);
    EXPECT_EQ(info.min, s->min);
    EXPECT_EQ(info.max, s->max);
  }
}

TEST(ConfigTest, TypeSpellingsAndInference) {
  Inputs in;
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {
    "a": {"type": "streamable-http", "url": "http://h.example/mcp"},
    "b": {"type": "http", "url": "https://h.example:8443/x?y=1"},
    "c": {"type": "streamableHttp", "url": "https://[2001:db8::1]/mcp"},
    "d": {"type": "stdio", "command": "srv"},
    "e": {"command": "srv", "url": "ignored-for-stdio", "type": "stdio"}}})");
  ASSERT_EQ(cfg.connections.size(), 5u);
  EXPECT_EQ(cfg.find_connection("a")->endpoint.transport, TransportKind::kHttp);
  EXPECT_EQ(cfg.find_connection("b")->endpoint.transport, TransportKind::kHttp);
  EXPECT_EQ(cfg.find_connection("c")->endpoint.transport, TransportKind::kHttp);
  EXPECT_EQ(cfg.find_connection("d")->endpoint.transport, TransportKind::kStdio);
  EXPECT_EQ(cfg.find_connection("e")->endpoint.transport, TransportKind::kStdio);
  EXPECT_TRUE(has_warning(cfg, "mcpServers.e.url: only for HTTP servers"));
}

TEST(ConfigTest, JsonWithCommentsIsAccepted) {
  Inputs in;
  AgentConfig cfg = parse_ok(in,
                             "// VS Code style\n{\"mcpServers\": {/* x */ \"a\": "
                             "{\"command\": \"srv\"}}}");
  EXPECT_EQ(cfg.connections.size(), 1u);
}

TEST(ConfigTest, EmptyConfigWarnsAboutNoServers) {
  Inputs in;
  AgentConfig cfg = parse_ok(in, "{}");
  EXPECT_TRUE(cfg.connections.empty());
  EXPECT_TRUE(has_warning(cfg, "mcpServers: no servers configured"));
}

// ---- connection ids ----------------------------------------------------------------------------

TEST(ConfigTest, ServerNamesMapToConnectionIdsDeterministically) {
  EXPECT_EQ(*connection_id_for_name("github"), "github");
  EXPECT_EQ(*connection_id_for_name("a.b_c-1"), "a.b_c-1");
  const std::string mapped = *connection_id_for_name("My Server");
  EXPECT_EQ(mapped.rfind("My-Server-", 0), 0u) << mapped;
  EXPECT_EQ(mapped.size(), std::string("My-Server-").size() + 8);
  EXPECT_EQ(*connection_id_for_name("My Server"), mapped);  // deterministic
  EXPECT_NE(*connection_id_for_name("a b"), *connection_id_for_name("a:b"));
  EXPECT_TRUE(validate_connection_id(*connection_id_for_name("日本")).ok());
  EXPECT_TRUE(validate_connection_id(*connection_id_for_name(std::string(300, 'x'))).ok());
  EXPECT_TRUE(validate_connection_id(*connection_id_for_name(std::string(300, ' '))).ok());
  EXPECT_FALSE(connection_id_for_name("").ok());

  Inputs in;
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {"My Server": {"command": "srv"},
      "gh": {"url": "https://h.example/"}},
      "quiver": {"connections": {"gh": {"id": "github"}}}})");
  EXPECT_NE(cfg.find_connection(mapped), nullptr);
  EXPECT_EQ(cfg.find_connection(mapped)->name, "My Server");
  EXPECT_NE(cfg.find_connection("github"), nullptr);
  EXPECT_EQ(cfg.find_connection("gh"), nullptr);
}

// ---- validation: one row per error path --------------------------------------------------------

// quiver.oauth.key's value in tests: 32 bytes as hex.
constexpr char kOAuthKeyHex[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

struct ErrorCase {
  const char* what;
  std::string config;
  std::string expected;  // a substring of the message (the field path and the problem)
  EnvMap env = {};
  std::map<std::string, std::string> files = {};
};

std::string server(const std::string& entry) { return R"({"mcpServers": {"s": )" + entry + "}}"; }
std::string with_quiver(const std::string& quiver, const std::string& servers =
                                                       R"("s": {"command": "srv"},
    "h": {"url": "https://h.example/mcp"})") {
  return R"({"mcpServers": {)" + servers + R"(}, "quiver": )" + quiver + "}";
}
std::string conn(const std::string& settings, const std::string& servers =
                                                  R"("h": {"url": "https://h.example/mcp"},
    "s": {"command": "srv"})") {
  return with_quiver(R"({"members": ["alice", "bob"], "grants": {"*": ["*"]},
    "connections": )" + settings +
                         "}",
                     servers);
}

std::vector<ErrorCase> error_cases() {
  const std::string key32(32, 'k');
  return {
      // the file
      {"malformed", "{\"mcpServers\": {", "test.json: malformed JSON at line 1, column 17"},
      // 200,000 levels (400 KB, under the 1 MiB file bound): refused by the parse, not built.
      {"deep",
       R"({"mcpServers": {}, "quiver": {"runtime": )" + std::string(200000, '[') +
           std::string(200000, ']') + "}}",
       "test.json: JSON nested deeper than 128 levels (the limit)"},
      {"deep in a comment does not count",
       "{\"mcpServers\": {\"s\": /* " + std::string(1000, '[') + " */ []}}",
       "mcpServers.s: must be an object, not an array"},
      {"top array", "[]", "test.json: the top level must be a JSON object, not an array"},
      {"servers type", R"({"mcpServers": []})", "mcpServers: must be an object, not an array"},
      {"entry type", server("\"srv\""), "mcpServers.s: must be an object, not a string"},
      {"no transport", server("{}"), "mcpServers.s: needs `command` (stdio) or `url`"},
      {"both", server(R"({"command": "a", "url": "https://h.example/"})"),
       "mcpServers.s: has both `command` and `url`"},
      {"sse", server(R"({"type": "sse", "url": "https://h.example/sse"})"),
       "mcpServers.s.type: the legacy HTTP+SSE transport is not supported"},
      {"bad type", server(R"({"type": "websocket", "url": "wss://h.example/"})"),
       "mcpServers.s.type: `websocket` is not stdio, http or streamable-http"},
      {"stdio no command", server(R"({"type": "stdio", "url": "https://h.example/"})"),
       "mcpServers.s: type stdio needs `command`"},
      {"http no url", server(R"({"type": "http", "command": "x"})"),
       "mcpServers.s: type http needs `url`"},
      {"command type", server(R"({"command": 5})"), "mcpServers.s.command: must be a string"},
      {"command empty", server(R"({"command": ""})"), "mcpServers.s.command: is empty"},
      {"disabled type", server(R"({"command": "x", "disabled": "yes"})"),
       "mcpServers.s.disabled: must be true or false"},
      {"args type", server(R"({"command": "x", "args": "a b"})"),
       "mcpServers.s.args: must be an array of strings"},
      {"arg type", server(R"({"command": "x", "args": ["a", 1]})"),
       "mcpServers.s.args[1]: must be a string, not a number"},
      {"env type", server(R"({"command": "x", "env": ["A=1"]})"),
       "mcpServers.s.env: must be an object of strings"},
      {"env value", server(R"({"command": "x", "env": {"A": 1}})"),
       "mcpServers.s.env.A: must be a string"},
      {"env name", server(R"({"command": "x", "env": {"A=B": "1"}})"),
       "mcpServers.s.env.A=B: an environment variable name may not contain `=`"},
      {"cwd type", server(R"({"command": "x", "cwd": 1})"), "mcpServers.s.cwd: must be a string"},
      {"url scheme", server(R"({"url": "ftp://h.example/"})"),
       "mcpServers.s.url: not a valid http(s) URL: scheme 'ftp' is not http or https"},
      {"url type", server(R"({"url": 5})"), "mcpServers.s.url: must be a string"},
      {"url space", server(R"({"url": "https://h.example/a b"})"),
       "mcpServers.s.url: not a valid http(s) URL: it contains whitespace"},
      {"url userinfo", server(R"({"url": "https://u:p@h.example/"})"),
       "mcpServers.s.url: not a valid http(s) URL: user information"},
      {"url port", server(R"({"url": "https://h.example:99999/"})"),
       "mcpServers.s.url: not a valid http(s) URL: port must be 1..65535"},
      {"url host", server(R"({"url": "https:///mcp"})"),
       "mcpServers.s.url: not a valid http(s) URL: no host"},
      {"headers type", server(R"({"url": "https://h.example/", "headers": ["A: b"]})"),
       "mcpServers.s.headers: must be an object of strings"},
      {"header value type", server(R"({"url": "https://h.example/", "headers": {"A": true}})"),
       "mcpServers.s.headers.A: must be a string"},
      {"header name", server(R"({"url": "https://h.example/", "headers": {"A B": "c"}})"),
       "mcpServers.s.headers.A B: not a valid HTTP header name"},
      {"header reserved", server(R"({"url": "https://h.example/", "headers": {"Accept": "x"}})"),
       "mcpServers.s.headers.Accept: set by the transport"},
      {"header twice",
       server(R"({"url": "https://h.example/", "headers": {"X-A": "1", "x-a": "2"}})"),
       "the same header is set twice"},
      {"header newline",
       server(R"({"url": "https://h.example/", "headers": {"X-A": "${NL}"}})"),
       "mcpServers.s.headers.X-A: the value contains a line break",
       {{"NL", "a\r\nInjected: 1"}}},
      {"missing var", server(R"({"url": "https://h.example/", "headers":
          {"Authorization": "Bearer ${GITHUB_TOKEN}"}})"),
       "mcpServers.s.headers.Authorization: references ${GITHUB_TOKEN}, which is not set"},
      {"missing var in args", server(R"({"command": "x", "args": ["${NOPE}"]})"),
       "mcpServers.s.args[0]: references ${NOPE}, which is not set"},
      {"missing var in url", server(R"({"url": "https://${HOST}/mcp"})"),
       "mcpServers.s.url: references ${HOST}, which is not set"},
      {"unterminated", server(R"({"command": "x", "env": {"A": "${OPEN"}})"),
       "mcpServers.s.env.A: a `${` at position 0 is not closed"},
      {"bad var name", server(R"({"command": "x", "env": {"A": "${1X}"}})"),
       "mcpServers.s.env.A: the `${...}` at position 0 does not name an environment variable"},
      // the quiver section
      {"quiver type", R"({"quiver": []})", "quiver: must be an object, not an array"},
      {"quiver typo", with_quiver(R"({"namepsace": "x"})"),
       "quiver.namepsace: unknown setting (did you mean `namespace`?)"},
      {"quiver unknown", with_quiver(R"({"colour": "blue"})"), "quiver.colour: unknown setting"},
      {"namespace", with_quiver(R"({"namespace": "a:b"})"),
       "quiver.namespace: namespace has a character outside"},
      {"namespace type", with_quiver(R"({"namespace": 1})"), "quiver.namespace: must be a string"},
      {"data_dir empty", with_quiver(R"({"data_dir": ""})"), "quiver.data_dir: is empty"},
      {"data_dir var", with_quiver(R"({"data_dir": "${STATE}/q"})"),
       "quiver.data_dir: references ${STATE}, which is not set"},
      {"listen", with_quiver(R"({"listen": "localhost"})"),
       "quiver.listen: not a listen address (host:port): a port is required"},
      {"listen port", with_quiver(R"({"listen": "127.0.0.1:http"})"),
       "quiver.listen: not a listen address (host:port): the port"},
      {"listen v6", with_quiver(R"({"listen": "::1:8787"})"),
       "an IPv6 address must be written in brackets"},
      {"private type", with_quiver(R"({"allow_private_upstreams": "yes"})"),
       "quiver.allow_private_upstreams: must be true or false"},
      {"redis scheme", with_quiver(R"({"redis": "http://h:6379"})"),
       "quiver.redis: not a Redis URL: it must start with redis://, rediss://, redis+cluster:// "
       "or rediss+cluster://"},
      {"redis type", with_quiver(R"({"redis": {"host": "h"}})"),
       "quiver.redis: must be a redis://, rediss://, redis+cluster:// or rediss+cluster:// URL"},
      {"redis hosts", with_quiver(R"({"redis": "redis://h1:7000,h2:7000"})"),
       "quiver.redis: not a Redis URL: several hosts name a Redis Cluster: use redis+cluster://"},
      {"redis cluster db", with_quiver(R"({"redis": "redis+cluster://h1:7000,h2:7000/2"})"),
       "quiver.redis: not a Redis URL: a Redis Cluster has only database 0 (it refuses SELECT)"},
      {"redis cluster seed", with_quiver(R"({"redis": "redis+cluster://h1:7000,:7001"})"),
       "quiver.redis: not a Redis URL: a seed: the host is empty"},
      {"redis password var", with_quiver(R"({"redis": "redis://:${REDIS_PW}@h:6379/0"})"),
       "quiver.redis: the password references ${REDIS_PW}, which is not set"},
      {"redis port", with_quiver(R"({"redis": "redis://h:0"})"), "quiver.redis: not a Redis URL"},
      {"redis db", with_quiver(R"({"redis": "redis://h:6379/x"})"),
       "quiver.redis: not a Redis URL: the database"},
      {"redis query", with_quiver(R"({"redis": "redis://h:6379/0?ssl=true"})"),
       "quiver.redis: not a Redis URL: query parameters"},
      {"redis host", with_quiver(R"({"redis": "redis://:pw@/0"})"),
       "quiver.redis: not a Redis URL: the host is empty"},
      // runtime
      {"runtime type", with_quiver(R"({"runtime": 5})"), "quiver.runtime: must be an object"},
      {"runtime typo", with_quiver(R"({"runtime": {"list_timeout": 100}})"),
       "quiver.runtime.list_timeout: unknown setting (did you mean `list_timeout_ms`?)"},
      {"runtime string", with_quiver(R"({"runtime": {"lease_ms": "60000"}})"),
       "quiver.runtime.lease_ms: must be a number, not a string"},
      {"runtime fraction", with_quiver(R"({"runtime": {"list_concurrency": 2.5}})"),
       "quiver.runtime.list_concurrency: must be a whole number"},
      {"runtime zero", with_quiver(R"({"runtime": {"maintenance_batch": 0}})"),
       "quiver.runtime.maintenance_batch: must be greater than 0"},
      {"runtime negative", with_quiver(R"({"runtime": {"fresh_ttl_ms": -5}})"),
       "quiver.runtime.fresh_ttl_ms: must not be negative"},
      {"runtime max", with_quiver(R"({"runtime": {"list_concurrency": 100000}})"),
       "quiver.runtime.list_concurrency: must be at most 1024"},
      {"runtime bytes min", with_quiver(R"({"runtime": {"max_manifest_bytes": 10}})"),
       "quiver.runtime.max_manifest_bytes: must be at least 1024"},
      {"ratio zero", with_quiver(R"({"runtime": {"refresh_ahead_ratio": 0}})"),
       "quiver.runtime.refresh_ahead_ratio: must be greater than 0 and at most 1"},
      {"ratio big", with_quiver(R"({"runtime": {"refresh_ahead_ratio": 1.5}})"),
       "quiver.runtime.refresh_ahead_ratio: must be greater than 0 and at most 1"},
      {"max age", with_quiver(R"({"runtime": {"max_age_ms": 1000}})"),
       "quiver.runtime.max_age_ms: 1000 is shorter than the fresh TTL 900000 "
       "(runtime.fresh_ttl_ms (default))"},
      {"lease", with_quiver(R"({"runtime": {"lease_ms": 3500}})"),
       "quiver.runtime.lease_ms: 3500 must be longer than the listing deadline 3500"},
      // connections
      {"connections type", with_quiver(R"({"connections": []})"),
       "quiver.connections: must be an object"},
      {"connection unknown server", with_quiver(R"({"connections": {"github": {}}})"),
       "quiver.connections.github: no server of that name in mcpServers"},
      {"connection typo server", with_quiver(R"({"connections": {"hh": {}}})"),
       "quiver.connections.hh: no server of that name in mcpServers (did you mean `h`?)"},
      {"connection type", with_quiver(R"({"connections": {"h": true}})"),
       "quiver.connections.h: must be an object"},
      {"connection typo", with_quiver(R"({"connections": {"h": {"credential_mod": "shared"}}})"),
       "quiver.connections.h.credential_mod: unknown setting (did you mean `credential_mode`?)"},
      {"connection id", with_quiver(R"({"connections": {"h": {"id": "a/b"}}})"),
       "quiver.connections.h.id: connection id has a character outside"},
      {"id collision", with_quiver(R"({"connections": {"h": {"id": "s"}}})"),
       "its connection id `s` is also the id of server"},
      {"mode", with_quiver(R"({"connections": {"h": {"credential_mode": "team"}}})"),
       "quiver.connections.h.credential_mode: `team` is not shared or per_member"},
      {"auth", with_quiver(R"({"connections": {"h": {"auth": "basic"}}})"),
       "quiver.connections.h.auth: `basic` is not none, bearer, api_key, headers or oauth"},
      {"auth type", with_quiver(R"({"connections": {"h": {"auth": 1}}})"),
       "quiver.connections.h.auth: must be a string"},
      // oauth (issue 12)
      {"oauth without key", with_quiver(R"({"connections": {"h": {"auth": "oauth"}}})"),
       "quiver.connections.h.auth: oauth needs quiver.oauth.key"},
      {"oauth stdio",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"s": {"auth": "oauth"}}})"),
       "quiver.connections.s.auth: oauth is only for HTTP servers",
       {{"K", kOAuthKeyHex}}},
      {"oauth key short",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}})"),
       "quiver.oauth.key: the OAuth token key must be 32 bytes as 64 hex digits or base64",
       {{"K", "00ff"}}},
      {"oauth key inline", with_quiver(R"({"oauth": {"key": "00ff"}})"),
       "quiver.oauth.key: an inline secret is not allowed here"},
      {"oauth agent typo", with_quiver(R"({"oauth": {"redirect": "x"}})"),
       "quiver.oauth.redirect: unknown setting (did you mean `redirect_uri`?)"},
      {"oauth redirect", with_quiver(R"({"oauth": {"redirect_uri": "callback"}})"),
       "quiver.oauth.redirect_uri: "},
      {"oauth refresh ahead", with_quiver(R"({"oauth": {"refresh_ahead_ms": -1}})"),
       "quiver.oauth.refresh_ahead_ms: must be a whole number of milliseconds, 0 to 86400000"},
      {"oauth settings without oauth",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "K"},
          "oauth": {}}}})"),
       "quiver.connections.h.oauth: only with auth oauth",
       {{"K", kOAuthKeyHex}}},
      {"oauth credentials",
       conn(R"({"h": {"auth": "oauth", "credential_mode": "per_member",
          "credentials": {"alice": {"env": "K"}}}})"),
       "quiver.connections.h.credentials: not with auth oauth",
       {{"K", kOAuthKeyHex}}},
      {"oauth typo",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"scope": ["a"]}}}})"),
       "quiver.connections.h.oauth.scope: unknown setting (did you mean `scopes`?)",
       {{"K", kOAuthKeyHex}}},
      {"oauth grant",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"grant": "password"}}}})"),
       "quiver.connections.h.oauth.grant: `password` is not authorization_code or "
       "client_credentials",
       {{"K", kOAuthKeyHex}}},
      {"oauth client credentials needs secret",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"grant": "client_credentials", "client_id": "q"}}}})"),
       "quiver.connections.h.oauth.grant: client_credentials needs client_id and client_secret "
       "or private_key",
       {{"K", kOAuthKeyHex}}},
      {"oauth client credentials per member",
       conn(R"({"h": {"auth": "oauth", "credential_mode": "per_member", "oauth": {
          "grant": "client_credentials", "client_id": "q", "client_secret": {"env": "K"}}}})"),
       "quiver.connections.h.oauth.grant: client_credentials gets one token for the connection",
       {{"K", kOAuthKeyHex}}},
      {"oauth secret inline",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"client_id": "q", "client_secret": "s3cr3t"}}}})"),
       "quiver.connections.h.oauth.client_secret: an inline secret is not allowed here",
       {{"K", kOAuthKeyHex}}},
      {"oauth secret without client id",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"client_secret": {"env": "K"}}}}})"),
       "quiver.connections.h.oauth.client_secret: needs client_id",
       {{"K", kOAuthKeyHex}}},
      {"oauth auth method",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"token_endpoint_auth_method": "tls_client_auth"}}}})"),
       "quiver.connections.h.oauth.token_endpoint_auth_method: `tls_client_auth` is not",
       {{"K", kOAuthKeyHex}}},
      {"oauth private_key_jwt needs key",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"client_id": "q", "token_endpoint_auth_method": "private_key_jwt"}}}})"),
       "quiver.connections.h.oauth.token_endpoint_auth_method: private_key_jwt needs private_key",
       {{"K", kOAuthKeyHex}}},
      {"oauth key not pem",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"client_id": "q", "private_key": {"env": "K"}}}}})"),
       "quiver.connections.h.oauth.private_key: is not a PEM private key",
       {{"K", kOAuthKeyHex}}},
      {"oauth scopes",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"scopes": ["read write"]}}}})"),
       "quiver.connections.h.oauth.scopes[0]: must be a scope",
       {{"K", kOAuthKeyHex}}},
      {"oauth cimd http",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth",
          "oauth": {"client_id_metadata_url": "http://q.example/client.json"}}}})"),
       "quiver.connections.h.oauth.client_id_metadata_url: must be an https URL",
       {{"K", kOAuthKeyHex}}},
      {"oauth header conflict",
       with_quiver(R"({"oauth": {"key": {"env": "K"}}, "connections": {"h": {"auth": "oauth"}}})",
                   R"("h": {"url": "https://h.example/mcp", "headers": {"Authorization": "x"}})"),
       "mcpServers.h.headers.Authorization: conflicts with auth oauth",
       {{"K", kOAuthKeyHex}}},
      {"version", with_quiver(R"({"connections": {"h": {"credential_version": -1}}})"),
       "quiver.connections.h.credential_version: must be a string or a non-negative"},
      {"auto enable", with_quiver(R"({"connections": {"h": {"auto_enable_new_capabilities": 1}}})"),
       "quiver.connections.h.auto_enable_new_capabilities: must be true or false"},
      {"list timeout", with_quiver(R"({"connections": {"h": {"list_timeout_ms": 0}}})"),
       "quiver.connections.h.list_timeout_ms: must be a whole number of milliseconds, 1 to 600000"},
      {"startup timeout", with_quiver(R"({"connections": {"h": {"startup_timeout_ms": "30s"}}})"),
       "quiver.connections.h.startup_timeout_ms: must be a whole number of milliseconds, 0 to"},
      {"private on stdio",
       with_quiver(R"({"connections": {"s": {"allow_private_addresses": true}}})"),
       "quiver.connections.s.allow_private_addresses: only for HTTP servers"},
      {"bearer stdio", with_quiver(R"({"connections": {"s": {"auth": "bearer"}}})"),
       "quiver.connections.s.auth: bearer needs an HTTP server"},
      {"headers stdio", with_quiver(R"({"connections": {"s": {"auth": "headers"}}})"),
       "quiver.connections.s.auth: headers needs an HTTP server"},
      {"headers per member",
       with_quiver(
           R"({"connections": {"h": {"auth": "headers", "credential_mode": "per_member"}}})"),
       "quiver.connections.h.auth: headers (the server's own headers) cannot be per member"},
      {"per member none",
       with_quiver(R"({"connections": {"h": {"credential_mode": "per_member"}}})"),
       "quiver.connections.h.credential_mode: per_member needs auth bearer, api_key or oauth"},
      {"credential with none",
       with_quiver(R"({"connections": {"s": {"credential": {"env": "X"}}}})"),
       "quiver.connections.s.credential: only with auth bearer or api_key"},
      {"credentials with none", with_quiver(R"({"connections": {"s": {"credentials": {}}}})"),
       "quiver.connections.s.credentials: only with auth bearer or api_key"},
      {"shared no credential", with_quiver(R"({"connections": {"h": {"auth": "bearer"}}})"),
       "quiver.connections.h.credential: required with auth bearer (shared mode)"},
      {"shared with credentials",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "T"},
          "credentials": {"alice": {"env": "T"}}}}})"),
       "quiver.connections.h.credentials: only with credential_mode per_member",
       {{"T", "token-value"}}},
      {"per member no credentials",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member"}})"),
       "quiver.connections.h.credentials: required with credential_mode per_member"},
      {"per member credential",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member",
          "credential": {"env": "T"}, "credentials": {}}})"),
       "quiver.connections.h.credential: a per_member connection takes `credentials`",
       {{"T", "token-value"}}},
      {"credentials type",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member", "credentials": []}})"),
       "quiver.connections.h.credentials: must be an object"},
      {"credential member id",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member",
          "credentials": {"a/b": {"env": "T"}}}})"),
       "quiver.connections.h.credentials.a/b: member id has a character outside",
       {{"T", "token-value"}}},
      {"missing member credential",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member",
          "credentials": {"alice": {"env": "T"}}}})"),
       "quiver.connections.h.credentials: no credential for member `bob`, who is granted this "
       "connection",
       {{"T", "token-value"}}},
      {"credential for unlisted member",
       conn(R"({"h": {"auth": "bearer", "credential_mode": "per_member",
          "credentials": {"alice": {"env": "T"}, "bob": {"env": "T"}, "eve": {"env": "T"}}}})"),
       "quiver.connections.h.credentials.eve: `eve` is not in quiver.members",
       {{"T", "token-value"}}},
      {"inline secret",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": "ghp_inline"}}})"),
       "quiver.connections.h.credential: an inline secret is not allowed here"},
      {"secret shape",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"vault": "x"}}}})"),
       "quiver.connections.h.credential: must be a secret reference"},
      {"secret two sources", with_quiver(R"({"connections": {"h": {"auth": "bearer",
          "credential": {"env": "T", "file": "/f"}}}})"),
       "quiver.connections.h.credential: must be a secret reference"},
      {"secret env name",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "A-B"}}}})"),
       "quiver.connections.h.credential.env: must be an environment variable name"},
      {"secret env unset",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "TOKEN"}}}})"),
       "quiver.connections.h.credential: environment variable TOKEN is not set"},
      {"secret env empty",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "TOKEN"}}}})"),
       "quiver.connections.h.credential: environment variable TOKEN is empty",
       {{"TOKEN", ""}}},
      {"secret template empty",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": "${TOKEN}"}}})"),
       "quiver.connections.h.credential: the secret is empty",
       {{"TOKEN", ""}}},
      {"secret file missing", with_quiver(R"({"connections": {"h": {"auth": "bearer",
          "credential": {"file": "/run/secrets/t"}}}})"),
       "quiver.connections.h.credential: cannot read file `/run/secrets/t`: No such file"},
      {"secret file relative",
       with_quiver(
           R"({"connections": {"h": {"auth": "bearer", "credential": {"file": "t.key"}}}})"),
       "cannot read file `/srv/work/t.key`"},
      {"secret file empty",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"file": "/t"}}}})"),
       "quiver.connections.h.credential: file `/t` is empty",
       {},
       {{"/t", "\n"}}},
      {"secret file large",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"file": "/t"}}}})"),
       "quiver.connections.h.credential: file `/t` is larger than 65536 bytes",
       {},
       {{"/t", std::string(70000, 'x')}}},
      {"secret file path type",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"file": 3}}}})"),
       "quiver.connections.h.credential.file: must be a file path"},
      {"credential newline",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"file": "/t"}}}})"),
       "quiver.connections.h.credential: the credential contains a line break",
       {},
       {{"/t", "abc\ndef\n"}}},
      {"api key stdio",
       with_quiver(R"({"connections": {"s": {"auth": "api_key", "credential": {"env": "T"}}}})"),
       "quiver.connections.s.credential_env: required with auth api_key on a stdio server",
       {{"T", "token-value"}}},
      {"api key header on bearer",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "api_key_header": "X-K",
          "credential": {"env": "T"}}}})"),
       "quiver.connections.h.api_key_header: only with auth api_key on an HTTP server",
       {{"T", "token-value"}}},
      {"api key header name",
       with_quiver(R"({"connections": {"h": {"auth": "api_key", "api_key_header": "X K",
          "credential": {"env": "T"}}}})"),
       "quiver.connections.h.api_key_header: not a valid HTTP header name",
       {{"T", "token-value"}}},
      {"credential env on http",
       with_quiver(R"({"connections": {"h": {"auth": "api_key", "credential_env": "K",
          "credential": {"env": "T"}}}})"),
       "quiver.connections.h.credential_env: only with auth api_key on a stdio server",
       {{"T", "token-value"}}},
      {"credential env conflict",
       with_quiver(R"({"connections": {"s": {"auth": "api_key", "credential_env": "K",
          "credential": {"env": "T"}}}})",
                   R"("s": {"command": "srv", "env": {"K": "x"}})"),
       "mcpServers.s.env.K: conflicts with credential_env",
       {{"T", "token-value"}}},
      {"bearer header conflict",
       with_quiver(R"({"connections": {"h": {"auth": "bearer", "credential": {"env": "T"}}}})",
                   R"("h": {"url": "https://h.example/", "headers": {"authorization": "x"}})"),
       "mcpServers.h.headers.authorization: conflicts with auth bearer",
       {{"T", "token-value"}}},
      {"api key header conflict",
       with_quiver(R"({"connections": {"h": {"auth": "api_key", "credential": {"env": "T"}}}})",
                   R"("h": {"url": "https://h.example/", "headers": {"x-api-key": "x"}})"),
       "mcpServers.h.headers.x-api-key: conflicts with auth api_key",
       {{"T", "token-value"}}},
      // members and grants
      {"members type", with_quiver(R"({"members": "alice"})"),
       "quiver.members: must be an array of member ids"},
      {"member type", with_quiver(R"({"members": [1]})"), "quiver.members[0]: must be a string"},
      {"member id", with_quiver(R"({"members": ["a b"]})"),
       "quiver.members[0]: member id has a character outside"},
      {"member twice", with_quiver(R"({"members": ["a", "a"]})"),
       "quiver.members[1]: `a` is listed twice"},
      {"operators type", with_quiver(R"({"operators": "alice"})"),
       "quiver.operators: must be an array of member ids"},
      {"operator id", with_quiver(R"({"operators": ["a b"]})"),
       "quiver.operators[0]: member id has a character outside"},
      {"operator unlisted", with_quiver(R"({"members": ["alice"], "operators": ["bob"]})"),
       "quiver.operators[0]: `bob` is not in quiver.members"},
      {"grants type", with_quiver(R"({"grants": ["alice"]})"), "quiver.grants: must be an object"},
      {"grant member id", with_quiver(R"({"grants": {"a b": ["s"]}})"),
       "quiver.grants.a b: member id has a character outside"},
      {"grant unlisted", with_quiver(R"({"members": ["alice"], "grants": {"bob": ["s"]}})"),
       "quiver.grants.bob: `bob` is not in quiver.members"},
      {"grant list type", with_quiver(R"({"grants": {"alice": "s"}})"),
       "quiver.grants.alice: must be an array of server names"},
      {"grant entry type", with_quiver(R"({"grants": {"alice": [1]}})"),
       "quiver.grants.alice[0]: must be a server name"},
      {"grant unknown server", with_quiver(R"({"grants": {"alice": ["s", "github"]}})"),
       "quiver.grants.alice[1]: no server named `github` in mcpServers"},
      // the agent's own secrets
      {"token keys type", with_quiver(R"({"caller_token_keys": ["k"]})"),
       "quiver.caller_token_keys: must be an object"},
      {"token kid",
       with_quiver(R"({"caller_token_keys": {"a b": {"env": "K"}}})"),
       "quiver.caller_token_keys.a b: a key id has a character outside",
       {{"K", key32}}},
      {"token key short",
       with_quiver(R"({"caller_token_keys": {"k1": {"env": "K"}}})"),
       "quiver.caller_token_keys.k1: the key is 5 bytes; HMAC-SHA256 token keys need at least 32",
       {{"K", "short"}}},
      {"token key inline", with_quiver(R"({"caller_token_keys": {"k1": "literal"}})"),
       "quiver.caller_token_keys.k1: an inline secret is not allowed here"},
      {"signing kid",
       with_quiver(R"({"caller_token_keys": {"k1": {"env": "K"}},
          "caller_token_signing_kid": "k2"})"),
       "quiver.caller_token_signing_kid: `k2` is not a key id in caller_token_keys",
       {{"K", key32}}},
      {"webhooks type", with_quiver(R"({"webhook_secrets": "x"})"),
       "quiver.webhook_secrets: must be an object"},
      {"webhook name",
       with_quiver(R"({"webhook_secrets": {"": {"env": "W"}}})"),
       "quiver.webhook_secrets.: a webhook secret name must be 1 to 64 characters",
       {{"W", key32}}},
      {"webhook unset", with_quiver(R"({"webhook_secrets": {"ci": {"env": "W"}}})"),
       "quiver.webhook_secrets.ci: environment variable W is not set"},
  };
}

TEST(ConfigTest, EveryValidationErrorNamesTheField) {
  for (const ErrorCase& c : error_cases()) {
    SCOPED_TRACE(c.what);
    Inputs in;
    for (const auto& [k, v] : c.env) in.env[k] = v;
    in.files = c.files;
    const std::string message = parse_error(in, c.config);
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << "expected: " << c.expected << "\nactual:   " << message;
  }
}

TEST(ConfigTest, EveryProblemIsReportedOnItsOwnLine) {
  Inputs in;
  const std::string message = parse_error(in, R"({"mcpServers": {
      "a": {"url": "ftp://x"}, "b": {"command": 1}},
      "quiver": {"namespase": "x", "runtime": {"lease_ms": 0}}})");
  EXPECT_NE(message.find("mcpServers.a.url: not a valid http(s) URL"), std::string::npos);
  EXPECT_NE(message.find("mcpServers.b.command: must be a string"), std::string::npos);
  EXPECT_NE(message.find("quiver.namespase: unknown setting"), std::string::npos);
  EXPECT_NE(message.find("quiver.runtime.lease_ms: must be greater than 0"), std::string::npos);
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 3) << message;
}

TEST(ConfigTest, ABrokenServerIsReportedOnce) {
  Inputs in;
  const std::string message = parse_error(in, R"({"mcpServers": {
      "old": {"type": "sse", "url": "https://h.example/sse"}},
      "quiver": {"grants": {"alice": ["old"]}, "connections": {"old": {"auth": "none"}}}})");
  EXPECT_EQ(message,
            "mcpServers.old.type: the legacy HTTP+SSE transport is not supported; use "
            "streamable-http (or set \"disabled\": true)");
}

TEST(ConfigTest, OversizedConfigIsRefused) {
  Inputs in;
  Result<AgentConfig> r = in.parse(std::string(kMaxConfigBytes + 1, ' '));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kTooLarge);
}

TEST(ConfigTest, DisabledServersAndTheirSettingsAreSkipped) {
  Inputs in;
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {
      "off": {"type": "sse", "url": "https://h.example/sse", "disabled": true},
      "on": {"command": "srv"}},
      "quiver": {"grants": {"alice": ["on", "off"]},
                 "connections": {"off": {"auth": "bearer"}}}})");
  EXPECT_EQ(cfg.connections.size(), 1u);
  EXPECT_TRUE(has_warning(cfg, "quiver.grants.alice[1]: server `off` is disabled"));
  EXPECT_EQ(cfg.grants.at("alice"), (std::set<std::string>{"on"}));
}

// ---- `${}` references and the data directory ---------------------------------------------------

TEST(ConfigTest, ReferencesResolveFromTheEnvironment) {
  Inputs in;
  in.env["TOKEN"] = "t0k3n";
  in.env["BIN"] = "/opt/bin";
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {
      "s": {"command": "${BIN}/srv", "args": ["--x=${env:BIN}", "${UNSET:-fallback}", "$${LIT}"],
            "env": {"K": "${TOKEN}", "F": "${QUIVER_DATA_DIR}/f.json"}, "cwd": "sub"},
      "h": {"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}},
      "quiver": {"data_dir": "state"}})");
  const ConnectionConfig* s = cfg.find_connection("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->endpoint.command, "/opt/bin/srv");
  EXPECT_EQ(s->endpoint.args, (std::vector<std::string>{"--x=/opt/bin", "fallback", "${LIT}"}));
  EXPECT_EQ(s->written_command, "${BIN}/srv");
  EXPECT_EQ(s->endpoint.env.at("K").reveal(), "t0k3n");
  EXPECT_EQ(s->endpoint.env.at("K").source(), "env:TOKEN");
  EXPECT_EQ(s->endpoint.env.at("F").reveal(),
            "/srv/work/state/f.json");  // relative data_dir: working dir
  EXPECT_EQ(s->endpoint.cwd, "/srv/work/sub");
  EXPECT_EQ(cfg.data_dir, "/srv/work/state");
  EXPECT_EQ(cfg.find_connection("h")->endpoint.headers.at("Authorization").reveal(),
            "Bearer t0k3n");
}

TEST(ConfigTest, DataDirDefaultsFollowXdgThenHome) {
  Inputs in;
  in.env = {{"XDG_STATE_HOME", "/xdg"}, {"HOME", "/home/u"}};
  EXPECT_EQ(parse_ok(in, "{}").data_dir, "/xdg/quiver");
  in.env = {};
  EXPECT_EQ(parse_ok(in, "{}").data_dir, "/srv/work/quiver-data");
  in.env = {{"QUIVER_DATA_DIR", "/data/"}};
  EXPECT_EQ(parse_ok(in, R"({"quiver": {"data_dir": "/ignored"}})").data_dir, "/data");
}

// ---- environment overrides ---------------------------------------------------------------------

TEST(ConfigTest, EveryRuntimeControlHasAnEnvironmentOverride) {
  Inputs in;
  const std::string file = R"({"quiver": {"runtime": {
      "list_timeout_ms": 1000, "list_concurrency": 2, "fresh_ttl_ms": 5000, "max_age_ms": 9000,
      "refresh_ahead_ratio": 0.5, "max_manifest_bytes": 2048, "maintenance_interval_ms": 100,
      "maintenance_batch": 7, "lease_ms": 2000, "revalidate_concurrency": 1,
      "request_timeout_ms": 900, "call_timeout_ms": 15000}}})";
  // Each whole-number control: its variable, the value the file above gives it (0: none), and
  // the variable's value.
  struct Control {
    const char* env;
    int64_t RuntimeControls::*field;
    int64_t from_file;
    int64_t from_env;
  };
  const Control controls[] = {
      {"QUIVER_LIST_TIMEOUT_MS", &RuntimeControls::list_timeout_ms, 1000, 1500},
      {"QUIVER_LIST_CONCURRENCY", &RuntimeControls::list_concurrency, 2, 9},
      {"QUIVER_FRESH_TTL_MS", &RuntimeControls::fresh_ttl_ms, 5000, 6000},
      {"QUIVER_MAX_AGE_MS", &RuntimeControls::max_age_ms, 9000, 12000},
      {"QUIVER_MAX_MANIFEST_BYTES", &RuntimeControls::max_manifest_bytes, 2048, 4096},
      {"QUIVER_MAINTENANCE_INTERVAL_MS", &RuntimeControls::maintenance_interval_ms, 100, 250},
      {"QUIVER_MAINTENANCE_BATCH", &RuntimeControls::maintenance_batch, 7, 11},
      {"QUIVER_LEASE_MS", &RuntimeControls::lease_ms, 2000, 30000},
      {"QUIVER_REVALIDATE_CONCURRENCY", &RuntimeControls::revalidate_concurrency, 1, 4},
      {"QUIVER_REQUEST_TIMEOUT_MS", &RuntimeControls::request_timeout_ms, 900, 1200},
      {"QUIVER_CALL_TIMEOUT_MS", &RuntimeControls::call_timeout_ms, 15000, 90000},
      {"QUIVER_MAX_LISTING_BYTES", &RuntimeControls::max_listing_bytes, 0, 131072},
      // The edge reads the same variable.
      {"QUIVER_REVALIDATE_WINDOW_MS", &RuntimeControls::revalidate_window_ms, 0, 4000},
      {"QUIVER_STORE_CHECK_INTERVAL_MS", &RuntimeControls::store_check_interval_ms, 0, 500},
      {"QUIVER_MIN_UPSTREAM_TTL_MS", &RuntimeControls::min_upstream_ttl_ms, 0, 5000},
      {"QUIVER_STARTUP_TIMEOUT_MS", &RuntimeControls::startup_timeout_ms, 0, 20000},
      {"QUIVER_RETRY_MAX_BACKOFF_MS", &RuntimeControls::retry_max_backoff_ms, 0, 7000},
      // The edge reads the same variable.
      {"QUIVER_MCP_SEARCH_MODE", &RuntimeControls::mcp_search_mode, 0, 1},
  };
  AgentConfig from_file = parse_ok(in, file);
  for (const Control& c : controls) {
    if (c.from_file != 0) {
      EXPECT_EQ(from_file.runtime.*c.field, c.from_file) << c.env;
    }
  }
  EXPECT_DOUBLE_EQ(from_file.runtime.refresh_ahead_ratio, 0.5);
  // A fresh TTL under the 60 s upstream floor still makes a valid policy.
  EXPECT_TRUE(validate_freshness_policy(from_file.runtime.freshness_policy()).ok());
  EXPECT_EQ(from_file.runtime.freshness_policy().fresh_ttl_ms, 5000);

  for (const Control& c : controls) in.env[c.env] = std::to_string(c.from_env);
  in.env["QUIVER_REFRESH_AHEAD_RATIO"] = "0.75";
  AgentConfig cfg = parse_ok(in, file);
  for (const Control& c : controls) EXPECT_EQ(cfg.runtime.*c.field, c.from_env) << c.env;
  EXPECT_DOUBLE_EQ(cfg.runtime.refresh_ahead_ratio, 0.75);
  EXPECT_EQ(cfg.runtime.freshness_policy().min_upstream_ttl_ms, 5000);
  EXPECT_EQ(cfg.env_overrides.size(), kRuntimeControls.size());
  EXPECT_EQ(cfg.effective_config_json()["runtime"]["lease_ms"], 30000);
}

TEST(ConfigTest, ABadEnvironmentValueNamesTheVariable) {
  struct Case {
    const char* var;
    const char* value;
    const char* expected;  // after "<var>: "
  };
  const Case cases[] = {
      {"QUIVER_LIST_TIMEOUT_MS", "abc", "`abc` is not a whole number"},
      {"QUIVER_LIST_TIMEOUT_MS", "3.5", "`3.5` is not a whole number"},
      {"QUIVER_LIST_TIMEOUT_MS", " 100", "` 100` is not a whole number"},
      {"QUIVER_LIST_CONCURRENCY", "-1", "`-1` must not be negative"},
      {"QUIVER_LIST_CONCURRENCY", "0", "`0` must be greater than 0"},
      {"QUIVER_LIST_CONCURRENCY", "", "is empty"},
      {"QUIVER_FRESH_TTL_MS", "99999999999999999999", "`99999999999999999999` must be at most"},
      {"QUIVER_MAX_AGE_MS", "1000", "1000 is shorter than the fresh TTL"},
      {"QUIVER_REFRESH_AHEAD_RATIO", "0", "`0` must be greater than 0"},
      {"QUIVER_REFRESH_AHEAD_RATIO", "1.01", "`1.01` must be greater"},
      {"QUIVER_REFRESH_AHEAD_RATIO", "8e-1", "`8e-1` is not a decimal"},
      {"QUIVER_MAX_MANIFEST_BYTES", "1k", "`1k` is not a whole number"},
      {"QUIVER_MAINTENANCE_INTERVAL_MS", "0", "`0` must be greater"},
      {"QUIVER_MAINTENANCE_BATCH", "-20", "`-20` must not be negative"},
      {"QUIVER_LEASE_MS", "1000", "1000 must be longer than the listing deadline"},
      {"QUIVER_REVALIDATE_CONCURRENCY", "x", "`x` is not a whole"},
      {"QUIVER_NAMESPACE", "a{b}", "namespace has a character outside"},
      {"QUIVER_LISTEN", "nowhere", "not a listen address"},
      {"QUIVER_REDIS_URL", "localhost:6379", "not a Redis URL"},
      {"QUIVER_DATA_DIR", "", "is empty"},
      {"QUIVER_ALLOW_PRIVATE_UPSTREAMS", "maybe", "`maybe` is not"},
      {"QUIVER_MCP_ALLOWED_ORIGINS", "https://a.example, https://b.example/app",
       "\"https://b.example/app\" is not an origin"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.var + std::string("=") + c.value);
    Inputs in;
    in.env[c.var] = c.value;
    const std::string message = parse_error(in, "{}");
    EXPECT_NE(message.find(c.var + std::string(": ") + c.expected), std::string::npos) << message;
  }
}

TEST(ConfigTest, TopLevelSettingsHaveEnvironmentOverrides) {
  Inputs in;
  const std::string file = R"({"mcpServers": {"h": {"url": "http://127.0.0.1:9/mcp"}},
      "quiver": {"namespace": "filens", "redis": "redis://h:1/2", "listen": "127.0.0.1:1",
                 "allow_private_upstreams": false}})";
  AgentConfig plain = parse_ok(in, file);
  EXPECT_EQ(plain.ns, "filens");
  ASSERT_TRUE(plain.redis.has_value());
  EXPECT_EQ(plain.redis->describe(), "redis://h:1/2");
  EXPECT_FALSE(plain.find_connection("h")->endpoint.allow_private_addresses);

  in.env = {{"QUIVER_NAMESPACE", "envns"},
            {"QUIVER_REDIS_URL", "rediss://user:p%40ss@[::1]:6380/3"},
            {"QUIVER_LISTEN", "0.0.0.0:9000"},
            {"QUIVER_ALLOW_PRIVATE_UPSTREAMS", "true"}};
  AgentConfig cfg = parse_ok(in, file);
  EXPECT_EQ(cfg.ns, "envns");
  ASSERT_TRUE(cfg.redis.has_value());
  EXPECT_TRUE(cfg.redis->tls);
  EXPECT_EQ(cfg.redis->host, "::1");
  EXPECT_EQ(cfg.redis->port, 6380);
  EXPECT_EQ(cfg.redis->db, 3);
  EXPECT_EQ(cfg.redis->username, "user");
  EXPECT_EQ(cfg.redis->password->reveal(), "p@ss");
  EXPECT_EQ(cfg.redis->describe(), "rediss://user:***@[::1]:6380/3");
  EXPECT_EQ(cfg.listen.describe(), "0.0.0.0:9000");
  EXPECT_TRUE(has_warning(cfg, "QUIVER_LISTEN: not a loopback address"));
  EXPECT_TRUE(cfg.allow_private_upstreams);
  EXPECT_TRUE(cfg.find_connection("h")->endpoint.allow_private_addresses);
  EXPECT_EQ(cfg.env_overrides.size(), 4u);

  // Set and empty: the embedded default, whatever the file says.
  in.env = {{"QUIVER_REDIS_URL", ""}};
  EXPECT_FALSE(parse_ok(in, file).redis.has_value());
}

// The web origins that may call /mcp (DNS rebinding protection): an array in the file, a
// comma-separated list in the environment (as the edge reads it), each checked and lower-cased.
TEST(ConfigTest, McpAllowedOrigins) {
  Inputs in;
  EXPECT_TRUE(parse_ok(in, "{}").mcp_allowed_origins.empty());
  const std::string file =
      R"({"quiver": {"mcp_allowed_origins": ["https://App.Example.com", "http://[::1]:8080"]}})";
  AgentConfig cfg = parse_ok(in, file);
  EXPECT_EQ(cfg.mcp_allowed_origins,
            (std::vector<std::string>{"https://app.example.com", "http://[::1]:8080"}));
  EXPECT_EQ(cfg.effective_config_json()["mcp_allowed_origins"],
            Json({"https://app.example.com", "http://[::1]:8080"}));

  in.env = {{"QUIVER_MCP_ALLOWED_ORIGINS", " https://x.example:8443 ,, http://y.test "}};
  cfg = parse_ok(in, file);  // the environment wins
  EXPECT_EQ(cfg.mcp_allowed_origins,
            (std::vector<std::string>{"https://x.example:8443", "http://y.test"}));
  EXPECT_EQ(cfg.env_overrides.count("QUIVER_MCP_ALLOWED_ORIGINS"), 1u);

  in.env.clear();
  for (const std::string& bad :
       {std::string(R"("https://a.example")"), std::string(R"([42])"),
        std::string(R"(["https://a.example/path"])"), std::string(R"(["null"])"),
        std::string(R"(["https://a.example,https://b.example"])")}) {
    SCOPED_TRACE(bad);
    const std::string message =
        parse_error(in, R"({"quiver": {"mcp_allowed_origins": )" + bad + "}}");
    EXPECT_NE(message.find("quiver.mcp_allowed_origins"), std::string::npos) << message;
  }
}

TEST(ConfigTest, RedisUrlForms) {
  Inputs in;
  in.env["PW"] = "s3cr:t/@";
  AgentConfig cfg = parse_ok(in, R"({"quiver": {"redis": "redis://:${PW}@redis.example:7000"}})");
  ASSERT_TRUE(cfg.redis.has_value());
  EXPECT_FALSE(cfg.redis->tls);
  EXPECT_EQ(cfg.redis->host, "redis.example");
  EXPECT_EQ(cfg.redis->port, 7000);
  EXPECT_EQ(cfg.redis->db, 0);
  EXPECT_EQ(cfg.redis->username, "");
  EXPECT_EQ(cfg.redis->password->reveal(), "s3cr:t/@");  // substituted raw, never decoded
  EXPECT_EQ(cfg.redis->describe(), "redis://:***@redis.example:7000/0");

  cfg = parse_ok(in, R"({"quiver": {"redis": "REDISS://h"}})");
  EXPECT_TRUE(cfg.redis->tls);
  EXPECT_EQ(cfg.redis->port, 6379);
  EXPECT_FALSE(cfg.redis->password.has_value());

  Result<RedisConfig> r = parse_redis_url("redis://default:a%2Fb@h:1/15");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->password->reveal(), "a/b");
  EXPECT_EQ(r->db, 15);
}

// A Redis Cluster: seeds, comma-separated, in the file (with `${}`) and in QUIVER_REDIS_URL; the
// password never in describe(); database 0 only.
TEST(ConfigTest, RedisClusterUrls) {
  Inputs in;
  in.env["PW"] = "cl:uster";
  in.env["SEED2"] = "10.0.0.2";
  AgentConfig cfg = parse_ok(
      in, R"({"quiver": {"redis": "redis+cluster://:${PW}@10.0.0.1:7000,${SEED2},[::1]:7002/0"}})");
  ASSERT_TRUE(cfg.redis.has_value());
  EXPECT_TRUE(cfg.redis->cluster);
  EXPECT_FALSE(cfg.redis->tls);
  ASSERT_EQ(cfg.redis->seeds.size(), 3u);
  EXPECT_EQ(cfg.redis->seeds[0].host, "10.0.0.1");
  EXPECT_EQ(cfg.redis->seeds[0].port, 7000);
  EXPECT_EQ(cfg.redis->seeds[1].host, "10.0.0.2");
  EXPECT_EQ(cfg.redis->seeds[1].port, 6379);
  EXPECT_EQ(cfg.redis->seeds[2].host, "::1");
  EXPECT_EQ(cfg.redis->seeds[2].port, 7002);
  EXPECT_EQ(cfg.redis->host, "10.0.0.1");
  EXPECT_EQ(cfg.redis->password->reveal(), "cl:uster");
  EXPECT_EQ(cfg.redis->describe(), "redis+cluster://:***@10.0.0.1:7000,10.0.0.2:6379,[::1]:7002");

  in.env = {{"QUIVER_REDIS_URL", "RediSS+Cluster://quiver:p%40ss@c1.internal:6380"}};
  cfg = parse_ok(in, R"({"quiver": {"redis": "redis://ignored:6379"}})");
  ASSERT_TRUE(cfg.redis.has_value());
  EXPECT_TRUE(cfg.redis->cluster);
  EXPECT_TRUE(cfg.redis->tls);
  ASSERT_EQ(cfg.redis->seeds.size(), 1u);
  EXPECT_EQ(cfg.redis->password->reveal(), "p@ss");
  EXPECT_EQ(cfg.redis->describe(), "rediss+cluster://quiver:***@c1.internal:6380");

  Result<RedisConfig> bad = parse_redis_url("redis+cluster://:pw@h1:7000,h2:7000/1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("only database 0"), std::string::npos);
  EXPECT_EQ(bad.error().message.find("pw"), std::string::npos);
  bad = parse_redis_url("rediss://h1:7000,h2:7000");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("rediss+cluster://"), std::string::npos);
  // A single node is unchanged: no seeds.
  Result<RedisConfig> one = parse_redis_url("redis://h:1/2");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->cluster);
  EXPECT_TRUE(one->seeds.empty());
}

TEST(ConfigTest, UnknownQuiverVariablesAreWarnedAbout) {
  Inputs in;
  in.env["QUIVER_LIST_TIMEOUT"] = "100";  // a typo of QUIVER_LIST_TIMEOUT_MS
  in.env["QUIVER_NODE_MODULES"] = "/nm";  // referenced below: fine
  AgentConfig cfg =
      parse_ok(in, R"({"mcpServers": {"s": {"command": "${QUIVER_NODE_MODULES}/x"}}})");
  EXPECT_TRUE(has_warning(cfg, "QUIVER_LIST_TIMEOUT: not a Quiver setting"));
  EXPECT_FALSE(has_warning(cfg, "QUIVER_NODE_MODULES"));
}

// ---- secrets -----------------------------------------------------------------------------------

TEST(ConfigTest, SecretPrintsAsStars) {
  const Secret s("hunter2", "env:PW");
  std::ostringstream out;
  out << s;
  EXPECT_EQ(out.str(), "***");
  EXPECT_EQ(s.describe(), "***");
  EXPECT_EQ(::testing::PrintToString(s), "***");  // a failing assertion cannot leak it either
  EXPECT_EQ(s.reveal(), "hunter2");
  EXPECT_EQ(s.source(), "env:PW");
  EXPECT_TRUE(Secret().empty());
}

TEST(ConfigTest, RedactReplacesEverySecretOccurrence) {
  const std::vector<Secret> secrets = {Secret("abcd"),      Secret("abcdefgh"), Secret(""),
                                       Secret("q\"uo\\te"), Secret("1"),        Secret("ro")};
  EXPECT_EQ(redact("x abcdefgh y abcd z abcdabcd", secrets), "x *** y *** z ******");
  // Too short to be a secret (an env value such as DEBUG=1): left alone, lines stay readable.
  EXPECT_EQ(redact("read 1 row from a ro replica", secrets), "read 1 row from a ro replica");
  EXPECT_EQ(redact("nothing here", secrets), "nothing here");
  // The JSON-escaped form, as it appears in a JSON log line.
  EXPECT_EQ(redact(R"({"k":"q\"uo\\te"})", secrets), R"({"k":"***"})");
  EXPECT_EQ(redact("raw q\"uo\\te", secrets), "raw ***");
  EXPECT_EQ(redact("", secrets), "");
}

// A configuration holding every kind of secret; each value is distinctive.
struct SecretWorld {
  Inputs in;
  std::vector<std::string> values = {"ENVVALUE-1111",
                                     "HEADERVALUE-2222",
                                     "SHAREDTOKEN-3333",
                                     "ALICETOKEN-4444",
                                     "BOBFILETOKEN-5555",
                                     "REDISPASSWORD-6666",
                                     "TOKENKEY-7777-7777-7777-7777-7777-77",
                                     "WEBHOOK-8888-8888",
                                     "INLINEENV-9999",
                                     "INLINEHEADER-0000",
                                     "PATHTOKEN-1212"};
  std::string config = R"({"mcpServers": {
      "s": {"command": "srv", "env": {"A": "${E1}", "B": "INLINEENV-9999"}},
      "h": {"url": "https://h.example/mcp?key=INQUERY", "headers": {"X-A": "${H1}",
            "X-B": "INLINEHEADER-0000"}},
      "g": {"url": "https://g.example/mcp"},
      "p": {"url": "https://p.example/mcp"},
      "z": {"url": "https://z.example/s/${PATHTOKEN}/mcp"}},
    "quiver": {
      "redis": "rediss://:${RP}@r.example:6380/0",
      "caller_token_keys": {"k1": {"env": "TK"}},
      "webhook_secrets": {"ci": {"env": "WH"}},
      "members": ["alice", "bob"],
      "grants": {"*": ["*"]},
      "connections": {
        "g": {"auth": "bearer", "credential": {"env": "ST"}},
        "p": {"credential_mode": "per_member", "auth": "api_key",
              "credentials": {"alice": "${AT}", "bob": {"file": "/run/secrets/bob"}}}}}})";

  SecretWorld() {
    in.env["E1"] = values[0];
    in.env["H1"] = values[1];
    in.env["ST"] = values[2];
    in.env["AT"] = values[3];
    in.files["/run/secrets/bob"] = values[4] + "\n";
    in.env["RP"] = values[5];
    in.env["TK"] = values[6];
    in.env["WH"] = values[7];
    in.env["PATHTOKEN"] = values[10];
  }
  void expect_clean(const std::string& text) const {
    for (const std::string& v : values) {
      EXPECT_EQ(text.find(v), std::string::npos) << "secret " << v << " leaked into:\n" << text;
    }
  }
};

TEST(ConfigTest, SecretsNeverAppearInDescribeOrTheEffectiveConfig) {
  SecretWorld w;
  AgentConfig cfg = parse_ok(w.in, w.config);
  ASSERT_EQ(cfg.connections.size(), 5u);
  EXPECT_EQ(cfg.find_connection("z")->endpoint.url, "https://z.example/s/PATHTOKEN-1212/mcp");
  // Every secret was loaded (else the test would prove nothing).
  const std::string all = [&] {
    std::string s;
    for (const Secret& secret : cfg.secrets()) s += secret.reveal() + "\n";
    return s;
  }();
  for (const std::string& v : w.values) EXPECT_NE(all.find(v), std::string::npos) << v;

  const std::string dump = cfg.effective_config_json().dump(2);
  w.expect_clean(dump);
  EXPECT_EQ(dump.find("INQUERY"), std::string::npos);  // a URL query is hidden too
  for (const ConnectionConfig& c : cfg.connections) {
    w.expect_clean(c.describe());
    std::ostringstream out;
    out << c;
    w.expect_clean(out.str());
  }
  w.expect_clean(cfg.redis->describe());
  for (const std::string& warning : cfg.warnings) w.expect_clean(warning);
  // Sources are shown: where to look, never what.
  const Json j = cfg.effective_config_json();
  EXPECT_EQ(j["caller_token_keys"]["k1"]["from"], "env:TK");
  EXPECT_EQ(j["caller_token_keys"]["k1"]["value"], "***");
  EXPECT_EQ(j["redis"], "rediss://:***@r.example:6380/0");
  EXPECT_EQ(j["connections"][1]["url"], "https://h.example/mcp?…");

  // redact() on a log line holding every value.
  std::string line = "upstream said:";
  for (const std::string& v : w.values) line += " " + v;
  w.expect_clean(cfg.redact(line));
}

TEST(ConfigTest, SecretsNeverAppearInErrorMessages) {
  SecretWorld w;
  // The same config with one problem in each part: every secret was resolved before the errors.
  std::string broken = w.config;
  broken.replace(broken.find("\"grants\""), 8, "\"grantz\"");
  broken.replace(broken.find("https://g.example/mcp"), 21, "ftp://g.example/mcp");
  const std::string message = parse_error(w.in, broken);
  EXPECT_NE(message.find("quiver.grantz"), std::string::npos) << message;
  w.expect_clean(message);

  // A value that makes a field invalid is not quoted either.
  Inputs in;
  in.env["NL"] = "SECRET-NL\nX";
  in.env["NUL"] = std::string("SECRET-NUL\0X", 12);
  in.env["URL"] = "https://SECRET-URL user@h/";
  const std::string m2 = parse_error(in, R"({"mcpServers": {
      "h": {"url": "https://h.example/", "headers": {"X-A": "${NL}"}},
      "s": {"command": "x", "env": {"K": "${NUL}"}},
      "u": {"url": "${URL}"}}})");
  EXPECT_EQ(m2.find("SECRET"), std::string::npos) << m2;
  EXPECT_NE(m2.find("mcpServers.s.env.K: the value contains NUL"), std::string::npos) << m2;

  // Malformed JSON: the parser's "last read" text is dropped (it may be part of a secret).
  const std::string m3 =
      parse_error(in, "{\"mcpServers\": {\"s\": {\"env\": {\"K\": \"ghp_SECRETVALUE\x01\"}}}}");
  EXPECT_EQ(m3.find("SECRETVALUE"), std::string::npos) << m3;
  EXPECT_NE(m3.find("test.json: malformed JSON at line 1"), std::string::npos) << m3;
  const std::string m4 = parse_error(in, "{\"quiver\": {\"redis\": tru_SECRET}}");
  EXPECT_EQ(m4.find("SECRET"), std::string::npos) << m4;
}

// ---- config_hash -------------------------------------------------------------------------------

std::string hash_of(const Inputs& in, const std::string& config, const std::string& id = "c") {
  AgentConfig cfg = parse_ok(in, config);
  const ConnectionConfig* c = cfg.find_connection(id);
  EXPECT_NE(c, nullptr);
  return c != nullptr ? c->config_hash : "";
}

TEST(ConfigTest, ConfigHashFollowsIdentityNotSecrets) {
  Inputs in;
  in.env = {{"T", "token-one"}, {"U", "user-one"}};
  auto http = [](const std::string& url, const std::string& settings,
                 const std::string& headers = R"({"X-Org": "${U}"})") {
    return R"({"mcpServers": {"c": {"url": ")" + url + R"(", "headers": )" + headers +
           R"(}}, "quiver": {"members": ["alice"], "grants": {"*": ["*"]},
           "connections": {"c": )" +
           settings + "}}}";
  };
  const std::string base_settings = R"({"auth": "bearer", "credential": {"env": "T"}})";
  const std::string base = hash_of(in, http("https://h.example/mcp", base_settings));
  ASSERT_EQ(base.size(), 64u);

  // Secret values: no change.
  Inputs rotated = in;
  rotated.env = {{"T", "token-two"}, {"U", "user-two"}};
  EXPECT_EQ(hash_of(rotated, http("https://h.example/mcp", base_settings)), base);
  // Identity: each change is a change.
  EXPECT_NE(hash_of(in, http("https://h.example/mcp2", base_settings)), base);
  EXPECT_NE(hash_of(in, http("https://h.example/mcp?x=1", base_settings)), base);
  EXPECT_NE(hash_of(in, http("https://h.example/mcp",
                             R"({"auth": "bearer", "credential": {"env": "T"},
                                 "credential_version": "2"})")),
            base);
  EXPECT_NE(hash_of(in, http("https://h.example/mcp",
                             R"({"auth": "api_key", "credential": {"env": "T"}})")),
            base);
  EXPECT_NE(hash_of(in, http("https://h.example/mcp",
                             R"({"auth": "api_key", "api_key_header": "X-Other",
                                 "credential": {"env": "T"}})")),
            hash_of(in, http("https://h.example/mcp",
                             R"({"auth": "api_key", "credential": {"env": "T"}})")));
  EXPECT_NE(hash_of(in, http("https://h.example/mcp",
                             R"({"auth": "bearer", "credential_mode": "per_member",
                                 "credentials": {"alice": {"env": "T"}}})")),
            base);
  EXPECT_NE(hash_of(in, http("https://h.example/mcp", base_settings, R"({"X-Other": "${U}"})")),
            base);
  // Per-member credential values: no change.
  const std::string per_member = http("https://h.example/mcp",
                                      R"({"auth": "bearer", "credential_mode": "per_member",
                                          "credentials": {"alice": {"env": "T"}}})");
  EXPECT_EQ(hash_of(rotated, per_member), hash_of(in, per_member));

  // stdio: command, args, env names, credential_env; not env values.
  auto stdio = [](const std::string& entry) { return R"({"mcpServers": {"c": )" + entry + "}}"; };
  const std::string s0 =
      hash_of(in, stdio(R"({"command": "srv", "args": ["a"], "env": {"K": "${T}"}})"));
  EXPECT_EQ(hash_of(rotated, stdio(R"({"command": "srv", "args": ["a"], "env": {"K": "${T}"}})")),
            s0);
  EXPECT_NE(hash_of(in, stdio(R"({"command": "srv2", "args": ["a"], "env": {"K": "${T}"}})")), s0);
  EXPECT_NE(hash_of(in, stdio(R"({"command": "srv", "args": ["b"], "env": {"K": "${T}"}})")), s0);
  EXPECT_NE(hash_of(in, stdio(R"({"command": "srv", "args": ["a"], "env": {"K2": "${T}"}})")), s0);
  // The same connection reached over HTTP instead.
  EXPECT_NE(hash_of(in, stdio(R"({"url": "https://h.example/mcp"})")), s0);
}

// ---- principals, grants and upstream parameters ------------------------------------------------

TEST(ConfigTest, GrantsPrincipalsAndCredentialsPlacement) {
  Inputs in;
  in.env = {{"SHARED", "shared-token"}, {"A", "alice-token"}, {"B", "bob-token"}};
  in.files["/run/secrets/bob"] = "bob-file-key\r\n";
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {
      "everything": {"command": "srv"},
      "gh": {"url": "https://gh.example/mcp", "headers": {"X-Org": "acme"}},
      "search": {"url": "https://s.example/mcp"},
      "notes": {"command": "notes", "env": {"MODE": "ro"}}},
    "quiver": {
      "grants": {"*": ["everything"], "alice": ["gh", "search", "notes"], "bob": ["*"]},
      "connections": {
        "gh": {"credential_mode": "per_member", "auth": "bearer",
               "credentials": {"alice": {"env": "A"}, "bob": {"env": "B"}}},
        "search": {"auth": "api_key", "api_key_header": "X-Key", "credential": "${SHARED}"},
        "notes": {"credential_mode": "per_member", "auth": "api_key", "credential_env": "TOKEN",
                  "credentials": {"alice": {"env": "A"},
                                  "bob": {"file": "/run/secrets/bob"}}}}}})");

  EXPECT_EQ(cfg.members, (std::set<std::string>{"alice", "bob"}));  // from grants
  EXPECT_EQ(cfg.grants.at("alice"), (std::set<std::string>{"everything", "gh", "notes", "search"}));
  EXPECT_EQ(cfg.grants.at("bob"), (std::set<std::string>{"everything", "gh", "notes", "search"}));

  const ConnectionConfig* everything = cfg.find_connection("everything");
  ASSERT_NE(everything, nullptr);
  ASSERT_EQ(everything->principals().size(), 1u);
  EXPECT_TRUE(everything->principals()[0].is_shared());
  EXPECT_EQ(cfg.principal_for("alice", "everything")->str(), "shared");

  const ConnectionConfig* gh = cfg.find_connection("gh");
  ASSERT_NE(gh, nullptr);
  std::vector<std::string> principals;
  for (const Principal& p : gh->principals()) principals.push_back(p.str());
  EXPECT_EQ(principals, (std::vector<std::string>{"member/alice", "member/bob"}));
  EXPECT_EQ(cfg.principal_for("alice", "gh")->str(), "member/alice");
  EXPECT_EQ(cfg.principal_for("carol", "gh").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cfg.principal_for("alice", "nope").error().code, ErrorCode::kNotFound);

  // Credentials go where the auth type says, for the principal asked about.
  Result<UpstreamEndpoint> alice_gh = gh->upstream_for(*Principal::member("alice"));
  ASSERT_TRUE(alice_gh.ok()) << alice_gh.error().message;
  EXPECT_EQ(alice_gh->headers.at("Authorization").reveal(), "Bearer alice-token");
  EXPECT_EQ(alice_gh->headers.at("X-Org").reveal(), "acme");
  EXPECT_EQ(gh->upstream_for(*Principal::member("bob"))->headers.at("Authorization").reveal(),
            "Bearer bob-token");
  EXPECT_EQ(gh->upstream_for(Principal::shared()).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(gh->upstream_for(*Principal::member("carol")).error().code, ErrorCode::kNotFound);

  const ConnectionConfig* search = cfg.find_connection("search");
  EXPECT_EQ(search->upstream_for(Principal::shared())->headers.at("X-Key").reveal(),
            "shared-token");
  EXPECT_EQ(search->upstream_for(*Principal::member("alice")).error().code,
            ErrorCode::kInvalidArgument);

  const ConnectionConfig* notes = cfg.find_connection("notes");
  Result<UpstreamEndpoint> bob_notes = notes->upstream_for(*Principal::member("bob"));
  ASSERT_TRUE(bob_notes.ok());
  EXPECT_EQ(bob_notes->env.at("TOKEN").reveal(), "bob-file-key");  // trailing newline cut
  EXPECT_EQ(bob_notes->env.at("MODE").reveal(), "ro");
  EXPECT_EQ(bob_notes->command, "notes");
  EXPECT_EQ(bob_notes->transport, TransportKind::kStdio);
  EXPECT_EQ(notes->member_credentials.at("bob").source(), "file:/run/secrets/bob");
}

TEST(ConfigTest, ListedMembersAndWarnings) {
  Inputs in;
  in.env = {{"A", "alice-token"}, {"C", "carol-token"}};
  AgentConfig cfg = parse_ok(in, R"({"mcpServers": {
      "gh": {"url": "https://gh.example/mcp"}, "idle": {"command": "x"}},
    "quiver": {"members": ["alice", "carol", "dave"], "grants": {"alice": ["gh"]},
      "connections": {"gh": {"credential_mode": "per_member", "auth": "bearer",
                             "credentials": {"alice": {"env": "A"}, "carol": {"env": "C"}}}}}})");
  EXPECT_EQ(cfg.members, (std::set<std::string>{"alice", "carol", "dave"}));
  EXPECT_TRUE(cfg.operators.empty());          // none unless listed
  EXPECT_TRUE(cfg.grants.at("dave").empty());  // listed, granted nothing
  AgentConfig ops = parse_ok(in, R"({"quiver": {"members": ["alice", "carol"],
      "operators": ["carol"]}})");
  EXPECT_EQ(ops.operators, std::set<std::string>{"carol"});
  EXPECT_EQ(ops.effective_config_json()["operators"], Json::array({"carol"}));
  EXPECT_TRUE(has_warning(cfg, "quiver.connections.gh.credentials.carol: `carol` is not granted"));
  EXPECT_TRUE(has_warning(cfg, "server `idle` is granted to no member"));
}

TEST(ConfigTest, CallerTokenSigningKeyDefaultsToTheOnlyKey) {
  Inputs in;
  in.env = {{"K1", std::string(32, 'a')}, {"K2", std::string(40, 'b')}, {"W", "tiny-secret"}};
  AgentConfig one = parse_ok(in, R"({"quiver": {"caller_token_keys": {"k1": {"env": "K1"}}}})");
  EXPECT_EQ(one.caller_token_signing_kid, "k1");
  AgentConfig two = parse_ok(in, R"({"quiver": {"caller_token_keys":
      {"k1": {"env": "K1"}, "k2": {"env": "K2"}}, "webhook_secrets": {"ci": {"env": "W"}}}})");
  EXPECT_EQ(two.caller_token_signing_kid, "");
  EXPECT_EQ(two.caller_token_keys.size(), 2u);
  EXPECT_TRUE(has_warning(two, "quiver.webhook_secrets.ci: shorter than 16 bytes"));
}

// ---- the examples in deploy/ -------------------------------------------------------------------

TEST(ConfigTest, QuickstartExampleLoads) {
  Inputs in;
  in.env = {{"QUIVER_NODE_MODULES", QUIVER_NODE_MODULES},
            {"QUIVER_DATA_DIR", "build/quickstart"},
            {"HOME", "/home/u"}};
  in.working_dir = QUIVER_SOURCE_DIR;
  const std::string data_dir = std::string(QUIVER_SOURCE_DIR) + "/build/quickstart";
  in.files[data_dir + "/caller-token.key"] = std::string(44, 'k') + "\n";
  AgentConfig cfg = parse_ok(in, read_source("deploy/quickstart.json"));
  EXPECT_EQ(cfg.data_dir, data_dir);
  EXPECT_FALSE(cfg.redis.has_value());
  ASSERT_EQ(cfg.connections.size(), 3u);
  for (const ConnectionConfig& c : cfg.connections) {
    SCOPED_TRACE(c.id);
    EXPECT_EQ(c.endpoint.transport, TransportKind::kStdio);
    EXPECT_EQ(c.endpoint.command, "node");
    ASSERT_FALSE(c.endpoint.args.empty());
    // The server script exists where scripts/setup.sh puts it.
    struct stat st {};
    EXPECT_EQ(::stat(c.endpoint.args[0].c_str(), &st), 0) << c.endpoint.args[0];
    EXPECT_EQ(c.principals().size(), 1u);
    EXPECT_EQ(cfg.principal_for("local", c.id)->str(), "shared");
  }
  EXPECT_EQ(cfg.find_connection("memory")->endpoint.env.at("MEMORY_FILE_PATH").reveal(),
            data_dir + "/memory.jsonl");
  EXPECT_EQ(cfg.find_connection("filesystem")->endpoint.args.back(), data_dir + "/files");
  EXPECT_FALSE(cfg.find_connection("filesystem")->auto_enable_new_capabilities);
  EXPECT_EQ(cfg.find_connection("everything")->endpoint.args.back(), "stdio");
  EXPECT_EQ(cfg.caller_token_signing_kid, "local-1");
  EXPECT_TRUE(cfg.warnings.empty()) << cfg.warnings[0];
}

TEST(ConfigTest, RedisTeamExampleLoads) {
  Inputs in;
  in.env = {{"QUIVER_REDIS_PASSWORD", "redis-pass"},
            {"LINEAR_API_KEY", "lin_api_key"},
            {"SEARCH_API_KEY", "search-key"},
            {"GITHUB_TOKEN_ALICE", "ghp_alice"},
            {"NOTES_TOKEN_ALICE", "notes-alice"},
            {"NOTES_TOKEN_BOB", "notes-bob"},
            {"QUIVER_WEBHOOK_SECRET_GITHUB", "webhook-secret-0123456789"}};
  in.files["/run/secrets/quiver-token-key-2026-01"] = std::string(64, 'a') + "\n";
  in.files["/run/secrets/quiver-token-key-2025-10"] = std::string(64, 'b') + "\n";
  in.files["/run/secrets/github-token-bob"] = "ghp_bob\n";
  AgentConfig cfg = parse_ok(in, read_source("deploy/examples/redis-team.json"));
  EXPECT_EQ(cfg.ns, "team-a");
  ASSERT_TRUE(cfg.redis.has_value());
  EXPECT_EQ(cfg.redis->describe(), "rediss://quiver:***@redis.internal.example.com:6380/0");
  EXPECT_EQ(cfg.data_dir, "/var/lib/quiver");
  EXPECT_EQ(cfg.runtime.fresh_ttl_ms, 600000);
  EXPECT_EQ(cfg.runtime.list_concurrency, 8);
  EXPECT_EQ(cfg.caller_token_signing_kid, "2026-01");
  EXPECT_EQ(cfg.members, (std::set<std::string>{"alice", "bob", "carol@example.com"}));
  EXPECT_EQ(cfg.grants.at("carol@example.com"),
            (std::set<std::string>{"everything", "linear", "search"}));
  EXPECT_EQ(cfg.connections.size(), 5u);

  const ConnectionConfig* github = cfg.find_connection("github");
  ASSERT_NE(github, nullptr);
  EXPECT_EQ(github->credential_mode, CredentialMode::kPerMember);
  EXPECT_EQ(github->principals().size(), 2u);
  EXPECT_EQ(github->upstream_for(*Principal::member("bob"))->headers.at("Authorization").reveal(),
            "Bearer ghp_bob");
  EXPECT_EQ(cfg.principal_for("carol@example.com", "github").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(cfg.find_connection("linear")->auth, AuthType::kHeaders);
  EXPECT_FALSE(cfg.find_connection("linear")->auto_enable_new_capabilities);
  EXPECT_EQ(cfg.find_connection("notes")->credential_version, "2");
  EXPECT_EQ(cfg.find_connection("notes")
                ->upstream_for(*Principal::member("alice"))
                ->env.at("NOTES_TOKEN")
                .reveal(),
            "notes-alice");
  EXPECT_TRUE(cfg.warnings.empty()) << cfg.warnings[0];

  const std::string dump = cfg.effective_config_json().dump();
  for (const char* secret : {"redis-pass", "lin_api_key", "search-key", "ghp_alice", "ghp_bob",
                             "notes-alice", "notes-bob", "webhook-secret", "aaaaaaaaaaaaaaaa"}) {
    EXPECT_EQ(dump.find(secret), std::string::npos) << secret;
  }
}

// ---- the real file system ----------------------------------------------------------------------

TEST(ConfigTest, LoadsAFileWithRealSecretFiles) {
  TempDir dir;
  const std::string key = dir.write("key", std::string(48, 'z') + "\n");
  const std::string config = dir.write("quiver.json", R"({"mcpServers": {"s": {"command": "srv"}},
        "quiver": {"caller_token_keys": {"k": {"file": ")" +
                                                          key + R"("}}}})");
  Result<AgentConfig> cfg = load_config_file(config, {{"HOME", "/home/u"}});
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->caller_token_keys.at("k").reveal(), std::string(48, 'z'));

  Result<AgentConfig> missing = load_config_file(dir.path("nope.json"), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("nope.json"), std::string::npos);

  const std::string big = dir.write("big", std::string(kMaxSecretFileBytes + 10, 'x'));
  Result<std::string> read = read_secret_file(big);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->size(), kMaxSecretFileBytes + 1);  // enough to say "too large", no more
  EXPECT_EQ(read_secret_file(dir.path("absent")).error().code, ErrorCode::kNotFound);
}

TEST(ConfigTest, EnvironFromTheProcessForm) {
  const char* environ_like[] = {"A=1", "B=x=y", "EMPTY=", "NOEQUALS", "=bad", nullptr};
  EnvMap env = env_from_environ(environ_like);
  EXPECT_EQ(env, (EnvMap{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
  EXPECT_TRUE(env_from_environ(nullptr).empty());
}

// Issue 10: each connection may have its own deadlines; the runtime controls are the defaults.
TEST(ConfigTest, PerConnectionDeadlinesOverrideTheRuntimeControls) {
  Inputs in;
  AgentConfig cfg = parse_ok(in, with_quiver(R"({"runtime": {"startup_timeout_ms": 20000},
      "connections": {"h": {"list_timeout_ms": 30000, "request_timeout_ms": 25000,
                            "startup_timeout_ms": 0}}})"));
  const ConnectionConfig* h = cfg.find_connection("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->list_timeout_ms, std::optional<int64_t>(30000));
  EXPECT_EQ(h->request_timeout_ms, std::optional<int64_t>(25000));
  EXPECT_EQ(h->startup_timeout_ms, std::optional<int64_t>(0));
  EXPECT_EQ(cfg.runtime.startup_timeout_ms, 20000);
  const ConnectionConfig* s = cfg.find_connection("s");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->list_timeout_ms.has_value());
  // Deadlines are not identity: the same server with other deadlines keeps its config_hash.
  AgentConfig plain = parse_ok(in, with_quiver(R"({})"));
  EXPECT_EQ(plain.find_connection("h")->config_hash, h->config_hash);
  bool shown = false;
  const Json effective = cfg.effective_config_json();
  for (const Json& c : effective["connections"]) {
    if (c["id"] == "h") shown = c.value("list_timeout_ms", int64_t{0}) == 30000;
  }
  EXPECT_TRUE(shown);
}

// Issue 12: `auth: "oauth"` with `quiver.connections.<n>.oauth` and `quiver.oauth`.
TEST(ConfigTest, OAuthConnectionsAndTheAgentsOAuthSettings) {
  Inputs in;
  in.env["K"] = kOAuthKeyHex;
  in.env["LIN_SECRET"] = "lin-client-secret-value-1";
  in.files["/run/secrets/key.pem"] =
      "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
      "-----END PRIVATE KEY-----\n";
  const std::string servers = R"("linear": {"url": "https://mcp.linear.example/mcp"},
    "notion": {"url": "https://mcp.notion.example/mcp"},
    "ci": {"url": "https://ci.example/mcp"})";
  auto text = [&](const std::string& linear_oauth) {
    return with_quiver(R"({"listen": "127.0.0.1:9000", "data_dir": "/var/lib/q",
      "members": ["alice", "bob"], "grants": {"*": ["*"]},
      "oauth": {"key": {"env": "K"}},
      "connections": {
        "linear": {"auth": "oauth", "oauth": )" +
                           linear_oauth + R"(},
        "notion": {"auth": "oauth", "credential_mode": "per_member"},
        "ci": {"auth": "oauth", "oauth": {"grant": "client_credentials", "client_id": "ci-bot",
               "private_key": {"file": "/run/secrets/key.pem"}, "private_key_id": "k1",
               "token_endpoint_auth_method": "private_key_jwt", "audience": "https://api.ci",
               "resource": false}}}})",
                       servers);
  };
  const std::string linear = R"({"client_id": "quiver-prod",
      "client_secret": {"env": "LIN_SECRET"}, "scopes": ["read", "offline_access"],
      "token_endpoint_auth_method": "client_secret_basic"})";
  AgentConfig cfg = parse_ok(in, text(linear));
  // quiver.oauth: the defaults follow listen and data_dir.
  ASSERT_TRUE(cfg.oauth.key.has_value());
  EXPECT_EQ(cfg.oauth.redirect_uri, "http://127.0.0.1:9000/v1/oauth/callback");
  EXPECT_EQ(cfg.oauth.token_store, "/var/lib/q/oauth-tokens.db");
  EXPECT_EQ(cfg.oauth.refresh_ahead_ms, 60000);
  Result<std::string> key = parse_token_key(*cfg.oauth.key);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->size(), 32u);
  EXPECT_EQ(static_cast<unsigned char>((*key)[31]), 0x1f);

  const ConnectionConfig* l = cfg.find_connection("linear");
  ASSERT_NE(l, nullptr);
  ASSERT_TRUE(l->oauth.has_value());
  EXPECT_EQ(l->auth, AuthType::kOAuth);
  EXPECT_EQ(l->oauth->client_id, "quiver-prod");
  EXPECT_EQ(l->oauth->scopes, (std::vector<std::string>{"read", "offline_access"}));
  oauth::OAuthClientSettings web =
      l->oauth->client_settings("https://edge.example/v1/oauth/callback");
  EXPECT_EQ(web.client_secret, "lin-client-secret-value-1");
  EXPECT_EQ(web.application_type, "web");
  EXPECT_EQ(web.redirect_uri, "https://edge.example/v1/oauth/callback");
  EXPECT_EQ(l->oauth->client_settings(cfg.oauth.redirect_uri).application_type, "native");
  const ConnectionConfig* ci = cfg.find_connection("ci");
  ASSERT_TRUE(ci != nullptr && ci->oauth.has_value());
  EXPECT_EQ(ci->oauth->grant, oauth::GrantType::kClientCredentials);
  EXPECT_FALSE(ci->oauth->send_resource);
  EXPECT_NE(ci->oauth->client_settings("x").private_key_pem.find("BEGIN PRIVATE KEY"),
            std::string::npos);
  // A per-member oauth connection needs no credentials; its upstream carries none from the config
  // (the agent places the member's token).
  const ConnectionConfig* n = cfg.find_connection("notion");
  ASSERT_TRUE(n != nullptr && n->oauth.has_value());
  EXPECT_EQ(n->principals().size(), 2u);
  Result<UpstreamEndpoint> up = n->upstream_for(*Principal::member("alice"));
  ASSERT_TRUE(up.ok()) << up.error().message;
  EXPECT_EQ(up->headers.count("Authorization"), 0u);
  EXPECT_FALSE(n->upstream_for(Principal::shared()).ok());

  // Secrets: redacted everywhere, shown as *** with their source.
  const std::string effective = cfg.effective_config_json().dump();
  for (const std::string& secret :
       {std::string(kOAuthKeyHex), in.env["LIN_SECRET"], in.files["/run/secrets/key.pem"]}) {
    EXPECT_EQ(effective.find(secret.substr(0, 40)), std::string::npos);
    EXPECT_EQ(cfg.redact("x " + secret + " y").find(secret.substr(0, 40)), std::string::npos);
  }
  const Json j = cfg.effective_config_json();
  EXPECT_EQ(j["oauth"]["key"]["value"], "***");
  EXPECT_EQ(j["oauth"]["key"]["from"], "env:K");
  EXPECT_EQ(j["oauth"]["redirect_uri"], "http://127.0.0.1:9000/v1/oauth/callback");
  bool shown = false;
  for (const Json& c : j["connections"]) {
    if (c["id"] != "linear") continue;
    shown = c["oauth"]["client_id"] == "quiver-prod" &&
            c["oauth"]["client_secret"]["value"] == "***" &&
            c["oauth"]["client_secret"]["from"] == "env:LIN_SECRET" && c["auth"] == "oauth";
  }
  EXPECT_TRUE(shown) << j["connections"].dump();

  // config_hash: the non-secret settings are identity; the secret's value is not.
  in.env["LIN_SECRET"] = "rotated-secret-value-2";
  EXPECT_EQ(parse_ok(in, text(linear)).find_connection("linear")->config_hash, l->config_hash);
  for (const std::string& other :
       {std::string(R"({"client_id": "quiver-dev", "client_secret": {"env": "LIN_SECRET"}})"),
        std::string(R"({"client_id": "quiver-prod", "client_secret": {"env": "LIN_SECRET"},
            "scopes": ["read"], "token_endpoint_auth_method": "client_secret_basic"})"),
        std::string(R"({"audience": "https://api.linear.example"})"),
        std::string(R"({"resource": false})")}) {
    SCOPED_TRACE(other);
    EXPECT_NE(parse_ok(in, text(other)).find_connection("linear")->config_hash, l->config_hash);
  }

  // quiver.oauth settings, and the key as base64.
  in.env["K"] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
  AgentConfig b64 = parse_ok(in, with_quiver(R"({"oauth": {"key": {"env": "K"},
      "redirect_uri": "https://edge.example/v1/oauth/callback", "token_store": "tokens.db",
      "refresh_ahead_ms": 120000}, "connections": {"h": {"auth": "oauth"}}})"));
  ASSERT_TRUE(b64.oauth.key.has_value());
  EXPECT_EQ(*parse_token_key(*b64.oauth.key), *key);
  EXPECT_EQ(b64.oauth.redirect_uri, "https://edge.example/v1/oauth/callback");
  EXPECT_EQ(b64.oauth.token_store, "/srv/work/tokens.db");
  EXPECT_EQ(b64.oauth.refresh_ahead_ms, 120000);
  EXPECT_FALSE(parse_token_key(Secret("AAEC")).ok());
  EXPECT_EQ(parse_token_key(Secret("not a key at all")).error().message.find("not a key"),
            std::string::npos);
}

}  // namespace
}  // namespace quiver
