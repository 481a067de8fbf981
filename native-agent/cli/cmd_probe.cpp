// `quiver-agent probe`: list one upstream MCP server live and print what Quiver would cache.
//
// It is the agent's "test connection": a fresh session, every page of every list, one deadline.
// Output (stdout) is one JSON object: status, the upstream (described without secrets), protocol
// version and era, server info, timings, each list's state and count, and the listing itself.
// `--watch` keeps the session open and prints a new object as one NDJSON line whenever the
// upstream's lists change (list_changed notices, debounced), until SIGINT or SIGTERM (exit 0).
// Secrets (--header values, --env values) are handed to the transport and never printed.
// `--oauth` first obtains a bearer token through the OAuth flow (shared/oauth.h) and sends it as
// an Authorization header; the token, the client secret and the key are never printed.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <signal.h>

#include "native-agent/base/logger.h"
#include "native-agent/base/shell_words.h"
#include "native-agent/cli/cli.h"
#include "native-agent/cli/oauth_loopback.h"
#include "native-agent/upstream/oauth_http.h"
#include "native-agent/upstream/probe_report.h"
#include "native-agent/upstream/upstream.h"
#include "shared/canonical_json.h"
#include "shared/json.h"
#include "shared/listing.h"
#include "shared/numbers.h"
#include "shared/oauth.h"
#include "shared/oauth_internal.h"

