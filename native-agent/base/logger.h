// Logger: the agent's one log sink. A line is `<ts> <LEVEL> <component>: <message>`, written to
// stderr by default, and EVERY line passes through a redactor (AgentConfig::redact) before it is
// written, so a secret quoted by an upstream's error reply cannot reach the log.
//
// A line is one line, and inert on a terminal: after redaction every control character is
// escaped (`escape_control_characters`), so a peer's text can neither forge a second line nor
// send ANSI escape sequences (an upstream's tool name, an error reply) to whoever reads the log.
//
// Thread-safe: lines from several threads never interleave. Tests pass a sink to capture lines.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace quiver {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };
const char* log_level_name(LogLevel level);  // "DEBUG", "INFO", "WARN", "ERROR"
// "debug", "info", "warn"/"warning", "error" (case-insensitive); nullopt otherwise.
std::optional<LogLevel> parse_log_level(std::string_view text);

// C0 controls and DEL as `\xHH` (`\n`, `\r`, `\t` by name), C1 controls (UTF-8 U+0080..U+009F)
// as `\u00HH`; everything else, other UTF-8 included, unchanged.
std::string escape_control_characters(std::string_view text);

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;  // a whole line, no newline
  using Redactor = std::function<std::string(std::string_view)>;
  using Clock = std::function<int64_t()>;  // ms since the epoch, for the timestamp

  // Null sink: stderr. Null redactor: lines pass unchanged (only for tests without secrets).
  explicit Logger(LogLevel min_level = LogLevel::kInfo, Sink sink = nullptr,
                  Redactor redactor = nullptr, Clock clock = nullptr);

  void log(LogLevel level, std::string_view component, std::string_view message) const;
  void debug(std::string_view component, std::string_view message) const;
  void info(std::string_view component, std::string_view message) const;
  void warn(std::string_view component, std::string_view message) const;
  void error(std::string_view component, std::string_view message) const;

  bool enabled(LogLevel level) const { return level >= min_level_; }
  void set_redactor(Redactor redactor);

 private:
  LogLevel min_level_;
  Sink sink_;
  Redactor redactor_;
  Clock clock_;
  mutable std::mutex mu_;
};

}  // namespace quiver
