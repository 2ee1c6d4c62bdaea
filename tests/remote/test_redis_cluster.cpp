// The Redis Cluster router: key slots as Redis computes them, the checks of
// what nodes answer (redirections, slot maps), and against a real
// three-master cluster on loopback: keys on every master, a slot moved
// (MOVED) and one half-migrated (ASK) under a router with a stale map, a
// master killed or stalled, and eight threads while the map is reloaded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis_cluster_server.hpp"
#include "redis_server.hpp"
#include "remote/redis_cluster.hpp"

namespace unicache {
namespace {

using redis::cluster_slot_map;
using redis::key_slot;
using redis::redis_cluster;
using redis::redis_connection;
using redis::redis_element;
using redis::redis_result;
using redis::redis_status;

byte_vector bytes_of(const std::string& s) { return byte_vector(s.begin(), s.end()); }
std::string text_of(const redis_result& r) { return std::string(r.value.begin(), r.value.end()); }

TEST(RedisClusterSlots, KeysHashAsRedisHashesThem) {
  EXPECT_EQ(redis::crc16("123456789"), 0x31C3);
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), redis::crc16("foo{}{bar}") % 16384) << "an empty tag: the whole key";
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar")) << "the tag ends at the first '}'";
  EXPECT_EQ(key_slot("foo{{bar}}zap"), redis::crc16("{bar") % 16384);
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar")) << "the first tag only";
  EXPECT_EQ(key_slot("foo{bar"), redis::crc16("foo{bar") % 16384) << "no closing '}': the whole key";
  EXPECT_EQ(key_slot(""), 0);
}

TEST(RedisClusterReplies, RedirectionsAreReadAndAnythingElseIsNone) {
  const auto moved = redis::parse_redirect("MOVED 3999 127.0.0.1:6381", "seed");
  ASSERT_TRUE(moved);
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->target.host, "127.0.0.1");
  EXPECT_EQ(moved->target.port, 6381);
  const auto ask = redis::parse_redirect("ASK 16383 ::1:7000", "seed");
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->target.host, "::1");
  EXPECT_EQ(ask->target.port, 7000);
  for (const char* unknown : {"MOVED 1 :6380", "MOVED 1 ?:6380"}) {
    const auto r = redis::parse_redirect(unknown, "seed.internal");
    ASSERT_TRUE(r) << unknown;
    EXPECT_EQ(r->target.host, "seed.internal") << "an unknown host is the answering node's";
  }
  for (const char* bad : {"MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 1 h", "MOVED 1 h:0", "MOVED 1 h:65536",
                          "MOVED 1 h h:1", "MOVED 1", "MOVED  h:1", "ASK 1 \x1b[2J:1", "MOVED 1 h:1x",
                          "CLUSTERDOWN The cluster is down", "TRYAGAIN", "ERR MOVED 1 h:1", ""}) {
    EXPECT_FALSE(redis::parse_redirect(bad, "seed")) << bad;
  }
}

redis_element integer(std::int64_t v) {
  redis_element e;
  e.type = redis_element::kind::integer;
  e.integer = v;
  return e;
}
redis_element text(const std::string& t) {
  redis_element e;
  e.type = redis_element::kind::text;
  e.text = t;
  return e;
}
redis_element array(std::vector<redis_element> elements) {
  redis_element e;
  e.type = redis_element::kind::array;
  e.elements = std::move(elements);
  return e;
}
redis_element range(std::int64_t start, std::int64_t end, redis_element host, std::int64_t port) {
  return array({integer(start), integer(end), array({std::move(host), integer(port), text("id")})});
}

