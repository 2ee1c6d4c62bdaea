#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache_test_support.hpp"
#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(UnifiedCache, MissThenHitReturnsTheValueTheFirstCallerBuilt) {
  unified_cache cache;
  auto first = add_int(cache, cpu_scope(), "w0", 1);
  auto second = add_int(cache, cpu_scope(), "w0", 2);
  EXPECT_TRUE(first.built);
  EXPECT_FALSE(second.built);
  EXPECT_EQ(first.value, second.value);
  EXPECT_EQ(*second.value, 1);
}

TEST(UnifiedCache, EntriesAreSharedOnlyWithinTheSameDeviceAndContext) {
  unified_cache cache;
  const cache_scope base{engine_kind::cpu, 0, 1};
  add_int(cache, base, "w", 1);
  EXPECT_FALSE(add_int(cache, base, "w", 2).built) << "same device, same context: shared";
  EXPECT_TRUE(add_int(cache, {engine_kind::cpu, 0, 2}, "w", 3).built) << "other context";
  EXPECT_TRUE(add_int(cache, {engine_kind::cpu, 1, 1}, "w", 4).built) << "other device";
  EXPECT_TRUE(add_int(cache, {engine_kind::cpu, 1, 2}, "w", 5).built) << "other device and context";
  EXPECT_TRUE(add_int(cache, {engine_kind::gpu, 0, 1}, "w", 6).built) << "other engine kind";
  EXPECT_EQ(*add_int(cache, {engine_kind::cpu, 0, 2}, "w", 0).value, 3);
  EXPECT_EQ(*add_int(cache, {engine_kind::gpu, 0, 1}, "w", 0).value, 6);
}

TEST(UnifiedCache, BackendIdIsPartOfTheKey) {
  unified_cache cache;
  add_int(cache, cpu_scope(), "k", 1, kMb, 1, /*backend=*/1);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 2, kMb, 1, /*backend=*/2).built);
}

TEST(UnifiedCache, KeysAreComparedInFullIncludingEmbeddedZeros) {
  unified_cache cache;
  const std::string a("key\0a", 5), b("key\0b", 5);
  add_int(cache, cpu_scope(), a, 1);
  EXPECT_TRUE(add_int(cache, cpu_scope(), b, 2).built);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "key", 3).built) << "a prefix is another key";
  EXPECT_EQ(*add_int(cache, cpu_scope(), a, 0).value, 1);
}

TEST(UnifiedCache, InvalidFutureIsRejected) {
  unified_cache cache;
  EXPECT_THROW(cache.get_or_add(cpu_scope(), kOwner, "k", 1, 1, cache_future()), cache_error);
}

TEST(UnifiedCache, ConcurrentRequestsForOneMissingKeyBuildOnce) {
  unified_cache cache;
  constexpr int kThreads = 16;
  std::atomic<int> builds{0};
  std::latch start(kThreads);
  std::vector<std::shared_ptr<int>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto h = cache.get_or_build<int>(cpu_scope(), kOwner, "kernel", kMb, [&] {
        builds.fetch_add(1);
        std::this_thread::yield();
        return std::make_shared<int>(99);
      });
      seen[t] = h.value();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  for (const auto& v : seen) EXPECT_EQ(v, seen[0]);
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits + s.waits, static_cast<std::uint64_t>(kThreads - 1));
}

TEST(UnifiedCache, FailedBuildReachesEveryWaiterAsTheSameErrorAndIsRebuiltNextTime) {
  unified_cache cache;
  std::promise<cache_value> builder_promise;
  ASSERT_FALSE(cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1,
                                builder_promise.get_future().share())
                   .valid());
  // Two waiters obtain the in-flight future before the build fails.
  std::promise<cache_value> unused1, unused2;
  cache_future w1 = cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, unused1.get_future().share());
  cache_future w2 = cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, unused2.get_future().share());
  ASSERT_TRUE(w1.valid());
  ASSERT_TRUE(w2.valid());
  EXPECT_EQ(cache.stats(cpu_scope()).waits, 2u);

  auto error = std::make_exception_ptr(std::runtime_error("clBuildProgram failed"));
  builder_promise.set_exception(error);
  for (cache_future* w : {&w1, &w2}) {
    try {
      w->get();
      ADD_FAILURE() << "a waiter got a value from a failed build";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "clBuildProgram failed");
    }
  }
  // The next request is a miss: it builds again.
  auto again = add_int(cache, cpu_scope(), "k", 5);
  EXPECT_TRUE(again.built);
  EXPECT_FALSE(add_int(cache, cpu_scope(), "k", 6).built);
  EXPECT_EQ(cache.stats(cpu_scope()).failures, 1u);
}

TEST(UnifiedCache, PromiseDestroyedUnfulfilledIsAFailureForWaitersAndIsRebuilt) {
  unified_cache cache;
  cache_future waiter;
  {
    std::promise<cache_value> abandoned;
    ASSERT_FALSE(
        cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, abandoned.get_future().share()).valid());
    std::promise<cache_value> unused;
    waiter = cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, unused.get_future().share());
  }
  ASSERT_TRUE(waiter.valid());
  try {
    waiter.get();
    ADD_FAILURE() << "broken promise produced a value";
  } catch (const std::future_error& e) {
    EXPECT_EQ(e.code(), std::future_errc::broken_promise);
  }
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 1).built);
}

