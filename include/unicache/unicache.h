/* unicache/unicache.h — the C interface (C99) to unicache.
 * For: C callers (and other languages through it).
 *
 * libunicache_c, a shared library holding the core and every backend the
 * build has, implements it over the C++ API one to one: the C layer holds
 * no logic of its own. Backend interop: unicache_opencl.h, unicache_cuda.h.
 * CMake: find_package(unicache COMPONENTS c) and link unicache::c.
 *
 * Conventions
 * - Every function returns unicache_status_t; UNICACHE_SUCCESS is 0. On
 *   failure, unicache_last_error() returns this thread's message for the
 *   last failed call (valid until the thread's next failed call). No C++
 *   exception ever crosses this interface.
 * - Handles are opaque pointers. A handle created by a function is owned by
 *   the caller and released by its destroy function, which accepts NULL.
 *   Using a destroyed handle, or destroying one twice, is reported as
 *   UNICACHE_INVALID_HANDLE (live handles are registered), unless its memory
 *   was reused by a handle created since; do not rely on it.
 * - Out-parameters are written only on success.
 * - Sizes and blobs follow the RFCs' size-query pattern: pass data == NULL
 *   to learn the size in *size; pass a buffer and its capacity in *size to
 *   fill it. A buffer too small is UNICACHE_BUFFER_TOO_SMALL with the
 *   needed size in *size and nothing written. Strings count their NUL.
 * - Thread safety is that of the C++ object behind a handle: engines,
 *   compiled partitions and the caches may be used from any thread; a
 *   graph is built by one thread; a stream is used by one thread at a time.
 */
#ifndef UNICACHE_UNICACHE_H
#define UNICACHE_UNICACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define UNICACHE_API __attribute__((visibility("default")))
#else
#define UNICACHE_API
#endif

/* --- Status --------------------------------------------------------------- */

typedef enum {
  UNICACHE_SUCCESS = 0,
  UNICACHE_INVALID_ARGUMENT = 1,  /* a null pointer, an unknown enum value, a bad shape */
  UNICACHE_INVALID_HANDLE = 2,    /* a null or destroyed handle */
  UNICACHE_BUFFER_TOO_SMALL = 3,  /* *size holds the size needed */
  UNICACHE_INVALID_GRAPH = 4,     /* graph_error: the graph cannot be partitioned */
  UNICACHE_COMPILE_FAILED = 5,    /* compile_error, including a blob for another device */
  UNICACHE_EXECUTE_FAILED = 6,    /* execute_error */
  UNICACHE_CACHE_ERROR = 7,       /* cache_error: e.g. a capacity above the maximum */
  UNICACHE_STORE_ERROR = 8,       /* the persistent store refused a setting */
  UNICACHE_UNSUPPORTED = 9,       /* the build lacks the backend asked for */
  UNICACHE_OUT_OF_MEMORY = 10,
  UNICACHE_RUNTIME_ERROR = 11,    /* any other failure; see unicache_last_error() */
  UNICACHE_STATUS_FORCE_INT32 = 0x7fffffff
} unicache_status_t;

/* This thread's message for its last failed call; "" if none. Never NULL.
 * Owned by unicache; valid until this thread's next failed call. */
UNICACHE_API const char* unicache_last_error(void);
/* The status's name ("UNICACHE_BUFFER_TOO_SMALL"). Static storage. */
UNICACHE_API const char* unicache_status_name(unicache_status_t status);

/* The library's version ("0.1.0"). Static storage. */
UNICACHE_API const char* unicache_version(void);

/* --- Caches ---------------------------------------------------------------- */

/* Every enum has a last value that makes it as wide as an int32_t, so that
 * any value a caller passes is one the library may read and reject. */
typedef enum {
  UNICACHE_ENGINE_CPU = 0,
  UNICACHE_ENGINE_GPU = 1,
  UNICACHE_ENGINE_KIND_FORCE_INT32 = 0x7fffffff
} unicache_engine_kind_t;

typedef enum {
  UNICACHE_POLICY_DEFAULT = 0,
  UNICACHE_POLICY_NO_EVICT = 1,
  UNICACHE_POLICY_LRU = 2,
  UNICACHE_POLICY_COST = 3,
  UNICACHE_POLICY_FORCE_INT32 = 0x7fffffff
} unicache_policy_t;