TEST(RedisClusterReplies, ASlotMapIsReadWithItsMastersOnce) {
  const redis_element reply = array({range(0, 99, text("10.0.0.1"), 7000), range(100, 16383, text(""), 7001),
                                     range(200, 199 + 0, text("10.0.0.1"), 7000)});
  std::string why;
  // The last range is reversed: refused. Without it, read.
  EXPECT_FALSE(redis::parse_cluster_slots(reply, "seed", why));
  redis_element good = reply;
  good.elements.pop_back();
  good.elements.push_back(array({integer(50), integer(50), array({text("10.0.0.1"), integer(7000)})}));
  EXPECT_FALSE(redis::parse_cluster_slots(good, "seed", why)) << "ranges that overlap";
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
  good.elements.pop_back();
  const auto map = redis::parse_cluster_slots(good, "seed", why);
  ASSERT_TRUE(map) << why;
  ASSERT_EQ(map->masters.size(), 2u);
  EXPECT_EQ(map->masters[1].host, "seed") << "an empty host is the answering node's";
  EXPECT_EQ(map->slot_master[0], 0);
  EXPECT_EQ(map->slot_master[99], 0);
  EXPECT_EQ(map->slot_master[100], 1);
  EXPECT_EQ(map->slot_master[16383], 1);
}

TEST(RedisClusterReplies, ASlotMapOutOfShapeIsAnErrorNeverACrash) {
  const redis_element cases[] = {
      text("OK"),
      array({}),
      array({text("x")}),
      array({array({integer(0), integer(16383)})}),
      array({range(-1, 5, text("h"), 1)}),
      array({range(0, 16384, text("h"), 1)}),
      array({range(0, 1, text("h"), 0)}),
      array({range(0, 1, text("h"), 65536)}),
      array({range(0, 1, text("h\r\nx"), 1)}),
      array({range(0, 1, text(std::string(300, 'h')), 1)}),
      array({range(0, 1, integer(5), 1)}),
      array({array({integer(0), integer(1), text("h:1")})}),
      array({array({integer(0), integer(1), array({text("h")})})}),
      array({array({text("0"), integer(1), array({text("h"), integer(1)})})}),
  };
  for (const redis_element& reply : cases) {
    std::string why;
    EXPECT_FALSE(redis::parse_cluster_slots(reply, "seed", why));
    EXPECT_FALSE(why.empty());
  }
  // More masters than the bound.
  std::vector<redis_element> many;
  for (int i = 0; i <= 1024; ++i) many.push_back(range(i, i, text("h"), i + 1));
  std::string why;
  EXPECT_FALSE(redis::parse_cluster_slots(array(std::move(many)), "seed", why));
  EXPECT_NE(why.find("1024"), std::string::npos) << why;
}

class RedisCluster : public testing::redis_cluster_test {
 protected:
  redis_result on_master(int i, std::initializer_list<std::string_view> args) {
    return redis_connection(cluster_->node_config(i)).command(args);
  }
  // The master that serves `key` (asked directly: the others answer MOVED).
  int owner_of(const std::string& key) {
    for (int i = 0; i < testing::redis_cluster_server::kMasters; ++i) {
      if (on_master(i, {"EXISTS", key}).status == redis_status::ok) return i;
    }
    return -1;
  }
  // A key of master `i` (with its own hash tag, so "{tag}x" is in its slot too).
  std::string tag_of_master(int i, const std::string& stem) {
    for (int n = 0; n < 1000; ++n) {
      const std::string tag = stem + std::to_string(n);
      if (owner_of("{" + tag + "}") == i) return tag;
    }
    ADD_FAILURE() << "no key of master " << i;
    return stem;
  }
  std::string id_of(int i) { return text_of(on_master(i, {"CLUSTER", "MYID"})); }
  // Starts moving `tag`'s slot from master `from` to `to` with its keys;
  // `finish`: every master is told it is `to`'s now.
  void move_slot(const std::string& tag, int from, int to, bool finish) {
    const std::string slot = std::to_string(key_slot(tag)), port = std::to_string(cluster_->port(to));
    ASSERT_EQ(on_master(to, {"CLUSTER", "SETSLOT", slot, "IMPORTING", id_of(from)}).status, redis_status::ok);
    ASSERT_EQ(on_master(from, {"CLUSTER", "SETSLOT", slot, "MIGRATING", id_of(to)}).status, redis_status::ok);
    redis_element keys;
    ASSERT_EQ(redis_connection(cluster_->node_config(from))
                  .command({"CLUSTER", "GETKEYSINSLOT", slot, "1000"}, 1 << 20, keys)
                  .status,
              redis_status::ok);
    for (const redis_element& key : keys.elements) {
      const auto r = on_master(from, {"MIGRATE", "127.0.0.1", port, key.text, "0", "5000"});
      ASSERT_EQ(r.status, redis_status::ok) << r.message;
    }
    if (!finish) return;
    for (const int i : {to, from, 3 - to - from}) {
      ASSERT_EQ(on_master(i, {"CLUSTER", "SETSLOT", slot, "NODE", id_of(to)}).status, redis_status::ok);
    }
  }

};

