#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "cache_test_support.hpp"
#include "unicache/cache.hpp"
#include "util/epoch.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(CachePolicy, NoEvictRefusesNewEntriesWhenFullAndKeepsTheOldOnes) {
  unified_cache cache(config_with(3, eviction_policy::no_evict));
  for (const char* k : {"a", "b", "c"}) EXPECT_TRUE(add_int(cache, cpu_scope(), k, 1).built);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "d", 1).built);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "d", 1).built) << "a refused value is not cached";
  for (const char* k : {"a", "b", "c"}) EXPECT_TRUE(contains(cache, cpu_scope(), k)) << k;
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.refused_full, 2u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.bytes, 3 * kMb);
}

TEST(CachePolicy, ValueLargerThanTheCapacityIsRefusedUnderEveryPolicy) {
  for (auto policy : {eviction_policy::no_evict, eviction_policy::lru, eviction_policy::cost}) {
    unified_cache cache(config_with(2, policy));
    add_int(cache, cpu_scope(), "small", 1);
    EXPECT_TRUE(add_int(cache, cpu_scope(), "huge", 1, 3 * kMb).built);
    EXPECT_TRUE(add_int(cache, cpu_scope(), "huge", 1, 3 * kMb).built);
    EXPECT_TRUE(contains(cache, cpu_scope(), "small")) << "an oversize value must not evict";
    EXPECT_EQ(cache.stats(cpu_scope()).refused_oversize, 2u) << to_string(policy);
  }
}

TEST(CachePolicy, LruEvictsTheLeastRecentlyUsedEntry) {
  unified_cache cache(config_with(3, eviction_policy::lru));
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1);
  add_int(cache, cpu_scope(), "c", 1);
  add_int(cache, cpu_scope(), "a", 1);  // use a: b is now least recent
  add_int(cache, cpu_scope(), "d", 1);
  EXPECT_FALSE(contains(cache, cpu_scope(), "b"));
  add_int(cache, cpu_scope(), "c", 1);  // use c: a is now least recent
  add_int(cache, cpu_scope(), "e", 1);
  EXPECT_FALSE(contains(cache, cpu_scope(), "a"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "c"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "d"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "e"));
}

TEST(CachePolicy, LruKeepsAnEntryHitAfterTheLastInsertionOverOneNeverReused) {
  // K1, K2, K1, K3 at 400 KB each in 1 MB: K2 is least recently used.
  constexpr std::size_t k400 = 400 * 1024;
  for (int round = 0; round < 20; ++round) {  // a tie would go either way: repeat
    unified_cache cache(config_with(1, eviction_policy::lru));
    const std::string prefix = std::to_string(round);
    add_int(cache, cpu_scope(), prefix + "K1", 1, k400);
    add_int(cache, cpu_scope(), prefix + "K2", 2, k400);
    EXPECT_FALSE(add_int(cache, cpu_scope(), prefix + "K1", 1, k400).built);
    add_int(cache, cpu_scope(), prefix + "K3", 3, k400);
    EXPECT_TRUE(contains(cache, cpu_scope(), prefix + "K1")) << "round " << round << ": K1 was used last";
    EXPECT_FALSE(contains(cache, cpu_scope(), prefix + "K2")) << "round " << round;
    EXPECT_TRUE(contains(cache, cpu_scope(), prefix + "K3"));
  }
}

