#include "native-agent/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <utility>

#include <unistd.h>

#include "native-agent/url_guard.h"
#include "shared/ascii.h"
#include "shared/runtime_settings.h"
#include "shared/sha256.h"

namespace quiver {

// ---- secrets -----------------------------------------------------------------------------------

std::ostream& operator<<(std::ostream& out, const Secret& secret) {
  return out << secret.describe();
}

std::string redact(std::string_view text, const std::vector<Secret>& secrets) {
  std::vector<std::string> values;
  values.reserve(secrets.size());
  for (const Secret& s : secrets) values.push_back(s.reveal());
  return Redactor(values).redact(text);
}

// ---- runtime controls --------------------------------------------------------------------------

// The agent's rows of the one runtime-settings table (shared/runtime_settings.h), which the edge
// reads too: the same names, bounds and number syntax at both hosts.
const std::vector<RuntimeControlInfo> kRuntimeControls = [] {
  std::vector<RuntimeControlInfo> rows;
  for (const RuntimeSetting& s : runtime_settings()) {
    if ((s.hosts & kRuntimeAgent) == 0) continue;
    rows.push_back(RuntimeControlInfo{s.field, s.env, s.min, s.max, s.is_ratio()});
  }
  return rows;
}();

FreshnessPolicy RuntimeControls::freshness_policy() const {
  FreshnessPolicy p;
  p.fresh_ttl_ms = fresh_ttl_ms;
  p.max_age_ms = max_age_ms;
  p.refresh_ahead_ratio = refresh_ahead_ratio;
  p.min_upstream_ttl_ms = std::min(min_upstream_ttl_ms, fresh_ttl_ms);
  return p;
}

namespace {

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

// ---- `${}` interpolation -----------------------------------------------------------------------

bool is_var_name(std::string_view name) {
  if (name.empty()) return false;
  if (is_digit(name[0])) return false;
  for (char c : name) {
    if (!is_alnum(c) && c != '_') return false;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

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
Result<Expanded> expand(std::string_view tmpl, EnvView& env, bool percent_decode = false) {
  Expanded out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl.compare(i, 3, "$${") == 0) {
      out.value += "${";
      i += 3;
      continue;
    }
    if (tmpl.compare(i, 2, "${") == 0) {
      const std::size_t close = tmpl.find('}', i + 2);
      if (close == std::string_view::npos) {
        return invalid("a `${` at position " + std::to_string(i) + " is not closed by `}`");
      }
      std::string_view body = tmpl.substr(i + 2, close - i - 2);
      if (body.substr(0, 4) == "env:") body = body.substr(4);
      std::optional<std::string_view> fallback;
      const std::size_t dash = body.find(":-");
      if (dash != std::string_view::npos) {
        fallback = body.substr(dash + 2);
        body = body.substr(0, dash);
      }
      if (!is_var_name(body)) {
        return invalid("the `${...}` at position " + std::to_string(i) +
                       " does not name an environment variable ([A-Za-z_][A-Za-z0-9_]*)");
      }
      const std::string name(body);
      std::optional<std::string> value = env.get(name);
      if (value.has_value()) {
        out.value += *value;
        out.refs.push_back(name);
      } else if (fallback.has_value()) {
        out.value += *fallback;
      } else {
        return invalid("references ${" + name + "}, which is not set");
      }
      i = close + 1;
      continue;
    }
    if (percent_decode && tmpl[i] == '%' && i + 2 < tmpl.size() && hex_value(tmpl[i + 1]) >= 0 &&
        hex_value(tmpl[i + 2]) >= 0) {
      out.value += static_cast<char>(hex_value(tmpl[i + 1]) * 16 + hex_value(tmpl[i + 2]));
      i += 3;
      continue;
    }
    out.value += tmpl[i++];
  }
  return out;
}

std::string template_source(const std::vector<std::string>& refs) {
  if (refs.empty()) return "inline";
  std::vector<std::string> unique;
  for (const std::string& r : refs) {
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  }
  return "env:" + join(unique, ",");
}

// Index of the first character of `chars` in `text` from `from`, outside `${...}`.
std::size_t find_outside_refs(std::string_view text, std::string_view chars, std::size_t from = 0) {
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text.compare(i, 2, "${") == 0) {
      const std::size_t close = text.find('}', i + 2);
      if (close == std::string_view::npos) return std::string_view::npos;
      i = close;
      continue;
    }
    if (chars.find(text[i]) != std::string_view::npos) return i;
  }
  return std::string_view::npos;
}

std::size_t rfind_outside_refs(std::string_view text, char c) {
  std::size_t found = std::string_view::npos;
  std::size_t i = 0;
  while ((i = find_outside_refs(text, std::string_view(&c, 1), i)) != std::string_view::npos) {
    found = i++;
  }
  return found;
}

// ---- URLs, addresses, names --------------------------------------------------------------------

Result<int> parse_port(std::string_view text, bool allow_zero) {
  if (text.empty() || text.size() > 5) return invalid("the port is not a number in 1..65535");
  int port = 0;
  for (char c : text) {
    if (!is_digit(c)) return invalid("the port is not a number in 1..65535");
    port = port * 10 + (c - '0');
  }
  if (port > 65535 || (port == 0 && !allow_zero)) {
    return invalid(std::string("the port is not a number in ") + (allow_zero ? "0" : "1") +
                   "..65535");
  }
  return port;
}

Status check_host(std::string_view host, bool bracketed) {
  if (host.empty()) return invalid("the host is empty");
  for (char c : host) {
    const bool ok = bracketed ? (hex_value(c) >= 0 || c == ':' || c == '.')
                              : (is_alnum(c) || c == '.' || c == '-' || c == '_');
    if (!ok) return invalid("the host has a character that is not allowed");
  }
  return Status::Ok();
}

