// A GoogleTest fixture with a redis-server of its own (redis_server.hpp),
// skipped, saying why, where there is no redis-server.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "redis_server.hpp"
#include "remote/redis_backend.hpp"
#include "store/remote_tier.hpp"
#include "unicache/remote.hpp"

namespace unicache::testing {

// A remote tier on a Redis server, as the tier registry makes one for a
// redis:// URL, with its backend's key names at hand.
class redis_tier : public detail::remote_tier {
 public:
  redis_tier(redis_config config, std::string secret)
      : remote_tier("redis", std::make_unique<redis::redis_backend>(std::move(config)), std::move(secret)) {}
  const redis::redis_backend& redis() const { return static_cast<const redis::redis_backend&>(backend()); }
};

class redis_test : public ::testing::Test {
 protected:
  explicit redis_test(std::string password = "") : server_(std::move(password)) {}
  void SetUp() override {
    if (redis_server_binary().empty()) GTEST_SKIP() << "no redis-server (Debian: apt-get install redis-server)";
    ASSERT_TRUE(server_.started()) << "redis-server did not start";
  }
  // The server's URL with `options`, parsed.
  redis_config config(const std::string& options = "") { return parse_redis_url(server_.url(options)); }

  redis_server server_;
};

}  // namespace unicache::testing
