// COST's promise (unicache/config.hpp): it does not evict a one-second
// compile to keep a microsecond copy, in caches of any number of entries,
// small ones of large entries included (a GPU's constant tensor cache of a
// few packed weights). A scenario, and a property over random sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cache_test_support.hpp"

namespace unicache {
namespace {

using testing::kOwner;
using testing::cpu_scope;

constexpr std::uint64_t kSecond = 1'000'000'000, kMicrosecond = 1'000;

TEST(CostPromise, FourSlotsKeepTheExpensiveEntriesAndTurnTheCopiesAway) {
  // 1 MB, entries of 256 KB: four slots. Each key used once, in this order.
  unified_cache cache(testing::config_with(1, eviction_policy::cost));
  constexpr std::size_t kSlot = 256 * 1024;
  const std::vector<std::pair<std::string, std::uint64_t>> sequence = {
      {"E0", kSecond}, {"C0", kMicrosecond}, {"E1", kSecond}, {"C1", kMicrosecond},
      {"E2", kSecond}, {"E3", kSecond},      {"C2", kMicrosecond}, {"C3", kMicrosecond}};
  for (const auto& [key, cost] : sequence) testing::add_int(cache, cpu_scope(), key, 0, kSlot, cost);
  for (const char* expensive : {"E0", "E1", "E2", "E3"}) {
    EXPECT_TRUE(testing::contains(cache, cpu_scope(), expensive)) << expensive << " was evicted for a copy";
  }
  EXPECT_FALSE(testing::contains(cache, cpu_scope(), "C2"));
  EXPECT_FALSE(testing::contains(cache, cpu_scope(), "C3"));
  EXPECT_GE(cache.stats(cpu_scope()).refused_admission, 2u) << "the copies were turned away, and counted so";
}

// What the test knows of a key, all-time.
struct key_record {
  std::uint64_t cost_ns = 0;
  std::size_t bytes = 0;
  std::uint64_t uses = 0;
  std::int64_t last_use = -1;  // request number; -1: never
};

// Random gets over a cache of 4 MB that holds `slots` entries of the median
// size: keys with costs spread over six orders of magnitude (1 µs .. 1 s)
// and sizes over 4x, popularity skewed. No eviction a get causes removes an entry that
// dominates the key asked for: cost >= 1000x, size not larger, used at
// least as often (all-time, this use included) and as recently (its last
// use not before the key's previous one).
void check_property(int slots, std::uint32_t seed, int requests) {
  unified_cache cache(testing::config_with(4, eviction_policy::cost));
  const double median = 4.0 * static_cast<double>(testing::kMb) / slots;
  std::mt19937 rng(seed);
  const int keys = slots * 4;
  std::vector<key_record> records(static_cast<std::size_t>(keys));
  for (auto& r : records) {
    r.cost_ns = static_cast<std::uint64_t>(std::pow(10.0, 3.0 + 6.0 * std::uniform_real_distribution<>(0, 1)(rng)));
    r.bytes = static_cast<std::size_t>(median * std::pow(2.0, std::uniform_real_distribution<>(-1, 1)(rng)));
  }
  std::vector<std::string> evicted;
  cache.add_eviction_callback(kOwner, [&](const eviction_event& e) { evicted.emplace_back(e.key); });
  std::vector<double> popularity;
  for (int k = 0; k < keys; ++k) popularity.push_back(1.0 / (1.0 + k));
  std::discrete_distribution<int> pick(popularity.begin(), popularity.end());
  for (int request = 0; request < requests; ++request) {
    const int k = pick(rng);
    key_record& n = records[static_cast<std::size_t>(k)];
    const std::int64_t previous_use = n.last_use;
    ++n.uses;
    n.last_use = request;
    evicted.clear();
    testing::add_int(cache, cpu_scope(), std::to_string(k), 0, n.bytes, n.cost_ns);
    for (const std::string& victim_key : evicted) {
      const key_record& v = records[static_cast<std::size_t>(std::stoi(victim_key))];
      if (std::stoi(victim_key) == k) continue;
      const bool dominates = v.cost_ns >= 1000 * n.cost_ns && v.bytes <= n.bytes && v.uses >= n.uses &&
                             v.last_use >= previous_use;
      EXPECT_FALSE(dominates) << "slots " << slots << ", seed " << seed << ", request " << request << ": key " << k
                              << " (" << n.cost_ns << " ns, " << n.bytes << " B, " << n.uses << " uses) evicted key "
                              << victim_key << " (" << v.cost_ns << " ns, " << v.bytes << " B, " << v.uses
                              << " uses, last " << v.last_use << ", key's previous " << previous_use << ")";
    }
  }
}

TEST(CostPromise, NoEvictionRemovesAnEntryThatDominatesTheKeyAskedFor) {
  for (int slots : {2, 3, 4, 6, 8, 16, 32, 64}) {
    for (std::uint32_t seed = 1; seed <= 12; ++seed) check_property(slots, seed, 600);
  }
}

}  // namespace
}  // namespace unicache
