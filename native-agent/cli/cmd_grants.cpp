// `quiver-agent grants`: a member's grants, and everyone's, through a running agent's admin API
// (native-agent/cli/admin_client.h).
#include <string>
#include <vector>

#include "native-agent/cli/admin_client.h"
#include "native-agent/cli/cli.h"

namespace quiver {
namespace {

constexpr char kGrantsUsage[] =
    R"(usage: quiver-agent grants get MEMBER
       quiver-agent grants set MEMBER [CONNECTION...]
       quiver-agent grants add MEMBER CONNECTION...
       quiver-agent grants remove MEMBER CONNECTION...
       quiver-agent grants everyone [--set [CONNECTION...]]
       (each with [--url URL] [--token TOKEN | --as M] [--config FILE])

Manages grants through a running agent's admin API (operators only). A CONNECTION is a
connection id, or `*` (every connection; quote it in a shell). `get` shows the member's own
grants, everyone's and the effective set discovery checks; `set` replaces the member's own
grants (none: it keeps only everyone's), `add` and `remove` change them. Discovery at the agent
and the edge follows at once. `everyone` shows the grants every member has; with --set it
replaces them (every member's effective set is republished: it takes longer with many members).

options:
  --set            (everyone) replace everyone's grants with the CONNECTIONs given
)";

Json list_of(const std::vector<std::string>& p, std::size_t from) {
  Json out = Json::array();
  for (std::size_t i = from; i < p.size(); ++i) out.push_back(p[i]);
  return out;
}

}  // namespace

int cmd_grants(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args =
      cli_begin("grants", argv, admin_cli_options({{"set", false}}),
                (std::string(kGrantsUsage) + kAdminCliOptionsUsage).c_str(), true, &code);
  if (!args) return code;
  const std::vector<std::string>& p = args->positional;
  const std::string verb = p.empty() ? "" : p[0];
  if (verb == "everyone") {
    if (!args->has("set")) {
      if (p.size() != 1)
        return cli_usage_error("grants", "to change everyone's grants, pass --set");
      return run_admin_call("grants", *args, {"GET", "/v1/admin/grants/everyone", std::nullopt});
    }
    return run_admin_call(
        "grants", *args,
        {"PUT", "/v1/admin/grants/everyone", Json::object({{"connections", list_of(p, 1)}})});
  }
  if (args->has("set")) return cli_usage_error("grants", "--set goes with `everyone`");
  if (p.size() < 2) return cli_usage_error("grants", "expected get|set|add|remove MEMBER");
  const std::string path = "/v1/admin/members/" + admin_escape(p[1]) + "/grants";
  if (verb == "get" && p.size() == 2) {
    return run_admin_call("grants", *args, {"GET", path, std::nullopt});
  }
  if (verb == "set") {
    return run_admin_call("grants", *args,
                          {"PUT", path, Json::object({{"connections", list_of(p, 2)}})});
  }
  if ((verb == "add" || verb == "remove") && p.size() > 2) {
    return run_admin_call("grants", *args, {"PATCH", path, Json::object({{verb, list_of(p, 2)}})});
  }
  return cli_usage_error("grants",
                         "expected get MEMBER, set MEMBER [CONNECTION...], or "
                         "add|remove MEMBER CONNECTION...");
}

}  // namespace quiver
