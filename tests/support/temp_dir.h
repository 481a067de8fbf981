// A private temporary directory for one test: made under /tmp on construction, removed with
// everything in it when the object goes away.
//
//   TempDir dir("quiver-store");            // /tmp/quiver-store-XXXXXX
//   ASSERT_FALSE(dir.root().empty());       // empty when mkdtemp failed
//   std::string db = dir.path("quiver.db");
#pragma once

#include <fstream>
#include <string>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

namespace quiver::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "quiver-test") {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    const char* made = ::mkdtemp(pattern.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    if (path_.empty()) return;
    ::nftw(
        path_.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the directory.
  std::string path(const std::string& name) const { return path_ + "/" + name; }
  const std::string& root() const { return path_; }
  // Writes `content` to `name` inside the directory; returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace quiver::testing
