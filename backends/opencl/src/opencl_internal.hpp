// Internals of the OpenCL backend shared by its files (and its tests): the
// engine and stream states, status checking, counters, and the kernel path.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "unicache/kernel_generator.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/opencl.hpp"

namespace unicache::opencl::detail {

// "CL_BUILD_PROGRAM_FAILURE (-11)".
std::string status_name(cl_int status);
// Throws opencl_error("<what>: <status name>") unless status is CL_SUCCESS.
void check(cl_int status, const std::string& what);

// Tiles of the generated kernels, chosen from the probed device info (so
// equal infos give equal kernels).
struct kernel_plan {
  kernels::gemm_tiles gemm;
  int vector_work_group = 256;  // eltwise, binary, softmax (a power of two)
};
kernel_plan plan_for(const device_info& info);

struct engine_state {
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  device_info info;
  device_identity identity;
  kernel_plan plan;
  ~engine_state();
};

struct stream_state {
  cl_command_queue queue = nullptr;
  ~stream_state();
};

// This backend's own counters (the kernel path counts its kernels).
struct counters {
  std::atomic<std::uint64_t> probe_builds{0}, weights_packed{0}, weights_released{0}, pack_ns{0};
};
counters& stats_counters();

// The backend singleton (registered on first use).
backend* the_backend();
// Queries every field of device_info that needs no kernel.
device_info query_device(cl_device_id device);
device_identity identity_of(const device_info& info);

// --- Kernel path --------------------------------------------------------------

// A built program with its kernel: the OpenCL side of a kernel on the
// kernel path.
class program final : public device_program {
 public:
  program(cl_program p, cl_kernel k) : program_(p), kernel_(k) {}
  ~program() override;
  program(const program&) = delete;
  program& operator=(const program&) = delete;

  // Sets the arguments and enqueues on the stream's queue (arguments and
  // enqueue under one lock: cl_kernel arguments are shared state), then
  // waits. (A template: a std::function of the kernels' capturing lambdas
  // would allocate on every execution.)
  template <typename SetArgs>
  void run(const stream& s, SetArgs&& set_args, cl_uint dims, const std::size_t* global,
           const std::size_t* local) const {
    {
      std::lock_guard lock(launch_mu_);
      set_args(kernel_);
      enqueue(s, dims, global, local);
    }
    finish(s);
  }
  // The device binary as the driver has it now (after the first launch, on
  // PoCL, with the compiled work-group function).
  byte_vector binary() const override;
  std::size_t binary_size() const override;

 private:
  void enqueue(const stream& s, cl_uint dims, const std::size_t* global, const std::size_t* local) const;
  void finish(const stream& s) const;

  cl_program program_;
  cl_kernel kernel_;
  mutable std::mutex launch_mu_;
};

// Launches `k` (an OpenCL kernel of the kernel path) and waits.
template <typename SetArgs>
void launch(const kernel& k, const stream& s, SetArgs&& set_args, cl_uint dims, const std::size_t* global,
            const std::size_t* local) {
  k.launch([&] { k.program<program>().run(s, set_args, dims, global, local); });
}

// The kernel path's builder for one engine.
class builder final : public kernel_builder {
 public:
  explicit builder(const engine_state& s) : state_(s) {}
  const char* backend_name() const override { return "opencl"; }
  device_identity identity() const override { return state_.identity; }
  std::unique_ptr<device_program> build(const kernel_source& src) const override;
  std::unique_ptr<device_program> load(const kernel_source& src, byte_span binary) const override;

 private:
  const engine_state& state_;
};

// The kernel path (kernel cache, preloaded binary, store, build) for a
// kernel of this engine. Build errors throw opencl_error with the build log.
std::shared_ptr<const kernel> get_program(const engine& e, const kernel_source& src,
                                          const std::vector<kernel_binary>& preloaded);

// Builds `source` on the engine's device (no cache, no store): the probe
// and get_program's last resort. Throws opencl_error with the build log.
cl_program build_from_source(const engine_state& s, const std::string& source, const std::string& options);

// clSetKernelArg with the status checked.
template <typename T>
void set_arg(cl_kernel k, cl_uint index, const T& value) {
  check(clSetKernelArg(k, index, sizeof(T), &value), "clSetKernelArg " + std::to_string(index));
}

}  // namespace unicache::opencl::detail