// host[:port] or [v6][:port]. `default_port` < 0: the port is required.
Status split_host_port(std::string_view text, std::string* host, int* port, int default_port,
                       bool allow_zero_port) {
  std::string_view port_text;
  bool has_port = false;
  bool bracketed = false;
  if (!text.empty() && text[0] == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return invalid("an IPv6 address is missing its `]`");
    *host = std::string(text.substr(1, close - 1));
    bracketed = true;
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return invalid("unexpected text after the IPv6 address");
      port_text = rest.substr(1);
      has_port = true;
    }
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      *host = std::string(text.substr(0, colon));
      port_text = text.substr(colon + 1);
      has_port = true;
      if (host->find(':') != std::string::npos) {
        return invalid("an IPv6 address must be written in brackets");
      }
    } else {
      *host = std::string(text);
    }
  }
  Status s = check_host(*host, bracketed);
  if (!s.ok()) return s;
  if (has_port) {
    Result<int> p = parse_port(port_text, allow_zero_port);
    if (!p.ok()) return p.error();
    *port = *p;
  } else if (default_port < 0) {
    return invalid("a port is required (host:port)");
  } else {
    *port = default_port;
  }
  return Status::Ok();
}

// An absolute http(s) URL, checked by the transport's own parser (so the config accepts exactly
// what the transport dials) without printing it: a query or a path may hold a key.
Status check_http_url(std::string_view url) {
  Result<HttpUrl> parsed = parse_http_url(url);
  if (parsed.ok()) return Status::Ok();
  std::string why = parsed.error().message;
  const std::string prefix = "invalid upstream URL: ";
  if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
  return invalid("not a valid http(s) URL: " + why);
}

// The URL as status output shows it: the query hidden.
std::string url_for_display(std::string_view url) {
  const std::size_t q = url.find('?');
  if (q == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, q)) + "?…";
}

bool is_header_token_char(char c) {
  return is_alnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

Status check_header_name(std::string_view name) {
  if (name.empty()) return invalid("a header name is empty");
  for (char c : name) {
    if (!is_header_token_char(c)) return invalid("not a valid HTTP header name");
  }
  // The transport owns these; a configured value would fight it.
  static const char* const kReserved[] = {
      "host",         "content-length", "transfer-encoding",    "connection",    "accept",
      "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id", "upgrade"};
  for (const char* r : kReserved) {
    if (ascii_lower(name) == r) return invalid("set by the transport; remove it from the config");
  }
  return Status::Ok();
}

bool has_line_break_or_nul(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

Status check_env_name(std::string_view name) {
  if (name.empty()) return invalid("an environment variable name is empty");
  if (name.find('=') != std::string_view::npos || name.find('\0') != std::string_view::npos) {
    return invalid("an environment variable name may not contain `=` or NUL");
  }
  return Status::Ok();
}

Status check_key_name(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return invalid(std::string(what) + " must be 1 to 64 characters");
  }
  for (char c : name) {
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-') {
      return invalid(std::string(what) + " has a character outside [A-Za-z0-9._-]");
    }
  }
  return Status::Ok();
}

// ---- the parser --------------------------------------------------------------------------------

// clang-format off
const std::vector<std::string> kQuiverKeys = {
    "namespace", "redis", "data_dir", "listen", "allow_private_upstreams", "runtime",
    "caller_token_keys", "caller_token_signing_kid", "webhook_secrets", "members", "grants",
    "operators", "connections"};
const std::vector<std::string> kConnectionKeys = {
    "id", "credential_mode", "auth", "credential_version", "credential", "credentials",
    "api_key_header", "credential_env", "auto_enable_new_capabilities", "allow_private_addresses",
    "list_timeout_ms", "request_timeout_ms", "startup_timeout_ms"};
const std::vector<std::string> kServerKeys = {
    "type", "command", "args", "env", "cwd", "url", "headers", "disabled"};
// clang-format on

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
  void top_level_settings(const Json* quiver);
  void runtime(const Json* quiver);
  void redis(const Json* quiver);
  void servers(const Json& root);
  void server(const std::string& name, const Json& entry);
  void connection_settings(const Json* quiver);
  void connection(Server& server, const Json& settings, const std::string& path);
  void members_and_grants(const Json* quiver);
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

// ---- secret references -------------------------------------------------------------------------

std::optional<Secret> Parser::secret_ref(const Json& v, const std::string& path) {
  const char* kShape =
      "must be a secret reference: {\"env\": NAME}, {\"file\": PATH} or \"${NAME}\"";
  if (v.is_string()) {
    const std::string tmpl = v.get<std::string>();
    if (tmpl.find("${") == std::string::npos) {
      p_.error(path,
               "an inline secret is not allowed here; use {\"env\": NAME}, "
               "{\"file\": PATH} or \"${NAME}\"");
      return std::nullopt;
    }
    std::optional<Secret> s = expand_secret(tmpl, path);
    if (s.has_value() && s->empty()) {
      p_.error(path, "the secret is empty");
      return std::nullopt;
    }
    return s;
  }
  if (!v.is_object() || v.size() != 1) {
    p_.error(path, kShape);
    return std::nullopt;
  }
  if (const Json* env = json_field(v, "env")) {
    if (!env->is_string() || !is_var_name(env->get<std::string>())) {
      p_.error(path + ".env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
      return std::nullopt;
    }
    const std::string name = env->get<std::string>();
    std::optional<std::string> value = env_.get(name);
    if (!value.has_value()) {
      p_.error(path, "environment variable " + name + " is not set");
      return std::nullopt;
    }
    if (value->empty()) {
      p_.error(path, "environment variable " + name + " is empty");
      return std::nullopt;
    }
    Secret s(*value, "env:" + name);
    secrets_.push_back(s);
    return s;
  }
  if (const Json* file = json_field(v, "file")) {
    if (!file->is_string() || file->get<std::string>().empty()) {
      p_.error(path + ".file", "must be a file path");
      return std::nullopt;
    }
    std::optional<std::string> file_path = expand_plain(file->get<std::string>(), path + ".file");
    if (!file_path.has_value()) return std::nullopt;
    const std::string full = join_path(src_.working_dir, *file_path);
    if (!src_.read_file) {
      p_.error(path, "cannot read file `" + full + "`: no file reader");
      return std::nullopt;
    }
    Result<std::string> content = src_.read_file(full);
    if (!content.ok()) {
      p_.error(path, "cannot read file `" + full + "`: " + content.error().message);
      return std::nullopt;
    }
    std::string value = std::move(*content);
    if (value.size() > kMaxSecretFileBytes) {
      p_.error(path, "file `" + full + "` is larger than " + std::to_string(kMaxSecretFileBytes) +
                         " bytes");
      return std::nullopt;
    }
    while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
    if (value.empty()) {
      p_.error(path, "file `" + full + "` is empty");
      return std::nullopt;
    }
    Secret s(std::move(value), "file:" + full);
    secrets_.push_back(s);
    return s;
  }
  p_.error(path, kShape);
  return std::nullopt;
}

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

  // namespace
  std::string ns_path = "quiver.namespace";
  std::optional<std::string> ns = string_field(quiver, "namespace", "quiver");
  if (std::optional<std::string> e = env_value(kEnvNamespace)) {
    ns = e;
    ns_path = kEnvNamespace;
  }
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

  // listen
  std::string listen_path = "quiver.listen";
  std::optional<std::string> listen = string_field(quiver, "listen", "quiver");
  if (std::optional<std::string> e = env_value(kEnvListen)) {
    listen = e;
    listen_path = kEnvListen;
  }
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
}

