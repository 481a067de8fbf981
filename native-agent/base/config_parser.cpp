// The configuration parser's entry point (`parse_config`): the JSON text, the top-level `quiver`
// keys, the store and listen settings, the derived identities (config_hash), and the effective
// configuration as `status --config` prints it. The other sections are parsed by the config_*.cpp
// file of their concern (config_internal.h lists them).
#include <algorithm>
#include <memory>
#include <utility>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"
#include "native-agent/base/redactor.h"
#include "shared/ascii.h"
#include "shared/mcp_endpoint.h"
#include "shared/sha256.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

// ---- connections -------------------------------------------------------------------------------

Result<std::string> connection_id_for_name(std::string_view name) {
  if (name.empty()) return invalid("a server name is empty");
  if (validate_connection_id(name).ok()) return std::string(name);
  std::string base;
  for (char c : name) {
    if (is_alnum(c) || c == '.' || c == '_' || c == '-') {
      base += c;
    } else if (base.empty() || base.back() != '-') {
      base += '-';
    }
  }
  if (base.size() > kMaxIdLength - 9) base.resize(kMaxIdLength - 9);
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base = "server";
  return base + "-" + sha256_hex(name).substr(0, 8);
}

std::string ConnectionConfig::describe() const {
  std::string out = id + " (" + transport_kind_name(endpoint.transport) + " ";
  out +=
      endpoint.transport == TransportKind::kHttp ? url_for_display(written_url) : endpoint.command;
  out += std::string(", auth ") + auth_type_name(auth) + ", " +
         credential_mode_name(credential_mode) + ")";
  return out;
}

Json ConnectionConfig::summary_json() const {
  return Json::object({{"id", id},
                       {"name", name},
                       {"transport", transport_kind_name(endpoint.transport)},
                       {"credential_mode", credential_mode_name(credential_mode)}});
}

std::ostream& operator<<(std::ostream& out, const ConnectionConfig& connection) {
  return out << connection.describe();
}

Json AgentConfig::effective_config_json() const {
  Json out = Json::object();
  out["namespace"] = ns;
  out["store"] = redis.has_value() ? "redis" : "sqlite";
  out["redis"] = redis.has_value() ? Json(redis->describe()) : Json(nullptr);
  out["data_dir"] = data_dir;
  out["listen"] = listen.describe();
  out["allow_private_upstreams"] = allow_private_upstreams;
  out["mcp_allowed_origins"] = Json(mcp_allowed_origins);
  out["runtime"] = runtime_controls_json(runtime);
  out["env_overrides"] = Json(env_overrides);
  Json keys = Json::object();
  for (const auto& [kid, secret] : caller_token_keys) keys[kid] = secret_json(secret);
  out["caller_token_keys"] = keys;
  out["caller_token_signing_kid"] =
      caller_token_signing_kid.empty() ? Json(nullptr) : Json(caller_token_signing_kid);
  Json hooks = Json::object();
  for (const auto& [name, secret] : webhook_secrets) hooks[name] = secret_json(secret);
  out["webhook_secrets"] = hooks;
  out["oauth"] = Json::object({{"key", oauth.key ? secret_json(*oauth.key) : Json(nullptr)},
                               {"redirect_uri", oauth.redirect_uri},
                               {"token_store", oauth.token_store},
                               {"refresh_ahead_ms", oauth.refresh_ahead_ms}});
  out["members"] = Json(members);
  out["operators"] = Json(operators);
  Json g = Json::object();
  for (const auto& [member, ids] : grants) g[member] = Json(ids);
  out["grants"] = g;

  Json conns = Json::array();
  for (const ConnectionConfig& c : connections) {
    Json j = Json::object();
    j["id"] = c.id;
    j["name"] = c.name;
    j["transport"] = transport_kind_name(c.endpoint.transport);
    if (c.endpoint.transport == TransportKind::kStdio) {
      j["command"] = c.written_command;
      j["args"] = Json(c.written_args);
      if (!c.endpoint.cwd.empty()) j["cwd"] = c.endpoint.cwd;
      Json env = Json::object();
      for (const auto& [k, v] : c.endpoint.env) env[k] = secret_json(v);
      j["env"] = env;
      if (!c.credential_env.empty()) j["credential_env"] = c.credential_env;
    } else {
      j["url"] = url_for_display(c.written_url);
      Json headers = Json::object();
      for (const auto& [k, v] : c.endpoint.headers) headers[k] = secret_json(v);
      j["headers"] = headers;
      j["allow_private_addresses"] = c.endpoint.allow_private_addresses;
      if (!c.api_key_header.empty()) j["api_key_header"] = c.api_key_header;
    }
    j["credential_mode"] = credential_mode_name(c.credential_mode);
    j["auth"] = auth_type_name(c.auth);
    j["credential_version"] = c.credential_version;
    if (c.credential.has_value()) j["credential"] = secret_json(*c.credential);
    if (!c.member_credentials.empty()) {
      Json creds = Json::object();
      for (const auto& [m, s] : c.member_credentials) creds[m] = secret_json(s);
      j["credentials"] = creds;
    }
    if (c.oauth.has_value()) {
      Json o = c.oauth->identity_json();
      o["client_secret"] =
          c.oauth->client_secret ? secret_json(*c.oauth->client_secret) : Json(nullptr);
      o["private_key"] = c.oauth->private_key ? secret_json(*c.oauth->private_key) : Json(nullptr);
      j["oauth"] = std::move(o);
    }
    j["auto_enable_new_capabilities"] = c.auto_enable_new_capabilities;
    if (c.list_timeout_ms) j["list_timeout_ms"] = *c.list_timeout_ms;
    if (c.request_timeout_ms) j["request_timeout_ms"] = *c.request_timeout_ms;
    if (c.startup_timeout_ms) j["startup_timeout_ms"] = *c.startup_timeout_ms;
    j["granted_members"] = Json(c.granted_members);
    Json principals = Json::array();
    for (const Principal& p : c.principals()) principals.push_back(p.str());
    j["principals"] = principals;
    j["config_hash"] = c.config_hash;
    conns.push_back(std::move(j));
  }
  out["connections"] = conns;
  out["warnings"] = Json(warnings);
  return out;
}

