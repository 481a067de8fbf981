// Configuration: the agent's upstreams, stores, runtime controls, members, grants and secrets, read
// from one JSON file plus the environment.
//
// The file is the `mcpServers` convention MCP clients already use (Claude Desktop, Cursor, VS Code
// style), so an existing client config works unchanged, plus an optional `quiver` section that
// other clients ignore. `parse_config` is a pure function of (file text, environment, a reader for
// secret files, the working directory): tests hand it fakes; `load_config_file` wires in the real
// file system and environment for `main`.
//
//   {"mcpServers": {
//      "everything": {"command": "node", "args": ["server.js", "stdio"], "env": {"K": "${K}"}},
//      "github": {"url": "https://host/mcp", "headers": {"X-Org": "acme"}},
//      "other":  {"type": "streamable-http" | "http" | "stdio", ...}},
//    "quiver": {
//      "revision": "2026-12-03T12:00:00Z",
//      "namespace": "default", "redis": "rediss://:${REDIS_PASSWORD}@host:6380/0",
//      "redis_tls": {"ca_file": "/etc/quiver/redis-ca.pem", "cert_file": "...", "key_file": "...",
//                    "server_name": "redis.example.com"},
//      "data_dir": "/var/lib/quiver", "listen": "127.0.0.1:8787",
//      "allow_private_upstreams": false,
//      "runtime": {"list_timeout_ms": 3500, ...},
//      "caller_token_keys": {"2026-01": {"env": "QUIVER_TOKEN_KEY"}},
//      "caller_token_signing_kid": "2026-01",
//      "webhook_secrets": {"ci": {"file": "/run/secrets/quiver-webhook"}},
//      "members": ["alice", "bob"],
//      "grants": {"alice": ["everything", "github"], "*": ["everything"]},
//      "connections": {"github": {
//         "credential_mode": "per_member", "auth": "bearer", "credential_version": "3",
//         "credentials": {"alice": {"env": "ALICE_TOKEN"}, "bob": {"file": "/run/secrets/bob"}},
//         "auto_enable_new_capabilities": false}}}}
//
// Decisions (documented here once; README and deploy/ examples follow them):
// - Servers. `type` is optional: `command` means stdio, `url` means Streamable HTTP (`http`,
//   `streamable-http`, `streamableHttp` are accepted spellings). The legacy HTTP+SSE transport
//   (`sse`) is refused. `disabled: true` (Cline / Cursor) skips the server, with a warning. Other
//   per-server fields other clients use (`alwaysAllow`, `timeout`, ...) and unknown top-level keys
//   are ignored with a warning. Known fields of the wrong type are errors.
// - Per-connection Quiver settings live in `quiver.connections.<server name>`, never inline on the
//   server entry, so other clients reading the same file see only what they know. A name there
//   that is not a server is an error. Every key of the `quiver` section is checked: a typo is an
//   error, never silently nothing.
// - Connection ids. A server name that is a valid connection id (`[A-Za-z0-9._-]{1,128}`) is the
//   id. Otherwise `connection_id_for_name` maps it deterministically: each run of other bytes
//   becomes `-`, the result is cut to 119 bytes and `-` plus the first 8 hex digits of the name's
//   SHA-256 is appended ("My Server" -> "My-Server-1a2b3c4d"). `quiver.connections.<name>.id`
//   sets an explicit id instead. Two servers with one id are an error.
// - Grants. `quiver.grants` maps a member id, or `*` (every member), to a list of server names (or
//   connection ids), or `["*"]` (every connection). A member's grants are its own plus those of
//   `*`. Members are `quiver.members` when given (then every member named in grants or
//   credentials must be listed), else every member named in grants and per-member credentials.
// - Operators. `quiver.operators` lists member ids (in `quiver.members` when that is given) who may
//   toggle a `shared` connection's capabilities through the API; another member gets 403. On a
//   `per_member` connection every granted member toggles their own (operators included).
// - Credentials. `credential_mode` is `shared` (default; principal `shared`) or `per_member`
//   (principal `member/<id>`). `auth` is `none`, `bearer` (HTTP: `Authorization: Bearer <secret>`),
//   `api_key` (HTTP: header `api_key_header`, default `X-API-Key`; stdio: env var
//   `credential_env`, required) or `headers` (the server entry's own `headers`, shared mode only).
//   Default: `headers` for an HTTP server with headers, else `none`. Shared mode takes one
//   `credential`, per-member mode a `credentials` map; every member granted a per-member
//   connection must have one. `credential_version` (string or integer) is hashed: bump it when
//   rotating a credential to make cached manifests miss.
// - Secrets. A secret reference is `{"env": "NAME"}`, `{"file": "/path"}` (trailing newlines cut,
//   at most 64 KiB; a relative path is taken from the working directory) or a `"${NAME}"` string;
//   an inline literal in the `quiver` section is an error. `env` and `headers` values of servers
//   are secrets whatever they hold (client configs put tokens there inline). Strings in `command`,
//   `args`, `cwd`, `url`, `env`, `headers`, `redis`, `data_dir` and file paths may use `${NAME}`,
//   `${env:NAME}` (VS Code spelling) and `${NAME:-default}`; `$${` is a literal `${`. A
//   referenced variable that is not set is an error naming the field and the variable.
//   `${QUIVER_DATA_DIR}` always resolves to the effective data directory. Values substituted into
//   `url` are redacted like secrets (some upstreams take a token in the path) and status shows
//   the URL as written, its query hidden. Values substituted into `command`, `args` and `cwd`
//   are configuration, not secrets: keep secrets in `env`, `headers` or credentials.
// - Precedence: environment variable > file > default (see kRuntimeControls for the names).
//   `QUIVER_REDIS_URL=` (set, empty) selects the embedded default even when the file names Redis.
// - A relative `data_dir` is taken from the working directory.
// - Revision. `quiver.revision` says how new the file's members, grants and connections are when
//   they are seeded into the runtime catalog (native-agent/store/catalog.h, the file rule): an
//   integer >= 1 taken as milliseconds since the epoch (`date +%s%3N`), or an ISO-8601 UTC time
//   `YYYY-MM-DDTHH:MM:SS[.fff]Z`. Absent, load_config_file takes the file's mtime in ms.
//
// Errors name the field path (`mcpServers.github.url: not a valid http(s) URL: ...`), never a
// secret value; every problem found is reported, one per line. `kConfigExitCode` is the exit
// status for a bad configuration.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "native-agent/base/exit_codes.h"
#include "native-agent/base/redactor.h"
#include "shared/freshness.h"
#include "shared/identity.h"
#include "shared/json.h"
#include "shared/oauth.h"
#include "shared/status.h"

