// `mcpServers` (the convention other MCP clients read) and `quiver.connections` (Quiver's settings
// per server): transports, commands, URLs, headers, credential modes and per-connection limits.
#include <algorithm>
#include <utility>

#include "native-agent/base/config_internal.h"
#include "shared/ascii.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

namespace config_internal {

// clang-format off
const std::vector<std::string> kConnectionKeys = {
    "id", "credential_mode", "auth", "credential_version", "credential", "credentials",
    "api_key_header", "credential_env", "auto_enable_new_capabilities", "allow_private_addresses",
    "list_timeout_ms", "request_timeout_ms", "startup_timeout_ms", "oauth"};
const std::vector<std::string> kServerKeys = {
    "type", "command", "args", "env", "cwd", "url", "headers", "disabled"};
// clang-format on

void Parser::servers(const Json& root) {
  const Json* servers = json_field(root, "mcpServers");
  if (servers == nullptr) {
    p_.warn("mcpServers", "no servers configured");
    return;
  }
  if (!servers->is_object()) {
    p_.error("mcpServers", std::string("must be an object, not ") + json_type(*servers));
    return;
  }
  if (servers->empty()) p_.warn("mcpServers", "no servers configured");
  for (const auto& [name, entry] : servers->items()) {
    const std::size_t before = servers_.size();
    server(name, entry);
    // Already reported; its settings and grants are not looked at (no second, misleading error).
    if (servers_.size() == before && disabled_names_.count(name) == 0) broken_names_.insert(name);
  }
}

void Parser::server(const std::string& name, const Json& entry) {
  const std::string path = "mcpServers." + name;
  // Each entry of the object of strings at `at` whose name `check_name` admits, its value
  // expanded as a secret and handed to `use` with its path; anything else is reported, skipped.
  auto secret_strings = [&](const Json& object, const std::string& at, const auto& check_name,
                            const auto& use) {
    if (!object.is_object()) {
      p_.error(at, std::string("must be an object of strings, not ") + json_type(object));
      return;
    }
    for (const auto& [k, v] : object.items()) {
      const std::string ep = at + "." + k;
      if (Status st = check_name(k); !st.ok()) {
        p_.error(ep, st.error().message);
        continue;
      }
      if (!v.is_string()) {
        p_.error(ep, std::string("must be a string, not ") + json_type(v));
        continue;
      }
      if (std::optional<Secret> sv = expand_secret(v.template get<std::string>(), ep))
        use(ep, k, *sv);
    }
  };
  if (!entry.is_object()) {
    p_.error(path, std::string("must be an object, not ") + json_type(entry));
    return;
  }
  Result<std::string> id = connection_id_for_name(name);
  if (!id.ok()) {
    p_.error(path, id.error().message);
    return;
  }
  if (std::optional<bool> disabled = bool_field(entry, "disabled", path);
      disabled.value_or(false)) {
    p_.warn(path, "disabled: skipped");
    disabled_names_.insert(name);
    return;
  }
  for (const auto& [key, value] : entry.items()) {
    if (std::find(kServerKeys.begin(), kServerKeys.end(), key) == kServerKeys.end()) {
      p_.warn(path + "." + key, "not used by Quiver (ignored)");
    }
  }

  Server s;
  s.path = path;
  s.conn.name = name;
  s.conn.id = *id;
  const std::optional<std::string> type = string_field(entry, "type", path);
  const std::optional<std::string> command = string_field(entry, "command", path);
  const std::optional<std::string> url = string_field(entry, "url", path);
  if (type.has_value()) {
    const std::string t = ascii_lower(*type);
    if (t == "stdio") {
      s.conn.endpoint.transport = TransportKind::kStdio;
    } else if (t == "http" || t == "streamable-http" || t == "streamablehttp" ||
               t == "streamable_http") {
      s.conn.endpoint.transport = TransportKind::kHttp;
    } else if (t == "sse") {
      p_.error(path + ".type",
               "the legacy HTTP+SSE transport is not supported; use streamable-http (or set "
               "\"disabled\": true)");
      return;
    } else {
      p_.error(path + ".type", "`" + shown(*type) + "` is not stdio, http or streamable-http");
      return;
    }
  } else if (command.has_value() && url.has_value()) {
    p_.error(path, "has both `command` and `url`; set `type` or remove one");
    return;
  } else if (command.has_value()) {
    s.conn.endpoint.transport = TransportKind::kStdio;
  } else if (url.has_value()) {
    s.conn.endpoint.transport = TransportKind::kHttp;
  } else {
    if (json_field(entry, "command") == nullptr && json_field(entry, "url") == nullptr) {
      p_.error(path, "needs `command` (stdio) or `url` (Streamable HTTP)");
    }
    return;
  }

  if (s.conn.endpoint.transport == TransportKind::kStdio) {
    if (!command.has_value()) {
      if (json_field(entry, "command") == nullptr) p_.error(path, "type stdio needs `command`");
      return;
    }
    for (const char* k : {"url", "headers"}) {
      if (json_field(entry, k) != nullptr)
        p_.warn(path + "." + k, "only for HTTP servers (ignored)");
    }
    s.conn.written_command = *command;
    if (std::optional<std::string> c = expand_plain(*command, path + ".command")) {
      if (c->empty()) p_.error(path + ".command", "is empty");
      s.conn.endpoint.command = *c;
    }
    if (const Json* args = json_field(entry, "args")) {
      if (!args->is_array()) {
        p_.error(path + ".args",
                 std::string("must be an array of strings, not ") + json_type(*args));
      } else {
        for (std::size_t i = 0; i < args->size(); ++i) {
          const std::string ap = path + ".args[" + std::to_string(i) + "]";
          const Json& a = (*args)[i];
          if (!a.is_string()) {
            p_.error(ap, std::string("must be a string, not ") + json_type(a));
            continue;
          }
          s.conn.written_args.push_back(a.get<std::string>());
          if (std::optional<std::string> v = expand_plain(a.get<std::string>(), ap)) {
            s.conn.endpoint.args.push_back(*v);
          }
        }
      }
    }
    if (const Json* env = json_field(entry, "env")) {
      secret_strings(*env, path + ".env", check_env_name,
                     [&](const std::string& ep, const std::string& k, const Secret& sv) {
                       if (sv.reveal().find('\0') != std::string::npos) {
                         p_.error(ep, "the value contains NUL");
                         return;
                       }
                       s.conn.endpoint.env[k] = sv;
                     });
    }
    if (std::optional<std::string> cwd = string_field(entry, "cwd", path)) {
      if (std::optional<std::string> v = expand_plain(*cwd, path + ".cwd")) {
        s.conn.endpoint.cwd = join_path(src_.working_dir, *v);
      }
    }
  } else {
    if (!url.has_value()) {
      if (json_field(entry, "url") == nullptr) p_.error(path, "type http needs `url`");
      return;
    }
    for (const char* k : {"command", "args", "env", "cwd"}) {
      if (json_field(entry, k) != nullptr)
        p_.warn(path + "." + k, "only for stdio servers (ignored)");
    }
    s.conn.written_url = *url;
    Result<Expanded> u = expand(*url, env_);
    if (!u.ok()) {
      p_.error(path + ".url", u.error().message);
    } else {
      Status st = check_http_url(u->value);
      if (!st.ok()) p_.error(path + ".url", st.error().message);
      s.conn.endpoint.url = u->value;
      // Some upstreams take a token in the path: what was substituted is redacted like a secret.
      for (const std::string& ref : u->refs) {
        Secret value(env_.get(ref).value_or(""), "env:" + ref);
        secrets_.push_back(value);
        s.conn.url_substitutions.push_back(std::move(value));
      }
    }
    if (const Json* headers = json_field(entry, "headers")) {
      std::set<std::string> seen;
      auto admit = [&seen](const std::string& k) -> Status {
        if (Status st = check_header_name(k); !st.ok()) return st;
        if (!seen.insert(ascii_lower(k)).second) {
          return Error(ErrorCode::kInvalidArgument,
                       "the same header is set twice (names are case-insensitive)");
        }
        return Status::Ok();
      };
      secret_strings(*headers, path + ".headers", admit,
                     [&](const std::string& hp, const std::string& k, const Secret& sv) {
                       if (has_line_break_or_nul(sv.reveal())) {
                         p_.error(hp, "the value contains a line break or NUL");
                         return;
                       }
                       s.conn.endpoint.headers[k] = sv;
                     });
      if (headers->is_object()) s.has_headers = !headers->empty();
    }
    s.conn.endpoint.allow_private_addresses = cfg_.allow_private_upstreams;
  }
  servers_.push_back(std::move(s));
}

// ---- quiver.connections ------------------------------------------------------------------------

void Parser::connection_settings(const Json* quiver) {
  const Json* conns = quiver != nullptr ? json_field(*quiver, "connections") : nullptr;
  if (conns != nullptr && !conns->is_object()) {
    p_.error("quiver.connections", std::string("must be an object, not ") + json_type(*conns));
    conns = nullptr;
  }
  if (conns != nullptr) {
    for (const auto& [name, settings] : conns->items()) {
      const std::string path = "quiver.connections." + name;
      if (disabled_names_.count(name) > 0 || broken_names_.count(name) > 0) continue;
      auto it = std::find_if(servers_.begin(), servers_.end(),
                             [&n = name](const Server& s) { return s.conn.name == n; });
      if (it == servers_.end()) {
        std::vector<std::string> names;
        for (const Server& s : servers_) names.push_back(s.conn.name);
        std::string msg = "no server of that name in mcpServers";
        const std::string hint = unknown_key_message(name, names);
        if (hint.find("did you mean") != std::string::npos) msg += hint.substr(15);
        p_.error(path, msg);
        continue;
      }
      if (!settings.is_object()) {
        p_.error(path, std::string("must be an object, not ") + json_type(settings));
        continue;
      }
      connection(*it, settings, path);
    }
  }
  // Servers without settings still need their defaults checked against their entry.
  for (Server& s : servers_) {
    if (conns != nullptr && json_field(*conns, s.conn.name.c_str()) != nullptr) continue;
    connection(s, Json::object(), "quiver.connections." + s.conn.name);
  }

  // Ids are unique.
  std::map<std::string, std::string> by_id;
  for (const Server& s : servers_) {
    auto [it, inserted] = by_id.emplace(s.conn.id, s.conn.name);
    if (!inserted) {
      p_.error(s.path, "its connection id `" + s.conn.id + "` is also the id of server `" +
                           it->second + "`; set quiver.connections.<name>.id");
    }
  }
}

void Parser::connection(Server& server, const Json& settings, const std::string& path) {
  ConnectionConfig& c = server.conn;
  for (const auto& [key, value] : settings.items()) {
    if (std::find(kConnectionKeys.begin(), kConnectionKeys.end(), key) == kConnectionKeys.end()) {
      p_.error(path + "." + key, unknown_key_message(key, kConnectionKeys));
    }
  }
  if (std::optional<std::string> id = string_field(settings, "id", path)) {
    Status s = validate_connection_id(*id);
    if (!s.ok()) {
      p_.error(path + ".id", s.error().message);
    } else {
      c.id = *id;
    }
  }
  if (std::optional<std::string> mode = string_field(settings, "credential_mode", path)) {
    c.credential_mode = credential_mode_from_string(*mode);
    if (c.credential_mode == CredentialMode::kUnknown) {
      p_.error(path + ".credential_mode", "`" + shown(*mode) + "` is not shared or per_member");
      return;
    }
  }
  const bool http = c.endpoint.transport == TransportKind::kHttp;
  c.auth = http && server.has_headers ? AuthType::kHeaders : AuthType::kNone;
  const bool auth_given = json_field(settings, "auth") != nullptr;
  if (std::optional<std::string> auth = string_field(settings, "auth", path)) {
    c.auth = auth_type_from_string(*auth);
    if (c.auth == AuthType::kUnknown) {
      p_.error(path + ".auth",
               "`" + shown(*auth) + "` is not none, bearer, api_key, headers or oauth");
      return;
    }
  } else if (auth_given) {
    return;  // wrong type, reported
  }
  if (const Json* v = json_field(settings, "credential_version")) {
    if (v->is_string()) {
      c.credential_version = v->get<std::string>();
    } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
      c.credential_version = std::to_string(v->get<int64_t>());
    } else {
      p_.error(path + ".credential_version", "must be a string or a non-negative whole number");
    }
  }
  if (std::optional<bool> b = bool_field(settings, "auto_enable_new_capabilities", path)) {
    c.auto_enable_new_capabilities = *b;
  }
  // Per-connection deadlines, each overriding the runtime control of the same name.
  for (auto [key, out] : {std::pair{"list_timeout_ms", &c.list_timeout_ms},
                          std::pair{"request_timeout_ms", &c.request_timeout_ms},
                          std::pair{"startup_timeout_ms", &c.startup_timeout_ms}}) {
    const Json* v = json_field(settings, key);
    if (v == nullptr) continue;
    bool startup = std::string_view(key) == "startup_timeout_ms";
    if (!v->is_number_integer() || v->get<int64_t>() < (startup ? 0 : 1) ||
        v->get<int64_t>() > 600000) {
      p_.error(path + "." + key, std::string("must be a whole number of milliseconds, ") +
                                     (startup ? "0" : "1") + " to 600000");
      continue;
    }
    *out = v->get<int64_t>();
  }
  if (std::optional<bool> b = bool_field(settings, "allow_private_addresses", path)) {
    if (!http) {
      p_.error(path + ".allow_private_addresses", "only for HTTP servers");
    } else {
      c.endpoint.allow_private_addresses = *b;
    }
  }