TEST(CachePolicy, CostEvictsTheCheapestToRebuildFirst) {
  unified_cache cache(config_with(3, eviction_policy::cost));
  add_int(cache, cpu_scope(), "compile_1s", 1, kMb, 1'000'000'000);
  add_int(cache, cpu_scope(), "reorder_10us", 1, kMb, 10'000);
  add_int(cache, cpu_scope(), "compile_200ms", 1, kMb, 200'000'000);
  add_int(cache, cpu_scope(), "new", 1, kMb, 50'000'000);
  EXPECT_FALSE(contains(cache, cpu_scope(), "reorder_10us"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "compile_1s"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "compile_200ms"));
}

TEST(CachePolicy, CostPrefersToEvictLargeEntriesOfEqualCost) {
  unified_cache cache(config_with(4, eviction_policy::cost));
  add_int(cache, cpu_scope(), "small", 1, 1 * kMb, 1'000'000);
  add_int(cache, cpu_scope(), "large", 1, 2 * kMb, 1'000'000);
  add_int(cache, cpu_scope(), "next", 1, 2 * kMb, 1'000'000);  // needs 1 MB more
  EXPECT_FALSE(contains(cache, cpu_scope(), "large"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "small"));
}

TEST(CachePolicy, CostKeepsFrequentlyUsedEntries) {
  unified_cache cache(config_with(2, eviction_policy::cost));
  add_int(cache, cpu_scope(), "hot", 1);
  add_int(cache, cpu_scope(), "cold", 1);
  for (int i = 0; i < 10; ++i) add_int(cache, cpu_scope(), "hot", 1);
  add_int(cache, cpu_scope(), "new", 1);
  EXPECT_TRUE(contains(cache, cpu_scope(), "hot"));
  EXPECT_FALSE(contains(cache, cpu_scope(), "cold"));
}

TEST(CachePolicy, ReportedCostReplacesTheEstimate) {
  unified_cache cache(config_with(2, eviction_policy::cost));
  add_int(cache, cpu_scope(), "estimated_dear", 1, kMb, 1'000'000'000);
  add_int(cache, cpu_scope(), "estimated_cheap", 1, kMb, 1'000);
  cache.update_cost(cpu_scope(), kOwner, "estimated_dear", 1'000);
  cache.update_cost(cpu_scope(), kOwner, "estimated_cheap", 1'000'000'000);
  add_int(cache, cpu_scope(), "new", 1, kMb, 1'000'000);
  EXPECT_FALSE(contains(cache, cpu_scope(), "estimated_dear"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "estimated_cheap"));
}

// COST's window holds 1% of the capacity: with 1 MB entries in a few MB, just
// the newest entry, which the next insertion pushes out to face admission.

TEST(CachePolicy, CostTurnsAwayAWindowLeaverWorthLessThanWhatItWouldDisplaceUntilItKeepsComingBack) {
  unified_cache cache(config_with(3, eviction_policy::cost));
  add_int(cache, cpu_scope(), "compile_1s", 1, kMb, 1'000'000'000);
  add_int(cache, cpu_scope(), "compile_500ms", 1, kMb, 500'000'000);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "copy_1ms", 1, kMb, 1'000'000).built);
  EXPECT_TRUE(contains(cache, cpu_scope(), "copy_1ms")) << "a new entry always enters the window";
  // The next insertion pushes it out: a 1 ms rebuild would displace a
  // 500 ms one, so it goes and nothing else does.
  add_int(cache, cpu_scope(), "compile_800ms", 1, kMb, 800'000'000);
  EXPECT_FALSE(contains(cache, cpu_scope(), "copy_1ms"));
  cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.refused_admission, 1u);
  EXPECT_EQ(s.evictions, 1u) << "a refused entry was cached: its leaving is an eviction";
  for (const char* k : {"compile_1s", "compile_500ms", "compile_800ms"}) EXPECT_TRUE(contains(cache, cpu_scope(), k)) << k;
  // Its uses are remembered across refusals: asked for often enough, it
  // gets in and stays. The fillers that push it out of the window cost what
  // it costs: one a thousand times cheaper never pushes out an entry worth
  // more than 128 times as much (COST's promise, test_cache_cost_promise).
  int rounds = 0;
  while (rounds < 2000) {
    ++rounds;
    add_int(cache, cpu_scope(), "copy_1ms", 1, kMb, 1'000'000);
    add_int(cache, cpu_scope(), "filler_" + std::to_string(rounds), 1, kMb, 1'000'000);  // pushes it out
    if (contains(cache, cpu_scope(), "copy_1ms")) break;
  }
  EXPECT_TRUE(contains(cache, cpu_scope(), "copy_1ms")) << "after " << rounds << " rounds";
  EXPECT_GT(rounds, 100) << "a cheap entry needs many uses to displace an expensive one";
  EXPECT_TRUE(contains(cache, cpu_scope(), "compile_800ms"));
}

TEST(CachePolicy, CostAdmitsAnEntryUsedAgainWhileInTheWindow) {
  // A kernel a request builds and then uses three more times: its uses in
  // the window count when it leaves. Once used, the same cost is turned away.
  for (const int uses : {1, 4}) {
    unified_cache cache(config_with(3, eviction_policy::cost));
    add_int(cache, cpu_scope(), "a_100ms", 1, kMb, 100'000'000);
    add_int(cache, cpu_scope(), "b_100ms", 1, kMb, 100'000'000);
    for (int i = 0; i < uses; ++i) add_int(cache, cpu_scope(), "kernel_40ms", 1, kMb, 40'000'000);
    add_int(cache, cpu_scope(), "next_40ms", 1, kMb, 40'000'000);  // pushes it out of the window
    EXPECT_EQ(contains(cache, cpu_scope(), "kernel_40ms"), uses == 4) << uses << " uses";
    EXPECT_EQ(cache.stats(cpu_scope()).refused_admission, uses == 4 ? 0u : 1u) << uses << " uses";
  }
}

TEST(CachePolicy, CostTurnsAwayALargeCheapEntryWithoutPushingTheWindowOut) {
  // Kernels of 100 KB that cost 500 ms, and a 2.5 MB weight that packs in
  // 1 ms: the weight would need most kernels evicted, so it is not cached,
  // and the kernel in the window stays there for its next use.
  constexpr std::size_t k100 = 100 * 1024;
  unified_cache cache(config_with(3, eviction_policy::cost));
  for (int i = 0; i < 20; ++i) add_int(cache, cpu_scope(), "kernel_" + std::to_string(i), 1, k100, 500'000'000);
  add_int(cache, cpu_scope(), "new_kernel", 1, k100, 500'000'000);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "weight", 1, 2 * kMb + kMb / 2, 1'000'000).built);
  EXPECT_FALSE(contains(cache, cpu_scope(), "weight"));
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.refused_admission, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_FALSE(add_int(cache, cpu_scope(), "new_kernel", 1, k100, 500'000'000).built) << "still cached: a hit";
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(contains(cache, cpu_scope(), "kernel_" + std::to_string(i))) << i;
}

TEST(CachePolicy, CostJudgesANewEntryLargerThanTheWindowOnItsOwnUseNotItsHistory) {
  // A weight asked for again and again but never kept (each time it would
  // displace kernels worth more per byte): its growing history must not
  // let it push out kernels it was never reused alongside. Counting 300
  // remembered uses, 300 x 1 ms / 2.5 MB would outweigh 5 ms / 100 KB.
  constexpr std::size_t k100 = 100 * 1024;
  unified_cache cache(config_with(3, eviction_policy::cost));
  for (int i = 0; i < 25; ++i) add_int(cache, cpu_scope(), "kernel_" + std::to_string(i), 1, k100, 5'000'000);
  for (int i = 0; i < 300; ++i) add_int(cache, cpu_scope(), "weight", 1, 2 * kMb + kMb / 2, 1'000'000);
  EXPECT_FALSE(contains(cache, cpu_scope(), "weight"));
  EXPECT_EQ(cache.stats(cpu_scope()).refused_admission, 300u);
  EXPECT_EQ(cache.stats(cpu_scope()).evictions, 0u);
}

TEST(CachePolicy, CostAdmitsANewEntryOfMostOfTheCapacityThatBeatsWhatItDisplaces) {
  unified_cache cache(config_with(3, eviction_policy::cost));
  add_int(cache, cpu_scope(), "a_100ms", 1, kMb, 100'000'000);
  add_int(cache, cpu_scope(), "b_100ms", 1, kMb, 100'000'000);
  add_int(cache, cpu_scope(), "c_1ms", 1, kMb, 1'000'000);  // in the window
  // 2 MB that cost 10 s: worth a 100 ms megabyte; the window's 1 ms entry
  // goes first (refused), then the new entry takes one main-region entry's room.
  add_int(cache, cpu_scope(), "large_10s", 1, 2 * kMb, 10'000'000'000);
  EXPECT_TRUE(contains(cache, cpu_scope(), "large_10s"));
  EXPECT_FALSE(contains(cache, cpu_scope(), "c_1ms"));
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 2u);
  EXPECT_EQ(cache.stats(cpu_scope()).bytes, 3 * kMb);
}

TEST(CachePolicy, CostNeverGivesUpAnEntryStillBeingBuiltForAnother) {
  unified_cache cache(config_with(2, eviction_policy::cost));
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  std::promise<void> started;
  std::thread builder([&] {
    cache.get_or_build<int>(cpu_scope(), kOwner, "slow_build", kMb, [&] {
      started.set_value();
      go.wait();
      return std::make_shared<int>(1);
    });
  });
  started.get_future().wait();
  add_int(cache, cpu_scope(), "a_1ms", 1, kMb, 1'000'000);  // pushes the build out of the window: admitted
  add_int(cache, cpu_scope(), "b_1s", 1, kMb, 1'000'000'000);  // a leaves: the build in flight is not its victim
  EXPECT_TRUE(contains(cache, cpu_scope(), "slow_build"));
  EXPECT_FALSE(contains(cache, cpu_scope(), "a_1ms"));
  release.set_value();
  builder.join();
  EXPECT_FALSE(add_int(cache, cpu_scope(), "slow_build", 2).built) << "its value is cached";
}

TEST(CachePolicy, CostAdmitsEntriesOfUnknownCost) {
  unified_cache cache(config_with(2, eviction_policy::cost));
  add_int(cache, cpu_scope(), "compile_1s", 1, kMb, 1'000'000'000);
  add_int(cache, cpu_scope(), "compile_2s", 1, kMb, 2'000'000'000);
  // get_or_build reports the cost only once built: such an entry leaving
  // the window is admitted (for a newcomer that may push it out: one a
  // thousand times cheaper than what it would displace may not).
  EXPECT_TRUE(add_int(cache, cpu_scope(), "unknown", 1, kMb, 0).built);
  add_int(cache, cpu_scope(), "next", 1, kMb, 1'000'000'000);
  EXPECT_TRUE(contains(cache, cpu_scope(), "unknown"));
  EXPECT_EQ(cache.stats(cpu_scope()).refused_admission, 0u);
}

TEST(CachePolicy, CostRemembersTheUsesOfAnEvictedEntryWhenItComesBack) {
  unified_cache cache(config_with(2, eviction_policy::cost));
  for (int i = 0; i < 21; ++i) add_int(cache, cpu_scope(), "popular", 1, kMb, 10'000'000);
  cache.set_capacity(engine_kind::cpu, 0);  // evicts it, with its 21 uses remembered
  cache.set_capacity(engine_kind::cpu, 2);
  add_int(cache, cpu_scope(), "dear", 1, kMb, 20'000'000);
  add_int(cache, cpu_scope(), "stranger", 1, kMb, 10'000'000);  // pushes dear into the main region
  add_int(cache, cpu_scope(), "popular", 1, kMb, 10'000'000);   // pushes the stranger out: refused
  add_int(cache, cpu_scope(), "filler", 1, kMb, 1'000'000);    // pushes popular out: admitted
  EXPECT_FALSE(contains(cache, cpu_scope(), "stranger")) << "1 x 10 ms is worth less than 1 x 20 ms";
  EXPECT_TRUE(contains(cache, cpu_scope(), "popular")) << "22 uses x 10 ms outweigh 1 x 20 ms";
  EXPECT_FALSE(contains(cache, cpu_scope(), "dear"));
}

TEST(CachePolicy, LibraryDefaultIsCost) {
  EXPECT_EQ(effective_policy(eviction_policy::library_default), eviction_policy::cost);
  unified_cache cache;
  EXPECT_EQ(cache.policy(engine_kind::cpu), eviction_policy::library_default);
}

TEST(CacheCapacity, ShrinkingEvictsDownToTheNewSizeAndGrowingKeepsEverything) {
  unified_cache cache(config_with(10, eviction_policy::lru));
  for (int i = 0; i < 10; ++i) add_int(cache, cpu_scope(), "k" + std::to_string(i), i);
  cache.set_capacity(engine_kind::cpu, 20);
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 10u);
  cache.set_capacity(engine_kind::cpu, 4);
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.entries, 4u);
  EXPECT_EQ(s.bytes, 4 * kMb);
  EXPECT_EQ(s.evictions, 6u);
  for (int i = 6; i < 10; ++i) EXPECT_TRUE(contains(cache, cpu_scope(), "k" + std::to_string(i))) << i;
}

TEST(CacheCapacity, ShrinkingANoEvictCacheEvictsLeastRecentlyUsedFirst) {
  unified_cache cache(config_with(3, eviction_policy::no_evict));
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1);
  add_int(cache, cpu_scope(), "c", 1);
  cache.set_capacity(engine_kind::cpu, 1, eviction_policy::no_evict);
  EXPECT_TRUE(contains(cache, cpu_scope(), "c"));
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 1u);
}

TEST(CacheCapacity, ZeroCapacityCachesNothing) {
  unified_cache cache(config_with(0, eviction_policy::lru));
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 1, 1).built);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 1, 1).built);
  EXPECT_EQ(cache.stats(cpu_scope()).refused_oversize, 2u);
}

