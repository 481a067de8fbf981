#include "shared/preferences_redis.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "shared/schema_assets.h"

namespace quiver {

namespace {

constexpr char kScript[] = "lua/preferences_merge.lua";

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}
Error bad_reply(std::string message) {
  return Error(ErrorCode::kInvalidReply, "preferences_merge.lua: " + std::move(message));
}

}  // namespace

Result<RedisCommand> merge_preferences_command(const RedisKeys& keys, std::string_view cid,
                                               const Principal& principal,
                                               const std::vector<PreferenceRow>& rows) {
  Result<std::string> prefs = keys.prefs(cid, principal);
  if (!prefs.ok()) return prefs.error();
  Result<std::string> disabled = keys.disabled(cid, principal);
  if (!disabled.ok()) return disabled.error();
  std::string_view text = schema_asset(kScript);
  if (text.empty()) return Error(ErrorCode::kInternal, "schema/lua/preferences_merge.lua missing");
  // Key layout v2 has no epoch: three keys, one slot (the script's header).
  const bool epoch = keys.key_layout() == KeyLayout::kV1;
  RedisCommand argv = {"EVAL", std::string(text), epoch ? "4" : "3",
                       *prefs, *disabled,         *keys.version_of(cid, principal)};
  if (epoch) argv.push_back(keys.epoch());
  argv.reserve(argv.size() + 2 * rows.size());
  for (const PreferenceRow& row : rows) {
    if (row.resource_id != cid || row.principal != principal) {
      return invalid("merge_preferences: a row of another connection or principal");
    }
    if (row.capability_key.empty() || row.capability_key.size() > kMaxCapabilityKeyBytes) {
      return invalid("merge_preferences: capability key must be 1 to 2048 bytes");
    }
    if (row.first_seen_at < 0 || row.last_seen_at < row.first_seen_at || row.toggled_at < 0) {
      return invalid("merge_preferences: times out of order");
    }
    argv.push_back(overlay_member(row.capability_type, row.capability_key));
    argv.push_back(preference_entry_value(row));
  }
  return argv;
}

Result<MergedPreferences> parse_merge_preferences_reply(const RespValue& reply,
                                                        std::string_view cid,
                                                        const Principal& principal) {
  if (reply.is_error()) {
    return Error(ErrorCode::kStoreUnavailable,
                 "redis preferences_merge.lua: " + std::string(*reply.error_message()));
  }
  const std::vector<RespValue>* e = reply.as_array();
  if (e == nullptr || e->size() != 4 || (*e)[0].as_string() != std::string_view("merged")) {
    return bad_reply("not {'merged', epoch, changed, rows}");
  }
  std::optional<int64_t> epoch = (*e)[1].as_int();
  std::optional<int64_t> changed = (*e)[2].as_int();
  const std::vector<RespValue>* flat = (*e)[3].as_array();
  if (!epoch || !changed || flat == nullptr || flat->size() % 2 != 0) {
    return bad_reply("epoch, changed or rows malformed");
  }
  MergedPreferences out;
  out.epoch = *epoch;
  out.overlay_changed = *changed != 0;
  for (std::size_t i = 0; i < flat->size(); i += 2) {
    std::optional<std::string_view> field = (*flat)[i].as_string();
    std::optional<std::string_view> value = (*flat)[i + 1].as_string();
    if (!field || !value) return bad_reply("a row is not two strings");
    Result<PreferenceRow> row = parse_preference_entry(cid, principal, *field, *value);
    if (!row.ok()) return bad_reply(row.error().message);
    out.rows.push_back(std::move(*row));
  }
  std::sort(out.rows.begin(), out.rows.end(), [](const PreferenceRow& a, const PreferenceRow& b) {
    return std::tie(a.capability_type, a.capability_key) <
           std::tie(b.capability_type, b.capability_key);
  });
  return out;
}

}  // namespace quiver
