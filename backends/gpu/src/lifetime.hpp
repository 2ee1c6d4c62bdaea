// Stream-ordered lifetime of what the GPU core caches on a device: each
// object remembers the latest event of every stream that used it, and its
// release waits, off the host's critical path, until those events complete.
#pragma once

#include <cstdint>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "unicache/gpu.hpp"

namespace unicache::gpu::detail {

using event_list = std::vector<std::shared_ptr<const event>>;

// The latest event of each stream that used an object. A stream's newer
// event replaces its older one (a stream runs in order); events of other
// streams stay until they complete.
class use_list {
 public:
  void note(std::uint64_t stream_serial, std::shared_ptr<const event> e);
  // The events to wait for before the object may go (the list is emptied).
  // Throws only std::bad_alloc, leaving the list as it was.
  event_list take();
  // Waits on the host for every event in the list (a destructor's fallback
  // without host memory to defer its release).
  void synchronize() noexcept;

 private:
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const event>>> uses_;  // guarded by mu_
};

// Releases run by whoever collects them, once their events complete; a
// release never waits for a device where it is asked for (an eviction
// callback, a destructor).
//
// Collected at every core allocation and wait(); in part (the oldest few) at
// every end of an execution while entries are pending, and when a release
// finds more than kCollectAbove pending. Bounded: past kMaxPending entries, the next
// allocation waits on the host for the oldest ones; out of memory, for all.
class deferred_release {
 public:
  static deferred_release& instance();
  static constexpr std::size_t kMaxPending = 1024;
  static constexpr std::size_t kCollectAbove = 64;

  // Runs `release` now if every event of `after` has completed (or failed:
  // the work is over either way), else keeps it for later. `deferred` is
  // counted when it is kept. Never throws (destructors call it): without
  // host memory to keep it, it waits for the events and releases.
  void release_after(event_list after, std::function<void()> release,
                     std::atomic<std::uint64_t>* deferred) noexcept;
  // Runs the releases whose events have completed; never waits. Cheap when
  // nothing is pending. `at_most`: looks at no more than that many of the
  // oldest entries (what an execution's end does, so that a long list never
  // costs an execution more than a few queries).
  void collect(std::size_t at_most = static_cast<std::size_t>(-1));
  // Waits for the events of the oldest releases until at most `keep` are
  // pending, running each.
  void drain(std::size_t keep);
  std::size_t pending() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct entry {
    event_list after;
    std::function<void()> release;
  };
  static bool done(const event_list& events);

  std::mutex mu_;
  std::vector<entry> pending_;  // guarded by mu_
  std::atomic<std::size_t> count_{0};
};

}  // namespace unicache::gpu::detail