namespace quiver {

// What `quiver-agent` exits with when the configuration is invalid (exit_codes.h: usage or config).
inline constexpr int kConfigExitCode = kExitUsage;
// The environment variable naming the config file when no --config is given.
inline constexpr char kConfigPathEnv[] = "QUIVER_CONFIG";
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxSecretFileBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMinCallerTokenKeyBytes = 32;  // RFC 7518 §3.2 for HS256
inline constexpr char kDefaultListen[] = "127.0.0.1:8787";
inline constexpr char kDefaultApiKeyHeader[] = "X-API-Key";

// ---- secrets -----------------------------------------------------------------------------------

// A secret value (token, password, key). It prints as `***` (operator<<, describe) so that it
// cannot reach a log line, an error message or a test failure by accident; `reveal()` is the one
// explicit way to the value, for the code that puts it on the wire.
class Secret {
 public:
  Secret() = default;
  // `source` says where the value came from, never the value: "env:NAME", "file:/path",
  // "inline", "env:A,B" (a template referencing A and B).
  explicit Secret(std::string value, std::string source = "inline")
      : value_(std::move(value)), source_(std::move(source)) {}

  const std::string& reveal() const { return value_; }
  bool empty() const { return value_.empty(); }
  const std::string& source() const { return source_; }
  std::string describe() const { return "***"; }

