// The order in which one device gives entries up: a min-heap of priorities
// kept lazily, so that a hit never touches it.
//
// A hit only stores the policy clock into its entry (one relaxed store, and
// only when the value changes). The heap keeps the priority an entry had when
// it was last pushed; when the minimum is popped its priority is recomputed,
// and if it rose since (the entry was used), the entry goes back with its new
// priority. Priorities never fall without a push (update_cost pushes), so the
// first entry whose recomputed priority equals its node's is the true
// minimum. Each push bumps the entry's heap_version, which makes its older
// nodes stale; stale nodes are skipped, and the heap is rebuilt from the live
// entries when stale nodes outnumber them.
//
// Not thread-safe: the owning device's mutex guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cache/entry.hpp"

namespace unicache::detail {

class eviction_queue {
 public:
  void push(entry* e, double priority) {
    ++e->heap_version;
    heap_.push_back({priority, e->heap_version, entry_ref::share(e)});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  // Removes and returns the resident entry of lowest current priority
  // (`priority_of(e)`), or an empty ref if none is queued. `*priority` gets
  // the victim's priority.
  template <typename PriorityOf>
  entry_ref pop_victim(PriorityOf&& priority_of, double* priority) {
    // Bounds re-queuing when concurrent hits keep raising priorities.
    std::size_t requeues_left = heap_.size() + 16;
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      node n = std::move(heap_.back());
      heap_.pop_back();
      entry* e = as_entry(n.entry);
      if (!e->resident.load(std::memory_order_relaxed) || n.version != e->heap_version) continue;
      const double current = priority_of(e);
      if (current > n.priority && requeues_left > 0) {
        --requeues_left;
        push(e, current);
        continue;
      }
      *priority = current;
      return std::move(n.entry);
    }
    return {};
  }

  // Rebuilds from the live entries when stale nodes dominate.
  template <typename PriorityOf>
  void compact_if_stale(const std::vector<entry*>& live, PriorityOf&& priority_of) {
    if (heap_.size() <= 2 * live.size() + 64) return;
    rebuild(live, priority_of);
  }

  template <typename PriorityOf>
  void rebuild(const std::vector<entry*>& live, PriorityOf&& priority_of) {
    heap_.clear();
    for (entry* e : live) push(e, priority_of(e));
  }

  void clear() { heap_.clear(); }
  std::size_t size() const { return heap_.size(); }

 private:
  struct node {
    double priority;
    std::uint32_t version;
    entry_ref entry;
  };
  // std heap algorithms build a max-heap; inverting the order keeps the
  // lowest priority on top.
  static bool later(const node& a, const node& b) { return a.priority > b.priority; }

  std::vector<node> heap_;
};

}  // namespace unicache::detail
