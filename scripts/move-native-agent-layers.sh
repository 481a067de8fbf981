#!/usr/bin/env bash
# move-native-agent-layers.sh: moves native-agent/*.{h,cpp} into layer folders and makes the build
# state the layers. A one-time step of the "one core" issue, kept here until it is run on main (it
# rebuilds the whole tree, so it goes in together with one formatting pass of scripts/format.sh);
# then this script is deleted.
# Run from the root of a Quiver checkout (any version of the tree); it stages everything with git
# and commits nothing. Re-running it on an already moved tree changes nothing.
#
#   native-agent/base/      configuration, logging, redaction, clock, shell words, URL checks
#   native-agent/store/     the stores (SQLite, Redis) and the preferences database
#   native-agent/upstream/  talking to MCP servers: transports, child processes, upstream sessions
#   native-agent/engine/    the refresh engine: agent, refresh, maintenance, pools, metrics
#   native-agent/api/       the HTTP API and its front end
#   native-agent/cli/       the command line (main, cli*, cmd_*)
#
# Layering (each layer links only the layers below it):
#   core (shared/) <- base <- store, upstream <- engine <- api <- cli <- quiver-agent
#
# Files are classified by a pattern table (first match wins); a file no pattern matches follows
# the other half of its pair (x.cpp follows x.h and the reverse). Whatever is still unclassified is
# printed and the script exits 1 before moving anything.
set -euo pipefail

if [ ! -d native-agent ] || ! git rev-parse --show-toplevel >/dev/null 2>&1; then
  echo "move-native-agent-layers.sh: run from the root of a Quiver checkout (native-agent/ not found)" >&2
  exit 2
fi
if [ "$(cd "$(git rev-parse --show-toplevel)" && pwd)" != "$(pwd)" ]; then
  echo "move-native-agent-layers.sh: run from the repository root" >&2
  exit 2
fi

python3 - <<'PY'
import fnmatch
import os
import re
import subprocess
import sys

LAYERS = ["base", "store", "upstream", "engine", "api", "cli"]
# The layers each one links directly; the ones further down come through them.
BELOW = {
    "base": [],
    "store": ["base"],
    "upstream": ["base"],
    "engine": ["store", "upstream"],
    "api": ["engine"],
    "cli": ["api"],
}
README = {
    "base": "What every agent layer uses: configuration, logging, redaction, the monotonic clock, "
            "shell words, URL checks; depends on the core (shared/) only.",
    "store": "The stores behind the cache (SQLite, Redis) and the preferences database; depends on "
             "base and the core.",
    "upstream": "Talking to MCP servers: stdio and Streamable HTTP transports, child processes, "
                "upstream sessions; depends on base and the core.",
    "engine": "The refresh engine (agent, refresh, maintenance, upstream pools, metrics) that keeps "
              "manifests fresh; depends on store and upstream.",
    "api": "The agent's HTTP API and its front end (discovery, webhook, preferences, /metrics); "
           "depends on engine.",
    "cli": "The command line: main, the subcommand table and one cmd_<name>.cpp per subcommand; "
           "depends on api.",
}
# Pattern table on the file's stem (name without .h/.cpp); first match wins. Order matters:
# `upstream_pool` is engine before `upstream*` is upstream, `redis_store` is store before any
# redis pattern elsewhere.
TABLE = [
    ("cli", ["main", "cli", "cli_*", "cmd_*"]),
    ("api", ["api", "api_*", "http_front*", "front*", "route*", "locked_render_cache*",
             "render_cache*"]),
    ("engine", ["agent", "agent_*", "refresh*", "maintenance*", "*_pool", "*_pool_*", "pool*",
                "metrics*", "service", "trigger*", "*_trigger*", "deferred*", "scheduler*"]),
    ("store", ["store", "store_*", "*_store", "*_store_*", "sqlite*", "redis_*", "preferences_db*",
               "*_db", "*_codec*", "record*"]),
    ("upstream", ["transport", "transport_*", "*_transport", "*_transport_*", "child_process*",
                  "upstream", "upstream_*", "streamable*", "sse*", "stdio*"]),
    ("base", ["config", "config_*", "logger*", "redactor*", "clock*", "shell_words*",
              "exit_codes*", "url_guard*", "ascii*", "support*"]),
]

# Every C++ source or header directly in native-agent/ is moved (CMakeLists.txt and README stay).
SOURCE = r"[^/]+\.(h|hpp|cpp|cc|inc)"

def classify(stem):
    for layer, patterns in TABLE:
        if any(fnmatch.fnmatchcase(stem, p) for p in patterns):
            return layer
    return None

def git(*args):
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout

files = sorted(f for f in os.listdir("native-agent")
               if os.path.isfile(os.path.join("native-agent", f)) and re.fullmatch(SOURCE, f))
where = {}
for f in files:
    layer = classify(f.rsplit(".", 1)[0])
    if layer:
        where[f] = layer
# Fallback: the other half of a pair.
for f in files:
    if f in where:
        continue
    stem, ext = f.rsplit(".", 1)
    others = [stem + "." + e for e in ("h", "hpp", "cpp", "cc", "inc") if e != ext]
    other = next((o for o in others if o in where), None)
    if other is not None:
        where[f] = where[other]
        print(f"move-native-agent-layers.sh: {f}: no pattern matches; follows {other} into {where[other]}/")
left = [f for f in files if f not in where]
if left:
    print("move-native-agent-layers.sh: not classified (add a pattern to TABLE):", file=sys.stderr)
    for f in left:
        print("  native-agent/" + f, file=sys.stderr)
    sys.exit(1)

