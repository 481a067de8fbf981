// Configuration internals shared by the config_*.cpp files (not part of the interface, which is
// config.h): the problem list, the `${}` environment view, the endpoint checks and the parser
// class whose methods are spread over those files, one file per concern:
//   config_secrets.cpp        secret references, the agent's keys, redaction
//   config_interpolation.cpp  `${NAME}` expansion
//   config_endpoints.cpp      URLs, host:port, Redis URLs (one parser), names
//   config_parser.cpp         the entry point, the top-level settings, derived identities, output
//   config_runtime.cpp        the runtime controls (shared/runtime_settings.h rows)
//   config_servers.cpp        `mcpServers` and `quiver.connections`
//   config_access.cpp         members, grants and operators; who gets which principal
//   config_oauth.cpp          `quiver.connections.<name>.oauth`, `quiver.oauth`, the token key
//   config_io.cpp             the real file system and environment
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/config.h"

namespace quiver {
namespace config_internal {

Error invalid(std::string message);
bool is_alnum(char c);
bool is_digit(char c);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
// A value shown in a message when it is not secret (env values of runtime controls, names):
// bounded and printable.
std::string shown(std::string_view value);
const char* json_type(const Json& v);
// "unknown setting" plus the closest known name when it is a likely typo.
std::string unknown_key_message(std::string_view key, const std::vector<std::string>& known);
std::string join_path(const std::string& dir, const std::string& path);
std::string strip_trailing_slashes(std::string path);

// ---- problems ----------------------------------------------------------------------------------

// ---- problems ----------------------------------------------------------------------------------

class Problems {
 public:
  void error(const std::string& path, const std::string& what) {
    errors_.push_back(path + ": " + what);
  }
  void warn(const std::string& path, const std::string& what) {
    warnings_.push_back(path + ": " + what);
  }
  bool has_errors() const { return !errors_.empty(); }
  std::size_t error_count() const { return errors_.size(); }
  const std::vector<std::string>& errors() const { return errors_; }
  std::vector<std::string>& warnings() { return warnings_; }

 private:
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
};

// ---- `${}` interpolation (config_interpolation.cpp) --------------------------------------------

bool is_var_name(std::string_view name);
int hex_value(char c);

// The environment as configuration sees it: the real variables plus built-ins (QUIVER_DATA_DIR),
// recording every name asked for.
class EnvView {
 public:
  explicit EnvView(const EnvMap& env) : env_(env) {}
  void set_builtin(const std::string& name, std::string value) { builtins_[name] = value; }
  std::optional<std::string> get(const std::string& name) {
    referenced_.insert(name);
    auto b = builtins_.find(name);
    if (b != builtins_.end()) return b->second;
    auto it = env_.find(name);
    if (it == env_.end()) return std::nullopt;
    return it->second;
  }
  const std::set<std::string>& referenced() const { return referenced_; }

 private:
  const EnvMap& env_;
  std::map<std::string, std::string> builtins_;
  std::set<std::string> referenced_;
};

struct Expanded {
  std::string value;
  std::vector<std::string> refs;  // variable names substituted, in order
};

// Expands `${NAME}`, `${env:NAME}`, `${NAME:-default}` and `$${`. With `percent_decode`, `%XX` in
// the literal text (not in substituted values) is decoded (URL userinfo).
Result<Expanded> expand(std::string_view tmpl, EnvView& env, bool percent_decode = false);
std::string template_source(const std::vector<std::string>& refs);
// Index of the first character of `chars` in `text` from `from`, outside `${...}`.
std::size_t find_outside_refs(std::string_view text, std::string_view chars, std::size_t from = 0);
std::size_t rfind_outside_refs(std::string_view text, char c);
std::string percent_decode(std::string_view text);

// ---- URLs, addresses, names (config_endpoints.cpp) ---------------------------------------------

// host[:port] or [v6][:port]. `default_port` < 0: the port is required.
Status split_host_port(std::string_view text, std::string* host, int* port, int default_port,
                       bool allow_zero_port);
// An absolute http(s) URL, checked by the transport's own parser (so the config accepts exactly
// what the transport dials) without printing it: a query or a path may hold a key.
Status check_http_url(std::string_view url);
// The URL as status output shows it: the query hidden.
std::string url_for_display(std::string_view url);
Status check_header_name(std::string_view name);
bool has_line_break_or_nul(std::string_view value);
Status check_env_name(std::string_view name);
Status check_key_name(std::string_view what, std::string_view name);

// A Redis URL cut into its parts, before `${}` expansion when it came from the file.
struct RedisParts {
  bool tls = false;
  bool cluster = false;                       // redis+cluster://, rediss+cluster://
  std::string user, password, host_port, db;  // templates or plain text
  bool has_password = false;
};

// `templated`: `${...}` is one opaque unit (the file's URL, expanded part by part afterwards);
// otherwise the URL is plain text (the environment's).
Result<RedisParts> split_redis_url(std::string_view url, bool templated);
Status finish_redis(const RedisParts& parts, const std::string& host_port, const std::string& db,
                    RedisConfig* out);

// ---- the parser (methods in the config_*.cpp file of their concern) ----------------------------

extern const std::vector<std::string> kQuiverKeys;
extern const std::vector<std::string> kConnectionKeys;
extern const std::vector<std::string> kServerKeys;

// A server entry before the quiver section is applied.
struct Server {
  ConnectionConfig conn;
  std::string path;  // "mcpServers.<name>"
  bool has_headers = false;
};

class Parser {
 public:
  explicit Parser(const ConfigSources& sources) : src_(sources), env_(sources.env) {}

