// `quiver-agent prefs`: show and toggle a connection's capability preferences (Coffer ADR-004).
//
// The rows are kept per (connection, principal): a shared connection's are everyone's, a
// per-member connection's are each member's own (`--member M`). A toggle is written to the
// agent's SQLite copy and merged into the store's preferences at once (native-agent/
// preferences_db.h), so discovery (a running `serve`, the edge) hides or shows the capability
// without a new listing. Whoever can run this command holds the configuration: an operator.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "native-agent/cli/cli.h"
#include "native-agent/cli/cli_support.h"
#include "native-agent/engine/agent.h"
#include "shared/preferences.h"

namespace quiver {
namespace {

constexpr char kPrefsUsage[] =
    R"(usage: quiver-agent prefs NAME [--member M] [--enable TYPE:KEY]... [--disable TYPE:KEY]...
                         [--config FILE]

Without --enable/--disable, lists the capabilities of connection NAME (a server name or a
connection id) that have been seen, with their enabled flag. With them, sets each flag (in the
order given) and publishes the change to the store: discovery shows it without a new listing.
A per-member connection keeps each member's capabilities and choices apart: name the member with
--member (required there, refused on a shared connection).

TYPE is tool, resource, resource_template or prompt; KEY is a tool's or prompt's name, a
resource's uri or a template's uriTemplate (split at the first `:` after TYPE), e.g.
  quiver-agent prefs everything --disable tool:longRunningOperation
  quiver-agent prefs filesystem --enable tool:read_file --enable tool:list_directory

options:
  --enable TYPE:KEY    enable a capability (repeatable)
  --disable TYPE:KEY   disable a capability (repeatable)
  --member M           the member whose preferences to show or change (per-member connections)
  --config FILE        the configuration (default: $QUIVER_CONFIG)
  --help               this text

Exit status: 0 done, 1 a capability was never seen on the connection, 2 usage or configuration
error, 3 the store is unavailable (the flag is saved and published later by the agent).
)";

struct Toggle {
  CapabilityType type;
  std::string key;
  bool enabled;
};

std::optional<Toggle> parse_toggle(const std::string& text, bool enabled) {
  std::size_t colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  std::optional<CapabilityType> type = parse_capability_type(text.substr(0, colon));
  std::string key = text.substr(colon + 1);
  if (!type || key.empty() || key.size() > kMaxCapabilityKeyBytes) return std::nullopt;
  return Toggle{*type, key, enabled};
}

}  // namespace

int cmd_prefs(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin(
      "prefs", argv,
      {{"enable", true, true}, {"disable", true, true}, {"member", true}, {"config", true}},
      kPrefsUsage, true, &code);
  if (!args) return code;
  if (args->positional.size() != 1) {
    return cli_usage_error(
        "prefs", args->positional.empty() ? "which connection? name one" : "name one connection");
  }
  // In the order given on the command line: re-read argv for the interleaving.
  std::vector<Toggle> toggles;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    std::string a = argv[i];
    bool enable = a.rfind("--enable", 0) == 0;
    bool disable = a.rfind("--disable", 0) == 0;
    if (!enable && !disable) continue;
    std::string value;
    if (std::size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < argv.size()) {
      value = argv[++i];
    }
    std::optional<Toggle> t = parse_toggle(value, enable);
    if (!t) {
      return cli_usage_error("prefs", "`" + value +
                                          "` is not TYPE:KEY (TYPE tool, resource, "
                                          "resource_template or prompt)");
    }
    toggles.push_back(*t);
  }
  std::optional<AgentConfig> config = load_cli_config("prefs", *args, &code);
  if (!config) return code;
  const ConnectionConfig* conn = find_connection_named(*config, args->positional[0]);
  if (conn == nullptr) {
    return cli_usage_error("prefs", "no connection named `" + args->positional[0] + "`");
  }

  std::optional<Principal> principal;
  const std::string member = args->value("member").value_or("");
  if (conn->credential_mode == CredentialMode::kPerMember) {
    if (member.empty()) {
      return cli_usage_error(
          "prefs", "`" + conn->name + "` keeps preferences per member: name one with --member");
    }
    Result<Principal> p = config->principal_for(member, conn->id);
    if (!p.ok()) {
      return cli_usage_error("prefs",
                             "member `" + member + "` is not granted `" + conn->name + "`");
    }
    principal = *p;
  } else {
    if (!member.empty()) {
      return cli_usage_error(
          "prefs", "`" + conn->name + "` is shared: its preferences are everyone's (no --member)");
    }
    principal = Principal::shared();
  }

  std::unique_ptr<Agent> created = create_cli_agent("prefs", *config, &code);
  if (!created) return code;
  Agent& agent = *created;

  int status = kExitOk;
  for (const Toggle& t : toggles) {
    Status st = agent.set_preference(conn->id, *principal, t.type, t.key, t.enabled);
    const std::string what = std::string(capability_type_name(t.type)) + ":" + t.key;
    if (st.ok()) {
      std::printf("%s %s\n", t.enabled ? "enabled " : "disabled", what.c_str());
    } else if (st.error().code == ErrorCode::kNotFound) {
      std::fprintf(stderr, "quiver-agent prefs: %s was never listed on %s\n", what.c_str(),
                   conn->name.c_str());
      status = std::max(status, static_cast<int>(kExitFailed));
    } else {
      std::fprintf(stderr, "quiver-agent prefs: %s: %s\n", what.c_str(),
                   st.error().message.c_str());
      status = std::max(status, store_exit_code(st.error()));
    }
  }
  if (!toggles.empty()) return status;

  Result<std::vector<PreferenceRow>> rows = agent.preferences(conn->id, *principal);
  if (!rows.ok()) return cli_fail("prefs", rows.error().message, store_exit_code(rows.error()));
  if (rows->empty()) {
    std::printf("%s: nothing listed yet (quiver-agent refresh %s)\n", conn->name.c_str(),
                conn->name.c_str());
    return kExitOk;
  }
  std::printf("%s (new capabilities %s by default):\n", conn->name.c_str(),
              conn->auto_enable_new_capabilities ? "enabled" : "disabled");
  for (const PreferenceRow& r : *rows) {
    std::printf("  %-8s %-18s %s\n", r.enabled ? "enabled" : "DISABLED",
                capability_type_name(r.capability_type), r.capability_key.c_str());
  }
  return kExitOk;
}

}  // namespace quiver
