// The configuration's contact with the real world: the process environment, the config file and
// secret files (bounded reads), and the working directory relative paths are taken from.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <unistd.h>

#include "native-agent/base/config.h"
#include "native-agent/base/config_internal.h"

namespace quiver {

using namespace config_internal;  // this file implements part of config.h

EnvMap env_from_environ(const char* const* environ) {
  EnvMap out;
  if (environ == nullptr) return out;
  for (const char* const* e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return out;
}

namespace {

Result<std::string> read_bounded(const std::string& path, std::size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    return Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                 std::strerror(err));
  }
  // One byte past the limit is enough to say "too large".
  std::string out;
  char buf[8192];
  std::size_t n = 0;
  while (out.size() <= max_bytes &&
         (n = std::fread(buf, 1, std::min(sizeof buf, max_bytes + 1 - out.size()), f)) > 0) {
    out.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return invalid(std::strerror(err));
  return out;
}

}  // namespace

Result<std::string> read_secret_file(const std::string& path) {
  return read_bounded(path, kMaxSecretFileBytes);
}

Result<AgentConfig> load_config_file(const std::string& path, const EnvMap& env) {
  Result<std::string> text = read_bounded(path, kMaxConfigBytes);
  if (!text.ok()) {
    return Error(text.error().code, "config file `" + path + "`: " + text.error().message);
  }
  char cwd[4096];
  ConfigSources sources;
  sources.text = *text;
  sources.origin = path;
  sources.env = env;
  sources.read_file = read_secret_file;
  if (::getcwd(cwd, sizeof cwd) != nullptr) sources.working_dir = cwd;
  return parse_config(sources);
}

}  // namespace quiver
