// The schema lint of issue 14: every key a script of schema/lua touches is one it declares.
//
// Redis 7 shebang scripts, cluster proxies and a slot being migrated route a script by the keys it
// declares; a key a script builds itself (from ARGV or by string concatenation) is invisible to
// them. So every redis.call / redis.pcall in every compiled-in script is parsed, and each argument
// in a key position of its command (the table below, from the Redis command reference) must be a
// `KEYS[...]` expression. A command missing from the table fails the lint: add its key positions.
//
// Exceptions are listed, each with its reason, and the list can only shrink: an exception that no
// longer matches any call fails too (a whole-script exception: a script that would pass). Today's
// are reads of a key the edge's least-privilege Redis user may only read
// (schema/redis-acl-edge.txt): Redis 7 checks the keys an EVAL declares for read AND write access
// (EVAL_RO for read only), so a script that writes cannot declare a key the edge may only read. Key
// layout v2 (docs/design.md) removes them.
//
// Two v1 scripts are exempt as a whole, because what they read depends on data they read first:
// discovery_read.lua (a member's page of connections) and webhook_refresh.lua (the principals a
// webhook names). Key layout v2 replaces the first with discovery_conn_read.lua and
// discovery_member_read.lua (shared/discovery_spread.h), and the second with
// webhook_mark_v2.lua and webhook_conn_mark_v2.lua (shared/webhook_spread.h), which the lint
// checks like every other script.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "shared/schema_assets.h"

namespace quiver {
namespace {

// Where a command's keys are, by argument index after the command name (0-based).
struct KeySpec {
  enum class Kind { kNone, kFirst, kAll, kSecond } kind;
};

const std::map<std::string, KeySpec::Kind>& key_positions() {
  using K = KeySpec::Kind;
  static const std::map<std::string, K> table = {
      // One key, first argument.
      {"GET", K::kFirst},
      {"SET", K::kFirst},
      {"INCR", K::kFirst},
      {"INCRBY", K::kFirst},
      {"PEXPIRE", K::kFirst},
      {"PEXPIREAT", K::kFirst},
      {"EXPIRE", K::kFirst},
      {"PERSIST", K::kFirst},
      {"PTTL", K::kFirst},
      {"HGET", K::kFirst},
      {"HMGET", K::kFirst},
      {"HGETALL", K::kFirst},
      {"HSET", K::kFirst},
      {"HDEL", K::kFirst},
      {"HEXISTS", K::kFirst},
      {"HINCRBY", K::kFirst},
      {"HLEN", K::kFirst},
      {"SMEMBERS", K::kFirst},
      {"SISMEMBER", K::kFirst},
      {"SADD", K::kFirst},
      {"SREM", K::kFirst},
      {"SCARD", K::kFirst},
      {"ZADD", K::kFirst},
      {"ZREM", K::kFirst},
      {"ZSCORE", K::kFirst},
      {"RPUSH", K::kFirst},
      {"LPUSH", K::kFirst},
      {"XADD", K::kFirst},
      {"XPENDING", K::kFirst},
      {"XACK", K::kFirst},
      {"XLEN", K::kFirst},
      // Every argument is a key.
      {"DEL", K::kAll},
      {"UNLINK", K::kAll},
      {"EXISTS", K::kAll},
      {"MGET", K::kAll},
      // A subcommand, then the key.
      {"XGROUP", K::kSecond},
      // No key.
      {"TIME", K::kNone},
  };
  return table;
}

// A redis.call found in a script: its line, the command, the arguments as written.
struct Call {
  int line = 0;
  std::string command;
  std::vector<std::string> args;
};

std::string trim(std::string_view s) {
  std::size_t b = s.find_first_not_of(" \t\r\n");
  std::size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

// The calls of `text`, arguments split at top-level commas (strings, parentheses, brackets and
// braces respected). Lua comments (`--` to the end of a line) are skipped.
std::vector<Call> calls_of(std::string_view text, std::vector<std::string>* problems) {
  std::vector<Call> out;
  static const std::regex kCall(R"(redis\.p?call\s*\()");
  std::string code;
  code.reserve(text.size());
  // Blank out comments (keeping line breaks and string contents).
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\'' || c == '"') {
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != c) j += text[j] == '\\' ? 2 : 1;
      code.append(text.substr(i, j + 1 - i));
      i = j;
      continue;
    }
    if (c == '-' && i + 1 < text.size() && text[i + 1] == '-') {
      while (i < text.size() && text[i] != '\n') ++i;
      if (i < text.size()) code.push_back('\n');
      continue;
    }
    code.push_back(c);
  }
  for (auto it = std::sregex_iterator(code.begin(), code.end(), kCall);
       it != std::sregex_iterator(); ++it) {
    const std::size_t open = static_cast<std::size_t>(it->position() + it->length());
    Call call;
    call.line = 1 + static_cast<int>(std::count(code.begin(), code.begin() + it->position(), '\n'));
    int depth = 0;
    std::string current;
    std::size_t i = open;
    for (; i < code.size(); ++i) {
      char c = code[i];
      if (c == '\'' || c == '"') {
        std::size_t j = i + 1;
        while (j < code.size() && code[j] != c) j += code[j] == '\\' ? 2 : 1;
        current.append(code, i, j + 1 - i);
        i = j;
        continue;
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) break;  // the call's closing parenthesis
        --depth;
      }
      if (c == ',' && depth == 0) {
        call.args.push_back(trim(current));
        current.clear();
        continue;
      }
      current.push_back(c);
    }
    if (i == code.size()) {
      problems->push_back("line " + std::to_string(call.line) + ": unterminated redis.call");
      continue;
    }
    call.args.push_back(trim(current));
    std::string first = call.args.front();
    call.args.erase(call.args.begin());
    if (first.size() < 2 || (first.front() != '\'' && first.front() != '"') ||
        first.back() != first.front()) {
      problems->push_back("line " + std::to_string(call.line) +
                          ": the command is not a string literal: " + first);
      continue;
    }
    call.command = first.substr(1, first.size() - 2);
    for (char& c : call.command) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out.push_back(std::move(call));
  }
  return out;
}

