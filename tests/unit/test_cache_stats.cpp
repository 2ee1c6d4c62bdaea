#include <gtest/gtest.h>

#include "cache_test_support.hpp"
#include "unicache/cache.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

TEST(CacheStats, CountEveryOutcomePerScope) {
  unified_cache cache(config_with(2, eviction_policy::lru));
  const cache_scope a{engine_kind::cpu, 0, 1}, b{engine_kind::cpu, 0, 2};
  add_int(cache, a, "x", 1);              // miss, insert
  add_int(cache, a, "x", 1);              // hit
  add_int(cache, a, "y", 1);              // miss, insert
  add_int(cache, b, "z", 1);              // miss, insert, evicts a's x (least recent)
  add_int(cache, b, "huge", 1, 3 * kMb);  // miss, refused oversize

  const cache_stats sa = cache.stats(a);
  EXPECT_EQ(sa.hits, 1u);
  EXPECT_EQ(sa.misses, 2u);
  EXPECT_EQ(sa.inserts, 2u);
  EXPECT_EQ(sa.evictions, 1u);
  EXPECT_EQ(sa.entries, 1u);
  EXPECT_EQ(sa.bytes, kMb);

  const cache_stats sb = cache.stats(b);
  EXPECT_EQ(sb.hits, 0u);
  EXPECT_EQ(sb.misses, 2u);
  EXPECT_EQ(sb.inserts, 1u);
  EXPECT_EQ(sb.refused_oversize, 1u);
  EXPECT_EQ(sb.entries, 1u);

  const cache_stats total = cache.stats();
  EXPECT_EQ(total.misses, 4u);
  EXPECT_EQ(total.entries, 2u);
  EXPECT_EQ(total.bytes, 2 * kMb);
  EXPECT_EQ(cache.stats({engine_kind::gpu, 0, 1}).misses, 0u) << "unknown scope: zeros";
}

TEST(CacheStats, HitsOfEvictedEntriesAreKept) {
  unified_cache cache(config_with(1, eviction_policy::lru));
  add_int(cache, cpu_scope(), "x", 1);
  for (int i = 0; i < 5; ++i) add_int(cache, cpu_scope(), "x", 1);
  add_int(cache, cpu_scope(), "y", 1);  // evicts x
  EXPECT_EQ(cache.stats(cpu_scope()).hits, 5u);
}

TEST(CacheStats, WaitsCountRequestsThatFoundABuildInFlight) {
  unified_cache cache;
  std::promise<cache_value> building;
  cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, building.get_future().share());
  std::promise<cache_value> p1, p2;
  cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, p1.get_future().share());
  building.set_value(std::make_shared<int>(1));
  cache.get_or_add(cpu_scope(), kOwner, "k", kMb, 1, p2.get_future().share());
  const cache_stats s = cache.stats(cpu_scope());
  EXPECT_EQ(s.waits, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
}

TEST(CacheVerbose, LinesNameTheCacheAndTheBackend) {
  cache_config config = config_with(1, eviction_policy::lru);
  config.verbose = true;
  config.name = "weights_of_test";
  unified_cache cache(config);
  register_owner(kOwner, "test_backend");
  ::testing::internal::CaptureStderr();
  add_int(cache, cpu_scope(), "a", 1);
  add_int(cache, cpu_scope(), "b", 1, kMb, 1000, kOwner + 100);  // an unnamed backend: its id in hex
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unicache_verbose,weights_of_test,miss,cpu:0:0x0,owner=test_backend,"), std::string::npos)
      << err;
  EXPECT_NE(err.find("unicache_verbose,weights_of_test,evict,cpu:0:0x0,owner=test_backend,"), std::string::npos)
      << err;
  EXPECT_NE(err.find("owner=0x0000006b,"), std::string::npos) << err;
}

TEST(CacheVerbose, TheProcessWideCachesAreNamed) {
  EXPECT_EQ(cache_config::constant_tensor_cache_from_environment().name, "constant_tensor_cache");
  EXPECT_EQ(cache_config::kernel_cache_from_environment().name, "kernel_cache");
}

}  // namespace
}  // namespace unicache