namespace quiver {
namespace {

constexpr const char* kProbeUsage =
    R"(usage: quiver-agent probe (--stdio "CMD ARGS" | --url URL) [options]

Lists one upstream MCP server live (every page of tools, resources, resource templates and
prompts) and prints the result as JSON on stdout. Exit status: 0 listed, 1 could not list (or a
list failed), 2 usage error.

upstream (exactly one):
  --stdio "CMD ARGS"     run CMD as a stdio MCP server; split like a shell splits words
                         (quotes and backslashes), but no shell runs it: nothing is expanded
  --url URL              a Streamable HTTP MCP endpoint

options:
  --header "Name: value" HTTP header sent on every request (repeatable); values are secrets
  --env NAME=VALUE       environment variable for the stdio server (repeatable); values are
                         secrets. The server otherwise sees only PATH, HOME and LANG
  --timeout-ms N         deadline for the whole listing, handshake included (default 3500)
  --allow-private        allow URLs on loopback and private addresses (local servers)
  --watch                keep the session; print one NDJSON line per change until interrupted
  --name NAME            the upstream's name in messages (default "probe")
  --verbose              the server's stderr and connection events on stderr
  --help                 this text

OAuth (--url only; the MCP authorization spec):
  --oauth                obtain a bearer token first: discovery from the server's 401, then
                         the authorization code flow with PKCE; the authorization URL is
                         printed on stderr as a line "authorize: <URL>" and the probe waits
                         (up to --oauth-wait-ms, default 120000) for the browser's redirect
                         to its loopback listener http://127.0.0.1:PORT/callback (RFC 8252)
  --client-id ID         a pre-registered client (else a client ID metadata document, else
                         dynamic registration)
  --client-secret S      its secret (a secret: never printed)
  --client-credentials   the client_credentials grant (no browser; needs --client-id)
  --private-key-file F   a PEM private key (EC P-256: ES256, RSA: RS256) for private_key_jwt
  --client-metadata-url U  the client ID metadata document URL, used when the authorization
                         server advertises client_id_metadata_document_supported
  --scope S              scopes to ask for (repeatable, or space-separated); default: the
                         challenge's, else the server's scopes_supported
  --oauth-wait-ms N      how long to wait for the redirect
  When --oauth is given without --client-id, --client-secret and --private-key-file, the JSON
  object in the environment variable MCP_CONFORMANCE_CONTEXT (the MCP conformance suite's) may
  supply "client_id", "client_secret" and "private_key_pem".
)";

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

struct ProbeArgs {
  std::string stdio;
  std::string url;
  std::vector<UpstreamHeader> headers;
  std::map<std::string, std::string> env;
  int64_t timeout_ms = 3500;
  bool allow_private = false;
  bool watch = false;
  bool verbose = false;
  bool help = false;
  std::string name = "probe";
  // OAuth
  bool oauth = false;
  bool client_credentials = false;
  std::string client_id;
  std::string client_secret;
  std::string private_key_file;
  std::string client_metadata_url;
  std::vector<std::string> scopes;
  int64_t oauth_wait_ms = 120000;
};

int usage_error(const std::string& message) {
  std::fprintf(stderr, "quiver-agent probe: %s\n(see quiver-agent probe --help)\n",
               message.c_str());
  return kExitUsage;
}

// Parses the arguments; on a usage error prints it and returns the exit code.
std::optional<int> parse_args(const std::vector<std::string>& args, ProbeArgs* out) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      std::size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    }
    auto value = [&](std::string* v) -> bool {
      if (inline_value) {
        *v = *inline_value;
        return true;
      }
      if (i + 1 >= args.size()) return false;
      *v = args[++i];
      return true;
    };
    auto flag = [&]() -> bool { return !inline_value; };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      out->help = true;
    } else if (arg == "--stdio") {
      if (!value(&out->stdio)) return usage_error("--stdio needs a command");
      if (out->stdio.empty()) return usage_error("--stdio needs a command");
    } else if (arg == "--url") {
      if (!value(&out->url) || out->url.empty()) return usage_error("--url needs a URL");
    } else if (arg == "--header") {
      if (!value(&v)) return usage_error("--header needs \"Name: value\"");
      std::size_t colon = v.find(':');
      if (colon == std::string::npos || colon == 0) {
        return usage_error("--header must be \"Name: value\" (the value is not shown)");
      }
      std::string name = v.substr(0, colon);
      std::string val = v.substr(colon + 1);
      std::size_t start = val.find_first_not_of(" \t");
      val = start == std::string::npos ? "" : val.substr(start);
      out->headers.push_back({name, val});
    } else if (arg == "--env") {
      if (!value(&v)) return usage_error("--env needs NAME=VALUE");
      std::size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) {
        return usage_error("--env must be NAME=VALUE (the value is not shown)");
      }
      out->env[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (arg == "--timeout-ms") {
      if (!value(&v)) return usage_error("--timeout-ms needs a number");
      std::optional<int64_t> n = parse_decimal_in(v, 1, 600000);
      if (!n) return usage_error("--timeout-ms must be a whole number of milliseconds, 1..600000");
      out->timeout_ms = *n;
    } else if (arg == "--name") {
      if (!value(&out->name) || out->name.empty()) return usage_error("--name needs a name");
    } else if (arg == "--oauth" && flag()) {
      out->oauth = true;
    } else if (arg == "--client-credentials" && flag()) {
      out->client_credentials = true;
    } else if (arg == "--client-id") {
      if (!value(&out->client_id) || out->client_id.empty())
        return usage_error("--client-id needs an id");
    } else if (arg == "--client-secret") {
      if (!value(&out->client_secret)) return usage_error("--client-secret needs a value");
    } else if (arg == "--private-key-file") {
      if (!value(&out->private_key_file) || out->private_key_file.empty()) {
        return usage_error("--private-key-file needs a file");
      }
    } else if (arg == "--client-metadata-url") {
      if (!value(&out->client_metadata_url))
        return usage_error("--client-metadata-url needs a URL");
    } else if (arg == "--scope") {
      if (!value(&v)) return usage_error("--scope needs a scope");
      for (const std::string& s : oauth::internal::split_scopes(v)) out->scopes.push_back(s);
    } else if (arg == "--oauth-wait-ms") {
      if (!value(&v)) return usage_error("--oauth-wait-ms needs a number");
      std::optional<int64_t> n = parse_decimal_in(v, 1, 3600000);
      if (!n) return usage_error("--oauth-wait-ms must be a whole number of milliseconds");
      out->oauth_wait_ms = *n;
    } else if (arg == "--allow-private" && flag()) {
      out->allow_private = true;
    } else if (arg == "--watch" && flag()) {
      out->watch = true;
    } else if (arg == "--verbose" && flag()) {
      out->verbose = true;
    } else {
      // Never echo an unknown argument whole: it may be a mistyped secret.
      return usage_error("unknown argument " + (arg.rfind("--", 0) == 0
                                                    ? arg
                                                    : std::string("(a value without an option)")));
    }
  }
  if (out->help) return std::nullopt;
  if (out->stdio.empty() == out->url.empty()) {
    return usage_error("give exactly one of --stdio \"CMD ARGS\" or --url URL");
  }
  if (!out->headers.empty() && out->url.empty()) return usage_error("--header needs --url");
  if (!out->env.empty() && out->stdio.empty()) return usage_error("--env needs --stdio");
  if (out->allow_private && out->url.empty()) return usage_error("--allow-private needs --url");
  bool oauth_options = out->client_credentials || !out->client_id.empty() ||
                       !out->client_secret.empty() || !out->private_key_file.empty() ||
                       !out->client_metadata_url.empty() || !out->scopes.empty();
  if (oauth_options && !out->oauth) return usage_error("the OAuth options need --oauth");
  if (out->oauth && out->url.empty()) return usage_error("--oauth needs --url");
  if (out->oauth && out->watch) return usage_error("--oauth and --watch do not go together");
  return std::nullopt;
}

