#!/usr/bin/env bash
# Runs the MCP conformance suite's client scenarios that apply to a discovery client against
# `quiver-agent probe` (see README.md here for which apply and why).
#
#   tests/conformance/run.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]   (default: all that apply)
#
# A scenario is a name of the installed suite (0.2.0-alpha.12), e.g. `initialize` or
# `auth/metadata-default`, or `0116:auth/<name>` for the same-named scenario of the suite's
# 0.1.16 release (the npm alias `conformance-0116`). The `auth/*` scenarios run
# `probe --oauth` through oauth_browser.sh, which plays the browser.
#
# The suite's scenario servers listen on every interface, so the whole run happens in a private
# network namespace with only loopback up (`unshare -n`; root, or a user namespace with -r).
# Each scenario passes when its checks.json holds no FAILURE, the checks listed below succeeded,
# and the only warnings are the ones listed as inherent to a client that never calls tools.
set -euo pipefail

agent=${1:?usage: run.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]}
node_modules=${2:?usage: run.sh QUIVER_AGENT NODE_MODULES [SCENARIO...]}
shift 2
scenarios=("$@")
in_list() { local x; for x in "${@:2}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
auth_listing=(metadata-default metadata-var1 metadata-var2 metadata-var3 basic-cimd
              scope-from-www-authenticate scope-from-scopes-supported scope-omitted-when-undefined
              token-endpoint-auth-basic token-endpoint-auth-post
              token-endpoint-auth-none pre-registration 2025-03-26-oauth-metadata-backcompat
              2025-03-26-oauth-endpoint-fallback client-credentials-basic client-credentials-jwt
              offline-access-scope offline-access-not-supported)
auth_refusing=(resource-mismatch scope-retry-limit)
# 0.1.16 publishes a wrong `issuer` in this scenario's metadata (README.md): a client that checks
# the issuer, as the spec requires, cannot pass it.
auth_0116_suite_bugs=(2025-03-26-oauth-metadata-backcompat)
auth_2026=(iss-supported iss-not-advertised authorization-server-migration)
auth_2026_refusing=(iss-supported-missing iss-wrong-issuer iss-unexpected iss-normalized
                    metadata-issuer-mismatch)
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=(initialize sse-retry request-metadata http-standard-headers json-schema-ref-no-deref)
  for s in "${auth_listing[@]}" "${auth_refusing[@]}" "${auth_2026[@]}" "${auth_2026_refusing[@]}"; do
    scenarios+=("auth/$s")
  done
  for s in "${auth_listing[@]}" "${auth_refusing[@]}"; do
    in_list "$s" "${auth_0116_suite_bugs[@]}" || scenarios+=("0116:auth/$s")
  done
fi

suite_current="$node_modules/@modelcontextprotocol/conformance/dist/index.js"
suite_0116="$node_modules/conformance-0116/dist/index.js"
suite=$suite_current
browser="$(cd "$(dirname "$0")" && pwd)/oauth_browser.sh"
# The suite (0.2.x) needs Node 22: the npm package `node` brings it into build/node (setup.sh).
node22="$node_modules/node/bin/node"
[ -x "$agent" ] || { echo "run.sh: no quiver-agent at $agent (build it first)" >&2; exit 1; }
[ -f "$suite" ] || { echo "run.sh: no conformance suite at $suite (run scripts/setup.sh)" >&2; exit 1; }
for scenario in "${scenarios[@]}"; do
  case "$scenario" in
    0116:*) [ -f "$suite_0116" ] || {
      echo "run.sh: no conformance suite 0.1.16 at $suite_0116 (run scripts/setup.sh)" >&2; exit 1; } ;;
  esac
done
[ -x "$node22" ] || { echo "run.sh: no Node 22 at $node22 (run scripts/setup.sh --peers)" >&2; exit 1; }

command -v curl >/dev/null || { echo "run.sh: 'curl' is needed (oauth_browser.sh)" >&2; exit 1; }
# shellcheck source=netns.sh
. "$(cd "$(dirname "$0")" && pwd)/netns.sh"
private_netns run.sh "$0" "$agent" "$node_modules" "${scenarios[@]}"

work=$(mktemp -d /tmp/quiver-conformance-XXXXXX)
trap 'rm -rf "$work"' EXIT

# What each scenario must show. `expect`: check ids that must be SUCCESS. `allow`: check ids
# that may be WARNING. `command`: how the suite runs the probe (it appends the server URL).
# `listed`: whether the probe must list the scenario server (yes) or refuse it (no: the auth
# scenarios where a correct client stops, e.g. a wrong `iss`).
oauth_probe="$browser $agent probe --allow-private --oauth --oauth-wait-ms 15000
  --client-metadata-url https://conformance-test.local/client-metadata.json"