# Every moved file, for the path rewrite; files already in a layer folder (a re-run) count too.
moved = {}
for layer in LAYERS:
    d = os.path.join("native-agent", layer)
    if os.path.isdir(d):
        for f in os.listdir(d):
            if re.fullmatch(SOURCE, f):
                moved[f] = layer
for f, layer in where.items():
    os.makedirs(os.path.join("native-agent", layer), exist_ok=True)
    git("mv", os.path.join("native-agent", f), os.path.join("native-agent", layer, f))
    moved[f] = layer
for layer in LAYERS:
    print(f"move-native-agent-layers.sh: native-agent/{layer}/: " +
          " ".join(sorted(f for f, l in moved.items() if l == layer)))

# Rewrite `native-agent/<file>` (includes, CMake, scripts, docs) everywhere in the repository. A
# glob in a path (`native-agent/config_*.cpp`) is classified by its fixed part.
path_re = re.compile(r"native-agent/([A-Za-z0-9_*-]+\.(?:h|hpp|cpp|cc|inc))\b")
def new_path(m):
    name = m.group(1)
    layer = moved.get(name)
    if layer is None and "*" in name:
        layer = classify(name.rsplit(".", 1)[0].replace("*", ""))
    return f"native-agent/{layer}/{name}" if layer else m.group(0)

changed = []
for path in git("ls-files", "-z").split("\0"):
    if not path or not os.path.isfile(path) or os.path.islink(path):
        continue
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (UnicodeDecodeError, OSError):
        continue  # binary
    if "native-agent/" not in text and path != "docs/benchmarks.md":
        continue
    out = path_re.sub(new_path, text)
    # The agent library is one library per layer now (quiver_agent_lib stays, as all of them).
    if path == "bench/upstream_listing.sh":
        archives = '"$build"/native-agent/libquiver_agent_{' + ",".join(reversed(LAYERS)) + '}.a'
        out = out.replace('"$build/native-agent/libquiver_agent_lib.a"', archives)
        out = out.replace("quiver_agent_lib >/dev/null", "quiver_agent_cli >/dev/null")
    if path == "docs/benchmarks.md":
        out = out.replace("builds `quiver_agent_lib`",
                          "builds `quiver_agent_cli` (every layer)")
    if out != text:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(out)
        changed.append(path)
print(f"move-native-agent-layers.sh: rewrote paths in {len(changed)} files")

for layer in LAYERS:
    with open(os.path.join("native-agent", layer, "README.md"), "w") as fh:
        fh.write(README[layer] + "\n")

# ---- the build: one library per layer, and a link check per layer ------------------------------
cmake = '''# quiver-agent: the native agent, one static library per layer folder (each folder's README says
# what it holds). A layer links only the layers below it:
#   core (shared/) <- base <- store, upstream <- engine <- api <- cli <- quiver-agent (main.cpp)
# Each folder is globbed: a new file needs no edit here.
#
# The layering is checked by the linker, not by reading includes: in the test build, every layer
# is linked whole (--whole-archive) into a small executable together with only the layers it may
# use, so a call from a layer into one above it is an undefined reference and the build fails.
function(quiver_agent_layer layer)
  file(GLOB sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/${layer}/*.cpp")
  list(FILTER sources EXCLUDE REGEX "/main\\\\.cpp$")
  add_library(quiver_agent_${layer} STATIC ${sources})
  target_include_directories(quiver_agent_${layer} PUBLIC "${CMAKE_SOURCE_DIR}")
  target_link_libraries(quiver_agent_${layer} PUBLIC ${ARGN} PRIVATE quiver_warnings)
  if(QUIVER_BUILD_TESTS)
    add_executable(quiver_agent_${layer}_layer_check
                   "${CMAKE_SOURCE_DIR}/cmake/layer_check_main.cpp")
    target_link_libraries(quiver_agent_${layer}_layer_check
                          PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,quiver_agent_${layer}>" ${ARGN})
  endif()
endfunction()

# PUBLIC: cpp-httplib's feature macros change its class layouts, so every user compiles with them.
@@LAYER_LINES@@
# Everything but main.cpp, for the integration tests, which drive the same code the binary runs.
add_library(quiver_agent_lib INTERFACE)
target_link_libraries(quiver_agent_lib INTERFACE quiver_agent_cli)

add_executable(quiver-agent cli/main.cpp)
target_link_libraries(quiver-agent PRIVATE quiver_agent_cli quiver_warnings)
'''
# Third-party libraries by the layer whose headers use them. PUBLIC: cpp-httplib's feature macros
# change its class layouts, so every user compiles with them.
THIRD_PARTY = {
    "base": ["quiver_core", "PkgConfig::HTTPLIB", "Threads::Threads"],
    "store": ["PkgConfig::HIREDIS", "SQLite::SQLite3"],
}
lines = "# The layers, bottom up, each with the layers (and libraries) it may use.\n"
for l in LAYERS:
    deps = ["quiver_agent_" + b for b in BELOW[l]] + THIRD_PARTY.get(l, [])
    lines += f"quiver_agent_layer({l} {' '.join(deps)})\n"
lines += "\n"
cmake = cmake.replace("@@LAYER_LINES@@\n", lines)
with open("native-agent/CMakeLists.txt", "w") as fh:
    fh.write(cmake)
with open("cmake/layer_check_main.cpp", "w") as fh:
    fh.write("// The entry point of native-agent's layer checks (native-agent/CMakeLists.txt): an executable\n"
             "// that links one layer whole, to prove it needs nothing from the layers above it.\n"
             "int main() { return 0; }\n")
git("add", "-A", "native-agent", "cmake/layer_check_main.cpp", *changed)
PY
echo "move-native-agent-layers.sh: done; review with git status, build, then commit"
