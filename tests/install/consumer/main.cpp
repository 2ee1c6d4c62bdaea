#include <cstdio>
#include <memory>

#include <unicache/cache.hpp>
#include <unicache/version.hpp>

int main() {
  unicache::unified_cache cache;
  const unicache::cache_scope scope{unicache::engine_kind::cpu, 0, 0};
  int builds = 0;
  for (int i = 0; i < 2; ++i) {
    cache.get_or_build<int>(scope, 1, "key", 64, [&] {
      ++builds;
      return std::make_shared<int>(1);
    });
  }
  std::printf("consumer: %s (unicache %s, %s)\n", builds == 1 ? "hit" : "no hit", UNICACHE_VERSION_STRING,
              UNICACHE_GIT_HASH);
  return builds == 1 ? 0 : 1;
}
