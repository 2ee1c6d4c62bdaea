/* unicache/unicache_opencl.h — the OpenCL backend's C interop.
 * For: C callers with OpenCL.
 *
 * Conventions as in unicache.h. The OpenCL handles passed in stay the
 * caller's: unicache retains what it keeps and releases it when the engine
 * and everything cached for it are gone. Tensors of an OpenCL engine's
 * compiled partitions hold a cl_mem as their data. Present only in builds
 * with the OpenCL backend.
 */
#ifndef UNICACHE_UNICACHE_OPENCL_H
#define UNICACHE_UNICACHE_OPENCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "unicache/unicache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default device (UNICACHE_OPENCL_DEVICE, else the first GPU, else the
 * first device) in a context of its own. */
UNICACHE_API unicache_status_t unicache_opencl_engine_create_default(unicache_engine_t* engine);
UNICACHE_API unicache_status_t unicache_opencl_engine_create(cl_device_id device, cl_context context,
                                                             unicache_engine_t* engine);

/* The RFC's engine cache blob: its id for a device (before an engine
 * exists), the blob of an engine, and an engine created from a blob
 * without probing the device. Size-query pattern; a blob of another
 * device, driver or unicache build is UNICACHE_INVALID_ARGUMENT. */
UNICACHE_API unicache_status_t unicache_opencl_engine_get_cache_blob_id(cl_device_id device, char* id, size_t* size);
UNICACHE_API unicache_status_t unicache_opencl_engine_get_cache_blob(unicache_engine_t engine, uint8_t* blob,
                                                                     size_t* size);
UNICACHE_API unicache_status_t unicache_opencl_engine_create_from_cache_blob(cl_device_id device, cl_context context,
                                                                             const uint8_t* blob, size_t size,
                                                                             unicache_engine_t* engine);

UNICACHE_API unicache_status_t unicache_opencl_engine_get_device(unicache_engine_t engine, cl_device_id* device);
UNICACHE_API unicache_status_t unicache_opencl_engine_get_context(unicache_engine_t engine, cl_context* context);
UNICACHE_API unicache_status_t unicache_opencl_stream_get_queue(unicache_stream_t stream, cl_command_queue* queue);

/* Buffers, for callers without their own OpenCL bindings (Python's ctypes):
 * a buffer of `bytes` in the engine's context, filled from `host` if not
 * NULL, owned by the caller and released with unicache_opencl_buffer_release;
 * blocking copies on the stream's queue. */
UNICACHE_API unicache_status_t unicache_opencl_buffer_create(unicache_engine_t engine, size_t bytes, const void* host,
                                                             cl_mem* buffer);
UNICACHE_API unicache_status_t unicache_opencl_buffer_release(cl_mem buffer);
UNICACHE_API unicache_status_t unicache_opencl_buffer_read(unicache_stream_t stream, cl_mem buffer, void* host,
                                                           size_t bytes);
UNICACHE_API unicache_status_t unicache_opencl_buffer_write(unicache_stream_t stream, cl_mem buffer,
                                                            const void* host, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* UNICACHE_UNICACHE_OPENCL_H */
