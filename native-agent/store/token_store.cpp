#include "native-agent/store/token_store.h"

#include <algorithm>
#include <set>
#include <utility>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>

#include "native-agent/store/sqlite_db.h"
#include "native-agent/store/store.h"
#include "shared/schema_assets.h"
#include "shared/sha256.h"

namespace quiver {

namespace {

constexpr char kQueries[] = "oauth-tokens-queries.sql";
constexpr char kSealPrefix[] = "v1:";
constexpr int kTokenStoreSchemaVersion = 2;  // schema/oauth-tokens.sql's user_version
constexpr std::size_t kNonceBytes = 12;
constexpr std::size_t kTagBytes = 16;

Error invalid(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message));
}

// The additional authenticated data of a row: its table and key columns, NUL-separated.
std::string aad_of(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) {
    out += p;
    out += '\0';
  }
  return out;
}

struct CipherCtx {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~CipherCtx() { EVP_CIPHER_CTX_free(ctx); }
};

Result<std::string> seal(const std::string& key, std::string_view plaintext, std::string_view aad) {
  unsigned char nonce[kNonceBytes];
  if (RAND_bytes(nonce, sizeof nonce) != 1) {
    return Error(ErrorCode::kInternal, "token store: no random bytes for a nonce");
  }
  CipherCtx c;
  std::string out(reinterpret_cast<const char*>(nonce), kNonceBytes);
  out.resize(kNonceBytes + plaintext.size() + kTagBytes);
  int len = 0;
  int total = 0;
  auto* dst = reinterpret_cast<unsigned char*>(out.data() + kNonceBytes);
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  bool ok =
      c.ctx != nullptr &&
      EVP_EncryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) == 1 &&
      EVP_EncryptInit_ex(c.ctx, nullptr, nullptr, k, nonce) == 1 &&
      EVP_EncryptUpdate(c.ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) == 1 &&
      EVP_EncryptUpdate(c.ctx, dst, &len, reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) == 1;
  total = len;
  ok = ok && EVP_EncryptFinal_ex(c.ctx, dst + total, &len) == 1;
  total += len;
  ok = ok && EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, dst + total) == 1;
  if (!ok) return Error(ErrorCode::kInternal, "token store: AES-256-GCM encryption failed");
  return std::string(kSealPrefix) + base64url_encode(out);
}

