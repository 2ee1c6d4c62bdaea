// The eviction callbacks of one unified_cache: every owner's subscribers,
// in the order they subscribed. Thread-safe; callbacks run with no lock of
// the registry held, so they may subscribe, unsubscribe (themselves too)
// and call back into the cache.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {

class callback_registry {
 public:
  // Throws cache_error for an empty callback.
  eviction_subscription add(owner_id owner, eviction_callback callback);
  // After it returns no call of the callback runs on another thread.
  bool remove(const eviction_subscription& subscription);
  // Calls every subscriber of the event's owner. A subscriber removed
  // meanwhile is skipped; one added meanwhile sees the next eviction. An
  // exception a callback throws is reported and dropped.
  void run(const eviction_event& event);

 private:
  struct slot {
    eviction_callback callback;
    std::uint64_t id = 0;  // 0: unsubscribed
    int running = 0;       // guarded by mu_
  };

  mutex mu_;
  std::condition_variable_any finished_;
  absl::flat_hash_map<owner_id, std::vector<std::shared_ptr<slot>>> slots_ ABSL_GUARDED_BY(mu_);
  std::uint64_t last_id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace unicache::detail
