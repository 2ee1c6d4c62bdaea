// unicache-store's main: registers the tier schemes this build has, then
// runs the tool (unicache_store.cpp).
#include "store_tool.hpp"

#if UNICACHE_STORE_WITH_REMOTE
#include "unicache/remote.hpp"
#endif

int main(int argc, char** argv) {
#if UNICACHE_STORE_WITH_REMOTE
  unicache::register_redis_tiers();  // redis:// for --remote and the store's UNICACHE_REMOTE_CACHE
#endif
  return unicache_store::run(argc, argv);
}