// The plaintext, or nullopt when the blob does not open with `key` and `aad`.
std::optional<std::string> open_sealed(const std::string& key, std::string_view sealed,
                                       std::string_view aad) {
  const std::string_view prefix = kSealPrefix;
  if (sealed.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string raw;
  if (!base64url_decode(sealed.substr(prefix.size()), &raw)) return std::nullopt;
  if (raw.size() < kNonceBytes + kTagBytes) return std::nullopt;
  const std::size_t n = raw.size() - kNonceBytes - kTagBytes;
  const auto* bytes = reinterpret_cast<unsigned char*>(raw.data());
  std::string out(n, '\0');
  CipherCtx c;
  int len = 0;
  const auto* k = reinterpret_cast<const unsigned char*>(key.data());
  bool ok =
      c.ctx != nullptr &&
      EVP_DecryptInit_ex(c.ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) == 1 &&
      EVP_DecryptInit_ex(c.ctx, nullptr, nullptr, k, bytes) == 1 &&
      EVP_DecryptUpdate(c.ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) == 1 &&
      EVP_DecryptUpdate(c.ctx, reinterpret_cast<unsigned char*>(out.data()), &len,
                        bytes + kNonceBytes, static_cast<int>(n)) == 1 &&
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes,
                          const_cast<unsigned char*>(bytes + kNonceBytes + n)) == 1;
  int final_len = 0;
  ok = ok && EVP_DecryptFinal_ex(c.ctx, reinterpret_cast<unsigned char*>(out.data()) + len,
                                 &final_len) == 1;
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

struct TokenStore::Impl {
  std::mutex mu;
  std::unique_ptr<SqliteDb> db;
  std::string key;  // 32 bytes
  std::string path;

  Error unopenable(const std::string& what) const {
    return invalid("token store " + path + ": " + what +
                   " does not open with quiver.oauth.key (another key, or the row was altered); "
                   "nothing was deleted");
  }

  // Decrypts and parses a sealed row with T::from_json.
  template <typename T>
  Result<T> unseal(const std::string& sealed, const std::string& aad, const std::string& what) {
    std::optional<std::string> plain = open_sealed(key, sealed, aad);
    if (!plain.has_value()) return unopenable(what);
    Result<Json> j = parse_json(*plain);
    if (!j.ok()) return unopenable(what);
    Result<T> value = T::from_json(*j);
    if (!value.ok()) return invalid("token store " + path + ": " + what + " is malformed");
    return value;
  }

  // The first row of `q` (issuer, sealed) of the clients table, opened.
  Result<std::optional<oauth::RegisteredClient>> client_row(SqliteQuery& q,
                                                            const std::string& connection_id) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) return std::optional<oauth::RegisteredClient>();
    const std::string issuer = q.text_at(0);
    Result<oauth::RegisteredClient> c = unseal<oauth::RegisteredClient>(
        q.text_at(1), aad_of({"clients", connection_id, issuer}),
        "the client registration of " + connection_id + " at " + issuer);
    if (!c.ok()) return c.error();
    return std::optional<oauth::RegisteredClient>(std::move(*c));
  }

  Status apply_schema() {
    SqliteTransaction tx(*db);
    if (!tx.begun().ok()) return tx.begun();
    Result<int64_t> version = db->query_integer("PRAGMA user_version", "reading user_version");
    if (!version.ok()) return version.error();
    if (*version > kTokenStoreSchemaVersion) {
      return invalid("token store " + path + ": schema version " + std::to_string(*version) +
                     " is newer than this agent's (" + std::to_string(kTokenStoreSchemaVersion) +
                     ")");
    }
    const std::string script(schema_asset("oauth-tokens.sql"));
    if (script.empty()) return Error(ErrorCode::kInternal, "schema/oauth-tokens.sql is missing");
    char* message = nullptr;
    int rc = sqlite3_exec(db->handle(), script.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
      Error e = db->sql_error(rc, "applying schema/oauth-tokens.sql");
      if (message != nullptr) e.message += std::string(": ") + message;
      sqlite3_free(message);
      return e;
    }
    return tx.commit();
  }
};

TokenStore::TokenStore() : impl_(std::make_unique<Impl>()) {}
TokenStore::~TokenStore() = default;

Result<std::unique_ptr<TokenStore>> TokenStore::open(const TokenStoreOptions& options) {
  Result<std::string> key = parse_token_key(options.key);
  if (!key.ok()) return invalid("quiver.oauth.key: " + key.error().message);
  std::unique_ptr<TokenStore> store(new TokenStore());
  Impl& s = *store->impl_;
  s.key = std::move(*key);
  s.path = options.path;
  s.db = std::make_unique<SqliteDb>("oauth token store", kQueries);
  if (Status st = s.db->open(options.path, options.busy_timeout_ms); !st.ok()) return st.error();
  // journal_mode answers a row, and cannot change inside a transaction.
  {
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(s.db->handle(), "PRAGMA journal_mode=WAL", -1, &stmt, nullptr);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW) return s.db->sql_error(rc, "setting journal_mode=WAL");
  }
  if (Status st = s.apply_schema(); !st.ok()) return st.error();
  return store;
}

Result<std::optional<AuthorizationRecord>> TokenStore::authorization(
    const std::string& connection_id, const Principal& principal) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteQuery q(*impl_->db, "token_authorization_select");
  q.text(":connection_id", connection_id).text(":principal", principal.str());
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<AuthorizationRecord>();
  const std::string issuer = q.text_at(0);
  Result<oauth::Authorization> a = impl_->unseal<oauth::Authorization>(
      q.text_at(1), aad_of({"authorizations", connection_id, principal.str(), issuer}),
      "the authorization of " + connection_id + " (" + principal.str() + ")");
  if (!a.ok()) return a.error();
  return std::optional<AuthorizationRecord>(
      AuthorizationRecord{connection_id, principal, std::move(*a), q.integer_at(2)});
}

