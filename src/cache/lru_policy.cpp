// LRU's factory (make_lru_policy); the policy itself is in lru_policy.hpp.
#include "cache/lru_policy.hpp"

namespace unicache::detail {

std::unique_ptr<cache_policy> make_lru_policy(std::atomic<std::uint64_t>& clock) {
  return std::make_unique<lru_policy>(clock);
}

}  // namespace unicache::detail
