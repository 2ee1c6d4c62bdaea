// The remote tier of a redis:// URL (remote/remote_settings.hpp), and the
// registration of that scheme (unicache/remote.hpp).
#include "remote/remote_settings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>

#include "store/tier_registry.hpp"
#include "util/env.hpp"
#include "util/log.hpp"
#include "util/unique_fd.hpp"

namespace unicache::detail {
std::unique_ptr<remote_tier> make_redis_tier(redis_config config, std::string secret) {
  return std::make_unique<remote_tier>("redis", std::make_unique<redis_backend>(std::move(config)), std::move(secret));
}

std::shared_ptr<remote_tier> make_remote_tier(const std::string& url, const std::string& secret_file) {
  redis_config config = parse_redis_url(url);
  std::string secret = secret_file.empty() ? std::string() : read_secret_file(secret_file, "the remote tier's secret file");
  return make_redis_tier(std::move(config), std::move(secret));
}

namespace {
std::shared_ptr<storage_tier> redis_tier_factory(std::string_view url, const std::string& secret_file) {
  return make_remote_tier(std::string(url), secret_file);
}
}  // namespace

}  // namespace unicache::detail

namespace unicache {

void register_redis_tiers() {
  static std::once_flag once;
  std::call_once(once, [] { detail::register_tier_scheme("redis", &detail::redis_tier_factory); });
}

}  // namespace unicache