TEST(CacheCapacity, ZeroCapacityCachesNotEvenAValueOfZeroBytes) {
  for (auto policy : {eviction_policy::no_evict, eviction_policy::lru, eviction_policy::cost}) {
    unified_cache cache(config_with(0, policy));
    EXPECT_TRUE(add_int(cache, cpu_scope(), "empty", 1, 0).built);
    EXPECT_TRUE(add_int(cache, cpu_scope(), "empty", 1, 0).built) << to_string(policy);
    EXPECT_FALSE(contains(cache, cpu_scope(), "empty"));
    EXPECT_EQ(cache.stats(cpu_scope()).entries, 0u);
  }
  unified_cache cache(config_with(1, eviction_policy::lru));
  add_int(cache, cpu_scope(), "empty", 1, 0);
  cache.set_capacity(engine_kind::cpu, 0);
  EXPECT_FALSE(contains(cache, cpu_scope(), "empty")) << "shrinking to 0 drops zero-byte entries too";
}

TEST(CacheCapacity, ACapacityWhoseBytesDoNotFitIsRejectedAsTheEnvironmentParserRejectsIt) {
  unified_cache cache(config_with(5, eviction_policy::lru));
  EXPECT_TRUE(parse_capacity_spec("cpu:" + std::to_string(max_capacity_mb)).ok());
  EXPECT_FALSE(parse_capacity_spec("cpu:" + std::to_string(max_capacity_mb + 1)).ok());
  EXPECT_THROW(cache.set_capacity(engine_kind::cpu, max_capacity_mb + 1), cache_error);
  EXPECT_THROW(cache.set_capacity(engine_kind::cpu, SIZE_MAX, eviction_policy::lru), cache_error);
  EXPECT_THROW(cache.set_capacity(engine_kind::cpu, 0, SIZE_MAX), cache_error);
  EXPECT_EQ(cache.capacity(engine_kind::cpu), 5u) << "a rejected value changes nothing";
  EXPECT_EQ(cache.capacity(engine_kind::cpu, 0), 5u);
  cache.set_capacity(engine_kind::cpu, max_capacity_mb);
  EXPECT_EQ(cache.capacity(engine_kind::cpu), max_capacity_mb);
  EXPECT_EQ(cache.capacity(engine_kind::cpu, 0), max_capacity_mb) << "both getters say the same";
}

