#include "native-agent/api/http_front.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-agent/base/clock.h"

namespace quiver {

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr std::size_t kReadChunk = 16 * 1024;
constexpr int64_t kScanEveryMs = 50;  // how often deadlines are checked

// The stream a handler opened on this worker thread during its call (HttpFront::open_stream).
struct StreamSlot {
  std::shared_ptr<HttpStream> stream;
};
thread_local StreamSlot* tl_stream_slot = nullptr;
// The socket of the request a worker's handler is answering (-1: none): HttpFront::client_gone.
thread_local int tl_request_fd = -1;

// One chunk of a chunked body ("" for no bytes: an empty chunk would end the body).
std::string chunk(const std::string& bytes, bool chunked) {
  if (bytes.empty() || !chunked) return bytes;
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

// The head of a streamed response, and its first bytes.
std::string stream_head(const Http1Response& response, bool chunked) {
  auto clean = [](std::string v) {
    for (char& ch : v) {
      if (ch == '\r' || ch == '\n' || ch == '\0') ch = ' ';
    }
    return v;
  };
  std::string out = std::string(chunked ? "HTTP/1.1 " : "HTTP/1.0 ") +
                    std::to_string(response.status) + " " + http1_reason(response.status) + "\r\n";
  for (const auto& [name, value] : response.headers) {
    std::string lname;
    for (char ch : name) lname += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lname == "content-length" || lname == "transfer-encoding" || lname == "connection") {
      continue;
    }
    out += clean(name) + ": " + clean(value) + "\r\n";
  }
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  out += "Connection: close\r\n\r\n";
  return out + chunk(response.body, chunked);
}

void describe_address(const sockaddr_storage& sa, std::string* addr, int* port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    *port = ntohs(in6->sin6_port);
  }
  *addr = text;
}

}  // namespace

struct HttpFront::Impl {
  enum class State { kReading, kProcessing, kWriting, kDraining, kStreaming };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    HttpPeer peer;
    Http1RequestParser parser;
    State state = State::kReading;
    std::string out;
    std::size_t out_pos = 0;
    bool close_after_write = false;
    std::size_t requests = 0;  // answered on this connection
    int64_t head_start = 0;    // the current request's head began (or the connection did)
    int64_t body_start = 0;    // its body began (0: not yet)
    int64_t idle_since = 0;    // the last answer went out (keep-alive wait)
    int64_t state_since = 0;   // writing / draining began
    uint32_t events = 0;       // registered with epoll
    bool registered = true;    // in the epoll set (not while a worker holds the socket)
    // kStreaming: the producer's stream, chunked framing (HTTP/1.1) and the last write.
    std::shared_ptr<HttpStream> stream;
    bool chunked = true;
    int64_t last_write = 0;

