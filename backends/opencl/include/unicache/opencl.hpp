// unicache/opencl.hpp — the GPU backend: generated OpenCL C kernels, built
// once per kernel configuration and kept in the persistent kernel store.
// For: users of the OpenCL backend (engines, interop, statistics).
//
//   unicache::engine eng = unicache::opencl::make_engine();  // UNICACHE_OPENCL_DEVICE, else the first GPU
//   unicache::stream strm = unicache::make_stream(eng);
//   cl_mem x = unicache::opencl::make_buffer(eng, bytes, host_x);
//   unicache::compiled_partition cp = unicache::compile(partition, {{batch, 768}, {768, 3072}}, eng);
//   cp.execute(strm, {{cp.inputs()[0], x}, {cp.inputs()[1], w}}, {{cp.outputs()[0], y}});
//   unicache::opencl::read_buffer(strm, y, host_y, bytes);
//
// Tensors on an OpenCL engine: `tensor::data` is a cl_mem (cast to void*)
// of the engine's context holding the tensor's elements row-major from
// offset 0. The caller owns it. A constant input (a weight) is identified by
// its contents: a fingerprint read from the device when it is first packed,
// and at each execution a check of sampled blocks (one small blocking read;
// see constant_check in config.hpp).
//
// Kernels: each partition kind has one generated kernel per configuration
// (transposes, tiles chosen from the probed device, post-op chain, device);
// M, N, K and strides are kernel arguments, so every shape of a dynamic
// workload runs the same kernel (with kernel_shapes::specialized, M, N and K
// are compiled in: one kernel per shape). A kernel is looked up in the kernel cache
// (in memory, single-flight), then in the persistent kernel store (a binary
// from an earlier process), and only then built from source; the binary
// read back after its first launch is stored for the next process. A stored
// binary the driver rejects is removed and rebuilt, silently.
//
// Constant MatMul weights are packed on the device (transposes resolved,
// padded to the GEMM tile) once per (contents, layout), in the constant
// tensor cache's (gpu, device, context) scope; evicting one releases its
// cl_mem. Two contexts never share packed weights or kernels. A weight
// already in the packed layout (not transposed, K and N multiples of the
// tile) is read where it is: no copy, no contents check.
//
// Errors: engine creation throws opencl_error with the OpenCL status name.
// compile() throws compile_error (a build failure's message holds the
// driver's build log) and execute() throws execute_error; both carry the
// opencl_error with the status nested.
// Thread safety: engines, compiled partitions and the functions below may be
// used from any thread; a stream is used by one thread at a time.
//
// Execution is asynchronous: execute() enqueues the partition's kernels on
// the stream's command queue, flushes it, and returns; stream::wait()
// (clFinish) is the caller's one wait per request, and the blocking
// read_buffer below waits in queue order. Nothing in execute() waits for
// the queue's work: the constant check reads a weight's sampled blocks on
// a side queue of the engine's, waiting only for that read. Other waits: an
// allocation that finds more than 1,024 deferred releases or the device out
// of memory (it first waits for the work of the oldest, or all, of them),
// and the first execution of a kernel built from source in this process:
// its binary is read back for the store once its launch is done. A kernel
// that fails on the device is reported by stream::wait() or the next
// execute() on the stream (stream_error).
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120  // the OpenCL 1.2 API is all this backend uses
#endif
#include <CL/cl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/compiler.hpp"
#include "unicache/gpu.hpp"
#include "unicache/store.hpp"

