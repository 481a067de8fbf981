#include "native-agent/logger.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace quiver {

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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
  // One line per call: a message quoting a peer must not forge a second line.
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (redactor_) line = redactor_(line);
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
