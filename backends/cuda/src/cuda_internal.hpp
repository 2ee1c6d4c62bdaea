// Internals of the CUDA backend shared by its files (and its tests): the
// loaded driver, result checking, engine and stream states, and the kernel
// path's builder.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_api.hpp"
#include "unicache/cuda.hpp"
#include "unicache/gpu.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/kernel_path.hpp"

namespace unicache::cuda::detail {

// The loaded driver; throws cuda_error with the reason when there is none.
const driver_api& api();
// Throws cuda_error("cuda: <what> failed: <result name>") unless result is CUDA_SUCCESS.
void check(CUresult result, const std::string& what);

// Makes `context` current on this thread for a scope and restores the
// caller's context after.
class context_guard {
 public:
  explicit context_guard(CUcontext context);
  ~context_guard();
  context_guard(const context_guard&) = delete;
  context_guard& operator=(const context_guard&) = delete;

 private:
  bool pushed_ = false;
};

// What an engine of this backend holds: its context (a primary context is
// retained by the engine), the device, and what the core plans kernels with.
struct engine_state {
  CUcontext context = nullptr;
  CUdevice device = 0;
  bool primary = false;  // the device's primary context, retained by this engine
  // make_offline_engine: no device and no context; kernels are compiled by
  // NVRTC and never loaded, and nothing runs.
  bool offline = false;
  device_info info;
  // 16x8 threads, 8x8 each: as fast as 128x128 tiles on large problems and
  // 2x faster where M is a few hundred rows (fewer tiles leave SMs idle);
  // adaptive mode picks others per class (docs/benchmarks.md).
  gpu::engine_facts facts{{}, {64, 128, 16, 8, 8}, 256};

  // Events for recording, pooled: an execution records one. Timed ones
  // (which can tell elapsed time) apart: they cost more to record.
  CUevent take_event(bool timed) const;
  void give_back_event(CUevent e, bool timed) const;
  // release_cached: destroys the pooled events while the context exists;
  // events given back later are dropped without a driver call.
  void release_events() const;
  mutable bool context_released = false;  // guarded by events_mu

  // The constant check's reads that wait for nothing of a stream's work
  // (created on first use; non-blocking: not ordered with the legacy stream).
  mutable std::mutex side_mu;
  mutable CUstream side_stream = nullptr;  // guarded by side_mu
  static constexpr std::size_t kPooledEvents = 256;
  mutable std::mutex events_mu;
  mutable std::vector<CUevent> free_events[2];  // [timed]

  ~engine_state();
};

struct stream_state {
  CUstream stream = nullptr;
  CUcontext context = nullptr;
  std::shared_ptr<const engine_state> engine;  // its event pool
  bool owned = false;
  gpu::stream_resources resources;
  ~stream_state();  // after an event that ends the stream's use of its resources
};

// The backend singleton (registered on first use).
backend* the_backend();
const engine_state& state_of(const engine& e);
// The same for work on the device: throws cuda_error naming `what` for an
// offline engine, which cannot run anything.
const engine_state& device_state_of(const engine& e, const char* what);

// What compiled kernels target on a device of this compute capability with
// the loaded NVRTC: "sm_90", or "compute_86 (PTX)" when NVRTC cannot target
// the device; "" when NVRTC is unavailable.
std::string compile_target(int major, int minor);

// --- What decides a binary, and which drivers run it -------------------------------

// What decides a binary: the architecture ("sm_90"), what NVRTC compiled to
// (device_info::target) and NVRTC's version. The store keeps binaries under
// it, so every device of one architecture shares them, whatever its model
// or driver; whether this machine's driver runs them is checked at load
// (driver_refusal).
device_identity code_identity(const device_info& i);
// This very device and driver: what an engine cache blob describes.
device_identity machine_identity(const device_info& i);
// Whether `target` is PTX ("compute_86 (PTX)") rather than a cubin.
bool target_is_ptx(const std::string& target);
// Why a driver of `driver_version` (cuDriverGetVersion) cannot run what
// NVRTC `nvrtc_version` made for `target`, naming the driver; "" when it
// can (or a version is unknown). A cubin needs a driver of NVRTC's major
// version or later (minor version compatibility), PTX one of NVRTC's
// version or later.
std::string driver_refusal(int driver_version, int nvrtc_version, const std::string& target);
// Tests: engines made after this call report driver `version` (0: the
// driver's own), as a machine with another driver would.
void report_driver_version_for_testing(int version);
// The driver version an engine reports: `actual`, unless a test set another.
int reported_driver_version(int actual);

// --- Kernel path -----------------------------------------------------------------

// A loaded module with its kernel: the CUDA side of a kernel on the kernel
// path. It holds its engine's state, so a primary context stays retained
// (and its address unused by another) while the kernel is cached.
class program final : public device_program {
 public:
  program(std::shared_ptr<const engine_state> engine, CUmodule module, CUfunction function, byte_vector image)
      : engine_(std::move(engine)), module_(module), function_(function), image_(std::move(image)) {}
  ~program() override;
  program(const program&) = delete;
  program& operator=(const program&) = delete;

  CUfunction function() const { return function_; }
  byte_vector binary() const override { return image_; }
  std::size_t binary_size() const override { return image_.size(); }

 private:
  std::shared_ptr<const engine_state> engine_;
  CUmodule module_;
  CUfunction function_;
  byte_vector image_;  // the cubin (or PTX) it was loaded from
};

// NVRTC, then the module load. Throws cuda_error with NVRTC's log.
std::unique_ptr<device_program> build_program(const engine& e, const kernel_source& src);
// A cubin (ELF) or NUL-terminated PTX the driver accepts, else nullptr (the
// driver refused the image). Throws cuda_error for any other failure (out of
// memory, a broken context): a rebuild would not fix it, and the stored
// binary is not at fault.
std::unique_ptr<device_program> load_program(const engine& e, const kernel_source& src, byte_span binary);

// An event at the stream's current end.
std::shared_ptr<const gpu::event> record_event(const stream_state& s, bool timed);

inline CUdeviceptr pointer_of(const void* data) { return reinterpret_cast<CUdeviceptr>(data); }

// The device interface of the GPU core over the driver API.
std::unique_ptr<gpu::device> make_device();

}  // namespace unicache::cuda::detail
