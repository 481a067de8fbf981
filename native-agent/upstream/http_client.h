// cpp-httplib plumbing for the Streamable HTTP transport: clients pinned to the address the URL
// guard checked, socket timeouts, a watchdog that ends an exchange at its deadline, and the
// library's failure codes as errors. No MCP rules here: those are in shared/streamable_http.h.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>

#include "native-agent/base/url_guard.h"
#include "shared/status.h"

namespace quiver {

// A client for `url` that dials `pinned_address` (the name is not resolved again), never follows
// redirects, and decompresses.
Result<std::unique_ptr<httplib::ClientImpl>> make_pinned_client(const HttpUrl& url,
                                                                const std::string& pinned_address,
                                                                bool keep_alive);

void set_client_timeouts(httplib::ClientImpl& client, int64_t connect_ms, int64_t read_ms,
                         int64_t write_ms);

// Why a request got no response, as an error naming `where` (a redacted URL).
Error http_client_error(httplib::Error err, const std::string& where);

// Runs one request; an exception in the library is a failed request.
bool send_request(httplib::ClientImpl& client, httplib::Request& req, httplib::Response& res,
                  httplib::Error& err);

// cpp-httplib 0.11.4 writes to sockets without MSG_NOSIGNAL, and a peer closing mid-write must
// not kill the agent: SIGPIPE is set to ignored when it is at its default.
void ignore_sigpipe_once();

// Stops an exchange at its deadline however the server stalls (slow headers, drip-fed body):
// cpp-httplib's timeouts bound each socket operation, not the whole request. ClientImpl::stop()
// is the library's thread-safe way to break a request in flight (it shuts the socket down).
class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `deadline_ms` on the steady clock (native-agent/base/clock.h).
  void arm(httplib::ClientImpl* client, int64_t deadline_ms);
  // True when the deadline passed while armed (the request was stopped).
  bool disarm();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  httplib::ClientImpl* client_ = nullptr;
  int64_t deadline_ms_ = 0;
  bool fired_ = false;
  bool quit_ = false;
  std::thread thread_;  // last: starts after the members it reads are initialized
};

}  // namespace quiver
