// The order in which one device gives entries up: an indexed min-heap of
// priorities, kept lazily so that a hit never touches it.
//
// A hit only stores the policy clock into its entry (one relaxed store, and
// only when the value changes). Each entry remembers the priority it has in
// the heap and its position there. When the minimum is about to be evicted
// its priority is recomputed; if it rose since (the entry was used), the
// entry moves down to its new place and the next minimum is examined. A
// priority only falls through update() (a reported cost), so the first
// minimum whose recomputed priority has not risen is the true minimum.
// Removing any entry is O(log n) through its stored position.
//
// Not thread-safe: the owning device's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cache/entry.hpp"

namespace unicache::detail {

class eviction_queue {
 public:
  void push(entry* e, double priority) {
    e->priority = priority;
    e->heap_index = static_cast<std::uint32_t>(heap_.size());
    heap_.push_back(e);
    sift_up(e->heap_index);
  }

  // Moves `e` (queued) to the place of its new priority.
  void update(entry* e, double priority) {
    const double old = e->priority;
    e->priority = priority;
    if (priority < old) {
      sift_up(e->heap_index);
    } else {
      sift_down(e->heap_index);
    }
  }

  void erase(entry* e) {
    const std::uint32_t i = e->heap_index;
    entry* last = heap_.back();
    heap_.pop_back();
    if (last == e) return;
    place(last, i);
    if (i > 0 && last->priority < heap_[(i - 1) / 2]->priority) {
      sift_up(i);
    } else {
      sift_down(i);
    }
  }

  // The queued entry of lowest current priority (`priority_of(e)`), left in
  // the queue; nullptr if it is empty. `*priority` gets that priority.
  template <typename PriorityOf>
  entry* victim(PriorityOf&& priority_of, double* priority) {
    // Bounds the moves when concurrent hits keep raising priorities.
    std::size_t moves_left = heap_.size() + 16;
    while (!heap_.empty()) {
      entry* top = heap_.front();
      const double current = priority_of(top);
      if (current > top->priority && moves_left-- > 0) {
        update(top, current);
        continue;
      }
      *priority = current;
      return top;
    }
    return nullptr;
  }

  void clear() { heap_.clear(); }

 private:
  void sift_up(std::uint32_t i) {
    entry* e = heap_[i];
    while (i > 0) {
      const std::uint32_t parent = (i - 1) / 2;
      if (!(e->priority < heap_[parent]->priority)) break;
      place(heap_[parent], i);
      i = parent;
    }
    place(e, i);
  }
  void sift_down(std::uint32_t i) {
    entry* e = heap_[i];
    const std::uint32_t n = static_cast<std::uint32_t>(heap_.size());
    for (;;) {
      std::uint32_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child + 1]->priority < heap_[child]->priority) ++child;
      if (!(heap_[child]->priority < e->priority)) break;
      place(heap_[child], i);
      i = child;
    }
    place(e, i);
  }
  void place(entry* e, std::uint32_t i) {
    heap_[i] = e;
    e->heap_index = i;
  }

  std::vector<entry*> heap_;
};

}  // namespace unicache::detail
