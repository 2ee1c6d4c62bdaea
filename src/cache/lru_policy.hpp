// LRU: evicts the entry used least recently. The device's clock is a tick
// that advances with every insertion; a hit stamps its entry with it, and
// the eviction queue orders entries by stamp.
#pragma once

#include "cache/eviction_queue.hpp"
#include "cache/policy.hpp"

namespace unicache::detail {

class lru_policy : public cache_policy {
 public:
  explicit lru_policy(std::atomic<std::uint64_t>& clock) : cache_policy(clock) {
    clock_.store(tick_, std::memory_order_relaxed);
  }

  void on_insert(entry* e) override {
    // The new entry takes a tick of its own and the clock that hits stamp
    // moves past it: an entry hit after this insertion is more recent than
    // this entry, not tied with it (K1, K2, hit K1, K3 evicts K2).
    e->stamp.store(++tick_, std::memory_order_relaxed);
    clock_.store(++tick_, std::memory_order_relaxed);
    queue_.push(e, priority_of(e));
  }
  void on_adopt(entry* e) override { queue_.push(e, priority_of(e)); }
  void on_update(entry*, std::uint64_t) override {}  // recency alone orders entries
  void on_remove(entry* e) override { queue_.erase(e); }
  // Least recently used first; admits everything.
  bool make_room(std::uint64_t target, const entry* /*incoming*/, policy_host& host) override {
    while (host.used_bytes() > target) {
      double priority = 0;
      entry* e = queue_.victim([this](const entry* x) { return priority_of(x); }, &priority);
      if (!e) break;
      host.evict(e, /*refused=*/false);
    }
    return true;
  }

 private:
  // A stamp above the clock was written by a hit that raced a change of
  // policy, with the previous policy's clock: it counts as the oldest.
  double priority_of(const entry* e) const {
    const std::uint64_t stamp = e->stamp.load(std::memory_order_relaxed);
    return stamp <= tick_ ? static_cast<double>(stamp) : 0.0;
  }

  std::uint64_t tick_ = 0;
  eviction_queue queue_;
};

}  // namespace unicache::detail
