// Epoch-based memory reclamation: lets readers walk a shared structure with no
// lock and no reference counting, while writers unlink parts of it and free
// them only once no reader can still hold them.
//
//   {
//     epoch_domain::guard g;            // reader: a few ns, no shared write
//     entry* e = table.find(...);       // e stays valid until g ends
//   }
//   table.erase(e);                     // writer, under its own lock
//   epoch_domain::instance().retire(e, &delete_entry);
//
// A reader announces the global epoch in its own cache line. Reclamation
// advances the epoch, issues a process-wide barrier (membarrier(2) when the
// kernel has it, so readers need only a compiler barrier; a full fence on
// both sides otherwise) and frees what was retired before the oldest epoch
// still announced. Retired objects' deleters run outside every lock of the
// domain, on whichever thread reclaims.
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "util/mutex.hpp"

namespace unicache::detail {

class epoch_domain {
 public:
  // The process-wide domain; never destroyed.
  static epoch_domain& instance() {
    static epoch_domain* const domain = new epoch_domain();
    return *domain;
  }

  // One per thread that has read: the epoch it announced.
  struct alignas(64) record {
    std::atomic<std::uint64_t> active{0};  // 0: not in a critical section
    std::uint32_t depth = 0;               // owner thread only
    std::atomic<bool> in_use{true};
    record* next = nullptr;  // immutable once published
  };

  // A read-side critical section. Nestable; must end on the thread that
  // began it. Objects retired while a guard is alive, and reachable when it
  // began, stay valid until it ends.
  class guard {
   public:
    guard() noexcept : rec_(epoch_domain::instance().enter()) {}
    ~guard() { epoch_domain::exit(rec_); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

   private:
    record* rec_;
  };

  // Schedules `deleter(object)` once every reader that might still see
  // `object` has left. The caller must already have made `object`
  // unreachable for new readers. Only queues: safe under any lock.
  // `bytes` (optional) tells how much memory the object holds: large
  // retirements are reclaimed at the next collect() rather than waiting for
  // a batch.
  void retire(void* object, void (*deleter)(void*), std::size_t bytes = 0);

  // Reclaims what readers no longer hold, once enough has been retired (in
  // count or in bytes) to be worth a barrier. Runs deleters on this thread: call it with no lock
  // held that a deleter might take.
  void collect();

  // Frees now whatever no reader can still hold; never waits.
  void reclaim();

  // Reclaims everything retired before this call, waiting for readers to
  // leave. Must not be called inside a guard.
  void synchronize();

  // Whether readers use the asymmetric (membarrier) protocol.
  bool asymmetric() const { return asymmetric_; }

  // A critical section as guard has, for callers that cannot keep a guard
  // object (one that outlives a function call): end_read(begin_read()),
  // on the same thread.
  static record* begin_read() noexcept { return instance().enter(); }
  static void end_read(record* rec) noexcept {
    assert(rec == current_record_ && "a read section must end on the thread that began it");
    exit(rec);
  }

 private:
  epoch_domain();
  record* enter() noexcept {
    record* rec = this_thread_record();
    if (rec->depth++ == 0) {
      const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
      if (asymmetric_) {
        rec->active.store(epoch, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst);
      } else {
        rec->active.exchange(epoch, std::memory_order_seq_cst);
      }
    }
    return rec;
  }
  static void exit(record* rec) noexcept {
    if (--rec->depth == 0) rec->active.store(0, std::memory_order_release);
  }
  static record* this_thread_record() noexcept {
    record* rec = current_record_;
    return rec ? rec : instance().acquire_record();
  }
  record* acquire_record();
  void heavy_barrier() const;


  struct retired_object {
    void* object;
    void (*deleter)(void*);
    std::uint64_t epoch;
  };

  std::atomic<std::uint64_t> epoch_{1};
  std::atomic<record*> records_{nullptr};
  bool asymmetric_ = false;
  mutable mutex mu_;
  std::vector<retired_object> retired_ ABSL_GUARDED_BY(mu_);
  std::size_t retired_since_reclaim_ ABSL_GUARDED_BY(mu_) = 0;
  std::size_t retired_bytes_since_reclaim_ ABSL_GUARDED_BY(mu_) = 0;

  // constinit: other translation units read it directly, with no TLS wrapper.
  static constinit thread_local record* current_record_;
  friend struct record_releaser;
};

using epoch_guard = epoch_domain::guard;

}  // namespace unicache::detail