// ---- runtime -----------------------------------------------------------------------------------

struct Slot {
  int64_t* i = nullptr;
  double* d = nullptr;
};

Slot slot(RuntimeControls& r, std::string_view field) {
  if (field == "list_timeout_ms") return {&r.list_timeout_ms, nullptr};
  if (field == "request_timeout_ms") return {&r.request_timeout_ms, nullptr};
  if (field == "startup_timeout_ms") return {&r.startup_timeout_ms, nullptr};
  if (field == "list_concurrency") return {&r.list_concurrency, nullptr};
  if (field == "fresh_ttl_ms") return {&r.fresh_ttl_ms, nullptr};
  if (field == "max_age_ms") return {&r.max_age_ms, nullptr};
  if (field == "refresh_ahead_ratio") return {nullptr, &r.refresh_ahead_ratio};
  if (field == "max_manifest_bytes") return {&r.max_manifest_bytes, nullptr};
  if (field == "max_listing_bytes") return {&r.max_listing_bytes, nullptr};
  if (field == "maintenance_interval_ms") return {&r.maintenance_interval_ms, nullptr};
  if (field == "maintenance_batch") return {&r.maintenance_batch, nullptr};
  if (field == "lease_ms") return {&r.lease_ms, nullptr};
  if (field == "revalidate_concurrency") return {&r.revalidate_concurrency, nullptr};
  if (field == "revalidate_window_ms") return {&r.revalidate_window_ms, nullptr};
  if (field == "store_check_interval_ms") return {&r.store_check_interval_ms, nullptr};
  if (field == "min_upstream_ttl_ms") return {&r.min_upstream_ttl_ms, nullptr};
  if (field == "retry_max_backoff_ms") return {&r.retry_max_backoff_ms, nullptr};
  return {};
}

// The bound check shared by the file and the environment (the table's, as the edge checks it);
// empty when the value is fine.
std::string bound_problem(const RuntimeControlInfo& info, double v) {
  const RuntimeSetting* setting = find_runtime_setting(info.field);
  return setting != nullptr ? runtime_setting_bound_problem(*setting, v) : "is not a setting";
}

// Strict decimal for environment values (the table's syntax, as the edge reads them).
std::optional<double> parse_env_number(std::string_view text, bool allow_fraction) {
  return parse_runtime_setting_text(text, allow_fraction);
}

void Parser::runtime(const Json* quiver) {
  std::map<std::string, std::string> where;  // field -> where its value came from
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    where[info.field] = std::string("runtime.") + info.field + " (default)";
  }
  const Json* rt = quiver != nullptr ? json_field(*quiver, "runtime") : nullptr;
  if (rt != nullptr && !rt->is_object()) {
    p_.error("quiver.runtime", std::string("must be an object, not ") + json_type(*rt));
    rt = nullptr;
  }
  std::vector<std::string> known;
  for (const RuntimeControlInfo& info : kRuntimeControls) known.push_back(info.field);
  if (rt != nullptr) {
    for (const auto& [key, value] : rt->items()) {
      const std::string path = "quiver.runtime." + key;
      auto info = std::find_if(kRuntimeControls.begin(), kRuntimeControls.end(),
                               [&k = key](const RuntimeControlInfo& i) { return k == i.field; });
      if (info == kRuntimeControls.end()) {
        p_.error(path, unknown_key_message(key, known));
        continue;
      }
      if (!value.is_number()) {
        p_.error(path, std::string("must be a number, not ") + json_type(value));
        continue;
      }
      if (!info->is_ratio && !value.is_number_integer()) {
        p_.error(path, "must be a whole number");
        continue;
      }
      const double v = value.is_number_unsigned()  ? static_cast<double>(value.get<uint64_t>())
                       : value.is_number_integer() ? static_cast<double>(value.get<int64_t>())
                                                   : value.get<double>();
      const std::string problem = bound_problem(*info, v);
      if (!problem.empty()) {
        p_.error(path, problem);
        continue;
      }
      Slot s = slot(cfg_.runtime, key);
      if (s.i != nullptr) *s.i = static_cast<int64_t>(v);
      if (s.d != nullptr) *s.d = v;
      where[key] = path;
    }
  }
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    auto it = src_.env.find(info.env);
    if (it == src_.env.end()) continue;
    cfg_.env_overrides.insert(info.env);
    const std::string& text = it->second;
    if (text.empty()) {
      p_.error(info.env, "is empty");
      continue;
    }
    std::optional<double> v = parse_env_number(text, info.is_ratio);
    if (!v.has_value()) {
      if (text[0] == '-') {
        p_.error(info.env, "`" + shown(text) + "` must not be negative");
      } else {
        p_.error(info.env, "`" + shown(text) + "` is not " +
                               (info.is_ratio ? "a decimal number" : "a whole number"));
      }
      continue;
    }
    const std::string problem = bound_problem(info, *v);
    if (!problem.empty()) {
      p_.error(info.env, "`" + shown(text) + "` " + problem);
      continue;
    }
    Slot s = slot(cfg_.runtime, info.field);
    if (s.i != nullptr) *s.i = static_cast<int64_t>(*v);
    if (s.d != nullptr) *s.d = *v;
    where[info.field] = info.env;
  }

  const RuntimeControls& r = cfg_.runtime;
  if (r.max_age_ms < r.fresh_ttl_ms) {
    p_.error(where["max_age_ms"], std::to_string(r.max_age_ms) + " is shorter than the fresh TTL " +
                                      std::to_string(r.fresh_ttl_ms) + " (" +
                                      where["fresh_ttl_ms"] + ")");
  }
  if (r.lease_ms <= r.list_timeout_ms) {
    p_.error(where["lease_ms"],
             std::to_string(r.lease_ms) + " must be longer than the listing deadline " +
                 std::to_string(r.list_timeout_ms) + " (" + where["list_timeout_ms"] +
                 "): a lease that ends mid-listing "
                 "makes every commit fail");
  } else if (r.lease_ms <= r.list_timeout_ms + r.startup_timeout_ms) {
    p_.warn(where["lease_ms"],
            "not longer than the listing deadline plus the start-up budget (" +
                where["startup_timeout_ms"] +
                "): the first listing of a slow-starting server may lose its lease");
  }
  if (r.request_timeout_ms > r.list_timeout_ms) {
    p_.warn(where["request_timeout_ms"],
            "longer than the listing deadline " + std::to_string(r.list_timeout_ms) + " (" +
                where["list_timeout_ms"] + "): each request gets at most that");
  }
  if (r.revalidate_concurrency > r.list_concurrency) {
    p_.warn(where["revalidate_concurrency"],
            "larger than list_concurrency: background revalidation is capped at " +
                std::to_string(r.list_concurrency));
  }
  Status s = validate_freshness_policy(r.freshness_policy());
  if (!s.ok()) p_.error("quiver.runtime", s.error().message);
}

