// Epoch-based reclamation: the per-thread records, retiring and collecting.
#include "util/epoch.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <thread>

namespace unicache::detail {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUnderThreadSanitizer = true;
#else
constexpr bool kUnderThreadSanitizer = false;
#endif
#else
constexpr bool kUnderThreadSanitizer = false;
#endif

// Retirements (or retired bytes) between two reclamation attempts: amortizes
// the barrier without letting large objects linger.
constexpr std::size_t kReclaimBatch = 64;
constexpr std::size_t kReclaimBytes = 64 * 1024;

bool register_membarrier() {
  // ThreadSanitizer does not model membarrier(2); the symmetric protocol
  // keeps every ordering visible to it.
  if (kUnderThreadSanitizer) return false;
  const long supported = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || !(supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

// Registering waits for an RCU grace period when the process already has
// other threads (6-14 ms measured on the dev VM, e.g. after an OpenCL
// runtime started its workers); at static initialisation the process
// usually has one thread and registering is free. Whatever runs first
// registers; the result is the same either way.
bool membarrier_registered() {
  static const bool registered = register_membarrier();
  return registered;
}
[[maybe_unused]] const bool registered_at_load = membarrier_registered();

}  // namespace

constinit thread_local epoch_domain::record* epoch_domain::current_record_ = nullptr;

// Gives the thread's record back when the thread ends, for the next thread.
struct record_releaser {
  ~record_releaser() {
    epoch_domain::record* rec = epoch_domain::current_record_;
    if (!rec) return;
    rec->active.store(0, std::memory_order_release);
    rec->in_use.store(false, std::memory_order_release);
    epoch_domain::current_record_ = nullptr;
  }
};
namespace {
thread_local record_releaser releaser;
}  // namespace

epoch_domain::epoch_domain() : asymmetric_(membarrier_registered()) {}

epoch_domain::record* epoch_domain::acquire_record() {
  (void)&releaser;  // constructs this thread's releaser
  for (record* rec = records_.load(std::memory_order_acquire); rec; rec = rec->next) {
    bool expected = false;
    if (!rec->in_use.load(std::memory_order_relaxed) &&
        rec->in_use.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      rec->depth = 0;
      current_record_ = rec;
      return rec;
    }
  }
  auto* rec = new record();  // records live as long as the process
  record* head = records_.load(std::memory_order_relaxed);
  do {
    rec->next = head;
  } while (!records_.compare_exchange_weak(head, rec, std::memory_order_release,
                                           std::memory_order_relaxed));
  current_record_ = rec;
  return rec;
}

void epoch_domain::heavy_barrier() const {
  if (asymmetric_ && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0) return;
  // Without membarrier the readers' exchange pairs with this fence.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void epoch_domain::retire(void* object, void (*deleter)(void*), std::size_t bytes) {
  mutex_lock lock(&mu_);
  retired_.push_back({object, deleter, epoch_.load(std::memory_order_acquire)});
  ++retired_since_reclaim_;
  retired_bytes_since_reclaim_ += bytes;
}

void epoch_domain::collect() {
  {
    mutex_lock lock(&mu_);
    if (retired_since_reclaim_ < kReclaimBatch && retired_bytes_since_reclaim_ < kReclaimBytes) {
      return;
    }
  }
  reclaim();
}

void epoch_domain::reclaim() {
  std::vector<retired_object> ready;
  {
    mutex_lock lock(&mu_);
    retired_since_reclaim_ = 0;
    retired_bytes_since_reclaim_ = 0;
    if (retired_.empty()) return;
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    heavy_barrier();
    std::uint64_t oldest = std::numeric_limits<std::uint64_t>::max();
    for (record* rec = records_.load(std::memory_order_acquire); rec; rec = rec->next) {
      const std::uint64_t active = rec->active.load(std::memory_order_acquire);
      if (active != 0) oldest = std::min(oldest, active);
    }
    // A reader that announced epoch `a` began after everything retired
    // before `a` was unreachable, so it cannot hold those objects.
    auto keep = std::partition(retired_.begin(), retired_.end(),
                               [oldest](const retired_object& r) { return r.epoch >= oldest; });
    ready.assign(keep, retired_.end());
    retired_.erase(keep, retired_.end());
  }
  for (const retired_object& r : ready) r.deleter(r.object);
}

void epoch_domain::synchronize() {
  std::uint64_t target;
  {
    mutex_lock lock(&mu_);
    target = epoch_.load(std::memory_order_relaxed);
  }
  for (;;) {
    reclaim();
    {
      mutex_lock lock(&mu_);
      const bool done = std::none_of(retired_.begin(), retired_.end(),
                                     [target](const retired_object& r) { return r.epoch <= target; });
      if (done) return;
    }
    std::this_thread::yield();
  }
}

}  // namespace unicache::detail
