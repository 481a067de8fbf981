#include "shared/edge_settings.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "shared/json.h"
#include "shared/mcp_endpoint.h"
#include "shared/runtime_settings.h"
#include "shared/webhook_signature.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

std::optional<bool> flag(const std::string& v) {
  std::string l;
  for (char c : v) l.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  if (l == "1" || l == "true" || l == "on" || l == "yes") return true;
  if (l == "0" || l == "false" || l == "off" || l == "no") return false;
  return std::nullopt;
}

// "host:port" or "[v6]:port"; nullopt when malformed.
std::optional<ClusterNode> parse_node(std::string_view text) {
  std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host.size() > 255 || port.empty() || port.size() > 5) return std::nullopt;
  int p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
    p = p * 10 + (c - '0');
  }
  for (char c : host) {
    if (static_cast<unsigned char>(c) <= ' ' || c == ',' || c == '/') return std::nullopt;
  }
  if (p < 1 || p > 65535) return std::nullopt;
  ClusterNode n;
  n.host = std::string(host);
  n.port = p;
  return n;
}

// REDIS_CLUSTER: "1" (REDIS_HOST:REDIS_PORT is the seed) or the seeds, "host:port,host:port".
Result<std::optional<ClusterRouterSettings>> cluster_from_env(
    const std::function<std::optional<std::string>(const char*)>& get) {
  std::optional<std::string> cluster = get("REDIS_CLUSTER");
  std::optional<std::string> replicas = get("QUIVER_REDIS_REPLICA_READS");
  std::optional<bool> on = cluster ? flag(*cluster) : std::optional<bool>(false);
  ClusterRouterSettings c;
  if (on.has_value() && *on) {
    ClusterNode seed;
    seed.host = get("REDIS_HOST").value_or("127.0.0.1");
    std::string port = get("REDIS_PORT").value_or("6379");
    std::optional<ClusterNode> parsed = parse_node(seed.host + ":" + port);
    if (!parsed) return invalid("REDIS_CLUSTER=1 needs REDIS_HOST and REDIS_PORT to name a seed");
    c.seeds.push_back(std::move(*parsed));
  } else if (!on.has_value()) {
    std::string_view list = *cluster;
    while (!list.empty()) {
      std::size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      std::optional<ClusterNode> n = parse_node(item);
      if (!n) return invalid("REDIS_CLUSTER must be 1 or seeds host:port[,host:port...]");
      c.seeds.push_back(std::move(*n));
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    if (c.seeds.empty() || c.seeds.size() > 64) {
      return invalid("REDIS_CLUSTER must be 1 or 1 to 64 seeds host:port[,host:port...]");
    }
  }
  if (replicas) {
    std::optional<bool> r = flag(*replicas);
    if (!r) return invalid("QUIVER_REDIS_REPLICA_READS must be 0 or 1");
    if (*r && c.seeds.empty()) return invalid("QUIVER_REDIS_REPLICA_READS needs REDIS_CLUSTER");
    c.replica_reads = *r;
  }
  if (c.seeds.empty()) return std::optional<ClusterRouterSettings>();
  if (std::optional<std::string> tls = get("REDIS_TLS")) c.tls = flag(*tls).value_or(false);
  return std::optional<ClusterRouterSettings>(std::move(c));
}

}  // namespace

