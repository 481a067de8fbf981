#include "shared/uri_template.h"

#include <string>
#include <vector>

namespace quiver {

namespace {

bool is_unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

// After a simple expression may end at p in `from`: the positions it may reach (the longest run of
// unreserved characters, pct-encoded triplets and commas from each start; any prefix of it).
std::vector<char> simple_run(std::string_view uri, const std::vector<char>& from) {
  const std::size_t n = uri.size();
  // end[q]: how far a run starting at q extends (a `%` counts only with two hex digits).
  std::vector<std::size_t> end(n + 1, n);
  for (std::size_t q = n; q-- > 0;) {
    const char c = uri[q];
    if (is_unreserved(c) || c == ',') {
      end[q] = end[q + 1];
    } else if (c == '%' && q + 2 < n && is_hex(uri[q + 1]) && is_hex(uri[q + 2])) {
      end[q] = end[q + 3];
    } else {
      end[q] = q;
    }
  }
  std::vector<char> out(n + 1, 0);
  std::size_t active_until = 0;
  bool active = false;
  for (std::size_t q = 0; q <= n; ++q) {
    if (from[q] && (!active || end[q] > active_until)) {
      active_until = end[q];
      active = true;
    }
    // Inside a pct-encoded triplet is no place to stop, but stopping there only makes a
    // following literal fail to match: allowing it is harmless and keeps this linear.
    if (active && q <= active_until) out[q] = 1;
  }
  return out;
}

// Any characters from the first reachable position on.
std::vector<char> any_run(const std::vector<char>& from) {
  std::vector<char> out(from.size(), 0);
  bool active = false;
  for (std::size_t q = 0; q < from.size(); ++q) {
    active = active || from[q];
    out[q] = active ? 1 : 0;
  }
  return out;
}

}  // namespace

bool uri_matches_template(std::string_view tmpl, std::string_view uri) {
  const std::size_t n = uri.size();
  std::vector<char> reach(n + 1, 0);
  reach[0] = 1;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    if (tmpl[i] != '{') {
      std::size_t brace = tmpl.find('{', i);
      std::string_view literal =
          tmpl.substr(i, brace == std::string_view::npos ? brace : brace - i);
      std::vector<char> next(n + 1, 0);
      bool any = false;
      for (std::size_t p = 0; p + literal.size() <= n; ++p) {
        if (reach[p] && uri.compare(p, literal.size(), literal) == 0) {
          next[p + literal.size()] = 1;
          any = true;
        }
      }
      if (!any) return false;
      reach.swap(next);
      i += literal.size();
      continue;
    }
    std::size_t close = tmpl.find('}', i);
    if (close == std::string_view::npos) return tmpl == uri;  // malformed: verbatim only
    std::string_view expr = tmpl.substr(i + 1, close - i - 1);
    i = close + 1;
    const char op = expr.empty() ? '\0' : expr.front();
    const bool level12 = expr.find_first_of(",*:") == std::string_view::npos;
    if (op == '+' && level12) {
      reach = any_run(reach);
    } else if (op == '#' && level12) {
      // Undefined: nothing; defined: `#` then reserved characters.
      std::vector<char> after_hash(n + 1, 0);
      for (std::size_t p = 0; p < n; ++p) {
        if (reach[p] && uri[p] == '#') after_hash[p + 1] = 1;
      }
      std::vector<char> tail = any_run(after_hash);
      for (std::size_t q = 0; q <= n; ++q) reach[q] = reach[q] || tail[q];
    } else if ((is_unreserved(op) || op == '%') && level12) {
      reach = simple_run(uri, reach);
    } else {
      reach = any_run(reach);  // level 3 and 4: over-match (see the header)
    }
  }
  return reach[n] != 0;
}

bool resource_read_visible(const DisabledOverlay& overlay, std::string_view uri) {
  if (!visible(overlay, CapabilityType::kResource, uri)) return false;
  const std::string prefix =
      std::string(capability_type_name(CapabilityType::kResourceTemplate)) + ":";
  for (auto it = overlay.lower_bound(prefix); it != overlay.end(); ++it) {
    std::string_view member = *it;
    if (member.compare(0, prefix.size(), prefix) != 0) break;
    if (uri_matches_template(member.substr(prefix.size()), uri)) return false;
  }
  return true;
}

}  // namespace quiver