Status TokenStore::put_authorization(const std::string& connection_id, const Principal& principal,
                                     const oauth::Authorization& authorization, int64_t now_ms) {
  const std::string& issuer = authorization.server.issuer;
  Result<std::string> sealed =
      seal(impl_->key, authorization.to_json().dump(),
           aad_of({"authorizations", connection_id, principal.str(), issuer}));
  if (!sealed.ok()) return sealed.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteTransaction tx(*impl_->db);
  if (!tx.begun().ok()) return tx.begun();
  Result<int> put = SqliteQuery(*impl_->db, "token_authorization_upsert")
                        .text(":connection_id", connection_id)
                        .text(":principal", principal.str())
                        .text(":issuer", issuer)
                        .text(":sealed", *sealed)
                        .integer(":updated_at", now_ms)
                        .run();
  if (!put.ok()) return put.error();
  Result<int> others = SqliteQuery(*impl_->db, "token_authorization_delete_other_issuers")
                           .text(":connection_id", connection_id)
                           .text(":principal", principal.str())
                           .text(":issuer", issuer)
                           .run();
  if (!others.ok()) return others.error();
  return tx.commit();
}

Result<bool> TokenStore::delete_authorization(const std::string& connection_id,
                                              const Principal& principal) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_authorization_delete")
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .run();
  if (!n.ok()) return n.error();
  return *n > 0;
}

Result<int> TokenStore::delete_authorizations_except(
    const std::vector<std::pair<std::string, Principal>>& keep) {
  std::set<std::pair<std::string, std::string>> kept;
  for (const auto& [cid, p] : keep) kept.emplace(cid, p.str());
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteTransaction tx(*impl_->db);
  if (!tx.begun().ok()) return tx.begun().error();
  std::vector<std::pair<std::string, std::string>> doomed;
  {
    SqliteQuery q(*impl_->db, "token_authorization_pairs");
    for (;;) {
      Result<bool> row = q.step();
      if (!row.ok()) return row.error();
      if (!*row) break;
      std::pair<std::string, std::string> pair{q.text_at(0), q.text_at(1)};
      if (kept.count(pair) == 0) doomed.push_back(std::move(pair));
    }
  }
  int deleted = 0;
  for (const auto& [cid, principal] : doomed) {
    Result<int> n = SqliteQuery(*impl_->db, "token_authorization_delete")
                        .text(":connection_id", cid)
                        .text(":principal", principal)
                        .run();
    if (!n.ok()) return n.error();
    deleted += *n;
  }
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return deleted;
}

Result<std::vector<std::pair<std::string, Principal>>> TokenStore::authorized() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::pair<std::string, Principal>> out;
  SqliteQuery q(*impl_->db, "token_authorization_pairs");
  for (;;) {
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (!*row) break;
    Result<Principal> p = Principal::parse(q.text_at(1));
    if (p.ok()) out.emplace_back(q.text_at(0), *p);
  }
  return out;
}

Result<std::optional<oauth::RegisteredClient>> TokenStore::client(const std::string& connection_id,
                                                                  const std::string& issuer) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteQuery q(*impl_->db, "token_client_select");
  q.text(":connection_id", connection_id).text(":issuer", issuer);
  return impl_->client_row(q, connection_id);
}

Result<std::optional<oauth::RegisteredClient>> TokenStore::latest_client(
    const std::string& connection_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteQuery q(*impl_->db, "token_client_latest");
  q.text(":connection_id", connection_id);
  return impl_->client_row(q, connection_id);
}

Status TokenStore::put_client(const std::string& connection_id,
                              const oauth::RegisteredClient& client) {
  Result<std::string> sealed =
      seal(impl_->key, client.to_json().dump(), aad_of({"clients", connection_id, client.issuer}));
  if (!sealed.ok()) return sealed.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_client_upsert")
                      .text(":connection_id", connection_id)
                      .text(":issuer", client.issuer)
                      .text(":sealed", *sealed)
                      .integer(":updated_at", system_clock_ms()())
                      .run();
  if (!n.ok()) return n.error();
  return Status::Ok();
}

Status TokenStore::put_pending(const std::string& connection_id, const Principal& principal,
                               const oauth::PendingAuthorization& pending) {
  const std::string state_hash = sha256_hex(pending.state);
  Result<std::string> sealed =
      seal(impl_->key, pending.to_json().dump(),
           aad_of({"pending", state_hash, connection_id, principal.str()}));
  if (!sealed.ok()) return sealed.error();
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteTransaction tx(*impl_->db);
  if (!tx.begun().ok()) return tx.begun();
  Result<int> expired = SqliteQuery(*impl_->db, "token_pending_delete_expired")
                            .integer(":now_ms", pending.created_at_ms)
                            .run();
  if (!expired.ok()) return expired.error();
  Result<int> n = SqliteQuery(*impl_->db, "token_pending_insert")
                      .text(":state_hash", state_hash)
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .text(":sealed", *sealed)
                      .integer(":expires_at", pending.expires_at_ms)
                      .run();
  if (!n.ok()) return n.error();
  return tx.commit();
}

