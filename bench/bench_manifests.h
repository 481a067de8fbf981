// Manifests and their records written straight into Redis for the benchmarks that read them
// (bench/bodies.cpp, bench/mcp_core.cpp): a manifest of a given size, a connection record, and a
// manifest record as the commit script writes it now (body apart, through the real fenced script)
// or wrote it before (body inline). Each command that fails ends the benchmark (status 1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <hiredis/hiredis.h>

#include "bench/bench_redis_server.h"
#include "shared/discovery_redis.h"
#include "shared/json.h"
#include "shared/lease.h"
#include "shared/manifest_record.h"
#include "shared/principal.h"
#include "shared/redis_keys.h"

namespace bench {

using quiver::Json;

[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "bench: %s\n", why.c_str());
  std::exit(1);
}

// A benchmark's "--name value" arguments, each name one of `defaults`' (whose values are used for
// those not given); exits on another name or a name without a value.
inline std::map<std::string, std::string> parse_args(int argc, char** argv,
                                                     std::map<std::string, std::string> defaults) {
  for (int i = 1; i < argc; i += 2) {
    auto it = defaults.find(argv[i]);
    if (it == defaults.end()) fail(std::string("unknown argument ") + argv[i]);
    if (i + 1 >= argc) fail(std::string(argv[i]) + " needs a value");
    it->second = argv[i + 1];
  }
  return defaults;
}

// One command; an error reply (or none) ends the benchmark.
inline std::string command(redisContext* c, const std::vector<std::string>& argv) {
  redisReply* r = bench::command_argv(c, argv);
  if (r == nullptr) fail("redis command failed");
  if (r->type == REDIS_REPLY_ERROR) fail(argv[0] + ": " + std::string(r->str, r->len));
  std::string out = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS
                        ? std::string(r->str, r->len)
                        : std::to_string(r->integer);
  if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    out = std::string(r->element[0]->str, r->element[0]->len);  // a script's outcome word
  }
  freeReplyObject(r);
  return out;
}

// ---- the data -----------------------------------------------------------------------------------

// A manifest of about `size` bytes: tools whose descriptions carry `marker`, in the manifest
// model's shape (each list {state, items, hashes, cache}).
inline std::string manifest_text(std::size_t size, const std::string& marker) {
  Json items = Json::array();
  Json hashes = Json::object();
  std::size_t bytes = 0;
  for (int i = 0; bytes < size; ++i) {
    std::string name = "tool_" + std::to_string(i);
    std::string description = "Does " + name + " for " + marker + ". " + std::string(900, 'x');
    Json item = Json::object({{"name", name},
                              {"description", description},
                              {"inputSchema", Json::object({{"type", "object"}})}});
    bytes += item.dump().size() + 60;
    items.push_back(std::move(item));
    hashes[name] = "sha256-" + std::string(43, 'A');
  }
  auto absent = [] {
    return Json::object({{"state", "absent"},
                         {"items", Json::array()},
                         {"hashes", Json::object()},
                         {"cache", Json::object()}});
  };
  Json m = Json::object();
  m["format"] = "quiver.manifest.v1";
  m["protocol_version"] = "2025-11-25";
  m["server"] = Json::object({{"name", "bench-" + marker}, {"version", "1.0.0"}});
  m["capabilities"] = Json::object();
  m["tools"] = Json::object({{"state", "ok"},
                             {"items", std::move(items)},
                             {"hashes", std::move(hashes)},
                             {"cache", Json::object()}});
  m["resources"] = absent();
  m["resource_templates"] = absent();
  m["prompts"] = absent();
  m["cache"] = Json::object();
  m["truncated"] = false;
  m["issues"] = Json::array();
  m["issues_omitted"] = 0;
  return quiver::json_text(m);
}

inline void put_connection(redisContext* c, const quiver::RedisKeys& keys, const std::string& cid,
                           const std::string& mode) {
  command(c, {"HSET", *keys.conn(cid), "config_hash", "h-" + cid, "credential_mode", mode, "name",
              cid, "transport", "http", "updated_at", "1"});
  command(c, {"SADD", keys.conns(), cid});
}