Result<EdgeSettings> edge_settings_from_env(std::string_view env_json) {
  Result<Json> env = parse_json(env_json, 1 << 20);
  if (!env.ok()) return invalid("the environment is not JSON: " + env.error().message);
  if (!env->is_object()) return invalid("the environment is not a JSON object");
  auto get = [&](const char* name) -> std::optional<std::string> {
    std::optional<std::string> v = json_string(*env, name);
    if (v && v->empty()) return std::nullopt;  // an empty variable is an unset one
    return v;
  };
  // A setting of the one runtime table (shared/runtime_settings.h): its syntax and bounds, as
  // the agent checks the same variable.
  auto get_ms = [&](const char* name, int64_t* out) -> Status {
    std::optional<std::string> v = get(name);
    if (!v) return Status::Ok();
    const RuntimeSetting* setting = find_runtime_setting_env(name);
    if (setting == nullptr || (setting->hosts & kRuntimeEdge) == 0) {
      return Error(ErrorCode::kInternal, std::string(name) + " is not an edge setting");
    }
    Result<double> n = runtime_setting_from_env(*setting, *v);
    if (!n.ok()) return n.error();
    *out = static_cast<int64_t>(*n);
    return Status::Ok();
  };

  EdgeSettings s;
  if (std::optional<std::string> ns = get("QUIVER_NAMESPACE")) s.ns = *ns;
  if (Status st = validate_namespace(s.ns); !st.ok()) {
    return invalid("QUIVER_NAMESPACE: " + st.error().message);
  }
  std::optional<std::string> keys = get("QUIVER_TOKEN_KEYS");
  if (!keys) return invalid("QUIVER_TOKEN_KEYS is not set: no caller token can be verified");
  Result<Keyring> keyring = Keyring::from_json(*keys);
  if (!keyring.ok()) return invalid("QUIVER_TOKEN_KEYS: " + keyring.error().message);
  s.keyring = std::move(*keyring);
  if (std::optional<std::string> aud = get("QUIVER_TOKEN_AUDIENCE")) s.token.audience = *aud;
  s.token.ns = s.ns;
  if (std::optional<std::string> user = get("REDIS_USERNAME")) s.redis_username = *user;
  if (std::optional<std::string> password = get("REDIS_PASSWORD")) s.redis_password = *password;
  if (!s.redis_username.empty() && s.redis_password.empty()) {
    return invalid("REDIS_USERNAME is set without REDIS_PASSWORD");
  }

  int64_t max_bytes = static_cast<int64_t>(s.l1.max_bytes);
  int64_t search_mode = s.mcp_search_mode ? 1 : 0;
  for (Status st :
       {get_ms("QUIVER_L1_TTL_MS", &s.l1.ttl_ms),
        get_ms("QUIVER_L1_STALE_IF_ERROR_MS", &s.l1.stale_if_error_ms),
        get_ms("QUIVER_L1_MAX_BYTES", &max_bytes),
        get_ms("QUIVER_L1_VALIDATE_MAX_AGE_MS", &s.l1.validate_max_age_ms),
        get_ms("QUIVER_FRESH_TTL_MS", &s.discovery.freshness.fresh_ttl_ms),
        get_ms("QUIVER_MAX_AGE_MS", &s.discovery.freshness.max_age_ms),
        get_ms("QUIVER_MIN_UPSTREAM_TTL_MS", &s.discovery.freshness.min_upstream_ttl_ms),
        get_ms("QUIVER_REVALIDATE_WINDOW_MS", &s.enqueue.window_ms),
        get_ms("QUIVER_REDIS_FAIL_FAST_MS", &s.fail_fast_ms),
        get_ms("QUIVER_CALL_TIMEOUT_MS", &s.call_timeout_ms),
        get_ms("QUIVER_MCP_KEEPALIVE_MS", &s.mcp_keepalive_ms),
        get_ms("QUIVER_MCP_SEARCH_MODE", &search_mode)}) {
    if (!st.ok()) return st.error();
  }
  s.mcp_search_mode = search_mode != 0;
  s.l1.max_bytes = static_cast<std::size_t>(max_bytes);
  s.l1.max_entry_bytes = std::min(s.l1.max_entry_bytes, s.l1.max_bytes);
  s.l1.stale_if_error_ms = std::max(s.l1.stale_if_error_ms, s.l1.ttl_ms);
  if (Status st = validate_edge_cache_options(s.l1); !st.ok()) return st.error();
  // An upstream ttlMs may shorten the fresh TTL, but not below the floor; the floor follows a
  // configured TTL shorter than its default.
  s.discovery.freshness.min_upstream_ttl_ms =
      std::min(s.discovery.freshness.min_upstream_ttl_ms, s.discovery.freshness.fresh_ttl_ms);
  if (Status st = validate_freshness_policy(s.discovery.freshness); !st.ok()) {
    return invalid("QUIVER_FRESH_TTL_MS / QUIVER_MAX_AGE_MS: " + st.error().message);
  }
  if (std::optional<std::string> secrets = get("QUIVER_WEBHOOK_SECRETS")) {
    Result<Json> parsed = parse_json(*secrets, 64 * 1024);
    if (!parsed.ok() || !parsed->is_object() || parsed->empty()) {
      return invalid("QUIVER_WEBHOOK_SECRETS must be a JSON object {\"name\": \"secret\"}");
    }
    for (const auto& [name, value] : parsed->items()) {
      if (!value.is_string() || value.get<std::string>().size() < kMinWebhookSecretBytes) {
        return invalid("QUIVER_WEBHOOK_SECRETS." + name + ": not a string of at least " +
                       std::to_string(kMinWebhookSecretBytes) + " bytes");
      }
      s.webhook_secrets.push_back(value.get<std::string>());
    }
  }
  if (std::optional<std::string> origins = get("QUIVER_MCP_ALLOWED_ORIGINS")) {
    Result<std::vector<std::string>> keys = parse_mcp_allowed_origins(*origins);
    if (!keys.ok()) return invalid("QUIVER_MCP_ALLOWED_ORIGINS: " + keys.error().message);
    s.mcp_allowed_origins = std::move(*keys);
  }
  Result<std::optional<ClusterRouterSettings>> cluster = cluster_from_env(get);
  if (!cluster.ok()) return cluster.error();
  s.cluster = std::move(*cluster);
  s.l1.revalidation_claim_ms = std::min<int64_t>(5'000, s.enqueue.window_ms);
  return s;
}

}  // namespace quiver
