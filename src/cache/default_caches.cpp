// The process-wide caches, configured from the environment on first use and
// never destroyed, so that backends may use them from static destructors.
#include "unicache/cache.hpp"

namespace unicache {

unified_cache& constant_tensor_cache() {
  static unified_cache* const cache = new unified_cache(cache_config::constant_tensor_cache_from_environment());
  return *cache;
}

unified_cache& kernel_cache() {
  static unified_cache* const cache = new unified_cache(cache_config::kernel_cache_from_environment());
  return *cache;
}

}  // namespace unicache