TEST_F(RedisCluster, KeysSpreadOverEveryMasterAndReadBack) {
  redis_cluster r(config());
  for (int i = 0; i < 300; ++i) {
    const std::string key = "key:" + std::to_string(i);
    const auto set = r.set(key, bytes_of("value " + std::to_string(i)));
    ASSERT_EQ(set.status, redis_status::ok) << key << ": " << set.message;
  }
  std::uint64_t total = 0;
  for (int i = 0; i < testing::redis_cluster_server::kMasters; ++i) {
    const auto size = on_master(i, {"DBSIZE"});
    ASSERT_EQ(size.status, redis_status::ok) << size.message;
    const std::uint64_t n = std::stoull(text_of(size));
    EXPECT_GT(n, 0u) << "master " << i << " holds some of the keys";
    total += n;
  }
  EXPECT_EQ(total, 300u);
  for (int i = 0; i < 300; ++i) {
    const std::string key = "key:" + std::to_string(i);
    const auto got = r.get(key, 64);
    ASSERT_EQ(got.status, redis_status::hit) << key << ": " << got.message;
    EXPECT_EQ(got.value, bytes_of("value " + std::to_string(i)));
    EXPECT_EQ(text_of(r.del(key)), "1");
    EXPECT_EQ(r.get(key, 64).status, redis_status::miss);
  }
  EXPECT_EQ(r.statistics().moved, 0u) << "the map was right from the start";
}

TEST_F(RedisCluster, MastersAreEachNodeAloneAndCommandsFollowHashTags) {
  redis_cluster r(config());
  const std::vector<redis_config> masters = r.masters();
  ASSERT_EQ(masters.size(), 3u);
  for (const redis_config& m : masters) {
    EXPECT_FALSE(m.cluster);
    EXPECT_EQ(redis_connection(m).command({"PING"}).status, redis_status::ok) << m.to_string();
  }
  ASSERT_EQ(r.command("{user1}", {"HSET", "{user1}.profile", "name", "ada", "lang", "en"}).status, redis_status::ok);
  std::vector<std::string> pairs;
  ASSERT_EQ(r.hgetall("{user1}.profile", pairs).status, redis_status::ok);
  EXPECT_EQ(pairs.size(), 4u);
}

TEST_F(RedisCluster, OneSeedWithClusterOnFindsTheOthers) {
  redis_cluster r(parse_redis_url("redis://127.0.0.1:" + std::to_string(cluster_->port(1)) + "?cluster=1"));
  for (int i = 0; i < 3; ++i) {
    const std::string key = "{" + tag_of_master(i, "seed") + "}";
    ASSERT_EQ(r.set(key, bytes_of("v")).status, redis_status::ok) << "master " << i;
    EXPECT_EQ(r.get(key, 64).status, redis_status::hit) << "master " << i;
  }
}

TEST_F(RedisCluster, AMovedSlotIsFollowedByARouterWithAStaleMap) {
  redis_cluster r(config());
  const std::string tag = tag_of_master(0, "moved"), key = "{" + tag + "}k";
  ASSERT_EQ(r.set(key, bytes_of("before the move")).status, redis_status::ok);
  move_slot(tag, 0, 1, /*finish=*/true);
  EXPECT_EQ(owner_of(key), 1);
  const auto got = r.get(key, 64);
  ASSERT_EQ(got.status, redis_status::hit) << got.message;
  EXPECT_EQ(got.value, bytes_of("before the move"));
  EXPECT_GE(r.statistics().moved, 1u);
  ASSERT_EQ(r.set(key, bytes_of("after")).status, redis_status::ok);
  EXPECT_EQ(r.get(key, 64).value, bytes_of("after"));
}

