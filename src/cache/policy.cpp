// make_policy: the eviction policy of a name, from the table in policies.def.
#include "cache/policy.hpp"

namespace unicache::detail {

#define UNICACHE_POLICY(value, factory) \
  std::unique_ptr<cache_policy> factory(std::atomic<std::uint64_t>& clock);
#include "cache/policies.def"
#undef UNICACHE_POLICY

std::unique_ptr<cache_policy> make_policy(eviction_policy kind, std::atomic<std::uint64_t>& clock) {
  kind = effective_policy(kind);
#define UNICACHE_POLICY(value, factory) \
  if (kind == eviction_policy::value) return factory(clock);
#include "cache/policies.def"
#undef UNICACHE_POLICY
  return make_lru_policy(clock);  // unreachable: every value is registered
}

}  // namespace unicache::detail