typedef enum {
  UNICACHE_CONSTANT_TENSOR_CACHE = 0,
  UNICACHE_KERNEL_CACHE = 1,
  UNICACHE_CACHE_FORCE_INT32 = 0x7fffffff
} unicache_cache_t;

/* Capacity in MB of every device of `kind` in one process-wide cache (and
 * its policy), as ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY sets it for the
 * constant tensor cache. Shrinking evicts; 0 caches nothing. */
UNICACHE_API unicache_status_t unicache_set_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind,
                                                           size_t capacity_mb, unicache_policy_t policy);
UNICACHE_API unicache_status_t unicache_get_cache_capacity(unicache_cache_t cache, unicache_engine_kind_t kind,
                                                           size_t* capacity_mb, unicache_policy_t* policy);
/* oneDNN Graph's names for the constant tensor cache. */
UNICACHE_API unicache_status_t unicache_set_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t size_mb);
UNICACHE_API unicache_status_t unicache_get_constant_tensor_cache_capacity(unicache_engine_kind_t kind, size_t* size_mb);
/* The kernel cache's capacity in MB, for every device of both kinds (get:
 * the CPU kind's). */
UNICACHE_API unicache_status_t unicache_set_kernel_cache_capacity(size_t capacity_mb);
UNICACHE_API unicache_status_t unicache_get_kernel_cache_capacity(size_t* capacity_mb);

typedef struct {
  uint64_t hits, waits, misses, inserts, evictions, failures;
  uint64_t refused_full, refused_oversize, refused_admission;
  uint64_t bytes, entries;
} unicache_cache_stats_t;

/* Counters of the whole cache (every device and context). */
UNICACHE_API unicache_status_t unicache_get_cache_stats(unicache_cache_t cache, unicache_cache_stats_t* stats);

/* An eviction callback: called after an entry of `cache` is evicted, on the
 * evicting thread, with no lock of the cache held. `key` and `key_size` are
 * valid during the call only. It must not throw (it is C). */
typedef void (*unicache_eviction_callback_t)(void* user_data, unicache_engine_kind_t kind, int device_id,
                                             uint64_t context_id, uint32_t owner_id, const void* key,
                                             size_t key_size);
/* Subscribes; *subscription identifies it for removal. user_data is passed
 * back unchanged and must outlive the subscription. */
UNICACHE_API unicache_status_t unicache_add_eviction_callback(unicache_cache_t cache, uint32_t owner_id,
                                                              unicache_eviction_callback_t callback,
                                                              void* user_data, uint64_t* subscription);
/* Waits for calls running on other threads. UNICACHE_INVALID_ARGUMENT if the
 * subscription is unknown or already removed. */
UNICACHE_API unicache_status_t unicache_remove_eviction_callback(unicache_cache_t cache, uint32_t owner_id,
                                                                 uint64_t subscription);

/* --- Persistent kernel store (the process-wide store's runtime settings) --- */

/* The store never fails its user: an unusable directory turns it off with
 * one warning on stderr (see docs/configuration.md), and a later
 * unicache_store_get_stats returns UNICACHE_STORE_ERROR saying why. */
UNICACHE_API unicache_status_t unicache_store_set_enabled(int enabled);
/* Whether a put that leaves the store over its size evicts (default on). */
UNICACHE_API unicache_status_t unicache_store_set_size_eviction(int enabled);
/* The remote tier, as UNICACHE_REMOTE_CACHE sets it: a redis:// URL ("" or
 * NULL: off) and optionally a secret file signing entries (NULL: none). A
 * malformed URL or unusable secret file is UNICACHE_INVALID_ARGUMENT and
 * changes nothing; the message never quotes a password or the secret. */
UNICACHE_API unicache_status_t unicache_store_set_remote(const char* url, const char* secret_file);
UNICACHE_API unicache_status_t unicache_store_set_directory(const char* directory);
UNICACHE_API unicache_status_t unicache_store_set_capacity_mb(uint64_t capacity_mb);
/* The directory in use (size-query pattern). */
UNICACHE_API unicache_status_t unicache_store_get_directory(char* directory, size_t* size);

typedef struct {
  uint64_t entries, bytes, devices, temporary_files;
} unicache_store_stats_t;
UNICACHE_API unicache_status_t unicache_store_get_stats(unicache_store_stats_t* stats);

/* Misses that explain themselves (store.hpp): as UNICACHE_EXPLAIN_MISSES,
 * whether the kernel path prints, for a kernel it builds while other entries
 * of it are stored, one stderr line naming the fields in which the nearest
 * differs, and records the miss in the store. */
