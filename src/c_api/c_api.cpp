// The C interface (include/unicache/unicache.h) over the C++ API: argument
// checks, handle bookkeeping and error translation; no logic of its own.
// The OpenCL and CUDA interop functions are in c_api_opencl.cpp and
// c_api_cuda.cpp.
#include "unicache/unicache.h"

#include <stdexcept>

#include "absl/container/flat_hash_set.h"
#include "c_api/c_api_internal.hpp"
#include "unicache/version.hpp"
#include "util/mutex.hpp"

#ifdef UNICACHE_C_WITH_ONEDNN
#include "unicache/onednn_cpu.hpp"
#endif

using namespace unicache;
using namespace unicache::c_api;

namespace unicache::c_api {
namespace {
detail::mutex registry_mu;
absl::flat_hash_set<const void*>& registry() {
  static auto* handles = new absl::flat_hash_set<const void*>();
  return *handles;
}
}  // namespace

void register_handle(const void* h) {
  detail::mutex_lock lock(&registry_mu);
  registry().insert(h);
}
bool unregister_handle(const void* h) {
  detail::mutex_lock lock(&registry_mu);
  return registry().erase(h) == 1;
}
bool is_live(const void* h) {
  detail::mutex_lock lock(&registry_mu);
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
  if (!e.owner() || std::string(e.owner()->name()) != backend) {
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

namespace {

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
  if (k < UNICACHE_OP_MATMUL || k > UNICACHE_OP_SOFTMAX) {
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

}  // namespace

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

// --- Caches ---------------------------------------------------------------------

unicache_status_t unicache_set_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind, size_t capacity_mb,
                                              unicache_policy_t policy) {
  return guarded([&] { cache_of(cache).set_capacity(to_kind(kind), capacity_mb, to_policy(policy)); });
}

unicache_status_t unicache_get_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind, size_t* capacity_mb,
                                              unicache_policy_t* policy) {
  return guarded([&] {
    need(capacity_mb, "capacity_mb");
    unified_cache& c = cache_of(cache);
    const engine_kind k = to_kind(kind);
    *capacity_mb = c.capacity(k);
    if (policy) *policy = from_policy(c.policy(k));
  });
}

unicache_status_t unicache_set_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t size_mb) {
  return guarded([&] { constant_tensor_cache().set_capacity(to_kind(kind), size_mb); });
}

unicache_status_t unicache_get_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t* size_mb) {
  return guarded([&] { *need(size_mb, "size_mb") = constant_tensor_cache().capacity(to_kind(kind)); });
}

unicache_status_t unicache_set_kernel_cache_capacity(size_t capacity_mb) {
  return guarded([&] {
    kernel_cache().set_capacity(engine_kind::cpu, capacity_mb);
    kernel_cache().set_capacity(engine_kind::gpu, capacity_mb);
  });
}

unicache_status_t unicache_get_kernel_cache_capacity(size_t* capacity_mb) {
  return guarded([&] { *need(capacity_mb, "capacity_mb") = kernel_cache().capacity(engine_kind::cpu); });
}

unicache_status_t unicache_get_cache_stats(unicache_cache_t cache, unicache_cache_stats_t* stats) {
  return guarded([&] {
    need(stats, "stats");
    const cache_stats s = cache_of(cache).total_stats();
    *stats = {s.hits,         s.waits,        s.misses,           s.inserts,           s.evictions, s.failures,
              s.refused_full, s.refused_oversize, s.refused_admission, s.bytes, s.entries};
  });
}

unicache_status_t unicache_add_eviction_callback(unicache_cache_t cache, uint32_t backend,
                                                 unicache_eviction_callback_t callback, void* user_data,
                                                 uint64_t* subscription) {
  return guarded([&] {
    need(callback, "callback");
    need(subscription, "subscription");
    const eviction_subscription sub = cache_of(cache).add_eviction_callback(
        backend, [callback, user_data](const eviction_event& e) {
          callback(user_data, from_kind(e.scope.kind), e.scope.device_id, e.scope.context_id, e.backend,
                   e.key.data(), e.key.size());
        });
    *subscription = sub.id;
  });
}

unicache_status_t unicache_remove_eviction_callback(unicache_cache_t cache, uint32_t backend, uint64_t subscription) {
  return guarded([&] {
    if (!cache_of(cache).remove_eviction_callback({backend, subscription})) {
      raise(UNICACHE_INVALID_ARGUMENT, "no such subscription (removed already?)");
    }
  });
}

// --- Store ------------------------------------------------------------------------

unicache_status_t unicache_store_set_enabled(int enabled) {
  return guarded([&] { kernel_store::instance().set_enabled(enabled != 0); });
}

