// A GoogleTest fixture with a redis-server of its own (redis_server.hpp),
// skipped, saying why, where there is no redis-server.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "redis_server.hpp"
#include "unicache/remote.hpp"

namespace unicache::testing {

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