UNICACHE_API unicache_status_t unicache_set_explain_misses(int enabled);
/* The line for a recorded miss, by the id its line shows (8 to 32 hex
 * digits), against the store as it is now (size-query pattern).
 * UNICACHE_STORE_ERROR: no such miss, a malformed or ambiguous id, a
 * damaged record, or the store is off. */
UNICACHE_API unicache_status_t unicache_store_explain_miss(const char* id, char* line, size_t* size);

/* Bundles: entries of the process-wide store in one file, so that a warm
 * store travels to another machine (store.hpp, "Bundles"). A secret file
 * (NULL or "": none), as UNICACHE_REMOTE_CACHE_SECRET_FILE: export signs
 * every record with it; import with it accepts only records signed with
 * it; import without one ignores signatures. */
typedef struct {
  const char* kind;       /* only keys of this kind ("opencl-c", "cuda-c"); NULL or "": any */
  const char* device;     /* only devices whose description contains this text; NULL or "": any */
  uint32_t max_age_days;  /* only entries used within this many days; 0: any */
} unicache_bundle_filter_t;
typedef struct {
  uint64_t records;          /* export: records written; import: records in the bundle */
  uint64_t imported;         /* import: entries now stored that were not */
  uint64_t already_present;  /* import: entries the store held already */
  uint64_t refused;          /* import: records refused; export: damaged entries left out */
  uint64_t bytes;            /* the bundle's size */
} unicache_bundle_report_t;
/* Both fill *report (required). `refusals` (NULL: not wanted) receives one
 * line per refusal ("record 17: entry corrupt (checksum mismatch)"), each
 * ending in '\n', as many whole lines as fit in `refusals_size` bytes with
 * the NUL; report->refused counts them all. A refused record is no error:
 * the call succeeds. UNICACHE_STORE_ERROR, with what to do: the store is
 * disabled or not writable (import), `path` cannot be written (export: the
 * bundle appears whole or not at all), or is not a regular file, not a
 * bundle, truncated or damaged (import: nothing imported then);
 * UNICACHE_INVALID_ARGUMENT: a NULL path or report, an unusable secret file. */
UNICACHE_API unicache_status_t unicache_store_export_bundle(const char* path, const unicache_bundle_filter_t* filter,
                                                            const char* secret_file, unicache_bundle_report_t* report,
                                                            char* refusals, size_t refusals_size);
UNICACHE_API unicache_status_t unicache_store_import_bundle(const char* path, const char* secret_file,
                                                            unicache_bundle_report_t* report, char* refusals,
                                                            size_t refusals_size);

/* Blobs, for applications that keep binaries in their own storage: one
 * device binary under its key, self-checking, tied to a device identity
 * (platform, device, device version, driver version; NUL-terminated). */
typedef struct {
  const char* platform_name;
  const char* device_name;
  const char* device_version;
  const char* driver_version;
} unicache_device_identity_t;

/* 32 hex digits naming the blob of `key` for `device` (size-query pattern). */
UNICACHE_API unicache_status_t unicache_blob_id(const unicache_device_identity_t* device, const void* key,
                                                size_t key_size, char* id, size_t* size);
UNICACHE_API unicache_status_t unicache_blob_serialize(const unicache_device_identity_t* device, const void* key,
                                                       size_t key_size, const uint8_t* binary, size_t binary_size,
                                                       uint8_t* blob, size_t* size);
/* The key and binary in `blob` (size-query pattern on both: with either
 * buffer NULL or too small, both sizes are set and nothing is copied). A
 * blob of another device, driver or unicache build, a corrupt or truncated
 * one, or not a blob: UNICACHE_INVALID_ARGUMENT naming the problem. */
UNICACHE_API unicache_status_t unicache_blob_deserialize(const unicache_device_identity_t* device, const uint8_t* blob,
                                                         size_t blob_size, void* key, size_t* key_size,
                                                         uint8_t* binary, size_t* binary_size);

/* --- Graphs ---------------------------------------------------------------- */

typedef struct unicache_graph* unicache_graph_t;
typedef struct unicache_partition* unicache_partition_t;  /* borrowed from its graph */