bool declared_key(const std::string& expr) {
  static const std::regex kKeys(R"(^KEYS\[[^\[\]]+\]$)");
  return std::regex_match(expr, kKeys);
}

// An undeclared key a script may still read, and why (see the top of this file).
struct Exception {
  std::string script;
  std::string command;
  std::string expr;
  std::string reason;
};

const std::vector<Exception>& exceptions() {
  static const std::vector<Exception> list = {
      {"lua/call_enqueue.lua", "EXISTS", "ARGV[1]",
       "call-agents: the edge may only read it, and the script writes (EVAL declares RW)"},
      {"lua/oauth_callback.lua", "GET", "ARGV[1]",
       "oauth-result:<sha256>: the edge may only read it, and the script writes"},
      {"lua/revalidate_enqueue.lua", "EXISTS", "lease",
       "lease:<cid>:<principal>: the edge may only read it, and the script writes"},
  };
  return list;
}

// Scripts of layout v1 that build keys from data they read (see the top of this file).
const std::map<std::string, std::string>& whole_script_exceptions() {
  static const std::map<std::string, std::string> list = {
      {"lua/discovery_read.lua",
       "layout v1's discovery read: a member's page of connections is known only once its grants "
       "are read; v2 reads in rounds (discovery_conn_read.lua, discovery_member_read.lua)"},
      {"lua/webhook_refresh.lua",
       "layout v1's webhook: the principals to mark are known only once the grantees are read"},
  };
  return list;
}