TEST(CacheCapacity, BudgetAppliesToEachDeviceSeparately) {
  unified_cache cache(config_with(2, eviction_policy::lru));
  for (int device = 0; device < 3; ++device) {
    for (const char* k : {"a", "b"}) add_int(cache, cpu_scope(device), k, 1);
  }
  for (int device = 0; device < 3; ++device) {
    EXPECT_EQ(cache.stats(cpu_scope(device)).entries, 2u) << device;
    EXPECT_EQ(cache.stats(cpu_scope(device)).evictions, 0u) << device;
  }
}

TEST(CacheCapacity, PerDeviceCapacityOverridesTheKindUntilTheKindIsSetAgain) {
  unified_cache cache(config_with(4, eviction_policy::lru));
  for (int i = 0; i < 4; ++i) add_int(cache, cpu_scope(1), "k" + std::to_string(i), i);
  cache.set_capacity(engine_kind::cpu, 1, 2);
  EXPECT_EQ(cache.capacity(engine_kind::cpu, 1), 2u);
  EXPECT_EQ(cache.capacity(engine_kind::cpu, 0), 4u);
  EXPECT_EQ(cache.capacity(engine_kind::cpu), 4u);
  EXPECT_EQ(cache.stats(cpu_scope(1)).entries, 2u);
  for (int i = 0; i < 4; ++i) add_int(cache, cpu_scope(0), "k" + std::to_string(i), i);
  EXPECT_EQ(cache.stats(cpu_scope(0)).entries, 4u);

  cache.set_capacity(engine_kind::cpu, 3, eviction_policy::lru);
  EXPECT_EQ(cache.capacity(engine_kind::cpu, 1), 3u) << "setting the kind clears device overrides";
  EXPECT_EQ(cache.stats(cpu_scope(0)).entries, 3u);
}