 private:
  std::string value_;
  std::string source_;
};

std::ostream& operator<<(std::ostream& out, const Secret& secret);  // writes `***`

// Replaces every occurrence of every secret value in `text` with `***`, in every form the
// Redactor knows (native-agent/base/redactor.h: as is, JSON-escaped, percent-encoded, base64).
// Builds a Redactor per call: code that redacts more than once uses AgentConfig::redactor.
// Values shorter than kMinRedactedSecretBytes are left alone: server `env` values count as
// secrets, and replacing `1` or `ro` would garble every line while hiding nothing worth hiding.
std::string redact(std::string_view text, const std::vector<Secret>& secrets);

// ---- inputs ------------------------------------------------------------------------------------

using EnvMap = std::map<std::string, std::string>;
// Reads a secret file whole. kNotFound / kInvalidArgument with a reason; never the content.
using SecretFileReader = std::function<Result<std::string>(const std::string& path)>;

struct ConfigSources {
  std::string_view text;       // the config file's content
  std::string_view origin;     // for messages: the file name, e.g. "quiver.json"
  EnvMap env;                  // the agent's environment
  SecretFileReader read_file;  // for {"file": ...} references; null: file references fail
  std::string working_dir;     // absolute; relative paths are taken from here ("" keeps them)
};

// ---- runtime controls --------------------------------------------------------------------------

struct RuntimeControls {
  int64_t list_timeout_ms = 3500;     // one deadline for all pages of one connection
  int64_t request_timeout_ms = 3000;  // each request (initialize, each page); capped
                                      // by list_timeout_ms
  // A call through the agent's /mcp (tools/call, resources/read, prompts/get,
  // completion/complete): its deadline, apart from the listing's. 60 s.
  int64_t call_timeout_ms = 60000;
  // A fresh upstream session's start-up budget (spawn or dial, the handshake), on top of the
  // listing deadline: a server that needs 6 s (or 20 s) to answer `initialize` is listed. 30 s.
  int64_t startup_timeout_ms = 30000;
  int64_t list_concurrency = 5;         // listings at once per agent
  int64_t fresh_ttl_ms = 900000;        // 15 min
  int64_t max_age_ms = 86400000;        // 24 h
  double refresh_ahead_ratio = 0.8;     // of the fresh TTL
  int64_t max_manifest_bytes = 262144;  // 256 KiB
  // Page bytes one listing may receive (all lists together), before the manifest bound: what a
  // hostile upstream can make the agent hold. 16 MiB.
  int64_t max_listing_bytes = 16777216;
  int64_t maintenance_interval_ms = 300000;  // 5 min
  int64_t maintenance_batch = 20;
  int64_t lease_ms = 60000;            // must exceed list_timeout_ms
  int64_t revalidate_concurrency = 3;  // background revalidations at once
  // One queued revalidation per (connection, principal) per window: the gate key agents and edges
  // share (the edge reads the same QUIVER_REVALIDATE_WINDOW_MS).
  int64_t revalidate_window_ms = 30000;
  // How often the agent checks the store's namespace record (and restores a wiped namespace).
  int64_t store_check_interval_ms = 1000;
  // An upstream's MCP `ttlMs` is raised to at least this (then capped by the fresh TTL): a server
  // answering ttlMs 0 cannot make every read revalidate. 60 s.
  int64_t min_upstream_ttl_ms = 60000;
  // After a listing in which lists failed (or that failed as a whole), the agent retries on its
  // own, after 2 s, then doubling, at most this long apart, until a listing succeeds. 5 min.
  int64_t retry_max_backoff_ms = 300000;
  // 1: POST /mcp lists three tools of its own (search, describe, call) instead of every tool.
  int64_t mcp_search_mode = 0;

