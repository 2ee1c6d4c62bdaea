/* unicache/unicache_cuda.h — the CUDA backend's C interop.
 * For: C callers with CUDA.
 *
 * Conventions as in unicache.h. CUDA's handles are declared here as the
 * driver API declares them (no CUDA header is needed). Tensors of a CUDA
 * engine's compiled partitions hold a CUdeviceptr, cast to void*, as their
 * data. Present only in builds with the CUDA backend; the driver is loaded
 * at run time, and every function returns UNICACHE_UNSUPPORTED with the
 * reason when it cannot be.
 */
#ifndef UNICACHE_UNICACHE_CUDA_H
#define UNICACHE_UNICACHE_CUDA_H

#include "unicache/unicache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As cuda.h declares them; include cuda.h before this header if you use it
 * (C99 does not allow a typedef twice). */
#ifndef CUDA_VERSION
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;
#endif

/* Whether a driver and a device are there; if not, *reason (size-query
 * pattern) says why. */
UNICACHE_API unicache_status_t unicache_cuda_available(int* available, char* reason, size_t* size);

/* The device UNICACHE_CUDA_DEVICE names, else device 0, in its primary
 * context; device `ordinal`'s primary context; a context the caller owns
 * and keeps alive while the engine lives (call unicache_cuda_release_cached
 * before destroying that context). */
UNICACHE_API unicache_status_t unicache_cuda_engine_create_default(unicache_engine_t* engine);
UNICACHE_API unicache_status_t unicache_cuda_engine_create(int ordinal, unicache_engine_t* engine);
UNICACHE_API unicache_status_t unicache_cuda_engine_create_in_context(CUcontext context, unicache_engine_t* engine);
/* Frees every kernel and weight cached for the engine's context, after the
 * work that still used them (it waits for that work). Call it before
 * destroying a context of your own, after destroying the engine's streams
 * and compiled partitions. */
UNICACHE_API unicache_status_t unicache_cuda_release_cached(unicache_engine_t engine);
/* A stream over the caller's CUstream (of the engine's context; NULL is
 * CUDA's legacy default stream). */
UNICACHE_API unicache_status_t unicache_cuda_stream_create(unicache_engine_t engine, CUstream cu_stream,
                                                           unicache_stream_t* stream);

/* unicache_cuda_stream_create with flags: UNICACHE_CUDA_STREAM_VERSIONED_CONSTANTS
 * declares that a constant input of work on this stream changes only with a
 * version bump (unicache_tensor_t.version) and stays alive while in use, as
 * a framework's parameters do: address and version identify it, and no
 * execution reads it back for the contents check (which on the caller's
 * stream waits for the stream's queued work). An unknown flag is
 * UNICACHE_INVALID_ARGUMENT. */
enum { UNICACHE_CUDA_STREAM_VERSIONED_CONSTANTS = 1 };
UNICACHE_API unicache_status_t unicache_cuda_stream_create_with_flags(unicache_engine_t engine, CUstream cu_stream,
                                                                      uint32_t flags, unicache_stream_t* stream);

/* The engine cache blob (size-query pattern); a blob of another device,
 * driver or unicache build is UNICACHE_INVALID_ARGUMENT. */
UNICACHE_API unicache_status_t unicache_cuda_engine_get_cache_blob_id(int ordinal, char* id, size_t* size);
UNICACHE_API unicache_status_t unicache_cuda_engine_get_cache_blob(unicache_engine_t engine, uint8_t* blob,
                                                                   size_t* size);
UNICACHE_API unicache_status_t unicache_cuda_engine_create_from_cache_blob(int ordinal, const uint8_t* blob,
                                                                           size_t size, unicache_engine_t* engine);

UNICACHE_API unicache_status_t unicache_cuda_engine_get_context(unicache_engine_t engine, CUcontext* context);
UNICACHE_API unicache_status_t unicache_cuda_stream_get_stream(unicache_stream_t stream, CUstream* cu_stream);

/* Device memory, for callers without CUDA bindings: owned by the caller,
 * freed with unicache_cuda_buffer_free once unicache_stream_wait has
 * returned on every stream whose work used it; copies on the stream (after
 * its enqueued work) that return when done. */
UNICACHE_API unicache_status_t unicache_cuda_buffer_create(unicache_engine_t engine, size_t bytes, const void* host,
                                                           CUdeviceptr* buffer);
UNICACHE_API unicache_status_t unicache_cuda_buffer_free(unicache_engine_t engine, CUdeviceptr buffer);
UNICACHE_API unicache_status_t unicache_cuda_buffer_read(unicache_stream_t stream, CUdeviceptr buffer, void* host,
                                                         size_t bytes);
UNICACHE_API unicache_status_t unicache_cuda_buffer_write(unicache_stream_t stream, CUdeviceptr buffer,
                                                          const void* host, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* UNICACHE_UNICACHE_CUDA_H */