typedef enum {
  UNICACHE_OP_MATMUL = 0,
  UNICACHE_OP_ADD = 1,
  UNICACHE_OP_MULTIPLY = 2,
  UNICACHE_OP_RELU = 3,
  UNICACHE_OP_GELU_ERF = 4,
  UNICACHE_OP_GELU_TANH = 5,
  UNICACHE_OP_SIGMOID = 6,
  UNICACHE_OP_TANH = 7,
  UNICACHE_OP_SOFTMAX = 8,
  UNICACHE_OP_LAYER_NORM = 9, /* inputs {x, gamma, beta}; gamma and beta of shape [C], C = x's last dim */
  UNICACHE_OP_TRANSPOSE = 10, /* permutes up to 6 axes (UNICACHE_OP_ATTR_PERMUTATION); dense output */
  UNICACHE_OP_SQRT = 11,
  UNICACHE_OP_RSQRT = 12,     /* 1 / sqrt(x) */
  UNICACHE_OP_SILU = 13,      /* x * sigmoid(x) */
  UNICACHE_OP_RMS_NORM = 14,  /* inputs {x, gamma}; x / sqrt(mean(x^2) + epsilon) * gamma over the last dim */
  /* inputs {Q, K, V} or {Q, K, V, mask}: softmax(scale * Q K^T + mask) V per batch and head, without the
   * scores in memory on a GPU (layouts and rules: unicache/graph.hpp; UNICACHE_OP_ATTR_SCALE, _CAUSAL, _LAYOUT) */
  UNICACHE_OP_ATTENTION = 15,
  UNICACHE_OP_KIND_FORCE_INT32 = 0x7fffffff
} unicache_op_kind_t;

enum { UNICACHE_UNKNOWN_DIM = -1, UNICACHE_MAX_NDIMS = 8 };

typedef struct {
  uint64_t id;
  int32_t ndims;
  int64_t dims[UNICACHE_MAX_NDIMS]; /* UNICACHE_UNKNOWN_DIM: known at compile time */
  int32_t is_constant;              /* a weight: packed once, reused across executions */
} unicache_logical_tensor_t;

UNICACHE_API unicache_status_t unicache_graph_create(unicache_graph_t* graph);
UNICACHE_API unicache_status_t unicache_graph_destroy(unicache_graph_t graph);
/* Declares an f32 tensor; *tensor gets its id and shape. */
UNICACHE_API unicache_status_t unicache_graph_add_tensor(unicache_graph_t graph, int32_t ndims, const int64_t* dims,
                                                         int32_t is_constant, unicache_logical_tensor_t* tensor);
UNICACHE_API unicache_status_t unicache_graph_add_op(unicache_graph_t graph, unicache_op_kind_t kind,
                                                     const uint64_t* input_ids, size_t num_inputs,
                                                     const uint64_t* output_ids, size_t num_outputs,
                                                     int32_t transpose_a, int32_t transpose_b, uint64_t* op_id);
typedef enum {
  UNICACHE_OP_ATTR_EPSILON = 0, /* LayerNorm, RMSNorm: added to the variance; finite, >= 0; default 1e-5 */
  UNICACHE_OP_ATTR_PERMUTATION = 1, /* Transpose: output dim i is input dim values[i]; required */
  UNICACHE_OP_ATTR_SCALE = 2,       /* Attention: multiplies Q K^T; finite, nonzero; default 1 / sqrt(head size) */
  UNICACHE_OP_ATTR_CAUSAL = 3,      /* Attention (one value): 1 hides key j from query i where j > i; default 0 */
  UNICACHE_OP_ATTR_LAYOUT = 4,      /* Attention (one value): a unicache_attention_layout_t; default BHLD */
  UNICACHE_OP_ATTR_FORCE_INT32 = 0x7fffffff
} unicache_op_attr_t;

typedef enum {
  UNICACHE_ATTENTION_LAYOUT_BHLD = 0, /* Q [..., L, D], K [..., S, D], V [..., S, Dv] (rank 3 or 4) */
  UNICACHE_ATTENTION_LAYOUT_BLHD = 1  /* Q [B, L, H, D], K [B, S, H, D], V [B, S, H, Dv] */
} unicache_attention_layout_t;

/* Sets a float attribute of op `op_id` (from unicache_graph_add_op). An
 * unknown attr is UNICACHE_INVALID_ARGUMENT; an unknown op, an attribute
 * its kind lacks or a value out of range is UNICACHE_INVALID_GRAPH with the
 * reason. Nothing changes on failure. */
UNICACHE_API unicache_status_t unicache_graph_set_op_attr_f32(unicache_graph_t graph, uint64_t op_id,
                                                              unicache_op_attr_t attr, float value);
