// The Redis client of the remote tier against a real redis-server on
// loopback: values, misses, the size bound, a server that is down, paused,
// killed or asks for a password, the database and the expiry, and a peer
// that closed the socket (no SIGPIPE).
#include <gtest/gtest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "redis_test.hpp"
#include "remote/redis_client.hpp"

namespace unicache {
namespace {

using redis::redis_connection;
using redis::redis_status;

byte_vector bytes_of(const std::string& s) { return byte_vector(s.begin(), s.end()); }

using RedisClient = testing::redis_test;

TEST_F(RedisClient, SetGetDeleteAndMiss) {
  redis_connection c(config());
  EXPECT_EQ(c.get("k", 1024).status, redis_status::miss);
  const byte_vector value = bytes_of(std::string("\0binary\xff value", 14));
  ASSERT_EQ(c.set("k", value).status, redis_status::ok);
  const auto got = c.get("k", 1024);
  ASSERT_EQ(got.status, redis_status::hit) << got.message;
  EXPECT_EQ(got.value, value);
  const auto removed = c.del("k");
  EXPECT_EQ(removed.status, redis_status::ok);
  EXPECT_EQ(removed.value, bytes_of("1"));
  EXPECT_EQ(c.get("k", 1024).status, redis_status::miss);
}

TEST_F(RedisClient, AValueOverTheBoundIsAMissAndIsNotReadWhole) {
  redis_connection c(config());
  ASSERT_EQ(c.set("big", byte_vector(2 << 20, 7)).status, redis_status::ok);
  const auto got = c.get("big", 1 << 20);
  EXPECT_EQ(got.status, redis_status::miss);
  EXPECT_NE(got.message.find("over"), std::string::npos) << got.message;
  EXPECT_TRUE(got.value.empty());
  EXPECT_EQ(c.get("big", 2 << 20).value.size(), std::size_t{2} << 20);
}

TEST_F(RedisClient, AServerThatIsDownIsAnErrorAndOneThatReturnsIsUsedAgain) {
  redis_connection c(config("connect_timeout_ms=200"));
  ASSERT_EQ(c.set("k", bytes_of("v")).status, redis_status::ok);
  server_.kill();
  const auto down = c.get("k", 64);
  EXPECT_TRUE(down.status == redis_status::error || down.status == redis_status::timeout) << to_string(down.status);
  EXPECT_EQ(c.get("k", 64).status, redis_status::error) << "refused while it is down";
  ASSERT_TRUE(server_.start());
  if (server_.port() != c.config().port) GTEST_SKIP() << "the port was taken meanwhile";
  EXPECT_EQ(c.get("k", 64).status, redis_status::miss) << "a new, empty server";
  EXPECT_EQ(c.set("k", bytes_of("v")).status, redis_status::ok);
}

TEST_F(RedisClient, APausedServerIsATimeoutNotAHang) {
  redis_connection c(config("timeout_ms=200"));
  ASSERT_EQ(c.set("k", bytes_of("v")).status, redis_status::ok);
  redis_connection admin(config());
  const auto pause_start = std::chrono::steady_clock::now();
  ASSERT_EQ(admin.command({"CLIENT", "PAUSE", "1000", "ALL"}).status, redis_status::ok);
  const auto paused = c.get("k", 64);
  EXPECT_EQ(paused.status, redis_status::timeout) << paused.message;
  std::this_thread::sleep_until(pause_start + std::chrono::milliseconds(1200));  // the pause is over
  EXPECT_EQ(c.get("k", 64).status, redis_status::hit) << "reconnects after the timeout";
}

TEST_F(RedisClient, TheDatabaseAndTheExpiryApply) {
  redis_config db2 = config("ttl_s=100");
  db2.db = 2;
  redis_connection c2(db2), c0(config());
  ASSERT_EQ(c2.set("k", bytes_of("v")).status, redis_status::ok);
  EXPECT_EQ(c0.get("k", 64).status, redis_status::miss);
  EXPECT_EQ(c2.get("k", 64).status, redis_status::hit);
  const auto ttl = c2.command({"TTL", "k"});
  ASSERT_EQ(ttl.status, redis_status::ok);
  const int seconds = std::stoi(std::string(ttl.value.begin(), ttl.value.end()));
  EXPECT_GT(seconds, 0);
  EXPECT_LE(seconds, 100);
}

TEST_F(RedisClient, APeerThatClosedTheSocketRaisesNoSigpipe) {
  redis_connection c(config());
  ASSERT_EQ(c.set("k", bytes_of("v")).status, redis_status::ok);
  server_.kill();
  // The first write may still be accepted by the kernel; the ones after the
  // reset fail with EPIPE, which without the guard would kill this process.
  for (int i = 0; i < 3; ++i) {
    const auto r = c.set("k", byte_vector(8 << 20, 1));
    EXPECT_NE(r.status, redis_status::ok);
  }
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "no SIGPIPE left pending";
}

class RedisClientAuth : public testing::redis_test {
 protected:
  RedisClientAuth() : redis_test("correct-horse") {}
};

TEST_F(RedisClientAuth, APasswordIsSentAndNeverShown) {
  redis_config c = parse_redis_url(server_.url());
  redis_connection good(c);
  EXPECT_EQ(good.set("k", bytes_of("v")).status, redis_status::ok);

  c.password = "wrong-battery";
  redis_connection wrong(c);
  const auto refused = wrong.get("k", 64);
  EXPECT_EQ(refused.status, redis_status::error);
  EXPECT_EQ(refused.message.find("wrong-battery"), std::string::npos) << refused.message;
  EXPECT_NE(refused.message.find("***"), std::string::npos) << refused.message;

  c.password.clear();
  redis_connection none(c);
  const auto noauth = none.get("k", 64);
  EXPECT_EQ(noauth.status, redis_status::refused) << "the server answered, with an error";
  EXPECT_NE(noauth.message.find("NOAUTH"), std::string::npos) << noauth.message;
}

}  // namespace
}  // namespace unicache
