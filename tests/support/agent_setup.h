// The integration tests' agent set-up: a configuration parsed from a JSON document as a file would
// hold it, and a log that keeps every line the agent and its API write (for failure messages and
// for checking that a secret never shows).
//
//   LogCapture log;
//   Result<AgentConfig> config = parse_test_config(doc, "api_test.json", env, dir.root());
//   options.log_sink = log.sink();
//   ... << log.text();
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "native-agent/base/config.h"
#include "shared/json.h"

namespace quiver::testing {

class LogCapture {
 public:
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      text_ += line + "\n";
    };
  }
  std::string text() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
};

// parse_config over `doc` dumped, as the file `origin` in `working_dir` with environment `env`.
inline Result<AgentConfig> parse_test_config(const Json& doc, std::string origin, EnvMap env,
                                             std::string working_dir) {
  const std::string text = doc.dump();  // outlives the parse: sources hold a view
  ConfigSources sources;
  sources.text = text;
  sources.origin = origin;
  sources.env = std::move(env);
  sources.working_dir = std::move(working_dir);
  return parse_config(sources);
}

}  // namespace quiver::testing
