// Prints what the process-wide caches were configured with, then makes one
// miss and one eviction so that UNICACHE_VERBOSE tracing can be observed.
// Run by test_default_caches with different environments.
#include <cstdio>
#include <cstring>
#include <future>

#include "unicache/cache.hpp"

int main(int argc, char** argv) {
  using namespace unicache;
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fputs("usage: cache_env_probe\nPrints the process-wide caches' configuration as the environment set it, then\n"
               "makes one miss and one eviction (for UNICACHE_VERBOSE). Run by test_default_caches.\n",
               help ? stdout : stderr);
    return help ? 0 : 2;
  }
  for (unified_cache* cache : {&constant_tensor_cache(), &kernel_cache()}) {
    std::printf("%s cpu=%zu:%s gpu=%zu:%s enabled=%d\n",
                cache == &constant_tensor_cache() ? "constant" : "kernel",
                cache->capacity(engine_kind::cpu), std::string(to_string(cache->policy(engine_kind::cpu))).c_str(),
                cache->capacity(engine_kind::gpu), std::string(to_string(cache->policy(engine_kind::gpu))).c_str(),
                cache->enabled() ? 1 : 0);
  }
  std::printf("kernel_shapes=%s\n", std::string(to_string(current_kernel_shapes())).c_str());
  const specialize_settings spec = current_specialize_settings();
  std::printf("specialize threads=%u max=%u threshold=%g\n", spec.threads, spec.max_variants, spec.threshold);
  register_owner(1, "probe_backend");
  unified_cache& cache = constant_tensor_cache();
  cache.set_capacity(engine_kind::cpu, 1);  // the API overrides the environment
  const cache_scope scope{engine_kind::cpu, 0, 0};
  for (const char* key : {"a", "b"}) {
    std::promise<cache_value> p;
    if (!cache.get_or_add(scope, 1, key, 1 << 20, 1, p.get_future().share()).valid()) {
      p.set_value(std::make_shared<int>(1));
    }
  }
  const cache_stats s = cache.stats(scope);
  std::printf("after api cpu=%zu misses=%llu evictions=%llu\n", cache.capacity(engine_kind::cpu),
              static_cast<unsigned long long>(s.misses), static_cast<unsigned long long>(s.evictions));
  return 0;
}
