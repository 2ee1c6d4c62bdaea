// Internals of the OpenCL backend shared by its files (and its tests): the
// engine and stream states, status checking, and the kernel path's builder.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "unicache/gpu.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/opencl.hpp"

namespace unicache::opencl::detail {

// "CL_BUILD_PROGRAM_FAILURE (-11)".
std::string status_name(cl_int status);
// Throws opencl_error("<what>: <status name>") unless status is CL_SUCCESS.
void check(cl_int status, const std::string& what);

// Tiles of the generated kernels and the elementwise work-group, chosen
// from the probed device info (so equal infos give equal kernels).
void plan_for(const device_info& info, gpu::engine_facts& facts);

struct engine_state {
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  device_info info;
  gpu::engine_facts facts;
  // The constant check's reads that wait for nothing of a stream's work
  // (created on first use).
  mutable std::mutex side_mu;
  mutable cl_command_queue side_queue = nullptr;  // guarded by side_mu
  ~engine_state();
};

struct stream_state {
  cl_command_queue queue = nullptr;
  bool profiling = false;  // CL_QUEUE_PROFILING_ENABLE: markers tell device time
  gpu::stream_resources resources;
  ~stream_state();  // after an event that ends the stream's use of its resources
};

// The backend singleton (registered on first use).
backend* the_backend();
// Throws opencl_error for an engine of another backend.
const engine_state& state_of(const engine& e);
// Queries every field of device_info that needs no kernel.
device_info query_device(cl_device_id device);
device_identity identity_of(const device_info& info);
// A marker at the end of the queue, flushed so that it (and the work before
// it) reaches the device without a wait.
std::shared_ptr<const gpu::event> record_marker(cl_command_queue queue, bool timed);
// The device interface of the GPU core over OpenCL.
std::unique_ptr<gpu::device> make_device();

// --- Kernel path --------------------------------------------------------------

// A built program with its kernel: the OpenCL side of a kernel on the
// kernel path.
class program final : public device_program {
 public:
  // `binary`: the bytes it was created from (a stored or blob binary), or
  // empty for a program built from source (read back once, below).
  program(cl_program p, cl_kernel k, byte_vector binary = {});
  ~program() override;
  program(const program&) = delete;
  program& operator=(const program&) = delete;

  // Sets the arguments and enqueues on the queue, under one lock (cl_kernel
  // arguments are shared state); never waits.
  void enqueue(cl_command_queue queue, const gpu::kernel_args& args, const gpu::launch_dims& dims) const;
  // The device binary: the bytes it was loaded from, or, for one built from
  // source, what the driver has after its launches so far (on PoCL, with the
  // work-group function compiled at the first launch), read once and kept.
  // That read waits for the program's last launch, with new launches held
  // back (reading a program's binaries while its kernel runs is not safe on
  // every PoCL): once per program built, when the kernel path stores it.
  byte_vector binary() const override;
  std::size_t binary_size() const override;

 private:
  cl_program program_;
  cl_kernel kernel_;
  mutable std::mutex launch_mu_;
  mutable cl_event last_launch_ = nullptr;  // guarded by launch_mu_, until binary_ is read
  mutable byte_vector binary_;              // guarded by launch_mu_
};

// The kernel path's build and load for a kernel of this engine. Build
// errors throw opencl_error with the build log; a refused binary is nullptr.
std::unique_ptr<device_program> build_program(const engine& e, const kernel_source& src);
std::unique_ptr<device_program> load_program(const engine& e, const kernel_source& src, byte_span binary);

// Builds `source` on the engine's device (no cache, no store): the probe
// and get_program's last resort. Throws opencl_error with the build log.
cl_program build_from_source(const engine_state& s, const std::string& source, const std::string& options);

}  // namespace unicache::opencl::detail
