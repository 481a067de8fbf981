#include "native-agent/base/redactor.h"

#include <algorithm>
#include <set>
#include <utility>

#include "shared/ascii.h"
#include "shared/json.h"

namespace quiver {

namespace {

std::string json_escaped(const std::string& v, bool ascii) {
  const std::string dumped = Json(v).dump(-1, ' ', ascii, Json::error_handler_t::replace);
  return dumped.substr(1, dumped.size() - 2);
}

std::string percent_encoded(std::string_view v, std::string_view also_unreserved,
                            bool plus_for_space, bool upper_hex) {
  const char* hex = upper_hex ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~' || also_unreserved.find(c) != std::string_view::npos;
    if (unreserved) {
      out += c;
    } else if (plus_for_space && c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

// The base64 characters that depend on `v` alone when it starts `shift` bytes (0..2) into an
// encoded run: character i covers bits [6i, 6i+6) of the run.
std::string base64_core(std::string_view v, int shift, bool url) {
  static const char* kStd = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static const char* kUrl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char* alphabet = url ? kUrl : kStd;
  std::string bytes(static_cast<std::size_t>(shift), '\0');
  bytes.append(v.data(), v.size());
  const std::size_t first_bit = 8 * static_cast<std::size_t>(shift);
  const std::size_t end_bit = 8 * bytes.size();
  std::string out;
  for (std::size_t i = (first_bit + 5) / 6; 6 * i + 6 <= end_bit; ++i) {
    unsigned value = 0;
    for (std::size_t b = 6 * i; b < 6 * i + 6; ++b) {
      const auto byte = static_cast<unsigned char>(bytes[b / 8]);
      value = (value << 1) | ((byte >> (7 - b % 8)) & 1u);
    }
    out += alphabet[value];
  }
  return out;
}

}  // namespace

Redactor::Redactor(const std::vector<std::string>& secret_values) {
  std::set<std::pair<std::string, bool>> needles;  // (text, fold)
  for (const std::string& v : secret_values) {
    if (v.size() < kMinRedactedSecretBytes) continue;
    const bool fold = v.size() >= kCaseFoldSecretBytes;
    // A form identical to v takes v's folding: `info` stays case-sensitive in every form.
    auto add = [&](std::string text, bool fold_form) {
      if (text.empty()) return;
      if (text == v) fold_form = fold;
      needles.emplace(fold_form ? ascii_lower(text) : std::move(text), fold_form);
    };
    add(v, fold);
    add(json_escaped(v, false), fold);
    add(json_escaped(v, true), true);  // \u00e9 or \u00E9: the hex case varies by encoder
    std::string slashes = json_escaped(v, false);
    for (std::size_t p = 0; (p = slashes.find('/', p)) != std::string::npos; p += 2) {
      slashes.replace(p, 1, "\\/");
    }
    add(slashes, fold);
    for (bool upper : {true, false}) {
      // Percent forms differ from v only where they hold %XX: specific enough to fold always.
      add(percent_encoded(v, "", false, upper), true);
      add(percent_encoded(v, "!*'()", false, upper), true);
      add(percent_encoded(v, "", true, upper), true);
    }
    for (int shift = 0; shift < 3; ++shift) {
      for (bool url : {false, true}) {
        std::string core = base64_core(v, shift, url);
        if (core.size() >= kMinBase64NeedleChars) add(std::move(core), false);
      }
    }
  }
  auto pair = [](char a, char b) {
    return (static_cast<std::size_t>(static_cast<unsigned char>(a)) << 8) |
           static_cast<unsigned char>(b);
  };
  for (const auto& [text, fold] : needles) {
    by_first_[static_cast<unsigned char>(text[0])].push_back(Needle{text, fold});
    ++count_;
    starts_.set(pair(text[0], text[1]));
    if (fold) {
      starts_.set(pair(ascii_upper(text[0]), text[1]));
      starts_.set(pair(text[0], ascii_upper(text[1])));
      starts_.set(pair(ascii_upper(text[0]), ascii_upper(text[1])));
    }
  }
  for (auto& bucket : by_first_) {
    std::sort(bucket.begin(), bucket.end(),
              [](const Needle& a, const Needle& b) { return a.text.size() > b.text.size(); });
  }
}

std::size_t Redactor::match_at(std::string_view text, std::size_t pos) const {
  const std::string_view rest = text.substr(pos);
  std::size_t best = 0;
  auto scan = [&](const std::vector<Needle>& bucket) {
    for (const Needle& n : bucket) {
      if (n.text.size() <= best) return;  // longest first: nothing longer follows
      if (n.text.size() > rest.size()) continue;
      bool equal = true;
      for (std::size_t i = 0; i < n.text.size() && equal; ++i) {
        equal = (n.fold ? ascii_lower(rest[i]) : rest[i]) == n.text[i];
      }
      if (equal) best = n.text.size();
    }
  };
  const char c = text[pos];
  scan(by_first_[static_cast<unsigned char>(c)]);
  if (ascii_lower(c) != c) scan(by_first_[static_cast<unsigned char>(ascii_lower(c))]);
  return best;
}

std::string Redactor::redact(std::string_view text) const {
  if (count_ == 0) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;  // text[copied, pos) is still to be appended
  for (std::size_t pos = 0; pos < text.size();) {
    if (pos + 1 >= text.size() ||
        !starts_.test((static_cast<std::size_t>(static_cast<unsigned char>(text[pos])) << 8) |
                      static_cast<unsigned char>(text[pos + 1]))) {
      ++pos;
      continue;
    }
    const std::size_t n = match_at(text, pos);
    if (n == 0) {
      ++pos;
      continue;
    }
    out.append(text.data() + copied, pos - copied);
    out += kRedactedMark;
    pos += n;
    copied = pos;
  }
  out.append(text.data() + copied, text.size() - copied);
  return out;
}

std::string Redactor::redact_json_text(std::string_view json) const {
  if (count_ == 0) return std::string(json);
  std::string out;
  out.reserve(json.size());
  std::size_t pos = 0;
  while (pos < json.size()) {
    const std::size_t open = json.find('"', pos);
    if (open == std::string_view::npos) break;
    std::size_t close = open + 1;
    bool escaped = false;
    while (close < json.size() && (json[close] != '"' || escaped)) {
      escaped = !escaped && json[close] == '\\';
      ++close;
    }
    out.append(json.data() + pos, open - pos);
    if (close >= json.size()) {  // unterminated: not JSON, redact what is there
      out += redact(json.substr(open));
      return out;
    }
    const std::string_view literal = json.substr(open, close - open + 1);
    const std::string_view content = literal.substr(1, literal.size() - 2);
    if (content.find('\\') == std::string_view::npos) {
      // No escapes: the content is the string itself, and "***" needs none either.
      out += '"';
      out += redact(content);
      out += '"';
    } else {
      Json decoded = Json::parse(literal, nullptr, false);
      if (decoded.is_string()) {
        const std::string& s = decoded.get_ref<const std::string&>();
        std::string r = redact(s);
        if (r == s) {
          out.append(literal.data(), literal.size());
        } else {
          out += Json(r).dump(-1, ' ', false, Json::error_handler_t::replace);
        }
      } else {
        out += '"';
        out += redact(content);
        out += '"';
      }
    }
    pos = close + 1;
  }
  out.append(json.data() + std::min(pos, json.size()), json.size() - std::min(pos, json.size()));
  return out;
}

}  // namespace quiver
