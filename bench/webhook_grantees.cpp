// Benchmark (not a test): a refresh webhook for a per-member connection with N grantees, and the
// discovery read that now also reads the connection's mark, each before (the scripts as they were
// at the commit given with --before-*) and after (the scripts compiled in), side by side in one
// run on one redis-server of its own.
//
//   webhook_grantees --before-webhook FILE --before-read FILE [--n 50000] [--runs 5] [--g 50]
//                    [--reads 2000] [--redis-server redis-server] [--dir /tmp]
//
// Webhook: one per-member connection with N grantees, each with a cached manifest (what the
// before-script marks), one webhook target without a principal. Every run starts from the same
// state (the per-member marks, gates and the stream of the run before deleted, outside the
// measurement); the runs alternate before/after. Measured per webhook: Redis' own time for the
// script from INFO commandstats (`eval` usec, which includes the commands the script ran) and the
// client's wall time for the round trip; medians over the runs. Read: one member granted G
// per-member connections with data, `reads` discovery reads with each script (EVAL_RO, in
// alternating rounds), Redis time per read. The server is shut down and its directory deleted at
// the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_redis_server.h"
#include "shared/discovery_redis.h"
#include "shared/redis_keys.h"

namespace {

using quiver::Principal;
using quiver::RedisCommand;
using quiver::RedisKeys;
using Clock = std::chrono::steady_clock;

constexpr char kNs[] = "bench";
constexpr int64_t kAt = 1'790'000'000'000;

std::string member_id(int64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "m%07lld", static_cast<long long>(i));
  return buf;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_ok(redisReply* r, const char* what) {
  if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
    std::fprintf(stderr, "%s: %s\n", what, r != nullptr ? r->str : "no reply");
    std::exit(1);
  }
  freeReplyObject(r);
}

// Sends the pipelined commands and reads their replies, failing on the first error.
void pipeline(redisContext* c, const std::vector<RedisCommand>& commands, const char* what) {
  for (std::size_t i = 0; i < commands.size(); i += 1000) {
    const std::size_t end = std::min(commands.size(), i + 1000);
    for (std::size_t j = i; j < end; ++j) bench::append_argv(c, commands[j]);
    for (std::size_t j = i; j < end; ++j) {
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) {
        std::fprintf(stderr, "%s: connection failed\n", what);
        std::exit(1);
      }
      expect_ok(static_cast<redisReply*>(reply), what);
    }
  }
}

