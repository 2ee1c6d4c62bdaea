#include "cache/lru_policy.hpp"

namespace unicache::detail {

std::unique_ptr<cache_policy> make_lru_policy(std::atomic<std::uint64_t>& clock) {
  return std::make_unique<lru_policy>(clock);
}

}  // namespace unicache::detail