Result<std::optional<PendingRecord>> TokenStore::take_pending(const std::string& state,
                                                              int64_t now_ms) {
  const std::string state_hash = sha256_hex(state);
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteTransaction tx(*impl_->db);
  if (!tx.begun().ok()) return tx.begun().error();
  std::string connection_id, principal_text, sealed;
  int64_t expires_at = 0;
  {
    SqliteQuery q(*impl_->db, "token_pending_select");
    q.text(":state_hash", state_hash);
    Result<bool> row = q.step();
    if (!row.ok()) return row.error();
    if (*row) {
      connection_id = q.text_at(0);
      principal_text = q.text_at(1);
      sealed = q.text_at(2);
      expires_at = q.integer_at(3);
    }
  }
  std::optional<PendingRecord> out;
  if (!sealed.empty() && expires_at > now_ms) {
    Result<Principal> principal = Principal::parse(principal_text);
    if (!principal.ok())
      return invalid("token store " + impl_->path + ": a pending row is malformed");
    // Opened before the row goes: a row that does not open stays (the transaction rolls back).
    Result<oauth::PendingAuthorization> p = impl_->unseal<oauth::PendingAuthorization>(
        sealed, aad_of({"pending", state_hash, connection_id, principal_text}),
        "a pending authorization of " + connection_id + " (" + principal_text + ")");
    if (!p.ok()) return p.error();
    out = PendingRecord{connection_id, *principal, std::move(*p)};
  }
  if (!sealed.empty()) {
    Result<int> n =
        SqliteQuery(*impl_->db, "token_pending_delete").text(":state_hash", state_hash).run();
    if (!n.ok()) return n.error();
  }
  Result<int> expired =
      SqliteQuery(*impl_->db, "token_pending_delete_expired").integer(":now_ms", now_ms).run();
  if (!expired.ok()) return expired.error();
  if (Status st = tx.commit(); !st.ok()) return st.error();
  return out;
}

Result<bool> TokenStore::try_lock_refresh(const std::string& connection_id,
                                          const Principal& principal, const std::string& holder,
                                          int64_t now_ms, int64_t ttl_ms) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_lock_acquire")
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .text(":holder", holder)
                      .integer(":until_ms", now_ms + ttl_ms)
                      .integer(":now_ms", now_ms)
                      .run();
  if (!n.ok()) return n.error();
  return *n > 0;
}

Status TokenStore::unlock_refresh(const std::string& connection_id, const Principal& principal,
                                  const std::string& holder) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_lock_release")
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .text(":holder", holder)
                      .run();
  if (!n.ok()) return n.error();
  return Status::Ok();
}

Result<std::optional<StepUpRecord>> TokenStore::step_up(const std::string& connection_id,
                                                        const Principal& principal) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SqliteQuery q(*impl_->db, "token_step_up_select");
  q.text(":connection_id", connection_id).text(":principal", principal.str());
  Result<bool> row = q.step();
  if (!row.ok()) return row.error();
  if (!*row) return std::optional<StepUpRecord>();
  return std::optional<StepUpRecord>(
      StepUpRecord{q.text_at(0), static_cast<int>(q.integer_at(1)), q.integer_at(2)});
}

Status TokenStore::put_step_up(const std::string& connection_id, const Principal& principal,
                               const StepUpRecord& record) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_step_up_upsert")
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .text(":scope", record.scope)
                      .integer(":attempts", record.attempts)
                      .integer(":updated_at", record.updated_at_ms)
                      .run();
  if (!n.ok()) return n.error();
  return Status::Ok();
}

Result<bool> TokenStore::delete_step_up(const std::string& connection_id,
                                        const Principal& principal) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Result<int> n = SqliteQuery(*impl_->db, "token_step_up_delete")
                      .text(":connection_id", connection_id)
                      .text(":principal", principal.str())
                      .run();
  if (!n.ok()) return n.error();
  return *n > 0;
}

}  // namespace quiver