// The OAuth settings of the probe: its flags, else MCP_CONFORMANCE_CONTEXT's keys.
Result<oauth::OAuthClientSettings> probe_oauth_settings(const ProbeArgs& a) {
  oauth::OAuthClientSettings settings;
  settings.grant = a.client_credentials ? oauth::GrantType::kClientCredentials
                                        : oauth::GrantType::kAuthorizationCode;
  settings.client_id = a.client_id;
  settings.client_secret = a.client_secret;
  settings.client_id_metadata_url = a.client_metadata_url;
  settings.scopes = a.scopes;
  settings.application_type = "native";
  settings.client_name = "quiver-agent probe";
  if (!a.private_key_file.empty()) {
    std::ifstream in(a.private_key_file, std::ios::binary);
    if (!in) return Error(ErrorCode::kInvalidArgument, "cannot read " + a.private_key_file);
    std::ostringstream text;
    text << in.rdbuf();
    settings.private_key_pem = text.str();
  }
  const char* context = std::getenv("MCP_CONFORMANCE_CONTEXT");
  if (context != nullptr && a.client_id.empty() && a.client_secret.empty() &&
      a.private_key_file.empty()) {
    Result<Json> j = parse_json(context, 64 << 10);
    if (!j.ok() || !j->is_object()) {
      return Error(ErrorCode::kInvalidArgument, "MCP_CONFORMANCE_CONTEXT is not a JSON object");
    }
    settings.client_id = json_string(*j, "client_id").value_or("");
    settings.client_secret = json_string(*j, "client_secret").value_or("");
    settings.private_key_pem = json_string(*j, "private_key_pem").value_or("");
  }
  return settings;
}

// Runs the OAuth flow for the probe's server. `known_client`: the client of an earlier run (a
// new authorization server registers again).
Result<oauth::Authorization> probe_oauth(const ProbeArgs& a,
                                         std::optional<oauth::RegisteredClient> known_client) {
  Result<oauth::OAuthClientSettings> settings = probe_oauth_settings(a);
  if (!settings.ok()) return settings.error();
  OAuthHttpOptions http;
  http.allow_private = a.allow_private;
  Result<std::optional<oauth::BearerChallenge>> challenge = fetch_bearer_challenge(a.url, http);
  if (!challenge.ok()) return challenge.error();
  Result<oauth::OAuthHost> host = make_oauth_host(settings->private_key_pem);
  if (!host.ok()) return host.error();
  std::unique_ptr<OAuthLoopbackListener> listener;
  if (settings->grant == oauth::GrantType::kAuthorizationCode) {
    auto started = OAuthLoopbackListener::start();
    if (!started.ok()) return started.error();
    listener = std::move(*started);
    settings->redirect_uri = listener->redirect_uri();
  }
  oauth::OAuthFlow flow =
      oauth::OAuthFlow::authorize(a.url, *settings, *host, *challenge, std::move(known_client));
  drive_oauth_flow(flow, http);
  if (flow.step() == oauth::FlowStep::kNeedsUser) {
    std::fprintf(stderr, "authorize: %s\n", flow.authorization_url().c_str());
    std::fflush(stderr);
    Result<oauth::CallbackParams> callback = listener->wait(a.oauth_wait_ms);
    if (!callback.ok()) return callback.error();
    flow = oauth::OAuthFlow::resume(flow.pending(), *callback, *settings, *host);
    drive_oauth_flow(flow, http);
  }
  if (flow.step() == oauth::FlowStep::kFailed) return flow.error();
  if (flow.step() != oauth::FlowStep::kDone) {
    return Error(ErrorCode::kInternal, "the OAuth flow stopped unfinished");
  }
  return flow.authorization();
}

