// unicache/cuda.hpp — the NVIDIA backend: the same generated kernels as the
// OpenCL backend, in CUDA C, compiled by NVRTC to machine code (a cubin for
// the device's sm_XY) and kept in the persistent kernel store, so that a warm
// process loads a kernel in a fraction of a millisecond instead of compiling
// it (or having the driver JIT it from PTX) again.
// For: users of the CUDA backend (engines, interop, statistics).
//
//   unicache::engine eng = unicache::cuda::make_engine();  // UNICACHE_CUDA_DEVICE, else device 0
//   unicache::stream strm = unicache::make_stream(eng);
//   CUdeviceptr x = unicache::cuda::make_buffer(eng, bytes, host_x);
//   unicache::compiled_partition cp = unicache::compile(partition, {{batch, 768}, {768, 3072}}, eng);
//   cp.execute(strm, {{cp.inputs()[0], x}, ...}, {{cp.outputs()[0], y}});  // enqueued
//   unicache::cuda::read_buffer(strm, y, host_y, bytes);  // in stream order: waits for the copy
//
// Nothing of CUDA is needed to build or link this backend: the driver
// (libcuda.so.1) and NVRTC (libnvrtc.so of any major version) are loaded at
// run time. Without them the backend is unavailable: available() says so,
// unavailable_reason() says why, and engine creation throws cuda_error with
// that reason. Where NVRTC cannot target the device's architecture (a GPU
// newer than the NVRTC), kernels are compiled to PTX for the newest
// architecture NVRTC knows and the driver JIT-compiles them; that is said
// once on stderr and in device_info::target.
//
// Tensors on a CUDA engine: `tensor::data` is a CUdeviceptr (cast to
// void*) in the engine's context holding the tensor's elements row-major.
// The caller owns it. A constant input (a weight) is identified by its
// contents, as on the other backends (constant_check in config.hpp).
//
// Kernels: one per configuration (transposes, tiles, post-op chain); sizes
// and strides are arguments, so every shape of a dynamic workload runs one
// kernel (kernel_shapes::specialized compiles M, N and K in). A kernel goes
// through the kernel path (kernel_path.hpp): kernel cache, preloaded blob
// binary, persistent store, NVRTC. The store's entries are keyed by the
// kernel's source and what decides the binary: the architecture, the compile
// target and NVRTC's version (and unicache's build), not the device model or
// the driver. A driver too old for NVRTC's output (a cubin: an older major
// version; PTX: an older version) refuses stored binaries before loading
// them, with one line on stderr naming the driver, and builds its own
// (not stored: the stored ones stay for the machines that run them).
//
// Constant MatMul weights are packed on the device once per (contents,
// layout) and context, in the constant tensor cache; evicting one frees its
// device memory. A weight already in the packed layout (not transposed, K
// and N multiples of the tile) is read where it is: no copy, no contents
// check. A device allocation that fails for lack of memory evicts this
// backend's constant tensors of that device and retries once.
//
// Errors: engine creation and the buffer helpers throw cuda_error with the
// CUDA result's name; compile() throws compile_error and execute()
// execute_error with the cuda_error nested.
// Thread safety: engines, compiled partitions and the functions below may be
// used from any thread (each call makes the engine's context current for
// its duration and restores the caller's); a stream is used by one thread at
// a time.
//
// Execution is asynchronous: execute() enqueues the partition's kernels on
// the stream (a stream over a caller's CUstream too, e.g. torch's current
// stream) and returns; stream::wait() (cuStreamSynchronize) is the caller's
// one wait per request. Nothing in execute() waits for the device's queued
// work, except the constant check's read of a weight's sampled blocks on a
// stream over a caller's CUstream (on a stream the engine made, the read
// goes on a side stream and waits only for itself; constant_check in
// config.hpp; none with constant_check::none), and an allocation that finds
// more than 1,024 deferred releases or the device out of memory, which
// first waits for the work of the oldest (or all) of them. Packed weights, split-K
// workspaces and kernel modules that queued work still uses are freed only
// after that work is done (see gpu.hpp). A kernel that fails on the device
// is reported by stream::wait(), or by the next execute() on the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/compiler.hpp"
#include "unicache/gpu.hpp"
#include "unicache/store.hpp"

// The driver API's handle types, declared as cuda.h declares them (an
// application that includes cuda.h too gets the same types).
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;

namespace unicache::cuda {

// The owner id of this backend's cache entries (kernels, packed weights):
// what its backend::cache_owner() returns.
inline constexpr owner_id cache_owner_id = 0x0C0D0001;

// A CUDA or NVRTC call failed, or the backend is unavailable. `result()` is
// the CUresult (0 when the error is not a driver result, e.g. NVRTC's).
class cuda_error : public gpu::api_error {
 public:
  using api_error::api_error;
  int result() const noexcept { return code(); }
};

// Whether the driver loads and reports a device, and NVRTC loads (the device
// identity names NVRTC's version, so without it nothing is served either).
bool available();
// Why not, in one line ("" when available), e.g. "no NVIDIA driver:
// libcuda.so.1 cannot be loaded (...)" or "NVRTC cannot be loaded: ...".
std::string unavailable_reason();
// The number of CUDA devices (0 when unavailable).
int device_count();

// What engine creation learned about a device; what an engine cache blob holds.
struct device_info {
  std::string device_name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  std::uint64_t global_memory_bytes = 0;
  int max_threads_per_block = 0;
  int shared_memory_per_block = 0;
  int driver_version = 0;   // cuDriverGetVersion: 13000 for 13.0
  int nvrtc_version = 0;    // 11080 for NVRTC 11.8
  std::string pci_bus_id;   // "0000:17:00.0"
  // What kernels are compiled to: "sm_90" (a cubin), or "compute_86 (PTX)"
  // when NVRTC cannot target the device.
  std::string target;

