// remote_tier's background writer (store/remote_tier.hpp): the thread that
// sends queued puts, removes and lease releases to the server, the counter
// reports it adds to the server's fleet counters, and flush.
#include <chrono>

#include "store/remote_tier.hpp"
#include "util/log.hpp"

namespace unicache::detail {

bool remote_tier::flush(std::chrono::milliseconds limit) {
  if (read_only_ || !in_owner()) return true;  // no writer here
  scoped_lock l(&queue_mu_);
  if (!stopping_) {
    queue_.push_back(write{});  // a report of the counters, then the queue is done
    queue_cv_.notify_all();
  }
  auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return queue_.empty() && !writing_; };
  if (limit == std::chrono::milliseconds::max()) {
    queue_mu_.wait(queue_cv_, done);
    return true;
  }
  return queue_mu_.wait_for(queue_cv_, limit, done);
}

void remote_tier::report() {
  static constexpr std::array<const char*, kReported> kFields{
      "hits",    "misses",     "rejected",      "errors", "timeouts",    "skipped",    "puts",
      "dropped", "bytes_read", "bytes_written", "leases", "lease_waits", "lease_hits", "lease_wait_ms"};
  const std::array<const std::atomic<std::uint64_t>*, kReported> counts{
      &counters_.hits,       &counters_.misses,        &counters_.rejected, &counters_.errors,
      &counters_.timeouts,   &counters_.skipped,       &counters_.puts,     &counters_.dropped,
      &counters_.bytes_read, &counters_.bytes_written, &counters_.leases,   &counters_.lease_waits,
      &counters_.lease_hits, &counters_.lease_wait_ms};
  // A report left from a failure goes first, then one of what came since.
  for (int round = 0; round < 2 && reporting_; ++round) {
    if (!pending_) {
      pending_report p;
      bool any = false;
      for (std::size_t i = 0; i < counts.size(); ++i) {
        const std::uint64_t now = counts[i]->load(std::memory_order_relaxed);
        p.deltas[i] = now - reported_[i];
        reported_[i] = now;
        any = any || p.deltas[i] != 0;
      }
      if (!any) return;
      p.seq = ++report_seq_;
      pending_ = p;
    }
    std::vector<counter_delta> deltas;  // before admit(): an allocation that fails holds no probe
    for (std::size_t i = 0; i < kFields.size(); ++i) {
      if (pending_->deltas[i] != 0) deltas.emplace_back(kFields[i], pending_->deltas[i]);
    }
    if (!admit()) return;  // with something to send: a probe gets an answer
    remote_reply r;
    try {
      r = backend_->report(token_, pending_->seq, deltas);
    } catch (...) {
      abandon_probe();
      throw;
    }
    if (record(r)) return;  // sent again, with its number, at the next report
    if (r.status != remote_status::ok) {
      // Not allowed (an ACL without EVAL or HINCRBY, scripts off) or kept
      // by no such server: counters are a convenience, never a reason to
      // stop using the server.
      reporting_ = false;
    }
    pending_.reset();
  }
}

void remote_tier::writer_loop() {
  try {
    for (;;) {
      write w;
      {
        scoped_lock l(&queue_mu_);
        // Idle for a while: the counts go out anyway.
        const bool woke = queue_mu_.wait_for(queue_cv_, std::chrono::seconds(5), [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return stopping_ || !queue_.empty();
        });
        if (stopping_ && (queue_.empty() || std::chrono::steady_clock::now() > stop_deadline_)) return;
        if (woke) {
          w = std::move(queue_.front());
          queue_.pop_front();
          queued_bytes_ -= w.value.size();
        }
        writing_ = true;
      }
      write_one(w);
      scoped_lock l(&queue_mu_);
      writing_ = false;
      queue_cv_.notify_all();
    }
  } catch (...) {
    // Out of memory: the tier stops writing; reads go on.
    scoped_lock l(&queue_mu_);
    stopping_ = true;
    writing_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    queue_cv_.notify_all();
  }
}

void remote_tier::write_one(const write& w) {
  if (w.what == write::kind::report) {
    report();  // idle, or flush() asked
    return;
  }
  if (!admit()) {
    if (w.what == write::kind::value) counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  remote_reply r;
  try {
    switch (w.what) {
      case write::kind::value: r = backend_->set(w.device, w.key, w.value); break;
      case write::kind::removal: r = backend_->remove(w.device, w.key); break;
      default: r = backend_->release_lease(w.device, w.key, w.token); break;
    }
  } catch (...) {
    abandon_probe();
    throw;
  }
  if (record(r)) return;
  if (r.status == remote_status::ok) {
    if (w.what == write::kind::value) {
      counters_.puts.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_written.fetch_add(w.value.size(), std::memory_order_relaxed);
    }
  } else if (w.what != write::kind::release) {
    // The server refuses this write (OOM under noeviction, NOPERM for a
    // read-only ACL user, READONLY on a replica): dropped and said once;
    // reads go on.
    counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    if (!warned_.exchange(true)) warn("remote kernel cache: " + r.message + "; writes are dropped, reads go on");
  }
}

}  // namespace unicache::detail
