#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <latch>
#include <thread>
#include <vector>

#include "cache_test_support.hpp"
#include "unicache/cache.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(EvictionCallback, RunsAfterRemovalWithTheEntrysScopeKeyAndValue) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::vector<std::string> evicted;
  cache.add_eviction_callback(kOwner, [&](const eviction_event& e) {
    EXPECT_FALSE(cache.contains(e.scope, e.owner, e.key)) << "called before removal";
    EXPECT_EQ(e.scope, (cache_scope{engine_kind::cpu, 0, 9}));
    EXPECT_EQ(e.owner, kOwner);
    EXPECT_EQ(*std::static_pointer_cast<int>(e.value.get()), 41);
    evicted.emplace_back(e.key);
  });
  add_int(cache, {engine_kind::cpu, 0, 9}, "old", 41);
  add_int(cache, {engine_kind::cpu, 0, 9}, "new", 42);
  EXPECT_EQ(evicted, std::vector<std::string>{"old"});
}

TEST(EvictionCallback, MayCallBackIntoTheCacheWithoutDeadlock) {
  unified_cache cache(config_with(2, eviction_policy::lru));
  int calls = 0;
  cache.add_eviction_callback(kOwner, [&](const eviction_event& e) {
    ++calls;
    // Every kind of reentry: lookups, inserts (which may evict again),
    // stats, capacity changes and callback registration of another backend.
    add_int(cache, e.scope, "reinserted_" + std::to_string(calls), 0, 1);
    (void)cache.stats(e.scope);
    (void)cache.contains(e.scope, e.owner, e.key);
    cache.set_capacity(engine_kind::cpu, 2, eviction_policy::lru);
    cache.add_eviction_callback(kOwner + 1, [](const eviction_event&) {});
  });
  for (int i = 0; i < 10; ++i) add_int(cache, cpu_scope(), "k" + std::to_string(i), i);
  EXPECT_GT(calls, 0);
}

TEST(EvictionCallback, OnlyTheOwningBackendsCallbackRuns) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  int mine = 0, other = 0;
  cache.add_eviction_callback(kOwner, [&](const eviction_event&) { ++mine; });
  cache.add_eviction_callback(kOwner + 1, [&](const eviction_event&) { ++other; });
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1);
  EXPECT_EQ(mine, 1);
  EXPECT_EQ(other, 0);
}

TEST(EvictionCallback, RunsForClearButNotForRemoveOrFailedBuilds) {
  unified_cache cache;
  int calls = 0;
  cache.add_eviction_callback(kOwner, [&](const eviction_event&) { ++calls; });
  add_int(cache, cpu_scope(), "removed", 1);
  cache.remove(cpu_scope(), kOwner, "removed");
  EXPECT_THROW(cache.get_or_build<int>(cpu_scope(), kOwner, "failed", kMb,
                                       []() -> std::shared_ptr<int> { throw std::runtime_error("x"); }),
               std::runtime_error);
  EXPECT_EQ(calls, 0);
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(1), "b", 1);
  cache.clear();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(EvictionCallback, UnsubscribingWaitsForARunningCallback) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::latch running(1), release(1);
  std::atomic<bool> finished{false};
  const eviction_subscription sub = cache.add_eviction_callback(kOwner, [&](const eviction_event&) {
    running.count_down();
    release.wait();
    finished = true;
  });
  add_int(cache, cpu_scope(), "a", 1);
  std::thread evictor([&] { add_int(cache, cpu_scope(), "b", 1); });
  running.wait();
  std::atomic<bool> finished_when_cleared{false};
  std::thread clearer([&] {
    EXPECT_TRUE(cache.remove_eviction_callback(sub));
    finished_when_cleared = finished.load();
  });
  std::this_thread::yield();
  release.count_down();
  clearer.join();
  evictor.join();
  EXPECT_TRUE(finished_when_cleared.load());
}

TEST(EvictionCallback, MayUnsubscribeItself) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  int calls = 0;
  eviction_subscription self;
  self = cache.add_eviction_callback(kOwner, [&](const eviction_event&) {
    ++calls;
    cache.remove_eviction_callback(self);
  });
  for (int i = 0; i < 4; ++i) add_int(cache, cpu_scope(), "k" + std::to_string(i), i);
  EXPECT_EQ(calls, 1);
}

TEST(EvictionCallback, ASecondSubscriberOfOneBackendAddsToTheFirstAndNeverReplacesIt) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::vector<std::string> order;
  const eviction_subscription first =
      cache.add_eviction_callback(kOwner, [&](const eviction_event& e) { order.push_back("first:" + std::string(e.key)); });
  const eviction_subscription second =
      cache.add_eviction_callback(kOwner, [&](const eviction_event& e) { order.push_back("second:" + std::string(e.key)); });
  EXPECT_NE(first.id, second.id);
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1);
  EXPECT_EQ(order, (std::vector<std::string>{"first:a", "second:a"})) << "both, in the order they subscribed";

  EXPECT_TRUE(cache.remove_eviction_callback(second));
  EXPECT_FALSE(cache.remove_eviction_callback(second)) << "already removed";
  order.clear();
  add_int(cache, cpu_scope(), "c", 1);
  EXPECT_EQ(order, std::vector<std::string>{"first:b"}) << "removing one leaves the other";
}