  // fresh TTL, max age and ratio from here; the upstream-TTL floor is
  // min(min_upstream_ttl_ms, fresh TTL).
  FreshnessPolicy freshness_policy() const;
};

// One row per control: the `quiver.runtime` key, its environment variable and bounds.
struct RuntimeControlInfo {
  const char* field;  // "list_timeout_ms"
  const char* env;    // "QUIVER_LIST_TIMEOUT_MS"
  double min;         // inclusive, except refresh_ahead_ratio (exclusive 0)
  double max;         // inclusive
  bool is_ratio;
};
extern const std::vector<RuntimeControlInfo> kRuntimeControls;

// Environment variables for the other top-level settings.
inline constexpr char kEnvNamespace[] = "QUIVER_NAMESPACE";
inline constexpr char kEnvRedisUrl[] = "QUIVER_REDIS_URL";
// TLS to Redis (`rediss://`): each overrides its `quiver.redis_tls` field.
inline constexpr char kEnvRedisCaFile[] = "QUIVER_REDIS_CA_FILE";
inline constexpr char kEnvRedisCertFile[] = "QUIVER_REDIS_CERT_FILE";
inline constexpr char kEnvRedisKeyFile[] = "QUIVER_REDIS_KEY_FILE";
inline constexpr char kEnvRedisServerName[] = "QUIVER_REDIS_TLS_SERVER_NAME";
inline constexpr char kEnvDataDir[] = "QUIVER_DATA_DIR";
inline constexpr char kEnvListen[] = "QUIVER_LISTEN";
inline constexpr char kEnvAllowPrivateUpstreams[] = "QUIVER_ALLOW_PRIVATE_UPSTREAMS";
// Web origins that may call /mcp besides loopback ones (comma-separated; the edge reads the same).
inline constexpr char kEnvMcpAllowedOrigins[] = "QUIVER_MCP_ALLOWED_ORIGINS";

// ---- stores and listening ----------------------------------------------------------------------

// TLS settings of a `rediss://` Redis (`quiver.redis_tls`, QUIVER_REDIS_CA_FILE, ...): the server's
// certificate is always verified; paths are absolute (relative ones are taken from the working
// directory).
struct RedisTlsFiles {
  std::string
      ca_file;  // PEM CA certificates to trust instead of the system store; empty: the store
  std::string cert_file;    // client certificate chain (PEM), for a server that asks for one (mTLS)
  std::string key_file;     // its private key (PEM); set with cert_file or not at all
  std::string server_name;  // the name the certificate must carry (and SNI); empty: the URL's host
  bool empty() const {
    return ca_file.empty() && cert_file.empty() && key_file.empty() && server_name.empty();
  }
};

struct RedisHostPort {
  std::string host;  // an IPv6 literal without brackets
  int port = 6379;
};

// `redis://[[user]:password@]host[:port][/db]`, `rediss://` for TLS. User and password are
// percent-decoded; the password may be a `${NAME}` reference.
//
// A Redis Cluster: `redis+cluster://[[user]:password@]host[:port][,host[:port]...][/0]`
// (`rediss+cluster://` for TLS): one or more seed nodes, comma-separated; the agent learns the
// other nodes from them (CLUSTER SHARDS) and follows failovers. The database can only be 0 (a
// cluster refuses SELECT); several hosts without `+cluster` are an error that says so.
struct RedisConfig {
  bool tls = false;
  RedisTlsFiles tls_files;  // used with tls only
  std::string host;         // an IPv6 literal without brackets (a cluster: the first seed's)
  int port = 6379;
  int64_t db = 0;
  bool cluster = false;              // redis+cluster:// or rediss+cluster://
  std::vector<RedisHostPort> seeds;  // cluster only: every host:port of the URL, in order
  std::string username;              // empty: the default user
  std::optional<Secret> password;    // nullopt: no AUTH
  // "rediss://user:***@host:6380/0", "redis+cluster://:***@10.0.0.1:7000,10.0.0.2:7000"
  std::string describe() const;
};
// Parses a Redis URL with no `${}` references (the QUIVER_REDIS_URL form).
Result<RedisConfig> parse_redis_url(std::string_view url);

struct ListenAddress {
  std::string host = "127.0.0.1";  // an IPv6 literal without brackets
  int port = 8787;                 // 0: any free port
  bool is_loopback() const;
  std::string describe() const;  // "127.0.0.1:8787", "[::1]:8787"
};
Result<ListenAddress> parse_listen_address(std::string_view text);

// ---- connections -------------------------------------------------------------------------------

// Maps a server name to a connection id (see the header comment). kInvalidArgument when empty.
Result<std::string> connection_id_for_name(std::string_view name);

// What a transport needs to reach an upstream, resolved (`${}` substituted):
// ConnectionConfig::endpoint as configured, and ConnectionConfig::upstream_for the same for one
// principal with its credential placed in a header (HTTP) or an env var (stdio).
struct UpstreamEndpoint {
  TransportKind transport = TransportKind::kUnknown;
  // stdio
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, Secret> env;
  std::string cwd;  // empty: the agent's
  // http
  std::string url;
  std::map<std::string, Secret> headers;
  bool allow_private_addresses = false;
};

// `quiver.connections.<name>.oauth`, for a connection with `auth: "oauth"` (HTTP only). Every key
// is optional: without a client id the agent uses the server's client ID metadata document
// support or dynamic registration. Secrets are references, as everywhere.
//   {"grant": "authorization_code" | "client_credentials", "client_id": "quiver-prod",
//    "client_secret": {"env": "LINEAR_CLIENT_SECRET"},
//    "client_id_metadata_url": "https://quiver.example.com/oauth/client.json",
//    "scopes": ["read", "offline_access"], "token_endpoint_auth_method": "client_secret_basic",
//    "private_key": {"file": "/run/secrets/quiver-es256.pem"}, "private_key_id": "k1",
//    "audience": "https://api.example.com", "resource": false}
// `resource: false` omits the RFC 8707 parameter (identity providers that refuse it).
// `client_credentials` needs a client id and a secret or a private key, and suits `shared` mode.
struct OAuthConnectionSettings {
  oauth::GrantType grant = oauth::GrantType::kAuthorizationCode;
  std::string client_id;  // not a secret
  std::optional<Secret> client_secret;
  std::string client_id_metadata_url;
  std::vector<std::string> scopes;
  std::string token_endpoint_auth_method;
  std::optional<Secret> private_key;  // PEM
  std::string private_key_id;
  std::string audience;
  bool send_resource = true;
  // The core's settings, secrets revealed, for a flow redirecting to `redirect_uri`: a loopback
  // redirect (127.0.0.1, [::1], localhost) registers as a native application (RFC 8252), any
  // other as a web application.
  oauth::OAuthClientSettings client_settings(const std::string& redirect_uri) const;
  // What config_hash takes of these settings (ConnectionIdentity::oauth): grant, client id, CIMD
  // URL, scopes, token endpoint auth method, audience, the resource flag, the key id; never a
  // secret value.
  Json identity_json() const;
};

// `quiver.oauth`: what every OAuth connection of this agent shares.
//   {"key": {"env": "QUIVER_OAUTH_KEY"},          32 bytes, 64 hex digits or base64; required
//                                                 as soon as one connection has auth oauth
//    "redirect_uri": "https://edge.example.com/v1/oauth/callback",
//    "token_store": "/var/lib/quiver/oauth-tokens.db"}
// `redirect_uri` defaults to http://<listen>/v1/oauth/callback (the agent's own callback, for a
// local agent); an edge in front sets its public callback URL here. `token_store` defaults to
// `<data_dir>/oauth-tokens.db` (native-agent/store/token_store.h).
struct OAuthAgentSettings {
  std::optional<Secret> key;
  std::string redirect_uri;
  bool redirect_uri_configured = false;  // false: the default, following `listen`
  std::string token_store;
  // A token is refreshed when it expires within this long (and on a 401). 60 s.
  // (`refresh_ahead_ms`, 0 .. 86400000).
  int64_t refresh_ahead_ms = 60000;
};

// The 32 bytes of `quiver.oauth.key`: 64 hex digits, or base64 (standard or URL alphabet, padded
// or not). kInvalidArgument otherwise, never quoting the value. (Also declared in
// native-agent/store/token_store.h, whose store uses it; defined here so that parse_config checks
// the key.)
Result<std::string> parse_token_key(const Secret& key);

struct ConnectionConfig {
  std::string name;  // the mcpServers key, as written
  std::string id;    // a valid connection id
  // The transport and its parameters, resolved; no credential placed (upstream_for places it).
  UpstreamEndpoint endpoint;