  const Json* credential = json_field(settings, "credential");
  const Json* credentials = json_field(settings, "credentials");
  const bool per_member = c.credential_mode == CredentialMode::kPerMember;
  const bool takes_credential = c.auth == AuthType::kBearer || c.auth == AuthType::kApiKey;

  // Where the credential goes.
  std::optional<std::string> api_key_header = string_field(settings, "api_key_header", path);
  std::optional<std::string> credential_env = string_field(settings, "credential_env", path);
  if (api_key_header.has_value() && !(http && c.auth == AuthType::kApiKey)) {
    p_.error(path + ".api_key_header", "only with auth api_key on an HTTP server");
  }
  if (credential_env.has_value() && !(!http && c.auth == AuthType::kApiKey)) {
    p_.error(path + ".credential_env", "only with auth api_key on a stdio server");
  }
  switch (c.auth) {
    case AuthType::kBearer:
      if (!http) {
        p_.error(path + ".auth",
                 "bearer needs an HTTP server; for stdio use api_key with "
                 "credential_env");
        return;
      }
      for (const auto& [name, value] : c.endpoint.headers) {
        if (ascii_lower(name) == "authorization") {
          p_.error(server.path + ".headers." + name,
                   "conflicts with auth bearer, which sets Authorization");
        }
      }
      break;
    case AuthType::kApiKey:
      if (http) {
        c.api_key_header = api_key_header.value_or(kDefaultApiKeyHeader);
        Status st = check_header_name(c.api_key_header);
        if (!st.ok()) p_.error(path + ".api_key_header", st.error().message);
        for (const auto& [name, value] : c.endpoint.headers) {
          if (ascii_lower(name) == ascii_lower(c.api_key_header)) {
            p_.error(server.path + ".headers." + name,
                     "conflicts with auth api_key, which sets this header");
          }
        }
      } else {
        if (!credential_env.has_value()) {
          p_.error(path + ".credential_env",
                   "required with auth api_key on a stdio server (the env var the key goes in)");
          return;
        }
        c.credential_env = *credential_env;
        Status st = check_env_name(c.credential_env);
        if (!st.ok()) p_.error(path + ".credential_env", st.error().message);
        if (c.endpoint.env.count(c.credential_env) > 0) {
          p_.error(server.path + ".env." + c.credential_env,
                   "conflicts with credential_env, which sets this variable");
        }
      }
      break;
    case AuthType::kHeaders:
      if (!http) {
        p_.error(path + ".auth", "headers needs an HTTP server; stdio servers take `env`");
        return;
      }
      if (per_member) {
        p_.error(path + ".auth",
                 "headers (the server's own headers) cannot be per member; use "
                 "bearer or api_key with per-member credentials");
        return;
      }
      break;
    case AuthType::kOAuth:
      if (!http) {
        p_.error(path + ".auth", "oauth is only for HTTP servers");
        return;
      }
      for (const auto& [name, value] : c.endpoint.headers) {
        if (ascii_lower(name) == "authorization") {
          p_.error(server.path + ".headers." + name,
                   "conflicts with auth oauth, which sets Authorization");
        }
      }
      c.oauth = oauth_connection(settings, per_member, path);
      break;
    case AuthType::kNone:
      if (per_member) {
        p_.error(path + ".credential_mode",
                 "per_member needs auth bearer, api_key or oauth (a credential per member)");
        return;
      }
      break;
    default:
      break;
  }