TEST(EvictionCallback, AUserObservingABackendKeepsTheBackendsOwnCallbackWorking) {
  // What a user watching onednn_cpu's evictions did: subscribing must not
  // switch off the backend's own handle dropping.
  unified_cache cache(config_with(1, eviction_policy::lru));
  cache_handle<int> held;
  cache.add_eviction_callback(kOwner, [&](const eviction_event&) { held = {}; });  // the backend's
  int observed = 0;
  cache.add_eviction_callback(kOwner, [&](const eviction_event&) { ++observed; });  // the user's
  held = cache.get_or_build<int>(cpu_scope(), kOwner, "w", kMb, [] { return std::make_shared<int>(1); });
  add_int(cache, cpu_scope(), "other", 1);
  EXPECT_EQ(observed, 1);
  EXPECT_FALSE(held) << "the backend's callback ran too and dropped its handle";
}

TEST(EvictionCallback, AnEmptyCallbackIsRejected) {
  unified_cache cache;
  EXPECT_THROW(cache.add_eviction_callback(kOwner, eviction_callback()), cache_error);
  EXPECT_FALSE(cache.remove_eviction_callback({}));
}

TEST(EvictionCallback, AnExceptionFromACallbackDoesNotEscapeIntoTheCaller) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  cache.add_eviction_callback(kOwner, [](const eviction_event&) { throw std::runtime_error("bug"); });
  add_int(cache, cpu_scope(), "a", 1);
  EXPECT_NO_THROW(add_int(cache, cpu_scope(), "b", 1));
}

// The handle path: a backend keeps the handle and checks valid()
// (one atomic load) instead of looking the key up at every execution.
TEST(CacheHandle, IsValidWhileCachedAndInvalidAfterEviction) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  bool dropped_by_callback = false;
  cache_handle<int> packed = cache.get_or_build<int>(cpu_scope(), kOwner, "w", kMb,
                                                     [] { return std::make_shared<int>(7); });
  cache.add_eviction_callback(kOwner, [&](const eviction_event&) {
    dropped_by_callback = true;
    EXPECT_FALSE(packed.valid()) << "the callback must see the entry already gone";
  });
  EXPECT_TRUE(packed.valid());
  auto again = cache.get_or_build<int>(cpu_scope(), kOwner, "w", kMb, [] { return std::make_shared<int>(8); });
  EXPECT_EQ(again.get(), packed.get()) << "a hit returns the cached value";
  add_int(cache, cpu_scope(), "other", 1);
  EXPECT_TRUE(dropped_by_callback);
  EXPECT_FALSE(packed.valid());
  EXPECT_EQ(*packed, 7) << "the value itself lives on while the handle holds it";
}

TEST(CacheHandle, ValueThatWasNotCachedGivesAnInvalidHandle) {
  unified_cache cache(config_with(1, eviction_policy::no_evict));
  auto h = cache.get_or_build<int>(cpu_scope(), kOwner, "big", 2 * kMb, [] { return std::make_shared<int>(1); });
  EXPECT_TRUE(h);
  EXPECT_FALSE(h.valid());
  EXPECT_FALSE(cache_handle<int>().valid());
}

}  // namespace
}  // namespace unicache

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(Evict, EvictScopeRemovesOneContextsEntriesOfEveryBackendWithCallbacks) {
  unified_cache cache;
  const cache_scope mine{engine_kind::gpu, 0, 1}, other{engine_kind::gpu, 0, 2};
  std::vector<std::string> evicted;
  for (owner_id b : {kOwner, kOwner + 1}) {
    cache.add_eviction_callback(b, [&](const eviction_event& e) { evicted.emplace_back(e.key); });
  }
  add_int(cache, mine, "a", 1);
  add_int(cache, mine, "b", 2, kMb, 1000, kOwner + 1);
  add_int(cache, other, "c", 3);
  EXPECT_EQ(cache.evict_scope(mine), 2 * kMb);
  EXPECT_EQ(cache.stats(mine).entries, 0u);
  EXPECT_TRUE(contains(cache, other, "c")) << "another context keeps its entries";
  std::sort(evicted.begin(), evicted.end());
  EXPECT_EQ(evicted, (std::vector<std::string>{"a", "b"}));
}

TEST(Evict, EvictDeviceRemovesOneBackendsFinishedEntriesButNotOnesBeingBuilt) {
  unified_cache cache;
  const cache_scope one{engine_kind::gpu, 3, 1}, two{engine_kind::gpu, 3, 2};
  add_int(cache, one, "done", 1);
  add_int(cache, two, "done too", 2);
  add_int(cache, one, "another backend's", 3, kMb, 1000, kOwner + 1);
  std::promise<cache_value> building;  // a build in flight (e.g. the caller's, out of memory)
  ASSERT_FALSE(cache.get_or_add(one, kOwner, "in flight", kMb, 1000, building.get_future().share()).valid());
  EXPECT_EQ(cache.evict_device(engine_kind::gpu, 3, kOwner), 2 * kMb);
  EXPECT_FALSE(contains(cache, one, "done"));
  EXPECT_FALSE(contains(cache, two, "done too"));
  EXPECT_TRUE(cache.contains(one, kOwner + 1, "another backend's"));
  EXPECT_TRUE(contains(cache, one, "in flight")) << "its builder holds what it allocated anyway";
  building.set_value(std::make_shared<int>(4));
}

}  // namespace
}  // namespace unicache