unicache_status_t unicache_store_set_size_eviction(int enabled) {
  return guarded([&] { kernel_store::instance().set_size_eviction(enabled != 0); });
}

unicache_status_t unicache_store_set_remote(const char* url, const char* secret_file) {
  return guarded([&] {
    try {
      kernel_store::instance().set_remote(url ? url : "", secret_file ? secret_file : "");
    } catch (const std::invalid_argument& e) {
      raise(UNICACHE_INVALID_ARGUMENT, e.what());
    }
  });
}

unicache_status_t unicache_store_set_directory(const char* directory) {
  return guarded([&] { kernel_store::instance().set_directory(need(directory, "directory")); });
}

unicache_status_t unicache_store_set_capacity_mb(uint64_t capacity_mb) {
  return guarded([&] { kernel_store::instance().set_capacity_mb(capacity_mb); });
}

unicache_status_t unicache_store_get_directory(char* directory, size_t* size) {
  return guarded([&] { copy_out(kernel_store::instance().config().directory, directory, size); });
}

unicache_status_t unicache_store_get_stats(unicache_store_stats_t* stats) {
  return guarded([&] {
    need(stats, "stats");
    const store_stats s = kernel_store::instance().stats();
    *stats = {s.entries, s.bytes, s.devices, s.temporary_files};
  });
}

namespace {
device_identity identity_of(const unicache_device_identity_t* d) {
  need(d, "device");
  auto text = [](const char* s, const char* what) { return std::string(need(s, what)); };
  return {text(d->platform_name, "device->platform_name"), text(d->device_name, "device->device_name"),
          text(d->device_version, "device->device_version"), text(d->driver_version, "device->driver_version")};
}
std::string_view key_of(const void* key, size_t key_size) {
  if (key_size) need(key, "key");
  return {static_cast<const char*>(key), key_size};
}
}  // namespace

unicache_status_t unicache_blob_id(const unicache_device_identity_t* device, const void* key, size_t key_size,
                                   char* id, size_t* size) {
  return guarded([&] { copy_out(blob_id(identity_of(device), key_of(key, key_size)), id, size); });
}

unicache_status_t unicache_blob_serialize(const unicache_device_identity_t* device, const void* key, size_t key_size,
                                          const uint8_t* binary, size_t binary_size, uint8_t* blob, size_t* size) {
  return guarded([&] {
    if (binary_size) need(binary, "binary");
    const byte_vector b = serialize_blob(identity_of(device), key_of(key, key_size), byte_span(binary, binary_size));
    copy_out(b.data(), b.size(), blob, size);
  });
}

unicache_status_t unicache_blob_deserialize(const unicache_device_identity_t* device, const uint8_t* blob,
                                            size_t blob_size, void* key, size_t* key_size, uint8_t* binary,
                                            size_t* binary_size) {
  return guarded([&] {
    need(key_size, "key_size");
    need(binary_size, "binary_size");
    if (blob_size) need(blob, "blob");
    blob_contents c;
    try {
      c = deserialize_blob(identity_of(device), byte_span(blob, blob_size));
    } catch (const store_error& e) {
      raise(UNICACHE_INVALID_ARGUMENT, e.what());
    }
    // A NULL buffer for an empty part is no question: only a NULL buffer
    // for a part with bytes asks the sizes.
    const bool asked = (!key && !c.key.empty()) || (!binary && !c.binary.empty());
    const bool fits = *key_size >= c.key.size() && *binary_size >= c.binary.size();
    *key_size = c.key.size();
    *binary_size = c.binary.size();
    if (asked) return;
    if (!fits) raise(UNICACHE_BUFFER_TOO_SMALL, "a buffer is too small: see *key_size and *binary_size");
    if (!c.key.empty()) std::memcpy(key, c.key.data(), c.key.size());
    if (!c.binary.empty()) std::memcpy(binary, c.binary.data(), c.binary.size());
  });
}

// --- Graphs -------------------------------------------------------------------------

unicache_status_t unicache_graph_create(unicache_graph_t* graph) {
  return guarded([&] { *need(graph, "graph") = created(std::make_unique<unicache_graph>()); });
}

unicache_status_t unicache_graph_destroy(unicache_graph_t graph) { return destroy(graph, kGraphMagic, "graph"); }

unicache_status_t unicache_graph_add_tensor(unicache_graph_t graph, int32_t ndims, const int64_t* dims,
                                            int32_t is_constant, unicache_logical_tensor_t* tensor) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    need(tensor, "tensor");
    *tensor = to_c(g->g.tensor(shape_of(ndims, dims),
                               is_constant ? tensor_property::constant : tensor_property::variable));
  });
}