  // As written in the file (`${}` unresolved): what status output and describe() show.
  std::string written_command;
  std::vector<std::string> written_args;
  std::string written_url;
  // Values substituted into `url`: redacted like secrets (a path may carry a token).
  std::vector<Secret> url_substitutions;

  CredentialMode credential_mode = CredentialMode::kShared;
  AuthType auth = AuthType::kNone;
  std::string credential_version;
  std::string api_key_header;                        // http + api_key
  std::string credential_env;                        // stdio + api_key
  std::optional<Secret> credential;                  // shared bearer / api_key
  std::map<std::string, Secret> member_credentials;  // per_member: member id -> secret
  std::optional<OAuthConnectionSettings> oauth;      // auth oauth
  bool auto_enable_new_capabilities = true;
  // This connection's deadlines (`quiver.connections.<name>`), overriding the runtime controls
  // of the same names; nullopt: the runtime control applies. Not part of config_hash.
  std::optional<int64_t> list_timeout_ms;
  std::optional<int64_t> request_timeout_ms;
  std::optional<int64_t> startup_timeout_ms;

  std::set<std::string> granted_members;  // who may read this connection
  std::string config_hash;                // config_hash(identity())

  // The principals this connection is listed for: `shared`, or `member/<id>` for each granted
  // member (per_member).
  std::vector<Principal> principals() const;
  // The principal a member's reads of this connection use. kNotFound unless the member is granted
  // this connection.
  Result<Principal> principal_for_member(std::string_view member_id) const;
  // Transport parameters for `principal`, credentials placed. kInvalidArgument when the principal
  // does not fit the credential mode, kNotFound when a member has no credential.
  Result<UpstreamEndpoint> upstream_for(const Principal& principal) const;
  // What config_hash is taken over (shared/config_hash.h): the endpoint and auth settings, with
  // the names of env vars and headers (the credential's too) and no secret value.
  ConnectionIdentity identity() const;
  // Every secret of this connection (env and header values, credentials).
  std::vector<Secret> secrets() const;
  // "github (http https://host/mcp?…, auth bearer, per_member)": the URL as written, its query
  // hidden; no secret.
  std::string describe() const;
  // {"id", "name", "transport", "credential_mode"}: how status output (`quiver-agent status`,
  // GET /v1/admin/status) names the connection.
  Json summary_json() const;
};

std::ostream& operator<<(std::ostream& out, const ConnectionConfig& connection);

// ---- the whole configuration -------------------------------------------------------------------

struct AgentConfig {
  std::string ns = kDefaultNamespace;
  std::optional<RedisConfig> redis;  // nullopt: the embedded default (SQLite)
  std::string data_dir;
  ListenAddress listen;
  bool allow_private_upstreams = false;
  // `quiver.mcp_allowed_origins` / QUIVER_MCP_ALLOWED_ORIGINS: origins (mcp_origin_key's form)
  // whose web pages may call /mcp besides loopback ones (shared/mcp_endpoint.h
  // mcp_origin_refusal: DNS rebinding protection). Empty: loopback pages only.
  std::vector<std::string> mcp_allowed_origins;
  RuntimeControls runtime;
  // The file's revision in ms (`quiver.revision`, else the file's mtime from load_config_file);
  // 0: no file (a configuration built by hand seeds nothing into the catalog).
  int64_t revision_ms = 0;
  std::set<std::string> env_overrides;  // the variables that overrode a setting

