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

  // Waits on `cv` until `ready()` holds; the caller holds this mutex.
  template <typename Predicate>
  void wait(std::condition_variable_any& cv, Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    cv.wait(m_, ready);
  }

 private:
  std::mutex m_;
};

class ABSL_SCOPED_LOCKABLE mutex_lock {
 public:
  explicit mutex_lock(mutex* m) ABSL_EXCLUSIVE_LOCK_FUNCTION(m) : m_(m) { m_->lock(); }
  ~mutex_lock() ABSL_UNLOCK_FUNCTION() { m_->unlock(); }
  mutex_lock(const mutex_lock&) = delete;
  mutex_lock& operator=(const mutex_lock&) = delete;

 private:
  mutex* m_;
};

}  // namespace unicache::detail
