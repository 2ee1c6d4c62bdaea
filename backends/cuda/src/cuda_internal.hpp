// Internals of the CUDA backend shared by its files (and its tests): the
// loaded driver, result checking, engine and stream states, the kernel
// path's builder, launches and device memory.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_api.hpp"
#include "unicache/cuda.hpp"
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

// Tiles of the generated kernels on this device.
struct kernel_plan {
  // 16x8 threads, 8x8 each: as fast as 128x128 tiles on large problems and
  // 2x faster where M is a few hundred rows (fewer tiles leave SMs idle);
  // adaptive mode picks others per class (docs/benchmarks.md).
  kernels::gemm_tiles gemm{64, 128, 16, 8, 8};
  int vector_work_group = 256;
};

struct engine_state {
  CUcontext context = nullptr;
  CUdevice device = 0;
  bool primary = false;  // the device's primary context, retained by this engine
  device_info info;
  device_identity identity;
  kernel_plan plan;
  ~engine_state();
};

struct stream_state {
  CUstream stream = nullptr;
  CUcontext context = nullptr;
  bool owned = false;
  ~stream_state();
};

// This backend's own counters (the kernel path counts its kernels).
struct counters {
  std::atomic<std::uint64_t> weights_packed{0}, weights_released{0}, out_of_memory_retries{0}, pack_ns{0};
};
counters& stats_counters();

// The backend singleton (registered on first use).
backend* the_backend();
const engine_state& state_of(const engine& e);

// What compiled kernels target on a device of this compute capability with
// the loaded NVRTC: "sm_90", or "compute_86 (PTX)" when NVRTC cannot target
// the device; "" when NVRTC is unavailable.
std::string compile_target(int major, int minor);

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

class builder final : public kernel_builder {
 public:
  explicit builder(std::shared_ptr<const engine_state> s) : state_(*s), shared_(std::move(s)) {}
  const char* backend_name() const override { return "cuda"; }
  device_identity identity() const override { return state_.identity; }
  // NVRTC, then the module load. Throws cuda_error with NVRTC's log.
  std::unique_ptr<device_program> build(const kernel_source& src) const override;
  // A cubin (ELF) or NUL-terminated PTX the driver accepts, else nullptr
  // (the driver refused the image). Throws cuda_error for any other failure
  // (out of memory, a broken context): a rebuild would not fix it, and the
  // stored binary is not at fault.
  std::unique_ptr<device_program> load(const kernel_source& src, byte_span binary) const override;

 private:
  const engine_state& state_;
  std::shared_ptr<const engine_state> shared_;
};

std::shared_ptr<const kernel> get_program(const engine& e, const kernel_source& src,
                                          const std::vector<kernel_binary>& preloaded);

// A kernel's arguments as cuLaunchKernel takes them: each value in a slot
// of its own, and a pointer to each slot.
class kernel_args {
 public:
  template <typename T>
  kernel_args& add(const T& value) {
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "one slot per argument");
    if (count_ == kMax) throw cuda_error("cuda: more than 64 kernel arguments", 0);
    slots_[count_] = 0;
    std::memcpy(&slots_[count_], &value, sizeof(T));
    pointers_[count_] = &slots_[count_];
    ++count_;
    return *this;
  }
  void** data() { return pointers_; }

 private:
  static constexpr int kMax = 64;
  std::uint64_t slots_[kMax];
  void* pointers_[kMax];
  int count_ = 0;
};

struct launch_shape {
  unsigned grid[3];
  unsigned block[3];
};
// The grid and block of a launch of `global` work-items in blocks of
// `local`. Throws cuda_error naming `what` beyond CUDA's grid limits
// (2^31 - 1 blocks in x, 65535 in y and z): compiled partitions compute it
// when they are compiled, so the error is a compile error.
launch_shape shape_of(const std::array<std::size_t, 3>& global, const std::array<std::size_t, 3>& local,
                      const char* what);

// Launches `k` on the stream and waits for the stream (in the stream's
// context, which the caller has made current).
void launch(const kernel& k, const stream& s, kernel_args& args, const launch_shape& shape);

// cuMemAlloc in the current context; when the device is out of memory,
// evicts this backend's constant tensors of the engine's device and tries
// once more. Throws cuda_error.
CUdeviceptr allocate(const engine& e, std::size_t bytes, const char* what);

inline CUdeviceptr pointer_of(const void* data) { return reinterpret_cast<CUdeviceptr>(data); }

}  // namespace unicache::cuda::detail
