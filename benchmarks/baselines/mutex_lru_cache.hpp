// Baseline: the textbook LRU cache: one std::mutex, a std::unordered_map from
// key to a position in a std::list kept in recency order, and a splice to the
// front on every hit. Written here for comparison; not used by the library.
#pragma once

#include <future>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "unicache/cache.hpp"

namespace unicache::baselines {

class mutex_lru_cache {
 public:
  explicit mutex_lru_cache(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

  cache_future get_or_add(std::string_view key, std::size_t size, const cache_future& value) {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->value;
    }
    while (used_ + size > capacity_ && !order_.empty()) {
      used_ -= order_.back().size;
      map_.erase(order_.back().key);
      order_.pop_back();
    }
    order_.push_front({std::string(key), value, size});
    map_.emplace(order_.front().key, order_.begin());
    used_ += size;
    return {};
  }

 private:
  struct node {
    std::string key;
    cache_future value;
    std::size_t size;
  };
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::mutex mu_;
  std::list<node> order_;
  std::unordered_map<std::string, std::list<node>::iterator, hash, std::equal_to<>> map_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

}  // namespace unicache::baselines