  std::map<std::string, Secret> caller_token_keys;  // kid -> HMAC key
  std::string caller_token_signing_kid;             // empty: none chosen (several keys)
  std::map<std::string, Secret> webhook_secrets;    // name -> secret
  OAuthAgentSettings oauth;                         // `quiver.oauth`

  std::set<std::string> members;
  // Members who may toggle the capabilities of `shared` connections (everyone's view); other
  // members toggle only their own, on per-member connections. Empty: nobody through the API.
  std::set<std::string> operators;
  std::map<std::string, std::set<std::string>> grants;  // member id -> connection ids
  std::vector<ConnectionConfig> connections;            // sorted by id; disabled ones absent
  std::vector<std::string> warnings;                    // ignored fields, skipped servers, ...

  // Sets where the API listens (`serve --listen`, a port chosen at bind time); the default OAuth
  // redirect URI (the agent's own callback) follows it.
  void set_listen(const ListenAddress& address);

  const ConnectionConfig* find_connection(std::string_view id) const;
  const ConnectionConfig* find_connection_by_name(std::string_view name) const;
  // Member's principal for a connection: kNotFound for an unknown connection or no grant.
  Result<Principal> principal_for(std::string_view member_id, std::string_view connection_id) const;

  // Every secret value held (for `redact`).
  std::vector<Secret> secrets() const;
  // The one Redactor for this configuration's secrets, built by parse_config (a configuration
  // assembled by hand gets one built from secrets() on each redact call instead).
  std::shared_ptr<const Redactor> redactor;
  std::string redact(std::string_view text) const;