    explicit Conn(const Http1Limits& limits) : parser(limits) {}
  };

  struct Job {
    int fd;
    uint64_t id;
    Http1Request request;
    HttpPeer peer;
    Conn* conn;            // stable while it is kProcessing: the loop touches only its state
    std::size_t answered;  // requests answered on the connection before this one
  };
  struct Done {
    int fd;
    uint64_t id;
    std::string bytes;
    std::size_t written;  // already sent by the worker
    bool failed;          // the worker's send failed: the client is gone
    bool close;
    std::size_t answered;  // requests the worker answered (more than one: a hot connection)
    std::shared_ptr<HttpStream> stream = nullptr;  // the answer opened a stream
    bool chunked = true;
  };

  Impl(HttpFrontOptions o, HttpHandler h, HttpRefusal r, HttpOverloaded ov, HttpInlineHandler in)
      : options(std::move(o)),
        handler(std::move(h)),
        refuse(std::move(r)),
        overloaded(std::move(ov)),
        inline_handler(std::move(in)) {}

  HttpFrontOptions options;
  HttpHandler handler;
  HttpRefusal refuse;
  HttpOverloaded overloaded;
  HttpInlineHandler inline_handler;

  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: completions ready, or stop
  int bound_port = 0;
  bool started = false;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> shed{0};
  std::atomic<int64_t> inlined{0};
  std::atomic<int64_t> inline_paused{0};
  // Written by the loop thread, read by the workers (a hot connection goes back to the loop once
  // inline answers are not paused).
  std::atomic<int64_t> inline_paused_until{0};
  std::thread loop_thread;

  // Loop-thread state.
  std::unordered_map<int, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, std::size_t> per_peer;
  uint64_t next_id = 1;
  int64_t next_scan = 0;
  int64_t accept_paused_until = 0;
  std::vector<char> scratch = std::vector<char>(kReadChunk);

  // Worker pool.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::size_t idle_workers = 0;
  bool workers_stop = false;
  std::vector<std::thread> workers;
  std::mutex done_mu;
  std::deque<Done> done;
  std::vector<std::pair<int, uint64_t>> stream_ready;  // streams with bytes queued (done_mu)
  std::atomic<std::size_t> streams{0};

  // ---- set-up ----

  Status bind_and_listen() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port_text = std::to_string(options.port);
    int rc = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), port_text.c_str(),
                           &hints, &res);
    if (rc != 0 || res == nullptr) {
      return Error(ErrorCode::kResourceUnavailable,
                   "cannot resolve " + options.host + ": " + std::string(::gai_strerror(rc)));
    }
    std::string why = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      // SO_REUSEADDR only: a restart over TIME_WAIT connections binds, a port someone listens on
      // is refused (SO_REUSEPORT would silently share it).
      int yes = 1;
      (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd = fd;
        break;
      }
      why = errno == EADDRINUSE ? "address in use" : std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(res);
    if (listen_fd < 0) {
      return Error(ErrorCode::kResourceUnavailable,
                   "cannot listen on " + options.host + ":" + port_text + " (" + why + ")");
    }
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len);
    std::string addr;
    describe_address(sa, &addr, &bound_port);
    return Status::Ok();
  }

  // ---- epoll helpers ----

  void watch(Conn& c, uint32_t events) {
    if (c.registered && c.events == events) return;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = c.fd;
    (void)::epoll_ctl(epoll_fd, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
    c.events = events;
    c.registered = true;
  }

  // While a worker holds the socket the loop neither watches nor closes it: the worker writes
  // the answer itself (one thread wake-up less per request), and a descriptor closed under it
  // could be reused by the next accepted connection.
  void unwatch(Conn& c) {
    if (!c.registered) return;
    (void)::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.registered = false;
  }

  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second->stream) {
      it->second->stream->end_by_front();
      streams.fetch_sub(1);
    }
    if (it->second->registered) (void)::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    auto p = per_peer.find(it->second->peer.remote_addr);
    if (p != per_peer.end() && --p->second == 0) per_peer.erase(p);
    conns.erase(it);
  }

  // The oldest connection waiting for a request with no byte of one yet (of `peer` if given).
  int oldest_idle(const std::string* peer) {
    int best = -1;
    int64_t best_since = kNever;
    for (const auto& [fd, c] : conns) {
      if (c->state != State::kReading || !c->parser.idle()) continue;
      if (peer != nullptr && c->peer.remote_addr != *peer) continue;
      int64_t since = c->requests == 0 ? c->head_start : c->idle_since;
      if (since < best_since) {
        best_since = since;
        best = fd;
      }
    }
    return best;
  }

  // ---- accepting ----

  void accept_all(int64_t now) {
    for (int n = 0; n < 64; ++n) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: an idle connection makes room; without one, accepting pauses
          // (the kernel's backlog holds the rest) instead of spinning on the same error.
          int victim = oldest_idle(nullptr);
          if (victim >= 0) {
            close_conn(victim);
            continue;
          }
          pause_accepting(now);
        }
        return;
      }
      HttpPeer peer;
      describe_address(sa, &peer.remote_addr, &peer.remote_port);
      sockaddr_storage local{};
      socklen_t local_len = sizeof local;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0) {
        describe_address(local, &peer.local_addr, &peer.local_port);
      }
      if (!make_room(peer.remote_addr)) {
        refuse_at_once(fd);
        continue;
      }
      int yes = 1;
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      auto c = std::make_unique<Conn>(options.limits);
      c->id = next_id++;
      c->fd = fd;
      c->peer = std::move(peer);
      c->head_start = now;
      c->events = EPOLLIN | EPOLLRDHUP;
      epoll_event ev{};
      ev.events = c->events;
      ev.data.fd = fd;
      if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      ++per_peer[c->peer.remote_addr];
      conns.emplace(fd, std::move(c));
    }
  }

  void pause_accepting(int64_t now) {
    accept_paused_until = now + 100;
    epoll_event ev{};
    ev.data.fd = listen_fd;
    ev.events = 0;
    (void)::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
  }

  // Under both caps after closing an idle connection if need be; false when none could go.
  bool make_room(const std::string& peer) {
    auto p = per_peer.find(peer);
    if (p != per_peer.end() && p->second >= options.max_connections_per_peer) {
      int victim = oldest_idle(&peer);
      if (victim < 0) return false;
      close_conn(victim);
    }
    if (conns.size() >= options.max_connections) {
      int victim = oldest_idle(nullptr);
      if (victim < 0) return false;
      close_conn(victim);
    }
    return true;
  }

  // A connection over a cap with nothing to displace: one 503 written as far as the socket takes
  // it at once, then closed.
  void refuse_at_once(int fd) {
    shed.fetch_add(1);
    std::string bytes = http1_serialize(overloaded(), 1, false);
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }

  // ---- reading and parsing ----

  // Runs the parser over what it holds, reading more while it needs more; stops at a request
  // handed to a worker, an answer to write, or a socket with nothing more to read.
  void on_readable(Conn& c, int64_t now) {
    for (int reads = 0;;) {
      Http1Step step = c.parser.next();
      if (auto* request = std::get_if<Http1Request>(&step)) {
        std::optional<Http1Response> now_answer = answer_inline(c, *request, now);
        if (!now_answer) return dispatch(c, std::move(*request));
        // Written and reading again: the parser may already hold the next request (pipelined).
        // A loop, not a recursion: a deep pipeline must not deepen the stack.
        if (!respond(c, *request, std::move(*now_answer), now)) return;
        continue;
      }
      if (auto* failure = std::get_if<Http1Failure>(&step)) {
        return answer(c, http1_serialize(refuse(failure->status, failure->message), 1, false), true,
                      now);
      }
      if (std::holds_alternative<Http1SendContinue>(step)) {
        return answer(c, "HTTP/1.1 100 Continue\r\n\r\n", false, now);
      }
      if (c.parser.reading_body() && c.body_start == 0) c.body_start = now;
      if (reads++ >= 4) return;  // fairness: the level-triggered event comes back
      ssize_t n = ::recv(c.fd, scratch.data(), scratch.size(), 0);
      if (n > 0) {
        bool was_idle = c.parser.idle();
        c.parser.feed(std::string_view(scratch.data(), static_cast<std::size_t>(n)));
        if (was_idle && c.requests > 0) c.head_start = now;  // a new request's head begins
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      // The peer closed (or the socket failed): a half-sent request gets no answer.
      return close_conn(c.fd);
    }
  }

  // The inline handler's answer to `request`, unless there is none, it declines, it is paused, or
  // it throws (the worker then answers, and its handler logs what went wrong).
  std::optional<Http1Response> answer_inline(Conn& c, const Http1Request& request, int64_t now) {
    if (!inline_handler || now < inline_paused_until.load()) return std::nullopt;
    const auto start = std::chrono::steady_clock::now();
    std::optional<Http1Response> response;
    try {
      response = inline_handler(request, c.peer);
    } catch (...) {
      response.reset();
    }
    const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
    if (took_us > options.inline_budget_us) {
      inline_paused.fetch_add(1);
      inline_paused_until.store(now + options.inline_pause_ms);
    }
    if (response) inlined.fetch_add(1);
    return response;
  }

  // Writes the loop's own answer to `request`; true when it is out and the connection reads
  // again (false: still writing, closing or closed; `c` may be gone).
  bool respond(Conn& c, const Http1Request& request, Http1Response response, int64_t now) {
    const bool keep = c.requests + 1 < options.keep_alive_max_requests && request.keep_alive &&
                      !http1_response_closes(response);
    std::string bytes =
        http1_serialize(response, request.minor_version, keep, request.method == "HEAD");
    ++c.requests;
    c.idle_since = now;
    c.head_start = now;
    c.body_start = 0;
    c.state = State::kWriting;
    c.state_since = now;
    c.out = std::move(bytes);
    c.out_pos = 0;
    c.close_after_write = !keep;
    return flush(c, now);
  }

  void dispatch(Conn& c, Http1Request request) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (jobs.size() < idle_workers + options.max_queued_requests) {
        // Nothing is read while a request is in flight (pipelined bytes wait in the parser or
        // the kernel); the socket is the worker's until its Done comes back.
        c.state = State::kProcessing;
        unwatch(c);
        jobs.push_back(Job{c.fd, c.id, std::move(request), c.peer, &c, c.requests});
        cv.notify_one();
        return;
      }
    }
    // Every worker busy and the queue full: shed at once, without touching the handler.
    shed.fetch_add(1);
    answer(c, http1_serialize(overloaded(), request.minor_version, false, request.method == "HEAD"),
           true, steady_ms());
  }

  // ---- writing ----

  void answer(Conn& c, std::string bytes, bool close, int64_t now) {
    c.state = State::kWriting;
    c.state_since = now;
    c.out = std::move(bytes);
    c.out_pos = 0;
    c.close_after_write = close;
    on_writable(c, now);
  }

  void on_writable(Conn& c, int64_t now) {
    if (flush(c, now)) on_readable(c, now);  // a pipelined request may be waiting in the parser
  }

  // Writes what the socket takes. True when everything is out and the connection is reading
  // again; false while the rest waits for EPOLLOUT, when the connection is closing (lingering
  // drain), or when it is closed (`c` is then gone).
  bool flush(Conn& c, int64_t now) {
    while (c.out_pos < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        watch(c, EPOLLOUT);
        return false;
      }
      close_conn(c.fd);
      return false;
    }
    std::string().swap(c.out);
    c.out_pos = 0;
    if (c.close_after_write) {
      // Lingering close: the client reads the answer before the connection goes; what it still
      // sends is read and dropped (a close with unread bytes would reset the connection and
      // could destroy the answer in flight).
      ::shutdown(c.fd, SHUT_WR);
      c.state = State::kDraining;
      c.state_since = now;
      watch(c, EPOLLIN | EPOLLRDHUP);
      return false;
    }
    c.state = State::kReading;
    watch(c, EPOLLIN | EPOLLRDHUP);
    return true;
  }

  void drain(Conn& c) {
    for (int i = 0; i < 16; ++i) {
      ssize_t n = ::recv(c.fd, scratch.data(), scratch.size(), 0);
      if (n > 0) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      return close_conn(c.fd);
    }
  }

  void on_done(Done d, int64_t now) {
    auto it = conns.find(d.fd);
    if (it == conns.end() || it->second->id != d.id) return;  // the client went away
    Conn& c = *it->second;
    if (d.failed) {
      if (d.stream) d.stream->end_by_front();
      return close_conn(d.fd);
    }
    if (d.stream) return start_stream(c, std::move(d), now);
    c.requests += d.answered;
    c.idle_since = now;
    c.head_start = now;
    c.body_start = 0;
    c.state = State::kWriting;
    c.state_since = now;
    c.out = std::move(d.bytes);
    c.out_pos = d.written;
    c.close_after_write = d.close;
    on_writable(c, now);
  }

  // ---- deadlines ----

  int64_t deadline(const Conn& c) const {
    switch (c.state) {
      case State::kReading:
        if (c.parser.reading_body()) return c.body_start + options.body_timeout_ms;
        if (c.parser.idle() && c.requests > 0) return c.idle_since + options.keep_alive_timeout_ms;
        return c.head_start + options.header_timeout_ms;
      case State::kProcessing:
        return kNever;
      case State::kWriting:
        return c.state_since + options.write_timeout_ms;
      case State::kDraining:
        return c.state_since + options.linger_ms;
      case State::kStreaming:
        return c.out_pos < c.out.size() ? c.state_since + options.write_timeout_ms : kNever;
    }
    return kNever;
  }

  void scan(int64_t now) {
    std::vector<int> expired;
    std::vector<int> idle_streams;
    for (const auto& [fd, c] : conns) {
      if (deadline(*c) <= now) {
        expired.push_back(fd);
      } else if (c->state == State::kStreaming && c->out_pos >= c->out.size() &&
                 now - c->last_write >= options.stream_keepalive_ms) {
        idle_streams.push_back(fd);
      }
    }
    for (int fd : idle_streams) {
      Conn& c = *conns[fd];
      c.out = chunk(c.stream->keepalive(), c.chunked);
      c.out_pos = 0;
      c.state_since = now;
      c.last_write = now;  // even when the keep-alive is empty: one attempt per interval
      stream_flush(c, now);
    }
    for (int fd : expired) {
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      if (c.state == State::kReading && !c.parser.idle()) {
        answer(c,
               http1_serialize(
                   refuse(408, c.parser.reading_body() ? "the request body did not arrive in time"
                                                       : "the request head did not arrive in time"),
                   1, false),
               true, now);
      } else {
        close_conn(fd);  // idle, a write that did not finish, or a drain that is over
      }
    }
    if (accept_paused_until != 0 && now >= accept_paused_until) {
      accept_paused_until = 0;
      epoll_event ev{};
      ev.data.fd = listen_fd;
      ev.events = EPOLLIN;
      (void)::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &ev);
    }
  }

  // ---- the loop ----

  void run_loop() {
    std::vector<epoll_event> events(256);
    while (!stopping.load()) {
      int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                           static_cast<int>(kScanEveryMs));
      int64_t now = steady_ms();
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        uint32_t ev = events[i].events;
        if (fd == listen_fd) {
          accept_all(now);
          continue;
        }
        if (fd == wake_fd) {
          uint64_t v = 0;
          (void)!::read(wake_fd, &v, sizeof v);
          std::deque<Done> ready;
          std::vector<std::pair<int, uint64_t>> pumped;
          {
            std::lock_guard<std::mutex> lock(done_mu);
            ready.swap(done);
            pumped.swap(stream_ready);
          }
          for (Done& d : ready) on_done(std::move(d), now);
          for (const auto& [sfd, sid] : pumped) {
            auto s = conns.find(sfd);
            if (s != conns.end() && s->second->id == sid && s->second->state == State::kStreaming) {
              pump_stream(*s->second, now);
            }
          }
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Conn& c = *it->second;
        if (ev & (EPOLLERR | EPOLLHUP)) {
          close_conn(fd);
          continue;
        }
        switch (c.state) {
          case State::kReading:
            on_readable(c, now);
            break;
          case State::kWriting:
            if (ev & EPOLLOUT) on_writable(c, now);
            break;
          case State::kDraining:
            drain(c);
            break;
          case State::kProcessing:
            break;
          case State::kStreaming:
            on_stream_event(c, ev, now);
            break;
        }
      }
      if (now >= next_scan) {
        scan(now);
        next_scan = now + kScanEveryMs;
      }
    }
  }

  // Answers `job` and writes the answer; then, while the connection's next request arrives within
  // `hot_connection_ms`, no other request waits and another worker is idle, answers that one too
  // (on a busy keep-alive connection one thread wake-up per request instead of two). Anything but a
  // complete request (a partial head, a refusal, the end) is left in the parser for the loop.
  void serve_hot(Job& job, Done* d) {
    Http1Request request = std::move(job.request);
    for (;;) {
      Http1Response response;
      StreamSlot slot;
      tl_stream_slot = &slot;
      tl_request_fd = job.fd;
      try {
        response = handler(request, job.peer);
      } catch (...) {  // the handler catches its own; this keeps a worker alive regardless
        response = refuse(500, "internal error");
        slot.stream.reset();
      }
      tl_stream_slot = nullptr;
      tl_request_fd = -1;
      if (slot.stream && request.method == "HEAD") {
        slot.stream->end_by_front();  // a HEAD gets the head alone, as any other answer
        slot.stream.reset();
      }
      if (slot.stream) {
        // The answer is the head of a stream: the loop owns the connection from here on.
        d->chunked = request.minor_version >= 1;
        d->bytes = stream_head(response, d->chunked);
        d->stream = std::move(slot.stream);
        d->written = 0;
        d->close = false;
        ++d->answered;
        write_now(d);
        return;
      }
      const bool keep = job.answered + d->answered + 1 < options.keep_alive_max_requests &&
                        request.keep_alive && !http1_response_closes(response);
      d->bytes = http1_serialize(response, request.minor_version, keep, request.method == "HEAD");
      d->written = 0;
      d->close = !keep;
      ++d->answered;
      // The socket is this worker's until the Done is handed back: write what it takes now (all
      // of it, usually); the loop writes the rest under the write deadline.
      write_now(d);
      if (d->failed || d->close || d->written < d->bytes.size()) return;
      if (options.hot_connection_ms <= 0 || stopping.load()) return;
      // With an inline handler, the loop answers a connection's next request without any thread
      // hand-off: keep a connection here only while inline answers are paused. (Otherwise one
      // pause would leave a busy connection with the workers, a wake-up per request, for good.)
      if (inline_handler && steady_ms() >= inline_paused_until.load()) return;
      {
        // Only while another worker is idle: a new request must never wait for a hot connection
        // (nor be shed because of one).
        std::lock_guard<std::mutex> lock(mu);
        if (!jobs.empty() || idle_workers == 0) return;  // the connection goes back to the loop
      }
      Http1Step step = job.conn->parser.next();  // a pipelined request may be there already
      if (std::holds_alternative<Http1NeedMore>(step) && job.conn->parser.idle()) {
        pollfd p{d->fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(options.hot_connection_ms)) != 1 ||
            (p.revents & POLLIN) == 0) {
          return;
        }
        char buf[kReadChunk];
        ssize_t n = ::recv(d->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) return;  // the end or an error: the loop sees it again and closes
        job.conn->parser.feed(std::string_view(buf, static_cast<std::size_t>(n)));
        step = job.conn->parser.next();
      }
      if (std::holds_alternative<Http1SendContinue>(step)) {
        // The loop's parser would not say it again: say it here and let the loop read the body.
        (void)::send(d->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL | MSG_DONTWAIT);
        return;
      }
      auto* next = std::get_if<Http1Request>(&step);
      if (next == nullptr) return;  // need more, or a failure the parser repeats to the loop
      request = std::move(*next);
    }
  }

  static void write_now(Done* d) {
    while (d->written < d->bytes.size()) {
      ssize_t n = ::send(d->fd, d->bytes.data() + d->written, d->bytes.size() - d->written,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        d->written += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      d->failed = n < 0 && errno != EAGAIN && errno != EWOULDBLOCK;
      break;
    }
  }

  // ---- streams ----

  void start_stream(Conn& c, Done d, int64_t now) {
    c.requests += d.answered;
    c.state = State::kStreaming;
    c.state_since = now;
    c.last_write = now;
    c.out = std::move(d.bytes);
    c.out_pos = d.written;
    c.close_after_write = false;
    c.chunked = d.chunked;
    c.stream = std::move(d.stream);
    streams.fetch_add(1);
    const int fd = c.fd;
    const uint64_t id = c.id;
    c.stream->attach(
        [this, fd, id] {
          {
            std::lock_guard<std::mutex> lock(done_mu);
            stream_ready.emplace_back(fd, id);
          }
          uint64_t one = 1;
          (void)!::write(wake_fd, &one, sizeof one);
        },
        options.max_stream_buffer_bytes);
    pump_stream(c, now);  // what the producer queued before the loop took the connection
  }

  // Moves the producer's queued bytes (and its end) into the write buffer and writes.
  void pump_stream(Conn& c, int64_t now) {
    HttpStream::Drained d = c.stream->drain();
    if (c.close_after_write) return;  // already ending
    if (c.out_pos >= c.out.size()) {
      c.out.clear();
      c.out_pos = 0;
      c.state_since = now;
    }
    c.out += chunk(d.bytes, c.chunked);
    if (d.end) {
      if (c.chunked) c.out += "0\r\n\r\n";
      c.close_after_write = true;
    }
    stream_flush(c, now);
  }

  // Writes what the socket takes; at the end of an ending stream, the lingering close.
  void stream_flush(Conn& c, int64_t now) {
    while (c.out_pos < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<std::size_t>(n);
        c.last_write = now;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch(c, EPOLLIN | EPOLLRDHUP | EPOLLOUT);
        return;
      }
      close_conn(c.fd);
      return;
    }
    std::string().swap(c.out);
    c.out_pos = 0;
    if (c.close_after_write) {
      c.stream->end_by_front();
      c.stream.reset();
      streams.fetch_sub(1);
      ::shutdown(c.fd, SHUT_WR);
      c.state = State::kDraining;
      c.state_since = now;
      watch(c, EPOLLIN | EPOLLRDHUP);
      return;
    }
    watch(c, EPOLLIN | EPOLLRDHUP);
  }

  // A stream's socket: writable (the rest of a write), or readable (a client sends nothing on a
  // stream: its bytes are dropped; its end ends the stream).
  void on_stream_event(Conn& c, uint32_t ev, int64_t now) {
    if (ev & EPOLLOUT) {
      stream_flush(c, now);
      auto it = conns.find(c.fd);
      if (it == conns.end() || it->second.get() != &c || c.state != State::kStreaming) return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP)) {
      for (int i = 0; i < 16; ++i) {
        ssize_t n = ::recv(c.fd, scratch.data(), scratch.size(), 0);
        if (n > 0) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        return close_conn(c.fd);  // the client left
      }
    }
  }

  // stop(): every open stream ends with its farewell and the body's end, written as far as the
  // socket takes it at once.
  void end_streams() {
    for (const auto& [fd, c] : conns) {
      if (c->state != State::kStreaming || !c->stream) continue;
      std::string bytes = c->out.substr(std::min(c->out_pos, c->out.size()));
      HttpStream::Drained d = c->stream->drain();
      bytes += chunk(d.bytes, c->chunked);
      if (!d.end) bytes += chunk(c->stream->farewell(), c->chunked);
      if (c->chunked) bytes += "0\r\n\r\n";
      (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::shutdown(fd, SHUT_WR);
    }
  }

  void run_worker() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        ++idle_workers;
        cv.wait(lock, [&] { return !jobs.empty() || workers_stop; });
        --idle_workers;
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      Done d{job.fd, job.id, {}, 0, false, true, 0};
      serve_hot(job, &d);
      {
        std::lock_guard<std::mutex> lock(done_mu);
        done.push_back(std::move(d));
      }
      uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof one);
    }
  }
};

