// Endpoints and names in the configuration: host:port, listen addresses, http(s) URLs, Redis URLs
// (one parser for the file's templated URL and the environment's plain one), header, variable
// and key names.
#include <algorithm>
#include <utility>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"
#include "native-agent/base/url_guard.h"
#include "shared/ascii.h"
#include "shared/numbers.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

Result<RedisConfig> parse_redis_url(std::string_view url) {
  // A URL from the environment is plain text: `${` has no meaning in it.
  Result<RedisParts> parts = split_redis_url(url, /*templated=*/false);
  if (!parts.ok()) return parts.error();
  RedisConfig out;
  out.username = percent_decode(parts->user);
  if (parts->has_password) {
    out.password = Secret(percent_decode(parts->password), "env:QUIVER_REDIS_URL");
  }
  Status s = finish_redis(*parts, parts->host_port, parts->db, &out);
  if (!s.ok()) return s.error();
  return out;
}

std::string RedisConfig::describe() const {
  std::string out = tls ? "rediss" : "redis";
  out += cluster ? "+cluster://" : "://";
  if (!username.empty() || password.has_value()) {
    out += username;
    if (password.has_value()) out += ":***";
    out += "@";
  }
  auto address = [](const std::string& h, int p) {
    return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(p);
  };
  if (!cluster) return out + address(host, port) + "/" + std::to_string(db);
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    if (i > 0) out += ",";
    out += address(seeds[i].host, seeds[i].port);
  }
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

