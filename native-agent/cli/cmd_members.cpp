// `quiver-agent members`: list, show, add or change, and remove members through a running
// agent's admin API (native-agent/cli/admin_client.h).
#include <string>
#include <vector>

#include "native-agent/cli/admin_client.h"
#include "native-agent/cli/cli.h"

namespace quiver {
namespace {

constexpr char kMembersUsage[] =
    R"(usage: quiver-agent members list [--cursor C] [--limit N]
       quiver-agent members get ID
       quiver-agent members put ID [--operator]
       quiver-agent members delete ID
       (each with [--url URL] [--token TOKEN | --as M] [--config FILE])

Manages the members of the runtime catalog through a running agent's admin API (operators only).
`list` pages through them (each with its operator flag and its own grants; pass the printed
next_cursor as --cursor for the next page). `put` adds a member or sets its operator flag (without
--operator: not an operator). `delete` removes it and its grants at once.

options:
  --operator       (put) the member is an operator: it may use the admin API
  --cursor C       (list) the page after C
  --limit N        (list) at most N members (1..1000, default 100)
)";

}  // namespace

int cmd_members(const std::vector<std::string>& argv) {
  int code = kExitOk;
  std::optional<CliArgs> args = cli_begin(
      "members", argv, admin_cli_options({{"operator", false}, {"cursor", true}, {"limit", true}}),
      (std::string(kMembersUsage) + kAdminCliOptionsUsage).c_str(), true, &code);
  if (!args) return code;
  const std::vector<std::string>& p = args->positional;
  const std::string verb = p.empty() ? "" : p[0];
  if (verb == "list" && p.size() == 1) {
    return run_admin_call("members", *args,
                          {"GET", "/v1/admin/members" + admin_page_query(*args), std::nullopt});
  }
  if (p.size() != 2) return cli_usage_error("members", "expected list, or get|put|delete ID");
  const std::string path = "/v1/admin/members/" + admin_escape(p[1]);
  if (verb == "get") return run_admin_call("members", *args, {"GET", path, std::nullopt});
  if (verb == "delete") return run_admin_call("members", *args, {"DELETE", path, std::nullopt});
  if (verb == "put") {
    return run_admin_call("members", *args,
                          {"PUT", path, Json::object({{"operator", args->has("operator")}})});
  }
  return cli_usage_error("members", "unknown subcommand `" + verb + "`");
}

}  // namespace quiver
