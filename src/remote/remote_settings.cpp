// The redis:// tier of a configuration or URL (remote/remote_settings.hpp),
// and the registration of that scheme (unicache/remote.hpp).
#include "remote/remote_settings.hpp"

#include <mutex>

#include "util/env.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
std::unique_ptr<remote_tier> make_redis_tier(redis_config config, std::string secret) {
  return std::make_unique<remote_tier>("redis", std::make_unique<redis_backend>(std::move(config)), std::move(secret));
}

std::shared_ptr<storage_tier> make_redis_tier_of_url(std::string_view url, const std::string& secret_file) {
  redis_config config = parse_redis_url(url);
  return make_redis_tier(std::move(config), tier_secret(secret_file));
}

std::string tier_secret(const std::string& secret_file) {
  return secret_file.empty() ? std::string() : read_secret_file(secret_file, "the remote tier's secret file");
}

}  // namespace unicache::redis

namespace unicache {

void register_redis_tiers() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_tier_scheme("redis", &redis::make_redis_tier_of_url, &redis::make_redis_maintenance);
  });
}

}  // namespace unicache