unicache_status_t unicache_graph_add_op(unicache_graph_t graph, unicache_op_kind_t kind, const uint64_t* input_ids,
                                        size_t num_inputs, const uint64_t* output_ids, size_t num_outputs,
                                        int32_t transpose_a, int32_t transpose_b, uint64_t* op_id) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (num_inputs) need(input_ids, "input_ids");
    if (num_outputs) need(output_ids, "output_ids");
    std::vector<logical_tensor> in, out;
    for (size_t i = 0; i < num_inputs; ++i) in.push_back(g->g.tensor_of(input_ids[i]));
    for (size_t i = 0; i < num_outputs; ++i) out.push_back(g->g.tensor_of(output_ids[i]));
    const std::uint64_t id = g->g.add_op(to_op(kind), in, out, transpose_a != 0, transpose_b != 0);
    if (op_id) *op_id = id;
  });
}

unicache_status_t unicache_graph_finalize(unicache_graph_t graph) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    g->g.finalize();  // idempotent: partitions handed out before stay valid
    if (g->partitions.empty()) {
      for (const partition& p : g->g.partitions()) g->partitions.push_back({&p});
    }
  });
}

unicache_status_t unicache_graph_get_partition_count(unicache_graph_t graph, size_t* count) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (!g->g.finalized()) raise(UNICACHE_INVALID_ARGUMENT, "the graph is not finalized");
    *need(count, "count") = g->partitions.size();
  });
}

unicache_status_t unicache_graph_get_partition(unicache_graph_t graph, size_t index, unicache_partition_t* partition) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    need(partition, "partition");
    if (!g->g.finalized()) raise(UNICACHE_INVALID_ARGUMENT, "the graph is not finalized");
    if (index >= g->partitions.size()) raise(UNICACHE_INVALID_ARGUMENT, "partition index out of range");
    *partition = &g->partitions[index];
  });
}

namespace {
const partition& part(unicache_partition_t p) {
  if (!p || !p->p) raise(UNICACHE_INVALID_HANDLE, "partition is NULL");
  return *p->p;
}
void tensor_at(const std::vector<logical_tensor>& list, size_t index, unicache_logical_tensor_t* tensor) {
  need(tensor, "tensor");
  if (index >= list.size()) raise(UNICACHE_INVALID_ARGUMENT, "tensor index out of range");
  *tensor = to_c(list[index]);
}
}  // namespace

unicache_status_t unicache_partition_get_input_count(unicache_partition_t partition, size_t* count) {
  return guarded([&] { *need(count, "count") = part(partition).inputs().size(); });
}
unicache_status_t unicache_partition_get_input(unicache_partition_t partition, size_t index,
                                               unicache_logical_tensor_t* tensor) {
  return guarded([&] { tensor_at(part(partition).inputs(), index, tensor); });
}
unicache_status_t unicache_partition_get_output_count(unicache_partition_t partition, size_t* count) {
  return guarded([&] { *need(count, "count") = part(partition).outputs().size(); });
}
unicache_status_t unicache_partition_get_output(unicache_partition_t partition, size_t index,
                                                unicache_logical_tensor_t* tensor) {
  return guarded([&] { tensor_at(part(partition).outputs(), index, tensor); });
}

// --- Engines, streams, compiling, executing -------------------------------------------

unicache_status_t unicache_engine_create_cpu(int index, unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
#ifdef UNICACHE_C_WITH_ONEDNN
    *engine = engine_handle(onednn_cpu::make_engine(index));
#else
    (void)index;
    raise(UNICACHE_UNSUPPORTED, "this build has no CPU backend (oneDNN)");
#endif
  });
}

unicache_status_t unicache_engine_destroy(unicache_engine_t engine) { return destroy(engine, kEngineMagic, "engine"); }

unicache_status_t unicache_engine_get_kind(unicache_engine_t engine, unicache_engine_kind_t* kind) {
  return guarded([&] { *need(kind, "kind") = from_kind(live(engine, kEngineMagic, "engine")->e.kind()); });
}

unicache_status_t unicache_stream_create(unicache_engine_t engine, unicache_stream_t* stream) {
  return guarded([&] {
    need(stream, "stream");
    auto h = std::make_unique<unicache_stream>();
    h->s = make_stream(live(engine, kEngineMagic, "engine")->e);
    *stream = created(std::move(h));
  });
}

unicache_status_t unicache_stream_destroy(unicache_stream_t stream) { return destroy(stream, kStreamMagic, "stream"); }

unicache_status_t unicache_stream_wait(unicache_stream_t stream) {
  return guarded([&] { live(stream, kStreamMagic, "stream"); });  // every backend's execute() returns finished
}

