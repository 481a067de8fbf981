// HttpFront's inline handler (native-agent/api/http_front.h): answers on the loop thread, what it
// declines goes to a worker, a slow call pauses it, a throw falls back to a worker, a deep
// pipeline is answered in order without deepening the stack, and the keep-alive bound holds. A
// real front on a free loopback port, spoken to over real sockets.
#include "native-agent/api/http_front.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace quiver {
namespace {

Http1Response text(int status, std::string body) {
  Http1Response r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "text/plain");
  r.body = std::move(body);
  return r;
}

// A front whose worker answers "worker <path>" and whose inline handler is the test's.
struct Front {
  std::atomic<int> worker_calls{0};
  HttpFront front;

  Front(HttpFrontOptions options, HttpInlineHandler inline_handler)
      : front(
            options,
            [this](const Http1Request& req, const HttpPeer&) {
              ++worker_calls;
              return text(200, "worker " + req.target + ";");
            },
            [](int status, const std::string& message) { return text(status, message); },
            [] { return text(503, "overloaded"); }, std::move(inline_handler)) {
    Status started = front.start();
    EXPECT_TRUE(started.ok()) << (started.ok() ? "" : started.error().message);
  }
};

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    off += static_cast<std::size_t>(n);
  }
}

// Reads until what arrived holds `last_marker` (or, with `until_close`, until the peer closes), or
// 10 s pass; returns what arrived.
std::string read_until(int fd, const std::string& last_marker, bool until_close = false) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    if (!until_close && got.find(last_marker) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) != 1) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  return got;
}

std::string get(const std::string& path, bool close = false) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
         (close ? "Connection: close\r\n" : "") + "\r\n";
}

std::size_t count_of(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// Options for tests of anything but the budget: no pause, however loaded the machine (a
// preempted loop thread can take milliseconds over a trivial call).
HttpFrontOptions patient() {
  HttpFrontOptions options;
  options.inline_budget_us = int64_t{60} * 1'000'000;
  return options;
}

TEST(HttpFrontInline, AnswersOnTheLoopAndDeclinesToWorkers) {
  std::atomic<int> inline_calls{0};
  Front f(patient(), [&](const Http1Request& req, const HttpPeer&) {
    ++inline_calls;
    if (req.target == "/inline") return std::optional<Http1Response>(text(200, "inline /inline"));
    return std::optional<Http1Response>();
  });
  // One at a time, with a pause after the worker's answer: a worker keeps a connection for
  // `hot_connection_ms` and would answer a request that arrives meanwhile itself.
  int fd = connect_to(f.front.port());
  send_all(fd, get("/inline"));
  std::string got = read_until(fd, "inline /inline");
  send_all(fd, get("/other"));
  got += read_until(fd, "worker /other;");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  send_all(fd, get("/inline", true));
  got += read_until(fd, "", true);
  ::close(fd);
  EXPECT_EQ(count_of(got, "inline /inline"), 2u) << got;
  EXPECT_EQ(count_of(got, "worker /other;"), 1u) << got;
  // In order: inline, worker, inline.
  EXPECT_LT(got.find("inline /inline"), got.find("worker /other;"));
  EXPECT_LT(got.find("worker /other;"), got.rfind("inline /inline"));
  EXPECT_EQ(inline_calls.load(), 3);
  EXPECT_EQ(f.worker_calls.load(), 1);
  EXPECT_EQ(f.front.inline_count(), 2);
  EXPECT_EQ(f.front.inline_paused_count(), 0);
}

// 20,000 pipelined requests in one stream are answered in order: on the loop, a loop, not a
// recursion per request (which would overflow the loop thread's stack).
TEST(HttpFrontInline, DeepPipelineIsAnsweredInOrder) {
  HttpFrontOptions options = patient();
  options.keep_alive_max_requests = 1'000'000;
  Front f(options, [](const Http1Request& req, const HttpPeer&) {
    return std::optional<Http1Response>(text(200, "inline " + req.target + ";"));
  });
  constexpr int kRequests = 20'000;
  std::string burst;
  for (int i = 0; i < kRequests; ++i) burst += get("/" + std::to_string(i));
  int fd = connect_to(f.front.port());
  std::thread writer([&] { send_all(fd, burst); });
  std::string got = read_until(fd, "/" + std::to_string(kRequests - 1) + ";");
  writer.join();
  ::close(fd);
  std::size_t at = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string want = "/" + std::to_string(i) + ";";
    std::size_t next = got.find(want, at);
    ASSERT_NE(next, std::string::npos)
        << "answer " << i << " missing or out of order; the end: "
        << got.substr(got.size() - std::min<std::size_t>(got.size(), 400));
    at = next + want.size();
  }
  EXPECT_EQ(f.front.inline_count(), kRequests);
  EXPECT_EQ(f.worker_calls.load(), 0);
}

