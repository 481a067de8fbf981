#include "native-agent/upstream/oauth_http.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <openssl/bio.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "native-agent/base/clock.h"
#include "native-agent/upstream/http_client.h"
#include "shared/ascii.h"
#include "shared/json.h"

namespace quiver {

namespace {

constexpr int64_t kDefaultDeadlineMs = 10'000;

bool is_loopback_host(const HttpUrl& url) {
  return url.host == "localhost" || url.host == "::1" || url.host.rfind("127.", 0) == 0;
}

int64_t deadline_of(const OAuthHttpOptions& options) {
  return options.deadline_ms != 0 ? options.deadline_ms : steady_ms() + kDefaultDeadlineMs;
}

// One request; `https_only`: plain http only to a loopback host (the OAuth endpoints; the MCP
// server itself follows the connection's own rules).
Result<oauth::HttpResponse> perform(const oauth::HttpRequest& request,
                                    const OAuthHttpOptions& options, bool https_only) {
  Result<HttpUrl> url = parse_http_url(request.url);
  if (!url.ok()) return Error(ErrorCode::kInvalidArgument, "OAuth request: " + url.error().message);
  const std::string where = url->redacted();
  if (https_only && url->scheme != "https" && !is_loopback_host(*url)) {
    return Error(ErrorCode::kInvalidArgument, "OAuth request to " + where + ": https is required");
  }
  const int64_t deadline = deadline_of(options);
  int64_t left = deadline - steady_ms();
  if (left <= 0) return Error(ErrorCode::kTimeout, "no time left for " + where);
  UrlGuardOptions guard = options.guard;
  guard.allow_private_addresses = options.allow_private;
  auto target = guard_url(*url, guard, resolve_host_system, left);
  if (!target.ok()) return target.error();
  auto client = make_pinned_client(*url, target->addresses.front(), /*keep_alive=*/false);
  if (!client.ok()) return client.error();
  ignore_sigpipe_once();
  left = deadline - steady_ms();
  set_client_timeouts(**client, left + 500, left + 500, left + 500);

  httplib::Request req;
  req.method = request.method;
  req.path = url->target;
  for (const auto& [name, value] : request.headers) req.headers.emplace(name, value);
  if (req.headers.find("User-Agent") == req.headers.end()) {
    req.headers.emplace("User-Agent", "quiver-agent");
  }
  req.body = request.body;
  oauth::HttpResponse out;
  bool too_large = false;
  req.response_handler = [&](const httplib::Response& res) {
    out.status = res.status;
    for (const auto& [name, value] : res.headers) out.headers.emplace_back(name, value);
    return true;
  };
  req.content_receiver = [&](const char* data, std::size_t n, uint64_t, uint64_t) {
    if (out.body.size() + n > oauth::kMaxResponseBytes) {
      too_large = true;
      return false;
    }
    out.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  Watchdog watchdog;
  watchdog.arm(client->get(), deadline);
  bool ok = send_request(**client, req, res, err);
  bool fired = watchdog.disarm();
  if (too_large) {
    return Error(ErrorCode::kTooLarge, "the answer of " + where + " is larger than 256 KiB");
  }
  if (fired || (!ok && steady_ms() >= deadline)) {
    return Error(ErrorCode::kTimeout, where + " did not answer in time");
  }
  if (!ok) return http_client_error(err, where);
  return out;
}

}  // namespace

Result<oauth::HttpResponse> perform_oauth_request(const oauth::HttpRequest& request,
                                                  const OAuthHttpOptions& options) {
  return perform(request, options, /*https_only=*/true);
}

void drive_oauth_flow(oauth::OAuthFlow& flow, const OAuthHttpOptions& options) {
  while (flow.step() == oauth::FlowStep::kNeedsHttp) {
    std::optional<oauth::HttpRequest> request = flow.poll_request();
    if (!request) {
      flow.handle_response(Error(ErrorCode::kInternal, "OAuth flow asked for no request"));
      continue;
    }
    OAuthHttpOptions each = options;
    each.deadline_ms = deadline_of(options);
    flow.handle_response(perform_oauth_request(*request, each));
  }
}

Result<std::optional<oauth::BearerChallenge>> fetch_bearer_challenge(
    const std::string& server_url, const OAuthHttpOptions& options) {
  Json init = {{"jsonrpc", "2.0"},
               {"id", 0},
               {"method", "initialize"},
               {"params",
                {{"protocolVersion", "2025-11-25"},
                 {"capabilities", Json::object()},
                 {"clientInfo", {{"name", "quiver-agent"}, {"version", "0"}}}}}};
  oauth::HttpRequest request;
  request.method = "POST";
  request.url = server_url;
  request.headers = {{"Content-Type", "application/json"},
                     {"Accept", "application/json, text/event-stream"},
                     {"MCP-Protocol-Version", "2025-11-25"},
                     {"Mcp-Method", "initialize"}};
  request.body = init.dump();
  // The MCP server may be plain http (probe --allow-private): the https rule is the OAuth
  // endpoints'; this request goes through the URL guard only.
  Result<oauth::HttpResponse> response = perform(request, options, /*https_only=*/false);
  if (!response.ok()) return response.error();
  if (response->status != 401) return std::optional<oauth::BearerChallenge>();
  std::optional<std::string> value = response->header("WWW-Authenticate");
  if (!value) return std::optional<oauth::BearerChallenge>();
  return oauth::parse_www_authenticate(*value);
}

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// ECDSA's DER signature as JWS R||S (RFC 7518 §3.4), each 32 bytes for P-256.
Result<std::string> der_to_jose(const std::string& der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(der.size()));
  if (sig == nullptr) return Error(ErrorCode::kInternal, "ES256: unreadable signature");
  const BIGNUM* r = nullptr;
  const BIGNUM* s = nullptr;
  ECDSA_SIG_get0(sig, &r, &s);
  std::string out(64, '\0');
  bool ok = BN_bn2binpad(r, reinterpret_cast<unsigned char*>(&out[0]), 32) == 32 &&
            BN_bn2binpad(s, reinterpret_cast<unsigned char*>(&out[32]), 32) == 32;
  ECDSA_SIG_free(sig);
  if (!ok) return Error(ErrorCode::kInternal, "ES256: signature does not fit P-256");
  return out;
}

Result<std::string> sign_with(const std::shared_ptr<EVP_PKEY>& key, std::string_view alg,
                              std::string_view input) {
  int type = EVP_PKEY_get_base_id(key.get());
  if (alg == "ES256" && type != EVP_PKEY_EC) {
    return Error(ErrorCode::kInvalidArgument, "ES256 needs an EC (P-256) private key");
  }
  if (alg == "RS256" && type != EVP_PKEY_RSA) {
    return Error(ErrorCode::kInvalidArgument, "RS256 needs an RSA private key");
  }
  if (alg != "ES256" && alg != "RS256") {
    return Error(ErrorCode::kInvalidArgument, "unsupported JWS algorithm");
  }
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  std::size_t len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                     input.size()) != 1) {
    return Error(ErrorCode::kInternal, "could not sign the client assertion");
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(&sig[0]), &len,
                     reinterpret_cast<const unsigned char*>(input.data()), input.size()) != 1) {
    return Error(ErrorCode::kInternal, "could not sign the client assertion");
  }
  sig.resize(len);
  if (alg == "ES256") return der_to_jose(sig);
  return sig;
}

}  // namespace