namespace {
std::vector<std::vector<std::int64_t>> shapes_of(size_t num_inputs, const int32_t* ndims, const int64_t* const* shapes) {
  if (num_inputs) {
    need(ndims, "ndims");
    need(shapes, "shapes");
  }
  std::vector<std::vector<std::int64_t>> out;
  for (size_t i = 0; i < num_inputs; ++i) out.push_back(shape_of(ndims[i], shapes[i]));
  return out;
}
}  // namespace

unicache_status_t unicache_compile(unicache_partition_t partition, size_t num_inputs, const int32_t* ndims,
                                   const int64_t* const* shapes, unicache_engine_t engine,
                                   unicache_compiled_partition_t* compiled) {
  return guarded([&] {
    need(compiled, "compiled");
    auto h = std::make_unique<unicache_compiled_partition>();
    h->cp = compile(part(partition), shapes_of(num_inputs, ndims, shapes), live(engine, kEngineMagic, "engine")->e);
    *compiled = created(std::move(h));
  });
}

unicache_status_t unicache_compiled_partition_destroy(unicache_compiled_partition_t compiled) {
  return destroy(compiled, kCompiledMagic, "compiled partition");
}

unicache_status_t unicache_compiled_partition_get_output(unicache_compiled_partition_t compiled, size_t index,
                                                         unicache_logical_tensor_t* tensor) {
  return guarded([&] { tensor_at(live(compiled, kCompiledMagic, "compiled partition")->cp.outputs(), index, tensor); });
}

namespace {
std::vector<tensor> tensors_of(const unicache_tensor_t* list, size_t count, const char* what) {
  if (count) need(list, what);
  std::vector<tensor> out;
  for (size_t i = 0; i < count; ++i) {
    tensor t;
    t.desc.id = list[i].desc.id;
    t.desc.shape = shape_of(list[i].desc.ndims, list[i].desc.dims);
    t.desc.property = list[i].desc.is_constant ? tensor_property::constant : tensor_property::variable;
    t.data = list[i].data;
    t.version = list[i].version;
    out.push_back(std::move(t));
  }
  return out;
}
}  // namespace

unicache_status_t unicache_compiled_partition_execute(unicache_compiled_partition_t compiled, unicache_stream_t stream,
                                                      const unicache_tensor_t* inputs, size_t num_inputs,
                                                      const unicache_tensor_t* outputs, size_t num_outputs) {
  return guarded([&] {
    const compiled_partition& cp = live(compiled, kCompiledMagic, "compiled partition")->cp;
    unicache_stream* s = live(stream, kStreamMagic, "stream");
    cp.execute(s->s, tensors_of(inputs, num_inputs, "inputs"), tensors_of(outputs, num_outputs, "outputs"));
  });
}

unicache_status_t unicache_get_cache_blob_id(unicache_partition_t partition, size_t num_inputs, const int32_t* ndims,
                                             const int64_t* const* shapes, unicache_engine_t engine, char* id,
                                             size_t* size) {
  return guarded([&] {
    copy_out(get_cache_blob_id(part(partition), shapes_of(num_inputs, ndims, shapes),
                               live(engine, kEngineMagic, "engine")->e),
             id, size);
  });
}

unicache_status_t unicache_compiled_partition_get_cache_blob_id(unicache_compiled_partition_t compiled, char* id,
                                                                size_t* size) {
  return guarded([&] { copy_out(live(compiled, kCompiledMagic, "compiled partition")->cp.get_cache_blob_id(), id, size); });
}

unicache_status_t unicache_compiled_partition_get_cache_blob(unicache_compiled_partition_t compiled, uint8_t* blob,
                                                             size_t* size) {
  return guarded([&] {
    const byte_vector b = live(compiled, kCompiledMagic, "compiled partition")->cp.get_cache_blob();
    copy_out(b.data(), b.size(), blob, size);
  });
}

unicache_status_t unicache_compile_from_cache_blob(unicache_partition_t partition, size_t num_inputs,
                                                   const int32_t* ndims, const int64_t* const* shapes,
                                                   unicache_engine_t engine, const uint8_t* blob, size_t blob_size,
                                                   unicache_compiled_partition_t* compiled) {
  return guarded([&] {
    need(compiled, "compiled");
    if (blob_size) need(blob, "blob");
    auto h = std::make_unique<unicache_compiled_partition>();
    h->cp = compile_from_cache_blob(part(partition), shapes_of(num_inputs, ndims, shapes),
                                    live(engine, kEngineMagic, "engine")->e, byte_span(blob, blob_size));
    *compiled = created(std::move(h));
  });
}

}  // extern "C"
