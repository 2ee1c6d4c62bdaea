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

void name_backend(backend_id backend, std::string_view name) {
  name_table& t = names();
  detail::mutex_lock lock(&t.mu);
  t.names.insert_or_assign(backend, std::string(name));
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
