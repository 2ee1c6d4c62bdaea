// Reference eviction policies and offline bounds for bench_policy, written
// from their papers, independent of the library's own policy code:
//
//   gdsf   GreedyDual-Size-Frequency (Cherkasova 1998): priority
//          L + frequency * cost / size; L rises to each evicted priority.
//   sieve  SIEVE (Zhang et al., NSDI'24): a FIFO queue with a visited bit and
//          a hand that moves from the oldest entry, sparing visited ones once.
//   belady Belady's MIN for equal sizes: evict the entry used furthest ahead.
//   cost_bound  a lower bound on the cost-weighted miss ratio of every
//          policy, in the spirit of FOO/PFOO-L (Berger et al., SIGMETRICS'18):
//          a hit needs the object kept for its whole reuse interval, which
//          occupies size x interval length of the cache's byte-time C x T.
//          The best any cache can do is at most the fractional knapsack of
//          intervals by cost saved per byte-time; every policy misses at least
//          what that leaves.
//
// Objects are dense ids 0..n-1 with a fixed size and cost each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <list>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace unicache::bench {

struct object_request {
  std::uint32_t id;
  std::uint64_t size;
  double cost;
};

class gdsf_cache {
 public:
  gdsf_cache(std::size_t objects, std::uint64_t capacity) : capacity_(capacity), slots_(objects) {}

  // True on a hit.
  bool access(const object_request& r) {
    slot& s = slots_[r.id];
    if (s.resident) {
      order_.erase({s.priority, r.id});
      ++s.frequency;
      s.priority = inflation_ + s.frequency * r.cost / static_cast<double>(r.size);
      order_.insert({s.priority, r.id});
      return true;
    }
    if (r.size > capacity_) return false;
    while (used_ + r.size > capacity_) {
      const auto victim = *order_.begin();
      order_.erase(order_.begin());
      inflation_ = victim.first;
      slots_[victim.second].resident = false;
      used_ -= slots_[victim.second].size;
    }
    s = {true, 1, r.size, inflation_ + r.cost / static_cast<double>(r.size)};
    order_.insert({s.priority, r.id});
    used_ += r.size;
    return false;
  }

 private:
  struct slot {
    bool resident = false;
    double frequency = 0;
    std::uint64_t size = 0;
    double priority = 0;
  };
  std::uint64_t capacity_, used_ = 0;
  double inflation_ = 0;
  std::vector<slot> slots_;
  std::set<std::pair<double, std::uint32_t>> order_;
};

class sieve_cache {
 public:
  sieve_cache(std::size_t objects, std::uint64_t capacity) : capacity_(capacity), slots_(objects) {}

  bool access(const object_request& r) {
    slot& s = slots_[r.id];
    if (s.resident) {
      s.visited = true;
      return true;
    }
    if (r.size > capacity_) return false;
    while (used_ + r.size > capacity_) evict();
    queue_.push_front(r.id);  // newest at the front, the hand walks from the back
    s = {true, false, r.size, queue_.begin()};
    used_ += r.size;
    return false;
  }

 private:
  struct slot {
    bool resident = false;
    bool visited = false;
    std::uint64_t size = 0;
    std::list<std::uint32_t>::iterator at;
  };
  void evict() {
    auto it = hand_valid_ ? hand_ : std::prev(queue_.end());
    while (slots_[*it].visited) {
      slots_[*it].visited = false;
      it = it == queue_.begin() ? std::prev(queue_.end()) : std::prev(it);
    }
    slot& victim = slots_[*it];
    hand_valid_ = queue_.size() > 1;
    if (hand_valid_) hand_ = it == queue_.begin() ? std::prev(queue_.end()) : std::prev(it);
    victim.resident = false;
    used_ -= victim.size;
    queue_.erase(it);
  }

  std::uint64_t capacity_, used_ = 0;
  std::vector<slot> slots_;
  std::list<std::uint32_t> queue_;
  std::list<std::uint32_t>::iterator hand_;
  bool hand_valid_ = false;
};

// For each request, the index of the next request of the same object (or
// the trace's length if none).
inline std::vector<std::size_t> next_uses(const std::vector<object_request>& trace, std::size_t objects) {
  std::vector<std::size_t> next(trace.size()), last(objects, trace.size());
  for (std::size_t i = trace.size(); i-- > 0;) {
    next[i] = last[trace[i].id];
    last[trace[i].id] = i;
  }
  return next;
}

// Cost of the misses of Belady's MIN holding `slots` equal-size objects.
inline double belady_missed_cost(const std::vector<object_request>& trace, std::size_t objects, std::size_t slots) {
  const std::vector<std::size_t> next = next_uses(trace, objects);
  std::vector<std::size_t> resident_next(objects, 0);
  std::vector<bool> resident(objects, false);
  std::priority_queue<std::pair<std::size_t, std::uint32_t>> farthest;  // lazy: stale pairs are skipped
  std::size_t count = 0;
  double missed = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const std::uint32_t id = trace[i].id;
    if (!resident[id]) {
      missed += trace[i].cost;
      if (slots == 0) continue;
      if (count == slots) {
        for (;;) {
          const auto [when, victim] = farthest.top();
          farthest.pop();
          if (resident[victim] && resident_next[victim] == when) {
            resident[victim] = false;
            --count;
            break;
          }
        }
      }
      resident[id] = true;
      ++count;
    }
    resident_next[id] = next[i];
    farthest.push({next[i], id});
  }
  return missed;
}

// The lower bound on missed cost described above, for a cache of
// `capacity` bytes.
inline double cost_bound_missed_cost(const std::vector<object_request>& trace, std::size_t objects,
                                     std::uint64_t capacity) {
  const std::vector<std::size_t> next = next_uses(trace, objects);
  struct interval {
    double resource;  // bytes x requests it spans
    double value;     // cost of the miss a hit saves
  };
  std::vector<interval> intervals;
  double total = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    total += trace[i].cost;
    if (next[i] == trace.size()) continue;
    if (trace[i].size > capacity) continue;  // never fits
    intervals.push_back({static_cast<double>(trace[i].size) * static_cast<double>(next[i] - i), trace[next[i]].cost});
  }
  std::sort(intervals.begin(), intervals.end(), [](const interval& a, const interval& b) {
    return a.value * b.resource > b.value * a.resource;
  });
  double budget = static_cast<double>(capacity) * static_cast<double>(trace.size());
  double saved = 0;
  for (const interval& iv : intervals) {
    if (budget <= 0) break;
    const double take = std::min(1.0, budget / iv.resource);
    saved += take * iv.value;
    budget -= take * iv.resource;
  }
  return total - saved;
}

}  // namespace unicache::bench
