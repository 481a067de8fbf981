// Fuzzes caller-token authentication (shared/caller_token.h) with a fixed key ring (the keys of
// tests/fixtures/tokens/caller-tokens.json) at a fixed time. The first input byte picks a mode:
//   even: the rest is an `Authorization` header value: parse_bearer, then verify_caller_token.
//   odd:  the rest is "<header JSON>\n<claims JSON>", signed here with key k2026-01, so that the
//         claim checks behind the signature are reached too.
// Every token accepted must name a valid member, and a token minted for what it carried must be
// accepted with the same identity. Every refusal is kUnauthenticated.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "shared/caller_token.h"
#include "shared/sha256.h"
#include "tests/fuzz/fuzz_support.h"

namespace quiver {
namespace {

constexpr char kKid1[] = "k2026-01";
constexpr char kSecret1[] = "quiver-fixture-key-one-0123456789abcdefghij";
constexpr char kKid2[] = "k2026-02";
constexpr char kSecret2[] = "quiver-fixture-key-two-ZYXWVUTSRQPONMLKJIHGF";
constexpr int64_t kNowMs = 1780000060000;

const Keyring& keyring() {
  static const Keyring k = [] {
    auto r = Keyring::create({{kKid1, kSecret1}, {kKid2, kSecret2}});
    if (!r.ok()) quiver::fuzz::fail("fixture keyring", r.error().message);
    return *r;
  }();
  return k;
}

void verify(std::string_view token, const VerifyOptions& options) {
  auto id = verify_caller_token(token, keyring(), kNowMs, options);
  if (!id.ok()) {
    fuzz::check(id.error().code == ErrorCode::kUnauthenticated,
                "verify: a refusal that is not kUnauthenticated", id.error().message);
    return;
  }
  auto principal = Principal::member(id->member_id);
  fuzz::check(principal.ok() && *principal == id->principal,
              "verify: an accepted token names an invalid member or another principal");
  fuzz::check(id->expires_at_ms + options.leeway_ms > kNowMs, "verify: an expired token passed");
  fuzz::check(keyring().secret(id->kid) != nullptr, "verify: accepted under an unknown kid");

  // The same identity, minted afresh, verifies to the same identity.
  MintOptions mint;
  mint.audience = options.audience;
  mint.ns = id->ns;
  mint.jti = id->jti;
  auto again =
      mint_caller_token(id->member_id, *keyring().secret(id->kid), id->kid, kNowMs, 600000, mint);
  fuzz::check(again.ok(), "mint: refused what verify accepted",
              again.ok() ? "" : again.error().message);
  auto back = verify_caller_token(*again, keyring(), kNowMs, options);
  fuzz::check(back.ok() && back->member_id == id->member_id && back->ns == id->ns &&
                  back->jti == id->jti && back->kid == id->kid,
              "mint: a re-minted token does not verify to the same identity");
}

}  // namespace
}  // namespace quiver

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace quiver;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string_view rest = fuzz::as_view(data + 1, size - 1);
  VerifyOptions options;
  if (mode & 2) options.ns = "team-a";
  if (mode & 4) options.leeway_ms = 0;

  if ((mode & 1) == 0) {
    auto token = parse_bearer(rest);
    if (!token.ok()) {
      fuzz::check(token.error().code == ErrorCode::kUnauthenticated,
                  "parse_bearer: a refusal that is not kUnauthenticated");
      return 0;
    }
    fuzz::check(!token->empty() && token->size() <= kMaxTokenBytes,
                "parse_bearer: an empty or oversized token");
    verify(*token, options);
    return 0;
  }
  std::size_t nl = rest.find('\n');
  std::string_view header = rest.substr(0, nl);
  std::string_view claims = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  std::string signing_input = base64url_encode(header) + "." + base64url_encode(claims);
  std::string token = signing_input + "." + base64url_encode([&] {
                        Digest256 mac = hmac_sha256(kSecret1, signing_input);
                        return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
                      }());
  verify(token, options);
  return 0;
}
