// The C interface of the process-wide caches: capacities, policies,
// statistics and eviction callbacks (unicache.h, "Caches").
#include "unicache/unicache.h"

#include "c_api_internal.hpp"

using namespace unicache;
using namespace unicache::c_api;

extern "C" {

// --- Caches ---------------------------------------------------------------------

unicache_status_t unicache_set_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind, size_t capacity_mb,
                                              unicache_policy_t policy) {
  return guarded([&] { cache_of(cache).set_capacity(to_kind(kind), capacity_mb, to_policy(policy)); });
}

unicache_status_t unicache_get_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind, size_t* capacity_mb,
                                              unicache_policy_t* policy) {
  return guarded([&] {
    need(capacity_mb, "capacity_mb");
    unified_cache& c = cache_of(cache);
    const engine_kind k = to_kind(kind);
    *capacity_mb = c.capacity(k);
    if (policy) *policy = from_policy(c.policy(k));
  });
}

unicache_status_t unicache_set_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t size_mb) {
  return guarded([&] { constant_tensor_cache().set_capacity(to_kind(kind), size_mb); });
}

unicache_status_t unicache_get_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t* size_mb) {
  return guarded([&] { *need(size_mb, "size_mb") = constant_tensor_cache().capacity(to_kind(kind)); });
}

unicache_status_t unicache_set_kernel_cache_capacity(size_t capacity_mb) {
  return guarded([&] {
    kernel_cache().set_capacity(engine_kind::cpu, capacity_mb);
    kernel_cache().set_capacity(engine_kind::gpu, capacity_mb);
  });
}

unicache_status_t unicache_get_kernel_cache_capacity(size_t* capacity_mb) {
  return guarded([&] { *need(capacity_mb, "capacity_mb") = kernel_cache().capacity(engine_kind::cpu); });
}

unicache_status_t unicache_get_cache_stats(unicache_cache_t cache, unicache_cache_stats_t* stats) {
  return guarded([&] {
    need(stats, "stats");
    const cache_stats s = cache_of(cache).stats();
    *stats = {s.hits,         s.waits,        s.misses,           s.inserts,           s.evictions, s.failures,
              s.refused_full, s.refused_oversize, s.refused_admission, s.bytes, s.entries};
  });
}

unicache_status_t unicache_add_eviction_callback(unicache_cache_t cache, uint32_t backend,
                                                 unicache_eviction_callback_t callback, void* user_data,
                                                 uint64_t* subscription) {
  return guarded([&] {
    need(callback, "callback");
    need(subscription, "subscription");
    const eviction_subscription sub = cache_of(cache).add_eviction_callback(
        backend, [callback, user_data](const eviction_event& e) {
          callback(user_data, from_kind(e.scope.kind), e.scope.device_id, e.scope.context_id, e.owner,
                   e.key.data(), e.key.size());
        });
    *subscription = sub.id;
  });
}

unicache_status_t unicache_remove_eviction_callback(unicache_cache_t cache, uint32_t backend, uint64_t subscription) {
  return guarded([&] {
    if (!cache_of(cache).remove_eviction_callback({backend, subscription})) {
      raise(UNICACHE_INVALID_ARGUMENT, "no such subscription (removed already?)");
    }
  });
}

}  // extern "C"
