// Redactor: hides every configured secret, in every form a transport sends it or an upstream may
// echo it, from text that leaves the agent (log lines, stored error messages, listings, answers).
//
// Built once per configuration (AgentConfig::redactor, from AgentConfig::secrets()) and shared:
// the needle list is computed in the constructor, `redact` is a single left-to-right pass that
// replaces the longest needle starting at each position with `***`. The forms of a value v:
//   - v itself; ASCII-case-insensitively when v is at least kCaseFoldSecretBytes long (an
//     upstream that upper-cases what it quotes; short values are env settings such as `info`,
//     and folding them would garble every `INFO` in a log line while hiding nothing);
//   - v JSON-escaped (quotes, backslashes, control characters; `\/`; `\uXXXX` for non-ASCII),
//     as a JSON error body or log line shows it;
//   - v percent-encoded (RFC 3986 strict and JavaScript's encodeURIComponent; `+` for a space as
//     forms do; hex digits in either case), as a URL or a form body carries it;
//   - v in base64 and base64url at each of the three byte alignments it can have inside a larger
//     encoded text (`Basic` credentials, `Bearer <v>` encoded whole): the characters that depend
//     on v alone, case-sensitively. At most the two boundary characters of such a run remain.
// Values shorter than kMinRedactedSecretBytes are left alone (see config.h).
//
// `redact_json_text` is for a whole JSON text from an upstream: it redacts inside string literals
// only (decoded, so any escaping of a secret is seen through), and re-encodes a literal only when
// it changed, so the text stays valid JSON with the same structure. That is the form the upstream
// boundary (UpstreamConnection) applies to every message before the MCP session reads it.
#pragma once

#include <array>
#include <bitset>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace quiver {

inline constexpr std::size_t kMinRedactedSecretBytes = 4;
inline constexpr std::size_t kCaseFoldSecretBytes = 8;
inline constexpr std::size_t kMinBase64NeedleChars = 6;
inline constexpr char kRedactedMark[] = "***";

class Redactor {
 public:
  Redactor() = default;  // redacts nothing
  explicit Redactor(const std::vector<std::string>& secret_values);

  std::string redact(std::string_view text) const;
  std::string operator()(std::string_view text) const { return redact(text); }
  // Redacts the string literals (keys and values) of a JSON text; the rest is copied as is.
  std::string redact_json_text(std::string_view json) const;
  bool empty() const { return count_ == 0; }
  std::size_t needle_count() const { return count_; }

 private:
  struct Needle {
    std::string text;  // lower-cased when folded
    bool fold = false;
  };
  // Needles by their first byte (lower-cased for folded ones), longest first.
  std::array<std::vector<Needle>, 256> by_first_{};
  // Every pair of bytes a needle can start with (both cases for folded ones): most positions of
  // a text are passed over with one lookup. Every needle is at least 4 bytes long.
  std::bitset<65536> starts_{};
  std::size_t count_ = 0;
  std::size_t match_at(std::string_view text, std::size_t pos) const;
};

}  // namespace quiver