namespace unicache::opencl {

// An OpenCL call failed, or a kernel did not build (the message then holds
// the build log). `status()` is the OpenCL status (CL_SUCCESS when the error
// is not an OpenCL status, e.g. no device matched). Engine creation and the
// buffer helpers throw it as it is; inside compile() it reaches the caller
// nested in a compile_error, inside execute() nested in an execute_error
// (std::rethrow_if_nested gets it back).
class opencl_error : public gpu::api_error {
 public:
  using api_error::api_error;
  cl_int status() const noexcept { return code(); }
};

// The owner id of this backend's cache entries (kernels, packed weights):
// what its backend::cache_owner() returns.
inline constexpr owner_id cache_owner_id = 0x0C1E0001;

// What engine creation learned about a device: queried facts, and what only
// a compiled kernel can tell (the probe). This is what an engine cache blob
// holds; kernel configurations (tiles, work-group sizes) follow from it.
struct device_info {
  std::string platform_name;
  std::string device_name;
  std::string device_version;
  std::string driver_version;
  bool is_gpu = false;
  std::uint32_t compute_units = 0;
  std::uint64_t global_memory_bytes = 0;
  std::uint64_t local_memory_bytes = 0;
  std::uint64_t max_allocation_bytes = 0;
  std::uint32_t max_work_group_size = 0;  // the device's limit
  // From the probe kernel (which uses local memory and barriers like the GEMM):
  std::uint32_t kernel_work_group_size = 0;       // CL_KERNEL_WORK_GROUP_SIZE
  std::uint32_t preferred_work_group_multiple = 0;  // CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE
  std::uint64_t kernel_private_memory_bytes = 0;    // CL_KERNEL_PRIVATE_MEM_SIZE

  friend bool operator==(const device_info&, const device_info&) = default;
};

// The engine over `device` and `context` (which must contain it). The
// engine retains both; the caller keeps its own references. Queries the
// device and builds a small probe kernel (one OpenCL build: hundreds of ms
// cold on some drivers), unless the persistent kernel store holds this
// device's probe results, which it keeps there after probing. Applications
// with their own storage use make_engine_from_cache_blob. Throws opencl_error.
engine make_engine(cl_device_id device, cl_context context);

// The process's engine on the device named by UNICACHE_OPENCL_DEVICE
// ("platform:device" indices, e.g. "1:0", or a case-insensitive substring of
// "platform name / device name"), else the first GPU, else the first device.
// Creates its context on first use; every later call returns an engine over
// that same context. A value that names no device gets one warning (listing
// the devices) and the default is used. Throws opencl_error if the machine
// has no OpenCL device at all.
engine make_engine();

// The device make_engine() uses, by the same rules (and with the same
// warning), for applications that create their own context on it. Throws
// opencl_error if the machine has no OpenCL device.
cl_device_id default_device();

// --- Engine cache blob -------------------------------------------------------

// 32 hex digits naming the device's blob: platform name, device name, driver
// version and unicache's version and git hash. Equal ids: a blob made by one
// engine may create the other. Throws opencl_error if the device cannot be queried.
std::string get_engine_cache_blob_id(cl_device_id device);
// The engine's device_info, serialized (magic, format version, identity,
// checksum); not a binary. Throws opencl_error for a non-OpenCL engine.
byte_vector get_engine_cache_blob(const engine& e);
// make_engine(device, context), with the probe's results taken from `blob`
// instead of compiling the probe. Throws opencl_error naming the problem if
// the blob is foreign (another device, driver or unicache build), stale (an
// older format) or corrupt (truncated, checksum).
engine make_engine_from_cache_blob(cl_device_id device, cl_context context, byte_span blob);

// Every device of every platform, one line each: "P:D platform / device (GPU|CPU)".
std::vector<std::string> list_devices();

// --- Native handles and buffers -----------------------------------------------

cl_device_id native_device(const engine& e);
cl_context native_context(const engine& e);
cl_command_queue native_queue(const stream& s);
const device_info& info(const engine& e);

// A buffer of `bytes` in the engine's context, filled from `host` if given.
// The caller owns it (clReleaseMemObject). Throws opencl_error.
cl_mem make_buffer(const engine& e, std::size_t bytes, const void* host = nullptr);
// Blocking copies between a buffer and host memory on the stream's queue.
void read_buffer(const stream& s, cl_mem buffer, void* host, std::size_t bytes);
void write_buffer(const stream& s, cl_mem buffer, const void* host, std::size_t bytes);

// --- Counters -------------------------------------------------------------------

// Process-wide counters of this backend (the GPU core's, see gpu.hpp).
using backend_stats = gpu::backend_stats;
backend_stats stats();

}  // namespace unicache::opencl
