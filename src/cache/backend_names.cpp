// The names backends give their ids, for diagnostics (UNICACHE_VERBOSE lines).
#include <cstdio>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache {
namespace {

struct name_table {
  detail::mutex mu;
  absl::flat_hash_map<backend_id, std::string> names ABSL_GUARDED_BY(mu);
};

name_table& names() {
  static name_table* const table = new name_table();  // never destroyed: usable from static destructors
  return *table;
}

}  // namespace

void register_backend_id(backend_id backend, std::string_view name) {
  name_table& t = names();
  detail::mutex_lock lock(&t.mu);
  auto [it, inserted] = t.names.try_emplace(backend, std::string(name));
  if (!inserted && it->second != name) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(backend));
    throw cache_error(std::string("unicache: backend id ") + hex + " is registered by " + it->second + "; " +
                      std::string(name) + " cannot claim it");
  }
}

std::string backend_name(backend_id backend) {
  name_table& t = names();
  {
    detail::mutex_lock lock(&t.mu);
    if (auto it = t.names.find(backend); it != t.names.end()) return it->second;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(backend));
  return hex;
}

}  // namespace unicache
