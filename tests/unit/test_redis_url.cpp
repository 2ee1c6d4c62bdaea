// The remote tier's redis:// URL: every part, its defaults and bounds, and errors that
// name the problem without quoting the password.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "unicache/remote.hpp"

namespace unicache {
namespace {

std::string error_of(std::string_view url) {
  try {
    parse_redis_url(url);
  } catch (const unicache::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(RedisUrl, AHostAloneTakesTheDefaults) {
  const redis_config c = parse_redis_url("redis://cache.internal");
  EXPECT_EQ(c.host, "cache.internal");
  EXPECT_EQ(c.port, 6379);
  EXPECT_EQ(c.db, 0u);
  EXPECT_EQ(c.user, "");
  EXPECT_EQ(c.password, "");
  EXPECT_EQ(c.prefix, "unicache");
  EXPECT_FALSE(c.read_only);
  EXPECT_EQ(c.connect_timeout_ms, 100u);
  EXPECT_EQ(c.timeout_ms, 1000u);
  EXPECT_EQ(c.ttl_s, 0u);
  EXPECT_EQ(c.breaker_s, 60u);
}

TEST(RedisUrl, EveryPart) {
  const redis_config c = parse_redis_url(
      "redis://ci:p%40ss%3Aw0rd@10.0.0.7:7000/3?prefix=fleet-a&read_only=1&connect_timeout_ms=50&timeout_ms=250&ttl_s=86400"
      "&breaker_s=5");
  EXPECT_EQ(c.host, "10.0.0.7");
  EXPECT_EQ(c.port, 7000);
  EXPECT_EQ(c.db, 3u);
  EXPECT_EQ(c.user, "ci");
  EXPECT_EQ(c.password, "p@ss:w0rd");
  EXPECT_EQ(c.prefix, "fleet-a");
  EXPECT_TRUE(c.read_only);
  EXPECT_EQ(c.connect_timeout_ms, 50u);
  EXPECT_EQ(c.timeout_ms, 250u);
  EXPECT_EQ(c.ttl_s, 86400u);
  EXPECT_EQ(c.breaker_s, 5u);
}

TEST(RedisUrl, APasswordAloneAndAnIpv6Host) {
  const redis_config c = parse_redis_url("redis://s3cret@[::1]:6380");
  EXPECT_EQ(c.user, "");
  EXPECT_EQ(c.password, "s3cret");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 6380);
}

TEST(RedisUrl, ToStringParsesBackAndNeverShowsThePassword) {
  const redis_config c = parse_redis_url("redis://ci:hunter2@h:1/2?prefix=x&ttl_s=5");
  const std::string shown = c.to_string();
  EXPECT_EQ(shown.find("hunter2"), std::string::npos) << shown;
  EXPECT_NE(shown.find("***"), std::string::npos) << shown;
  redis_config back = parse_redis_url(shown);
  EXPECT_EQ(back.host, "h");
  EXPECT_EQ(back.port, 1);
  EXPECT_EQ(back.db, 2u);
  EXPECT_EQ(back.user, "ci");
  EXPECT_EQ(back.prefix, "x");
  EXPECT_EQ(back.ttl_s, 5u);
  EXPECT_EQ(parse_redis_url("redis://[::1]").to_string().rfind("redis://[::1]:6379/0?", 0), 0u);
}

TEST(RedisUrl, SeveralHostsAreAClustersSeeds) {
  const redis_config c = parse_redis_url("redis://u:pw@10.0.0.1:7000,node-b,[::1]:7002/0?timeout_ms=50");
  EXPECT_TRUE(c.cluster);
  ASSERT_EQ(c.seeds.size(), 3u);
  EXPECT_EQ(c.seeds[0].host, "10.0.0.1");
  EXPECT_EQ(c.seeds[0].port, 7000);
  EXPECT_EQ(c.seeds[1].host, "node-b");
  EXPECT_EQ(c.seeds[1].port, 6379);
  EXPECT_EQ(c.seeds[2].host, "::1");
  EXPECT_EQ(c.seeds[2].port, 7002);
  EXPECT_EQ(c.host, "10.0.0.1") << "host and port are the first seed's";
  EXPECT_EQ(c.port, 7000);
  EXPECT_EQ(c.user, "u");
  EXPECT_EQ(c.password, "pw");
  EXPECT_EQ(c.timeout_ms, 50u);
}

TEST(RedisUrl, OneHostIsAClusterSeedWithClusterOn) {
  const redis_config one = parse_redis_url("redis://h:7000?cluster=1");
  EXPECT_TRUE(one.cluster);
  ASSERT_EQ(one.seeds.size(), 1u);
  EXPECT_EQ(one.seeds[0].host, "h");
  EXPECT_EQ(one.seeds[0].port, 7000);
  const redis_config plain = parse_redis_url("redis://h:7000?cluster=0");
  EXPECT_FALSE(plain.cluster);
  EXPECT_TRUE(plain.seeds.empty());
  EXPECT_FALSE(parse_redis_url("redis://h").cluster);
}

TEST(RedisUrl, AClusterPrintsEverySeedAndParsesBack) {
  const redis_config c = parse_redis_url("redis://ci:hunter2@a:1,[::1]:2,c?prefix=x");
  const std::string shown = c.to_string();
  EXPECT_EQ(shown.find("hunter2"), std::string::npos) << shown;
  EXPECT_EQ(shown.rfind("redis://ci:***@a:1,[::1]:2,c:6379/0?", 0), 0u) << shown;
  EXPECT_NE(shown.find("&cluster=1"), std::string::npos) << shown;
  const redis_config back = parse_redis_url(shown);
  EXPECT_TRUE(back.cluster);
  ASSERT_EQ(back.seeds.size(), 3u);
  EXPECT_EQ(back.seeds[1].host, "::1");
  EXPECT_EQ(back.seeds[2].port, 6379);
  EXPECT_EQ(back.prefix, "x");
  EXPECT_EQ(parse_redis_url("redis://h?cluster=1").to_string().find("redis://h:6379/0?"), 0u);
  EXPECT_EQ(parse_redis_url("redis://h").to_string().find("cluster"), std::string::npos);
}

TEST(RedisUrl, MalformedClusterUrlsSayWhatIsWrong) {
  std::string many = "redis://";
  for (int i = 0; i < 65; ++i) many += (i ? ",h" : "h") + std::to_string(i);
  const std::pair<std::string, const char*> cases[] = {
      {"redis://a,b/1", "database must be 0 in a cluster"},
      {"redis://a/3?cluster=1", "database must be 0 in a cluster"},
      {"redis://a,b?cluster=0", "cluster=0 with several hosts"},
      {"redis://a?cluster=2", "cluster"},
      {"redis://a,,b", "host"},
      {"redis://a,", "host"},
      {"redis://,a", "host"},
      {"redis://a,b:0", "the port"},
      {"redis://a,b:x", "the port"},
      {"redis://a,[::1", "closing"},
      {"redis://a,b c", "host"},
      {many, "more than 64 hosts"},
  };
  for (const auto& [url, want] : cases) {
    const std::string err = error_of(url);
    EXPECT_NE(err.find(want), std::string::npos) << url << " -> " << err;
  }
  std::string sixty_four = "redis://";
  for (int i = 0; i < 64; ++i) sixty_four += (i ? ",h" : "h") + std::to_string(i);
  EXPECT_EQ(parse_redis_url(sixty_four).seeds.size(), 64u);
}

TEST(RedisUrl, MalformedUrlsSayWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://h", "must start with redis://"},
      {"redis://", "host"},
      {"redis://h:0", "the port"},
      {"redis://h:65536", "the port"},
      {"redis://h:", "the port"},
      {"redis://h:x", "the port"},
      {"redis://h/abc", "the database"},
      {"redis://h/1000001", "the database"},
      {"redis://h?timeout_ms=0", "timeout_ms"},
      {"redis://h?timeout_ms=60001", "timeout_ms"},
      {"redis://h?connect_timeout_ms=-1", "connect_timeout_ms"},
      {"redis://h?read_only=yes", "read_only"},
      {"redis://h?ttl_s=31536001", "ttl_s"},
      {"redis://h?breaker_s=0", "breaker_s"},
      {"redis://h?prefix=a%20b", "prefix"},
      {"redis://h?prefix=", "prefix"},
      {"redis://h?prefix=a:1", "prefix"},
      {"redis://h?colour=blue", "unknown option"},
      {"redis://h?timeout_ms", "without a value"},
      {"redis://h#frag", "fragment"},
      {"redis://[::1", "closing"},
      {"redis://[zz]:1", "IPv6"},
      {"redis://@h", "empty password"},
      {"redis://u:%4@h", "percent-escape in the password"},
      {"redis://h h", "host"},
  };
  for (const auto& [url, want] : cases) {
    const std::string err = error_of(url);
    EXPECT_NE(err.find(want), std::string::npos) << url << " -> " << err;
  }
  EXPECT_NE(error_of(std::string("redis://h?prefix=") + std::string(5000, 'a')).find("longer than"), std::string::npos);
}

TEST(RedisUrl, ErrorsNeverQuoteThePassword) {
  for (const char* url : {"redis://u:topsecret@h:99999", "redis://u:topsecret@h?colour=1", "redis://topsecret@/x",
                          "redis://u:topsecret%zz@h"}) {
    const std::string err = error_of(url);
    EXPECT_FALSE(err.empty()) << url;
    EXPECT_EQ(err.find("topsecret"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace unicache