  Result<AgentConfig> run();

 private:
  std::optional<std::string> string_field(const Json& obj, const char* key,
                                          const std::string& path) {
    const Json* v = json_field(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      p_.error(path + "." + key, std::string("must be a string, not ") + json_type(*v));
      return std::nullopt;
    }
    return v->get<std::string>();
  }
  std::optional<bool> bool_field(const Json& obj, const char* key, const std::string& path) {
    const Json* v = json_field(obj, key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      p_.error(path + "." + key, std::string("must be true or false, not ") + json_type(*v));
      return std::nullopt;
    }
    return v->get<bool>();
  }
  // Expands a non-secret template; reports at `path`.
  std::optional<std::string> expand_plain(const std::string& tmpl, const std::string& path) {
    Result<Expanded> e = expand(tmpl, env_);
    if (!e.ok()) {
      p_.error(path, e.error().message);
      return std::nullopt;
    }
    return e->value;
  }
  std::optional<Secret> expand_secret(const std::string& tmpl, const std::string& path) {
    Result<Expanded> e = expand(tmpl, env_);
    if (!e.ok()) {
      p_.error(path, e.error().message);
      return std::nullopt;
    }
    Secret s(e->value, template_source(e->refs));
    secrets_.push_back(s);
    return s;
  }

  std::optional<Secret> secret_ref(const Json& v, const std::string& path);
  // Each entry of the object `quiver.<field>` (`names` -> secret reference; a name is checked as
  // `what`), handed to `use` with its path; a wrong shape or name is reported and skipped.
  using NamedSecretUse =
      std::function<void(const std::string& path, const std::string& name, const Secret& secret)>;
  void named_secrets(const Json& quiver, const char* field, const char* names, const char* what,
                     const NamedSecretUse& use);
  void top_level_settings(const Json* quiver);
  void runtime(const Json* quiver);
  void redis(const Json* quiver);
  void redis_url(const Json* quiver);
  void redis_tls(const Json* quiver);
  void servers(const Json& root);
  void server(const std::string& name, const Json& entry);
  void connection_settings(const Json* quiver);
  void connection(Server& server, const Json& settings, const std::string& path);
  void members_and_grants(const Json* quiver);
  // `quiver.connections.<name>.oauth` (`path` is the connection's); nullopt after an error.
  std::optional<OAuthConnectionSettings> oauth_connection(const Json& settings, bool per_member,
                                                          const std::string& path);
  // `quiver.oauth`, and the key every auth-oauth connection needs.
  void oauth_agent(const Json* quiver);
  void keys(const Json* quiver);
  void identities();
  void env_warnings();

  const ConfigSources& src_;
  EnvView env_;
  Problems p_;
  AgentConfig cfg_;
  std::vector<Server> servers_;
  std::set<std::string> disabled_names_;
  std::set<std::string> broken_names_;  // servers whose entry had an error
  std::vector<Secret> secrets_;         // everything resolved so far, to redact the error text
};

Json secret_json(const Secret& s);
// Every runtime control by its field name, as the effective configuration shows it.
Json runtime_controls_json(const RuntimeControls& runtime);

}  // namespace config_internal
}  // namespace quiver
