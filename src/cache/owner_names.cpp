// The names of owner ids, for diagnostics (UNICACHE_VERBOSE lines).
#include <cstdio>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "unicache/cache.hpp"
#include "util/mutex.hpp"

namespace unicache {
namespace {

struct name_table {
  detail::mutex mu;
  absl::flat_hash_map<owner_id, std::string> names ABSL_GUARDED_BY(mu);
};

name_table& names() {
  static name_table* const table = new name_table();  // never destroyed: usable from static destructors
  return *table;
}

}  // namespace

void register_owner(owner_id owner, std::string_view name) {
  name_table& t = names();
  detail::mutex_lock lock(&t.mu);
  auto [it, inserted] = t.names.try_emplace(owner, std::string(name));
  if (!inserted && it->second != name) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(owner));
    throw cache_error(std::string("unicache: owner id ") + hex + " is registered by " + it->second + "; " +
                      std::string(name) + " cannot claim it");
  }
}

std::string owner_name(owner_id owner) {
  name_table& t = names();
  {
    detail::mutex_lock lock(&t.mu);
    if (auto it = t.names.find(owner); it != t.names.end()) return it->second;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(owner));
  return hex;
}

}  // namespace unicache
