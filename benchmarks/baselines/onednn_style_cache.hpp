// Baseline: the design of oneDNN's primitive cache and graph constant tensor
// cache (src/common/primitive_cache.cpp, lru_primitive_cache_t): one global
// reader-writer lock around a std::unordered_map, an atomic timestamp per
// entry stored on every hit, and an O(n) scan for the oldest entry when the
// cache is full. Written here from that published design for comparison;
// it is not used by the library.
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "unicache/cache.hpp"

namespace unicache::baselines {

class onednn_style_cache {
 public:
  explicit onednn_style_cache(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

  cache_future get_or_add(std::string_view key, std::size_t size, const cache_future& value) {
    {
      std::shared_lock lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        it->second.timestamp.store(now(), std::memory_order_relaxed);
        return it->second.value;
      }
    }
    std::unique_lock lock(mu_);
    auto it = map_.find(key);  // another thread may have added it meanwhile
    if (it != map_.end()) {
      it->second.timestamp.store(now(), std::memory_order_relaxed);
      return it->second.value;
    }
    while (used_ + size > capacity_ && !map_.empty()) evict_oldest();
    map_.emplace(std::string(key), timed_entry(value, size, now()));
    used_ += size;
    return {};
  }

 private:
  struct timed_entry {
    timed_entry(cache_future v, std::size_t s, std::int64_t t) : value(std::move(v)), size(s), timestamp(t) {}
    timed_entry(timed_entry&& o) noexcept
        : value(std::move(o.value)), size(o.size), timestamp(o.timestamp.load()) {}
    cache_future value;
    std::size_t size;
    std::atomic<std::int64_t> timestamp;
  };
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  static std::int64_t now() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

  void evict_oldest() {  // O(n), under the exclusive lock, like oneDNN's
    auto oldest = map_.begin();
    for (auto it = map_.begin(); it != map_.end(); ++it) {
      if (it->second.timestamp.load(std::memory_order_relaxed) <
          oldest->second.timestamp.load(std::memory_order_relaxed)) {
        oldest = it;
      }
    }
    used_ -= oldest->second.size;
    map_.erase(oldest);
  }

  std::shared_mutex mu_;
  std::unordered_map<std::string, timed_entry, hash, std::equal_to<>> map_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

}  // namespace unicache::baselines