/* Sets an integer-list attribute of op `op_id` (UNICACHE_OP_ATTR_PERMUTATION:
 * `count` values, each axis of the input once, at most 6; _CAUSAL and
 * _LAYOUT: one value). Errors as for
 * unicache_graph_set_op_attr_f32; values may be NULL only when count is 0.
 * The rank is checked by unicache_graph_finalize. */
UNICACHE_API unicache_status_t unicache_graph_set_op_attr_i64s(unicache_graph_t graph, uint64_t op_id,
                                                               unicache_op_attr_t attr, const int64_t* values,
                                                               size_t count);
/* Declares that the caller reads tensor `tensor_id` itself (between
 * partitions): it is then some partition's output, and no fused chain passes
 * through it. An undeclared tensor is UNICACHE_INVALID_GRAPH. */
UNICACHE_API unicache_status_t unicache_graph_mark_output(unicache_graph_t graph, uint64_t tensor_id);
/* Validates and partitions (UNICACHE_INVALID_GRAPH with the reason). */
UNICACHE_API unicache_status_t unicache_graph_finalize(unicache_graph_t graph);
UNICACHE_API unicache_status_t unicache_graph_get_partition_count(unicache_graph_t graph, size_t* count);
/* The partition stays valid while its graph lives; it is not destroyed. */
UNICACHE_API unicache_status_t unicache_graph_get_partition(unicache_graph_t graph, size_t index,
                                                            unicache_partition_t* partition);
/* 32 hex digits identifying the partition's structure (ops, attributes,
 * shapes with -1, properties; not tensor ids): equal for equal structures,
 * in any process (size-query pattern). */
UNICACHE_API unicache_status_t unicache_partition_get_fingerprint(unicache_partition_t partition, char* fingerprint,
                                                                  size_t* size);
UNICACHE_API unicache_status_t unicache_partition_get_input_count(unicache_partition_t partition, size_t* count);
UNICACHE_API unicache_status_t unicache_partition_get_input(unicache_partition_t partition, size_t index,
                                                            unicache_logical_tensor_t* tensor);
UNICACHE_API unicache_status_t unicache_partition_get_output_count(unicache_partition_t partition, size_t* count);
UNICACHE_API unicache_status_t unicache_partition_get_output(unicache_partition_t partition, size_t index,
                                                             unicache_logical_tensor_t* tensor);

/* The JSON form of a graph (docs/graph-json.md, graph.hpp's to_json and
 * graph_from_json): a graph as text, to compile it elsewhere. A request
 * gives concrete shapes (no -1) of the graph's inputs, the tensors no op
 * writes: every input with a -1 in its declared shape, and any other. */
typedef struct {
  uint64_t tensor_id;
  int32_t ndims;
  const int64_t* dims;
} unicache_tensor_shape_t;
typedef struct {
  const unicache_tensor_shape_t* shapes;
  size_t num_shapes;
} unicache_shape_request_t;
/* The graph (finalized or not) as a JSON document, with `num_requests`
 * requests (0: none; `requests` may then be NULL), NUL-terminated
 * (size-query pattern). UNICACHE_INVALID_GRAPH: what the form cannot hold
 * (a rank above 8, transpose flags on an op other than MatMul, a document
 * above 64 MiB) or a request that does not fit the graph's inputs;
 * UNICACHE_INVALID_ARGUMENT: a NULL array with a count, ndims out of
 * range, a tensor twice in one request. */
UNICACHE_API unicache_status_t unicache_graph_to_json(unicache_graph_t graph, const unicache_shape_request_t* requests,
                                                      size_t num_requests, char* json, size_t* size);
/* A new graph, finalized, from the JSON document `json` of `json_size`
 * bytes (need not be NUL-terminated; untrusted: at most 64 MiB). Its
 * requests are checked, not kept. UNICACHE_INVALID_GRAPH with a message
 * naming the place ("graph JSON: ops[3].inputs[1]: tensor 17 is not
 * declared", "graph JSON: at byte 1234: expected ','"); *graph is then
 * untouched. The caller owns the graph (unicache_graph_destroy). */
UNICACHE_API unicache_status_t unicache_graph_create_from_json(const char* json, size_t json_size,
                                                               unicache_graph_t* graph);

/* --- Engines, streams, compiling, executing ------------------------------- */

typedef struct unicache_engine* unicache_engine_t;
typedef struct unicache_stream* unicache_stream_t;
typedef struct unicache_compiled_partition* unicache_compiled_partition_t;