TEST_F(RedisCluster, AKeyInAMigratingSlotIsFoundThroughAsk) {
  redis_cluster r(config());
  const std::string tag = tag_of_master(2, "asked"), key = "{" + tag + "}k";
  ASSERT_EQ(r.set(key, bytes_of("migrated")).status, redis_status::ok);
  move_slot(tag, 2, 0, /*finish=*/false);  // the key is on master 0; the slot is still master 2's
  const auto got = r.get(key, 64);
  ASSERT_EQ(got.status, redis_status::hit) << got.message;
  EXPECT_EQ(got.value, bytes_of("migrated"));
  EXPECT_GE(r.statistics().asked, 1u);
  // A new key of the slot goes where the slot is going.
  ASSERT_EQ(r.set("{" + tag + "}new", bytes_of("n")).status, redis_status::ok);
  EXPECT_EQ(r.get("{" + tag + "}new", 64).status, redis_status::hit);
  EXPECT_EQ(r.statistics().moved, 0u) << "ASK leaves the map as it is";
}

TEST_F(RedisCluster, AKilledMasterFailsItsSlotsWithinTheTimeoutAndTheOthersGoOn) {
  const redis_config c = config("timeout_ms=300&connect_timeout_ms=100");
  redis_cluster r(c);
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back("{" + tag_of_master(i, "kill") + "}");
    ASSERT_EQ(r.set(keys.back(), bytes_of("v")).status, redis_status::ok);
  }
  cluster_->kill(0);
  const auto bound = std::chrono::milliseconds(5 * (c.timeout_ms + c.connect_timeout_ms));
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    const auto lost = r.get(keys[0], 64);
    // The others answer: the node's slots are unavailable, not the cluster.
    EXPECT_EQ(lost.status, redis_status::unavailable) << to_string(lost.status) << ": " << lost.message;
    EXPECT_LT(std::chrono::steady_clock::now() - start, bound) << "it returns, well within the timeout";
    EXPECT_NE(r.set(keys[0], bytes_of("v")).status, redis_status::ok);
    for (int i = 1; i < 3; ++i) {
      EXPECT_EQ(r.get(keys[i], 64).status, redis_status::hit) << "master " << i << " goes on";
      EXPECT_EQ(r.set(keys[i], bytes_of("w")).status, redis_status::ok);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the others mark it failed meanwhile
  }
  redis_cluster fresh(c);  // a router that never saw master 0 alive
  EXPECT_NE(fresh.get(keys[0], 64).status, redis_status::hit);
  EXPECT_EQ(fresh.get(keys[1], 64).status, redis_status::hit);
}

TEST_F(RedisCluster, ADownMasterIsProbedAgainAfterEachBackOff) {
  const redis_config c = config("timeout_ms=300&connect_timeout_ms=100&breaker_s=1");
  redis_cluster r(c);
  const std::string key = "{" + tag_of_master(0, "probe") + "}";
  ASSERT_EQ(r.set(key, bytes_of("v")).status, redis_status::ok);
  cluster_->kill(0);
  const std::string tried = "the other masters answer", skipped = "skipped for now";
  for (int back_off = 0; back_off < 3; ++back_off) {
    const auto probe = r.get(key, 64);
    EXPECT_EQ(probe.status, redis_status::unavailable);
    EXPECT_NE(probe.message.find(tried), std::string::npos) << "a call that tried the node: " << probe.message;
    const auto during = r.get(key, 64);
    EXPECT_EQ(during.status, redis_status::unavailable);
    EXPECT_NE(during.message.find(skipped), std::string::npos) << "skipped during the back-off: " << during.message;
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // breaker_s over: the next call probes
  }
}