// Whether a listing failed for want of authorization (HTTP 401/403), whole or one list.
bool unauthorized(const Result<Listing>& listing) {
  if (!listing.ok()) return listing.error().code == ErrorCode::kUnauthenticated;
  for (const ListOutcome& l : listing->lists) {
    if (l.state == ListState::kFailed && l.error && l.error->code == ErrorCode::kUnauthenticated) {
      return true;
    }
  }
  return false;
}

// The report printed for a listing: what the probe saw and the manifest Quiver would cache.
Result<Json> report_json(const UpstreamConnection& conn, const Listing& listing,
                         const ListInfo& info) {
  return probe_report(conn.spec().describe(), listing, info, conn.stats().era);
}

void print_json(const Json& j, bool one_line) {
  std::string text = serialize_json(j, one_line ? -1 : 2);
  std::fprintf(stdout, "%s\n", text.c_str());
  std::fflush(stdout);
}

std::string failed_lists(const Listing& listing) {
  std::string out;
  for (int i = 0; i < kListKindCount; ++i) {
    const ListOutcome& l = listing.lists[i];
    if (l.state != ListState::kFailed) continue;
    out += std::string(out.empty() ? "" : "; ") + list_kind_name(static_cast<ListKind>(i)) +
           " could not be loaded: " + (l.error ? l.error->message : "unknown error");
  }
  return out;
}

int run_watch(UpstreamConnection& conn, const ProbeArgs& args, Json first_report) {
  std::atomic<bool> changed{false};
  std::atomic<bool> lost{false};
  conn.set_change_callback([&](const UpstreamChange& c) {
    if (c.session_lost) {
      lost = true;
      std::fprintf(stderr, "quiver-agent probe: session lost (%s); reconnecting\n",
                   c.error ? c.error->message.c_str() : "closed");
    }
    changed = true;
  });
  std::string last_etag = first_report.value("etag", "");
  bool last_failed = false;
  int64_t retry_at = 0;
  while (!g_stop) {
    conn.pump(100);
    if (g_stop) break;
    if (!changed || conn.now_ms() < retry_at) continue;
    changed = false;
    ListInfo info;
    auto listing = conn.list(conn.now_ms() + args.timeout_ms, {}, &info);
    if (!listing.ok()) {
      if (!last_failed) {
        print_json(Json{{"status", "failed"},
                        {"upstream", conn.spec().describe()},
                        {"error", probe_error_json(listing.error())}},
                   true);
      }
      std::fprintf(stderr, "quiver-agent probe: %s\n", listing.error().message.c_str());
      last_failed = true;
      changed = true;  // try again after the backoff
      retry_at = conn.now_ms() + std::max<int64_t>(conn.backoff_remaining_ms(), 1000);
      continue;
    }
    auto report = report_json(conn, *listing, info);
    if (!report.ok()) {
      std::fprintf(stderr, "quiver-agent probe: no manifest: %s\n", report.error().message.c_str());
      last_failed = true;
      continue;
    }
    std::string etag = report->value("etag", "");
    if (etag != last_etag || last_failed) print_json(*report, true);
    last_etag = etag;
    last_failed = false;
  }
  conn.close();
  return kExitOk;
}

}  // namespace