/* The CPU engine (oneDNN). Backend-specific engines (OpenCL, CUDA) are made
 * by the functions of unicache_opencl.h and unicache_cuda.h. */
UNICACHE_API unicache_status_t unicache_engine_create_cpu(int index, unicache_engine_t* engine);
UNICACHE_API unicache_status_t unicache_engine_destroy(unicache_engine_t engine);
UNICACHE_API unicache_status_t unicache_engine_get_kind(unicache_engine_t engine, unicache_engine_kind_t* kind);

/* Kernels the engine's backend has built since the process started (every
 * device of that backend): on the CPU, oneDNN primitives created; on a GPU,
 * kernels built from source (`loaded`: from stored or preloaded binaries).
 * What a frontend counts to show that new shapes build nothing. */
typedef struct {
  uint64_t built, loaded, build_ns;
} unicache_build_stats_t;
UNICACHE_API unicache_status_t unicache_engine_get_build_stats(unicache_engine_t engine,
                                                               unicache_build_stats_t* stats);

UNICACHE_API unicache_status_t unicache_stream_create(unicache_engine_t engine, unicache_stream_t* stream);
UNICACHE_API unicache_status_t unicache_stream_destroy(unicache_stream_t stream);
/* Waits until the work enqueued on the stream is finished. On a GPU,
 * unicache_compiled_partition_execute enqueues and returns: call this once
 * per request before reading outputs (or freeing inputs). A failure of
 * enqueued work is reported here (UNICACHE_EXECUTE_FAILED, with the
 * driver's message), or by the next execute on the stream. On the
 * CPU, execute returns finished and this returns at once. */
UNICACHE_API unicache_status_t unicache_stream_wait(unicache_stream_t stream);

/* Compiles `partition` for concrete input shapes: shapes[i] has ndims[i]
 * dimensions, for each of the partition's inputs in order. */
UNICACHE_API unicache_status_t unicache_compile(unicache_partition_t partition, size_t num_inputs,
                                                const int32_t* ndims, const int64_t* const* shapes,
                                                unicache_engine_t engine, unicache_compiled_partition_t* compiled);
UNICACHE_API unicache_status_t unicache_compiled_partition_destroy(unicache_compiled_partition_t compiled);
UNICACHE_API unicache_status_t unicache_compiled_partition_get_output(unicache_compiled_partition_t compiled,
                                                                      size_t index,
                                                                      unicache_logical_tensor_t* tensor);

/* A tensor with data: `data` is a host pointer on the CPU, a cl_mem for
 * OpenCL, a CUdeviceptr for CUDA. The caller owns it. `version`: bump it
 * when a constant's contents change. */
typedef struct {
  unicache_logical_tensor_t desc;
  void* data;
  uint64_t version;
} unicache_tensor_t;

UNICACHE_API unicache_status_t unicache_compiled_partition_execute(unicache_compiled_partition_t compiled,
                                                                   unicache_stream_t stream,
                                                                   const unicache_tensor_t* inputs,
                                                                   size_t num_inputs,
                                                                   const unicache_tensor_t* outputs,
                                                                   size_t num_outputs);

/* The id of the cache blob `partition` compiled for these shapes on
 * `engine` would have, without compiling: look it up in your storage first. */
UNICACHE_API unicache_status_t unicache_get_cache_blob_id(unicache_partition_t partition, size_t num_inputs,
                                                          const int32_t* ndims, const int64_t* const* shapes,
                                                          unicache_engine_t engine, char* id, size_t* size);
/* Compiled-partition cache blobs (size-query pattern). The id is a
 * NUL-terminated string of 32 hex digits. */
UNICACHE_API unicache_status_t unicache_compiled_partition_get_cache_blob_id(unicache_compiled_partition_t compiled,
                                                                             char* id, size_t* size);
UNICACHE_API unicache_status_t unicache_compiled_partition_get_cache_blob(unicache_compiled_partition_t compiled,
                                                                          uint8_t* blob, size_t* size);
UNICACHE_API unicache_status_t unicache_compile_from_cache_blob(unicache_partition_t partition, size_t num_inputs,
                                                                const int32_t* ndims, const int64_t* const* shapes,
                                                                unicache_engine_t engine, const uint8_t* blob,
                                                                size_t blob_size,
                                                                unicache_compiled_partition_t* compiled);

#ifdef __cplusplus
}
#endif

#endif /* UNICACHE_UNICACHE_H */