// ---- redis -------------------------------------------------------------------------------------

struct RedisParts {
  bool tls = false;
  std::string user, password, host_port, db;  // templates or plain text
  bool has_password = false;
};

Result<RedisParts> split_redis_url(std::string_view url) {
  RedisParts out;
  std::string_view rest;
  if (ascii_istarts_with(url, "rediss://")) {
    out.tls = true;
    rest = url.substr(9);
  } else if (ascii_istarts_with(url, "redis://")) {
    rest = url.substr(8);
  } else {
    return invalid("not a Redis URL: it must start with redis:// or rediss://");
  }
  std::size_t auth_end = find_outside_refs(rest, "/?#");
  if (auth_end == std::string_view::npos) auth_end = rest.size();
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view tail = rest.substr(auth_end);
  if (find_outside_refs(tail, "?#") != std::string_view::npos) {
    return invalid("not a Redis URL: query parameters and fragments are not supported");
  }
  const std::size_t at = rfind_outside_refs(authority, '@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    const std::size_t colon = find_outside_refs(userinfo, ":");
    if (colon == std::string_view::npos) {
      out.user = std::string(userinfo);
    } else {
      out.user = std::string(userinfo.substr(0, colon));
      out.password = std::string(userinfo.substr(colon + 1));
      out.has_password = true;
    }
    authority = authority.substr(at + 1);
  }
  out.host_port = std::string(authority);
  if (!tail.empty()) out.db = std::string(tail.substr(1));
  return out;
}

Status finish_redis(const RedisParts& parts, const std::string& host_port, const std::string& db,
                    RedisConfig* out) {
  out->tls = parts.tls;
  int port = 6379;
  Status s = split_host_port(host_port, &out->host, &port, 6379, false);
  if (!s.ok()) return invalid("not a Redis URL: " + s.error().message);
  out->port = port;
  if (!db.empty()) {
    if (db.size() > 9 || !std::all_of(db.begin(), db.end(), is_digit)) {
      return invalid("not a Redis URL: the database (after `/`) must be a number");
    }
    out->db = std::stoll(db);
  }
  return Status::Ok();
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

Result<RedisConfig> parse_redis_url(std::string_view url) {
  // A URL from the environment is plain text: `${` has no meaning in it.
  RedisParts parts;
  std::string_view rest;
  if (ascii_istarts_with(url, "rediss://")) {
    parts.tls = true;
    rest = url.substr(9);
  } else if (ascii_istarts_with(url, "redis://")) {
    rest = url.substr(8);
  } else {
    return invalid("not a Redis URL: it must start with redis:// or rediss://");
  }
  std::size_t auth_end = rest.find_first_of("/?#");
  if (auth_end == std::string_view::npos) auth_end = rest.size();
  std::string_view authority = rest.substr(0, auth_end);
  const std::string_view tail = rest.substr(auth_end);
  if (tail.find_first_of("?#") != std::string_view::npos) {
    return invalid("not a Redis URL: query parameters and fragments are not supported");
  }
  RedisConfig out;
  const std::size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    const std::size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      out.username = percent_decode(userinfo);
    } else {
      out.username = percent_decode(userinfo.substr(0, colon));
      out.password = Secret(percent_decode(userinfo.substr(colon + 1)), "env:QUIVER_REDIS_URL");
    }
    authority = authority.substr(at + 1);
  }
  Status s = finish_redis(parts, std::string(authority),
                          tail.empty() ? std::string() : std::string(tail.substr(1)), &out);
  if (!s.ok()) return s.error();
  return out;
}

std::string RedisConfig::describe() const {
  std::string out = tls ? "rediss://" : "redis://";
  if (!username.empty() || password.has_value()) {
    out += username;
    if (password.has_value()) out += ":***";
    out += "@";
  }
  out += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  out += ":" + std::to_string(port) + "/" + std::to_string(db);
  return out;
}

Result<ListenAddress> parse_listen_address(std::string_view text) {
  ListenAddress out;
  int port = 0;
  Status s = split_host_port(text, &out.host, &port, -1, true);
  if (!s.ok()) return invalid("not a listen address (host:port): " + s.error().message);
  out.port = port;
  return out;
}

