// The admin commands' client (`quiver-agent members`, `grants`, `connections`): one call to a
// running agent's admin API (/v1/admin/..., schema/openapi.yaml) with an operator's token, the
// answer printed as JSON on stdout.
//
// Where: --url, else the configuration's quiver.listen (a wildcard address is asked on loopback),
// else http://127.0.0.1:8787. Who: --token, else $QUIVER_TOKEN, else a short-lived token minted
// from the configuration's caller token key with the operator role for --as M (default: the only
// operator of quiver.operators, else the command's default member), as `quiver-agent token
// --operator` mints it. Exit codes (exit_codes.h): 0 done; 1 refused (401, 403, 404) or the agent
// unreachable; 2 usage, configuration, or a body the API refused (400); 3 the store unavailable
// (503).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "native-agent/cli/cli_support.h"
#include "shared/json.h"

namespace quiver {

// The options every admin command takes (with its own added after them).
std::vector<CliOption> admin_cli_options(std::vector<CliOption> own = {});
// Their lines of a usage text.
extern const char kAdminCliOptionsUsage[];

struct AdminCall {
  std::string method;  // GET, PUT, PATCH, DELETE
  std::string path;    // "/v1/admin/members/alice" (ids are checked by the API)
  std::optional<Json> body;
};

// Makes `call` and prints the answer (pretty JSON on stdout; an error's message on stderr).
// Returns the exit code.
int run_admin_call(const char* command, const CliArgs& args, const AdminCall& call);

// The list endpoints' paging options (--cursor, --limit) as a query string ("" or "?...").
std::string admin_page_query(const CliArgs& args);

// Percent-encodes one path segment or query value.
std::string admin_escape(const std::string& text);

}  // namespace quiver