namespace config_internal {

Result<int> parse_port(std::string_view text, bool allow_zero) {
  const std::optional<uint64_t> port = text.size() <= 5 ? parse_decimal_u64(text) : std::nullopt;
  if (!port.has_value()) return invalid("the port is not a number in 1..65535");
  if (*port > 65535 || (*port == 0 && !allow_zero)) {
    return invalid(std::string("the port is not a number in ") + (allow_zero ? "0" : "1") +
                   "..65535");
  }
  return static_cast<int>(*port);
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

Result<RedisParts> split_redis_url(std::string_view url, bool templated) {
  // The separators are searched outside `${...}` in a template, so that a variable's name never
  // splits the URL; in plain text `${` has no meaning.
  auto find_any = [templated](std::string_view text, std::string_view chars) {
    return templated ? find_outside_refs(text, chars) : text.find_first_of(chars);
  };
  auto rfind = [templated](std::string_view text, char c) {
    return templated ? rfind_outside_refs(text, c) : text.rfind(c);
  };
  RedisParts out;
  std::string_view rest;
  static constexpr struct {
    std::string_view scheme;
    bool tls, cluster;
  } kSchemes[] = {{"redis://", false, false},
                  {"rediss://", true, false},
                  {"redis+cluster://", false, true},
                  {"rediss+cluster://", true, true}};
  bool known = false;
  for (const auto& s : kSchemes) {
    if (!ascii_istarts_with(url, s.scheme)) continue;
    known = true;
    out.tls = s.tls;
    out.cluster = s.cluster;
    rest = url.substr(s.scheme.size());
  }
  if (!known) {
    return invalid(
        "not a Redis URL: it must start with redis://, rediss://, redis+cluster:// or "
        "rediss+cluster://");
  }
  std::size_t auth_end = find_any(rest, "/?#");
  if (auth_end == std::string_view::npos) auth_end = rest.size();
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view tail = rest.substr(auth_end);
  if (find_any(tail, "?#") != std::string_view::npos) {
    return invalid("not a Redis URL: query parameters and fragments are not supported");
  }
  const std::size_t at = rfind(authority, '@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    const std::size_t colon = find_any(userinfo, ":");
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
  out->cluster = parts.cluster;
  out->seeds.clear();
  if (!parts.cluster && host_port.find(',') != std::string::npos) {
    return invalid(
        "not a Redis URL: several hosts name a Redis Cluster: use redis+cluster:// (or "
        "rediss+cluster://)");
  }
  // One host:port, or a cluster's comma-separated seeds.
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = host_port.find(',', start);
    const std::string one =
        host_port.substr(start, comma == std::string::npos ? comma : comma - start);
    RedisHostPort seed;
    Status s = split_host_port(one, &seed.host, &seed.port, 6379, false);
    if (!s.ok()) {
      return invalid("not a Redis URL: " + std::string(parts.cluster ? "a seed: " : "") +
                     s.error().message);
    }
    out->seeds.push_back(std::move(seed));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  out->host = out->seeds.front().host;
  out->port = out->seeds.front().port;
  if (!parts.cluster) out->seeds.clear();
  if (!db.empty()) {
    const std::optional<uint64_t> n = db.size() <= 9 ? parse_decimal_u64(db) : std::nullopt;
    if (!n.has_value()) {
      return invalid("not a Redis URL: the database (after `/`) must be a number");
    }
    if (parts.cluster && *n != 0) {
      return invalid("not a Redis URL: a Redis Cluster has only database 0 (it refuses SELECT); " +
                     std::string("remove `/") + db + "`");
    }
    out->db = static_cast<int64_t>(*n);
  }
  return Status::Ok();
}

void Parser::redis(const Json* quiver) {
  redis_url(quiver);
  redis_tls(quiver);
}

// `quiver.redis_tls` {ca_file, cert_file, key_file, server_name} (strings; `${}` allowed), each
// overridden by its environment variable. Used only with a rediss:// URL.
void Parser::redis_tls(const Json* quiver) {
  struct Field {
    const char* key;
    const char* env;
    bool is_path;
    std::string RedisTlsFiles::*member;
  };
  static const Field kFields[] = {
      {"ca_file", kEnvRedisCaFile, true, &RedisTlsFiles::ca_file},
      {"cert_file", kEnvRedisCertFile, true, &RedisTlsFiles::cert_file},
      {"key_file", kEnvRedisKeyFile, true, &RedisTlsFiles::key_file},
      {"server_name", kEnvRedisServerName, false, &RedisTlsFiles::server_name},
  };
  const std::string path = "quiver.redis_tls";
  const Json* section = quiver != nullptr ? json_field(*quiver, "redis_tls") : nullptr;
  if (section != nullptr && !section->is_null() && !section->is_object()) {
    p_.error(path, std::string("must be an object, not ") + json_type(*section));
    section = nullptr;
  }
  if (section != nullptr && section->is_object()) {
    for (const auto& [key, value] : section->items()) {
      bool known = false;
      for (const Field& f : kFields) known = known || key == f.key;
      if (!known)
        p_.error(path + "." + key, "unknown key (ca_file, cert_file, key_file, server_name)");
    }
  }
  RedisTlsFiles files;
  std::string set_at;  // where the first setting came from, for the warning below
  for (const Field& f : kFields) {
    std::optional<std::string> value;
    std::string at = path + "." + f.key;
    auto env = src_.env.find(f.env);
    if (env != src_.env.end()) {
      cfg_.env_overrides.insert(f.env);
      value = env->second;
      at = f.env;
    } else if (section != nullptr && section->is_object()) {
      if (std::optional<std::string> v = string_field(*section, f.key, path)) {
        value = expand_plain(*v, at);
      }
    }
    if (!value.has_value() || value->empty()) continue;
    if (has_line_break_or_nul(*value)) {
      p_.error(at, "has a line break or NUL");
      continue;
    }
    if (!f.is_path) {
      std::string host;
      int port = 0;
      if (Status s = split_host_port(*value, &host, &port, 0, true); !s.ok() || port != 0) {
        p_.error(at, "must be a host name or IP address (no port)");
        continue;
      }
    }
    files.*f.member = f.is_path ? join_path(src_.working_dir, *value) : *value;
    if (set_at.empty()) set_at = at;
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    p_.error(path,
             "a client certificate needs both cert_file and key_file (QUIVER_REDIS_CERT_FILE, "
             "QUIVER_REDIS_KEY_FILE)");
  }
  if (!files.empty() && (!cfg_.redis.has_value() || !cfg_.redis->tls)) {
    p_.warn(set_at,
            "TLS settings are ignored: the store is not a rediss:// or rediss+cluster:// Redis");
  }
  if (cfg_.redis.has_value()) cfg_.redis->tls_files = std::move(files);
}

void Parser::redis_url(const Json* quiver) {
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
    p_.error(path, std::string("must be a redis://, rediss://, redis+cluster:// or "
                               "rediss+cluster:// URL string, not ") +
                       json_type(*v));
    return;
  }
  Result<RedisParts> parts = split_redis_url(v->get<std::string>(), /*templated=*/true);
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

}  // namespace config_internal

}  // namespace quiver