bool ListenAddress::is_loopback() const {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string ListenAddress::describe() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

namespace {

void Parser::redis(const Json* quiver) {
  auto env = src_.env.find(kEnvRedisUrl);
  if (env != src_.env.end()) {
    cfg_.env_overrides.insert(kEnvRedisUrl);
    if (env->second.empty()) return;  // set and empty: the embedded default
    Result<RedisConfig> r = parse_redis_url(env->second);
    if (!r.ok()) {
      p_.error(kEnvRedisUrl, r.error().message);
      return;
    }
    if (r->password.has_value()) secrets_.push_back(*r->password);
    cfg_.redis = std::move(*r);
    return;
  }
  if (quiver == nullptr) return;
  const Json* v = json_field(*quiver, "redis");
  if (v == nullptr || v->is_null()) return;
  const std::string path = "quiver.redis";
  if (!v->is_string()) {
    p_.error(path, std::string("must be a redis:// or rediss:// URL string, not ") + json_type(*v));
    return;
  }
  Result<RedisParts> parts = split_redis_url(v->get<std::string>());
  if (!parts.ok()) {
    p_.error(path, parts.error().message);
    return;
  }
  RedisConfig out;
  Result<Expanded> user = expand(parts->user, env_, /*percent_decode=*/true);
  Result<Expanded> host_port = expand(parts->host_port, env_);
  Result<Expanded> db = expand(parts->db, env_);
  for (const Result<Expanded>* e : {&user, &host_port, &db}) {
    if (!e->ok()) {
      p_.error(path, e->error().message);
      return;
    }
  }
  out.username = user->value;
  if (parts->has_password) {
    Result<Expanded> pw = expand(parts->password, env_, /*percent_decode=*/true);
    if (!pw.ok()) {
      p_.error(path, "the password " + pw.error().message);
      return;
    }
    out.password = Secret(pw->value, template_source(pw->refs));
    secrets_.push_back(*out.password);
  }
  Status s = finish_redis(*parts, host_port->value, db->value, &out);
  if (!s.ok()) {
    p_.error(path, s.error().message);
    return;
  }
  cfg_.redis = std::move(out);
}

// ---- mcpServers --------------------------------------------------------------------------------

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
      s.conn.transport = TransportKind::kStdio;
    } else if (t == "http" || t == "streamable-http" || t == "streamablehttp" ||
               t == "streamable_http") {
      s.conn.transport = TransportKind::kHttp;
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
    s.conn.transport = TransportKind::kStdio;
  } else if (url.has_value()) {
    s.conn.transport = TransportKind::kHttp;
  } else {
    if (json_field(entry, "command") == nullptr && json_field(entry, "url") == nullptr) {
      p_.error(path, "needs `command` (stdio) or `url` (Streamable HTTP)");
    }
    return;
  }

  if (s.conn.transport == TransportKind::kStdio) {
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
      s.conn.command = *c;
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
            s.conn.args.push_back(*v);
          }
        }
      }
    }
    if (const Json* env = json_field(entry, "env")) {
      if (!env->is_object()) {
        p_.error(path + ".env",
                 std::string("must be an object of strings, not ") + json_type(*env));
      } else {
        for (const auto& [k, v] : env->items()) {
          const std::string ep = path + ".env." + k;
          Status st = check_env_name(k);
          if (!st.ok()) {
            p_.error(ep, st.error().message);
            continue;
          }
          if (!v.is_string()) {
            p_.error(ep, std::string("must be a string, not ") + json_type(v));
            continue;
          }
          if (std::optional<Secret> sv = expand_secret(v.get<std::string>(), ep)) {
            if (sv->reveal().find('\0') != std::string::npos) {
              p_.error(ep, "the value contains NUL");
              continue;
            }
            s.conn.env[k] = *sv;
          }
        }
      }
    }
    if (std::optional<std::string> cwd = string_field(entry, "cwd", path)) {
      if (std::optional<std::string> v = expand_plain(*cwd, path + ".cwd")) {
        s.conn.cwd = join_path(src_.working_dir, *v);
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
      s.conn.url = u->value;
      // Some upstreams take a token in the path: what was substituted is redacted like a secret.
      for (const std::string& ref : u->refs) {
        Secret value(env_.get(ref).value_or(""), "env:" + ref);
        secrets_.push_back(value);
        s.conn.url_substitutions.push_back(std::move(value));
      }
    }
    if (const Json* headers = json_field(entry, "headers")) {
      if (!headers->is_object()) {
        p_.error(path + ".headers",
                 std::string("must be an object of strings, not ") + json_type(*headers));
      } else {
        std::set<std::string> seen;
        for (const auto& [k, v] : headers->items()) {
          const std::string hp = path + ".headers." + k;
          Status st = check_header_name(k);
          if (!st.ok()) {
            p_.error(hp, st.error().message);
            continue;
          }
          if (!seen.insert(ascii_lower(k)).second) {
            p_.error(hp, "the same header is set twice (names are case-insensitive)");
            continue;
          }
          if (!v.is_string()) {
            p_.error(hp, std::string("must be a string, not ") + json_type(v));
            continue;
          }
          if (std::optional<Secret> sv = expand_secret(v.get<std::string>(), hp)) {
            if (has_line_break_or_nul(sv->reveal())) {
              p_.error(hp, "the value contains a line break or NUL");
              continue;
            }
            s.conn.headers[k] = *sv;
          }
        }
        s.has_headers = !headers->empty();
      }
    }
    s.conn.allow_private_addresses = cfg_.allow_private_upstreams;
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
  const bool http = c.transport == TransportKind::kHttp;
  c.auth = http && server.has_headers ? AuthType::kHeaders : AuthType::kNone;
  const bool auth_given = json_field(settings, "auth") != nullptr;
  if (std::optional<std::string> auth = string_field(settings, "auth", path)) {
    c.auth = auth_type_from_string(*auth);
    if (c.auth == AuthType::kOAuth) {
      p_.error(path + ".auth", "oauth is not supported yet; use bearer with per-member tokens");
      return;
    }
    if (c.auth == AuthType::kUnknown) {
      p_.error(path + ".auth", "`" + shown(*auth) + "` is not none, bearer, api_key or headers");
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
      c.allow_private_addresses = *b;
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
      for (const auto& [name, value] : c.headers) {
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
        for (const auto& [name, value] : c.headers) {
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
        if (c.env.count(c.credential_env) > 0) {
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
    case AuthType::kNone:
      if (per_member) {
        p_.error(path + ".credential_mode",
                 "per_member needs auth bearer or api_key (a credential per member)");
        return;
      }
      break;
    default:
      break;
  }

  // The credentials themselves.
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

// ---- members and grants ------------------------------------------------------------------------

void Parser::members_and_grants(const Json* quiver) {
  const Json* members = quiver != nullptr ? json_field(*quiver, "members") : nullptr;
  const Json* grants = quiver != nullptr ? json_field(*quiver, "grants") : nullptr;
  std::optional<std::set<std::string>> listed;
  if (members != nullptr) {
    listed.emplace();
    if (!members->is_array()) {
      p_.error("quiver.members",
               std::string("must be an array of member ids, not ") + json_type(*members));
    } else {
      for (std::size_t i = 0; i < members->size(); ++i) {
        const std::string path = "quiver.members[" + std::to_string(i) + "]";
        const Json& m = (*members)[i];
        if (!m.is_string()) {
          p_.error(path, std::string("must be a string, not ") + json_type(m));
          continue;
        }
        Status s = validate_member_id(m.get<std::string>());
        if (!s.ok()) {
          p_.error(path, s.error().message);
          continue;
        }
        if (!listed->insert(m.get<std::string>()).second) {
          p_.error(path, "`" + m.get<std::string>() + "` is listed twice");
        }
      }
    }
  }

  auto id_of = [&](const std::string& ref) -> std::optional<std::string> {
    for (const Server& s : servers_) {
      if (s.conn.name == ref) return s.conn.id;
    }
    for (const Server& s : servers_) {
      if (s.conn.id == ref) return s.conn.id;
    }
    return std::nullopt;
  };
  std::set<std::string> all_ids;
  for (const Server& s : servers_) all_ids.insert(s.conn.id);

  std::map<std::string, std::set<std::string>> direct;  // member or "*" -> ids
  if (grants != nullptr && !grants->is_object()) {
    p_.error("quiver.grants",
             std::string("must be an object (member id or * -> server names), not ") +
                 json_type(*grants));
    grants = nullptr;
  }
  if (grants != nullptr) {
    for (const auto& [member, list] : grants->items()) {
      const std::string path = "quiver.grants." + member;
      if (member != "*") {
        Status s = validate_member_id(member);
        if (!s.ok()) {
          p_.error(path, s.error().message + " (use `*` for every member)");
          continue;
        }
        if (listed.has_value() && listed->count(member) == 0) {
          p_.error(path, "`" + member + "` is not in quiver.members");
          continue;
        }
      }
      std::set<std::string>& ids = direct[member];
      if (!list.is_array()) {
        p_.error(path, std::string("must be an array of server names, not ") + json_type(list));
        continue;
      }
      for (std::size_t i = 0; i < list.size(); ++i) {
        const std::string ip = path + "[" + std::to_string(i) + "]";
        if (!list[i].is_string()) {
          p_.error(ip, std::string("must be a server name, not ") + json_type(list[i]));
          continue;
        }
        const std::string ref = list[i].get<std::string>();
        if (ref == "*") {
          ids.insert(all_ids.begin(), all_ids.end());
        } else if (std::optional<std::string> id = id_of(ref)) {
          ids.insert(*id);
        } else if (disabled_names_.count(ref) > 0) {
          p_.warn(ip, "server `" + ref + "` is disabled (grant ignored)");
        } else if (broken_names_.count(ref) > 0) {
          continue;  // its entry's error is reported
        } else {
          p_.error(ip, "no server named `" + shown(ref) + "` in mcpServers");
        }
      }
    }
  }

  // Members: listed, or everyone named in grants and credentials.
  std::set<std::string> all_members;
  if (listed.has_value()) {
    all_members = *listed;
  } else {
    for (const auto& [member, ids] : direct) {
      if (member != "*") all_members.insert(member);
    }
  }
  for (const Server& s : servers_) {
    for (const auto& [member, secret] : s.conn.member_credentials) {
      if (listed.has_value() && listed->count(member) == 0) {
        p_.error("quiver.connections." + s.conn.name + ".credentials." + member,
                 "`" + member + "` is not in quiver.members");
      } else {
        all_members.insert(member);
      }
    }
  }
  cfg_.members = all_members;

  // Operators: members who may toggle a shared connection's capabilities (for everyone).
  if (const Json* ops = quiver != nullptr ? json_field(*quiver, "operators") : nullptr) {
    if (!ops->is_array()) {
      p_.error("quiver.operators",
               std::string("must be an array of member ids, not ") + json_type(*ops));
    } else {
      for (std::size_t i = 0; i < ops->size(); ++i) {
        const std::string path = "quiver.operators[" + std::to_string(i) + "]";
        const Json& m = (*ops)[i];
        if (!m.is_string()) {
          p_.error(path, std::string("must be a string, not ") + json_type(m));
          continue;
        }
        if (Status st = validate_member_id(m.get<std::string>()); !st.ok()) {
          p_.error(path, st.error().message);
          continue;
        }
        if (listed.has_value() && listed->count(m.get<std::string>()) == 0) {
          p_.error(path, "`" + m.get<std::string>() + "` is not in quiver.members");
          continue;
        }
        cfg_.operators.insert(m.get<std::string>());
      }
    }
  }

  const std::set<std::string> everyone =
      direct.count("*") > 0 ? direct["*"] : std::set<std::string>{};
  if (direct.count("*") > 0 && all_members.empty()) {
    p_.warn("quiver.grants.*", "there are no members to grant to");
  }
  for (const std::string& member : all_members) {
    std::set<std::string> ids = everyone;
    auto it = direct.find(member);
    if (it != direct.end()) ids.insert(it->second.begin(), it->second.end());
    cfg_.grants[member] = ids;
  }
  for (Server& s : servers_) {
    for (const auto& [member, ids] : cfg_.grants) {
      if (ids.count(s.conn.id) > 0) s.conn.granted_members.insert(member);
    }
    const std::string path = "quiver.connections." + s.conn.name + ".credentials";
    if (s.conn.credential_mode == CredentialMode::kPerMember &&
        (s.conn.auth == AuthType::kBearer || s.conn.auth == AuthType::kApiKey)) {
      for (const std::string& member : s.conn.granted_members) {
        if (s.conn.member_credentials.count(member) == 0) {
          p_.error(path,
                   "no credential for member `" + member + "`, who is granted this connection");
        }
      }
      for (const auto& [member, secret] : s.conn.member_credentials) {
        if (s.conn.granted_members.count(member) == 0) {
          p_.warn(path + "." + member, "`" + member + "` is not granted this connection");
        }
      }
    }
    if (grants != nullptr && !grants->empty() && s.conn.granted_members.empty()) {
      p_.warn("quiver.grants", "server `" + s.conn.name + "` is granted to no member");
    }
  }
}

// ---- keys and secrets of the agent itself ------------------------------------------------------

void Parser::keys(const Json* quiver) {
  if (quiver == nullptr) return;
  if (const Json* keys = json_field(*quiver, "caller_token_keys")) {
    if (!keys->is_object()) {
      p_.error(
          "quiver.caller_token_keys",
          std::string("must be an object (key id -> secret reference), not ") + json_type(*keys));
    } else {
      for (const auto& [kid, ref] : keys->items()) {
        const std::string path = "quiver.caller_token_keys." + kid;
        Status s = check_key_name("a key id", kid);
        if (!s.ok()) {
          p_.error(path, s.error().message);
          continue;
        }
        std::optional<Secret> secret = secret_ref(ref, path);
        if (!secret.has_value()) continue;
        if (secret->reveal().size() < kMinCallerTokenKeyBytes) {
          p_.error(path, "the key is " + std::to_string(secret->reveal().size()) +
                             " bytes; HMAC-SHA256 token keys need at least " +
                             std::to_string(kMinCallerTokenKeyBytes));
          continue;
        }
        cfg_.caller_token_keys[kid] = *secret;
      }
    }
  }
  if (std::optional<std::string> kid =
          string_field(*quiver, "caller_token_signing_kid", "quiver")) {
    const Json* keys = json_field(*quiver, "caller_token_keys");
    if (keys == nullptr || !keys->is_object() || json_field(*keys, kid->c_str()) == nullptr) {
      p_.error("quiver.caller_token_signing_kid",
               "`" + shown(*kid) + "` is not a key id in caller_token_keys");
    } else {
      cfg_.caller_token_signing_kid = *kid;
    }
  } else if (cfg_.caller_token_keys.size() == 1) {
    cfg_.caller_token_signing_kid = cfg_.caller_token_keys.begin()->first;
  }
  if (const Json* secrets = json_field(*quiver, "webhook_secrets")) {
    if (!secrets->is_object()) {
      p_.error(
          "quiver.webhook_secrets",
          std::string("must be an object (name -> secret reference), not ") + json_type(*secrets));
    } else {
      for (const auto& [name, ref] : secrets->items()) {
        const std::string path = "quiver.webhook_secrets." + name;
        Status s = check_key_name("a webhook secret name", name);
        if (!s.ok()) {
          p_.error(path, s.error().message);
          continue;
        }
        std::optional<Secret> secret = secret_ref(ref, path);
        if (!secret.has_value()) continue;
        if (secret->reveal().size() < 16) {
          p_.warn(path, "shorter than 16 bytes: easy to guess");
        }
        cfg_.webhook_secrets[name] = *secret;
      }
    }
  }
}

// ---- derived identity --------------------------------------------------------------------------

void Parser::identities() {
  for (Server& s : servers_) {
    ConnectionConfig& c = s.conn;
    ConnectionIdentity& id = c.identity;
    id.transport = c.transport;
    id.auth_type = c.auth;
    id.credential_mode = c.credential_mode;
    id.credential_version = c.credential_version;
    if (c.transport == TransportKind::kStdio) {
      id.command = c.command;
      id.args = c.args;
      for (const auto& [name, value] : c.env) id.env[name] = "";
      if (!c.credential_env.empty()) id.env[c.credential_env] = "";
    } else {
      id.url = c.url;
      for (const auto& [name, value] : c.headers) id.headers[name] = "";
      if (c.auth == AuthType::kBearer) id.headers["Authorization"] = "";
      if (c.auth == AuthType::kApiKey) id.headers[c.api_key_header] = "";
    }
    Result<std::string> hash = config_hash(id);
    if (!hash.ok()) {
      p_.error(s.path, hash.error().message);
      continue;
    }
    c.config_hash = *hash;
  }
}

void Parser::env_warnings() {
  std::set<std::string> known = {
      kEnvNamespace, kEnvRedisUrl, kEnvDataDir, kEnvListen, kEnvAllowPrivateUpstreams,
      kConfigPathEnv};
  for (const RuntimeControlInfo& info : kRuntimeControls) known.insert(info.env);
  for (const auto& [name, value] : src_.env) {
    if (name.rfind("QUIVER_", 0) != 0) continue;
    if (known.count(name) > 0 || env_.referenced().count(name) > 0) continue;
    p_.warn(name, "not a Quiver setting and not referenced by the config (ignored)");
  }
}

// The one JSON entry point (shared/json.h: size and depth bounds, messages that never quote the
// text), with comments allowed as in other MCP clients' config files.
Result<Json> parse_config_json(std::string_view text, const std::string& origin) {
  JsonParseOptions options;
  options.max_bytes = kMaxConfigBytes;
  options.allow_comments = true;
  Result<Json> value = parse_json(text, options);
  if (!value.ok()) return invalid(origin + ": " + value.error().message);
  return value;
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

Json secret_json(const Secret& s) { return Json{{"value", s.describe()}, {"from", s.source()}}; }

}  // namespace

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

std::vector<Principal> ConnectionConfig::principals() const {
  if (credential_mode == CredentialMode::kShared) return {Principal::shared()};
  std::vector<Principal> out;
  for (const std::string& member : granted_members) {
    Result<Principal> p = Principal::member(member);
    if (p.ok()) out.push_back(*p);
  }
  return out;
}

Result<Principal> ConnectionConfig::principal_for_member(std::string_view member_id) const {
  if (granted_members.count(std::string(member_id)) == 0) {
    return Error(ErrorCode::kNotFound,
                 "member `" + shown(member_id) + "` is not granted connection `" + id + "`");
  }
  return principal_for(credential_mode, member_id);
}

Result<ResolvedUpstream> ConnectionConfig::upstream_for(const Principal& principal) const {
  ResolvedUpstream u;
  u.transport = transport;
  u.command = command;
  u.args = args;
  u.env = env;
  u.cwd = cwd;
  u.url = url;
  u.headers = headers;
  u.allow_private_addresses = allow_private_addresses;
  std::optional<Secret> secret;
  if (credential_mode == CredentialMode::kShared) {
    if (!principal.is_shared()) {
      return invalid("connection `" + id + "` uses shared credentials: its principal is `shared`");
    }
    secret = credential;
  } else {
    if (principal.is_shared()) {
      return invalid("connection `" + id +
                     "` uses per-member credentials: a member principal "
                     "is required");
    }
    auto it = member_credentials.find(std::string(principal.member_id()));
    if (it == member_credentials.end()) {
      return Error(ErrorCode::kNotFound, "connection `" + id + "` has no credential for member `" +
                                             std::string(principal.member_id()) + "`");
    }
    secret = it->second;
  }
  if (auth == AuthType::kBearer || auth == AuthType::kApiKey) {
    if (!secret.has_value()) {
      return Error(ErrorCode::kNotFound, "connection `" + id + "` has no credential");
    }
    if (auth == AuthType::kBearer) {
      u.headers["Authorization"] = Secret("Bearer " + secret->reveal(), secret->source());
    } else if (transport == TransportKind::kHttp) {
      u.headers[api_key_header] = *secret;
    } else {
      u.env[credential_env] = *secret;
    }
  }
  return u;
}

std::vector<Secret> ConnectionConfig::secrets() const {
  std::vector<Secret> out;
  for (const auto& [k, v] : env) out.push_back(v);
  for (const auto& [k, v] : headers) out.push_back(v);
  if (credential.has_value()) out.push_back(*credential);
  for (const auto& [k, v] : member_credentials) out.push_back(v);
  for (const Secret& v : url_substitutions) out.push_back(v);
  return out;
}

std::string ConnectionConfig::describe() const {
  std::string out = id + " (" + transport_kind_name(transport) + " ";
  out += transport == TransportKind::kHttp ? url_for_display(written_url) : command;
  out += std::string(", auth ") + auth_type_name(auth) + ", " +
         credential_mode_name(credential_mode) + ")";
  return out;
}

std::ostream& operator<<(std::ostream& out, const ConnectionConfig& connection) {
  return out << connection.describe();
}

// ---- the whole configuration -------------------------------------------------------------------

const ConnectionConfig* AgentConfig::find_connection(std::string_view id) const {
  for (const ConnectionConfig& c : connections) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

const ConnectionConfig* AgentConfig::find_connection_by_name(std::string_view name) const {
  for (const ConnectionConfig& c : connections) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

Result<Principal> AgentConfig::principal_for(std::string_view member_id,
                                             std::string_view connection_id) const {
  const ConnectionConfig* c = find_connection(connection_id);
  if (c == nullptr) {
    return Error(ErrorCode::kNotFound, "no connection `" + shown(connection_id) + "`");
  }
  return c->principal_for_member(member_id);
}

std::vector<Secret> AgentConfig::secrets() const {
  std::vector<Secret> out;
  if (redis.has_value() && redis->password.has_value()) out.push_back(*redis->password);
  for (const auto& [k, v] : caller_token_keys) out.push_back(v);
  for (const auto& [k, v] : webhook_secrets) out.push_back(v);
  for (const ConnectionConfig& c : connections) {
    for (Secret& s : c.secrets()) out.push_back(std::move(s));
  }
  return out;
}

std::string AgentConfig::redact(std::string_view text) const {
  return redactor ? redactor->redact(text) : quiver::redact(text, secrets());
}

Json AgentConfig::effective_config_json() const {
  Json out = Json::object();
  out["namespace"] = ns;
  out["store"] = redis.has_value() ? "redis" : "sqlite";
  out["redis"] = redis.has_value() ? Json(redis->describe()) : Json(nullptr);
  out["data_dir"] = data_dir;
  out["listen"] = listen.describe();
  out["allow_private_upstreams"] = allow_private_upstreams;
  Json rt = Json::object();
  RuntimeControls copy = runtime;
  for (const RuntimeControlInfo& info : kRuntimeControls) {
    Slot s = slot(copy, info.field);
    rt[info.field] = s.i != nullptr ? Json(*s.i) : Json(*s.d);
  }
  out["runtime"] = rt;
  out["env_overrides"] = Json(env_overrides);
  Json keys = Json::object();
  for (const auto& [kid, secret] : caller_token_keys) keys[kid] = secret_json(secret);
  out["caller_token_keys"] = keys;
  out["caller_token_signing_kid"] =
      caller_token_signing_kid.empty() ? Json(nullptr) : Json(caller_token_signing_kid);
  Json hooks = Json::object();
  for (const auto& [name, secret] : webhook_secrets) hooks[name] = secret_json(secret);
  out["webhook_secrets"] = hooks;
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
    j["transport"] = transport_kind_name(c.transport);
    if (c.transport == TransportKind::kStdio) {
      j["command"] = c.written_command;
      j["args"] = Json(c.written_args);
      if (!c.cwd.empty()) j["cwd"] = c.cwd;
      Json env = Json::object();
      for (const auto& [k, v] : c.env) env[k] = secret_json(v);
      j["env"] = env;
      if (!c.credential_env.empty()) j["credential_env"] = c.credential_env;
    } else {
      j["url"] = url_for_display(c.written_url);
      Json headers = Json::object();
      for (const auto& [k, v] : c.headers) headers[k] = secret_json(v);
      j["headers"] = headers;
      j["allow_private_addresses"] = c.allow_private_addresses;
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

Result<AgentConfig> parse_config(const ConfigSources& sources) { return Parser(sources).run(); }

// ---- the real world ----------------------------------------------------------------------------

EnvMap env_from_environ(const char* const* environ) {
  EnvMap out;
  if (environ == nullptr) return out;
  for (const char* const* e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

namespace {

Result<std::string> read_bounded(const std::string& path, std::size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    return Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                 std::strerror(err));
  }
  // One byte past the limit is enough to say "too large".
  std::string out;
  char buf[8192];
  std::size_t n = 0;
  while (out.size() <= max_bytes &&
         (n = std::fread(buf, 1, std::min(sizeof buf, max_bytes + 1 - out.size()), f)) > 0) {
    out.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return invalid(std::strerror(err));
  return out;
}

}  // namespace

Result<std::string> read_secret_file(const std::string& path) {
  return read_bounded(path, kMaxSecretFileBytes);
}

Result<AgentConfig> load_config_file(const std::string& path, const EnvMap& env) {
  Result<std::string> text = read_bounded(path, kMaxConfigBytes);
  if (!text.ok()) {
    return Error(text.error().code, "config file `" + path + "`: " + text.error().message);
  }
  char cwd[4096];
  ConfigSources sources;
  sources.text = *text;
  sources.origin = path;
  sources.env = env;
  sources.read_file = read_secret_file;
  if (::getcwd(cwd, sizeof cwd) != nullptr) sources.working_dir = cwd;
  return parse_config(sources);
}

}  // namespace quiver