TEST(CacheCapacity, GpuAndCpuBudgetsAreIndependent) {
  cache_config config;
  config.cpu = {1, eviction_policy::lru};
  config.gpu = {3, eviction_policy::no_evict};
  unified_cache cache(config);
  EXPECT_EQ(cache.capacity(engine_kind::gpu), 3u);
  EXPECT_EQ(cache.policy(engine_kind::gpu), eviction_policy::no_evict);
  const cache_scope gpu{engine_kind::gpu, 0, 0};
  for (const char* k : {"a", "b", "c"}) add_int(cache, gpu, k, 1);
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1);
  EXPECT_EQ(cache.stats(gpu).entries, 3u);
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 1u);
}

TEST(CacheCapacity, ChangingThePolicyKeepsEntriesAndAppliesTheNewOrder) {
  unified_cache cache(config_with(3, eviction_policy::lru));
  add_int(cache, cpu_scope(), "dear", 1, kMb, 1'000'000'000);
  add_int(cache, cpu_scope(), "cheap", 1, kMb, 1);
  add_int(cache, cpu_scope(), "mid", 1, kMb, 1'000'000);
  cache.set_capacity(engine_kind::cpu, 3, eviction_policy::cost);
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 3u);
  add_int(cache, cpu_scope(), "new", 1, kMb, 1'000'000);
  EXPECT_FALSE(contains(cache, cpu_scope(), "cheap"));
  EXPECT_TRUE(contains(cache, cpu_scope(), "dear")) << "LRU would have evicted it";
}