Result<oauth::OAuthHost> make_oauth_host(const std::string& private_key_pem) {
  oauth::OAuthHost host;
  host.random_bytes = [](std::size_t n) -> Result<std::string> {
    std::string out(n, '\0');
    if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(&out[0]), static_cast<int>(n)) != 1) {
      return Error(ErrorCode::kResourceUnavailable, "OpenSSL has no random bytes");
    }
    return out;
  };
  host.now_ms = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
  };
  if (private_key_pem.empty()) return host;
  BIO* bio = BIO_new_mem_buf(private_key_pem.data(), static_cast<int>(private_key_pem.size()));
  if (bio == nullptr) return Error(ErrorCode::kInternal, "could not read the private key");
  EVP_PKEY* raw = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (raw == nullptr) {
    return Error(ErrorCode::kInvalidArgument, "the private key is not a PEM private key");
  }
  std::shared_ptr<EVP_PKEY> key(raw, PkeyFree());
  int type = EVP_PKEY_get_base_id(raw);
  if (type != EVP_PKEY_EC && type != EVP_PKEY_RSA) {
    return Error(ErrorCode::kInvalidArgument,
                 "the private key is neither EC (ES256) nor RSA (RS256)");
  }
  host.sign = [key](std::string_view alg, std::string_view input) {
    return sign_with(key, alg, input);
  };
  return host;
}

}  // namespace quiver