int cmd_probe(const std::vector<std::string>& args) {
  ProbeArgs a;
  if (auto code = parse_args(args, &a)) return *code;
  if (a.help) {
    std::fputs(kProbeUsage, stdout);
    return kExitOk;
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // With --oauth, a listing refused for want of authorization (the server moved to another
  // authorization server, or revoked the token) authorizes once more and lists again.
  std::vector<std::string> oauth_secrets;
  std::optional<oauth::RegisteredClient> oauth_client;
  const std::vector<UpstreamHeader> given_headers = a.headers;
  UpstreamSpec spec;
  std::unique_ptr<UpstreamConnection> conn_owner;
  ListInfo info;
  Result<Listing> listing = Error(ErrorCode::kInternal, "not listed");
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (a.oauth) {
      Result<oauth::Authorization> authorized = probe_oauth(a, oauth_client);
      if (!authorized.ok()) {
        const Error& e = authorized.error();
        const bool guard = e.message.find("allow_private_addresses") != std::string::npos;
        std::fprintf(
            stderr, "quiver-agent probe: OAuth failed: %s [%s]%s\n", e.message.c_str(),
            error_code_name(e.code),
            guard ? "\n(--allow-private allows servers on loopback and private addresses)" : "");
        return kExitFailed;
      }
      oauth_client = authorized->client;
      const std::string& token = authorized->tokens.access_token;
      a.headers = given_headers;
      a.headers.push_back({"Authorization", "Bearer " + token});
      oauth_secrets.push_back(token);  // redacted alone too, should the server echo it bare
    }
    if (!a.stdio.empty()) {
      auto words = split_shell_words(a.stdio);
      if (!words.ok()) return usage_error("--stdio: " + words.error().message);
      if (words->empty()) return usage_error("--stdio needs a command");
      std::vector<std::string> rest(words->begin() + 1, words->end());
      spec = UpstreamSpec::stdio(a.name, (*words)[0], std::move(rest), a.env);
    } else {
      spec = UpstreamSpec::http(a.name, a.url, a.headers, a.allow_private);
    }

    UpstreamOptions options;
    options.list_timeout_ms = a.timeout_ms;
    // One budget for a probe: a single slow page may use all of it.
    options.session.request_timeout_ms = a.timeout_ms;
    options.watch = a.watch;
    // The values given with --header and --env are the probe's secrets: an upstream that echoes
    // one must not get it printed.
    std::vector<std::string> secret_values;
    for (const auto& [name, value] : a.env) secret_values.push_back(value);
    for (const auto& h : a.headers) secret_values.push_back(h.value);
    for (const std::string& v : oauth_secrets) secret_values.push_back(v);
    options.redactor = std::make_shared<const Redactor>(secret_values);
    if (a.verbose) {
      options.log = [](const std::string& line) {
        std::fprintf(stderr, "quiver-agent probe: %s\n", escape_control_characters(line).c_str());
      };
    }
    if (conn_owner) conn_owner->close();
    conn_owner = std::make_unique<UpstreamConnection>(spec, options);
    info = ListInfo();
    listing = conn_owner->list(conn_owner->now_ms() + a.timeout_ms, {}, &info);
    if (!a.oauth || !unauthorized(listing)) break;
    if (attempt == 0) {
      std::fprintf(stderr, "quiver-agent probe: the server refused the token; authorizing again\n");
    }
  }
  UpstreamConnection& conn = *conn_owner;
  if (!listing.ok()) {
    const Error& e = listing.error();
    std::string hint;
    if (e.message.find("allow_private_addresses") != std::string::npos) {
      hint = "\n(--allow-private allows servers on loopback and private addresses)";
    } else if (!a.verbose && spec.transport == UpstreamSpec::Transport::kStdio &&
               (e.code == ErrorCode::kTransport || e.code == ErrorCode::kTimeout)) {
      hint = "\n(--verbose shows the server's stderr)";
    }
    std::fprintf(stderr, "quiver-agent probe: cannot list %s: %s [%s]%s\n", spec.describe().c_str(),
                 e.message.c_str(), error_code_name(e.code), hint.c_str());
    return kExitFailed;
  }
  auto made = report_json(conn, *listing, info);
  if (!made.ok()) {
    std::fprintf(stderr, "quiver-agent probe: %s answered, but no manifest can be made of it: %s\n",
                 spec.describe().c_str(), made.error().message.c_str());
    return kExitFailed;
  }
  const Json& report = *made;
  if (a.watch) {
    print_json(report, true);
    if (!listing_complete(*listing)) {
      std::fprintf(stderr, "quiver-agent probe: %s\n", failed_lists(*listing).c_str());
    }
    return run_watch(conn, a, report);
  }
  print_json(report, false);
  conn.close();
  if (!listing_complete(*listing)) {
    std::fprintf(stderr, "quiver-agent probe: %s\n", failed_lists(*listing).c_str());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace quiver
