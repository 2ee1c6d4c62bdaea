// The registry of backends, and the defaults of the backend interface.
#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "util/mutex.hpp"

namespace unicache {
namespace {

struct registry {
  detail::mutex mu;
  std::vector<backend*> backends ABSL_GUARDED_BY(mu);
  // Physical device keys of engine_kind::gpu, in the order first seen: the index is the id.
  std::vector<std::string> gpu_devices ABSL_GUARDED_BY(mu);
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

void backend::wait(stream& /*s*/) {}

std::unique_ptr<device_timer> backend::start_timer(stream& /*s*/) { return nullptr; }

void stream::wait() {
  if (backend* b = engine_.get_backend()) b->wait(*this);
}

shape_class backend::specialization_class(const partition& /*p*/, const std::vector<logical_tensor>& /*in*/,
                                          const std::vector<logical_tensor>& /*out*/, const engine& /*e*/) const {
  return {};
}

bool backend::specialization_ready(const partition& /*p*/, const std::vector<logical_tensor>& /*in*/,
                                   const std::vector<logical_tensor>& /*out*/, const engine& /*e*/) const {
  return false;
}

std::shared_ptr<const compiled_kernel> backend::specialize(const partition& p, const std::vector<logical_tensor>& /*in*/,
                                                           const std::vector<logical_tensor>& /*out*/,
                                                           const engine& /*e*/) {
  throw compile_error(std::string(name()) + ": no specialized kernels (partition " + p.fingerprint() + ")");
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
  if (!b) throw invalid_argument("register_backend: no backend (nullptr)");
  registry& r = the_registry();
  detail::mutex_lock lock(&r.mu);
  for (backend* existing : r.backends) {
    if (existing == b) return;
    if (std::string(existing->name()) == b->name()) {
      throw error(std::string("unicache: a second backend registers itself as ") + b->name());
    }
  }
  if (b->cache_owner() == compiled_partition_owner) {
    throw error(std::string("unicache: backend ") + b->name() + " claims the compiler's owner id (compiled_partition_owner)");
  }
  r.backends.reserve(r.backends.size() + 1);  // so that nothing fails once the owner id is named
  // Throws, registering nothing, when the id is another owner's.
  register_owner(b->cache_owner(), b->name());
  r.backends.push_back(b);
}

namespace detail {

void native_handle::mismatch(const char* holder, const std::type_info& asked) const {
  const auto readable = [](const std::type_info& t) {
    int status = 0;
    const std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status),
                                                      std::free);
    return std::string(status == 0 && name ? name.get() : t.name());
  };
  throw invalid_argument(std::string("unicache: ") + holder + "::native<" + readable(asked) + ">(), but its handle is " +
                         (*type_ == typeid(void) ? std::string("empty or untyped") : "a " + readable(*type_)) +
                         " (a " + holder + " of another backend?)");
}

}  // namespace detail

int physical_device_id(engine_kind kind, const std::string& physical_key) {
  if (kind == engine_kind::cpu) return host_cpu_device_id;
  registry& r = the_registry();
  detail::mutex_lock lock(&r.mu);
  for (std::size_t i = 0; i < r.gpu_devices.size(); ++i) {
    if (r.gpu_devices[i] == physical_key) return static_cast<int>(i);
  }
  r.gpu_devices.push_back(physical_key);
  return static_cast<int>(r.gpu_devices.size() - 1);
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
