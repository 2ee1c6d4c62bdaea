// The C interface (include/unicache/unicache.h) over the C++ API: argument
// checks, handle bookkeeping and error translation; no logic of its own.
// This file: live handles, the last error, conversions between the C and C++
// enums, and the version. The functions are in c_api_cache.cpp,
// c_api_store.cpp, c_api_graph.cpp and c_api_compile.cpp, the OpenCL and
// CUDA interop in c_api_opencl.cpp and c_api_cuda.cpp. Like any user of the
// library, it includes public headers only.
#include "unicache/unicache.h"

#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "c_api_internal.hpp"
#include "unicache/version.hpp"

using namespace unicache;
using namespace unicache::c_api;

namespace unicache::c_api {
namespace {
// Every live handle, so that a destroyed or foreign pointer is reported
// instead of used. Never destroyed: handles may be destroyed from static
// destructors.
std::mutex registry_mu;
absl::flat_hash_set<const void*>& registry() {
  static auto* handles = new absl::flat_hash_set<const void*>();
  return *handles;
}
}  // namespace

void register_handle(const void* h) {
  const std::lock_guard lock(registry_mu);
  registry().insert(h);
}
bool unregister_handle(const void* h) {
  const std::lock_guard lock(registry_mu);
  return registry().erase(h) == 1;
}
bool is_live(const void* h) {
  const std::lock_guard lock(registry_mu);
  return registry().contains(h);
}

std::string& last_error() {
  thread_local std::string message;
  return message;
}
unicache_status_t fail(unicache_status_t status, const char* message) noexcept {
  try {
    last_error() = message;
  } catch (...) {
    last_error().clear();  // no allocation: the message is lost, the status is not
  }
  return status;
}
void raise(unicache_status_t status, std::string message) { throw c_error{status, std::move(message)}; }

void copy_out(const void* from, std::size_t bytes, void* data, std::size_t* size) {
  need(size, "size");
  if (!data) {
    *size = bytes;
    return;
  }
  if (*size < bytes) {
    const std::size_t capacity = *size;
    *size = bytes;
    raise(UNICACHE_BUFFER_TOO_SMALL,
          "the buffer holds " + std::to_string(capacity) + " bytes, " + std::to_string(bytes) + " are needed");
  }
  if (bytes) std::memcpy(data, from, bytes);
  *size = bytes;
}
void copy_out(const std::string& s, char* data, std::size_t* size) { copy_out(s.c_str(), s.size() + 1, data, size); }

::unicache_engine* engine_handle(unicache::engine e) {
  auto h = std::make_unique<::unicache_engine>();
  h->e = std::move(e);
  return created(std::move(h));
}

namespace {
void check_backend(const unicache::engine& e, const char* backend, const char* what) {
  if (!e.get_backend() || std::string(e.get_backend()->name()) != backend) {
    raise(UNICACHE_INVALID_ARGUMENT, std::string("not ") + what + " of the " + backend + " backend");
  }
}
}  // namespace

const unicache::engine& backend_engine(::unicache_engine* handle, const char* backend) {
  const unicache::engine& e = live(handle, kEngineMagic, "engine")->e;
  check_backend(e, backend, "an engine");
  return e;
}

const unicache::stream& backend_stream(::unicache_stream* handle, const char* backend) {
  const unicache::stream& s = live(handle, kStreamMagic, "stream")->s;
  check_backend(s.get_engine(), backend, "a stream");
  return s;
}

}  // namespace unicache::c_api

