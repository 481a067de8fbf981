#include "native-agent/upstream/stdio_transport.h"

#include "native-agent/base/clock.h"

namespace quiver {

Result<std::unique_ptr<StdioTransport>> StdioTransport::start(const ChildSpec& spec,
                                                              std::string label,
                                                              StdioTransportOptions options) {
  auto child = ChildProcess::spawn(spec);
  if (!child.ok()) {
    Error e = child.error();
    e.message = "stdio upstream " + label + ": " + e.message;
    return e;
  }
  return std::unique_ptr<StdioTransport>(
      new StdioTransport(std::move(*child), std::move(label), std::move(options)));
}

StdioTransport::StdioTransport(std::unique_ptr<ChildProcess> child, std::string label,
                               StdioTransportOptions options)
    : child_(std::move(child)),
      label_(std::move(label)),
      options_(std::move(options)),
      decoder_(options_.max_message_bytes) {}

StdioTransport::~StdioTransport() { close(); }

void StdioTransport::forward_stderr() {
  if (!child_) return;
  for (std::string& line : child_->take_stderr_lines()) {
    if (options_.on_stderr_line) options_.on_stderr_line(line);
  }
}

Error StdioTransport::closed_error(const char* what) {
  std::string message = "stdio upstream " + label_ + " " + what;
  if (child_) {
    if (auto status = child_->exit_status()) message += " (" + status->describe() + ")";
  }
  return Error(ErrorCode::kTransport, std::move(message));
}

Status StdioTransport::send(const std::string& message_text, int64_t timeout_ms) {
  if (closed_) return closed_error("is closed");
  auto line = encode_ndjson_text(message_text);
  if (!line.ok()) return line.error();
  Status written = child_->write(*line);
  if (!written.ok()) {
    close();
    return written;
  }
  // Push the queue out within the timeout; a child that does not read its stdin is hung.
  int64_t deadline = steady_ms() + timeout_ms;
  while (child_->pending_stdin_bytes() > 0) {
    int64_t left = deadline - steady_ms();
    if (left <= 0) {
      return Error(ErrorCode::kTimeout, "stdio upstream " + label_ + " is not reading its stdin");
    }
    auto waited = child_->wait_readable(static_cast<int>(std::min<int64_t>(left, 50)));
    if (!waited.ok()) return waited.error();
    if (waited->exited) break;
  }
  forward_stderr();
  return Status::Ok();
}

Result<std::vector<TransportMessage>> StdioTransport::receive(int64_t timeout_ms) {
  std::vector<TransportMessage> out;
  if (closed_) return closed_error("is closed");
  int64_t deadline = steady_ms() + std::max<int64_t>(0, timeout_ms);
  for (;;) {
    // Hand out complete lines first.
    for (;;) {
      auto line = decoder_.next();
      if (!line.ok()) {
        // A line over the bound: the decoder resyncs, but the reply it belonged to is lost.
        Error e = line.error();
        e.message = "stdio upstream " + label_ + ": " + e.message;
        close();
        return e;
      }
      if (!line->has_value()) break;
      out.push_back(TransportMessage{std::move(**line)});
    }
    if (!out.empty()) {
      forward_stderr();
      return out;
    }
    if (child_->stdout_eof()) {
      Status tail = decoder_.finish();
      close();
      if (!tail.ok()) return closed_error("closed stdout in the middle of a message");
      return closed_error("closed stdout");
    }
    // Even with no time left, look at the pipe once: receive(0) means "what is there now".
    int64_t left = std::max<int64_t>(0, deadline - steady_ms());
    auto waited = child_->wait_readable(static_cast<int>(left));
    if (!waited.ok()) return waited.error();
    auto bytes = child_->read_stdout();
    if (!bytes.ok()) {
      close();
      return bytes.error();
    }
    if (!bytes->empty()) {
      decoder_.feed(*bytes);
    } else if (waited->exited && !child_->stdout_eof()) {
      // Exited, nothing left to read, yet stdout is held open (a grandchild): it is gone.
      close();
      return closed_error("exited");
    } else if (left == 0 && !child_->stdout_eof()) {
      forward_stderr();
      return out;  // nothing now
    }
  }
}

void StdioTransport::close() {
  if (closed_) return;
  closed_ = true;
  if (child_) {
    (void)child_->terminate(options_.terminate_grace_ms);  // reaped either way
    forward_stderr();
  }
}

}  // namespace quiver
