#include "native-agent/upstream/http_client.h"

#include <algorithm>
#include <chrono>

#include <signal.h>

#include "native-agent/base/clock.h"

namespace quiver {

Result<std::unique_ptr<httplib::ClientImpl>> make_pinned_client(const HttpUrl& url,
                                                                const std::string& pinned_address,
                                                                bool keep_alive) {
  std::unique_ptr<httplib::ClientImpl> client;
  if (url.scheme == "https") {
    client = std::make_unique<httplib::SSLClient>(url.host, url.port);
  } else {
    client = std::make_unique<httplib::ClientImpl>(url.host, url.port);
  }
  if (!client->is_valid()) {
    return Error(ErrorCode::kInternal, "could not set up an HTTP client for " + url.redacted());
  }
  client->set_hostname_addr_map({{url.host, pinned_address}});
  client->set_follow_location(false);
  client->set_decompress(true);
  client->set_tcp_nodelay(true);
  client->set_keep_alive(keep_alive);
  return client;
}

void set_client_timeouts(httplib::ClientImpl& client, int64_t connect_ms, int64_t read_ms,
                         int64_t write_ms) {
  auto split = [](int64_t ms, auto&& set) {
    ms = std::max<int64_t>(ms, 1);
    set(static_cast<time_t>(ms / 1000), static_cast<time_t>((ms % 1000) * 1000));
  };
  split(connect_ms, [&](time_t s, time_t us) { client.set_connection_timeout(s, us); });
  split(read_ms, [&](time_t s, time_t us) { client.set_read_timeout(s, us); });
  split(write_ms, [&](time_t s, time_t us) { client.set_write_timeout(s, us); });
}

Error http_client_error(httplib::Error err, const std::string& where) {
  switch (err) {
    case httplib::Error::Connection:
      return Error(ErrorCode::kTransport, "could not connect to " + where);
    case httplib::Error::ConnectionTimeout:
      return Error(ErrorCode::kTimeout, "connecting to " + where + " timed out");
    case httplib::Error::Read:
      return Error(ErrorCode::kTransport, "the connection to " + where + " broke while reading");
    case httplib::Error::Write:
      return Error(ErrorCode::kTransport, "could not send the request to " + where);
    case httplib::Error::SSLConnection:
      return Error(ErrorCode::kTransport, "TLS handshake with " + where + " failed");
    case httplib::Error::SSLServerVerification:
      return Error(ErrorCode::kTransport, "the TLS certificate of " + where + " did not verify");
    case httplib::Error::SSLLoadingCerts:
      return Error(ErrorCode::kTransport, "could not load the CA certificates");
    case httplib::Error::Compression:
      return Error(ErrorCode::kInvalidReply, "could not decompress the reply of " + where);
    default:
      return Error(ErrorCode::kTransport,
                   "request to " + where + " failed (" + httplib::to_string(err) + ")");
  }
}

bool send_request(httplib::ClientImpl& client, httplib::Request& req, httplib::Response& res,
                  httplib::Error& err) {
  try {
    return client.send(req, res, err);
  } catch (...) {
    err = httplib::Error::Unknown;
    return false;
  }
}

void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

Watchdog::Watchdog() : thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(httplib::ClientImpl* client, int64_t deadline_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  client_ = client;
  deadline_ms_ = deadline_ms;
  fired_ = false;
  cv_.notify_all();
}

bool Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  client_ = nullptr;
  return fired_;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    if (client_ == nullptr) {
      cv_.wait(lock);
    } else if (steady_ms() >= deadline_ms_) {
      client_->stop();
      fired_ = true;
      client_ = nullptr;
    } else {
      cv_.wait_for(lock, std::chrono::milliseconds(deadline_ms_ - steady_ms()));
    }
  }
}

}  // namespace quiver
