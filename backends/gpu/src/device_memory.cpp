// Device memory of the GPU core, its counters, and its per-stream state.
#include "device_memory.hpp"

#include <map>
#include <string>

#include "unicache/compiler.hpp"

namespace unicache::gpu {

namespace detail {

counters& counters_of(owner_id owner) {
  static std::mutex mu;
  static auto* const all = new std::map<owner_id, counters>();  // never freed: releases count into it at exit
  std::lock_guard lock(mu);
  return (*all)[owner];
}

buffer allocate(const device& d, const engine& e, std::size_t bytes, const char* what) {
  deferred_release& later = deferred_release::instance();
  if (later.pending() > deferred_release::kMaxPending) later.drain(deferred_release::kMaxPending / 2);
  later.collect();
  if (buffer b = d.allocate(e, bytes == 0 ? 1 : bytes, what, /*last_try=*/false)) return b;
  // Packed weights of this device can be packed again: give them up (those
  // that queued work still reads are freed when it is done: wait for that)
  // and try once more.
  constant_tensor_cache().evict_device(e.kind(), e.device_id(), d.cache_owner());
  later.drain(0);
  counters_of(d.cache_owner()).out_of_memory_retries.fetch_add(1, std::memory_order_relaxed);
  return d.allocate(e, bytes == 0 ? 1 : bytes, what, /*last_try=*/true);
}

device_memory::~device_memory() {
  if (!memory_) return;
  const device* d = &device_;
  event_list uses;
  try {
    uses = uses_.take();
    std::function<void()> release = [d, e = engine_, m = memory_, counter = released_] {
      d->free(e, m);
      if (counter) counter->fetch_add(1, std::memory_order_relaxed);
    };
    deferred_release::instance().release_after(uses, std::move(release),
                                               &counters_of(d->cache_owner()).deferred_releases);
  } catch (...) {
    // No host memory to keep it for later: wait for the work, then free.
    uses_.synchronize();
    for (const auto& e : uses) e->synchronize();
    d->free(engine_, memory_);
    if (released_) released_->fetch_add(1, std::memory_order_relaxed);
  }
}

buffer stream_access::workspace(const device& d, const stream& s, std::size_t bytes) {
  stream_resources& r = d.resources(s);
  std::lock_guard lock(r.mu_);
  if (r.workspace_bytes_ >= bytes) return r.workspace_;
  if (r.workspace_) {
    // Work queued on the stream may still use the old one.
    deferred_release::instance().release_after(
        {d.record(s)}, [d = &d, e = r.engine_, m = r.workspace_] { d->free(e, m); },
        &counters_of(d.cache_owner()).deferred_releases);
    r.workspace_ = nullptr;
    r.workspace_bytes_ = 0;
  }
  r.engine_ = s.get_engine();
  r.workspace_ = allocate(d, r.engine_, bytes, "split-K workspace");
  r.workspace_bytes_ = bytes;
  r.device_ = &d;
  return r.workspace_;
}

namespace {
// Drops the executions known to be over, oldest first; a failed one sets
// `failed`. A stream runs its work in order, so the first one still pending
// ends the scan: the later ones are pending too (on a queue that runs out of
// order they are asked again at the next call). One query per call in the
// steady state instead of one per execution in flight: each is a driver
// call. The caller holds the stream's lock.
void settle(std::vector<std::shared_ptr<const event>>& unchecked, bool& failed) {
  auto over = unchecked.begin();
  for (; over != unchecked.end(); ++over) {
    const event::state st = (*over)->query();
    if (st == event::state::pending) break;
    if (st == event::state::failed) failed = true;
  }
  unchecked.erase(unchecked.begin(), over);
}
}  // namespace

void stream_access::report_failure(const device& d, const stream& s) {
  stream_resources& r = d.resources(s);
  {
    std::lock_guard lock(r.mu_);
    if (r.unchecked_.empty() && !r.failed_) return;
    settle(r.unchecked_, r.failed_);
    if (!r.failed_) return;
    r.failed_ = false;
  }
  const std::string what = std::string(d.name()) + ": work enqueued earlier on this stream failed on the device";
  try {
    d.wait(s);  // the API's own error, where it has one
  } catch (const error& err) {
    std::throw_with_nested(stream_error(what + ": " + err.what()));
  }
  throw stream_error(what);
}

void stream_access::note_execution(const device& d, const stream& s, std::shared_ptr<const event> e) {
  stream_resources& r = d.resources(s);
  std::lock_guard lock(r.mu_);
  settle(r.unchecked_, r.failed_);
  r.unchecked_.push_back(e);
  r.last_ = std::move(e);
}

}  // namespace detail

namespace {
std::atomic<std::uint64_t> next_stream_serial{1};
}  // namespace

stream_resources::stream_resources() : serial_(next_stream_serial.fetch_add(1, std::memory_order_relaxed)) {}

stream_resources::~stream_resources() {
  if (!workspace_) return;
  detail::event_list after;
  if (final_ || last_) after.push_back(final_ ? std::move(final_) : std::move(last_));
  detail::deferred_release::instance().release_after(
      std::move(after), [d = device_, e = engine_, m = workspace_] { d->free(e, m); },
      &detail::counters_of(device_->cache_owner()).deferred_releases);
}

void stream_resources::set_final_event(std::shared_ptr<const event> e) {
  std::lock_guard lock(mu_);
  final_ = std::move(e);
}

}  // namespace unicache::gpu