  if (c.auth != AuthType::kOAuth && json_field(settings, "oauth") != nullptr) {
    p_.error(path + ".oauth", "only with auth oauth");
  }
  // The credentials themselves.
  if (c.auth == AuthType::kOAuth) {
    for (const char* k : {"credential", "credentials"}) {
      if (json_field(settings, k) != nullptr) {
        p_.error(path + "." + k,
                 "not with auth oauth: tokens come from the authorization server (members "
                 "connect through POST /v1/mcp-connections/{id}/authorize)");
      }
    }
    return;
  }
  if (!takes_credential) {
    if (credential != nullptr) {
      p_.error(path + ".credential", "only with auth bearer or api_key");
    }
    if (credentials != nullptr) {
      p_.error(path + ".credentials",
               "only with auth bearer or api_key and credential_mode "
               "per_member");
    }
    return;
  }
  auto check_value = [&](const Secret& secret, const std::string& p) {
    if (http ? has_line_break_or_nul(secret.reveal())
             : secret.reveal().find('\0') != std::string::npos) {
      p_.error(
          p, http ? "the credential contains a line break or NUL" : "the credential contains NUL");
      return false;
    }
    return true;
  };
  if (!per_member) {
    if (credentials != nullptr) {
      p_.error(path + ".credentials",
               "only with credential_mode per_member; a shared connection takes `credential`");
    }
    if (credential == nullptr) {
      p_.error(path + ".credential",
               std::string("required with auth ") + auth_type_name(c.auth) + " (shared mode)");
      return;
    }
    if (std::optional<Secret> s = secret_ref(*credential, path + ".credential")) {
      if (check_value(*s, path + ".credential")) c.credential = *s;
    }
    return;
  }
  if (credential != nullptr) {
    p_.error(path + ".credential",
             "a per_member connection takes `credentials` (member id -> reference)");
  }
  if (credentials == nullptr) {
    p_.error(path + ".credentials", "required with credential_mode per_member");
    return;
  }
  if (!credentials->is_object()) {
    p_.error(path + ".credentials", std::string("must be an object (member id -> reference), "
                                                "not ") +
                                        json_type(*credentials));
    return;
  }
  for (const auto& [member, ref] : credentials->items()) {
    const std::string mp = path + ".credentials." + member;
    Status st = validate_member_id(member);
    if (!st.ok()) {
      p_.error(mp, st.error().message);
      continue;
    }
    if (std::optional<Secret> s = secret_ref(ref, mp)) {
      if (check_value(*s, mp)) c.member_credentials[member] = *s;
    }
  }
}

}  // namespace config_internal

}  // namespace quiver
