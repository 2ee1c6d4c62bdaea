// entry_signer (store/entry_signing.hpp).
#include "store/entry_signing.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <memory>
#include <optional>
#include <string>

namespace unicache::detail {
namespace {

constexpr std::size_t kMacBytes = entry_signer::kMacBytes;

// HMAC-SHA256 under `secret` of the scope, a zero byte and the entry, or
// nullopt if OpenSSL fails.
std::optional<std::array<unsigned char, kMacBytes>> mac_of(const std::string& secret, const std::string& scope,
                                                           byte_span entry) {
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!hmac) return std::nullopt;
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac), &EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  const unsigned char zero = 0;
  std::array<unsigned char, kMacBytes> out{};
  std::size_t length = 0;
  if (!ctx ||
      !EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) ||
      !EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(scope.data()), scope.size()) ||
      !EVP_MAC_update(ctx.get(), &zero, 1) || !EVP_MAC_update(ctx.get(), entry.data(), entry.size()) ||
      !EVP_MAC_final(ctx.get(), out.data(), &length, out.size()) || length != kMacBytes) {
    return std::nullopt;
  }
  return out;
}

}  // namespace

byte_vector entry_signer::sign(byte_vector entry) const {
  if (secret_.empty()) return entry;
  const auto mac = mac_of(secret_, scope_, entry);
  if (!mac) return {};
  entry.insert(entry.end(), mac->begin(), mac->end());
  return entry;
}

std::optional<byte_span> entry_signer::verify(byte_span value) const {
  if (secret_.empty()) return value;
  if (value.size() < kMacBytes) return std::nullopt;
  const byte_span entry = value.first(value.size() - kMacBytes);
  const auto mac = mac_of(secret_, scope_, entry);
  if (!mac || CRYPTO_memcmp(mac->data(), value.data() + entry.size(), kMacBytes) != 0) return std::nullopt;
  return entry;
}

}  // namespace unicache::detail