// The one JSON entry point (shared/json.h: size and depth bounds, messages that never quote the
// text), with comments allowed as in other MCP clients' config files.
Result<Json> parse_config_json(std::string_view text, const std::string& origin) {
  JsonParseOptions options;
  options.max_bytes = kMaxConfigBytes;
  options.allow_comments = true;
  Result<Json> value = parse_json(text, options);
  if (!value.ok()) return config_internal::invalid(origin + ": " + value.error().message);
  return value;
}

Result<AgentConfig> parse_config(const ConfigSources& sources) { return Parser(sources).run(); }

std::optional<int64_t> parse_utc_time_ms(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SSZ or YYYY-MM-DDTHH:MM:SS.fffZ
  if (t.size() != 20 && t.size() != 24) return std::nullopt;
  auto num = [&](std::size_t at, std::size_t n) -> int64_t {
    int64_t v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (!is_digit(t[i])) return -1;
      v = v * 10 + (t[i] - '0');
    }
    return v;
  };
  if (t[4] != '-' || t[7] != '-' || t[10] != 'T' || t[13] != ':' || t[16] != ':' ||
      t.back() != 'Z') {
    return std::nullopt;
  }
  const int64_t y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2),
                s = num(17, 2);
  int64_t ms = 0;
  if (t.size() == 24) {
    if (t[19] != '.') return std::nullopt;
    ms = num(20, 3);
  }
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
      s < 0 || s > 60 || ms < 0) {
    return std::nullopt;
  }
  // Days from the civil date (Howard Hinnant's algorithm).
  const int64_t yy = y - (mo <= 2 ? 1 : 0);
  const int64_t era = yy / 400;
  const int64_t yoe = yy - era * 400;
  const int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = era * 146097 + doe - 719468;
  return ((days * 24 + h) * 60 + mi) * 60000 + s * 1000 + ms;
}