namespace unicache::c_api {

engine_kind to_kind(unicache_engine_kind_t k) {
  switch (k) {
    case UNICACHE_ENGINE_CPU: return engine_kind::cpu;
    case UNICACHE_ENGINE_GPU: return engine_kind::gpu;
    default: break;
  }
  raise(UNICACHE_INVALID_ARGUMENT, "unknown engine kind " + std::to_string(static_cast<int>(k)));
}
unicache_engine_kind_t from_kind(engine_kind k) { return k == engine_kind::gpu ? UNICACHE_ENGINE_GPU : UNICACHE_ENGINE_CPU; }

eviction_policy to_policy(unicache_policy_t p) {
  switch (p) {
    case UNICACHE_POLICY_DEFAULT: return eviction_policy::library_default;
    case UNICACHE_POLICY_NO_EVICT: return eviction_policy::no_evict;
    case UNICACHE_POLICY_LRU: return eviction_policy::lru;
    case UNICACHE_POLICY_COST: return eviction_policy::cost;
    default: break;
  }
  raise(UNICACHE_INVALID_ARGUMENT, "unknown policy " + std::to_string(static_cast<int>(p)));
}
unicache_policy_t from_policy(eviction_policy p) {
  switch (p) {
    case eviction_policy::no_evict: return UNICACHE_POLICY_NO_EVICT;
    case eviction_policy::lru: return UNICACHE_POLICY_LRU;
    case eviction_policy::cost: return UNICACHE_POLICY_COST;
    case eviction_policy::library_default: return UNICACHE_POLICY_DEFAULT;
  }
  return UNICACHE_POLICY_DEFAULT;
}

unified_cache& cache_of(unicache_cache_t c) {
  switch (c) {
    case UNICACHE_CONSTANT_TENSOR_CACHE: return constant_tensor_cache();
    case UNICACHE_KERNEL_CACHE: return kernel_cache();
    default: break;
  }
  raise(UNICACHE_INVALID_ARGUMENT, "unknown cache " + std::to_string(static_cast<int>(c)));
}

op_kind to_op(unicache_op_kind_t k) {
  if (k < UNICACHE_OP_MATMUL || k > UNICACHE_OP_ATTENTION) {
    raise(UNICACHE_INVALID_ARGUMENT, "unknown op kind " + std::to_string(static_cast<int>(k)));
  }
  return static_cast<op_kind>(k);  // the enums list the kinds in the same order
}

unicache_logical_tensor_t to_c(const logical_tensor& t) {
  if (t.shape.size() > UNICACHE_MAX_NDIMS) {
    raise(UNICACHE_UNSUPPORTED, "a tensor of " + std::to_string(t.shape.size()) + " dimensions");
  }
  unicache_logical_tensor_t out{};
  out.id = t.id;
  out.ndims = static_cast<int32_t>(t.shape.size());
  for (std::size_t i = 0; i < t.shape.size(); ++i) out.dims[i] = t.shape[i];
  out.is_constant = t.is_constant() ? 1 : 0;
  return out;
}

std::vector<std::int64_t> shape_of(int32_t ndims, const int64_t* dims) {
  if (ndims < 0 || ndims > UNICACHE_MAX_NDIMS) raise(UNICACHE_INVALID_ARGUMENT, "ndims out of range");
  if (ndims > 0) need(dims, "dims");
  return std::vector<std::int64_t>(dims, dims + ndims);
}

}  // namespace unicache::c_api

extern "C" {

const char* unicache_last_error(void) { return last_error().c_str(); }

const char* unicache_status_name(unicache_status_t status) {
  switch (status) {
    case UNICACHE_SUCCESS: return "UNICACHE_SUCCESS";
    case UNICACHE_INVALID_ARGUMENT: return "UNICACHE_INVALID_ARGUMENT";
    case UNICACHE_INVALID_HANDLE: return "UNICACHE_INVALID_HANDLE";
    case UNICACHE_BUFFER_TOO_SMALL: return "UNICACHE_BUFFER_TOO_SMALL";
    case UNICACHE_INVALID_GRAPH: return "UNICACHE_INVALID_GRAPH";
    case UNICACHE_COMPILE_FAILED: return "UNICACHE_COMPILE_FAILED";
    case UNICACHE_EXECUTE_FAILED: return "UNICACHE_EXECUTE_FAILED";
    case UNICACHE_CACHE_ERROR: return "UNICACHE_CACHE_ERROR";
    case UNICACHE_STORE_ERROR: return "UNICACHE_STORE_ERROR";
    case UNICACHE_UNSUPPORTED: return "UNICACHE_UNSUPPORTED";
    case UNICACHE_OUT_OF_MEMORY: return "UNICACHE_OUT_OF_MEMORY";
    case UNICACHE_RUNTIME_ERROR: return "UNICACHE_RUNTIME_ERROR";
    default: break;
  }
  return "UNICACHE_UNKNOWN_STATUS";
}

const char* unicache_version(void) { return UNICACHE_VERSION_STRING; }

}  // extern "C"