// The violations of one script: "<script>:<line>: <COMMAND> <expr>".
std::vector<std::string> violations(const std::string& path, std::string_view text,
                                    std::set<std::size_t>* used_exceptions) {
  std::vector<std::string> problems;
  std::vector<Call> calls = calls_of(text, &problems);
  for (std::string& p : problems) p = path + ": " + p;
  for (const Call& call : calls) {
    const std::string where = path + ":" + std::to_string(call.line) + ": " + call.command;
    auto spec = key_positions().find(call.command);
    if (spec == key_positions().end()) {
      problems.push_back(where + " is not in the lint's key-position table");
      continue;
    }
    std::vector<std::string> keys;
    switch (spec->second) {
      case KeySpec::Kind::kNone:
        break;
      case KeySpec::Kind::kFirst:
        if (!call.args.empty()) keys.push_back(call.args[0]);
        break;
      case KeySpec::Kind::kSecond:
        if (call.args.size() > 1) keys.push_back(call.args[1]);
        break;
      case KeySpec::Kind::kAll:
        keys = call.args;
        break;
    }
    if (spec->second != KeySpec::Kind::kNone && keys.empty()) {
      problems.push_back(where + " has no key argument");
    }
    for (const std::string& key : keys) {
      if (declared_key(key)) continue;
      bool excused = false;
      for (std::size_t e = 0; e < exceptions().size(); ++e) {
        const Exception& x = exceptions()[e];
        if (x.script == path && x.command == call.command && x.expr == key) {
          used_exceptions->insert(e);
          excused = true;
        }
      }
      if (!excused) problems.push_back(where + " touches '" + key + "', which is not a KEYS[i]");
    }
  }
  return problems;
}

TEST(SchemaLuaLint, EveryKeyAScriptTouchesIsDeclared) {
  std::set<std::size_t> used;
  std::size_t scripts = 0;
  std::size_t calls = 0;
  for (const SchemaAsset& asset : schema_assets()) {
    const std::string path(asset.path);
    if (path.rfind("lua/", 0) != 0) continue;
    ++scripts;
    std::vector<std::string> dummy;
    calls += calls_of(asset.text, &dummy).size();
    std::vector<std::string> found = violations(path, asset.text, &used);
    if (whole_script_exceptions().count(path) != 0) {
      EXPECT_FALSE(found.empty()) << path << " passes the lint now: remove its exception";
      continue;
    }
    for (const std::string& v : found) ADD_FAILURE() << v;
  }
  EXPECT_GE(scripts, 16u);  // every script of schema/lua is compiled in
  EXPECT_GT(calls, 50u);    // the parser found the calls (not an empty pass)
  for (std::size_t e = 0; e < exceptions().size(); ++e) {
    EXPECT_EQ(used.count(e), 1u) << "the exception " << exceptions()[e].script << " "
                                 << exceptions()[e].command << " " << exceptions()[e].expr
                                 << " matches no call any more: remove it from the list";
  }
}

// The lint itself: it finds what it must find, and is not fooled by comments or strings.
TEST(SchemaLuaLint, FindsAKeyBuiltFromArgvOrAConcatenation) {
  std::set<std::size_t> used;
  const std::string script =
      "-- redis.call('GET', ARGV[1]) in a comment is not a call\n"
      "local a = redis.call('GET', KEYS[1])\n"
      "local b = redis.call('HGET', ARGV[1] .. 'conn:' .. cid, 'f')\n"
      "redis.call('DEL', KEYS[2], prefix .. 'x')\n"
      "redis.pcall('XADD', KEYS[3], '*', 'k', string.format('%s,%s', a, b))\n"
      "redis.call('XGROUP', 'DELCONSUMER', other, 'g', 'c')\n"
      "redis.call('SWAPDB', 0, 1)\n"
      "redis.call(cmd, KEYS[1])\n"
      "redis.call('EXISTS', KEYS[base + 1])\n";
  std::vector<std::string> v = violations("lua/t.lua", script, &used);
  ASSERT_EQ(v.size(), 5u) << ::testing::PrintToString(v);
  EXPECT_NE(v[0].find("t.lua: line 8: the command is not a string literal"), std::string::npos)
      << v[0];
  EXPECT_NE(v[1].find(":3: HGET touches 'ARGV[1] .. 'conn:' .. cid'"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find(":4: DEL touches 'prefix .. 'x''"), std::string::npos) << v[2];
  EXPECT_NE(v[3].find(":6: XGROUP touches 'other'"), std::string::npos) << v[3];
  EXPECT_NE(v[4].find(":7: SWAPDB is not in the lint's key-position table"), std::string::npos)
      << v[4];
}

}  // namespace
}  // namespace quiver
