/* The OpenCL interop of the C interface, from C: engines (default, over the
 * caller's device and context, from a cache blob), the blob's size-query
 * pattern and a corrupt blob, native handles, buffers, and the MLP run on
 * the default OpenCL device. Exit 77 (skip) when there is no device. */
#define CL_TARGET_OPENCL_VERSION 120
#include "unicache/unicache_opencl.h"

#include "c_test.h"

static void* make(void* ctx, const void* host, size_t bytes) {
  cl_mem m = NULL;
  OK(unicache_opencl_buffer_create((unicache_engine_t)ctx, bytes, host, &m));
  return m;
}
static unicache_stream_t read_stream;
static void read_back(void* ctx, void* buffer, void* host, size_t bytes) {
  (void)ctx;
  OK(unicache_opencl_buffer_read(read_stream, (cl_mem)buffer, host, bytes));
}
static void release(void* ctx, void* buffer) {
  (void)ctx;
  OK(unicache_opencl_buffer_release((cl_mem)buffer));
}

int main(void) {
  unicache_engine_t eng = NULL;
  if (unicache_opencl_engine_create_default(&eng) != UNICACHE_SUCCESS) {
    fprintf(stderr, "skipped: no OpenCL device (%s)\n", unicache_last_error());
    return 77;
  }
  unicache_stream_t strm = NULL;
  OK(unicache_stream_create(eng, &strm));
  cl_device_id device = NULL;
  cl_context context = NULL;
  cl_command_queue queue = NULL;
  OK(unicache_opencl_engine_get_device(eng, &device));
  OK(unicache_opencl_engine_get_context(eng, &context));
  OK(unicache_opencl_stream_get_queue(strm, &queue));
  CHECK(device && context && queue);

  /* Buffers round-trip. */
  float data[4] = {1, 2, 3, 4}, back[4] = {0};
  cl_mem m = NULL;
  OK(unicache_opencl_buffer_create(eng, sizeof data, data, &m));
  OK(unicache_opencl_buffer_read(strm, m, back, sizeof back));
  CHECK(memcmp(data, back, sizeof data) == 0);
  data[2] = 30;
  OK(unicache_opencl_buffer_write(strm, m, data, sizeof data));
  OK(unicache_opencl_buffer_read(strm, m, back, sizeof back));
  CHECK(back[2] == 30);
  OK(unicache_opencl_buffer_release(m));
  CHECK_STATUS(unicache_opencl_buffer_read(strm, NULL, back, sizeof back), UNICACHE_INVALID_ARGUMENT);

  /* The engine cache blob: id, blob, an engine from it, a corrupt one. */
  size_t id_size = 0;
  OK(unicache_opencl_engine_get_cache_blob_id(device, NULL, &id_size));
  CHECK(id_size == 33);
  size_t blob_size = 0;
  OK(unicache_opencl_engine_get_cache_blob(eng, NULL, &blob_size));
  CHECK(blob_size > 0);
  uint8_t* blob = malloc(blob_size);
  size_t too_small = blob_size - 1;
  CHECK_STATUS(unicache_opencl_engine_get_cache_blob(eng, blob, &too_small), UNICACHE_BUFFER_TOO_SMALL);
  CHECK(too_small == blob_size);
  OK(unicache_opencl_engine_get_cache_blob(eng, blob, &blob_size));
  unicache_engine_t from_blob = NULL;
  OK(unicache_opencl_engine_create_from_cache_blob(device, context, blob, blob_size, &from_blob));
  OK(unicache_engine_destroy(from_blob));
  blob[blob_size / 2] ^= 0x21;
  CHECK_STATUS(unicache_opencl_engine_create_from_cache_blob(device, context, blob, blob_size, &from_blob),
               UNICACHE_INVALID_ARGUMENT);
  CHECK(strlen(unicache_last_error()) > 0);
  CHECK_STATUS(unicache_opencl_engine_create_from_cache_blob(device, context, blob, 3, &from_blob),
               UNICACHE_INVALID_ARGUMENT);
  free(blob);
  unicache_engine_t own = NULL;
  OK(unicache_opencl_engine_create(device, context, &own));
  OK(unicache_engine_destroy(own));
  CHECK_STATUS(unicache_opencl_engine_create(NULL, context, &own), UNICACHE_INVALID_ARGUMENT);

  /* A CPU engine is not an OpenCL one. */
  unicache_engine_t cpu = NULL;
  if (unicache_engine_create_cpu(0, &cpu) == UNICACHE_SUCCESS) {
    CHECK_STATUS(unicache_opencl_engine_get_device(cpu, &device), UNICACHE_INVALID_ARGUMENT);
    OK(unicache_engine_destroy(cpu));
  }

  read_stream = strm;
  const c_test_buffers buffers = {make, read_back, release, eng};
  c_test_run_mlp(eng, strm, &buffers);

  OK(unicache_stream_destroy(strm));
  OK(unicache_engine_destroy(eng));
  return c_test_finish();
}
