// The registry of backends, and the defaults of the backend interface.
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/cache_key.hpp"
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

std::string backend::kernel_configuration(const partition& /*p*/,
                                          const std::vector<std::vector<std::int64_t>>& input_shapes,
                                          const engine& /*e*/) const {
  return shape_mode_configuration(kernel_shapes::specialized, input_shapes);  // every shape in full
}

std::string shape_mode_configuration(kernel_shapes mode, const std::vector<std::vector<std::int64_t>>& input_shapes) {
  cache_key key;
  key.add(to_string(mode)).add(static_cast<std::uint64_t>(input_shapes.size()));
  for (const auto& s : input_shapes) {
    key.add(static_cast<std::uint64_t>(s.size()));
    if (mode == kernel_shapes::specialized) {
      for (std::int64_t d : s) key.add(d);
    }
  }
  return std::string(key.bytes());
}

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
