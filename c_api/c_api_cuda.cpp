// The CUDA backend's C interop (include/unicache/unicache_cuda.h).
#include "unicache/unicache_cuda.h"

#include "c_api_internal.hpp"
#include "unicache/cuda.hpp"

using namespace unicache;
using namespace unicache::c_api;

namespace {
void need_driver() {
  if (!cuda::available()) raise(UNICACHE_UNSUPPORTED, "CUDA: " + cuda::unavailable_reason());
}
const unicache::engine& cuda_engine(unicache_engine_t handle) { return backend_engine(handle, "cuda"); }
const unicache::stream& cuda_stream(unicache_stream_t handle) { return backend_stream(handle, "cuda"); }
}  // namespace

extern "C" {

unicache_status_t unicache_cuda_available(int* available, char* reason, size_t* size) {
  return guarded([&] {
    need(available, "available");
    const bool ok = cuda::available();
    if (size) copy_out(ok ? std::string() : cuda::unavailable_reason(), reason, size);
    *available = ok ? 1 : 0;
  });
}

unicache_status_t unicache_cuda_engine_create_default(unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    need_driver();
    *engine = engine_handle(cuda::make_engine());
  });
}

unicache_status_t unicache_cuda_engine_create(int ordinal, unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    need_driver();
    *engine = engine_handle(cuda::make_engine(ordinal));
  });
}

unicache_status_t unicache_cuda_engine_create_in_context(CUcontext context, unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    need_driver();
    *engine = engine_handle(cuda::make_engine(need(context, "context")));
  });
}

unicache_status_t unicache_cuda_release_cached(unicache_engine_t engine) {
  return guarded([&] { cuda::release_cached(cuda_engine(engine)); });
}

unicache_status_t unicache_cuda_stream_create(unicache_engine_t engine, CUstream cu_stream, unicache_stream_t* stream) {
  return guarded([&] {
    need(stream, "stream");
    auto h = std::make_unique<unicache_stream>();
    h->s = cuda::make_stream(cuda_engine(engine), cu_stream);  // NULL: CUDA's legacy default stream
    *stream = created(std::move(h));
  });
}

unicache_status_t unicache_cuda_stream_create_with_flags(unicache_engine_t engine, CUstream cu_stream,
                                                         uint32_t flags, unicache_stream_t* stream) {
  return guarded([&] {
    need(stream, "stream");
    if (flags & ~static_cast<uint32_t>(UNICACHE_CUDA_STREAM_VERSIONED_CONSTANTS)) {
      raise(UNICACHE_INVALID_ARGUMENT, "unknown stream flags " + std::to_string(flags));
    }
    auto h = std::make_unique<unicache_stream>();
    h->s = flags & UNICACHE_CUDA_STREAM_VERSIONED_CONSTANTS
               ? cuda::make_stream_with_versioned_constants(cuda_engine(engine), cu_stream)
               : cuda::make_stream(cuda_engine(engine), cu_stream);
    *stream = created(std::move(h));
  });
}

unicache_status_t unicache_cuda_engine_get_cache_blob_id(int ordinal, char* id, size_t* size) {
  return guarded([&] {
    need_driver();
    copy_out(cuda::get_engine_cache_blob_id(ordinal), id, size);
  });
}

unicache_status_t unicache_cuda_engine_get_cache_blob(unicache_engine_t engine, uint8_t* blob, size_t* size) {
  return guarded([&] {
    const byte_vector b = cuda::get_engine_cache_blob(cuda_engine(engine));
    copy_out(b.data(), b.size(), blob, size);
  });
}

unicache_status_t unicache_cuda_engine_create_from_cache_blob(int ordinal, const uint8_t* blob, size_t size,
                                                              unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    if (size) need(blob, "blob");
    need_driver();
    try {
      *engine = engine_handle(cuda::make_engine_from_cache_blob(ordinal, byte_span(blob, size)));
    } catch (const cuda::cuda_error& e) {
      raise(UNICACHE_INVALID_ARGUMENT, e.what());  // foreign, stale or corrupt
    }
  });
}

unicache_status_t unicache_cuda_engine_get_context(unicache_engine_t engine, CUcontext* context) {
  return guarded([&] { *need(context, "context") = cuda::native_context(cuda_engine(engine)); });
}

unicache_status_t unicache_cuda_stream_get_stream(unicache_stream_t stream, CUstream* cu_stream) {
  return guarded([&] { *need(cu_stream, "cu_stream") = cuda::native_stream(cuda_stream(stream)); });
}

unicache_status_t unicache_cuda_buffer_create(unicache_engine_t engine, size_t bytes, const void* host,
                                              CUdeviceptr* buffer) {
  return guarded([&] { *need(buffer, "buffer") = cuda::make_buffer(cuda_engine(engine), bytes, host); });
}

unicache_status_t unicache_cuda_buffer_free(unicache_engine_t engine, CUdeviceptr buffer) {
  return guarded([&] { cuda::free_buffer(cuda_engine(engine), buffer); });
}

unicache_status_t unicache_cuda_buffer_read(unicache_stream_t stream, CUdeviceptr buffer, void* host, size_t bytes) {
  return guarded([&] { cuda::read_buffer(cuda_stream(stream), buffer, need(host, "host"), bytes); });
}

unicache_status_t unicache_cuda_buffer_write(unicache_stream_t stream, CUdeviceptr buffer, const void* host,
                                             size_t bytes) {
  return guarded([&] { cuda::write_buffer(cuda_stream(stream), buffer, need(host, "host"), bytes); });
}

}  // extern "C"