HttpFront::HttpFront(HttpFrontOptions options, HttpHandler handler, HttpRefusal refuse,
                     HttpOverloaded overloaded, HttpInlineHandler inline_handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), std::move(refuse),
                                   std::move(overloaded), std::move(inline_handler))) {}

HttpFront::~HttpFront() { stop(); }

Status HttpFront::start() {
  Impl& s = *impl_;
  if (s.started) return Error(ErrorCode::kInvalidArgument, "http front: already started");
  const HttpFrontOptions& o = s.options;
  if (o.worker_threads < 1 || o.max_queued_requests < 1 || o.header_timeout_ms < 1 ||
      o.body_timeout_ms < 1 || o.keep_alive_timeout_ms < 1 || o.write_timeout_ms < 1 ||
      o.linger_ms < 1 || o.max_connections < 1 || o.max_connections_per_peer < 1 ||
      o.keep_alive_max_requests < 1 || o.inline_budget_us < 1 || o.inline_pause_ms < 0 ||
      !s.handler || !s.refuse || !s.overloaded) {
    return Error(ErrorCode::kInvalidArgument, "http front: invalid options");
  }
  Status bound = s.bind_and_listen();
  if (!bound.ok()) return bound;
  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  s.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.epoll_fd < 0 || s.wake_fd < 0) {
    return Error(ErrorCode::kResourceUnavailable,
                 std::string("http front: ") + std::strerror(errno));
  }
  for (int fd : {s.listen_fd, s.wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    (void)::epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  s.started = true;
  for (int i = 0; i < o.worker_threads; ++i) s.workers.emplace_back([&s] { s.run_worker(); });
  s.loop_thread = std::thread([&s] { s.run_loop(); });
  return Status::Ok();
}

void HttpFront::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopping.exchange(true)) {
    if (!s.started) {
      for (int* fd : {&s.listen_fd, &s.epoll_fd, &s.wake_fd}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
      }
    }
    return;
  }
  uint64_t one = 1;
  (void)!::write(s.wake_fd, &one, sizeof one);
  if (s.loop_thread.joinable()) s.loop_thread.join();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.workers_stop = true;
    s.jobs.clear();  // not started: their connections close below
  }
  s.cv.notify_all();
  for (std::thread& t : s.workers) t.join();
  s.end_streams();
  std::vector<int> fds;
  for (const auto& [fd, c] : s.conns) fds.push_back(fd);
  for (int fd : fds) s.close_conn(fd);
  for (int* fd : {&s.listen_fd, &s.epoll_fd, &s.wake_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

int HttpFront::port() const { return impl_->bound_port; }

std::size_t HttpFront::open_streams() const { return impl_->streams.load(); }

std::shared_ptr<HttpStream> HttpFront::open_stream(std::string keepalive, std::string farewell) {
  if (tl_stream_slot == nullptr) return nullptr;
  tl_stream_slot->stream = std::make_shared<HttpStream>(std::move(keepalive), std::move(farewell));
  return tl_stream_slot->stream;
}

std::function<bool()> HttpFront::client_gone() {
  const int fd = tl_request_fd;
  if (fd < 0) return [] { return false; };
  // The worker holds the socket while its handler runs (the loop neither reads nor closes it), so
  // a peek is the only reader: 0 is the client's FIN, an error its reset.
  return [fd] {
    char byte = 0;
    const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  };
}

// ---- HttpStream
// ----------------------------------------------------------------------------------

bool HttpStream::send(std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_ || producer_closed_) return false;
  if (queued_.size() + bytes.size() > max_buffer_) {
    // A reader that does not keep up: the stream is cut (ended cleanly), never grown.
    producer_closed_ = true;
    if (wake_) wake_();
    return false;
  }
  queued_ += bytes;
  if (wake_) wake_();
  return true;
}

void HttpStream::close(std::string last) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_ || producer_closed_) return;
  queued_ += last;
  producer_closed_ = true;
  if (wake_) wake_();
}

bool HttpStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_ || producer_closed_;
}

HttpStream::Drained HttpStream::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  Drained d{std::move(queued_), producer_closed_ || ended_};
  queued_.clear();
  return d;
}

void HttpStream::attach(std::function<void()> wake, std::size_t max_buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  max_buffer_ = max_buffer;
  if (!ended_) wake_ = std::move(wake);
}

void HttpStream::end_by_front() {
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  wake_ = nullptr;
}

std::string HttpStream::farewell() const {
  std::lock_guard<std::mutex> lock(mu_);
  return farewell_;
}

int64_t HttpFront::shed_count() const { return impl_->shed.load(); }

int64_t HttpFront::inline_count() const { return impl_->inlined.load(); }

int64_t HttpFront::inline_paused_count() const { return impl_->inline_paused.load(); }

}  // namespace quiver