TEST(CacheCapacity, CachedBytesNeverExceedTheCapacity) {
  for (auto policy : {eviction_policy::no_evict, eviction_policy::lru, eviction_policy::cost}) {
    unified_cache cache(config_with(16, policy));
    std::mt19937 rng(1234);
    for (int i = 0; i < 3000; ++i) {
      const std::size_t bytes = 1 + rng() % (3 * kMb);
      add_int(cache, cpu_scope(), "k" + std::to_string(rng() % 200), i, bytes, 1 + rng() % 1'000'000);
      if (i % 500 == 499) cache.set_capacity(engine_kind::cpu, 4 + rng() % 16, policy);
      const std::uint64_t capacity = cache.capacity(engine_kind::cpu) * kMb;
      ASSERT_LE(cache.stats(cpu_scope()).bytes, capacity) << to_string(policy) << " at " << i;
    }
  }
}

TEST(CacheLifetime, EvictedValueStaysAliveWhileAUserHoldsItAndIsFreedAfter) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::weak_ptr<int> watch;
  {
    auto held = add_int(cache, cpu_scope(), "a", 11).value;
    watch = held;
    add_int(cache, cpu_scope(), "b", 1);  // evicts a
    ASSERT_FALSE(contains(cache, cpu_scope(), "a"));
    detail::epoch_domain::instance().synchronize();  // the cache's reference is gone now
    EXPECT_EQ(*held, 11);
    EXPECT_FALSE(watch.expired()) << "freed under its user";
  }
  EXPECT_TRUE(watch.expired()) << "the cache kept an evicted value alive";
}

