// NO_EVICT: never evicts to make room; a new entry that does not fit is
// refused. Shrinking the capacity evicts in least-recently-used order, so
// it shares LRU's bookkeeping.
#include "cache/lru_policy.hpp"

namespace unicache::detail {
namespace {

class no_evict_policy final : public lru_policy {
 public:
  using lru_policy::lru_policy;
  bool evicts_for_room() const override { return false; }
};

}  // namespace

std::unique_ptr<cache_policy> make_no_evict_policy(std::atomic<std::uint64_t>& clock) {
  return std::make_unique<no_evict_policy>(clock);
}

}  // namespace unicache::detail
