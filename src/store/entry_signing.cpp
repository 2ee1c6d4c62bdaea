// entry_signer (store/entry_signing.hpp).
#include "store/entry_signing.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <optional>
#include <string>

#include "unicache/error.hpp"
#include "util/env.hpp"
#include "util/unique_fd.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kMacBytes = entry_signer::kMacBytes;
constexpr std::size_t kMinSecretBytes = 16;
constexpr std::size_t kMaxSecretBytes = 4096;

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

std::string read_secret_file(const std::string& path, const std::string& what) {
  const std::string where = what + " " + quoted(path, 256);
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw invalid_argument(where + " cannot be opened");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) throw invalid_argument(where + " is not a regular file");
  if (st.st_mode & (S_IWOTH | S_IWGRP)) throw invalid_argument(where + " is writable by its group or others");
  if (st.st_size > static_cast<off_t>(kMaxSecretBytes) + 1) {
    throw invalid_argument(where + " is longer than " + std::to_string(kMaxSecretBytes) + " bytes");
  }
  std::string secret(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = ::read(fd.get(), secret.data() + got, secret.size() - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  secret.resize(got);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    throw invalid_argument(where + " must hold " + std::to_string(kMinSecretBytes) + " to " +
                                std::to_string(kMaxSecretBytes) + " bytes");
  }
  return secret;
}

}  // namespace unicache::detail
