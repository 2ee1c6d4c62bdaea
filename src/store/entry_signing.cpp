// entry_signer (store/entry_signing.hpp).
#include "store/entry_signing.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "unicache/error.hpp"
#include "util/env.hpp"
#include "util/sha256.hpp"
#include "util/unique_fd.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kMacBytes = entry_signer::kMacBytes;
constexpr std::size_t kMinSecretBytes = 16;
constexpr std::size_t kMaxSecretBytes = 4096;

// HMAC-SHA256 under `secret` of the scope, a zero byte and the entry.
sha256_digest mac_of(const std::string& secret, const std::string& scope, byte_span entry) {
  hmac_sha256 mac(byte_span(reinterpret_cast<const unsigned char*>(secret.data()), secret.size()));
  const unsigned char zero = 0;
  mac.update(byte_span(reinterpret_cast<const unsigned char*>(scope.data()), scope.size()));
  mac.update(byte_span(&zero, 1));
  mac.update(entry);
  return mac.finish();
}

}  // namespace

byte_vector entry_signer::sign(byte_vector entry) const {
  if (secret_.empty()) return entry;
  const sha256_digest mac = mac_of(secret_, scope_, entry);
  entry.insert(entry.end(), mac.begin(), mac.end());
  return entry;
}

std::optional<byte_span> entry_signer::verify(byte_span value) const {
  if (secret_.empty()) return value;
  if (value.size() < kMacBytes) return std::nullopt;
  const byte_span entry = value.first(value.size() - kMacBytes);
  const sha256_digest mac = mac_of(secret_, scope_, entry);
  if (!equal_in_constant_time(mac.data(), value.data() + entry.size(), kMacBytes)) return std::nullopt;
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
