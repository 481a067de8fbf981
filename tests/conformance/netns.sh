# Sourced by run.sh and server.sh: the suite's scenario servers listen on every interface, so a
# conformance run happens in a private network namespace with only loopback up.
#
#   private_netns NAME SCRIPT ARG...
#
# Outside the namespace (QUIVER_CONFORMANCE_NETNS unset): checks that `unshare`, `ip` and `node`
# exist, then re-executes `bash SCRIPT ARG...` in a new network namespace (`unshare -n`, which
# needs root; else a user namespace, `unshare -rn`) with loopback up, and never returns. Inside
# it, returns at once. NAME prefixes the error messages. The namespace has its own PIDs too
# (`--pid --fork --kill-child`): SCRIPT is its first process, and when it ends the kernel ends
# every process it left (a probe the suite stopped halfway, its OAuth wait included), so a run
# leaves nothing behind.
private_netns() {
  local name=$1
  shift
  [ -z "${QUIVER_CONFORMANCE_NETNS:-}" ] || return 0
  local cmd
  for cmd in unshare ip node; do
    command -v "$cmd" >/dev/null || { echo "$name: '$cmd' is needed" >&2; exit 1; }
  done
  export QUIVER_CONFORMANCE_NETNS=1
  local inner=(sh -c 'ip link set lo up && exec "$@"' sh bash "$@")
  local pids=(--pid --fork --kill-child)
  if unshare -n "${pids[@]}" true 2>/dev/null; then
    exec unshare -n "${pids[@]}" "${inner[@]}"
  elif unshare -rn "${pids[@]}" true 2>/dev/null; then
    exec unshare -rn "${pids[@]}" "${inner[@]}"
  fi
  echo "$name: cannot create a network namespace (unshare -n needs root or user namespaces)" >&2
  exit 1
}
