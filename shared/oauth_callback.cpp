#include "shared/oauth_callback.h"

#include <utility>

#include "shared/utf8.h"

namespace quiver {

namespace {

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

// Printable text: valid UTF-8 without control characters.
bool printable(std::string_view v) {
  if (!is_valid_utf8(v)) return false;
  for (unsigned char c : v) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

const char* outcome_status(OAuthCallbackOutcome outcome) {
  switch (outcome) {
    case OAuthCallbackOutcome::kConnected:
      return "connected";
    case OAuthCallbackOutcome::kFailed:
      return "failed";
    case OAuthCallbackOutcome::kReceived:
      break;
  }
  return "received";
}

HttpResponse page(int status, std::string_view title, std::string_view text) {
  HttpResponse res;
  res.status = status;
  res.headers = {
      {"Content-Type", "text/html; charset=utf-8"},
      {"Cache-Control", "no-store"},
      // Nothing to load, run, frame or submit; the inline style is the page's only resource.
      {"Content-Security-Policy",
       "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'"},
      {"Referrer-Policy", "no-referrer"},  // this URL carries the authorization code
      {"X-Content-Type-Options", "nosniff"},
  };
  res.body =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width\"><title>Quiver: " +
      html_escape(title) +
      "</title><style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;"
      "margin:3rem auto;padding:0 1rem;color:#1d2330}</style></head><body><h1>" +
      html_escape(title) + "</h1><p>" + html_escape(text) + "</p></body></html>\n";
  return res;
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Result<oauth::CallbackParams> parse_oauth_callback(std::string_view query) {
  if (query.size() > kMaxCallbackQueryBytes) {
    return invalid("the callback's query is too long (at most " +
                   std::to_string(kMaxCallbackQueryBytes) + " bytes)");
  }
  QueryParams q =
      parse_known_query_params(query, {"state", "code", "iss", "error", "error_description"});
  if (q.error) return invalid("the callback's query: " + *q.error);
  struct Bound {
    const char* name;
    std::size_t max;
  };
  for (const Bound& b :
       {Bound{"state", kMaxCallbackStateBytes}, Bound{"code", kMaxCallbackCodeBytes},
        Bound{"iss", kMaxCallbackIssBytes}, Bound{"error", kMaxCallbackErrorBytes},
        Bound{"error_description", kMaxCallbackErrorDescriptionBytes}}) {
    const std::string* v = q.find(b.name);
    if (v == nullptr) continue;
    if (v->size() > b.max) {
      return invalid(std::string("the callback's `") + b.name + "` is too long (at most " +
                     std::to_string(b.max) + " bytes)");
    }
    if (!printable(*v)) {
      return invalid(std::string("the callback's `") + b.name + "` is not printable text");
    }
  }
  oauth::CallbackParams out;
  const std::string* state = q.find("state");
  if (state == nullptr || state->empty()) {
    return invalid(
        "the callback has no `state`: it did not come from an authorization Quiver "
        "started");
  }
  out.state = *state;
  auto optional = [&](const char* name) -> std::optional<std::string> {
    const std::string* v = q.find(name);
    return v ? std::optional<std::string>(*v) : std::nullopt;
  };
  out.code = optional("code");
  out.iss = optional("iss");
  out.error = optional("error");
  out.error_description = optional("error_description");
  if (out.code && out.error) return invalid("the callback has both `code` and `error`");
  if (!out.code && !out.error) return invalid("the callback has neither `code` nor `error`");
  if (out.code && out.code->empty()) return invalid("the callback's `code` is empty");
  return out;
}

std::string oauth_result_record(const OAuthCallbackResult& result) {
  Json j = Json::object({{"status", outcome_status(result.outcome)}});
  if (!result.connection.empty()) j["connection"] = result.connection;
  if (!result.message.empty()) j["message"] = result.message;
  return json_text(j);
}

std::optional<OAuthCallbackResult> parse_oauth_result_record(std::string_view text) {
  JsonParseOptions options;
  options.max_bytes = 16 * 1024;
  Result<Json> j = parse_json(text, options);
  if (!j.ok() || !j->is_object()) return std::nullopt;
  std::optional<std::string> status = json_string(*j, "status");
  OAuthCallbackResult out;
  if (status == std::optional<std::string>("connected")) {
    out.outcome = OAuthCallbackOutcome::kConnected;
  } else if (status == std::optional<std::string>("failed")) {
    out.outcome = OAuthCallbackOutcome::kFailed;
  } else {
    return std::nullopt;
  }
  out.connection = json_string(*j, "connection").value_or("");
  out.message = json_string(*j, "message").value_or("");
  return out;
}

HttpResponse oauth_callback_page(const OAuthCallbackResult& result) {
  switch (result.outcome) {
    case OAuthCallbackOutcome::kConnected:
      return page(200, "Connected",
                  "Your account is connected to " +
                      (result.connection.empty() ? std::string("the server") : result.connection) +
                      ". You can close this page; your tools are being listed now.");
    case OAuthCallbackOutcome::kFailed:
      return page(
          400, "Connection failed",
          "The connection was not made: " +
              (result.message.empty() ? std::string("no reason was given") : result.message) +
              ". Nothing was stored; start again from your client.");
    case OAuthCallbackOutcome::kReceived:
      break;
  }
  return page(200, "Received",
              "Quiver received the sign-in and is finishing the connection. Reload this page in a "
              "few seconds to see the outcome.");
}

HttpResponse oauth_callback_refusal(int status, std::string_view reason) {
  HttpResponse res =
      page(status, "Connection failed",
           std::string(reason) + ". Nothing was stored; start again from your client.");
  if (status == 405) res.headers.emplace_back("Allow", "GET");
  return res;
}

}  // namespace quiver