  // The effective configuration for `quiver-agent status`: every setting after defaults and
  // overrides, derived ids, principals and config hashes; secrets as `***` with their source.
  Json effective_config_json() const;
};

// Parses and validates. kInvalidArgument with one `path: problem` line per problem found.
Result<AgentConfig> parse_config(const ConfigSources& sources);
// The config file's JSON as parse_config reads it (comments allowed, size and depth bounded).
// kInvalidArgument naming `origin` and the line and column, never the text.
Result<Json> parse_config_json(std::string_view text, const std::string& origin);

// ---- the real world (main) ---------------------------------------------------------------------

EnvMap env_from_environ(const char* const* environ);
// Reads a secret file, at most kMaxSecretFileBytes (+1 to detect more).
Result<std::string> read_secret_file(const std::string& path);
// Reads `path` (at most kMaxConfigBytes) and parses it with the real file system, `env` and the
// current working directory. revision_ms is the file's mtime in ms unless `quiver.revision` is set.
Result<AgentConfig> load_config_file(const std::string& path, const EnvMap& env);

// A config file read whole, with what parse_config needs to parse it again (the effective
// configuration is built from its text and the catalog: native-agent/engine/catalog_config.h).
struct ConfigFile {
  std::string path;
  std::string text;
  EnvMap env;
  std::string working_dir;
  int64_t mtime_ms = 0;
  ConfigSources sources() const;  // text, path as origin, env, read_secret_file, working_dir
};
Result<ConfigFile> read_config_file(const std::string& path, const EnvMap& env);
// Parses a file read by read_config_file: load_config_file in two steps.
Result<AgentConfig> parse_config_file(const ConfigFile& file);
// "2026-12-03T12:00:00Z" or with milliseconds ".123Z": ms since the epoch; nullopt otherwise.
std::optional<int64_t> parse_utc_time_ms(std::string_view text);

}  // namespace quiver
