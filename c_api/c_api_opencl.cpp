// The OpenCL backend's C interop (include/unicache/unicache_opencl.h).
#include "unicache/unicache_opencl.h"

#include "c_api_internal.hpp"
#include "unicache/opencl.hpp"

using namespace unicache;
using namespace unicache::c_api;

namespace {
const unicache::engine& opencl_engine(unicache_engine_t handle) { return backend_engine(handle, "opencl"); }
const unicache::stream& opencl_stream(unicache_stream_t handle) { return backend_stream(handle, "opencl"); }
}  // namespace

extern "C" {

unicache_status_t unicache_opencl_engine_create_default(unicache_engine_t* engine) {
  return guarded([&] { *need(engine, "engine") = engine_handle(opencl::make_engine()); });
}

unicache_status_t unicache_opencl_engine_create(cl_device_id device, cl_context context, unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    *engine = engine_handle(opencl::make_engine(need(device, "device"), need(context, "context")));
  });
}

unicache_status_t unicache_opencl_engine_get_cache_blob_id(cl_device_id device, char* id, size_t* size) {
  return guarded([&] { copy_out(opencl::get_engine_cache_blob_id(need(device, "device")), id, size); });
}

unicache_status_t unicache_opencl_engine_get_cache_blob(unicache_engine_t engine, uint8_t* blob, size_t* size) {
  return guarded([&] {
    const byte_vector b = opencl::get_engine_cache_blob(opencl_engine(engine));
    copy_out(b.data(), b.size(), blob, size);
  });
}

unicache_status_t unicache_opencl_engine_create_from_cache_blob(cl_device_id device, cl_context context,
                                                                const uint8_t* blob, size_t size,
                                                                unicache_engine_t* engine) {
  return guarded([&] {
    need(engine, "engine");
    if (size) need(blob, "blob");
    try {
      *engine = engine_handle(
          opencl::make_engine_from_cache_blob(need(device, "device"), need(context, "context"), byte_span(blob, size)));
    } catch (const opencl::opencl_error& e) {
      raise(UNICACHE_INVALID_ARGUMENT, e.what());  // foreign, stale or corrupt
    }
  });
}

unicache_status_t unicache_opencl_engine_get_device(unicache_engine_t engine, cl_device_id* device) {
  return guarded([&] { *need(device, "device") = opencl::native_device(opencl_engine(engine)); });
}

unicache_status_t unicache_opencl_engine_get_context(unicache_engine_t engine, cl_context* context) {
  return guarded([&] { *need(context, "context") = opencl::native_context(opencl_engine(engine)); });
}

unicache_status_t unicache_opencl_stream_get_queue(unicache_stream_t stream, cl_command_queue* queue) {
  return guarded([&] { *need(queue, "queue") = opencl::native_queue(opencl_stream(stream)); });
}

unicache_status_t unicache_opencl_buffer_create(unicache_engine_t engine, size_t bytes, const void* host,
                                                cl_mem* buffer) {
  return guarded([&] { *need(buffer, "buffer") = opencl::make_buffer(opencl_engine(engine), bytes, host); });
}

unicache_status_t unicache_opencl_buffer_release(cl_mem buffer) {
  return guarded([&] {
    if (buffer && clReleaseMemObject(buffer) != CL_SUCCESS) raise(UNICACHE_INVALID_ARGUMENT, "clReleaseMemObject failed");
  });
}

unicache_status_t unicache_opencl_buffer_read(unicache_stream_t stream, cl_mem buffer, void* host, size_t bytes) {
  return guarded([&] { opencl::read_buffer(opencl_stream(stream), need(buffer, "buffer"), need(host, "host"), bytes); });
}

unicache_status_t unicache_opencl_buffer_write(unicache_stream_t stream, cl_mem buffer, const void* host,
                                               size_t bytes) {
  return guarded([&] { opencl::write_buffer(opencl_stream(stream), need(buffer, "buffer"), need(host, "host"), bytes); });
}

}  // extern "C"