TEST(CacheLifetime, ValuesStillHeldOutliveTheCache) {
  std::shared_ptr<int> held;
  cache_handle<int> handle;
  {
    unified_cache cache;
    held = add_int(cache, cpu_scope(), "a", 5).value;
    handle = cache.get_or_build<int>(cpu_scope(), kOwner, "b", kMb, [] { return std::make_shared<int>(6); });
    EXPECT_TRUE(handle.valid());
  }
  EXPECT_EQ(*held, 5);
  EXPECT_EQ(*handle, 6);
  EXPECT_FALSE(handle.valid());
}

// A value that knows how many bytes it holds.
struct sized_value {
  std::size_t bytes;
  std::size_t cached_bytes() const { return bytes; }
};

TEST(CacheRealSizes, AValueThatKnowsItsSizeIsCountedAtItInsteadOfTheEstimate) {
  unified_cache cache(config_with(4, eviction_policy::lru));
  for (const std::size_t real : {std::size_t{300 * 1024}, std::size_t{1200 * 1024}, std::size_t{5}}) {
    cache.get_or_build<const sized_value>(cpu_scope(), kOwner, std::to_string(real), kMb,
                                          [&] { return std::make_shared<const sized_value>(sized_value{real}); });
  }
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 300u * 1024 + 1200u * 1024 + 5) << "the sum of real sizes, not 3 x the 1 MB estimate";
  // A value larger than its estimate takes the cache over its budget: the
  // least recently used go at once.
  cache.get_or_build<const sized_value>(cpu_scope(), kOwner, "large", kMb,
                                        [] { return std::make_shared<const sized_value>(sized_value{3 * kMb}); });
  const cache_stats after = cache.stats(cpu_scope());
  EXPECT_LE(after.bytes, 4 * kMb);
  EXPECT_TRUE(contains(cache, cpu_scope(), "large"));
  EXPECT_FALSE(contains(cache, cpu_scope(), std::to_string(300 * 1024))) << "the least recently used went";
  // A value without cached_bytes() keeps the size it was inserted with.
  cache.get_or_build<int>(cpu_scope(), kOwner, "int", 1000, [] { return std::make_shared<int>(1); });
  EXPECT_EQ(cache.stats(cpu_scope()).bytes, after.bytes + 1000);
}

TEST(CacheRealSizes, AValueThatGrowsPastANoEvictBudgetIsDroppedItselfNotTheOthers) {
  unified_cache cache(config_with(4, eviction_policy::no_evict));
  for (const char* k : {"a", "b", "c"}) {
    cache.get_or_build<const sized_value>(cpu_scope(), kOwner, k, kMb,
                                          [] { return std::make_shared<const sized_value>(sized_value{kMb}); });
  }
  cache.get_or_build<const sized_value>(cpu_scope(), kOwner, "grows", kMb,
                                        [] { return std::make_shared<const sized_value>(sized_value{3 * kMb}); });
  EXPECT_FALSE(contains(cache, cpu_scope(), "grows"));
  for (const char* k : {"a", "b", "c"}) EXPECT_TRUE(contains(cache, cpu_scope(), k)) << k;
  EXPECT_EQ(cache.stats(cpu_scope()).bytes, 3 * kMb);
}

TEST(CacheRealSizes, AValueThatGrowsPastTheWholeBudgetIsDroppedItself) {
  for (auto policy : {eviction_policy::lru, eviction_policy::cost}) {
    unified_cache cache(config_with(2, policy));
    add_int(cache, cpu_scope(), "small", 1, kMb / 2);
    cache.get_or_build<const sized_value>(cpu_scope(), kOwner, "huge", kMb,
                                          [] { return std::make_shared<const sized_value>(sized_value{3 * kMb}); });
    EXPECT_FALSE(contains(cache, cpu_scope(), "huge")) << to_string(policy);
    EXPECT_TRUE(contains(cache, cpu_scope(), "small")) << to_string(policy) << ": nothing else is given up for it";
  }
}

}  // namespace
}  // namespace unicache