TEST_F(RedisCluster, AStalledMasterTimesOutItsSlotsAndServesThemAgainWhenItGoesOn) {
  const redis_config c = config("timeout_ms=300&connect_timeout_ms=100&breaker_s=1");
  redis_cluster r(c);
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back("{" + tag_of_master(i, "stall") + "}");
    ASSERT_EQ(r.set(keys.back(), bytes_of("v")).status, redis_status::ok);
  }
  cluster_->freeze(1);
  const auto bound = std::chrono::milliseconds(5 * (c.timeout_ms + c.connect_timeout_ms));
  for (int round = 0; round < 2; ++round) {
    const auto start = std::chrono::steady_clock::now();
    const auto stalled = r.get(keys[1], 64);
    // A timeout that used the call's time stays a timeout (the caller's
    // breaker decides); one with time left for a map load from the others
    // makes the node unavailable alone.
    EXPECT_TRUE(stalled.status == redis_status::timeout || stalled.status == redis_status::error ||
                stalled.status == redis_status::unavailable)
        << to_string(stalled.status) << ": " << stalled.message;
    EXPECT_LT(std::chrono::steady_clock::now() - start, bound) << "a stalled node is a timeout, not a hang";
    EXPECT_EQ(r.get(keys[0], 64).status, redis_status::hit);
    EXPECT_EQ(r.get(keys[2], 64).status, redis_status::hit);
  }
  cluster_->thaw(1);
  // Its breaker (breaker_s) over, one call probes it, and it serves again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(r.get(keys[1], 64).status, redis_status::hit) << "served again once it goes on";
}

TEST_F(RedisCluster, EightThreadsReadAndWriteWhileTheMapIsReloaded) {
  redis_cluster r(config());
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread reloader([&] {
    while (!done) {
      r.refresh_slots();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      // At least 150 rounds, and on until a few maps have been loaded meanwhile.
      for (int i = 0; i < 150 || (r.statistics().map_loads < 4 && i < 100000); ++i) {
        const std::string key = std::to_string(t) + ":" + std::to_string(i);
        const byte_vector value = bytes_of(key + " value");
        const auto set = r.set(key, value);
        const auto got = r.get(key, 64);
        if (set.status != redis_status::ok || got.status != redis_status::hit || got.value != value) {
          if (failures++ < 5) ADD_FAILURE() << key << ": " << set.message << " / " << got.message;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done = true;
  reloader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(r.statistics().map_loads, 4u);
}

TEST(RedisClusterDown, AServerNotInClusterModeIsAnErrorThatSaysSo) {
  if (testing::redis_server_binary().empty()) GTEST_SKIP() << "no redis-server (Debian: apt-get install redis-server)";
  testing::redis_server plain;
  ASSERT_TRUE(plain.started());
  redis_cluster r(parse_redis_url(plain.url("cluster=1&timeout_ms=500")));
  const auto got = r.get("k", 64);
  EXPECT_EQ(got.status, redis_status::error);
  EXPECT_NE(got.message.find("cluster support disabled"), std::string::npos) << got.message;
  EXPECT_TRUE(r.masters().empty());
  EXPECT_GE(r.statistics().failed_loads, 1u);
}

TEST(RedisClusterDown, NoSeedAnsweringIsAnErrorWithinTheTimeout) {
  const int port = testing::free_port();  // nothing listens there
  redis_cluster r(parse_redis_url("redis://127.0.0.1:" + std::to_string(port) + "?cluster=1&timeout_ms=200"));
  const auto start = std::chrono::steady_clock::now();
  const auto got = r.get("k", 64);
  EXPECT_TRUE(got.status == redis_status::error || got.status == redis_status::timeout) << got.message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(RedisClusterDown, ADatabaseOtherThanZeroIsRefused) {
  redis_config c;
  c.host = "127.0.0.1";
  c.cluster = true;
  c.db = 2;
  EXPECT_THROW(redis_cluster r(c), unicache::invalid_argument);
}

}  // namespace
}  // namespace unicache