// The record as the commit script wrote it before bodies were stored apart (and the fence its
// lease left, as in the other layout).
inline void commit_inline(redisContext* c, const quiver::RedisKeys& keys, const std::string& cid,
                          const quiver::Principal& p, const std::string& text, int64_t now) {
  command(c, {"INCR", *keys.fence(cid, p)});
  command(c, {"HSET",        *keys.manifest(cid, p),
              "manifest",    text,
              "etag",        quiver::content_hash(text),
              "config_hash", "h-" + cid,
              "fence",       "1",
              "fetched_at",  std::to_string(now),
              "fresh_until", std::to_string(now + 900'000),
              "expires_at",  std::to_string(now + 86'400'000),
              "truncated",   "0",
              "attempt_at",  std::to_string(now)});
}

// The record through the real, fenced commit script (lease taken first), as agents write it now.
inline void commit_apart(redisContext* c, const quiver::RedisKeys& keys, const std::string& cid,
                         const quiver::Principal& p, const std::string& text, int64_t now) {
  quiver::LeaseKeys k{*keys.manifest(cid, p),
                      *keys.lease(cid, p),
                      *keys.fence(cid, p),
                      *keys.conn(cid),
                      keys.epoch(),
                      *keys.body(quiver::manifest_body_digest(text)),
                      keys.due(),
                      *quiver::due_member(cid, p),
                      *keys.version_of(cid, p)};
  const std::string token(32, 'b');
  redisReply* r = bench::command_argv(c, *quiver::acquire_lease_command(k, token));
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements < 2) fail("lease_acquire failed");
  const int64_t fence = r->element[1]->integer;
  freeReplyObject(r);
  quiver::ManifestWrite w;
  w.manifest = text;
  w.etag = quiver::content_hash(text);
  w.config_hash = "h-" + cid;
  w.fetched_at_ms = now;
  w.fresh_until_ms = now + 900'000;
  w.expires_at_ms = now + 86'400'000;
  if (command(c, *quiver::commit_manifest_command(k, quiver::Lease{fence, token}, w,
                                                  quiver::FencedWriteOptions{})) != "committed") {
    fail("manifest_commit refused");
  }
}

// A namespace ready for readers, `member` granted G shared connections c000, c001, ... each with a
// manifest of about `size` bytes committed at `now`, inline (as before bodies were stored apart)
// or apart; the manifests' bytes in all.
inline std::size_t seed_member(redisContext* c, const quiver::RedisKeys& keys,
                               const quiver::Principal& member, int g, std::size_t size,
                               int64_t now, bool inline_bodies) {
  command(c, {"SET", keys.namespace_record(), "ready:1"});
  std::size_t bytes = 0;
  for (int i = 0; i < g; ++i) {
    char cid[16];
    std::snprintf(cid, sizeof cid, "c%03d", i);
    put_connection(c, keys, cid, "shared");
    command(c, {"SADD", *keys.grants(member), cid});
    const std::string text = manifest_text(size, cid);
    bytes += text.size();
    if (inline_bodies) {
      commit_inline(c, keys, cid, quiver::Principal::shared(), text, now);
    } else {
      commit_apart(c, keys, cid, quiver::Principal::shared(), text, now);
    }
  }
  return bytes;
}

// The reader of the namespace benches: `g` - 1 shared connections (seed_member) and its own
// manifest of the per_member connection `team`, each of about `size` bytes, committed apart; the
// manifests' bytes in all.
inline std::size_t seed_reader_with_team(redisContext* c, const quiver::RedisKeys& keys,
                                         const quiver::Principal& reader, const std::string& team,
                                         int g, std::size_t size, int64_t now) {
  std::size_t chars = seed_member(c, keys, reader, g - 1, size, now, false);
  put_connection(c, keys, team, "per_member");
  command(c, {"SADD", *keys.grants(reader), team});
  command(c, {"SADD", *keys.grantees(team), reader.str()});
  const std::string team_text = manifest_text(size, team);
  commit_apart(c, keys, team, reader, team_text, now);
  return chars + team_text.size();
}

// A manifest record as field/value pairs (what bench members' records copy).
inline std::vector<std::string> record_fields(redisContext* c, const std::string& key) {
  redisReply* r = command_argv(c, {"HGETALL", key});
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements == 0) fail("no record " + key);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->elements; ++i) {
    out.emplace_back(r->element[i]->str, r->element[i]->len);
  }
  freeReplyObject(r);
  return out;
}

// Members m<from> .. m<to - 1>: each granted the per_member connection `cid` (its grants set and
// an entry of the connection's grantees), with its own copy of `fields` as its manifest record
// (generated keys, pipelined in batches); any error reply ends the benchmark.
inline void grant_members(redisContext* c, const quiver::RedisKeys& keys, const std::string& cid,
                          int64_t from, int64_t to, const std::vector<std::string>& fields) {
  constexpr int64_t kBatch = 2000;
  const std::string grantees = *keys.grantees(cid);
  for (int64_t start = from; start < to; start += kBatch) {
    const int64_t end = std::min(to, start + kBatch);
    int64_t sent = 0;
    for (int64_t i = start; i < end; ++i) {
      const quiver::Principal m = *quiver::Principal::member("m" + std::to_string(i));
      append_argv(c, {"SADD", *keys.grants(m), cid});
      append_argv(c, {"SADD", grantees, m.str()});
      std::vector<std::string> hset = {"HSET", *keys.manifest(cid, m)};
      hset.insert(hset.end(), fields.begin(), fields.end());
      append_argv(c, hset);
      sent += 3;
    }
    for (int64_t i = 0; i < sent; ++i) {
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) fail("pipelined write failed");
      auto* r = static_cast<redisReply*>(reply);
      if (r->type == REDIS_REPLY_ERROR) fail(std::string("pipelined write: ") + r->str);
      freeReplyObject(r);
    }
  }
}

}  // namespace bench