TEST(HttpFrontInline, ASlowCallPausesInlineAnswers) {
  HttpFrontOptions options;
  options.inline_budget_us = 1'000;
  options.inline_pause_ms = 60'000;  // no second inline call within the test
  std::atomic<int> inline_calls{0};
  Front f(options, [&](const Http1Request&, const HttpPeer&) {
    ++inline_calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::optional<Http1Response>(text(200, "slow inline"));
  });
  int fd = connect_to(f.front.port());
  send_all(fd, get("/a") + get("/b") + get("/c", true));
  std::string got = read_until(fd, "", true);
  ::close(fd);
  // The first call answered (late), and paused inlining: the rest went to workers.
  EXPECT_EQ(count_of(got, "slow inline"), 1u) << got;
  EXPECT_EQ(count_of(got, "worker /"), 2u) << got;
  EXPECT_EQ(inline_calls.load(), 1);
  EXPECT_EQ(f.front.inline_paused_count(), 1);
}

// A worker keeps a busy connection (hot) only while inline answers are paused: when the pause is
// over, the connection's next request is answered on the loop again, although requests kept
// arriving within `hot_connection_ms` all along.
TEST(HttpFrontInline, AfterAPauseTheConnectionComesBackToTheLoop) {
  HttpFrontOptions options;
  options.inline_budget_us = 10'000;
  options.inline_pause_ms = 200;
  options.hot_connection_ms = 1'000;  // a worker would keep this connection for as long as it runs
  options.keep_alive_max_requests = 1'000'000;
  std::atomic<int> inline_calls{0};
  Front f(options, [&](const Http1Request& req, const HttpPeer&) {
    ++inline_calls;
    if (req.target == "/slow") std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::optional<Http1Response>(text(200, "inline " + req.target + ";"));
  });
  int fd = connect_to(f.front.port());
  send_all(fd, get("/slow"));
  std::string got = read_until(fd, "inline /slow;");
  // One request at a time, each sent as soon as the last is answered, for a second.
  int after_pause_inline = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    const std::string path = "/" + std::to_string(i);
    send_all(fd, get(path));
    std::string answer = read_until(fd, " " + path + ";");
    ASSERT_NE(answer.find(" " + path + ";"), std::string::npos) << answer;
    if (answer.find("inline " + path + ";") != std::string::npos) ++after_pause_inline;
  }
  ::close(fd);
  EXPECT_GE(f.front.inline_paused_count(), 1);
  EXPECT_GE(f.worker_calls.load(), 1);  // during the pause
  EXPECT_GE(after_pause_inline, 1);     // and back on the loop after it
}

TEST(HttpFrontInline, AThrowGoesToAWorker) {
  Front f(patient(), [](const Http1Request&, const HttpPeer&) -> std::optional<Http1Response> {
    throw std::runtime_error("inline handler failed");
  });
  int fd = connect_to(f.front.port());
  send_all(fd, get("/x", true));
  std::string got = read_until(fd, "", true);
  ::close(fd);
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  EXPECT_NE(got.find("worker /x;"), std::string::npos) << got;
  EXPECT_EQ(f.front.inline_count(), 0);
}

TEST(HttpFrontInline, KeepAliveBoundClosesTheConnection) {
  HttpFrontOptions options = patient();
  options.keep_alive_max_requests = 3;
  Front f(options, [](const Http1Request&, const HttpPeer&) {
    return std::optional<Http1Response>(text(200, "inline"));
  });
  int fd = connect_to(f.front.port());
  send_all(fd, get("/1") + get("/2") + get("/3") + get("/4"));
  std::string got = read_until(fd, "", true);  // the front closes after the third
  ::close(fd);
  EXPECT_EQ(count_of(got, "HTTP/1.1 200"), 3u) << got;
  EXPECT_EQ(count_of(got, "Connection: close"), 1u) << got;
}

}  // namespace
}  // namespace quiver
