// The library's mutex: std::mutex (pthreads, which ThreadSanitizer sees; a
// Debian libabsl is not built for TSan, so absl::Mutex would be invisible to
// it) with clang thread-safety annotations, so ABSL_GUARDED_BY and friends are
// checked by -Wthread-safety.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace unicache::detail {

class ABSL_LOCKABLE mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return m_.try_lock(); }

  // Waits on `cv` until `ready()` holds; the caller holds this mutex.
  template <typename Predicate>
  void wait(std::condition_variable_any& cv, Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    cv.wait(m_, ready);
  }
  // The same, giving up after `timeout`; returns whether `ready()` holds.
  template <typename Duration, typename Predicate>
  bool wait_for(std::condition_variable_any& cv, Duration timeout, Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return cv.wait_for(m_, timeout, ready);
  }

 private:
  std::mutex m_;
};

// Holds any of the library's lockables (mutex, lock_file) for a scope.
template <typename Lockable>
class ABSL_SCOPED_LOCKABLE scoped_lock {
 public:
  explicit scoped_lock(Lockable* l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) { l_->lock(); }
  ~scoped_lock() ABSL_UNLOCK_FUNCTION() { l_->unlock(); }
  scoped_lock(const scoped_lock&) = delete;
  scoped_lock& operator=(const scoped_lock&) = delete;

 private:
  Lockable* l_;
};

using mutex_lock = scoped_lock<mutex>;

}  // namespace unicache::detail