namespace config_internal {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

bool is_alnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// A value shown in a message when it is not secret (env values of runtime controls, names):
// bounded and printable.
std::string shown(std::string_view value) {
  std::string out;
  for (char c : value.substr(0, 40)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (value.size() > 40) out += "…";
  return out;
}

const char* json_type(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "an unsupported value";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// "unknown setting" plus the closest known name when it is a likely typo.
std::string unknown_key_message(std::string_view key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = 3;
  const std::string lower = ascii_lower(key);
  for (const std::string& k : known) {
    std::size_t d = edit_distance(lower, k);
    // A dropped suffix (`list_timeout` for `list_timeout_ms`) is a typo too.
    if (lower.size() >= 4 && (k.rfind(lower, 0) == 0 || lower.rfind(k, 0) == 0)) d = 1;
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  std::string out = "unknown setting";
  if (!best.empty()) out += " (did you mean `" + best + "`?)";
  return out;
}

std::string join_path(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  if (path == ".") return dir;
  std::string p = path;
  while (p.size() >= 2 && p[0] == '.' && p[1] == '/') p.erase(0, 2);
  return dir.back() == '/' ? dir + p : dir + "/" + p;
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// clang-format off
const std::vector<std::string> kQuiverKeys = {
    "namespace", "redis", "redis_tls", "data_dir", "listen", "allow_private_upstreams", "runtime",
    "caller_token_keys", "caller_token_signing_kid", "webhook_secrets", "members", "grants",
    "operators", "connections", "revision", "oauth", "mcp_allowed_origins"};
// clang-format on

// ---- namespace, data_dir, listen, allow_private_upstreams --------------------------------------

void Parser::top_level_settings(const Json* q) {
  const Json empty = Json::object();
  const Json& quiver = q != nullptr ? *q : empty;
  auto env_value = [&](const char* name) -> std::optional<std::string> {
    auto it = src_.env.find(name);
    if (it == src_.env.end()) return std::nullopt;
    cfg_.env_overrides.insert(name);
    return it->second;
  };
  // A string setting of `quiver` an environment variable overrides; `path` is set to where the
  // value came from (the place an error names).
  auto overridable = [&](const char* key, const char* env_name, std::string* path) {
    *path = std::string("quiver.") + key;
    std::optional<std::string> value = string_field(quiver, key, "quiver");
    if (std::optional<std::string> e = env_value(env_name)) {
      value = e;
      *path = env_name;
    }
    return value;
  };

  // namespace
  std::string ns_path;
  std::optional<std::string> ns = overridable("namespace", kEnvNamespace, &ns_path);
  if (ns.has_value()) {
    Status s = validate_namespace(*ns);
    if (!s.ok()) p_.error(ns_path, s.error().message);
    cfg_.ns = *ns;
  }

  // data_dir
  std::optional<std::string> dir;
  if (std::optional<std::string> e = env_value(kEnvDataDir)) {
    if (e->empty()) p_.error(kEnvDataDir, "is empty");
    dir = e;
  } else if (std::optional<std::string> d = string_field(quiver, "data_dir", "quiver")) {
    dir = expand_plain(*d, "quiver.data_dir");
    if (dir.has_value() && dir->empty()) p_.error("quiver.data_dir", "is empty");
  } else {
    auto xdg = src_.env.find("XDG_STATE_HOME");
    auto home = src_.env.find("HOME");
    if (xdg != src_.env.end() && !xdg->second.empty()) {
      dir = xdg->second + "/quiver";
    } else if (home != src_.env.end() && !home->second.empty()) {
      dir = home->second + "/.local/state/quiver";
    } else {
      dir = "quiver-data";
    }
  }
  cfg_.data_dir = strip_trailing_slashes(join_path(src_.working_dir, dir.value_or("")));
  env_.set_builtin(kEnvDataDir, cfg_.data_dir);

  // revision
  if (const Json* rev = json_field(quiver, "revision")) {
    std::optional<int64_t> ms;
    if (rev->is_number_integer()) {
      if (rev->is_number_unsigned() ? rev->get<uint64_t>() <= INT64_MAX
                                    : rev->get<int64_t>() >= 1) {
        ms = rev->get<int64_t>();
      }
    } else if (rev->is_string()) {
      ms = parse_utc_time_ms(rev->get<std::string>());
    }
    if (!ms.has_value() || *ms < 1) {
      p_.error("quiver.revision",
               "must be an integer >= 1 (ms since the epoch) or a UTC time "
               "YYYY-MM-DDTHH:MM:SS[.fff]Z");
    } else {
      cfg_.revision_ms = *ms;
    }
  }

  // listen
  std::string listen_path;
  std::optional<std::string> listen = overridable("listen", kEnvListen, &listen_path);
  if (listen.has_value()) {
    Result<ListenAddress> a = parse_listen_address(*listen);
    if (!a.ok()) {
      p_.error(listen_path, a.error().message);
    } else {
      cfg_.listen = *a;
    }
  }
  if (!cfg_.listen.is_loopback()) {
    p_.warn(listen_path, "not a loopback address: the agent's API is reachable from the network");
  }

  // allow_private_upstreams
  if (std::optional<bool> b = bool_field(quiver, "allow_private_upstreams", "quiver")) {
    cfg_.allow_private_upstreams = *b;
  }
  if (std::optional<std::string> e = env_value(kEnvAllowPrivateUpstreams)) {
    const std::string v = ascii_lower(*e);
    if (v == "1" || v == "true" || v == "yes") {
      cfg_.allow_private_upstreams = true;
    } else if (v == "0" || v == "false" || v == "no") {
      cfg_.allow_private_upstreams = false;
    } else {
      p_.error(kEnvAllowPrivateUpstreams,
               "`" + shown(*e) + "` is not a boolean (true, false, 1, 0, yes, no)");
    }
  }

  // mcp_allowed_origins: an array of origins in the file, a comma-separated list in the
  // environment (as the edge reads it); the environment wins.
  if (std::optional<std::string> e = env_value(kEnvMcpAllowedOrigins)) {
    Result<std::vector<std::string>> keys = parse_mcp_allowed_origins(*e);
    if (!keys.ok()) {
      p_.error(kEnvMcpAllowedOrigins, keys.error().message);
    } else {
      cfg_.mcp_allowed_origins = std::move(*keys);
    }
  } else if (const Json* list = json_field(quiver, "mcp_allowed_origins")) {
    if (!list->is_array()) {
      p_.error("quiver.mcp_allowed_origins",
               std::string("must be an array of origins, not ") + json_type(*list));
    } else {
      for (std::size_t i = 0; i < list->size(); ++i) {
        const std::string path = "quiver.mcp_allowed_origins[" + std::to_string(i) + "]";
        const Json& item = (*list)[i];
        std::optional<std::string> key;
        if (item.is_string() && item.get<std::string>().find(',') == std::string::npos) {
          key = mcp_origin_key(item.get<std::string>());
        }
        if (!key) {
          p_.error(path, "not an origin (scheme://host[:port], http or https, no path)");
        } else {
          cfg_.mcp_allowed_origins.push_back(std::move(*key));
        }
      }
    }
  }
}

// ---- derived identity --------------------------------------------------------------------------

void Parser::identities() {
  for (Server& s : servers_) {
    ConnectionConfig& c = s.conn;
    Result<std::string> hash = config_hash(c.identity());
    if (!hash.ok()) {
      p_.error(s.path, hash.error().message);
      continue;
    }
    c.config_hash = *hash;
  }
}

void Parser::env_warnings() {
  std::set<std::string> known = {kEnvNamespace,         kEnvRedisUrl,     kEnvRedisCaFile,
                                 kEnvRedisCertFile,     kEnvRedisKeyFile, kEnvRedisServerName,
                                 kEnvDataDir,           kEnvListen,       kEnvAllowPrivateUpstreams,
                                 kEnvMcpAllowedOrigins, kConfigPathEnv};
  for (const RuntimeControlInfo& info : kRuntimeControls) known.insert(info.env);
  for (const auto& [name, value] : src_.env) {
    if (name.rfind("QUIVER_", 0) != 0) continue;
    if (known.count(name) > 0 || env_.referenced().count(name) > 0) continue;
    p_.warn(name, "not a Quiver setting and not referenced by the config (ignored)");
  }
}

Result<AgentConfig> Parser::run() {
  const std::string origin = src_.origin.empty() ? "config" : std::string(src_.origin);
  if (src_.text.size() > kMaxConfigBytes) {
    return Error(ErrorCode::kTooLarge, origin + ": " + std::to_string(src_.text.size()) +
                                           " bytes; the limit is " +
                                           std::to_string(kMaxConfigBytes));
  }
  Result<Json> parsed = parse_config_json(src_.text, origin);
  if (!parsed.ok()) return parsed.error();
  const Json& root = *parsed;
  if (!root.is_object()) {
    return invalid(origin + ": the top level must be a JSON object, not " + json_type(root));
  }
  for (const auto& [key, value] : root.items()) {
    if (key != "mcpServers" && key != "quiver") p_.warn(key, "not used by Quiver (ignored)");
  }
  const Json* quiver = json_field(root, "quiver");
  if (quiver != nullptr && !quiver->is_object()) {
    p_.error("quiver", std::string("must be an object, not ") + json_type(*quiver));
    quiver = nullptr;
  }
  if (quiver != nullptr) {
    for (const auto& [key, value] : quiver->items()) {
      if (std::find(kQuiverKeys.begin(), kQuiverKeys.end(), key) == kQuiverKeys.end()) {
        p_.error("quiver." + key, unknown_key_message(key, kQuiverKeys));
      }
    }
  }

  top_level_settings(quiver);
  runtime(quiver);
  redis(quiver);
  servers(root);
  connection_settings(quiver);
  members_and_grants(quiver);
  keys(quiver);
  oauth_agent(quiver);
  env_warnings();
  if (!p_.has_errors()) identities();

  if (p_.has_errors()) {
    // Messages are built without values; redacting them is the second lock on the door.
    return invalid(redact(join(p_.errors(), "\n"), secrets_));
  }
  for (Server& s : servers_) cfg_.connections.push_back(std::move(s.conn));
  std::sort(cfg_.connections.begin(), cfg_.connections.end(),
            [](const ConnectionConfig& a, const ConnectionConfig& b) { return a.id < b.id; });
  for (std::string& w : p_.warnings()) cfg_.warnings.push_back(redact(w, secrets_));
  std::vector<std::string> values;
  for (const Secret& s : cfg_.secrets()) values.push_back(s.reveal());
  cfg_.redactor = std::make_shared<const Redactor>(values);
  return std::move(cfg_);
}

}  // namespace config_internal

}  // namespace quiver