status=0
for scenario in "${scenarios[@]}"; do
  listed=yes
  suite=$suite_current
  name=$scenario
  case "$scenario" in
    0116:*) suite=$suite_0116; name=${scenario#0116:} ;;
  esac
  case "$name" in
    initialize)
      command="$agent probe --allow-private --url"
      expect="mcp-client-initialization"
      allow=""
      ;;
    sse-retry)
      # --watch keeps the session and opens the GET stream; SIGTERM after 2 s ends it (exit 0).
      command="timeout --preserve-status -s TERM 2 $agent probe --allow-private --watch --url"
      expect="client-sse-graceful-reconnect"
      # The scenario measures the reconnection after it closes a tools/call stream; a discovery
      # client never calls a tool, so there is no such reconnection to time or to carry a
      # Last-Event-ID (see README.md).
      allow="client-sse-retry-timing client-sse-last-event-id"
      ;;
    request-metadata)
      # 2026-07-28 per-request _meta and MCP-Protocol-Version; the first request is refused with
      # -32022 and the client must retry with a version from data.supported.
      command="$agent probe --allow-private --url"
      expect="sep-2575-http-client-sends-version-header sep-2575-client-populates-meta
              sep-2575-client-sends-client-info sep-2575-http-version-header-matches-meta
              sep-2575-client-retry-supported-version"
      allow=""
      ;;
    http-standard-headers)
      # Mcp-Method on every POST. Mcp-Name belongs to tools/call, resources/read and prompts/get,
      # which a discovery client never sends: those checks are SKIPPED, not failed.
      command="$agent probe --allow-private --url"
      expect="sep-2243-client-includes-standard-headers"
      allow=""
      ;;
    json-schema-ref-no-deref)
      # A tool whose inputSchema $refs a network URI: listed, the URI never fetched.
      command="$agent probe --allow-private --url"
      expect="sep-2106-no-network-ref-deref"
      allow=""
      ;;
    auth/*)
      short=${name#auth/}
      current_only=no
      [ "$suite" = "$suite_current" ] && current_only=yes
      if [ $current_only = no ] && in_list "$short" "${auth_0116_suite_bugs[@]}"; then
        echo "run.sh: scenario '$scenario' cannot pass: a suite bug (README.md)" >&2
        status=1
        continue
      elif in_list "$short" "${auth_listing[@]}" ||
         { [ $current_only = yes ] && in_list "$short" "${auth_2026[@]}"; }; then
        command="$oauth_probe --url"
      elif in_list "$short" "${auth_refusing[@]}" ||
           { [ $current_only = yes ] && in_list "$short" "${auth_2026_refusing[@]}"; }; then
        command="$oauth_probe --url"
        listed=no
      else
        echo "run.sh: scenario '$scenario' does not apply to a discovery client (README.md)" >&2
        status=1
        continue
      fi
      case "$short" in
        client-credentials-*) command="$oauth_probe --client-credentials --url" ;;
      esac
      expect=""
      allow=""
      ;;
    *)
      echo "run.sh: scenario '$scenario' does not apply to a discovery client (README.md)" >&2
      status=1
      continue
      ;;
  esac
  out="$work/${scenario//[:\/]/_}"
  # The suite's own verdict counts warnings as failures; the checks are judged below instead.
  # A suite run bounds its client at 30 s, yet one run of `auth/resource-mismatch` once never
  # finished on a loaded machine (ctest's 90 s timeout, no output; 15 runs in a row passed in
  # about 1 s each afterwards). A run still going after 40 s is stopped, its log shown, and the
  # scenario run once more, so a hang is reported with what the suite said instead of a silent
  # ctest timeout.
  for attempt in 1 2; do
    rm -rf "$out" && mkdir -p "$out"
    rc=0
    timeout -k 5 40 "$node22" "$suite" client --command "${command//$'\n'/ }" --scenario "$name" \
      --timeout 30000 -o "$out" >"$out/suite.log" 2>&1 || rc=$?
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || break
    echo "run.sh: $scenario: attempt $attempt: the suite was still running after 40 s; its log:" >&2
    tail -n 20 "$out/suite.log" | sed 's/^/  | /' >&2
  done
  checks=$(find "$out" -name checks.json | head -n 1)
  if [ -z "$checks" ]; then
    echo "FAIL $scenario: the suite wrote no checks.json" >&2
    cat "$out/suite.log" >&2
    status=1
    continue
  fi
  if ! summary=$(node - "$checks" "$expect" "$allow" "$(dirname "$checks")/stdout.txt" "$listed" <<'JS'
const fs = require('fs');
const [checksPath, expect, allow, stdoutPath, listed] = process.argv.slice(2);
const checks = JSON.parse(fs.readFileSync(checksPath, 'utf8'));
const expected = expect.split(/\s+/).filter(Boolean);
const allowed = new Set(allow.split(/\s+/).filter(Boolean));
const problems = [];
for (const c of checks) {
  if (c.status === 'FAILURE') problems.push(`FAILURE ${c.id}: ${c.errorMessage || c.description}`);
  if (c.status === 'WARNING' && !allowed.has(c.id)) {
    problems.push(`unexpected WARNING ${c.id}: ${c.errorMessage || c.description}`);
  }
}
for (const id of expected) {
  if (!checks.some((c) => c.id === id && c.status === 'SUCCESS')) problems.push(`no SUCCESS for ${id}`);
}
// The probe itself must have listed the scenario server: its first stdout line is the report.
const first = (fs.existsSync(stdoutPath) ? fs.readFileSync(stdoutPath, 'utf8') : '').trim();
let report = null;
for (const text of [first, first.split('\n')[0]]) {  // pretty JSON, or the first NDJSON line
  try { report = report || JSON.parse(text); } catch {}
}
if (listed === 'yes' && (!report || report.status !== 'ok')) {
  problems.push(`the probe did not report status ok: ${first.slice(0, 300)}`);
}
if (listed === 'no' && report && report.status === 'ok') {
  problems.push('the probe listed a server it should have refused');
}
for (const p of problems) console.error('  ' + p);
const shown = checks.filter((c) => c.status !== 'INFO').map((c) => `${c.status} ${c.id}`);
console.log('     checks: ' + shown.join(', '));
process.exit(problems.length ? 1 : 0);
JS
  ); then
    echo "FAIL $scenario" >&2
    echo "$summary" >&2
    sed 's/^/  | /' "$out/suite.log" | tail -n 40 >&2
    status=1
  else
    echo "ok   $scenario"
    echo "$summary"
  fi
done
exit $status