RedisCommand manifest_hash(const std::string& key) {
  return {"HSET",        key,
          "body",        std::string(64, 'a'),
          "etag",        "sha256-x",
          "config_hash", "hash-pm",
          "fence",       "1",
          "fetched_at",  std::to_string(kAt - 60'000),
          "fresh_until", std::to_string(kAt + 840'000),
          "expires_at",  std::to_string(kAt + 86'340'000)};
}

struct Sample {
  int64_t redis_us = 0;
  int64_t wall_us = 0;
  std::size_t results = 0;
};

int64_t script_usec(const bench::RedisInfo& info) {
  return info.command("eval").usec + info.command("eval_ro").usec;
}

// One EVAL, its Redis time (commandstats) and wall time; the reply's result count (webhook).
Sample run_once(redisContext* c, const RedisCommand& command) {
  const bench::RedisInfo before = bench::read_info(c);
  const Clock::time_point t0 = Clock::now();
  redisReply* r = bench::command_argv(c, command);
  const Clock::time_point t1 = Clock::now();
  const bench::RedisInfo after = bench::read_info(c);
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
    std::fprintf(stderr, "script failed: %s\n",
                 r != nullptr && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    std::exit(1);
  }
  Sample s;
  if (r->elements == 2 && r->element[1]->type == REDIS_REPLY_ARRAY) {
    s.results = r->element[1]->elements / 4;
  }
  freeReplyObject(r);
  s.redis_us = script_usec(after) - script_usec(before);
  s.wall_us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
  return s;
}

int64_t median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string redis_server = "redis-server", dir = "/tmp", before_webhook, before_read;
  int64_t n = 50'000, runs = 5, g = 50, reads = 2'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--n") {
      n = std::atoll(value.c_str());
    } else if (flag == "--runs") {
      runs = std::atoll(value.c_str());
    } else if (flag == "--g") {
      g = std::atoll(value.c_str());
    } else if (flag == "--reads") {
      reads = std::atoll(value.c_str());
    } else if (flag == "--redis-server") {
      redis_server = value;
    } else if (flag == "--dir") {
      dir = value;
    } else if (flag == "--before-webhook") {
      before_webhook = read_file(value);
    } else if (flag == "--before-read") {
      before_read = read_file(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (before_webhook.empty() || before_read.empty() || n < 1 || runs < 1 || g < 1 || reads < 1) {
    std::fprintf(stderr,
                 "usage: webhook_grantees --before-webhook FILE --before-read FILE "
                 "[--n N] [--runs R] [--g G] [--reads K]\n");
    return 2;
  }
  bench::RedisServerProcess server = bench::start_redis_server(redis_server, dir, "webhook");
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) {
    std::fprintf(stderr, "cannot connect to the benchmark's redis-server\n");
    server.stop();
    return 1;
  }
  const RedisKeys keys = *RedisKeys::create(kNs);

  // The namespace: ready, one per-member connection `pm` with N grantees, each with data.
  std::vector<RedisCommand> load = {
      {"SET", keys.namespace_record(), "ready:1"},
      {"HSET", *keys.conn("pm"), "credential_mode", "per_member", "config_hash", "hash-pm", "name",
       "pm", "transport", "stdio", "updated_at", "1"}};
  std::vector<RedisCommand> reset;  // what a before-run leaves, deleted between runs
  for (int64_t i = 0; i < n; ++i) {
    const Principal p = *Principal::member(member_id(i));
    load.push_back({"SADD", *keys.grantees("pm"), p.str()});
    load.push_back(manifest_hash(*keys.manifest("pm", p)));
    reset.push_back({"UNLINK", *keys.invalidated("pm", p), *keys.revalidate_gate("pm", p)});
  }
  reset.push_back({"UNLINK", keys.revalidate_stream(), *keys.marked("pm")});
  // The reader: member m0000000 granted G per-member connections with data.
  const Principal reader = *Principal::member(member_id(0));
  for (int64_t k = 0; k < g; ++k) {
    char cid[16];
    std::snprintf(cid, sizeof cid, "r%03lld", static_cast<long long>(k));
    load.push_back({"SADD", *keys.grants(reader), cid});
    load.push_back({"HSET", *keys.conn(cid), "credential_mode", "per_member", "config_hash",
                    "hash-pm", "name", cid, "transport", "stdio", "updated_at", "1"});
    load.push_back(manifest_hash(*keys.manifest(cid, reader)));
  }
  const Clock::time_point load_start = Clock::now();
  pipeline(c, load, "load");
  std::printf("loaded %lld grantees and %lld granted connections in %.1f s\n",
              static_cast<long long>(n), static_cast<long long>(g),
              std::chrono::duration<double>(Clock::now() - load_start).count());

  quiver::WebhookRefreshRequest request;
  request.targets.push_back({"pm", std::nullopt, "deploy"});
  quiver::EnqueueOptions options;
  options.stream_maxlen = 2 * n;  // the before-script's entries all kept, as a real bound would
  std::vector<int64_t> redis[2], wall[2];
  std::size_t results[2] = {0, 0};
  for (int64_t run = 0; run < runs; ++run) {
    for (int after = 0; after < 2; ++after) {
      pipeline(c, reset, "reset");
      const quiver::WebhookVerified verified{kAt, "bench:" + std::to_string(run * 2 + after),
                                             300'000};
      RedisCommand command =
          *quiver::webhook_refresh_command(keys, verified, request, kAt, options);
      if (!after) command[1] = before_webhook;
      const Sample s = run_once(c, command);
      redis[after].push_back(s.redis_us);
      wall[after].push_back(s.wall_us);
      results[after] = s.results;
    }
  }
  std::printf("\nwebhook, one per-member connection, %lld grantees (median of %lld runs)\n",
              static_cast<long long>(n), static_cast<long long>(runs));
  std::printf("  %-8s %12s %12s %10s\n", "script", "redis us", "wall us", "results");
  const char* names[2] = {"before", "after"};
  for (int after = 0; after < 2; ++after) {
    std::printf("  %-8s %12lld %12lld %10zu\n", names[after],
                static_cast<long long>(median(redis[after])),
                static_cast<long long>(median(wall[after])), results[after]);
  }
  std::printf("  redis time after/before: %.6f (before/after: %.0fx)\n",
              static_cast<double>(median(redis[1])) / std::max<int64_t>(1, median(redis[0])),
              static_cast<double>(median(redis[0])) / std::max<int64_t>(1, median(redis[1])));

  // The read: the after-script reads the connection's mark beside the principal's.
  RedisCommand read = *quiver::discovery_read_command(keys, reader);
  RedisCommand read_before = read;
  read_before[1] = before_read;
  int64_t read_us[2] = {0, 0};
  for (int after = 0; after < 2; ++after) {  // warm: each script compiled and cached
    for (int64_t i = 0; i < 10; ++i) {
      freeReplyObject(bench::command_argv(c, after ? read : read_before));
    }
  }
  // Interleaved in rounds of reads / 20, so that the machine's load weighs on both alike.
  const int64_t round = std::max<int64_t>(1, reads / 20);
  for (int64_t done = 0; done < reads; done += round) {
    for (int after = 0; after < 2; ++after) {
      const RedisCommand& command = after ? read : read_before;
      const bench::RedisInfo before = bench::read_info(c);
      for (int64_t i = done; i < std::min(reads, done + round); ++i) {
        redisReply* r = bench::command_argv(c, command);
        if (r == nullptr || r->type != REDIS_REPLY_ARRAY) {
          std::fprintf(stderr, "discovery read failed\n");
          return 1;
        }
        freeReplyObject(r);
      }
      read_us[after] += script_usec(bench::read_info(c)) - script_usec(before);
    }
  }
  std::printf("\ndiscovery read, G = %lld per-member connections (%lld reads each)\n",
              static_cast<long long>(g), static_cast<long long>(reads));
  for (int after = 0; after < 2; ++after) {
    std::printf("  %-8s %10.1f redis us per read\n", names[after],
                static_cast<double>(read_us[after]) / static_cast<double>(reads));
  }
  std::printf("  redis time after/before: %.3f\n",
              static_cast<double>(read_us[1]) / std::max<int64_t>(1, read_us[0]));
  redisFree(c);
  server.stop();
  return 0;
}
