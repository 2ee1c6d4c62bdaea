// lookup: the hit path that borrows a value instead of sharing it.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <stdexcept>

#include "cache_test_support.hpp"
#include "unicache/cache.hpp"
#include "util/epoch.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

// A value that tells when it is destroyed.
struct tracked {
  explicit tracked(std::atomic<bool>* destroyed, int v) : destroyed_(destroyed), value(v) {}
  ~tracked() { destroyed_->store(true); }
  std::atomic<bool>* destroyed_;
  int value;
};

TEST(CacheLookup, AMissReturnsNothingAndCountsNothing) {
  unified_cache cache;
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner, "absent"));
  add_int(cache, cpu_scope(), "other", 1);
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner, "absent"));
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(1), kOwner, "other")) << "another device";
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(0, 9), kOwner, "other")) << "another context";
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner + 1, "other")) << "another backend";
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 1u) << "only the insertion of \"other\"";
}

TEST(CacheLookup, AHitBorrowsTheCachedValueAndCountsAHit) {
  unified_cache cache;
  const auto built = cache.get_or_build<const int>(cpu_scope(), kOwner, "k", 64, [] { return std::make_shared<const int>(42); });
  {
    auto borrowed = cache.lookup<const int>(cpu_scope(), kOwner, "k");
    ASSERT_TRUE(borrowed);
    EXPECT_EQ(borrowed.get(), built.get()) << "the cached object itself, not a copy";
    EXPECT_EQ(*borrowed, 42);
  }
  EXPECT_EQ(cache.stats(cpu_scope()).hits, 1u);
}

TEST(CacheLookup, AnEntryStillBeingBuiltOrFailedIsNotAHit) {
  unified_cache cache;
  std::promise<cache_value> pending;
  EXPECT_FALSE(cache.get_or_add(cpu_scope(), kOwner, "pending", 64, 1, pending.get_future().share()).valid());
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner, "pending")) << "lookup never waits";
  pending.set_value(std::make_shared<int>(5));
  auto ready = cache.lookup<int>(cpu_scope(), kOwner, "pending");
  ASSERT_TRUE(ready);
  EXPECT_EQ(*ready, 5);

  std::promise<cache_value> failing;
  EXPECT_FALSE(cache.get_or_add(cpu_scope(), kOwner, "failed", 64, 1, failing.get_future().share()).valid());
  failing.set_exception(std::make_exception_ptr(std::runtime_error("no")));
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner, "failed"));
  EXPECT_FALSE(cache.contains(cpu_scope(), kOwner, "failed"));
}

TEST(CacheLookup, ADisabledCacheLendsNothing) {
  unified_cache cache;
  add_int(cache, cpu_scope(), "k", 1);
  cache.set_enabled(false);
  EXPECT_FALSE(cache.lookup<int>(cpu_scope(), kOwner, "k"));
  cache.set_enabled(true);
  EXPECT_TRUE(cache.lookup<int>(cpu_scope(), kOwner, "k"));
}

TEST(CacheLookup, ABorrowedValueOutlivesItsEvictionUntilTheBorrowEnds) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::atomic<bool> destroyed{false};
  cache.get_or_build<tracked>(cpu_scope(), kOwner, "v", kMb, [&] { return std::make_shared<tracked>(&destroyed, 7); });
  {
    auto borrowed = cache.lookup<tracked>(cpu_scope(), kOwner, "v");
    ASSERT_TRUE(borrowed);
    cache.clear();  // evicted: the cache's reference is retired
    add_int(cache, cpu_scope(), "push", 1);
    detail::epoch_domain::instance().reclaim();
    EXPECT_FALSE(destroyed.load()) << "freed while borrowed";
    EXPECT_EQ(borrowed->value, 7);
  }
  detail::epoch_domain::instance().reclaim();
  EXPECT_TRUE(destroyed.load()) << "nobody holds it once the borrow ended";
}

TEST(CacheLookup, ShareTurnsABorrowIntoAHandleThatKeepsTheValue) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  std::atomic<bool> destroyed{false};
  cache.get_or_build<tracked>(cpu_scope(), kOwner, "v", kMb, [&] { return std::make_shared<tracked>(&destroyed, 7); });
  cache_handle<tracked> kept;
  {
    auto borrowed = cache.lookup<tracked>(cpu_scope(), kOwner, "v");
    ASSERT_TRUE(borrowed);
    kept = borrowed.share();
  }
  EXPECT_TRUE(kept.valid());
  EXPECT_EQ(kept->value, 7);
  cache.clear();
  detail::epoch_domain::instance().reclaim();
  EXPECT_FALSE(kept.valid()) << "evicted";
  EXPECT_FALSE(destroyed.load()) << "the handle owns the value";
  EXPECT_EQ(kept->value, 7);
  EXPECT_FALSE(cache_ref<tracked>().share()) << "an empty borrow shares nothing";
}

TEST(CacheLookup, BorrowsMoveAndNest) {
  unified_cache cache;
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 2);
  auto a = cache.lookup<int>(cpu_scope(), kOwner, "a");
  auto b = cache.lookup<int>(cpu_scope(), kOwner, "b");
  cache_ref<int> moved = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from borrow is empty
  ASSERT_TRUE(moved);
  moved = std::move(b);
  ASSERT_TRUE(moved);
  EXPECT_EQ(*moved, 2);
}

}  // namespace
}  // namespace unicache
