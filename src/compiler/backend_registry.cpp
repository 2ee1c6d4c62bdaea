#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "util/mutex.hpp"

namespace unicache {
namespace {

struct registry {
  detail::mutex mu;
  std::vector<backend*> backends ABSL_GUARDED_BY(mu);
};

registry& the_registry() {
  static registry* const r = new registry();
  return *r;
}

}  // namespace

void register_backend(backend* b) {
  registry& r = the_registry();
  detail::mutex_lock lock(&r.mu);
  for (backend* existing : r.backends) {
    if (std::string(existing->name()) == b->name()) return;
  }
  r.backends.push_back(b);
}

backend* find_backend(const std::string& name) {
  registry& r = the_registry();
  detail::mutex_lock lock(&r.mu);
  for (backend* b : r.backends) {
    if (name == b->name()) return b;
  }
  return nullptr;
}

}  // namespace unicache
