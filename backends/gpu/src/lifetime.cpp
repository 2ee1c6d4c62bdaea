// The use lists and the deferred-release list of the GPU core.
#include "lifetime.hpp"

#include <algorithm>

namespace unicache::gpu::detail {

void use_list::note(std::uint64_t stream_serial, std::shared_ptr<const event> e) {
  std::lock_guard lock(mu_);
  // Entries of other streams whose work is over go (they pin an event each).
  std::erase_if(uses_, [&](const auto& use) {
    return use.first != stream_serial && use.second->query() != event::state::pending;
  });
  for (auto& [serial, latest] : uses_) {
    if (serial == stream_serial) {
      latest = std::move(e);
      return;
    }
  }
  uses_.emplace_back(stream_serial, std::move(e));
}

event_list use_list::take() {
  std::lock_guard lock(mu_);
  event_list out;
  out.reserve(uses_.size());
  for (auto& use : uses_) out.push_back(std::move(use.second));
  uses_.clear();
  return out;
}

void use_list::synchronize() noexcept {
  std::lock_guard lock(mu_);
  for (const auto& use : uses_) use.second->synchronize();
}

deferred_release& deferred_release::instance() {
  static deferred_release* const d = new deferred_release();  // outlives every static that releases through it
  return *d;
}

bool deferred_release::done(const event_list& events) {
  return std::all_of(events.begin(), events.end(),
                     [](const std::shared_ptr<const event>& e) { return e->query() != event::state::pending; });
}

void deferred_release::release_after(event_list after, std::function<void()> release,
                                     std::atomic<std::uint64_t>* deferred) noexcept {
  if (done(after)) {
    release();
    return;
  }
  try {
    {
      std::lock_guard lock(mu_);
      pending_.push_back({std::move(after), std::move(release)});
      count_.store(pending_.size(), std::memory_order_relaxed);
    }
    if (deferred) deferred->fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    // No memory to keep it for later: wait for the work now, then release.
    for (const auto& e : after) e->synchronize();
    if (release) release();
    return;
  }
  if (count_.load(std::memory_order_relaxed) > kCollectAbove) collect(kCollectAbove);
}

void deferred_release::collect(std::size_t at_most) {
  if (count_.load(std::memory_order_relaxed) == 0) return;
  std::vector<entry> ready;
  {
    std::lock_guard lock(mu_);
    const auto last = pending_.begin() + static_cast<std::ptrdiff_t>(std::min(at_most, pending_.size()));
    auto split = std::stable_partition(pending_.begin(), last, [](const entry& e) { return !done(e.after); });
    std::move(split, last, std::back_inserter(ready));
    pending_.erase(split, last);
    count_.store(pending_.size(), std::memory_order_relaxed);
  }
  for (entry& e : ready) e.release();  // outside the lock: a release may free a device object that releases more
}

void deferred_release::drain(std::size_t keep) {
  collect();
  for (;;) {
    entry oldest;
    {
      std::lock_guard lock(mu_);
      if (pending_.size() <= keep) return;
      oldest = std::move(pending_.front());
      pending_.erase(pending_.begin());
      count_.store(pending_.size(), std::memory_order_relaxed);
    }
    for (const auto& e : oldest.after) e->synchronize();
    oldest.release();
  }
}

}  // namespace unicache::gpu::detail
