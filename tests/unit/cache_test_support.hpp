// Helpers shared by the cache tests.
#pragma once

#include <future>
#include <memory>
#include <string>

#include "unicache/cache.hpp"

namespace unicache::testing {

inline constexpr owner_id kOwner = 7;
inline constexpr std::size_t kMb = std::size_t{1} << 20;

inline cache_scope cpu_scope(int device = 0, std::uint64_t context = 0) {
  return {engine_kind::cpu, device, context};
}

// A cache whose CPU devices have `capacity_mb` and `policy`.
inline cache_config config_with(std::size_t capacity_mb, eviction_policy policy) {
  cache_config c;
  c.cpu = {capacity_mb, policy};
  c.gpu = {capacity_mb, policy};
  return c;
}

// get_or_add that fulfils the promise on a miss with `value`. Returns the
// value seen and whether this call built it.
struct add_result {
  std::shared_ptr<int> value;
  bool built = false;
};
inline add_result add_int(unified_cache& cache, const cache_scope& scope, const std::string& key,
                          int value, std::size_t bytes = kMb, std::uint64_t cost_ns = 1000,
                          owner_id backend = kOwner) {
  std::promise<cache_value> promise;
  cache_future cached =
      cache.get_or_add(scope, backend, key, bytes, cost_ns, promise.get_future().share());
  if (cached.valid()) return {std::static_pointer_cast<int>(cached.get()), false};
  auto v = std::make_shared<int>(value);
  promise.set_value(v);
  return {v, true};
}

inline bool contains(const unified_cache& cache, const cache_scope& scope, const std::string& key,
                     owner_id backend = kOwner) {
  return cache.contains(scope, backend, key);
}

}  // namespace unicache::testing
