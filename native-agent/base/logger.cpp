#include "native-agent/base/logger.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "shared/ascii.h"
#include "shared/enum_names.h"

namespace quiver {

const char* log_level_name(LogLevel level) {
  static constexpr const char* const kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  static_assert(covers_enum(kNames, LogLevel::kError));
  return name_of(kNames, level, "INFO");
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  const std::string lower = ascii_lower(text);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warn" || lower == "warning") return LogLevel::kWarn;
  if (lower == "error") return LogLevel::kError;
  return std::nullopt;
}

Logger::Logger(LogLevel min_level, Sink sink, Redactor redactor, Clock clock)
    : min_level_(min_level),
      sink_(std::move(sink)),
      redactor_(std::move(redactor)),
      clock_(std::move(clock)) {}

void Logger::set_redactor(Redactor redactor) {
  std::lock_guard<std::mutex> lock(mu_);
  redactor_ = std::move(redactor);
}

namespace {

std::string timestamp(int64_t ms) {
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace

std::string escape_control_characters(std::string_view text) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\n') {
      out += "\\n";
    } else if (u == '\r') {
      out += "\\r";
    } else if (u == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else if (u == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // C1 controls (U+0080..U+009F) in UTF-8: CSI (U+009B) starts an ANSI sequence too.
      const auto c1 = static_cast<unsigned char>(text[++i]);
      out += "\\u00";
      out += kHex[c1 >> 4];
      out += kHex[c1 & 15];
    } else {
      out += static_cast<char>(u);
    }
  }
  return out;
}

void Logger::log(LogLevel level, std::string_view component, std::string_view message) const {
  if (!enabled(level)) return;
  int64_t now = clock_ ? clock_()
                       : std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::string line = timestamp(now);
  line += ' ';
  line += log_level_name(level);
  line += ' ';
  line.append(component.data(), component.size());
  line += ": ";
  line.append(message.data(), message.size());
  std::lock_guard<std::mutex> lock(mu_);
  // Redact before escaping: a secret holding a control character is matched as it was sent.
  if (redactor_) line = redactor_(line);
  line = escape_control_characters(line);
  if (sink_) {
    sink_(line);
  } else {
    std::cerr << line << '\n' << std::flush;
  }
}

void Logger::debug(std::string_view component, std::string_view message) const {
  log(LogLevel::kDebug, component, message);
}
void Logger::info(std::string_view component, std::string_view message) const {
  log(LogLevel::kInfo, component, message);
}
void Logger::warn(std::string_view component, std::string_view message) const {
  log(LogLevel::kWarn, component, message);
}
void Logger::error(std::string_view component, std::string_view message) const {
  log(LogLevel::kError, component, message);
}

}  // namespace quiver
