// 32 threads hammer one cache with random get_or_add, get_or_build and
// lookup calls, failing and abandoned builds, values that report a real size
// of their own, capacity and policy changes, and eviction callbacks that
// call back into the cache. Run under ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "unicache/cache.hpp"

namespace unicache {
namespace {

constexpr int kThreads = 32;
constexpr std::size_t kKB = 1024;
constexpr owner_id kOwner = 3;

// A value that reports its size once built (the cache then counts it, not
// the estimate given at insertion).
struct sized_value {
  std::uint64_t value;
  std::size_t bytes;
  std::size_t cached_bytes() const { return bytes; }
};

// Every value is derived from its key, so any value read can be checked.
std::uint64_t value_for(const cache_scope& scope, const std::string& key) {
  return std::hash<std::string>{}(key) ^ (static_cast<std::uint64_t>(scope.device_id) << 40) ^
         (scope.context_id << 48) ^ static_cast<std::uint64_t>(scope.kind);
}

int ops_per_thread() {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return 3000;
#else
  return 20000;
#endif
}

TEST(CacheStress, RandomOperationsFromManyThreadsKeepEveryInvariant) {
  cache_config config;
  config.cpu = {1, eviction_policy::lru};  // 1 MB: entries of 16-64 KB evict constantly
  config.gpu = {1, eviction_policy::cost};
  unified_cache cache(config);

  std::atomic<std::uint64_t> builds{0}, requests{0}, wrong_values{0}, wrong_errors{0};
  std::atomic<std::uint64_t> callbacks{0};
  cache.add_eviction_callback(kOwner, [&](const eviction_event& e) {
    callbacks.fetch_add(1, std::memory_order_relaxed);
    // Reenter: a lookup and, now and then, stats. (Another thread may have
    // cached the key again already, so the lookup's answer is not checked.)
    (void)cache.contains(e.scope, e.owner, e.key);
    if (callbacks.load(std::memory_order_relaxed) % 64 == 0) (void)cache.stats(e.scope);
  });

  std::latch start(kThreads + 1);
  std::atomic<bool> stop_admin{false};
  std::thread admin([&] {
    std::mt19937 rng(99);
    start.arrive_and_wait();
    const eviction_policy policies[] = {eviction_policy::lru, eviction_policy::cost,
                                        eviction_policy::no_evict, eviction_policy::library_default};
    while (!stop_admin.load(std::memory_order_relaxed)) {
      const engine_kind kind = rng() % 2 ? engine_kind::cpu : engine_kind::gpu;
      switch (rng() % 4) {
        case 0: cache.set_capacity(kind, rng() % 3, policies[rng() % 4]); break;
        case 1: cache.set_capacity(kind, static_cast<int>(rng() % 3), 1 + rng() % 2); break;
        case 2: (void)cache.stats(); break;
        default: if (rng() % 50 == 0) cache.clear(); break;
      }
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      std::vector<cache_handle<sized_value>> kept;
      start.arrive_and_wait();
      for (int i = 0; i < ops_per_thread(); ++i) {
        const cache_scope scope{rng() % 4 == 0 ? engine_kind::gpu : engine_kind::cpu,
                                static_cast<int>(rng() % 3), rng() % 2};
        const std::string key = "k" + std::to_string(rng() % 64);
        const std::size_t bytes = (16 + rng() % 48) * kKB;
        const std::uint64_t expected = value_for(scope, key);
        const int fate = static_cast<int>(rng() % 100);  // < 5: fail, < 8: abandon
        requests.fetch_add(1, std::memory_order_relaxed);
        if (rng() % 2 == 0) {
          std::promise<cache_value> promise;
          cache_future cached = cache.get_or_add(scope, kOwner, key, bytes, 1 + rng() % 100000,
                                                 promise.get_future().share());
          if (!cached.valid()) {
            builds.fetch_add(1, std::memory_order_relaxed);
            if (fate < 5) {
              promise.set_exception(std::make_exception_ptr(std::runtime_error(key)));
            } else if (fate >= 8) {
              promise.set_value(std::make_shared<sized_value>(sized_value{expected, bytes}));
            }  // else: abandoned, waiters see broken_promise
            continue;
          }
          try {
            if (std::static_pointer_cast<sized_value>(cached.get())->value != expected) wrong_values++;
          } catch (const std::runtime_error& e) {
            if (e.what() != key) wrong_errors++;
          } catch (const std::future_error&) {
          }
        } else {
          // A backend's way: borrow on a hit, build on a miss.
          if (rng() % 2 == 0) {
            if (auto borrowed = cache.lookup<sized_value>(scope, kOwner, key)) {
              if (borrowed->value != expected) wrong_values++;
              if (rng() % 8 == 0) kept.push_back(borrowed.share());
              continue;
            }
          }
          try {
            auto h = cache.get_or_build<sized_value>(scope, kOwner, key, bytes, [&] {
              builds.fetch_add(1, std::memory_order_relaxed);
              if (fate < 5) throw std::runtime_error(key);
              // Its real size differs from the estimate, up or down.
              return std::make_shared<sized_value>(sized_value{expected, (8 + rng() % 96) * kKB});
            });
            if (h->value != expected) wrong_values++;
            if (rng() % 8 == 0) kept.push_back(h);
          } catch (const cache_error&) {
            // It waited on an entry whose get_or_add caller abandoned its promise.
          } catch (const std::runtime_error& e) {
            if (e.what() != key) wrong_errors++;
          }
        }
        if (!kept.empty() && rng() % 16 == 0) {
          const auto& h = kept[rng() % kept.size()];
          (void)h.valid();  // races with eviction by design: must be clean under TSan
          if (h->value == 0) wrong_values++;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  stop_admin = true;
  admin.join();

  EXPECT_EQ(wrong_values.load(), 0u) << "a caller received another key's value";
  EXPECT_EQ(wrong_errors.load(), 0u) << "a caller received another key's error";

  const cache_stats total = cache.stats();
  EXPECT_EQ(total.misses, builds.load()) << "every miss, and only a miss, builds";
  // Hits and waits of hot entries are sampled: their sum estimates the
  // requests that did not miss.
  const double counted = static_cast<double>(total.hits + total.waits + total.misses);
  EXPECT_NEAR(counted / static_cast<double>(requests.load()), 1.0, 0.1);
  EXPECT_EQ(total.evictions, callbacks.load()) << "one callback per eviction";
  for (engine_kind kind : {engine_kind::cpu, engine_kind::gpu}) {
    for (int device = 0; device < 3; ++device) {
      std::uint64_t bytes = 0;
      for (std::uint64_t context = 0; context < 2; ++context) {
        bytes += cache.stats({kind, device, context}).bytes;
      }
      EXPECT_LE(bytes, std::uint64_t{cache.capacity(kind, device)} << 20)
          << to_string(kind) << " device " << device;
    }
  }
  // Sizes changed after insertion (real sizes) kept the byte counts exact:
  // an empty cache counts nothing.
  cache.clear();
  const cache_stats empty = cache.stats();
  EXPECT_EQ(empty.entries, 0u);
  EXPECT_EQ(empty.bytes, 0u);
}

}  // namespace
}  // namespace unicache
