#include "tests/support/hiredis_run.h"

#include <hiredis/hiredis.h>

namespace quiver::testing {
namespace {

RespValue to_resp(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      return RespValue::integer_value(r->integer);
    case REDIS_REPLY_STRING:
      return RespValue::bulk_string(std::string(r->str, r->len));
    case REDIS_REPLY_STATUS:
      return RespValue::simple_string(std::string(r->str, r->len));
    case REDIS_REPLY_ERROR:
      return RespValue::error(std::string(r->str, r->len));
    case REDIS_REPLY_ARRAY: {
      std::vector<RespValue> e;
      for (size_t i = 0; i < r->elements; ++i) e.push_back(to_resp(r->element[i]));
      return RespValue::array(std::move(e));
    }
    default:
      return RespValue::nil();
  }
}

}  // namespace

void RedisContextFree::operator()(redisContext* c) const { redisFree(c); }

RespValue run_argv(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> parts;
  std::vector<size_t> lengths;
  for (const std::string& a : argv) {
    parts.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), parts.data(), lengths.data()));
  if (reply == nullptr) return RespValue::error(std::string("transport: ") + c->errstr);
  RespValue out = to_resp(reply);
  freeReplyObject(reply);
  return out;
}

}  // namespace quiver::testing
