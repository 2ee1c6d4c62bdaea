// remote/remote_settings.hpp.
#include "remote/remote_settings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>

#include "store/tier_registry.hpp"
#include "util/env.hpp"
#include "util/log.hpp"
#include "util/unique_fd.hpp"

namespace unicache::detail {
namespace {

constexpr std::size_t kMinSecretBytes = 16;
constexpr std::size_t kMaxSecretBytes = 4096;

}  // namespace

std::string read_remote_secret(const std::string& path) {
  const std::string where = "the remote tier's secret file " + quoted(path, 256);
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

std::unique_ptr<remote_tier> make_redis_tier(redis_config config, std::string secret) {
  return std::make_unique<remote_tier>("redis", std::make_unique<redis_backend>(std::move(config)), std::move(secret));
}

std::shared_ptr<remote_tier> make_remote_tier(const std::string& url, const std::string& secret_file) {
  redis_config config = parse_redis_url(url);
  std::string secret = secret_file.empty() ? std::string() : read_remote_secret(secret_file);
  return make_redis_tier(std::move(config), std::move(secret));
}

namespace {
std::shared_ptr<storage_tier> make_redis_tier(std::string_view url, const std::string& secret_file) {
  return make_remote_tier(std::string(url), secret_file);
}
}  // namespace

void register_builtin_tiers() { register_tier_scheme("redis", &make_redis_tier); }

}  // namespace unicache::detail
