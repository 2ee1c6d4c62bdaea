/* The CUDA interop of the C interface, from C: availability, engines
 * (default, by ordinal, from a cache blob), the blob's size-query pattern
 * and a corrupt blob, native handles, device memory, and the MLP run on the
 * GPU. Exit 77 (skip) when there is no driver or device, saying why. */
#include "unicache/unicache_cuda.h"

#include "c_test.h"

static unicache_stream_t io_stream;
static void* make(void* ctx, const void* host, size_t bytes) {
  CUdeviceptr p = 0;
  OK(unicache_cuda_buffer_create((unicache_engine_t)ctx, bytes, host, &p));
  return (void*)(uintptr_t)p;
}
static void read_back(void* ctx, void* buffer, void* host, size_t bytes) {
  (void)ctx;
  OK(unicache_cuda_buffer_read(io_stream, (CUdeviceptr)(uintptr_t)buffer, host, bytes));
}
static void release(void* ctx, void* buffer) {
  OK(unicache_cuda_buffer_free((unicache_engine_t)ctx, (CUdeviceptr)(uintptr_t)buffer));
}

int main(void) {
  int available = 0;
  char reason[512];
  size_t reason_size = sizeof reason;
  OK(unicache_cuda_available(&available, reason, &reason_size));
  if (!available) {
    unicache_engine_t none = NULL;
    CHECK_STATUS(unicache_cuda_engine_create_default(&none), UNICACHE_UNSUPPORTED);
    fprintf(stderr, "skipped: %s\n", reason);
    return failures ? 1 : 77;
  }
  unicache_engine_t eng = NULL;
  OK(unicache_cuda_engine_create_default(&eng));
  unicache_stream_t strm = NULL;
  OK(unicache_stream_create(eng, &strm));
  unicache_stream_t versioned = NULL;
  OK(unicache_cuda_stream_create_with_flags(eng, NULL, UNICACHE_CUDA_STREAM_VERSIONED_CONSTANTS, &versioned));
  OK(unicache_stream_destroy(versioned));
  CHECK_STATUS(unicache_cuda_stream_create_with_flags(eng, NULL, 6, &versioned), UNICACHE_INVALID_ARGUMENT);
  CUcontext context = NULL;
  CUstream cu_stream = NULL;
  OK(unicache_cuda_engine_get_context(eng, &context));
  OK(unicache_cuda_stream_get_stream(strm, &cu_stream));
  CHECK(context != NULL);

  float data[4] = {1, 2, 3, 4}, back[4] = {0};
  CUdeviceptr p = 0;
  OK(unicache_cuda_buffer_create(eng, sizeof data, data, &p));
  OK(unicache_cuda_buffer_read(strm, p, back, sizeof back));
  CHECK(memcmp(data, back, sizeof data) == 0);
  OK(unicache_cuda_buffer_free(eng, p));

  size_t id_size = 0;
  OK(unicache_cuda_engine_get_cache_blob_id(0, NULL, &id_size));
  CHECK(id_size == 33);
  size_t blob_size = 0;
  OK(unicache_cuda_engine_get_cache_blob(eng, NULL, &blob_size));
  uint8_t* blob = malloc(blob_size);
  OK(unicache_cuda_engine_get_cache_blob(eng, blob, &blob_size));
  unicache_engine_t from_blob = NULL;
  OK(unicache_cuda_engine_create_from_cache_blob(0, blob, blob_size, &from_blob));
  OK(unicache_engine_destroy(from_blob));
  blob[blob_size / 2] ^= 0x21;
  CHECK_STATUS(unicache_cuda_engine_create_from_cache_blob(0, blob, blob_size, &from_blob), UNICACHE_INVALID_ARGUMENT);
  free(blob);
  unicache_engine_t by_ordinal = NULL;
  OK(unicache_cuda_engine_create(0, &by_ordinal));
  OK(unicache_engine_destroy(by_ordinal));

  io_stream = strm;
  const c_test_buffers buffers = {make, read_back, release, eng};
  c_test_run_mlp(eng, strm, &buffers);

  OK(unicache_stream_destroy(strm));
  OK(unicache_engine_destroy(eng));
  return c_test_finish();
}
