// The configuration's contact with the real world: the process environment, the config file and
// secret files (bounded reads), and the working directory relative paths are taken from.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>
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

ConfigSources ConfigFile::sources() const {
  ConfigSources sources;
  sources.text = text;
  sources.origin = path;
  sources.env = env;
  sources.read_file = read_secret_file;
  sources.working_dir = working_dir;
  return sources;
}

Result<ConfigFile> read_config_file(const std::string& path, const EnvMap& env) {
  ConfigFile file;
  file.path = path;
  file.env = env;
  struct stat st {};
  // The mtime before the read: a write racing the read makes the next reload see a newer file.
  if (::stat(path.c_str(), &st) == 0) {
    file.mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  }
  Result<std::string> text = read_bounded(path, kMaxConfigBytes);
  if (!text.ok()) {
    return Error(text.error().code, "config file `" + path + "`: " + text.error().message);
  }
  file.text = std::move(*text);
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) != nullptr) file.working_dir = cwd;
  return file;
}

Result<AgentConfig> parse_config_file(const ConfigFile& file) {
  Result<AgentConfig> cfg = parse_config(file.sources());
  if (cfg.ok() && cfg->revision_ms == 0) cfg->revision_ms = std::max<int64_t>(file.mtime_ms, 1);
  return cfg;
}

Result<AgentConfig> load_config_file(const std::string& path, const EnvMap& env) {
  Result<ConfigFile> file = read_config_file(path, env);
  if (!file.ok()) return file.error();
  return parse_config_file(*file);
}

}  // namespace quiver
