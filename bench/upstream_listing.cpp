// Benchmark (not a test): list many upstreams with bounded concurrency, some hung, some slow,
// and compare the wall time with a sequential listing and with the ideal bound.
//
//   upstream_listing --fake bench/fake_upstream [--n 100] [--hang 10] [--slow 20] [--slow-ms 300]
//                    [--concurrency 5] [--deadline-ms 3500] [--skip-sequential]
//
// Every upstream is a `fake_upstream` child over stdio (a real process, pipe and MCP session;
// see fake_upstream.cpp). Rounds, all through one UpstreamPool:
//   cold      first listing: spawn, handshake, tools/list, in a shuffled order (fixed seed)
//   warm      the same again on the kept sessions
//   warm, hung first / hung last   the same on kept sessions, hung upstreams at either end
//   sequential  concurrency 1 on kept sessions (the baseline a gateway without a pool pays)
// Ideal: a hung upstream costs its deadline, a slow one its delay, a fast one its measured mean
// (warm); with c workers nothing finishes before sum/c (perfect packing), nor before the
// per-class waves ⌈N_class / c⌉ × latency_class added up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "native-agent/engine/upstream_pool.h"

namespace {

using quiver::ListKind;
using quiver::ListState;
using quiver::UpstreamListResult;
using quiver::UpstreamPool;
using quiver::UpstreamPoolOptions;
using quiver::UpstreamSpec;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Options {
  std::string fake;
  int n = 100, hang = 10, slow = 20, slow_ms = 300, concurrency = 5;
  int64_t deadline_ms = 3500;
  bool sequential = true;
};

struct Round {
  std::string name;
  int concurrency = 0;
  int64_t wall_ms = 0;
  int ok = 0, timed_out = 0, failed = 0;
  int64_t sum_ms[3] = {0, 0, 0};  // per Kind: the listings' elapsed time
  int count[3] = {0, 0, 0};
  double mean_ms(int kind) const { return count[kind] ? double(sum_ms[kind]) / count[kind] : 0; }
};

enum class Kind { kFast, kSlow, kHung };

Round run(UpstreamPool& pool, const std::string& name, const std::vector<std::string>& order,
          const std::vector<Kind>& kinds, int concurrency, int64_t deadline_ms) {
  Round r;
  r.name = name;
  r.concurrency = concurrency;
  int64_t start = now_ms();
  std::vector<UpstreamListResult> results = pool.list_many(order, concurrency, deadline_ms);
  r.wall_ms = now_ms() - start;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& res = results[i];
    int index = std::atoi(res.name.c_str() + 1);
    if (!res.listing.ok()) {
      ++r.failed;
      std::fprintf(stderr, "%s: %s\n", res.name.c_str(), res.listing.error().message.c_str());
      continue;
    }
    if (res.listing->list(ListKind::kTools).state == ListState::kOk) {
      ++r.ok;
    } else {
      ++r.timed_out;
    }
    r.sum_ms[static_cast<int>(kinds[index])] += res.elapsed_ms;
    ++r.count[static_cast<int>(kinds[index])];
  }
  return r;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) -> const char* {
      if (std::strcmp(argv[i], flag) != 0 || i + 1 >= argc) return nullptr;
      return argv[++i];
    };
    if (const char* v = next("--fake")) {
      o.fake = v;
    } else if (const char* v = next("--n")) {
      o.n = std::atoi(v);
    } else if (const char* v = next("--hang")) {
      o.hang = std::atoi(v);
    } else if (const char* v = next("--slow")) {
      o.slow = std::atoi(v);
    } else if (const char* v = next("--slow-ms")) {
      o.slow_ms = std::atoi(v);
    } else if (const char* v = next("--concurrency")) {
      o.concurrency = std::atoi(v);
    } else if (const char* v = next("--deadline-ms")) {
      o.deadline_ms = std::atoll(v);
    } else if (std::strcmp(argv[i], "--skip-sequential") == 0) {
      o.sequential = false;
    } else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of the source)\n",
                   argv[i]);
      return 2;
    }
  }
  if (o.fake.empty() || o.n < 1 || o.hang + o.slow > o.n || o.concurrency < 1) {
    std::fprintf(stderr, "usage: upstream_listing --fake PATH [--n N --hang H --slow S ...]\n");
    return 2;
  }

  UpstreamPoolOptions pool_options;
  pool_options.max_concurrent_listings = o.concurrency;
  pool_options.upstream.list_timeout_ms = o.deadline_ms;
  UpstreamPool pool(pool_options);
  std::vector<Kind> kinds(o.n, Kind::kFast);
  std::vector<std::string> names;
  for (int i = 0; i < o.n; ++i) {
    if (i < o.hang) {
      kinds[i] = Kind::kHung;
    } else if (i < o.hang + o.slow) {
      kinds[i] = Kind::kSlow;
    }
    std::vector<std::string> args;
    if (kinds[i] == Kind::kHung) args = {"--hang"};
    if (kinds[i] == Kind::kSlow) args = {"--delay-ms", std::to_string(o.slow_ms)};
    names.push_back("u" + std::to_string(i));
    if (!pool.put(UpstreamSpec::stdio(names.back(), o.fake, args)).ok()) return 1;
  }
  std::vector<std::string> shuffled = names;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(42));
  std::vector<std::string> hung_first = names;  // u0.. are the hung ones
  std::vector<std::string> hung_last(names.rbegin(), names.rend());

  std::vector<Round> rounds;
  rounds.push_back(run(pool, "cold (spawn + handshake + list), shuffled", shuffled, kinds,
                       o.concurrency, o.deadline_ms));
  rounds.push_back(
      run(pool, "warm (kept sessions), shuffled", shuffled, kinds, o.concurrency, o.deadline_ms));
  rounds.push_back(run(pool, "warm, hung first", hung_first, kinds, o.concurrency, o.deadline_ms));
  rounds.push_back(run(pool, "warm, hung last", hung_last, kinds, o.concurrency, o.deadline_ms));
  if (o.sequential) {
    rounds.push_back(run(pool, "warm, sequential", shuffled, kinds, 1, o.deadline_ms));
  }

  // Latencies as measured on kept sessions (a hung upstream costs whichever comes first: the
  // session's per-request timeout or the listing deadline).
  const Round& warm = rounds[1];
  const int counts[3] = {o.n - o.hang - o.slow, o.slow, o.hang};
  double work = 0, waves = 0;
  for (int k = 0; k < 3; ++k) {
    work += counts[k] * warm.mean_ms(k);
    waves += ceil_div(counts[k], o.concurrency) * warm.mean_ms(k);
  }
  double packing = work / o.concurrency;
  int fast = counts[0];

  std::printf(
      "upstreams: %d (%d hung, %d slow at %d ms, %d fast); concurrency %d; "
      "deadline %lld ms\n\n",
      o.n, o.hang, o.slow, o.slow_ms, fast, o.concurrency, static_cast<long long>(o.deadline_ms));
  std::printf("| round | concurrency | wall time | listed | timed out | failed |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Round& r : rounds) {
    std::printf("| %s | %d | %.2f s | %d | %d | %d |\n", r.name.c_str(), r.concurrency,
                r.wall_ms / 1000.0, r.ok, r.timed_out, r.failed);
  }
  std::printf("\nmeasured per listing (warm, mean): fast %.1f ms, slow %.1f ms, hung %.1f ms\n",
              warm.mean_ms(0), warm.mean_ms(1), warm.mean_ms(2));
  std::printf("sequential (sum of latencies): %.2f s\n", work / 1000.0);
  std::printf("ideal, perfect packing (sum / %d): %.2f s\n", o.concurrency, packing / 1000.0);
  std::printf("ideal, per-class waves (sum of ceil(N_class / %d) x latency): %.2f s\n",
              o.concurrency, waves / 1000.0);
  return 0;
}
