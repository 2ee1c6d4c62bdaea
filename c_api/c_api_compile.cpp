// The C interface of engines, streams, compiling, executing and cache
// blobs of compiled partitions (unicache.h).
#include "unicache/unicache.h"

#include "c_api_internal.hpp"
#include "unicache/kernel_path.hpp"

#ifdef UNICACHE_C_WITH_ONEDNN
#include "unicache/onednn_cpu.hpp"
#endif

using namespace unicache;
using namespace unicache::c_api;

extern "C" {

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

unicache_status_t unicache_engine_get_build_stats(unicache_engine_t engine, unicache_build_stats_t* stats) {
  return guarded([&] {
    const unicache::engine& e = live(engine, kEngineMagic, "engine")->e;
    const engine_kind kind = e.kind();
    const backend* b = e.get_backend();
    need(stats, "stats");
    unicache_build_stats_t out{};
    if (kind == engine_kind::cpu) {
#ifdef UNICACHE_C_WITH_ONEDNN
      const onednn_cpu::backend_stats s = onednn_cpu::stats();  // oneDNN kernels are primitives, not the kernel path's
      out.built = s.primitives_created;
      out.build_ns = s.create_ns;
#endif
    } else if (b) {
      const kernel_path_stats s = kernel_path::stats(b->cache_owner());
      out.built = s.from_source;
      out.loaded = s.from_binary;
      out.build_ns = s.build_ns;
    }
    *stats = out;
  });
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
  return guarded([&] { live(stream, kStreamMagic, "stream")->s.wait(); });
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
