// Helpers shared by shared/oauth_documents.cpp and shared/oauth_flow.cpp (not a public API).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quiver::oauth::internal {

// An absolute http(s) URL cut into its parts; the scheme and host lower case.
struct UrlParts {
  std::string scheme;
  std::string authority;  // host[:port] as written, host lower case
  std::string host;       // without brackets or port
  std::string path;       // "" or starting with '/'
  std::string query;      // without '?'; "" when none
  std::string origin() const { return scheme + "://" + authority; }
};
std::optional<UrlParts> parse_url(std::string_view url);

// https, or http to a loopback host (localhost, 127.0.0.0/8, ::1).
bool is_allowed_endpoint(std::string_view url);

// application/x-www-form-urlencoded (RFC 6749 Appendix B): unreserved kept, space as '+'.
std::string form_encode(std::string_view text);
std::string form_body(const std::vector<std::pair<std::string, std::string>>& fields);
// Percent- and '+'-decoding; nullopt on a malformed escape.
std::optional<std::string> form_decode(std::string_view text);

// Space-separated scopes; the union keeps first-seen order.
std::vector<std::string> split_scopes(std::string_view scope);
std::string join_scopes(const std::vector<std::string>& scopes);
std::vector<std::string> scope_union(std::vector<std::string> a, const std::vector<std::string>& b);

// A peer's text for an error message: printable ASCII, at most `max` bytes.
std::string clip_text(std::string_view text, std::size_t max = 200);

}  // namespace quiver::oauth::internal