  friend bool operator==(const device_info&, const device_info&) = default;
};

// An engine on device `ordinal`, in the device's primary context (the one
// the CUDA runtime and PyTorch use). Throws cuda_error.
engine make_engine(int ordinal);
// An engine in `context`, which the caller owns and keeps alive while the
// engine lives. Each such engine has a scope of its own (a context cannot be
// retained, and its address may be reused once it is destroyed): its kernels
// come from the store, not from another engine's cache entries. Before
// destroying the context, call release_cached(engine) so that the caches
// free its kernels and weights while the context exists. Throws cuda_error.
engine make_engine(CUcontext context);

// An engine that compiles and never runs: kernels for architecture
// sm_<compute_major><compute_minor> on devices with `multiprocessors` SMs
// (which decides where a GEMM splits K), built by NVRTC with no GPU and no
// driver, for ahead-of-time builds (unicache::precompile). Its kernels'
// binaries carry the identity a real engine of that architecture (and of
// this NVRTC and unicache build) has, so a machine with such a GPU hits
// them in the store. Streams, buffers and execution throw cuda_error.
// Throws cuda_error when NVRTC cannot be loaded or cannot compile for the
// architecture.
engine make_offline_engine(int compute_major, int compute_minor, int multiprocessors);

// Waits for the kernels being built in the background (specialized ones,
// and a GEMM's other split-K variant), then evicts every kernel, compiled
// partition and packed weight cached for the engine's scope (its context)
// from the process-wide caches, waits for the
// work that still used any of them and frees them, and destroys the
// engine's pooled events. For an engine over a context the caller is about
// to destroy, after destroying the engine's streams and compiled partitions
// (having waited for their work); harmless for any engine.
void release_cached(const engine& e);
// The process's engine on the device UNICACHE_CUDA_DEVICE names (an
// ordinal, or a case-insensitive substring of the device's name), else
// device 0; the same engine on every call. A value that names no device
// gets one warning listing the devices, and device 0 is used. Throws
// cuda_error when the backend is unavailable.
engine make_engine();

// A stream over `s`, which the caller owns (it must belong to the engine's
// context, and outlive the returned stream and its copies). Work is
// enqueued on `s` in order with the caller's own. unicache::make_stream(e)
// makes a stream the engine owns.
stream make_stream(const engine& e, CUstream s);
// The same, for a caller that versions its constants: a constant input
// changes only with a tensor::version bump and stays alive while its
// address is in use (torch's parameters: torch counts their in-place
// changes). Address and version then identify a constant, and no execution
// reads it back for the contents check, which on a caller's stream would
// wait for the stream's queued work.
stream make_stream_with_versioned_constants(const engine& e, CUstream s);

// --- Engine cache blob -------------------------------------------------------

// 32 hex digits naming the device's blob (device, driver, NVRTC, unicache build).
std::string get_engine_cache_blob_id(int ordinal);
// The engine's device_info, serialized with its identity and a checksum.
byte_vector get_engine_cache_blob(const engine& e);
// make_engine(ordinal) after checking `blob` is this device's: throws
// cuda_error naming the problem if it is foreign, stale or corrupt.
engine make_engine_from_cache_blob(int ordinal, byte_span blob);

// --- Native handles and buffers -----------------------------------------------

CUcontext native_context(const engine& e);
int native_device(const engine& e);
CUstream native_stream(const stream& s);
const device_info& info(const engine& e);

// Device memory of `bytes` in the engine's context, filled from `host` if
// given. The caller owns it (free_buffer, once the work that uses it is
// finished: stream::wait() on every stream that used it). Throws cuda_error.
CUdeviceptr make_buffer(const engine& e, std::size_t bytes, const void* host = nullptr);
void free_buffer(const engine& e, CUdeviceptr buffer) noexcept;
// Copies on the stream that return when the copy is done.
void read_buffer(const stream& s, CUdeviceptr buffer, void* host, std::size_t bytes);
void write_buffer(const stream& s, CUdeviceptr buffer, const void* host, std::size_t bytes);

// Every device, one line each: "ordinal name (sm_XY, PCI 0000:17:00.0)".
std::vector<std::string> list_devices();

// --- Counters -------------------------------------------------------------------

// Process-wide counters of this backend (the GPU core's, see gpu.hpp).
using backend_stats = gpu::backend_stats;
backend_stats stats();

}  // namespace unicache::cuda
