#!/usr/bin/env bash
# Plays the browser for `quiver-agent probe --oauth` in the conformance run (run.sh):
#
#   oauth_browser.sh COMMAND...     (the probe command line; the suite appends the server URL)
#
# Runs COMMAND; when a line `authorize: <URL>` appears on its stderr, fetches URL without
# following redirects (the suite's authorization endpoint answers at once with a redirect that
# carries the code) and delivers that Location to the probe's loopback listener, as a browser
# would. Every other stderr line passes through. Exits with COMMAND's status.
set -u
"$@" 2> >(
  while IFS= read -r line; do
    case "$line" in
      "authorize: "*)
        location=$(curl -s -o /dev/null --max-time 10 -w '%{redirect_url}' "${line#authorize: }")
        if [ -n "$location" ]; then
          curl -s -o /dev/null --max-time 10 "$location"
        else
          echo "oauth_browser.sh: the authorization endpoint did not redirect" >&2
        fi
        ;;
      *) printf '%s\n' "$line" >&2 ;;
    esac
  done
)
status=$?
wait
exit "$status"
