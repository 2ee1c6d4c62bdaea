// The remote component, as an outside project links it: registers the
// redis:// scheme and parses a URL (no server is needed, nothing connects).
#include <cstdio>

#include <unicache/remote.hpp>

int main() {
  unicache::register_redis_tiers();
  const unicache::redis_config c = unicache::parse_redis_url("redis://127.0.0.1:7001/2?prefix=consumer");
  std::printf("consumer_remote: ok (%s)\n", c.to_string().c_str());
  return c.port == 7001 && c.db == 2 ? 0 : 1;
}
