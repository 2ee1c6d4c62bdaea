/* unicache/unicache_opencl.h — the OpenCL backend's C interop.
 *
 * DRAFT (branch c-api, not built yet). Conventions as in unicache.h. The
 * OpenCL handles passed in stay the caller's: unicache retains what it
 * keeps (clRetainContext) and releases it when the engine and everything
 * cached for it are gone.
 */
#ifndef UNICACHE_UNICACHE_OPENCL_H
#define UNICACHE_UNICACHE_OPENCL_H

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

#ifdef __cplusplus
}
#endif

#endif /* UNICACHE_UNICACHE_OPENCL_H */