TEST(UnifiedCache, GetOrBuildRethrowsTheBuilderErrorToConcurrentWaitersAndRebuildsLater) {
  unified_cache cache;
  std::latch builder_started(1), release_builder(1);
  std::thread builder([&] {
    EXPECT_THROW(cache.get_or_build<int>(cpu_scope(), kOwner, "k", kMb,
                                         [&]() -> std::shared_ptr<int> {
                                           builder_started.count_down();
                                           release_builder.wait();
                                           throw std::runtime_error("compile error: line 3");
                                         }),
                 std::runtime_error);
  });
  builder_started.wait();
  std::promise<cache_value> unused;
  cache_future waiting = cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, unused.get_future().share());
  ASSERT_TRUE(waiting.valid());
  release_builder.count_down();
  builder.join();
  EXPECT_THROW(waiting.get(), std::runtime_error);
  int builds = 0;
  auto h = cache.get_or_build<int>(cpu_scope(), kOwner, "k", kMb, [&] {
    ++builds;
    return std::make_shared<int>(3);
  });
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(*h, 3);
  EXPECT_TRUE(h.valid());
}

TEST(UnifiedCache, SlowBuildDoesNotBlockRequestsForOtherKeys) {
  unified_cache cache;
  std::latch slow_started(1), finish_slow(1);
  std::thread slow([&] {
    cache.get_or_build<int>(cpu_scope(), kOwner, "slow", kMb, [&] {
      slow_started.count_down();
      finish_slow.wait();
      return std::make_shared<int>(1);
    });
  });
  slow_started.wait();
  // While the slow build is still running: other keys build, hit and evict.
  auto fast = add_int(cache, cpu_scope(), "fast", 2);
  EXPECT_TRUE(fast.built);
  EXPECT_FALSE(add_int(cache, cpu_scope(), "fast", 3).built);
  cache.set_capacity(engine_kind::cpu, 100);
  finish_slow.count_down();
  slow.join();
  EXPECT_FALSE(add_int(cache, cpu_scope(), "slow", 4).built);
}

TEST(UnifiedCache, DisabledCacheBuildsEveryTimeAndStoresNothing) {
  cache_config config;
  config.enabled = false;
  unified_cache cache(config);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 1).built);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 2).built);
  EXPECT_EQ(cache.stats(cpu_scope()).entries, 0u);
  cache.set_enabled(true);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 3).built);
  EXPECT_FALSE(add_int(cache, cpu_scope(), "k", 4).built);
  cache.set_enabled(false);
  EXPECT_TRUE(add_int(cache, cpu_scope(), "k", 5).built) << "a disabled cache serves nothing it holds";
  cache.set_enabled(true);
  EXPECT_EQ(*add_int(cache, cpu_scope(), "k", 6).value, 3) << "entries survive being disabled";
}

TEST(UnifiedCache, RemoveDropsOneEntry) {
  unified_cache cache;
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 2);
  EXPECT_TRUE(cache.remove(cpu_scope(), kOwner, "a"));
  EXPECT_FALSE(cache.remove(cpu_scope(), kOwner, "a"));
  EXPECT_TRUE(add_int(cache, cpu_scope(), "a", 1).built);
  EXPECT_FALSE(add_int(cache, cpu_scope(), "b", 2).built);
}

TEST(UnifiedCache, DeviceIdsOutsideTheDirectRangeWork) {
  unified_cache cache;
  for (int device : {-1, 63, 64, 1000}) {
    EXPECT_TRUE(add_int(cache, cpu_scope(device), "k", device).built) << device;
    EXPECT_EQ(*add_int(cache, cpu_scope(device), "k", 0).value, device) << device;
  }
}

// The kernel cache's contract: a kernel keyed by its configuration
// serves every shape; only a new configuration builds.
TEST(KernelCache, OneKernelServesEveryShapeOfItsConfiguration) {
  unified_cache kernels;
  int builds = 0;
  auto kernel_for = [&](int m, int n, int k, bool transpose_b) {
    (void)m, (void)n, (void)k;  // shapes are runtime arguments, not part of the key
    cache_key key;
    key.add("gemm").add(std::uint32_t{64}).add(std::uint32_t{64}).add(transpose_b).add("-cl-fast-relaxed-math");
    return kernels.get_or_build<std::string>(cpu_scope(), kOwner, key.bytes(), 64 * 1024, [&] {
      ++builds;
      return std::make_shared<std::string>(transpose_b ? "gemm_tb" : "gemm");
    });
  };
  for (int m = 1; m <= 512; m += 7) kernel_for(m, 768, 768, false);
  EXPECT_EQ(builds, 1);
  kernel_for(3, 3, 3, true);
  EXPECT_EQ(builds, 2);
}

TEST(CacheKey, DifferentFieldListsNeverProduceTheSameBytes) {
  EXPECT_NE(cache_key().add("ab").add("c").bytes(), cache_key().add("a").add("bc").bytes());
  EXPECT_NE(cache_key().add(std::int32_t{7}).bytes(), cache_key().add(std::int64_t{7}).bytes());
  EXPECT_NE(cache_key().add(true).bytes(), cache_key().add(false).bytes());
  EXPECT_EQ(cache_key().add("x").add(std::uint16_t{9}).bytes(),
            cache_key().add(std::string("x")).add(std::uint16_t{9}).bytes());
}

}  // namespace
}  // namespace unicache
